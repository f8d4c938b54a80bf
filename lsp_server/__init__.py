"""speclsp's language server: the protocol loop, documents and positions, the request pipeline, one LSP
feature per module, backends and tracing. Model work runs on one worker thread, as operations of the
model session (:mod:`lsp_server.model.session`)."""

__version__ = "0.1.0"
