"""Stop handling inside accepted runs: a stop token or stop string inside an accepted draft, a limit
and a stop in one round (docs/cases.md D1-D3); and KV-cache rollback."""

from __future__ import annotations

import pytest
import torch

from decoding.drafters.ngram import NgramDrafter
from decoding.generate import SpeculativeGenerator, _Output
from decoding.types import GenerationConfig
from decoding.kv_cache import KVCacheState

PROMPT = [3, 7, 11, 3, 7, 11, 3, 7, 19, 2, 5]


def plain_output(model, tokenizer, n=16) -> list[int]:
    return SpeculativeGenerator(model, tokenizer).generate(PROMPT, None, GenerationConfig(max_new_tokens=n)).token_ids


def oracle_drafter(plain: list[int]) -> NgramDrafter:
    """An n-gram drafter whose extra source holds the prompt's tail followed by the target's own
    greedy output, so it drafts 8 tokens that the target accepts, across any stop point."""
    return NgramDrafter(sources={"oracle": PROMPT[-3:] + plain})


def first_new_token_index(tokens: list[int], start: int) -> int:
    """First index >= start whose token did not occur before it."""
    return next(i for i in range(start, len(tokens)) if tokens[i] not in tokens[:i])


@pytest.mark.model
def test_d1_stop_token_inside_accepted_run(target_model, toy_tokenizer):
    plain = plain_output(target_model, toy_tokenizer)
    stop_at = first_new_token_index(plain, 2)
    stop_token = plain[stop_at]
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=16, max_draft_tokens=8, stop_token_ids=frozenset({stop_token}))
    result = generator.generate(PROMPT, oracle_drafter(plain), config)
    reference = SpeculativeGenerator(target_model, toy_tokenizer).generate(PROMPT, None, config)
    assert result.token_ids == reference.token_ids == plain[: stop_at + 1]
    assert result.finish_reason == reference.finish_reason == "stop"
    assert result.stats.new_tokens == stop_at + 1
    assert result.stats.drafted == 8 and result.stats.accepted == stop_at + 1  # the stop token was drafted and accepted too
    assert result.text == toy_tokenizer.decode(plain[:stop_at])
    # Nothing after the stop is cached: the cache holds the committed tokens minus the last.
    assert generator.state.token_ids == PROMPT + plain[:stop_at]


@pytest.mark.model
def test_d2_stop_string_completed_inside_accepted_run(target_model, toy_tokenizer):
    plain = plain_output(target_model, toy_tokenizer)
    text = toy_tokenizer.decode(plain)
    # A two-letter stop string spanning tokens 3 and 4 that does not occur earlier.
    start = next(i for i in range(2, len(text) - 1) if text[i : i + 2] not in text[: i + 1])
    stop = text[start : start + 2]
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=16, max_draft_tokens=8, stop_strings=(stop,))
    result = generator.generate(PROMPT, oracle_drafter(plain), config)
    assert result.finish_reason == "stop"
    assert result.text == text[:start]
    assert result.token_ids == plain[: start + 2]  # up to the token completing the stop string
    assert result.stats.new_tokens == len(result.token_ids)
    assert result.stats.accepted <= len(result.token_ids)
    assert generator.state.token_ids == PROMPT + result.token_ids[:-1]


@pytest.mark.unit
def test_d3_limit_and_stop_in_one_round_unit(toy_tokenizer):
    """A round that would commit six tokens under max_new_tokens = 5: the stop token ends it first
    ("stop"); the same round without the stop token is cut by the limit ("length"); a stop on the
    last allowed token is a stop, not a length."""
    stop = 99

    def commit_round(tokens: list[int], max_new_tokens: int) -> tuple[list[int], str | None]:
        output = _Output(toy_tokenizer, GenerationConfig(max_new_tokens=max_new_tokens), frozenset({stop}))
        for token in tokens:
            if output.commit(token):
                break
        return output.token_ids, output.finish_reason

    assert commit_round([10, 11, stop, 20, 21, 22], 5) == ([10, 11, stop], "stop")
    assert commit_round([10, 11, 12, 20, 21, 22], 5) == ([10, 11, 12, 20, 21], "length")
    assert commit_round([10, 11, stop, 20, 21, 22], 3) == ([10, 11, stop], "stop")
    assert commit_round([10, 11, 12, 20, 21, 22], 2) == ([10, 11], "length")


