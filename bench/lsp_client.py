"""The benchmarks' LSP client side: the real server started over stdio, and percentiles."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient


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

    Raises:
        SystemExit: an item without ``=``.
    """
    options = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--setting takes NAME=VALUE (a server setting, e.g. promptLayout=tail), not {item!r}")
        try:
            options[name] = json.loads(value)
        except json.JSONDecodeError:
            options[name] = value
    return options


async def start_server(args: argparse.Namespace, trace_path: Path, name: str) -> LanguageClient:
    """The real server over stdio as client ``name``, initialized with ``args``' models, drafter and
    token cap, its trace to ``trace_path``, the index off; returns once the models are loaded."""
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
            ready.set()

    options = {"model": args.model, "draftModel": args.draft_model, "drafter": args.drafter,
               "maxNewTokens": args.max_new_tokens, "traceFile": str(trace_path), "indexEnabled": False}
    options.update(server_settings(getattr(args, "setting", None) or []))
    if getattr(args, "backend", "local") != "local":
        options.update(backend=args.backend, endpoint=args.endpoint, remoteModel=args.remote_model,
                       apiKeyEnv=args.api_key_env)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         initialization_options=options))
    client.initialized(types.InitializedParams())
    await asyncio.wait_for(ready.wait(), timeout=300)
    return client
