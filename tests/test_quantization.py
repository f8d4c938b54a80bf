"""The ``quantization`` setting (decoding/weights/quantization.py): int8-hybrid and int4-hybrid weights.

On the starter pair in float32 (few near-ties), quantised on load: the linear layers really hold low-bit
weights and the logits move, and greedy speculative decoding (n-gram drafts and the quantised draft
model) equals plain greedy decoding of the same quantised target. Where quantisation cannot run, loading
fails with a ModelLoadError that says why. The torchao paths (``int8``, ``int4``) are gone.
"""

from __future__ import annotations

import sys

import pytest
import torch

from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.errors import ModelLoadError
from decoding.types import GenerationConfig
from decoding.weights.loading import load_model
from decoding.weights.quantization import quantize_weights, quantized_linear_count
from lsp_server.settings import Settings, parse_settings
from tests.conftest import tiny_model
from tests.greedy_check import assert_greedy_equal

pytestmark = pytest.mark.model

# Code with repeats, so that n-gram drafts are accepted; the continuation is the starter's own.
PROMPT_TEXT = ("def area(width, height):\n    return width * height\n\n\n"
               "def volume(width, height, depth):\n    return area(width, height) * depth\n\n\n"
               "def area_of_square(side):\n    return ")
NEW_TOKENS = 32


def assert_speculative_equals_plain(engine: Engine, mode: str) -> None:
    """Greedy speculative output with ``mode``'s drafter at a fixed k of 4 equals plain greedy output of
    ``engine``, and the drafts were accepted over several rounds."""
    prompt = engine.tokenizer.encode(PROMPT_TEXT)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=4, stop_token_ids=frozenset())
    engine.reset_caches()
    plain = engine.generate(prompt, config, "none")
    engine.reset_caches()
    (drafter,) = engine._drafters(mode, {})
    spec = engine.generator.generate(prompt, drafter, config)
    assert len(plain.token_ids) == NEW_TOKENS
    assert_greedy_equal(engine.target.model, prompt, spec.token_ids, plain.token_ids)
    assert 1 < spec.stats.target_passes < NEW_TOKENS, "drafts must be accepted over several rounds"


def test_unknown_quantization_is_a_load_error():
    with pytest.raises(ModelLoadError, match="unknown quantization 'int3'"):
        quantize_weights(tiny_model(seed=0), "int3", "tiny")


def test_quantization_off_the_cpu_is_a_load_error():
    model = tiny_model(seed=0, hidden=128).to("meta")
    with pytest.raises(ModelLoadError, match="CPU only.*'tiny' is on meta"):
        quantize_weights(model, "int8-hybrid", "tiny")


@pytest.mark.parametrize("removed", ["int8", "int4"])
def test_the_torchao_paths_are_gone(removed):
    """``int8`` and ``int4`` (torchao) are no longer offered: a load error, and the setting warns."""
    with pytest.raises(ModelLoadError, match=f"unknown quantization '{removed}'"):
        quantize_weights(tiny_model(seed=0, hidden=128), removed, "tiny")
    settings, warnings = parse_settings({"quantization": removed})
    assert settings.quantization == "auto" and any("speclsp.quantization" in w for w in warnings)


def test_setting_reaches_the_engine_config_and_bad_values_are_warned():
    assert Settings(quantization="int4-hybrid").engine_config().quantization == "int4-hybrid"
    assert Settings().engine_config().quantization == "auto"
    settings, warnings = parse_settings({"quantization": "int2"})
    assert settings.quantization == "auto" and any("speclsp.quantization" in w for w in warnings)


# --- int8-hybrid and int4-hybrid: low-bit weights for short passes, the same weights dequantised for long ones

@pytest.fixture(scope="module", params=["int8-hybrid", "int4-hybrid"])
def hybrid_engine(request) -> Engine:
    config = EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32",
                          quantization=request.param)
    return Engine.load(config)


def _hybrid_layers(model):
    from decoding.weights.hybrid_linear import HybridLinear

    return [m for m in model.modules() if isinstance(m, HybridLinear)]


