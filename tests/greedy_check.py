"""Greedy-equivalence assertion that tolerates only genuine near-ties (docs/cases.md D7).

Verifying k tokens in one pass runs other matmul shapes than decoding one token, so logits can differ
in the last bits. Two greedy outputs may therefore part ways only where the target's top two logits,
computed afresh over the common prefix, are within ``eps``; any other mismatch fails.
"""

from __future__ import annotations

from bench.near_ties import first_mismatch, top2_gap
from decoding.draft_length import DraftLengthPolicy


class FixedDraftLength(DraftLengthPolicy):
    """Every source drafts up to ``k`` tokens every round, whatever it measured. An exactness test sets it
    as the engine's policy: the measured policy may rightly stop drafting (a pass of several tokens costs
    more than one on a 2-core CPU, and held-out code is accepted less), which would leave the verification
    of drafts untested on some machines."""

    k: int = 4

    def plan(self, source: str, limit: int | None = None) -> tuple[int, float]:
        k = min(self.k, self.max_k if limit is None else min(self.max_k, limit))
        return (k, 2.0) if k > 0 else (0, 1.0)


def assert_greedy_equal(model, prompt: list[int], got: list[int], expected: list[int], eps: float = 1e-4) -> None:
    """``got == expected``, or they first differ at a position whose top-2 logit gap is below ``eps``."""
    i = first_mismatch(got, expected)
    if i is None:
        return
    if i >= min(len(got), len(expected)):
        raise AssertionError(f"lengths differ ({len(got)} vs {len(expected)}) with equal common prefix")
    gap = top2_gap(model, prompt + expected[:i])
    assert gap < eps, f"greedy outputs differ at token {i} ({got[i]} vs {expected[i]}) where the top-2 gap is {gap:.3g}, not a near-tie"
