"""Completion requests as the server handles them: ids, staleness, cancellation, logging.

Both ``textDocument/inlineCompletion`` and ``textDocument/completion`` come through
:meth:`CompletionService.complete`:

* before the models are ready, the answer is ``None`` (empty), not an error;
* an unknown document or a position outside it is a JSON-RPC ``InvalidParams`` error with a clear
  message (docs/cases.md L2);
* a newer request for the same document cancels the one in flight, which stops within one verify
  round and is answered with ``None``; so does ``$/cancelRequest``;
* a document whose file looks secret (``.env``, keys...; :func:`lsp_server.file_rules.uri_looks_secret`)
  gets ``None`` without a model call, and one log line per document says why (never its text);
* an automatic request with the cursor in leading whitespace and code right of it gets ``None``
  without a model call (the user is indenting, docs/cases.md L7);
* typing the start of the completion just answered gets the rest of it at once (type-through cache);
* an inline completion request on a document whose last next-edit suggestion changes only its cursor's
  line at or after the cursor gets that suggestion as the item (a range from the cursor), without a
  model call;
* every request is logged with its id, per-stage milliseconds and acceptance counts;
* a remote engine's failure (:class:`lsp_server.backends.base.BackendError`: down, slow, an HTTP error,
  a malformed stream) answers that request with ``None`` and is shown to the user once per kind of
  failure (``window/showMessage``), not per keystroke; the backend backs off, and its recovery is
  logged once.

Next-edit suggestions (:meth:`CompletionService.next_edit`) go the same way (resolution, cancellation,
superseding, tracing), with the document's recent edits (:attr:`CompletionService.history`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from decoding.generate import FinishReason
from lsp_server.backends.base import BackendError
from lsp_server.completer import Completion, Rewrite, complete, rewrite
from lsp_server.completion_mode import suppresses_automatic
from lsp_server.documents import Document, DocumentStore
from lsp_server.draft_sources import DraftSources
from lsp_server.edit_history import EditHistories
from lsp_server.file_rules import uri_looks_secret
from lsp_server.positions import PositionError, codec_for
from lsp_server.repo_index import RepoIndex
from lsp_server.request import CompletionRequest, resolve_request
from lsp_server.rewrite_prompt import NextEditUnsupported
from lsp_server.settings import Settings
from lsp_server.syntax import parser_for
from lsp_server.text_edits import inline_replacement
from lsp_server.tracing import RpcClock, Tracer
from lsp_server.type_through import TypeThroughCache
from lsp_server.worker import READY, ModelWorker

NEXT_EDIT = "nextEdit"  # the method name of next-edit requests in logs and in-flight keys
T = TypeVar("T")


def _after_answer(fn, *args, **kwargs) -> None:
    """Run ``fn`` on the event loop just after the handler's answer is sent: the answer's JSON-RPC
    response is written by a done-callback of the handler's task, which the loop schedules when the
    task finishes; a callback that schedules ``fn`` again from the loop's queue lands behind it.
    The log and status notifications then do not delay the answer."""
    loop = asyncio.get_running_loop()
    loop.call_soon(loop.call_soon, functools.partial(fn, *args, **kwargs))


@dataclass(frozen=True)
class Answer:
    """A completion and where it goes, in the client's position encoding."""

    insert_text: str
    range: types.Range
    completion: Completion | None  # None for an answer from the type-through cache


