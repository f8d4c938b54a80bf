"""The choices made from figures measured on the machine (decoding/choices/): pass costs measured once
and kept in the one versioned cache file, checked and merged across processes; the pin that stands in for
the cache (tests/conftest.py pins every test); ``drafter: auto`` draws on the draft model only off the
CPU where its step is cheap; each choice logs one line."""

from __future__ import annotations

import json
import logging

import pytest

from decoding.choices import auto, figures
from decoding.choices import pass_costs as costs
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.engine import Engine
from decoding.types import EngineConfig
from tests.conftest import tiny_model

pytestmark = pytest.mark.model

SIZES = (1, 2, 4, 8, 16)


class Loaded:
    def __init__(self, name, model):
        self.name, self.model = name, model


@pytest.fixture
def pair():
    return Loaded("tiny-target", tiny_model(seed=0)), Loaded("tiny-draft", tiny_model(seed=1, hidden=16, layers=1))


def _write_cache(cache, key: str, curve: dict, **others) -> None:
    entries = {key: {str(m): ms for m, ms in curve.items()}, **others}
    (cache / "measured.json").write_text(json.dumps({"version": figures.FIGURES_VERSION, "pass_ms": entries}))


def _kept(cache) -> dict:
    return json.loads((cache / "measured.json").read_text())


def test_pass_costs_are_measured_once_and_kept(pair, measured_here, monkeypatch):
    calls = []
    real = costs._pass_ms
    monkeypatch.setattr(costs, "_pass_ms", lambda model: calls.append(1) or real(model))
    first = auto.measured_costs(*pair)
    second = auto.measured_costs(*pair)
    assert len(calls) == 2 and first.target_ms > 0 and first.draft_ms > 0  # once per model
    assert (second.target_ms, second.draft_ms) == (round(first.target_ms, 3), round(first.draft_ms, 3))
    assert "tiny-target|Qwen2ForCausalLM|dense|cpu" in first.key
    kept = _kept(measured_here)
    assert kept["version"] == figures.FIGURES_VERSION and len(kept["pass_ms"]) == 2
    curve = costs.pass_costs(pair[0])
    assert len(calls) == 2 and sorted(curve) == list(SIZES) and min(curve.values()) > 0


def test_a_file_of_another_version_or_an_earlier_release_is_measured_again(pair, measured_here, monkeypatch):
    key = figures.cost_key(pair[0].name, pair[0].model)
    (measured_here / "pass-costs.json").write_text(json.dumps({key: {str(m): 1e-3 for m in SIZES}}))
    (measured_here / "measured.json").write_text(json.dumps(
        {"version": figures.FIGURES_VERSION - 1, "pass_ms": {key: {str(m): 1e-3 for m in SIZES}}, "other": 1}))
    monkeypatch.setattr(costs, "_pass_ms", lambda model: {m: 5.0 for m in SIZES})
    assert costs.pass_costs(pair[0]) == {m: 5.0 for m in SIZES}
    assert _kept(measured_here) == {"version": figures.FIGURES_VERSION, "pass_ms": {key: {str(m): 5.0 for m in SIZES}}}


@pytest.mark.parametrize(("cached_ms", "measured_again"), [(1e6, True), (1e-3, False)])
def test_a_cached_curve_taken_under_load_is_measured_again(pair, measured_here, monkeypatch, cached_ms, measured_again):
    """A cached step far slower than the model's step now was measured under other load: the curve is
    measured again and the file keeps the new one. A cached step faster than now stays (other load only
    adds time). Either way a loaded model is checked once."""
    key = figures.cost_key(pair[0].name, pair[0].model)
    _write_cache(measured_here, key, {m: cached_ms * m for m in SIZES})
    calls, checks = [], []
    real, real_check = costs._pass_ms, costs._step_ms
    monkeypatch.setattr(costs, "_pass_ms", lambda model: calls.append(1) or real(model))
    monkeypatch.setattr(costs, "_step_ms", lambda model: checks.append(1) or real_check(model))
    curve = costs.pass_costs(pair[0])
    assert costs.pass_costs(pair[0]) == curve and len(checks) == 1
    kept = _kept(measured_here)["pass_ms"][key]
    if measured_again:
        assert len(calls) == 1 and curve[1] < 1e6 and kept["1"] == curve[1] and kept["16"] < 16e6
    else:
        assert calls == [] and curve == {m: 1e-3 * m for m in SIZES} and kept["1"] == 1e-3


