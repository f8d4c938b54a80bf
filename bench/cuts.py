"""``speclsp bench cuts``: complete holes cut into held-out files, per drafter: speed and quality.

For each cut point (a line inside a held-out file, chosen with a fixed seed) the text from the line's
indentation to the end of the ``--cut-lines``-th line is removed, and every drafter completes the hole
from a cold cache, as ``speclsp complete --cut-lines`` does. Reported per drafter: mean accepted tokens
per target pass, acceptance rate, tokens/s over decoding (draft + verify) and over the whole generation
(prefill included), wall-clock latency of the whole completion (p50/p95), whether every output equals
plain greedy decoding (``none``, run first; without it, the first drafter listed), and the quality of
what would be inserted: the share of non-empty completions, the share that are non-empty and after whose
insertion the file still parses (Python's ``ast``; for other languages no ERROR or MISSING node in the
tree-sitter tree, :mod:`bench.cut_sites`), and the share whose first line equals the removed text's first
line. One row per language and drafter; with ``--json`` also every cut's package, version, file, line, the
text removed, and per drafter the mode decided, what the model wrote and what would be inserted after trimming.

Corpora (``--corpus``, :mod:`bench.corpus`): ``stdlib`` (the held-out packages of the standard library,
which real models have seen in training), ``2026`` (files first written in 2026, by their copyright line,
of the installed transformers and huggingface_hub, outside ``transformers/models`` whose model files copy
each other: code the Qwen2.5-Coder models, trained in 2024, cannot have seen), ``2026-ts``, ``2026-js``,
``2026-rust`` (files of npm and PyPI packages first released in 2026, pinned in
``bench/data/corpora-2026.json``, downloaded with ``--fetch``: :mod:`bench.corpus_fetch`), or a directory of
``.py`` files. Several corpora, comma-separated, take ``--cuts`` cuts each.

A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from lsprotocol import types

from bench.corpus import corpus_names
from bench.corpus_fetch import DEFAULT_CORPUS_DIR, add_fetch_arguments
from bench.cut_sites import describe, first_line, is_cut_line, parses, source_documents
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


#: what each cut's record keeps per drafter (timings are in the rows)
_RECORDED = ("non_empty", "parses", "empty_parses", "first_line_exact", "mode", "finish", "written", "inserted",
             "removed")


def cut_points(count: int, seed: int, corpus: str = "stdlib", corpus_dir: Path = DEFAULT_CORPUS_DIR,
               fetch_missing: bool = False) -> list[tuple[Document, types.Position]]:
    """``count`` (document, cursor) pairs at the indentation of code lines inside files of ``corpus`` (one
    name: see :func:`bench.cut_sites.source_documents`) that parse; documents carry their language id.

    Raises:
        ValueError: the corpus has fewer candidate lines than ``count``.
    """
    rng = random.Random(seed)
    candidates = []
    for document in source_documents(corpus, corpus_dir, fetch_missing):
        for number, line in enumerate(document.text.split("\n")):
            if is_cut_line(line, document.language_id):
                candidates.append((document, types.Position(line=number, character=len(line) - len(line.lstrip()))))
    if len(candidates) < count:
        raise ValueError(f"corpus {corpus!r} has {len(candidates)} cut points, fewer than --cuts {count}")
    return rng.sample(candidates, count)


def _complete_cut(engine, base: Settings, args: argparse.Namespace, document: Document, position: types.Position,
                  drafters: list[str]) -> dict[str, dict]:
    """Every drafter's completion of one cut (plain decoding first: the reference), timed and scored."""
    codec = codec_for(types.PositionEncodingKind.Utf32)
    holed, removed = cut_hole(document, position, codec, args.cut_lines)
    empty_parses = parses(holed.text, document.language_id)  # the hole left empty: does the file parse?
    reference, results = None, {}
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
        inserted = completion.insert_text
        results[drafter] = {
            "tokens": stats.new_tokens, "passes": stats.target_passes, "drafted": stats.drafted,
            "accepted": stats.accepted, "decode_ms": stats.ms["draft"] + stats.ms["verify"],
            "total_ms": stats.ms["total"], "latency_ms": latency_ms, "identical": generation.token_ids == reference,
            "non_empty": bool(inserted.strip()),
            "parses": bool(inserted.strip()) and parses(holed.text[:request.offset] + inserted
                                                         + holed.text[request.offset:], document.language_id),
            "first_line_exact": bool(inserted.strip()) and first_line(inserted) == first_line(removed),
            "inserted": inserted, "removed": removed, "written": generation.text,
            "mode": completion.mode.reason, "finish": str(generation.finish_reason), "empty_parses": empty_parses,
        }
    return results


