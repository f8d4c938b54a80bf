"""Hostile document traffic against the real server over stdio (starter pair): changes past the end,
changes that do not fit the protocol's types, changes for documents never opened, a huge document
and bursts of edits. Afterwards every request has been answered and completions come back for the
text the client holds.

What the server holds is observed through its answers: a completion's range is the cursor, clamped
to its line's end (so a request far right of a line gives that line's length), and a request on a
line past the last one is refused with the last line's number.
"""

from __future__ import annotations

import asyncio
import re
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import ClientServerConfig, LanguageClient

from bench.keystrokes import code_like_text
from tests.conftest import STARTER_OPTIONS
from tests.test_lsp_e2e import capabilities, logged, only_item, wait_until_ready

pytestmark = pytest.mark.adversarial

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server.cli", "serve"])
SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    "  # 6 lines; the starter completes at (5, 4)
DEADLINE_S = 60.0  # every answer within this (detects a hang, not speed)


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    lsp_client.initialize_result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), initialization_options={**STARTER_OPTIONS, "completion.maxNewTokens": 8,
                                                             "index.enabled": False}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


_versions: dict[str, int] = {}


def open_doc(client: LanguageClient, name: str, text: str) -> str:
    uri = f"file:///hostile/{name}"
    _versions[uri] = 1
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def edit(client: LanguageClient, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
    _versions[uri] = _versions.get(uri, 0) + 1
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=_versions[uri]),
        content_changes=[types.TextDocumentContentChangePartial(range=types.Range(
            start=types.Position(line=start[0], character=start[1]),
            end=types.Position(line=end[0], character=end[1])), text=text)]))


def replace_all(client: LanguageClient, uri: str, text: str) -> None:
    _versions[uri] = _versions.get(uri, 0) + 1
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=_versions[uri]),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def raw_change(client: LanguageClient, params: object) -> None:
    """A didChange notification with any JSON as its parameters (the typed client would refuse it)."""
    client.protocol._send_data({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": params})


async def ask(client: LanguageClient, uri: str, line: int, character: int) -> types.InlineCompletionList:
    return await asyncio.wait_for(client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))), DEADLINE_S)


async def last_line(client: LanguageClient, uri: str) -> int:
    """The server's last line number of ``uri``, from its refusal of a line far past it."""
    with pytest.raises(JsonRpcInvalidParams) as refused:
        await ask(client, uri, 10**6, 0)
    return int(re.search(r"past the last line \((\d+)\)", str(refused.value)).group(1))


async def line_length(client: LanguageClient, uri: str, line: int) -> int:
    """The server's length of ``line`` (UTF-16 units): a completion far right of it lands at its end."""
    return only_item(await ask(client, uri, line, 10**6)).range.start.character


async def still_serving(client: LanguageClient) -> None:
    status = await asyncio.wait_for(client.protocol.send_request_async("speclsp/status", {}), DEADLINE_S)
    assert status.state == "ready"


@pytest.mark.asyncio(loop_scope="module")
async def test_changes_past_the_end_are_clamped_and_completions_follow_the_text(client: LanguageClient):
    uri = open_doc(client, "past_end.py", SOURCE)
    before = len(client.log_messages)
    edit(client, uri, (6, 0), (6, 0), "\n\ndef mul(a, b):\n    ")  # {line: lineCount, character: 0}
    assert await last_line(client, uri) == 8 and await line_length(client, uri, 8) == 4
    edit(client, uri, (7, 40), (999, 7), "  # times\n    return a * b\n\ndef div(a, b):\n    ")  # far past
    assert await last_line(client, uri) == 11 and await line_length(client, uri, 7) == len("def mul(a, b):  # times")
    item = only_item(await ask(client, uri, 11, 4))
    assert item.range.start == types.Position(line=11, character=4)
    await logged(client, before, "past_end.py:11:4 ok")
    assert not any("out of sync" in m.message for m in client.log_messages[before:])


