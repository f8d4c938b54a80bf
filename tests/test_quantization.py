"""The ``quantization`` setting (decoding/quantization.py): int8 and int4 weights through torchao.

On the starter pair in float32 (few near-ties), quantised on load: the linear layers really hold
torchao's quantised tensors and the logits move, and greedy speculative decoding (n-gram drafts and the
quantised draft model) equals plain greedy decoding of the same quantised target. Where quantisation
cannot run, loading fails with a ModelLoadError that says why.
"""

from __future__ import annotations

import sys

import pytest
import torch

from decoding.engine import Engine, EngineConfig
from decoding.errors import ModelLoadError
from decoding.generate import GenerationConfig
from decoding.loading import load_model
from decoding.quantization import quantize_weights, quantized_linear_count
from lsp_server.settings import Settings, parse_settings
from tests.conftest import tiny_model
from tests.greedy_check import assert_greedy_equal

pytestmark = pytest.mark.model

# Code with repeats, so that n-gram drafts are accepted; the continuation is the starter's own.
PROMPT_TEXT = ("def area(width, height):\n    return width * height\n\n\n"
               "def volume(width, height, depth):\n    return area(width, height) * depth\n\n\n"
               "def area_of_square(side):\n    return ")
NEW_TOKENS = 32


@pytest.fixture(scope="module", params=["int8", "int4"])
def quantized_engine(request) -> Engine:
    config = EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32",
                          quantization=request.param)
    return Engine.load(config)


def test_every_linear_layer_of_target_and_draft_is_quantized(quantized_engine):
    from torchao.utils import TorchAOBaseTensor

    for loaded in (quantized_engine.target, quantized_engine.draft):
        linears = [m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)]
        assert linears and all(isinstance(m.weight, TorchAOBaseTensor) for m in linears), loaded.name
        assert quantized_linear_count(loaded.model) == (len(linears), len(linears))


def test_quantized_target_computes_other_logits_than_the_float_one(quantized_engine):
    plain = load_model("starter", device="cpu", dtype="float32").model
    ids = torch.tensor([quantized_engine.tokenizer.encode(PROMPT_TEXT)])
    with torch.inference_mode():
        quantized_logits = quantized_engine.target.model(input_ids=ids).logits.float()
        float_logits = plain(input_ids=ids).logits.float()
    assert torch.isfinite(quantized_logits).all()
    assert not torch.allclose(quantized_logits, float_logits, atol=1e-3), "the quantization setting was ignored"
    # Close enough to be the same model: the top token agrees at most positions.
    agree = (quantized_logits.argmax(-1) == float_logits.argmax(-1)).float().mean()
    assert agree > 0.6, f"quantized and float32 top tokens agree at only {float(agree):.0%} of positions"


@pytest.mark.parametrize("mode", ["ngram", "model"])
def test_speculative_greedy_equals_plain_greedy_of_the_quantized_model(quantized_engine, mode):
    """Each sub-drafter drafts every round (no draft-length policy: with measured costs it may rightly
    stop drafting on a slow quantised draft model, and then nothing would be verified)."""
    prompt = quantized_engine.tokenizer.encode(PROMPT_TEXT)
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=4, stop_token_ids=frozenset())
    quantized_engine.reset_caches()
    plain = quantized_engine.generate(prompt, config, "none")
    quantized_engine.reset_caches()
    (drafter,) = quantized_engine._drafters(mode, {})
    spec = quantized_engine.generator.generate(prompt, drafter, config)
    assert len(plain.token_ids) == NEW_TOKENS
    assert_greedy_equal(quantized_engine.target.model, prompt, spec.token_ids, plain.token_ids)
    assert 1 < spec.stats.target_passes < NEW_TOKENS, "drafts must be accepted over several rounds"


def test_unknown_quantization_is_a_load_error():
    with pytest.raises(ModelLoadError, match="unknown quantization 'int3'"):
        quantize_weights(tiny_model(seed=0), "int3", "tiny")


def test_quantization_off_the_cpu_is_a_load_error():
    model = tiny_model(seed=0, hidden=128).to("meta")
    with pytest.raises(ModelLoadError, match="CPU only.*'tiny' is on meta"):
        quantize_weights(model, "int8", "tiny")


def test_int4_refuses_a_model_with_no_layer_it_fits():
    model = tiny_model(seed=0, hidden=32)  # input widths 32 and 64: not multiples of the group size 128
    with pytest.raises(ModelLoadError, match="fits none of model 'tiny'"):
        quantize_weights(model, "int4", "tiny")


def test_missing_torchao_is_a_load_error_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # import fails as if not installed
    with pytest.raises(ModelLoadError, match=r"needs torchao.*speclsp\[quantization\]"):
        quantize_weights(tiny_model(seed=0), "int8", "tiny")


def test_setting_reaches_the_engine_config_and_bad_values_are_warned():
    assert Settings(quantization="int4").engine_config().quantization == "int4"
    assert Settings().engine_config().quantization == "none"
    settings, warnings = parse_settings({"quantization": "int2"})
    assert settings.quantization == "none" and any("speclsp.quantization" in w for w in warnings)
