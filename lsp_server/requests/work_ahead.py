"""Work ahead of requests: the one scheduler of background jobs on the model thread.

The model thread runs one job at a time (:mod:`lsp_server.model.worker`). Besides the requests the editor
sends, the server starts work for the requests it expects next. This module decides when each kind
starts, whether it may start at all (one guard) and what gives way to what; it is the one place to
change the order of work ahead. What each job computes lives with its trigger
(:mod:`lsp_server.requests.ahead`, :mod:`lsp_server.requests.rewrite_ahead`) and in the model session.

The order, first to last:

1. **Requests** (:mod:`lsp_server.requests.pipeline`): the user waits for them, so they never give way.
   Work ahead gives way to them: it stops at its next check once anything is queued on the model thread
   (a ``should_stop`` polled between prefill pieces, or a request flag that reads as set,
   :class:`lsp_server.request.Yielding`), so work ahead still queued when a request arrives returns at
   once, and work ahead in flight stops between prefill pieces or verify rounds. A change of a document
   cancels its work ahead, waiting or in flight
   (:meth:`lsp_server.requests.pipeline.RequestPipeline.cancel_document`).
2. **The completion at the key** (:mod:`lsp_server.requests.ahead`): the very request the editor is about
   to send, started at the change. It does not give way (it is that request); the next change, or a
   request for another cursor of the document, cancels it.
3. **The end of an edit burst** (:mod:`lsp_server.requests.rewrite_ahead`): a document with recent edits
   unchanged for a pause; its next-edit prompt is computed, or (``nextEdit.suggestAhead``) the suggestion
   written. It gives way to anything queued.
4. **After a completion's answer** (:meth:`WorkAhead.answered`): the warm-up of the document parts the
   request deferred, once the answer is written; then, once the model thread has been idle for
   :data:`NEXT_LINE_IDLE_S`, the next line (the prompt after Enter, or a new anchor, into the document's
   spare KV cache, and that line's completion: :meth:`lsp_server.model.session.ModelSession.prepare_ahead`).
   It starts only on an idle model thread, so it never cuts the burst's work (3), which cuts it. Only the
   newest answer's next line is prepared. After an answer from a prompt cut for time
   (:mod:`lsp_server.model.cold_prompt`: a file just opened), the whole prompt is computed instead, after
   the same wait for the document to rest but not for an idle model thread: the requests that follow need
   it before any next line, and the burst end's work (3), which would hold every pause, does not start in
   such a document and gives way to it elsewhere (what the user sees, completions from a cut prompt, comes
   before a next-edit prompt). Until an
   answer comes from the whole prompt, each change of that document schedules it again for the cursor the
   change leaves (:meth:`WorkAhead.changed`), so the pauses in typing compute it piece by piece (the
   pieces computed stay cached when a key stops it).

Why this order: a request is what the user waits for, and the completion at the key is such a request,
only earlier. A burst's end is the user's latest state of a document and a next-edit prompt is long, so
it starts as soon as the pause is clear, whatever other work ahead runs. The next line after an answer
is a guess about a key not yet typed, so it waits for a pause and for everything else.

Document events (open, close, a file changed on disk) are bookkeeping, queued in the order they come
(:meth:`lsp_server.requests.pipeline.RequestPipeline.in_background`); a document's tokens on opening
pass the guard (:meth:`WorkAhead.opened`).

The guard (:meth:`WorkAhead.may_start`), the only one of work ahead: the document is open and still the
snapshot the work was planned for; the request side's one check lets it (in sync with the editor, its
file not secret-looking: never read, never tokenised;
:meth:`lsp_server.requests.pipeline.RequestPipeline.refusal`, which requests pass too); the models are
ready; and, for work that gives way, nothing waits on the model thread (it would give way at once). The
session operations of work ahead trust it and check nothing of it again.

Waiting happens here, on the event loop (``loop.call_later``), never on the model thread. Each job
computes what a request would (the same prompt) or fills a cache, so answers stay the requests'; what
work ahead can waste is model time for a request that never comes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from lsp_server.model.session import ModelSession
from lsp_server.model.worker import READY, Job, ModelWorker
from lsp_server.request import CompletionRequest, Yielding
from lsp_server.requests.span import after_answer
from lsp_server.workspace.documents import Document, DocumentStore
from lsp_server.workspace.repo_index import RepoIndex


class Pipeline(Protocol):
    """What the scheduler uses of its request pipeline (:class:`lsp_server.requests.pipeline.RequestPipeline`)."""

    worker: ModelWorker
    store: DocumentStore

    def refusal(self, document: Document) -> str | None: ...

    def track(self, request: CompletionRequest) -> None: ...

    def in_background(self, operation: Callable[..., Any], *args: Any, after_the_answer: bool = False,
                      **kwargs: Any) -> None: ...

NEXT_LINE = "nextLine"  # the in-flight method name of the next line prepared after an answer
WHOLE_PROMPT = "wholePrompt"  # the in-flight method name of the whole prompt after an answer from a cut one
#: The model thread idle this long (seconds) after an answer: a pause, not the gap between two keys.
NEXT_LINE_IDLE_S = 0.25
#: The work-ahead operations that poll a ``should_stop`` between their pieces (:meth:`WorkAhead.start`).
_POLLS_SHOULD_STOP = frozenset({ModelSession.prefill_rewrite, ModelSession.prepare_ahead, ModelSession.prefill_prompt})


class WorkAhead:
    """See the module docstring. Event loop only; one per request pipeline (its ``work_ahead``).

    Args:
        next_line_idle_s: how long the model thread must be idle before the next line is prepared (s).
    """

    def __init__(self, pipeline: Pipeline, next_line_idle_s: float = NEXT_LINE_IDLE_S):
        self.pipeline = pipeline
        self.next_line_idle_s = next_line_idle_s
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}  # (uri, method) -> its pending start
        #: Documents whose last answer came from a prompt cut for time: their whole prompt is computed ahead
        self.cold: set[str] = set()
        self._whole_for: dict[str, CompletionRequest] = {}  # uri -> the request of its latest whole-prompt start

    # The guard
    def may_start(self, document: Document, gives_way: bool) -> bool:
        """Whether work ahead for ``document`` (the snapshot it was planned for) may start now; ``gives_way``:
        work that gives way to anything queued (it may not start while something waits)."""
        worker, current = self.pipeline.worker, self.pipeline.store.get(document.uri)
        return (current is not None and current.version == document.version and current.text == document.text
                and self.pipeline.refusal(current) is None and worker.state == READY
                and not (gives_way and worker.has_waiting()))

    # Starting
    def start(self, request: CompletionRequest, operation: Callable[..., Any], *args: Any, gives_way: bool,
              **kwargs: Any) -> tuple[CompletionRequest, Job] | None:
        """Run the session ``operation(request, *args, **kwargs)`` on the model thread, in flight under the
        request's document and method (the next change of the document, or a newer start of the same
        method there, sets the request's cancellation). Call it after :meth:`may_start`.

        Args:
            gives_way: stop at the next check once anything is queued on the model thread. An operation
                that polls a ``should_stop`` (a prefill in pieces) is given one: the request's cancellation
                or anything queued; the request's flag stays the change's alone, which also drops a prefill
                piece in flight. Any other reads it through its request's flag
                (:class:`lsp_server.request.Yielding`).
        Returns:
            The request as started (its flag is the one the operation reads) and the job; ``None`` when
            the models were unloaded meanwhile.
        """
        worker = self.pipeline.worker
        if gives_way and operation in _POLLS_SHOULD_STOP:
            kwargs["should_stop"] = lambda: request.cancelled.is_set() or worker.has_waiting()
        elif gives_way:
            request = replace(request, cancelled=Yielding(worker.has_waiting))
        try:
            job = worker.run(operation, request, *args, **kwargs)
        except RuntimeError:  # unloaded meanwhile
            return None
        self.pipeline.track(request)
        return request, job

    def opened(self, document: Document) -> None:
        """A document was opened (or the models reloaded with it open): tokenise it on the model thread
        ahead of its first request, when the guard lets it."""
        if self.may_start(document, gives_way=False):
            self.pipeline.in_background(ModelSession.document_opened, document)

    def answered(self, request: CompletionRequest | None, others: list[Document] = (),
                 repo: RepoIndex | None = None, cut: CompletionRequest | None = None) -> None:
        """A completion request ended: once its answer is written, warm up the document parts it deferred
        (tokenising a large part holds the GIL, so not before the answer); then, for ``cut`` (a request
        answered from a prompt cut for time), its whole prompt (:meth:`prefill_whole_prompt`), else with
        ``request`` (an answer with text) its next line (:meth:`prepare_next_line`)."""
        self.pipeline.in_background(ModelSession.warm_up, after_the_answer=True)
        if cut is not None:
            self.cold.add(cut.uri)
            after_answer(self.prefill_whole_prompt, cut, others, repo)
        elif request is not None:
            self.cold.discard(request.uri)
            after_answer(self.prepare_next_line, request, others, repo)

    def changed(self, request: CompletionRequest, others: list[Document] = (), repo: RepoIndex | None = None) -> None:
        """A document changed, ``request`` at the cursor the change leaves: in a document whose last answer
        came from a cut prompt, compute the whole prompt for this cursor once the model thread is idle (a
        pause in typing, such as after Enter, where the editor may ask for nothing)."""
        if request.uri in self.cold:
            self.prefill_whole_prompt(request, others, repo)

    def prefill_whole_prompt(self, request: CompletionRequest, others: list[Document] = (),
                             repo: RepoIndex | None = None) -> None:
        """Compute the whole prompt of ``request`` (answered from a prompt cut for time, or a change of such a
        document) once the document has been unchanged ``next_line_idle_s``, giving way to anything queued
        (module docstring, 4: it takes the next line's place, and does not wait for an idle model thread: the
        burst end's next-edit prompt, which may hold the pauses, gives way to it); it replaces any whole
        prompt or next line still waiting, but not one waiting for a newer snapshot of the document (an
        answer's callback that comes after a change)."""
        pending = self._whole_for.get(request.uri)
        if (request.uri, WHOLE_PROMPT) in self._timers and pending is not None and \
                pending.document.version > request.document.version:
            return
        self._whole_for[request.uri] = request
        for uri, method in [key for key in self._timers if key[1] in (NEXT_LINE, WHOLE_PROMPT)]:
            self.drop_pending(uri, method)
        self.after(request.uri, WHOLE_PROMPT, self.next_line_idle_s, self._whole_prompt, request, others, repo)

    def _whole_prompt(self, request: CompletionRequest, others: list[Document], repo: RepoIndex | None) -> None:
        self._whole_for.pop(request.uri, None)
        if self.may_start(request.document, gives_way=True):
            request = replace(request, method=WHOLE_PROMPT, cancelled=threading.Event())
            self.start(request, ModelSession.prefill_prompt, others, repo, gives_way=True)

    def prepare_next_line(self, request: CompletionRequest, others: list[Document] = (),
                          repo: RepoIndex | None = None) -> None:
        """Prepare the next line of an answered ``request`` once the model thread has been idle
        ``next_line_idle_s`` (module docstring, 4); it replaces any next line or whole prompt still waiting."""
        for uri, method in [key for key in self._timers if key[1] in (NEXT_LINE, WHOLE_PROMPT)]:
            self.drop_pending(uri, method)
        self.after(request.uri, NEXT_LINE, self.next_line_idle_s, self._next_line, request, others, repo, idle=True)

    def _next_line(self, request: CompletionRequest, others: list[Document], repo: RepoIndex | None) -> None:
        if self.may_start(request.document, gives_way=True):
            request = replace(request, method=NEXT_LINE, cancelled=threading.Event())  # the answered one's is done
            self.start(request, ModelSession.prepare_ahead, others, repo, gives_way=True)

    # Waiting
    def after(self, uri: str, method: str, delay_s: float, start: Callable[..., None], *args: Any,
              idle: bool = False) -> None:
        """Call ``start(*args)`` on the event loop in ``delay_s`` seconds, unless the document changes or
        closes first (:meth:`drop_pending`); replaces a pending start of the same document and method. With
        ``idle``, not before the model thread has been idle ``delay_s`` (the wait goes on while it works).
        Nothing waits without a running event loop (a direct call in a test)."""
        self.drop_pending(uri, method)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timers[(uri, method)] = loop.call_later(delay_s, self._due, uri, method, delay_s, start, args, idle)

    def _due(self, uri: str, method: str, delay_s: float, start: Callable[..., None], args: tuple, idle: bool) -> None:
        self._timers.pop((uri, method), None)
        idle_for = self.pipeline.worker.idle_for() if idle else None
        if idle and (idle_for is None or idle_for < delay_s):  # busy, or idle for less than the wait
            wait = delay_s if idle_for is None else delay_s - idle_for
            self._timers[(uri, method)] = asyncio.get_running_loop().call_later(wait, self._due, uri, method, delay_s,
                                                                                start, args, idle)
            return
        start(*args)

    def forget(self, uri: str) -> None:
        """A document closed: drop its pending starts, its cold mark and its whole-prompt request."""
        self.drop_pending(uri)
        self.cold.discard(uri)
        self._whole_for.pop(uri, None)

    def drop_pending(self, uri: str, method: str | None = None) -> None:
        """Cancel the pending starts of ``uri`` (one method, or all); the work in flight is the pipeline's to
        cancel (:meth:`lsp_server.requests.pipeline.RequestPipeline.cancel_document`, which calls this)."""
        for key in [key for key in self._timers if key[0] == uri and (method is None or key[1] == method)]:
            self._timers.pop(key).cancel()
