"""Rewrites drafted from the original region equal plain greedy decoding, token for token.

Tiny random models deviate from any region we pick, which exercises rejection and re-anchoring. For the
case where the target copies, the region is cut from the target's own plain greedy output and edited
(a token replaced, tokens inserted or deleted): the target then copies the region except at the edits,
as a model carrying an edit through does, and the end marker is a token the target writes where the
region ends. The starter pair runs one rewrite-shaped prompt whose answer repeats code of the prompt.
"""

from __future__ import annotations

import random

import pytest

from decoding.weights.capabilities import ModelCapabilities
from decoding.drafters.region import RegionDrafter
from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.generate import SpeculativeGenerator
from decoding.types import GenerationConfig
from decoding.weights.loading import LoadedModel
from tests.conftest import ToyTokenizer, tiny_model
from tests.greedy_check import assert_greedy_equal

pytestmark = pytest.mark.model

PROMPTS = [[3, 7, 11, 3, 7, 11, 3, 7, 19, 2, 5, 3, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4], [42, 17, 5]]
NEW_TOKENS = 40
CAPABILITIES = ModelCapabilities(fim=None, repo_prompt=False, repo_tokens=None, stop_ids=frozenset(),
                                 chat_template=False)


def tiny_engine(target, draft=None) -> Engine:
    tokenizer = ToyTokenizer()
    return Engine(EngineConfig(model="tiny", draft_model="tiny-draft" if draft is not None else "none"),
                  LoadedModel("tiny", target, tokenizer, CAPABILITIES),
                  LoadedModel("tiny-draft", draft, tokenizer, CAPABILITIES) if draft is not None else None)


@pytest.fixture(scope="module")
def engine(target_model, random_draft_model):
    return tiny_engine(target_model, random_draft_model)


@pytest.fixture(scope="module")
def copier_model():
    """A peaked tiny target whose greedy outputs vary (the default one soon loops over two tokens)."""
    return tiny_model(seed=10, init_std=0.3)


@pytest.fixture(scope="module")
def copier(copier_model, random_draft_model):
    return tiny_engine(copier_model, random_draft_model)


def edited(tokens: list[int], rng: random.Random, vocab: int) -> list[int]:
    """``tokens`` with one random edit: a token replaced, 1-3 tokens inserted, or 1-3 deleted."""
    out = list(tokens)
    at = rng.randrange(1, len(out) - 3)
    kind = rng.choice(["replace", "insert", "delete"])
    if kind == "replace":
        out[at] = (out[at] + 1 + rng.randrange(vocab - 1)) % vocab
    elif kind == "insert":
        out[at:at] = [rng.randrange(vocab) for _ in range(rng.randint(1, 3))]
    else:
        del out[at : at + rng.randint(1, 3)]
    return out


@pytest.mark.parametrize("mode", ["ngram", "model", "staged", "auto", "tree"])
def test_rewrite_of_random_regions_equals_plain_greedy(engine, target_model, mode):
    """Regions the target does not follow: drafts are mostly rejected, the pointer is mostly lost."""
    rng = random.Random(0)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, seed=0)  # seeded: drafting independent of timing
    for prompt in PROMPTS:
        plain = engine.rewrite(prompt, [], config, mode="none")
        assert plain.stats.target_passes == NEW_TOKENS and not plain.stats.sources
        for _ in range(3):
            region = [rng.randrange(48) for _ in range(rng.randint(5, 50))] + plain.token_ids[:: rng.randint(2, 5)]
            spec = engine.rewrite(prompt, region, config, mode=mode)
            assert_greedy_equal(target_model, prompt, spec.token_ids, plain.token_ids)
            assert len(spec.token_ids) == NEW_TOKENS and spec.finish_reason == "length"


@pytest.mark.parametrize("mode", ["ngram", "auto"])
def test_rewrite_of_a_region_the_target_copies_with_edits_equals_plain_greedy(copier, copier_model, mode):
    engine, target_model = copier, copier_model
    rng = random.Random(1)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, seed=0)
    region_accepted = 0
    for prompt in PROMPTS:
        plain = engine.rewrite(prompt, [], config, mode="none")
        for _ in range(4):
            region = edited(plain.token_ids, rng, 48)
            spec = engine.rewrite(prompt, region, config, mode=mode)
            assert_greedy_equal(target_model, prompt, spec.token_ids, plain.token_ids)
            region_accepted += spec.stats.sources["region"].accepted
        exact = engine.rewrite(prompt, plain.token_ids, config, mode=mode)
        assert exact.token_ids == plain.token_ids
        assert exact.stats.sources["region"].accepted == NEW_TOKENS - exact.stats.target_passes
        assert exact.stats.tokens_per_pass >= 4, "a region the target copies must go in long drafts"
    assert region_accepted >= 0.6 * 12 * NEW_TOKENS, "edited regions are mostly copied: re-anchoring must work"


