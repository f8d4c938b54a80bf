"""``textDocument/didOpen``, ``textDocument/didChange`` (incremental) and ``textDocument/didClose``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from lsp_server.positions import PositionError, codec_for

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


def register(server: SpeclspServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: SpeclspServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.store.open(params.text_document)
        ls.service.document_opened(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: SpeclspServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.service.cancel_document(uri)  # the text the generation started from is gone
        try:
            ls.store.change(params, codec_for(ls.service.position_encoding))
        except KeyError:
            ls.tracer.message(f"[speclsp] didChange for {uri}, which is not open; ignored", types.MessageType.Warning)
        except PositionError as exc:
            ls.tracer.message(f"[speclsp] didChange for {uri} has a range outside the document ({exc}); "
                              "no completions for it until it is reopened or fully resent", types.MessageType.Error)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: SpeclspServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.store.close(uri)
        ls.service.document_closed(uri)  # on the model thread: the engine forgets its text and caches
