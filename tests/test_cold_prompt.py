"""A prompt in time (lsp_server/model/cold_prompt.py): a request whose whole prompt would take longer than
``completion.coldPromptMs`` to compute is answered from a short prompt around the cursor, exactly as plain
greedy decoding answers that prompt; the whole prompt, computed afterwards (``prefill_prompt``), serves
the requests after it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lsprotocol import types

from bench.corpus import read_texts, stdlib_files
from decoding.engine import Engine
from decoding.types import EngineConfig
from lsp_server.backends.local import as_backend
from lsp_server.model.cold_prompt import MIN_SHORT_TOKENS, shorter_settings
from lsp_server.model.session import ModelSession
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for

pytestmark = pytest.mark.model
UTF16 = codec_for("utf-16")


class CostOnly:
    """A backend that only estimates: ``missing`` tokens lacking, ``ms`` per token."""

    def __init__(self, missing: int, ms: float | None):
        self.missing, self.ms = missing, ms

    def prompt_cost(self, prompt_ids, cache_key):
        return None if self.ms is None else (self.missing, self.ms)


class _Prompt:
    prompt_ids = list(range(2000))


def _request(settings: Settings, text: str = "x = 1\n" * 400, line: int = 200):
    document = Document("file:///long.py", text, 1, "python")
    return resolve_request(document, types.Position(line=line, character=0), UTF16, settings, automatic=True)


def test_the_short_budgets_fit_the_time_and_depend_on_nothing_but_the_time_and_the_cost():
    settings = Settings(cold_prompt_ms=800)
    assert shorter_settings(CostOnly(100, 5.0), _request(settings), _Prompt) is None  # 500 ms: fits
    short = shorter_settings(CostOnly(2000, 5.0), _request(settings), _Prompt)  # 10 s: cut to 160 tokens
    assert (short.prefix_tokens, short.suffix_tokens, short.extra_tokens) == (120, 40, 0)
    assert shorter_settings(CostOnly(1500, 5.0), _request(settings, line=50), _Prompt) == short  # another cursor
    assert shorter_settings(CostOnly(900, 5.0), _request(settings), _Prompt) is None  # mostly cached: whole
    slow = shorter_settings(CostOnly(2000, 500.0), _request(settings), _Prompt)
    assert slow.prefix_tokens + slow.suffix_tokens == MIN_SHORT_TOKENS
    assert shorter_settings(CostOnly(2000, 5.0), _request(Settings(cold_prompt_ms=0)), _Prompt) is None  # off
    assert shorter_settings(CostOnly(2000, None), _request(settings), _Prompt) is None  # a remote engine
    asked = replace(_request(settings), automatic=False)
    assert shorter_settings(CostOnly(2000, 5.0), asked, _Prompt) is None  # a completion asked for: whole


@pytest.fixture(scope="module")
def engine():
    return Engine.load(EngineConfig(model="starter", draft_model="none", device="cpu", dtype="float32"))


def _long_document() -> tuple[Document, int]:
    path = max(stdlib_files(want_held_out=True)[:8], key=lambda p: p.stat().st_size)
    text = read_texts([path])[0]
    return Document(path.as_uri(), text, 1, "python"), text.count("\n") // 2


def test_a_cold_request_is_answered_exactly_from_a_short_prompt_and_the_whole_one_then_serves(engine):
    backend = as_backend(engine)
    _, ms_per_token = backend.prompt_cost([1], "nothing cached")
    settings = Settings(cold_prompt_ms=max(1, int(200 * ms_per_token)), max_new_tokens=12)  # about 200 tokens fit
    document, line = _long_document()
    request = resolve_request(document, types.Position(line=line, character=0), UTF16, settings, automatic=True)
    session = ModelSession(backend)
    first = session.complete(request)
    assert first.cut_from > 1000 and len(first.prompt.prompt_ids) <= 220
    assert "prompt_cut_from" in first.trace_fields()
    assert document.uri in session.sources.answered_cut  # one quick answer: the next requests get the whole prompt
    plain = engine.generate(first.prompt.prompt_ids, replace(first.config, answer_by=None), "none", cache_key="plain")
    written = first.generation.token_ids  # the greedy answer to the prompt it was given (its start, if answered by its time)
    assert written == (plain.token_ids[: len(written)] if first.generation.finish_reason == "partial" else plain.token_ids)
    computed = session.prefill_prompt(request)
    assert computed >= first.cut_from - 2
    second = session.complete(replace(request, cancelled=type(request.cancelled)()))
    assert second.cut_from == 0 and len(second.prompt.prompt_ids) == first.cut_from
    assert second.generation.stats.prefill_reused >= len(second.prompt.prompt_ids) - 2  # the spare, swapped in
    assert document.uri not in session.sources.answered_cut
    backend.forget_cache(document.uri)  # cold again: a first request is cut, the one after it is not
    again = ModelSession(backend)
    assert again.complete(request).cut_from == first.cut_from
    assert again.complete(replace(request, cancelled=type(request.cancelled)())).cut_from == 0
    backend.forget_cache(document.uri)  # cold again: with the limit off, the whole prompt all the same
    off = ModelSession(backend).complete(replace(request, settings=replace(settings, cold_prompt_ms=0)))
    assert off.cut_from == 0 and len(off.prompt.prompt_ids) == first.cut_from
    assert off.generation.stats.prefill_computed >= first.cut_from - 2


def test_a_cut_prompt_with_nothing_to_show_answers_at_once_and_the_next_key_is_cut_again(engine, monkeypatch):
    """An empty answer from a cut prompt is not the cold spell's one quick answer: answering it from the whole
    prompt instead makes the request wait for the whole prompt, which a typist's next key supersedes."""
    from lsp_server.model import completer

    backend = as_backend(engine)
    backend.forget_cache("file:///empty-cut.py")
    _, ms_per_token = backend.prompt_cost([1], "nothing cached")
    document, line = _long_document()
    document = replace(document, uri="file:///empty-cut.py")
    settings = Settings(cold_prompt_ms=max(1, int(200 * ms_per_token)), max_new_tokens=8)
    request = resolve_request(document, types.Position(line=line, character=0), UTF16, settings, automatic=True)
    real = completer.postprocess
    lengths, empty = [], [True]

    def empty_when_short(text, prompt, *args, **kwargs):  # the first short prompt's answer shows nothing
        lengths.append(len(prompt.prompt_ids))
        return "" if empty[0] and len(prompt.prompt_ids) <= 220 else real(text, prompt, *args, **kwargs)

    monkeypatch.setattr(completer, "postprocess", empty_when_short)
    session = ModelSession(backend)
    fresh = lambda: replace(request, cancelled=type(request.cancelled)())  # noqa: E731
    first = session.complete(request)
    assert first.insert_text == "" and first.cut_from > 0 and lengths == [lengths[0]] and lengths[0] <= 220
    assert document.uri not in session.sources.answered_cut  # nothing shown: the spell's cut is still to come
    empty[0] = False
    second = session.complete(fresh())
    assert second.cut_from == first.cut_from and lengths[1] == lengths[0]  # cut again, the same short prompt
    assert second.insert_text.strip() and document.uri in session.sources.answered_cut
    third = session.complete(fresh())
    assert third.cut_from == 0 and lengths[2] == first.cut_from  # after a shown cut answer: the whole prompt
