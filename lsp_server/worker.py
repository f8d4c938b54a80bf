"""The model worker: one thread that owns the engine and runs all model work in order.

Loading happens on that thread too, so nothing touches a half-loaded engine; requests that arrive
while the state is not ``ready`` are answered at once by the caller (an empty answer), not queued.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any

from decoding.engine import Engine, EngineConfig

log = logging.getLogger(__name__)

IDLE, LOADING, READY, ERROR = "idle", "loading", "ready", "error"


class ModelWorker:
    """Owns the :class:`~decoding.engine.Engine` and the thread that uses it."""

    def __init__(self, loader: Callable[..., Engine] = Engine.load):
        self._loader = loader
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="speclsp-model")
        self.engine: Engine | None = None
        self.state = IDLE
        self.error: str | None = None

    def load(self, config: EngineConfig, on_stage: Callable[[str], None] | None = None) -> concurrent.futures.Future:
        """Load (or reload) the models in the background; the future resolves to the state."""
        self.state = LOADING
        self.error = None

        def run() -> str:
            try:
                engine = self._loader(config, on_stage)
            except Exception as exc:  # noqa: BLE001 - any load failure is reported, never raised into the server
                log.exception("model loading failed")
                self.engine, self.state, self.error = None, ERROR, str(exc)
                return self.state
            self.engine, self.state = engine, READY
            return self.state

        return self._executor.submit(run)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run ``fn(engine, *args, **kwargs)`` on the model thread.

        Raises:
            RuntimeError: when the models are not ready.
        """
        engine = self.engine
        if self.state != READY or engine is None:
            raise RuntimeError(f"models are not ready (state: {self.state})")
        return self._executor.submit(fn, engine, *args, **kwargs)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
