"""Loading a model stored in bfloat16 to run as float32 ``fp16-weights`` without holding it in float32
(decoding/weights/fp16_weights.py ``narrow_load_dtype``), and the embedding table read from the checkpoint
file in place (decoding/weights/mapped_embedding.py): the same model as loading float32 and packing."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from decoding.weights import fp16_weights, loading
from decoding.weights.fp16_weights import Fp16WeightLinear
from decoding.weights.mapped_embedding import MappedEmbedding, checkpoint_tensor, map_input_embedding
from tests.conftest import tiny_model
from tests.test_loading import other_tokenizer

pytestmark = [pytest.mark.model,
              pytest.mark.skipif(not fp16_weights.available(), reason="this torch has no fbgemm float16 product")]

VOCAB = 300


def _save_bf16(path) -> str:
    """A tiny model whose weights are bfloat16 values, saved in bfloat16 with a tokenizer (as the packs are)."""
    model = tiny_model(seed=5, vocab_size=VOCAB, hidden=64).to(torch.bfloat16)
    model.save_pretrained(path)
    other_tokenizer().save_pretrained(path)
    return str(path)


def _logits(loaded, ids) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model(torch.tensor([ids])).logits


def test_a_bfloat16_checkpoint_loads_narrow_into_the_model_the_float32_load_makes(tmp_path, monkeypatch):
    path = _save_bf16(tmp_path / "m")
    ids = list(range(3, 60, 3))
    narrow = loading.load_model(path, device="cpu", dtype="float32", quantization="fp16-weights")
    assert isinstance(narrow.model.get_input_embeddings(), MappedEmbedding)
    assert any(isinstance(m, Fp16WeightLinear) for m in narrow.model.modules())
    assert {p.dtype for p in narrow.model.parameters()} == {torch.float32}
    monkeypatch.setattr(loading, "narrow_load_dtype", lambda stored, run, device: run)  # the float32 load
    monkeypatch.setattr(loading, "map_input_embedding", lambda model, directory: False)
    wide = loading.load_model(path, device="cpu", dtype="float32", quantization="fp16-weights")
    assert not isinstance(wide.model.get_input_embeddings(), MappedEmbedding)
    assert torch.equal(_logits(narrow, ids), _logits(wide, ids))
    # the check can fail: norms left in bfloat16 (no widening) compute another model
    monkeypatch.setattr(fp16_weights, "widen_to_float32", lambda model: 0)
    monkeypatch.setattr(loading, "narrow_load_dtype", fp16_weights.narrow_load_dtype)
    unwidened = loading.load_model(path, device="cpu", dtype="float32", quantization="fp16-weights")
    assert torch.bfloat16 in {p.dtype for p in unwidened.model.parameters()}


def test_a_checkpoint_that_float16_would_round_loads_narrow_and_stays_float32_under_auto(tmp_path, measured_here):
    path = _save_bf16(tmp_path / "m")  # random bfloat16 weights: some are too small for float16
    loaded = loading.load_model(path, device="cpu", dtype="float32", quantization="auto")
    assert loaded.quantization == "none"
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    assert not any(isinstance(m, Fp16WeightLinear) for m in loaded.model.modules())


def test_the_mapped_table_holds_the_stored_rows_and_a_changed_file_is_not_mapped(tmp_path):
    path = _save_bf16(tmp_path / "m")
    stored = checkpoint_tensor(path, "model.embed_tokens.weight")
    model = tiny_model(seed=5, vocab_size=VOCAB, hidden=64).to(torch.bfloat16)
    assert stored.dtype == torch.bfloat16 and torch.equal(stored, model.model.embed_tokens.weight.detach())
    assert checkpoint_tensor(path, "no.such.weight") is None and checkpoint_tensor(tmp_path, "x") is None
    ids = torch.tensor([[0, 7, VOCAB - 1]])
    expected = model.model.embed_tokens(ids).to(torch.float32)
    assert map_input_embedding(model, path)
    out = model.get_input_embeddings()(ids)
    assert out.dtype == torch.float32 and torch.equal(out, expected)
    other = tiny_model(seed=6, vocab_size=VOCAB, hidden=64).to(torch.bfloat16)  # not the file's weights
    assert not map_input_embedding(other, path)
    assert isinstance(other.get_input_embeddings(), torch.nn.Embedding)
    tensors = {"model.embed_tokens.weight": torch.zeros(4, 2, dtype=torch.int32)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    assert checkpoint_tensor(tmp_path, "model.embed_tokens.weight") is None  # not a float table
