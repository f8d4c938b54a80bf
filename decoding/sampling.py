"""The processed distribution that both draft and target sample from (:class:`decoding.types.SamplingParams`).

Speculative sampling is exact only if the draft probabilities used in the acceptance ratio are the
distribution the draft token was actually sampled from, and the target probabilities are the
distribution plain sampling would use (docs/cases.md D4, D5). Both sides therefore go through
:func:`processed_probs` with the same :class:`SamplingParams`, in the same order as transformers'
logits processors: temperature, then top-k, then top-p.
"""

from __future__ import annotations

import torch

from decoding.types import SamplingParams  # defined there (torch-free); imported here too


def processed_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution sampled from, after temperature, top-k and top-p.

    Args:
        logits: ``(..., V)`` raw logits, any float dtype.
    Returns:
        ``(..., V)`` float32 probabilities summing to 1 along the last axis. Greedy params give a
        one-hot distribution on the argmax (the lowest index on exact ties, as ``torch.argmax``).
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop the low tail whose mass is <= 1 - top_p, always keeping the most likely token
        # (transformers' TopPLogitsWarper rule).
        drop_sorted = cumulative <= (1 - params.top_p)
        drop_sorted[..., -1] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token id drawn from ``probs`` (``(V,)`` float, sums to 1)."""
    return int(torch.multinomial(probs, 1, generator=generator).item())
