"""``auto`` drafting uses the draft model only where its measured step is cheap against the target's
(decoding/drafter_choice.py); the measurement is kept per machine and read back on the next load."""

from __future__ import annotations

import pytest

from decoding import drafter_choice
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.engine import Engine
from decoding.types import EngineConfig
from tests.conftest import tiny_model

pytestmark = pytest.mark.model


class Loaded:
    def __init__(self, name, model):
        self.name, self.model = name, model


@pytest.fixture
def pair():
    return Loaded("tiny-target", tiny_model(seed=0)), Loaded("tiny-draft", tiny_model(seed=1, hidden=16, layers=1))


def test_pass_costs_are_measured_once_and_kept(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    calls = []
    real = drafter_choice._pass_ms
    monkeypatch.setattr(drafter_choice, "_pass_ms", lambda model: calls.append(1) or real(model))
    first = drafter_choice.measured_costs(*pair)
    second = drafter_choice.measured_costs(*pair)
    assert len(calls) == 2 and first.target_ms > 0 and first.draft_ms > 0  # once per model
    assert (second.target_ms, second.draft_ms) == (round(first.target_ms, 3), round(first.draft_ms, 3))
    assert "tiny-target|Qwen2ForCausalLM|dense|cpu" in first.key and (tmp_path / "pass-costs.json").exists()
    curve = drafter_choice.pass_costs(pair[0])
    assert len(calls) == 2 and sorted(curve) == [1, 2, 4, 8, 16] and min(curve.values()) > 0


@pytest.mark.parametrize(("cached_ms", "measured_again"), [(1e6, True), (1e-3, False)])
def test_a_cached_curve_taken_under_load_is_measured_again(pair, tmp_path, monkeypatch, cached_ms, measured_again):
    """A cached step far slower than the model's step now was measured under other load: the curve is
    measured again and the file keeps the new one. A cached step faster than now stays (other load only
    adds time). Either way a loaded model is checked once."""
    import json

    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    key = drafter_choice.cost_key(pair[0].name, pair[0].model)
    (tmp_path / "pass-costs.json").write_text(json.dumps({key: {str(m): cached_ms * m for m in (1, 2, 4, 8, 16)}}))
    calls, checks = [], []
    real, real_check = drafter_choice._pass_ms, drafter_choice._step_ms
    monkeypatch.setattr(drafter_choice, "_pass_ms", lambda model: calls.append(1) or real(model))
    monkeypatch.setattr(drafter_choice, "_step_ms", lambda model: checks.append(1) or real_check(model))
    curve = drafter_choice.pass_costs(pair[0])
    assert drafter_choice.pass_costs(pair[0]) == curve and len(checks) == 1
    kept = json.loads((tmp_path / "pass-costs.json").read_text())[key]
    if measured_again:
        assert len(calls) == 1 and curve[1] < 1e6 and kept["1"] == curve[1] and kept["16"] < 16e6
    else:
        assert calls == [] and curve == {m: 1e-3 * m for m in (1, 2, 4, 8, 16)} and kept["1"] == 1e-3


def test_a_check_that_fails_leaves_the_cached_curve_in_use(pair, tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    key = drafter_choice.cost_key(pair[0].name, pair[0].model)
    (tmp_path / "pass-costs.json").write_text(json.dumps({key: {str(m): 1e6 for m in (1, 2, 4, 8, 16)}}))

    def fail(model):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(drafter_choice, "_step_ms", fail)
    monkeypatch.setattr(drafter_choice, "_pass_ms", fail)
    assert drafter_choice.pass_costs(pair[0]) == {m: 1e6 for m in (1, 2, 4, 8, 16)}


def test_a_lower_curve_another_process_wrote_meanwhile_is_kept(pair, tmp_path, monkeypatch):
    """Two processes measuring the same model: the file keeps the lower cost at each length."""
    import json

    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    path = tmp_path / "pass-costs.json"
    key = drafter_choice.cost_key(pair[0].name, pair[0].model)
    beside = {"1": 1e-3, "2": 1e6, "4": 1e6, "8": 1e6, "16": 1e6}

    def measure_while_another_process_writes(model):
        path.write_text(json.dumps({key: beside}))
        return {m: 5.0 for m in (1, 2, 4, 8, 16)}

    monkeypatch.setattr(drafter_choice, "_pass_ms", measure_while_another_process_writes)
    curve = drafter_choice.pass_costs(pair[0])
    assert curve == {1: 1e-3, 2: 5.0, 4: 5.0, 8: 5.0, 16: 5.0}
    assert json.loads(path.read_text())[key] == {"1": 1e-3, "2": 5.0, "4": 5.0, "8": 5.0, "16": 5.0}


def test_a_curve_another_process_kept_while_this_one_measured_stays_in_the_cache(pair, tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    path = tmp_path / "pass-costs.json"
    path.write_text(json.dumps({"earlier": {"1": 1.0}}))
    real = drafter_choice._pass_ms

    def measure_while_another_process_writes(model):
        path.write_text(json.dumps({"earlier": {"1": 1.0}, "beside": {"1": 2.0}}))
        return real(model)

    monkeypatch.setattr(drafter_choice, "_pass_ms", measure_while_another_process_writes)
    curve = drafter_choice.pass_costs(pair[0])
    kept = json.loads(path.read_text())
    assert kept["earlier"] == {"1": 1.0} and kept["beside"] == {"1": 2.0}
    assert kept[drafter_choice.cost_key(pair[0].name, pair[0].model)]["1"] == curve[1] > 0


@pytest.mark.parametrize(("draft_ms", "pays"), [(10.0, True), (20.0, True), (33.0, False)])
def test_the_draft_model_pays_only_when_its_step_is_cheap(pair, tmp_path, monkeypatch, draft_ms, pays):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    steps = {"tiny-target": 100.0, "tiny-draft": draft_ms}
    monkeypatch.setattr(drafter_choice, "pass_costs", lambda loaded: {1: steps[loaded.name]})
    decided, reason = drafter_choice.draft_model_pays(*pair)
    assert decided is pays and f"{draft_ms / 100:.2f}" in reason


def test_the_measured_curve_seeds_the_verify_costs_of_each_engine(tmp_path, monkeypatch):
    """A loaded engine sizes its first drafts by its own measured pass costs, not by the default guess
    (a steep curve, as llama.cpp's, and a flat one give other tables before any generation)."""
    import decoding.engine as engine_module

    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
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


def test_quantised_weights_are_measured_apart_from_dense_ones(pair):
    """The cache must not hand an int4 model's costs to the same model in bfloat16, nor the reverse."""
    pytest.importorskip("torchao")
    from decoding.weights.quantization import quantize_weights

    dense = drafter_choice.cost_key("m", tiny_model(seed=0, hidden=128))
    int4, hybrid = tiny_model(seed=0, hidden=128), tiny_model(seed=0, hidden=128)
    quantize_weights(int4, "int4", "m")
    quantize_weights(hybrid, "int4-hybrid", "m")
    keys = {dense, drafter_choice.cost_key("m", int4), drafter_choice.cost_key("m", hybrid)}
    assert len(keys) == 3 and "|dense|" in dense
