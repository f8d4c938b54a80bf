"""Hostile workspaces (issue 19, part 4): the index reads only regular files inside the workspace
folders, within the size limit, without blocking; secrets never reach a prompt or an n-gram source.

The workspace is built in ``tmp_path``: symlinks in and out of the folder (to a file, to a directory,
to ``.env`` inside and outside, a link named ``.env``, loops, a dangling link, a link into an excluded
directory), a FIFO (also as a ``.gitignore``), a Unix socket, links to ``/dev/zero`` and
``/dev/urandom``, a huge file, a binary file, an undecodable file and secret files. Every file that
must stay out holds a marker (``zq_marker``) that the tests search for in the index's texts, the
prompt and the n-gram sources. Scans run against a deadline that detects a hang, never a speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lsp_server.workspace.file_rules import LARGE, SPECIAL, read_regular_file
from lsp_server.workspace.file_watch import IndexWatcher
from lsp_server.workspace.repo_index import IndexConfig, RepoIndex
from tests.conftest import STARTER_OPTIONS
from tests.test_lsp_e2e import capabilities, wait_until_ready

pytestmark = [pytest.mark.adversarial,
              pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, Unix sockets and /dev are POSIX")]

MARKER = "zq_marker"  # in every file that must stay out of the index, the prompt and the drafts
DEADLINE_S = 60.0  # a scan that takes longer hangs; a working one needs well under a second
HUGE_BYTES = 16_000_000  # the huge file; far over the limit below
MAX_FILE_BYTES = 100_000
MEMORY_LIMIT_BYTES = 8_000_000  # traced peak while scanning: less than the huge file, far more than needed
EXPECTED = {"app/main.py", "app/helper.py", "sub/inside_link.py"}  # all that may be indexed


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def link(path: Path, target: str | Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def build_hostile_workspace(base: Path) -> Path:
    """The hostile workspace folder ``base/ws`` (and ``base/outside``, which it links to); returns ``ws``."""
    ws, outside = base / "ws", base / "outside"
    write(ws / "app/main.py", "def shared_helper_name():\n    return compute_total_value()\n")
    write(ws / "app/helper.py", "def compute_total_value():\n    return 42\n")
    write(outside / "outside.py", f"{MARKER}_outside_file = 1\n")
    write(outside / "pkg/mod.py", f"{MARKER}_outside_dir = 1\n")
    write(outside / ".env", f"API_KEY={MARKER}_outside_env\n")
    write(ws / ".env", f"API_KEY={MARKER}_inside_env\n")
    for secret in (".env.local", "id_rsa", "keys/server.pem", ".aws/credentials", ".ssh/config"):
        write(ws / secret, f"{MARKER}_secret {secret}\n")
    write(ws / "node_modules/pkg/index.js", f"{MARKER}_excluded = 1\n")
    link(ws / "link_to_outside_file.py", outside / "outside.py")
    link(ws / "link_to_outside_dir", outside / "pkg")
    link(ws / "notes.txt", ".env")  # an innocent name for a secret inside
    link(ws / "settings.py", outside / ".env")  # ... and for one outside
    link(ws / "sub/.env", "../app/helper.py")  # a secret-looking name for an ordinary file
    link(ws / "sub/inside_link.py", "../app/helper.py")  # an ordinary link inside: indexed under its name
    link(ws / "vendored.js", "node_modules/pkg/index.js")  # a target the rules exclude
    link(ws / "loop_a", "loop_b")
    link(ws / "loop_b", "loop_a")
    link(ws / "self_loop", "self_loop")
    link(ws / "sub/up", "..")  # a directory loop
    link(ws / "alias", "app")  # a directory inside, reached again through a link
    link(ws / "dangling.py", "nowhere.py")
    link(ws / "zero.py", "/dev/zero")
    link(ws / "random.py", "/dev/urandom")
    os.mkfifo(ws / "pipe.py")
    write(ws / "ignores/kept_out.py", "def unknown_to_the_ignore_rules():\n    pass\n")
    os.mkfifo(ws / "ignores/.gitignore")  # read for its patterns: must not block; what it ignores is unknown,
    # so nothing in its directory is indexed
    write(ws / "huge.py", b"x = 1\n" * (HUGE_BYTES // 6))
    write(ws / "blob.py", b"\x89PNG\0\0" + f"{MARKER}_binary".encode())
    write(ws / "latin1.py", f"caf\xe9 = '{MARKER}_undecodable'\n".encode("latin-1"))
    return ws


@pytest.fixture()
def hostile(tmp_path: Path):
    """The workspace folder, with a Unix socket bound in it for the test's duration."""
    ws = build_hostile_workspace(tmp_path)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(ws / "sock.py"))
    except OSError:  # a path over the AF_UNIX limit: the other kinds still count
        server.close()
        server = None
    yield ws
    if server is not None:
        server.close()


