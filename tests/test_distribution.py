"""Distribution exactness of speculative sampling (chi-square, >= 100k trials) — the residual is
max(0, p − q) normalised, not softmaxed (docs/cases.md D6).

The harness draws a draft token from q, verifies it with a rule, and counts the first committed
token. For the implemented rule the counts must match the target distribution p; the same harness
must *reject* known-wrong rules (softmaxed residual, unnormalised residual, resampling from p), which
shows the test has the power to fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from decoding.verify import VerifyResult, speculative_verify

pytestmark = pytest.mark.stats

TRIALS = 100_000
TARGET = torch.tensor([0.30, 0.25, 0.20, 0.10, 0.10, 0.05])  # p
DRAFT = torch.tensor([0.05, 0.10, 0.15, 0.30, 0.20, 0.20])  # q
V = len(TARGET)


def _accept_mask(target_probs, draft_tokens, draft_probs, generator):
    x = draft_tokens[0]
    q_x = draft_probs[0, x] if draft_probs is not None else torch.tensor(1.0)
    return bool(torch.rand((), generator=generator) * q_x < target_probs[0, x])


def softmaxed_residual_rule(target_probs, draft_tokens, draft_probs, generator) -> VerifyResult:
    """WRONG: softmax(max(0, p - q)) instead of normalising."""
    if _accept_mask(target_probs, draft_tokens, draft_probs, generator):
        return VerifyResult(1, 0)
    residual = (target_probs[0] - draft_probs[0]).clamp_min(0).softmax(-1)
    return VerifyResult(0, int(torch.multinomial(residual, 1, generator=generator)))


def unnormalised_residual_rule(target_probs, draft_tokens, draft_probs, generator) -> VerifyResult:
    """WRONG: inverse-CDF sampling over max(0, p - q) without dividing by its sum."""
    if _accept_mask(target_probs, draft_tokens, draft_probs, generator):
        return VerifyResult(1, 0)
    cdf = (target_probs[0] - draft_probs[0]).clamp_min(0).cumsum(-1)
    u = float(torch.rand((), generator=generator))
    hits = (cdf > u).nonzero()
    return VerifyResult(0, int(hits[0]) if len(hits) else V - 1)


def resample_target_rule(target_probs, draft_tokens, draft_probs, generator) -> VerifyResult:
    """WRONG: on rejection sample from p itself."""
    if _accept_mask(target_probs, draft_tokens, draft_probs, generator):
        return VerifyResult(1, 0)
    return VerifyResult(0, int(torch.multinomial(target_probs[0], 1, generator=generator)))


def first_token_counts(rule, deterministic_draft: int | None = None, seed: int = 0) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    target_probs = torch.stack([TARGET, TARGET])  # (k + 1, V), k = 1
    counts = np.zeros(V, dtype=np.int64)
    for _ in range(TRIALS):
        if deterministic_draft is None:
            token = int(torch.multinomial(DRAFT, 1, generator=generator))
            draft_probs = DRAFT[None]
        else:
            token, draft_probs = deterministic_draft, None
        result = rule(target_probs, [token], draft_probs, generator)
        counts[token if result.num_accepted == 1 else result.next_token] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, probs: torch.Tensor) -> float:
    probs = probs.double().numpy()
    expected = probs / probs.sum() * counts.sum()
    support = expected > 0
    assert counts[~support].sum() == 0, f"tokens with zero target probability were produced: {counts}"
    return float(chisquare(counts[support], expected[support]).pvalue)


def test_implemented_rule_matches_target_distribution():
    assert chi_square_pvalue(first_token_counts(speculative_verify), TARGET) > 1e-3


def test_deterministic_draft_matches_target_distribution():
    # An n-gram draft is one-hot q: accept with p(x), else sample p without x, renormalised.
    assert chi_square_pvalue(first_token_counts(speculative_verify, deterministic_draft=0), TARGET) > 1e-3


@pytest.mark.parametrize("wrong_rule", [softmaxed_residual_rule, unnormalised_residual_rule, resample_target_rule])
def test_same_test_rejects_wrong_rules(wrong_rule):
    assert chi_square_pvalue(first_token_counts(wrong_rule), TARGET) < 1e-6


def test_two_token_joint_distribution_with_bonus():
    """k = 2 with position-specific p and q: the committed pair is distributed as p0 x p1."""
    generator = torch.Generator().manual_seed(3)
    target_rows = torch.stack([TARGET, TARGET.flip(0), DRAFT])  # (k + 1, V)
    draft_rows = torch.stack([DRAFT, TARGET])  # (k, V)
    counts = np.zeros(V * V, dtype=np.int64)
    for _ in range(TRIALS):
        draft_tokens = [int(torch.multinomial(row, 1, generator=generator)) for row in draft_rows]
        result = speculative_verify(target_rows, draft_tokens, draft_rows, generator)
        if result.num_accepted == 0:
            # The second token would come from the next round, whose first-position distribution is
            # target_rows[1] in this context-free setup.
            second = int(torch.multinomial(target_rows[1], 1, generator=generator))
            pair = (result.next_token, second)
        elif result.num_accepted == 1:
            pair = (draft_tokens[0], result.next_token)
        else:
            pair = (draft_tokens[0], draft_tokens[1])
        counts[pair[0] * V + pair[1]] += 1
    joint = torch.outer(target_rows[0], target_rows[1]).flatten()
    assert chi_square_pvalue(counts, joint) > 1e-3
