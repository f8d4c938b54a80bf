"""``quantization: auto`` (decoding/weights/weight_choice.py): int8-hybrid where this CPU's int8 kernel is faster
for a one-token pass in most of the linear weights, measured once per machine and kept; bfloat16 else."""

from __future__ import annotations

import json

import pytest
import torch

from decoding.weights import weight_choice
from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.weights.int8_hybrid import HybridInt8Linear
from tests.conftest import tiny_model

pytestmark = pytest.mark.model


def _bf16_model():
    return tiny_model(seed=0, hidden=128).to(torch.bfloat16)  # widths 128 and 256: int8-hybrid fits every layer


def _timed_bounds(monkeypatch, bound_of):
    """Replace the measurement: ``bound_of(layer)`` is the bound; returns the list of measured shapes."""
    measured = []

    def bound(layer):
        measured.append((layer.out_features, layer.in_features))
        return bound_of(layer)

    monkeypatch.setattr(weight_choice, "fastest_low_bit_bound", bound)
    return measured


def test_int8_faster_here_picks_int8_hybrid_once_and_keeps_the_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    measured = _timed_bounds(monkeypatch, lambda layer: 4)
    quantization, bounds, reason = weight_choice.choose_quantization(_bf16_model(), "tiny")
    assert quantization == "int8-hybrid" and set(bounds.values()) == {4} and "100%" in reason
    assert sorted(set(measured)) == sorted(bounds) and len(measured) == len(bounds)  # one layer per shape
    kept = json.loads((tmp_path / "weight-choice.json").read_text())
    assert len(kept) == 1 and set(next(iter(kept.values())).values()) == {4}
    measured.clear()
    assert weight_choice.choose_quantization(_bf16_model(), "tiny")[:2] == (quantization, bounds)
    assert measured == []  # read back, not measured again


def test_int8_faster_only_in_a_small_share_of_the_weights_keeps_bfloat16(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    _timed_bounds(monkeypatch, lambda layer: 2 if layer.out_features == 64 else 0)  # the k/v projections only
    quantization, bounds, reason = weight_choice.choose_quantization(_bf16_model(), "tiny")
    assert (quantization, bounds) == ("none", {}) and "keeps torch.bfloat16 weights" in reason


def test_auto_keeps_float32_weights_and_measures_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    measured = _timed_bounds(monkeypatch, lambda layer: 4)
    assert weight_choice.choose_quantization(tiny_model(seed=0, hidden=128), "tiny")[0] == "none"
    assert measured == [] and not (tmp_path / "weight-choice.json").exists()


def test_the_engine_loads_what_auto_chose_with_its_bounds(tmp_path, monkeypatch):
    """The starter pair in bfloat16 through Engine.load with quantization auto: every layer the int8
    kernel takes is a HybridInt8Linear with the chosen bound, and the loaded model says so."""
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    _timed_bounds(monkeypatch, lambda layer: 2)
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="bfloat16",
                                      quantization="auto"))
    assert engine.config.quantization == "auto"
    for loaded in (engine.target, engine.draft):
        layers = [m for m in loaded.model.modules() if isinstance(m, HybridInt8Linear)]
        assert loaded.quantization == "int8-hybrid" and layers
        assert {layer.max_low_bit_tokens for layer in layers} == {2}
