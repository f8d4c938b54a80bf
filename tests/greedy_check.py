"""Greedy-equivalence assertion that tolerates only genuine near-ties (docs/cases.md D7).

Verifying k tokens in one pass runs other matmul shapes than decoding one token, so logits can differ
in the last bits. Two greedy outputs may therefore part ways only where the target's top two logits,
computed afresh over the common prefix, are within ``eps``; any other mismatch fails.
"""

from __future__ import annotations

import torch


def first_mismatch(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.no_grad()
def top2_gap(model, token_ids: list[int]) -> float:
    logits = model(input_ids=torch.tensor([token_ids], device=model.device)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def assert_greedy_equal(model, prompt: list[int], got: list[int], expected: list[int], eps: float = 1e-4) -> None:
    """``got == expected``, or they first differ at a position whose top-2 logit gap is below ``eps``."""
    i = first_mismatch(got, expected)
    if i is None:
        return
    if i >= min(len(got), len(expected)):
        raise AssertionError(f"lengths differ ({len(got)} vs {len(expected)}) with equal common prefix")
    gap = top2_gap(model, prompt + expected[:i])
    assert gap < eps, f"greedy outputs differ at token {i} ({got[i]} vs {expected[i]}) where the top-2 gap is {gap:.3g}, not a near-tie"
