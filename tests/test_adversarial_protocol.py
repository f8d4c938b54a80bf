"""Hostile input over raw stdio against ``speclsp serve`` (issue 19, parts 1-3): a fuzzer of our own.

After each kind of bad input: every request with a valid id got exactly one response (requests whose
framing was destroyed cannot be, and are answered by a ParseError with id null instead), and a probe
request (``speclsp/status``) is still answered. Lifecycle: the exit code LSP asks for (0 after
``shutdown``, else 1), never a signal (SIGABRT from torch's threads at interpreter shutdown), within a
deadline that detects a hang, also while a generation runs and when the client process is gone.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.raw_lsp import (
    DEADLINE_S,
    RawServer,
    frame,
    initialize_params,
    notification,
    request,
)

pytestmark = pytest.mark.adversarial

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, NOT_INITIALIZED = -32700, -32600, -32601, -32002
STATUS = "speclsp/status"


@pytest.fixture(scope="module")
def server():
    peer = RawServer()
    peer.initialize()
    yield peer
    peer.close()


def status(msg_id: int) -> bytes:
    return json.dumps(request(msg_id, STATUS)).encode()


def assert_probe_answered(server: RawServer) -> None:
    answer = server.response(server.call(STATUS))
    assert "result" in answer and answer["result"]["state"], answer
    assert server.process.poll() is None


def null_id_errors(server: RawServer) -> list[dict]:
    return [m for m in server.responses(None) if "error" in m]


# Each framing kind: (bytes for a request id, whether that request can still be answered).
FRAMING = {
    "lower-case header": (lambda i: b"content-length: %d\r\n\r\n" % len(status(i)) + status(i), True),
    "spaces around the value": (lambda i: b"Content-Length  :   %d  \r\n\r\n" % len(status(i)) + status(i), True),
    "LF-only line ends": (lambda i: b"Content-Length: %d\n\n" % len(status(i)) + status(i), True),
    "Content-Type and unknown headers": (lambda i: b"X-Junk: 1\r\nContent-Type: application/vscode-jsonrpc; "
                                         b"charset=utf-8\r\nContent-Length: %d\r\n\r\n" % len(status(i)) + status(i),
                                         True),
    "blank lines between messages": (lambda i: b"\r\n\r\n\n" + frame(status(i)), True),
    "length too large by 9": (lambda i: b"Content-Length: %d\r\n\r\n" % (len(status(i)) + 9) + status(i), True),
    "missing Content-Length": (lambda i: b"Content-Type: application/json\r\n\r\n" + status(i), False),
    "negative length": (lambda i: b"Content-Length: -5\r\n\r\n" + status(i), False),
    "non-numeric length": (lambda i: b"Content-Length: twelve\r\n\r\n" + status(i), False),
    "length 10**12": (lambda i: b"Content-Length: 1000000000000\r\n\r\n" + status(i), False),
    "length too small": (lambda i: b"Content-Length: 10\r\n\r\n" + status(i), False),
    "garbage between messages": (lambda i: b"\x00\xff garbage {not json}\r\nmore: \r\n\r\n" + frame(status(i)), True),
    "header line over 8 KiB": (lambda i: b"X-Long: " + b"a" * 20000 + b"\r\n" + frame(status(i)), True),
    "body not UTF-8": (lambda i: frame(b'{"jsonrpc":"2.0","id":%d,"method":"\xff\xfe"}' % i), False),
    "body not JSON": (lambda i: frame(b'{"jsonrpc":"2.0","id":%d,' % i), False),
    "JSON nested too deeply": (lambda i: frame(b"[" * 100_000), False),
}


@pytest.mark.parametrize("kind", list(FRAMING))
def test_framing_kind_is_answered_or_reported_and_the_stream_resynchronises(server: RawServer, kind: str):
    make, answerable = FRAMING[kind]
    msg_id = server.new_id()
    errors_before = len(null_id_errors(server))
    server.send(make(msg_id), raw=True)
    assert_probe_answered(server)
    if answerable:
        assert len(server.responses(msg_id)) == 1, server.messages[-5:]
        assert "result" in server.responses(msg_id)[0]
    else:  # the request is lost with its framing; the loss is reported instead
        assert server.responses(msg_id) == []
        assert len(null_id_errors(server)) > errors_before
        assert null_id_errors(server)[-1]["error"]["code"] in (PARSE_ERROR, INVALID_REQUEST)


def test_body_over_the_size_limit_is_skipped_without_losing_the_next_message(server: RawServer):
    from lsp_server.protocol.framing import MAX_BODY_BYTES

    huge = {"jsonrpc": "2.0", "method": "$/junk", "params": {"text": "x" * (MAX_BODY_BYTES + 10)}}
    server.send(frame(huge) + frame(status(server.new_id())), raw=True)
    assert_probe_answered(server)
    assert "over the" in null_id_errors(server)[-1]["error"]["message"]


# Each JSON-RPC shape: (message, id it must be answered with (None: id null), error code).
SHAPES = {
    "batch of requests": ([request(501, STATUS), request(502, STATUS)], [501, 502], INVALID_REQUEST),
    "empty batch": ([], [None], INVALID_REQUEST),
    "number": (5, [None], INVALID_REQUEST),
    "string": ("hello", [None], INVALID_REQUEST),
    "null": (None, [None], INVALID_REQUEST),
    "no jsonrpc": ({"id": 503, "method": STATUS}, [503], INVALID_REQUEST),
    "jsonrpc 1.0": ({"jsonrpc": "1.0", "id": 504, "method": STATUS}, [504], INVALID_REQUEST),
    "object id": (request({"a": 1}, STATUS), [None], INVALID_REQUEST),
    "array id": (request([1], STATUS), [None], INVALID_REQUEST),
    "fractional id": (request(1.5, STATUS), [None], INVALID_REQUEST),
    "boolean id": (request(True, STATUS), [None], INVALID_REQUEST),
    "null id": (request(None, STATUS), [None], INVALID_REQUEST),
    "method not a string": (request(505, 42), [505], INVALID_REQUEST),
    "params not structured": (request(506, STATUS, "x"), [506], INVALID_REQUEST),
    "didOpen sent as a request": (request(507, "textDocument/didOpen", {}), [507], INVALID_REQUEST),
    "exit sent as a request": (request(508, "exit"), [508], INVALID_REQUEST),
    "second initialize": (request(509, "initialize", initialize_params(model="other")), [509], INVALID_REQUEST),
    "unknown method": (request(510, "no/such/method", {}), [510], METHOD_NOT_FOUND),
    "neither method nor result": ({"jsonrpc": "2.0", "id": 511}, [511], INVALID_REQUEST),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_jsonrpc_shape_gets_one_error_response(server: RawServer, shape: str):
    message, ids, code = SHAPES[shape]
    null_before = len(null_id_errors(server))
    server.send(message)
    assert_probe_answered(server)
    for msg_id in set(ids):
        answers = server.responses(msg_id) if msg_id is not None else null_id_errors(server)[null_before:]
        assert len(answers) == ids.count(msg_id), (shape, answers)
        assert all(a["error"]["code"] == code for a in answers), answers
        assert "unhashable" not in json.dumps(answers) and "Traceback" not in json.dumps(answers)


def test_silent_kinds_are_not_answered_and_do_no_harm(server: RawServer):
    """A notification (even a broken one) and a response to no request get no answer (JSON-RPC)."""
    before = len(server.messages)
    server.send({"jsonrpc": "2.0", "method": 7})  # broken notification: logged only
    server.send({"jsonrpc": "2.0", "id": 99999, "result": None})  # a response nobody asked for
    server.send([notification("initialized", {})])  # a batch of a notification
    server.send(notification("textDocument/didChange", {"textDocument": 5}))  # params that do not fit
    probe = server.call(STATUS)
    assert "result" in server.response(probe)
    assert [m for m in server.messages[before:] if "method" not in m and m.get("id") != probe] == []


def test_random_mutations_from_a_fixed_seed(server: RawServer):
    rng = random.Random(19)
    sent = []
    for _ in range(150):
        msg_id = server.new_id()
        data = bytearray(frame(status(msg_id)))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            operation = rng.choice(("flip", "insert", "delete", "duplicate"))
            if operation == "flip":
                data[at] ^= 1 << rng.randrange(8)
            elif operation == "insert":
                data[at:at] = bytes([rng.randrange(256)])
            elif operation == "delete":
                del data[at]
            else:
                data[at:at] = data[at:at + rng.randint(1, 40)]
        sent.append(msg_id)
        server.send(bytes(data), raw=True)
    # a stray length may swallow the start of what follows: resynchronise before probing
    server.send(b"\r\n" + frame(status(server.new_id())) * 3, raw=True)
    assert_probe_answered(server)
    assert all(len(server.responses(msg_id)) <= 1 for msg_id in sent)
    assert sum(len(server.responses(msg_id)) for msg_id in sent) > 0


def test_before_initialize_and_after_shutdown():
    peer = RawServer()
    try:
        early = peer.response(peer.call(STATUS))
        assert early["error"]["code"] == NOT_INITIALIZED
        assert peer.response(peer.call("shutdown"))["error"]["code"] == NOT_INITIALIZED
        peer.send(notification("textDocument/didOpen", {"textDocument": {"uri": "file:///x.py", "languageId": "python",
                                                                         "version": 1, "text": ""}}))
        assert "result" in peer.initialize()
        assert "result" in peer.response(peer.call("shutdown"))
        after = [peer.response(peer.call(method, params)) for method, params in
                 ((STATUS, None), ("initialize", initialize_params()), ("shutdown", None))]
        assert [a["error"]["code"] for a in after] == [INVALID_REQUEST] * 3, after
        peer.process.stdin.close()  # end of input after shutdown: code 0
        assert peer.wait_exit() == 0
        assert "exiting with code 0" in peer.stderr_text()
    finally:
        peer.close()


def test_shutdown_and_exit_with_params_null_end_with_code_0():
    """pygls' own client sends ``"params": null`` for shutdown and exit: read as no params."""
    peer = RawServer()
    try:
        assert "result" in peer.initialize()
        peer.send({"jsonrpc": "2.0", "id": 99, "method": "shutdown", "params": None})
        assert peer.response(99) == {"jsonrpc": "2.0", "id": 99, "result": None}
        peer.send({"jsonrpc": "2.0", "method": "exit", "params": None})
        assert peer.wait_exit() == 0
    finally:
        peer.close()


