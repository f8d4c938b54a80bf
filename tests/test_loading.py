"""Model loading: the starter pair, clear errors, and refusing a draft with another vocabulary (docs/cases.md D8)."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.errors import ModelLoadError
from decoding.weights.loading import check_draft_compatible, load_model
from decoding.weights.model_names import model_location
from decoding.weights.starter import TARGET_DIR
from tests.conftest import tiny_model


def save_tiny(path, tokenizer, vocab_size):
    model = tiny_model(seed=3, vocab_size=vocab_size)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def other_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(["def main():\n    return 1\n"] * 50, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


@pytest.mark.model
def test_starter_pair_loads_on_cpu_and_is_compatible():
    """dtype auto on a CPU: bf16 where the CPU has it natively, else fp32; fp32 when asked."""
    from decoding.weights.loading import cpu_has_native_bf16

    target, draft = load_model("starter", device="cpu"), load_model("starter-draft", device="cpu")
    expected = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    assert target.model.dtype == expected == draft.model.dtype and target.model.device.type == "cpu"
    assert load_model("starter", device="cpu", dtype="float32").model.dtype == torch.float32
    assert not target.model.training
    check_draft_compatible(target, draft)
    params = sum(p.numel() for p in target.model.parameters())
    draft_params = sum(p.numel() for p in draft.model.parameters())
    assert 10e6 <= params <= 20e6 and 1e6 <= draft_params <= 2e6


@pytest.mark.model
def test_starter_tokenizer_encodes_as_in_training():
    """The starter's tokenizer.json, not Qwen2Tokenizer's pre-tokenizer that transformers 5 picks for any
    qwen2 model: it splits a newline from its indentation and digits one by one, token sequences the
    pair never saw in training."""
    text = "class A(B):\n    def f(self):\n        return 12\n"
    training_tokenizer = Tokenizer.from_file(str(TARGET_DIR / "tokenizer.json"))
    trained = training_tokenizer.encode(text).ids
    served = load_model("starter", device="cpu").tokenizer.encode(text, add_special_tokens=False)
    assert served == trained
    pieces = [training_tokenizer.decode([i]) for i in trained]
    assert "\n   " in pieces and " 12" in pieces  # what the other pre-tokenizer splits


@pytest.mark.model
def test_draft_with_other_vocabulary_is_refused_naming_both(tmp_path):
    target = load_model("starter", device="cpu")
    tokenizer = other_tokenizer()
    path = save_tiny(tmp_path / "odd-draft", tokenizer, len(tokenizer))
    draft = load_model(path, device="cpu")
    with pytest.raises(ModelLoadError) as error:
        check_draft_compatible(target, draft)
    assert "odd-draft" in str(error.value) and "starter" in str(error.value)
    with pytest.raises(ModelLoadError, match="vocabulary"):
        Engine.load(EngineConfig(model="starter", draft_model=path, device="cpu"))


@pytest.mark.model
def test_same_tokenizer_with_padded_embedding_is_accepted(tmp_path):
    target = load_model("starter", device="cpu")
    path = save_tiny(tmp_path / "padded-draft", target.tokenizer, len(target.tokenizer) + 64)
    draft = load_model(path, device="cpu")
    check_draft_compatible(target, draft)  # the Qwen2.5-Coder 0.5B/7B situation
    engine = Engine(EngineConfig(model="starter", draft_model=path, device="cpu"), target, draft)
    assert engine.model_drafter.target_vocab_size == target.vocab_size


@pytest.mark.unit
def test_missing_and_invalid_model_directories(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path / "empty"))


@pytest.mark.unit
def test_local_directories_never_touch_the_network():
    assert model_location("starter") == (str(TARGET_DIR), True)
    assert model_location(str(TARGET_DIR))[1] is True
    assert model_location("Qwen/Qwen2.5-Coder-7B") == ("Qwen/Qwen2.5-Coder-7B", False)


@pytest.mark.unit
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, tmp_path):
    """The flags line decides: avx512_bf16 or amx_bf16 mean native bf16; other flags or no file do not."""
    import builtins

    from decoding.weights import loading

    real_open = builtins.open
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path, *a, **k))
    for flags, expected in (("fpu avx2 avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True),
                            ("fpu avx2 avx512f", False), (None, False)):
        if flags is None:
            info.unlink()
        else:
            info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert loading.cpu_has_native_bf16() is expected, flags
