"""``completionModel``: inline completions written by the draft model as a target of its own where the
target is too slow for a typist, next edits by the pair (lsp_server/backends/loading.py,
decoding/choices/auto.py:draft_model_completes)."""

from __future__ import annotations

import pytest

from decoding.choices import auto
from decoding.engine import Engine
from decoding.types import EngineConfig, GenerationConfig
from lsp_server.backends.base import ROLE_COMPLETION, ROLE_NEXT_EDIT, BackendConfig
from lsp_server.backends.loading import load_backend
from lsp_server.model.session import ModelSession

pytestmark = pytest.mark.model

STARTER = EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32")


def measured(monkeypatch, target_ms: float, draft_ms: float, target_tail_ms: float = 0.0) -> None:
    monkeypatch.setattr(auto, "measured_costs",
                        lambda target, draft: auto.StepCosts(target_ms, draft_ms, "test", target_tail_ms))


def test_draft_writes_completions_with_the_same_weights_and_the_pair_writes_next_edits():
    backends = load_backend(BackendConfig(engine=STARTER, completion_model="draft"))
    completion, next_edit = backends[ROLE_COMPLETION].engine, backends[ROLE_NEXT_EDIT].engine
    assert completion.target.model is next_edit.draft.model  # shared weights, not a second copy
    assert completion.draft is None and next_edit.target.name == "starter"
    assert completion._caches is not next_edit._caches and completion.sources is not next_edit.sources
    loaded = ModelSession(backends).describe()
    assert (loaded.target, loaded.draft) == ("starter-draft", "none")
    assert loaded.next_edit == "target=starter, draft=starter-draft"


def test_the_draft_engine_is_exact_for_its_own_model():
    """Speculative greedy output of the draft-as-target engine equals plain greedy decoding of that model."""
    engine = Engine.load(STARTER).draft_as_target()
    prompt = engine.tokenizer.encode("def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return")
    config = GenerationConfig(max_new_tokens=40)
    plain = engine.generate(prompt, config, "none", cache_key="plain")
    for mode in ("ngram", "auto", "tree", "model", "staged"):  # model, staged: n-grams (its draft is its target)
        assert engine.generate(prompt, config, mode, cache_key=mode).token_ids == plain.token_ids, mode


@pytest.mark.parametrize(("target_ms", "draft_ms", "by_draft"),
                         [(749.1, 471.5, True), (252.0, 82.0, True), (121.7, 50.0, True), (40.0, 15.0, False),
                          (300.0, 320.0, False)])
def test_auto_chooses_the_draft_model_only_where_a_target_step_is_too_slow(monkeypatch, target_ms, draft_ms, by_draft):
    measured(monkeypatch, target_ms, draft_ms)
    backends = load_backend(BackendConfig(engine=STARTER, completion_model="auto"))
    assert isinstance(backends, dict) is by_draft
    pair = (backends[ROLE_NEXT_EDIT] if by_draft else backends).engine
    uses, reason = auto.draft_model_completes(pair.target, pair.draft)
    assert uses is by_draft and f"{target_ms:.1f} ms" in reason


@pytest.mark.parametrize(("target_tail_ms", "by_draft"), [(302.3, True), (151.0, True), (140.0, False), (20.0, False)])
def test_auto_gives_completions_to_the_draft_model_where_a_target_steps_fast_but_its_tail_pass_is_slow(
        monkeypatch, target_tail_ms, by_draft):
    """llama.cpp's 1.5B here: one token 44.2 ms, 16 tokens 302.3 ms; writing completions it answered no key of a
    139-key stretch after opening a file (``speclsp bench lsp --first-answer``)."""
    measured(monkeypatch, 44.2, 23.2, target_tail_ms)
    backends = load_backend(BackendConfig(engine=STARTER, completion_model="auto"))
    assert isinstance(backends, dict) is by_draft
    pair = (backends[ROLE_NEXT_EDIT] if by_draft else backends).engine
    uses, reason = auto.draft_model_completes(pair.target, pair.draft)
    assert uses is by_draft and f"{target_tail_ms:.1f} ms" in reason


def test_target_keeps_one_backend_and_draft_without_a_draft_model_falls_back_to_the_target(monkeypatch):
    measured(monkeypatch, 749.1, 471.5)
    backend = load_backend(BackendConfig(engine=STARTER, completion_model="target"))
    assert not isinstance(backend, dict) and backend.engine.target.name == "starter"
    alone = EngineConfig(model="starter", draft_model="none", device="cpu", dtype="float32")
    assert not isinstance(load_backend(BackendConfig(engine=alone, completion_model="auto")), dict)
    assert not isinstance(load_backend(BackendConfig(engine=alone, completion_model="draft")), dict)  # a warning
    with pytest.raises(ValueError, match="unknown completion model"):
        load_backend(BackendConfig(engine=STARTER, completion_model="small"))


def test_a_next_edit_model_of_its_own_writes_next_edits_without_a_draft_model():
    """``nextEditModel``: a stand-in (the starter target, named by its directory) loads beside the pair."""
    from decoding.weights.starter import TARGET_DIR

    backends = load_backend(BackendConfig(engine=STARTER, next_edit_model=str(TARGET_DIR)))
    completion, next_edit = backends[ROLE_COMPLETION].engine, backends[ROLE_NEXT_EDIT].engine
    assert completion.target.name == "starter" and completion.draft.name == "starter-draft"
    assert next_edit is not completion and next_edit.draft is None
    assert next_edit.target.model is not completion.target.model  # its own weights
    assert ModelSession(backends).describe().next_edit.endswith("draft=none")
    # with completionModel draft, the draft writes completions and the next-edit model next edits
    both = load_backend(BackendConfig(engine=STARTER, completion_model="draft", next_edit_model=str(TARGET_DIR)))
    assert both[ROLE_COMPLETION].engine.target.name == "starter-draft" and both[ROLE_NEXT_EDIT].engine.draft is None
    # the rewrite of that engine drafts from the region and is its own plain greedy output
    prompt = next_edit.tokenizer.encode("# region:\ndef add(a, b):\n    return a + b\n# end of region\n# region:\n")
    draft = next_edit.tokenizer.encode("def add(a, b):\n    return a + b\n# end of region")
    config = GenerationConfig(max_new_tokens=30, seed=0)  # seeded: drafting never follows wall-clock timings
    plain = next_edit.rewrite(prompt, draft, config, "none", cache_key="plain")
    drafted = next_edit.rewrite(prompt, draft, config, "auto", cache_key="auto")
    assert drafted.token_ids == plain.token_ids and drafted.stats.target_passes < plain.stats.target_passes