def test_serve_takes_the_stdio_flag_clients_append():
    """vscode-languageclient appends ``--stdio`` to a stdio server's command: in a real VS Code the
    server without this flag exited at once (usage error), five times, and the client gave up."""
    from tests.raw_lsp import SERVE

    peer = RawServer((*SERVE, "--stdio"))
    try:
        assert "result" in peer.initialize()
        peer.send({"jsonrpc": "2.0", "id": 99, "method": "shutdown"})
        assert peer.response(99)["result"] is None
        peer.send(notification("exit"))
        assert peer.wait_exit() == 0
    finally:
        peer.close()


def test_exit_before_initialize_is_code_1():
    peer = RawServer()
    try:
        peer.send(notification("exit"))
        assert peer.wait_exit() == 1
    finally:
        peer.close()


def start_generation(peer: RawServer) -> int:
    """A running inline completion (its id), asked for until one is still running 1 s in.

    Greedy (deterministic), the starter pair wrote on after ``Notes N`` for 16-19 s in each of 3 tries
    here; sampled (the test's first form, temperature 10) it met a stop token within 1 s in all 8
    tries on CI."""
    for attempt in range(8):
        uri = f"file:///adversarial/notes{attempt}.md"
        peer.send(notification("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "markdown", "version": 1, "text": f"Notes {attempt}\n\n"}}))
        msg_id = peer.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": 2, "character": 0}, "context": {"triggerKind": 1}})
        time.sleep(1.0)
        if not peer.responses(msg_id):
            return msg_id
    raise AssertionError("no generation lasted 1 s: the test cannot end the server during one")


@pytest.mark.parametrize("how, code", [("stdin closed", 1), ("shutdown and exit", 0), ("exit without shutdown", 1),
                                       ("SIGTERM", 1)])
def test_ending_during_a_generation(how: str, code: int):
    peer = RawServer()
    try:
        peer.initialize(completion={"maxNewTokens": 4096}, decoding={"temperature": 0.0})
        peer.wait_ready()
        start_generation(peer)
        started = time.monotonic()
        if how == "stdin closed":
            peer.process.stdin.close()
        elif how == "SIGTERM":
            peer.process.send_signal(signal.SIGTERM)
        else:
            if how == "shutdown and exit":
                assert "result" in peer.response(peer.call("shutdown"))
            peer.send(notification("exit"))
        returncode = peer.wait_exit()
        assert returncode == code, (returncode, peer.stderr_text()[-2000:])  # negative: killed by a signal
        assert "terminate called" not in peer.stderr_text()
        assert time.monotonic() - started < DEADLINE_S
    finally:
        peer.close()


def test_server_exits_when_the_client_process_is_gone():
    client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    peer = RawServer()
    try:
        peer.initialize(process_id=client.pid)
        assert_probe_answered(peer)
        client.kill()
        client.wait()
        assert peer.wait_exit() == 1
        assert f"client process {client.pid} is gone" in peer.stderr_text()
    finally:
        client.kill()
        peer.close()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_exit_is_prompt_while_indexing_is_blocked_on_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")  # opening it for reading blocks until a writer comes
    (tmp_path / "a.py").write_text("x = 1\n")
    peer = RawServer()
    try:
        answer = peer.response(peer.call("initialize", {**initialize_params(), "rootUri": tmp_path.as_uri()}))
        assert "result" in answer
        peer.send(notification("initialized", {}))
        assert_probe_answered(peer)
        assert "result" in peer.response(peer.call("shutdown"))
        peer.send(notification("exit"))
        assert peer.wait_exit() == 0
    finally:
        peer.close()
