"""Whether ``quantization: auto`` packs a float32 model's weights as float16 (``fp16-weights``) here.

A float32 model runs where the CPU has no bfloat16 instructions. fbgemm's float16-weight product reads
half the bytes of the float32 one (:mod:`decoding.weights.fp16_weights`). auto takes it when both hold:

* **it keeps the model**: every linear and embedding weight is exactly a float16 value (:func:`exact_in_fp16`), so the
  packed weights are the float32 model's own. The model packs qualify: their GGUF weights are small
  integers times float16 scales. A model whose weights float16 would round stays float32 (that would be
  another model, a trade auto does not make);
* **it is faster here**: measured once per model, CPU, threads and torch on the model's widest linear
  layer, a one-token pass at least :data:`MIN_STEP_SPEEDUP` times faster and a pass of
  :data:`LONG_PASS_TOKENS` tokens (prefill, long verify passes) at most :data:`MAX_LONG_PASS_SLOWDOWN`
  slower (:func:`speedups`; kept in ``measured.json``, section ``fp16_speedup``).

Where it packs, auto holds the model as ``int8-fp16-hybrid`` instead (:func:`choose_int8`;
:mod:`decoding.weights.int8_fp16_hybrid`: the float16 weights rounded to an int8 grid, and PyTorch's int8
kernel on bfloat16 inputs for short passes) where that kernel is faster than the float16 product for a
one-token pass in at least :data:`MIN_FASTER_SHARE` of the layers' weights: measured per weight shape, the
pass sizes up to which it is (kept in section ``low_bit_bounds`` under the float32 cost key). That is a
model a little off the float16 one: it keeps the float32 0.5B's greedy token at 99.06% of 1,491 positions
(``speclsp bench agreement``, the Ice Lake kind), above int8-hybrid's 98.72% against bfloat16, the bar issue
51 set (docs/decisions.md).
"""

from __future__ import annotations

import torch

from decoding.choices.figures import (FP16_SPEEDUP, LOW_BIT_BOUNDS, MIN_FASTER_SHARE, cost_key, faster_share,
                                     keep_entry, known_bounds, listed_bounds, lookup)
from decoding.weights import fp16_weights, int8_fp16_hybrid
from decoding.weights.file_pages import release_tensor_pages
from decoding.weights.hybrid_linear import fastest_low_bit_bound, median_seconds

MIN_STEP_SPEEDUP = 1.1
LONG_PASS_TOKENS = 128
MAX_LONG_PASS_SLOWDOWN = 1.1  # float16 weights may be this much slower than float32 for a long pass
_ROWS_PER_CHECK = 8192  # rows compared at a time, so a 151,936-row output layer needs no half copy whole


def exact_in_fp16(model: torch.nn.Module) -> tuple[int, int]:
    """``(weights of linear and embedding layers that float16 would round, such weights)`` of ``model``
    (float32, or loaded narrow: :func:`decoding.weights.fp16_weights.narrow_load_dtype`), counted in
    values and compared in float32; the first is 0 where packing keeps the model exactly."""
    rounded, total = 0, 0
    for module in model.modules():
        if (isinstance(module, torch.nn.Linear) and fp16_weights.fits(module)) or (
                isinstance(module, torch.nn.Embedding) and module.weight.dtype in fp16_weights.PACKABLE):
            weight = module.weight.detach()
            total += weight.numel()
            for start in range(0, weight.shape[0], _ROWS_PER_CHECK):
                rows = weight[start:start + _ROWS_PER_CHECK].to(torch.float32)
                rounded += int((rows.to(torch.float16).to(torch.float32) != rows).sum())
            release_tensor_pages(weight)  # read from the mapped checkpoint: read again when packed
    return rounded, total


@torch.inference_mode()
def measure_speedups(linear: torch.nn.Linear) -> dict[str, float]:
    """``{"1": ratio, "128": ratio}``: the float32 product's time over the float16-weight product's for
    passes of 1 and :data:`LONG_PASS_TOKENS` tokens through ``linear`` (a layer on the CPU; timed as a
    float32 copy where it was loaded narrow)."""
    if linear.weight.dtype != torch.float32:
        linear = _float32_copy(linear)
    packed = fp16_weights.Fp16WeightLinear(linear)
    ratios = {}
    for tokens in (1, LONG_PASS_TOKENS):
        x = torch.randn(1, tokens, linear.in_features)
        ratios[str(tokens)] = round(median_seconds(linear, x) / median_seconds(packed, x), 3)
    return ratios


def _float32_copy(linear: torch.nn.Linear) -> torch.nn.Linear:
    copy = torch.nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="cpu")
    with torch.no_grad():
        copy.weight.copy_(linear.weight)
        if linear.bias is not None:
            copy.bias.copy_(linear.bias)
    return copy


