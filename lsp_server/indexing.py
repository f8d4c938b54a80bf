"""The indexing service: builds and keeps the repository index for the server, on ``initialized``,
when the workspace folders change and when the index settings change; with ``$/progress`` and a log line.

Indexing runs on its own thread, never on the model worker, so completions go on while it runs
(without the index until the scan ends). A watchdog observer keeps it current afterwards.

Roots are the workspace folders (or the root URI); a home directory, a parent of it and the temporary
directory itself are skipped with a warning (:func:`lsp_server.workspace.file_rules.refused_root`): a client that
roots a scratch file at its directory must not get ``/tmp`` or ``$HOME`` indexed wholesale.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types
from pygls import uris

from lsp_server.workspace.file_rules import refused_root
from lsp_server.workspace.file_watch import IndexWatcher
from lsp_server.workspace.names import display_path
from lsp_server.protocol.progress import begin_progress
from lsp_server.workspace.repo_index import RepoIndex

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


def workspace_folders(ls: SpeclspServer) -> list[Path]:
    """Local directories of the workspace folders (or the root URI when the client sent no folders)."""
    found = [uris.to_fs_path(folder.uri) for folder in ls.workspace.folders.values()]
    if not found and ls.workspace.root_uri:
        found = [uris.to_fs_path(ls.workspace.root_uri)]
    return [Path(p) for p in found if p and Path(p).is_dir()]


def workspace_roots(ls: SpeclspServer) -> list[Path]:
    """:func:`workspace_folders` without those never indexed (:func:`choose_roots`; each skipped one is
    reported as a warning)."""
    roots, refused = choose_roots(workspace_folders(ls))
    for root, why in refused:
        ls.tracer.message(f"[speclsp] not indexing {display_path(root)}: it is {why}; open a project folder "
                          "(a repository or a folder with a pyproject.toml, package.json...) as the workspace folder "
                          "to index it",
                          types.MessageType.Warning)
    return roots


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
    """

    def __init__(self, on_file_changed: Callable[[str], None]):
        self.on_file_changed = on_file_changed
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

    async def rebuild(self, ls: SpeclspServer) -> None:
        """Replace the index with a fresh scan of the current workspace folders (or none, if disabled).
        Never raises: a failure is logged and completions go on without the index."""
        try:
            await self._rebuild(ls)
        except Exception as exc:  # noqa: BLE001 - the server keeps serving without an index
            self.repo, self.building = None, None
            ls.tracer.message(f"[speclsp] indexing failed: {type(exc).__name__}: {exc}", types.MessageType.Error)

    async def _rebuild(self, ls: SpeclspServer) -> None:
        self.stop()
        ls.names.set_roots(workspace_folders(ls))  # documents are named relative to their folder in logs
        config = ls.settings.index_config()
        roots = workspace_roots(ls) if config is not None else []
        if config is None or not roots:
            reason = "disabled" if config is None else "no workspace folder to index"
            ls.tracer.message(f"[speclsp] repository index off ({reason})")
            return
        index = RepoIndex(roots, config)
        self.building = index
        token = await begin_progress(ls, "index", "speclsp: indexing")
        loop = asyncio.get_running_loop()

        def progress(count: int, path: str) -> None:  # on the indexing thread
            if token is not None:
                loop.call_soon_threadsafe(ls.work_done_progress.report, token,
                                          types.WorkDoneProgressReport(message=f"{count} files seen"))

        started = time.perf_counter()
        count = await asyncio.to_thread(index.scan, progress)
        if self.building is not index:
            return  # a newer rebuild started meanwhile
        self.repo = index
        self._watcher = IndexWatcher(index, lambda path: self.on_file_changed(path.as_uri()))
        self._watcher.start()
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(index.skipped.items())) or "none"
        message = (f"indexed {count} files ({index.tokens} tokens est.) under {len(roots)} folder(s) in "
                   f"{1000 * (time.perf_counter() - started):.0f} ms; skipped: {skipped}")
        if index.partial:
            message += (f"; partial: stopped after {config.max_entries} directory entries (open a smaller "
                        "folder, or exclude large directories with indexExclude)")
        ls.tracer.message(f"[speclsp] {message}", types.MessageType.Warning if index.partial else types.MessageType.Log)
        if token is not None:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
