"""The benchmarks' LSP client side: the real server started over stdio, and percentiles."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp_server.settings.spec import BY_OLD_KEY, setting_key


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))], 2)


async def _drain(stream: asyncio.StreamReader, path: Path) -> None:
    with open(path, "ab") as log:
        while chunk := await stream.read(65536):
            log.write(chunk)


def server_settings(items: list[str]) -> dict:
    """``--setting NAME=VALUE`` items -> initialization options (VALUE as JSON when it parses, else a string).
    NAME is a setting's key (``completion.promptLayout``); a flat name of the release before
    (``promptLayout``) is taken as its key now, so the commands in docs/ still run as written.

    Raises:
        SystemExit: an item without ``=``.
    """
    options = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--setting takes NAME=VALUE (a server setting, e.g. completion.promptLayout=tail), "
                             f"not {item!r}")
        name = setting_key(BY_OLD_KEY[name]) if name in BY_OLD_KEY else name
        try:
            options[name] = json.loads(value)
        except json.JSONDecodeError:
            options[name] = value
    return options


async def start_server(args: argparse.Namespace, trace_path: Path, name: str) -> LanguageClient:
    """The real server over stdio as client ``name``, initialized with ``args``' models, drafter and
    token cap, its trace to ``trace_path``, the index off; returns once the models are loaded, or their
    loading failed (``client.load_message``: the server's log line saying which)."""
    client = LanguageClient(name, "1")
    await client.start_io(sys.executable, "-m", "lsp_server.cli", "serve")
    # pygls pipes the server's stderr and never reads it: drained into a file, or the server's logging
    # blocks once the pipe's 64 KB are full (a typist's thousand requests fill it).
    client.stderr_drain = asyncio.ensure_future(_drain(client._server.stderr, trace_path.with_name("server.log")))
    ready = asyncio.Event()

    @client.feature("speclsp/status")
    def on_status(params) -> None:  # the server's status notifications: not measured here
        pass

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def on_log(params: types.LogMessageParams) -> None:
        if "models ready" in params.message or "model loading failed" in params.message:
            client.load_message = params.message  # which of the two: the caller may refuse a failed load
            ready.set()

    options = {"model.target": args.model, "model.draft": args.draft_model, "decoding.drafter": args.drafter,
               "completion.maxNewTokens": args.max_new_tokens, "trace.file": str(trace_path), "index.enabled": False}
    options.update(server_settings(getattr(args, "setting", None) or []))
    if getattr(args, "backend", "local") != "local":
        options.update({"remote.backend": args.backend, "remote.endpoint": args.endpoint,
                        "remote.model": args.remote_model, "remote.apiKeyEnv": args.api_key_env})
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         initialization_options=options))
    client.initialized(types.InitializedParams())
    await asyncio.wait_for(ready.wait(), timeout=300)
    return client
