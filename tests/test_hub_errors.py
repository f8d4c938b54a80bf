"""A failed hub download says which model, why and what to do (issue 19, part 6).

The unit tests build the exception chains transformers raises; the end-to-end test runs ``speclsp
complete`` against a local HTTP server standing in for the hub (``HF_ENDPOINT``), which answers each
model id with a different status, so the whole chain is the real one.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading

import httpx2
import pytest
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

from decoding.weights.hub_errors import explain_hub_failure


def _http_error(status: int, cls=HfHubHTTPError) -> HfHubHTTPError:
    url = "https://huggingface.co/owner/model/resolve/main/config.json"
    response = httpx2.Response(status, request=httpx2.Request("GET", url))
    return cls(f"{status} error", response=response)


def _wrapped(inner: BaseException) -> OSError:
    """``inner`` two levels down, as transformers raises it."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise LocalEntryNotFoundError("cannot find the requested files in the local cache") from exc
    except LocalEntryNotFoundError as exc:
        try:
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files") from exc
        except OSError as outer:
            return outer


@pytest.mark.unit
@pytest.mark.parametrize("status, cls, words", [
    (403, HfHubHTTPError, ["403 Forbidden", "HF_TOKEN", "proxy"]),
    (404, RepositoryNotFoundError, ["HTTP 404", "spelling", "HF_TOKEN"]),
    (401, HfHubHTTPError, ["HTTP 401", "private"]),
    (403, GatedRepoError, ["gated", "hf auth login"]),
    (429, HfHubHTTPError, ["rate-limiting"]),
    (503, HfHubHTTPError, ["HTTP 503", "later"]),
])
def test_an_http_failure_deep_in_the_chain_names_the_model_the_reason_and_the_way_out(status, cls, words):
    message = explain_hub_failure("owner/model", _wrapped(_http_error(status, cls)))
    assert message.startswith("cannot download owner/model from the Hugging Face hub")
    for word in words:
        assert word in message
    assert "model packs" in message and "local model directory" in message


@pytest.mark.unit
def test_no_network_is_told_apart_from_a_refusal():
    message = explain_hub_failure("owner/model", _wrapped(socket.gaierror(-2, "Name or service not known")))
    assert "cannot be reached" in message and "Name or service not known" in message
    assert "HTTP" not in message


@pytest.mark.unit
def test_an_error_that_is_not_about_the_hub_is_left_to_the_caller():
    assert explain_hub_failure("owner/model", ValueError("config.json is not valid JSON")) is None


class _FakeHub(http.server.BaseHTTPRequestHandler):
    """Answers ``/<owner>/<status>/...`` with that status (``gated``: 403 marked as a gated repository)."""

    def _answer(self) -> None:
        kind = self.path.strip("/").split("/")[1]
        status = 403 if kind == "gated" else int(kind)
        self.send_response(status)
        if kind == "gated":
            self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def fake_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.e2e  # no 5xx case here: the hub client retries it with backoff (77 s); the unit test covers it
@pytest.mark.parametrize("kind, words", [
    ("403", ["cannot download someone/403", "403 Forbidden", "HF_TOKEN"]),
    ("404", ["cannot download someone/404", "HTTP 404"]),
    ("gated", ["cannot download someone/gated", "gated"]),
])
def test_speclsp_complete_explains_a_refused_download(fake_hub, tmp_path, kind, words):
    source = tmp_path / "a.py"
    source.write_text("def f():\n    return 1\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(HF_ENDPOINT=fake_hub, HF_HOME=str(tmp_path / "hf"))
    result = subprocess.run([sys.executable, "-m", "lsp_server.cli", "complete", f"{source}:2:5",
                             "--model", f"someone/{kind}", "--draft-model", "none"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode != 0
    for word in words:
        assert word in result.stderr, result.stderr[-2000:]