def test_hybrid_layers_run_low_bit_up_to_their_bound_and_the_dequantised_weights_after_it(hybrid_engine):
    layers = _hybrid_layers(hybrid_engine.target.model)
    assert layers and not any(isinstance(m, torch.nn.Linear) for m in hybrid_engine.target.model.modules())
    assert quantized_linear_count(hybrid_engine.target.model) == (len(layers), len(layers))
    layer = layers[0]
    assert layer.max_low_bit_tokens in (0, 1, 2, 4, 8, 16, 32)
    layer_bound, layer.max_low_bit_tokens = layer.max_low_bit_tokens, 4
    try:
        short, long = torch.randn(1, 4, layer.in_features), torch.randn(1, 5, layer.in_features)
        with torch.inference_mode():
            assert torch.equal(layer(short), layer.low_bit(short))
            assert torch.equal(layer(long), torch.nn.functional.linear(long, layer.dense, layer.bias))
            # one set of weights: the dense copy is the low-bit kernel's own weights (float32: up to the sum order) ...
            by_low_bit = layer.low_bit(long)
            assert torch.allclose(torch.nn.functional.linear(long, layer.dense, layer.bias), by_low_bit,
                                  atol=1e-4, rtol=1e-4)
            # ... which the float weights it was made from are not
            original = load_model("starter", device="cpu", dtype="float32").model.model.layers[0].self_attn.q_proj
            assert layer.in_features == original.in_features
            assert not torch.allclose(torch.nn.functional.linear(long, original.weight, original.bias), by_low_bit,
                                      atol=1e-4, rtol=1e-4)
    finally:
        layer.max_low_bit_tokens = layer_bound


def test_int8_hybrid_weights_are_one_scale_per_row_and_the_kernel_reads_them():
    """The copy is the int8 values times the rounded scales exactly, a row keeps its largest weight, and
    the int8 kernel computes the copy's products: off the float32 product by about as much as bfloat16's
    own product of the copy (its rounding), and by far less than the weights before quantisation."""
    from decoding.weights.int8_hybrid import quantized

    torch.manual_seed(0)
    weight = torch.randn(512, 1536, dtype=torch.bfloat16) * 0.02
    qweight, scales, dense = quantized(weight)
    assert qweight.dtype == torch.int8 and scales.dtype == dense.dtype == torch.bfloat16
    assert torch.equal(dense, (qweight.float() * scales.float()[:, None]).to(torch.bfloat16))
    assert torch.equal(qweight.abs().amax(dim=1), torch.full((512,), 127, dtype=torch.int8))
    x = torch.randn(4, 1536, dtype=torch.bfloat16)
    with torch.inference_mode():
        exact = torch.nn.functional.linear(x.float(), dense.float())

        def error(product):  # relative root-mean-square error against the float32 product of the copy
            return float((product.float() - exact).pow(2).mean().sqrt() / exact.pow(2).mean().sqrt())

        by_kernel = error(torch.ops.aten._weight_int8pack_mm(x, qweight, scales))
        by_dense = error(torch.nn.functional.linear(x, dense))
        by_original = error(torch.nn.functional.linear(x, weight))
    assert 0 < by_kernel <= 2.5 * by_dense, (by_kernel, by_dense)
    assert by_original > 2 * by_kernel, (by_original, by_kernel)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_quantisation_leaves_the_weight_it_reads_as_it_was(dtype):
    """The starter's output layer shares its weight with the embedding: quantising it in place (as a float32
    weight's ``.float()`` is the weight itself) turned every prompt's embedding into garbage."""
    from decoding.weights.int8_hybrid import quantized

    weight = torch.randn(64, 128, dtype=dtype)
    before = weight.clone()
    quantized(weight)
    assert torch.equal(weight, before)