def run_with_deadline(fn, *args):
    """``fn(*args)`` on a daemon thread; AssertionError if it has not returned within ``DEADLINE_S``."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn(*args)), daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"{fn.__name__} did not finish within {DEADLINE_S:.0f} s (blocked on a file?)"
    assert result, f"{fn.__name__} raised (see the thread's traceback above)"
    return result[0]


def indexed(index: RepoIndex) -> set[str]:
    return {index.relative(p) for p in index.paths()}


def leaked(index: RepoIndex) -> list[str]:
    return [index.relative(e.path) for e in index.entries() if MARKER in e.text]


def test_a_hostile_workspace_is_scanned_to_the_end_reading_only_what_it_may(hostile):
    index = RepoIndex([hostile], IndexConfig(max_file_bytes=MAX_FILE_BYTES, max_tokens=100_000))
    tracemalloc.start()
    try:
        run_with_deadline(index.scan)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert leaked(index) == []
    assert indexed(index) == EXPECTED
    assert index.text(hostile / "sub/inside_link.py") == index.text(hostile / "app/helper.py")
    skipped = index.skipped
    assert skipped["outside"] >= 5  # file, directory, .env outside, /dev/zero, /dev/urandom links
    # .env, .env.local, id_rsa, server.pem, notes.txt (-> .env), sub/.env (.aws/ and .ssh/ are not entered)
    assert skipped["secret"] == 6 and skipped["excluded"] == 1 and skipped["large"] == 1
    assert skipped["binary"] == 1 and skipped["undecodable"] == 1
    assert skipped["special"] >= 4  # FIFO, directory links (sub/up, alias), the socket
    assert skipped["gitignore-unreadable"] >= 1  # ... the FIFO .gitignore's directory is not indexed
    assert skipped["unreadable"] == 4  # loop_a, loop_b, self_loop, dangling.py
    assert not index.partial and index.tokens <= 100_000
    assert peak < MEMORY_LIMIT_BYTES, f"scanning traced {peak} bytes at its peak"


def test_links_to_devices_inside_a_folder_are_special_and_never_read(hostile):
    # /dev as a folder of its own: the links' targets are then inside the folders, and only the
    # regular-file rule keeps them out.
    index = RepoIndex([hostile, Path("/dev")], IndexConfig(max_file_bytes=MAX_FILE_BYTES))
    for name in ("zero.py", "random.py", "pipe.py"):
        assert run_with_deadline(index.update, hostile / name) is False
    assert index.skipped == {SPECIAL: 3}


def test_reads_are_bounded_whatever_the_size_says(tmp_path):
    assert read_regular_file("/dev/zero", 10) == (None, SPECIAL)
    maps = Path("/proc/self/maps")  # a regular file whose st_size is 0
    if maps.exists():
        assert os.stat(maps).st_size == 0
        assert read_regular_file(maps, 10) == (None, LARGE)
        data, reason = read_regular_file(maps, 10_000_000)
        assert reason == "" and data
    exact = write(tmp_path / "exact.py", b"a" * 100)
    assert read_regular_file(exact, 100) == (b"a" * 100, "")
    assert read_regular_file(exact, 99) == (None, LARGE)


def test_a_scan_stops_after_max_entries_and_says_so(tmp_path):
    for i in range(50):
        write(tmp_path / f"d{i % 5}" / f"f{i}.py", f"value_{i} = {i}\n")
    index = RepoIndex([tmp_path], IndexConfig(max_entries=20))
    count = run_with_deadline(index.scan)
    assert index.partial and 0 < count < 20
    complete = RepoIndex([tmp_path])
    assert run_with_deadline(complete.scan) == 50 and not complete.partial


def test_the_watcher_applies_the_same_rules(hostile, tmp_path):
    index = RepoIndex([hostile], IndexConfig(max_file_bytes=MAX_FILE_BYTES))
    run_with_deadline(index.scan)
    watcher = IndexWatcher(index)
    watcher.start()
    try:
        probe = hostile / "app/probe.py"
        deadline = time.monotonic() + DEADLINE_S
        while index.text(probe) is None:  # the observer adds its watches after start() returns
            assert time.monotonic() < deadline, "the watcher did not start"
            write(probe, f"probe = {time.monotonic()}\n")
            time.sleep(0.05)
        os.mkfifo(hostile / "app/new_pipe.py")
        link(hostile / "app/new_link.py", tmp_path / "outside/outside.py")
        link(hostile / "app/new_notes.txt", "../.env")
        link(tmp_path / "outside_dir_link", tmp_path / "outside")
        os.rename(tmp_path / "outside_dir_link", hostile / "app/moved_in")  # a link to a directory outside
        sentinel = write(hostile / "app/sentinel.py", "after_everything = True\n")
        while index.text(sentinel) is None:  # events are handled in order
            assert time.monotonic() < deadline, "the watcher did not index the sentinel"
            time.sleep(0.02)
        assert leaked(index) == []
        assert indexed(index) == EXPECTED | {"app/probe.py", "app/sentinel.py"}
        outside_before = index.skipped["outside"]
        index.move(tmp_path / "elsewhere", hostile / "app/moved_in")  # as if reported as a move
        assert leaked(index) == [] and not any(p.startswith("app/moved_in") for p in indexed(index))
        assert index.skipped["outside"] == outside_before + 1  # the link, judged once; nothing walked behind it
    finally:
        watcher.stop()


# Secret buffers, in process: the prompt and the n-gram sources of a completion -------------------------

@pytest.fixture(scope="module")
def engine():
    from decoding.engine import Engine
    from decoding.types import EngineConfig

    return Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))


def test_secret_buffers_never_reach_the_prompt_or_the_draft_sources(engine, hostile, monkeypatch):
    from lsp_server.backends.local import as_backend
    from lsp_server.model.completer import complete
    from lsp_server.workspace.documents import Document
    from lsp_server.workspace.positions import codec_for
    from lsp_server.request import resolve_request
    from lsp_server.settings import Settings

    # The starter model does not know the repository format; pretend it does, so snippets of the
    # other buffers are in the prompt and a leak would show there too.
    monkeypatch.setattr(engine.target, "capabilities",
                        dataclasses.replace(engine.target.capabilities, repo_prompt=True))
    shared = "def compute_total_value(order_items, order_discount):\n    return order_items - order_discount\n"
    control = Document((hostile / "app/helper.py").as_uri(), f"{shared}CONTROL = 'visible_control'\n", 1, "python")
    secrets = [
        Document((hostile / ".env").as_uri(), f"{shared}API_KEY = '{MARKER}_env_buffer'\n", 1, "dotenv"),
        Document((hostile / "notes.txt").as_uri(), f"{shared}TOKEN = '{MARKER}_linked_buffer'\n", 1, "plaintext"),
        Document("untitled:.env.production", f"{shared}KEY = '{MARKER}_untitled'\n", 1, "dotenv"),
    ]
    current = Document((hostile / "app/main.py").as_uri(), "total = compute_total_value(order_items, ", 1, "python")
    request = resolve_request(current, types.Position(line=0, character=len(current.text)), codec_for("utf-16"),
                              Settings(max_new_tokens=4, extra_tokens=512))
    completion = complete(as_backend(engine), request, [control, *secrets])  # the control first: a snippet either way
    prompt_text = engine.tokenizer.decode(completion.prompt.prompt_ids)
    sources = {key.uri for key in engine.sources.names()}
    assert "visible_control" in prompt_text and control.uri in sources  # the control: the gate lets it in
    assert MARKER not in prompt_text
    assert not sources & {d.uri for d in secrets}
    assert MARKER not in completion.insert_text


# Through the server over stdio ---------------------------------------------------------------------------

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server.cli", "serve"])


@pytest.fixture(scope="module")
def served_workspace(tmp_path_factory) -> Path:
    return build_hostile_workspace(tmp_path_factory.mktemp("served"))


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, served_workspace):
    lsp_client.traces = []  # $/logTrace (verbose: with the completion text)

    @lsp_client.feature("$/logTrace")
    def log_trace(params):
        lsp_client.traces.append(params)

    folders = [served_workspace, Path(tempfile.gettempdir())]  # the temporary directory: refused
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), root_uri=served_workspace.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=f.as_uri(), name=f.name or "/") for f in folders],
        initialization_options={**STARTER_OPTIONS, "completion.maxNewTokens": 8, "index.maxFileBytes": MAX_FILE_BYTES,
                                "trace.level": "verbose"}))
    await wait_until_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


async def index_info(client: LanguageClient):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        info = await client.protocol.send_request_async("speclsp/index", {})
        if info.state == "ready":
            return info
        await asyncio.sleep(0.05)
    raise AssertionError(f"the index was not ready within {DEADLINE_S:.0f} s")


def open_document(client: LanguageClient, path: Path, text: str) -> str:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=path.as_uri(), language_id="plaintext", version=1, text=text)))
    return path.as_uri()


async def inline(client: LanguageClient, uri: str, line: int, character: int):
    return await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))


@pytest.mark.asyncio(loop_scope="module")
async def test_the_server_indexes_the_hostile_folder_and_refuses_the_temporary_directory(client, served_workspace):
    info = await index_info(client)
    assert info.roots == [str(served_workspace)]
    assert set(info.files) == EXPECTED
    assert any(f"not indexing {tempfile.gettempdir()}: it is the temporary directory" in m.message
               and m.type == types.MessageType.Warning for m in client.log_messages)


@pytest.mark.asyncio(loop_scope="module")
async def test_a_secret_buffer_gets_no_completion_and_is_reported_once(client, served_workspace):
    env_text = f"API_KEY={MARKER}_served\nOTHER="
    uris = [open_document(client, served_workspace / ".env", env_text),
            open_document(client, served_workspace / "notes.txt", env_text)]  # a link to .env
    code = open_document(client, served_workspace / "app/main.py", "def total():\n    return ")
    for uri in uris * 2:
        answer = await inline(client, uri, 1, len("OTHER="))
        assert answer is not None and len(answer.items) == 0
    await inline(client, code, 1, 11)  # answered, from a prompt without the secret buffers
    for name in ("ws/.env", "ws/notes.txt"):  # relative to its workspace folder (one of two: named), not by URI
        reports = [m for m in client.log_messages if f"] {name} looks like a secret" in m.message]
        assert len(reports) == 1 and reports[0].type == types.MessageType.Info
    assert not any(str(served_workspace) in m.message for m in client.log_messages if "looks like a secret" in m.message)
    assert client.traces, "no $/logTrace: the check below would see nothing"
    assert not any(MARKER in m.message for m in client.log_messages)
    assert not any(MARKER in str(trace) for trace in client.traces)