@pytest.mark.model
def test_d3_stop_on_the_last_allowed_token_is_a_stop(target_model, toy_tokenizer):
    plain = plain_output(target_model, toy_tokenizer)
    stop_at = first_new_token_index(plain, 2)
    config = GenerationConfig(max_new_tokens=stop_at + 1, max_draft_tokens=8, stop_token_ids=frozenset({plain[stop_at]}))
    result = SpeculativeGenerator(target_model, toy_tokenizer).generate(PROMPT, oracle_drafter(plain), config)
    assert result.token_ids == plain[: stop_at + 1] and result.finish_reason == "stop"
    shorter = GenerationConfig(max_new_tokens=stop_at, max_draft_tokens=8, stop_token_ids=frozenset({plain[stop_at]}))
    result = SpeculativeGenerator(target_model, toy_tokenizer).generate(PROMPT, oracle_drafter(plain), shorter)
    assert result.token_ids == plain[:stop_at] and result.finish_reason == "length"


@pytest.mark.model
@torch.no_grad()
def test_logits_after_rollback_equal_fresh_forward(target_model):
    ids = [5, 9, 2, 7, 7, 1, 30, 4, 8, 15]
    state = KVCacheState(target_model)
    state.forward(ids[:6])
    state.forward([40, 41, 42, 43])  # a draft that gets rejected
    state.rollback(6)
    assert state.token_ids == ids[:6]
    after = state.forward(ids[6:])  # (4, V)
    fresh = target_model(input_ids=torch.tensor([ids])).logits[0, 6:]
    torch.testing.assert_close(after, fresh, rtol=1e-4, atol=1e-4)


@pytest.mark.model
@torch.no_grad()
def test_generator_cache_after_generation_matches_fresh_prefill(target_model, toy_tokenizer):
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    result = generator.generate(PROMPT, NgramDrafter(), GenerationConfig(max_new_tokens=12, max_draft_tokens=4))
    committed = PROMPT + result.token_ids
    assert generator.state.token_ids == committed[:-1]
    next_logits = generator.state.forward(committed[-1:])[-1]
    fresh = target_model(input_ids=torch.tensor([committed])).logits[0, -1]
    torch.testing.assert_close(next_logits, fresh, rtol=1e-4, atol=1e-4)


@pytest.mark.model
def test_prompt_prefix_is_reused_between_generations(target_model, toy_tokenizer):
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=4)
    generator.generate(PROMPT, None, config)
    second = generator.generate(PROMPT[:-1] + [40], None, config)
    assert second.stats.prefill_reused == len(PROMPT) - 1
    assert second.stats.prefill_computed == 1
    fresh = SpeculativeGenerator(target_model, toy_tokenizer).generate(PROMPT[:-1] + [40], None, config)
    assert second.token_ids == fresh.token_ids


@pytest.mark.model
def test_cancellation_between_rounds(target_model, toy_tokenizer):
    calls = []

    def should_stop() -> bool:  # polled once before the prefill, then before every round
        calls.append(1)
        return len(calls) > 3

    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    result = generator.generate(PROMPT, None, GenerationConfig(max_new_tokens=20), should_stop=should_stop)
    assert result.finish_reason == "cancelled" and len(result.token_ids) == 2
    assert generator.state.token_ids == PROMPT + result.token_ids[:-1]