@pytest.mark.asyncio(loop_scope="module")
async def test_a_change_that_cannot_be_read_stops_completions_until_the_full_text_comes(client: LanguageClient):
    uri = open_doc(client, "lost.py", SOURCE)
    before = len(client.log_messages)
    raw_change(client, {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
        {"range": {"start": {"line": "zero", "character": 0}, "end": {"line": 0, "character": 0}}, "text": "x"}]})
    for _ in range(3):  # no completion from text the client no longer has; said once, with the reason
        assert not (await ask(client, uri, 5, 4)).items
    await logged(client, before, "lost.py:5:4 document out of sync")
    messages = client.log_messages[before:]
    errors = [m for m in messages if m.type == types.MessageType.Error and "could not be read" in m.message]
    explained = [m for m in messages if "out of sync with the editor" in m.message]
    assert len(errors) == 1 and "didChange for lost.py could not be read" in errors[0].message and len(explained) == 1
    assert uri not in errors[0].message  # its short name, never the URI
    edit(client, uri, (5, 4), (5, 4), "return a - b")  # incremental: still out of sync
    assert not (await ask(client, uri, 5, 4)).items
    replace_all(client, uri, SOURCE + "return a - b\n\ndef neg(a):\n    ")  # the full text heals it
    assert await last_line(client, uri) == 8
    assert only_item(await ask(client, uri, 8, 4)).range.start == types.Position(line=8, character=4)
    raw_change(client, {"textDocument": {"uri": uri, "version": 9}, "contentChanges": [{"text": None}]})
    assert not (await ask(client, uri, 8, 4)).items  # a null text is not the text "None"
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=uri, language_id="python", version=10, text=SOURCE)))  # a reopen heals it too
    assert only_item(await ask(client, uri, 5, 4)).range.start == types.Position(line=5, character=4)


@pytest.mark.asyncio(loop_scope="module")
async def test_changes_to_documents_never_opened_and_garbage_parameters_are_survived(client: LanguageClient):
    before = len(client.log_messages)
    ghost = "file:///hostile/never-opened.py"
    edit(client, ghost, (0, 0), (0, 0), "x")
    edit(client, ghost, (50, 3), (90, 0), "y")
    replace_all(client, ghost, "z")
    raw_change(client, {"textDocument": {"uri": ghost, "version": 1}, "contentChanges": [{"range": None, "text": 1}]})
    for garbage in (None, [], "text", 42, {}, {"textDocument": None}, {"textDocument": {"uri": 5}, "contentChanges": []},
                    {"textDocument": {"uri": ghost, "version": 1}, "contentChanges": [{"range": {}}]}):
        raw_change(client, garbage)
    await still_serving(client)
    with pytest.raises(JsonRpcInvalidParams, match="not open"):
        await ask(client, ghost, 0, 0)
    await logged(client, before, "names no document")
    assert any("not open" in m.message and m.type == types.MessageType.Warning for m in client.log_messages[before:])
    uri = open_doc(client, "after_garbage.py", SOURCE)
    assert only_item(await ask(client, uri, 5, 4)).range.start == types.Position(line=5, character=4)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_huge_document_and_a_burst_of_edits_are_all_answered_for_the_final_text(client: LanguageClient):
    text = code_like_text(5_000_000) + SOURCE
    lines = text.count("\n")  # the last line: SOURCE's "    "
    uri = open_doc(client, "huge.py", text)
    typed = "return a - b  # burst"
    pending = []
    for column, char in enumerate(typed):  # every keystroke followed by a request, none awaited
        edit(client, uri, (lines, 4 + column), (lines, 4 + column), char)
        pending.append(ask(client, uri, lines, 5 + column))
        if column % 5 == 0:  # and some appends past the end, removed again at once
            edit(client, uri, (lines + 1, 0), (lines + 1, 0), "\n# noise")
            edit(client, uri, (lines, 5 + column), (lines + 50, 0), "")
    answers = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), DEADLINE_S * 2)
    for answer in answers:  # each one answered: a list (empty when superseded), never an error
        assert isinstance(answer, types.InlineCompletionList), answer
    assert await last_line(client, uri) == lines
    end = 4 + len(typed)
    assert only_item(await ask(client, uri, lines, end)).range.start == types.Position(line=lines, character=end)
    assert await line_length(client, uri, lines) == end
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    await still_serving(client)
