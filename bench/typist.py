"""``speclsp bench lsp --typist``: a person types functions of code the models never saw; how much do
our suggestions write for them?

Functions of the ``2026`` corpus (:func:`bench.corpus.corpus_files`: code written after the models'
training; 4-25 lines, chosen with ``--seed`` before any tuning, named in the output) are cut out of their
files and typed back through the real server over stdio, key by key, at two paces:

* ``fast``: a key every 90-200 ms, a 0.7-1.3 s pause before each Enter;
* ``steady``: a key every 150-300 ms, 1.5-3 s of thought after each Enter, on the new line.

Enter brings the next line's indentation with it (the editor's auto-indent). As an editor does, the client
asks for an inline completion 75 ms after the last key, and cancels a request still unanswered when
the next key comes (``$/cancelRequest``). An answer that arrives before the next key is shown (an answer
for an older version of the text is dropped); typing a character the shown suggestion starts with keeps
the rest on screen. At each key the typist looks at the suggestion on screen and takes it when its first
line is exactly what comes next (the whole rest of the line, or a prefix of it of at least 4 characters),
with each further line that is exactly right; the taken text is inserted at once and typing goes on after it.

Reported per row and pace: characters taken (and their share of the typed functions), suggestions
shown / by the model / taken, the model's answers' key-to-shown latency p50/p95 (last key to answer
received), requests superseded. Rows: ``ours`` (the local engine) and, with ``--llama``, our server with
``--backend llamacpp-infill`` against ``llama-server`` on the same model's GGUF (the engine llama.vim and
llama.vscode use). With ``--check-exact`` every answer the model showed is replayed afterwards with plain
decoding of its own prompt and healing constraint (:mod:`bench.replay`; the server's verbose trace keeps
what that needs). A measurement command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from bench import cpu_kinds
from bench.corpus import corpus_files
from bench.functions import file_functions, language_of
from bench.lsp_client import percentile, server_settings, start_server

PACES = {"fast": {"key_s": (0.090, 0.200), "before_enter_s": (0.7, 1.3), "after_enter_s": (0.0, 0.0)},
         "steady": {"key_s": (0.150, 0.300), "before_enter_s": (0.0, 0.0), "after_enter_s": (1.5, 3.0)}}
DEBOUNCE_S = 0.075
MIN_PREFIX_TAKEN = 4


def pick_functions(count: int, seed: int, corpus: str = "2026") -> list[tuple[str, str, int, int]]:
    """(name, file text, body start, body end) of ``count`` functions of 4-25 lines of ``corpus``
    (:func:`file_functions`), sampled with ``seed``."""
    found = []
    for path in corpus_files(corpus):
        found += file_functions(path, read_source(path))
    return random.Random(seed).sample(found, min(count, len(found)))


def read_source(path: Path) -> str:
    """The file's text as the typist types it: UTF-8 (undecodable bytes replaced), ``\\n`` line breaks."""
    return path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")


def takeable(shown: str, rest: str) -> str:
    """What the typist takes of the suggestion ``shown`` when ``rest`` is what they will type next: its
    first line when exactly right (the whole rest of the line, or a prefix of at least 4 characters),
    then each further line while exactly right; "" when nothing is taken."""
    shown_lines, rest_lines = shown.split("\n"), rest.split("\n")
    first = shown_lines[0]
    if not first or not rest_lines[0].startswith(first):
        return ""
    if first != rest_lines[0]:
        return first if len(first) >= MIN_PREFIX_TAKEN else ""
    taken = [first]
    for got, want in zip(shown_lines[1:], rest_lines[1:]):
        if got != want or not got.strip():
            break
        taken.append(got)
    return "\n".join(taken)


@dataclass
class Outcome:
    """One row's and pace's counts."""

    characters: int = 0
    taken_characters: int = 0
    requests: int = 0
    superseded: int = 0
    shown: int = 0
    shown_by_model: int = 0
    taken: int = 0
    model_latency_ms: list[float] = field(default_factory=list)
    shown_ids: list[str] = field(default_factory=list)  # the requests whose answers were shown


def answer_text(result) -> str:
    """The first item's text of an inline completion answer (a list, a list of items or ``None``)."""
    items = getattr(result, "items", result) or []
    text = items[0].insert_text if items else ""
    return text if isinstance(text, str) else text.value


