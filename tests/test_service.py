"""The request pipeline and its services in process: guards, superseding, the type-through cache,
next edits, document events reaching the model session, and settings parsing. Most run on a fake
session (tests/fake_session.py); two run the real engine on the starter pair."""

from __future__ import annotations

import asyncio
import functools
import threading

import pytest
from lsprotocol import types

from decoding.stats import GenerationStats
from decoding.types import FinishReason, Generation
from lsp_server.model.completer import Completion, Rewrite
from lsp_server.completion.mode import Mode
from lsp_server.request import resolve_request
from lsp_server.backends.base import RewritePrompt
from lsp_server.model.session import ModelSession
from lsp_server.settings import Settings, parse_settings
from lsp_server.tracing import Tracer
from lsp_server.workspace.documents import DocumentStore
from lsp_server.workspace.positions import codec_for
from lsp_server.model.worker import ERROR, READY, ModelWorker
from lsp_server.requests.work_ahead import NEXT_LINE_IDLE_S
from tests.fake_session import FakeSession, services

STARTER = Settings(model="starter", draft_model="starter-draft")
URI = "file:///work/pkg/a.py"
TEXT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    "


def _completion(request, text: str) -> Completion:
    """A model's completion of ``text`` at the request's cursor (no real prompt: only what the service reads)."""
    from lsp_server.backends.base import Prompt

    prompt = Prompt([1], request.document.text[:request.offset], "", request.offset, "", "\n", False, False, (), ())
    return Completion(text, prompt, Generation([1], text, FinishReason.STOP, GenerationStats()), Mode(False))


def _fake_worker(**session_keywords) -> tuple[ModelWorker, list[FakeSession]]:
    made: list[FakeSession] = []

    def factory(backend):
        made.append(FakeSession(backend, **session_keywords))
        return made[-1]

    worker = ModelWorker(lambda config, on_stage: None, factory)
    assert worker.load(STARTER.engine_config()).result(timeout=10) == READY
    return worker, made


def _opened(text: str = TEXT, uri: str = URI) -> DocumentStore:
    store = DocumentStore()
    store.open(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    return store


async def _settled(worker: ModelWorker) -> None:
    """Let the calls scheduled after an answer run, then wait for the model thread's queue to drain
    (through an operation the fake session does not record)."""
    for _ in range(3):
        await asyncio.sleep(0)
    worker.run(ModelSession.describe).result(timeout=10)


@pytest.mark.unit
@pytest.mark.parametrize("uri, text, position, automatic, status", [
    ("file:///work/.env", "KEY=", (0, 4), False, "no completions: secret-looking file"),
    (URI, "def f():\n    x = 1\n", (1, 2), True, "no suggestion: cursor in indentation"),
])
async def test_a_guarded_request_never_reaches_the_session(uri, text, position, automatic, status):
    worker, (session,) = _fake_worker(on_complete=lambda request: pytest.fail("the session was asked"))
    sent = []
    _, completions, _ = services(_opened(text, uri), worker, Tracer(sent.append))
    line, character = position
    assert await completions.complete("inlineCompletion", uri, types.Position(line=line, character=character),
                                      automatic) is None
    assert status in sent[-1].message
    assert "complete" not in session.names()
    worker.shutdown()


@pytest.mark.unit
async def test_an_answer_is_remembered_and_typing_through_it_asks_the_session_nothing():
    worker, (session,) = _fake_worker(on_complete=lambda request: _completion(request, "return a - b"))
    sent = []
    _, completions, _ = services(store := _opened(), worker, Tracer(sent.append))
    answer = await completions.complete("inlineCompletion", URI, types.Position(line=4, character=4))
    assert answer.insert_text == "return a - b" and answer.completion is not None
    await _settled(worker)
    await asyncio.sleep(2 * NEXT_LINE_IDLE_S)  # a pause
    await _settled(worker)
    # After the answer, on the model thread: the warm-up, and the work ahead of the next request
    assert session.names()[-3:] == ["complete", "warm_up", "prepare_ahead"]
    assert "ok" in sent[-1].message and "queue=" in sent[-1].message
    store.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=TEXT + "ret")]), codec_for("utf-16"))
    asked = session.names().count("complete")
    answer = await completions.complete("inlineCompletion", URI, types.Position(line=4, character=7))
    assert answer.insert_text == "urn a - b" and answer.completion is None
    assert session.names().count("complete") == asked
    await _settled(worker)
    assert "type-through cache hit" in sent[-1].message and "total=" in sent[-1].message
    worker.shutdown()


