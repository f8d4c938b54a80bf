"""The index service: builds and keeps the repository index of the workspace folders (on ``initialized``,
when the folders change and when the index settings change), with progress and a log line.

Indexing runs on its own thread, never on the model worker, so completions go on while it runs
(without the index until the scan ends). A watchdog observer keeps it current afterwards.

The folders come from the caller (the server reads them from the client); a home directory, a parent
of it and the temporary directory itself are skipped with a warning (:func:`choose_roots`): a client
that roots a scratch file at its directory must not get ``/tmp`` or ``$HOME`` indexed wholesale.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from lsp_server.workspace.file_rules import refused_root
from lsp_server.workspace.file_watch import IndexWatcher
from lsp_server.workspace.names import display_path
from lsp_server.workspace.repo_index import IndexConfig, RepoIndex

#: ``message(text, level)``: a log line for the user; ``level`` is ``log``, ``warning`` or ``error``.
Message = Callable[[str, str], None]


class Progress(Protocol):
    """Work-done progress of one scan (:class:`lsp_server.protocol.progress.ClientProgress`)."""

    async def begin(self) -> None: ...

    def report(self, message: str) -> None:
        """From any thread."""

    def end(self, message: str) -> None: ...


def choose_roots(candidates: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(the directories to index, [(directory refused, why)]): a home directory, a parent of it (``/``
    included) and the temporary directory itself are refused; duplicates are dropped."""
    roots: list[Path] = []
    refused: list[tuple[Path, str]] = []
    for candidate in candidates:
        why = refused_root(candidate)
        if why is not None:
            refused.append((candidate, why))
        elif candidate not in roots:
            roots.append(candidate)
    return roots, refused


class IndexService:
    """The repository index of the workspace folders and its file watcher.

    Args:
        on_file_changed: called with a file URI after the watcher updated the index (on the watcher's
            thread): the model session drops its n-gram source of the old text.
        message: where log lines for the user go (on the event loop).
    """

    def __init__(self, on_file_changed: Callable[[str], None], message: Message):
        self.on_file_changed = on_file_changed
        self.message = message
        self.repo: RepoIndex | None = None  # the index, once a scan ended
        self.building: RepoIndex | None = None  # the index being scanned
        self._watcher: IndexWatcher | None = None

    def state(self, enabled: bool) -> str:
        """``ready``, ``building`` or ``off``."""
        if self.repo is not None:
            return "ready"
        return "building" if self.building is not None and enabled else "off"

    def stop(self) -> None:
        """Stop the watcher and drop the index."""
        if self._watcher is not None:
            self._watcher.stop()
        self._watcher, self.repo = None, None

    async def rebuild(self, folders: list[Path], config: IndexConfig | None,
                      progress: Callable[[], Progress]) -> None:
        """Replace the index with a fresh scan of ``folders`` (none when ``config`` is ``None``: disabled).
        ``progress`` makes the scan's progress, once there is something to scan. Never raises: a failure
        is logged and completions go on without the index."""
        try:
            await self._rebuild(folders, config, progress)
        except Exception as exc:  # noqa: BLE001 - the server keeps serving without an index
            self.repo, self.building = None, None
            self.message(f"[speclsp] indexing failed: {type(exc).__name__}: {exc}", "error")

    def _roots(self, folders: list[Path]) -> list[Path]:
        roots, refused = choose_roots(folders)
        for root, why in refused:
            self.message(f"[speclsp] not indexing {display_path(root)}: it is {why}; open a project folder "
                         "(a repository or a folder with a pyproject.toml, package.json...) as the workspace "
                         "folder to index it", "warning")
        return roots

    async def _rebuild(self, folders: list[Path], config: IndexConfig | None,
                       progress: Callable[[], Progress]) -> None:
        self.stop()
        roots = self._roots(folders) if config is not None else []
        if config is None or not roots:
            reason = "disabled" if config is None else "no workspace folder to index"
            self.message(f"[speclsp] repository index off ({reason})", "log")
            return
        index = RepoIndex(roots, config)
        self.building = index
        sink = progress()
        await sink.begin()
        started = time.perf_counter()
        count = await asyncio.to_thread(index.scan, lambda count, path: sink.report(f"{count} files seen"))
        if self.building is not index:
            return  # a newer rebuild started meanwhile
        self.repo = index
        self._watcher = IndexWatcher(index, lambda path: self.on_file_changed(path.as_uri()))
        self._watcher.start()
        message = _summary(index, count, len(roots), 1000 * (time.perf_counter() - started), config)
        self.message(f"[speclsp] {message}", "warning" if index.partial else "log")
        sink.end(message)


def _summary(index: RepoIndex, count: int, folders: int, elapsed_ms: float, config: IndexConfig) -> str:
    skipped = ", ".join(f"{k}={v}" for k, v in sorted(index.skipped.items())) or "none"
    message = (f"indexed {count} files ({index.tokens} tokens est.) under {folders} folder(s) in "
               f"{elapsed_ms:.0f} ms; skipped: {skipped}")
    if index.partial:
        message += (f"; partial: stopped after {config.max_entries} directory entries (open a smaller "
                    "folder, or exclude large directories with index.exclude)")
    return message
