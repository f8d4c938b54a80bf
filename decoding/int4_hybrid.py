"""``int4-hybrid`` weights: int4 for short passes, the same weights dequantised for long ones.

On a CPU a pass of few tokens is bound by the bytes of weights it reads, a pass of many tokens by
arithmetic. PyTorch's int4 CPU kernel (``aten._weight_int4pack_mm_for_cpu``, through torchao's
``Int4OpaqueTensor``) reads a quarter of bfloat16's bytes, so a one-token step of the 0.5B runs about
twice as fast, but its cost grows with every token, and a 1024-token prefill piece takes 4.5x the
bfloat16 matrix product's time (``speclsp bench step-cost``, docs/performance.md). A hybrid linear layer
keeps both: the packed int4 weight, and the *same* weight dequantised to the activation dtype. A pass of
at most :attr:`HybridInt4Linear.max_int4_tokens` tokens runs the int4 kernel; a longer one the dense
product. Which is faster at which size is measured per weight shape when the model is loaded
(:func:`calibrate`), not assumed: it differs between CPUs.

Both kernels compute with one set of weights (the int4 values, scales and zero points; the dense copy is
their dequantisation, rounded to the activation dtype), so the model is one model: speculative output
equals plain decoding of the same hybrid model, up to the rounding that passes of different sizes
already show in bfloat16 (docs/exactness.md). Memory: the bfloat16 model plus about a third more.
"""

from __future__ import annotations

import statistics
import time

import torch

INT4_GROUP_SIZE = 128  # input channels per int4 scale and zero point (torchao's default; 32 and 64 also work)
CALIBRATION_TOKENS = (1, 2, 4, 8, 16, 32)
_CALIBRATION_ROUNDS = 5


class HybridInt4Linear(torch.nn.Module):
    """A linear layer holding int4 weights and their dequantised copy (see the module docstring).

    Args:
        linear: the layer to replace (its weight: ``(out_features, in_features)``, ``in_features`` a
            multiple of :data:`INT4_GROUP_SIZE`, on the CPU).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        weight = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        packed, dense = quantized(weight)
        self.packed = torch.nn.Parameter(packed, requires_grad=False)
        self.dense = torch.nn.Parameter(dense.to(weight.dtype), requires_grad=False)
        self.bias = linear.bias
        self.max_int4_tokens = 0  # passes of at most this many tokens use int4 (set by calibrate)

    @property
    def weight(self) -> torch.Tensor:
        """The dense copy: what code that reads a linear layer's weight (dtype, device, shape) expects."""
        return self.dense

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features)
        tokens = x.numel() // self.in_features
        weight = self.packed if tokens <= self.max_int4_tokens else self.dense
        return torch.nn.functional.linear(x, weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"int4 up to {self.max_int4_tokens} tokens")


def quantized(weight: torch.Tensor):
    """``weight`` (``(N, K)``) in torchao's int4 tinygemm format (asymmetric, groups of
    :data:`INT4_GROUP_SIZE` along K, a float zero point): ``(Int4OpaqueTensor packed for the CPU kernel, the same int4 weights
    dequantised in float32)``. The quantisation parameters are chosen once for both; the packed tensor is
    built as ``Int4OpaqueTensor.from_hp`` builds it (its default, tinygemm, parameters)."""
    from torchao.prototype.quantization.int4.int4_opaque_tensor import Int4OpaqueTensor
    from torchao.quantization.quant_primitives import (
        MappingType,
        _choose_qparams_affine_tinygemm,
        _dequantize_affine_tinygemm_no_dtype_check,
        _quantize_affine_tinygemm,
    )
    from torchao.quantization.utils import pack_tinygemm_scales_and_zeros

    block = [1, INT4_GROUP_SIZE]
    scale, zero_point = _choose_qparams_affine_tinygemm(weight, MappingType.ASYMMETRIC, block, torch.int32, 0, 15,
                                                        1e-6, None, weight.dtype)
    int_data = _quantize_affine_tinygemm(weight, block, scale, zero_point, torch.int32, 0, 15)
    dense = _dequantize_affine_tinygemm_no_dtype_check(int_data, block, scale, zero_point, 0, 15, torch.float32)
    rows = int_data.shape[0]
    scale_and_zero = pack_tinygemm_scales_and_zeros(scale.reshape(rows, -1), zero_point.reshape(rows, -1), scale.dtype)
    packed = Int4OpaqueTensor(qdata=torch.ops.aten._convert_weight_to_int4pack_for_cpu(int_data, 1),
                              scale_and_zero=scale_and_zero, block_size=block, shape=weight.shape)
    return packed, dense


@torch.inference_mode()
def calibrate(layers: list[HybridInt4Linear]) -> dict[tuple[int, int], int]:
    """Set each layer's ``max_int4_tokens``: per weight shape, the largest pass size in
    :data:`CALIBRATION_TOKENS` up to which the int4 kernel is faster than the dense product (the medians
    of a few timed calls each; 0 where int4 is never faster). Returns ``{(out, in): max_int4_tokens}``."""
    chosen: dict[tuple[int, int], int] = {}
    for layer in layers:
        shape = (layer.out_features, layer.in_features)
        if shape not in chosen:
            chosen[shape] = _fastest_int4_bound(layer)
        layer.max_int4_tokens = chosen[shape]
    return chosen


def _median_seconds(weight: torch.Tensor, x: torch.Tensor) -> float:
    """Median seconds of ``linear(x, weight)`` over a few calls, after one to warm up."""
    torch.nn.functional.linear(x, weight)
    samples = []
    for _ in range(_CALIBRATION_ROUNDS):
        started = time.perf_counter()
        torch.nn.functional.linear(x, weight)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _fastest_int4_bound(layer: HybridInt4Linear, timer=_median_seconds) -> int:
    """The largest size in :data:`CALIBRATION_TOKENS` up to which every size runs faster on int4 (0: none)."""
    bound = 0
    for tokens in CALIBRATION_TOKENS:
        x = torch.randn(1, tokens, layer.in_features, dtype=layer.dense.dtype)
        if timer(layer.packed, x) >= timer(layer.dense, x):
            break
        bound = tokens
    return bound


def make_hybrid(model: torch.nn.Module) -> tuple[int, int, dict[tuple[int, int], int]]:
    """Replace every linear layer of ``model`` whose input width is a multiple of :data:`INT4_GROUP_SIZE`
    by a :class:`HybridInt4Linear` and calibrate them. Returns ``(replaced, linear layers, bounds per shape)``."""
    replaced, total, layers = 0, 0, []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            total += 1
            if child.in_features % INT4_GROUP_SIZE == 0:
                hybrid = HybridInt4Linear(child)
                setattr(parent, name, hybrid)
                layers.append(hybrid)
                replaced += 1
    return replaced, total, calibrate(layers)
