"""The request pipeline both request services share: resolve once, guard once, run on the model thread.

A request goes through, in order:

* :meth:`RequestPipeline.begin`: the request resolved once (document snapshot, code-point offset,
  settings snapshot; :mod:`lsp_server.request`) and its span (:mod:`lsp_server.requests.span`). An
  unknown document or a position outside it is a JSON-RPC ``InvalidParams`` error with a clear
  message (docs/cases.md L2);
* :meth:`RequestPipeline.refused`: a document whose file looks secret (``.env``, keys...;
  :func:`lsp_server.workspace.file_rules.uri_looks_secret`) gets nothing without a model call, and one log line
  per document says why (never its text); so does a document out of sync with the editor (once per
  out-of-sync state). Both are :meth:`RequestPipeline.refusal`, the one check that work ahead passes too;
* :meth:`RequestPipeline.ready`: before the models are ready, the answer is empty, not an error;
* :meth:`RequestPipeline.run`: a model session operation on the model thread. A newer request for the
  same document and method cancels the one in flight, which stops within one verify round (the session
  skips one superseded while queued); so does ``$/cancelRequest``. A remote engine's failure
  (:class:`lsp_server.backends.base.BackendError`) answers the request with nothing and is shown to the
  user once per kind of failure (``window/showMessage``), not per keystroke; its recovery is logged once.

Document events (open, close, a file changed on disk) go to the session through here as well; work ahead
of requests is ordered and guarded by the pipeline's scheduler (:mod:`lsp_server.requests.work_ahead`).
Log lines name documents by their short name (:mod:`lsp_server.workspace.names`), never by URI.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from lsp_server.backends.base import BackendError
from lsp_server.workspace.documents import Document, DocumentStore
from lsp_server.workspace.file_rules import uri_looks_secret
from lsp_server.workspace.positions import PositionError, codec_for
from lsp_server.request import CompletionRequest, resolve_request
from lsp_server.requests.span import RequestSpan, after_answer
from lsp_server.requests.work_ahead import WorkAhead
from lsp_server.model.session import ModelSession
from lsp_server.settings import Settings
from lsp_server.tracing import RpcClock, Tracer
from lsp_server.model.worker import READY, Job, ModelWorker
from lsp_server.workspace.names import file_name

SECRET, OUT_OF_SYNC = "secret", "out of sync"  # why a document gets no model work (RequestPipeline.refusal)


@dataclass(frozen=True)
class Answer:
    """Text to insert and the range it replaces, in the client's position encoding."""

    insert_text: str
    range: types.Range
    completion: Any = None  # the model's Completion; None for an answer without a model call


@dataclass(frozen=True)
class Ran:
    """A session operation's result and how long it waited for the model thread (ms)."""

    result: Any
    queue_ms: float