def test_a_check_that_fails_leaves_the_cached_curve_in_use(pair, measured_here, monkeypatch):
    _write_cache(measured_here, figures.cost_key(pair[0].name, pair[0].model), {m: 1e6 for m in SIZES})

    def fail(model):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(costs, "_step_ms", fail)
    monkeypatch.setattr(costs, "_pass_ms", fail)
    assert costs.pass_costs(pair[0]) == {m: 1e6 for m in SIZES}


def test_a_lower_curve_another_process_wrote_meanwhile_is_kept(pair, measured_here, monkeypatch):
    """Two processes measuring the same model: the file keeps the lower cost at each length."""
    key = figures.cost_key(pair[0].name, pair[0].model)
    beside = {1: 1e-3, 2: 1e6, 4: 1e6, 8: 1e6, 16: 1e6}

    def measure_while_another_process_writes(model):
        _write_cache(measured_here, key, beside)
        return {m: 5.0 for m in SIZES}

    monkeypatch.setattr(costs, "_pass_ms", measure_while_another_process_writes)
    curve = costs.pass_costs(pair[0])
    assert curve == {1: 1e-3, 2: 5.0, 4: 5.0, 8: 5.0, 16: 5.0}
    assert _kept(measured_here)["pass_ms"][key] == {"1": 1e-3, "2": 5.0, "4": 5.0, "8": 5.0, "16": 5.0}


def test_entries_another_process_kept_while_this_one_measured_stay_in_the_cache(pair, measured_here, monkeypatch):
    _write_cache(measured_here, "earlier", {1: 1.0})
    real = costs._pass_ms

    def measure_while_another_process_writes(model):
        _write_cache(measured_here, "earlier", {1: 1.0}, beside={"1": 2.0})
        return real(model)

    monkeypatch.setattr(costs, "_pass_ms", measure_while_another_process_writes)
    curve = costs.pass_costs(pair[0])
    kept = _kept(measured_here)["pass_ms"]
    assert kept["earlier"] == {"1": 1.0} and kept["beside"] == {"1": 2.0}
    assert kept[figures.cost_key(pair[0].name, pair[0].model)]["1"] == curve[1] > 0


def test_a_pinned_curve_is_used_as_it_is_by_key_then_name_then_any(pair, measured_here, monkeypatch):
    """The pin stands in for the cache: nothing is measured, checked or written, and an entry is found by
    the full key, the model's name, or ``*``."""
    pin = measured_here / "pin.json"
    monkeypatch.setenv(figures.PIN_VARIABLE, str(pin))

    def fail(model):
        raise AssertionError("a pinned curve is not measured or checked")

    monkeypatch.setattr(costs, "_pass_ms", fail)
    monkeypatch.setattr(costs, "_step_ms", fail)
    target, draft = pair
    pin.write_text(json.dumps({"pass_ms": {"*": {str(m): 7.0 for m in SIZES}, "tiny-draft": {str(m): 2.0 for m in SIZES},
                                           figures.cost_key(target.name, target.model): {str(m): 3.0 for m in SIZES}}}))
    assert costs.pass_costs(target) == {m: 3.0 for m in SIZES}
    assert costs.pass_costs(draft) == {m: 2.0 for m in SIZES}
    assert costs.pass_costs(Loaded("other", tiny_model(seed=2))) == {m: 7.0 for m in SIZES}
    assert not (measured_here / "measured.json").exists()


def test_the_pin_of_the_tests_chooses_alike_on_every_machine(monkeypatch, caplog):
    """tests/conftest.py's pinned figures (this test does not unpin): the starter pair in bfloat16 loads
    with its weights as they are, drafts from n-grams only and the target writes completions, measuring
    nothing; each choice logs one line."""
    from lsp_server.backends.loading import BackendConfig, load_backend

    def fail(*args):
        raise AssertionError("the pinned figures are not measured")

    monkeypatch.setattr(costs, "_pass_ms", fail)
    monkeypatch.setattr(auto, "fastest_low_bit_bound", fail)
    config = EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="bfloat16")
    with caplog.at_level(logging.INFO, logger=auto.__name__):
        backend = load_backend(BackendConfig(engine=config, completion_model="auto"))
    assert not isinstance(backend, dict)
    engine = backend.engine
    assert (engine.target.quantization, engine.draft.quantization) == ("none", "none")
    assert not engine.auto_uses_draft_model
    lines = [record.getMessage() for record in caplog.records if record.name == auto.__name__]
    assert [line.split(" auto for ")[0] for line in lines] == ["quantization", "quantization", "drafter",
                                                               "completionModel"]
    assert "10.0 ms" in lines[-1] and "0%" in lines[0]  # the figures that decided


