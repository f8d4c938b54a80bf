"""``speclsp bench lsp --first-answer``: how long after opening a long file does the first model answer come?

Documents: the files of the 2026 corpus (:func:`bench.corpus.corpus_files`) of at least ``--min-lines``
lines (default 1,500). In each, up to ``--functions`` (default 2) functions of 4-25 lines whose ``def``
lies past half that many lines (line 750 by default), sampled with ``--seed`` per file
(:func:`pick_long_file_functions`).

Per function, a **fresh server** over stdio (nothing of an earlier document is cached), started and
waited for until its models are loaded; then the file is opened with the function's body removed (as
the typist does, :class:`bench.typist.TypistSession`), ``--open-wait-s`` pass (default 1 s: the user
reads and clicks), and the function is typed at the typist's steady pace (a key every 150-300 ms,
1.5-3 s after each Enter, a request 75 ms after the last key, suggestions taken when right) until its
first line after the ``def`` header is typed (``--whole``: all of it).

Recorded per function (:func:`first_answer`): ``first_answer_ms``, from the first key to the first
model answer that arrives (trace status ``ok``, non-empty, shown or not) before a later key superseded
its request (answers that arrive after a later key count as ``superseded_answers``, never as the first);
the keys typed before it; that request's own latency (its last key to the answer), server time, prefill
time and prompt tokens computed and reused; the same for the very first request sent, answered or not;
the p50 of all model answers of the stretch; the longest any request waited before a later key. No
answer: the figures are ``null`` and ``no_answer`` says why. The summary gives the median and worst
``first_answer_ms``; the output the settings used (``--setting`` passes through), each server's memory
(:func:`bench.typist.server_memory_mb`) and the CPU kind (``--cpu-kind``, :mod:`bench.cpu_kinds`).
``--out DIR`` writes ``DIR/first_answer.json``; a short table goes to stderr. A measurement command,
not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import statistics
import sys
import tokenize
from collections import Counter

from bench import cpu_kinds
from bench.corpus import corpus_files
from bench.lsp_client import percentile
from bench.functions import file_functions
from bench.typist import PACES, TypistSession, read_source, start_typist_server, stop_typist_server

MIN_LINES = 1500
FUNCTIONS_PER_FILE = 2
OPEN_WAIT_S = 1.0
PACE = "steady"
FRESH_SERVER = ("each function ran on its own fresh server (started, its models loaded, shut down after): "
                "nothing of an earlier document was cached")


def line_count(text: str) -> int:
    """Lines of ``text`` (``\\n`` breaks; a last line without one counts), as ``wc -l`` counts a file
    that ends with a line break."""
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def pick_long_file_functions(per_file: int, seed: int, min_lines: int = MIN_LINES, corpus: str = "2026",
                             past_line: int | None = None) -> list[tuple[str, str, int, int]]:
    """(name, file text, body start, body end) of up to ``per_file`` functions of 4-25 lines
    (:func:`bench.functions.file_functions`) from each file of ``corpus`` with at least ``min_lines``
    lines, whose ``def`` is on a line (1-based) after ``past_line`` (default ``min_lines // 2``);
    and which have a line after their header (:func:`first_line_stop`); each file's sampled with its own
    ``random.Random`` seeded by ``seed`` and the file's name, and given in file order. Files in corpus order."""
    past_line = min_lines // 2 if past_line is None else past_line
    picked = []
    for path in corpus_files(corpus):
        text = read_source(path)
        if line_count(text) < min_lines:
            continue
        candidates = [(name, text, start, end) for name, text, start, end in file_functions(path, text)
                      if text.count("\n", 0, start) + 1 > past_line and first_line_stop(text[start:end])]
        rng = random.Random(f"{seed}:{path.parent.name}/{path.name}")
        picked += sorted(rng.sample(candidates, min(per_file, len(candidates))), key=lambda function: function[2])
    return picked


def first_line_stop(body: str) -> int | None:
    """Characters of ``body`` (a function from its ``def``) up to the end of the first non-blank line
    after the ``def`` header (the header may span lines); ``None`` where the header does not end
    within ``body`` or no line follows it (:func:`bench.functions.file_functions` ends a function at the
    first line as little indented as its ``def``, which can be a signature's closing ``)``)."""
    rows = body.split("\n")
    header_rows = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(body).readline):
            if token.type == tokenize.NEWLINE:  # the header's logical line ends
                header_rows = token.start[0]
                break
    except (tokenize.TokenError, SyntaxError):
        return None
    index = header_rows
    while index is not None and index < len(rows) and not rows[index].strip():
        index += 1
    if index is None or index >= len(rows):
        return None
    return sum(len(row) + 1 for row in rows[: index + 1]) - 1


def _request(request_id: str, record: dict, answer: dict | None) -> dict:
    """One request's figures: trace ``record`` (``{}`` when the trace has none) and client ``answer``."""
    ms = record.get("ms", {})
    return {"request": request_id, "status": record.get("status"),
            "latency_ms": answer["latency_ms"] if answer else None,  # its last key to the response, this client
            "server_ms": ms.get("total"), "prefill_ms": ms.get("prefill"),
            "prompt_tokens_computed": record.get("prefill_computed"),
            "prompt_tokens_reused": record.get("prefill_reused")}


