"""The cost of a pass of M tokens of a loaded model, cost(M), on this machine: ``speclsp bench step-cost``
(every weight path, :mod:`bench.step_cost_grid`) and ``speclsp bench decode --step-cost`` (the loaded pair).

For a model: after a prefill of ``context`` random tokens, the wall time (ms) of one pass over M tokens
for M in :data:`PASS_TOKENS` (1: a plain decoding step; 2-32: verify passes) and over a prefill piece
(:data:`PREFILL_TOKENS`); the cache is cut back to the context after every pass. One untimed round of
every size comes first (its time is reported: under ``torch.compile`` it holds the compiling), then
``repeats`` timed rounds, the sizes interleaved (1, 2, ..., 1024, 1, 2, ...) so that other load on the
machine spreads over all of them; a size whose warm-up pass took over :data:`LONG_PASS_S` is timed in at
most 2 rounds. Also the bytes of the model's weights (what a pass reads; quantised tensors count their
packed bytes, a llama.cpp model its GGUF file).
``speclsp bench decode --cost`` (:func:`cost`): verify/step ratios for random-init models with the shapes
of real ones (weights do not matter for timing), where the real weights are not installed.
A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from decoding.choices.pass_costs import timed_pass
from decoding.engine import Engine
from decoding.kv_cache import cache_state

PASS_TOKENS = (1, 2, 4, 8, 16, 32)  # tokens per decoding step or verify pass
VERIFY_TOKENS = PASS_TOKENS[1:]
PREFILL_TOKENS = (128, 512, 1024)  # prefill pieces after the context
CONTEXTS = (512, 2048)  # prompt tokens before the pass
LONG_PASS_S = 4.0


def weight_bytes(model) -> int:
    """Bytes of ``model``'s parameters as stored (a torchao tensor: the sum of its inner tensors; a
    llama.cpp model: its GGUF file)."""
    path = getattr(model, "path", None)
    if path is not None and not isinstance(model, torch.nn.Module):
        return path.stat().st_size
    total, seen = 0, set()
    for param in model.parameters():
        if id(param) in seen:  # tied weights count once
            continue
        seen.add(id(param))
        inner_names = getattr(param, "__tensor_flatten__", None)
        if inner_names is not None and type(param).__module__.startswith("torchao."):
            names, _ = param.__tensor_flatten__()
            total += sum(getattr(param, n).numel() * getattr(param, n).element_size() for n in names)
        else:
            total += param.numel() * param.element_size()
    return total + _fp16_weight_bytes(model)


def _fp16_weight_bytes(model) -> int:
    """Bytes of the weights held outside the parameters (fbgemm's packed matrices of ``fp16-weights``,
    the embedding table's float16 buffer or its mapped file region)."""
    from decoding.weights.fp16_weights import Fp16Embedding, Fp16WeightLinear
    from decoding.weights.mapped_embedding import MappedEmbedding

    if not isinstance(model, torch.nn.Module):
        return 0
    total = 0
    for module in model.modules():
        if isinstance(module, Fp16WeightLinear):
            total += 2 * module.in_features * module.out_features
        elif isinstance(module, (Fp16Embedding, MappedEmbedding)):
            total += module.table.numel() * module.table.element_size()
    return total


@torch.inference_mode()
def pass_costs(model, vocab_size: int, context: int, repeats: int, seed: int,
               sizes: tuple[int, ...] = PASS_TOKENS + PREFILL_TOKENS,
               ) -> tuple[dict[int, list[float]], dict[int, float]]:
    """``(ms of each timed pass per size, ms of each size's warm-up pass)`` after a ``context``-token prefill.

    Args:
        model: a transformers causal LM or a llama.cpp model (anything :func:`cache_state` takes).
        vocab_size: token ids are drawn below it.
        context: tokens in the cache before every pass.
        repeats: timed rounds (a size slower than :data:`LONG_PASS_S` at warm-up: at most 2).
        seed: of the random tokens.
        sizes: tokens per pass.
    """
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab_size, (context,), generator=generator).tolist()
    state = cache_state(model)
    state.forward(prompt, logits_to_keep=1)

    def timed(size: int) -> float:  # a verify pass's cost: the logits of every position
        tokens = torch.randint(0, vocab_size, (size,), generator=generator).tolist()
        return timed_pass(state, tokens, context, logits_to_keep=0)

    warmup = {size: timed(size) for size in sizes}
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for round_index in range(repeats):
        for size in sizes:
            if round_index < 2 or warmup[size] <= 1000 * LONG_PASS_S:
                times[size].append(timed(size))
    return times, warmup


