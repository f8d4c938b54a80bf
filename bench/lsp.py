"""``speclsp bench lsp``: replay human typing through the real server over stdio and time it.

For functions of held-out standard-library files (chosen with a fixed seed), the file is opened with
the function removed, and the function is typed back character by character: 30-80 ms per key, with
pauses (300-700 ms) at line ends and at some word ends. At each pause the client asks for an inline
completion, as an editor's debounce would; when the shown completion starts with the next character
the typist types, the client asks again after that keystroke (what editors do while a suggestion is
on screen: this is what the type-through cache answers; answered, the typist types on at once). A pause
ends when its time is up, answered or not: typing on supersedes the request in flight (the server
cancels it), counted as cancelled.
``--pause-ms`` sets the pauses (a slow model needs longer ones for any answer to be seen).

Reported: end-to-end latency p50/p95/p99 (request sent to answer received, this client's clock), for
single-line completions separately; server overhead (the server's total, from reading the request to
writing the answer, minus model time, from the server's JSON-lines trace) with its parts, and the
end-to-end overhead (the client's latency minus model time, which adds the pipes and this client's own
JSON-RPC work); type-through cache hit latency and rate; cancellations; tokens per target pass.
With ``--requests-json FILE``, one row per request as well (:func:`request_rows`): the input of
``speclsp bench scale-out``.
With ``--backend openai --endpoint URL`` (or ``llamacpp-infill``) the same replay runs against a remote
serving engine: the server loads no model, ``--model`` names the tokenizer, and model time is the
remote stages (time to first token and the stream).
With ``--first-answer``, the first model answer after opening a long file (:mod:`bench.first_answer`).
With ``--cpu-kind avx512-vnni|avx2`` (here, ``--typist``, ``--document-sizes`` and ``--first-answer``
alike) the command runs again in a process with the kind's caps, and the server it starts inherits them (:mod:`bench.cpu_kinds`);
the output says the kind (``cpu_kind``) and what the kernels ran with (``what_ran``).
A measurement command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from bench import cpu_kinds
from bench.corpus import DEFAULT_HELD_OUT, read_texts, stdlib_files
from bench.functions import python_function_spans
from bench.lsp_client import percentile, start_server
from lsp_server.completion.mode import decide_mode, suppresses_automatic

#: Trace stages that are model time: the local engine's, or a remote engine's (first token, the stream).
MODEL_STAGES = ("prefill", "draft", "verify", "first_token", "stream")


def pause_range(text: str) -> tuple[float, float]:
    """``"LO,HI"`` milliseconds -> ``(LO, HI)``; argparse's type for ``--pause-ms``."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI milliseconds, got {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < LO <= HI, got {text!r}")
    return low, high


def pick_functions(count: int, seed: int) -> list[tuple[str, str, int, int]]:
    """(file name, text, start offset, end offset) of ``count`` held-out functions of 3-25 lines."""
    rng = random.Random(seed)
    paths = stdlib_files(DEFAULT_HELD_OUT, want_held_out=True)
    found = [(f"{path.parent.name}/{path.name}", text, start, end)
             for path, text in zip(paths, read_texts(paths))
             for _, _, start, end in python_function_spans(text, min_lines=3)]
    return rng.sample(found, min(count, len(found)))


