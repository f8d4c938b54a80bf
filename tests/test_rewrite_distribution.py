"""Sampled rewrites follow the target's distribution (chi-square): the region's deterministic draft is
verified as one-hot q, so the committed tokens are distributed as plain sampling of the target.

The first two tokens of :meth:`Engine.rewrite` (temperature 0.8, top-k 3, a tiny peaked target) are
counted over many seeds and compared with the exact two-token distribution p(x0) p(x1 | x0). The region
starts with the target's most likely two tokens, so its draft is accepted about as often as rejected.
The same harness must reject a wrong acceptance rule (on a rejection, sample p again instead of p
without the rejected token), which shows the test can fail.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

import decoding.generate
from decoding.types import GenerationConfig
from decoding.sampling import SamplingParams, processed_probs, sample
from decoding.verify import VerifyResult
from tests.conftest import tiny_model
from tests.test_rewrite_equivalence import tiny_engine

pytestmark = pytest.mark.stats

SAMPLING = SamplingParams(temperature=0.8, top_k=3)
PROMPT = [3, 1, 4, 1, 5]
VOCAB = 8
TRIALS = 1500


def resample_target_rule(target_probs, draft_tokens, draft_probs, generator) -> VerifyResult:
    """WRONG: accepts a deterministic draft token with probability p(x), but on a rejection samples p
    itself, so x comes out with p(x) + (1 - p(x)) p(x)."""
    for i, token in enumerate(draft_tokens):
        if float(torch.rand((), generator=generator)) >= float(target_probs[i, token]):
            return VerifyResult(i, sample(target_probs[i], generator))
    return VerifyResult(len(draft_tokens), sample(target_probs[len(draft_tokens)], generator))


@pytest.fixture(scope="module")
def target():
    return tiny_model(seed=12, vocab_size=VOCAB, init_std=0.5)


@torch.no_grad()
def next_probs(target, tokens: list[int]) -> torch.Tensor:
    return processed_probs(target(input_ids=torch.tensor([tokens])).logits[0, -1], SAMPLING)  # (V,)


def pair_probs(target) -> torch.Tensor:
    """The exact distribution of the first two sampled tokens, flattened: ``(V * V,)``."""
    first = next_probs(target, PROMPT)
    rows = [first[x] * next_probs(target, [*PROMPT, x]) if first[x] > 0 else torch.zeros(VOCAB) for x in range(VOCAB)]
    return torch.stack(rows).flatten()


def pair_counts(target) -> tuple[np.ndarray, int]:
    """Counts of the first two tokens of sampled rewrites, and how many region tokens were drafted."""
    engine = tiny_engine(target)
    first = int(next_probs(target, PROMPT).argmax())
    region = [first, int(next_probs(target, [*PROMPT, first]).argmax()), 0, 1, 2]
    config = GenerationConfig(max_new_tokens=2, sampling=SAMPLING, stop_token_ids=frozenset())
    counts = np.zeros(VOCAB * VOCAB, dtype=np.int64)
    drafted = 0
    for trial in range(TRIALS):
        result = engine.rewrite(PROMPT, region, replace(config, seed=trial), mode="ngram")
        counts[result.token_ids[0] * VOCAB + result.token_ids[1]] += 1
        drafted += result.stats.sources["region"].drafted if "region" in result.stats.sources else 0
    return counts, drafted


def pvalue(counts: np.ndarray, probs: torch.Tensor) -> float:
    probs = probs.double().numpy()
    support = probs > 0
    assert counts[~support].sum() == 0, "a pair outside the target's top-k was produced"
    expected = probs[support] / probs[support].sum() * counts.sum()
    return float(chisquare(counts[support], expected).pvalue)


def test_sampled_rewrite_matches_the_target_distribution(target):
    probs = pair_probs(target)
    first = probs.reshape(VOCAB, VOCAB).sum(1)
    assert 0.3 < float(first.max()) < 0.8, "the region's first token must be rejected often enough to matter"
    counts, drafted = pair_counts(target)
    assert drafted > TRIALS // 2, "the region must draft in most trials"
    assert pvalue(counts, probs) > 1e-3


def test_same_test_rejects_a_wrong_acceptance_rule(target, monkeypatch):
    monkeypatch.setattr(decoding.generate, "speculative_verify", resample_target_rule)
    counts, _ = pair_counts(target)
    assert pvalue(counts, pair_probs(target)) < 1e-6
