"""``speclsp bench decode``: our decoding paths against transformers ``generate``, per workload.

Workloads, built at run time from ``--corpus`` (default ``2026``: files of packages released in 2026,
code the models never saw; :mod:`bench.workloads`):

* ``edit``: a function, then a comment asking for it again with one identifier renamed, then the
  renamed function's first line; the output rewrites the function (the text being rewritten is the
  draft);
* ``fim``: fill-in-the-middle at line ends, the next line missing (the server's own prompt builder);
* ``body``: fill-in-the-middle with a whole function body missing (a multi-line answer);
* ``entropy``: a held-out chunk's tokens shuffled: text where drafts rarely match.

The models default to ``auto``: the real pair when installed (``--model starter --draft-model
starter-draft`` for the tiny one).

Rows (same target, prompts and max tokens, greedy, end-of-sequence off so every method writes the
same number of tokens): ours plain, ngram, tree, model, auto; transformers ``generate`` plain, with
``prompt_lookup_num_tokens`` and with ``assistant_model`` (the draft). Repetitions are interleaved
(every method runs a prompt before the next prompt) and per-prompt medians are summed. Each of our
methods learns its own draft-length estimates over a workload's prompts, fresh per workload, as a
server running that mode alone would; what measures the machine (the target's verify pass times, the
draft model's catch-up speed) is shared.

Columns: tokens/s, speedup over our plain greedy in the same run, tokens per target pass and
acceptance (ours; transformers does not report them), and whether the outputs equal our plain greedy;
where one does not, whether it parted within the kernel noise measured there (the logits of a pass over
k + 1 tokens and of one-token steps differ; :func:`bench.noise.measure_parting`, the run's own
pass shapes among those it replays, and with the prompt's the run's own computation decides) or elsewhere
(a fault, for our methods).
Per workload, ``lookup_bound_tokens_per_pass``: the tokens per pass of the best lookup drafter in
hindsight on our plain output (:func:`lookup_bound_passes`), the ceiling of every n-gram method here.

With ``--out DIR``: ``DIR/results.json`` (the rows, and a ``sweep`` of our n-gram drafter over draft
lengths k) and ``DIR/speedup_vs_k.png`` / ``DIR/tokens_per_pass_vs_k.png`` (matplotlib): the seed's
table of expected tokens per pass and gain against k, measured instead of computed.

``--cost``: random-init targets with the shapes of real models (Qwen2.5-Coder 0.5B and 1.5B configs;
weights do not matter for timing) and the time of verifying k tokens relative to decoding one, with a
512-token cache, on this machine (``DIR/cost.json``).
``--step-cost``: cost(M) of the real loaded target and draft, in the given ``--dtype``, ``--quantization``
and ``--engine`` (:mod:`bench.step_cost`; every weight path in one run: ``speclsp bench step-cost``).
``--cpu-kind avx512-vnni|avx2``: measured as that kind of CPU, emulated (:mod:`bench.cpu_kinds`); every
row says the kind (``cpu_kind``) and ``DIR/what_ran.json`` what the kernels ran with.
A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch

from bench import cpu_kinds, llama_cpp
from bench.decode_peers import LLAMA_METHODS, LLAMA_PLAIN, LlamaPeers
from bench.decode_plots import plot, plot_rates
from bench.noise import measure_parting
from bench.step_cost import QWEN_SHAPES, cost
from bench.workloads import WORKLOADS, workloads
from decoding.draft_length import DraftLengthPolicy
from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.types import DEFAULT_MAX_DRAFT_TOKENS, GenerationConfig
from decoding.weights.model_packs import PACKS
from decoding.weights.quantization import QUANTIZATIONS
from decoding.types import ENGINES

OURS = ("none", "ngram", "tree", "model", "staged", "auto")
THEIRS = ("hf_plain", "hf_prompt_lookup", "hf_assisted")


class Run(NamedTuple):
    """One generation of a ``bench decode`` method, as every runner returns it."""

    token_ids: list[int]
    seconds: float  # wall time of the generation, prefill included
    passes: int | None  # target passes (None where the runner does not report them)
    drafted: int | None
    accepted: int | None
    sources: dict[str, tuple[int, int, int]] = {}  # ours: per draft source (rounds, drafted, accepted)
    pass_shapes: list[tuple[int, int, bool]] | None = None  # ours: ``GenerationStats.passes``
    prompt_passes: list[tuple[int, int, bool]] | None = None  # ours: ``GenerationStats.prompt_passes``


def run_ours(engine: Engine, mode: str, prompt: list[int], new_tokens: int, max_draft: int,
             policy: DraftLengthPolicy | None = None) -> Run:
    """One generation in ``mode`` from a cold cache, its draft lengths chosen by ``policy`` (``None``: a
    fresh one): the caller keeps one policy per method, as a server running that mode alone would.

    Returns:
        :class:`Run`, every field filled.
    """
    engine.reset_caches()  # every method starts cold: no prompt reuse between methods
    engine.policy = policy if policy is not None else DraftLengthPolicy()
    config = GenerationConfig(max_new_tokens=new_tokens, max_draft_tokens=max_draft, stop_token_ids=frozenset())
    start = time.perf_counter()
    generation = engine.generate(prompt, config, mode)
    seconds = time.perf_counter() - start
    stats = generation.stats
    sources = {name: (source.rounds, source.drafted, source.accepted) for name, source in stats.sources.items()}
    return Run(generation.token_ids, seconds, stats.target_passes, stats.drafted, stats.accepted, sources, stats.passes,
               stats.prompt_passes)


@torch.inference_mode()
def run_theirs(engine: Engine, method: str, prompt: list[int], new_tokens: int, max_draft: int) -> Run:
    model = engine.target.model
    input_ids = torch.tensor([prompt], device=model.device)
    kwargs = {}
    if method == "hf_prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = max_draft
    elif method == "hf_assisted":
        kwargs["assistant_model"] = engine.draft.model
    start = time.perf_counter()
    output = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                            min_new_tokens=0, do_sample=False, eos_token_id=None,
                            pad_token_id=engine.tokenizer.pad_token_id or 0, **kwargs)
    seconds = time.perf_counter() - start
    return Run(output[0, len(prompt):].tolist(), seconds, None, None, None)


def lookup_bound_passes(prompt: list[int], output: list[int], max_draft: int, min_ngram: int = 1) -> int:
    """Target passes that the best lookup drafter in hindsight needs to write ``output``: each round it
    drafts, from every earlier place where the last ``min_ngram`` tokens occur (so every longer
    n-gram match too) in the prompt and the output so far, the continuation that the target then
    accepts longest, at most ``max_draft`` tokens. No lookup drafter (ours, transformers' prompt
    lookup, a candidate tree of any width) needs fewer passes: the tokens it cannot reach are ones
    the target writes that do not follow any earlier occurrence of their context. Pure Python over
    token ids; ``output`` is the target's own greedy output."""
    sequence, done, passes = list(prompt), 0, 0
    while done < len(output):
        budget = min(max_draft, len(output) - done - 1)
        future = output[done : done + budget]
        key = sequence[len(sequence) - min_ngram :]
        best = 0
        for start in range(len(sequence) - min_ngram):
            if best == budget:
                break
            if sequence[start : start + min_ngram] != key:
                continue
            run = 0
            while run < budget and start + min_ngram + run < len(sequence) and \
                    sequence[start + min_ngram + run] == future[run]:
                run += 1
            best = max(best, run)
        sequence.extend(output[done : done + best + 1])
        done += best + 1
        passes += 1
    return passes


