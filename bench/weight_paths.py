"""The weight paths ``speclsp bench step-cost`` compares: how a model's weights are stored and which kernels
run a pass over them.

A path is a way to load a model for our loop: torch with bfloat16 weights (the default where the CPU has
bfloat16 instructions), torch in float32 (where it has none: ``torch-f32``, its weights as they are or
packed as float16, ``fp16-weights``), torch with
quantised linear layers (the ``model.quantization`` setting's ``int8-hybrid`` and ``int4-hybrid``, and two
candidates not offered as a setting until they win, which need torchao installed by hand (``pip install
torchao``): ``int8_dynamic``, int8 activations and weights through ``torch._int_mm``, and ``da8w4``, int8
activations and int4 weights through torchao's ``da8w4_linear_cpu`` kernel), eager or under ``torch.compile``; or llama.cpp (``model.engine: llama.cpp``) on
a GGUF file: the pack's own Q4_K_M, or Q4_0 / Q8_0 written from the pack's weights by
:mod:`bench.gguf_requant` (kept under the cache root, written once).

Compiled paths compile every linear layer on its own (``torch.compile(dynamic=True)``, the token count
symbolic), not the whole model: the loop's transformers ``DynamicCache`` grows by concatenation every
pass, and the linear layers hold the weights, whose kernels are what the paths differ in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from decoding.errors import ModelLoadError


@dataclass(frozen=True)
class WeightPath:
    """One way to load a model (see the module docstring)."""

    name: str
    engine: str  # "torch" or "llama.cpp"
    quantization: str = "none"  # the setting's value, for the torch engine
    candidate: str | None = None  # a torchao config not offered as a setting ("int8_dynamic", "da8w4")
    compiled: bool = False
    gguf_type: str | None = None  # llama.cpp: None for the pack's own file, else a bench.gguf_requant type
    dtype: str = "bfloat16"  # the torch engine's activations (float32 where a CPU has no bfloat16 instructions)

    @property
    def weights(self) -> str:
        """The stored weight format, in words."""
        if self.engine == "llama.cpp":
            return (self.gguf_type or "q4_k_m").upper()
        weights = WEIGHTS[self.candidate or self.quantization]
        return weights.replace("bfloat16", "float32") if self.dtype == "float32" else weights


WEIGHTS = {"none": "bfloat16",
           "int4-hybrid": "int4 for short passes, the same weights dequantised to bfloat16 for long ones",
           "int8-hybrid": "int8 for short passes, the same weights dequantised to bfloat16 for long ones",
           "fp16-weights": "float16 weights, float32 activations (fbgemm)",
           "int8_dynamic": "int8 weights, int8 activations", "da8w4": "int4 weights, int8 activations"}


PATHS = {path.name: path for path in (
    WeightPath("torch-bf16", "torch"),
    WeightPath("torch-bf16-compiled", "torch", compiled=True),
    WeightPath("torch-f32", "torch", dtype="float32"),
    WeightPath("torch-f32-fp16-weights", "torch", "fp16-weights", dtype="float32"),
    WeightPath("torch-f32-int8-hybrid", "torch", "int8-hybrid", dtype="float32"),
    WeightPath("torch-int8-dynamic", "torch", candidate="int8_dynamic"),
    WeightPath("torch-int8-dynamic-compiled", "torch", candidate="int8_dynamic", compiled=True),
    WeightPath("torch-int4-hybrid", "torch", "int4-hybrid"),
    WeightPath("torch-int8-hybrid", "torch", "int8-hybrid"),
    WeightPath("torch-da8w4-compiled", "torch", candidate="da8w4", compiled=True),
    WeightPath("llama-q4_k_m", "llama.cpp"),
    WeightPath("llama-q4_0", "llama.cpp", gguf_type="q4_0"),
    WeightPath("llama-q8_0", "llama.cpp", gguf_type="q8_0"),
)}


def candidate_config(candidate: str):
    """The torchao config of a candidate path.

    Raises:
        ModelLoadError: torchao missing, or (``da8w4``) built without its CPU kernel (the PyPI wheels of
            torchao 0.18 carry CUDA extensions only).
    """
    try:
        from torchao.prototype.quantization.int4.inference_workflow import Int8DynamicActivationInt4WeightConfig
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig
    except ImportError as exc:
        raise ModelLoadError(f"path needs torchao ({exc})") from exc
    if candidate == "int8_dynamic":
        return Int8DynamicActivationInt8WeightConfig(set_inductor_config=False)
    if candidate == "da8w4":
        if "CPU" not in torch._C._dispatch_dump("torchao::da8w4_linear_cpu"):
            raise ModelLoadError("torchao's da8w4_linear_cpu kernel is not built in this torchao "
                                 f"({_torchao_version()}; its wheel carries no CPU extension)")
        return Int8DynamicActivationInt4WeightConfig(group_size=128, set_inductor_config=False)
    raise ModelLoadError(f"unknown candidate {candidate!r}")


def _torchao_version() -> str:
    try:
        import torchao

        return f"torchao {torchao.__version__}"
    except ImportError:
        return "no torchao"


def apply_candidate(model: torch.nn.Module, candidate: str) -> int:
    """Quantise ``model``'s linear layers in place with a candidate config; the number quantised.

    Raises:
        ModelLoadError: see :func:`candidate_config`; or no layer was quantised.
    """
    from torchao.quantization import quantize_

    quantize_(model, candidate_config(candidate))
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    quantized = sum(type(m.weight).__module__.startswith("torchao.") for m in linears)  # torchao's tensors
    if quantized == 0:
        raise ModelLoadError(f"{candidate} quantised none of {len(linears)} linear layers")
    return quantized


def compile_linears(model: torch.nn.Module) -> int:
    """Wrap every linear layer of ``model`` in ``torch.compile(dynamic=True)``; the number wrapped. Compiling
    happens at the first pass of each new kind of shape (time it there)."""
    # One graph per weight shape and per M = 1 or M > 1 (size 1 is specialised): more than dynamo's
    # default of 8 recompiles of nn.Linear.forward, after which it would run the rest eagerly.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 1024)
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.compile(dynamic=True)
            count += 1
    return count


def gguf_for(model: str, gguf_type: str, cache: Path) -> Path:
    """The ``gguf_type`` file of pack ``model`` under ``cache`` (written by :mod:`bench.gguf_requant` when
    missing; minutes for the 1.5B)."""
    from bench.gguf_requant import requantize

    out = cache / f"{model}-{gguf_type}.gguf"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".partial")
        requantize(model, gguf_type, partial)
        partial.replace(out)
    return out


def load(path: WeightPath, model: str, cache: Path):
    """``(LoadedModel, seconds to load and quantise)`` of pack ``model`` on ``path``.

    Raises:
        ModelLoadError: the path cannot run here (llama-cpp-python missing, or torchao for a candidate, a kernel not built).
    """
    from decoding.weights.loading import load_model

    started = time.perf_counter()
    if path.engine == "llama.cpp":
        name = model if path.gguf_type is None else str(gguf_for(model, path.gguf_type, cache))
        loaded = load_model(name, device="cpu", engine="llama.cpp")
    else:
        loaded = load_model(model, device="cpu", dtype=path.dtype, quantization=path.quantization)
        if path.candidate is not None:
            apply_candidate(loaded.model, path.candidate)
        if path.compiled:
            compile_linears(loaded.model)
    return loaded, time.perf_counter() - started
