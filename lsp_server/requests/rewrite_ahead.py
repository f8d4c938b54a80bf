"""Next-edit rewrite prompts computed when an edit burst ends, before the suggestion is asked for.

Most of a next-edit suggestion's time on a CPU is the prefill of its long prompt, and that prompt is
known as soon as the user stops editing: the region around the cursor, the file around it and the
recent edits. So when a document with recent edits has had no change for ``SETTLED_S`` (a pause; the
edit history's coalescing window is longer, and would leave most of the prefill to a request asked soon
after the edit), the rewrite prompt for the cursor the last change left is computed on the model thread
(:meth:`lsp_server.model.session.ModelSession.prefill_rewrite`), in a rewrite's prefill pieces, into the
document's next-edit cache. A ``speclsp/nextEdit`` request for that cursor then finds its prompt computed
but for the last token. A new change cancels the wait or the prefill (it is in the pipeline's in-flight
table under ``REWRITE_AHEAD``): the piece in flight is dropped between the model's layers
(:meth:`decoding.kv_cache.KVCacheState.prefill`), so the key's completion does not wait for it, and the
pieces before stay cached: the prompt puts the file around the region first, so the next pause
recomputes only from the region on. Any other queued work makes it give way at its next piece; when,
and after which guard, it starts is the scheduler's (:mod:`lsp_server.requests.work_ahead`).

It computes what the request would compute (the same prompt), so exactness is the request's; what it
can waste is one prompt's prefill for a suggestion never asked for. The ``nextEdit.prefill`` setting turns
it off.

With ``nextEdit.suggestAhead`` (opt-in), the rewrite itself runs there (its prefill included), stopping as
soon as other work queues or a change comes; a finished rewrite with edits, for a document still as it
was, goes to ``on_ready`` (:meth:`lsp_server.requests.next_edit_service.NextEditService.ready`: kept, and the
editor told ``speclsp/nextEditReady``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lsp_server.requests.pipeline import RequestPipeline
from lsp_server.request import resolve_request
from lsp_server.model.session import ModelSession
from lsp_server.workspace.documents import Document
from lsp_server.workspace.edit_history import EditHistories
from lsp_server.workspace.names import file_name
from lsp_server.workspace.positions import codec_for

log = logging.getLogger(__name__)

REWRITE_AHEAD = "nextEditAhead"  # the in-flight method name of a prefill started when an edit burst ends
SETTLED_S = 0.5  # no change for this long (seconds): a pause, not the gap between two keys
CODE_POINTS = codec_for("utf-32")


class RewritesAhead:
    """See the module docstring. Event loop only.

    Args:
        on_ready: ``on_ready(request, rewrite)``: a rewrite written ahead (``nextEdit.suggestAhead``), finished,
            with edits, for a document unchanged since.
    """

    def __init__(self, pipeline: RequestPipeline, history: EditHistories, on_ready: Callable | None = None,
                 settled_s: float = SETTLED_S):
        self.pipeline = pipeline
        self.history = history
        self.on_ready = on_ready
        self.settled_s = settled_s

    def changed(self, document: Document, cursor: int | None) -> None:
        """A document changed, leaving the cursor at ``cursor`` (code points into ``document.text``;
        ``None``: unknown, nothing is computed); a running prefill stops."""
        self.forget(document.uri)
        settings = self.pipeline.settings_ref()
        if cursor is None or not (settings.next_edit_prefill or settings.next_edit_suggest_ahead):
            return
        self.pipeline.work_ahead.after(document.uri, REWRITE_AHEAD, self.settled_s, self._settled, document, cursor)

    def _settled(self, document: Document, cursor: int) -> None:
        """The burst ended: start the prefill (or the rewrite), when the scheduler's guard lets it, and not in a
        document whose completions come from a cut prompt (its whole prompt goes first: the scheduler's order)."""
        uri, pipeline, work_ahead = document.uri, self.pipeline, self.pipeline.work_ahead
        if not work_ahead.may_start(document, gives_way=True) or not self.history.has_edits(uri) or uri in work_ahead.cold:
            return
        settings = pipeline.settings_ref()
        request = resolve_request(document, document.lines.position_at(cursor, CODE_POINTS), CODE_POINTS, settings,
                                  method=REWRITE_AHEAD)
        diffs = self.history.diffs(uri, file_name(uri))
        operation = ModelSession.rewrite if settings.next_edit_suggest_ahead else ModelSession.prefill_rewrite
        started = work_ahead.start(request, operation, diffs, gives_way=True)
        if started is not None and operation is ModelSession.rewrite:
            request, job = started
            loop = asyncio.get_running_loop()
            job.add_done_callback(lambda done: loop.call_soon_threadsafe(self._written, request, done))

    def _written(self, request, job) -> None:
        """A rewrite written ahead has ended: hand it on when it is finished, has edits and still applies."""
        self.pipeline.untrack(request)
        if job.cancelled() or job.exception() is not None:
            if not job.cancelled():
                log.warning("a next edit written ahead failed: %s", job.exception())
            return
        rewrite = job.result()
        current = self.pipeline.store.get(request.uri)
        if (rewrite is None or not rewrite.finished or not rewrite.edits
                or current is None or current.version != request.document.version
                or current.text != request.document.text or self.on_ready is None):
            return
        self.on_ready(request, rewrite)

    def forget(self, uri: str) -> None:
        """Cancel the wait and the prefill of ``uri`` (a newer change, or the document closed)."""
        self.pipeline.cancel_document(uri, REWRITE_AHEAD)
