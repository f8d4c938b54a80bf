"""Building and keeping the repository index for the server: on ``initialized``, when the workspace
folders change, and when the index settings change; with ``$/progress`` and a log line.

Indexing runs on its own thread, never on the model worker, so completions go on while it runs
(without the index until the scan ends). A watchdog observer keeps it current afterwards.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lsprotocol import types
from pygls import uris

from lsp_server.file_watch import IndexWatcher
from lsp_server.progress import begin_progress
from lsp_server.repo_index import RepoIndex

def workspace_roots(ls) -> list[Path]:
    """Local directories of the workspace folders (or the root URI when the client sent no folders)."""
    found = [uris.to_fs_path(folder.uri) for folder in ls.workspace.folders.values()]
    if not found and ls.workspace.root_uri:
        found = [uris.to_fs_path(ls.workspace.root_uri)]
    return [Path(p) for p in found if p and Path(p).is_dir()]


def stop_index(ls) -> None:
    watcher = getattr(ls, "index_watcher", None)
    if watcher is not None:
        watcher.stop()
    ls.index_watcher = None
    ls.repo = None


async def rebuild_index(ls) -> None:
    """Replace the index with a fresh scan of the current workspace folders (or none, if disabled).
    Never raises: a failure is logged and completions go on without the index."""
    try:
        await _rebuild(ls)
    except Exception as exc:  # noqa: BLE001 - the server keeps serving without an index
        ls.repo, ls.repo_building = None, None
        ls.tracer.message(f"[speclsp] indexing failed: {exc}", types.MessageType.Error)


async def _rebuild(ls) -> None:
    stop_index(ls)
    config = ls.settings.index_config()
    roots = workspace_roots(ls)
    if config is None or not roots:
        ls.tracer.message(f"[speclsp] repository index off ({'disabled' if config is None else 'no workspace folder'})")
        return
    index = RepoIndex(roots, config)
    ls.repo_building = index
    token = await begin_progress(ls, "index", "speclsp: indexing")
    loop = asyncio.get_running_loop()

    def progress(count: int, path: str) -> None:  # on the indexing thread
        if token is not None:
            loop.call_soon_threadsafe(ls.work_done_progress.report, token,
                                      types.WorkDoneProgressReport(message=f"{count} files seen"))

    started = time.perf_counter()
    count = await asyncio.to_thread(index.scan, progress)
    if getattr(ls, "repo_building", None) is not index:
        return  # a newer rebuild started meanwhile
    ls.repo = index

    def forget(path: Path) -> None:  # on the watcher's thread: drop the engine's n-gram index of old text
        try:
            ls.worker.submit(lambda engine: engine.forget_source(path.as_uri()))
        except RuntimeError:
            pass  # models not loaded: nothing cached

    ls.index_watcher = IndexWatcher(index, forget)
    ls.index_watcher.start()
    skipped = ", ".join(f"{k}={v}" for k, v in sorted(index.skipped.items())) or "none"
    message = (f"indexed {count} files ({index.tokens} tokens est.) under {len(roots)} folder(s) in "
               f"{1000 * (time.perf_counter() - started):.0f} ms; skipped: {skipped}")
    ls.tracer.message(f"[speclsp] {message}")
    if token is not None:
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
