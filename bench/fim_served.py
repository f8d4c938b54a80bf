"""The served path of ``speclsp bench fim-eval``: each task opened in the real server over stdio with the
hole removed, and an invoked inline completion at the hole.

One server (:func:`bench.lsp_client.start_server`, the same client the typist and ``bench lsp`` use) for
all the tasks. Per task: ``didOpen`` of :attr:`bench.fim_tasks.FimTask.holed_text` as
``file:///fim-eval/LANGUAGE/NAME.EXT`` with the language's id, an inline completion request at column 0
of the empty line (``triggerKind`` Invoked: the server never cuts its prompt for time), ``didClose``.
Everything else is the server's defaults, but for what ``--setting`` names (and the index off, as every
bench client has it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from bench.fim_tasks import LANGUAGES, FimTask, served_line
from bench.lsp_client import start_server
from bench.typist import answer_text
from lsp_server.settings import Settings

REQUEST_TIMEOUT_S = 600.0  # one invoked request at most; a 1.5B on two cores takes tens of seconds


def task_uri(task: FimTask) -> str:
    """The document's URI: ``file:///fim-eval/LANGUAGE/NAME.EXT`` (no such file exists; the server needs none)."""
    return f"file:///fim-eval/{task.language}/{task.file_name}"


def serving_model(load_message: str) -> str | None:
    """The model that writes inline completions, from the server's ``models ready: target=NAME ...`` line
    (its completion backend's target: the draft model where ``completion.model`` gave it the
    completions); ``None`` where the line does not name one."""
    found = re.search(r"models ready: target=(\S+)", load_message or "")
    return found.group(1) if found else None


async def ask(client: LanguageClient, task: FimTask, request_id: str) -> tuple[str, float, str | None]:
    """(the answer's text, ms from the request sent to its answer, the error or ``None``) for one task."""
    uri = task_uri(task)
    client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri=uri, language_id=LANGUAGES[task.language][0], version=1, text=task.holed_text)))
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=task.hole_line, character=0),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))
    sent = time.perf_counter()
    text, error = "", None
    try:
        result = await asyncio.wait_for(asyncio.wrap_future(client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=request_id)), REQUEST_TIMEOUT_S)
        text = answer_text(result)
    except Exception as exc:  # noqa: BLE001 - an error response or a timeout is this task's row, not the run's end
        error = str(exc) or type(exc).__name__
    latency_ms = 1000 * (time.perf_counter() - sent)
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    return text, latency_ms, error


def served_row(task: FimTask, text: str, latency_ms: float, error: str | None, record: dict) -> dict:
    """One task's row of the served path; ``record``: the server's trace record of its request (``{}``)."""
    written = served_line(text)
    return {"name": task.name, "language": task.language, "path": "served", "expected": task.expected,
            "first_line": written, "match": written == task.expected, "empty": not text.strip(),
            "latency_ms": round(latency_ms, 1), "answer": text, "error": error, "status": record.get("status"),
            "server_ms": record.get("ms", {}).get("total"), "prompt_tokens": record.get("prefill_computed"),
            "new_tokens": record.get("tokens"), "finish": record.get("finish"),
            # the model's prompt as token ids: only where the trace is verbose (--setting trace.level=verbose)
            "prompt_ids": record.get("replay", {}).get("prompt_ids")}


def _server_args(args: argparse.Namespace) -> argparse.Namespace:
    """What :func:`bench.lsp_client.start_server` reads: the models and drafter asked, and the server's own
    default for the completion's token cap (``--setting completion.maxNewTokens=N`` overrides it)."""
    return argparse.Namespace(model=args.model, draft_model=args.draft_model, drafter=args.drafter,
                              max_new_tokens=Settings().max_new_tokens, setting=list(args.setting or []))


async def run_served(args: argparse.Namespace, tasks: list[FimTask]) -> tuple[list[dict], dict]:
    """(one row per task, in order; what served them: ``load_message``, ``model``, ``choices`` (the server's
    log lines of its ``auto`` choices), ``statuses``).

    Raises:
        SystemExit: the server's models failed to load.
    """
    folder = Path(tempfile.mkdtemp(prefix="speclsp-fim-eval-"))
    trace_path = folder / "trace.jsonl"
    client = await start_server(_server_args(args), trace_path, "speclsp-fim-eval")
    loaded = getattr(client, "load_message", "")
    answers = []
    try:
        if "models ready" not in loaded:
            raise SystemExit(f"speclsp bench fim-eval: {loaded or 'the models never said they were ready'}")
        for number, task in enumerate(tasks, 1):
            answers.append(await ask(client, task, f"fim-{number}"))
            text, latency_ms, error = answers[-1]
            print(f"[served {number}/{len(tasks)}] {task.key}: {served_line(text)!r} ({latency_ms:.0f} ms)"
                  + (f" error: {error}" if error else ""), file=sys.stderr)
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
        await asyncio.wait_for(client.stderr_drain, 10)  # the server's log, read below
    records = [json.loads(line) for line in trace_path.read_text().splitlines()] if trace_path.exists() else []
    by_id = {record["msg_id"]: record for record in records if "msg_id" in record}
    log = (folder / "server.log").read_text(errors="replace") if (folder / "server.log").exists() else ""
    shutil.rmtree(folder, ignore_errors=True)
    rows = [served_row(task, *answer, by_id.get(f"fim-{number}", {}))
            for number, (task, answer) in enumerate(zip(tasks, answers), 1)]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[str(row["status"])] = statuses.get(str(row["status"]), 0) + 1
    return rows, {"load_message": loaded, "model": serving_model(loaded), "statuses": statuses,
                  "choices": [line.strip() for line in log.splitlines() if " auto for " in line]}
