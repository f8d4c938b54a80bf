"""End to end: ``speclsp serve`` on a remote backend never imports torch (issue 30). The server runs
under ``python -X importtime``, which writes every module it imports to stderr; it starts, loads the
served model's tokenizer, answers a completion from a fake OpenAI-compatible engine and exits. The same
check on the local backend (the starter pair) finds torch: the check can fail."""

from __future__ import annotations

import re
import sys

import pytest

from tests.raw_lsp import RawServer, notification
from tests.test_remote_backend import serve_fake_engine, sse, text_event

pytestmark = pytest.mark.e2e

IMPORTTIME = (sys.executable, "-X", "importtime", "-m", "lsp_server.cli", "serve")
TEXT = "def add(a, b):\n    return "


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    return {m.group(1).strip() for m in re.finditer(r"^import time:\s*\d+ \|\s*\d+ \|\s*(.+)$", stderr, re.M)}


def _serve_one_completion(**options) -> tuple[dict, set[str]]:
    peer = RawServer(IMPORTTIME)
    try:
        peer.initialize(index={"enabled": False}, completion={"maxNewTokens": 8}, **options)
        peer.wait_ready()
        uri = "file:///w/a.py"
        peer.send(notification("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": TEXT}}))
        answer = peer.response(peer.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}}),
            timeout=120)
        peer.response(peer.call("shutdown"))
        peer.send(notification("exit"))
        assert peer.wait_exit() == 0
        return answer, _imported(peer.stderr_text())
    finally:
        peer.close()


@pytest.fixture()
def engine():
    fake, server = serve_fake_engine()
    fake.reply = lambda handler: handler.send_stream(sse(text_event("a + b", "stop"), b"[DONE]"))
    yield fake
    server.shutdown()
    server.server_close()


def test_a_server_on_a_remote_backend_never_imports_torch(engine):
    answer, modules = _serve_one_completion(remote={"backend": "openai", "endpoint": engine.url}, model={"target": "starter"})
    assert answer["result"]["items"][0]["insertText"] == "a + b" and engine.requests  # the engine answered
    assert "lsp_server.backends.openai" in modules and "transformers" in modules  # the lines were read
    assert not {m for m in modules if m == "torch" or m.startswith("torch.")}


def test_the_check_finds_torch_in_a_server_on_the_local_engine():
    _, modules = _serve_one_completion()
    assert "torch" in modules and "decoding.engine" in modules
