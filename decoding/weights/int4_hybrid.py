"""``int4-hybrid`` weights: int4 for short passes, the same weights dequantised for long ones.

PyTorch's int4 CPU kernel (``aten._weight_int4pack_mm_for_cpu``, through torchao's ``Int4OpaqueTensor``)
reads a quarter of bfloat16's bytes, so a one-token step of the 0.5B runs about twice as fast, but its
cost grows with every token, and a 1024-token prefill piece takes 4.5x the bfloat16 matrix product's time
(``speclsp bench step-cost``, docs/performance.md). How the hybrid layer chooses between the two, and why
it is one model: :mod:`decoding.weights.hybrid_linear`. Memory: the bfloat16 model plus about a third more. int4
weights are another model than the bfloat16 one (a typist took fewer of their completions); for weights
as close to bfloat16 as its own rounding, see :mod:`decoding.weights.int8_hybrid`.
"""

from __future__ import annotations

import torch

from decoding.weights.hybrid_linear import HybridLinear, make_hybrid

INT4_GROUP_SIZE = 128  # input channels per int4 scale and zero point (torchao's default; 32 and 64 also work)


class HybridInt4Linear(HybridLinear):
    """A linear layer holding int4 weights and their dequantised copy (:class:`HybridLinear`).

    Args:
        linear: the layer to replace (its weight: ``(out_features, in_features)``, ``in_features`` a
            multiple of :data:`INT4_GROUP_SIZE`, on the CPU).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        weight = linear.weight.detach()
        packed, dense = quantized(weight)
        self.packed = torch.nn.Parameter(packed, requires_grad=False)
        self.dense = torch.nn.Parameter(dense.to(weight.dtype), requires_grad=False)

    def low_bit(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.packed, self.bias)


def fits(linear: torch.nn.Linear) -> bool:
    """Whether the int4 format takes ``linear``: its input width a multiple of :data:`INT4_GROUP_SIZE`."""
    return linear.in_features % INT4_GROUP_SIZE == 0


def make_int4_hybrid(model: torch.nn.Module, bounds: dict[tuple[int, int], int] | None = None
                     ) -> tuple[int, int, dict[tuple[int, int], int]]:
    """Every linear layer of ``model`` that :func:`fits` as a :class:`HybridInt4Linear`, calibrated
    (:func:`decoding.weights.hybrid_linear.make_hybrid`; the shapes in ``bounds`` take their bound from it)."""
    return make_hybrid(model, HybridInt4Linear, fits, bounds)


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
