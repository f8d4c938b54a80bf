"""The plots of ``speclsp bench decode --out DIR`` (matplotlib, PNG): our n-gram drafter's speedup and
tokens per pass against the draft length k, beside the seed's formula with the acceptance measured at
k = 1, and every row's tokens/s per workload."""

from __future__ import annotations

from pathlib import Path


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): expected tokens per target pass with draft length ``k`` when each
    draft token is accepted independently with probability ``alpha`` (Leviathan et al. 2022)."""
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(sweep_rows: list[dict], out: Path) -> list[Path]:
    """Speedup and tokens per pass against k, one line per workload (PNG files); the tokens-per-pass plot
    has, dashed, the seed's formula with alpha = tokens per pass at k = 1, minus 1 (so equal there)."""
    plt = _pyplot()
    written = []
    for key, label, name in (("speedup_vs_plain", "speedup over plain greedy", "speedup_vs_k.png"),
                             ("tokens_per_pass", "tokens per target pass", "tokens_per_pass_vs_k.png")):
        figure, axes = plt.subplots(figsize=(6, 4))
        for workload in dict.fromkeys(r["workload"] for r in sweep_rows):
            rows = [r for r in sweep_rows if r["workload"] == workload]
            line, = axes.plot([r["k"] for r in rows], [r[key] for r in rows], marker="o", label=workload)
            at_one = next((r for r in rows if r["k"] == 1), None)
            if key == "tokens_per_pass" and at_one is not None:
                alpha = min(1.0, max(0.0, at_one["tokens_per_pass"] - 1))
                axes.plot([r["k"] for r in rows], [expected_tokens_per_pass(alpha, r["k"]) for r in rows],
                          linestyle="--", color=line.get_color(), label=f"{workload}: formula, alpha={alpha:.2f}")
        axes.set_xscale("log", base=2)
        axes.set_xlabel("draft length k (n-gram drafter)")
        axes.set_ylabel(label)
        axes.grid(True, alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(out / name, dpi=100)
        plt.close(figure)
        written.append(out / name)
    return written




def plot_rates(rows: list[dict], out: Path) -> list[Path]:
    """Tokens/s of every method, grouped per workload (``DIR/tokens_per_s.png``)."""
    plt = _pyplot()
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    rate = {(r["workload"], r["method"]): r["tokens_per_s"] for r in rows}
    width = 0.8 / max(1, len(methods))
    figure, axes = plt.subplots(figsize=(max(6, 1.6 * len(workloads) * max(1, len(methods)) / 4), 4))
    colors = plt.get_cmap("tab20").colors  # 20 distinct colours: the default cycle repeats after 10 methods
    for index, method in enumerate(methods):
        axes.bar([w + index * width for w in range(len(workloads))],
                 [rate.get((workload, method), 0.0) for workload in workloads], width, label=method,
                 color=colors[index % len(colors)])
    axes.set_xticks([w + 0.4 - width / 2 for w in range(len(workloads))], workloads)
    axes.set_ylabel("tokens/s")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars, not on them
    figure.tight_layout()
    path = out / "tokens_per_s.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return [path]
