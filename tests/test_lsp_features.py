"""End to end over stdio on the starter models: type-through cache, no suggestion while indenting
(docs/cases.md L7), fast typing (docs/cases.md L4), $/setTrace with $/logTrace details, the JSON-lines trace file, and
speclsp/status."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
import pytest_lsp
from lsprotocol import types

from pytest_lsp import ClientServerConfig, LanguageClient

from tests.test_lsp_e2e import LOG_DEADLINE_S, capabilities, logged, only_item, wait_until_ready
from tests.conftest import STARTER_OPTIONS

pytestmark = pytest.mark.e2e

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server.cli", "serve"])
SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    "


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return tmp_path_factory.mktemp("trace") / "requests.jsonl"


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, trace_path):
    lsp_client.traces = []

    @lsp_client.feature("$/logTrace")
    def log_trace(params):
        lsp_client.traces.append(params)

    lsp_client.initialize_result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), initialization_options={**STARTER_OPTIONS, "completion.maxNewTokens": 12,
                                                                  "trace.file": str(trace_path)}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


_version = {"n": 1}


def open_doc(client: LanguageClient, name: str, text: str) -> str:
    uri = f"file:///workspace/{name}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def type_text(client: LanguageClient, uri: str, line: int, character: int, text: str) -> None:
    _version["n"] += 1
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=_version["n"]),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=line, character=character),
                              end=types.Position(line=line, character=character)), text=text)]))


async def inline(client, uri, line, character, automatic=True):
    """The answer, once the request's log line has arrived too (the server logs just after answering)."""
    kind = types.InlineCompletionTriggerKind.Automatic if automatic else types.InlineCompletionTriggerKind.Invoked
    before = len(client.log_messages)
    answer = await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=kind)))
    await logged(client, before, f"{uri.rsplit('/', 1)[-1]}:{line}:{character} ")
    return answer