class Typist:
    """Drives one server: opens documents, types, asks, measures."""

    def __init__(self, client: LanguageClient, rng: random.Random, pause_s: tuple[float, float] = (0.3, 0.7)):
        self.client, self.rng = client, rng
        self.pause_s = pause_s  # how long the typist waits at a pause, drawn uniformly from this range (s)
        self.samples: list[dict] = []  # one per request sent
        self.version = 0
        self.started = time.perf_counter()  # the replay's clock: requests' ``sent_s`` count from here

    def _change(self, uri: str, line: int, character: int, text: str) -> None:
        self.version += 1
        position = types.Position(line=line, character=character)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=position, end=position),
                                                                    text=text)]))

    def _ask(self, uri: str, line: int, character: int):
        params = types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
        return asyncio.ensure_future(self.client.text_document_inline_completion_async(params)), time.perf_counter()

    async def type_function(self, name: str, text: str, start: int, end: int) -> None:
        uri = f"file:///bench/{name.replace('/', '_')}"
        body = text[start:end]
        document = text[:start] + text[end:]
        self.version += 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
            uri=uri, language_id="python", version=self.version, text=document)))
        typed = text[:start]
        line = typed.count("\n")
        character = len(typed[typed.rfind("\n") + 1:].encode("utf-16-le")) // 2
        shown = ""  # the completion on screen
        for index, char in enumerate(body):
            self._change(uri, line, character, char)
            typed += char
            line = typed.count("\n")
            character = len(typed[typed.rfind("\n") + 1:].encode("utf-16-le")) // 2  # LSP's default units
            matches = shown[:1] == char
            shown = shown[1:] if matches else ""
            await asyncio.sleep(self.rng.uniform(0.030, 0.080))
            next_char = body[index + 1] if index + 1 < len(body) else ""
            think = char == "\n" or (char in " (.,:=" and self.rng.random() < 0.3)  # the typist stops
            # A suggestion on screen and still right: the editor asks again, the typist types on.
            pause = think or bool(shown and next_char and shown[:1] == next_char)
            if not pause or not next_char:
                continue
            line_suffix = text[end:].split("\n", 1)[0]
            mode = decide_mode(typed, line_suffix, "python")
            suppressed = suppresses_automatic(typed[typed.rfind("\n") + 1:], line_suffix)
            future, sent = self._ask(uri, line, character)
            budget = self.rng.uniform(*self.pause_s) if think else self.rng.uniform(0.030, 0.080)
            done, _ = await asyncio.wait({future}, timeout=budget)
            # What the typist goes on to type: the length of an ideal completion (the rest of the line,
            # or for a multi-line request the rest of the function), whatever the model writes.
            rest = body[index + 1:]
            expected = rest if mode.multi_line else rest.split("\n", 1)[0]
            sample = {"single_line": not mode.multi_line, "suppressed": suppressed,
                      "sent_s": sent - self.started, "budget_ms": 1000 * budget, "expected_chars": len(expected)}
            if done:
                sample["latency_ms"] = 1000 * (time.perf_counter() - sent)
                result = future.result()
                shown = result.items[0].insert_text if result.items else ""
                if think:
                    await asyncio.sleep(max(0.0, budget - sample["latency_ms"] / 1000))
            else:
                shown = ""
                sample["pending"] = future  # superseded by the next keystroke
            self.samples.append(sample)
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))


async def run_bench(args: argparse.Namespace) -> dict:
    trace_dir = Path(tempfile.mkdtemp(prefix="speclsp-bench-"))
    trace_path = trace_dir / "trace.jsonl"
    client = await start_server(args, trace_path, "speclsp-bench")
    rng = random.Random(args.seed)
    typist = Typist(client, rng, (args.pause_ms[0] / 1000, args.pause_ms[1] / 1000))
    functions = pick_functions(args.functions, args.seed)
    for number, (name, text, start, end) in enumerate(functions, 1):
        print(f"typing function {number}/{len(functions)} of {name} ({end - start} characters)", file=sys.stderr)
        await typist.type_function(name, text, start, end)
    pending = [s["pending"] for s in typist.samples if "pending" in s]
    if pending:
        await asyncio.wait(pending, timeout=30)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    records = {}
    for line in trace_path.read_text().splitlines():
        record = json.loads(line)
        records[record["id"]] = record
    if args.requests_json is not None:
        rows = request_rows(typist.samples, records)
        args.requests_json.parent.mkdir(parents=True, exist_ok=True)
        args.requests_json.write_text(json.dumps({"settings": {
            "model": args.model, "draft_model": args.draft_model, "drafter": args.drafter,
            "max_new_tokens": args.max_new_tokens, "functions": args.functions, "seed": args.seed},
            "requests": rows}, indent=1) + "\n")
    return summarize(typist.samples, records, functions)


