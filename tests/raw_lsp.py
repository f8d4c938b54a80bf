"""A raw-stdio LSP peer for the adversarial tests: it writes any bytes to ``speclsp serve`` (or another
command) and reads the server's well-formed answers, so tests can send what no real client would.

Not a test module (no tests here); :mod:`tests.test_adversarial_protocol` uses it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.fuzz_peer import read_message
from tests.conftest import STARTER_OPTIONS

SERVE = (sys.executable, "-m", "lsp_server.cli", "serve")
#: Seconds any wait may take before a test calls it a hang.
DEADLINE_S = 30.0


def frame(payload: object | bytes) -> bytes:
    """A well-formed message: ``Content-Length`` header and the JSON (or raw bytes) body."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(msg_id: object, method: str, params: object = None) -> dict:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    return message if params is None else {**message, "params": params}


def notification(method: str, params: object = None) -> dict:
    message = {"jsonrpc": "2.0", "method": method}
    return message if params is None else {**message, "params": params}


def initialize_params(process_id: int | None = None, root_uri: str | None = None, **options) -> dict:
    """``initialize`` params with the starter pair (the default models may be slow to load)."""
    return {"processId": process_id, "rootUri": root_uri, "capabilities": {},
            "initializationOptions": {**STARTER_OPTIONS, **options}}


class RawServer:
    """A server process on pipes. ``messages`` collects what it wrote to stdout, in order."""

    def __init__(self, command: tuple[str, ...] = SERVE, env: dict[str, str] | None = None):
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, cwd=Path(__file__).resolve().parents[1], env=env)
        self.messages: list[dict] = []
        self._changed = threading.Condition()
        self._next_id = 1000
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stdout = self.process.stdout
        while (message := read_message(stdout)) is not None:
            with self._changed:
                self.messages.append(message)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def send(self, data: object | bytes, raw: bool = False) -> None:
        """Write a message (framed) or, with ``raw``, bytes as they are."""
        self.process.stdin.write(data if raw else frame(data))
        self.process.stdin.flush()

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def call(self, method: str, params: object = None) -> int:
        """Send a request with a fresh id; returns the id."""
        msg_id = self.new_id()
        self.send(request(msg_id, method, params))
        return msg_id

    def responses(self, msg_id: object) -> list[dict]:
        """Every response written for ``msg_id`` (``None``: those with id null)."""
        with self._changed:
            return [m for m in self.messages if "method" not in m and m.get("id", "absent") == msg_id]

    def wait_for(self, predicate, timeout: float = DEADLINE_S) -> list[dict]:
        """Wait until ``predicate(messages)`` holds; returns the messages. Raises AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.messages):
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not predicate(self.messages)):
                    raise AssertionError(f"timed out or server ended (code {self.process.poll()}); "
                                         f"stderr tail: {self.stderr_text()[-2000:]}")
                self._changed.wait(min(left, 0.2))
            return list(self.messages)

    def response(self, msg_id: object, timeout: float = DEADLINE_S) -> dict:
        """The (first) response to ``msg_id``, waiting for it."""
        self.wait_for(lambda _: bool(self.responses(msg_id)), timeout)
        return self.responses(msg_id)[0]

    def initialize(self, process_id: int | None = None, root_uri: str | None = None, **options) -> dict:
        answer = self.response(self.call("initialize", initialize_params(process_id, root_uri, **options)))
        self.send(notification("initialized", {}))
        return answer

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the models are loaded (``speclsp/status`` says ``ready``)."""
        def ready(messages: list[dict]) -> bool:
            states = [m["params"].get("state") for m in messages if m.get("method") == "speclsp/status"]
            assert "error" not in states, self.stderr_text()[-2000:]
            return "ready" in states
        self.wait_for(ready, timeout)

    def wait_exit(self, timeout: float = DEADLINE_S) -> int:
        """The exit code, once the process has ended. Raises AssertionError when it does not (a hang)."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server did not exit within {timeout} s") from None

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.stderr.close()
