"""``quantization: fp16-weights`` (decoding/weights/fp16_weights.py) and the choice ``auto`` makes of it for
float32 models (decoding/choices/float32_weights.py): float16 weights packed for fbgemm, float32
activations; chosen only where the weights are float16 values (the same model) and measured faster."""

from __future__ import annotations

import json

import pytest
import torch

from decoding.choices import auto, float32_weights
from decoding.choices.figures import PIN_VARIABLE
from decoding.engine import Engine
from decoding.errors import ModelLoadError
from decoding.types import EngineConfig, GenerationConfig
from decoding.weights import fp16_weights
from decoding.weights.fp16_weights import Fp16WeightLinear
from decoding.weights.loading import load_model
from decoding.weights.quantization import quantize_weights, quantized_linear_count
from tests.conftest import tiny_model
from tests.test_quantization import assert_speculative_equals_plain

pytestmark = [pytest.mark.model,
              pytest.mark.skipif(not fp16_weights.available(), reason="this torch has no fbgemm float16 product")]


def _fp16_valued(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every parameter rounded to a float16 value (kept in float32): as the packs' weights are."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.float16).to(torch.float32))
    return model


def test_the_packed_layer_computes_the_float32_product_of_its_float16_weights():
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40, bias=True)
    x = torch.randn(2, 5, 96)
    rounded = linear.weight.detach().to(torch.float16).to(torch.float32)
    expected = torch.nn.functional.linear(x, rounded, linear.bias.detach())
    packed = Fp16WeightLinear(linear)
    out = packed(x)
    assert out.shape == (2, 5, 40) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(packed.weight, rounded)  # what a reader of .weight sees: the weights it multiplies by
    # against the unrounded weights the error is float16's, far above float32 rounding: the check can fail
    assert (out - torch.nn.functional.linear(x, linear.weight.detach(), linear.bias.detach())).abs().max() > 1e-4


@pytest.mark.parametrize("make", [lambda: torch.nn.Linear(8, 8).to(torch.float64),
                                  lambda: _with_weight(torch.nn.Linear(8, 8), 1e5)])
def test_a_weight_float16_cannot_take_is_refused(make):
    with pytest.raises(ValueError):
        Fp16WeightLinear(make())


def _with_weight(linear: torch.nn.Linear, value: float) -> torch.nn.Linear:
    with torch.no_grad():
        linear.weight.fill_(value)
    return linear


def test_the_float16_table_returns_the_float32_rows_of_float16_values():
    embedding = torch.nn.Embedding(20, 8)
    ids = torch.tensor([[3, 0, 19]])
    out = fp16_weights.Fp16Embedding(embedding)(ids)
    assert out.dtype == torch.float32
    assert torch.equal(out, embedding(ids).to(torch.float16).to(torch.float32))
    assert not torch.equal(out, embedding(ids))  # random float32 values are rounded: the comparison can fail


def test_quantize_packs_every_linear_layer_widens_a_narrow_model_and_refuses_float64():
    model = tiny_model(seed=0, hidden=64)
    quantize_weights(model, "fp16-weights", "tiny")
    hybrids, linears = quantized_linear_count(model)
    assert hybrids == linears > 0
    assert not any(isinstance(m, (torch.nn.Linear, torch.nn.Embedding)) for m in model.modules())
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the table is a float16 buffer
    narrow = tiny_model(seed=0, hidden=64).to(torch.bfloat16)  # loaded as stored, to run in float32
    quantize_weights(narrow, "fp16-weights", "tiny")
    assert {p.dtype for p in narrow.parameters()} == {torch.float32} and narrow.config.dtype == torch.float32
    with pytest.raises(ModelLoadError, match="float32 models"):
        quantize_weights(tiny_model(seed=0, hidden=64).to(torch.float64), "fp16-weights", "tiny")


@pytest.mark.parametrize("mode", ["ngram", "model"])
def test_speculative_greedy_equals_plain_greedy_of_the_fp16_weight_model(mode):
    """The starter pair in float32, packed: plain decoding runs one-token passes, the verify passes five
    tokens each, both through fbgemm's float16-weight product."""
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32",
                                      quantization="fp16-weights"))
    assert engine.target.quantization == "fp16-weights"
    assert any(isinstance(m, Fp16WeightLinear) for m in engine.target.model.modules())
    assert_speculative_equals_plain(engine, mode)


def test_generating_never_reads_a_packed_weight(monkeypatch):
    """``.weight`` of a packed layer unpacks the whole matrix (hundreds of MB for a vocabulary layer): a
    request that read it would wait on it. A healed, speculative generation through the engine reads none."""
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32",
                                      quantization="fp16-weights"))

    def unpack(layer):
        raise AssertionError("a packed weight was read")

    monkeypatch.setattr(Fp16WeightLinear, "weight", property(unpack))
    monkeypatch.setattr(fp16_weights.Fp16Embedding, "weight", property(unpack))
    prompt = engine.tokenizer.encode("def area(width, height):\n    return wid")
    config = GenerationConfig(max_new_tokens=8, required_prefix="th", stop_token_ids=frozenset())
    assert engine.generate(prompt, config, "ngram").token_ids


def test_exact_in_fp16_counts_the_weights_float16_would_round():
    model = tiny_model(seed=0, hidden=64)
    rounded, total = float32_weights.exact_in_fp16(model)
    assert total > 0 and rounded > total // 2  # random float32 weights: most are not float16 values
    assert float32_weights.exact_in_fp16(_fp16_valued(model)) == (0, total)


