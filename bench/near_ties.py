"""Where two greedy outputs part, and whether that is a genuine near-tie (docs/cases.md D7).

A verify pass runs other matmul shapes than decoding one token, so the target's logits can differ in
the last bits between the two; greedy outputs may then part where the top two logits are (nearly)
equal. :func:`parting` finds the first differing token and the target's top-2 logit gap there,
computed afresh over the common prefix, with the spacing of the logits' dtype at that magnitude (a gap
of a few such steps is a tie the dtype cannot resolve).
"""

from __future__ import annotations

import math

import torch


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter length when one is a prefix of the
    other); ``None`` when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.no_grad()
def top2_logits(model, token_ids: list[int]) -> tuple[float, float]:
    """The two largest next-token logits of ``model`` after ``token_ids`` (one forward pass, no cache)."""
    logits = model(input_ids=torch.tensor([token_ids], device=model.device)).logits[0, -1]
    top = torch.topk(logits.float(), 2).values
    return float(top[0]), float(top[1])


def top2_gap(model, token_ids: list[int]) -> float:
    """Top-1 minus top-2 next-token logit of ``model`` after ``token_ids``."""
    first, second = top2_logits(model, token_ids)
    return first - second


def logit_step(value: float, dtype: torch.dtype) -> float:
    """The spacing of ``dtype`` numbers at ``value`` (one unit in the last place)."""
    if value == 0:
        return torch.finfo(dtype).tiny
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(abs(value)))


def parting(model, prompt_ids: list[int], reference: list[int], other: list[int]) -> dict | None:
    """Where ``other`` parts from ``reference`` (both greedy outputs after ``prompt_ids``): ``None`` when
    equal, else ``{"token": index, "top2_gap": float, "logit_step": float}`` (``top2_gap`` and
    ``logit_step`` are ``None`` when one output merely stops earlier)."""
    index = first_mismatch(reference, other)
    if index is None:
        return None
    if index >= min(len(reference), len(other)):
        return {"token": index, "top2_gap": None, "logit_step": None}
    first, second = top2_logits(model, prompt_ids + reference[:index])
    return {"token": index, "top2_gap": first - second, "logit_step": logit_step(first, model.dtype)}
