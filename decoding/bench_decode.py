"""``speclsp bench decode``: our decoding paths against transformers ``generate``, per workload.

Workloads, built at run time from held-out standard-library files (code nobody here wrote):

* ``edit``: a function, then a comment asking for it again with one identifier renamed, then the
  renamed function's first line; the output rewrites the function (the text being rewritten is the
  draft);
* ``fim``: fill-in-the-middle at cut points (PSM prompts, as the server builds them);
* ``entropy``: a held-out chunk's tokens shuffled: text where drafts rarely match.

Rows (same target, prompts and max tokens, greedy, end-of-sequence off so every method writes the
same number of tokens): ours plain, ngram, tree, model, auto; transformers ``generate`` plain, with
``prompt_lookup_num_tokens`` and with ``assistant_model`` (the draft). Repetitions are interleaved
(every method runs a prompt before the next prompt) and per-prompt medians are summed.

Columns: tokens/s, speedup over our plain greedy in the same run, tokens per target pass and
acceptance (ours; transformers does not report them), and whether the outputs equal our plain greedy.
A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

import torch

from decoding.engine import Engine, EngineConfig
from decoding.generate import GenerationConfig
from decoding.starter.data import rename_identifier
from decoding.starter.evaluate import EvalConfig, fim_prompts, held_out_texts

OURS = ("none", "ngram", "tree", "model", "auto")
THEIRS = ("hf_plain", "hf_prompt_lookup", "hf_assisted")
_DEF = re.compile(r"^def [A-Za-z_]\w*\(.*\):\s*$", re.M)


def edit_prompts(texts: list[str], tokenizer, count: int, rng: random.Random) -> list[tuple[list[int], int]]:
    """(prompt ids, max new tokens) for the edit workload."""
    functions = []
    for text in texts:
        for match in _DEF.finditer(text):
            end = text.find("\n\n", match.end())
            body = text[match.start(): end if end != -1 else len(text)]
            if 4 <= body.count("\n") <= 20:
                functions.append(body)
    out = []
    for function in rng.sample(functions, min(count, len(functions))):
        names = sorted({n for n in re.findall(r"\b[a-z_][a-z0-9_]{2,}\b", function) if function.count(n) >= 3})
        if not names:
            continue
        name = rng.choice(names)
        renamed = rename_identifier(function, name, name + "_value")
        header, _, rest = renamed.partition("\n")
        prompt = f"{function}\n\n\n# The same function with `{name}` renamed to `{name}_value`:\n{header}\n"
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        out.append((ids, min(128, len(tokenizer.encode(rest, add_special_tokens=False)))))
    return out


def entropy_prompts(texts: list[str], tokenizer, count: int, rng: random.Random, new_tokens: int):
    out = []
    for _ in range(count):
        text = rng.choice([t for t in texts if len(t) > 2000])
        start = rng.randrange(len(text) - 1500)
        ids = tokenizer.encode(text[start:start + 1500], add_special_tokens=False)
        rng.shuffle(ids)
        out.append((ids[:300], new_tokens))
    return out


def workloads(tokenizer, quick: bool, seed: int) -> dict[str, list[tuple[list[int], int]]]:
    texts = held_out_texts()
    rng = random.Random(seed)
    count = 3 if quick else 10
    fim = [(ids, 32) for ids, _ in fim_prompts(texts, tokenizer, EvalConfig(fim_cuts=count, seed=seed), rng)]
    return {"edit": edit_prompts(texts, tokenizer, count, rng), "fim": fim,
            "entropy": entropy_prompts(texts, tokenizer, count, rng, 32)}


def run_ours(engine: Engine, mode: str, prompt: list[int], new_tokens: int, max_draft: int):
    engine.reset_caches()  # every method starts cold: no prompt reuse between methods
    config = GenerationConfig(max_new_tokens=new_tokens, max_draft_tokens=max_draft, stop_token_ids=frozenset())
    start = time.perf_counter()
    generation = engine.generate(prompt, config, mode)
    seconds = time.perf_counter() - start
    stats = generation.stats
    return generation.token_ids, seconds, stats.target_passes, stats.drafted, stats.accepted


@torch.inference_mode()
def run_theirs(engine: Engine, method: str, prompt: list[int], new_tokens: int, max_draft: int):
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
    return output[0, len(prompt):].tolist(), seconds, None, None, None


def bench(engine: Engine, quick: bool, seed: int, repeats: int, max_draft: int, methods: list[str]) -> list[dict]:
    rows = []
    for workload, prompts in workloads(engine.tokenizer, quick, seed).items():
        per_method: dict[str, dict] = {m: {"seconds": 0.0, "tokens": 0, "passes": 0, "drafted": 0, "accepted": 0,
                                           "identical": True, "ours": m in OURS} for m in methods}
        for index, (prompt, new_tokens) in enumerate(prompts):
            reference = None
            timings: dict[str, list[float]] = {m: [] for m in methods}
            for _ in range(repeats):  # interleaved: every method, then the next repetition
                for method in methods:
                    runner = run_ours if method in OURS else run_theirs
                    tokens, seconds, passes, drafted, accepted = runner(engine, method, prompt, new_tokens, max_draft)
                    timings[method].append(seconds)
                    if method == "none" and reference is None:
                        reference = tokens
                    row = per_method[method]
                    if len(timings[method]) == 1:
                        row["tokens"] += len(tokens)
                        row["passes"] += passes or 0
                        row["drafted"] += drafted or 0
                        row["accepted"] += accepted or 0
                        row["identical"] &= reference is None or tokens == reference
            for method in methods:
                per_method[method]["seconds"] += statistics.median(timings[method])
            print(f"{workload}: prompt {index + 1}/{len(prompts)}", file=sys.stderr)
        plain = per_method.get("none")
        plain_rate = plain["tokens"] / plain["seconds"] if plain and plain["seconds"] else None
        for method, row in per_method.items():
            rate = row["tokens"] / row["seconds"] if row["seconds"] else 0.0
            rows.append({
                "workload": workload, "method": method, "prompts": len(prompts), "tokens": row["tokens"],
                "tokens_per_s": round(rate, 1),
                "speedup_vs_plain": round(rate / plain_rate, 3) if plain_rate else None,
                "tokens_per_pass": round(row["tokens"] / row["passes"], 3) if row["ours"] and row["passes"] else None,
                "acceptance_rate": round(row["accepted"] / row["drafted"], 3) if row["ours"] and row["drafted"] else None,
                "identical_to_plain": row["identical"],
            })
    return rows


def run(args: argparse.Namespace) -> int:
    methods = list(dict.fromkeys(["none", *args.methods.split(",")]))
    unknown = [m for m in methods if m not in OURS + THEIRS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; use {', '.join(OURS + THEIRS)}")
    engine = Engine.load(EngineConfig(model=args.model, draft_model=args.draft_model, device=args.device))
    repeats = 1 if args.quick else args.repeats
    rows = bench(engine, args.quick, args.seed, repeats, args.max_draft_tokens, methods)
    header = f"{'workload':<8} {'method':<17} {'tok/s':>8} {'speedup':>8} {'tok/pass':>8} {'accept':>7} identical"
    print(header)
    for row in rows:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        print(f"{row['workload']:<8} {row['method']:<17} {row['tokens_per_s']:>8.1f} {fmt(row['speedup_vs_plain'], '>8.2f')} "
              f"{fmt(row['tokens_per_pass'], '>8.2f')} {fmt(row['acceptance_rate'], '>7.2f')} {row['identical_to_plain']}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def add_parser(kinds) -> None:
    decode = kinds.add_parser("decode", help="our decoding paths vs transformers generate, per workload")
    decode.add_argument("--model", default="starter")
    decode.add_argument("--draft-model", default="starter-draft")
    decode.add_argument("--device", default="auto")
    decode.add_argument("--methods", default=",".join(OURS + THEIRS),
                        help=f"comma-separated, from {', '.join(OURS + THEIRS)} (our plain 'none' always runs)")
    decode.add_argument("--max-draft-tokens", type=int, default=8)
    decode.add_argument("--repeats", type=int, default=3)
    decode.add_argument("--seed", type=int, default=0)
    decode.add_argument("--quick", action="store_true", help="3 prompts per workload, one repetition")
    decode.add_argument("--out", type=Path, default=None, help="write DIR/results.json")
    decode.set_defaults(run=run)
