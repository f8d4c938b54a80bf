"""The scheduler of work ahead (lsp_server/requests/work_ahead.py): its one guard, work ahead giving way to a
request (queued or in flight), the next line waiting on the event loop for an idle model thread, and
the order between the end of an edit burst and the next line after an answer."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
from lsprotocol import types

from lsp_server.model.session import ModelSession
from lsp_server.model.worker import ERROR, READY, ModelWorker
from lsp_server.request import resolve_request
from lsp_server.requests.rewrite_ahead import REWRITE_AHEAD
from lsp_server.requests.work_ahead import NEXT_LINE, WHOLE_PROMPT
from lsp_server.settings import Settings
from lsp_server.workspace.positions import codec_for
from tests.fake_session import FakeSession, services
from tests.test_ahead import type_key
from tests.test_service import STARTER, TEXT, URI, _completion, _opened

pytestmark = pytest.mark.unit

NO_WEIGHTS = "no weights"  # a configuration the tests' loader fails on
IDLE_S = 0.15  # the tests' next-line idle time (the server's: NEXT_LINE_IDLE_S)
END = types.Position(line=4, character=4)  # the end of TEXT


class HookedSession(FakeSession):
    """A fake session whose work-ahead operations, once recorded, run ``hooks[name](request, should_stop)``
    (on the model thread); ``complete`` answers from ``hooks["complete"](request)``."""

    def __init__(self, hooks: dict):
        super().__init__(on_complete=hooks.get("complete"), on_rewrite=hooks.get("rewrite"))
        self.hooks = hooks

    def prepare_ahead(self, request, other_documents=(), repo=None, should_stop=None) -> int:
        super().prepare_ahead(request, other_documents, repo, should_stop)
        hook = self.hooks.get("prepare_ahead")
        return hook(request, should_stop) if hook is not None else 0

    def prefill_rewrite(self, request, history=(), should_stop=None) -> int:
        super().prefill_rewrite(request, history, should_stop)
        hook = self.hooks.get("prefill_rewrite")
        return hook(request, should_stop) if hook is not None else 0


def setup(hooks: dict | None = None, text: str = TEXT, uri: str = URI):
    made = []

    def load(config, on_stage):
        if config == NO_WEIGHTS:
            raise FileNotFoundError("no weights")

    worker = ModelWorker(load, lambda backend: made.append(HookedSession(hooks or {})) or made[-1])
    assert worker.load(STARTER.engine_config()).result(timeout=10) == READY
    store = _opened(text, uri)
    pipeline, completions, _ = services(store, worker)
    pipeline.work_ahead.next_line_idle_s = IDLE_S
    return worker, made[0], store, pipeline, completions


def request_at(store, position: types.Position = END, uri: str = URI):
    return resolve_request(store.get(uri), position, codec_for("utf-16"), Settings())


def waits_for_stop(stopped: list):
    """A hook that works until its ``should_stop`` reads as set, then notes whether it did (in ``stopped``)."""

    def hook(request, should_stop):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not should_stop():
            time.sleep(0.005)
        stopped.append(should_stop())
        return 0

    return hook


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def names(session) -> list[str]:
    return [name for name in session.names() if name != "claim_thread"]


# The guard
@pytest.mark.parametrize("case", ["in sync", "secret", "out of sync", "changed since", "closed", "models not ready",
                                  "work waiting"])
async def test_the_guard_lets_work_ahead_start_only_for_an_in_sync_current_non_secret_document_on_ready_models(case):
    gate = threading.Event()
    uri = "file:///work/.env" if case == "secret" else URI
    worker, session, store, pipeline, _ = setup({"complete": lambda request: gate.wait(10) and None}, uri=uri)
    document = store.get(uri)
    if case == "out of sync":
        store.mark_out_of_sync(uri, "a change was lost")
    if case == "changed since":
        store.change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=TEXT + "x")]), codec_for("utf-16"))
    if case == "closed":
        store.close(uri)
    if case == "models not ready":
        assert worker.load(NO_WEIGHTS).result(timeout=10) == ERROR
    if case == "work waiting":
        for _ in range(2):  # one runs (until the gate opens), one waits
            worker.run(ModelSession.complete, request_at(store))
        await until(lambda: names(session) == ["complete"])
        assert pipeline.work_ahead.may_start(document, gives_way=False)  # what does not give way may start
    assert pipeline.work_ahead.may_start(document, gives_way=True) is (case == "in sync")
    gate.set()
    worker.shutdown()


async def test_a_secret_document_is_never_tokenised_on_opening_and_another_is():
    worker, session, store, pipeline, _ = setup(uri="file:///work/.env")
    store.open(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=TEXT))
    pipeline.document_opened(store.get("file:///work/.env"))
    pipeline.document_opened(store.get(URI))
    worker.run(ModelSession.describe).result(timeout=10)
    assert [args[0].uri for name, args in session.calls if name == "document_opened"] == [URI]
    worker.shutdown()


# Giving way to requests
@pytest.mark.parametrize("gives_way", [True, False])
async def test_work_ahead_in_flight_gives_way_to_a_request_and_the_completion_at_the_key_does_not(gives_way):
    seen = []

    def complete(request):
        if request.method == "ahead":  # started by the scheduler: works until its flag reads as set, or 0.5 s
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline and not request.cancelled.is_set():
                time.sleep(0.005)
            seen.append(request.cancelled.is_set())
            return None
        return _completion(request, "pass")

    worker, session, store, pipeline, completions = setup({"complete": complete})
    work_ahead = pipeline.work_ahead
    ahead = resolve_request(store.get(URI), END, codec_for("utf-16"), Settings(), method="ahead")
    assert work_ahead.start(ahead, ModelSession.complete, gives_way=gives_way) is not None
    await until(lambda: names(session) == ["complete"])
    answer = await completions.complete("completion", URI, types.Position(line=0, character=0))
    assert answer.insert_text == "pass"
    assert seen == [gives_way]  # cut when it gives way; otherwise it ran to its end, the request behind it
    worker.shutdown()


async def test_work_ahead_still_queued_when_a_request_arrives_stops_before_any_work():
    gate, stopped = threading.Event(), []
    worker, session, store, pipeline, completions = setup({
        "complete": lambda request: gate.wait(10) and _completion(request, "pass"),
        "prefill_rewrite": lambda request, should_stop: stopped.append(should_stop()) or 0})
    busy = asyncio.ensure_future(completions.complete("completion", URI, END))  # holds the model thread
    await until(lambda: names(session) == ["complete"])
    rewrite_ahead = resolve_request(store.get(URI), END, codec_for("utf-16"), Settings(), method=REWRITE_AHEAD)
    assert pipeline.work_ahead.start(rewrite_ahead, ModelSession.prefill_rewrite, [], gives_way=True) is not None
    request = asyncio.ensure_future(completions.complete("inlineCompletion", URI, types.Position(line=0, character=0)))
    await until(worker.has_waiting)
    await asyncio.sleep(0.05)  # the request is queued behind the work ahead
    gate.set()
    assert (await busy).insert_text == "pass" and (await request).insert_text == "pass"
    assert stopped == [True]  # it found the request waiting and computed nothing
    worker.shutdown()


# The next line after an answer
async def test_the_next_line_is_prepared_after_an_idle_wait_on_the_event_loop_not_on_the_model_thread():
    worker, session, _, _, completions = setup({"complete": lambda request: _completion(request, "pass")})
    answered = time.monotonic()
    await completions.complete("inlineCompletion", URI, END)
    await asyncio.sleep(IDLE_S / 3)
    assert "warm_up" in names(session) and "prepare_ahead" not in names(session)  # nothing waits on the thread
    await until(lambda: "prepare_ahead" in names(session))
    assert time.monotonic() - answered >= IDLE_S
    (request,) = [args[0] for name, args in session.calls if name == "prepare_ahead"]
    assert request.method == NEXT_LINE and request.offset == len(TEXT)
    worker.shutdown()


async def test_after_an_answer_from_a_cut_prompt_the_whole_prompt_is_computed_in_the_next_lines_place():
    cut = lambda request: replace(_completion(request, "pass"), cut_from=900)  # noqa: E731
    worker, session, _, _, completions = setup({"complete": cut})
    await completions.complete("inlineCompletion", URI, END)
    await asyncio.sleep(IDLE_S / 3)
    assert "prefill_prompt" not in names(session)  # it waits for an idle model thread, as the next line does
    await until(lambda: "prefill_prompt" in names(session))
    await asyncio.sleep(2 * IDLE_S)
    assert "prepare_ahead" not in names(session)  # the whole prompt took the next line's place
    (request,) = [args[0] for name, args in session.calls if name == "prefill_prompt"]
    assert request.method == WHOLE_PROMPT and request.offset == len(TEXT)
    worker.shutdown()


async def test_in_a_document_answered_from_a_cut_prompt_each_change_schedules_the_whole_prompt_anew():
    cut = lambda request: replace(_completion(request, "pass"), cut_from=900)  # noqa: E731
    worker, session, store, pipeline, completions = setup({"complete": cut})
    await completions.complete("inlineCompletion", URI, END)
    assert URI in pipeline.work_ahead.cold
    document = type_key(store, completions, 2, "\n", END)  # Enter: the editor asks for nothing in indentation
    await until(lambda: any(name == "prefill_prompt" and args[0].document.version == 2
                            for name, args in session.calls))
    (request,) = [args[0] for name, args in session.calls if name == "prefill_prompt" and args[0].document.version == 2]
    assert request.offset == len(document.text) and request.method == WHOLE_PROMPT
    pipeline.work_ahead.answered(request_at(store, types.Position(line=5, character=0)))  # a whole-prompt answer
    assert URI not in pipeline.work_ahead.cold  # the check can fail: the document stays cold while cut
    calls = len(session.calls)
    type_key(store, completions, 3, "x", types.Position(line=5, character=0))
    await asyncio.sleep(3 * IDLE_S)
    assert "prefill_prompt" not in [name for name, _ in session.calls[calls:]]
    worker.shutdown()


async def test_closing_a_cold_document_drops_its_mark_and_its_pending_whole_prompt():
    cut = lambda request: replace(_completion(request, "pass"), cut_from=900)  # noqa: E731
    worker, session, _, pipeline, completions = setup({"complete": cut})
    await completions.complete("inlineCompletion", URI, END)
    await until(lambda: URI in pipeline.work_ahead._whole_for)  # planned once the answer is written
    assert URI in pipeline.work_ahead.cold
    completions.forget(URI)
    assert URI not in pipeline.work_ahead.cold and URI not in pipeline.work_ahead._whole_for
    await asyncio.sleep(3 * IDLE_S)
    assert "prefill_prompt" not in names(session)  # the pending start went with the document
    worker.shutdown()


async def test_the_whole_prompt_does_not_wait_for_an_idle_thread_and_the_bursts_work_gives_way_to_it():
    stopped = []
    worker, session, store, pipeline, _ = setup({"prefill_rewrite": waits_for_stop(stopped)})
    work_ahead = pipeline.work_ahead
    burst = work_ahead.start(request_at(store), ModelSession.prefill_rewrite, gives_way=True)
    await until(lambda: "prefill_rewrite" in names(session))
    work_ahead.answered(None, cut=request_at(store))
    await until(lambda: "prefill_prompt" in names(session))
    assert stopped == [True] and burst is not None  # the burst's work stopped for it
    worker.shutdown()


async def test_the_next_line_waits_while_the_model_thread_works_and_a_change_cancels_it():
    gate = threading.Event()
    worker, session, store, pipeline, _ = setup({"complete": lambda request: gate.wait(10) and None})
    work_ahead = pipeline.work_ahead
    work_ahead.answered(request_at(store))
    worker.run(ModelSession.complete, request_at(store))  # the model thread busy past the idle time
    await asyncio.sleep(3 * IDLE_S)
    assert "prepare_ahead" not in names(session)
    gate.set()
    await until(lambda: "prepare_ahead" in names(session))
    work_ahead.prepare_next_line(request_at(store))
    await asyncio.sleep(IDLE_S / 3)
    pipeline.cancel_document(URI)  # a change before the wait is over, as didChange does
    await asyncio.sleep(3 * IDLE_S)
    assert names(session).count("prepare_ahead") == 1
    worker.shutdown()


async def test_only_the_newest_answers_next_line_is_prepared():
    worker, session, store, pipeline, _ = setup()
    other = "file:///work/pkg/b.py"
    store.open(types.TextDocumentItem(uri=other, language_id="python", version=1, text="x = 1\n"))
    pipeline.work_ahead.prepare_next_line(request_at(store))
    pipeline.work_ahead.prepare_next_line(request_at(store, types.Position(line=0, character=5), other))
    await until(lambda: "prepare_ahead" in names(session))
    await asyncio.sleep(2 * IDLE_S)
    assert [args[0].uri for name, args in session.calls if name == "prepare_ahead"] == [other]
    worker.shutdown()


# The order between the burst's end and the next line
async def test_the_bursts_end_cuts_the_next_line_and_the_next_line_never_cuts_the_bursts_end():
    stopped_line, stopped_burst, burst_gate = [], [], threading.Event()

    def burst(request, should_stop):  # works until its gate opens, noting whether it was told to stop
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not burst_gate.is_set() and not should_stop():
            time.sleep(0.005)
        stopped_burst.append(should_stop())
        return 0

    worker, session, store, pipeline, _ = setup({"prepare_ahead": waits_for_stop(stopped_line),
                                                 "prefill_rewrite": burst})
    work_ahead = pipeline.work_ahead

    def burst_ends():
        request = resolve_request(store.get(URI), END, codec_for("utf-16"), Settings(), method=REWRITE_AHEAD)
        assert work_ahead.may_start(request.document, gives_way=True)
        work_ahead.start(request, ModelSession.prefill_rewrite, [], gives_way=True)

    # The next line runs; the burst's end comes: the next line gives way, the burst's work runs.
    work_ahead.prepare_next_line(request_at(store))
    await until(lambda: "prepare_ahead" in names(session))
    burst_ends()
    await until(lambda: stopped_line == [True] and "prefill_rewrite" in names(session))
    # The burst's work runs; an answer's next line comes due: it waits, and the burst's work goes on.
    work_ahead.prepare_next_line(request_at(store))
    await asyncio.sleep(3 * IDLE_S)
    assert names(session).count("prepare_ahead") == 1 and stopped_burst == []
    burst_gate.set()
    await until(lambda: names(session).count("prepare_ahead") == 2)
    assert stopped_burst == [False]  # it ran to its end
    worker.shutdown()