class CompletionService:
    """Turns requests into model work and answers.

    Args:
        settings_ref: returns the current settings (read once per request, on the event loop).
        repo_ref: returns the repository index, or ``None``.
        rpc: returns (the current JSON-RPC message id, the protocol's clock or ``None``), for tracing.
        notify_user: shows a message to the user (``window/showMessage``); ``None``: the log only.
    """

    def __init__(self, store: DocumentStore, worker: ModelWorker, tracer: Tracer,
                 settings_ref: Callable[[], Settings], status=None,
                 repo_ref: Callable[[], RepoIndex | None] = lambda: None,
                 rpc: Callable[[], tuple[object, RpcClock | None]] = lambda: (None, None),
                 notify_user: Callable[[str, types.MessageType], None] | None = None):
        self.store = store
        self.worker = worker
        self.tracer = tracer
        self.settings_ref = settings_ref
        self.status = status  # StatusBoard or None
        self.repo_ref = repo_ref
        self.rpc = rpc
        self.position_encoding: str | None = None  # set after initialize
        self._ids = itertools.count(1)
        self._inflight: dict[tuple[str, str], CompletionRequest] = {}  # (uri, method) -> the request running
        self.type_through = TypeThroughCache()
        self._sync_explained: dict[str, str] = {}  # uri -> the out-of-sync problem last explained in the log
        self.sources = DraftSources(defer_cold_parts=True)  # model thread only
        self._secret_logged: set[str] = set()  # secret-looking documents already reported
        self.history = EditHistories()  # recent edits per document, for next-edit suggestions
        self._next_edits: dict[str, NextEdit] = {}  # uri -> its last finished suggestion with edits
        self.notify_user = notify_user
        self._backend_failures: set[str] = set()  # kinds of remote failure shown since the last success

    def _backend_failed(self, error: BackendError, log) -> None:
        """Answer-side of a remote failure: the request's log line, and the user told once per kind."""
        retry = f"; retrying in {error.retry_in_s:.0f} s" if error.retry_in_s else ""
        log(status=f"backend error: {error.kind}{retry}")
        if error.kind in self._backend_failures:
            return
        self._backend_failures.add(error.kind)
        self.tracer.message(f"[speclsp] {error.message}", types.MessageType.Error)
        if self.notify_user is not None:
            self.notify_user(f"speclsp: {error.message}", types.MessageType.Error)

    def _backend_answered(self) -> None:
        """A request was served: after failures, say once that the engine answers again."""
        if self._backend_failures:
            self._backend_failures.clear()
            self.tracer.message("[speclsp] the generation backend answers again", types.MessageType.Info)

    def _on_model_thread(self, fn: Callable[..., object], *args) -> None:
        """Run ``fn(backend, *args)`` on the model thread when the models are ready (else there is
        nothing of theirs to update)."""
        if self.worker.state == READY:
            try:
                self.worker.submit(fn, *args)
            except RuntimeError:
                pass  # unloaded meanwhile

    def document_opened(self, uri: str) -> None:
        """Tokenise a newly opened document on the model thread, ahead of its first request, and load
        its language's tree-sitter grammar."""
        document = self.store.get(uri)
        if document is not None and not uri_looks_secret(uri):  # a secret one is never completed in
            self._on_model_thread(self._opened, document)

    def _opened(self, backend, document) -> None:
        self.sources.document_opened(backend, document)
        parser_for(document.language_id)  # loads the grammar on first use of a language

    def document_closed(self, uri: str) -> None:
        """Stop its generations and forget everything kept for a closed document."""
        self.cancel_document(uri)
        self.type_through.forget(uri)
        self._sync_explained.pop(uri, None)
        self.history.forget(uri)
        self._next_edits.pop(uri, None)
        self._on_model_thread(self.sources.document_closed, uri)

    def file_changed(self, uri: str) -> None:
        """A file under the index watcher changed on disk (called from any thread)."""
        self._on_model_thread(self.sources.file_changed, uri)

    def _report_secret(self, uri: str) -> None:
        """Say once per document (info level, its name only) why it gets no completions."""
        if uri not in self._secret_logged:
            self._secret_logged.add(uri)
            self.tracer.message(f"[speclsp] {uri} looks like a secret file (.env, keys, credentials): no "
                                "completions in it, and its text is never context for other files",
                                types.MessageType.Info)

    def cancel_document(self, uri: str, method: str | None = None) -> None:
        """Stop the generations in flight for ``uri`` (one method, or all) at their next verify round."""
        for key in [k for k in self._inflight if k[0] == uri and (method is None or k[1] == method)]:
            self._inflight.pop(key).cancelled.set()

    def _trace(self, started: float, ended: float, msg_id, clock, *args, completion: Completion | None = None,
               **kwargs) -> None:
        """Log a request once its answer is written: ``total`` from reading the request to writing the
        answer when the protocol's clock knows both, else the handler's own time (``started`` to
        ``ended``, ``time.perf_counter()`` seconds)."""
        handler_ms = 1000 * (ended - started)
        total_ms, rpc_ms = handler_ms, (0.0, 0.0)
        if clock is not None and msg_id is not None:
            received, responded = clock.times(msg_id)
            clock.forget(msg_id)
            if received is not None and responded is not None and received <= started <= ended <= responded:
                rpc_ms = (1000 * (started - received), 1000 * (responded - ended))
                total_ms = 1000 * (responded - received)
        self.tracer.request(*args, completion=completion, total_ms=total_ms, rpc_ms=rpc_ms, **kwargs)
        if self.status is not None and completion is not None and kwargs.get("status") == "ok":
            self.status.request_done(total_ms, completion)

    def _explain_out_of_sync(self, document: Document) -> None:
        """Say in the log why a document gets no completions, once per out-of-sync state."""
        if self._sync_explained.get(document.uri) == document.sync_problem:
            return
        self._sync_explained[document.uri] = document.sync_problem
        self.tracer.message(f"[speclsp] no completions for {document.uri}: it is out of sync with the editor, "
                            f"{document.sync_problem}; reopen it or send its full text", types.MessageType.Warning)

    def _resolve(self, method: str, uri: str, position: types.Position, automatic: bool) -> CompletionRequest:
        """The request, resolved once: document snapshot, offset, line text, settings snapshot.

        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
        """
        document = self.store.get(uri)
        if document is None:
            raise JsonRpcInvalidParams(f"document {uri} is not open; send textDocument/didOpen first")
        try:
            return resolve_request(document, position, codec_for(self.position_encoding), self.settings_ref(),
                                   automatic=automatic, method=method, request_id=next(self._ids))
        except PositionError as exc:
            raise JsonRpcInvalidParams(f"invalid position for {uri}: {exc}") from exc

    def _answer(self, request: CompletionRequest, insert_text: str, offset: int,
                completion: Completion | None) -> Answer:
        """The answer at ``offset``, converted back to the client's position encoding (the one conversion
        on the way out; an offset past the line end is clamped)."""
        cursor = request.document.lines.position_at(offset, codec_for(self.position_encoding))
        return Answer(insert_text, types.Range(start=cursor, end=cursor), completion)

    async def complete(self, method: str, uri: str, position: types.Position, automatic: bool = False) -> Answer | None:
        """Complete at ``position``; ``None`` when there is nothing to offer.

        Args:
            automatic: the editor asked on its own (typing), not on the user's explicit request.

        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
        """
        started = time.perf_counter()
        msg_id, clock = self.rpc()
        request = self._resolve(method, uri, position, automatic)
        log = functools.partial(self.tracer.request, request.request_id, method, uri, position)
        if uri_looks_secret(uri):
            self._report_secret(uri)
            log(status="no completions: secret-looking file")
            return None
        if automatic and suppresses_automatic(request.line_prefix, request.line_suffix):
            log(status="no suggestion: cursor in indentation")
            return None
        if not request.document.in_sync:  # before the type-through cache: its text may be stale too
            self._explain_out_of_sync(request.document)
            log(status="document out of sync; reopen it")
            return None
        if method == "inlineCompletion" and (answer := self._next_edit_inline(request)) is not None:
            _after_answer(self._trace, started, time.perf_counter(), msg_id, clock, request.request_id, method, uri,
                          position, status="next-edit suggestion")
            return answer
        rest = self.type_through.lookup(uri, request.document.text, request.offset)
        if rest is not None:
            _after_answer(self._trace, started, time.perf_counter(), msg_id, clock, request.request_id, method, uri,
                          position, status="type-through cache hit")
            return self._answer(request, rest, request.offset, None)
        if self.worker.state != READY:
            log(status=f"models {self.worker.state}")
            return None
        others = [d for d in self.store.all() if d.uri != request.uri]
        repo = self.repo_ref()
        try:
            wait_ms, completion = await self._generate(
                request, log, lambda backend: complete(backend, request, others, repo, self.sources))
        except BackendError as exc:
            self._backend_failed(exc, log)
            return None
        if completion is None:
            log(status="superseded", queue_ms=wait_ms)
            return None
        status = "superseded" if completion.generation.finish_reason == FinishReason.CANCELLED else "ok"
        self._backend_answered()
        _after_answer(self._trace, started, time.perf_counter(), msg_id, clock, request.request_id, method, uri,
                      position, status=status, queue_ms=wait_ms, completion=completion)
        # On the model thread once the answer is written: tokenising a large part holds the GIL.
        _after_answer(self._on_model_thread, self.sources.warm_up)
        if status != "ok" or not completion.insert_text.strip():
            return None
        self.type_through.remember(uri, request.document.text, request.offset, completion.insert_text)
        return self._answer(request, completion.insert_text, completion.prompt.cursor_offset, completion)

    def _next_edit_inline(self, request: CompletionRequest) -> Answer | None:
        """The document's last next-edit suggestion as an inline answer, when the document is unchanged
        since and the whole change lies on the cursor's line at or after the cursor."""
        known = self._next_edits.get(request.uri)
        if known is None or known.document.text != request.document.text:
            return None
        replacement = inline_replacement(request.document.text, known.rewrite.edits, request.offset)
        if replacement is None:
            return None
        start, end, new_text = replacement
        codec, lines = codec_for(self.position_encoding), request.document.lines
        return Answer(new_text, types.Range(start=lines.position_at(start, codec), end=lines.position_at(end, codec)),
                      None)

    async def _generate(self, request: CompletionRequest, log, work: Callable[[object], T]) -> tuple[float, T | None]:
        """Run ``work(backend)`` on the model thread: (ms queued, its result or ``None`` when the request
        was superseded before it started). A newer request for the same document and method cancels this one."""
        key = (request.uri, request.method)
        self.cancel_document(*key)
        self._inflight[key] = request
        queued = time.perf_counter()

        def run(backend) -> tuple[float, T | None]:
            wait_ms = 1000 * (time.perf_counter() - queued)
            if request.cancelled.is_set():  # superseded while queued: no context, no prefill
                return wait_ms, None
            return wait_ms, work(backend)

        try:
            return await asyncio.wrap_future(self.worker.submit(run))
        except asyncio.CancelledError:
            request.cancelled.set()
            log(status="cancelled by client")
            raise
        finally:
            if self._inflight.get(key) is request:
                del self._inflight[key]

    async def next_edit(self, uri: str, position: types.Position) -> NextEdit | None:
        """A next-edit suggestion at ``position`` (:func:`lsp_server.completer.rewrite`); ``None`` when
        there is nothing to suggest (models not ready, a secret-looking or out-of-sync document, a blank
        region, an unfinished or superseded rewrite). Its edits are ``[]`` when the region stays as it is.

        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
            JsonRpcException: RequestFailed when the model cannot write rewrites.
        """
        started = time.perf_counter()
        msg_id, clock = self.rpc()
        method = NEXT_EDIT
        request = self._resolve(method, uri, position, automatic=False)
        log = functools.partial(self.tracer.request, request.request_id, method, uri, position)
        if uri_looks_secret(uri):
            self._report_secret(uri)
            log(status="no suggestion: secret-looking file")
            return None
        if not request.document.in_sync:
            self._explain_out_of_sync(request.document)
            log(status="document out of sync; reopen it")
            return None
        if self.worker.state != READY:
            log(status=f"models {self.worker.state}")
            return None
        diffs = self.history.diffs(uri, uri.rsplit("/", 1)[-1])  # a snapshot, taken on the event loop
        try:
            wait_ms, result = await self._generate(request, log, lambda backend: rewrite(backend, request, diffs))
        except BackendError as exc:
            self._backend_failed(exc, log)
            return None
        except NextEditUnsupported as exc:
            log(status="next edits unsupported by the model")
            raise JsonRpcException(str(exc), code=types.LSPErrorCodes.RequestFailed) from exc
        if result is None:
            log(status="superseded" if request.cancelled.is_set() else "no suggestion: blank region", queue_ms=wait_ms)
            return None
        status = ("superseded" if result.generation.finish_reason == FinishReason.CANCELLED
                  else "ok" if result.finished else "no suggestion: rewrite unfinished (nextEditMaxNewTokens)")
        if status == "ok" and not result.edits:
            status = "ok: no change"
        handler_ms = 1000 * (time.perf_counter() - started)
        _after_answer(self._trace, started, time.perf_counter(), msg_id, clock, request.request_id, method, uri,
                      position, status=status, queue_ms=wait_ms, completion=result)
        if not result.finished:
            return None
        answer = NextEdit(request.document, result, handler_ms)
        if result.edits:
            self._next_edits[uri] = answer
        return answer


@dataclass(frozen=True)
class NextEdit:
    """A finished next-edit rewrite and the document snapshot its edits apply to."""

    document: Document
    rewrite: Rewrite
    handler_ms: float  # from the handler's start to the answer (ms)
