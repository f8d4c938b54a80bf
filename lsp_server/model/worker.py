"""The model worker: one daemon thread that owns the model session (:mod:`lsp_server.model.session`: the
generation backends, draft sources and prompt tokens) and runs its operations in order.

Loading happens on that thread too, so nothing touches a half-loaded backend; requests that arrive
while the state is not ``ready`` are answered at once by the caller (an empty answer), not queued.
The thread is a daemon so that ``exit`` ends the process even during a long load or download.
Work is submitted as session operations (:meth:`ModelWorker.run` with a :class:`ModelSession` method
and its arguments), never as closures over a backend.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from lsp_server.backends.base import GenerationBackend, LoadedModels
from lsp_server.backends.loading import load_backend
from lsp_server.model.session import OPERATIONS, ModelSession

log = logging.getLogger(__name__)


class ModelState(StrEnum):
    """Where the models are: reported in ``speclsp/status`` and the logs."""

    IDLE = "idle"
    LOADING = "loading"
    READY = "ready"
    ERROR = "error"


IDLE, LOADING, READY, ERROR = ModelState


class Job(concurrent.futures.Future):
    """A future of the model thread that knows when it was queued and when it started."""

    def __init__(self) -> None:
        super().__init__()
        self.queued_at = time.perf_counter()  # time.perf_counter() seconds
        self.started_at: float | None = None  # set when the model thread takes it

    @property
    def queue_ms(self) -> float:
        """Milliseconds it waited for the model thread (so far, while it still waits)."""
        return 1000 * ((self.started_at or time.perf_counter()) - self.queued_at)


class ModelWorker:
    """Owns the model session and the thread that uses it.

    Args:
        loader: ``loader(config, on_stage)`` builds the generation backend; default
            :func:`lsp_server.backends.loading.load_backend`.
        session_factory: builds the session around a loaded backend (on the model thread); default
            :class:`~lsp_server.model.session.ModelSession`. Tests hand in a fake session here.
    """

    def __init__(self, loader: Callable[..., GenerationBackend] = load_backend,
                 session_factory: Callable[[GenerationBackend], ModelSession] = ModelSession):
        self._loader = loader
        self._session_factory = session_factory
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="speclsp-model", daemon=True)
        self._thread.start()
        self._load_generation = 0  # only the latest load may set the state
        self._session: ModelSession | None = None  # used on the model thread only
        self.loaded: LoadedModels | None = None  # set with state READY
        self.state = IDLE
        self.error: str | None = None
        self._idle_since: float | None = time.monotonic()  # its last job's end; None while it runs one

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            self._idle_since = None
            future.started_at = time.perf_counter()
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
                future.set_exception(exc)
            finally:
                self._idle_since = time.monotonic()

    def _submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Job:
        future = Job()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def load(self, config: object, on_stage: Callable[[str], None] | None = None) -> Job:
        """Load (or reload) the models in the background; the future resolves to the resulting state.

        The previous session is released first, so two large models never sit in memory together.
        A load superseded by a later one leaves the state to that later load.
        """
        self._load_generation += 1
        generation = self._load_generation
        self.state = LOADING
        self.error = None

        def run() -> str:
            if generation != self._load_generation:
                return self.state  # a newer load is queued behind this one
            self._session, self.loaded = None, None
            try:
                session = self._session_factory(self._loader(config, on_stage))
                session.claim_thread()  # a loader may have built it elsewhere: from now on only this thread uses it
                loaded = session.describe()
            except Exception as exc:  # noqa: BLE001 - any load failure is reported, never raised into the server
                log.exception("model loading failed")
                if generation == self._load_generation:
                    self.state, self.error = ERROR, str(exc)
                return ERROR
            if generation == self._load_generation:
                self._session, self.loaded, self.state = session, loaded, READY
            return READY

        return self._submit(run)

    def run(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Job:
        """Run the session operation ``operation`` (a :class:`ModelSession` method, e.g.
        ``ModelSession.complete``) with these arguments on the model thread; the future holds its result.

        Raises:
            RuntimeError: when the models are not ready.
            ValueError: ``operation`` is not an operation of :class:`ModelSession`.
        """
        name = getattr(operation, "__name__", "")
        if name not in OPERATIONS or getattr(ModelSession, name, None) is not operation:
            raise ValueError(f"{operation!r} is not an operation of ModelSession")
        session = self._session
        if self.state != READY or session is None:
            raise RuntimeError(f"models are not ready (state: {self.state})")
        return self._submit(getattr(session, name), *args, **kwargs)

    def has_waiting(self) -> bool:
        """Whether work is queued behind the job running now (a background job's cue to yield)."""
        return not self._jobs.empty()

    def idle_for(self) -> float | None:
        """Seconds since the model thread finished its last job (``time.monotonic()``), or ``None`` while it
        runs one or work is queued (when work ahead may start: :mod:`lsp_server.requests.work_ahead`)."""
        since = self._idle_since
        if since is None or self.has_waiting():
            return None
        return time.monotonic() - since

    def shutdown(self) -> None:
        """Stop taking work; queued jobs are cancelled."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        self._jobs.put(None)
