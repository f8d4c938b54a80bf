"""Speculative sampling through the real generation loop, with draft *models*: the draft
token is sampled from the processed distribution q that the acceptance ratio uses (docs/cases.md D4, D5).

With temperature 0.7, top-k 5 and top-p 0.9 on both models, the first token of speculative sampling
must follow the target's processed distribution (chi-square). The same harness must fail for a draft
that picks its token by argmax while the acceptance ratio uses its softmax (docs/cases.md D4), which shows the
test can fail. Also: processed_probs matches transformers' own logits processors.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from decoding.drafters.base import Draft
from decoding.drafters.draft_model import ModelDrafter
from decoding.generate import SpeculativeGenerator
from decoding.types import GenerationConfig
from decoding.sampling import SamplingParams, processed_probs
from tests.conftest import ToyTokenizer, tiny_model

SAMPLING = SamplingParams(temperature=0.7, top_k=5, top_p=0.9)
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
TRIALS = 4000


class ArgmaxDrafter(ModelDrafter):
    """WRONG (docs/cases.md D4): drafts the argmax but reports the softmax as its draft probabilities."""

    def propose(self, context):
        new_ids = self.state.sync(context.token_ids)
        logits = self.fit_vocab(self.state.forward(new_ids, logits_to_keep=1)[-1])
        probs = processed_probs(logits, context.sampling)
        return Draft(tokens=[int(probs.argmax())], draft_probs=probs[None], source="argmax")


@pytest.fixture(scope="module")
def models():
    # A peaked target (large init std) and a flat draft, so draft and target clearly differ and the
    # draft's argmax carries well under all of its mass.
    return tiny_model(seed=10, vocab_size=24, init_std=0.3), tiny_model(seed=11, vocab_size=24, init_std=0.02)


def first_token_counts(target, drafter, seed: int) -> np.ndarray:
    generator = SpeculativeGenerator(target, ToyTokenizer())
    config = GenerationConfig(max_new_tokens=2, sampling=SAMPLING, max_draft_tokens=1, stop_token_ids=frozenset(),
                              seed=seed)
    counts = np.zeros(target.config.vocab_size, dtype=np.int64)
    for trial in range(TRIALS):
        result = generator.generate(PROMPT, drafter, replace(config, seed=seed + trial))
        counts[result.token_ids[0]] += 1
    return counts


@torch.no_grad()
def target_first_token_probs(target) -> torch.Tensor:
    logits = target(input_ids=torch.tensor([PROMPT])).logits[0, -1]
    return processed_probs(logits, SAMPLING)


def pvalue(counts: np.ndarray, probs: torch.Tensor) -> float:
    probs = probs.double().numpy()
    support = probs > 0
    assert counts[~support].sum() == 0, "a token outside top-k/top-p was produced"
    expected = probs[support] / probs[support].sum() * counts.sum()
    return float(chisquare(counts[support], expected).pvalue)


@pytest.mark.stats
def test_first_token_of_speculative_sampling_matches_target(models):
    target, draft = models
    probs = target_first_token_probs(target)
    assert 2 <= int((probs > 0).sum()) <= 5  # top-k / top-p really cut the distribution
    counts = first_token_counts(target, ModelDrafter(draft, target.config.vocab_size), seed=0)
    assert pvalue(counts, probs) > 1e-3


@pytest.mark.stats
def test_argmax_draft_with_softmax_ratio_is_caught(models):
    target, draft = models
    counts = first_token_counts(target, ArgmaxDrafter(draft, target.config.vocab_size), seed=0)
    assert pvalue(counts, target_first_token_probs(target)) < 1e-6


@pytest.mark.unit
@pytest.mark.parametrize("params", [SAMPLING, SamplingParams(1.3, 0, 0.5), SamplingParams(0.5, 3, 1.0)])
def test_processed_probs_match_transformers_warpers(params):
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(params.temperature)])
    if params.top_k:
        warpers.append(TopKLogitsWarper(params.top_k))
    if params.top_p < 1:
        warpers.append(TopPLogitsWarper(params.top_p))
    expected = warpers(None, logits.clone()).softmax(-1)
    torch.testing.assert_close(processed_probs(logits, params), expected)


@pytest.mark.unit
def test_greedy_params_are_one_hot_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [5.0, 1.0, 4.9]])
    assert processed_probs(logits, SamplingParams()).tolist() == [[0, 1, 0], [1, 0, 0]]