@pytest.mark.unit
async def test_a_newer_request_supersedes_the_one_in_flight():
    started = threading.Event()

    def on_complete(request):
        if request.offset == len(TEXT):  # the first request: runs until the second cancels it
            started.set()
            assert request.cancelled.wait(timeout=10), "the newer request did not cancel this one"
            return None
        return _completion(request, "pass")

    worker, _ = _fake_worker(on_complete=on_complete)
    sent = []
    _, completions, _ = services(_opened(), worker, Tracer(sent.append))
    first = asyncio.ensure_future(completions.complete("inlineCompletion", URI, types.Position(line=4, character=4)))
    await asyncio.to_thread(started.wait, 10)
    second = await completions.complete("inlineCompletion", URI, types.Position(line=3, character=0))
    assert await first is None and second.insert_text == "pass"
    assert any("superseded" in m.message for m in sent)
    worker.shutdown()


@pytest.mark.unit
async def test_a_request_superseded_while_queued_builds_no_context():
    """The real session skips an operation whose request was cancelled before it started."""
    store = _opened()
    request = resolve_request(store.get(URI), types.Position(line=4, character=4), codec_for("utf-16"))
    request.cancelled.set()
    session = ModelSession(backends=object())  # never touched: the request is gone
    assert session.complete(request) is None and session.rewrite(request) is None


@pytest.mark.unit
async def test_a_failed_engine_is_shown_once_per_kind_and_only_a_real_answer_ends_the_outage():
    from lsp_server.backends.base import BackendError

    def on_complete(request):
        if request.offset == 0:  # as if superseded while queued: the engine is never asked
            return None
        if request.offset == 1:
            raise BackendError("unreachable", "the engine at http://gpu:8000 is unreachable")
        return _completion(request, "pass")

    worker, _ = _fake_worker(on_complete=on_complete)
    sent, shown = [], []
    _, completions, _ = services(_opened("ab\nc"), worker, Tracer(sent.append),
                                 notify_user=lambda message, kind: shown.append(message))
    for character in (1, 0, 1):  # a failure, a request that never reached the engine, the failure again
        assert await completions.complete("inlineCompletion", URI, types.Position(line=0, character=character)) is None
    assert len(shown) == 1 and not any("answers again" in m.message for m in sent)
    assert sum("backend error: unreachable" in m.message for m in sent) == 2
    assert (await completions.complete("inlineCompletion", URI, types.Position(line=1, character=1))).insert_text
    assert sum("answers again" in m.message for m in sent) == 1
    worker.shutdown()


@pytest.mark.unit
async def test_next_edit_runs_a_rewrite_with_the_documents_edits_and_keeps_a_suggestion_with_edits():
    def on_rewrite(request):
        prompt = RewritePrompt([1], [1], 0, 14, "", "```", True)
        generation = Generation([1], "", FinishReason.STOP, GenerationStats())
        return Rewrite(prompt, generation, "def add(x, b):", [(8, 9, "x")])

    worker, (session,) = _fake_worker(on_rewrite=on_rewrite)
    store = _opened()
    _, _, next_edits = services(store, worker)
    before = store.get(URI)
    after = store.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=TEXT.replace("(a,", "(x,", 1))]),
        codec_for("utf-16"))
    next_edits.history.record(before, after, [(0, len(TEXT), after.text)])
    answer = await next_edits.next_edit(URI, types.Position(line=1, character=4))
    assert answer.rewrite.edits == [(8, 9, "x")] and answer.document is store.get(URI)
    (_, (request, history)), = [c for c in session.calls if c[0] == "rewrite"]
    assert request.offset == after.text.index("return") and len(history) == 1 and "(x," in history[0]
    assert next_edits.inline_replacement(request) is None  # the change is on another line than the cursor's
    on_its_line = resolve_request(store.get(URI), types.Position(line=0, character=8), codec_for("utf-16"))
    assert next_edits.inline_replacement(on_its_line) == (8, 9, "x")
    next_edits.forget(URI)
    assert not next_edits.history.has_edits(URI)
    worker.shutdown()


