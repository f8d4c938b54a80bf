"""Watch the client process named by ``initialize``'s ``processId`` and act when it is gone (LSP 3.17:
"If the parent process is not alive then the server should exit"), so that the server never outlives
its editor as an orphan.

On Linux a pidfd reports the end of the process at once (even while it is a zombie); elsewhere, or
when the pidfd cannot be had, a poll every :data:`POLL_S` seconds asks whether the process still
exists, and whether this process was re-parented away from it.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds between two looks at the client process when no pidfd is available.
POLL_S = 2.0


def process_gone(pid: int, parent_at_start: int) -> bool:
    """Whether process ``pid`` no longer runs: it does not exist, or it was this process's parent and
    this process has since been re-parented (its parent died, perhaps leaving a zombie with the pid)."""
    if pid == parent_at_start and os.getppid() != parent_at_start:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, under another user
    return False


def _wait_pidfd(pid: int) -> bool:
    """Block until ``pid`` ends, with a pidfd; False when no pidfd can be had (then poll instead)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return False
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)
    return True


def _watch(pid: int, parent_at_start: int, on_gone: Callable[[], None]) -> None:
    if not _wait_pidfd(pid):
        stop = threading.Event()
        while not process_gone(pid, parent_at_start):
            stop.wait(POLL_S)
    log.warning("the client process %d is gone", pid)
    on_gone()


MAX_PID = 2**31  # pid_t is a 32-bit signed integer: larger numbers name no process (os.kill overflows)


def watch_parent(process_id: object, on_gone: Callable[[], None]) -> threading.Thread | None:
    """Call ``on_gone`` (on a daemon thread) once process ``process_id`` has ended. Nothing is watched
    when ``process_id`` is not an integer in ``(0, MAX_PID)`` (the client sent null: no process to
    watch; a number no process can have) or is this process; returns the watching thread, or ``None``."""
    if not isinstance(process_id, int) or isinstance(process_id, bool) or not 0 < process_id < MAX_PID \
            or process_id == os.getpid():
        return None
    thread = threading.Thread(target=_watch, args=(process_id, os.getppid(), on_gone),
                              name="speclsp-parent-watch", daemon=True)
    thread.start()
    return thread