class TypistSession:
    """Types functions into one server and counts.

    ``events`` is what happened, in order, each with ``t`` (``time.perf_counter()`` seconds): ``key``
    (a change typed; ``taken``: a suggestion taken), ``ask`` (a request sent: its ``id``) and ``answer``
    (its response arrived, superseded or not: ``id``, ``text``, ``error`` for an error response).
    """

    def __init__(self, client: LanguageClient, pace: dict, rng: random.Random):
        self.client, self.pace, self.rng = client, pace, rng
        self.version = 0
        self.outcome = Outcome()
        self.pending: dict[str, tuple[asyncio.Future, int, float]] = {}  # request id -> (future, version, last key)
        self.events: list[dict] = []
        self._next_id = 0

    def _change(self, uri: str, offset_text: str, text: str) -> None:
        self.version += 1
        line = offset_text.count("\n")
        character = len(offset_text[offset_text.rfind("\n") + 1:].encode("utf-16-le")) // 2
        position = types.Position(line=line, character=character)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=position, end=position),
                                                                    text=text)]))

    def _ask(self, uri: str, before: str, last_key: float) -> str:
        self._next_id += 1
        request_id = f"typist-{self._next_id}"
        line = before.count("\n")
        character = len(before[before.rfind("\n") + 1:].encode("utf-16-le")) // 2
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        future = asyncio.wrap_future(self.client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id=request_id))
        self.events.append({"event": "ask", "t": time.perf_counter(), "id": request_id})
        future.add_done_callback(lambda f: self._arrived(request_id, f))
        self.pending[request_id] = (future, self.version, last_key)
        self.outcome.requests += 1
        return request_id

    def _arrived(self, request_id: str, future: asyncio.Future) -> None:
        """An answer event for a response (a cancelled request's error response is expected)."""
        if future.cancelled():
            return
        error = future.exception()
        event = {"event": "answer", "t": time.perf_counter(), "id": request_id,
                 "text": "" if error is not None else answer_text(future.result())}
        if error is not None:
            event["error"] = str(error) or type(error).__name__
        self.events.append(event)

    def _cancel_unanswered(self) -> None:
        for request_id, (future, _, _) in list(self.pending.items()):
            if not future.done():
                self.client.protocol.notify("$/cancelRequest", types.CancelParams(id=request_id))
                self.outcome.superseded += 1
            del self.pending[request_id]

    async def _wait(self, seconds: float, shown: str, before: str, uri: str, last_key: float) -> str:
        """Let ``seconds`` pass (asking once after the debounce); returns the suggestion on screen then."""
        deadline = time.perf_counter() + seconds
        if seconds > DEBOUNCE_S:
            await asyncio.sleep(DEBOUNCE_S)
            request_id = self._ask(uri, before, last_key)
            future, version, _ = self.pending[request_id]
            left = deadline - time.perf_counter()
            done, _ = await asyncio.wait({future}, timeout=max(0.0, left))
            if done and version == self.version and not future.exception():
                arrived = time.perf_counter()
                text = answer_text(future.result())
                if text:
                    shown = text
                    self.outcome.shown += 1
                    self.outcome.shown_ids.append(request_id)
                    self.outcome.model_latency_ms.append(1000 * (arrived - last_key))
        left = deadline - time.perf_counter()
        if left > 0:
            await asyncio.sleep(left)
        return shown

    def open_document(self, name: str, text: str, start: int, end: int) -> str:
        """Open ``text`` without the body ``text[start:end]`` as a document named after ``name``; its URI."""
        where = Path(name.split(" ", 1)[0].rsplit(":", 1)[0])  # parent/file.ext
        line = name.split(" ", 1)[0].rsplit(":", 1)[-1]
        uri = f"file:///typist/{where.parent.name}_{where.stem}_{line}{where.suffix}"
        self.version += 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=uri, language_id=language_of(where), version=self.version, text=text[:start] + text[end:])))
        return uri

    def close_document(self, uri: str) -> None:
        self._cancel_unanswered()
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))

    async def type_function(self, name: str, text: str, start: int, end: int) -> None:
        uri = self.open_document(name, text, start, end)
        await self.type_body(uri, text[:start], text[start:end])
        self.close_document(uri)

    async def type_body(self, uri: str, before: str, body: str, stop: int | None = None) -> None:
        """Type ``body`` at the end of ``before`` (the document's text up to the cursor) at the pace,
        taking suggestions when right, until ``body[:stop]`` (default: all of it) is in the document."""
        stop = len(body) if stop is None else stop
        index, shown = 0, ""
        self.outcome.characters += stop
        while index < stop:
            rest = body[index:]
            taken = takeable(shown, rest)
            if taken:
                change, shown = taken, ""
                self.outcome.taken += 1
                self.outcome.taken_characters += len(taken)
            elif body[index] == "\n":  # Enter, with the next line's indentation (auto-indent)
                following = body[index + 1:]
                change = "\n" + following[: len(following) - len(following.lstrip(" \t"))]
                await asyncio.sleep(self.rng.uniform(*self.pace["before_enter_s"]))
                shown = ""
            else:
                change = body[index]
                shown = shown[1:] if shown[:1] == change else ""
            self._cancel_unanswered()
            self._change(uri, before, change)
            last_key = time.perf_counter()
            self.events.append({"event": "key", "t": last_key, "taken": bool(taken)})
            before += change
            index += len(change)
            if index >= stop:
                break
            think = self.rng.uniform(*self.pace["after_enter_s"]) if change.startswith("\n") else 0.0
            shown = await self._wait(max(think, self.rng.uniform(*self.pace["key_s"])), shown, before, uri, last_key)