def summarize(language: str, drafter: str, results: list[dict]) -> dict:
    """One table row: a drafter's quality and speed over the cuts of one language."""
    tokens = sum(r["tokens"] for r in results)
    latencies = sorted(r["latency_ms"] for r in results)
    return {
        "language": language,
        "drafter": drafter,
        "cuts": len(results),
        "non_empty": round(statistics.mean(r["non_empty"] for r in results), 3),
        "parses": round(statistics.mean(r["parses"] for r in results), 3),
        "first_line_exact": round(statistics.mean(r["first_line_exact"] for r in results), 3),
        "parses_left_empty": round(statistics.mean(r["empty_parses"] for r in results), 3),
        "latency_ms_p50": round(statistics.median(latencies), 1),
        "latency_ms_p95": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 1),
        "tokens": tokens,
        "tokens_per_pass": round(tokens / max(1, sum(r["passes"] for r in results)), 3),
        "mean_tokens_per_pass_per_cut": round(statistics.mean(r["tokens"] / max(1, r["passes"]) for r in results), 3),
        "acceptance_rate": round(sum(r["accepted"] for r in results) / max(1, sum(r["drafted"] for r in results)), 4),
        "decode_tokens_per_s": round(1000 * tokens / max(1e-9, sum(r["decode_ms"] for r in results)), 1),
        "total_tokens_per_s": round(1000 * tokens / max(1e-9, sum(r["total_ms"] for r in results)), 1),
        "identical_to_reference": all(r["identical"] for r in results),
    }


def print_table(summary: list[dict], models: dict, args: argparse.Namespace, reference: str) -> None:
    """The per-language, per-drafter table as text."""
    print(f"target {models['target']}, draft {models['draft']}, {models['dtype']} on {models['device']}; "
          f"corpus {args.corpus}, {args.cuts} cuts per corpus; reference for 'identical': {reference}")
    header = ["language", "drafter", "cuts", "non-empty", "parses", "parses left empty", "1st line exact",
              "tokens/pass", "acceptance", "decode tok/s", "total tok/s", "latency p50/p95 ms", "identical"]
    print(" | ".join(header))
    for row in summary:
        print(f"{row['language']} | {row['drafter']} | {row['cuts']} | {row['non_empty']:.2f} | {row['parses']:.2f} | "
              f"{row['parses_left_empty']:.2f} | {row['first_line_exact']:.2f} | {row['tokens_per_pass']:.2f} | "
              f"{row['acceptance_rate']:.2f} | "
              f"{row['decode_tokens_per_s']:.1f} | {row['total_tokens_per_s']:.1f} | "
              f"{row['latency_ms_p50']:.0f}/{row['latency_ms_p95']:.0f} | {row['identical_to_reference']}")


def run(args: argparse.Namespace) -> int:
    drafters = list(dict.fromkeys(args.drafters.split(",")))
    unknown = [d for d in drafters if d not in DRAFTER_MODES]
    if unknown:
        raise ValueError(f"unknown drafters {unknown}; use {', '.join(DRAFTER_MODES)}")
    if args.cuts < 1 or args.cut_lines < 1 or args.max_new_tokens < 1:
        raise ValueError("--cuts, --cut-lines and --max-new-tokens must be >= 1")
    # Plain decoding first: it is the reference every other drafter must equal.
    drafters = (["none"] if "none" in drafters else []) + [d for d in drafters if d != "none"]
    # every cut is a cold document: the whole prompt, not one cut for time (completion.coldPromptMs)
    base = Settings(model=args.model, draft_model=args.draft_model, dtype=args.dtype, cold_prompt_ms=0,
                    **({} if args.time_budget_ms is None else {"time_budget_ms": args.time_budget_ms}))
    points = [point for corpus in corpus_names(args.corpus)
              for point in cut_points(args.cuts, args.seed, corpus, args.corpus_dir, args.fetch)]
    engine = Engine.load(base.engine_config())
    if engine.notice:
        print(f"speclsp: note: {engine.notice}", file=sys.stderr)
    records = []
    for index, (document, position) in enumerate(points):
        results = _complete_cut(engine, base, args, document, position, drafters)
        records.append({**describe(document, args.corpus_dir), "line": position.line + 1,
                        "column": position.character, "results": results})
        print(f"cut {index + 1}/{len(points)}: {records[-1]['language']} {records[-1]['file']} "
              f"line {position.line + 1}", file=sys.stderr)
    languages = list(dict.fromkeys(r["language"] for r in records))
    summary = [summarize(language, drafter, [r["results"][drafter] for r in records if r["language"] == language])
               for language in languages for drafter in drafters]
    models = {"target": engine.target.name, "draft": engine.draft.name if engine.draft is not None else "none",
              "dtype": str(engine.target.model.dtype), "device": str(engine.target.model.device)}
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "run"}
        for record in records:  # timings are in the rows; the per-cut records keep what was inserted
            record["results"] = {d: {k: r[k] for k in _RECORDED} for d, r in record["results"].items()}
        print(json.dumps({"settings": settings, "models": models, "rows": summary, "cuts": records}, indent=2))
    else:
        print_table(summary, models, args, drafters[0])
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench cuts`` on the ``bench`` command's subparsers object."""
    cuts = kinds.add_parser("cuts", help="complete holes cut into held-out files, per drafter: speed and quality")
    cuts.add_argument("--corpus", default="stdlib",
                      help="stdlib, 2026 (Python written after the models' training), 2026-ts, 2026-js, 2026-rust "
                           "(bench/data/corpora-2026.json) or a directory of .py files; several with commas, "
                           "--cuts cuts from each")
    add_fetch_arguments(cuts)
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
    cuts.add_argument("--time-budget-ms", type=int, default=None,
                      help="completion.timeBudgetMs (default: the setting's, as served: past it an answer ends at its "
                           "next line end); 0: off, the whole answer")
    cuts.add_argument("--seed", type=int, default=0)
    cuts.add_argument("--json", action="store_true")
    cuts.set_defaults(run=run)
