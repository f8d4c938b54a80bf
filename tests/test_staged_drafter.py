"""The staged drafter: the draft model takes an n-gram draft as its own draft and continues it.

Its drafts must be exactly the draft model's own: greedy, the same tokens as the model drafter whatever
the lookup proposes (and in one draft pass where the lookup agrees); sampled, the joint distribution of
the drafted tokens must be the draft model's q (chi-square), which a plausible wrong rule (resampling
from q instead of the residual after a refused lookup token) fails. Through the generation loop the
output equals plain greedy decoding, and sampled first tokens follow the target's distribution.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from decoding.drafters.base import Draft, DraftContext
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.drafters.staged import StagedDrafter
from decoding.drafters.switching import SwitchingDrafter
from decoding.generate import SpeculativeGenerator
from decoding.types import GenerationConfig
from decoding.sampling import SamplingParams, processed_probs, sample
from decoding.verify import VerifyResult
from tests.conftest import ToyTokenizer, tiny_model

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
SAMPLING = SamplingParams(temperature=0.8, top_k=5, top_p=1.0)
GREEDY = SamplingParams()
TRIALS = 4000


class FixedLookup:
    """Stands in for the n-gram lookup: proposes the given tokens (at most the round's budget)."""

    name = "ngram"
    max_candidates = 1

    def __init__(self, tokens: list[int]):
        self.tokens = tokens

    def propose(self, context: DraftContext) -> Draft | None:
        tokens = self.tokens[: context.max_tokens]
        return Draft(tokens=tokens, draft_probs=None, source="ngram:fixed") if tokens else None


@pytest.fixture(scope="module")
def draft_model():
    return tiny_model(seed=21, vocab_size=24, init_std=0.3)  # peaked: confident and unsure positions both occur


def context(max_tokens: int, sampling: SamplingParams = GREEDY, generator=None, prompt=PROMPT) -> DraftContext:
    return DraftContext(token_ids=list(prompt), max_tokens=max_tokens, sampling=sampling, generator=generator)


@pytest.fixture
def count_passes(draft_model):
    calls: list[int] = []
    handle = draft_model.register_forward_hook(lambda *_: calls.append(1))
    yield calls
    handle.remove()


@pytest.mark.model
@pytest.mark.parametrize("min_confidence", [0.0, 0.3, 0.6])
def test_greedy_staged_draft_is_the_draft_models_own_whatever_the_lookup_proposes(draft_model, min_confidence):
    own = ModelDrafter(draft_model, 24, min_confidence=min_confidence).propose(context(8)).tokens
    full = ModelDrafter(draft_model, 24).propose(context(8)).tokens  # as far as the draft goes unchecked
    assert len(full) == 8 and (min_confidence == 0 or len(own) < 8)  # the thresholds do stop the draft
    rng = np.random.default_rng(0)
    lookups = [*(full[:i] for i in range(1, 9)), *(full[:i] + [(full[i] + 1) % 24] + full[i + 1 :] for i in range(8)),
               *(rng.integers(0, 24, size=int(rng.integers(1, 9))).tolist() for _ in range(10))]
    for lookup in lookups:
        staged = StagedDrafter(FixedLookup(lookup), ModelDrafter(draft_model, 24, min_confidence=min_confidence))
        draft = staged.propose(context(8))
        assert draft.tokens == own, f"lookup {lookup}"
        assert draft.draft_probs.shape == (len(own), 24)
        assert draft.source == "staged:fixed"


@pytest.mark.model
def test_an_agreeing_lookup_costs_one_draft_pass_instead_of_one_per_token(draft_model, count_passes):
    own = ModelDrafter(draft_model, 24).propose(context(8)).tokens
    calls = count_passes
    calls.clear()
    StagedDrafter(FixedLookup(own), ModelDrafter(draft_model, 24)).propose(context(8))
    assert len(calls) == 1
    calls.clear()
    StagedDrafter(FixedLookup(own[:5]), ModelDrafter(draft_model, 24)).propose(context(8))
    assert len(calls) == 1 + 2  # the lookup's pass gives tokens 1-6 (6: its last row), then 7 and 8
    calls.clear()
    ModelDrafter(draft_model, 24).propose(context(8))
    assert len(calls) == 8


@pytest.mark.model
@pytest.mark.parametrize("min_confidence", [0.0, 0.3])
def test_sampled_draft_rows_are_the_draft_models_distributions_and_it_stops_where_unsure(draft_model, min_confidence):
    generator = torch.Generator().manual_seed(1)
    rng = np.random.default_rng(1)
    stopped_early = 0
    for _ in range(12):
        lookup = rng.integers(0, 24, size=int(rng.integers(1, 7))).tolist()
        staged = StagedDrafter(FixedLookup(lookup), ModelDrafter(draft_model, 24, min_confidence=min_confidence))
        draft = staged.propose(context(6, SAMPLING, generator))
        with torch.no_grad():
            logits = draft_model(input_ids=torch.tensor([[*PROMPT, *draft.tokens]])).logits[0, len(PROMPT) - 1 :]
        expected = processed_probs(logits, SAMPLING)  # (k + 1, V): row i is q(. | prompt, tokens[:i])
        torch.testing.assert_close(draft.draft_probs, expected[: len(draft.tokens)], atol=1e-5, rtol=1e-4)
        assert all(expected[i, token] > 0 for i, token in enumerate(draft.tokens))
        confident = [float(expected[i].max()) >= min_confidence for i in range(1, len(draft.tokens))]
        assert all(confident)  # every token after the first was drafted where the draft was sure enough
        if len(draft.tokens) < 6:
            stopped_early += 1
            assert float(expected[len(draft.tokens)].max()) < min_confidence  # and it stopped where it was not
    assert stopped_early > 0 if min_confidence else stopped_early == 0


@pytest.mark.unit
def test_candidate_trees_are_refused(draft_model):
    with pytest.raises(ValueError, match="trees"):
        StagedDrafter(NgramDrafter(max_candidates=4), ModelDrafter(draft_model, 24))


@torch.no_grad()
def draft_joint_probs(model, first: int) -> np.ndarray:
    """P(t1, t2) = q(t1) q(t2 | t1) of the draft model, ``(24, 24)``."""
    q1 = processed_probs(model(input_ids=torch.tensor([PROMPT])).logits[0, -1], SAMPLING)
    joint = np.zeros((24, 24))
    for t1 in torch.nonzero(q1).flatten().tolist():
        q2 = processed_probs(model(input_ids=torch.tensor([[*PROMPT, t1]])).logits[0, -1], SAMPLING)
        joint[t1] = (q1[t1] * q2).double().numpy()
    assert 0.05 < q1[first] < 0.9, "the lookup's first token must be refused sometimes and kept sometimes"
    return joint


def staged_pair_counts(draft_model, lookup: list[int]) -> np.ndarray:
    drafter = StagedDrafter(FixedLookup(lookup), ModelDrafter(draft_model, 24))
    generator = torch.Generator().manual_seed(0)
    counts = np.zeros((24, 24), dtype=np.int64)
    for _ in range(TRIALS):
        draft = drafter.propose(context(2, SAMPLING, generator))
        counts[draft.tokens[0], draft.tokens[1]] += 1
    return counts


def joint_pvalue(counts: np.ndarray, joint: np.ndarray) -> float:
    support = joint > 0
    assert counts[~support].sum() == 0, "a pair outside top-k was drafted"
    return float(chisquare(counts[support], joint[support] / joint[support].sum() * counts.sum()).pvalue)


def lookup_for(model) -> list[int]:
    """A lookup whose first token is the draft's second most likely, then its likeliest after that."""
    with torch.no_grad():
        q1 = processed_probs(model(input_ids=torch.tensor([PROMPT])).logits[0, -1], SAMPLING)
        first = int(torch.topk(q1, 2).indices[1])
        q2 = processed_probs(model(input_ids=torch.tensor([[*PROMPT, first]])).logits[0, -1], SAMPLING)
    return [first, int(q2.argmax())]


@pytest.mark.stats
def test_sampled_staged_drafts_follow_the_draft_models_joint_distribution(draft_model):
    lookup = lookup_for(draft_model)
    joint = draft_joint_probs(draft_model, lookup[0])
    assert joint_pvalue(staged_pair_counts(draft_model, lookup), joint) > 1e-3


def resample_from_q(target_probs, draft_tokens, draft_probs, generator) -> VerifyResult:
    """WRONG: after a refused lookup token, draws from q itself instead of norm(max(0, q - onehot))."""
    for i, token in enumerate(draft_tokens):
        if float(torch.rand(1, generator=generator)) >= float(target_probs[i, token]):
            return VerifyResult(i, sample(target_probs[i], generator))
    return VerifyResult(len(draft_tokens), sample(target_probs[len(draft_tokens)], generator))


@pytest.mark.stats
def test_resampling_from_q_after_a_refusal_is_caught(draft_model, monkeypatch):
    monkeypatch.setattr("decoding.drafters.staged.speculative_verify", resample_from_q)
    lookup = lookup_for(draft_model)
    joint = draft_joint_probs(draft_model, lookup[0])
    assert joint_pvalue(staged_pair_counts(draft_model, lookup), joint) < 1e-6


@pytest.mark.model
def test_generation_with_staged_drafts_equals_plain_greedy(draft_model):
    target = tiny_model(seed=20, vocab_size=24, init_std=0.3)
    prompt = [*PROMPT, *PROMPT, 7, 7, 3, 1]
    config = GenerationConfig(max_new_tokens=40, max_draft_tokens=6, stop_token_ids=frozenset())
    plain = SpeculativeGenerator(target, ToyTokenizer()).generate(prompt, None, config).token_ids
    drafter = SwitchingDrafter([StagedDrafter(NgramDrafter(), ModelDrafter(draft_model, 24))])
    result = SpeculativeGenerator(target, ToyTokenizer()).generate(prompt, drafter, config)
    assert result.token_ids == plain
    assert result.stats.sources["staged:context"].drafted > 0


@pytest.mark.stats
def test_sampled_generation_through_staged_drafts_follows_the_target():
    target = tiny_model(seed=10, vocab_size=24, init_std=0.3)
    draft = tiny_model(seed=11, vocab_size=24, init_std=0.3)
    with torch.no_grad():
        probs = processed_probs(target(input_ids=torch.tensor([PROMPT])).logits[0, -1], SAMPLING).double().numpy()
    generator = SpeculativeGenerator(target, ToyTokenizer())
    drafter = StagedDrafter(FixedLookup([int(np.argsort(probs)[-2]), 5]), ModelDrafter(draft, 24))
    counts = np.zeros(24, dtype=np.int64)
    for trial in itertools.islice(itertools.count(), TRIALS):
        config = GenerationConfig(max_new_tokens=2, sampling=SAMPLING, max_draft_tokens=2,
                                  stop_token_ids=frozenset(), seed=trial)
        counts[generator.generate(PROMPT, drafter, config).token_ids[0]] += 1
    support = probs > 0
    assert counts[~support].sum() == 0
    assert chisquare(counts[support], probs[support] / probs[support].sum() * TRIALS).pvalue > 1e-3
