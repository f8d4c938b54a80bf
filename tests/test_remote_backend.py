"""The remote backends against a fake engine: a stdlib HTTP server in a thread, written here.

The SSE reader and the error mapping (malformed stream, HTTP 500, 404 for a wrong model, a slow
engine, a refused connection), cancellation closing the connection (the fake engine sees the
disconnect), token-id prompts with the text fallback, llama.cpp's timings in the trace figures, and the
service's one message per failure kind with backoff and recovery. The bundled starter tokenizer stands
in for the served model's.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from lsprotocol import types

from decoding.types import FinishReason, GenerationConfig
from lsp_server.backends.base import BackendError
from lsp_server.backends.http_stream import SseParser
from lsp_server.backends.llamacpp_infill import LlamaCppInfillBackend
from lsp_server.backends.base import RemoteConfig
from lsp_server.backends.openai import OpenAICompletionsBackend
from lsp_server.backends.remote import Backoff, load_model_tokenizer
from lsp_server.workspace.documents import DocumentStore
from tests.fake_session import services
from lsp_server.settings import Settings
from lsp_server.tracing import Tracer
from lsp_server.model.worker import READY, ModelWorker

pytestmark = pytest.mark.unit

DEADLINE_S = 30.0


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def text_event(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


class FakeEngine:
    """What the fake server answers, set per test, and what it saw."""

    def __init__(self):
        self.reply = lambda handler: handler.send_stream(sse(text_event("x = 1", "stop"), b"[DONE]"))
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.disconnected = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: FakeEngine

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.engine.requests.append({"path": self.path, **json.loads(body)})
        self.engine.headers.append(dict(self.headers))
        self.engine.reply(self)

    def send_stream(self, body: bytes, chunked: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding" if chunked else "Content-Length", "chunked" if chunked else str(len(body)))
        self.end_headers()
        if chunked:
            for part in (body[: len(body) // 2], body[len(body) // 2:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(body)

    def send_cut_stream(self) -> None:
        """One chunk of a chunked stream, then the connection ends (an engine that crashed)."""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        part = sse(text_event("a"))
        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        self.close_connection = True

    def send_error_json(self, status: int, message: str) -> None:
        body = json.dumps({"error": {"message": message, "code": status}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream_forever(self) -> None:
        """Tokens every 20 ms until the client goes away (as an engine generating a long answer)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.close_connection = True
        try:
            for _ in range(int(DEADLINE_S / 0.02)):
                self.wfile.write(sse(text_event("a ")))
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:
            self.engine.disconnected.set()


def serve_fake_engine() -> tuple[FakeEngine, ThreadingHTTPServer]:
    """A fake engine serving on a free loopback port (its ``url``), in a thread; shut the server down after."""
    engine = FakeEngine()
    handler = type("BoundHandler", (Handler,), {"engine": engine})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    engine.url = f"http://127.0.0.1:{server.server_address[1]}"
    return engine, server


@pytest.fixture
def fake():
    engine, server = serve_fake_engine()
    yield engine
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tokenizer_and_capabilities():
    return load_model_tokenizer("starter")


def backend_for(url: str, tokenizer_and_capabilities, cls=OpenAICompletionsBackend, **config) -> OpenAICompletionsBackend:
    tokenizer, capabilities = tokenizer_and_capabilities
    options = {"model": "qwen", "timeout_s": 2.0, **config}
    return cls(RemoteConfig(url, **options), tokenizer, capabilities)


CONFIG = GenerationConfig(max_new_tokens=16, stop_strings=("<|endoftext|>",))
NEVER = lambda: False


def test_sse_parser_joins_data_lines_and_skips_comments_across_chunk_boundaries():
    parser = SseParser()
    stream = b": keep-alive\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: x\ndata: two\n\ndata: [DONE]"
    events = []
    for i in range(len(stream)):  # one byte at a time: every boundary
        events += parser.feed(stream[i:i + 1])
    assert events == ['{"a":\n1}', "two"]
    assert parser.finish() == ["[DONE]"]


