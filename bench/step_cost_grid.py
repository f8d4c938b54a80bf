"""``speclsp bench step-cost``: cost(M), the ms of a pass of M tokens, for every weight path on this machine.

For each model and weight path (:mod:`bench.weight_paths`) a fresh process loads the model on that path and
times passes of M = 1, 2, 4, 8, 16, 32 tokens and prefill pieces of 128, 512 and 1024 tokens after prompts
of 512 and 2048 tokens (:mod:`bench.step_cost`); a path that cannot run here (a kernel not built,
llama-cpp-python missing) gets a row that says why. Then:

* ``DIR/step_cost.json``: every row;
* ``DIR/step_cost.md``: a table per model and context: ms per pass, weight bytes (what a pass reads),
  load time, the first round's time (under ``torch.compile``: the compiling), and tokens/s at the
  tokens per pass the decode workloads reached: plain (1 token per 1-token pass), ``edit`` (8.5 tokens
  per pass of 13: n-gram drafting on a function rewritten with a name renamed) and ``fim`` (1.4 per pass
  of 4: the next line of a hole), the latter also with its 1024-token prompt prefilled (32 new tokens);
  the tokens per pass are those of ``speclsp bench decode --quick`` at 19d0c86
  (docs/bench/decode-quick-19d0c86/README.md), cost(M) between measured sizes interpolated linearly;
* ``DIR/cost_vs_tokens.png``: cost(M) per path, one panel per model and context.

With ``--cpu-kind avx512-vnni|avx2`` each path's process runs with the kind's caps (:mod:`bench.cpu_kinds`):
every row records what its kernels ran with (``what_ran``) and the tables say the kind, ``emulated``.

A measurement command, not a test: it times this machine. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import cpu_kinds
from bench.weight_paths import PATHS
from decoding.weights.cpu_kinds import NATIVE, CpuKind, emulated_kind

DEFAULT_MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
#: (tokens committed per target pass, tokens per pass) of the decode workloads: see the module docstring.
WORKLOAD_PASSES = {"plain": (1.0, 1), "edit": (8.5, 13), "fim": (1.4, 4)}
FIM_NEW_TOKENS, FIM_PROMPT_TOKENS = 32, 1024
ONE_PATH_TIMEOUT_S = 3600


def interpolated_ms(pass_ms: dict[str, float], tokens: float) -> float:
    """cost(``tokens``) from measured sizes (keys: token counts as strings), linear between neighbours.

    Raises:
        ValueError: ``tokens`` outside the measured sizes.
    """
    sizes = sorted(int(k) for k in pass_ms)
    if not sizes[0] <= tokens <= sizes[-1]:
        raise ValueError(f"{tokens} tokens lie outside the measured sizes {sizes[0]}..{sizes[-1]}")
    for low, high in zip(sizes, sizes[1:]):
        if low <= tokens <= high:
            share = (tokens - low) / (high - low)
            return pass_ms[str(low)] + share * (pass_ms[str(high)] - pass_ms[str(low)])
    return pass_ms[str(sizes[0])]  # one size measured, and tokens is it


def workload_rates(pass_ms: dict[str, float]) -> dict[str, float]:
    """Tokens/s after the prompt at each workload's tokens per pass, and ``fim_with_prompt`` (32 tokens
    after a 1024-token prefill)."""
    rates = {name: round(1000 * committed / interpolated_ms(pass_ms, tokens), 2)
             for name, (committed, tokens) in WORKLOAD_PASSES.items()}
    committed, tokens = WORKLOAD_PASSES["fim"]
    total_ms = pass_ms[str(FIM_PROMPT_TOKENS)] + FIM_NEW_TOKENS / committed * interpolated_ms(pass_ms, tokens)
    rates["fim_with_prompt"] = round(1000 * FIM_NEW_TOKENS / total_ms, 2)
    return rates


def measure_one(path_name: str, model: str, contexts: tuple[int, ...], repeats: int, cache: Path) -> list[dict]:
    """Rows of one path and model, measured in this process (one row per context, or one that says why
    the path cannot run here)."""
    import torch

    from bench.step_cost import cost_row
    from bench.weight_paths import load
    from decoding.errors import ModelLoadError

    path = PATHS[path_name]
    head = {"path": path.name, "engine": path.engine, "weights": path.weights, "compiled": path.compiled,
            "model": model, "cpu": _cpu_name(), "torch": torch.__version__}
    try:
        loaded, load_s = load(path, model, cache)
    except (ModelLoadError, ImportError, OSError) as exc:
        return [{**head, "cpu_kind": (emulated_kind() or NATIVE).name, "unavailable": f"{type(exc).__name__}: {exc}"}]
    ran = cpu_kinds.what_ran()  # in this process's environment: the kind's caps, where one is emulated
    head.update(cpu_kind=cpu_kinds.label(ran), what_ran=ran)
    rows = []
    for context in contexts:
        started = time.perf_counter()
        row = cost_row(model, loaded.model, loaded.vocab_size, context, repeats)
        rows.append({**head, **row, "load_s": round(load_s, 1), "measure_s": round(time.perf_counter() - started, 1),
                     "rates": workload_rates(row["pass_ms"])})
        print(f"step cost: {path.name} {model} at {context}: 1 token {row['pass_ms']['1']} ms, "
              f"16 {row['pass_ms']['16']} ms, prefill 1024 {row['pass_ms']['1024']} ms", file=sys.stderr)
    return rows


def _cpu_name() -> str:
    from decoding.weights.cpu_flags import cpu_name as name

    return name()


def measure_all(models: list[str], paths: list[str], contexts: tuple[int, ...], repeats: int, out: Path,
                cache: Path, kind: CpuKind = NATIVE) -> list[dict]:
    """Every path and model, each in a fresh process (memory freed, one path's compile caches and threads
    kept from the next) with ``kind``'s caps; rows as they come are written to ``out/step_cost.json``."""
    rows: list[dict] = []
    out.mkdir(parents=True, exist_ok=True)
    for model in models:
        for path in paths:
            one = out / f"{model}-{path}.json"
            command = [sys.executable, "-m", "bench.step_cost_grid", "--one", path, "--models", model,
                       "--contexts", ",".join(map(str, contexts)), "--repeats", str(repeats), "--cache", str(cache),
                       "--out", str(one)]
            print(f"step cost: {path} {model} ...", file=sys.stderr)
            try:
                done = subprocess.run(command, timeout=ONE_PATH_TIMEOUT_S, env=cpu_kinds.kind_environment(kind),
                                      check=False)
                failure = None if done.returncode == 0 and one.exists() else f"exit status {done.returncode}"
            except subprocess.TimeoutExpired:
                failure = f"over {ONE_PATH_TIMEOUT_S} s"
            rows.extend(json.loads(one.read_text()) if failure is None else
                        [{"path": path, "model": model, "cpu_kind": kind.name,
                          "unavailable": f"the measuring process failed ({failure})"}])
            (out / "step_cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


def markdown(rows: list[dict]) -> str:
    """The tables of ``DIR/step_cost.md``: one per model and context, and the paths that could not run."""
    sizes = ("1", "2", "4", "8", "16", "32", "128", "512", "1024")
    lines = []
    measured = [r for r in rows if "unavailable" not in r]
    for model in dict.fromkeys(r["model"] for r in measured):
        for context in dict.fromkeys(r["context"] for r in measured if r["model"] == model):
            kinds = dict.fromkeys(r.get("cpu_kind") for r in measured if (r["model"], r["context"]) == (model, context))
            lines += [f"### {model}, {context}-token prompt", "",
                      *[f"CPU kind: {kind}" for kind in kinds if kind], *([""] if any(kinds) else []),
                      "| path | weights (GB) | " + " | ".join(f"M={s}" for s in sizes)
                      + " | plain tok/s | edit tok/s | fim tok/s | fim with prompt | load s | first round s |",
                      "|---" * (len(sizes) + 8) + "|"]
            for r in measured:
                if r["model"] != model or r["context"] != context:
                    continue
                rates = r["rates"]
                lines.append(f"| {r['path']} | {r['weight_bytes'] / 1e9:.2f} | "
                             + " | ".join(f"{r['pass_ms'][s]:,.1f}" for s in sizes)
                             + f" | {rates['plain']} | {rates['edit']} | {rates['fim']} | {rates['fim_with_prompt']}"
                             f" | {r['load_s']} | {sum(r['warmup_ms'].values()) / 1000:.1f} |")
            lines.append("")
    missing = [r for r in rows if "unavailable" in r]
    if missing:
        lines += ["Not measured here:", ""] + [f"- {r['path']} ({r['model']}): {r['unavailable']}" for r in missing]
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: Path) -> Path:
    """``out/cost_vs_tokens.png``: ms per pass against tokens per pass, a line per path.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if "unavailable" not in r]
    panels = list(dict.fromkeys((r["model"], r["context"]) for r in measured))
    figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False)
    colours = plt.get_cmap("tab20").colors
    names = list(dict.fromkeys(r["path"] for r in measured))
    for axis, (model, context) in zip(axes[0], panels):
        for r in measured:
            if (r["model"], r["context"]) == (model, context):
                sizes = sorted(int(s) for s in r["pass_ms"])
                axis.plot(sizes, [r["pass_ms"][str(s)] for s in sizes], marker="o", label=r["path"],
                          color=colours[names.index(r["path"]) % len(colours)],
                          linestyle="-" if r["engine"] == "torch" else "--")
        axis.set(xscale="log", yscale="log", xlabel="tokens per pass (M)", ylabel="ms per pass",
                 title=f"{model}, {context}-token prompt")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    figure.tight_layout()
    path = out / "cost_vs_tokens.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _cache_default() -> Path:
    from decoding.weights.gguf_models import cache_root

    return cache_root() / "bench-gguf"


def run(args: argparse.Namespace) -> int:
    contexts = tuple(int(c) for c in args.contexts.split(","))
    models = args.models.split(",")
    cache = args.cache or _cache_default()
    if args.one:
        rows = [row for model in models for row in measure_one(args.one, model, contexts, args.repeats, cache)]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
        return 0
    paths = list(PATHS) if args.paths == "all" else args.paths.split(",")
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise SystemExit(f"unknown paths {unknown}; use {', '.join(PATHS)}")
    rows = (json.loads((args.out / "step_cost.json").read_text()) if args.tables_only
            else measure_all(models, paths, contexts, args.repeats, args.out, cache,
                             cpu_kinds.checked_kind(args.cpu_kind)))
    table = markdown(rows)
    (args.out / "step_cost.md").write_text(table)
    print(table)
    try:
        print(f"wrote {plot(rows, args.out)}", file=sys.stderr)
    except ImportError:
        print("no plot: matplotlib is not installed (pip install 'speclsp[bench]')", file=sys.stderr)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated model packs (or starter)")
    parser.add_argument("--paths", default="all", help=f"comma-separated, from {', '.join(PATHS)}; default all")
    parser.add_argument("--contexts", default="512,2048", help="prompt tokens before the timed passes")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (passes over 4 s: at most 2)")
    parser.add_argument("--out", type=Path, required=True, help="DIR for step_cost.json, .md and the plot")
    parser.add_argument("--cache", type=Path, default=None, help="where Q4_0/Q8_0 GGUF files are written once "
                                                                 "(default: the speclsp cache's bench-gguf/)")
    parser.add_argument("--tables-only", action="store_true", help="redo the table and plot from DIR/step_cost.json")
    cpu_kinds.add_argument(parser)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # one path, in this process
    parser.set_defaults(run=run)
    return parser


def add_parser(kinds) -> None:
    add_arguments(kinds.add_parser("step-cost", help="cost of a pass of M tokens for every weight path"))


if __name__ == "__main__":
    arguments = add_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0])).parse_args()
    raise SystemExit(arguments.run(arguments))
