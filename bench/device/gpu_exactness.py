"""Exactness and step timings of the engine on a GPU (or any torch device): one script, one log.

The test suite builds its models on the CPU and feeds them CPU tensors (``tests/conftest.py``,
``torch.tensor([prompt])`` in the helpers), so it cannot simply be pointed at CUDA. This script runs the
same checks through the public engine API and the tests' own helpers on ``--device``:

1. greedy: speculative == plain greedy, per drafter mode (``ngram``, ``model``, ``staged``, ``tree``,
   ``auto``, and ``auto`` with the draft model forced on), on the bundled starter pair
   (``Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device=..., dtype=...))``),
   several prompts, k = 4 and 16, in each ``--dtypes``; plain greedy is also checked against transformers'
   ``generate(do_sample=False)``. A parting is classified as in ``bench/noise.py``
   (``lead_within_noise``: the same tokens replayed step by step, in passes of k + 1 and in the run's
   own pass shapes; a parting
   whose step-by-step lead is within that noise is a near tie the dtype cannot resolve, docs/exactness.md);
   any other parting, or a length difference, FAILS;
2. greedy on the tests' tiny random models (``tests/test_greedy_equivalence.py``, ``tests/test_tree.py``):
   self / random / n-gram drafts, k in {1, 2, 5}, the switching drafter and n-gram trees, float32, checked
   with ``tests.greedy_check.assert_greedy_equal`` (top-2 gap < 1e-4 at a parting);
3. the chi-square sampling tier (``tests/test_sampling_exactness.py``, ``tests/test_tree.py``, ``stats``
   marker) with the tests' harness functions and trial counts: the exact rules must pass (p > 1e-3), the
   wrong rules must be caught (p < 1e-6); run in priority order within ``--stats-budget-s`` seconds, the
   rest reported as skipped (``bench/device/gpu_stats.py``);
4. timings of the starter target (and draft) per dtype: a one-token step and a 16-token (and 17-token)
   pass after a cached context, each with its rollback, ``torch.cuda.synchronize`` around every timed call
   (medians).

Run (repository root; exit status 1 when any check fails)::

    python bench/device/gpu_exactness.py --device cuda --out "$OUT"          # a GPU
    python bench/device/gpu_exactness.py --device cpu --quick --out /tmp/x   # the same code path, quickly

On the lent H200 (torch 2.11 and transformers 5.17 there; this repo needs transformers >= 5.24), the
wheels in ``.whl`` (see the README of the device tool) go to ``/tmp/site`` first::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    python3 bench/device/gpu_exactness.py --device cuda --out "$OUT"

Writes ``gpu_exactness.log`` (what is printed) and ``gpu_exactness.json`` (every row) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path


def _code_root() -> Path:
    """``--code-root DIR`` (read before argparse, since the imports below depend on it): where ``decoding``,
    ``bench`` and ``tests`` are imported from; default the repository root. A ``git archive`` of one
    commit there pins the code under test while the working tree changes."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--code-root" and i + 1 < len(argv):
            return Path(argv[i + 1]).resolve()
        if arg.startswith("--code-root="):
            return Path(arg.split("=", 1)[1]).resolve()
    return Path(__file__).resolve().parents[2]


CODE_ROOT = _code_root()
sys.path.insert(0, str(CODE_ROOT))

import torch

LOG = None
RESULTS: dict = {"greedy_starter": [], "greedy_tiny": [], "stats": [], "timings": [], "errors": []}


