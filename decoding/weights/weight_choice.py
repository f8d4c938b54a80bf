"""``quantization: auto`` (the default): the weight path measured fastest here among those that keep the model.

The candidates are bfloat16 (``none``) and ``int8-hybrid`` (:mod:`decoding.weights.int8_hybrid`), whose weights
pick the bfloat16 model's greedy token nearly as often as bfloat16 itself does in another pass shape
(``speclsp bench agreement``: the 1.5B 99.33% against 99.19%, the 0.5B 98.72% against 99.40%). int4 paths are faster still on one-token steps but are another model (a
typist took fewer of their completions), so ``auto`` never picks them; name them to use them.

``int8-hybrid`` is picked for a model on the CPU in bfloat16 (run by torch) where PyTorch's int8 kernel
is faster than the bfloat16 product for a one-token pass in the layers that hold at least half of the
linear weights. That is measured once per weight shape (:func:`decoding.weights.hybrid_linear.fastest_low_bit_bound`
on one layer of each shape) and kept per model, CPU, threads and torch in the cache
(``weight-choice.json`` under :func:`decoding.weights.gguf_models.cache_root`), so the same machine loads the
same weights every time. Elsewhere (a GPU, float32, llama.cpp) ``auto`` is ``none``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoding.cache_files import read_json, update_json
from decoding.drafter_choice import cost_key
from decoding.weights.gguf_models import cache_root
from decoding.weights.hybrid_linear import fastest_low_bit_bound
from decoding.weights.int8_hybrid import HybridInt8Linear, fits

MIN_FASTER_SHARE = 0.5  # of the linear weights, in shapes where int8 is faster for one token: auto picks int8-hybrid


def _cache_file() -> Path:
    return cache_root() / "weight-choice.json"


def choose_quantization(model: torch.nn.Module, name: str) -> tuple[str, dict[tuple[int, int], int], str]:
    """What ``auto`` runs for ``model`` (loaded, dense, on its device and dtype) here.

    Returns:
        ``(quantization, int8 bounds per (out, in) weight shape (for ``make_int8_hybrid``; empty for
        ``none``), a sentence for the log saying why)``.
    """
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    if device.type != "cpu" or dtype != torch.bfloat16:
        return "none", {}, f"{name} runs on {device} in {dtype}: auto keeps its weights as they are"
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    by_shape: dict[tuple[int, int], torch.nn.Linear] = {}
    for linear in linears:
        if fits(linear):
            by_shape.setdefault((linear.out_features, linear.in_features), linear)
    key = cost_key(name, model)
    bounds = _cached(key, set(by_shape))
    if bounds is None:
        bounds = {shape: fastest_low_bit_bound(HybridInt8Linear(linear)) for shape, linear in by_shape.items()}
        _keep(key, bounds)
    total = sum(m.weight.numel() for m in linears)
    faster = sum(m.weight.numel() for m in linears if bounds.get((m.out_features, m.in_features), 0) >= 1)
    share = faster / total if total else 0.0
    listed = ", ".join(f"{o}x{i}: {b}" for (o, i), b in sorted(bounds.items()))
    if share < MIN_FASTER_SHARE:
        return "none", {}, (f"int8 is faster for one token in {share:.0%} of {name}'s linear weights here ({listed}): "
                            f"auto keeps {dtype} weights")
    return "int8-hybrid", bounds, (f"int8 is faster for one token in {share:.0%} of {name}'s linear weights here: auto "
                                   f"runs int8-hybrid (int8 up to, by weight shape, {listed} tokens per pass)")


def _cached(key: str, shapes: set[tuple[int, int]]) -> dict[tuple[int, int], int] | None:
    """The bounds kept for ``key``, if they cover ``shapes``."""
    entry = read_json(_cache_file()).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        bounds = {tuple(int(n) for n in shape.split("x")): int(bound) for shape, bound in entry.items()}
    except (ValueError, AttributeError):
        return None
    return bounds if shapes <= set(bounds) else None


def _keep(key: str, bounds: dict[tuple[int, int], int]) -> None:
    """Write ``bounds`` under ``key`` (one that cannot be written is only logged: the next load measures
    again)."""

    def put(known: dict) -> None:
        known[key] = {f"{o}x{i}": bound for (o, i), bound in sorted(bounds.items())}

    update_json(_cache_file(), put, "weight choice")
