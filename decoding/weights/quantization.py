"""Weight-only quantisation of a loaded model's linear layers with torchao (setting ``quantization``).

Decoding on a CPU is bound by the bytes of weights read per pass (the 1.5B target reads about 3.1 GB per
pass in bfloat16). ``int8`` and ``int4`` store the linear layers' weights in fewer bytes; activations,
embeddings, norms and the KV cache keep the model's dtype. Both go through torchao (``pip install
'speclsp[quantization]'``), not kernels of ours:

* ``int8``: torchao's ``Int8WeightOnlyConfig`` (symmetric, one scale per output row; ``Int8Tensor``).
  In eager mode torchao 0.18 turns the int8 weight back into the activation dtype at every call and
  then multiplies, so it saves memory but not time (measured step costs: docs/performance.md,
  "Quantization").
* ``int8-hybrid``: int8 weights (one scale per row) run by PyTorch's own int8 kernel for passes of few
  tokens, the same weights dequantised for long ones (prefill, long verify passes), the bound measured per
  weight shape at load: :mod:`decoding.weights.int8_hybrid` (:mod:`decoding.weights.hybrid_linear`). Needs no torchao;
  its weights keep the model's greedy choices nearly as often as the model keeps its own across pass
  shapes (``speclsp bench agreement``).
* ``int4-hybrid``: the same with int4 weights: :mod:`decoding.weights.int4_hybrid`.
* ``int4``: torchao's CPU int4 layout (``PrototypeInt4WeightOnlyConfig``, ``Int4OpaqueTensor``):
  asymmetric, groups of :data:`INT4_GROUP_SIZE` input channels, packed for PyTorch's CPU kernel
  ``aten._weight_int4pack_mm_for_cpu``. CPU only.

Exactness is unchanged: speculative decoding verifies against the quantised target, so its output
equals plain decoding of the same quantised model (up to the near-ties of different kernels for a pass
of one token and of k + 1 tokens, as in bfloat16; see docs/exactness.md).
"""

from __future__ import annotations

import logging

import torch

from decoding.errors import ModelLoadError
from decoding.weights.int4_hybrid import INT4_GROUP_SIZE, make_int4_hybrid  # the group size is defined there
from decoding.weights.int8_hybrid import INT8_WIDTH_MULTIPLE, make_int8_hybrid
from decoding.types import QUANTIZATIONS  # defined there (torch-free); imported here too

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'speclsp[quantization]' (torchao)"
_HYBRIDS = {"int8-hybrid": make_int8_hybrid, "int4-hybrid": make_int4_hybrid}


def _import_torchao() -> None:
    """Import the parts of torchao used here.

    Raises:
        ModelLoadError: torchao is not installed or does not import with this torch.
    """
    try:
        import torchao.quantization  # noqa: F401
        from torchao.prototype.quantization.int4 import inference_workflow  # noqa: F401
    except ImportError as exc:
        raise ModelLoadError(f"quantization needs torchao, which could not be imported ({exc}); "
                             f"install it with {INSTALL_HINT}") from exc


def quantization_config(quantization: str):
    """The torchao config of ``quantization`` (``int8`` or ``int4``).

    Raises:
        ModelLoadError: an unknown name, or torchao missing.
    """
    if quantization not in QUANTIZATIONS or quantization == "none":
        raise ModelLoadError(f"unknown quantization {quantization!r}; use one of {', '.join(QUANTIZATIONS)}")
    _import_torchao()
    if quantization == "int8":
        from torchao.quantization import Int8WeightOnlyConfig

        return Int8WeightOnlyConfig(set_inductor_config=False)  # no torch.compile here: leave inductor alone
    from torchao.prototype.quantization.int4.inference_workflow import (
        PrototypeInt4WeightOnlyConfig,
    )

    return PrototypeInt4WeightOnlyConfig(group_size=INT4_GROUP_SIZE, set_inductor_config=False)


def is_quantized(weight: torch.Tensor) -> bool:
    """Whether ``weight`` is a torchao quantised tensor (``Int8Tensor``, ``Int4OpaqueTensor``...)."""
    return type(weight).__module__.startswith("torchao.")


def quantized_linear_count(model: torch.nn.Module) -> tuple[int, int]:
    """(linear layers whose weight is quantised, all linear layers) of ``model``."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return sum(is_quantized(m.weight) for m in linears), len(linears)


def quantize_weights(model: torch.nn.Module, quantization: str, name: str,
                     bounds: dict[tuple[int, int], int] | None = None) -> None:
    """Quantise the weights of ``model``'s linear layers in place (``none``: leave them).

    Args:
        model: a causal LM in eval mode, already on its device and in its dtype.
        quantization: ``none``, ``int8``, ``int4``, ``int8-hybrid`` or ``int4-hybrid`` (see the module
            docstring); ``auto`` is settled before (:mod:`decoding.weights.weight_choice`).
        bounds: a hybrid's low-bit bounds per ``(out, in)`` weight shape, where already measured.
        name: the model's name, for messages.
    Raises:
        ModelLoadError: an unknown name, torchao missing (but for ``int8-hybrid``), a device other than
            the CPU, a dtype the kernel refuses, or no layer whose shape the format takes (int4: input
            width a multiple of :data:`INT4_GROUP_SIZE`; int8-hybrid: of :data:`INT8_WIDTH_MULTIPLE`).
    """
    if quantization == "none":
        return
    if quantization not in QUANTIZATIONS or quantization == "auto":
        raise ModelLoadError(f"unknown quantization {quantization!r}; use one of {', '.join(QUANTIZATIONS)}")
    hybrid = _HYBRIDS.get(quantization)  # layers of ours (decoding.weights.hybrid_linear), not a torchao config
    if quantization == "int4-hybrid":
        _import_torchao()
    config = None if hybrid else quantization_config(quantization)
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ModelLoadError(f"quantization {quantization!r} is offered on the CPU only, and model {name!r} is on "
                             f"{device}; use quantization 'none' there")
    try:
        if hybrid:
            quantized, linears, bounds = hybrid(model, bounds)
        else:
            from torchao.quantization import quantize_

            quantize_(model, config)
            quantized, linears = quantized_linear_count(model)
    except (AssertionError, RuntimeError, ValueError, NotImplementedError) as exc:
        raise ModelLoadError(f"could not quantize model {name!r} to {quantization} with torchao: "
                             f"{type(exc).__name__}: {exc}") from exc
    if quantized == 0:
        raise ModelLoadError(f"quantization {quantization!r} fits none of model {name!r}'s {linears} linear layers "
                             f"(int4 needs input widths that are multiples of {INT4_GROUP_SIZE}, int8-hybrid of "
                             f"{INT8_WIDTH_MULTIPLE})")
    log.info("quantized %d of %d linear layers of %s to %s", quantized, linears, name, quantization)
    if hybrid:
        log.info("%s runs its low-bit kernel up to %s tokens per pass by weight shape", quantization,
                 ", ".join(f"{o}x{i}: {m}" for (o, i), m in sorted(bounds.items())))