@pytest.mark.parametrize("chunked", [False, True])
def test_streamed_completion_sends_token_ids_and_reads_the_text(fake, tokenizer_and_capabilities, chunked):
    fake.reply = lambda h: h.send_stream(sse(text_event("def "), text_event("f():", None), text_event("", "stop"),
                                             b"[DONE]"), chunked=chunked)
    backend = backend_for(fake.url + "/v1", tokenizer_and_capabilities)
    generation = backend.complete_ids([1, 2, 3], CONFIG, NEVER)
    assert (generation.text, generation.finish_reason) == ("def f():", FinishReason.STOP)
    sent = fake.requests[0]
    assert sent["path"] == "/v1/completions"
    assert (sent["prompt"], sent["max_tokens"], sent["stream"], sent["model"]) == ([1, 2, 3], 16, True, "qwen")
    assert sent["stop"] == ["<|endoftext|>"]
    assert generation.stats.new_tokens == 2 and set(generation.stats.ms) == {"first_token", "stream", "total"}


def test_our_stop_string_cuts_the_text_and_ends_the_stream(fake, tokenizer_and_capabilities):
    fake.reply = lambda h: h.send_stream(sse(text_event("a = 1<|endoftext|>junk"), text_event("more"), b"[DONE]"))
    generation = backend_for(fake.url, tokenizer_and_capabilities).complete_ids([1], CONFIG, NEVER)
    assert (generation.text, generation.finish_reason) == ("a = 1", FinishReason.STOP)


def test_llamacpp_timings_give_tokens_prefill_and_the_engines_own_acceptance(fake, tokenizer_and_capabilities):
    final = {**text_event("", "length"), "timings": {"prompt_n": 7, "cache_n": 40, "predicted_n": 16, "draft_n": 12,
                                                     "draft_n_accepted": 9, "prompt_ms": 3.5, "predicted_ms": 20.0}}
    fake.reply = lambda h: h.send_stream(sse(text_event("abc"), final, b"[DONE]"))
    generation = backend_for(fake.url, tokenizer_and_capabilities).complete_ids([1], CONFIG, NEVER)
    stats = generation.stats
    assert generation.finish_reason == FinishReason.LENGTH
    assert (stats.new_tokens, stats.prefill_computed, stats.prefill_reused) == (16, 7, 40)
    assert (stats.sources["engine"].drafted, stats.sources["engine"].accepted) == (12, 9)
    assert generation.engine_ms == {"prompt": 3.5, "predicted": 20.0}


def test_a_refused_token_prompt_is_sent_again_as_text(fake, tokenizer_and_capabilities):
    def reply(h):
        if isinstance(fake.requests[-1]["prompt"], list):
            h.send_error_json(400, "prompt must be a string")
        else:
            h.send_stream(sse(text_event("ok", "stop")))
    fake.reply = reply
    backend = backend_for(fake.url, tokenizer_and_capabilities)
    tokenizer = tokenizer_and_capabilities[0]
    ids = tokenizer.encode("def f", add_special_tokens=False)
    assert backend.complete_ids(ids, CONFIG, NEVER).text == "ok"
    assert fake.requests[1]["prompt"] == tokenizer.decode(ids)
    assert backend.complete_ids(ids, CONFIG, NEVER).text == "ok"  # text from then on: one request
    assert len(fake.requests) == 3 and isinstance(fake.requests[2]["prompt"], str)