def request_rows(samples: list[dict], records: dict[int, dict]) -> list[dict]:
    """One row per request, the client's sample joined (in request order) with the server's trace record.

    Row fields: ``sent_s`` (seconds since the replay started, client clock), ``budget_ms`` (how long the
    typist waited before typing on), ``status`` (the server's), ``latency_ms`` (client latency; ``None``
    when not answered within the budget), ``superseded`` (not answered within the budget: typing went on),
    ``single_line``, ``expected_chars`` (characters of an ideal completion: what the typist types next, to
    the line's end or, multi-line, to the function's end; independent of the model), ``prompt_tokens`` (prefill computed + reused), ``prompt_reused`` (prefill tokens
    taken from the KV cache of an earlier prompt), ``new_tokens`` and ``finish`` (the generation's finish
    reason); the token fields are ``None`` when the model did not run (cache hits, requests superseded
    before they started).
    """
    rows = []
    for sample, request_id in zip(samples, sorted(records)):
        record = records[request_id]
        ran = "prefill_computed" in record
        rows.append({
            "sent_s": round(sample["sent_s"], 4), "budget_ms": round(sample["budget_ms"], 1),
            "status": record["status"], "latency_ms": round(sample["latency_ms"], 2) if "latency_ms" in sample else None,
            "superseded": "latency_ms" not in sample, "single_line": sample["single_line"],
            "expected_chars": sample["expected_chars"],
            "prompt_tokens": record["prefill_computed"] + record["prefill_reused"] if ran else None,
            "prompt_reused": record["prefill_reused"] if ran else None,
            "new_tokens": record["tokens"] if ran else None, "finish": record.get("finish")})
    return rows


def summarize(samples: list[dict], records: dict[int, dict], functions) -> dict:
    """Figures from the client's samples joined (in request order) with the server's trace records."""
    ids = sorted(records)
    latencies, single, overhead, end_to_end, hits, passes = [], [], [], [], [], []
    # Overhead by stage. rpc_in / rpc_out: the server's JSON-RPC work before and after the handler;
    # server_other: the rest outside the staged work (the hop to the model thread and back); transport:
    # the client's latency minus the server's total (pipes, this client's JSON-RPC and event loop).
    parts: dict[str, list[float]] = {}
    cancelled = 0
    for sample, request_id in zip(samples, ids):
        record = records[request_id]
        status = record["status"]
        if "latency_ms" not in sample or status in ("superseded", "cancelled by client"):
            cancelled += 1
            continue
        latency = sample["latency_ms"]
        if status == "type-through cache hit":
            hits.append(latency)
            continue
        if status != "ok":
            continue
        latencies.append(latency)
        if sample["single_line"]:
            single.append(latency)
        model_ms = sum(record["ms"].get(k, 0.0) for k in MODEL_STAGES)
        total = record["ms"].get("total", 0.0)
        overhead.append(total - model_ms)
        end_to_end.append(latency - model_ms)
        server = {k: record["ms"].get(k, 0.0) for k in ("rpc_in", "queue", "context", "decode_other", "postprocess",
                                                        "rpc_out")}
        for stage, ms in (*server.items(), ("server_other", total - model_ms - sum(server.values())),
                          ("transport", latency - total)):
            parts.setdefault(stage, []).append(ms)
        if "backend" not in record:  # a remote engine reports no passes
            passes.append(record["tokens_per_pass"])
    answered = len(samples) - cancelled
    return {
        "functions": [name for name, *_ in functions],
        "requests": len(samples),
        "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
                       "p99": percentile(latencies, 99), "count": len(latencies)},
        "single_line_latency_ms": {"p50": percentile(single, 50), "p95": percentile(single, 95), "count": len(single)},
        "overhead_ms": {"p50": percentile(overhead, 50), "p95": percentile(overhead, 95)},
        "end_to_end_overhead_ms": {"p50": percentile(end_to_end, 50), "p95": percentile(end_to_end, 95)},
        "overhead_parts_ms": {stage: {"p50": percentile(values, 50), "p95": percentile(values, 95)}
                              for stage, values in parts.items()},
        "cache_hit_ms": {"p50": percentile(hits, 50), "p95": percentile(hits, 95), "count": len(hits)},
        "cache_hit_rate": round(len(hits) / answered, 4) if answered else 0.0,
        "cancelled": cancelled,
        "tokens_per_pass": round(statistics.fmean(passes), 3) if passes else None,
    }


