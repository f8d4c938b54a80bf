"""The status board: the model state and the last request's figures, and their broadcast to the client
as the ``speclsp/status`` notification (the request of the same name is :mod:`lsp_server.features.status`)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

STATUS_METHOD = "speclsp/status"


class StatusBoard:
    """The current status and its broadcast to the client."""

    def __init__(self, notify):
        self._notify = notify  # callable(method, params)
        self.payload: dict[str, Any] = {"state": "idle", "message": "starting", "model": None,
                                        "draftModel": None, "device": None}

    def model_state(self, state: str, message: str, model: str | None = None, draft_model: str | None = None,
                    device: str | None = None) -> None:
        """Record a model state change (loading / ready / error) and tell the client."""
        self.payload.update(state=state, message=message)
        if model is not None:
            self.payload.update(model=model, draftModel=draft_model, device=device)
        self._send()

    def request_done(self, total_ms: float, completion) -> None:
        """Record an answered completion's end-to-end latency and acceptance and tell the client."""
        stats = completion.generation.stats
        drafted = sum(s.drafted for s in stats.sources.values())
        accepted = sum(s.accepted for s in stats.sources.values())
        self.payload.update(lastLatencyMs=round(total_ms, 1), tokensPerPass=round(stats.tokens_per_pass, 2),
                            acceptance=round(accepted / drafted, 3) if drafted else None)
        self._send()

    def _send(self) -> None:
        try:
            self._notify(STATUS_METHOD, dict(self.payload))
        except Exception:  # noqa: BLE001 - a closed transport must not fail the request being answered
            log.debug("could not send %s", STATUS_METHOD, exc_info=True)
