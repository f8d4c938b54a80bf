"""Completion requests: ``textDocument/inlineCompletion`` and ``textDocument/completion`` both come
through :meth:`CompletionService.complete`, after the pipeline's resolution and guards
(:mod:`lsp_server.requests.pipeline`), then:

* an automatic request with the cursor in leading whitespace and code right of it gets nothing without
  a model call (the user is indenting, docs/cases.md L7);
* an inline request on a document whose last next-edit suggestion changes only its cursor's line at or
  after the cursor gets that suggestion as the item (a range from the cursor), without a model call;
* typing the start of the completion just answered gets the rest of it at once (type-through cache);
* a completion started at the key for this very cursor (:mod:`lsp_server.requests.ahead`) answers it;
* otherwise the model session completes (:meth:`lsp_server.model.session.ModelSession.complete`) and the
  answer is remembered for the type-through cache. Every request ends in one trace line with its id,
  per-stage milliseconds and acceptance counts.
"""

from __future__ import annotations

from collections.abc import Callable

from lsprotocol import types

from decoding.types import FinishReason
from lsp_server.requests.ahead import CODE_POINTS, AheadCompletions
from lsp_server.completion.mode import suppresses_automatic
from lsp_server.requests.next_edit_service import NextEditService
from lsp_server.requests.pipeline import Answer, RequestPipeline
from lsp_server.workspace.repo_index import RepoIndex
from lsp_server.model.session import ModelSession
from lsp_server.request import CompletionRequest, resolve_request
from lsp_server.requests.type_through import TypeThroughCache
from lsp_server.workspace.documents import Document

INLINE = "inlineCompletion"  # the method name of inline completion requests in logs and in-flight keys


class CompletionService:
    """Turns completion requests into model work and answers.

    Args:
        next_edits: whose last suggestions an inline request may answer with (``None``: none).
        repo_ref: returns the repository index, or ``None``.
    """

    def __init__(self, pipeline: RequestPipeline, next_edits: NextEditService | None = None,
                 repo_ref: Callable[[], RepoIndex | None] | None = None):
        self.pipeline = pipeline
        self.next_edits = next_edits
        self.repo_ref = repo_ref or (lambda: None)
        self.type_through = TypeThroughCache()
        self.ahead = AheadCompletions(pipeline, self._answered_without_model)
        pipeline.on_closed.append(self.forget)

    def _answered_without_model(self, request: CompletionRequest) -> bool:
        if self.next_edits is not None and self.next_edits.inline_replacement(request) is not None:
            return True
        return self.type_through.lookup(request.uri, request.document.text, request.offset) is not None

    def _others(self, uri: str) -> list[Document]:
        """The open documents but ``uri``, the context a completion in ``uri`` may draw on."""
        return [d for d in self.pipeline.store.all() if d.uri != uri]

    def changed(self, document: Document, cursor: int | None) -> None:
        """A document changed, leaving the cursor at ``cursor`` (``None``: unknown): start its completion
        ahead of the editor's request (:mod:`lsp_server.requests.ahead`; it cancels what was started before)."""
        if cursor is None:
            self.ahead.forget(document.uri)
            return
        others = self._others(document.uri)
        self.ahead.start(document, cursor, others, self.repo_ref())
        work_ahead = self.pipeline.work_ahead
        if document.uri in work_ahead.cold and work_ahead.may_start(document, gives_way=False):
            request = resolve_request(document, document.lines.position_at(cursor, CODE_POINTS), CODE_POINTS,
                                      self.pipeline.settings_ref(), automatic=True)
            work_ahead.changed(request, others, self.repo_ref())

    async def complete(self, method: str, uri: str, position: types.Position, automatic: bool = False) -> Answer | None:
        """Complete at ``position``; ``None`` when there is nothing to offer.

        Args:
            method: ``inlineCompletion`` or ``completion`` (logs; a newer request of the same method cancels).
            automatic: the editor asked on its own (typing), not on the user's explicit request.
        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
        """
        pipeline = self.pipeline
        request, span = pipeline.begin(method, uri, position, automatic)
        if method == INLINE and automatic:
            self.ahead.asked(uri)
        if pipeline.refused(request, span, "completions"):
            return None
        if automatic and suppresses_automatic(request.line_prefix, request.line_suffix):
            span.log("no suggestion: cursor in indentation")
            return None
        if method == INLINE and self.next_edits is not None:
            replacement = self.next_edits.inline_replacement(request)
            if replacement is not None:
                span.done("next-edit suggestion")
                start, end, new_text = replacement
                return pipeline.answer(request, new_text, start, end)
        rest = self.type_through.lookup(uri, request.document.text, request.offset)
        if rest is not None:
            span.done("type-through cache hit")
            return pipeline.answer(request, rest, request.offset)
        if not pipeline.ready(span):
            return None
        started = self.ahead.take(request)
        if started is not None:
            request, job = started
            ran = await pipeline.run(request, span, ModelSession.complete, job=job)
        else:
            ran = await pipeline.run(request, span, ModelSession.complete, self._others(uri), self.repo_ref())
        if ran is None:
            return None
        completion = ran.result
        if completion is None:
            span.log("superseded", queue_ms=ran.queue_ms)
            return None
        status = "superseded" if completion.generation.finish_reason == FinishReason.CANCELLED else "ok"
        span.done(status, completion, ran.queue_ms)
        answered = status == "ok" and completion.insert_text.strip()
        # The warm-up, and (an answer with text) the next line if the user pauses here: the scheduler's
        pipeline.work_ahead.answered(request if answered else None, self._others(uri), self.repo_ref(),
                                     cut=request if completion.cut_from and status == "ok" else None)
        if not answered:
            return None
        self.type_through.remember(uri, request.document.text, request.offset, completion.insert_text)
        return pipeline.answer(request, completion.insert_text, completion.prompt.cursor_offset,
                               completion=completion)

    def forget(self, uri: str) -> None:
        """A document closed: forget its type-through answer and what was started for it."""
        self.type_through.forget(uri)
        self.pipeline.work_ahead.forget(uri)
        self.ahead.forget(uri)
