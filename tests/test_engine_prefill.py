"""Engine.prefill: a prompt put into a cache key's KV caches ahead of its generation, on the starter pair.

The prompt is real code nobody here wrote: the start of the standard library's ``textwrap.py``.
"""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path

import pytest

from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.types import GenerationConfig

pytestmark = pytest.mark.model

PROMPT_TOKENS = 300
CHUNK = 64  # prefill piece, tokens
GREEDY = GenerationConfig(max_new_tokens=24, seed=0)


@pytest.fixture(scope="module")
def engine():
    # float32: the texts are compared token for token (bfloat16 may break that at near-ties)
    return Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))


@pytest.fixture(scope="module")
def prompt(engine) -> list[int]:
    text = Path(textwrap.__file__).read_text(encoding="utf-8")
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > PROMPT_TOKENS
    return ids[:PROMPT_TOKENS]


def cached(engine) -> tuple[int, int]:
    """Tokens held by the target's and the draft model's caches of the cache key used last."""
    return len(engine.generator.state), len(engine.model_drafter.state)


def test_a_prefilled_prompt_is_reused_by_generate_and_gives_the_same_text(engine, prompt):
    assert engine.prefill(prompt, "warm") == len(prompt) - 1
    # The rollback invariant: both caches hold the prompt minus its last token (the first pass feeds it).
    assert engine.generator.state.token_ids == engine.model_drafter.state.token_ids == prompt[:-1]
    assert engine.prefill(prompt, "warm") == 0  # nothing left to compute
    # Plain decoding, so both runs compute exactly the same passes: the prefill fed the same tokens in
    # one piece, as a cold generate does, and the texts must be equal to the bit.
    warm = engine.generate(prompt, GREEDY, mode="none", cache_key="warm")
    assert (warm.stats.prefill_reused, warm.stats.prefill_computed) == (len(prompt) - 1, 1)
    cold = engine.generate(prompt, GREEDY, mode="none", cache_key="cold")
    assert (cold.stats.prefill_reused, cold.stats.prefill_computed) == (0, len(prompt))
    assert warm.token_ids == cold.token_ids and warm.text == cold.text
    # Drafting reads the draft model's prefilled cache under the same key.
    engine.prefill(prompt, "drafted")
    drafted = engine.generate(prompt, GREEDY, mode="model", cache_key="drafted")
    assert drafted.stats.prefill_reused == len(prompt) - 1 and drafted.stats.drafted > 0


def test_a_prefill_computes_only_what_is_not_cached(engine, prompt):
    engine.prefill(prompt[:200], "grow")
    assert engine.prefill(prompt, "grow") == len(prompt) - 200  # token 199 (not cached yet) and what follows
    assert engine.prefill(prompt[:150], "grow") == 0  # a shorter prompt rolls back, computes nothing
    assert cached(engine) == (149, 149)


def test_a_stopped_prefill_computed_only_its_first_piece_and_keeps_it(engine, prompt):
    polls = []

    def should_stop() -> bool:
        polls.append(len(engine.generator.state))
        return len(polls) > 1  # go on at the poll before any work, stop at the next

    assert engine.prefill(prompt, "stopped", should_stop, chunk_tokens=CHUNK) == CHUNK
    assert polls == [0, CHUNK]
    assert cached(engine) == (CHUNK, 0)  # stopped before the draft model's prefill
    assert engine.generator.state.token_ids == prompt[:CHUNK]
    assert engine.prefill(prompt, "stopped", lambda: False, chunk_tokens=CHUNK) == len(prompt) - 1 - CHUNK
    assert cached(engine) == (len(prompt) - 1, len(prompt) - 1)
    assert engine.prefill(prompt, "stopped", lambda: True) == 0  # stopped before any work


def test_a_preempted_prefill_drops_the_piece_in_flight_between_layers_and_keeps_the_ones_before(engine, prompt):
    from decoding.kv_cache import decoder_layers

    layers = decoder_layers(engine.target.model)
    assert len(layers) > 2
    polls = []

    def preempt() -> bool:  # true before the second layer of the second piece
        polls.append(len(engine.generator.state))
        # the poll before any work, the first piece's layers, the poll between pieces, the second's first layer
        return len(polls) > 1 + len(layers) + 1 + 1

    fed = engine.prefill(prompt, "preempted", lambda: False, chunk_tokens=CHUNK, preempt=preempt)
    assert fed == CHUNK and cached(engine) == (CHUNK, 0)  # the second piece dropped, the draft model not fed
    assert engine.generator.state.token_ids == prompt[:CHUNK]
    assert all(layer.get_seq_length() == CHUNK for layer in engine.generator.state.cache.layers)
    assert len(polls) == 1 + len(layers) + 1 + 2  # stopped at the layer it became true before, not at the piece's end
    # What stays cached is right: the rest fed on top gives the text of a cold generation, to the bit.
    engine.prefill(prompt, "preempted", lambda: False, chunk_tokens=CHUNK)
    warm = engine.generate(prompt, GREEDY, mode="none", cache_key="preempted")
    cold = engine.generate(prompt, GREEDY, mode="none", cache_key="preempted-cold")
    assert warm.stats.prefill_reused == len(prompt) - 1 and warm.token_ids == cold.token_ids
    assert not any(layer._forward_pre_hooks for layer in layers)  # the hooks are gone
    assert engine.prefill(prompt[:-5] + [1, 2, 3, 4, 5], "preempted", lambda: False, preempt=lambda: True) == 0


def test_prefill_refuses_bad_arguments_and_other_threads(engine, prompt):
    with pytest.raises(ValueError, match="at least one token"):
        engine.prefill([], "bad")
    with pytest.raises(ValueError, match="chunk_tokens"):
        engine.prefill(prompt, "bad", chunk_tokens=-1)
    errors = []

    def other_thread():
        try:
            engine.prefill(prompt, "bad")
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "thread" in errors[0]


def test_a_spare_prefill_keeps_the_prompt_in_use_and_serves_the_prompt_it_was_made_for(engine, prompt):
    """The spare caches: a likely next prompt prefilled beside the one in use; each later prompt takes the
    pair that shares more with it, so neither the one in use nor the spare is computed again."""
    key = "file:///spare.py"
    engine.forget_cache(key)
    now, after = prompt[:200], prompt[:150] + prompt[180:300]  # the same start, then different text
    plain = engine.generate(now, GREEDY, "none", cache_key=key)
    # A new spare pair holds nothing yet: it computes the whole prompt (the last token is the first pass's).
    assert engine.prefill(after, cache_key=key, spare=True) == len(after) - 1
    following = engine.generate(after, GREEDY, "none", cache_key=key)
    assert following.stats.prefill_computed <= 1, following.stats  # the spare served it
    again = engine.generate(now, GREEDY, "none", cache_key=key)  # the pair in use before is still there
    assert again.stats.prefill_computed <= 1 and again.text == plain.text
    with pytest.raises(ValueError):
        engine.prefill(after, spare=True)
    engine.forget_cache(key)