def own_plain(method: str) -> str:
    """The plain decoding a method is compared with: llama.cpp's own for its rows, ours otherwise
    (transformers runs our very model)."""
    return LLAMA_PLAIN if method in LLAMA_METHODS else "none"


def bench(engine: Engine, prompts_of: dict[str, list[tuple[list[int], int]]], repeats: int, max_draft: int,
          methods: list[str], peers: LlamaPeers | None = None) -> list[dict]:
    """Rows per (workload, method); ``methods`` lists each family's plain method before its others."""
    rows = []
    for workload, prompts in prompts_of.items():
        per_method: dict[str, dict] = {m: {"seconds": 0.0, "tokens": 0, "passes": 0, "drafted": 0, "accepted": 0,
                                           "identical": True, "within_noise": 0, "other": 0, "noise": 0.0,
                                           "leads": [], "reports_passes": m in OURS or m in LLAMA_METHODS,
                                           "sources": {}}
                      for m in methods}
        bound_passes = bound_tokens = 0  # the lookup bound on our plain greedy outputs
        # Per method its own acceptance and cost estimates, learnt over this workload's prompts only: a
        # shared policy let one method's rounds (or an earlier workload's) decide another's drafts.
        policies = {m: DraftLengthPolicy() for m in methods if m in OURS}
        for index, (prompt, new_tokens) in enumerate(prompts):
            references: dict[str, list[int]] = {}
            timings: dict[str, list[float]] = {m: [] for m in methods}
            for _ in range(repeats):  # interleaved: every method, then the next repetition
                for method in methods:
                    if method in LLAMA_METHODS:
                        result = Run(*peers.run(method, prompt, new_tokens))
                    elif method in OURS:
                        result = run_ours(engine, method, prompt, new_tokens, max_draft, policies[method])
                    else:
                        result = run_theirs(engine, method, prompt, new_tokens, max_draft)
                    tokens = result.token_ids
                    timings[method].append(result.seconds)
                    if method in (LLAMA_PLAIN, "none") and method not in references:
                        references[method] = tokens
                        if method == "none":
                            bound_passes += lookup_bound_passes(prompt, tokens, max_draft, engine.config.ngram.min_ngram)
                            bound_tokens += len(tokens)
                    row = per_method[method]
                    if len(timings[method]) == 1:
                        row["tokens"] += len(tokens)
                        row["passes"] += result.passes or 0
                        row["drafted"] += result.drafted or 0
                        row["accepted"] += result.accepted or 0
                        for name, counts in result.sources.items():
                            kept = row["sources"].setdefault(name, [0, 0, 0])
                            row["sources"][name] = [a + b for a, b in zip(kept, counts)]
                        reference = references.get(own_plain(method))
                        if reference is not None and tokens != reference:
                            row["identical"] = False
                            if method in LLAMA_METHODS:
                                continue  # its logits are not ours to replay
                            parting = measure_parting(engine.target.model, prompt, reference, tokens, max_draft + 1,
                                                      passes=result.pass_shapes, prompt_passes=result.prompt_passes)
                            within, lead, noise = parting.within, parting.lead, parting.noise
                            row["within_noise" if within else "other"] += 1
                            row["noise"] = max(row["noise"], noise)
                            row["leads"].append(round(lead, 3))
            for method in methods:
                per_method[method]["seconds"] += statistics.median(timings[method])
            print(f"{workload}: prompt {index + 1}/{len(prompts)}", file=sys.stderr)
        rate_of = {m: r["tokens"] / r["seconds"] if r["seconds"] else 0.0 for m, r in per_method.items()}
        for method, row in per_method.items():
            rate, plain_rate, own_rate = rate_of[method], rate_of.get("none"), rate_of.get(own_plain(method))
            rows.append({
                "workload": workload, "method": method, "prompts": len(prompts), "tokens": row["tokens"],
                "tokens_per_s": round(rate, 1),
                "speedup_vs_plain": round(rate / plain_rate, 3) if plain_rate else None,
                "speedup_vs_own_plain": round(rate / own_rate, 3) if own_rate else None,
                "tokens_per_pass": round(row["tokens"] / row["passes"], 3) if row["reports_passes"] and row["passes"]
                else None,
                "acceptance_rate": round(row["accepted"] / row["drafted"], 3) if row["reports_passes"] and row["drafted"]
                else None,
                "identical_to_plain": row["identical"],
                # ours: per draft source, the rounds it drafted for, its tokens drafted and accepted
                "sources": {name: dict(zip(("rounds", "drafted", "accepted"), counts))
                            for name, counts in sorted(row["sources"].items())},
                "divergences_within_noise": row["within_noise"], "other_divergences": row["other"],
                "max_noise_logits": round(row["noise"], 4) if row["leads"] else None, "leads_at_divergence": row["leads"],
                "lookup_bound_tokens_per_pass": round(bound_tokens / bound_passes, 3) if bound_passes else None,
            })
    return rows


