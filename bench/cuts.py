"""``speclsp bench cuts``: complete holes cut into held-out files, per drafter: speed and quality.

For each cut point (a line inside a held-out file, chosen with a fixed seed) the text from the line's
indentation to the end of the ``--cut-lines``-th line is removed, and every drafter completes the hole
from a cold cache, as ``speclsp complete --cut-lines`` does. Reported per drafter: mean accepted tokens
per target pass, acceptance rate, tokens/s over decoding (draft + verify) and over the whole generation
(prefill included), wall-clock latency of the whole completion (p50/p95), whether every output equals
plain greedy decoding (``none``, run first; without it, the first drafter listed), and the quality of
what would be inserted: the share of non-empty completions, the share that are non-empty and after whose
insertion the file still parses (Python's ``ast``), and the share whose first line equals the removed text's first line.

Corpora (``--corpus``, :mod:`bench.corpus`): ``stdlib`` (the held-out packages of the standard library,
which real models have seen in training), ``2026`` (files first written in 2026, by their copyright line,
of the installed transformers and huggingface_hub, outside ``transformers/models`` whose model files copy
each other: code the Qwen2.5-Coder models, trained in 2024, cannot have seen), or a directory of ``.py`` files.

A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import statistics
import sys
import time
from dataclasses import replace

from lsprotocol import types

from bench.corpus import corpus_files
from decoding.engine import Engine
from decoding.types import DRAFTER_MODES
from decoding.types import DEFAULT_MAX_DRAFT_TOKENS
from lsp_server.cli import cut_hole
from lsp_server.backends.local import as_backend
from lsp_server.model.completer import complete
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for
from lsp_server.request import resolve_request
from lsp_server.settings import Settings


def parses(text: str) -> bool:
    """Whether ``text`` is valid Python."""
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def first_line(text: str) -> str:
    return text.split("\n", 1)[0].rstrip()


def cut_points(count: int, seed: int, corpus: str = "stdlib") -> list[tuple[Document, types.Position]]:
    """``count`` (document, cursor) pairs at the indentation of code lines inside held-out files that parse.

    Raises:
        ValueError: the corpus has fewer candidate lines than ``count``.
    """
    paths = corpus_files(corpus)
    rng = random.Random(seed)
    candidates = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        except (UnicodeDecodeError, OSError):
            continue
        if not parses(text):
            continue
        document = Document(path.as_uri(), text, 0, "python")
        for number, line in enumerate(text.split("\n")):
            stripped = line.strip()
            if line.startswith(" ") and stripped and not stripped.startswith(("#", '"', "'", ")", "]", "}")):
                candidates.append((document, types.Position(line=number, character=len(line) - len(line.lstrip()))))
    if len(candidates) < count:
        raise ValueError(f"corpus {corpus!r} has {len(candidates)} cut points, fewer than --cuts {count}")
    return rng.sample(candidates, count)


def run(args: argparse.Namespace) -> int:
    drafters = list(dict.fromkeys(args.drafters.split(",")))
    unknown = [d for d in drafters if d not in DRAFTER_MODES]
    if unknown:
        raise ValueError(f"unknown drafters {unknown}; use {', '.join(DRAFTER_MODES)}")
    if args.cuts < 1 or args.cut_lines < 1 or args.max_new_tokens < 1:
        raise ValueError("--cuts, --cut-lines and --max-new-tokens must be >= 1")
    # Plain decoding first: it is the reference every other drafter must equal.
    drafters = (["none"] if "none" in drafters else []) + [d for d in drafters if d != "none"]
    codec = codec_for(types.PositionEncodingKind.Utf32)
    # every cut is a cold document: the whole prompt, not one cut for time (completion.coldPromptMs)
    base = Settings(model=args.model, draft_model=args.draft_model, dtype=args.dtype, cold_prompt_ms=0)
    points = cut_points(args.cuts, args.seed, args.corpus)
    engine = Engine.load(base.engine_config())
    if engine.notice:
        print(f"speclsp: note: {engine.notice}", file=sys.stderr)
    rows: dict[str, list[dict]] = {d: [] for d in drafters}
    for index, (document, position) in enumerate(points):
        holed, removed = cut_hole(document, position, codec, args.cut_lines)
        reference = None
        for drafter in drafters:  # interleaved: every drafter completes this cut before the next cut
            engine.reset_caches()
            settings = replace(base, drafter=drafter, max_new_tokens=args.max_new_tokens,
                               max_draft_tokens=args.max_draft_tokens, draft_min_confidence=args.draft_min_confidence)
            started = time.perf_counter()
            request = resolve_request(holed, position, codec, settings)
            completion = complete(as_backend(engine), request)
            latency_ms = 1000 * (time.perf_counter() - started)
            generation = completion.generation
            stats = generation.stats
            reference = generation.token_ids if reference is None else reference
            decode_ms = stats.ms["draft"] + stats.ms["verify"]
            inserted = completion.insert_text
            rows[drafter].append({
                "tokens": stats.new_tokens, "passes": stats.target_passes, "drafted": stats.drafted,
                "accepted": stats.accepted, "decode_ms": decode_ms, "total_ms": stats.ms["total"],
                "latency_ms": latency_ms, "identical": generation.token_ids == reference,
                "non_empty": bool(inserted.strip()),
                "parses": bool(inserted.strip()) and parses(holed.text[:request.offset] + inserted + holed.text[request.offset:]),
                "first_line_exact": bool(inserted.strip()) and first_line(inserted) == first_line(removed),
            })
        print(f"cut {index + 1}/{args.cuts}: {document.uri.rsplit('/', 2)[-2:]} line {position.line + 1}",
              file=sys.stderr)
    summary = []
    for drafter, results in rows.items():
        tokens = sum(r["tokens"] for r in results)
        latencies = sorted(r["latency_ms"] for r in results)
        summary.append({
            "drafter": drafter,
            "cuts": len(results),
            "non_empty": round(statistics.mean(r["non_empty"] for r in results), 3),
            "parses": round(statistics.mean(r["parses"] for r in results), 3),
            "first_line_exact": round(statistics.mean(r["first_line_exact"] for r in results), 3),
            "latency_ms_p50": round(statistics.median(latencies), 1),
            "latency_ms_p95": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 1),
            "tokens": tokens,
            "tokens_per_pass": round(tokens / sum(r["passes"] for r in results), 3),
            "mean_tokens_per_pass_per_cut": round(statistics.mean(r["tokens"] / r["passes"] for r in results), 3),
            "acceptance_rate": round(sum(r["accepted"] for r in results) / max(1, sum(r["drafted"] for r in results)), 4),
            "decode_tokens_per_s": round(1000 * tokens / sum(r["decode_ms"] for r in results), 1),
            "total_tokens_per_s": round(1000 * tokens / sum(r["total_ms"] for r in results), 1),
            "identical_to_reference": all(r["identical"] for r in results),
        })
    models = {"target": engine.target.name, "draft": engine.draft.name if engine.draft is not None else "none",
              "dtype": str(engine.target.model.dtype), "device": str(engine.target.model.device)}
    if args.json:
        print(json.dumps({"settings": vars(args) | {"run": None}, "models": models, "rows": summary}, indent=2))
    else:
        print(f"target {models['target']}, draft {models['draft']}, {models['dtype']} on {models['device']}; "
              f"corpus {args.corpus}, {args.cuts} cuts; reference for 'identical': {drafters[0]}")
        header = ["drafter", "non-empty", "parses", "1st line exact", "tokens/pass", "acceptance", "decode tok/s",
                  "total tok/s", "latency p50/p95 ms", "identical"]
        print(" | ".join(header))
        for row in summary:
            print(f"{row['drafter']} | {row['non_empty']:.2f} | {row['parses']:.2f} | {row['first_line_exact']:.2f} | "
                  f"{row['tokens_per_pass']:.2f} | {row['acceptance_rate']:.2f} | {row['decode_tokens_per_s']:.1f} | "
                  f"{row['total_tokens_per_s']:.1f} | {row['latency_ms_p50']:.0f}/{row['latency_ms_p95']:.0f} | "
                  f"{row['identical_to_reference']}")
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench cuts`` on the ``bench`` command's subparsers object."""
    cuts = kinds.add_parser("cuts", help="complete holes cut into held-out files, per drafter: speed and quality")
    cuts.add_argument("--corpus", default="stdlib", help="stdlib, 2026 (code written after the models' training) "
                                                         "or a directory of .py files")
    cuts.add_argument("--model", default="auto", help="target model name (as for speclsp complete)")
    cuts.add_argument("--draft-model", default="auto", help="draft model name, or none")
    cuts.add_argument("--dtype", default="auto")
    cuts.add_argument("--cuts", type=int, default=20)
    cuts.add_argument("--cut-lines", type=int, default=3)
    cuts.add_argument("--max-new-tokens", type=int, default=64)
    cuts.add_argument("--max-draft-tokens", type=int, default=DEFAULT_MAX_DRAFT_TOKENS)
    cuts.add_argument("--draft-min-confidence", type=float, default=0.0,
                      help="the draft model stops at a token it gives less probability than this")
    cuts.add_argument("--drafters", default="none,ngram,model,auto")
    cuts.add_argument("--seed", type=int, default=0)
    cuts.add_argument("--json", action="store_true")
    cuts.set_defaults(run=run)
