"""The stdio message loop of ``speclsp serve``, in place of pygls' (which only understands one
spelling of one header, reads any length, and leaves the process to normal interpreter shutdown).

Input: :class:`~lsp_server.protocol.framing.FrameReader` reads frames on a thread of its own; each body is
checked (:mod:`lsp_server.protocol.envelope`) and, when it passes, structured and dispatched by pygls' protocol,
which also writes every answer. Every problem is logged (stderr and ``window/logMessage``) and, where
JSON-RPC allows, answered with an error response (id null when the id is unknown).

Process end, always by ``os._exit`` after flushing stdout, so that no model or indexing thread can
keep the process alive or abort it at interpreter shutdown (torch's threads do:
"terminate called without an active exception"):

* ``exit``: code 0 after ``shutdown``, else 1 (LSP 3.17);
* end of stdin, SIGTERM, SIGINT, a closed stdout: the same codes;
* the client process (``initialize``'s ``processId``) gone: code 1 (:mod:`lsp_server.protocol.parent_watch`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import sys
import threading
from functools import partial
from typing import TYPE_CHECKING, BinaryIO

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter

from lsp_server.protocol.envelope import ANSWERED, Lifecycle, Phase, Rejection, check_message, parse_body
from lsp_server.protocol.framing import Frame, FrameReader, FramingProblem
from lsp_server.protocol.parent_watch import watch_parent

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer

log = logging.getLogger(__name__)

#: Seconds an ending process waits for the event loop before it exits anyway (a write blocked on a
#: client that no longer reads, say).
EXIT_GRACE_S = 5.0
_MAX_READ_FAILURES = 100  # reading failures in a row that end the process (a stream that cannot be read)


def terminate(code: int, reason: str, stdout: BinaryIO | None = None) -> None:
    """End the process now with ``code``: log ``reason``, flush ``stdout`` and stderr, ``os._exit``."""
    log.info("exiting with code %d: %s", code, reason)
    for stream in (stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass  # the client is gone: nothing more to tell it
    os._exit(code)


class _Writer(StdoutWriter):
    """pygls' stdout writer, except that a client that stopped reading ends the process."""

    def __init__(self, stdout: BinaryIO, on_closed):
        super().__init__(stdout)
        self._on_closed = on_closed

    def write(self, data: bytes) -> None:
        try:
            super().write(data)
        except (OSError, ValueError) as exc:
            self._on_closed(f"stdout is closed ({exc})")


class StdioTransport:
    """Reads, checks and dispatches messages for ``server`` until the process ends (it never returns)."""

    def __init__(self, server: SpeclspServer, stdin_fd: int, stdout: BinaryIO):
        self.server = server
        self.protocol = server.protocol
        self.lifecycle = Lifecycle()
        self._stdout = stdout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader = FrameReader(partial(os.read, stdin_fd), self._on_framing_problem)
        self._reading = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="speclsp-stdin")
        self.protocol.set_writer(_Writer(stdout, lambda reason: self.end(1, reason)))

    def exit_code(self) -> int:
        """LSP's exit code: 0 once ``shutdown`` was received, else 1."""
        return 0 if self.lifecycle.phase is Phase.SHUTDOWN else 1

    def end(self, code: int | None, reason: str) -> None:
        """End the process (``code`` ``None``: :meth:`exit_code`). A backstop timer ends it anyway
        should flushing block for more than :data:`EXIT_GRACE_S`."""
        code = self.exit_code() if code is None else code
        backstop = threading.Timer(EXIT_GRACE_S, os._exit, (code,))
        backstop.daemon = True
        backstop.start()
        terminate(code, reason, self._stdout)

    def serve(self) -> None:
        """Run the event loop and the message loop; ends the process."""
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(signum, self.end, None, f"signal {signal.Signals(signum).name}")
        failures = 0
        while True:
            try:
                frame: Frame | None = await self._loop.run_in_executor(self._reading, self._reader.next)
            except Exception as exc:  # noqa: BLE001 - a bug of ours in reading: report it, keep reading
                failures += 1
                log.exception("reading a message failed")
                self.reject(Rejection(types.ErrorCodes.ParseError, f"Parse error: reading a message failed "
                                      f"({type(exc).__name__})", answer=True))
                if failures >= _MAX_READ_FAILURES:
                    self.end(1, f"reading stdin failed {failures} times in a row")
                continue
            failures = 0
            if frame is None:
                self.end(None, "stdin closed" + ("" if self.exit_code() == 0 else " without shutdown"))
            self.receive(frame.body)

    def _on_framing_problem(self, problem: FramingProblem) -> None:  # on the reading thread
        rejection = Rejection(types.ErrorCodes.ParseError, f"Parse error (framing): {problem.message}",
                              answer=problem.lost)
        self._loop.call_soon_threadsafe(self.reject, rejection)

    def reject(self, rejection: Rejection) -> None:
        """Log a refused message and answer it when JSON-RPC allows."""
        self.server.tracer.message(f"[speclsp] {rejection.message}", types.MessageType.Warning)
        if rejection.answer:  # written as a plain dict: pygls' error type leaves out an id that is null
            self.protocol._send_data({"jsonrpc": "2.0", "id": rejection.msg_id,
                                      "error": {"code": int(rejection.code), "message": rejection.message}})

    def receive(self, body: bytes) -> None:
        """Check one body and dispatch it when it passes."""
        data = parse_body(body)
        rejections = [data] if isinstance(data, Rejection) else check_message(data)
        for rejection in rejections:
            self.reject(rejection)
        if rejections:
            return
        method, is_request = data.get("method"), "id" in data
        if method == types.EXIT:
            self.end(None, "exit" + ("" if self.exit_code() == 0 else " without shutdown"))
        if method is not None and (refusal := self.lifecycle.admit(method, data.get("id"), is_request)):
            self.reject(refusal)
            return
        self._dispatch(data)

    def _dispatch(self, data: dict) -> None:
        """Structure ``data`` and hand it to pygls; notes lifecycle changes."""
        if "method" in data and data.get("params") is None:
            data = {**data, "params": None}  # left out or null; pygls' generic types need the key
        try:
            message = self.protocol.structure_message(data)
        except JsonRpcException as exc:  # a notification whose params do not fit (requests are answered)
            self.reject(Rejection(exc.code, f"{data.get('method')}: {exc.message} (dropped)", answer=False))
            return
        if message is ANSWERED:
            return
        method = data.get("method")
        if method in (types.INITIALIZE, types.SHUTDOWN):
            self.lifecycle.dispatched(method)
        if method == types.INITIALIZE and isinstance(params := data.get("params"), dict):
            process_id = params.get("processId")  # the client is gone: no flushing stdout for it
            watch_parent(process_id, lambda: terminate(1, f"the client process {process_id} is gone"))
        try:
            self.protocol.handle_message(message)
        except Exception:  # one message must not end the loop
            log.exception("failed to handle %s", method or "a response")


def serve_stdio(server: SpeclspServer, stdin_fd: int, stdout: BinaryIO) -> None:
    """Serve LSP on ``stdin_fd`` / ``stdout`` until the process ends (it never returns)."""
    StdioTransport(server, stdin_fd, stdout).serve()
