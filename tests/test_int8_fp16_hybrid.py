"""``quantization: int8-fp16-hybrid`` (decoding/weights/int8_fp16_hybrid.py): a float32 model's linear layers as
int8 weights with bfloat16 inputs for short passes and the same weights as float16 values for long ones."""

from __future__ import annotations

import pytest
import torch

from decoding.engine import Engine
from decoding.errors import ModelLoadError
from decoding.types import EngineConfig
from decoding.weights import fp16_weights
from decoding.weights.int8_fp16_hybrid import SCALE_BITS, HybridInt8Fp16Linear, exact_scales, quantized
from decoding.weights.quantization import quantize_weights, quantized_linear_count
from tests.conftest import tiny_model
from tests.test_quantization import assert_speculative_equals_plain

pytestmark = [pytest.mark.model,
              pytest.mark.skipif(not fp16_weights.available(), reason="this torch has no fbgemm float16 product")]


def test_every_dequantised_weight_is_a_float16_value_on_a_grid_at_most_an_eighth_coarser():
    torch.manual_seed(0)
    weight = torch.randn(300, 64) * torch.logspace(-6, 1, 300)[:, None]  # rows from tiny to large
    qweight, scales = quantized(weight)
    dequantised = qweight.float() * scales[:, None]
    assert torch.equal(dequantised.half().float(), dequantised)
    assert torch.equal(scales.bfloat16().float(), scales)  # the kernel's bfloat16 scales are the same
    wanted = weight.abs().amax(dim=1) / 127
    assert (scales >= wanted).all() and (scales[wanted > 2 ** -14] < wanted[wanted > 2 ** -14] * (1 + 2 ** (1 - SCALE_BITS))).all()
    assert ((weight - dequantised).abs() <= scales[:, None] / 2 + 1e-12).all()  # rounded to the nearest step
    plain = exact_scales(torch.tensor([127 * 1.1]))  # 1.1 rounds up to 4 significant bits: 1.125
    assert plain.item() == 1.125


def test_the_short_pass_is_the_int8_kernel_on_bfloat16_inputs_and_the_long_pass_the_same_weights_in_float32():
    torch.manual_seed(1)
    linear = torch.nn.Linear(128, 96)
    layer = HybridInt8Fp16Linear(linear)
    layer.max_low_bit_tokens = 4
    weights = layer.weight  # the dequantised float32 weights
    x = torch.randn(1, 3, 128)
    with torch.inference_mode():
        short, long = layer(x), layer(torch.cat([x] * 3, dim=1))
        reference = torch.nn.functional.linear(x, weights, layer.bias)
        by_bf16 = torch.nn.functional.linear(x.bfloat16().float(), weights) .bfloat16().float() + layer.bias
    assert short.dtype == long.dtype == torch.float32
    torch.testing.assert_close(long[:, :3], reference, rtol=1e-5, atol=1e-5)  # exact weights, float32 sums
    torch.testing.assert_close(short, by_bf16, rtol=2e-2, atol=2e-2)  # bfloat16 inputs and outputs
    assert not torch.equal(short, reference)  # the short pass did round through bfloat16


def test_quantize_replaces_the_linear_layers_widens_the_rest_and_refuses_a_bfloat16_run():
    model = tiny_model(seed=0, hidden=64).to(torch.bfloat16)  # loaded as stored, to run in float32
    quantize_weights(model, "int8-fp16-hybrid", "tiny")
    hybrids, linears = quantized_linear_count(model)
    assert hybrids == linears > 0 and any(isinstance(m, HybridInt8Fp16Linear) for m in model.modules())
    assert isinstance(model.get_output_embeddings(), fp16_weights.Fp16WeightLinear)  # float32 logits
    floating = {p.dtype for p in model.parameters() if p.is_floating_point()}
    assert floating == {torch.float32, torch.bfloat16}  # the bfloat16 ones: the int8 kernel's scales
    assert all(m.scales.dtype == torch.bfloat16 for m in model.modules() if isinstance(m, HybridInt8Fp16Linear))
    with pytest.raises(ModelLoadError, match="float32 model"):
        Engine.load(EngineConfig(model="starter", device="cpu", dtype="bfloat16", quantization="int8-fp16-hybrid"))


@pytest.mark.parametrize("mode", ["ngram", "model"])
def test_speculative_greedy_equals_plain_greedy_of_the_int8_fp16_hybrid_model(mode):
    """The starter pair in float32 as int8-fp16-hybrid: plain decoding's one-token passes and the verify
    passes of five tokens, each on whichever kernel the calibrated bound gives it."""
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32",
                                      quantization="int8-fp16-hybrid"))
    assert engine.target.quantization == "int8-fp16-hybrid"
    assert any(isinstance(m, HybridInt8Fp16Linear) for m in engine.target.model.modules())
    assert_speculative_equals_plain(engine, mode)