def say(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    if LOG is not None:
        LOG.write(line + "\n")
        LOG.flush()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- 1. greedy on the starter pair -------------------------------------------------------------------

PROMPTS = {
    "def": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "class": ("import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n"
              "        self.values = {}\n\n    def load(self):\n"),
    "repetitive": ("def area_square(side):\n    return side * side\n\n\ndef area_rectangle(width, height):\n"
                   "    return width * height\n\n\ndef area_circle(radius):\n    return 3.14159 * radius * radius\n\n\n"
                   "def perimeter_square(side):\n    return 4 * side\n\n\ndef perimeter_rectangle(width, height):\n"),
    "fim": ("<|fim_prefix|>def mean(values):\n    total = 0\n    for v in values:\n<|fim_suffix|>"
            "    return total / len(values)\n<|fim_middle|>"),
}
MODES = ("ngram", "model", "staged", "tree", "auto", "auto+model")


def classify_parting(model, prompt: list[int], reference: list[int], tokens: list[int], chunk: int,
                     passes: list[tuple[int, int, bool]] | None = None) -> dict:
    """Where ``tokens`` leaves ``reference`` and whether the reference token's step-by-step lead there is
    within the kernel noise (``bench.noise.lead_within_noise``; ``passes``: the run's own pass shapes,
    ``GenerationStats.passes``), with the fresh top-2 gap there."""
    from bench.near_ties import first_mismatch, top2_gap
    from bench.noise import lead_within_noise

    index = first_mismatch(reference, tokens)
    if index is None:
        return {"parted": False}
    if index >= min(len(reference), len(tokens)):
        return {"parted": True, "token": index, "within_noise": False, "why": "length differs"}
    within, lead, noise = lead_within_noise(model, prompt, reference, tokens, chunk, passes=passes)
    return {"parted": True, "token": index, "reference_token": reference[index], "other_token": tokens[index],
            "lead": round(lead, 6), "noise": round(noise, 6),
            "top2_gap_fresh": round(top2_gap(model, prompt + reference[:index]), 6), "within_noise": within}


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         pad_token_id=0)
    return out[0, len(prompt):].tolist()


def greedy_starter(device: str, dtype: str, new_tokens: int, ks: tuple[int, ...], quick: bool) -> int:
    """Section 1 for one dtype; returns the number of failures."""
    from decoding.draft_length import DraftLengthPolicy
    from decoding.engine import Engine
    from decoding.types import EngineConfig, GenerationConfig

    t0 = time.perf_counter()
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device=device, dtype=dtype))
    model = engine.target.model
    say(f"[greedy starter {dtype}] loaded on {model.device} as {model.dtype} in {time.perf_counter() - t0:.1f}s; "
        f"attn={getattr(model.config, '_attn_implementation', '?')}; auto: {engine.auto_reason}")
    loaded_auto = engine.auto_uses_draft_model
    stop_ids = engine.completion_stop_ids
    failures = 0
    prompts = dict(list(PROMPTS.items())[:2]) if quick else PROMPTS
    for name, text in prompts.items():
        prompt = engine.tokenizer.encode(text, add_special_tokens=False)
        # No stop ids: every output runs to new_tokens (longer comparisons; exactness holds past EOS too).
        base = GenerationConfig(max_new_tokens=new_tokens, stop_token_ids=frozenset())
        plain = engine.generate(prompt, replace(base, max_draft_tokens=0), mode="none")
        reference = plain.token_ids
        # transformers' generate stops at EOS: compare up to and including our first stop id.
        cut = next((i + 1 for i, t in enumerate(reference) if t in stop_ids), len(reference))
        hf = hf_greedy(model, prompt, new_tokens)
        hf_parting = classify_parting(model, prompt, reference[:cut], hf[:cut], 2)
        hf_ok = not hf_parting["parted"] or hf_parting["within_noise"]
        failures += not hf_ok
        RESULTS["greedy_starter"].append({"dtype": dtype, "prompt": name, "mode": "none-vs-transformers",
                                          "identical": not hf_parting["parted"], "ok": hf_ok, **hf_parting})
        say(f"  {dtype} {name:10s} plain vs transformers.generate: "
            f"{'identical' if not hf_parting['parted'] else hf_parting} ({cut} tokens compared) "
            f"plain {plain.stats.tokens_per_s:.0f} tok/s")
        # "seeded": a fresh draft-length policy and a seed, so drafting decisions do not depend on timing
        # (decoding.generate._draft) and every run drafts (a policy that learnt that drafts do not pay
        # would decode plainly, and the check would be vacuous); "timed": the engine's own policy, as
        # in production, learning from the measured pass times.
        for policy, k in [*(("seeded", k) for k in ks), ("timed", max(ks))]:
            for mode in MODES:
                engine.auto_uses_draft_model = True if mode == "auto+model" else loaded_auto
                run_mode = "auto" if mode.startswith("auto") else mode
                config = replace(base, max_draft_tokens=k)
                if policy == "seeded":
                    engine.policy = DraftLengthPolicy()
                    config = replace(config, seed=0)
                spec = engine.generate(prompt, config, mode=run_mode)
                parting = classify_parting(model, prompt, reference, spec.token_ids, k + 1, spec.stats.passes)
                ok = not parting["parted"] or parting["within_noise"]
                failures += not ok
                stats = spec.stats
                row = {"dtype": dtype, "prompt": name, "mode": mode, "k": k, "policy": policy,
                       "identical": not parting["parted"], "ok": ok, "tokens": len(spec.token_ids),
                       "drafted": stats.drafted, "accepted": stats.accepted, "passes": stats.target_passes,
                       "tokens_per_pass": round(stats.tokens_per_pass, 3),
                       "acceptance": round(stats.acceptance_rate, 3), "tokens_per_s": round(stats.tokens_per_s, 1),
                       "plain_tokens_per_s": round(plain.stats.tokens_per_s, 1),
                       "sources": {s: [v.drafted, v.accepted] for s, v in stats.sources.items()}, **parting}
                RESULTS["greedy_starter"].append(row)
                verdict = "identical" if not parting["parted"] else (
                    f"parted at {parting['token']} WITHIN noise (lead {parting.get('lead')}, noise "
                    f"{parting.get('noise')})" if ok else f"MISMATCH {parting}")
                say(f"  {dtype} {name:10s} {mode:10s} k={k:2d} {policy:6s}: {verdict}; {stats.target_passes} passes, "
                    f"accepted {stats.accepted}/{stats.drafted}, {stats.tokens_per_pass:.2f} tok/pass, "
                    f"{stats.tokens_per_s:.0f} tok/s")
    engine.auto_uses_draft_model = loaded_auto
    mine = [r for r in RESULTS["greedy_starter"] if r["dtype"] == dtype and "policy" in r]
    say(f"[greedy starter {dtype}] {sum(r['ok'] for r in mine)}/{len(mine)} speculative runs ok, "
        f"{sum(r['identical'] for r in mine)} identical, {sum(r['drafted'] == 0 for r in mine)} drafted nothing; "
        f"draft tokens accepted {sum(r['accepted'] for r in mine)}/{sum(r['drafted'] for r in mine)}")
    del engine
    return failures