def test_int8_hybrid_leaves_widths_the_kernel_may_not_take_and_needs_no_torchao(monkeypatch):
    """Widths not a multiple of 16 crashed the int8 kernel's process in bfloat16; such a layer stays as it
    was. torchao is not imported for int8-hybrid (the kernel is PyTorch's)."""
    from decoding.weights.int8_hybrid import HybridInt8Linear

    monkeypatch.setitem(sys.modules, "torchao.quantization", None)
    model = tiny_model(seed=0, hidden=128)
    model.lm_head = torch.nn.Linear(128, 100, bias=False)  # fits: the input width is 128
    odd = torch.nn.Linear(100, 128)
    model.model.odd = odd
    quantize_weights(model, "int8-hybrid", "tiny")
    assert isinstance(model.lm_head, HybridInt8Linear) and model.model.odd is odd


def test_hybrid_int4_kernel_computes_with_the_dequantised_copy_and_needs_no_torchao(monkeypatch):
    """The packed int4 weights and the dense copy are one set of weights: fed the identity, the kernel
    gives back the copy (up to bfloat16's rounding of the output); each group of 128 input channels
    holds at most 16 values; torchao is not imported."""
    from decoding.weights.int4_hybrid import HybridInt4Linear

    monkeypatch.setitem(sys.modules, "torchao", None)
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 96, bias=False, dtype=torch.bfloat16)
    layer = HybridInt4Linear(linear)
    assert layer.dense.dtype == torch.bfloat16 and layer.packed.dtype == torch.uint8
    assert all(len(torch.unique(group)) <= 16 for group in layer.dense.float().reshape(96 * 2, 128))
    with torch.inference_mode():
        columns = layer.low_bit(torch.eye(256, dtype=torch.bfloat16)).T  # (96, 256): the weights the kernel holds
        assert torch.equal(columns, layer.dense)
        assert not torch.equal(layer.dense, linear.weight)  # they are not the weights it was made from
        x = torch.randn(1, 3, 256, dtype=torch.bfloat16)
        assert torch.allclose(layer.low_bit(x).float(), torch.nn.functional.linear(x.float(), layer.dense.float()),
                              atol=0.05, rtol=0.02)


def test_the_low_bit_bound_is_the_largest_size_where_the_low_bit_kernel_is_faster():
    from decoding.weights.hybrid_linear import fastest_low_bit_bound
    from decoding.weights.int8_hybrid import HybridInt8Linear

    layer = HybridInt8Linear(torch.nn.Linear(128, 32))
    for faster_up_to, expected in ((0, 0), (1, 1), (8, 8), (32, 32), (3, 2)):
        def timer(timed, tokens, low_bit, limit=faster_up_to):  # low-bit: 1 s up to the limit, else 3 s; dense: 2 s
            assert timed is layer
            return (1.0 if tokens <= limit else 3.0) if low_bit else 2.0

        assert fastest_low_bit_bound(layer, timer) == expected


@pytest.mark.parametrize("mode", ["ngram", "model"])
def test_speculative_greedy_equals_plain_greedy_of_the_hybrid_model(hybrid_engine, mode):
    """With int4 up to 2 tokens a pass, plain decoding runs the int4 kernel and the verify passes (up to 5
    tokens) the dense copy: both kernels meet in one comparison."""
    bounds = {}
    for loaded in (hybrid_engine.target, hybrid_engine.draft):
        for layer in _hybrid_layers(loaded.model):
            bounds[layer], layer.max_low_bit_tokens = layer.max_low_bit_tokens, 2
    try:
        assert_speculative_equals_plain(hybrid_engine, mode)
    finally:
        for layer, bound in bounds.items():
            layer.max_low_bit_tokens = bound


@pytest.mark.parametrize("quantization, hidden", [("int4-hybrid", 32), ("int8-hybrid", 24)])
def test_hybrid_refuses_a_model_with_no_layer_it_fits(quantization, hidden):
    model = tiny_model(seed=0, hidden=hidden)  # input widths hidden and 2 x hidden: none fits the format
    with pytest.raises(ModelLoadError, match=f"'{quantization}' fits none of model 'tiny'"):
        quantize_weights(model, quantization, "tiny")
