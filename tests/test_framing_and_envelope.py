"""The pure parts of the stdio transport (issue 19): framing and resynchronisation
(:mod:`lsp_server.protocol.framing`), JSON-RPC envelope checks and the lifecycle gate (:mod:`lsp_server.protocol.envelope`),
and the client-process check (:mod:`lsp_server.protocol.parent_watch`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lsp_server.protocol.envelope import Lifecycle, Phase, Rejection, check_message, parse_body
from lsp_server.protocol.framing import FrameReader, split_overlong_body
from lsp_server.protocol.parent_watch import process_gone

pytestmark = pytest.mark.unit

BODY = b'{"jsonrpc":"2.0","id":1,"method":"m"}'
GOOD = b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY


def read_all(data: bytes, chunk: int = 7, max_body: int = 1000) -> tuple[list[bytes], list[str]]:
    """The bodies and problem messages a reader gets from ``data``, fed ``chunk`` bytes at a time."""
    pieces = iter([data[i:i + chunk] for i in range(0, len(data), chunk)])
    problems = []
    reader = FrameReader(lambda n: next(pieces, b""), lambda p: problems.append(p.message), max_body)
    bodies = []
    while (frame := reader.next()) is not None:
        bodies.append(frame.body)
    return bodies, problems


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
@pytest.mark.parametrize("header", [b"Content-Length: %d\r\n\r\n", b"content-length:%d\n\n",
                                    b"CONTENT-LENGTH :  %d  \r\n\n", b"Content-Type: x\r\nContent-Length: %d\r\n\r\n"])
def test_header_spellings_are_read(header: bytes, chunk: int):
    assert read_all(header % len(BODY) + BODY + GOOD, chunk) == ([BODY, BODY], [])


@pytest.mark.parametrize("bad, problem", [
    (b"Content-Length: -5\r\n\r\n" + BODY, "bad Content-Length"),
    (b"Content-Length: abc\r\n\r\n" + BODY, "bad Content-Length"),
    (b"Content-Type: x\r\n\r\n" + BODY, "no Content-Length"),
    (b"\x00\xffnoise\r\n", "not a header"),
    (b"y" * 20000, "not a header"),
    (b"Content-Length: 1000000000000\r\n\r\n" + BODY, "over the 1000-byte limit"),
    (b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n" + BODY, "5000-digit-long message is over"),  # int() refuses it
    (b"Content-Length: 0000" + b"1" * 19 + b"\r\n\r\n" + BODY, "19-digit-long message is over"),
    (b"Content-Length: 5000\r\n\r\n" + b"x" * 5000, "skipped 5000 bytes"),
])
@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_bad_framing_is_reported_and_the_next_message_is_read(bad: bytes, problem: str, chunk: int):
    bodies, problems = read_all(bad + GOOD, chunk)
    assert bodies == [BODY]
    assert problems and problem in problems[0]


def test_length_too_small_gives_a_cut_body_then_resynchronises():
    bodies, problems = read_all(b"Content-Length: 10\r\n\r\n" + BODY + GOOD)
    assert bodies == [BODY[:10], BODY] and "not a header" in problems[0]


@pytest.mark.parametrize("extra", [1, 9, len(GOOD)])
def test_length_too_large_gives_the_body_back_and_rereads_the_next_message(extra: int):
    bodies, problems = read_all(b"Content-Length: %d\r\n\r\n" % (len(BODY) + extra) + BODY + GOOD + GOOD)
    assert bodies == [BODY, BODY, BODY] and "counted" in problems[0]


def test_end_of_input_inside_a_body_ends_reading():
    assert read_all(b"Content-Length: 500\r\n\r\n" + BODY) == ([], ["input ended inside a 500-byte body"])


def test_split_overlong_body_only_for_a_json_value_followed_by_a_header():
    assert split_overlong_body(BODY + b"Content-Le") == (BODY, b"Content-Le")
    assert split_overlong_body(BODY + b"junk") is None
    assert split_overlong_body(b"not json") is None


def test_parse_errors():
    for body in (b"{", b"\xff", b"[" * 100_000):
        rejection = parse_body(body)
        assert isinstance(rejection, Rejection) and rejection.code == -32700 and rejection.msg_id is None
    assert parse_body(BODY) == json.loads(BODY)


@pytest.mark.parametrize("message, expected", [
    ({"jsonrpc": "2.0", "id": 1, "method": "m"}, []),
    ({"jsonrpc": "2.0", "id": "a", "method": "m", "params": []}, []),
    ({"jsonrpc": "2.0", "id": 3, "result": None}, []),
    ([], [(-32600, None, True)]),
    ([{"jsonrpc": "2.0", "id": 4, "method": "m"}, {"jsonrpc": "2.0", "method": "n"}],
     [(-32600, 4, True), (-32600, None, False)]),
    (7, [(-32600, None, True)]),
    ({"id": 5, "method": "m"}, [(-32600, 5, True)]),
    ({"jsonrpc": "1.0", "method": "m"}, [(-32600, None, False)]),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "m"}, [(-32600, None, True)]),
    ({"jsonrpc": "2.0", "id": True, "method": "m"}, [(-32600, None, True)]),
    ({"jsonrpc": "2.0", "id": 2.5, "method": "m"}, [(-32600, None, True)]),
    ({"jsonrpc": "2.0", "id": 6, "method": 6}, [(-32600, 6, True)]),
    ({"jsonrpc": "2.0", "id": 7, "method": "m", "params": 1}, [(-32600, 7, True)]),
    ({"jsonrpc": "2.0", "id": 11, "method": "shutdown", "params": None}, []),  # pygls' client sends it
    ({"jsonrpc": "2.0", "method": "exit", "params": None}, []),
    ({"jsonrpc": "2.0", "id": 8, "method": "textDocument/didOpen"}, [(-32600, 8, True)]),
    ({"jsonrpc": "2.0", "id": 9}, [(-32600, 9, True)]),
    ({"jsonrpc": "1.0", "id": 10, "result": 1}, [(-32600, None, False)]),
])
def test_check_message(message, expected):
    assert [(r.code, r.msg_id, r.answer) for r in check_message(message)] == expected


def test_lifecycle_gate():
    gate = Lifecycle()
    assert gate.admit("speclsp/status", 1, True).code == -32002
    assert gate.admit("initialized", None, False).answer is False
    assert gate.admit("initialize", 2, True) is None
    gate.dispatched("initialize")
    assert gate.admit("initialize", 3, True).code == -32600
    assert gate.admit("speclsp/status", 4, True) is None
    gate.dispatched("shutdown")
    assert gate.phase is Phase.SHUTDOWN
    refused = [gate.admit(method, 5, True) for method in ("speclsp/status", "initialize", "shutdown")]
    assert [(r.code, r.msg_id) for r in refused] == [(-32600, 5)] * 3
    assert gate.admit("textDocument/didOpen", None, False).answer is False


def test_process_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_gone(child.pid, os.getppid())
    assert not process_gone(os.getpid(), os.getppid())