def _answers(events: list[dict], records: dict[str, dict]) -> tuple[list[dict], list[str], int, float | None]:
    """(one dict per response in arrival order, request ids in the order asked, keys, first key's time)."""
    keys, first_key, last_key = 0, None, None
    asked: dict[str, tuple[int, float | None]] = {}
    answers = []
    for event in events:
        if event["event"] == "key":
            keys += 1
            first_key = event["t"] if first_key is None else first_key
            last_key = event["t"]
        elif event["event"] == "ask":
            asked[event["id"]] = (keys, last_key)
        elif event["event"] == "answer" and event["id"] in asked:
            keys_then, key_time = asked[event["id"]]
            answers.append({
                "id": event["id"], "t": event["t"], "keys_before": keys, "on_time": keys == keys_then,
                "latency_ms": None if key_time is None else round(1000 * (event["t"] - key_time), 1),
                # an error response has no text
                "model": records.get(event["id"], {}).get("status") == "ok" and bool(event.get("text"))})
    return answers, list(asked), keys, first_key


def longest_wait_ms(events: list[dict]) -> float | None:
    """The longest time (ms) from a request sent to the next key: the most time the model had for an
    answer that could still be shown; ``None`` without a request that a key followed."""
    waits, asked = [], []
    for event in events:
        if event["event"] == "ask":
            asked.append(event["t"])
        elif event["event"] == "key":
            waits += [event["t"] - sent for sent in asked]
            asked = []
    return round(1000 * max(waits), 1) if waits else None


def first_answer(events: list[dict], records: dict[str, dict]) -> dict:
    """The first-answer figures of one typed stretch (see the module docstring).

    Args:
        events: :attr:`bench.typist.TypistSession.events`, in order (``t`` in seconds).
        records: the server's trace records by request id (``msg_id``): ``status``, ``ms`` (``total``,
            ``prefill``), ``prefill_computed`` and ``prefill_reused`` (tokens).

    Returns:
        ``first_answer_ms`` (``None`` without one, and ``no_answer`` says why), ``keys_before_first_answer``,
        ``first_answer`` and ``first_request`` (per request: status, latency from its last key, server and
        prefill ms, prompt tokens computed and reused), ``answers_p50_ms`` (model answers before a later
        key), ``answers``, ``superseded_answers`` (model answers that came after a later key), ``requests``, ``keys``,
        ``longest_wait_ms`` (:func:`longest_wait_ms`).
    """
    answers, asked, keys, first_key = _answers(events, records)
    model = [answer for answer in answers if answer["model"]]
    on_time = [answer for answer in model if answer["on_time"]]
    first = on_time[0] if on_time else None
    first_asked = asked[0] if asked else None
    first_response = next((answer for answer in answers if answer["id"] == first_asked), None)
    longest = longest_wait_ms(events)
    no_answer = None if first else (f"no model answer arrived before a later key: {keys} keys, {len(asked)} requests "
                                    f"(the longest waited {longest} ms), {len(model) - len(on_time)} model answers "
                                    "superseded")
    return {"first_answer_ms": round(1000 * (first["t"] - first_key), 1) if first else None,
            "keys_before_first_answer": first["keys_before"] if first else None,
            "first_answer": _request(first["id"], records.get(first["id"], {}), first) if first else None,
            "first_request": (_request(first_asked, records.get(first_asked, {}), first_response)
                              if first_asked else None),
            "answers_p50_ms": percentile([answer["latency_ms"] for answer in on_time], 50),
            "answers": len(on_time), "superseded_answers": len(model) - len(on_time), "requests": len(asked),
            "keys": keys, "longest_wait_ms": longest, "no_answer": no_answer}


async def measure_function(args: argparse.Namespace, function: tuple[str, str, int, int]) -> dict:
    """One function's row, on a fresh server (see the module docstring).

    Raises:
        SystemExit: the server's models failed to load.
    """
    name, text, start, end = function
    client, trace_path = await start_typist_server(args)
    loaded = getattr(client, "load_message", "")
    if "models ready" not in loaded:
        await stop_typist_server(client, trace_path)
        raise SystemExit(f"speclsp bench lsp --first-answer: {loaded or 'the models never said they were ready'}")
    session = TypistSession(client, PACES[PACE], random.Random(args.seed))
    body = text[start:end]
    stop = len(body) if args.whole else first_line_stop(body)  # not None: the picker kept only such functions
    uri = session.open_document(name, text, start, end)
    await asyncio.sleep(args.open_wait_s)
    await session.type_body(uri, text[:start], body, stop)
    session.close_document(uri)
    memory, records = await stop_typist_server(client, trace_path)
    by_id = {record["msg_id"]: record for record in records if "msg_id" in record}
    return {"function": name, "document_lines": line_count(text), "def_line": text.count("\n", 0, start) + 1,
            "typed_text": body[:stop], "loaded": loaded, **first_answer(session.events, by_id),
            "statuses": dict(Counter(record["status"] for record in records)), "server_memory_mb": memory}