async def start_typist_server(args: argparse.Namespace, backend: str = "local",
                              endpoint: str = "") -> tuple[LanguageClient, Path]:
    """(client, trace file) of a fresh server over stdio with ``args``' models and ``--setting`` items
    (``--check-exact``: the verbose trace, which keeps each answer's replay); returns once the models
    are loaded (:func:`bench.lsp_client.start_server`)."""
    trace_path = Path(tempfile.mkdtemp(prefix="speclsp-typist-")) / "trace.jsonl"
    settings = list(getattr(args, "setting", None) or [])
    if getattr(args, "check_exact", False) and backend == "local":
        settings.append("trace.level=verbose")
    server_args = argparse.Namespace(**{**vars(args), "backend": backend, "endpoint": endpoint, "setting": settings})
    return await start_server(server_args, trace_path, "speclsp-typist"), trace_path


async def stop_typist_server(client: LanguageClient, trace_path: Path) -> tuple[dict, list[dict]]:
    """Half a second after the typing, (the server's memory, :func:`server_memory_mb`; its trace
    records, one dict per request in the order answered); the server shut down and exited."""
    await asyncio.sleep(0.5)
    memory = server_memory_mb(client._server.pid)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return memory, [json.loads(line) for line in trace_path.read_text().splitlines()]


async def run_row(args: argparse.Namespace, pace_name: str, functions, backend: str, endpoint: str) -> dict:
    client, trace_path = await start_typist_server(args, backend, endpoint)
    session = TypistSession(client, PACES[pace_name], random.Random(args.seed))
    for number, (name, text, start, end) in enumerate(functions, 1):
        print(f"[{backend} {pace_name}] typing {number}/{len(functions)}: {name}", file=sys.stderr)
        await session.type_function(name, text, start, end)
    memory, records = await stop_typist_server(client, trace_path)
    by_id = {record["msg_id"]: record for record in records if "msg_id" in record}
    outcome = session.outcome
    shown_by_model = [request_id for request_id in outcome.shown_ids if by_id.get(request_id, {}).get("status") == "ok"]
    model_latency = [ms for request_id, ms in zip(outcome.shown_ids, outcome.model_latency_ms)
                     if by_id.get(request_id, {}).get("status") == "ok"]
    outcome.shown_by_model = len(model_latency)
    replays = [by_id[request_id]["replay"] for request_id in shown_by_model if "replay" in by_id[request_id]]
    return {"row": "ours" if backend == "local" else "llama.cpp /infill", "pace": pace_name,
            "characters": outcome.characters, "taken_characters": outcome.taken_characters,
            "taken_share": round(outcome.taken_characters / max(1, outcome.characters), 4),
            "requests": outcome.requests, "superseded": outcome.superseded, "shown": outcome.shown,
            "shown_by_model": outcome.shown_by_model, "taken": outcome.taken,
            "model_latency_ms": {"p50": percentile(model_latency, 50), "p95": percentile(model_latency, 95)},
            "statuses": {s: sum(1 for r in records if r["status"] == s) for s in {r["status"] for r in records}},
            # the requests' own prefill (work ahead on the model thread is not in the trace)
            "prompt_tokens_computed": sum(r.get("prefill_computed", 0) for r in records),
            "prefills_over_100_tokens": sum(1 for r in records if r.get("prefill_computed", 0) > 100),
            "answers_past_the_time_budget": sum(1 for r in records if r.get("finish") == "time"),
            "server_memory_mb": memory, "replays": replays}