# --- 2. greedy on the tests' tiny random models ------------------------------------------------------

def greedy_tiny(device: str, quick: bool) -> int:
    from decoding.draft_length import DraftLengthPolicy
    from decoding.drafters.draft_model import ModelDrafter
    from decoding.drafters.ngram import NgramDrafter
    from decoding.drafters.switching import SwitchingDrafter
    from decoding.generate import SpeculativeGenerator
    from decoding.types import GenerationConfig
    from tests.conftest import ToyTokenizer, tiny_model
    from tests.greedy_check import assert_greedy_equal
    from tests.test_greedy_equivalence import NEW_TOKENS
    from tests.test_greedy_equivalence import PROMPTS as TINY_PROMPTS
    from tests.test_tree import REPETITIVE

    target = tiny_model(seed=0).to(device)  # the tests' session fixtures, moved to the device
    random_draft = tiny_model(seed=1, hidden=16, layers=1).to(device)
    tokenizer = ToyTokenizer()
    failures = 0

    def check(label: str, prompt, got, expected, extra: str = "") -> None:
        nonlocal failures
        try:
            assert_greedy_equal(target, prompt, got, expected)
            ok, why = True, ("identical" if got == expected else "parted at a near tie")
        except AssertionError as exc:
            ok, why = False, f"MISMATCH {exc}"
        failures += not ok
        RESULTS["greedy_tiny"].append({"case": label, "ok": ok, "identical": got == expected, "why": why})
        if not ok or not quick:
            say(f"  tiny {label}: {why} {extra}")

    def drafter_of(kind):
        if kind == "self":
            return ModelDrafter(target, target.config.vocab_size)
        if kind == "random":
            return ModelDrafter(random_draft, target.config.vocab_size)
        return NgramDrafter()

    generator = SpeculativeGenerator(target, tokenizer)
    for p, prompt in enumerate(TINY_PROMPTS):
        plain = generator.generate(prompt, None, GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=0))
        ids = torch.tensor([prompt], device=target.device)
        hf = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                             min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()
        check(f"prompt{p} plain-vs-transformers", prompt, plain.token_ids, hf)
        for kind in ("self", "random", "ngram"):
            for k in (1, 2, 5):
                config = GenerationConfig(max_new_tokens=NEW_TOKENS, max_draft_tokens=k)
                spec = generator.generate(prompt, drafter_of(kind), config)
                check(f"prompt{p} {kind} k={k}", prompt, spec.token_ids, plain.token_ids,
                      f"({spec.stats.target_passes} passes, accepted {spec.stats.accepted}/{spec.stats.drafted})")
                if kind == "self" and not spec.stats.accepted == spec.stats.drafted > 0:
                    failures += 1
                    say(f"  tiny prompt{p} self k={k}: FAIL self-draft not fully accepted "
                        f"{spec.stats.accepted}/{spec.stats.drafted}")
        config = GenerationConfig(max_new_tokens=40, max_draft_tokens=6)
        plain40 = generator.generate(prompt, None, config)
        auto = SwitchingDrafter([NgramDrafter(), ModelDrafter(random_draft, target.config.vocab_size)],
                                DraftLengthPolicy(max_k=6))
        check(f"prompt{p} switching(ngram,random-model)", prompt, generator.generate(prompt, auto, config).token_ids,
              plain40.token_ids)
    for k in (2, 4, 8):
        config = GenerationConfig(max_new_tokens=30, max_draft_tokens=k)
        plain = generator.generate(REPETITIVE, None, config)
        spec = generator.generate(REPETITIVE, NgramDrafter(max_candidates=4), config)
        trees = sum(s.rounds for n, s in spec.stats.sources.items() if n.startswith("ngram-tree"))
        check(f"ngram-tree k={k}", REPETITIVE, spec.token_ids, plain.token_ids, f"({trees} tree rounds)")
        if not trees:
            failures += 1
            say(f"  tiny ngram-tree k={k}: FAIL no tree rounds ran")
    n = len(RESULTS["greedy_tiny"])
    say(f"[greedy tiny float32] {n - failures}/{n} cases pass"
        f" ({sum(r['identical'] for r in RESULTS['greedy_tiny'])} identical)")
    return failures


