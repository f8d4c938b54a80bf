"""``int8-fp16-hybrid``: a float32 model's linear layers as int8 weights for short passes and the same
weights as float16 values for long ones, on CPUs without bfloat16 instructions.

Where a CPU lacks bfloat16 instructions (Intel Ice Lake, most laptops) a model runs in float32, and
``fp16-weights`` (:mod:`decoding.weights.fp16_weights`) halves the bytes a pass reads. PyTorch's weight-only
int8 kernel (``aten._weight_int8pack_mm``) reads half of that again, but only with bfloat16 inputs is it
fast there: with float32 inputs it runs 4-5x slower than float32 itself, with bfloat16 inputs a pass of one
to four tokens 1.2-1.7x faster than the float16 weights (one layer per kernel under the Ice Lake kind's caps:
docs/bench/kinds-xeon-2026-12-07/README.md). Its cost grows with each token, so a long pass (prefill,
long verify passes) runs fbgemm's float16 product as ``fp16-weights`` does; which is faster at which size is
measured per weight shape at load (:mod:`decoding.weights.hybrid_linear`).

**One set of weights.** Each row is quantised to int8 with a scale rounded *up* to 4 significant bits and
to at least float16's smallest normal value, so that every ``int8 × scale`` (7 + 4 significant bits) is a
float16 value: the float16 panels fbgemm packs are the int8 weights' exact dequantisation, and the scales
are exact in bfloat16 for the int8 kernel. The scale's rounding makes the grid up to 1/8 coarser than
``max|row| / 127``. What the short passes change besides: their inputs are rounded to bfloat16 and their
outputs come back through bfloat16 (the kernel's output dtype), as every pass of a bfloat16 model does. So
speculative output equals plain decoding of the same hybrid model up to the rounding of passes of different
sizes (docs/exactness.md); the output layer stays float16 weights with float32 logits. How often the model keeps the float32 model's greedy token is measured by
``speclsp bench agreement --dtype float32 --quantizations int8-fp16-hybrid``. Memory: the float16 weights
plus half of them (the int8 copy).
"""

from __future__ import annotations

import torch

from decoding.weights import fp16_weights
from decoding.weights.hybrid_linear import HybridLinear, make_hybrid
from decoding.weights.int8_hybrid import INT8_WIDTH_MULTIPLE

SCALE_BITS = 4  # significant bits of a scale: 7 of an int8 value + 4 fit float16's 11
_MIN_SCALE = 2.0 ** -14  # float16's smallest normal value: every nonzero int8 × scale is a normal float16
_ROWS_PER_CHUNK = 8192


def exact_scales(row_max: torch.Tensor) -> torch.Tensor:
    """Per-row scales (float32, ``(N,)``) for rows whose largest magnitude is ``row_max`` (``(N,)`` float32):
    ``row_max / 127`` rounded up to :data:`SCALE_BITS` significant bits, and to at least :data:`_MIN_SCALE`."""
    scale = (row_max / 127).clamp(min=_MIN_SCALE)
    mantissa, exponent = torch.frexp(scale)  # scale = mantissa * 2**exponent, mantissa in [0.5, 1)
    steps = 2.0 ** SCALE_BITS
    return torch.ldexp(torch.ceil(mantissa * steps) / steps, exponent)


def quantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` (``(N, K)``, a :data:`decoding.weights.fp16_weights.PACKABLE` dtype) as ``(int8 weights
    (N, K), scales (N,) float32)``, symmetric per row with :func:`exact_scales`."""
    qweight = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(weight.shape[0], dtype=torch.float32)
    for start in range(0, weight.shape[0], _ROWS_PER_CHUNK):
        rows = slice(start, start + _ROWS_PER_CHUNK)
        values = weight[rows].to(torch.float32, copy=True)
        scale = exact_scales(values.abs().amax(dim=1))
        qweight[rows] = values.div_(scale[:, None]).round_().clamp_(-127, 127)
        scales[rows] = scale
    return qweight, scales


class HybridInt8Fp16Linear(HybridLinear):
    """A float32 model's linear layer as int8 weights (short passes, bfloat16 inputs) and the same weights
    packed as float16 for fbgemm (long passes); see the module docstring.

    Args:
        linear: the layer to replace: weight ``(out_features, in_features)`` on the CPU in a
            :data:`decoding.weights.fp16_weights.PACKABLE` dtype, ``in_features`` a multiple of
            :data:`decoding.weights.int8_hybrid.INT8_WIDTH_MULTIPLE`; its bias (if any) stays float32.
    Raises:
        ValueError: a weight the float16 panels would not hold exactly (never, by construction; checked).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__(linear)
        qweight, scales = quantized(linear.weight.detach())
        dequantised = qweight.to(torch.float32) * scales[:, None]  # exact: at most 11 significant bits
        if not torch.equal(dequantised.to(torch.float16).to(torch.float32), dequantised):
            raise ValueError("int8 × scale is not a float16 value")
        self.qweight = torch.nn.Parameter(qweight, requires_grad=False)
        self.scales = torch.nn.Parameter(scales.to(torch.bfloat16), requires_grad=False)  # exact: 4 bits
        self.bias = None if linear.bias is None else torch.nn.Parameter(
            linear.bias.detach().to(torch.float32), requires_grad=False)
        self.packed = torch.ops.quantized.linear_prepack_fp16(dequantised, None)

    @property
    def weight(self) -> torch.Tensor:
        """The weights as float32 ``(out_features, in_features)``, dequantised on each read (for code that
        inspects a layer's weight and for calibration; the passes never read it)."""
        return self.qweight.to(torch.float32) * self.scales.to(torch.float32)[:, None]

    @property
    def input_dtype(self) -> torch.dtype:
        """float32: the model runs in float32 (the short passes round to bfloat16 inside)."""
        return torch.float32

    def low_bit(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features) float32
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch.ops.aten._weight_int8pack_mm(rows.contiguous(), self.qweight, self.scales)
        out = out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return out + self.bias if self.bias is not None else out

    def dense_product(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features) float32
        out = fp16_weights.fp16_product(x, self.packed, self.out_features)
        return out + self.bias if self.bias is not None else out

    def long_pass_layer(self) -> torch.nn.Module:
        """The float16 weights alone, as ``fp16-weights`` holds them (the same packed panels and bias)."""
        return fp16_weights.Fp16WeightLinear.from_packed(self.packed, self.in_features, self.out_features, self.bias)


def fits(linear: torch.nn.Linear) -> bool:
    """Whether ``linear`` can be held so: input width a multiple of :data:`INT8_WIDTH_MULTIPLE`, a weight on
    the CPU in a packable dtype, and fbgemm's float16 product in this torch."""
    return linear.in_features % INT8_WIDTH_MULTIPLE == 0 and fp16_weights.fits(linear) and fp16_weights.available()


def make_int8_fp16_hybrid(model: torch.nn.Module, bounds: dict[tuple[int, int], int] | None = None
                          ) -> tuple[int, int, dict[tuple[int, int], int]]:
    """Every linear layer of ``model`` that :func:`fits` as a :class:`HybridInt8Fp16Linear`, calibrated
    (:func:`decoding.weights.hybrid_linear.make_hybrid`; the shapes in ``bounds`` take their bound from it),
    but the output layer: the logits stay float32 (through bfloat16, logits near 20 are 0.125 apart, and
    greedy decoding would meet ties). It and the embedding tables stay as they are (the caller packs them
    as ``fp16-weights`` does)."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return make_hybrid(model, HybridInt8Fp16Linear, lambda linear: linear is not output and fits(linear), bounds)