@pytest.mark.parametrize("reply, kind, words", [
    (lambda h: h.send_error_json(500, "out of memory"), "http 500", "out of memory"),
    (lambda h: h.send_error_json(404, "The model `qwen` does not exist."), "model not found", "qwen"),
    (lambda h: h.send_error_json(404, "File Not Found"), "not found", "speclsp.remote.endpoint"),
    (lambda h: h.send_error_json(401, "bad key"), "unauthorized", "API key"),
    (lambda h: h.send_stream(sse(b"{not json")), "malformed stream", "cannot read"),
    (lambda h: h.send_stream(sse({"object": "text_completion"})), "malformed stream", "no choices"),
    (lambda h: h.send_stream(sse({"error": {"message": "context overflow"}})), "engine error", "context overflow"),
    (lambda h: time.sleep(1.5), "timeout", "remote.timeoutSeconds"),
    (lambda h: h.send_cut_stream(), "connection lost", "did it stop"),
])
def test_failures_are_typed_with_a_message(fake, tokenizer_and_capabilities, reply, kind, words):
    fake.reply = reply
    backend = backend_for(fake.url, tokenizer_and_capabilities, timeout_s=0.5)
    with pytest.raises(BackendError) as caught:
        backend.complete_ids([1], CONFIG, NEVER)
    assert caught.value.kind == kind and words in caught.value.message
    assert caught.value.retry_in_s > 0


def test_a_refused_connection_is_unreachable_and_backs_off(tokenizer_and_capabilities):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = backend_for(f"http://127.0.0.1:{port}", tokenizer_and_capabilities)
    with pytest.raises(BackendError) as first:
        backend.complete_ids([1], CONFIG, NEVER)
    assert first.value.kind == "unreachable" and f"127.0.0.1:{port}" in first.value.message
    with pytest.raises(BackendError) as during:  # during the backoff: at once, the same kind
        backend.complete_ids([1], CONFIG, NEVER)
    assert during.value.kind == "unreachable" and 0 < during.value.retry_in_s <= 1.0