# --- 4. timings --------------------------------------------------------------------------------------

@torch.inference_mode()
def time_passes(model, device: torch.device, contexts=(512, 2048), sizes=(1, 16, 17), repeats: int = 30) -> list[dict]:
    from decoding.kv_cache import KVCacheState

    rows = []
    vocab = min(1000, model.get_output_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(0)
    for context in contexts:
        ids = [int(i) for i in torch.randint(1, vocab, (context + max(sizes),), generator=g)]
        state = KVCacheState(model)
        sync(device)
        t0 = time.perf_counter()
        state.forward(ids[:context], logits_to_keep=1)
        sync(device)
        prefill_ms = 1000 * (time.perf_counter() - t0)
        for size in sizes:
            spent = []
            for r in range(repeats + 5):  # 5 warm-ups
                sync(device)
                t0 = time.perf_counter()
                state.forward(ids[context:context + size])  # all rows' logits, as a verify pass
                state.rollback(context)
                sync(device)
                if r >= 5:
                    spent.append(1000 * (time.perf_counter() - t0))
            rows.append({"context": context, "tokens": size, "median_ms": round(statistics.median(spent), 3),
                         "min_ms": round(min(spent), 3), "prefill_ms_first": round(prefill_ms, 2)})
    return rows


def timings(device: str, dtype: str, quick: bool) -> None:
    from decoding.weights.loading import load_model

    dev = torch.device(device)
    for name in ("starter", "starter-draft"):
        loaded = load_model(name, device, dtype)
        rows = time_passes(loaded.model, dev, contexts=(128,) if quick else (512, 2048), repeats=5 if quick else 30)
        for row in rows:
            RESULTS["timings"].append({"model": name, "dtype": dtype, **row})
            say(f"  timing {name:13s} {dtype:8s} context {row['context']:4d}: {row['tokens']:2d}-token pass "
                f"{row['median_ms']:.2f} ms (min {row['min_ms']:.2f})")
        del loaded


def code_digest(root: Path) -> str:
    """sha256 over the Python files of ``decoding`` and ``tests`` under ``root`` (which code ran)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted([*(root / "decoding").rglob("*.py"), *(root / "tests").rglob("*.py")]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _kernels_available() -> bool | None:
    try:
        from transformers.utils import is_kernels_available
    except ImportError:
        return None
    return bool(is_kernels_available())


def main() -> int:
    global LOG
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--stats-budget-s", type=float, default=240.0,
                        help="seconds at most for the chi-square section (tests in priority order; the rest skipped)")
    parser.add_argument("--deadline-s", type=float, default=330.0,
                        help="the chi-square section also ends its tests this many seconds after the start")
    parser.add_argument("--skip", default="", help="comma list of sections to skip: greedy,tiny,stats,timing")
    parser.add_argument("--code-root", default=str(CODE_ROOT), help="where decoding, bench and tests come from")
    parser.add_argument("--quick", action="store_true", help="fewer prompts, trials and repeats (a smoke run)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    LOG = open(out / "gpu_exactness.log", "w", encoding="utf-8")  # noqa: SIM115 - kept open for say()
    skip = set(filter(None, args.skip.split(",")))
    started = time.perf_counter()
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "device": args.device, "cuda_available": torch.cuda.is_available(),
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "argv": sys.argv[1:],
           "code_root": str(CODE_ROOT), "code_digest": code_digest(CODE_ROOT),
           "commit": (CODE_ROOT / "COMMIT").read_text().strip() if (CODE_ROOT / "COMMIT").exists() else None,
           "USE_HUB_KERNELS": os.environ.get("USE_HUB_KERNELS"),
           "kernels_available": _kernels_available()}
    import decoding

    env["decoding_from"] = str(Path(decoding.__file__).resolve().parent)
    RESULTS["env"] = env
    say("[env]", json.dumps(env))
    dtypes = [d for d in args.dtypes.split(",") if d]
    failures = {}

    def section(key, fn, *a):
        t0 = time.perf_counter()
        try:
            failures[key] = fn(*a)
        except Exception as exc:  # noqa: BLE001 - one section's crash must not hide the others
            failures[key] = 1
            RESULTS["errors"].append({"where": key, "traceback": traceback.format_exc()})
            say(f"[{key}] CRASHED: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        say(f"[{key}] done in {time.perf_counter() - t0:.1f}s, failures {failures[key]}")
        RESULTS["failures"] = failures
        (out / "gpu_exactness.json").write_text(json.dumps(RESULTS, indent=1, default=str) + "\n")

    if "timing" not in skip:
        for dtype in dtypes:
            section(f"timing-{dtype}", lambda d=dtype: timings(args.device, d, args.quick) or 0)
    if "greedy" not in skip:
        for dtype in dtypes:
            section(f"greedy-starter-{dtype}", greedy_starter, args.device, dtype, args.new_tokens,
                    (4, 16) if not args.quick else (4,), args.quick)
    if "tiny" not in skip:
        section("greedy-tiny-float32", greedy_tiny, args.device, args.quick)
    if "stats" not in skip:
        left = args.deadline_s - (time.perf_counter() - started) - 10
        from bench.device.gpu_stats import stats_tier

        section("stats-float32", stats_tier, args.device, min(args.stats_budget_s, left), args.quick, RESULTS, say)

    rows = RESULTS["greedy_starter"]
    say("[summary greedy starter] " + "; ".join(
        f"{d}: {sum(r['ok'] for r in rows if r['dtype'] == d)}/{sum(r['dtype'] == d for r in rows)} ok, "
        f"{sum(r['identical'] for r in rows if r['dtype'] == d)} identical"
        for d in dtypes))
    tiny = RESULTS["greedy_tiny"]
    say(f"[summary greedy tiny] {sum(r['ok'] for r in tiny)}/{len(tiny)} ok")
    st = RESULTS["stats"]
    say(f"[summary stats] {sum(r.get('ok', False) for r in st)}/{sum(not r.get('skipped') for r in st)} pass, "
        f"{sum(bool(r.get('skipped')) for r in st)} skipped")
    total = sum(failures.values())
    RESULTS["failures"] = failures
    RESULTS["seconds"] = round(time.perf_counter() - started, 1)
    say(f"[summary] failures per section {failures}; total {total}; {RESULTS['seconds']}s")
    (out / "gpu_exactness.json").write_text(json.dumps(RESULTS, indent=1, default=str) + "\n")
    LOG.close()
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