def marker_cut(output: list[int]) -> int:
    """The largest position >= 20 whose token does not occur earlier in ``output`` (a usable end marker)."""
    for end in range(len(output) - 1, 19, -1):
        if output[end] not in output[:end]:
            return end
    raise AssertionError(f"no token of {output} can serve as an end marker")


def test_aligned_region_goes_in_one_pass_that_stops_at_the_end_marker(copier_model):
    """The early exit: once aligned, the rest of the region and its end marker are one draft, and the
    generation stops at the marker within that same pass."""
    target_model = copier_model
    generator = SpeculativeGenerator(target_model, ToyTokenizer())
    prompt = PROMPTS[1]
    output = generator.generate(prompt, None, GenerationConfig(max_new_tokens=NEW_TOKENS)).token_ids
    end = marker_cut(output)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=64, stop_token_ids=frozenset({output[end]}))
    plain = generator.generate(prompt, None, config)
    assert plain.token_ids == output[: end + 1] and plain.finish_reason == "stop"
    copied = generator.generate(prompt, RegionDrafter(output[: end + 1], len(prompt)), config)
    assert copied.token_ids == plain.token_ids and copied.finish_reason == "stop"
    assert copied.stats.target_passes == 1
    # One token replaced at position 2: the draft is rejected there, plain rounds follow until three
    # tokens after the edit re-anchor the pointer, then one pass checks the rest and stops at the marker.
    region = output[: end + 1]
    region[2] = (region[2] + 1) % target_model.config.vocab_size
    rewritten = generator.generate(prompt, RegionDrafter(region, len(prompt)), config)
    assert rewritten.token_ids == plain.token_ids and rewritten.finish_reason == "stop"
    assert rewritten.stats.target_passes <= 5
    assert rewritten.stats.sources["region"].accepted >= end - 6


def test_rewrite_reports_the_region_separately_and_keeps_completion_estimates(copier):
    engine = copier
    prompt = PROMPTS[0]
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, seed=0)
    before = dict(engine.policy.estimates)
    plain = engine.rewrite(prompt, [], config, mode="none")
    spec = engine.rewrite(prompt, plain.token_ids, config, mode="auto")
    assert set(spec.stats.sources) >= {"region"} and spec.stats.sources["region"].drafted > 16
    assert engine.policy.estimates == before, "rewrites keep their own policy"
    with pytest.raises(ValueError, match="unknown drafter"):
        engine.rewrite(prompt, plain.token_ids, config, mode="bogus")
    with pytest.raises(ValueError, match=">= 0"):
        GenerationConfig(max_region_draft_tokens=-1)
    capped = engine.rewrite(prompt, plain.token_ids, GenerationConfig(max_new_tokens=NEW_TOKENS, seed=0,
                                                                       max_region_draft_tokens=0), mode="ngram")
    assert capped.token_ids == plain.token_ids and "region" not in capped.stats.sources


@pytest.fixture(scope="module")
def starter():
    # float32: token-for-token equality (see tests/test_completer.py)
    return Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))


def test_starter_pair_rewrite_equals_plain_greedy(starter):
    """A rewrite-shaped prompt on the starter pair (a base model): a function, then its copy begun under
    another name; the region is the original body. The starter target drops the body's first line (a
    deletion the pointer re-anchors after) and copies the rest."""
    body = "    result = []\n    for value in values:\n        result.append(value * factor)\n    return result\n"
    tokenizer = starter.tokenizer
    prompt = tokenizer.encode(f"def scale(values, factor):\n{body}\n\ndef scale_all(values, factor):\n",
                              add_special_tokens=False)
    region = tokenizer.encode(body, add_special_tokens=False)
    config = GenerationConfig(max_new_tokens=32, seed=0)
    plain = starter.rewrite(prompt, region, config, mode="none")
    spec = starter.rewrite(prompt, region, config, mode="auto")
    assert_greedy_equal(starter.target.model, prompt, spec.token_ids, plain.token_ids)
    assert spec.stats.sources["region"].accepted > 0 and spec.stats.target_passes < 16
