"""A model drafter whose KV cache must first catch up on many committed tokens (a cold prompt) is chosen
only when the passes it can save over the tokens left outweigh that catch-up (the switching drafter);
the model drafter measures the catch-up per token from its own long passes."""

from __future__ import annotations

import pytest

from decoding.draft_length import DraftLengthPolicy
from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.draft_model import CATCH_UP_TOKENS, ModelDrafter
from decoding.drafters.switching import SwitchingDrafter
from decoding.sampling import SamplingParams
from tests.conftest import tiny_model


class FakeSource(Drafter):
    """Proposes ``k`` copies of token 1 (deterministic; nothing when ``finds`` is false); ``catch_up`` ms
    before it can (0: no catch-up); counts the rounds it was kept out (``relaxed``)."""

    def __init__(self, name: str, catch_up: float = 0.0, finds: bool = True):
        self.name, self.catch_up, self.finds, self.relaxed = name, catch_up, finds, 0
        self.contexts: list[DraftContext] = []

    def catch_up_ms(self, token_ids: list[int]) -> float:
        return self.catch_up

    def relax_catch_up(self) -> None:
        self.relaxed += 1

    def propose(self, context: DraftContext) -> Draft | None:
        self.contexts.append(context)
        if not self.finds:
            return None
        return Draft(tokens=[1] * context.max_tokens, draft_probs=None, source=self.name)

    def observe(self, draft: Draft, num_accepted: int) -> None:
        pass


def chosen(catch_up_ms: float, remaining: int, lookup_alpha: float = 0.2, finds: bool = True) -> str | None:
    policy = DraftLengthPolicy(max_k=8, verify_cost_per_token=0.05, priors={"lookup": lookup_alpha, "model": 0.9})
    drafter = SwitchingDrafter([FakeSource("lookup", finds=finds), FakeSource("model", catch_up_ms)], policy)
    context = DraftContext(token_ids=list(range(100)), max_tokens=8, sampling=SamplingParams(), generator=None,
                           verify_ms=100.0, remaining_tokens=remaining)
    draft = drafter.propose(context)
    return None if draft is None else draft.source


@pytest.mark.unit
def test_a_costly_catch_up_is_paid_only_where_enough_tokens_are_left_to_recover_it():
    assert chosen(catch_up_ms=0.0, remaining=4) == "model"  # nothing to catch up: gain decides
    assert chosen(catch_up_ms=2000.0, remaining=4) == "lookup"  # 20 passes of catch-up for 4 tokens
    assert chosen(catch_up_ms=2000.0, remaining=4, lookup_alpha=0.0) is None  # nothing pays: plain decoding
    assert chosen(catch_up_ms=2000.0, remaining=400) == "model"  # recovered over 400 tokens
    # A lookup that hits often saves most passes itself: the catch-up must beat the lookup, not plain.
    assert chosen(catch_up_ms=2000.0, remaining=60) == "model"
    assert chosen(catch_up_ms=0.0, remaining=60, lookup_alpha=0.85) == "model"
    assert chosen(catch_up_ms=2000.0, remaining=60, lookup_alpha=0.85) == "lookup"
    # A lookup with nothing to propose this round saves nothing: the catch-up is weighed against plain.
    assert chosen(catch_up_ms=2000.0, remaining=60, lookup_alpha=0.85, finds=False) == "model"
    assert chosen(catch_up_ms=2000.0, remaining=4, lookup_alpha=0.85, finds=False) is None


@pytest.mark.unit
def test_a_source_kept_out_by_its_catch_up_is_told_each_round():
    policy = DraftLengthPolicy(max_k=8, priors={"lookup": 0.2, "model": 0.9})
    model = FakeSource("model", 2000.0)
    drafter = SwitchingDrafter([FakeSource("lookup", finds=False), model], policy)
    context = DraftContext(token_ids=[1, 2, 3], max_tokens=8, sampling=SamplingParams(), generator=None,
                           verify_ms=100.0, remaining_tokens=4)
    for _ in range(3):
        drafter.propose(context)
    assert model.relaxed == 3 and model.contexts == []


@pytest.mark.unit
def test_unknown_remaining_tokens_or_verify_time_leave_the_choice_to_the_gains():
    policy = DraftLengthPolicy(max_k=8, priors={"lookup": 0.05, "model": 0.9})
    drafter = SwitchingDrafter([FakeSource("lookup"), FakeSource("model", 1e9)], policy)
    for remaining, verify_ms in ((0, 100.0), (5, 0.0)):
        context = DraftContext(token_ids=[1, 2, 3], max_tokens=8, sampling=SamplingParams(), generator=None,
                               verify_ms=verify_ms, remaining_tokens=remaining)
        assert drafter.propose(context).source == "model"


@pytest.mark.model
def test_the_model_drafter_measures_its_catch_up_and_knows_what_its_cache_lacks():
    drafter = ModelDrafter(tiny_model(seed=3, vocab_size=24), 24)
    prompt = [i % 24 for i in range(3 * CATCH_UP_TOKENS)]
    context = DraftContext(token_ids=prompt, max_tokens=2, sampling=SamplingParams(), generator=None)
    assert drafter.catch_up_ms(prompt) == 0.0  # nothing measured yet
    drafter.propose(context)
    assert drafter.catch_up_ms_per_token == 0.0  # the first long pass pays one-time setup: not counted
    drafter.state.rollback(0)
    draft = drafter.propose(context)
    assert drafter.catch_up_ms_per_token > 0
    estimate = drafter.catch_up_ms_per_token
    drafter.relax_catch_up(0.5)
    assert drafter.catch_up_ms_per_token == pytest.approx(estimate / 2)
    assert drafter.catch_up_ms([*prompt, *draft.tokens]) == 0.0  # warm: only a token or two to feed
    other = [(i * 7 + 1) % 24 for i in range(3 * CATCH_UP_TOKENS)]
    expected = (len(other) - drafter.state.common_prefix(other)) * drafter.catch_up_ms_per_token
    assert drafter.catch_up_ms(other) == pytest.approx(expected) and expected > 0


@pytest.mark.model
def test_the_generator_tells_drafters_how_many_tokens_are_left():
    from decoding.generate import SpeculativeGenerator
    from decoding.types import GenerationConfig
    from tests.conftest import ToyTokenizer

    source = FakeSource("lookup", finds=False)
    drafter = SwitchingDrafter([source], DraftLengthPolicy(max_k=4, priors={"lookup": 0.9}))
    generation = SpeculativeGenerator(tiny_model(seed=4, vocab_size=24), ToyTokenizer()).generate(
        [1, 2, 3], drafter, GenerationConfig(max_new_tokens=6, max_draft_tokens=4, stop_token_ids=frozenset()))
    assert len(generation.token_ids) == 6
    assert [c.remaining_tokens for c in source.contexts] == [6, 5, 4, 3, 2]  # budget 0 in the last round
