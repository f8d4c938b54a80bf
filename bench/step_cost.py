"""``speclsp bench decode --step-cost``: what one pass of the loaded target and draft costs on this machine.

For each model of the engine (target, then draft): after a prefill of ``context`` random tokens, the
wall time (ms) of one pass over 1 token (a plain decoding step), over k tokens (a verify pass, k in
:data:`VERIFY_TOKENS`) and over a prefill piece (:data:`PREFILL_TOKENS`), each the median of ``repeats``
passes; the cache is cut back to the prefill
after every pass, and the lengths are interleaved (1, 2, ..., 512, 1, 2, ...) so that other load on the
machine spreads over all of them. Also the bytes of the model's weights (quantised weights count
their packed bytes). Run it once per ``--dtype`` / ``--quantization`` / ``--engine`` to compare them.
``speclsp bench decode --cost`` (:func:`cost`): the same ratios for random-init models with the shapes
of real ones (weights do not matter for timing), where the real weights are not installed.
A measurement command, not a test: it times this machine.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from decoding.engine import Engine
from decoding.kv_cache import cache_state

VERIFY_TOKENS = (2, 4, 8, 16, 32)  # tokens per verify pass
PREFILL_TOKENS = (128, 512)  # a prefill piece after the context


def weight_bytes(model: torch.nn.Module) -> int:
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
    return total


@torch.inference_mode()
def pass_costs(model: torch.nn.Module, vocab_size: int, context: int, repeats: int, seed: int) -> dict[int, list[float]]:
    """ms of each pass over k tokens (k = 1 and :data:`VERIFY_TOKENS`) after a ``context``-token prefill."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab_size, (context,), generator=generator).tolist()
    state = cache_state(model)
    state.forward(prompt, logits_to_keep=1)
    times: dict[int, list[float]] = {k: [] for k in (1, *VERIFY_TOKENS, *PREFILL_TOKENS)}
    for _ in range(repeats):
        for k, samples in times.items():
            tokens = torch.randint(0, vocab_size, (k,), generator=generator).tolist()
            start = time.perf_counter()
            state.forward(tokens)
            samples.append(1000 * (time.perf_counter() - start))
            state.rollback(context)
    return times


def step_costs(engine: Engine, context: int = 500, repeats: int = 7, seed: int = 0) -> list[dict]:
    """One row per loaded model: medians (and minima) of the pass costs, verify/step ratios, weight bytes."""
    rows = []
    models = [("target", engine.target)] + ([("draft", engine.draft)] if engine.draft is not None else [])
    for role, loaded in models:
        times = pass_costs(loaded.model, loaded.vocab_size, context, repeats, seed)
        medians = {k: statistics.median(v) for k, v in times.items()}
        rows.append({
            "role": role, "model": loaded.name, "dtype": engine.config.dtype,
            "quantization": engine.config.quantization, "threads": torch.get_num_threads(), "context": context,
            "weight_bytes": weight_bytes(loaded.model),
            "step_ms": round(medians[1], 1), "step_ms_min": round(min(times[1]), 1),
            **{f"verify{k}_ms": round(medians[k], 1) for k in VERIFY_TOKENS},
            **{f"verify{k}_ms_min": round(min(times[k]), 1) for k in VERIFY_TOKENS},
            **{f"verify{k}_ratio": round(medians[k] / medians[1], 2) for k in VERIFY_TOKENS},
            **{f"prefill{k}_ms": round(medians[k], 1) for k in PREFILL_TOKENS},
            "engine": engine.config.engine,
            "samples_ms": {str(k): [round(t, 1) for t in v] for k, v in times.items()},
        })
        print(f"step cost: {role} {loaded.name} done", file=sys.stderr)
    return rows


COST_K = (1, 2, 4, 8, 16)  # verify lengths of --cost
QWEN_SHAPES = {  # Qwen2.5-Coder configs (public config.json values)
    "qwen2.5-coder-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-coder-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
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
