"""Training-data shapes of the starter recipe and the ``speclsp eval models`` report."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer

from bench.corpus import rename_identifier
from decoding.weights.starter import SPECIAL_TOKENS, TARGET_DIR
from training.data import ExampleMaker, ExampleMix

CHUNK = ("def total(values, start=0):\n    result = start\n    for value in values:\n        result += value\n"
         "    return result\n\n\ndef mean(values):\n    count = len(values)\n    return total(values) / count\n")


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(str(TARGET_DIR / "tokenizer.json"))


@pytest.mark.unit
def test_mix_fractions_are_checked():
    with pytest.raises(ValueError):
        ExampleMix(fim=0.6, copy=0.3, edit=0.3)
    with pytest.raises(ValueError):
        ExampleMix(copy=-0.1)


@pytest.mark.unit
def test_rename_replaces_whole_words_only():
    assert rename_identifier("value values value_x = value", "value", "item") == "item values value_x = item"


@pytest.mark.unit
def test_edit_examples_are_the_chunk_then_an_edited_copy(tokenizer):
    maker = ExampleMaker(tokenizer, ExampleMix(fim=0.0, copy=0.0, edit=1.0), random.Random(0))
    eos = tokenizer.token_to_id("<|endoftext|>")
    changed = 0
    for _ in range(40):
        ids = maker(CHUNK)
        assert ids[-1] == eos
        text = tokenizer.decode(ids[:-1])
        assert text.startswith(CHUNK)
        copy = text[len(CHUNK):]
        assert copy  # an edited copy follows
        changed += copy not in CHUNK  # the copy differs from every span of the original (it was edited)
        assert not any(token in text for token in SPECIAL_TOKENS)
    assert changed >= 20


@pytest.mark.unit
def test_random_repeats_repeat_a_run(tokenizer):
    maker = ExampleMaker(tokenizer, ExampleMix(fim=0.0, copy=0.0, edit=0.0, random_repeat=1.0), random.Random(1))
    alphabet_sizes = []
    for _ in range(40):
        ids = maker("unused")[:-1]
        for times in (2, 3):
            size = len(ids) // times
            if size * times == len(ids) and ids == ids[:size] * times:
                assert 16 <= size <= 128 and min(ids) >= len(SPECIAL_TOKENS)
                alphabet_sizes.append(len(set(ids[:size])) / size)
                break
        else:
            raise AssertionError("not a repeated run")
    # Both kinds of run: small alphabets (ids recur within the run) and ids from the whole vocabulary.
    assert min(alphabet_sizes) < 0.5 and max(alphabet_sizes) > 0.9


@pytest.mark.unit
def test_span_repeats_weigh_only_the_repeat_when_asked(tokenizer):
    mix = ExampleMix(fim=0.0, copy=0.0, edit=0.0, random_repeat=0.0, span_repeat=1.0)
    maker = ExampleMaker(tokenizer, mix, random.Random(2), source_weight=0.0)
    chunk_ids = tokenizer.encode(CHUNK).ids
    for _ in range(20):
        ids, weights = maker.weighted(CHUNK)
        size = (len(ids) - 1) // 2
        span = ids[:size]
        assert 8 <= size <= 48 and ids[size : 2 * size] == span and ids[-1] == tokenizer.token_to_id("<|endoftext|>")
        assert any(chunk_ids[i : i + size] == span for i in range(len(chunk_ids)))  # a span of the chunk
        assert weights == [0.0] * size + [1.0] * size + [0.0]  # the end of text: our choice, not learnt
    with pytest.raises(ValueError):
        ExampleMix(fim=0.5, copy=0.3, span_repeat=0.3)


@pytest.mark.unit
def test_fim_prompts_are_the_servers_prompt_for_a_file_without_its_next_line():
    """Each FIM cut: the server's PSM prompt (budgets in tokens) with the cursor at the end of a line and
    the next line (the expected answer) missing; before and after it, the file's own text."""
    from bench.workloads import fim_prompts
    from decoding.weights.loading import load_tokenizer

    hf_tokenizer = load_tokenizer(str(TARGET_DIR), local_only=True)
    special = hf_tokenizer.get_added_vocab()
    text = "".join(f"def step_{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(400))
    pairs = fim_prompts([text], hf_tokenizer, 12, random.Random(0), prefix_tokens=200, suffix_tokens=60)
    assert len(pairs) == 12
    for prompt, missing in pairs:
        assert prompt[0] == special["<|fim_prefix|>"] and prompt[-1] == special["<|fim_middle|>"]
        cut = prompt.index(special["<|fim_suffix|>"])
        prefix_ids, suffix_ids = prompt[1:cut], prompt[cut + 1:-1]
        assert len(prefix_ids) <= 200 and 0 < len(suffix_ids) <= 60
        prefix, suffix = hf_tokenizer.decode(prefix_ids), hf_tokenizer.decode(suffix_ids)
        assert missing.strip() and suffix.startswith("\n")
        at = text.find(prefix + "\n" + missing + suffix)
        assert at == 0 or (at > 0 and text[at - 1] == "\n")  # the kept prefix starts at a line start


@pytest.mark.e2e
def test_eval_models_quick_json_has_the_promised_figures():
    done = subprocess.run([sys.executable, "-m", "lsp_server.cli", "eval", "models", "--quick", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    for key in ("copy_score", "edit_score", "fim_exact_match", "target_loss", "draft_loss", "draft_acceptance"):
        assert isinstance(result[key], float), key
    for key in ("copy_score", "edit_score", "fim_exact_match", "draft_acceptance", "induction_score"):
        assert 0.0 <= result[key] <= 1.0
    assert result["target_loss"] > 0 and result["draft_loss"] > 0
    assert result["samples"]["copy"] > 0 and result["samples"]["edit"] > 0 and result["samples"]["fim"] == 20
    assert result["timing_ms"]["target_step_ms"] > 0


@pytest.mark.model
@pytest.mark.parametrize("heads,kv_heads,head", [(2, 1, 0), (6, 2, 4)])
def test_previous_token_head_attends_to_the_previous_token(heads, kv_heads, head):
    """The built head puts nearly all its attention one position back, whatever the tokens; the
    untouched heads of the same layer do not (the check can fail)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.induction import install_previous_token_head

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32 * heads, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, attn_implementation="eager")
    model = Qwen2ForCausalLM(config).eval()
    install_previous_token_head(model, head=head)
    ids = torch.randint(0, 64, (2, 300))
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions[0]  # (B, H, T, T)
    rows = torch.arange(1, 300)
    on_previous = attentions[:, :, rows, rows - 1].mean(dim=(0, 2))  # (H,)
    assert on_previous[head] > 0.99
    others = [h for h in range(heads) if h != head]
    assert on_previous[others].max() < 0.5


@pytest.mark.model
def test_previous_token_head_rejects_bad_arguments():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.induction import install_previous_token_head

    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ValueError):
        install_previous_token_head(model, head=2)
    with pytest.raises(ValueError):
        install_previous_token_head(model, pairs=17)
    with pytest.raises(ValueError):
        install_previous_token_head(model, distance=0)


@pytest.mark.model
def test_heads_built_for_distances_one_to_three_share_a_key_and_look_that_far_back():
    """Three query heads of one key/value group, built for distances 1, 2 and 3, each put nearly all
    their attention that many positions back (checked against every distance, so a head looking at
    the wrong one fails)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.induction import install_previous_token_head

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=192, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=6, num_key_value_heads=2, attn_implementation="eager")
    model = Qwen2ForCausalLM(config).eval()
    for head, distance in ((0, 1), (1, 2), (2, 3)):
        install_previous_token_head(model, head=head, distance=distance)
    ids = torch.randint(0, 64, (2, 300))
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions[0]  # (B, H, T, T)
    rows = torch.arange(3, 300)
    for head in range(3):
        by_distance = [attentions[:, head, rows, rows - d].mean().item() for d in range(4)]
        assert by_distance[head + 1] > 0.99, (head, by_distance)


class _LookupModel(torch.nn.Module):
    """Predicts, at each position, the token that followed the previous occurrence of the current
    token (a perfect one-token induction rule), or with ``shift`` the current token itself; with
    ``copies_below`` it copies only ids below that and predicts id 0 instead of the others."""

    def __init__(self, vocab_size: int, shift: bool = False, copies_below: int | None = None):
        super().__init__()
        self.vocab_size, self.shift, self.copies_below = vocab_size, shift, copies_below
        self.device = torch.device("cpu")

    def forward(self, input_ids):
        rows = []
        for row in input_ids.tolist():
            seen, predicted = {}, []
            for position, token in enumerate(row):
                follower = row[seen[token] + 1] if token in seen else 0
                if self.copies_below is not None and follower >= self.copies_below:
                    follower = 0
                predicted.append(token if self.shift else follower)
                seen[token] = position
            rows.append(predicted)
        logits = torch.nn.functional.one_hot(torch.tensor(rows), self.vocab_size).float()  # (B, T, V)
        return SimpleNamespace(logits=logits)


@pytest.mark.unit
def test_induction_score_separates_a_copier_from_a_non_copier():
    from transformers import AutoTokenizer

    from training.evaluate import induction_score

    tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR)
    vocab = len(tokenizer)
    # Random runs of 64 ids rarely repeat an id, so the one-token rule copies nearly every position.
    assert induction_score(_LookupModel(vocab), tokenizer, runs=4, length=64, seed=0) > 0.9
    assert induction_score(_LookupModel(vocab, shift=True), tokenizer, runs=4, length=64, seed=0) < 0.05


@pytest.mark.unit
def test_induction_by_id_quarter_finds_a_copier_that_fails_on_rare_ids():
    from transformers import AutoTokenizer

    from training.evaluate import induction_by_id_quarter, induction_score

    tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR)
    vocab = len(tokenizer)
    half_copier = _LookupModel(vocab, copies_below=vocab // 2)
    quarters = induction_by_id_quarter(half_copier, tokenizer, runs=8, length=64, seed=0)
    assert min(quarters[:2]) > 0.9 and max(quarters[2:]) == 0.0, quarters
    assert 0.4 < induction_score(half_copier, tokenizer, runs=8, length=64, seed=0) < 0.6
    assert min(induction_by_id_quarter(_LookupModel(vocab), tokenizer, runs=8, length=64, seed=0)) > 0.9