@pytest.mark.unit
async def test_document_events_reach_the_session_on_the_model_thread_in_order():
    worker, (session,) = _fake_worker()
    store = _opened()
    pipeline, _, _ = services(store, worker)
    pipeline.document_opened(store.get(URI))
    pipeline.file_changed("file:///work/pkg/b.py")
    pipeline.document_closed(URI)
    await _settled(worker)
    assert session.names()[1:] == ["document_opened", "file_changed", "document_closed"]
    assert session.threads == {worker._thread.ident}
    worker.shutdown()


@pytest.mark.unit
def test_the_worker_runs_session_operations_only():
    worker, _ = _fake_worker()
    with pytest.raises(ValueError, match="not an operation of ModelSession"):
        worker.run(lambda session: None)
    with pytest.raises(ValueError, match="not an operation of ModelSession"):
        worker.run(ModelSession._distinct_backends)
    with pytest.raises(ValueError, match="not an operation of ModelSession"):
        worker.run(ModelSession.claim_thread)  # not for the event loop: only the loading job claims
    assert worker.run(ModelSession.warm_up).result(timeout=10) is None
    assert worker._session.names()[-1] == "warm_up"
    worker.shutdown()


@pytest.mark.unit
async def test_failed_load_answers_empty_and_keeps_the_error():
    worker = ModelWorker(lambda config, on_stage: (_ for _ in ()).throw(FileNotFoundError("no weights here")))
    assert worker.load(STARTER.engine_config()).result(timeout=10) == ERROR
    assert "no weights here" in worker.error
    sent = []
    _, completions, next_edits = services(_opened("x"), worker, Tracer(sent.append))
    assert await completions.complete("inlineCompletion", URI, types.Position(line=0, character=1)) is None
    assert await next_edits.next_edit(URI, types.Position(line=0, character=1)) is None
    assert "models error" in sent[-1].message
    with pytest.raises(RuntimeError, match="not ready"):
        worker.run(ModelSession.warm_up)


@pytest.mark.unit
@pytest.mark.parametrize("options,expected,warning", [
    (None, Settings(), None),
    ([], Settings(), None),  # an empty Lua table (Neovim) is an empty JSON array
    ({"completion": {"maxNewTokens": 16}, "decoding": {"temperature": 0}}, Settings(max_new_tokens=16, temperature=0.0),
     None),
    ({"speclsp": {"decoding": {"drafter": "ngram"}}}, Settings(drafter="ngram"), None),
    ({"decoding.drafter": "magic"}, Settings(), "invalid value 'magic' for speclsp.decoding.drafter"),
    ({"completion": {"maxNewTokens": "lots"}}, Settings(), "invalid value 'lots'"),
    ({"completion": {"maxNewTokens": True}}, Settings(), "invalid value True"),
    ({"decoding": {"topP": 0}}, Settings(), "speclsp.decoding.topP"),
    ({"colour": "blue"}, Settings(), "unknown setting speclsp.colour"),
    ([1, 2], Settings(), "must be a JSON object"),
    ({"decoding": {"drafter": "model"}, "model": {"draft": "none"}}, Settings(drafter="ngram", draft_model="none"),
     "needs a draft model"),
    ({"decoding.drafter": "tree", "model.engine": "llama.cpp"}, Settings(drafter="ngram", engine="llama.cpp"),
     "per-position attention"),
    ({"completion": {"model": "draft"}}, Settings(completion_model="draft"), None),
    ({"model": {"engine": "vllm"}}, Settings(), "invalid value 'vllm' for speclsp.model.engine"),
])
def test_settings_are_typed_and_invalid_values_keep_defaults(options, expected, warning):
    settings, warnings = parse_settings(options)
    assert settings == expected
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warning in warnings[0]


