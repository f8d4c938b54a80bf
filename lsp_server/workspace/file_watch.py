"""Keeps the repository index current: a watchdog observer on the workspace folders.

Created and modified files are re-read, deleted ones forgotten, moved ones both; a changed
``.gitignore`` is reloaded by the index. ``on_change(path)`` runs after each update (on the
observer's thread), so the engine can drop its n-gram index of the old text. Every event goes
through the index's own rules (:meth:`RepoIndex.update`, :meth:`RepoIndex.move`): a FIFO, a socket or
a link out of the folders created meanwhile is skipped as it would be by a scan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from lsp_server.workspace.repo_index import RepoIndex

log = logging.getLogger(__name__)


class _Handler(FileSystemEventHandler):
    def __init__(self, index: RepoIndex, on_change: Callable[[Path], None] | None):
        self.index = index
        self.on_change = on_change or (lambda path: None)

    def _safely(self, action, *paths: str) -> None:
        try:
            action()
            for path in paths:
                self.on_change(Path(path))
        except Exception:  # noqa: BLE001 - one bad event must not stop the observer
            log.exception("index update failed for %s", paths)

    def on_created(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._safely(lambda: self.index.update(Path(event.src_path)), event.src_path)

    def on_modified(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._safely(lambda: self.index.update(Path(event.src_path)), event.src_path)

    def on_deleted(self, event: FileSystemEvent) -> None:
        self._safely(lambda: self.index.remove(Path(event.src_path)), event.src_path)

    def on_moved(self, event: FileSystemEvent) -> None:
        self._safely(lambda: self.index.move(Path(event.src_path), Path(event.dest_path)),
                     event.src_path, event.dest_path)


class IndexWatcher:
    """A watchdog observer that feeds file events into a :class:`RepoIndex`."""

    def __init__(self, index: RepoIndex, on_change: Callable[[Path], None] | None = None):
        self.index = index
        self._observer = Observer()
        handler = _Handler(index, on_change)
        for root in index.roots:
            self._observer.schedule(handler, str(root), recursive=True)
        self._observer.daemon = True

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=2)
