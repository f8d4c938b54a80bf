"""Next-edit prompts computed when an edit burst ends (lsp_server/requests/rewrite_ahead.py): once a document with
recent edits has had no change for the settle time, the session computes the rewrite prompt for the
cursor the last change left; a change before then restarts the wait, a change after it stops the
prefill, and nothing starts for a setting turned off, a closed or secret document."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from lsprotocol import types

from lsp_server.settings import Settings
from lsp_server.workspace.positions import codec_for
from tests.fake_session import services
from tests.test_service import TEXT, URI, _fake_worker, _opened, _settled

pytestmark = pytest.mark.unit

SETTLED_S = 0.2  # the test's settle time (the server's: a 0.5 s pause)


def edit(store, next_edits, version: int, text: str, at: types.Position, uri: str = URI):
    """Insert ``text`` at ``at`` as a didChange does (store, history, then the next-edit service)."""
    before, applied = store.get(uri), []
    document = store.change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)]),
        codec_for("utf-16"), applied)
    next_edits.history.record(before, document, applied)
    next_edits.changed(document, applied[0][0] + len(applied[0][2]))
    return document


def prefills(session) -> list:
    return [args for name, args in session.calls if name == "prefill_rewrite"]


def setup(settings: Settings = Settings(), text: str = TEXT, uri: str = URI):
    worker, (session,) = _fake_worker()
    store = _opened(text, uri)
    pipeline, _, next_edits = services(store, worker, settings_ref=lambda: settings)
    next_edits.ahead.settled_s = SETTLED_S
    return worker, session, store, pipeline, next_edits


async def test_the_prompt_is_computed_once_the_burst_ends_for_the_cursor_the_edit_left():
    worker, session, store, _, next_edits = setup()
    document = edit(store, next_edits, 2, "x", types.Position(line=0, character=9))  # def add(ax, b)
    await asyncio.sleep(SETTLED_S / 2)
    document = edit(store, next_edits, 3, "y", types.Position(line=0, character=10))  # the burst goes on
    await asyncio.sleep(SETTLED_S * 0.75)
    await _settled(worker)
    assert prefills(session) == []  # the first change's wait was restarted by the second
    await asyncio.sleep(SETTLED_S)
    await _settled(worker)
    (request, diffs, should_stop), = prefills(session)
    assert request.document is document and request.offset == document.text.index("axy") + 3
    assert request.method == "nextEditAhead"
    assert len(diffs) == 1 and "+def add(axy, b):" in diffs[0]
    assert not should_stop()
    edit(store, next_edits, 4, "z", types.Position(line=0, character=11))  # a change stops it
    assert should_stop()
    worker.shutdown()


@pytest.mark.parametrize("why", ["setting off", "closed", "secret", "changed without a cursor"])
async def test_nothing_is_computed_when_it_cannot_be_used(why):
    settings = replace(Settings(), next_edit_prefill=False) if why == "setting off" else Settings()
    uri = "file:///work/.env" if why == "secret" else URI
    worker, session, store, pipeline, next_edits = setup(settings, uri=uri)
    document = edit(store, next_edits, 2, "x", types.Position(line=0, character=9), uri)
    if why == "closed":
        store.close(uri)
        pipeline.document_closed(uri)
    if why == "changed without a cursor":
        next_edits.changed(document, None)
    await asyncio.sleep(SETTLED_S * 2)
    await _settled(worker)
    assert prefills(session) == []
    worker.shutdown()


async def test_the_check_can_fail_the_same_edit_with_the_setting_on_computes_it():
    worker, session, store, _, next_edits = setup()
    edit(store, next_edits, 2, "x", types.Position(line=0, character=9))
    await asyncio.sleep(SETTLED_S * 2)
    await _settled(worker)
    assert len(prefills(session)) == 1
    worker.shutdown()


def written_rewrite(request):
    """A finished rewrite with one edit over the first line (what the fake session answers)."""
    from decoding.types import FinishReason, Generation, GenerationStats
    from lsp_server.model.completer import Rewrite
    from lsp_server.backends.base import RewritePrompt

    prompt = RewritePrompt([1], [1], 0, 14, "", "```", True)
    return Rewrite(prompt, Generation([1], "", FinishReason.STOP, GenerationStats()), "def add(x, b):", [(8, 9, "x")])


def setup_suggesting(on_rewrite=written_rewrite):
    settings = replace(Settings(), next_edit_suggest_ahead=True)
    worker, (session,) = _fake_worker(on_rewrite=on_rewrite)
    store = _opened()
    sent = []
    pipeline, _, next_edits = services(store, worker, settings_ref=lambda: settings)
    next_edits.notify = lambda method, params: sent.append((method, params))
    next_edits.ahead.settled_s = SETTLED_S
    return worker, session, store, next_edits, sent


async def test_with_suggest_ahead_the_rewrite_is_written_the_editor_told_and_the_request_answered_with_it():
    worker, session, store, next_edits, sent = setup_suggesting()
    document = edit(store, next_edits, 2, "x", types.Position(line=0, character=9))
    await asyncio.sleep(SETTLED_S * 2)
    await _settled(worker)
    await asyncio.sleep(0.05)  # the done callback comes back to the event loop
    assert [name for name in session.names() if name in ("rewrite", "prefill_rewrite")] == ["rewrite"]
    (method, params), = sent
    assert method == "speclsp/nextEditReady"
    assert params == {"textDocument": {"uri": URI, "version": document.version},
                      "position": {"line": 0, "character": 10}}
    answer = await next_edits.next_edit(URI, types.Position(line=0, character=10))
    assert answer.rewrite.edits == [(8, 9, "x")]
    assert session.names().count("rewrite") == 1  # answered with the one written ahead, not computed again
    await next_edits.next_edit(URI, types.Position(line=0, character=10))
    assert session.names().count("rewrite") == 2  # it answers once: the next request computes its own
    worker.shutdown()


async def test_a_change_while_it_is_written_drops_it_and_nothing_is_announced():
    import threading

    gate = threading.Event()  # the model thread writes until the test lets it finish
    worker, session, store, next_edits, sent = setup_suggesting(lambda request: gate.wait(5) and written_rewrite(request))
    edit(store, next_edits, 2, "x", types.Position(line=0, character=9))
    await asyncio.sleep(SETTLED_S * 1.5)
    assert session.names().count("rewrite") == 1  # started, still writing
    edit(store, next_edits, 3, "y", types.Position(line=0, character=10))  # a key while it writes
    next_edits.ahead.forget(URI)  # no second burst end in this test
    gate.set()
    await _settled(worker)
    await asyncio.sleep(0.05)
    assert sent == [] and next_edits._ready == {}
    worker.shutdown()
