"""``quantization: auto`` (decoding/choices/auto.py): int8-hybrid where this CPU's int8 kernel is faster for a
one-token pass in most of the linear weights, measured once per machine and kept in the one cache file of
measured figures (or pinned); bfloat16 else. The float32 side (fp16-weights): tests/test_fp16_weights.py."""

from __future__ import annotations

import json

import pytest
import torch

from decoding.choices import auto
from decoding.choices.figures import FIGURES_VERSION, PIN_VARIABLE
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

    monkeypatch.setattr(auto, "fastest_low_bit_bound", bound)
    return measured


def test_int8_faster_here_picks_int8_hybrid_once_and_keeps_the_choice(measured_here, monkeypatch):
    tmp_path = measured_here  # the cache directory
    measured = _timed_bounds(monkeypatch, lambda layer: 4)
    quantization, bounds, reason = auto.choose_quantization(_bf16_model(), "tiny")
    assert quantization == "int8-hybrid" and set(bounds.values()) == {4} and "100%" in reason
    assert sorted(set(measured)) == sorted(bounds) and len(measured) == len(bounds)  # one layer per shape
    kept = json.loads((tmp_path / "measured.json").read_text())
    assert kept["version"] == FIGURES_VERSION and len(kept["low_bit_bounds"]) == 1
    assert set(next(iter(kept["low_bit_bounds"].values())).values()) == {4}
    measured.clear()
    assert auto.choose_quantization(_bf16_model(), "tiny")[:2] == (quantization, bounds)
    assert measured == []  # read back, not measured again


def test_int8_faster_only_in_a_small_share_of_the_weights_keeps_bfloat16(measured_here, monkeypatch):
    _timed_bounds(monkeypatch, lambda layer: 2 if layer.out_features == 64 else 0)  # the k/v projections only
    quantization, bounds, reason = auto.choose_quantization(_bf16_model(), "tiny")
    assert (quantization, bounds) == ("none", {}) and "keeps torch.bfloat16 weights" in reason


def test_auto_keeps_float32_weights_that_float16_would_round_and_measures_nothing(measured_here, monkeypatch):
    """Random float32 weights are not float16 values: fp16-weights would be another model (tests/test_fp16_weights.py)."""
    measured = _timed_bounds(monkeypatch, lambda layer: 4)
    assert auto.choose_quantization(tiny_model(seed=0, hidden=128), "tiny")[0] == "none"
    assert measured == [] and not (measured_here / "measured.json").exists()


@pytest.mark.parametrize(("pinned", "expected"), [({"*": 0}, "none"), ({"*": 2}, "int8-hybrid"),
                                                    ({"128x128": 4, "*": 0}, "none")])
def test_pinned_bounds_decide_without_measuring(measured_here, monkeypatch, pinned, expected):
    """A pinned ``*`` shape stands for every shape the pin does not name; nothing is measured or kept."""
    pin = measured_here / "pin.json"
    pin.write_text(json.dumps({"low_bit_bounds": {"tiny": pinned}}))
    monkeypatch.setenv(PIN_VARIABLE, str(pin))
    measured = _timed_bounds(monkeypatch, lambda layer: 4)
    quantization, bounds, _ = auto.choose_quantization(_bf16_model(), "tiny")
    assert quantization == expected and measured == [] and not (measured_here / "measured.json").exists()
    assert quantization == "none" or set(bounds.values()) == {2}


def test_the_engine_loads_what_auto_chose_with_its_bounds(measured_here, monkeypatch):
    """The starter pair in bfloat16 through Engine.load with quantization auto: every layer the int8
    kernel takes is a HybridInt8Linear with the chosen bound, and the loaded model says so."""
    _timed_bounds(monkeypatch, lambda layer: 2)
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="bfloat16",
                                      quantization="auto"))
    assert engine.config.quantization == "auto"
    for loaded in (engine.target, engine.draft):
        layers = [m for m in loaded.model.modules() if isinstance(m, HybridInt8Linear)]
        assert loaded.quantization == "int8-hybrid" and layers
        assert {layer.max_low_bit_tokens for layer in layers} == {2}
