"""``speclsp bench edits``: next-edit suggestions on refactors cut from held-out code.

Cases (:mod:`bench.edit_cases`): ``rename_parameter``, ``rename_local``, ``add_parameter``, ``keyword`` (a
call pattern) and ``fix_typo`` (one of several repeated mistakes), cut from ``--corpus`` (default
``2026``: code written after the models were trained), from the ``--split`` (``test`` by default; prompt
formats are chosen on ``dev``, and no file gives cases to both).

Each case goes through the server's own path: the user's edit is recorded in the server's edit history
(:mod:`lsp_server.workspace.edit_history`) and the region is rewritten by :func:`lsp_server.model.completer.rewrite`
(the rewrite prompt in each ``--formats``, the region as a draft, :meth:`decoding.engine.Engine.rewrite`,
the minimal edits), from a cold cache: with plain greedy decoding (``none``, the reference; left out with
``--no-reference``) and with drafting (``--mode``, default ``auto``). With ``--ahead`` (the default) the
drafted rewrite runs once more as a request ``--ask-after`` seconds after the edit (default 2) finds it:
after the server's background prefill of its prompt (:func:`lsp_server.model.completer.prefill_rewrite`) ran
from the burst's end (:data:`lsp_server.requests.rewrite_ahead.SETTLED_S` after the edit) until then (``ready``;
the time of the prefill left out, as it is in the editor: only what remains is the request's, and the rest
of a prefill piece in flight when the request comes). Those modules are imported only when the measurement
runs. A case whose
region holds none of the follow-ups, or cuts one in two, is skipped and counted.

Reported per format, workload and mode (scores: :mod:`bench.edit_scoring`): the share of suggestions
equivalent to the expected region (``exact``: the same Python and comments; a new argument by keyword or
by position), equal as text, after which the document parses (tree-sitter), left unchanged, that undid
the user's edit (``reversal``), that the server withheld because the model's answer undid it or
dropped most of the region (``withheld``, :mod:`lsp_server.next_edit.guard`; such a case scores as unchanged), that changed a line outside the edit's reach (``outside``); tokens per
target pass, the speedup over plain greedy, p50/p95 latency (ms) cold and ready, and whether every
drafted output equals plain greedy token for token (a verify pass runs other matmul shapes than
one-token decoding, so a genuine near-tie of the top two logits can part them: see docs/cases.md D7;
where one parts, the token and the target's top-2 logit gap there, :mod:`bench.near_ties`). A
measurement command, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench.corpus import corpus_files
from bench.edit_cases import ALIASES, SPLITS, WORKLOADS, EditCase, edit_cases


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` (nearest rank); ``values`` must not be empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _history_and_request(case: EditCase, settings):
    """The server's view of ``case``: the prior edits and then the user's edit recorded in an edit history
    as ``didChange`` records them (each its own edit: further apart than the coalescing window), and the
    request at the cursor after it (the server's modules, imported here: see the module docstring)."""
    import bisect

    from lsprotocol import types

    from lsp_server import request
    from lsp_server.workspace import documents, edit_history, positions

    uri = f"file:///held-out/{case.source.replace(':', '_')}"
    history = edit_history.EditHistory()
    text, version, now = case.before, 0, 0.0
    for edit in case.edits_in_turn:
        old = documents.Document(uri, text, version, "python")
        text = text[:edit.start] + edit.text + text[edit.end:]
        version += 1
        new = documents.Document(uri, text, version, "python")
        history.record(old, new, [(edit.start, edit.end, edit.text)], now=now)
        now += 10 * edit_history.COALESCE_S
    assert text == case.edited
    row = bisect.bisect_right(new.lines.starts, case.cursor) - 1
    position = types.Position(line=row, character=case.cursor - new.lines.starts[row])
    codec = positions.codec_for(types.PositionEncodingKind.Utf32)  # characters are code points
    return history, request.resolve_request(new, position, codec, settings)


def _with_text(case: EditCase, start: int, end: int, text: str) -> str:
    """The edited document with ``[start, end)`` replaced by ``text`` (its trailing line breaks as the
    span's own: the end marker's line break is the prompt format's, not the region's)."""
    old = case.edited[start:end]
    return case.edited[:start] + text.rstrip("\n") + old[len(old.rstrip("\n")):] + case.edited[end:]


def _score(case: EditCase, result, expected: str, parser) -> dict:
    """The quality scores of one rewrite (:mod:`bench.edit_scoring`), over the span it replaces (the
    region, widened to the lines around it the answer wrote again: :mod:`lsp_server.next_edit.span`). Exact:
    the document reads as with the follow-ups in the region made, or in that whole span."""
    from bench import edit_scoring
    from lsp_server.workspace.syntax import error_count

    start, end = result.start, result.end
    document = _with_text(case, start, end, result.text)
    expected_documents = [_with_text(case, result.prompt.region_start, result.prompt.region_end, expected)]
    widened = (start, end) != (result.prompt.region_start, result.prompt.region_end)
    over_span = case.expected_region(start, end) if widened else None
    if over_span is not None:
        expected_documents.append(_with_text(case, start, end, over_span[0]))
    return {"exact": any(edit_scoring.equivalent(document, e) for e in expected_documents),
            "exact_text": document in expected_documents,
            "parses": error_count(parser, document) == 0,
            "unchanged": document == case.edited,
            "reversal": edit_scoring.reversal(case, start, end, result.text),
            "withheld": result.withheld,
            "outside": edit_scoring.outside_reach(case, start, end, result.text)}


def measure_case(engine, case: EditCase, args: argparse.Namespace, base_settings, parser) -> dict | None:
    """Rows ``{mode: {...}}`` for one case through the server's rewrite
    (:func:`lsp_server.model.completer.rewrite`), or None when its region holds no follow-up (skipped)."""
    from dataclasses import replace

    from bench.near_ties import parting
    from lsp_server.model import completer
    from lsp_server.backends.local import as_backend
    from lsp_server.requests.rewrite_ahead import SETTLED_S

    backend = as_backend(engine)
    rows, reference, expected = {}, None, None
    modes = (("none",) if args.reference else ()) + (args.mode,) + (("ready",) if args.ahead else ())
    history, request = _history_and_request(case, replace(base_settings, next_edit_region_lines=args.region_lines,
                                                          next_edit_max_new_tokens=args.max_new_tokens))
    for mode in dict.fromkeys(modes):
        request = replace(request, settings=replace(request.settings, drafter=args.mode if mode == "ready" else mode))
        engine.reset_caches()
        if mode == "ready":  # the background prefill's time between the burst's end and the request
            budget_s = max(0.0, args.ask_after - SETTLED_S)
            stop_at = time.perf_counter() + budget_s
            completer.prefill_rewrite(backend, request, history, lambda: time.perf_counter() >= stop_at)
        started = time.perf_counter()
        if mode == "ready":  # the request came at stop_at and waited for the piece then in flight
            started = min(started, stop_at)
        result = completer.rewrite(backend, request, history)
        latency_ms = 1000 * (time.perf_counter() - started)
        if result is None:
            return None
        prompt = result.prompt
        expected = expected or case.expected_region(prompt.region_start, prompt.region_end)
        if expected is None or expected[1] == 0:
            return None
        generation = result.generation
        parted = None if reference is None else parting(engine.target.model, prompt.prompt_ids, reference,
                                                        generation.token_ids)
        reference = generation.token_ids if reference is None else reference
        rows[mode] = {**_score(case, result, expected[0], parser),
                      "tokens": generation.stats.new_tokens, "passes": generation.stats.target_passes,
                      "latency_ms": latency_ms, "prefill_ms": generation.stats.ms["prefill"],
                      "prompt_tokens": generation.stats.prefill_computed + generation.stats.prefill_reused,
                      "identical": generation.token_ids == reference, "parted": parted,
                      "suggestion": result.text, "region": [prompt.region_start, prompt.region_end],
                      "span": [result.start, result.end]}
    return rows


def describe_parting(parted: dict | None) -> str:
    """How a drafted output parted from plain greedy, for the progress line (``""`` when it did not)."""
    if parted is None:
        return ""
    if parted["top2_gap"] is None:
        return f"; parted from plain greedy at token {parted['token']}: one output stops earlier"
    return (f"; parted from plain greedy at token {parted['token']}: top-2 logit gap {parted['top2_gap']:.3g} "
            f"({parted['top2_gap'] / parted['logit_step']:.1f} steps of the logits' dtype)")


def summarise(rows: list[dict], plain: list[dict] | None) -> dict:
    """One report row from the per-case rows of a mode and, when measured, of plain decoding on the
    same cases (``None``: no speedup)."""
    latencies = [r["latency_ms"] for r in rows]

    def share(key: str) -> float:
        return round(statistics.mean(bool(r[key]) for r in rows), 3)

    summary = {"cases": len(rows), **{key: share(key) for key in ("exact", "exact_text", "parses", "unchanged",
                                                                  "reversal", "withheld", "outside")},
               "tokens_per_pass": round(sum(r["tokens"] for r in rows) / max(1, sum(r["passes"] for r in rows)), 2),
               "prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] for r in rows)),
               "prefill_ms_p50": round(percentile([r["prefill_ms"] for r in rows], 50), 1),
               "latency_ms_p50": round(percentile(latencies, 50), 1),
               "latency_ms_p95": round(percentile(latencies, 95), 1),
               "identical_to_plain": all(r["identical"] for r in rows) if plain is not None else None,
               "parted": [r["parted"] for r in rows if r["parted"] is not None]}
    if plain is not None:
        summary["speedup"] = round(sum(r["latency_ms"] for r in plain) / sum(latencies), 2)
        # the same without the prompt's prefill, which speculation cannot shorten
        summary["speedup_after_prefill"] = round(sum(r["latency_ms"] - r["prefill_ms"] for r in plain)
                                                 / max(1e-9, sum(r["latency_ms"] - r["prefill_ms"] for r in rows)), 2)
    return summary


def _print_table(report: list[dict], models: dict, args, skipped: dict) -> None:
    print(f"target {models['target']}, draft {models['draft']}, {models['dtype']} on {models['device']}; "
          f"corpus {args.corpus}, split {args.split}; skipped (no follow-up in the region): {skipped}")
    print("format | workload | mode | cases | exact | text-equal | parses | unchanged | reversal | withheld | outside | "
          "tokens/pass | speedup | latency p50/p95 ms | prompt tokens | identical")
    for row in report:
        speedup = f"{row['speedup']:.2f}x" if "speedup" in row else "-"
        print(f"{row['format']} | {row['workload']} | {row['mode']} | {row['cases']} | {row['exact']:.2f} | "
              f"{row['exact_text']:.2f} | {row['parses']:.2f} | {row['unchanged']:.2f} | {row['reversal']:.2f} | "
              f"{row['withheld']:.2f} | {row['outside']:.2f} | {row['tokens_per_pass']:.2f} | {speedup} | "
              f"{row['latency_ms_p50']:.0f}/{row['latency_ms_p95']:.0f} | {row['prompt_tokens_mean']} | "
              f"{row['identical_to_plain']}")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from decoding.engine import Engine
    from lsp_server.settings import Settings
    from lsp_server.workspace.syntax import parser_for

    if args.cases < 1 or args.region_lines < 1 or args.max_new_tokens < 1:
        raise ValueError("--cases, --region-lines and --max-new-tokens must be >= 1")
    formats = tuple(dict.fromkeys(args.formats.split(",")))
    cases = edit_cases(corpus_files(args.corpus), 3 if args.quick else args.cases, args.seed,
                       args.region_lines, tuple(args.workloads.split(",")), args.split)
    settings = Settings(model=args.model, draft_model=args.draft_model, dtype=args.dtype)
    engine = Engine.load(settings.engine_config())
    if engine.notice:
        print(f"speclsp: note: {engine.notice}", file=sys.stderr)
    parser = parser_for("python")
    report, skipped, per_case = [], {}, []
    for prompt_format in formats:
        format_settings = replace(settings, next_edit_prompt_format=prompt_format)
        for workload, chosen in cases.items():
            measured = []
            for index, case in enumerate(chosen):
                rows = measure_case(engine, case, args, format_settings, parser)
                drafted = rows[args.mode] if rows else None
                print(f"{prompt_format} {workload} {index + 1}/{len(chosen)}: {case.source}"
                      f"{'' if rows else ' (skipped)'}"
                      f"{' exact=' + str(drafted['exact']) if drafted else ''}"
                      f"{describe_parting(drafted['parted']) if drafted else ''}", file=sys.stderr)
                if rows:
                    measured.append(rows)
                    per_case.append({"format": prompt_format, "workload": workload, "source": case.source,
                                     "rows": rows})
            skipped[workload] = len(chosen) - len(measured)
            plain = [m["none"] for m in measured] if args.reference else None
            for mode in (measured[0] if measured else ()):
                report.append({"format": prompt_format, "workload": workload, "mode": mode,
                               **summarise([m[mode] for m in measured], plain)})
    models = {"target": engine.target.name, "draft": engine.draft.name if engine.draft is not None else "none",
              "dtype": str(engine.target.model.dtype), "device": str(engine.target.model.device)}
    if args.json:
        print(json.dumps({"settings": vars(args) | {"run": None}, "models": models, "skipped": skipped,
                          "rows": report, "cases": per_case}, indent=2))
        return 0
    _print_table(report, models, args, skipped)
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench edits`` on the ``bench`` command's subparsers object."""
    edits = kinds.add_parser("edits", help="next-edit suggestions on refactors cut from held-out code: "
                                           "exact matches, reversals, changes outside the edit's reach, "
                                           "tokens per pass, speedup over plain greedy")
    edits.add_argument("--corpus", default="2026", help="2026 (code written after the models' training), "
                                                        "stdlib or a directory of .py files")
    edits.add_argument("--workloads", default=",".join(WORKLOADS),
                       help=f"comma-separated, from {', '.join((*WORKLOADS, *ALIASES))}")
    edits.add_argument("--split", default="test", choices=SPLITS,
                       help="the cases' split: dev (choose prompts on it), test (report on it), all")
    edits.add_argument("--formats", default="auto", help="comma-separated rewrite prompt formats to compare: "
                                                          "auto, chat, plain, sweep, zeta, zeta_chat")
    edits.add_argument("--model", default="auto", help="target model name (as for speclsp complete)")
    edits.add_argument("--draft-model", default="auto", help="draft model name, or none")
    edits.add_argument("--dtype", default="auto")
    edits.add_argument("--mode", default="auto", help="the drafting compared with plain greedy (none)")
    edits.add_argument("--no-reference", dest="reference", action="store_false",
                       help="leave out plain greedy decoding (no speedup or exactness check)")
    edits.add_argument("--no-ahead", dest="ahead", action="store_false",
                       help="leave out the run after the prompt was computed ahead (the ready latency)")
    edits.add_argument("--ask-after", type=float, default=2.0,
                       help="ready: the request comes this many seconds after the edit (the prompt's background "
                            "prefill has run since the burst was taken to end, nextEdit.prefill)")
    edits.add_argument("--cases", type=int, default=15, help="cases per workload")
    edits.add_argument("--region-lines", type=int, default=20, help="the rewritten region's size, as nextEdit.regionLines")
    edits.add_argument("--max-new-tokens", type=int, default=512)
    edits.add_argument("--seed", type=int, default=0)
    edits.add_argument("--quick", action="store_true", help="3 cases per workload")
    edits.add_argument("--json", action="store_true")
    edits.set_defaults(run=run)
