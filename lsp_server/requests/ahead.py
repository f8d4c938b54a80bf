"""Completions started at the key, before the editor asks for them.

An editor asks for an inline completion a debounce after the last key (each editor has its own delay),
but the server has the text at the key itself, and after a change that inserts or deletes at one place
the cursor is almost always at the change's end. So, in a document whose editor has asked for automatic
inline completions within ``ASKED_WITHIN_S``, the completion for that cursor starts on the model thread
at the change (:meth:`AheadCompletions.start`). The automatic request that follows for the same document
version, cursor and settings takes it (:meth:`AheadCompletions.take`): it waits for the running generation, or
finds it answered, instead of starting again. A request for anything else cancels it, and so does the
next change (it is in the pipeline's in-flight table under ``AHEAD``). Its place among the other work
ahead, and the guard it passes, are the scheduler's (:mod:`lsp_server.requests.work_ahead`: it is the
request itself, only earlier, so it does not give way).

It is the completion the request would compute itself (the same snapshot, cursor, settings and
context), so exactness is the request's. What it can waste is work for a cursor the editor never asks
about; the next key stops it within one verify round, as it stops a request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from lsp_server.completion.mode import suppresses_automatic
from lsp_server.requests.pipeline import RequestPipeline
from lsp_server.request import CompletionRequest, resolve_request
from lsp_server.model.session import ModelSession
from lsp_server.model.worker import Job
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for

AHEAD = "ahead"  # the in-flight method name of a completion started at the key
CODE_POINTS = codec_for("utf-32")  # the change's cursor is a code-point offset
ASKED_WITHIN_S = 30.0  # the editor asked for an automatic inline completion of the document this recently


@dataclass(frozen=True)
class Started:
    """A completion started at a key: its request and the model thread's job."""

    request: CompletionRequest
    job: Job


class AheadCompletions:
    """See the module docstring. Event loop only.

    Args:
        answered_without_model: ``answered_without_model(request)``: whether the request would be answered
            without the model (a type-through hit, a next-edit suggestion on its line), so nothing starts.
    """

    def __init__(self, pipeline: RequestPipeline, answered_without_model: Callable[[CompletionRequest], bool]):
        self.pipeline = pipeline
        self.answered_without_model = answered_without_model
        self._asked: dict[str, float] = {}  # uri -> time.monotonic() of its last automatic inline request
        self._started: dict[str, Started] = {}

    def asked(self, uri: str) -> None:
        """The editor asked for an automatic inline completion in ``uri`` (it does so while the user types)."""
        self._asked[uri] = time.monotonic()

    def start(self, document: Document, cursor: int, others: list[Document], repo) -> bool:
        """Start the completion for ``cursor`` (code points into ``document.text``, just after a change)
        when it pays; returns whether it started."""
        self.forget(document.uri)
        settings, work_ahead = self.pipeline.settings_ref(), self.pipeline.work_ahead
        if (not settings.complete_ahead or time.monotonic() - self._asked.get(document.uri, -1e9) > ASKED_WITHIN_S
                or not work_ahead.may_start(document, gives_way=False)):
            return False
        request = resolve_request(document, document.lines.position_at(cursor, CODE_POINTS), CODE_POINTS, settings,
                                  automatic=True, method=AHEAD)
        if suppresses_automatic(request.line_prefix, request.line_suffix) or self.answered_without_model(request):
            return False
        started = work_ahead.start(request, ModelSession.complete, others, repo, gives_way=False)
        if started is None:
            return False
        self._started[document.uri] = Started(*started)
        return True

    def take(self, request: CompletionRequest) -> tuple[CompletionRequest, Job] | None:
        """The started completion that answers ``request`` (the request, sharing the started one's
        cancellation, and the job), or ``None``; a started one that does not match is cancelled. An invoked
        request never takes it: the started one is automatic, and an automatic completion may be cut for
        time (``completion.coldPromptMs``, ``answerByMs``) where one the user asked for waits for the whole."""
        started = self._started.pop(request.uri, None)
        if started is None:
            return None
        ahead = started.request
        if (ahead.document.version != request.document.version or ahead.offset != request.offset
                or ahead.document.text != request.document.text or ahead.settings != request.settings
                or ahead.automatic != request.automatic or ahead.cancelled.is_set()):
            ahead.cancelled.set()
            return None
        self.pipeline.untrack(ahead)
        return replace(request, cancelled=ahead.cancelled), started.job

    def forget(self, uri: str) -> None:
        """Cancel what was started for ``uri`` (a newer change, or the document closed)."""
        started = self._started.pop(uri, None)
        if started is not None:
            started.request.cancelled.set()
            self.pipeline.untrack(started.request)
