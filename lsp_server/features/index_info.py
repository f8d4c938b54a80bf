"""``speclsp/index`` (request, speclsp extension): what the repository index holds.

Answers ``{"state": "off" | "building" | "ready", "roots": [...], "files": [relative paths],
"tokens": estimated tokens, "skipped": {reason: count}}``. Paths only, never file contents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer

INDEX_METHOD = "speclsp/index"


def index_info(ls: SpeclspServer, params: Any = None) -> dict[str, Any]:
    index = ls.index.repo
    if index is None:
        return {"state": ls.index.state(ls.settings.index_enabled), "roots": [], "files": [], "tokens": 0,
                "skipped": {}}
    return {"state": "ready", "roots": [str(root) for root in index.roots],
            "files": sorted(index.relative(path) for path in index.paths()),
            "tokens": index.tokens, "skipped": dict(index.skipped)}


def register(server: SpeclspServer) -> None:
    server.feature(INDEX_METHOD)(index_info)
