"""Next-edit requests (``speclsp/nextEdit``, the code action): :meth:`NextEditService.next_edit`.

After the pipeline's resolution and guards (:mod:`lsp_server.requests.pipeline`), the model session rewrites the
region around the cursor with the document's recent edits carried through it
(:meth:`lsp_server.model.session.ModelSession.rewrite`; the edits are recorded here, :attr:`NextEditService.history`,
as ``didChange`` applies them; when an edit burst ends, the prompt is computed ahead, or with
``nextEdit.suggestAhead`` the suggestion written, :mod:`lsp_server.requests.rewrite_ahead`; a request in the region of
one written ahead, for the document as it was written for, is answered with it). A finished suggestion with edits is kept per document: while the
document stays as it was, an inline completion request on the cursor's line can answer with it
(:meth:`NextEditService.inline_replacement`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from decoding.types import FinishReason
from lsp_server.model.completer import Rewrite
from lsp_server.workspace.documents import Document
from lsp_server.workspace.edit_history import EditHistories
from lsp_server.requests.pipeline import RequestPipeline
from lsp_server.request import CompletionRequest
from lsp_server.requests.rewrite_ahead import RewritesAhead
from lsp_server.next_edit.prompt import NextEditUnsupported
from lsp_server.model.session import ModelSession
from lsp_server.next_edit.text_edits import inline_replacement
from lsp_server.workspace.names import file_name
from lsp_server.workspace.positions import codec_for

log = logging.getLogger(__name__)

NEXT_EDIT = "nextEdit"  # the method name of next-edit requests in logs and in-flight keys
READY_METHOD = "speclsp/nextEditReady"  # server to client: a suggestion written ahead is ready


@dataclass(frozen=True)
class NextEdit:
    """A finished next-edit rewrite and the document snapshot its edits apply to."""

    document: Document
    rewrite: Rewrite
    handler_ms: float  # from the handler's start to the answer (ms)


class NextEditService:
    """Turns next-edit requests into rewrites on the model thread."""

    def __init__(self, pipeline: RequestPipeline, notify: Callable[[str, Any], None] | None = None):
        self.pipeline = pipeline
        self.notify = notify  # notify(method, params): to the client
        self.history = EditHistories()  # recent edits per document
        self._last: dict[str, NextEdit] = {}  # uri -> its last finished suggestion with edits
        self._ready: dict[str, NextEdit] = {}  # uri -> a suggestion written ahead, not asked for yet
        self.ahead = RewritesAhead(pipeline, self.history, self.ready)  # work when an edit burst ends
        pipeline.on_closed.append(self.forget)

    def changed(self, document: Document, cursor: int | None) -> None:
        """A document changed (its edits recorded in :attr:`history`), leaving the cursor at ``cursor``
        (code points; ``None``: unknown): compute its rewrite prompt once the edit burst ends."""
        self._ready.pop(document.uri, None)
        self.ahead.changed(document, cursor)

    def ready(self, request: CompletionRequest, rewrite: Rewrite) -> None:
        """A suggestion written ahead (``nextEdit.suggestAhead``) for the document as it is: keep it for the
        request that follows in its region, and tell the client (``speclsp/nextEditReady``, params
        ``{"textDocument": {"uri", "version"}, "position"}``: where to ask)."""
        self._ready[request.uri] = NextEdit(request.document, rewrite, 0.0)
        if self.notify is None:
            return
        position = request.document.lines.position_at(request.offset, codec_for(self.pipeline.position_encoding))
        try:
            self.notify(READY_METHOD, {"textDocument": {"uri": request.uri, "version": request.document.version},
                                       "position": {"line": position.line, "character": position.character}})
        except Exception:  # noqa: BLE001 - a closed transport must not fail the event loop
            log.debug("could not send %s", READY_METHOD, exc_info=True)

    async def next_edit(self, uri: str, position: types.Position) -> NextEdit | None:
        """A next-edit suggestion at ``position``; ``None`` when there is nothing to suggest (models not
        ready, a secret-looking or out-of-sync document, a blank region, an unfinished or superseded
        rewrite). Its edits are ``[]`` when the region stays as it is.

        Raises:
            JsonRpcInvalidParams: the document is not open or the position is not in it.
            JsonRpcException: RequestFailed when the model cannot write rewrites.
        """
        pipeline = self.pipeline
        request, span = pipeline.begin(NEXT_EDIT, uri, position)
        if pipeline.refused(request, span, "suggestion") or not pipeline.ready(span):
            return None
        written = self._ready.pop(uri, None)
        if written is not None and written.document.text == request.document.text and \
                written.rewrite.prompt.region_start <= request.offset <= written.rewrite.prompt.region_end:
            span.done("ok: written ahead", written.rewrite, 0.0)
            answer = NextEdit(request.document, written.rewrite, span.elapsed_ms)
            self._last[uri] = answer
            return answer
        diffs = self.history.diffs(uri, file_name(uri))  # a snapshot, taken on the event loop (the model sees the name)
        try:
            ran = await pipeline.run(request, span, ModelSession.rewrite, diffs)
        except NextEditUnsupported as exc:
            span.log("next edits unsupported by the model")
            raise JsonRpcException(str(exc), code=types.LSPErrorCodes.RequestFailed) from exc
        if ran is None:
            return None
        result = ran.result
        if result is None:
            span.log("superseded" if request.cancelled.is_set() else "no suggestion: blank region", ran.queue_ms)
            return None
        status = ("superseded" if result.generation.finish_reason == FinishReason.CANCELLED
                  else "ok" if result.finished else "no suggestion: rewrite unfinished (nextEdit.maxNewTokens)")
        if status == "ok" and not result.edits:
            status = "ok: no change"
        handler_ms = span.elapsed_ms
        span.done(status, result, ran.queue_ms)
        if not result.finished:
            return None
        answer = NextEdit(request.document, result, handler_ms)
        if result.edits:
            self._last[uri] = answer
        return answer

    def inline_replacement(self, request: CompletionRequest) -> tuple[int, int, str] | None:
        """The document's last suggestion as (start, end, new text) in code points from the cursor,
        when the document is unchanged since and the whole change lies on the cursor's line at or after
        the cursor (:func:`lsp_server.next_edit.text_edits.inline_replacement`); else ``None``."""
        known = self._last.get(request.uri)
        if known is None or known.document.text != request.document.text:
            return None
        return inline_replacement(request.document.text, known.rewrite.edits, request.offset)

    def forget(self, uri: str) -> None:
        """A document closed: forget its edits and its last suggestion."""
        self.history.forget(uri)
        self.ahead.forget(uri)
        self._last.pop(uri, None)
        self._ready.pop(uri, None)