def run(args: argparse.Namespace) -> int:
    relaunched = cpu_kinds.run_as_kind(args)  # an emulated kind: this command again with its caps (the server
    if relaunched is not None:                # it starts inherits them)
        return relaunched
    if getattr(args, "document_sizes", None):  # keystroke latency in large documents (bench.keystrokes)
        return args.measure_keystrokes(args)
    if getattr(args, "first_answer", False):  # the first model answer after opening a long file (bench.first_answer)
        return args.measure_first_answer(args)
    if args.typist:  # characters our suggestions write for a typist (bench.typist)
        from bench import typist

        args.functions = args.functions if args.functions is not None else 3
        return typist.run(args)
    args.functions = args.functions if args.functions is not None else 8
    if args.quick:
        args.functions = min(args.functions, 2)
    if args.backend != "local" and not args.endpoint:
        raise SystemExit(f"speclsp bench lsp: --backend {args.backend} needs --endpoint URL")
    ran = cpu_kinds.what_ran()
    result = asyncio.run(run_bench(args))
    result.update(drafter=args.drafter, max_new_tokens=args.max_new_tokens, seed=args.seed, quick=args.quick,
                  backend=args.backend, cpu_kind=cpu_kinds.label(ran), what_ran=ran)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"CPU kind: {result['cpu_kind']}")
    for key in ("requests", "latency_ms", "single_line_latency_ms", "overhead_ms", "end_to_end_overhead_ms",
                "overhead_parts_ms", "cache_hit_ms", "cache_hit_rate", "cancelled", "tokens_per_pass"):
        print(f"{key:<24} {json.dumps(result[key])}")
    return 0


def add_parser(kinds) -> argparse.ArgumentParser:
    """Register ``speclsp bench lsp``; returns its parser (:mod:`bench.keystrokes` and
    :mod:`bench.first_answer` add their flags)."""
    lsp = kinds.add_parser("lsp", help="replay human typing through the server over stdio: latency, cache hits; "
                                       "with --document-sizes, keystroke latency in large documents")
    lsp.add_argument("--functions", type=int, default=None,
                     help="held-out functions to type (default 8; --typist 3; --first-answer: per file, 2)")
    lsp.add_argument("--drafter", default="auto")
    lsp.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                     help="another server setting (its key, VALUE as JSON), e.g. completion.promptLayout=tail; "
                          "repeatable")
    lsp.add_argument("--model", default="auto", help="target model name (as for speclsp complete)")
    lsp.add_argument("--draft-model", default="auto", help="draft model name, or none")
    lsp.add_argument("--max-new-tokens", type=int, default=32)
    lsp.add_argument("--seed", type=int, default=0)
    lsp.add_argument("--quick", action="store_true", help="two functions")
    lsp.add_argument("--pause-ms", type=pause_range, default=(300.0, 700.0), metavar="LO,HI",
                     help="the typist's wait at each pause, uniform in [LO, HI] ms (default 300,700: a quick "
                          "typist, who supersedes slow answers; long pauses let every answer arrive)")
    lsp.add_argument("--backend", default="local", choices=("local", "openai", "llamacpp-infill"),
                     help="generate locally, or on a remote engine at --endpoint")
    lsp.add_argument("--endpoint", default="", help="the remote engine's base URL (remote backends)")
    lsp.add_argument("--remote-model", default="", help="the served model's name (remote backends)")
    lsp.add_argument("--api-key-env", default="", help="environment variable holding the API key (remote backends)")
    lsp.add_argument("--out", type=Path, default=None,
                     help="write DIR/results.json (--typist: DIR/typist.json; --first-answer: DIR/first_answer.json)")
    lsp.add_argument("--typist", action="store_true",
                     help="a person types functions of the 2026 corpus at --paces; characters taken from suggestions "
                          "(see bench/typist.py); --functions defaults to 3 here")
    lsp.add_argument("--paces", default="fast,steady", help="--typist: fast, steady or both")
    lsp.add_argument("--corpus", default="2026", help="--typist and --first-answer: the corpus whose functions are "
                     "typed (bench.corpus: 2026 is Python; a corpus of another language, or a directory)")
    lsp.add_argument("--llama-model", default="",
                     help="--typist --llama: the model llama-server serves (default: --model, auto: qwen2.5-coder-1.5b)")
    lsp.add_argument("--check-exact", action="store_true",
                     help="--typist: replay every answer the model showed with plain decoding (--drafter none) of its "
                          "own prompt and healing constraint, and report partings (exit 1 on one outside the "
                          "kernel noise)")
    lsp.add_argument("--llama", action="store_true",
                     help="--typist: also our server on llama.cpp's /infill (llama-server on the model's GGUF)")
    lsp.add_argument("--requests-json", type=Path, default=None, metavar="FILE",
                     help="write one row per request (time sent, prompt tokens and reused, new tokens, status, "
                          "latency) to FILE: the input of speclsp bench scale-out")
    cpu_kinds.add_argument(lsp)
    lsp.set_defaults(run=run)
    return lsp
