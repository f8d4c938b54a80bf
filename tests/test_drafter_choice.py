"""``auto`` drafting uses the draft model only where its measured step is cheap against the target's
(decoding/drafter_choice.py); the measurement is kept per machine and read back on the next load."""

from __future__ import annotations

import pytest

from decoding import drafter_choice
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.engine import Engine, EngineConfig
from tests.conftest import tiny_model

pytestmark = pytest.mark.model


class Loaded:
    def __init__(self, name, model):
        self.name, self.model = name, model


@pytest.fixture
def pair():
    return Loaded("tiny-target", tiny_model(seed=0)), Loaded("tiny-draft", tiny_model(seed=1, hidden=16, layers=1))


def test_step_costs_are_measured_once_and_kept(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    calls = []
    real = drafter_choice._step_ms
    monkeypatch.setattr(drafter_choice, "_step_ms", lambda models: calls.append(1) or real(models))
    first = drafter_choice.measured_costs(*pair)
    second = drafter_choice.measured_costs(*pair)
    assert len(calls) == 1 and first.target_ms > 0 and first.draft_ms > 0
    assert (second.target_ms, second.draft_ms) == (round(first.target_ms, 3), round(first.draft_ms, 3))
    assert "tiny-target|tiny-draft|Qwen2ForCausalLM|cpu" in first.key and (tmp_path / "drafter-costs.json").exists()


@pytest.mark.parametrize(("draft_ms", "pays"), [(10.0, True), (20.0, True), (33.0, False)])
def test_the_draft_model_pays_only_when_its_step_is_cheap(pair, tmp_path, monkeypatch, draft_ms, pays):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(drafter_choice, "_step_ms", lambda models: [100.0, draft_ms])
    decided, reason = drafter_choice.draft_model_pays(*pair)
    assert decided is pays and f"{draft_ms / 100:.2f}" in reason


@pytest.mark.parametrize("pays", [True, False])
def test_auto_drafts_with_the_draft_model_only_where_it_pays(monkeypatch, pays):
    import decoding.engine as engine_module

    monkeypatch.setattr(engine_module, "draft_model_pays", lambda target, draft: (pays, "measured"))
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))
    kinds = {type(d) for d in engine._drafters("auto", None)}
    assert (ModelDrafter in kinds) is pays and NgramDrafter in kinds
    assert {type(d) for d in engine._drafters("model", None)} == {ModelDrafter}  # asked for by name: always
