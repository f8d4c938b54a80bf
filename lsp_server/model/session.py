"""The model session: everything of the models' that lives on the model thread, behind typed operations.

It owns the generation backends (:mod:`lsp_server.backends`: the local engine or a remote engine's
client; one per role, so that a next-edit model can sit beside the completion model), the draft sources
and prompt tokens kept between requests (:class:`lsp_server.model.draft_sources.DraftSources`), and offers:

* requests: :meth:`ModelSession.complete` and :meth:`ModelSession.rewrite` (a next-edit suggestion);
* events: :meth:`~ModelSession.document_opened` / ``closed``, :meth:`~ModelSession.file_changed`
  (the index watcher), :meth:`~ModelSession.warm_up` (after an answer);
* work ahead of a request: :meth:`~ModelSession.prepare_ahead` (the model thread idle after an answer:
  the next line, a new anchor), :meth:`~ModelSession.prefill_prompt` (after an answer from a prompt cut
  for time: the whole prompt) and :meth:`~ModelSession.prefill_rewrite` (an edit burst ended: the
  next-edit prompt). When these run, and whether they may (the document in sync, its file not secret),
  is decided on the request side, by :mod:`lsp_server.requests.work_ahead`, and only there.

Only the model worker (:mod:`lsp_server.model.worker`) calls these, on its thread, in order: the server's
services submit operations (``worker.run(ModelSession.complete, ...)``), never closures, and nothing
above this module touches a backend. The command line builds one directly (it has one thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from lsp_server.backends.base import ROLE_COMPLETION, ROLE_NEXT_EDIT, ROLES, GenerationBackend, LoadedModels
from lsp_server.model.completer import Completion, Rewrite, complete, prefill_rewrite, prepare_prompt, rewrite
from lsp_server.workspace.documents import Document
from lsp_server.model.draft_sources import DraftSources
from lsp_server.workspace.repo_index import RepoIndex
from lsp_server.completion.related_files import context_documents
from lsp_server.next_edit.prompt import NextEditUnsupported
from lsp_server.request import CompletionRequest, Yielding, after_enter
from lsp_server.workspace.syntax import parser_for

log = logging.getLogger(__name__)

#: What the worker may run (:meth:`lsp_server.model.worker.ModelWorker.run`); nothing hands a backend out.
OPERATIONS = frozenset({"complete", "rewrite", "prefill_rewrite", "prepare_ahead", "prefill_prompt", "document_opened",
                        "document_closed", "file_changed", "warm_up", "describe"})


class ModelSession:
    """The backends, draft sources and prompt tokens of one server (or one command-line run).

    Args:
        backends: one backend for every role, or ``{role: backend}`` with at least ``completion``
            (a role left out uses the completion backend).
        names: a document URI's short name, for source keys (:class:`lsp_server.workspace.names.DisplayNames`).
        defer_cold_parts: see :class:`~lsp_server.model.draft_sources.DraftSources` (the server: true).
    Raises:
        ValueError: no completion backend, or an unknown role.
    """

    def __init__(self, backends: GenerationBackend | Mapping[str, GenerationBackend],
                 names: Callable[[str], str] | None = None, defer_cold_parts: bool = False):
        by_role = dict(backends) if isinstance(backends, Mapping) else {ROLE_COMPLETION: backends}
        if ROLE_COMPLETION not in by_role or set(by_role) - set(ROLES):
            raise ValueError(f"backends need a {ROLE_COMPLETION!r} one and roles among {', '.join(ROLES)}; got "
                             f"{', '.join(by_role) or 'none'}")
        self.backends = {role: by_role.get(role, by_role[ROLE_COMPLETION]) for role in ROLES}
        self.sources = DraftSources(defer_cold_parts=defer_cold_parts, names=names)

    def _distinct_backends(self) -> list[GenerationBackend]:
        return list({id(b): b for b in self.backends.values()}.values())

    def claim_thread(self) -> None:
        """Make the calling thread (the model thread) the only one that may use the backends."""
        for backend in self._distinct_backends():
            backend.claim_thread()

    def describe(self) -> LoadedModels:
        """What the completion backend serves, for the status and the logs; ``next_edit`` names the
        next-edit backend's models where that is another backend."""
        loaded = self.backends[ROLE_COMPLETION].describe()
        next_edit = self.backends[ROLE_NEXT_EDIT]
        if next_edit is self.backends[ROLE_COMPLETION]:
            return loaded
        other = next_edit.describe()
        return replace(loaded, next_edit=f"target={other.target}, draft={other.draft}")

    # Requests
    def complete(self, request: CompletionRequest, other_documents: list[Document] = (),
                 repo: RepoIndex | None = None, seed: int | None = None) -> Completion | None:
        """A completion at the request's cursor (:func:`lsp_server.model.completer.complete`); ``None`` when
        the request was superseded while it waited (no context built, nothing prefilled).

        Raises:
            lsp_server.backends.base.BackendError: a remote engine failed.
        """
        if request.cancelled.is_set():
            return None
        return complete(self.backends[ROLE_COMPLETION], request, other_documents, repo, self.sources, seed)

    def rewrite(self, request: CompletionRequest, history: list[str] = (),
                seed: int | None = None) -> Rewrite | None:
        """A next-edit rewrite of the region around the cursor (:func:`lsp_server.model.completer.rewrite`),
        with ``history`` the document's recent edits as diffs
        (:meth:`lsp_server.workspace.edit_history.EditHistories.diffs`);
        ``None`` for a blank region, or a request superseded while it waited.

        Raises:
            lsp_server.next_edit.prompt.NextEditUnsupported: the model cannot write rewrites.
            lsp_server.backends.base.BackendError: a remote engine failed.
        """
        if request.cancelled.is_set():
            return None
        return rewrite(self.backends[ROLE_NEXT_EDIT], request, history, seed)

    # Work ahead of requests
    def prefill_rewrite(self, request: CompletionRequest, history: list[str] = (),
                        should_stop: Callable[[], bool] | None = None) -> int:
        """When an edit burst has ended (:mod:`lsp_server.requests.rewrite_ahead`): compute the next-edit rewrite
        prompt of the request's cursor into the next-edit backend's cache, in pieces that stop once
        ``should_stop`` (default: the request's cancellation) is set; returns the prompt tokens computed (0
        for a model that cannot write rewrites, a blank region, or a stop before the first piece)."""
        stop = should_stop or request.cancelled.is_set
        if stop():
            return 0
        try:
            return prefill_rewrite(self.backends[ROLE_NEXT_EDIT], request, history, stop)
        except NextEditUnsupported:
            return 0

    def prefill_prompt(self, request: CompletionRequest, other_documents: list[Document] = (),
                       repo: RepoIndex | None = None, should_stop: Callable[[], bool] | None = None) -> int:
        """After an answer from a prompt cut for time (:mod:`lsp_server.model.cold_prompt`), once the model
        thread is idle: compute the request's whole prompt into the document's spare KV cache, in pieces that
        stop once ``should_stop`` (default: the request's cancellation) is set, the piece in flight dropped
        between the model's layers. Returns the prompt tokens computed; later requests whose whole prompt
        is then cached use it."""
        stop = should_stop or request.cancelled.is_set
        if stop():
            return 0
        backend = self.backends[ROLE_COMPLETION]
        prompt, _, _ = prepare_prompt(backend, request, context_documents(other_documents), repo, self.sources)
        fed = backend.prefill(prompt.prompt_ids, request.uri, stop, spare=True, preempt=stop)
        log.info("whole prompt ahead: %d of its %d tokens computed%s", fed, len(prompt.prompt_ids),
                 " (stopped: a request or a change)" if stop() else "")
        return fed

    def prepare_ahead(self, request: CompletionRequest, other_documents: list[Document] = (),
                      repo: RepoIndex | None = None, should_stop: Callable[[], bool] | None = None) -> int:
        """After an answer, once the model thread has been idle a while (:mod:`lsp_server.requests.work_ahead`
        decides when), work for the requests likely next, in pieces that stop once ``should_stop`` (default:
        the request's cancellation; the scheduler's also reads as set while other work is queued). Returns
        the prompt tokens prefilled into the spare KV cache (0 when it stopped first or had nothing to do).

        * At the end of a line: the line after Enter (:func:`lsp_server.request.after_enter`). Its prompt
          goes into the document's spare KV cache, beside the prompt in use, unless the typed-tail anchor
          holds for it (``completion.promptTailLines`` above 0: the tail only grows by the line break); then that line
          is completed. After Enter, the request reuses the prompt instead of computing the suffix again
          (every prompt layout: the line start is a token boundary, and healing backs off the indentation),
          and the completion is its ``#output`` draft: when the indentation was guessed right, one verify
          pass answers it.
        * Elsewhere, when a new anchor would lie after the kept one: the prompt anchored anew goes into the
          spare (a re-anchor in idle time), so that when the tail outgrows
          ``completion.promptTailLines``, the new anchor's prompt is there (:meth:`lsp_server.completion.anchor.
          AnchorBook.anchor_for` takes the spare anchor).
        """
        stop = should_stop or request.cancelled.is_set
        if stop() or request.cancelled.is_set():
            return 0
        max_lines = request.settings.prompt_tail_lines
        ahead = after_enter(request)
        if ahead is None and not self.sources.anchors.would_move(request, max_lines):
            return 0
        backend = self.backends[ROLE_COMPLETION]
        others = context_documents(other_documents)
        fed = 0
        if ahead is None or not self.sources.anchors.holds_for(ahead, max_lines):
            prompt, _, _ = prepare_prompt(backend, ahead or request, others, repo, self.sources, spare=True)
            fed = backend.prefill(prompt.prompt_ids, request.uri, stop, spare=True)
        if ahead is not None and not stop():
            # Its time budget runs from here, as a request's from its arrival.
            complete(backend, replace(ahead, cancelled=Yielding(stop), received=time.perf_counter()), others, repo,
                     self.sources)
        return fed

    # Events
    def document_opened(self, document: Document) -> None:
        """Tokenise a newly opened document ahead of its first request, and load its language's
        tree-sitter grammar. Only for a document the request side lets through (never a secret-looking one:
        :meth:`lsp_server.requests.work_ahead.WorkAhead.opened`)."""
        self.sources.document_opened(self.backends[ROLE_COMPLETION], document)
        parser_for(document.language_id)  # loads the grammar on first use of a language

    def document_closed(self, uri: str) -> None:
        """Forget a closed document's tokens, n-gram sources and KV caches in every backend."""
        completion = self.backends[ROLE_COMPLETION]
        self.sources.document_closed(completion, uri)
        for backend in self._distinct_backends():
            if backend is not completion:
                self.sources.forget_in(backend, uri)

    def file_changed(self, uri: str) -> None:
        """A file on disk changed (the index watcher): drop the n-gram source of its old text."""
        for backend in self._distinct_backends():
            self.sources.file_changed(backend, uri)

    def warm_up(self) -> None:
        """Tokenise the document parts the last requests deferred (call after answering)."""
        self.sources.warm_up(self.backends[ROLE_COMPLETION])