def _pin(measured_here, monkeypatch, speedups: dict, int8_bound: int = 0) -> None:
    """Pin the float16-weight speedups, and int8-fp16-hybrid's bound for every shape (0: int8 never faster)."""
    pin = measured_here / "pin.json"
    pin.write_text(json.dumps({"fp16_speedup": {"tiny": speedups}, "low_bit_bounds": {"tiny": {"*": int8_bound}}}))
    monkeypatch.setenv(PIN_VARIABLE, str(pin))


@pytest.mark.parametrize(("speedups", "expected"), [({"1": 2.0, "128": 1.2}, "fp16-weights"),
                                                    ({"1": 1.05, "128": 1.2}, "none"),
                                                    ({"1": 2.0, "128": 0.8}, "none")])
def test_auto_packs_float16_valued_weights_only_where_measured_faster(measured_here, monkeypatch, speedups, expected):
    _pin(measured_here, monkeypatch, speedups)
    quantization, bounds, reason = auto.choose_quantization(_fp16_valued(tiny_model(seed=0, hidden=64)), "tiny")
    assert (quantization, bounds) == (expected, {})
    assert f"{speedups['1']:.2f}x" in reason


def test_auto_never_packs_weights_float16_would_round(measured_here, monkeypatch):
    _pin(measured_here, monkeypatch, {"1": 9.0, "128": 9.0})
    quantization, _, reason = auto.choose_quantization(tiny_model(seed=0, hidden=64), "tiny")
    assert quantization == "none" and "would round" in reason


def test_the_speedups_are_measured_once_and_kept(measured_here, monkeypatch):
    calls = []

    def measure(linear):
        calls.append((linear.out_features, linear.in_features))
        return {"1": 3.0, "128": 1.5}

    monkeypatch.setattr(float32_weights, "measure_speedups", measure)
    monkeypatch.setattr(float32_weights, "fastest_low_bit_bound", lambda layer: 0)
    model = _fp16_valued(tiny_model(seed=0, hidden=64))
    assert auto.choose_quantization(model, "tiny")[0] == "fp16-weights"
    assert len(calls) == 1  # one layer (the widest of a block), once
    kept = json.loads((measured_here / "measured.json").read_text())["fp16_speedup"]
    assert list(kept.values()) == [{"1": 3.0, "128": 1.5}]
    assert auto.choose_quantization(model, "tiny")[0] == "fp16-weights" and len(calls) == 1


def test_measure_speedups_times_both_products():
    ratios = float32_weights.measure_speedups(torch.nn.Linear(256, 512))
    assert set(ratios) == {"1", "128"} and all(r > 0 for r in ratios.values())


def test_auto_adds_int8_to_the_float16_weights_where_its_kernel_is_faster_for_one_token(measured_here, monkeypatch):
    model = _fp16_valued(tiny_model(seed=0, hidden=64))
    _pin(measured_here, monkeypatch, {"1": 2.0, "128": 1.2}, int8_bound=4)
    quantization, bounds, reason = auto.choose_quantization(model, "tiny")
    output = model.get_output_embeddings()
    shapes = {(m.out_features, m.in_features) for m in model.modules()
              if isinstance(m, torch.nn.Linear) and m is not output}
    assert quantization == "int8-fp16-hybrid" and bounds == {shape: 4 for shape in shapes}
    assert (output.out_features, output.in_features) not in bounds  # the logits stay float16 weights
    assert "int8-fp16-hybrid" in reason and "2.00x" in reason
    _pin(measured_here, monkeypatch, {"1": 2.0, "128": 1.2}, int8_bound=0)
    assert auto.choose_quantization(model, "tiny")[:2] == ("fp16-weights", {})


def test_int8_fp16_bounds_are_measured_once_per_shape_and_kept(measured_here, monkeypatch):
    calls = []

    def bound(layer):
        calls.append((layer.out_features, layer.in_features))
        return 8

    monkeypatch.setattr(float32_weights, "fastest_low_bit_bound", bound)
    model = _fp16_valued(tiny_model(seed=0, hidden=64))
    first = float32_weights.int8_bounds(model, "tiny")
    assert len(calls) == len(set(calls)) == len(first) > 0 and set(first.values()) == {8}
    assert float32_weights.int8_bounds(model, "tiny") == first and len(calls) == len(first)  # read back, not measured


def test_a_named_int8_fp16_hybrid_runs_the_kept_bounds_not_a_new_measurement(measured_here, monkeypatch):
    from decoding.weights.int8_fp16_hybrid import HybridInt8Fp16Linear

    pin = measured_here / "pin.json"
    pin.write_text(json.dumps({"low_bit_bounds": {"starter": {"*": 2}}}))
    monkeypatch.setenv(PIN_VARIABLE, str(pin))
    for where in ("decoding.weights.hybrid_linear", "decoding.choices.float32_weights"):
        monkeypatch.setattr(f"{where}.fastest_low_bit_bound", lambda layer: pytest.fail("measured anew"))
    model = load_model("starter", device="cpu", dtype="float32", quantization="int8-fp16-hybrid").model
    layers = [m for m in model.modules() if isinstance(m, HybridInt8Fp16Linear)]
    assert layers and {m.max_low_bit_tokens for m in layers} == {2}
