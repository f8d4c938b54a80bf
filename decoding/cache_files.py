"""JSON files in the cache that several processes read and write (measured pass costs, weight choices).

Each is a JSON object. A reader takes a missing or unreadable file as empty. A writer takes a file lock,
reads the file again, changes the object and replaces the file in one rename, so processes writing at
the same time keep each other's entries.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def read_json(path: Path) -> dict:
    """The object in ``path`` (``{}`` where the file is missing, unreadable or not an object)."""
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        known = {}
    return known if isinstance(known, dict) else {}


def update_json(path: Path, change: Callable[[dict], None], what: str) -> bool:
    """Apply ``change`` to the object in ``path`` under a file lock and write it back. A file that cannot
    be written is logged (``what``: what was to be kept, for the message); returns whether it was."""
    from filelock import FileLock, Timeout

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path.with_suffix(".lock")), timeout=30):
            known = read_json(path)
            change(known)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(known, indent=1) + "\n")
            temporary.replace(path)
        return True
    except (OSError, Timeout) as exc:
        log.warning("could not keep the %s in %s: %s", what, path, exc)
        return False
