"""``speclsp bench fim-eval``: HumanEval-FIM single-line through the server and through the model alone,
per language, beside the published rows.

The tasks (:mod:`bench.fim_tasks`; ``--tasks PATH``, by default the shared data folder's
``humaneval-fim/tasks.jsonl``, kept outside the repository): a fixed stratified sample of
``--per-language`` tasks (default 30) of each of ``--languages`` drawn with ``--seed``, or ``--all``.
Two paths (``--paths``), greedy, each scored by exact match of one line against the canonical line,
both stripped:

* ``served`` (:mod:`bench.fim_served`): the document with the hole removed, opened in the real server,
  an invoked inline completion at column 0 of the empty line; its answer's first line. The server's
  defaults (``completion.model: auto`` may give inline completions to the draft model: the model that
  served them is read from the server and recorded), but for ``--setting``, ``--model``,
  ``--draft-model`` and ``--drafter``.
* ``raw`` (:mod:`bench.fim_raw`): Qwen's PSM prompt and scorer on the model alone. ``--raw-model``:
  by default the model that wrote the served answers (with ``--paths raw`` alone: ``--model``'s target).

Reported per language and over all the tasks run: exact match % with its 95% Wilson interval per path;
the served answers that were empty, and those among them where the raw model wrote a non-empty line;
the served answers' mean latency (request sent to answer, ms, this client); the published base-model
rows (Qwen2.5-Coder technical report, Table 7; their ``all`` is weighted by the full set's tasks per
language, ours is over the sample); the CPU kind (:mod:`bench.cpu_kinds`). The table goes to stdout,
progress to stderr; ``--out DIR`` writes ``DIR/fim_eval.json`` with every task's row (``name``,
``language``, ``path``, ``expected``, ``first_line``, ``match``, ``empty``, ``latency_ms``, the whole
``answer`` and the trace's figures). A measurement command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from bench import cpu_kinds
from bench.fim_tasks import LANGUAGES, PUBLISHED, FimTask, default_tasks_path, read_tasks, sample_tasks, wilson
from bench.lsp_client import server_settings

PATHS = ("served", "raw")
PER_LANGUAGE = 30


def path_figures(rows: list[dict]) -> dict:
    """Exact match of one path's ``rows``: ``tasks``, ``matches``, ``exact_pct`` and its 95% Wilson
    interval ``interval_pct`` (percent, one decimal); ``empty`` answers; mean ``latency_ms``."""
    matches = sum(row["match"] for row in rows)
    low, high = wilson(matches, len(rows))
    return {"tasks": len(rows), "matches": matches, "exact_pct": round(100 * matches / len(rows), 1),
            "interval_pct": [round(100 * low, 1), round(100 * high, 1)], "empty": sum(row["empty"] for row in rows),
            "latency_ms": round(statistics.fmean(row["latency_ms"] for row in rows), 1)}


def summarize(rows: list[dict], languages: list[str]) -> dict:
    """Per language (in ``languages``' order) and ``all``: each path's :func:`path_figures`, the served
    empty answers where the raw path's line was not empty (``None`` unless both paths ran), and the
    published rows."""
    raw_lines = {(row["language"], row["name"]): row["first_line"] for row in rows if row["path"] == "raw"}
    summary = {}
    for language in (*languages, "all"):
        chosen = [row for row in rows if language == "all" or row["language"] == language]
        if not chosen:
            continue
        entry: dict = {"published": {model: figures[language] for model, figures in PUBLISHED.items()}}
        for path in PATHS:
            own = [row for row in chosen if row["path"] == path]
            if own:
                entry[path] = path_figures(own)
        if "served" in entry and "raw" in entry:
            entry["served_empty_raw_not"] = sum(1 for row in chosen if row["path"] == "served" and row["empty"]
                                                and raw_lines.get((row["language"], row["name"])))
        summary[language] = entry
    return summary


def _cell(figures: dict | None) -> str:
    if figures is None:
        return "-"
    low, high = figures["interval_pct"]
    return f"{figures['exact_pct']:.1f} [{low:.1f}, {high:.1f}] ({figures['matches']}/{figures['tasks']})"


def print_table(result: dict) -> None:
    """The table, the empty served answers and what ran, on stdout."""
    models = list(PUBLISHED)
    print(f"HumanEval-FIM single-line, exact match % [95% Wilson interval] (matches/tasks); "
          f"{result['sample']}; CPU kind: {result['cpu_kind']}")
    print(f"served by {result['served'].get('model') or '-'} ({result['served'].get('load_message') or 'not run'}); "
          f"raw: {result.get('raw_model') or 'not run'}")
    for line in result["served"].get("choices", []):  # the server's own line saying who writes completions
        if "completionModel" in line:
            print("server: " + line[line.index("completionModel"):])
    print("language | " + " | ".join(f"published {model}" for model in models)
          + " | raw model, Qwen's prompt and scorer | served | served empty | served empty, raw not "
            "| served mean latency ms")
    for language, entry in result["summary"].items():
        served = entry.get("served")
        print(f"{language} | " + " | ".join(f"{entry['published'][model]}" for model in models)
              + f" | {_cell(entry.get('raw'))} | {_cell(served)} | "
                f"{served['empty'] if served else '-'} | {entry.get('served_empty_raw_not', '-')} | "
                f"{served['latency_ms'] if served else '-'}")
    empty = result["empty_served"]
    print(f"empty served answers ({len(empty)}): " + ("; ".join(empty) if empty else "none"))
    print(f"wall time: {result['wall_s']:.0f} s")


def _tasks(args: argparse.Namespace) -> list[FimTask]:
    """The sampled tasks. Raises SystemExit: no tasks file, an unreadable one, or bad options."""
    path = args.tasks or default_tasks_path()
    if path is None or not path.is_file():
        raise SystemExit("speclsp bench fim-eval: no tasks file" + (f" at {path}" if path else "")
                         + ": pass --tasks PATH (HumanEval-FIM single-line as JSON lines: name, language, prompt, "
                           "suffix, canonical_solution; the rows of Qwen2.5-Coder's hm_fim/data/train.parquet)")
    languages = [language for language in args.languages.split(",") if language]
    paths = [path for path in args.paths.split(",") if path]
    if not paths or set(paths) - set(PATHS):
        raise SystemExit(f"speclsp bench fim-eval: --paths takes {', '.join(PATHS)}, not {args.paths!r}")
    try:
        tasks = sample_tasks(read_tasks(path), languages, None if args.all else args.per_language, args.seed)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"speclsp bench fim-eval: {exc}") from None
    if not tasks:
        raise SystemExit(f"speclsp bench fim-eval: {path} has no tasks in {', '.join(languages)}")
    args.tasks, args.languages, args.paths = path, languages, paths
    return tasks


def _raw_rows(args: argparse.Namespace, tasks: list[FimTask], served_model: str | None) -> tuple[list[dict], str]:
    """The raw path's rows and the model that wrote them (``--raw-model``; see the module docstring)."""
    from bench.fim_raw import load_raw_engine, run_raw
    from decoding.weights.model_names import resolve_pair
    from lsp_server.settings.parse import parse_settings

    model = args.raw_model
    if model == "served":
        model = served_model or resolve_pair(args.model, args.draft_model).target
    settings, _ = parse_settings(server_settings(args.setting or []))
    engine = load_raw_engine(model, settings)
    return run_raw(engine, tasks), engine.target.name


def run(args: argparse.Namespace) -> int:
    """``speclsp bench fim-eval`` (see the module docstring)."""
    started = time.perf_counter()
    tasks = _tasks(args)
    ran = cpu_kinds.what_ran()  # the server started below inherits this process's environment
    rows, served, raw_model = [], {}, None
    if "served" in args.paths:
        from bench.fim_served import run_served

        served_rows, served = asyncio.run(run_served(args, tasks))
        rows += served_rows
    if "raw" in args.paths:
        raw_rows, raw_model = _raw_rows(args, tasks, served.get("model"))
        rows += raw_rows
    sample = (f"every task of {', '.join(args.languages)}" if args.all
              else f"{args.per_language} tasks per language drawn with seed {args.seed}")
    result = {"tasks_file": str(args.tasks), "sample": sample, "languages": args.languages, "paths": args.paths,
              "settings": {"model": args.model, "draft_model": args.draft_model, "drafter": args.drafter,
                           "setting": list(args.setting or []), "raw_model": args.raw_model},
              "served": served, "raw_model": raw_model, "cpu_kind": cpu_kinds.label(ran),
              "summary": summarize(rows, args.languages),
              "empty_served": [f"{row['language']}/{row['name']}" for row in rows
                               if row["path"] == "served" and row["empty"]],
              "wall_s": round(time.perf_counter() - started, 1), "what_ran": ran, "rows": rows}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fim_eval.json").write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench fim-eval``."""
    fim = kinds.add_parser("fim-eval", help="HumanEval-FIM single-line through the server and the model alone, "
                                            "per language, beside the published rows")
    fim.add_argument("--tasks", type=Path, default=None, metavar="PATH",
                     help="the tasks as JSON lines (default: the shared data folder's humaneval-fim/tasks.jsonl)")
    fim.add_argument("--languages", default=",".join(LANGUAGES), help="of py, java, js (default all three)")
    fim.add_argument("--per-language", type=int, default=PER_LANGUAGE,
                     help=f"tasks per language, a fixed sample drawn with --seed (default {PER_LANGUAGE})")
    fim.add_argument("--all", action="store_true", help="every task of the languages (4,792 in all: hours)")
    fim.add_argument("--seed", type=int, default=0)
    fim.add_argument("--paths", default=",".join(PATHS), help="served, raw or both (default both)")
    fim.add_argument("--model", default="auto", help="the server's target model (as for speclsp complete)")
    fim.add_argument("--draft-model", default="auto", help="the server's draft model, or none")
    fim.add_argument("--drafter", default="auto", help="the server's drafter")
    fim.add_argument("--raw-model", default="served",
                     help="the raw path's model (default: the one that wrote the served answers)")
    fim.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                     help="another server setting (its key, VALUE as JSON); model.* settings apply to the raw path too")
    fim.add_argument("--out", type=Path, default=None, help="write DIR/fim_eval.json with every task's row")
    fim.set_defaults(run=run)