def summarize(rows: list[dict]) -> dict:
    """Median and worst ``first_answer_ms`` of ``rows``; ``worst`` is ``None`` where a row had no answer
    (``worst_answered``: the worst of those that had one)."""
    answered = [row["first_answer_ms"] for row in rows if row["first_answer_ms"] is not None]
    peaks = [row["server_memory_mb"]["peak"] for row in rows if row["server_memory_mb"].get("peak") is not None]
    return {"functions": len(rows), "without_answer": len(rows) - len(answered),
            "first_answer_ms": {"median": round(statistics.median(answered), 1) if answered else None,
                                "worst": max(answered) if answered and len(answered) == len(rows) else None,
                                "worst_answered": max(answered) if answered else None},
            "server_memory_peak_mb": max(peaks) if peaks else None}


def print_table(result: dict) -> None:
    """The short table, on stderr."""
    settings = result["settings"]
    print(f"first model answer after opening a file of {settings['min_lines']}+ lines; {PACE} pace, "
          f"{settings['open_wait_s']} s after the open; {FRESH_SERVER}", file=sys.stderr)
    print(f"CPU kind: {result['cpu_kind']}", file=sys.stderr)
    print("function | lines | first answer ms | keys before | its latency ms | its prompt tokens computed | "
          "first request: status, ms | answers p50 ms | superseded | memory MB (peak)", file=sys.stderr)
    for row in result["rows"]:
        own, opening = row["first_answer"] or {}, row["first_request"] or {}
        print(f"{row['function']} | {row['document_lines']} | {row['first_answer_ms'] or row['no_answer']} | "
              f"{row['keys_before_first_answer']} | {own.get('latency_ms')} | {own.get('prompt_tokens_computed')} | "
              f"{opening.get('status')}, {opening.get('latency_ms')} | {row['answers_p50_ms']} | "
              f"{row['superseded_answers']} | {row['server_memory_mb']['rss']} ({row['server_memory_mb']['peak']})",
              file=sys.stderr)
    summary = result["summary"]["first_answer_ms"]
    print(f"first answer: median {summary['median']} ms, worst {summary['worst']} ms "
          f"({result['summary']['without_answer']} of {len(result['rows'])} functions without an answer)",
          file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """``speclsp bench lsp --first-answer`` (:func:`bench.lsp.run` calls it, in the ``--cpu-kind``'s process)."""
    per_file = args.functions if args.functions is not None else FUNCTIONS_PER_FILE
    if per_file < 1 or args.min_lines < 1 or args.open_wait_s < 0:
        raise SystemExit("speclsp bench lsp --first-answer: --functions and --min-lines must be at least 1, "
                         "--open-wait-s at least 0")
    ran = cpu_kinds.what_ran()  # the servers started below inherit this process's environment
    functions = pick_long_file_functions(per_file, args.seed, args.min_lines, getattr(args, "corpus", "2026"))
    if not functions:
        raise SystemExit(f"speclsp bench lsp --first-answer: no 2026-corpus file of {args.min_lines}+ lines has a "
                         f"function of 4-25 lines past line {args.min_lines // 2}")
    rows = []
    for number, function in enumerate(functions, 1):
        print(f"[first answer] {number}/{len(functions)}: {function[0]} (a fresh server)", file=sys.stderr)
        rows.append(asyncio.run(measure_function(args, function)))
    settings = {"model": args.model, "draft_model": args.draft_model, "drafter": args.drafter,
                "max_new_tokens": args.max_new_tokens, "setting": list(args.setting or []), "pace": PACE,
                "open_wait_s": args.open_wait_s, "min_lines": args.min_lines, "past_line": args.min_lines // 2,
                "functions_per_file": per_file, "seed": args.seed,
                "typed": "the whole function" if args.whole else "to the end of the first line after the def"}
    result = {"fresh_server": FRESH_SERVER, "settings": settings, "cpu_kind": cpu_kinds.label(ran),
              "summary": summarize(rows), "rows": rows, "what_ran": ran}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "first_answer.json").write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this mode's flags to ``speclsp bench lsp``: with ``--first-answer``, :func:`bench.lsp.run`
    runs this bench instead of the typing replay."""
    parser.add_argument("--first-answer", action="store_true",
                        help="the first model answer after opening a long 2026 file, each function on a fresh "
                             "server (bench/first_answer.py); --functions is per file here (default 2)")
    parser.add_argument("--min-lines", type=int, default=MIN_LINES,
                        help="--first-answer: files of at least this many lines; functions past half of it")
    parser.add_argument("--open-wait-s", type=float, default=OPEN_WAIT_S,
                        help="--first-answer: seconds between opening the file and the first key")
    parser.add_argument("--whole", action="store_true",
                        help="--first-answer: type the whole function, not only to its first line after the def")
    parser.set_defaults(measure_first_answer=run)  # bench.lsp.run calls it when --first-answer is given
