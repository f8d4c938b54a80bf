"""``int4-hybrid`` weights: int4 for short passes, the same weights dequantised for long ones.

A quality trade, not a faster copy of the model: int4 weights are another model than the bfloat16 one
(speculative output equals plain decoding of the *int4* model, not of the bfloat16 model; how often the
two agree: ``speclsp bench agreement``, docs/performance.md). ``quantization: auto`` never picks it; name
it to trade quality for speed. For weights as close to bfloat16 as its own rounding, see
:mod:`decoding.weights.int8_hybrid`.

PyTorch's int4 CPU kernel (``aten._weight_int4pack_mm_for_cpu``) reads a quarter of bfloat16's bytes, so a
one-token step runs faster, but its cost grows with every token and a long prefill piece is slower than
the bfloat16 matrix product (``speclsp bench step-cost``). How the hybrid layer chooses between the two,
and why it is one model: :mod:`decoding.weights.hybrid_linear`. Memory: the bfloat16 model plus about a
third more. The format is tinygemm's (asymmetric, groups of :data:`INT4_GROUP_SIZE` input channels, a float
zero point), computed here with PyTorch's own ops: no torchao needed.
"""

from __future__ import annotations

import torch

from decoding.weights.hybrid_linear import HybridLinear, make_hybrid

INT4_GROUP_SIZE = 128  # input channels per int4 scale and zero point (the kernel also takes 32 and 64)
_LEVELS = 15  # int4 values are 0..15
_MID_POINT = (_LEVELS + 1) / 2  # the kernel subtracts it from each int4 value before scaling
_MIN_SCALE = 1e-6  # a group of equal weights still gets a scale the kernel can divide by


class HybridInt4Linear(HybridLinear):
    """A linear layer holding int4 weights and their dequantised copy (:class:`HybridLinear`).

    Args:
        linear: the layer to replace (its weight: ``(out_features, in_features)``, ``in_features`` a
            multiple of :data:`INT4_GROUP_SIZE`, on the CPU).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        weight = linear.weight.detach()
        packed, scale_and_zero, dense = quantized(weight)
        self.packed = torch.nn.Parameter(packed, requires_grad=False)
        self.scale_and_zero = torch.nn.Parameter(scale_and_zero, requires_grad=False)
        self.dense = torch.nn.Parameter(dense.to(weight.dtype), requires_grad=False)

    def low_bit(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).contiguous()
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, INT4_GROUP_SIZE, self.scale_and_zero)
        out = out[:, : self.out_features].reshape(*x.shape[:-1], self.out_features)
        if self.bias is not None:
            out += self.bias
        return out.to(x.dtype)


def fits(linear: torch.nn.Linear) -> bool:
    """Whether the int4 format takes ``linear``: its input width a multiple of :data:`INT4_GROUP_SIZE`."""
    return linear.in_features % INT4_GROUP_SIZE == 0


def make_int4_hybrid(model: torch.nn.Module, bounds: dict[tuple[int, int], int] | None = None
                     ) -> tuple[int, int, dict[tuple[int, int], int]]:
    """Every linear layer of ``model`` that :func:`fits` as a :class:`HybridInt4Linear`, calibrated
    (:func:`decoding.weights.hybrid_linear.make_hybrid`; the shapes in ``bounds`` take their bound from it)."""
    return make_hybrid(model, HybridInt4Linear, fits, bounds)


def quantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``weight`` (``(N, K)``, K a multiple of :data:`INT4_GROUP_SIZE`) in tinygemm's int4 format, as
    ``(packed int4 weights for the CPU kernel (uint8), scales and zero points (K / group, N, 2) in weight's
    dtype, the same int4 weights dequantised (N, K) in float32)``.

    Per group of :data:`INT4_GROUP_SIZE` input channels: ``scale = (max - min) / 15`` (at least
    ``_MIN_SCALE``), ``zero = min + 8 * scale``, ``q = clamp(round((w - (zero - 8 * scale)) / scale), 0, 15)``;
    the kernel computes with ``(q - 8) * scale + zero``, which the dense copy holds."""
    rows, width = weight.shape
    groups = weight.reshape(rows, width // INT4_GROUP_SIZE, INT4_GROUP_SIZE)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = ((high - low) / float(_LEVELS)).clamp(min=_MIN_SCALE)
    zero = (low + scale * _MID_POINT).to(weight.dtype)
    scale = scale.to(weight.dtype)
    offset = (zero - scale * _MID_POINT)[..., None]
    values = torch.clamp(torch.round((groups - offset) / scale[..., None]), 0, _LEVELS).to(torch.int32)
    dense = (values - _MID_POINT).to(torch.float32) * scale[..., None] + zero[..., None]
    scale_and_zero = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(values.reshape(rows, width), 1)
    return packed, scale_and_zero, dense.reshape(rows, width)
