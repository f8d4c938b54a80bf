"""Loading target and draft models and their tokenizer.

Model names are resolved by :mod:`decoding.weights.model_names` (packs, GGUF files, directories, hub ids). A
local directory is loaded with ``local_files_only=True`` (no network); only a hub id the user names
may download. ``trust_remote_code`` stays off unless the caller turns it on. Each loaded model's
capabilities (FIM, repository prompt, stop ids) are recorded here, once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from decoding.choices.auto import choose_quantization
from decoding.choices.float32_weights import int8_bounds
from decoding.weights.cpu_flags import cpu_flags
from decoding.weights.file_pages import release_file_pages
from decoding.weights.capabilities import ModelCapabilities, read_capabilities
from decoding.errors import ModelLoadError
from decoding.generate import end_of_sequence_ids
from decoding.weights.gguf_models import Stage
from decoding.weights.hub_errors import explain_hub_failure
from decoding.weights.mapped_embedding import map_input_embedding
from decoding.kv_cache import logits_width
from decoding.weights.model_names import model_location
from decoding.weights.fp16_weights import narrow_load_dtype, widen_to_float32
from decoding.weights.quantization import quantize_weights
from decoding.weights.tokenizer_loading import load_tokenizer

log = logging.getLogger(__name__)

@dataclass
class LoadedModel:
    """A causal LM in eval mode, its tokenizer and what it can do."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    capabilities: ModelCapabilities
    quantization: str = "none"  # how its linear layers hold their weights (``auto`` settled)

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits (may exceed ``len(tokenizer)`` when the embedding is padded)."""
        return logits_width(self.model)


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ModelLoadError(f"unknown device {device!r}: {exc}") from exc


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 matrix products in hardware (x86 ``avx512_bf16`` or
    ``amx_bf16``, :func:`decoding.weights.cpu_flags.cpu_flags`; ``False`` where they cannot be read).
    Without them bfloat16 is emulated and slower than float32."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``"auto"``: bfloat16 on CUDA and on CPUs with native bfloat16 (:func:`cpu_has_native_bf16`),
    float32 elsewhere; else ``float32``/``float16``/``bfloat16``.

    With native instructions bfloat16 prefills and verifies faster than float32 at about the same
    one-token step; without them it is emulated and slower (docs/decisions.md#dtype-auto). In bfloat16
    a pass over several tokens and a one-token step can round a logit differently, so greedy
    speculative and plain decoding can part at a near tie (``speclsp bench decode`` reports those); in
    float32 they agree.
    """
    if dtype == "auto":
        if device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16()):
            return torch.bfloat16
        return torch.float32
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in names:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(sorted(names))}")
    return names[dtype]