@pytest.mark.unit
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
async def test_l1_l5_ranges_in_the_negotiated_encoding(encoding):
    """The answer's range sits at the cursor, in the client's units, whatever the model writes."""
    from lsp_server.completion.prompt import build_prompt

    seen = {}

    def on_complete(request):
        context = build_prompt(request, _tokenizer())
        seen["prefix"], seen["suffix"] = context.prefix, context.suffix
        return Completion("world", context, Generation([1], "world", "stop", GenerationStats()), Mode(False))

    worker, _ = _fake_worker(on_complete=on_complete)
    text = '# 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 smoke\n\n    print("Goodbye, ")\n    s = "😀😀"; return s\n    t = "日本語 é"; x\n'
    pipeline, completions, _ = services(_opened(text, "file:///l1.py"), worker)
    pipeline.position_encoding = encoding
    codec_units = {"utf-16": lambda s: len(s.encode("utf-16-le")) // 2, "utf-8": lambda s: len(s.encode()),
                   "utf-32": len}[encoding]
    for line, before in ((2, '    print("Goodbye, '), (3, '    s = "😀😀"; '), (4, '    t = "日本語 é"; ')):
        position = types.Position(line=line, character=codec_units(before))
        answer = await completions.complete("inlineCompletion", "file:///l1.py", position)
        assert answer.range == types.Range(start=position, end=position)
        assert seen["prefix"].endswith(before) and text.split("\n")[line].startswith(before + seen["suffix"][:1])
    worker.shutdown()


@pytest.mark.model
async def test_requests_before_ready_get_empty_answers_then_real_ones():
    release = threading.Event()

    def slow_loader(config, on_stage):
        from decoding.engine import Engine
        from lsp_server.backends.local import as_backend

        release.wait(timeout=60)
        return as_backend(Engine.load(config, on_stage))

    sent = []
    worker = ModelWorker(slow_loader)
    _, completions, _ = services(_opened(), worker, Tracer(sent.append), lambda: Settings(max_new_tokens=8))
    loading = worker.load(STARTER.engine_config())
    assert await completions.complete("inlineCompletion", URI, types.Position(line=4, character=4)) is None
    assert "models loading" in sent[-1].message
    release.set()
    assert loading.result(timeout=120) == READY
    answer = await completions.complete("inlineCompletion", URI, types.Position(line=4, character=4))
    assert answer is not None and answer.insert_text.strip()
    assert answer.range == types.Range(start=types.Position(line=4, character=4), end=types.Position(line=4, character=4))
    worker.shutdown()


@pytest.mark.model
async def test_an_opened_document_is_tokenised_ahead_and_its_first_request_starts_from_those_tokens():
    import json.decoder
    from pathlib import Path

    from lsp_server.completion.prompt_tokens import SourceKey

    worker = ModelWorker(session_factory=functools.partial(ModelSession, defer_cold_parts=True))
    assert worker.load(STARTER.engine_config()).result(timeout=120) == READY
    text = Path(json.decoder.__file__).read_text()
    uri = "file:///big.py"
    store = _opened(text, uri)
    pipeline, completions, _ = services(store, worker, settings_ref=lambda: Settings(max_new_tokens=4))
    pipeline.document_opened(store.get(uri))
    worker.run(ModelSession.warm_up).result(timeout=60)  # queued behind the seeding
    encoder = worker._session.sources._encoder  # read after the model thread is done with it
    assert encoder.holds(SourceKey(uri))
    before = encoder.reused_tokens
    line = text[:text.index("def py_scanstring")].count("\n") + 3
    await completions.complete("inlineCompletion", uri, types.Position(line=line, character=4))
    assert encoder.reused_tokens - before > 1000  # the prompt window's tokens (about 1,300)
    worker.shutdown()


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from transformers import AutoTokenizer

    from decoding.weights.starter import TARGET_DIR

    return AutoTokenizer.from_pretrained(TARGET_DIR, local_files_only=True)
