"""One LSP feature per module; each exposes ``register(server)``, and :func:`create_server` registers them all."""

from __future__ import annotations

from collections.abc import Callable

from typing import Any

from lsp_server.features import (completion, document_state, document_sync, index_info, inline_completion, lifecycle,
                                 next_edit, status)
from lsp_server.server import SpeclspServer
from lsp_server.settings import Settings

FEATURES = (lifecycle, document_sync, inline_completion, completion, next_edit, status, index_info, document_state)


def create_server(loader: Callable[..., object] | None = None, base_settings: Settings | None = None,
                  session_factory: Callable[..., Any] | None = None) -> SpeclspServer:
    """A server with every feature registered.

    Args:
        loader: builds the generation backend from a :class:`~lsp_server.backends.base.BackendConfig`
            (``None``: :func:`lsp_server.backends.loading.load_backend`).
        base_settings: the settings before ``initializationOptions`` (``speclsp serve``'s flags).
        session_factory: builds the model session around the backend (tests: a fake session), called
            with the backend and the keywords ``names`` and ``defer_cold_parts`` (``None``: the model
            session, :class:`lsp_server.model.session.ModelSession`).
    """
    given = {"loader": loader, "session_factory": session_factory}
    server = SpeclspServer(base_settings=base_settings, **{k: v for k, v in given.items() if v is not None})
    for feature in FEATURES:
        feature.register(server)
    return server
