"""Which backend the settings name, and building it on the model thread (:func:`load_backend`).

* ``local``: the speculative engine loads the target and draft models (:meth:`decoding.engine.Engine.load`).
  Inline completions are written by the target, or by the draft model as a target of its own (its
  weights shared, drafting from n-grams) while next edits stay with the pair: ``completion_model``
  ``draft``, or ``auto`` where a target step is too slow for a typist
  (:func:`decoding.choices.auto.draft_model_completes`). Then the loader returns a backend per role.
* ``openai`` / ``llamacpp-infill``: no model is loaded; generation goes to a remote serving engine
  (:mod:`lsp_server.backends.openai`, :mod:`lsp_server.backends.llamacpp_infill`). The prompt is still
  ours, budgeted in tokens and rendered in the model's FIM format, so the model's own tokenizer is
  loaded: the one of the ``model.target`` setting (a pack, a model directory, a ``.gguf`` file or a hub id);
  ``auto`` takes the installed Qwen2.5-Coder pack's (the 1.5B's, else the 0.5B's: one tokenizer for the
  whole family). Without it the backend does not start (a clear error): a character budget would not
  know the model's FIM tokens, and a prompt in another format would get poor completions.

``next_edit_model`` (local only): next edits are written by a model of their own (an edit-trained model, in
the prompt format of ``nextEdit.promptFormat``), loaded as a target without a draft model: the region
and the n-gram store draft for it, and its output is exactly its own greedy (or sampled) output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from decoding.types import EngineConfig
from lsp_server.backends.base import (
    BACKENDS,
    COMPLETION_MODELS,
    LLAMACPP_INFILL,
    LOCAL,
    ROLE_COMPLETION,
    ROLE_NEXT_EDIT,
    BackendConfig,
    RemoteConfig,
)

log = logging.getLogger(__name__)


def load_backend(config: BackendConfig | EngineConfig, on_stage: Callable[[str], None] | None = None):
    """The backend ``config`` names (an :class:`EngineConfig` alone: the local engine), or
    ``{role: backend}`` where inline completions and next edits are written by different local models.

    Raises:
        decoding.errors.ModelLoadError: a local model, or a remote backend's tokenizer, cannot load.
        ValueError: an unknown backend or ``completion_model``, or a remote one without an endpoint or with a
            malformed one. (``completion_model`` ``draft`` without a draft model: the target, and a warning.)
    """
    if isinstance(config, EngineConfig):
        config = BackendConfig(engine=config)
    if config.completion_model not in COMPLETION_MODELS:
        raise ValueError(f"unknown completion model {config.completion_model!r}; use one of {', '.join(COMPLETION_MODELS)}")
    if config.kind == LOCAL:  # torch and the engine load only here: a remote backend never imports them
        from decoding.choices.auto import draft_model_completes
        from decoding.engine import Engine
        from lsp_server.backends.local import LocalBackend

        engine = Engine.load(config.engine, on_stage)
        by_draft, choice = config.completion_model == "draft", config.completion_model
        if choice == "auto" and engine.draft is not None:
            by_draft, _ = draft_model_completes(engine.target, engine.draft)  # logs its choice
        if by_draft and engine.draft is None:
            log.warning("completion.model 'draft' needs a draft model and none is loaded: %s writes inline "
                        "completions", engine.target.name)
            by_draft = False
        if by_draft and config.engine.quantization == "auto":
            _keep_one_copy(engine)
        completion = LocalBackend(engine.draft_as_target() if by_draft else engine)
        next_edit = LocalBackend(engine) if by_draft else None
        if config.next_edit_model:
            next_edit = LocalBackend(Engine.load(replace(config.engine, model=config.next_edit_model, draft_model="none"),
                                                 on_stage))
        return completion if next_edit is None else {ROLE_COMPLETION: completion, ROLE_NEXT_EDIT: next_edit}
    if config.kind not in BACKENDS:
        raise ValueError(f"unknown backend {config.kind!r}; use one of {', '.join(BACKENDS)}")
    if config.next_edit_model:
        log.warning("nextEdit.model is for the local engine; with the %s backend the remote engine writes next "
                    "edits", config.kind)
    if config.remote is None or not config.remote.endpoint:
        raise ValueError(f"backend {config.kind!r} needs an endpoint (speclsp.remote.endpoint: the remote engine's URL)")
    return _load_remote(config.kind, config.remote, config.engine, on_stage)


def _keep_one_copy(engine) -> None:
    """Where the target writes next edits only and ``quantization`` is ``auto``, it keeps its long-pass
    weights alone (:meth:`decoding.engine.Engine.keep_long_pass_weights`), and the log says what that freed."""
    freed = engine.keep_long_pass_weights()
    if freed:
        log.info("quantization auto for %s: its long-pass weights alone: it writes next edits only, whose passes "
                 "are long and ran those weights already; %.1f GB of int8 weights freed",
                 engine.target.name, freed / 1e9)


def _load_remote(kind: str, config: RemoteConfig, engine_config: EngineConfig,
                 on_stage: Callable[[str], None] | None = None):
    """The remote backend ``kind`` for ``config``, with the tokenizer of ``engine_config.model``.

    Raises:
        ModelLoadError: no tokenizer. ValueError: a malformed endpoint.
    """
    from lsp_server.backends.http_stream import Endpoint
    from lsp_server.backends.llamacpp_infill import LlamaCppInfillBackend
    from lsp_server.backends.openai import OpenAICompletionsBackend
    from lsp_server.backends.remote import load_model_tokenizer

    Endpoint.parse(config.endpoint)  # a malformed endpoint fails before the tokenizer loads
    tokenizer, capabilities = load_model_tokenizer(engine_config.model, on_stage)
    cls = LlamaCppInfillBackend if kind == LLAMACPP_INFILL else OpenAICompletionsBackend
    return cls(config, tokenizer, capabilities)


#: Seconds :func:`preflight` waits for a remote engine to accept a connection (at most ``remote.timeoutSeconds``).
PROBE_TIMEOUT_S = 3.0


def preflight(config: BackendConfig) -> str | None:
    """What would make loading ``config`` fail, found without loading anything (``None``: nothing found,
    though the load itself may still fail): a model name that names nothing here (a missing directory or
    file, a pack not installed, an unknown name: :func:`decoding.weights.model_names.check_model_name`),
    an unknown backend, a remote backend without an endpoint, or one whose engine refuses connections.

    Reads package metadata and the file system, and opens (then closes) one TCP connection to a remote
    engine, waiting at most :data:`PROBE_TIMEOUT_S` seconds. Never raises.
    """
    from decoding.errors import ModelLoadError
    from decoding.weights.model_names import check_model_name

    try:
        names = [config.engine.model]
        if config.kind == LOCAL:
            names += [config.engine.draft_model, config.next_edit_model]
        for name in filter(None, names):
            check_model_name(name)
        if config.kind == LOCAL:
            return None
        if config.kind not in BACKENDS:
            return f"unknown backend {config.kind!r}; use one of {', '.join(BACKENDS)}"
        if config.remote is None or not config.remote.endpoint:
            return f"backend {config.kind!r} needs an endpoint (speclsp.remote.endpoint: the remote engine's URL)"
        return _endpoint_problem(config.remote)
    except (ModelLoadError, ValueError) as exc:
        return str(exc)


def _endpoint_problem(remote: RemoteConfig) -> str | None:
    """Why the engine at ``remote.endpoint`` cannot be reached (``None``: it accepts a TCP connection).

    Raises:
        ValueError: a malformed endpoint.
    """
    import socket

    from lsp_server.backends.http_stream import Endpoint

    endpoint = Endpoint.parse(remote.endpoint)
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=min(PROBE_TIMEOUT_S, remote.timeout_s)):
            return None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__  # a timeout has no strerror
        return (f"the engine at {remote.endpoint} does not accept connections ({reason}): start it, then change "
                "the setting again")
