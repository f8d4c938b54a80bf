"""Completions started at the key (lsp_server/requests/ahead.py): the request that follows for the same cursor
takes the started one, anything else cancels it, and nothing starts where the editor never asks."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from lsp_server.settings import Settings
from lsp_server.tracing import Tracer
from lsp_server.workspace.positions import codec_for
from tests.fake_session import services
from tests.test_service import TEXT, URI, _completion, _fake_worker, _opened, _settled

pytestmark = pytest.mark.unit

END = types.Position(line=4, character=4)  # the end of TEXT


def type_key(store, completions, version: int, key: str, at: types.Position):
    """Insert ``key`` at ``at`` as a didChange does (store, then the completion service); the new document."""
    applied = []
    document = store.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=key)]),
        codec_for("utf-16"), applied)
    completions.changed(document, applied[0][0] + len(applied[0][2]))
    return document


def after(position: types.Position, key: str) -> types.Position:
    return types.Position(line=position.line, character=position.character + len(key))


async def test_the_request_after_a_key_takes_the_completion_started_at_the_key():
    worker, (session,) = _fake_worker(on_complete=lambda request: _completion(request, f"x{request.offset}"))
    sent = []
    _, completions, _ = services(store := _opened(), worker, Tracer(sent.append))
    await completions.complete("inlineCompletion", URI, END, automatic=True)  # the editor asks while typing
    await _settled(worker)
    type_key(store, completions, 2, "r", END)
    await _settled(worker)
    methods = [args[0].method for name, args in session.calls if name == "complete"]
    assert methods == ["inlineCompletion", "ahead"]  # started at the key, before any request
    answer = await completions.complete("inlineCompletion", URI, after(END, "r"), automatic=True)
    assert answer.insert_text == f"x{len(TEXT) + 1}"
    assert [name for name in session.names() if name == "complete"] == ["complete"] * 2  # not asked again
    await _settled(worker)
    assert "ok" in sent[-1].message
    worker.shutdown()


async def test_a_request_elsewhere_cancels_the_started_completion_and_runs_its_own():
    seen = []

    def on_complete(request):
        seen.append(request)
        if request.method == "ahead":
            assert request.cancelled.wait(timeout=10), "the request elsewhere did not cancel it"
            return None
        return _completion(request, "pass")

    worker, _ = _fake_worker(on_complete=on_complete)
    _, completions, _ = services(store := _opened(), worker)
    completions.ahead.asked(URI)
    type_key(store, completions, 2, "r", END)
    answer = await completions.complete("inlineCompletion", URI, types.Position(line=0, character=0), automatic=False)
    assert answer.insert_text == "pass" and [r.method for r in seen] == ["ahead", "inlineCompletion"]
    worker.shutdown()


async def test_the_next_key_cancels_the_started_completion():
    worker, _ = _fake_worker(on_complete=lambda request: (request.cancelled.wait(timeout=10), None)[1])
    _, completions, _ = services(store := _opened(), worker)
    completions.ahead.asked(URI)
    type_key(store, completions, 2, "r", END)
    first = completions.ahead._started[URI].request
    type_key(store, completions, 3, "e", after(END, "r"))
    assert first.cancelled.is_set() and not completions.ahead._started[URI].request.cancelled.is_set()
    completions.ahead.forget(URI)
    await asyncio.sleep(0)
    worker.shutdown()


@pytest.mark.parametrize("asked, ahead", [(False, True), (True, False)])
async def test_nothing_starts_where_the_editor_never_asks_or_the_setting_is_off(asked, ahead):
    worker, (session,) = _fake_worker(on_complete=lambda request: _completion(request, "pass"))
    _, completions, _ = services(store := _opened(), worker, settings_ref=lambda: Settings(complete_ahead=ahead))
    if asked:
        completions.ahead.asked(URI)
    type_key(store, completions, 2, "r", END)
    await _settled(worker)
    assert "complete" not in session.names() and URI not in completions.ahead._started
    worker.shutdown()


async def test_an_invoked_request_does_not_take_the_automatic_completion_started_at_the_key():
    """The completion started at the key is automatic (it may be cut for time); the user's explicit request
    for the same cursor runs its own, invoked one."""
    seen = []

    def on_complete(request):
        seen.append(request)
        if request.method == "ahead":
            assert request.cancelled.wait(timeout=10), "the invoked request did not cancel it"
            return None
        return _completion(request, "pass")

    worker, _ = _fake_worker(on_complete=on_complete)
    _, completions, _ = services(store := _opened(), worker)
    completions.ahead.asked(URI)
    type_key(store, completions, 2, "r", END)
    answer = await completions.complete("inlineCompletion", URI, after(END, "r"), automatic=False)
    assert answer.insert_text == "pass" and [(r.method, r.automatic) for r in seen] == [
        ("ahead", True), ("inlineCompletion", False)]
    worker.shutdown()
