"""Speculative greedy == plain greedy == transformers generate(do_sample=False), on tiny random models.

Drafts: the target itself (everything accepted), a random-init draft (almost nothing accepted) and the
n-gram drafter; k in {1, 2, 5}, with outputs long enough for several rounds.
"""

from __future__ import annotations

import math

import pytest
import torch

from decoding.draft_length import DraftLengthPolicy
from decoding.drafters.switching import SwitchingDrafter
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.generate import SpeculativeGenerator
from decoding.types import GenerationConfig
from tests.greedy_check import assert_greedy_equal, first_mismatch

pytestmark = pytest.mark.model

PROMPTS = [[3, 7, 11, 3, 7, 11, 3, 7, 19, 2, 5, 3, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4], [42]]
NEW_TOKENS = 24


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def make_drafter(kind: str, target, random_draft):
    if kind == "self":
        return ModelDrafter(target, target.config.vocab_size)
    if kind == "random":
        return ModelDrafter(random_draft, target.config.vocab_size)
    return NgramDrafter()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_plain_greedy_equals_transformers_generate(target_model, toy_tokenizer, prompt):
    plain = SpeculativeGenerator(target_model, toy_tokenizer).generate(
        prompt, None, GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=0))
    assert plain.stats.target_passes == NEW_TOKENS
    assert_greedy_equal(target_model, prompt, plain.token_ids, hf_greedy(target_model, prompt, NEW_TOKENS))


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("kind", ["self", "random", "ngram"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_speculative_greedy_equals_plain(target_model, random_draft_model, toy_tokenizer, kind, k, prompt):
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=k)
    plain = generator.generate(prompt, None, config)
    spec = generator.generate(prompt, make_drafter(kind, target_model, random_draft_model), config)
    assert_greedy_equal(target_model, prompt, spec.token_ids, plain.token_ids)
    assert_greedy_equal(target_model, prompt, spec.token_ids, hf_greedy(target_model, prompt, NEW_TOKENS))
    assert len(spec.token_ids) == NEW_TOKENS and spec.finish_reason == "length"
    assert spec.stats.target_passes > 1, "several rounds must run"
    if kind == "self":
        assert spec.stats.accepted == spec.stats.drafted > 0
        assert spec.stats.target_passes == math.ceil(NEW_TOKENS / (k + 1))
    if kind == "ngram" and prompt is PROMPTS[0]:
        assert spec.stats.accepted > 0, "the repetitive prompt must give the n-gram drafter hits"


def test_switching_auto_drafter_greedy_equals_plain(target_model, random_draft_model, toy_tokenizer):
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=40, max_draft_tokens=6)
    for prompt in PROMPTS:
        plain = generator.generate(prompt, None, config)
        auto = SwitchingDrafter([NgramDrafter(), ModelDrafter(random_draft_model, target_model.config.vocab_size)],
                                DraftLengthPolicy(max_k=6))
        spec = generator.generate(prompt, auto, config)
        assert_greedy_equal(target_model, prompt, spec.token_ids, plain.token_ids)


def test_near_tie_check_fails_on_a_real_mismatch(target_model):
    prompt = PROMPTS[0]
    reference = hf_greedy(target_model, prompt, 8)
    corrupted = reference[:3] + [(reference[3] + 1) % target_model.config.vocab_size] + reference[4:]
    assert first_mismatch(corrupted, reference) == 3
    with pytest.raises(AssertionError, match="not a near-tie"):
        assert_greedy_equal(target_model, prompt, corrupted, reference)


@pytest.mark.parametrize("min_confidence", [0.0, 0.05, 1.0])
def test_draft_confidence_stop_shortens_drafts_and_keeps_greedy_exact(target_model, random_draft_model, toy_tokenizer,
                                                                      min_confidence):
    from decoding.drafters.base import DraftContext
    from decoding.sampling import SamplingParams

    drafter = ModelDrafter(random_draft_model, target_model.config.vocab_size)
    prompt = PROMPTS[0]
    draft = drafter.propose(DraftContext(prompt, 6, SamplingParams(), None, 0.0, min_confidence))
    if min_confidence == 0.0:
        assert len(draft.tokens) == 6
    if min_confidence == 1.0:
        assert len(draft.tokens) == 1  # the first token is always kept
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=5, draft_min_confidence=min_confidence)
    plain = generator.generate(prompt, None, config)
    spec = generator.generate(prompt, ModelDrafter(random_draft_model, target_model.config.vocab_size), config)
    assert_greedy_equal(target_model, prompt, spec.token_ids, plain.token_ids)


def test_parting_reports_the_first_difference_and_the_top2_gap_there():
    import torch
    from transformers import AutoModelForCausalLM

    from bench.edits import describe_parting
    from bench.near_ties import logit_step, parting, top2_gap, top2_logits
    from decoding.weights.starter import TARGET_DIR

    model = AutoModelForCausalLM.from_pretrained(TARGET_DIR, local_files_only=True)
    prompt = [5, 6, 7]
    assert parting(model, prompt, [1, 2, 3], [1, 2, 3]) is None
    assert parting(model, prompt, [1, 2, 3], [1, 2]) == {"token": 2, "top2_gap": None, "logit_step": None}
    found = parting(model, prompt, [1, 2, 3], [1, 9, 3])
    assert found["token"] == 1 and found["top2_gap"] == pytest.approx(top2_gap(model, prompt + [1]))
    assert found["logit_step"] == logit_step(top2_logits(model, prompt + [1])[0], model.dtype)
    assert "at token 1: top-2 logit gap" in describe_parting(found) and describe_parting(None) == ""
    assert logit_step(20.0, torch.bfloat16) == 0.125 and logit_step(1.0, torch.float32) == 2.0 ** -23
