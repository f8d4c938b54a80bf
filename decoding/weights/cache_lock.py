"""One writer per cache entry across processes (two editors started together on a cold cache).

:func:`exclusive` takes the entry's file lock; when another process holds it (it is assembling or
converting the same model), the waiting process says so through ``on_stage`` (the server's log and
progress) before it blocks, and again when it gets the lock, so a slow start is never unexplained.
The lock is an OS file lock (``filelock``): a process that dies, even by SIGKILL, releases it.
:func:`cache_write_error` is the one error for a cache that cannot be written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from decoding.errors import ModelLoadError

log = logging.getLogger(__name__)


@contextmanager
def exclusive(lock_path: Path, doing: str, on_stage: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Hold the file lock ``lock_path`` for the block; yields whether another process held it first.

    Args:
        doing: what the holder is doing, for the message, e.g. ``"converting qwen2.5-coder-1.5b into /c/models"``.
        on_stage: told once when this process starts waiting and once when it stops.
    """
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path))
    waited = False
    try:
        lock.acquire(timeout=0)
    except Timeout:
        waited, started = True, time.monotonic()
        tell(on_stage, f"another speclsp process is {doing}; waiting for it to finish (lock file {lock_path})")
        lock.acquire()
        tell(on_stage, f"the other process finished after {time.monotonic() - started:.1f} s; checking its result")
    try:
        yield waited
    finally:
        lock.release()


def tell(on_stage: Callable[[str], None] | None, message: str) -> None:
    """Log ``message`` and hand it to ``on_stage`` (the server's log and progress), when there is one."""
    log.info("%s", message)
    if on_stage is not None:
        on_stage(message)


def cache_write_error(doing: str, where: Path, exc: OSError) -> ModelLoadError:
    """The error for a cache that cannot be written (unwritable, or a full disk: the 1.5B needs about
    4.3 GB while converting), naming what to do."""
    return ModelLoadError(f"cannot {doing} into {where}: {exc.strerror or exc}; free some space or set "
                          "SPECLSP_CACHE_DIR to a writable directory on another disk")