@pytest.mark.parametrize(("draft_ms", "pays"), [(10.0, True), (20.0, True), (33.0, False)])
def test_off_the_cpu_the_draft_model_pays_only_when_its_step_is_cheap(pair, monkeypatch, draft_ms, pays):
    steps = {"tiny-target": 100.0, "tiny-draft": draft_ms}
    monkeypatch.setattr(auto, "pass_costs", lambda loaded: {1: steps[loaded.name]})
    elsewhere = [Loaded(loaded.name, loaded.model.to("meta")) for loaded in pair]  # a device other than the CPU
    decided, reason = auto.draft_model_pays(*elsewhere)
    assert decided is pays and f"{draft_ms / 100:.2f}" in reason


def test_on_the_cpu_auto_never_drafts_with_the_draft_model(pair, monkeypatch):
    monkeypatch.setattr(auto, "pass_costs", lambda loaded: {1: {"tiny-target": 100.0, "tiny-draft": 1.0}[loaded.name]})
    decided, reason = auto.draft_model_pays(*pair)
    assert decided is False and "n-grams only" in reason and "CPU" in reason


def test_the_measured_curve_seeds_the_verify_costs_of_each_engine(monkeypatch):
    """A loaded engine sizes its first drafts by its own measured pass costs, not by the default guess
    (a steep curve, as llama.cpp's, and a flat one give other tables before any generation)."""
    import decoding.engine as engine_module

    curves = {"starter": {1: 100.0, 2: 180.0, 4: 300.0, 8: 600.0, 16: 900.0},
              "starter-draft": {1: 10.0, 2: 10.5, 4: 11.0, 8: 12.0, 16: 13.0}}
    monkeypatch.setattr(engine_module, "pass_costs", lambda loaded: curves[loaded.name])
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))
    steep = engine.generator.verify_cost.relative_costs(7)
    assert steep[:2] == (1.0, 1.8) and steep[3] == 3.0 and steep[7] == 6.0  # medians, 8 tokens = k 7
    # 3 tokens (k = 2) unmeasured: the least-squares line through the 5 medians, 137.7 ms + 53.5 ms per token
    assert steep[2] == pytest.approx(2.447, abs=0.005)
    flat = engine.draft_as_target().generator.verify_cost.relative_costs(15)
    assert flat[1] == 1.05 and flat[15] == 1.3 and engine.draft_as_target().generator.verify_cost.mean_ms == 10.0


@pytest.mark.parametrize("pays", [True, False])
def test_auto_drafts_with_the_draft_model_only_where_it_pays(monkeypatch, pays):
    import decoding.engine as engine_module

    monkeypatch.setattr(engine_module, "draft_model_pays", lambda target, draft: (pays, "measured"))
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))
    kinds = {type(d) for d in engine._drafters("auto", None)}
    assert (ModelDrafter in kinds) is pays and NgramDrafter in kinds
    assert {type(d) for d in engine._drafters("model", None)} == {ModelDrafter}  # asked for by name: always


def test_quantised_weights_are_measured_apart_from_dense_ones():
    """The cache must not hand an int4 model's costs to the same model in bfloat16, nor the reverse."""
    from decoding.weights.quantization import quantize_weights

    dense = figures.cost_key("m", tiny_model(seed=0, hidden=128))
    int4, int8, fp16 = tiny_model(seed=0, hidden=128), tiny_model(seed=0, hidden=128), tiny_model(seed=0, hidden=128)
    quantize_weights(int4, "int4-hybrid", "m")
    quantize_weights(fp16, "fp16-weights", "m")
    quantize_weights(int8, "int8-hybrid", "m")
    keys = {dense, figures.cost_key("m", int4), figures.cost_key("m", int8), figures.cost_key("m", fp16)}
    assert len(keys) == 4 and "|Fp16WeightLinear|" in figures.cost_key("m", fp16) and "|dense|" in dense and "|HybridInt4Linear|" in figures.cost_key("m", int4)
