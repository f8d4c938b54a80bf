"""The remote backend against a real engine: llama.cpp's server (:mod:`bench.llama_cpp`) serving the
real Qwen2.5-Coder 0.5B GGUF on localhost, and our server started with ``--backend openai --endpoint
URL`` over stdio (:mod:`tests.raw_lsp`).

Inline completion end to end; cancellation of a long generation mid-stream (the engine's slot is idle
soon after: ``GET /slots``); the engine killed mid-request (one clear message, and after a restart the
next request succeeds); a wrong endpoint. Skipped when llama.cpp is not built (``speclsp bench peers
--build``) or the pack is not installed, unless ``SPECLSP_REQUIRE_REAL_MODELS=1``, which makes them fail.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.request

import pytest

from decoding.weights.model_names import pack_available
from tests.raw_lsp import DEADLINE_S, RawServer, notification

pytestmark = pytest.mark.real

PACK = "qwen2.5-coder-0.5b"
URI = "file:///work/numbers.py"
#: A list the model goes on counting in: a long generation unless it is stopped.
LONG_TEXT = "numbers = [\n" + "".join(f"    {n},\n" for n in range(1, 40))
SHORT_TEXT = "def add(a, b):\n    return "


def _missing(message: str):
    if os.environ.get("SPECLSP_REQUIRE_REAL_MODELS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def llama():
    """llama-server on the 0.5B GGUF for the module (stopped at its end)."""
    from bench.llama_cpp import LlamaServer, gguf_path, server_binary
    from decoding.weights.model_packs import PackMissingError

    if server_binary() is None:
        _missing("llama.cpp is not built; build it with: speclsp bench peers --build")
    try:
        gguf = gguf_path(PACK)
    except PackMissingError as exc:
        _missing(str(exc))
    with LlamaServer(gguf, threads=2, ctx_size=4096) as server:
        yield server


def serve(endpoint: str, **options) -> RawServer:
    """Our server on ``endpoint``'s engine, initialized; its tokenizer is the pack's."""
    peer = RawServer((sys.executable, "-m", "lsp_server.cli", "serve", "--backend", "openai", "--endpoint", endpoint,
                      "--model", PACK))
    peer.initialize(model={"target": PACK}, index={"enabled": False}, **options)
    peer.wait_ready(timeout=300)
    return peer


def open_document(peer: RawServer, text: str) -> tuple[int, int]:
    """Open ``text`` as :data:`URI`; returns the position at its end."""
    peer.send(notification("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python",
                                                                     "version": 1, "text": text}}))
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1])


def ask(peer: RawServer, line: int, character: int) -> int:
    return peer.call("textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 1}})


def shown(peer: RawServer) -> list[str]:
    return [m["params"]["message"] for m in peer.messages if m.get("method") == "window/showMessage"]


def logged(peer: RawServer) -> list[str]:
    return [m["params"]["message"] for m in peer.messages if m.get("method") == "window/logMessage"]


def slots(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/slots", timeout=5) as response:
        return json.load(response)


def slots_busy(url: str) -> bool:
    """Whether any of llama-server's slots is processing a task (``GET /slots``)."""
    return any(slot.get("is_processing") for slot in slots(url))


def tokens_decoded(url: str) -> int:
    """Tokens the busy slot has generated so far (0 while it prefills the prompt or is idle)."""
    busy = [slot for slot in slots(url) if slot.get("is_processing")]
    next_token = busy[0].get("next_token") if busy else None
    if isinstance(next_token, list):
        next_token = next_token[0] if next_token else None
    return int(next_token.get("n_decoded", 0)) if isinstance(next_token, dict) else 0


