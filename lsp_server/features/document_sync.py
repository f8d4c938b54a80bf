"""``textDocument/didOpen``, ``textDocument/didChange`` (incremental) and ``textDocument/didClose``.

A ``didChange`` arrives structured by the protocol (:class:`lsp_server.server.SpeclspProtocol`), or as
a :class:`~lsp_server.workspace.documents.MalformedChange` when its parameters do not fit the protocol's types:
its document is then out of sync (an error in the log; no completions from stale text) until a
full-text change or a reopen. Each applied change is also noted in the document's edit history
(:mod:`lsp_server.workspace.edit_history`), for next-edit suggestions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from lsp_server.workspace.documents import MalformedChange
from lsp_server.workspace.positions import codec_for

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


def did_open(ls: SpeclspServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.pipeline.document_opened(ls.store.open(params.text_document))


def did_change(ls: SpeclspServer, params: types.DidChangeTextDocumentParams | MalformedChange) -> None:
    if isinstance(params, MalformedChange):
        lost_change(ls, params)
        return
    uri = params.text_document.uri
    ls.pipeline.cancel_document(uri)  # the text the generations and work ahead started from is gone
    before, applied = ls.store.get(uri), []
    try:
        after = ls.store.change(params, codec_for(ls.pipeline.position_encoding), applied)
    except KeyError:
        ls.tracer.message(f"[speclsp] didChange for {ls.names(uri)}, which is not open; ignored",
                          types.MessageType.Warning)
        return
    if before is not None and before.in_sync and after.in_sync:  # the user's recent edits, for next edits
        ls.next_edits.history.record(before, after, applied)
    one = len(applied) == 1 and isinstance(params.content_changes[0], types.TextDocumentContentChangePartial)
    cursor = applied[0][0] + len(applied[0][2]) if one else None  # the cursor after it
    ls.completions.changed(after, cursor)
    ls.next_edits.changed(after, cursor)


def did_close(ls: SpeclspServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.store.close(uri)
    ls.pipeline.document_closed(uri)  # the services forget it, and the session its text and caches


def lost_change(ls: SpeclspServer, malformed: MalformedChange) -> None:
    """A ``didChange`` that could not be read: mark its document out of sync (when its URI is known
    and it is open) and log an error either way."""
    if malformed.uri is None:
        ls.tracer.message(f"[speclsp] a didChange that names no document could not be read ({malformed}); "
                          "ignored", types.MessageType.Error)
        return
    ls.pipeline.cancel_document(malformed.uri)
    name = ls.names(malformed.uri)
    marked = ls.store.mark_out_of_sync(malformed.uri, f"a didChange could not be read ({malformed})")
    if marked is None:
        ls.tracer.message(f"[speclsp] didChange for {name}, which is not open, could not be read "
                          f"({malformed}); ignored", types.MessageType.Error)
        return
    ls.tracer.message(f"[speclsp] didChange for {name} could not be read ({malformed}); no completions "
                      "for it until it is reopened or its full text is sent", types.MessageType.Error)


def register(server: SpeclspServer) -> None:
    server.feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open)
    server.feature(types.TEXT_DOCUMENT_DID_CHANGE)(did_change)
    server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close)
