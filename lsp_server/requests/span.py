"""A request's span: its id, where it points, when it started, and the one trace line it ends with.

:meth:`RequestSpan.done` ends a request that was answered (a completion, a rewrite, a cache hit): its
line (:meth:`lsp_server.tracing.Tracer.request`) is written just after the handler's answer is sent, so
that formatting and sending it never delays the answer, and its ``total`` runs from reading the request
to writing the answer when the protocol's clock (:class:`lsp_server.tracing.RpcClock`) knows both, else
it is the handler's own time. :meth:`RequestSpan.log` ends one that gets no answer (not ready, a guard,
superseded, a failed engine): its line is written at once.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable

from lsprotocol import types

from lsp_server.tracing import RpcClock, Tracer


def after_answer(fn: Callable[..., object], *args) -> None:
    """Run ``fn(*args)`` on the event loop just after the handler's answer is sent: the answer's JSON-RPC
    response is written by a done-callback of the handler's task, which the loop schedules when the
    task finishes; a callback that schedules ``fn`` again from the loop's queue lands behind it."""
    loop = asyncio.get_running_loop()
    loop.call_soon(loop.call_soon, functools.partial(fn, *args))


class RequestSpan:
    """One request from its start to its trace line.

    Args:
        tracer: where the line goes.
        request_id: ours, for logs. msg_id, clock: the JSON-RPC message id and the protocol's clock
            (``None``: unknown), for the request's ``total``.
        on_done: called with ``(total_ms, result)`` after a successful answer with figures (the status board).
        started: when the handler started (``time.perf_counter()`` seconds; default: now).
    """

    def __init__(self, tracer: Tracer, request_id: int, method: str, uri: str, position: types.Position,
                 msg_id: object = None, clock: RpcClock | None = None,
                 on_done: Callable[[float, object], None] | None = None, started: float | None = None):
        self.tracer, self.request_id, self.method = tracer, request_id, method
        self.uri, self.position = uri, position
        self.msg_id, self.clock, self.on_done = msg_id, clock, on_done
        self.started = time.perf_counter() if started is None else started  # time.perf_counter() seconds

    @property
    def elapsed_ms(self) -> float:
        """Milliseconds since the handler started."""
        return 1000 * (time.perf_counter() - self.started)

    def log(self, status: str, queue_ms: float = 0.0) -> None:
        """End a request that gets no answer: its line now, with ``status``."""
        self.tracer.request(self.request_id, self.method, self.uri, self.position, status=status, queue_ms=queue_ms,
                            msg_id=self.msg_id)

    def done(self, status: str, result: object | None = None, queue_ms: float = 0.0) -> None:
        """End an answered request with ``status`` and, for a model's answer, its result (a completion or
        a rewrite, with ``generation`` and ``ms``); the line is written after the answer is sent."""
        after_answer(self._trace, time.perf_counter(), status, result, queue_ms)

    def _trace(self, ended: float, status: str, result: object | None, queue_ms: float) -> None:
        started = self.started
        total_ms, rpc_ms = 1000 * (ended - started), (0.0, 0.0)
        if self.clock is not None and self.msg_id is not None:
            received, responded = self.clock.times(self.msg_id)
            self.clock.forget(self.msg_id)
            if received is not None and responded is not None and received <= started <= ended <= responded:
                rpc_ms = (1000 * (started - received), 1000 * (responded - ended))
                total_ms = 1000 * (responded - received)
        self.tracer.request(self.request_id, self.method, self.uri, self.position, status=status, queue_ms=queue_ms,
                            completion=result, total_ms=total_ms, rpc_ms=rpc_ms, msg_id=self.msg_id)
        if self.on_done is not None and result is not None and status == "ok":
            self.on_done(total_ms, result)
