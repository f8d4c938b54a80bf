"""cost(M) and our loop's own time per round on a GPU (or any torch device), on random-init targets of real
shapes: a lent GPU machine cannot receive the models' weights, and timing does not depend on them.

For each ``--shapes`` entry (Qwen2.5-Coder 0.5B, 1.5B and 7B configs; ``tiny`` for the test suite), a
random-init model in ``--dtype`` on ``--device``:

1. cost(M): ms of a pass of M = 1, 2, 4, 8, 16, 32 tokens and of 128-, 512- and 1024-token prefill
   pieces after prompts of 512 and 2048 tokens (:func:`bench.step_cost.cost_row`, the device synchronised
   around every timed pass; medians);
2. the loop: :class:`decoding.generate.SpeculativeGenerator` generating ``--new-tokens`` tokens after a
   512-token prompt, plain and with n-gram drafts of up to 8 tokens (a prompt of one random block repeated,
   so the lookup drafts every round; the random model rejects most of it, which does not change what a
   round costs). Per round: the wall time, the verify pass as timed by the loop, drafting, and the rest
   (the loop's own bookkeeping), beside cost(M) of a bare pass of the same size: where the loop's time
   per round is well above the bare pass, our overhead dominates and CUDA graphs or ``torch.compile`` of
   the step are worth their trouble.

Run (repository root)::

    python bench/device/gpu_cost.py --device cuda --out "$OUT"                     # a GPU: 0.5B, 1.5B, 7B
    python bench/device/gpu_cost.py --device cpu --shapes tiny --out /tmp/x       # the test suite's run

On the lent H200 the wheels go to ``/tmp/site`` first, as for ``gpu_exactness.py`` (its docstring).
Writes ``gpu_cost.json`` (every row) and ``gpu_cost.log`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from bench.step_cost import QWEN_SHAPES, cost_row  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1024, tie_word_embeddings=False)
SHAPES = {**QWEN_SHAPES, "tiny": TINY}
PROMPT_TOKENS = 512
MAX_DRAFT = 8


def build(shape: str, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """A random-init Qwen2 causal LM of ``shape``, created on ``device`` in ``dtype`` (no float32 copy)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def loop_rows(model: torch.nn.Module, vocab: int, new_tokens: int, repeats: int) -> list[dict]:
    """Per round of plain and n-gram decoding: wall ms, verify ms, draft ms and the rest (medians over
    ``repeats`` generations, each after a fresh 512-token prefill)."""
    from decoding.drafters.ngram import NgramDrafter
    from decoding.generate import SpeculativeGenerator
    from decoding.types import GenerationConfig
    from tests.conftest import ToyTokenizer

    generator = torch.Generator().manual_seed(1)
    block = torch.randint(0, vocab, (64,), generator=generator).tolist()
    prompt = (block * (PROMPT_TOKENS // len(block) + 1))[:PROMPT_TOKENS]
    rows = []
    for label, drafter, k in (("plain", None, 0), ("ngram", NgramDrafter(), MAX_DRAFT)):
        samples: dict[str, list[float]] = {"round_ms": [], "verify_ms": [], "draft_ms": [], "rest_ms": [],
                                           "tokens_per_round": [], "fed_per_round": []}
        for _ in range(repeats + 1):  # the first warms up
            speculative = SpeculativeGenerator(model, ToyTokenizer())
            config = GenerationConfig(max_new_tokens=new_tokens, max_draft_tokens=k, stop_token_ids=frozenset(),
                                      seed=0)
            out = speculative.generate(prompt, drafter, config)
            stats, passes = out.stats, max(out.stats.target_passes, 1)
            decode_ms = stats.ms["total"] - stats.ms["prefill"]
            samples["round_ms"].append(decode_ms / passes)
            samples["verify_ms"].append(stats.ms["verify"] / passes)
            samples["draft_ms"].append(stats.ms["draft"] / passes)
            samples["rest_ms"].append((decode_ms - stats.ms["verify"] - stats.ms["draft"]) / passes)
            samples["tokens_per_round"].append(len(out.token_ids) / passes)
            samples["fed_per_round"].append(1 + stats.drafted / passes)
        rows.append({"loop": label, **{name: round(statistics.median(v[1:]), 3) for name, v in samples.items()}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    parser.add_argument("--shapes", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b,qwen2.5-coder-7b")
    parser.add_argument("--contexts", default="512,2048")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "gpu_cost.log").open("w")

    def say(line: str) -> None:
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    dtype = getattr(torch, args.dtype)
    device_name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    say(f"device {args.device} ({device_name}), torch {torch.__version__}, {args.dtype}")
    rows = []
    for shape in args.shapes.split(","):
        started = time.perf_counter()
        model = build(shape, args.device, dtype)
        vocab = SHAPES[shape]["vocab_size"]
        say(f"{shape}: built in {time.perf_counter() - started:.1f} s")
        for context in (int(c) for c in args.contexts.split(",")):
            row = cost_row(shape, model, vocab, context, args.repeats)
            rows.append({"kind": "cost", "device": device_name, "dtype": args.dtype, **row})
            say(f"{shape} cost(M) at {context}: " + ", ".join(f"{m}: {ms} ms" for m, ms in row["pass_ms"].items()))
        for row in loop_rows(model, vocab, args.new_tokens, args.repeats):
            rows.append({"kind": "loop", "model": shape, "device": device_name, "dtype": args.dtype, **row})
            say(f"{shape} loop {row['loop']}: {row['round_ms']} ms a round ({row['fed_per_round']} tokens fed, "
                f"{row['tokens_per_round']} committed): verify {row['verify_ms']}, draft {row['draft_ms']}, "
                f"the rest {row['rest_ms']}")
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    (args.out / "gpu_cost.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
