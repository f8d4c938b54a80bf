"""``speclsp bench cuts``: complete holes cut into held-out standard-library files, per drafter.

For each cut point (a line inside a held-out file, chosen with a fixed seed) the text from the line's
indentation to the end of the ``--cut-lines``-th line is removed, and every drafter completes the hole
from a cold cache. Reported per drafter: mean accepted tokens per target pass, acceptance rate,
tokens/s over decoding (draft + verify) and over the whole generation (prefill included), and whether
every output equals plain greedy decoding (``none``, run first; without it, the first drafter listed).

A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys

from lsprotocol import types

from decoding.engine import DRAFTER_MODES, Engine
from decoding.generate import DEFAULT_MAX_DRAFT_TOKENS
from decoding.starter.data import DEFAULT_HELD_OUT, read_texts, stdlib_files
from lsp_server.cli import cut_hole
from lsp_server.completer import complete
from lsp_server.documents import Document
from lsp_server.positions import codec_for
from lsp_server.settings import Settings


def cut_points(count: int, seed: int) -> list[tuple[Document, types.Position]]:
    """``count`` (document, cursor) pairs at the indentation of code lines inside held-out files."""
    paths = stdlib_files(DEFAULT_HELD_OUT, want_held_out=True)
    rng = random.Random(seed)
    candidates = []
    for path, text in zip(paths, read_texts(paths)):
        document = Document(path.as_uri(), text, 0, "python")
        for number, line in enumerate(text.split("\n")):
            stripped = line.strip()
            if line.startswith(" ") and stripped and not stripped.startswith(("#", '"', "'", ")", "]", "}")):
                candidates.append((document, types.Position(line=number, character=len(line) - len(line.lstrip()))))
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
    engine = Engine.load(Settings().engine_config())
    rows: dict[str, list[dict]] = {d: [] for d in drafters}
    for index, (document, position) in enumerate(cut_points(args.cuts, args.seed)):
        holed, _ = cut_hole(document, position, codec, args.cut_lines)
        reference = None
        for drafter in drafters:  # interleaved: every drafter completes this cut before the next cut
            engine.reset_caches()
            settings = Settings(drafter=drafter, max_new_tokens=args.max_new_tokens,
                                max_draft_tokens=args.max_draft_tokens, draft_min_confidence=args.draft_min_confidence)
            generation = complete(engine, holed, position, codec, settings).generation
            stats = generation.stats
            reference = generation.token_ids if reference is None else reference
            decode_ms = stats.ms["draft"] + stats.ms["verify"]
            rows[drafter].append({
                "tokens": stats.new_tokens, "passes": stats.target_passes, "drafted": stats.drafted,
                "accepted": stats.accepted, "decode_ms": decode_ms, "total_ms": stats.ms["total"],
                "identical": generation.token_ids == reference,
            })
        print(f"cut {index + 1}/{args.cuts}: {document.uri.rsplit('/', 2)[-2:]} line {position.line + 1}",
              file=sys.stderr)
    summary = []
    for drafter, results in rows.items():
        tokens = sum(r["tokens"] for r in results)
        summary.append({
            "drafter": drafter,
            "cuts": len(results),
            "tokens": tokens,
            "tokens_per_pass": round(tokens / sum(r["passes"] for r in results), 3),
            "mean_tokens_per_pass_per_cut": round(statistics.mean(r["tokens"] / r["passes"] for r in results), 3),
            "acceptance_rate": round(sum(r["accepted"] for r in results) / max(1, sum(r["drafted"] for r in results)), 4),
            "decode_tokens_per_s": round(1000 * tokens / sum(r["decode_ms"] for r in results), 1),
            "total_tokens_per_s": round(1000 * tokens / sum(r["total_ms"] for r in results), 1),
            "identical_to_reference": all(r["identical"] for r in results),
        })
    if args.json:
        print(json.dumps({"settings": vars(args) | {"run": None}, "rows": summary}, indent=2))
    else:
        print(f"reference for 'identical': {drafters[0]}")
        header = ["drafter", "tokens/pass", "acceptance", "decode tok/s", "total tok/s", "identical"]
        print(" | ".join(header))
        for row in summary:
            print(f"{row['drafter']} | {row['tokens_per_pass']:.2f} | {row['acceptance_rate']:.2f} | "
                  f"{row['decode_tokens_per_s']:.1f} | {row['total_tokens_per_s']:.1f} | {row['identical_to_reference']}")
    return 0


def add_parser(commands) -> None:
    bench = commands.add_parser("bench", help="measurements on this machine")
    kinds = bench.add_subparsers(dest="bench", required=True)
    cuts = kinds.add_parser("cuts", help="complete holes cut into held-out stdlib files, per drafter")
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
    from decoding import bench_decode
    from lsp_server import bench_lsp

    bench_lsp.add_parser(kinds)
    bench_decode.add_parser(kinds)
