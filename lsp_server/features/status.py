"""``speclsp/status``: model state and the last request's figures, for editor status displays.

A speclsp extension of LSP, in both directions:

* notification ``speclsp/status`` (server to client), sent when model loading starts, ends or fails
  and after each answered completion request;
* request ``speclsp/status`` (client to server), answered with the current status at any time.

Payload (camelCase JSON): ``state`` (``idle`` | ``loading`` | ``ready`` | ``error``), ``message``,
``model``, ``draftModel``, ``device``, and once a completion has run ``lastLatencyMs`` (end-to-end ms),
``tokensPerPass`` and ``acceptance`` (accepted / drafted tokens of that request; ``null`` without drafts).
No code text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsp_server.status_board import STATUS_METHOD

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


def status(ls: SpeclspServer, params: Any = None) -> dict[str, Any]:
    return dict(ls.status.payload)


def register(server: SpeclspServer) -> None:
    server.feature(STATUS_METHOD)(status)
