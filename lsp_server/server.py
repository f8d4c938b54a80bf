"""The pygls server object and its wiring: document store, model worker and session, the request
pipeline and its two services, settings, tracing.

Features live one per module in :mod:`lsp_server.features` and read and call the services declared
here; :func:`lsp_server.features.create_server` registers them. The two long-running jobs a feature
starts, loading the models and indexing the workspace, are methods here (:meth:`SpeclspServer.load_models`,
:meth:`SpeclspServer.reindex`), so that no feature touches the model thread or a backend.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types
from pygls import uris
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp_server import __version__
from decoding.weights.model_names import resolve_pair
from lsp_server.backends.base import BackendConfig
from lsp_server.backends.loading import load_backend, preflight
from lsp_server.model.session import ModelSession
from lsp_server.model.worker import ERROR, READY, ModelWorker
from lsp_server.protocol.envelope import ANSWERED
from lsp_server.protocol.progress import ClientProgress
from lsp_server.requests.completion_service import CompletionService
from lsp_server.requests.next_edit_service import NextEditService
from lsp_server.requests.pipeline import RequestPipeline
from lsp_server.settings import Settings
from lsp_server.status_board import StatusBoard
from lsp_server.tracing import RpcClock, Tracer
from lsp_server.workspace.documents import DocumentStore, MalformedChange, structure_change
from lsp_server.workspace.index_service import IndexService
from lsp_server.workspace.names import DisplayNames
from lsp_server.workspace.repo_index import RepoIndex

log = logging.getLogger(__name__)


def _strict_int(value: Any, _type: type) -> int:
    """cattrs' default turns ``"1"``, ``1.5`` and ``true`` into integers; a position or version sent so
    is a client bug, answered with InvalidParams instead of being guessed at."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"expected an integer, got {value!r}")


def _strict_bool(value: Any, _type: type) -> bool:
    """cattrs' default turns any value into a ``bool`` (``"false"`` is true): only JSON booleans are."""
    if isinstance(value, bool):
        return value
    raise TypeError(f"expected true or false, got {value!r}")


