"""The server in process, on the real model session over a backend that generates nothing: document
notifications reach the session on the model thread (an opened document is tokenised there, a secret
one never), and log messages name documents by their short, workspace-relative names, never by absolute
path (issue 30)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lsp_server.completion.prompt_tokens import SourceKey
from lsp_server.features import create_server
from lsp_server.model.session import ModelSession
from lsp_server.workspace.names import DisplayNames, short_name
from tests.fake_session import CapturedWriter, FakeBackend

pytestmark = pytest.mark.unit


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for name in ("pkg/__init__.py", "other/__init__.py", "pkg/app.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x = 1\n")
    return root


@pytest.fixture()
async def server(workspace: Path):
    server = create_server(loader=lambda config, on_stage: FakeBackend(), session_factory=ModelSession)
    server.protocol.set_writer(CapturedWriter())
    _send(server, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {}}})
    await server.reindex()  # as on `initialized`: the workspace folders name the documents
    assert server.worker.load(server.settings.backend_config()).result(timeout=10) == "ready"
    yield server
    server.index.stop()
    server.worker.shutdown()


def _send(server, message: dict) -> None:
    server.protocol.handle_message(server.protocol.structure_message(message))


def _notify(server, method: str, params: dict) -> None:
    _send(server, {"jsonrpc": "2.0", "method": method, "params": params})


def _open(server, uri: str, text: str) -> None:
    _notify(server, "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})


def _session(server) -> ModelSession:
    """The session, once the model thread has run everything queued before this call."""
    server.worker.run(ModelSession.describe).result(timeout=10)
    return server.worker._session


async def test_an_opened_document_is_tokenised_on_the_model_thread_and_a_secret_one_never(server, workspace):
    uri = (workspace / "pkg" / "app.py").as_uri()
    _open(server, uri, "x = 1\n")
    _notify(server, "textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
        {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}}, "text": "y = 2\n"}]})
    secret = (workspace / ".env").as_uri()
    _open(server, secret, "KEY=1\n")
    _notify(server, "textDocument/didChange", {"textDocument": {"uri": secret, "version": 2},
                                               "contentChanges": [{"text": "KEY=2\n"}]})
    session = _session(server)
    encoder = session.sources.encoder(session.backends["completion"])
    assert encoder.holds(SourceKey(uri)) and not encoder.holds(SourceKey(secret))


async def test_log_messages_name_documents_by_workspace_relative_path(server, workspace):
    logs = server.protocol.writer.logs
    for name in ("pkg/__init__.py", "other/__init__.py"):
        uri = (workspace / name).as_uri()
        _open(server, uri, "x = 1\n")
        _notify(server, "textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                                   "contentChanges": [{"range": "not a range"}]})
    _notify(server, "textDocument/didChange", {"textDocument": {"uri": (workspace / "gone.py").as_uri(), "version": 2},
                                               "contentChanges": [{"text": "x"}]})
    secret = (workspace / ".env").as_uri()
    _open(server, secret, "KEY=1\n")
    await server.completions.complete("inlineCompletion", secret, _position(0, 4))
    await asyncio.sleep(0)
    lines = logs()
    assert any("didChange for pkg/__init__.py could not be read" in line for line in lines)
    assert any("didChange for other/__init__.py could not be read" in line for line in lines)
    assert any("didChange for gone.py, which is not open" in line for line in lines)  # in the folder too
    assert any(".env looks like a secret file" in line for line in lines)
    assert any("inlineCompletion .env:0:4 no completions: secret-looking file" in line for line in lines)
    assert not [line for line in lines if str(workspace) in line or "file://" in line]


def _position(line: int, character: int):
    from lsprotocol import types

    return types.Position(line=line, character=character)


@pytest.mark.parametrize("path, roots, expected", [
    ("/w/proj/pkg/__init__.py", ("/w/proj",), "pkg/__init__.py"),
    ("/w/proj/pkg/__init__.py", ("/w/proj", "/w/lib"), "proj/pkg/__init__.py"),  # several folders: which one
    ("/elsewhere/deep/dir/notes.py", ("/w/proj",), "notes.py"),  # outside every folder: its name
    ("/top.py", (), "top.py"),
])
def test_short_names(path, roots, expected):
    assert short_name(Path(path).as_uri(), tuple(Path(r) for r in roots)) == expected


def test_short_names_of_other_schemes_and_source_keys():
    names = DisplayNames([Path("/w/proj")])
    assert names("untitled:Untitled-1") == "untitled:Untitled-1"
    key = SourceKey("file:///w/proj/pkg/app.py", "above", names("file:///w/proj/pkg/app.py"))
    assert f"ngram:{key}" == "ngram:pkg/app.py#above"  # how a drafter names its source in the stats
    assert key == SourceKey("file:///w/proj/pkg/app.py", "above")  # the label is not part of the key
    assert str(SourceKey("file:///w/proj/pkg/app.py")) == "app.py"  # unlabelled: the file's name, never the URI


def test_a_directory_under_home_is_shown_from_home():
    from lsp_server.workspace.names import display_path

    home = Path.home()
    assert display_path(home) == "~" and display_path(home / "src" / "proj") == "~/src/proj"
    assert display_path(Path("/opt/elsewhere")) == "/opt/elsewhere"  # not a user's own directory


async def test_documents_open_before_a_load_are_tokenised_ahead_in_the_new_session(server, workspace):

    uri = (workspace / "pkg" / "app.py").as_uri()
    _open(server, uri, "x = 1\n")
    first = _session(server)
    await server.load_models()  # a reload (a changed model setting): a new session
    second = _session(server)
    assert second is not first and second.sources.encoder(second.backends["completion"]).holds(SourceKey(uri))