SWEEP_K = (1, 2, 4, 8, 16)


def sweep(engine: Engine, prompts_of: dict[str, list[tuple[list[int], int]]]) -> list[dict]:
    """Our n-gram drafter with draft lengths capped at k (the policy may draft shorter), per workload;
    each k learns its own estimates over the workload's prompts."""
    out = []
    for workload, prompts in prompts_of.items():
        plain_seconds = sum(run_ours(engine, "none", p, n, 0).seconds for p, n in prompts)
        plain_tokens = sum(n for _, n in prompts)
        for k in SWEEP_K:
            seconds = tokens = passes = 0
            policy = DraftLengthPolicy()
            for prompt, new_tokens in prompts:
                run = run_ours(engine, "ngram", prompt, new_tokens, k, policy)
                seconds, tokens, passes = seconds + run.seconds, tokens + len(run.token_ids), passes + run.passes
            out.append({"workload": workload, "k": k, "tokens_per_pass": round(tokens / max(passes, 1), 3),
                        "speedup_vs_plain": round((tokens / seconds) / (plain_tokens / plain_seconds), 3)})
        print(f"sweep: {workload} done", file=sys.stderr)
    return out


def chosen_methods(asked: str, target: str) -> list[str]:
    """The methods to run, each family's plain one first: ``asked`` (comma-separated), or for
    ``default`` ours, transformers' and, when llama.cpp is built and the target is a model pack, llama.cpp's.

    Raises:
        ValueError: an unknown method.
    """
    known = OURS + THEIRS + tuple(LLAMA_METHODS)
    if asked == "default":
        with_llama = target in PACKS and llama_cpp.server_binary() is not None
        names = list(OURS + THEIRS + (tuple(LLAMA_METHODS) if with_llama else ()))
    else:
        names = asked.split(",")
    unknown = [m for m in names if m not in known]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; use {', '.join(known)}")
    llama = [m for m in names if m in LLAMA_METHODS]
    return list(dict.fromkeys(["none", *[m for m in names if m not in LLAMA_METHODS],
                               *([LLAMA_PLAIN, *llama] if llama else [])]))


