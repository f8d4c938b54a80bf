"""``initialize``, ``initialized``, ``workspace/didChangeConfiguration`` and ``shutdown``.

* ``initialize``: settings from ``initializationOptions`` (invalid values: ``window/showMessage``
  warning, defaults kept); the position encoding pygls negotiated from the client's
  ``general.positionEncodings`` is what every position of ours uses.
* ``initialized``: models load in the background with work-done progress (``$/progress``) when the
  client supports it; requests before they are ready get an empty answer.
* ``workspace/didChangeConfiguration``: new settings; a changed model reloads in the background.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types

from decoding.weights.model_names import resolve_pair
from lsp_server.backends.base import BackendConfig
from lsp_server.protocol.progress import begin_progress
from lsp_server.settings import parse_settings
from lsp_server.model.worker import READY

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer

def _apply(ls: SpeclspServer, warnings: list[str]) -> list[str]:
    """Apply settings that take effect at once (the trace file); returns ``warnings`` plus any problem."""
    problem = ls.tracer.set_trace_file(ls.settings.trace_file)
    return warnings + ([problem] if problem else [])


def _warn(ls: SpeclspServer, warnings: list[str]) -> None:
    for warning in warnings:
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"speclsp: {warning}"))
        ls.tracer.message(f"[speclsp] {warning}", types.MessageType.Warning)


def _describe(config: BackendConfig) -> tuple[str, str, str]:
    """(target, draft, where) for the messages before loading (reads package metadata only)."""
    if config.remote is not None:
        return config.remote.model or "remote model", "engine's own", config.remote.endpoint
    pair = resolve_pair(config.engine.model, config.engine.draft_model)
    return pair.target, pair.draft, config.engine.device


async def load_models(ls: SpeclspServer) -> None:
    """Load the configured backend (the models, or a remote engine's client) on the worker, reporting
    progress to the client when it can."""
    loop = asyncio.get_running_loop()
    config = ls.settings.backend_config()
    target, draft, where = _describe(config)
    token = await begin_progress(ls, "load", "speclsp: loading models", target)

    def report(stage: str) -> None:  # on the event loop
        ls.tracer.message(f"[speclsp] {stage}")
        if token is not None:
            ls.work_done_progress.report(token, types.WorkDoneProgressReport(message=stage))

    def on_stage(stage: str) -> None:  # on the worker thread
        loop.call_soon_threadsafe(report, stage)

    ls.tracer.message(f"[speclsp] loading models: backend={config.kind} target={target} draft={draft} "
                      f"device={where} dtype={config.engine.dtype}")
    ls.status.model_state("loading", f"loading {target}", target, draft, where)
    state = await asyncio.wrap_future(ls.worker.load(config, on_stage))
    if state == READY:
        loaded = ls.worker.loaded
        message = f"models ready: target={loaded.target} on {loaded.device} ({loaded.dtype}), draft={loaded.draft}"
        if loaded.next_edit:
            message += f"; next edits: {loaded.next_edit}"
        ls.status.model_state("ready", message, loaded.target, loaded.draft, loaded.device)
        for document in ls.store.all():  # opened before these models: tokenised ahead in the new session too
            ls.pipeline.document_opened(document)
        if loaded.notice:
            _warn(ls, [loaded.notice])
    else:
        message = f"model loading failed: {ls.worker.error}"
        ls.status.model_state("error", message)
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"speclsp: {message}"))
    ls.tracer.message(f"[speclsp] {message}", types.MessageType.Info if state == READY else types.MessageType.Error)
    if token is not None:
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))


def register(server: SpeclspServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: SpeclspServer, params: types.InitializeParams) -> None:
        ls.settings, warnings = parse_settings(params.initialization_options, base=ls.base_settings)
        if params.trace is not None:  # pygls only follows $/setTrace
            ls.protocol.trace = params.trace
        ls.pipeline.position_encoding = ls.workspace.position_encoding
        ls.pending_warnings = _apply(ls, warnings)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: SpeclspServer, params: types.InitializedParams) -> None:
        _warn(ls, ls.pending_warnings)
        ls.tracer.message(f"[speclsp] position encoding: {ls.pipeline.position_encoding}")
        indexing = asyncio.ensure_future(ls.index.rebuild(ls))
        await load_models(ls)
        await indexing

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: SpeclspServer, params: types.DidChangeConfigurationParams) -> None:
        old = ls.settings
        ls.settings, warnings = parse_settings(params.settings, base=old)
        _warn(ls, _apply(ls, warnings))
        if ls.settings.index_config() != old.index_config():
            asyncio.ensure_future(ls.index.rebuild(ls))
        if ls.settings.backend_config() != old.backend_config():
            await load_models(ls)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def did_change_workspace_folders(ls: SpeclspServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        await ls.index.rebuild(ls)  # pygls has already updated ls.workspace.folders

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: SpeclspServer, *args) -> None:
        ls.index.stop()
        ls.worker.shutdown()
