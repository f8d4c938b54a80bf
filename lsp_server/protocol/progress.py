"""Work-done progress (``window/workDoneProgress/create`` + ``$/progress``) when the client supports it."""

from __future__ import annotations

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
