"""End to end: a real LSP client (pytest-lsp) talks to ``speclsp serve`` over stdio on the starter models.

Covers initialize (capabilities, position encoding, progress), inline completion and completion on a
held-out standard-library file, ranges in UTF-16 after astral characters, the document's edges, CRLF
documents, a range on every item and no special tokens in the text (docs/cases.md L1, L2, L3, L5, L8).
"""

from __future__ import annotations

import asyncio
import sys

import pytest
import pytest_lsp
from lsprotocol import types

from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from bench.corpus import stdlib_root
from tests.conftest import STARTER_OPTIONS

#: These tests check ranges and protocol edges on whatever the tiny starter pair writes. With token
#: healing it often ends at once where its healed prompt makes an end likely (`x = ` + end of text, an
#: honest answer of that model), and an empty answer has no range to check.
UNHEALED = {"completion.tokenHealing": False}

pytestmark = pytest.mark.e2e

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server.cli", "serve"])
HELD_OUT_FILE = stdlib_root() / "json" / "decoder.py"
SPECIAL_TOKENS = ("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                  "<|file_sep|>", "<|repo_name|>")


async def wait_until_ready(client: LanguageClient, timeout: float = 180.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for message in client.log_messages:
            if "models ready" in message.message:
                return
            if "model loading failed" in message.message:
                raise AssertionError(message.message)
        await asyncio.sleep(0.05)
    raise AssertionError("models did not load in time")


def capabilities(encodings: list[str] | None = None) -> types.ClientCapabilities:
    caps = client_capabilities("visual-studio-code")
    if encodings is not None:
        caps.general = types.GeneralClientCapabilities(position_encodings=encodings)
    return caps


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient):
    lsp_client.initialize_result = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=capabilities(), initialization_options={**STARTER_OPTIONS, "completion.maxNewTokens": 24, **UNHEALED}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


_versions: dict[str, int] = {}


def open_document(client: LanguageClient, name: str, text: str) -> str:
    uri = f"file:///workspace/{name}"
    _versions[uri] = 1
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


async def inline(client: LanguageClient, uri: str, line: int, character: int) -> types.InlineCompletionList:
    """The answer, once the request's log line has arrived too (the server logs just after answering)."""
    before = len(client.log_messages)
    answer = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
    await logged(client, before, f"{uri.rsplit('/', 1)[-1]}:{line}:{character} ")
    return answer


#: How long to wait for a log line the server writes just after answering (s): generous, for a loaded
#: machine; the line normally arrives within milliseconds.
LOG_DEADLINE_S = 30.0


async def logged(client: LanguageClient, before: int, text: str, timeout: float = LOG_DEADLINE_S) -> None:
    """Wait for a log message after index ``before`` that contains ``text``.

    Raises:
        AssertionError: none arrived within ``timeout`` seconds (the message shows the latest lines).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not any(text in m.message for m in client.log_messages[before:]):
        if loop.time() > deadline:
            latest = [m.message for m in client.log_messages[before:]][-5:]
            raise AssertionError(f"no log line containing {text!r} within {timeout:.0f} s; latest: {latest}")
        await asyncio.sleep(0.01)


def only_item(answer: types.InlineCompletionList | None) -> types.InlineCompletionItem:
    """The one item of an answer that must hold a completion; AssertionError on None, no item, several
    items or whitespace-only text (the checks on an item must never pass on an empty answer)."""
    assert answer is not None and len(answer.items) == 1, f"expected one completion, got {answer}"
    assert answer.items[0].insert_text.strip(), f"expected a completion, got {answer.items[0].insert_text!r}"
    return answer.items[0]


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@pytest.mark.asyncio(loop_scope="module")
async def test_initialize_advertises_inline_completion_and_completion(client: LanguageClient):
    capabilities = client.initialize_result.capabilities
    assert capabilities.inline_completion_provider is not None
    assert capabilities.completion_provider is not None
    assert capabilities.position_encoding == types.PositionEncodingKind.Utf16
    assert capabilities.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    # Models loaded with work-done progress: a begin, reports, an end.
    kinds = [type(v).__name__ for reports in client.progress_reports.values() for v in reports]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd"


@pytest.mark.asyncio(loop_scope="module")
async def test_held_out_file_inline_completion_and_completion(client: LanguageClient):
    text = HELD_OUT_FILE.read_text(encoding="utf-8")
    uri = open_document(client, "decoder.py", text)
    lines = text.splitlines()
    # Cut point: the start of the body of the first method that has one.
    line = next(i for i, l in enumerate(lines) if l.strip().startswith("def ")) + 1
    character = len(lines[line]) - len(lines[line].lstrip())
    item = only_item(await inline(client, uri, line, character))
    assert item.range == types.Range(start=types.Position(line=line, character=character),
                                     end=types.Position(line=line, character=character))
    before = len(client.log_messages)
    completion = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character)))
    await logged(client, before, "type-through cache hit")
    assert len(completion.items) == 1
    assert completion.items[0].text_edit.new_text == item.insert_text  # greedy: the same completion
    # Every request is logged with an id, stage times and acceptance counts; the second request, at
    # the same place in the same text, came from the type-through cache.
    assert any("type-through cache hit" in m.message for m in client.log_messages)
    traces = [m.message for m in client.log_messages if "req=" in m.message and " ok " in m.message]
    assert len(traces) >= 1
    assert all("verify=" in t and "total=" in t and "accepted[" in t and "tokens/pass=" in t for t in traces)


@pytest.mark.asyncio(loop_scope="module")
async def test_l1_astral_characters_range_in_utf16(client: LanguageClient):
    text = '# 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 smoke\n\n    print("Goodbye, ")\n    s = "😀😀"; return s\n'
    uri = open_document(client, "l1.py", text)
    for line, before in ((2, '    print("Goodbye, '), (3, '    s = "😀😀"; ')):
        item = only_item(await inline(client, uri, line, utf16_len(before)))
        assert item.range.start == item.range.end == types.Position(line=line, character=utf16_len(before))
        assert "\n" not in item.insert_text  # code right of the cursor: single line


@pytest.mark.asyncio(loop_scope="module")
async def test_l2_document_edges(client: LanguageClient):
    empty = open_document(client, "empty.py", "")
    assert only_item(await inline(client, empty, 0, 0)).range.start == types.Position(line=0, character=0)

    no_newline = open_document(client, "x.py", "x = 1")
    assert only_item(await inline(client, no_newline, 0, 5)).range.start == types.Position(line=0, character=5)

    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=no_newline, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=0, character=4), end=types.Position(line=0, character=5)),
            text="")]))
    assert only_item(await inline(client, no_newline, 0, 4)).range.start == types.Position(line=0, character=4)

    # Past the end of the line: clamped to the line end (LSP rule), the range says where.
    assert only_item(await inline(client, no_newline, 0, 40)).range.start == types.Position(line=0, character=4)
    # Past the last line: a clear JSON-RPC error, and the server keeps working.
    with pytest.raises(JsonRpcInvalidParams, match="past the last line"):
        await inline(client, no_newline, 7, 0)
    with pytest.raises(JsonRpcInvalidParams, match="not open"):
        await inline(client, "file:///workspace/never-opened.py", 0, 0)
    only_item(await inline(client, no_newline, 0, 4))


@pytest.mark.asyncio(loop_scope="module")
async def test_l3_crlf_same_completion_as_lf(client: LanguageClient):
    lf = HELD_OUT_FILE.read_text(encoding="utf-8")
    lines = lf.split("\n")
    line = next(i for i, l in enumerate(lines) if l.strip().startswith("def ")) + 1
    character = len(lines[line]) - len(lines[line].lstrip())
    answers = []
    for name, text in (("lf.py", lf), ("crlf.py", lf.replace("\n", "\r\n"))):
        answers.append(only_item(await inline(client, open_document(client, name, text), line, character)).insert_text)
    assert "\r" not in answers[0]
    assert answers[1] == answers[0].replace("\n", "\r\n")
    assert "\r" not in answers[1].replace("\r\n", "")
    # A single-line completion (code right of the cursor) adds no line break.
    single = only_item(await inline(client, open_document(client, "crlf1.py", "x = foo(\r\n    1, 2)\r\n"), 1, 4))
    assert "\r" not in single.insert_text and "\n" not in single.insert_text


@pytest.mark.asyncio(loop_scope="module")
async def test_l5_l8_every_item_has_range_and_no_special_tokens(client: LanguageClient):
    text = (stdlib_root() / "email" / "quoprimime.py").read_text(encoding="utf-8")
    uri = open_document(client, "quoprimime.py", text)
    lines = text.splitlines()
    cut_lines = [i for i, l in enumerate(lines) if l.strip()][10::25][:8]
    assert len(cut_lines) == 8
    for line in cut_lines:
        item = only_item(await inline(client, uri, line, len(lines[line]) // 2))
        assert item.range is not None
        assert item.range.start.line == line == item.range.end.line
        assert not any(token in item.insert_text for token in SPECIAL_TOKENS)


@pytest_lsp.fixture(config=SERVER)
async def utf8_client(lsp_client: LanguageClient):
    lsp_client.initialize_result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(["utf-8", "utf-16"]),
        # maxNewTokens: a flat name of the release before, still read, with a deprecation warning
        initialization_options={"speclsp": {**STARTER_OPTIONS, "maxNewTokens": 8, "decoding.drafter": "bogus",
                                            "colour": "blue",
                                            **UNHEALED}}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_position_encoding_negotiation_and_settings_warnings(utf8_client: LanguageClient):
    assert utf8_client.initialize_result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
    warnings = [m.message for m in utf8_client.messages if m.type == types.MessageType.Warning]
    assert any("speclsp.decoding.drafter" in w for w in warnings) and any("speclsp.colour" in w for w in warnings)
    deprecated = [w for w in warnings if "speclsp.maxNewTokens is deprecated" in w]  # one, naming the new key
    assert len(deprecated) == 1 and "speclsp.completion.maxNewTokens" in deprecated[0]
    text = 's = "😀é"; x = \n'
    uri = open_document(utf8_client, "utf8.py", text)
    before = 's = "😀é"; '
    item = only_item(await inline(utf8_client, uri, 0, len(before.encode("utf-8"))))
    assert item.range.start == types.Position(line=0, character=len(before.encode("utf-8")))
    with pytest.raises(JsonRpcInvalidParams):
        await inline(utf8_client, uri, 5, 0)


@pytest.mark.asyncio(loop_scope="module")
async def test_change_to_unopened_document_is_a_warning_and_status_request_answers(client: LanguageClient):
    before = len(client.log_messages)
    uri = "speclsp://log"  # Neovim once sent this for a scratch buffer it had renamed
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="x")]))
    status = await client.protocol.send_request_async("speclsp/status", {})
    assert status.state == "ready" and status.model == "starter"
    await logged(client, before, "not open; ignored")
    messages = [m for m in client.log_messages[before:]]
    assert any("not open; ignored" in m.message and m.type == types.MessageType.Warning for m in messages)
    assert not any("Error" in m.message or "KeyError" in m.message for m in messages)
    # Still serving: a completion on an open document answers.
    uri = open_document(client, "after_bad_change.py", "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    ")
    only_item(await inline(client, uri, 5, 4))


#: The server with the model packs hidden, as on a machine installed without ``[models]``.
WITHOUT_PACKS = ClientServerConfig(server_command=[
    sys.executable, "-c", "import decoding.weights.model_names as names; names.pack_available = lambda name: False; "
    "from lsp_server.cli import main; raise SystemExit(main(['serve']))"])


@pytest_lsp.fixture(config=WITHOUT_PACKS)
async def packless_client(lsp_client: LanguageClient):
    lsp_client.initialize_result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), initialization_options={"completion.maxNewTokens": 8, "index.enabled": False}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def test_default_models_missing_falls_back_to_starter_and_says_how_to_install(packless_client: LanguageClient):
    from decoding.weights.model_packs import INSTALL_COMMAND

    ready = [m.message for m in packless_client.log_messages if "models ready" in m.message]
    assert "target=starter " in ready[0] and "draft=starter-draft" in ready[0]
    warnings = [m.message for m in packless_client.messages if m.type == types.MessageType.Warning]
    assert len(warnings) == 1 and INSTALL_COMMAND in warnings[0] and "qwen2.5-coder-1.5b" in warnings[0]
