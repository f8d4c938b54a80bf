"""``textDocument/didOpen``, ``textDocument/didChange`` (incremental) and ``textDocument/didClose``."""

from __future__ import annotations

from lsprotocol import types

from lsp_server.positions import PositionError, codec_for


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        ls.store.open(params.text_document)
        ls.service.document_opened(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params: types.DidChangeTextDocumentParams) -> None:
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
    def did_close(ls, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.service.cancel_document(uri)
        ls.service.type_through.forget(uri)
        ls.store.close(uri)
        ls.service.document_closed(uri)
        if ls.worker.engine is not None:
            ls.worker.engine.forget_source(uri)
