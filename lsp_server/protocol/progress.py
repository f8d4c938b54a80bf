"""Work-done progress (``window/workDoneProgress/create`` + ``$/progress``) when the client supports it."""

from __future__ import annotations

import asyncio
import itertools

from lsprotocol import types

_tokens = itertools.count(1)


async def begin_progress(ls, kind: str, title: str, message: str | None = None) -> str | None:
    """Create and begin a progress token; ``None`` when the client has no work-done progress or
    refuses it (the caller's work goes on without progress, with a log line saying so)."""
    if not getattr(getattr(ls.client_capabilities, "window", None), "work_done_progress", False):
        return None
    token = f"speclsp-{kind}-{next(_tokens)}"
    try:
        await ls.work_done_progress.create_async(token)
        ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, message=message, cancellable=False))
    except Exception as exc:  # noqa: BLE001 - a client refusing progress must not stop the work
        ls.tracer.message(f"[speclsp] work-done progress unavailable: {exc}", types.MessageType.Warning)
        return None
    return token


class ClientProgress:
    """One piece of work's progress shown by the client: :meth:`begin` on the event loop, :meth:`report`
    from any thread, :meth:`end`; each a no-op where the client has no work-done progress."""

    def __init__(self, ls, kind: str, title: str, message: str | None = None):
        self._ls, self._kind, self._title, self._message = ls, kind, title, message
        self._token: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def begin(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._token = await begin_progress(self._ls, self._kind, self._title, self._message)

    def report(self, message: str) -> None:
        if self._token is None or self._loop is None:
            return
        params = types.WorkDoneProgressReport(message=message)
        if _running_loop() is self._loop:
            self._ls.work_done_progress.report(self._token, params)
        else:
            self._loop.call_soon_threadsafe(self._ls.work_done_progress.report, self._token, params)

    def end(self, message: str) -> None:
        if self._token is not None:
            self._ls.work_done_progress.end(self._token, types.WorkDoneProgressEnd(message=message))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
