"""``int8-hybrid`` weights: int8 for short passes, the same weights dequantised for long ones.

Each linear layer's weight is quantised to int8 with one scale per output row (symmetric, -127..127, the
scale rounded to the activation dtype), and a pass of few tokens runs PyTorch's weight-only int8 CPU
kernel ``aten._weight_int8pack_mm`` on it: half of bfloat16's bytes, converted to float in registers (no
whole-weight dequantisation per call). A longer pass runs the
dense product over the same weights dequantised to the activation dtype. How the layer chooses and why it
is one model: :mod:`decoding.weights.hybrid_linear`.

Against int4 (:mod:`decoding.weights.int4_hybrid`): the steps gain less, but the weights stay close to
the bfloat16 model: fed the bfloat16 model's greedy continuations of the ``bench decode`` prompts
(``speclsp bench agreement``), int8 weights pick the same top token about as often as bfloat16 itself
does in another pass shape, int4 weights less often (the figures: docs/decisions.md). The kernel is
PyTorch's. Memory: the bfloat16 model plus half of it.
"""

from __future__ import annotations

import torch

from decoding.weights.hybrid_linear import HybridLinear, make_hybrid

#: The kernel reads its input width in blocks: widths that are not multiples of 16 crashed the process in
#: bfloat16 (torch 2.13, widths 100 and 136); 32 keeps a margin. Qwen2.5's widths are multiples of 64.
INT8_WIDTH_MULTIPLE = 32
_ROWS_PER_CHUNK = 8192  # rows quantised at a time, so a 151,936-row output layer needs no float32 copy whole


class HybridInt8Linear(HybridLinear):
    """A linear layer holding int8 weights and their dequantised copy (:class:`HybridLinear`).

    Args:
        linear: the layer to replace (its weight: ``(out_features, in_features)``, ``in_features`` a
            multiple of :data:`INT8_WIDTH_MULTIPLE`, on the CPU, in float32, bfloat16 or float16).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        qweight, scales, dense = quantized(linear.weight.detach())
        self.qweight = torch.nn.Parameter(qweight, requires_grad=False)
        self.scales = torch.nn.Parameter(scales, requires_grad=False)
        self.dense = torch.nn.Parameter(dense, requires_grad=False)

    def low_bit(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        out = torch.ops.aten._weight_int8pack_mm(rows.contiguous(), self.qweight, self.scales)
        out = out.reshape(*x.shape[:-1], self.out_features)
        return out + self.bias if self.bias is not None else out


def quantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``weight`` (``(N, K)``) as ``(int8 weights (N, K), scales (N,) in weight's dtype, dequantised weights
    (N, K) in weight's dtype)``: symmetric per row, ``scale = max|row| / 127`` rounded to the dtype first,
    so that the kernel (which multiplies by the rounded scale) and the dense copy hold the same weights.
    The copy is ``int8 × scale`` computed in the dtype: the exact product of an int8 value and a scale of
    at most 8 significant bits, rounded once, as a float32 product would be."""
    qweight = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(weight.shape[0], dtype=weight.dtype)
    dense = torch.empty_like(weight)
    for start in range(0, weight.shape[0], _ROWS_PER_CHUNK):
        rows = slice(start, start + _ROWS_PER_CHUNK)
        scale = (weight[rows].abs().amax(dim=1).float() / 127).clamp(min=torch.finfo(weight.dtype).tiny)
        scale = scale.to(weight.dtype)
        values = weight[rows].to(torch.float32, copy=True).div_(scale.float()[:, None])  # never the weight itself
        qweight[rows] = values.round_().clamp_(-127, 127)
        scales[rows] = scale
        torch.mul(qweight[rows].to(weight.dtype), scale[:, None], out=dense[rows])
    return qweight, scales, dense


def fits(linear: torch.nn.Linear) -> bool:
    """Whether the int8 kernel takes ``linear``: input width a multiple of :data:`INT8_WIDTH_MULTIPLE`, a
    float weight."""
    return (linear.in_features % INT8_WIDTH_MULTIPLE == 0
            and linear.weight.dtype in (torch.float32, torch.bfloat16, torch.float16))


def make_int8_hybrid(model: torch.nn.Module, bounds: dict[tuple[int, int], int] | None = None
                     ) -> tuple[int, int, dict[tuple[int, int], int]]:
    """Every linear layer of ``model`` that :func:`fits` as a :class:`HybridInt8Linear`, calibrated
    (:func:`decoding.weights.hybrid_linear.make_hybrid`; the shapes in ``bounds`` take their bound from it)."""
    return make_hybrid(model, HybridInt8Linear, fits, bounds)
