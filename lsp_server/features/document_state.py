"""``speclsp/documentState`` (request, speclsp extension): what the server holds of one open document, so a
client (the typing fuzz, bench/typing_fuzz.py) can check that it is in sync without reading code text.

Params ``{"textDocument": {"uri"}}``; answers ``null`` when the document is not open, else
``{"version": int, "inSync": bool, "length": int (UTF-16 code units), "sha256": hex digest of the UTF-8
text}``. A digest, never the text.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from lsp_server.features.next_edit import _field

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer

DOCUMENT_STATE_METHOD = "speclsp/documentState"


def text_digest(text: str) -> str:
    """The SHA-256 of ``text`` in UTF-8 (lone surrogates, which the store never holds, as U+FFFD)."""
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def document_state(ls: SpeclspServer, params: Any = None) -> dict[str, Any] | None:
    document_id = _field(params, "textDocument") if params is not None else None
    uri = _field(document_id, "uri") if document_id is not None else None
    document = ls.store.get(uri) if isinstance(uri, str) else None
    if document is None:
        return None
    return {"version": document.version, "inSync": document.in_sync,
            "length": len(document.text.encode("utf-16-le")) // 2, "sha256": text_digest(document.text)}


def register(server: SpeclspServer) -> None:
    server.feature(DOCUMENT_STATE_METHOD)(document_state)
