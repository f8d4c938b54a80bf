"""The pygls server object and its wiring: document store, model worker, settings, tracing.

Features live one per module in :mod:`lsp_server.features`; each registers its handlers here.
"""

from __future__ import annotations

from collections.abc import Callable

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from decoding.engine import Engine
from lsp_server import __version__
from lsp_server.documents import DocumentStore
from lsp_server.service import CompletionService
from lsp_server.settings import Settings
from lsp_server.tracing import Tracer
from lsp_server.worker import ModelWorker


class SpeclspServer(LanguageServer):
    """speclsp's language server state."""

    def __init__(self, loader: Callable[..., Engine] = Engine.load):
        super().__init__("speclsp", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.settings = Settings()
        self.store = DocumentStore()
        self.worker = ModelWorker(loader)
        self.tracer = Tracer(self.window_log_message)
        self.service = CompletionService(self.store, self.worker, self.tracer, lambda: self.settings)


def create_server(loader: Callable[..., Engine] = Engine.load) -> SpeclspServer:
    """A server with every feature registered."""
    from lsp_server.features import completion, document_sync, inline_completion, lifecycle

    server = SpeclspServer(loader)
    for feature in (lifecycle, document_sync, inline_completion, completion):
        feature.register(server)
    return server