def server_memory_mb(pid: int) -> dict[str, float | None]:
    """The server process's resident memory now (``rss``) and at its peak (``peak``), in MB (10^6 bytes),
    from ``/proc/PID/status`` (``VmRSS``, ``VmHWM``); ``None`` where it cannot be read."""
    fields = {"VmRSS:": "rss", "VmHWM:": "peak"}
    memory: dict[str, float | None] = {"rss": None, "peak": None}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                name, *value = line.split()
                if name in fields and value:
                    memory[fields[name]] = round(int(value[0]) * 1024 / 1e6, 1)  # kB
    except (OSError, ValueError):
        pass
    return memory


def run(args: argparse.Namespace) -> int:
    ran = cpu_kinds.what_ran()  # the servers started below inherit this process's environment
    functions = pick_functions(args.functions, args.seed, getattr(args, "corpus", "2026"))
    print("functions: " + "; ".join(name for name, *_ in functions), file=sys.stderr)
    rows = []
    llama = None
    if args.llama:
        from bench.llama_cpp import LlamaServer, gguf_path

        model = getattr(args, "llama_model", "") or (args.model if args.model != "auto" else "qwen2.5-coder-1.5b")
        llama = LlamaServer(gguf_path(model), threads=2).start()
    try:
        for pace in args.paces.split(","):
            rows.append(asyncio.run(run_row(args, pace, functions, "local", "")))
            if llama is not None:
                rows.append(asyncio.run(run_row(args, pace, functions, "llamacpp-infill", llama.url)))
    finally:
        if llama is not None:
            llama.stop()
    if getattr(args, "check_exact", False):
        from bench.replay import check_replays
        from lsp_server.settings import Settings

        for row in rows:
            if row["replays"]:
                print(f"[{row['row']} {row['pace']}] replaying {len(row['replays'])} shown answers with plain decoding",
                      file=sys.stderr)
                settings = server_settings(getattr(args, "setting", None) or [])
                row["exactness"] = check_replays(row["replays"], device=settings.get("model.device", "auto"),
                                                 dtype=settings.get("model.dtype", "auto"),
                                                 engine=settings.get("model.engine", "torch"),
                                                 quantization=settings.get("model.quantization",
                                                                           Settings().quantization))
    for row in rows:
        row.pop("replays")
    result = {"functions": [name for name, *_ in functions], "model": args.model, "draft_model": args.draft_model,
              "drafter": args.drafter, "seed": args.seed, "cpu_kind": cpu_kinds.label(ran), "rows": rows,
              "what_ran": ran}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "typist.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"CPU kind: {result['cpu_kind']}")
    print("row | pace | chars taken | share | shown / by model / taken | model p50/p95 ms | requests | superseded | "
          "prompt tokens computed (prefills over 100) | server memory MB (peak)")
    for row in rows:
        latency = row["model_latency_ms"]
        print(f"{row['row']} | {row['pace']} | {row['taken_characters']}/{row['characters']} | {row['taken_share']:.1%} | "
              f"{row['shown']} / {row['shown_by_model']} / {row['taken']} | {latency['p50']}/{latency['p95']} | "
              f"{row['requests']} | {row['superseded']} | {row['prompt_tokens_computed']} "
              f"({row['prefills_over_100_tokens']}) | {row['server_memory_mb']['rss']} ({row['server_memory_mb']['peak']})")
    for row in rows:
        if "exactness" in row:
            e = row["exactness"]
            print(f"{row['row']} {row['pace']}: {e['checked']} shown answers replayed with plain decoding: "
                  f"{e['identical']} identical, {e['within_noise']} parted within the kernel noise (up to "
                  f"{e['max_noise_logits']:.3f} logits), {e['outside_noise']} outside it; "
                  f"{e.get('own_computation', 0)} of the partings decided by the server's own computation replayed")
    faults = sum(row.get("exactness", {}).get("outside_noise", 0) for row in rows)
    return 1 if faults else 0