class RequestPipeline:
    """See the module docstring.

    Args:
        settings_ref: returns the current settings (read once per request, on the event loop).
        names: a URI's short name for log lines (default: its file name).
        rpc: returns (the current JSON-RPC message id, the protocol's clock or ``None``), for tracing.
        notify_user: shows a message to the user (``window/showMessage``); ``None``: the log only.
        on_done: called with ``(total_ms, result)`` after each answer of a model (the status board).
    """

    def __init__(self, store: DocumentStore, worker: ModelWorker, tracer: Tracer,
                 settings_ref: Callable[[], Settings], names: Callable[[str], str] | None = None,
                 rpc: Callable[[], tuple[object, RpcClock | None]] | None = None,
                 notify_user: Callable[[str, types.MessageType], None] | None = None,
                 on_done: Callable[[float, object], None] | None = None):
        self.store, self.worker, self.tracer, self.settings_ref = store, worker, tracer, settings_ref
        self.names = names or file_name
        self.rpc, self.notify_user, self.on_done = rpc, notify_user, on_done
        self.on_closed: list[Callable[[str], None]] = []  # each service's forget(uri), called on didClose
        self.position_encoding: str | None = None  # set after initialize
        self._ids = itertools.count(1)
        self._inflight: dict[tuple[str, str], CompletionRequest] = {}  # (uri, method) -> the request running
        self._sync_explained: dict[str, str] = {}  # uri -> the out-of-sync problem last explained in the log
        self._secret_logged: set[str] = set()  # secret-looking documents already reported
        self._backend_failures: set[str] = set()  # kinds of remote failure shown since the last success
        self.work_ahead = WorkAhead(self)  # the one scheduler of work ahead of requests

    # The way in
    def begin(self, method: str, uri: str, position: types.Position,
              automatic: bool = False) -> tuple[CompletionRequest, RequestSpan]:
        """The request, resolved once, and its span.

        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
        """
        started = time.perf_counter()  # the span runs from here: resolution is part of the handler's time
        document = self.store.get(uri)
        if document is None:
            raise JsonRpcInvalidParams(f"document {uri} is not open; send textDocument/didOpen first")
        try:
            request = resolve_request(document, position, codec_for(self.position_encoding), self.settings_ref(),
                                      automatic=automatic, method=method, request_id=next(self._ids))
        except PositionError as exc:
            raise JsonRpcInvalidParams(f"invalid position for {uri}: {exc}") from exc
        msg_id, clock = self.rpc() if self.rpc is not None else (None, None)
        return request, RequestSpan(self.tracer, request.request_id, method, uri, position, msg_id, clock, self.on_done,
                                    started)

    @staticmethod
    def refusal(document: Document) -> str | None:
        """Why ``document`` (a snapshot) gets no model work at all, neither requests nor work ahead
        (:mod:`lsp_server.requests.work_ahead`): :data:`SECRET` (its file looks secret) or
        :data:`OUT_OF_SYNC`; ``None`` when it may. The one check of both on the request side."""
        if uri_looks_secret(document.uri):
            return SECRET
        return None if document.in_sync else OUT_OF_SYNC

    def refused(self, request: CompletionRequest, span: RequestSpan, what: str) -> bool:
        """Whether the document gets no ``what`` (``completions``, ``suggestion``) for its file or its sync
        state (:meth:`refusal`); logs why."""
        refusal = self.refusal(request.document)
        if refusal == SECRET:
            if request.uri not in self._secret_logged:
                self._secret_logged.add(request.uri)
                self.tracer.message(f"[speclsp] {self.names(request.uri)} looks like a secret file (.env, keys, "
                                    "credentials): no completions in it, and its text is never context for other "
                                    "files", types.MessageType.Info)
            span.log(f"no {what}: secret-looking file")
            return True
        document = request.document
        if refusal == OUT_OF_SYNC:  # before any cache: its text may be stale too
            if self._sync_explained.get(document.uri) != document.sync_problem:
                self._sync_explained[document.uri] = document.sync_problem
                self.tracer.message(f"[speclsp] no completions for {self.names(document.uri)}: it is out of sync "
                                    f"with the editor, {document.sync_problem}; reopen it or send its full text",
                                    types.MessageType.Warning)
            span.log("document out of sync; reopen it")
            return True
        return False

    def ready(self, span: RequestSpan) -> bool:
        """Whether the models are ready; logs the state when not."""
        if self.worker.state == READY:
            return True
        span.log(f"models {self.worker.state}")
        return False

    # The model thread
    async def run(self, request: CompletionRequest, span: RequestSpan,
                  operation: Callable[..., Any], *args: Any, job: Job | None = None) -> Ran | None:
        """Run the session ``operation(request, *args)`` on the model thread, cancelling the request in
        flight for the same document and method; ``None`` when the engine failed (already logged and
        shown, see the module docstring). A ``None`` result (superseded while queued) says nothing of
        the engine. ``job``: the operation already running for this request (started at the key,
        :mod:`lsp_server.requests.ahead`): awaited instead of a new one.

        Raises:
            asyncio.CancelledError: the client cancelled the request (it is stopped and logged).
            Exceptions of the operation other than :class:`BackendError`.
        """
        key = (request.uri, request.method)
        self.cancel_document(*key)
        self._inflight[key] = request
        try:
            if job is None:
                job = self.worker.run(operation, request, *args)
            result = await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            request.cancelled.set()
            span.log("cancelled by client")
            raise
        except BackendError as error:
            self._backend_failed(error, span)
            return None
        finally:
            if self._inflight.get(key) is request:
                del self._inflight[key]
        if result is not None:  # the engine answered (None: it was never asked)
            self._backend_answered()
        return Ran(result, job.queue_ms)

    def track(self, request: CompletionRequest) -> None:
        """Put a request started outside :meth:`run` (:mod:`lsp_server.requests.ahead`) in flight: the next
        change or request of its document and method cancels it."""
        key = (request.uri, request.method)
        self.cancel_document(*key)
        self._inflight[key] = request

    def untrack(self, request: CompletionRequest) -> None:
        """Take ``request`` out of flight (without cancelling it)."""
        key = (request.uri, request.method)
        if self._inflight.get(key) is request:
            del self._inflight[key]

    def cancel_document(self, uri: str, method: str | None = None) -> None:
        """Stop the generations in flight for ``uri`` (one method, or all) at their next verify round, and
        drop its work ahead not started yet (:meth:`~lsp_server.requests.work_ahead.WorkAhead.drop_pending`)."""
        self.work_ahead.drop_pending(uri, method)
        for key in [k for k in self._inflight if k[0] == uri and (method is None or k[1] == method)]:
            self._inflight.pop(key).cancelled.set()

    def in_background(self, operation: Callable[..., Any], *args: Any, after_the_answer: bool = False,
                      **kwargs: Any) -> None:
        """Run the session ``operation`` on the model thread when the models are ready (else there is
        nothing of theirs to update), without waiting for it; optionally once the answer is written."""
        if after_the_answer:
            after_answer(functools.partial(self.in_background, operation, **kwargs), *args)
            return
        if self.worker.state == READY:
            try:
                self.worker.run(operation, *args, **kwargs)
            except RuntimeError:
                pass  # unloaded meanwhile

    def _backend_failed(self, error: BackendError, span: RequestSpan) -> None:
        retry = f"; retrying in {error.retry_in_s:.0f} s" if error.retry_in_s else ""
        span.log(f"backend error: {error.kind}{retry}")
        if error.kind in self._backend_failures:
            return
        self._backend_failures.add(error.kind)
        self.tracer.message(f"[speclsp] {error.message}", types.MessageType.Error)
        if self.notify_user is not None:
            self.notify_user(f"speclsp: {error.message}", types.MessageType.Error)

    def _backend_answered(self) -> None:
        if self._backend_failures:
            self._backend_failures.clear()
            self.tracer.message("[speclsp] the generation backend answers again", types.MessageType.Info)

    # The way out
    def answer(self, request: CompletionRequest, text: str, start: int, end: int | None = None,
               completion: Any = None) -> Answer:
        """``text`` replacing the document's ``start:end`` (code points; ``end`` default ``start``), in the
        client's position encoding: the one conversion on the way out (an offset past a line's end is
        clamped)."""
        codec, lines = codec_for(self.position_encoding), request.document.lines
        first = lines.position_at(start, codec)
        last = first if end is None or end == start else lines.position_at(end, codec)
        return Answer(text, types.Range(start=first, end=last), completion)

    # Document events
    def document_opened(self, document: Document) -> None:
        """Tokenise it ahead of its first request, when work ahead may (:meth:`WorkAhead.opened`)."""
        self.work_ahead.opened(document)

    def document_closed(self, uri: str) -> None:
        """Stop its generations and forget what is kept for it here, in the services and in the session."""
        self.cancel_document(uri)
        self._sync_explained.pop(uri, None)
        for forget in self.on_closed:
            forget(uri)
        self.in_background(ModelSession.document_closed, uri)

    def file_changed(self, uri: str) -> None:
        """A file under the index watcher changed on disk (called from any thread)."""
        self.in_background(ModelSession.file_changed, uri)