def _emit(rows: list[dict], out: Path | None, name: str, ran: dict) -> int:
    """Print ``rows``, each with its CPU kind (of ``ran``), as JSON lines; with ``out``, to ``out/name`` too."""
    rows = [{**row, "cpu_kind": cpu_kinds.label(ran)} for row in rows]
    for row in rows:
        print(json.dumps(row))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(rows, indent=2) + "\n")
        (out / "what_ran.json").write_text(json.dumps(ran, indent=2) + "\n")
    return 0


def print_table(rows: list[dict], max_draft: int, kind: str) -> None:
    """The rows as a table on stdout, under the CPU kind ``kind`` (:func:`bench.cpu_kinds.label`)."""
    print(f"CPU kind: {kind}")
    print(f"{'workload':<8} {'method':<17} {'tok/s':>8} {'speedup':>8} {'tok/pass':>8} {'accept':>7} identical")
    for row in rows:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        print(f"{row['workload']:<8} {row['method']:<17} {row['tokens_per_s']:>8.1f} {fmt(row['speedup_vs_plain'], '>8.2f')} "
              f"{fmt(row['tokens_per_pass'], '>8.2f')} {fmt(row['acceptance_rate'], '>7.2f')} {row['identical_to_plain']}"
              + (f" (parted {row['divergences_within_noise']} times within the measured kernel noise, up to "
                 f"{row['max_noise_logits']} logits, {row['other_divergences']} times outside it)"
                 if not row['identical_to_plain'] else ""))
    for row in rows:
        if len(row["sources"]) > 1:  # a policy choosing between sources: how often each, and its gain
            print(f"{row['workload']} {row['method']} per source: " + ", ".join(
                f"{name} {c['rounds']} rounds, {c['accepted']}/{c['drafted']} accepted"
                for name, c in row["sources"].items()))
    for workload in dict.fromkeys(row["workload"] for row in rows):
        bound = next(row["lookup_bound_tokens_per_pass"] for row in rows if row["workload"] == workload)
        print(f"{workload}: the best lookup drafter in hindsight would reach {bound} tokens per pass "
              f"(k <= {max_draft})")


