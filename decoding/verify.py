"""Exact verification of a draft against the target (Leviathan et al. 2022, "Fast Inference from
Transformers via Speculative Decoding", Algorithm 1; Chen et al. 2023, "Accelerating Large Language
Model Decoding with Speculative Sampling", Algorithm 2).

For draft token x with draft probability q(x) and target probability p(x):

* accept with probability min(1, p(x) / q(x));
* on the first rejection, sample the next token from the residual norm(max(0, p - q)) and discard
  the rest of the draft;
* when all k draft tokens are accepted, sample one bonus token from the target's last distribution.

A deterministic draft (n-gram lookup) is the special case q = one-hot(x): accept with probability
p(x); the residual is p with x removed, renormalised. Greedy decoding reduces to "accept while the
draft equals the target's argmax".

These are pure functions: probabilities in, ``(num_accepted, next_token)`` out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decoding.sampling import sample


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one verification round.

    The round commits ``draft_tokens[:num_accepted] + [next_token]``: ``next_token`` is the residual
    sample after a rejection, or the bonus token when every draft token was accepted.
    """

    num_accepted: int  # draft tokens accepted, 0..k
    next_token: int  # residual sample or bonus token


def speculative_verify(
    target_probs: torch.Tensor,
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    generator: torch.Generator | None,
) -> VerifyResult:
    """Accept or reject each draft token exactly as the speculative-sampling rule states.

    Args:
        target_probs: ``(k + 1, V)`` float32 processed target distributions; row i is the target's
            distribution for the position of ``draft_tokens[i]``, row k the bonus distribution.
        draft_tokens: the k drafted token ids.
        draft_probs: ``(k, V)`` float32 processed draft distributions the tokens were sampled from, or
            ``None`` for a deterministic draft (one-hot on each drafted token).
        generator: random source for the accept tests and the residual/bonus sample.
    Returns:
        :class:`VerifyResult`.
    Raises:
        ValueError: if the shapes disagree.
    """
    k = len(draft_tokens)
    if target_probs.shape[0] != k + 1:
        raise ValueError(f"target_probs has {target_probs.shape[0]} rows, expected k + 1 = {k + 1}")
    if draft_probs is not None and draft_probs.shape != (k, target_probs.shape[1]):
        raise ValueError(f"draft_probs has shape {tuple(draft_probs.shape)}, expected {(k, target_probs.shape[1])}")
    if k == 0:
        return VerifyResult(0, sample(target_probs[0], generator))

    index = torch.tensor(draft_tokens, device=target_probs.device)
    rows = torch.arange(k, device=target_probs.device)
    target_at_draft = target_probs[rows, index]  # (k,)
    draft_at_draft = draft_probs[rows, index] if draft_probs is not None else torch.ones_like(target_at_draft)
    uniform = torch.rand(k, generator=generator, device=target_probs.device)  # (k,)
    # accept iff u < min(1, p/q)  <=>  u * q < p   (q > 0: the token was sampled from q)
    rejected = (uniform * draft_at_draft >= target_at_draft).nonzero()
    if len(rejected) == 0:
        return VerifyResult(k, sample(target_probs[k], generator))

    first = int(rejected[0])
    if draft_probs is not None:
        residual = (target_probs[first] - draft_probs[first]).clamp_min(0.0)  # (V,)
    else:
        residual = target_probs[first].clone()
        residual[draft_tokens[first]] = 0.0
    total = residual.sum()
    # A rejection implies p != q, so the residual has mass; only float rounding can empty it.
    next_probs = residual / total if total > 0 else target_probs[first]
    return VerifyResult(first, sample(next_probs, generator))


def greedy_verify(target_logits: torch.Tensor, draft_tokens: list[int]) -> VerifyResult:
    """Greedy verification: accept while the draft equals the target's argmax.

    Args:
        target_logits: ``(k + 1, V)`` target logits (any float dtype) for the draft positions and the
            bonus position.
        draft_tokens: the k drafted token ids.
    Returns:
        :class:`VerifyResult` whose ``next_token`` is the target's argmax at the first mismatch (or
        the bonus position).
    """
    k = len(draft_tokens)
    if target_logits.shape[0] != k + 1:
        raise ValueError(f"target_logits has {target_logits.shape[0]} rows, expected k + 1 = {k + 1}")
    target_argmax = target_logits.argmax(dim=-1).tolist()  # (k + 1,)
    num_accepted = 0
    while num_accepted < k and draft_tokens[num_accepted] == target_argmax[num_accepted]:
        num_accepted += 1
    return VerifyResult(num_accepted, target_argmax[num_accepted])