def wait_until(predicate, timeout: float = DEADLINE_S, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def test_inline_completion_end_to_end_through_llama_server(llama):
    peer = serve(llama.url)
    try:
        position = open_document(peer, SHORT_TEXT)
        answer = peer.response(ask(peer, *position), timeout=120)
        items = answer["result"]["items"]
        assert items and items[0]["insertText"].strip(), answer
        def traced(_) -> list[str]:  # the trace line is written just after the answer
            return [line for line in logged(peer) if "inlineCompletion" in line and " ok " in line]
        peer.wait_for(traced)
        trace = traced(None)
        assert trace and "backend=openai" in trace[-1] and "first_token=" in trace[-1], logged(peer)[-5:]
    finally:
        peer.close()


def test_cancelling_a_long_generation_stops_the_engine(llama):
    peer = serve(llama.url, completion={"maxNewTokens": 1024})
    try:
        position = open_document(peer, LONG_TEXT)
        msg_id = ask(peer, *position)
        # Mid-stream: llama.cpp notices a closed connection when it next sends a token, not during the prefill.
        assert wait_until(lambda: tokens_decoded(llama.url) >= 4, timeout=120), "the engine never started generating"
        assert slots_busy(llama.url), "the generation ended on its own before it could be cancelled"
        peer.send(notification("$/cancelRequest", {"id": msg_id}))
        peer.response(msg_id, timeout=DEADLINE_S)
        # 1024 tokens at 2 threads take far longer than this: only closing the stream frees the slot.
        assert wait_until(lambda: not slots_busy(llama.url), timeout=3.0), "the engine went on generating"
    finally:
        peer.close()


def test_engine_killed_mid_request_then_restarted(llama):
    peer = serve(llama.url, completion={"maxNewTokens": 1024})
    try:
        line, character = open_document(peer, LONG_TEXT)
        msg_id = ask(peer, line, character)
        assert wait_until(lambda: tokens_decoded(llama.url) >= 4, timeout=120)
        llama.kill()
        answer = peer.response(msg_id, timeout=DEADLINE_S)
        assert answer.get("result") in (None, {"items": []}), answer
        peer.wait_for(lambda _: shown(peer), timeout=DEADLINE_S)
        assert len(shown(peer)) == 1 and llama.url in shown(peer)[0], shown(peer)
        llama.restart()
        time.sleep(2.5)  # past the backoff after one failure
        peer.send(notification("workspace/didChangeConfiguration", {"settings": {"completion": {"maxNewTokens": 16}}}))
        peer.send(notification("textDocument/didChange", {
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [{"range": {"start": {"line": line, "character": character},
                                          "end": {"line": line, "character": character}}, "text": "    40,\n"}]}))
        answer = peer.response(ask(peer, line + 1, 0), timeout=120)  # a blank line in the list: the next numbers
        assert answer["result"]["items"], (answer, logged(peer)[-5:])
        assert any("answers again" in message for message in logged(peer))
        assert len(shown(peer)) == 1  # the recovery is logged, not shown
    finally:
        peer.close()
        if not llama.healthy():
            llama.restart()


def test_wrong_endpoint_answers_empty_and_says_so_once():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    if not pack_available(PACK):  # its tokenizer builds the prompts
        _missing(f"model pack {PACK} is not installed")
    peer = serve(endpoint)
    try:
        line, character = open_document(peer, SHORT_TEXT)
        for _ in range(3):
            answer = peer.response(ask(peer, line, character), timeout=DEADLINE_S)
            assert answer.get("result") in (None, {"items": []}), answer
        messages = shown(peer)
        assert len(messages) == 1 and "cannot reach" in messages[0] and endpoint in messages[0], messages
        assert peer.process.poll() is None  # the server stays up
    finally:
        peer.close()


def test_llamacpp_infill_backend_completes_from_the_prompt_parts(llama):
    from decoding.types import GenerationConfig
    from lsp_server.backends.base import RemoteConfig
    from lsp_server.backends.llamacpp_infill import LlamaCppInfillBackend
    from lsp_server.backends.remote import load_model_tokenizer
    from lsp_server.backends.base import Prompt

    tokenizer, capabilities = load_model_tokenizer(PACK)
    backend = LlamaCppInfillBackend(RemoteConfig(llama.url), tokenizer, capabilities)
    prompt = Prompt([0], SHORT_TEXT, "\n\nprint(add(1, 2))\n", len(SHORT_TEXT), "", "\n", True, False)
    generation = backend.generate(prompt, GenerationConfig(max_new_tokens=16, stop_strings=("\n",)), "auto",
                                  lambda: False)
    assert "a" in generation.text and "b" in generation.text, generation.text  # return a + b, in some form
    assert generation.stats.new_tokens >= 1 and generation.stats.prefill_computed >= 1
