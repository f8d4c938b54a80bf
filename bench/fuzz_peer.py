"""The typing fuzz's client side (:mod:`bench.typing_fuzz`): ``speclsp serve`` on pipes, spoken to without
waiting (requests stay in flight while edits go out), and LSP positions in UTF-16 code units.

A reader thread collects every message the server writes; the fuzz reads the responses when it wants.
The server's stderr goes to a file (a full pipe would block its logging).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SERVE = (sys.executable, "-m", "lsp_server.cli", "serve")
ROOT = Path(__file__).resolve().parents[1]


def utf16_position(text: str, offset: int) -> dict:
    """The LSP position (UTF-16 code units) of code-point ``offset`` in ``text``."""
    line_start = text.rfind("\n", 0, offset) + 1
    head = text[line_start:offset]
    return {"line": text.count("\n", 0, offset), "character": len(head.encode("utf-16-le")) // 2}


def utf16_offset(text: str, position: dict) -> int | None:
    """The code-point offset of an LSP ``position`` in ``text``; ``None`` when it lies outside the text
    (a line past the last, a character past the line's end, or inside a surrogate pair)."""
    line, character = position["line"], position["character"]
    start = 0
    for _ in range(line):
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    end = text.find("\n", start)
    row = text[start:] if end < 0 else text[start:end]
    units = 0
    for index, char in enumerate(row):
        if units == character:
            return start + index
        units += 2 if ord(char) > 0xFFFF else 1
        if units > character:
            return None
    return start + len(row) if units == character else None



def read_message(stream) -> dict | None:
    """One LSP message from ``stream`` (a binary pipe): its ``Content-Length`` header, a blank line, the JSON
    body; ``None`` at the end of the stream or on a message without a length."""
    length = None
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("ascii").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    if not line or length is None:
        return None
    return json.loads(stream.read(length))

class Peer:
    """One server process on pipes. ``responses[id]``: the response to request ``id`` once it came."""

    def __init__(self, options: dict, log_path: Path | None = None):
        self.log_path = log_path or Path(tempfile.mkstemp(prefix="speclsp-fuzz-", suffix=".log")[1])
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(SERVE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        cwd=ROOT, env=env)
        self.responses: dict[int, dict] = {}
        self.notifications: list[dict] = []
        self._changed = threading.Condition()
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        init = self.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {},
                                           "initializationOptions": options})
        self.wait(init, 120.0)
        self.notify("initialized", {})

    def _read(self) -> None:
        stdout = self.process.stdout
        while (message := read_message(stdout)) is not None:
            with self._changed:
                if "method" in message:
                    self.notifications.append(message)
                elif isinstance(message.get("id"), int):
                    self.responses[message["id"]] = message
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def notify(self, method: str, params: object) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: object) -> int:
        """Send a request; returns its id (the answer lands in :attr:`responses`)."""
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def arrived(self) -> list[int]:
        """The ids of the responses come so far, in the order they came."""
        with self._changed:
            return list(self.responses)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, msg_id: int, timeout: float) -> dict | None:
        """The response to ``msg_id``, waiting up to ``timeout`` seconds; ``None`` when none came."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while msg_id not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    return self.responses.get(msg_id)
                self._changed.wait(min(left, 0.2))
            return self.responses[msg_id]

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Until the models are loaded (``speclsp/status`` says ``ready``). Raises RuntimeError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                states = [m["params"].get("state") for m in self.notifications if m.get("method") == "speclsp/status"]
                if "ready" in states:
                    return
                if "error" in states or not self.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not load its models: {self.log_tail()}")
                self._changed.wait(0.2)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")[-chars:]

    def close(self) -> None:
        """Shut the server down (killed when it does not exit in time)."""
        if self.alive():
            try:
                self.wait(self.request("shutdown", None), 10.0)
                self.notify("exit", None)
                self.process.wait(10.0)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.log.close()
