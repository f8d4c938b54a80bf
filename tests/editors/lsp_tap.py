"""Runs a language server and records every LSP message both ways: ``python -m tests.editors.lsp_tap
LOG -- COMMAND...``. Bytes pass through unchanged; each message is appended to LOG (JSON lines:
``{"from": "client"|"server", "message": {...}}``), so a test can compare what an editor shows with
what the server answered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import BinaryIO


def pump(source: BinaryIO, sink: BinaryIO, side: str, log: BinaryIO, lock: threading.Lock) -> None:
    """Copy LSP frames from ``source`` to ``sink``, appending each message's body to ``log``."""
    while True:
        headers = b""
        while not headers.endswith(b"\r\n\r\n"):
            byte = source.read(1)
            if not byte:
                sink.close()
                return
            headers += byte
        lengths = [line.split(b":", 1)[1] for line in headers.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        body = source.read(int(lengths[0])) if lengths and lengths[0].strip().isdigit() else b""
        try:
            record = {"from": side, "message": json.loads(body)}
        except ValueError:
            record = {"from": side, "unparsed": body.decode(errors="replace")}
        with lock:  # logged before it is passed on: whoever sees its effect finds it in the log
            log.write(json.dumps(record).encode() + b"\n")
            log.flush()
        sink.write(headers + body)
        sink.flush()


def main() -> int:
    """Run COMMAND, pass its LSP traffic through unchanged and record it; exit with its status."""
    log_path, separator, *command = sys.argv[1:]
    if separator != "--" or not command:
        raise SystemExit("usage: python -m tests.editors.lsp_tap LOG -- COMMAND...")
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lock = threading.Lock()
    with open(log_path, "ab") as log:
        to_server = threading.Thread(target=pump, args=(sys.stdin.buffer, server.stdin, "client", log, lock),
                                     daemon=True)
        to_server.start()
        pump(server.stdout, sys.stdout.buffer, "server", log, lock)
    code = server.wait()
    os._exit(code if code >= 0 else 128 - code)  # not sys.exit: the client-side pump may block on stdin


if __name__ == "__main__":
    sys.exit(main())