def load_model(name: str, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False,
               on_stage: Stage | None = None, quantization: str = "none", engine: str = "torch") -> LoadedModel:
    """Load a causal LM and its tokenizer for inference.

    Args:
        name: a model name (see :mod:`decoding.weights.model_names`; not ``auto``): a pack, ``"starter"``,
            ``"starter-draft"``, a ``.gguf`` file, a local model directory, or a hub id (downloads).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        dtype: ``"auto"`` (see :func:`resolve_dtype`) or an explicit float type.
        trust_remote_code: allow a hub repository's own modelling code to run. Off by default.
        on_stage: told about slow steps (the one-time conversion of a pack or GGUF file).
        quantization: ``"auto"`` (the weights measured fastest here among those that keep the model:
            :func:`decoding.choices.auto.choose_quantization`), ``"none"``, ``"int8-hybrid"`` or ``"int4-hybrid"``
            (CPU only; see :mod:`decoding.weights.quantization`).
        engine: ``"torch"``, or ``"llama.cpp"``: a pack or ``.gguf`` file run by llama.cpp's kernels on
            the GGUF weights as they are (:mod:`decoding.weights.llama_cpp_model`; CPU, no quantization option).
    Raises:
        ModelLoadError: missing directory, unknown hub id, no network, unsupported architecture, a pack
            that is not installed or does not match its pinned hash. A failed download says which
            model, why (the HTTP status or the network failure) and what to do
            (:func:`decoding.weights.hub_errors.explain_hub_failure`). A quantization that cannot run here
            (not on the CPU, no layer it fits; :func:`decoding.weights.quantization.quantize_weights`).
    """
    if engine == "llama.cpp":
        if quantization not in ("auto", "none") or device not in ("auto", "cpu"):
            raise ModelLoadError("engine 'llama.cpp' runs the GGUF file's own weights on the CPU: quantization "
                                 "must be none and the device auto or cpu")
        return _load_gguf_model(name, on_stage)
    if engine != "torch":
        raise ModelLoadError(f"unknown engine {engine!r}; use torch or llama.cpp")
    location, local_only = model_location(name, on_stage)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    if quantization in ("fp16-weights", "int8-fp16-hybrid") and torch_dtype != torch.float32:
        raise ModelLoadError(f"quantization {quantization!r} runs a float32 model, and dtype {dtype!r} gives "
                             f"{torch_dtype}; use dtype 'float32' or 'auto' (float32 where the CPU has no bfloat16)")
    try:
        tokenizer = load_tokenizer(location, local_only, trust_remote_code)
        load_dtype = _load_dtype(location, local_only, trust_remote_code, torch_dtype, torch_device, quantization)
        model = AutoModelForCausalLM.from_pretrained(location, local_files_only=local_only, dtype=load_dtype,
                                                     trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        hub_failure = None if local_only else explain_hub_failure(name, exc)
        raise ModelLoadError(hub_failure or f"could not load model {name!r} from {location}: {exc}") from exc
    layer_types = set(getattr(model.config, "layer_types", None) or ())
    unsupported = layer_types - {"full_attention", "sliding_attention"}
    if unsupported:
        raise ModelLoadError(f"model {name!r} has {', '.join(sorted(unsupported))} layers, whose state cannot be "
                             "rolled back after a rejected draft; speclsp needs attention-only models")
    model.to(torch_device).eval()
    quantization = _settle_weights(model, name, quantization, torch_dtype, location if local_only else None, on_stage)
    log.info("loaded %s from %s on %s as %s, quantization %s", name, location, torch_device, torch_dtype, quantization)
    eos_ids = end_of_sequence_ids(model, tokenizer)
    capabilities = read_capabilities(tokenizer, eos_ids, location if local_only else None)
    return LoadedModel(name=name, model=model, tokenizer=tokenizer, capabilities=capabilities,
                       quantization=quantization)


def _settle_weights(model, name: str, quantization: str, run_dtype: torch.dtype, directory: str | None,
                    on_stage: Stage | None) -> str:
    """Choose (``auto``) and apply the weights' format of a loaded ``model``, map its embedding table from
    the checkpoint in ``directory`` where it runs in float32 on the CPU, and widen a model loaded narrow that
    stays unpacked, and hand back the checkpoint's pages loading read
    (:func:`decoding.weights.file_pages.release_file_pages`); returns the quantization applied."""
    bounds = None
    if quantization == "auto":
        quantization, bounds, _ = choose_quantization(model, name, run_dtype)  # logs its choice
    elif quantization == "int8-fp16-hybrid" and model.device.type == "cpu":
        bounds = int8_bounds(model, name)  # cached: every load here runs the same kernels
    if quantization != "none" and on_stage:
        on_stage(f"quantizing {name} to {quantization}")
    if run_dtype == torch.float32 and model.device.type == "cpu" and directory and \
            map_input_embedding(model, directory):
        log.info("%s's embedding table is read from its checkpoint file in place", name)
    quantize_weights(model, quantization, name, bounds)
    if quantization == "none" and next(model.parameters()).dtype != run_dtype:  # loaded narrow, kept unpacked
        widen_to_float32(model)
    released = release_file_pages(directory)
    if released:
        log.info("%s: the checkpoint's pages read while loading handed back (%.1f GB mapped)", name, released / 1e9)
    return quantization


def _load_dtype(location: str, local_only: bool, trust_remote_code: bool, torch_dtype: torch.dtype,
                torch_device: torch.device, quantization: str) -> torch.dtype:
    """The dtype to load in: the checkpoint's stored one where the model may run as ``fp16-weights``
    (:func:`decoding.weights.fp16_weights.narrow_load_dtype`), else ``torch_dtype``."""
    if quantization not in ("auto", "fp16-weights", "int8-fp16-hybrid"):
        return torch_dtype
    config = AutoConfig.from_pretrained(location, local_files_only=local_only, trust_remote_code=trust_remote_code)
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(stored, str):
        stored = getattr(torch, stored, None)
    return narrow_load_dtype(stored if isinstance(stored, torch.dtype) else None, torch_dtype, torch_device)


def _load_gguf_model(name: str, on_stage: Stage | None = None) -> LoadedModel:
    """A model pack or ``.gguf`` file in llama.cpp (:class:`decoding.weights.llama_cpp_model.LlamaCppModel`), with
    the tokenizer read out of the file once (:func:`decoding.weights.gguf_files.gguf_tokenizer_dir`).

    Raises:
        ModelLoadError: not a GGUF model, llama-cpp-python missing, or the file or its tokenizer unreadable.
    """
    from decoding.weights.gguf_files import gguf_file, gguf_tokenizer_dir
    from decoding.weights.llama_cpp_model import LlamaCppModel

    gguf, sha256 = gguf_file(name, on_stage)
    tokenizer_dir = gguf_tokenizer_dir(gguf, sha256)
    tokenizer = load_tokenizer(str(tokenizer_dir), local_only=True)
    model = LlamaCppModel(gguf)
    log.info("loaded %s from %s into llama.cpp (%d threads)", name, gguf, model.threads)
    capabilities = read_capabilities(tokenizer, end_of_sequence_ids(model, tokenizer), str(tokenizer_dir))
    return LoadedModel(name=name, model=model, tokenizer=tokenizer, capabilities=capabilities)


_PROBE_TEXT = "def main(argv):\n    return {'ok': [1, 2.5, \"é😀\"]}  # probe\n"


def check_draft_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a draft whose tokenizer maps text to other ids than the target's (docs/cases.md D8).

    The tokenizers must have the same vocabulary (token -> id) and encode a probe text identically.
    The models' logit widths may differ (e.g. Qwen2.5-Coder-0.5B pads its embedding to 151936 rows
    and -7B to 152064, over one 151665-token tokenizer); draft logits are then padded or cut to the
    target's width, which keeps verification exact.

    Raises:
        ModelLoadError: naming both models and what differs.
    """
    target_vocab, draft_vocab = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    where = f"draft model {draft.name!r} and target model {target.name!r}"
    if len(target_vocab) != len(draft_vocab):
        raise ModelLoadError(f"{where} have different vocabulary sizes ({len(draft_vocab)} vs "
                             f"{len(target_vocab)} tokens); a draft must share the target's tokenizer")
    if target_vocab != draft_vocab:
        differing = sum(1 for token, i in target_vocab.items() if draft_vocab.get(token) != i)
        raise ModelLoadError(f"{where} map {differing} tokens to different ids; "
                             "a draft must share the target's tokenizer")
    target_ids = target.tokenizer.encode(_PROBE_TEXT, add_special_tokens=False)
    draft_ids = draft.tokenizer.encode(_PROBE_TEXT, add_special_tokens=False)
    if target_ids != draft_ids:
        raise ModelLoadError(f"{where} tokenize the same text differently; a draft must share the target's tokenizer")
    if draft.vocab_size < len(draft_vocab) or target.vocab_size < len(target_vocab):
        raise ModelLoadError(f"{where}: a model's output layer is narrower than its tokenizer's vocabulary")
