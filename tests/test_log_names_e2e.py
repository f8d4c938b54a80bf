"""End to end over stdio on the starter pair: what the server writes about a workspace's files — log
messages, ``$/logTrace`` lines, the trace file, stderr and ``speclsp/nextEdit``'s per-source stats —
names documents by workspace-relative path, never by absolute path or URI, below the verbose level
(issue 30). Basenames would collide: the workspace has two ``__init__.py``."""

from __future__ import annotations

import json

import pytest

from tests.raw_lsp import RawServer, notification

pytestmark = pytest.mark.e2e

UTIL = '''def scale(points, factor):
    """Each point times factor."""
    return [(x * factor, y * factor) for x, y in points]


def shift(points, dx, dy):
    """Each point moved by (dx, dy)."""
    return [(x + dx, y + dy) for x, y in points]
'''
#: Ends inside a line that pkg/util.py (an open buffer) holds and app.py does not: its n-gram lookup
#: drafts from util.py, so the trace line names that source.
APP = '''from pkg.util import scale


def grow(points, factor):
    """Each point times factor, like scale."""
    return [(x * factor, y * factor) for x, y'''

def _open(peer: RawServer, uri: str, text: str) -> None:
    peer.send(notification("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}}))


def test_nothing_written_about_a_document_holds_its_absolute_path(tmp_path):
    workspace = tmp_path / "proj"
    for name, text in {"pkg/__init__.py": "", "other/__init__.py": "", "pkg/util.py": UTIL, "pkg/app.py": APP}.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    trace_file = tmp_path / "trace.jsonl"
    peer = RawServer()
    try:
        # tokenHealing off: this checks the names in a completion drafted from util.py, which the starter
        # pair writes from the unhealed prompt here (healed, it answers with a next edit instead).
        peer.initialize(root_uri=workspace.as_uri(), completion={"maxNewTokens": 24, "tokenHealing": False},
                        trace={"level": "messages", "file": str(trace_file)}, decoding={"drafter": "ngram"},
                        nextEdit={"regionLines": 8, "maxNewTokens": 200})
        peer.wait_ready()
        peer.wait_for(lambda messages: any("indexed" in m.get("params", {}).get("message", "") for m in messages))
        app, init = (workspace / "pkg" / "app.py").as_uri(), (workspace / "other" / "__init__.py").as_uri()
        _open(peer, init, "from pkg.app import grow\n")
        _open(peer, (workspace / "pkg" / "util.py").as_uri(), UTIL)
        _open(peer, app, APP)
        position = {"line": APP.count("\n"), "character": len(APP.rsplit("\n", 1)[-1])}
        answer = peer.response(peer.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": app}, "position": position, "context": {"triggerKind": 1}}), timeout=120)
        assert "result" in answer
        peer.send(notification("textDocument/didChange", {"textDocument": {"uri": app, "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 3, "character": 9}, "end": {"line": 3, "character": 15}}, "text": "pts"}]}))
        edit = peer.response(peer.call("speclsp/nextEdit", {"textDocument": {"uri": app},
                                                           "position": {"line": 3, "character": 4}}), timeout=120)
        peer.send(notification("textDocument/didChange", {"textDocument": {"uri": init, "version": 2},
                                                          "contentChanges": [{"range": "broken"}]}))
        peer.response(peer.call("speclsp/status"))  # handled after the notifications before it
        messages = peer.wait_for(lambda ms: sum("req=" in m.get("params", {}).get("message", "") for m in ms) >= 2)
        stderr = peer.stderr_text()
    finally:
        peer.close()
    logs = [m["params"]["message"] for m in messages if m.get("method") in ("window/logMessage", "$/logTrace")]
    requests = [line for line in logs if "[speclsp] req=" in line]
    assert any(" inlineCompletion pkg/app.py:5:" in line and "ngram:pkg/util.py=" in line for line in requests), requests
    assert any(" nextEdit pkg/app.py:3:4 " in line for line in requests), requests
    assert any("didChange for other/__init__.py could not be read" in line for line in logs), logs
    records = [json.loads(line) for line in trace_file.read_text().splitlines()]
    assert {record["file"] for record in records} == {"pkg/app.py"}
    stats = (edit.get("result") or {}).get("stats", {})
    written = logs + [json.dumps(records), json.dumps(stats), stderr]
    for text in written:
        assert str(workspace) not in text and "file://" not in text and "SourceKey" not in text, text[:2000]
