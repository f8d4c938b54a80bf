"""``initialize``, ``initialized``, ``workspace/didChangeConfiguration``,
``workspace/didChangeWorkspaceFolders`` and ``shutdown``.

* ``initialize``: settings from ``initializationOptions`` (invalid values: ``window/showMessage``
  warning, defaults kept); the position encoding pygls negotiated from the client's
  ``general.positionEncodings`` is what every position of ours uses.
* ``initialized``: models load in the background with work-done progress (``$/progress``) when the
  client supports it (:meth:`lsp_server.server.SpeclspServer.load_models`); requests before they are
  ready get an empty answer. The workspace is indexed meanwhile (:meth:`~lsp_server.server.SpeclspServer.reindex`).
* ``workspace/didChangeConfiguration``: new settings; a changed model reloads in the background. A model
  or backend that cannot load leaves the loaded one serving, with the last good settings, and says why
  (:meth:`lsp_server.server.SpeclspServer.switch_backend`, :meth:`~lsp_server.server.SpeclspServer.load_models`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types

from lsp_server.settings import parse_settings

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


def _apply(ls: SpeclspServer, warnings: list[str]) -> list[str]:
    """Apply settings that take effect at once (the trace file); returns ``warnings`` plus any problem."""
    problem = ls.tracer.set_trace_file(ls.settings.trace_file)
    return warnings + ([problem] if problem else [])


def initialize(ls: SpeclspServer, params: types.InitializeParams) -> None:
    ls.settings, warnings = parse_settings(params.initialization_options, base=ls.base_settings)
    if params.trace is not None:  # pygls only follows $/setTrace
        ls.protocol.trace = params.trace
    ls.pipeline.position_encoding = ls.workspace.position_encoding
    ls.pending_warnings = _apply(ls, warnings)


async def initialized(ls: SpeclspServer, params: types.InitializedParams) -> None:
    ls.warn(ls.pending_warnings)
    ls.tracer.message(f"[speclsp] position encoding: {ls.pipeline.position_encoding}")
    indexing = asyncio.ensure_future(ls.reindex())
    await ls.load_models()
    await indexing


async def did_change_configuration(ls: SpeclspServer, params: types.DidChangeConfigurationParams) -> None:
    old = ls.settings
    ls.settings, warnings = parse_settings(params.settings, base=old)
    ls.warn(_apply(ls, warnings))
    if ls.settings.index_config() != old.index_config():
        asyncio.ensure_future(ls.reindex())
    if ls.settings.backend_config() != old.backend_config():
        await ls.switch_backend(old)


async def did_change_workspace_folders(ls: SpeclspServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    await ls.reindex()  # pygls has already updated ls.workspace.folders


def shutdown(ls: SpeclspServer, *args) -> None:
    ls.index.stop()
    ls.worker.shutdown()


def register(server: SpeclspServer) -> None:
    server.feature(types.INITIALIZE)(initialize)
    server.feature(types.INITIALIZED)(initialized)
    server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(did_change_configuration)
    server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)(did_change_workspace_folders)
    server.feature(types.SHUTDOWN)(shutdown)
