"""The model worker: one daemon thread that owns the generation backend (the local engine, or the client
of a remote one: :mod:`lsp_server.backends`) and runs all model work in order.

Loading happens on that thread too, so nothing touches a half-loaded engine; requests that arrive
while the state is not ``ready`` are answered at once by the caller (an empty answer), not queued.
The thread is a daemon so that ``exit`` ends the process even during a long load or download.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from decoding.engine import EngineConfig
from lsp_server.backends.base import LoadedModels
from lsp_server.backends.loading import load_backend
from lsp_server.backends.local import as_backend

log = logging.getLogger(__name__)



class ModelState(StrEnum):
    """Where the models are: reported in ``speclsp/status`` and the logs."""

    IDLE = "idle"
    LOADING = "loading"
    READY = "ready"
    ERROR = "error"


IDLE, LOADING, READY, ERROR = ModelState


class ModelWorker:
    """Owns the generation backend and the thread that uses it.

    Args:
        loader: ``loader(config, on_stage)`` builds the backend (a bare :class:`~decoding.engine.Engine`
            is wrapped in the local backend); default :func:`lsp_server.backends.loading.load_backend`.
    """

    def __init__(self, loader: Callable[..., object] = load_backend):
        self._loader = loader
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="speclsp-model", daemon=True)
        self._thread.start()
        self._load_generation = 0  # only the latest load may set the state
        self._engine = None  # the backend; used on the model thread only
        self.loaded: LoadedModels | None = None  # set with state READY
        self.state = IDLE
        self.error: str | None = None

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
                future.set_exception(exc)

    def _submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def load(self, config: EngineConfig | object, on_stage: Callable[[str], None] | None = None) -> concurrent.futures.Future:
        """Load (or reload) the models in the background; the future resolves to the resulting state.

        The previous engine is released first, so two large models never sit in memory together.
        A load superseded by a later one leaves the state to that later load.
        """
        self._load_generation += 1
        generation = self._load_generation
        self.state = LOADING
        self.error = None

        def run() -> str:
            if generation != self._load_generation:
                return self.state  # a newer load is queued behind this one
            self._engine, self.loaded = None, None
            try:
                engine = self._loader(config, on_stage)
            except Exception as exc:  # noqa: BLE001 - any load failure is reported, never raised into the server
                log.exception("model loading failed")
                if generation == self._load_generation:
                    self.state, self.error = ERROR, str(exc)
                return ERROR
            engine = as_backend(engine)
            if hasattr(engine, "describe"):
                engine.claim_thread()  # a loader may have built it elsewhere: from now on only this thread uses it
                loaded = engine.describe()
            else:  # a stand-in from a test
                loaded = LoadedModels(type(engine).__name__, "none", "cpu", "none", None)
            if generation == self._load_generation:
                self._engine, self.loaded, self.state = engine, loaded, READY
            return READY

        return self._submit(run)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run ``fn(backend, *args, **kwargs)`` on the model thread.

        Raises:
            RuntimeError: when the models are not ready.
        """
        engine = self._engine
        if self.state != READY or engine is None:
            raise RuntimeError(f"models are not ready (state: {self.state})")
        return self._submit(fn, engine, *args, **kwargs)

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
