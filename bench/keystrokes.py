"""``speclsp bench lsp --document-sizes 1,10,50``: keystroke latency in large documents.

For each size (MB of generated, code-like text) the real server, over stdio, gets the document in one
``didOpen``; then one character at a time is typed on a line in its middle. Per keystroke the client:

1. sends a probe request (``speclsp/status``) alone and times its round trip (the pipes' and the two
   JSON-RPC stacks' own cost);
2. sends the keystroke (``didChange``, one incremental change) and the probe right behind it, and times
   the probe's round trip: the server reads messages in order, so this includes handling the change;
3. asks for an inline completion at the new cursor, as an editor does after a keystroke.

Reported per size (milliseconds, p50/p95): ``change_ms``, the server's handling of a keystroke (2. minus
1., measured by this client); ``completion_overhead_ms``, the completion request's server time less
model time (the server's JSON-lines trace: ``total`` minus prefill, draft and verify);
``keystroke_server_ms``, their sum per keystroke (the goal: under 50 ms at 10 MB); the raw round trips
of 1. and 2., the completion's client latency less model time, and the ``didOpen`` round trip. Model
time is excluded, so the starter pair serves. A measurement command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from bench import cpu_kinds
from bench.lsp import percentile, start_server

TYPED = "result = compute_total(value, 42)"  # typed one character per keystroke on an empty middle line
MODEL_STAGES = ("prefill", "draft", "verify")


def code_like_text(size_bytes: int) -> str:
    """Deterministic Python-like source of about ``size_bytes`` bytes (ASCII, ``\\n`` line breaks)."""
    blocks, size, index = [], 0, 0
    while size < size_bytes:
        block = (f"def function_{index}(argument_{index % 7}, value):\n"
                 f"    result = argument_{index % 7} * {index} + value  # step {index % 11}\n"
                 f"    if result > {3 * index}:\n"
                 f"        return result - {index}\n"
                 f"    return compute_{index % 13}(result, name=\"item_{index}\")\n\n")
        blocks.append(block)
        size += len(block)
        index += 1
    return "".join(blocks)


class KeystrokeClient:
    """One server session: documents opened, typed into and measured."""

    def __init__(self, client: LanguageClient):
        self.client = client
        self.version = 0

    async def probe(self) -> float:
        """Round trip of one ``speclsp/status`` request, ms."""
        sent = time.perf_counter()
        await self.client.protocol.send_request_async("speclsp/status", {})  # params null is refused (JSON-RPC)
        return 1000 * (time.perf_counter() - sent)

    def change(self, uri: str, line: int, character: int, text: str) -> None:
        """Insert ``text`` at (line, character), UTF-16 units (the default encoding)."""
        self.version += 1
        at = types.Position(line=line, character=character)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)]))

    async def complete(self, uri: str, line: int, character: int) -> float:
        """Client latency of one inline completion request, ms."""
        sent = time.perf_counter()
        await self.client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
        return 1000 * (time.perf_counter() - sent)

    async def measure(self, size_mb: float, keystrokes: int) -> tuple[float, list[dict]]:
        """(didOpen round trip ms, one sample per keystroke) for a fresh document of ``size_mb`` MB."""
        text = code_like_text(int(size_mb * 1_000_000))
        uri = f"file:///bench/keystrokes_{size_mb:g}mb.py"
        line = text[: len(text) // 2].count("\n")  # a line start in the middle
        self.version += 1
        sent = time.perf_counter()
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=uri, language_id="python", version=self.version, text=text)))
        await self.probe()
        open_ms = 1000 * (time.perf_counter() - sent)
        self.change(uri, line, 0, "\n")  # an empty line to type on
        await self.probe()
        samples = []
        for column, char in enumerate(TYPED[:keystrokes]):
            probe_ms = await self.probe()
            self.change(uri, line, column, char)
            keystroke_ms = await self.probe()
            completion_ms = await self.complete(uri, line, column + 1)
            samples.append({"probe_ms": probe_ms, "keystroke_ms": keystroke_ms, "completion_ms": completion_ms})
            await asyncio.sleep(0.05)  # typing pace: lets the server finish its after-answer work
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        return open_ms, samples


async def run_keystrokes(args: argparse.Namespace) -> dict:
    """Figures per document size (see the module docstring)."""
    trace_path = Path(tempfile.mkdtemp(prefix="speclsp-bench-")) / "trace.jsonl"
    client = await start_server(args, trace_path, "speclsp-bench-keystrokes")
    bench = KeystrokeClient(client)
    measured = []
    for size in args.document_sizes:
        print(f"document of {size:g} MB: opening, typing {min(args.keystrokes, len(TYPED))} keystrokes",
              file=sys.stderr)
        measured.append((size, *await bench.measure(size, args.keystrokes)))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    records = [json.loads(line) for line in trace_path.read_text().splitlines()]
    records = sorted((r for r in records if "id" in r), key=lambda r: r["id"])
    result, at = {}, 0
    for size, open_ms, samples in measured:
        result[f"{size:g}MB"] = summarize_keystrokes(open_ms, samples, records[at: at + len(samples)])
        at += len(samples)
    return result


def summarize_keystrokes(open_ms: float, samples: list[dict], records: list[dict]) -> dict:
    """Figures for one document from the client's samples and the server's trace records of its
    completion requests (in request order, one per sample)."""
    change, overhead, end_to_end, server, statuses = [], [], [], [], {}
    for sample, record in zip(samples, records):
        change_ms = max(0.0, sample["keystroke_ms"] - sample["probe_ms"])
        ms = record.get("ms", {})
        model_ms = sum(ms.get(stage, 0.0) for stage in MODEL_STAGES)
        completion_ms = ms.get("total", 0.0) - model_ms
        change.append(change_ms)
        overhead.append(completion_ms)
        end_to_end.append(sample["completion_ms"] - model_ms)
        server.append(change_ms + completion_ms)
        statuses[record["status"]] = statuses.get(record["status"], 0) + 1

    def spread(values: list[float]) -> dict:
        return {"p50": percentile(values, 50), "p95": percentile(values, 95)}

    return {"keystrokes": len(samples), "open_ms": round(open_ms, 1), "change_ms": spread(change),
            "completion_overhead_ms": spread(overhead), "keystroke_server_ms": spread(server),
            "probe_ms": spread([s["probe_ms"] for s in samples]),
            "keystroke_probe_ms": spread([s["keystroke_ms"] for s in samples]),
            "completion_end_to_end_overhead_ms": spread(end_to_end), "statuses": statuses}


def run(args: argparse.Namespace) -> int:
    ran = cpu_kinds.what_ran()
    result = asyncio.run(run_keystrokes(args))
    result = {"document_sizes_mb": args.document_sizes, "cpu_kind": cpu_kinds.label(ran), "by_size": result,
              "what_ran": ran}
    print(f"CPU kind: {result['cpu_kind']}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "keystrokes.json").write_text(json.dumps(result, indent=2) + "\n")
    for size, figures in result["by_size"].items():
        print(f"{size:>6} " + " ".join(f"{k}={json.dumps(v)}" for k, v in figures.items()))
    return 0


def document_sizes(value: str) -> list[float]:
    """``--document-sizes``: comma-separated sizes in MB (argparse type)."""
    try:
        sizes = [float(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes in MB such as 1,10,50, got {value!r}") from None
    if not sizes or any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"expected positive sizes in MB such as 1,10,50, got {value!r}")
    return sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this mode's flags to ``speclsp bench lsp``: with ``--document-sizes``, :func:`bench.lsp.run`
    runs this bench instead of the typing replay."""
    parser.add_argument("--document-sizes", type=document_sizes, default=None, metavar="MB,MB,...",
                        help="measure keystroke latency in generated documents of these sizes (MB), e.g. 1,10,50")
    parser.add_argument("--keystrokes", type=int, default=20,
                        help=f"keystrokes per document size (at most {len(TYPED)})")
    parser.set_defaults(measure_keystrokes=run)  # bench.lsp.run calls it when --document-sizes is given
