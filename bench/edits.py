"""``speclsp bench edits``: next-edit suggestions on refactors cut from held-out code.

Cases (:mod:`bench.edit_cases`): ``rename`` (one occurrence of a parameter or local renamed, the rest
must follow), ``add_parameter`` (a parameter added to a function, its calls in the region must pass it)
and ``keyword`` (one call's keyword argument renamed, the other calls of that callee must follow), cut
from ``--corpus`` (default ``2026``: code written after the models were trained).

Each case goes through the server's own path: the user's edit is recorded in the server's edit history
(:mod:`lsp_server.workspace.edit_history`) and the region is rewritten by :func:`lsp_server.completer.rewrite`
(the rewrite prompt, the region as a draft, :meth:`decoding.engine.Engine.rewrite`, the minimal edits),
twice from a cold cache: with plain greedy decoding (``none``, the reference) and with drafting
(``--mode``, default ``auto``: the region, the n-gram store and the draft model). Those modules come
with the next-edit work and are imported only when the measurement runs. A case whose region
holds none of the follow-ups, or cuts one in two, is skipped and counted.

Reported per workload and mode: the share of suggestions equal to the expected region (trailing line
breaks aside), the share after which the document parses (tree-sitter), tokens per target pass, the
speedup over plain greedy on the same prompts (total plain ms / total ms), p50/p95 latency (ms), and
whether every drafted output equals plain greedy token for token (a verify pass runs other matmul
shapes than one-token decoding, so a genuine near-tie of the top two logits can part them: see
docs/cases.md D7); where one parts, the token and the target's top-2 logit gap there
(:mod:`bench.near_ties`), in the progress lines and the JSON. A measurement command, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench.corpus import corpus_files
from bench.edit_cases import WORKLOADS, EditCase, edit_cases


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` (nearest rank); ``values`` must not be empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def same_region(suggested: str, expected: str) -> bool:
    """Whether a suggestion equals the expected region, trailing line breaks aside (the end marker's
    own line break is the prompt format's, not the region's)."""
    return suggested.rstrip("\n") == expected.rstrip("\n")


def _history_and_request(case: EditCase, settings):
    """The server's view of ``case``: the user's edit recorded in an edit history as ``didChange``
    records it, and the request at the cursor after it (the server's modules, imported here: see the
    module docstring)."""
    import bisect

    from lsprotocol import types

    from lsp_server import request
    from lsp_server.workspace import documents, edit_history, positions

    uri = f"file:///held-out/{case.source.replace(':', '_')}"
    old = documents.Document(uri, case.before, 0, "python")
    new = documents.Document(uri, case.edited, 1, "python")
    history = edit_history.EditHistory()
    history.record(old, new, [(case.user_edit.start, case.user_edit.end, case.user_edit.text)])
    row = bisect.bisect_right(new.lines.starts, case.cursor) - 1
    position = types.Position(line=row, character=case.cursor - new.lines.starts[row])
    codec = positions.codec_for(types.PositionEncodingKind.Utf32)  # characters are code points
    return history, request.resolve_request(new, position, codec, settings)


def measure_case(engine, case: EditCase, args: argparse.Namespace, base_settings, parser) -> dict | None:
    """Rows ``{mode: {...}}`` for one case through the server's rewrite
    (:func:`lsp_server.completer.rewrite`), or None when its region holds no follow-up (skipped)."""
    from dataclasses import replace

    from bench.near_ties import parting
    from lsp_server import completer
    from lsp_server.backends.local import as_backend
    from lsp_server.syntax import error_count

    rows, reference, expected = {}, None, None
    for mode in dict.fromkeys(("none", args.mode)):  # plain first: the reference
        settings = replace(base_settings, drafter=mode, next_edit_region_lines=args.region_lines,
                           next_edit_max_new_tokens=args.max_new_tokens)
        history, request = _history_and_request(case, settings)
        engine.reset_caches()
        started = time.perf_counter()
        result = completer.rewrite(as_backend(engine), request, history)
        latency_ms = 1000 * (time.perf_counter() - started)
        if result is None:
            return None
        prompt = result.prompt
        expected = expected or case.expected_region(prompt.region_start, prompt.region_end)
        if expected is None or expected[1] == 0:
            return None
        new_region = result.text
        if prompt.region_text.endswith("\n") and not new_region.endswith("\n"):
            new_region += "\n"
        document = case.edited[:prompt.region_start] + new_region + case.edited[prompt.region_end:]
        generation = result.generation
        parted = None if reference is None else parting(engine.target.model, prompt.prompt_ids, reference,
                                                        generation.token_ids)
        reference = generation.token_ids if reference is None else reference
        rows[mode] = {"exact": same_region(result.text, expected[0]), "parses": error_count(parser, document) == 0,
                      "tokens": generation.stats.new_tokens, "passes": generation.stats.target_passes,
                      "latency_ms": latency_ms, "prefill_ms": generation.stats.ms["prefill"],
                      "prompt_tokens": generation.stats.prefill_computed + generation.stats.prefill_reused,
                      "identical": generation.token_ids == reference, "parted": parted}
    return rows


def describe_parting(parted: dict | None) -> str:
    """How a drafted output parted from plain greedy, for the progress line (``""`` when it did not)."""
    if parted is None:
        return ""
    if parted["top2_gap"] is None:
        return f"; parted from plain greedy at token {parted['token']}: one output stops earlier"
    return (f"; parted from plain greedy at token {parted['token']}: top-2 logit gap {parted['top2_gap']:.3g} "
            f"({parted['top2_gap'] / parted['logit_step']:.1f} steps of the logits' dtype)")


def summarise(rows: list[dict], plain: list[dict]) -> dict:
    """One report row from the per-case rows of a mode and of plain decoding on the same cases."""
    latencies = [r["latency_ms"] for r in rows]
    return {
        "cases": len(rows),
        "exact": round(statistics.mean(r["exact"] for r in rows), 3),
        "parses": round(statistics.mean(r["parses"] for r in rows), 3),
        "tokens_per_pass": round(sum(r["tokens"] for r in rows) / max(1, sum(r["passes"] for r in rows)), 2),
        "speedup": round(sum(r["latency_ms"] for r in plain) / sum(latencies), 2),
        # the same without the prompt's prefill, which speculation cannot shorten
        "speedup_after_prefill": round(sum(r["latency_ms"] - r["prefill_ms"] for r in plain)
                                       / max(1e-9, sum(r["latency_ms"] - r["prefill_ms"] for r in rows)), 2),
        "prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] for r in rows)),
        "prefill_ms_p50": round(percentile([r["prefill_ms"] for r in rows], 50), 1),
        "latency_ms_p50": round(percentile(latencies, 50), 1),
        "latency_ms_p95": round(percentile(latencies, 95), 1),
        "identical_to_plain": all(r["identical"] for r in rows),
        "parted": [r["parted"] for r in rows if r["parted"] is not None],
    }


def run(args: argparse.Namespace) -> int:
    from decoding.engine import Engine
    from lsp_server.settings import Settings
    from lsp_server.syntax import parser_for

    if args.cases < 1 or args.region_lines < 1 or args.max_new_tokens < 1:
        raise ValueError("--cases, --region-lines and --max-new-tokens must be >= 1")
    workloads = tuple(dict.fromkeys(args.workloads.split(",")))
    cases = edit_cases(corpus_files(args.corpus), 3 if args.quick else args.cases, args.seed,
                       args.region_lines, workloads)
    settings = Settings(model=args.model, draft_model=args.draft_model, dtype=args.dtype)
    engine = Engine.load(settings.engine_config())
    if engine.notice:
        print(f"speclsp: note: {engine.notice}", file=sys.stderr)
    parser = parser_for("python")
    report, skipped = [], {}
    for workload, chosen in cases.items():
        measured = []
        for index, case in enumerate(chosen):
            rows = measure_case(engine, case, args, settings, parser)
            print(f"{workload} {index + 1}/{len(chosen)}: {case.source}{'' if rows else ' (skipped)'}"
                  f"{describe_parting(rows[args.mode]['parted']) if rows else ''}", file=sys.stderr)
            if rows:
                measured.append(rows)
        skipped[workload] = len(chosen) - len(measured)
        for mode in dict.fromkeys(("none", args.mode)):
            if measured:
                report.append({"workload": workload, "mode": mode,
                               **summarise([m[mode] for m in measured], [m["none"] for m in measured])})
    models = {"target": engine.target.name, "draft": engine.draft.name if engine.draft is not None else "none",
              "dtype": str(engine.target.model.dtype), "device": str(engine.target.model.device)}
    if args.json:
        print(json.dumps({"settings": vars(args) | {"run": None}, "models": models, "skipped": skipped,
                          "rows": report}, indent=2))
        return 0
    print(f"target {models['target']}, draft {models['draft']}, {models['dtype']} on {models['device']}; "
          f"corpus {args.corpus}; skipped (no follow-up in the region): {skipped}")
    print("workload | mode | cases | exact | parses | tokens/pass | speedup | after prefill | latency p50/p95 ms | "
          "prompt tokens | prefill p50 ms | identical")
    for row in report:
        print(f"{row['workload']} | {row['mode']} | {row['cases']} | {row['exact']:.2f} | {row['parses']:.2f} | "
              f"{row['tokens_per_pass']:.2f} | {row['speedup']:.2f}x | {row['speedup_after_prefill']:.2f}x | "
              f"{row['latency_ms_p50']:.0f}/{row['latency_ms_p95']:.0f} | {row['prompt_tokens_mean']} | "
              f"{row['prefill_ms_p50']:.0f} | {row['identical_to_plain']}")
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench edits`` on the ``bench`` command's subparsers object."""
    edits = kinds.add_parser("edits", help="next-edit suggestions on refactors cut from held-out code: "
                                           "exact matches, tokens per pass, speedup over plain greedy")
    edits.add_argument("--corpus", default="2026", help="2026 (code written after the models' training), "
                                                        "stdlib or a directory of .py files")
    edits.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from {', '.join(WORKLOADS)}")
    edits.add_argument("--model", default="auto", help="target model name (as for speclsp complete)")
    edits.add_argument("--draft-model", default="auto", help="draft model name, or none")
    edits.add_argument("--dtype", default="auto")
    edits.add_argument("--mode", default="auto", help="the drafting compared with plain greedy (none)")
    edits.add_argument("--cases", type=int, default=10, help="cases per workload")
    edits.add_argument("--region-lines", type=int, default=20, help="the rewritten region's size, as nextEditRegionLines")
    edits.add_argument("--max-new-tokens", type=int, default=512)
    edits.add_argument("--seed", type=int, default=0)
    edits.add_argument("--quick", action="store_true", help="3 cases per workload")
    edits.add_argument("--json", action="store_true")
    edits.set_defaults(run=run)
