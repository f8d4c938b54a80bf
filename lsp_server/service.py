"""Completion requests as the server handles them: ids, staleness, cancellation, logging.

Both ``textDocument/inlineCompletion`` and ``textDocument/completion`` come through
:meth:`CompletionService.complete`:

* before the models are ready, the answer is ``None`` (empty), not an error;
* an unknown document or a position outside it is a JSON-RPC ``InvalidParams`` error with a clear
  message (shared case L2);
* a newer request for the same document cancels the one in flight, which stops within one verify
  round and is answered with ``None``; so does ``$/cancelRequest``;
* an automatic request with the cursor in leading whitespace and code right of it gets ``None``
  without a model call (the user is indenting, shared case L7);
* typing the start of the completion just answered gets the rest of it at once (type-through cache);
* every request is logged with its id, per-stage milliseconds and acceptance counts.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time
from dataclasses import dataclass

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from lsp_server.completer import MAX_SOURCE_CHARS, Completion, complete
from lsp_server.documents import DocumentStore
from lsp_server.positions import PositionError, codec_for
from lsp_server.postprocess import decide_mode
from lsp_server.prompt_tokens import PromptEncoder, document_key
from lsp_server.syntax import parser_for
from lsp_server.type_through import TypeThroughCache
from lsp_server.tracing import Tracer
from lsp_server.worker import READY, ModelWorker


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
    """Turns requests into model work and answers."""

    def __init__(self, store: DocumentStore, worker: ModelWorker, tracer: Tracer, settings_ref, status=None,
                 repo_ref=lambda: None, rpc=lambda: (None, None)):
        self.store = store
        self.worker = worker
        self.tracer = tracer
        self.settings_ref = settings_ref  # callable returning the current Settings
        self.status = status  # StatusBoard or None
        self.repo_ref = repo_ref  # callable returning the RepoIndex or None
        self.rpc = rpc  # callable returning (the current JSON-RPC message id, the protocol's RpcClock or None)
        self.position_encoding: str | None = None  # set after initialize
        self._ids = itertools.count(1)
        self._inflight: dict[tuple[str, str], threading.Event] = {}  # (uri, method) -> cancel flag
        self.type_through = TypeThroughCache()
        self._encoder: PromptEncoder | None = None  # prompt tokens between requests (model thread only)

    def _encoder_for(self, engine) -> PromptEncoder | None:
        """The prompt encoder for the engine's tokenizer (model thread only)."""
        tokenizer = getattr(engine, "tokenizer", None)
        if tokenizer is not None and (self._encoder is None or self._encoder.tokenizer is not tokenizer):
            self._encoder = PromptEncoder(tokenizer)  # first use, or the model was replaced
        return self._encoder

    def document_opened(self, uri: str) -> None:
        """Tokenise a newly opened document on the model thread, ahead of its first request, whose
        prompt windows then start from these tokens instead of tokenising up to 10 KB on its path;
        load its language's tree-sitter grammar too."""
        if self.worker.state != READY:
            return

        def seed(engine) -> None:
            document = self.store.get(uri)
            encoder = self._encoder_for(engine)
            if document is not None and encoder is not None and len(document.text) <= MAX_SOURCE_CHARS:
                encoder.seed(document_key(uri), document.model_text)
            if document is not None:
                parser_for(document.language_id)  # loads the grammar on first use of a language

        self.worker.submit(seed)

    def document_closed(self, uri: str) -> None:
        """Forget a closed document's prompt tokens (on the model thread)."""
        if self.worker.state == READY:
            self.worker.submit(lambda engine: self._encoder.forget(uri) if self._encoder is not None else None)

    def cancel_document(self, uri: str, method: str | None = None) -> None:
        """Stop the generations in flight for ``uri`` (one method, or all) at their next verify round."""
        for key in [k for k in self._inflight if k[0] == uri and (method is None or k[1] == method)]:
            self._inflight.pop(key).set()

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

    async def complete(self, method: str, uri: str, position: types.Position, automatic: bool = False) -> Answer | None:
        """Complete at ``position``; ``None`` when there is nothing to offer.

        Args:
            automatic: the editor asked on its own (typing), not on the user's explicit request.

        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
        """
        request_id = next(self._ids)
        started = time.perf_counter()
        msg_id, clock = self.rpc()
        document = self.store.get(uri)
        if document is None:
            raise JsonRpcInvalidParams(f"document {uri} is not open; send textDocument/didOpen first")
        codec = codec_for(self.position_encoding)
        try:
            offset = document.lines.offset_at(position, codec)
            line_start = document.lines.offset_at(types.Position(line=position.line, character=0), codec)
            line_end = document.lines.offset_at(types.Position(line=position.line, character=2**31 - 1), codec)
        except PositionError as exc:
            raise JsonRpcInvalidParams(f"invalid position for {uri}: {exc}") from exc
        line_prefix, line_suffix = document.text[line_start:offset], document.text[offset:line_end]
        if automatic and decide_mode(line_prefix, line_suffix, document.language_id, automatic=True).suppress:
            self.tracer.request(request_id, method, uri, position, status="no suggestion: cursor in indentation")
            return None
        if not document.in_sync:  # before the type-through cache: its text may be stale too
            self.tracer.request(request_id, method, uri, position, status="document out of sync; reopen it")
            return None
        rest = self.type_through.lookup(uri, document.text, offset)
        if rest is not None:
            _after_answer(self._trace, started, time.perf_counter(), msg_id, clock, request_id, method, uri, position,
                          status="type-through cache hit")
            cursor = document.lines.position_at(offset, codec)  # a position past the line end is clamped
            return Answer(rest, types.Range(start=cursor, end=cursor), None)
        if self.worker.state != READY:
            self.tracer.request(request_id, method, uri, position, status=f"models {self.worker.state}")
            return None

        key = (uri, method)
        self.cancel_document(uri, method)
        cancelled = threading.Event()
        self._inflight[key] = cancelled
        others = [d for d in self.store.all() if d.uri != uri]
        queued = time.perf_counter()

        def run(engine):
            wait_ms = 1000 * (time.perf_counter() - queued)
            if cancelled.is_set():  # superseded while queued: no context, no prefill
                return wait_ms, None
            result = complete(engine, document, position, codec, self.settings_ref(), others, cancelled.is_set,
                              repo=self.repo_ref(), encoder=self._encoder_for(engine))
            return wait_ms, result

        try:
            wait_ms, completion = await asyncio.wrap_future(self.worker.submit(run))
        except asyncio.CancelledError:
            cancelled.set()
            self.tracer.request(request_id, method, uri, position, status="cancelled by client")
            raise
        finally:
            if self._inflight.get(key) is cancelled:
                del self._inflight[key]

        if completion is None:
            self.tracer.request(request_id, method, uri, position, status="superseded", queue_ms=wait_ms)
            return None
        generation = completion.generation
        status = "superseded" if generation.finish_reason == "cancelled" else "ok"
        _after_answer(self._trace, started, time.perf_counter(), msg_id, clock, request_id, method, uri, position,
                      status=status, queue_ms=wait_ms, completion=completion)
        if completion.warm_up and self.worker.state == READY:
            # On the model thread once the answer is written: tokenising a large part holds the GIL,
            # which would otherwise delay writing the answer.
            _after_answer(self.worker.submit, lambda engine: [work() for work in completion.warm_up])
        if status != "ok" or not completion.insert_text.strip():
            return None
        self.type_through.remember(uri, document.text, offset, completion.insert_text)
        cursor = document.lines.position_at(completion.context.cursor_offset, codec)
        return Answer(completion.insert_text, types.Range(start=cursor, end=cursor), completion)
