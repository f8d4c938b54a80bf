"""Stand-ins for the model side, for testing the request services without a model.

* :class:`FakeSession`: a model session (the operations of :class:`lsp_server.model.session.ModelSession`)
  that records every operation it runs and answers ``complete`` / ``rewrite`` from functions the test
  gives; handed to :class:`lsp_server.model.worker.ModelWorker` as its session factory.
* :class:`FakeBackend`: a backend that generates nothing, keeps no sources (as a remote one) and has
  the starter tokenizer: enough for a real :class:`~lsp_server.model.session.ModelSession` to run its events.
* :class:`CapturedWriter`: a pygls writer that keeps every message the server writes.
* :func:`services`: the pipeline and both services over a store and a worker, wired as the server wires them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from lsp_server.backends.base import LoadedModels
from lsp_server.requests.completion_service import CompletionService
from lsp_server.requests.next_edit_service import NextEditService
from lsp_server.requests.pipeline import RequestPipeline
from lsp_server.settings import Settings
from lsp_server.tracing import Tracer

DESCRIBED = LoadedModels("fake-target", "none", "cpu", "none", None)


class FakeBackend:
    """See the module docstring; ``generate`` and ``rewrite`` are not there (nothing may generate)."""

    name = "fake"
    keeps_sources = False
    constrains_output = False
    completion_stop_ids = frozenset()

    def __init__(self):
        from decoding.weights.starter import TARGET_DIR
        from decoding.weights.tokenizer_loading import load_tokenizer

        self.tokenizer = load_tokenizer(str(TARGET_DIR), local_only=True)
        self.capabilities = None

    def describe(self) -> LoadedModels:
        return DESCRIBED

    def claim_thread(self) -> None:
        pass

    def sync_sources(self, wanted, retain=frozenset(), drop=frozenset(), searched=frozenset()) -> None:
        pass

    def has_source(self, key) -> bool:
        return False

    def forget_source(self, key) -> None:
        pass

    def forget_cache(self, cache_key) -> None:
        pass

    def prompt_cost(self, prompt_ids, cache_key):
        return None

    def prefill(self, prompt_ids, cache_key, should_stop, spare=False, preempt=None) -> int:
        return 0


class FakeSession:
    """Records ``(operation, args)`` in :attr:`calls` (on the model thread) and answers from ``on_complete``
    / ``on_rewrite`` (``request -> result``; default ``None``, as a superseded request).

    Accepts the keywords the server passes to its session factory (``names``, ``defer_cold_parts``)."""

    def __init__(self, backend=None, on_complete: Callable | None = None, on_rewrite: Callable | None = None,
                 **_server_keywords):
        self.backend = backend
        self.on_complete, self.on_rewrite = on_complete, on_rewrite
        self.calls: list[tuple[str, tuple]] = []
        self.threads: set[int] = set()  # the threads its operations ran on
        self.called = threading.Event()  # set after every operation

    def _record(self, name: str, *args) -> None:
        self.calls.append((name, args))
        self.threads.add(threading.get_ident())
        self.called.set()

    def names(self) -> list[str]:
        """The operations run so far, in order."""
        return [name for name, _ in self.calls]

    def claim_thread(self) -> None:
        self._record("claim_thread")

    def describe(self) -> LoadedModels:
        return DESCRIBED

    def complete(self, request, other_documents=(), repo=None, seed=None):
        self._record("complete", request, other_documents, repo)
        return self.on_complete(request) if self.on_complete is not None else None

    def rewrite(self, request, history=(), seed=None):
        self._record("rewrite", request, history)
        return self.on_rewrite(request) if self.on_rewrite is not None else None

    def prepare_ahead(self, request, other_documents=(), repo=None, should_stop=None) -> int:
        self._record("prepare_ahead", request)
        return 0

    def prefill_prompt(self, request, other_documents=(), repo=None, should_stop=None) -> int:
        self._record("prefill_prompt", request)
        return 0

    def prefill_rewrite(self, request, history=(), should_stop=None) -> int:
        self._record("prefill_rewrite", request, history, should_stop)
        return 0

    def document_opened(self, document) -> None:
        self._record("document_opened", document)

    def document_closed(self, uri) -> None:
        self._record("document_closed", uri)

    def file_changed(self, uri) -> None:
        self._record("file_changed", uri)

    def warm_up(self) -> None:
        self._record("warm_up")


def services(store, worker, tracer: Tracer | None = None, settings_ref: Callable[[], Settings] = Settings,
             **pipeline_keywords) -> tuple[RequestPipeline, CompletionService, NextEditService]:
    """The pipeline, the completion service and the next-edit service, wired as in the server."""
    pipeline = RequestPipeline(store, worker, tracer or Tracer(), settings_ref, **pipeline_keywords)
    next_edits = NextEditService(pipeline)
    return pipeline, CompletionService(pipeline, next_edits), next_edits


class CapturedWriter:
    """A pygls writer (``server.protocol.set_writer``) that keeps every JSON message written."""

    def __init__(self):
        self.messages: list[dict] = []

    def write(self, data: bytes) -> None:
        self.messages.append(json.loads(data.split(b"\r\n\r\n", 1)[1]))

    def close(self) -> None:
        pass

    def logs(self) -> list[str]:
        """The ``window/logMessage`` texts, in order."""
        return [m["params"]["message"] for m in self.messages if m.get("method") == "window/logMessage"]
