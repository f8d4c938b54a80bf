"""``speclsp bench agreement``: how close quantised weights stay to the model's own choices.

Speculative decoding keeps a quantised model's output exactly (it verifies against the quantised
weights); what quantisation changes is the model. This measures by how much. For each prompt of
``speclsp bench decode``'s workloads, the reference (the model in ``--dtype``, no quantization) writes its
greedy continuation step by step (transformers' ``generate``). Each candidate quantization of the same
model is then fed prompt + continuation in one pass, and its top token at each position of the
continuation is compared with the token the reference wrote there (teacher forcing). The reference fed
the same way is the floor: one pass of all positions against step-by-step decoding, the same weights,
so every disagreement there is kernel rounding at a near-tie.

A hybrid quantization (``int8-hybrid``, ``int4-hybrid``) runs a pass this long through its dense copy:
this compares the weights, not the low-bit kernel's own rounding (which the exactness tests bound).

Rows (``DIR/agreement.json``): per model and quantization, the share of positions whose top token is the
reference's, and per prompt the positions agreed, the positions, and the first disagreement (= positions
where none).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import torch

from bench.workloads import WORKLOADS, workloads
from decoding.weights.loading import LoadedModel, load_model
from decoding.types import QUANTIZATIONS

REFERENCE = "reference (one pass)"


@torch.inference_mode()
def greedy_continuation(model, prompt: list[int], new_tokens: int) -> list[int]:
    """The greedy continuation of ``prompt`` by ``model``, step by step (``generate``), ``new_tokens`` long."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@torch.inference_mode()
def agreement(model, prompt: list[int], continuation: list[int]) -> tuple[int, int, int]:
    """``(positions whose top token is the continuation's, positions, first position that differs (or
    positions))`` with ``prompt + continuation`` fed to ``model`` in one pass."""
    ids = torch.tensor([prompt + continuation], device=model.device)
    top = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].argmax(-1).tolist()
    agreed = [a == b for a, b in zip(top, continuation)]
    return sum(agreed), len(continuation), agreed.index(False) if False in agreed else len(continuation)


def measure(reference: LoadedModel, quantizations: list[str], prompts: dict[str, list[tuple[list[int], int]]],
            dtype: str = "bfloat16", new_tokens: int = 64) -> list[dict]:
    """One row for ``reference`` (the model loaded in ``dtype``, no quantization) and one per quantization
    of the same model (see the module docstring)."""
    model_name = reference.name
    continuations = {(workload, i): greedy_continuation(reference.model, prompt, min(new_tokens, budget))
                     for workload, cases in prompts.items() for i, (prompt, budget) in enumerate(cases)}
    rows = [_row(model_name, REFERENCE, reference.model, prompts, continuations)]
    for quantization in quantizations:
        gc.collect()
        candidate = load_model(model_name, device="cpu", dtype=dtype, quantization=quantization).model
        rows.append(_row(model_name, quantization, candidate, prompts, continuations))
        del candidate
    return rows


def _row(model_name: str, label: str, model, prompts, continuations) -> dict:
    per_prompt = {f"{workload}{i}": agreement(model, prompts[workload][i][0], continuation)
                  for (workload, i), continuation in continuations.items()}
    agreed = sum(a for a, _, _ in per_prompt.values())
    positions = sum(n for _, n, _ in per_prompt.values())
    return {"model": model_name, "weights": label, "agreement": round(agreed / positions, 4), "agreed": agreed,
            "positions": positions, "prompts": {k: {"agreed": a, "positions": n, "first_difference": f}
                                                for k, (a, n, f) in per_prompt.items()}}


def run(args: argparse.Namespace) -> int:
    quantizations = [q for q in args.quantizations.split(",") if q]
    unknown = [q for q in quantizations if q not in QUANTIZATIONS or q == "none"]
    if unknown:
        raise SystemExit(f"unknown quantizations {unknown}; use {', '.join(q for q in QUANTIZATIONS if q != 'none')}")
    rows = []
    for model_name in args.models.split(","):
        reference = load_model(model_name, device="cpu", dtype=args.dtype)
        prompts = workloads(reference.tokenizer, args.quick, args.seed, names=tuple(args.workloads.split(",")))
        rows += measure(reference, quantizations, prompts, args.dtype, args.new_tokens)
        del reference
    for row in rows:
        firsts = " ".join(f"{k}:{v['first_difference']}/{v['positions']}" for k, v in row["prompts"].items())
        print(f"{row['model']:<20} {row['weights']:<20} {row['agreement']:.4f} ({row['agreed']}/{row['positions']})"
              f"  first difference {firsts}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "agreement.json").write_text(json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.out / 'agreement.json'}", file=sys.stderr)
    return 0


def add_parser(kinds) -> None:
    parser = kinds.add_parser("agreement", help="how often quantised weights pick the model's own greedy tokens")
    parser.add_argument("--models", default="qwen2.5-coder-1.5b,qwen2.5-coder-0.5b", help="comma-separated")
    parser.add_argument("--quantizations", default="int8-hybrid,int4-hybrid", help="comma-separated candidates")
    parser.add_argument("--workloads", default="edit,fim,body", help=f"comma-separated, from {', '.join(WORKLOADS)}")
    parser.add_argument("--dtype", default="bfloat16", help="the reference's dtype (and the candidates')")
    parser.add_argument("--new-tokens", type=int, default=64, help="greedy tokens per prompt, at most")
    parser.add_argument("--quick", action="store_true", help="3 prompts per workload (else 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write DIR/agreement.json")
    parser.set_defaults(run=run)
