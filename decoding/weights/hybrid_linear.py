"""Hybrid linear layers: low-bit weights for short passes, the same weights dequantised for long ones.

On a CPU a pass of few tokens is bound by the bytes of weights it reads, a pass of many tokens by
arithmetic. A low-bit kernel reads fewer bytes, so a one-token step runs faster, but its cost grows with
every token, while the bfloat16 matrix product (oneDNN, on AMX where the CPU has it) stays nearly flat over
short passes and prefills faster (``speclsp bench step-cost``, docs/performance.md). A hybrid
layer keeps both: the low-bit weights, and the *same* weights dequantised to the activation dtype. A pass
of at most :attr:`HybridLinear.max_low_bit_tokens` tokens runs the low-bit kernel, a longer one the dense
product. Which is faster at which size is measured per weight shape when the model is loaded
(:func:`calibrate`), not assumed: it differs between CPUs.

Both kernels compute with one set of weights (the dense copy is the low-bit weights' dequantisation,
rounded to the activation dtype), so the model is one model: speculative output equals plain decoding of
the same hybrid model, up to the rounding that passes of different sizes already show in bfloat16
(docs/exactness.md). The formats: :mod:`decoding.weights.int4_hybrid` and :mod:`decoding.weights.int8_hybrid`.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from decoding.weights.file_pages import release_tensor_pages

CALIBRATION_TOKENS = (1, 2, 4, 8, 16, 32)
_CALIBRATION_ROUNDS = 5


class HybridLinear(torch.nn.Module):
    """A linear layer holding low-bit weights and their dequantised copy (see the module docstring).

    Subclasses set :attr:`dense` (``(out_features, in_features)``, the activation dtype) and implement
    :meth:`low_bit`.

    Args:
        linear: the layer to replace (on the CPU).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias
        self.dense: torch.nn.Parameter | None = None
        self.max_low_bit_tokens = 0  # passes of at most this many tokens use the low-bit kernel (set by calibrate)

    @property
    def weight(self) -> torch.Tensor:
        """The dense copy: what code that reads a linear layer's weight (dtype, device, shape) expects."""
        return self.dense

    @property
    def input_dtype(self) -> torch.dtype:
        """The dtype of the passes' inputs (the activation dtype): the dense copy's."""
        return self.dense.dtype

    def low_bit(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weights.T + bias`` by the low-bit kernel; ``x``: ``(..., in_features)``."""
        raise NotImplementedError

    def dense_product(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ dense.T + bias`` by the dense matrix product."""
        return torch.nn.functional.linear(x, self.dense, self.bias)

    def long_pass_layer(self) -> torch.nn.Module | None:
        """A layer that computes as :meth:`dense_product` from the same tensors, without the low-bit weights
        (:func:`keep_long_pass_weights`): a ``torch.nn.Linear`` of the dense copy; ``None`` without one."""
        if self.dense is None:
            return None
        layer = torch.nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        layer.weight, layer.bias = self.dense, self.bias
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features)
        tokens = x.numel() // self.in_features
        return self.low_bit(x) if tokens <= self.max_low_bit_tokens else self.dense_product(x)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"low-bit up to {self.max_low_bit_tokens} tokens")


def median_seconds(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                   rounds: int = _CALIBRATION_ROUNDS) -> float:
    """Median seconds of ``run(x)`` over ``rounds`` calls after one to warm up."""
    run(x)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        run(x)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _median_seconds(layer: HybridLinear, tokens: int, low_bit: bool) -> float:
    """Median seconds of one pass of ``tokens`` random rows through ``layer``'s low-bit kernel or its dense
    product (:func:`median_seconds`)."""
    x = torch.randn(1, tokens, layer.in_features, dtype=layer.input_dtype)
    return median_seconds(layer.low_bit if low_bit else layer.dense_product, x)


def fastest_low_bit_bound(layer: HybridLinear,
                          timer: Callable[[HybridLinear, int, bool], float] = _median_seconds) -> int:
    """The largest size in :data:`CALIBRATION_TOKENS` up to which every size runs faster on the low-bit
    kernel (0: none). ``timer(layer, tokens, low_bit)`` gives seconds."""
    bound = 0
    for tokens in CALIBRATION_TOKENS:
        if timer(layer, tokens, True) >= timer(layer, tokens, False):
            break
        bound = tokens
    return bound


@torch.inference_mode()
def calibrate(layers: list[HybridLinear], known: dict[tuple[int, int], int] | None = None) -> dict[tuple[int, int], int]:
    """Set each layer's ``max_low_bit_tokens``: per weight shape, the bound in ``known`` or else
    :func:`fastest_low_bit_bound` of its first layer. Returns ``{(out, in): max_low_bit_tokens}``."""
    known = known or {}
    chosen: dict[tuple[int, int], int] = {}
    for layer in layers:
        shape = (layer.out_features, layer.in_features)
        if shape not in chosen:
            chosen[shape] = known[shape] if shape in known else fastest_low_bit_bound(layer)
        layer.max_low_bit_tokens = chosen[shape]
    return chosen


def make_hybrid(model: torch.nn.Module, layer_type: type[HybridLinear], fits: Callable[[torch.nn.Linear], bool],
                bounds: dict[tuple[int, int], int] | None = None) -> tuple[int, int, dict[tuple[int, int], int]]:
    """Replace every linear layer of ``model`` that ``fits`` by a ``layer_type`` and calibrate them (the
    shapes in ``bounds`` take their bound from it). Returns ``(replaced, linear layers, bounds per shape)``."""
    replaced, total, layers = 0, 0, []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            total += 1
            if fits(child):
                hybrid = layer_type(child)
                setattr(parent, name, hybrid)
                release_tensor_pages(child.weight)  # read from the mapped checkpoint; no longer needed
                layers.append(hybrid)
                replaced += 1
    return replaced, total, calibrate(layers, bounds)



def keep_long_pass_weights(model: torch.nn.Module) -> int:
    """Replace every :class:`HybridLinear` of ``model`` whose :meth:`HybridLinear.long_pass_layer` is not
    ``None`` by that layer: the weights its long passes already compute with, so every pass then computes as
    a long pass of the hybrid did; its low-bit weights are freed. Returns the bytes of low-bit tensors freed."""
    freed = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, HybridLinear) or (kept := child.long_pass_layer()) is None:
                continue
            freed += sum(t.numel() * t.element_size() for n, t in child.named_parameters(recurse=False)
                         if n not in ("dense", "bias"))
            setattr(parent, name, kept)
    return freed