def test_backoff_doubles_and_a_success_resets_it():
    now = [0.0]
    backoff = Backoff(first_s=1.0, max_s=4.0, clock=lambda: now[0])
    assert [backoff.failed("timeout", "m").retry_in_s for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    with pytest.raises(BackendError):
        backoff.check()
    now[0] = 5.0
    backoff.check()  # over: the next request tries the engine
    assert backoff.succeeded() is True and backoff.succeeded() is False


def test_cancellation_closes_the_connection_mid_stream(fake, tokenizer_and_capabilities):
    fake.reply = lambda h: h.stream_forever()
    cancelled = threading.Event()
    threading.Timer(0.3, cancelled.set).start()
    started = time.monotonic()
    generation = backend_for(fake.url, tokenizer_and_capabilities).complete_ids(
        [1], GenerationConfig(max_new_tokens=4096), cancelled.is_set)
    assert generation.finish_reason == FinishReason.CANCELLED and generation.text.startswith("a ")
    assert time.monotonic() - started < DEADLINE_S / 2
    assert fake.disconnected.wait(5), "the fake engine never saw the client go away"


def test_the_api_key_comes_from_the_named_variable_as_a_bearer_token(fake, tokenizer_and_capabilities, monkeypatch):
    monkeypatch.setenv("SPECLSP_TEST_KEY", "sk-secret")
    backend = backend_for(fake.url, tokenizer_and_capabilities, api_key_env="SPECLSP_TEST_KEY")
    backend.complete_ids([1], CONFIG, NEVER)
    assert fake.headers[0]["Authorization"] == "Bearer sk-secret"
    monkeypatch.delenv("SPECLSP_TEST_KEY")
    with pytest.raises(BackendError) as caught:
        backend_for(fake.url, tokenizer_and_capabilities, api_key_env="SPECLSP_TEST_KEY").complete_ids([1], CONFIG, NEVER)
    assert caught.value.kind == "unauthorized" and "sk-secret" not in caught.value.message


def test_llamacpp_infill_sends_the_prompt_parts(fake, tokenizer_and_capabilities):
    from lsp_server.backends.base import Prompt

    fake.reply = lambda h: h.send_stream(sse({"content": "y = 2", "stop": False},
                                             {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": 3,
                                              "timings": {"prompt_n": 5}}))
    backend = backend_for(fake.url + "/v1", tokenizer_and_capabilities, cls=LlamaCppInfillBackend)
    prompt = Prompt([1, 2], "x = 1\n", "\nz = 3", 6, "", "\n", True, False, ("b.py",), (("b.py", "B = 0\n"),))
    generation = backend.generate(prompt, CONFIG, "auto", NEVER)
    sent = fake.requests[0]
    assert sent["path"] == "/infill"
    assert (sent["input_prefix"], sent["input_suffix"], sent["n_predict"]) == ("x = 1\n", "\nz = 3", 16)
    assert sent["input_extra"] == [{"filename": "b.py", "text": "B = 0\n"}]
    assert (generation.text, generation.finish_reason, generation.stats.new_tokens) == ("y = 2", FinishReason.LENGTH, 3)


async def test_service_shows_each_failure_kind_once_answers_empty_and_logs_recovery(fake, tokenizer_and_capabilities):
    backend = backend_for(fake.url, tokenizer_and_capabilities)
    backend.backoff = Backoff(first_s=0.01, max_s=0.01)
    worker = ModelWorker(lambda config, on_stage: backend)
    assert worker.load(Settings().backend_config()).result(timeout=DEADLINE_S) == READY
    logs, shown = [], []
    tracer = Tracer(lambda params: logs.append(params.message))
    store = DocumentStore()
    store.open(types.TextDocumentItem(uri="file:///a.py", language_id="python", version=1, text="x = 1\ny = "))
    _, service, _ = services(store, worker, tracer, notify_user=lambda m, k: shown.append(m))
    position = types.Position(line=1, character=4)
    fake.reply = lambda h: h.send_error_json(500, "engine crashed")
    for _ in range(3):
        assert await service.complete("inlineCompletion", "file:///a.py", position) is None
        await asyncio.sleep(0.02)  # past the backoff: each request reaches the engine
    assert len(shown) == 1 and "HTTP 500" in shown[0]
    assert sum("backend error: http 500" in line for line in logs) == 3
    fake.reply = lambda h: h.send_stream(sse(text_event("2", "stop")))
    answer = await service.complete("inlineCompletion", "file:///a.py", position)
    assert answer is not None and answer.insert_text == "2"
    assert sum("answers again" in line for line in logs) == 1
    fake.reply = lambda h: h.send_error_json(500, "engine crashed")
    await asyncio.sleep(0.02)
    await service.complete("inlineCompletion", "file:///a.py", types.Position(line=0, character=5))  # no cache hit
    assert len(shown) == 2  # a new failure after the recovery is shown again
    worker.shutdown()


def test_the_trace_line_records_the_remote_stages(fake, tokenizer_and_capabilities):
    from lsp_server.model.completer import Completion
    from lsp_server.completion.mode import Mode

    final = {**text_event("", "stop"), "timings": {"prompt_n": 7, "predicted_n": 3, "draft_n": 4, "draft_n_accepted": 3,
                                                   "prompt_ms": 1.5, "predicted_ms": 9.0}}
    fake.reply = lambda h: h.send_stream(sse(text_event("abc"), final))
    generation = backend_for(fake.url, tokenizer_and_capabilities).complete_ids([1], CONFIG, NEVER)
    lines = []
    record = Tracer(lambda params: lines.append(params.message)).request(
        1, "inlineCompletion", "file:///a.py", types.Position(line=0, character=0), "ok",
        completion=Completion("abc", None, generation, Mode(False, "test"), {"engine": 12.0}), total_ms=20.0)
    assert "first_token=" in lines[0] and "stream=" in lines[0] and "accepted[engine=3/4]" in lines[0]
    assert "backend=openai engine_prompt=1.5ms engine_predicted=9.0ms" in lines[0]
    assert record["tokens"] == 3 and record["backend"] == "openai" and set(record["ms"]) >= {"first_token", "stream"}