def run(args: argparse.Namespace) -> int:
    chosen_methods(args.methods, args.model)  # an unknown method fails before the models load
    relaunched = cpu_kinds.run_as_kind(args)  # an emulated kind: measured in a child with its caps
    if relaunched is not None:
        return relaunched
    ran = cpu_kinds.what_ran()
    if args.cost:
        from decoding.weights.loading import resolve_device

        return _emit(cost(args.cost_shapes.split(","), str(resolve_device(args.device))), args.out, "cost.json", ran)
    if args.engine == "llama.cpp" and not args.step_cost:
        unrunnable = [m for m in chosen_methods(args.methods, args.model) if m == "tree" or m.startswith("hf_")]
        if unrunnable:
            raise SystemExit(f"--engine llama.cpp cannot run {', '.join(unrunnable)} (trees need attention masks; "
                             "transformers' methods need a torch model): name --methods without them")
    engine = Engine.load(EngineConfig(model=args.model, draft_model=args.draft_model, device=args.device,
                                      dtype=args.dtype, quantization=args.quantization, engine=args.engine))
    if args.step_cost:
        from bench.step_cost import step_costs

        return _emit(step_costs(engine), args.out, "step_cost.json", ran)
    methods = chosen_methods(args.methods, engine.target.name)
    repeats = 1 if args.quick else args.repeats
    prompts_of = workloads(engine.tokenizer, args.quick, args.seed, args.corpus, tuple(args.workloads.split(",")))
    draft_name = engine.draft.name if engine.draft is not None else None
    with LlamaPeers([m for m in methods if m in LLAMA_METHODS], engine.target.name, draft_name) as peers:
        rows = [{**row, "cpu_kind": cpu_kinds.label(ran)}
                for row in bench(engine, prompts_of, repeats, args.max_draft_tokens, methods, peers)]
    print_table(rows, args.max_draft_tokens, cpu_kinds.label(ran))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
        (args.out / "what_ran.json").write_text(json.dumps(ran, indent=2) + "\n")
        sweep_rows = sweep(engine, prompts_of) if args.sweep else []
        if sweep_rows:
            (args.out / "sweep.json").write_text(json.dumps(sweep_rows, indent=2) + "\n")
        try:
            for path in (plot(sweep_rows, args.out) if sweep_rows else []) + plot_rates(rows, args.out):
                print(f"wrote {path}", file=sys.stderr)
        except ImportError:
            print("no plots: matplotlib is not installed (pip install 'speclsp[bench]')", file=sys.stderr)
    return 0


def add_parser(kinds) -> None:
    decode = kinds.add_parser("decode", help="our decoding paths vs transformers generate, per workload")
    decode.add_argument("--model", default="auto", help="target (auto: qwen2.5-coder-1.5b when installed, else "
                                                        "the starter; starter for the tiny pair)")
    decode.add_argument("--draft-model", default="auto", help="draft (auto: the target's partner)")
    decode.add_argument("--corpus", default="2026", help="2026 (code written after the models' training), stdlib "
                                                         "or a directory of .py files")
    decode.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from {', '.join(WORKLOADS)}")
    decode.add_argument("--device", default="auto")
    decode.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16 (see decoding.weights.loading)")
    decode.add_argument("--engine", default="torch", choices=ENGINES,
                        help="what runs the passes: torch, or llama.cpp on the GGUF weights (decoding.weights.llama_cpp_model)")
    decode.add_argument("--quantization", default="auto", choices=QUANTIZATIONS,
                        help="weights of target and draft, as the setting (auto: as the server would load them)")
    decode.add_argument("--methods", default="default",
                        help=f"comma-separated, from {', '.join(OURS + THEIRS + tuple(LLAMA_METHODS))} (our plain "
                             "'none' always runs, and llama_plain with any llama.cpp row); default: all, llama.cpp's "
                             "when it is built (speclsp bench peers --build) and the target is a model pack")
    decode.add_argument("--max-draft-tokens", type=int, default=DEFAULT_MAX_DRAFT_TOKENS,
                        help="draft cap k for our methods and transformers' prompt_lookup_num_tokens")
    decode.add_argument("--repeats", type=int, default=3)
    decode.add_argument("--seed", type=int, default=0)
    decode.add_argument("--quick", action="store_true", help="3 prompts per workload, one repetition")
    decode.add_argument("--out", type=Path, default=None,
                        help="write DIR/results.json, DIR/tokens_per_s.png and (unless --no-sweep) DIR/sweep.json "
                             "and the PNG plots against k")
    decode.add_argument("--no-sweep", dest="sweep", action="store_false",
                        help="with --out: skip the n-gram sweep over k (it reruns every prompt 6 times)")
    decode.add_argument("--cost", action="store_true",
                        help="instead: verify(k)/decode(1) for random-init models of real shapes (DIR/cost.json)")
    decode.add_argument("--step-cost", action="store_true",
                        help="instead: ms of a pass over 1, 2, 4, 8, 16, 32 tokens and of 128-, 512- and 1024-token "
                             "prefill pieces after a 512-token prompt, for the loaded target and draft (with "
                             "--dtype/--quantization/--engine; DIR/step_cost.json); every weight path: "
                             "speclsp bench step-cost")
    cpu_kinds.add_argument(decode)
    decode.add_argument("--cost-shapes", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b",
                        help=f"shapes for --cost, from {', '.join(QWEN_SHAPES)}")
    decode.set_defaults(run=run)
