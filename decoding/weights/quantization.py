"""Low-bit weights for a loaded model's linear layers (setting ``quantization``), on the CPU.

Decoding on a CPU is bound by the bytes of weights read per pass. Both paths store the linear layers'
weights in fewer bytes and run PyTorch's own low-bit kernels for passes of few tokens, the same weights
dequantised for long ones (prefill, long verify passes), the bound measured per weight shape at load
(:mod:`decoding.weights.hybrid_linear`); activations, embeddings, norms and the KV cache keep the
model's dtype:

* ``int8-hybrid``: int8 weights, one scale per row (:mod:`decoding.weights.int8_hybrid`). Its weights keep
  the model's greedy choices nearly as often as the model keeps its own across pass shapes (``speclsp
  bench agreement``), which is why ``quantization: auto`` may pick it (:mod:`decoding.choices.weights`).
* ``fp16-weights``: a float32 model's weights in float16, computed in float32 at every pass size
  (:mod:`decoding.weights.fp16_weights`): no dense copy; for CPUs without bfloat16 instructions.
* ``int8-fp16-hybrid``: a float32 model's weights as int8 for short passes (bfloat16 inputs) and the same
  weights as float16 values for long ones (:mod:`decoding.weights.int8_fp16_hybrid`); for CPUs without
  bfloat16 instructions, where the int8 kernel is fast only with bfloat16 inputs.
* ``int4-hybrid``: int4 weights in groups (:mod:`decoding.weights.int4_hybrid`): a quality trade, another
  model than the bfloat16 one; ``auto`` never picks it.

Exactness is unchanged: speculative decoding verifies against the quantised target, so its output
equals plain decoding of the same quantised model (up to the near-ties of different kernels for a pass
of one token and of k + 1 tokens, as in bfloat16; see docs/exactness.md).
"""

from __future__ import annotations

import ctypes
import logging

import torch

from decoding.errors import ModelLoadError
from decoding.types import QUANTIZATIONS
from decoding.weights.fp16_weights import PACKABLE, Fp16WeightLinear, available, make_fp16_weights
from decoding.weights.hybrid_linear import HybridLinear
from decoding.weights.int4_hybrid import INT4_GROUP_SIZE, make_int4_hybrid
from decoding.weights.int8_fp16_hybrid import make_int8_fp16_hybrid
from decoding.weights.int8_hybrid import INT8_WIDTH_MULTIPLE, make_int8_hybrid

log = logging.getLogger(__name__)

_HYBRIDS = {"int8-hybrid": make_int8_hybrid, "int4-hybrid": make_int4_hybrid}


def quantized_linear_count(model: torch.nn.Module) -> tuple[int, int]:
    """(linear layers holding low-bit or float16 weights, all linear layers, those included) of ``model``."""
    hybrids = sum(isinstance(m, (HybridLinear, Fp16WeightLinear)) for m in model.modules())
    dense = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    return hybrids, hybrids + dense


def quantize_weights(model: torch.nn.Module, quantization: str, name: str,
                     bounds: dict[tuple[int, int], int] | None = None) -> None:
    """Quantise the weights of ``model``'s linear layers in place (``none``: leave them).

    Args:
        model: a causal LM in eval mode, already on its device and in its dtype.
        quantization: ``none``, ``fp16-weights``, ``int8-hybrid`` or ``int4-hybrid`` (see the module
            docstring); ``auto`` is settled before (:func:`decoding.choices.auto.choose_quantization`).
        bounds: the low-bit bounds per ``(out, in)`` weight shape, where already measured.
        name: the model's name, for messages.
    Raises:
        ModelLoadError: an unknown name, a device other than the CPU, a dtype the kernel refuses, or no
            layer whose shape the format takes (int4-hybrid: input width a multiple of
            :data:`INT4_GROUP_SIZE`; int8-hybrid: of :data:`INT8_WIDTH_MULTIPLE`); fp16-weights on a model
            that is not float32 or a torch without fbgemm.
    """
    if quantization == "none":
        return
    if quantization == "fp16-weights":
        _to_fp16_weights(model, name)
        return
    if quantization == "int8-fp16-hybrid":
        _to_int8_fp16_hybrid(model, name, bounds)
        return
    hybrid = _HYBRIDS.get(quantization)
    if hybrid is None:
        raise ModelLoadError(f"unknown quantization {quantization!r}; use one of {', '.join(QUANTIZATIONS)}")
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ModelLoadError(f"quantization {quantization!r} is offered on the CPU only, and model {name!r} is on "
                             f"{device}; use quantization 'none' there")
    try:
        quantized, linears, bounds = hybrid(model, bounds)
    except (AssertionError, RuntimeError, ValueError, NotImplementedError) as exc:
        raise ModelLoadError(f"could not quantize model {name!r} to {quantization}: "
                             f"{type(exc).__name__}: {exc}") from exc
    if quantized == 0:
        raise ModelLoadError(f"quantization {quantization!r} fits none of model {name!r}'s {linears} linear layers "
                             f"(int4-hybrid needs input widths that are multiples of {INT4_GROUP_SIZE}, int8-hybrid "
                             f"of {INT8_WIDTH_MULTIPLE})")
    log.info("quantized %d of %d linear layers of %s to %s", quantized, linears, name, quantization)
    log.info("%s runs its low-bit kernel up to %s tokens per pass by weight shape", quantization,
             ", ".join(f"{o}x{i}: {m}" for (o, i), m in sorted(bounds.items())))