def speedups(model: torch.nn.Module, name: str) -> dict[str, float]:
    """The pinned or cached speedups of ``model`` (``name``; float32, or loaded narrow to run in float32),
    else measured on its widest linear layer and cached (:func:`measure_speedups`)."""
    key = cost_key(name, model, dtype=torch.float32)
    entry, _ = lookup(FP16_SPEEDUP, key)
    if entry is not None and all(isinstance(entry.get(k), (int, float)) for k in ("1", str(LONG_PASS_TOKENS))):
        return {k: float(entry[k]) for k in ("1", str(LONG_PASS_TOKENS))}
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and fp16_weights.fits(m)
               and m.out_features < 65536]  # a transformer block's layer, not the vocabulary's
    widest = max(linears, key=lambda m: m.weight.numel())
    measured = measure_speedups(widest)
    keep_entry(FP16_SPEEDUP, key, lambda earlier: measured, "measured float16-weight speedups")
    return measured


def choose(model: torch.nn.Module, name: str) -> tuple[bool, str]:
    """Whether ``quantization: auto`` packs ``model`` (float32, or loaded narrow to run in float32: its
    weights are then checked and timed as float32) as ``fp16-weights`` here, and a sentence why."""
    if not fp16_weights.available():
        return False, f"none: this torch has no fbgemm float16 product, so {name} keeps its float32 weights"
    rounded, total = exact_in_fp16(model)
    if total == 0:
        return False, f"none: {name} has no float32 linear layer on the CPU"
    if rounded:
        return False, (f"none: float16 would round {rounded / total:.2%} of {name}'s linear weights (another "
                       f"model), so it keeps its float32 weights")
    ratio = speedups(model, name)
    step, long_pass = ratio["1"], ratio[str(LONG_PASS_TOKENS)]
    figures = (f"a one-token pass {step:.2f}x and a {LONG_PASS_TOKENS}-token pass {long_pass:.2f}x as fast as "
               f"float32 here")
    if step >= MIN_STEP_SPEEDUP and long_pass >= 1 / MAX_LONG_PASS_SLOWDOWN:
        return True, (f"fp16-weights: every linear weight of {name} is a float16 value (the same model), and "
                      f"the float16-weight product runs {figures}")
    return False, (f"none: {name}'s weights are float16 values, but the float16-weight product runs {figures} "
                   f"(auto asks at least {MIN_STEP_SPEEDUP}x for one token, at most {MAX_LONG_PASS_SLOWDOWN}x "
                   f"slower for {LONG_PASS_TOKENS})")


def int8_bounds(model: torch.nn.Module, name: str) -> dict[tuple[int, int], int]:
    """``int8-fp16-hybrid``'s low-bit bounds for ``model`` (float32, or loaded narrow to run in float32) per
    ``(out, in)`` weight shape of the layers it holds as int8 (not the output layer): pinned or cached, else
    measured on one layer per shape (:func:`decoding.weights.hybrid_linear.fastest_low_bit_bound`) and cached,
    so every load here runs the same kernels for the same pass sizes."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    by_shape: dict[tuple[int, int], torch.nn.Linear] = {}
    for linear in model.modules():
        if isinstance(linear, torch.nn.Linear) and linear is not output and int8_fp16_hybrid.fits(linear):
            by_shape.setdefault((linear.out_features, linear.in_features), linear)
    key = cost_key(name, model, dtype=torch.float32)
    bounds = known_bounds(key, set(by_shape))
    if bounds is None:
        bounds = {shape: fastest_low_bit_bound(int8_fp16_hybrid.HybridInt8Fp16Linear(linear))
                  for shape, linear in by_shape.items()}
        keep_entry(LOW_BIT_BOUNDS, key, lambda earlier: {f"{o}x{i}": b for (o, i), b in sorted(bounds.items())},
                   "measured int8-fp16-hybrid bounds")
    return bounds


def choose_int8(model: torch.nn.Module, name: str) -> tuple[bool, dict[tuple[int, int], int], str]:
    """Whether ``quantization: auto`` holds ``model`` (one :func:`choose` packs) as ``int8-fp16-hybrid``, its
    bounds (:func:`int8_bounds`; empty where not) and a sentence why."""
    bounds = int8_bounds(model, name)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not output]
    share, listed = faster_share(linears, bounds), listed_bounds(bounds)
    if share < MIN_FASTER_SHARE:
        return False, {}, (f"int8 on bfloat16 inputs is faster for one token in {share:.0%} of its layers' weights "
                           f"(under {MIN_FASTER_SHARE:.0%}; by weight shape, up to {listed} tokens)")
    return True, bounds, (f"int8-fp16-hybrid: int8 on bfloat16 inputs is faster for one token in {share:.0%} of "
                          f"{name}'s layers' weights here (at least {MIN_FASTER_SHARE:.0%}): int8 up to, by weight shape, "
                          f"{listed} tokens per pass, the float16 weights beyond")