async def until(predicate, what: str, timeout: float = LOG_DEADLINE_S) -> None:
    """Poll ``predicate`` (a function, plain or async) every 20 ms until it is true.

    Raises:
        AssertionError: naming ``what``, when it is still false after ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.02)


def log_lines(client, since: int = 0) -> list[str]:
    return [m.message for m in client.log_messages[since:]]


@pytest.mark.asyncio(loop_scope="module")
async def test_type_through_answers_from_the_cache_without_the_model(client: LanguageClient):
    uri = open_doc(client, "tt.py", SOURCE)
    text = only_item(await inline(client, uri, 9, 4)).insert_text
    assert len(text) >= 2
    before = len(client.log_messages)
    type_text(client, uri, 9, 4, text[0])
    second = only_item(await inline(client, uri, 9, 5))
    assert second.insert_text == text[1:]
    assert second.range.start == types.Position(line=9, character=5)
    # Answered from the cache, not the model (its latency is measured by `speclsp bench lsp`, cache_hit_ms).
    assert any("tt.py:9:5 type-through cache hit" in line for line in log_lines(client, before))
    # Typing something else misses and goes back to the model.
    type_text(client, uri, 9, 5, "#")
    only_item(await inline(client, uri, 9, 6))
    assert any("tt.py:9:6 ok " in line for line in log_lines(client, before))


@pytest.mark.asyncio(loop_scope="module")
async def test_l7_no_automatic_suggestion_in_indentation_but_invoked_completes(client: LanguageClient):
    uri = open_doc(client, "l7.py", "def f():\n    result = compute()\n    return result\n")
    before = len(client.log_messages)
    automatic = await inline(client, uri, 1, 4, automatic=True)
    assert list(automatic.items) == []  # the expected answer here is empty: no automatic suggestion
    assert any("cursor in indentation" in line for line in log_lines(client, before))
    only_item(await inline(client, uri, 1, 4, automatic=False))
    assert any(" ok" in line or "superseded" in line for line in log_lines(client, before) if "l7.py:1:4" in line)


@pytest.mark.asyncio(loop_scope="module")
async def test_l4_fast_typing_one_generation_at_a_time_every_request_answered(client: LanguageClient):
    uri = open_doc(client, "l4.py", SOURCE)
    word = "total = a * b + 1234"  # 20 characters
    tasks = []
    for index, char in enumerate(word):
        type_text(client, uri, 9, 4 + index, char)
        tasks.append(asyncio.ensure_future(inline(client, uri, 9, 5 + index)))
        await asyncio.sleep(0.03)
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=120)
    assert len(results) == 20
    # A superseded request is answered with an empty list (or RequestCancelled): empty is expected
    # here, never another error.
    for result in results:
        assert isinstance(result, types.InlineCompletionList) or "cancel" in str(result).lower(), result
    # The final answer is for the final text: its range sits after the last typed character.
    final = only_item(await inline(client, uri, 9, 4 + len(word)))
    assert final.range.start == types.Position(line=9, character=4 + len(word))
    traced = [line for line in log_lines(client) if "l4.py" in line and "req=" in line]
    assert sum("superseded" in line or "cancelled" in line for line in traced) >= 1


@pytest.mark.asyncio(loop_scope="module")
async def test_set_trace_verbose_sends_details_with_code_and_messages_without(client: LanguageClient, trace_path):
    uri = open_doc(client, "trace.py", SOURCE)
    client.protocol.notify("$/setTrace", types.SetTraceParams(value=types.TraceValue.Verbose))
    client.traces.clear()
    item = only_item(await inline(client, uri, 9, 4, automatic=False))
    await until(lambda: client.traces, "verbose trace sends $/logTrace")
    detail = json.loads(client.traces[-1].verbose)
    assert detail["method"] == "inlineCompletion" and detail["file"] == "trace.py"
    assert set(detail["ms"]) >= {"rpc_in", "queue", "context", "prefill", "draft", "verify", "postprocess", "rpc_out",
                                 "total"}
    # total spans reading the request to writing the answer: every stage, rpc_in and rpc_out included
    stages = sum(v for k, v in detail["ms"].items() if k != "total")
    assert detail["ms"]["rpc_in"] > 0 and detail["ms"]["rpc_out"] > 0 and stages <= detail["ms"]["total"] + 0.1
    assert detail["tokens"] >= 1 and "accepted" in detail
    assert detail["insert_text"] == item.insert_text  # code text: verbose only
    client.protocol.notify("$/setTrace", types.SetTraceParams(value=types.TraceValue.Messages))
    client.traces.clear()
    only_item(await inline(client, uri, 9, 4, automatic=False))
    await until(lambda: client.traces, "messages trace sends $/logTrace")
    assert all(t.verbose is None for t in client.traces)
    client.protocol.notify("$/setTrace", types.SetTraceParams(value=types.TraceValue.Off))
    # The trace file has one JSON object per request; code text only in verbose-time records.
    records = [json.loads(line) for line in trace_path.read_text().splitlines()]
    assert len(records) >= 3 and all("status" in r and "id" in r for r in records)
    assert any("insert_text" in r for r in records)
    assert not any("insert_text" in r for r in records[-1:])


@pytest.mark.asyncio(loop_scope="module")
async def test_a_lone_surrogate_in_one_document_breaks_no_completion(client: LanguageClient):
    """JSON can carry a lone UTF-16 surrogate, which no tokenizer encodes: the document stores U+FFFD
    (same length in code points and UTF-16 units) and completes, and so do the others."""
    bad = open_doc(client, "surrogate.py", "s = '\udcff'\ndef f():\n    ")
    good = open_doc(client, "fine.py", SOURCE)
    for uri, line, character in ((bad, 2, 4), (good, 9, 4)):
        only_item(await inline(client, uri, line, character, automatic=False))
    assert not any("error" in line.lower() for line in log_lines(client) if "surrogate.py" in line)


@pytest.mark.asyncio(loop_scope="module")
async def test_params_that_do_not_fit_the_method_get_an_invalid_params_error(client: LanguageClient):
    """pygls cannot convert these params (a negative line, no position) and only logs that; the
    server answers each with a JSON-RPC error instead of leaving the client waiting."""
    uri = open_doc(client, "params.py", SOURCE)
    for params in ({"textDocument": {"uri": uri}, "position": {"line": -1, "character": 0}, "context": {"triggerKind": 1}},
                   {"textDocument": {"uri": uri}, "context": {"triggerKind": 1}}):
        msg_id = f"raw-{len(params)}"
        future = asyncio.get_running_loop().create_future()
        client.protocol._request_futures[msg_id] = future  # raw JSON: the client's own types would refuse it
        client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion",
                                    "params": params})
        with pytest.raises(Exception) as raised:
            await asyncio.wait_for(future, 10)
        assert not isinstance(raised.value, asyncio.TimeoutError)
        assert "-32602" in repr(raised.value) or "Invalid" in repr(raised.value), repr(raised.value)
    only_item(await inline(client, uri, 9, 4, automatic=False))  # still serving


@pytest.mark.asyncio(loop_scope="module")
async def test_status_request_reports_the_last_completion(client: LanguageClient):
    status = await client.protocol.send_request_async("speclsp/status", {})
    assert status.state == "ready" and status.lastLatencyMs > 0 and status.tokensPerPass >= 1


WORKSPACE_FILES = {
    "pkg/shapes.py": "class Circle:\n    def area(self):\n        return 3.14159 * self.radius_value ** 2\n",
    "pkg/notes.txt": "notes\n",
    ".gitignore": "ignored_dir/\n",
    "ignored_dir/skip.py": "skip = 1\n",
    ".env": "API_KEY=do-not-index\n",
    "id_rsa": "-----BEGIN KEY-----\n",
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    for relative, text in WORKSPACE_FILES.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    (root / "blob.bin").write_bytes(b"\0\1\2binary")
    (root / "latin1.py").write_bytes("caf\xe9 = 1\n".encode("latin-1"))
    (root / "huge.py").write_text("x = 1\n" * 200_000)  # 1.2 MB: over the default 1 MB limit
    return root


@pytest_lsp.fixture(config=SERVER)
async def ws_client(lsp_client: LanguageClient, workspace):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), root_uri=workspace.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="ws")],
        initialization_options={**STARTER_OPTIONS, "completion.maxNewTokens": 8}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def index_files(client) -> dict:
    for _ in range(200):
        info = await client.protocol.send_request_async("speclsp/index", {})
        if info.state == "ready":
            return info
        await asyncio.sleep(0.05)
    raise AssertionError("the index was not built")


async def test_workspace_index_skips_ignored_binary_huge_undecodable_and_secret_files(ws_client, workspace):
    info = await index_files(ws_client)
    assert set(info.files) == {"pkg/shapes.py", "pkg/notes.txt", ".gitignore"}
    assert info.skipped.secret == 2 and info.skipped.binary == 1 and info.skipped.large == 1
    assert info.skipped.undecodable == 1
    assert any("indexed 3 files" in m.message for m in ws_client.log_messages)
    # A file created on disk gets into the index, and out again when deleted (the deadline is generous:
    # it is no latency requirement).
    (workspace / "pkg" / "fresh.py").write_text("fresh = True\n")

    async def indexed_fresh() -> bool:
        return "pkg/fresh.py" in (await index_files(ws_client)).files

    await until(indexed_fresh, "a created file is indexed")
    (workspace / "pkg" / "fresh.py").unlink()

    async def dropped_fresh() -> bool:
        return not await indexed_fresh()

    await until(dropped_fresh, "a deleted file leaves the index")
    # Disabling the index in the settings drops it.
    ws_client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"speclsp": {"index": {"enabled": False}}}))
    for _ in range(100):
        if (await ws_client.protocol.send_request_async("speclsp/index", {})).state == "off":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("index still on")
