"""``speclsp/index`` (request, speclsp extension): what the repository index holds.

Answers ``{"state": "off" | "building" | "ready", "roots": [...], "files": [relative paths],
"tokens": estimated tokens, "skipped": {reason: count}}``. Paths only, never file contents.
"""

from __future__ import annotations

from typing import Any

INDEX_METHOD = "speclsp/index"


def register(server) -> None:
    @server.feature(INDEX_METHOD)
    def index_info(ls, params: Any = None) -> dict[str, Any]:
        index = ls.repo
        if index is None:
            building = getattr(ls, "repo_building", None) is not None and ls.settings.index_enabled
            return {"state": "building" if building else "off", "roots": [], "files": [], "tokens": 0, "skipped": {}}
        return {"state": "ready", "roots": [str(root) for root in index.roots],
                "files": sorted(index.relative(path) for path in index.paths()),
                "tokens": index.tokens, "skipped": dict(index.skipped)}