def _to_fp16_weights(model: torch.nn.Module, name: str) -> None:
    """``fp16-weights`` for ``model`` (float32 on the CPU, or loaded narrow to run in float32: the result is a
    float32 model), in place.

    Raises:
        ModelLoadError: no fbgemm in this torch, a model not in float32 on the CPU, or a weight float16
            cannot hold.
    """
    _check_float32_cpu(model, name, "fp16-weights")
    try:
        replaced, linears = make_fp16_weights(model)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"could not pack model {name!r}'s weights as float16: {exc}") from exc
    log.info("packed %d of %d linear layers of %s as float16 weights (fbgemm)", replaced, linears, name)
    return_freed_memory()


def _to_int8_fp16_hybrid(model: torch.nn.Module, name: str, bounds: dict[tuple[int, int], int] | None) -> None:
    """``int8-fp16-hybrid`` for ``model`` (float32 on the CPU, or loaded narrow to run in float32), in place:
    its linear layers that fit as :class:`decoding.weights.int8_fp16_hybrid.HybridInt8Fp16Linear`, the rest
    as ``fp16-weights`` does (embedding tables in float16, other tensors widened to float32).

    Raises:
        ModelLoadError: as :func:`_to_fp16_weights`, or no layer whose input width the int8 kernel takes.
    """
    _check_float32_cpu(model, name, "int8-fp16-hybrid")
    try:
        quantized, linears, bounds = make_int8_fp16_hybrid(model, bounds)
        make_fp16_weights(model)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"could not quantize model {name!r} to int8-fp16-hybrid: {exc}") from exc
    if quantized == 0:
        raise ModelLoadError(f"int8-fp16-hybrid fits none of model {name!r}'s {linears} linear layers (input "
                             f"widths must be multiples of {INT8_WIDTH_MULTIPLE})")
    log.info("quantized %d of %d linear layers of %s to int8-fp16-hybrid", quantized, linears, name)
    log.info("int8-fp16-hybrid runs its int8 kernel up to %s tokens per pass by weight shape",
             ", ".join(f"{o}x{i}: {m}" for (o, i), m in sorted(bounds.items())))
    return_freed_memory()


def _check_float32_cpu(model: torch.nn.Module, name: str, quantization: str) -> None:
    """Raise :class:`ModelLoadError` unless fbgemm's float16 product is here and ``model`` is on the CPU in a
    dtype packed from (float32, or loaded narrow to run in float32)."""
    parameter = next(model.parameters())
    if not available():
        raise ModelLoadError(f"quantization {quantization!r} needs fbgemm's float16 product, which this torch build "
                             "lacks; use quantization 'none'")
    if parameter.device.type != "cpu" or parameter.dtype not in PACKABLE:
        raise ModelLoadError(f"quantization {quantization!r} is for float32 models on the CPU (loaded in float32, or "
                             f"narrow and widened), and model {name!r} is {parameter.dtype} on {parameter.device}; use "
                             "dtype 'float32' or quantization 'none'")


def return_freed_memory() -> None:
    """Ask glibc to hand the heap's free pages back to the system (``malloc_trim``): the float32 weights
    freed by packing otherwise stay in the process's resident memory. Nothing where there is no glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