def cost_row(name: str, model, vocab_size: int, context: int, repeats: int, seed: int = 0) -> dict:
    """One model at one context: the median (and fastest) ms per pass size, ratios to a one-token step,
    the warm-up round and the weight bytes."""
    times, warmup = pass_costs(model, vocab_size, context, repeats, seed)
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "model": name, "threads": torch.get_num_threads(), "context": context,
        "weight_bytes": weight_bytes(model),
        "pass_ms": {str(k): round(v, 1) for k, v in medians.items()},
        "pass_ms_min": {str(k): round(min(v), 1) for k, v in times.items()},
        "warmup_ms": {str(k): round(v, 1) for k, v in warmup.items()},
        "samples": {str(k): len(v) for k, v in times.items()},
        # the older row keys (bench decode --step-cost before 2026-12-05)
        "step_ms": round(medians[1], 1),
        **{f"verify{k}_ms": round(medians[k], 1) for k in VERIFY_TOKENS},
        **{f"verify{k}_ratio": round(medians[k] / medians[1], 2) for k in VERIFY_TOKENS},
        **{f"prefill{k}_ms": round(medians[k], 1) for k in PREFILL_TOKENS},
    }


def step_costs(engine: Engine, contexts: tuple[int, ...] = (512,), repeats: int = 5, seed: int = 0) -> list[dict]:
    """One row per loaded model and context (:func:`cost_row`), with the engine's dtype and kind and the
    quantization the model was loaded with (``auto`` settled)."""
    rows = []
    models = [("target", engine.target)] + ([("draft", engine.draft)] if engine.draft is not None else [])
    for role, loaded in models:
        for context in contexts:
            row = cost_row(loaded.name, loaded.model, loaded.vocab_size, context, repeats, seed)
            rows.append({"role": role, "dtype": engine.config.dtype, "quantization": loaded.quantization,
                         "engine": engine.config.engine, **row})
            print(f"step cost: {role} {loaded.name} at {context} done", file=sys.stderr)
    return rows


COST_K = (1, 2, 4, 8, 16)  # verify lengths of --cost
QWEN_SHAPES = {  # Qwen2.5-Coder configs (public config.json values)
    "qwen2.5-coder-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-coder-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-coder-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                             num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


@torch.inference_mode()
def cost(shapes: list[str], device: str, context: int = 512, repeats: int = 5) -> list[dict]:
    """ms of one decode step and of verifying k tokens, for random-init models of real shapes."""
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    rows = []
    for name in shapes:
        torch.manual_seed(0)
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN_SHAPES[name])).to(device=device, dtype=dtype).eval()
        vocab = QWEN_SHAPES[name]["vocab_size"]
        prompt = torch.randint(0, vocab, (1, context), device=device)
        times: dict[int, float] = {}
        for k in COST_K:
            samples = []
            for _ in range(repeats):
                cache = DynamicCache()
                model(input_ids=prompt, cache=cache, use_cache=True)
                step = torch.randint(0, vocab, (1, k), device=device)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                start = time.perf_counter()
                model(input_ids=step, cache=cache, use_cache=True)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                samples.append(1000 * (time.perf_counter() - start))
            times[k] = statistics.median(samples)
        rows.append({"model_shape": name, "device": device, "dtype": str(dtype).removeprefix("torch."),
                     "context": context, "decode_ms": round(times[1], 2),
                     "verify_ratio": {str(k): round(times[k] / times[1], 3) for k in COST_K[1:]}})
        print(f"cost: {name} {rows[-1]}", file=sys.stderr)
        del model
    return rows