class SpeclspProtocol(LanguageServerProtocol):
    """pygls' protocol, except that documents live only in our store (pygls' workspace keeps no text:
    ``didOpen``, ``didChange`` and ``didClose`` go straight to our handlers, ``didChange`` with its
    parameters structured by us, so that one that does not fit marks its document out of sync); and
    that it notes when each request was read and its response written (``clock``, for tracing)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock = RpcClock()
        self._converter.register_structure_hook(int, _strict_int)
        self._converter.register_structure_hook(bool, _strict_bool)  # else bool fields dispatch to int's hook

    def structure_message(self, data):
        request = isinstance(data, dict) and "method" in data and "id" in data and "jsonrpc" in data
        if request:
            self.clock.received(data["id"])
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if not request:
                raise
            # pygls only logs a request whose params do not fit the method's types (a negative line,
            # a missing position); the client would wait for ever. Answer it with the error instead.
            self._send_response(data["id"], error=exc.to_response_error())
            return ANSWERED

    def _send_response(self, msg_id, result=None, error=None):
        if error is not None and error.code == types.ErrorCodes.InternalError:
            # A bug of ours: the client gets a plain message; Python's text and traceback go to the log.
            log.error("internal error answering request %r: %s\n%s", msg_id, error.message, error.data or "")
            error = types.ResponseError(code=error.code, message="Internal error: the server failed on this "
                                        "request; the details are in its log (stderr)")
        super()._send_response(msg_id, result, error)
        self.clock.responded(msg_id)

    # Documents: the store (lsp_server.workspace.documents) holds the one copy of each; pygls' workspace keeps
    # none (it would split and rejoin the whole text on every keystroke). Nothing reads its copies.
    def get_message_type(self, method: str):
        if method == types.TEXT_DOCUMENT_DID_CHANGE:
            return RawNotification  # parameters stay JSON: the handler structures them (structure_change)
        return super().get_message_type(method)

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: object):
        """``params`` as JSON (:class:`RawNotification`): the handler gets the structured parameters,
        or a :class:`~lsp_server.workspace.documents.MalformedChange` when they do not fit (not pygls' log line
        and a dropped change while the document stays "in sync")."""
        try:
            change = structure_change(self._converter, params)
        except MalformedChange as exc:
            change = exc
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (change,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None


@attrs.define
class RawNotification:
    """A notification whose parameters are left as JSON (``didChange``'s: see ``get_message_type``)."""

    method: str
    jsonrpc: str
    params: Any = None


class SpeclspServer(LanguageServer):
    """speclsp's language server: the state every feature shares, declared here.

    Features (one per module in :mod:`lsp_server.features`) read and call these services; only the
    model worker's thread touches the model session (the pipeline submits all such work there).
    """

    settings: Settings  # the current settings (replaced whole on a configuration change)
    store: DocumentStore  # open documents
    names: DisplayNames  # documents' short names in logs and stats (the workspace folders)
    worker: ModelWorker  # the model thread and the model session it owns (lsp_server.model.session)
    tracer: Tracer  # request logs and $/logTrace
    status: StatusBoard  # speclsp/status
    index: IndexService  # the repository index and its watcher
    pipeline: RequestPipeline  # resolution, guards, the model thread, document events
    completions: CompletionService  # completion requests
    next_edits: NextEditService  # next-edit requests and the edit history
    pending_warnings: list[str]  # settings warnings from initialize, shown once initialized
    good_settings: Settings | None  # the settings whose backend loaded last (kept when a change cannot load)

    def __init__(self, loader: Callable[..., object] = load_backend, base_settings: Settings | None = None,
                 session_factory: Callable[..., ModelSession] = ModelSession,
                 check_backend: Callable[[BackendConfig], str | None] = preflight):
        super().__init__("speclsp", __version__, protocol_cls=SpeclspProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.base_settings = base_settings or Settings()  # the command line's; initializationOptions apply on top
        self.settings = self.base_settings
        self.store = DocumentStore()
        self.names = DisplayNames()
        self.worker = ModelWorker(loader, functools.partial(session_factory, names=self.names, defer_cold_parts=True))
        self.tracer = Tracer(self.window_log_message, self.log_trace, self.trace_value, names=self.names)
        self.status = StatusBoard(self._notify)
        self.pipeline = RequestPipeline(self.store, self.worker, self.tracer, self._current_settings, self.names,
                                        rpc=self._rpc, notify_user=self.show_message, on_done=self.status.request_done)
        self.next_edits = NextEditService(self.pipeline, self._notify)
        self.completions = CompletionService(self.pipeline, self.next_edits, self._repo)
        self.index = IndexService(self.pipeline.file_changed, self._log_message)
        self.pending_warnings = []
        self.good_settings = None
        self._preflight = check_backend

    def _current_settings(self) -> Settings:
        return self.settings

    def _repo(self) -> RepoIndex | None:
        return self.index.repo

    def _rpc(self) -> tuple[object, RpcClock]:
        """The JSON-RPC message id being handled and the protocol's clock (for a request's ``total``)."""
        return self.protocol.msg_id, self.protocol.clock

    def _notify(self, method: str, params: object) -> None:
        self.protocol.notify(method, params)

    def show_message(self, text: str, kind: types.MessageType) -> None:
        """``window/showMessage`` (never raises: a closed transport must not fail the request)."""
        try:
            self.window_show_message(types.ShowMessageParams(type=kind, message=text))
        except Exception:  # noqa: BLE001
            log.debug("could not show a message", exc_info=True)

    def _log_message(self, text: str, level: str) -> None:
        kinds = {"error": types.MessageType.Error, "warning": types.MessageType.Warning}
        self.tracer.message(text, kinds.get(level, types.MessageType.Log))

    def workspace_folders(self) -> list[Path]:
        """Local directories of the workspace folders (or the root URI when the client sent no folders)."""
        found = [uris.to_fs_path(folder.uri) for folder in self.workspace.folders.values()]
        if not found and self.workspace.root_uri:
            found = [uris.to_fs_path(self.workspace.root_uri)]
        return [Path(p) for p in found if p and Path(p).is_dir()]

    async def reindex(self) -> None:
        """Rebuild the repository index of the current workspace folders (never raises)."""
        folders = self.workspace_folders()
        self.names.set_roots(folders)  # documents are named relative to their folder in logs
        await self.index.rebuild(folders, self.settings.index_config(),
                                 lambda: ClientProgress(self, "index", "speclsp: indexing"))

    async def load_models(self) -> None:
        """Load the configured backend (the models, or a remote engine's client) on the model thread,
        reporting progress to the client when it can.

        When it fails while earlier settings had loaded, those settings' backend fields are restored
        and loaded again, and one warning says so: the server keeps serving with the last good settings.
        """
        settings = self.settings
        state = await self._load(settings, announce_failure=self.good_settings is None)
        if state == READY or self.good_settings is None or self.settings is not settings:
            return  # loaded, nothing to go back to, or newer settings arrived meanwhile
        good = self.good_settings
        if state != ERROR or good.backend_config() == settings.backend_config():
            if state == ERROR:
                self._load_failed()
            return
        target = _describe(good.backend_config())[0]
        self.warn([f"could not switch to {self._naming(settings)}: {self.worker.error}; going back to the last "
                   f"settings that loaded ({target})"])
        self.settings = settings.with_backend_of(good)
        if await self._load(self.settings, announce_failure=True) != READY:
            self.good_settings = None

    async def switch_backend(self, old: Settings) -> None:
        """Apply a configuration change that names another backend (``self.settings``, replacing ``old``).

        While models are serving, a change that cannot load (:func:`lsp_server.backends.loading.preflight`:
        a model that names nothing here, an engine that refuses connections) is not tried: the backend
        fields of ``old`` are kept, one warning says why, and the loaded models go on answering.
        """
        if self.worker.state == READY:
            settings = self.settings
            problem = await asyncio.to_thread(self._preflight, settings.backend_config())
            if self.settings.backend_config() != settings.backend_config():
                return  # another change of the backend arrived meanwhile: its own handler switches
            if problem is not None:  # (other fields a later change set meanwhile apply)
                self.settings = self.settings.with_backend_of(old)
                target = _describe(old.backend_config())[0]
                self.warn([f"not switching to {self._naming(settings)}: {problem}; still serving with {target}"])
                return
        await self.load_models()

    @staticmethod
    def _naming(settings: Settings) -> str:
        """The backend ``settings`` name, for a message: ``model.target 'x'`` or ``backend 'openai' at URL``."""
        config = settings.backend_config()
        if config.remote is not None:
            return f"backend {config.kind!r} at {config.remote.endpoint or '(no endpoint)'}"
        return f"model.target {config.engine.model!r}" + (
            f", model.draft {config.engine.draft_model!r}" if config.engine.draft_model not in ("auto", "none") else "")

    async def _load(self, settings: Settings, announce_failure: bool) -> str:
        """Load ``settings``' backend; returns the worker's state afterwards (``ready``, ``error``, or
        ``loading`` when a newer load superseded this one). ``announce_failure``: show a failure to the
        user here (else the caller does)."""
        config = settings.backend_config()
        target, draft, where = _describe(config)
        progress = ClientProgress(self, "load", "speclsp: loading models", target)
        await progress.begin()

        loop = asyncio.get_running_loop()

        def report(stage: str) -> None:  # on the event loop
            self.tracer.message(f"[speclsp] {stage}")
            progress.report(stage)

        def on_stage(stage: str) -> None:  # on the worker thread
            loop.call_soon_threadsafe(report, stage)

        self.tracer.message(f"[speclsp] loading models: backend={config.kind} target={target} draft={draft} "
                            f"device={where} dtype={config.engine.dtype}")
        self.status.model_state("loading", f"loading {target}", target, draft, where)
        state = await asyncio.wrap_future(self.worker.load(config, on_stage))
        if state == READY:
            self.good_settings = settings
            message = self._loaded()
        elif state == ERROR:
            message = f"model loading failed: {self.worker.error}"
            if announce_failure:
                self._load_failed()
        else:
            message = "superseded by newer settings"
        self.tracer.message(f"[speclsp] {message}", types.MessageType.Info if state == READY else types.MessageType.Error)
        progress.end(message)
        return state

    def _loaded(self) -> str:
        loaded = self.worker.loaded
        message = f"models ready: target={loaded.target} on {loaded.device} ({loaded.dtype}), draft={loaded.draft}"
        if loaded.next_edit:
            message += f"; next edits: {loaded.next_edit}"
        self.status.model_state("ready", message, loaded.target, loaded.draft, loaded.device)
        for document in self.store.all():  # opened before these models: tokenised ahead in the new session too
            self.pipeline.document_opened(document)
        if loaded.notice:
            self.warn([loaded.notice])
        return message

    def _load_failed(self) -> str:
        message = f"model loading failed: {self.worker.error}"
        self.status.model_state("error", message)
        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"speclsp: {message}"))
        return message

    def warn(self, warnings: list[str]) -> None:
        """Each warning as ``window/showMessage`` and a log line."""
        for warning in warnings:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                             message=f"speclsp: {warning}"))
            self.tracer.message(f"[speclsp] {warning}", types.MessageType.Warning)

    def trace_value(self) -> str:
        """The effective trace value: the client's, or the ``trace.level`` setting when the client's is off."""
        client = getattr(self.protocol, "trace", None)
        client = getattr(client, "value", client) or "off"
        return client if client != "off" else self.settings.trace_level


def _describe(config: BackendConfig) -> tuple[str, str, str]:
    """(target, draft, where) for the messages before loading (reads package metadata only)."""
    if config.remote is not None:
        return config.remote.model or "remote model", "engine's own", config.remote.endpoint
    pair = resolve_pair(config.engine.model, config.engine.draft_model)
    return pair.target, pair.draft, config.engine.device