@pytest.mark.model
def test_cancellation_inside_a_chunked_prefill_keeps_the_fed_chunks(target_model, toy_tokenizer):
    """A long prompt is prefilled in chunks; cancelled after the first, the generation stops there,
    the cache holds exactly that chunk, and the next request reuses it and gives the plain output."""
    prompt = [(7 * i) % 40 + 1 for i in range(150)]
    config = GenerationConfig(max_new_tokens=6, prefill_chunk_tokens=64)
    polls = []

    def stop_after_first_chunk() -> bool:  # polled before the prefill, then between chunks
        polls.append(1)
        return len(polls) > 1

    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    result = generator.generate(prompt, None, config, should_stop=stop_after_first_chunk)
    assert result.finish_reason == "cancelled" and result.token_ids == [] and len(polls) == 2
    assert generator.state.token_ids == prompt[:64]
    second = generator.generate(prompt, None, config, should_stop=lambda: False)
    assert second.stats.prefill_reused == 64
    plain = SpeculativeGenerator(target_model, toy_tokenizer).generate(prompt, None, config)
    assert second.token_ids == plain.token_ids and second.finish_reason == plain.finish_reason


@pytest.mark.model
def test_cancelled_before_start_does_no_work(target_model, toy_tokenizer):
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    result = generator.generate(PROMPT, None, GenerationConfig(max_new_tokens=20), should_stop=lambda: True)
    assert result.finish_reason == "cancelled" and result.token_ids == [] and result.stats.prefill_computed == 0
    assert generator.state.token_ids == []


@pytest.mark.model
def test_failed_forward_leaves_an_empty_consistent_cache(target_model, monkeypatch):
    state = KVCacheState(target_model)
    state.forward([1, 2, 3])
    layer = target_model.model.layers[1]

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("simulated")

    monkeypatch.setattr(layer, "forward", out_of_memory)
    try:
        state.forward([4, 5])
    except torch.OutOfMemoryError:
        pass
    monkeypatch.undo()
    assert state.token_ids == [] and state.cache.get_seq_length() == 0
    assert state.sync([1, 2, 3]) == [1, 2, 3]  # usable again


@pytest.mark.model
def test_sliding_window_model_rolls_back_and_matches_plain(toy_tokenizer):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(5)
    model = MistralForCausalLM(MistralConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, sliding_window=4,
                                             max_position_embeddings=256)).eval()
    config = GenerationConfig(max_new_tokens=20, max_draft_tokens=4)
    plain = SpeculativeGenerator(model, toy_tokenizer).generate(PROMPT, None, config)
    # A half-right source: the first 10 tokens of the real continuation, then wrong ones, so rounds
    # both accept and reject (and the cache must roll back past the window).
    wrong = [(t + 1) % 40 for t in plain.token_ids[10:]]
    drafter = NgramDrafter(sources={"half": PROMPT[-3:] + plain.token_ids[:10] + wrong})
    spec = SpeculativeGenerator(model, toy_tokenizer).generate(PROMPT, drafter, config)
    assert spec.token_ids == plain.token_ids
    assert 0 < spec.stats.accepted < spec.stats.drafted


@pytest.mark.unit
def test_incremental_decoding_finds_stop_strings_where_a_full_decode_does():
    """With a real byte-level BPE tokenizer (the starter's), the streamed text finds each stop string
    at the same token as decoding all tokens after every commit, including stops that span tokens
    and multi-byte characters split across tokens; the final text is the full decode cut there."""
    from transformers import AutoTokenizer

    from decoding.weights.starter import TARGET_DIR

    tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR)
    text = "def f(x):\n    return {'é': x}  # naïve → ok\n\nclass A:\n    pass\n"
    ids = tokenizer.encode(text, add_special_tokens=False)
    for stop in ("\n", "):", "x}", "→ o", "ss\n", "é'", "never"):
        config = GenerationConfig(max_new_tokens=len(ids), stop_strings=(stop,))
        output = _Output(tokenizer, config, frozenset())
        committed = next((n for n in range(1, len(ids) + 1) if output.commit(ids[n - 1])), len(ids))
        reference = next((n for n in range(1, len(ids) + 1) if stop in tokenizer.decode(ids[:n])), len(ids))
        assert committed == reference, stop
        full = tokenizer.decode(ids[:committed])
        assert output.final_text() == (full[: full.find(stop)] if stop in full else full)
