"""The engine's value types, importable without torch or transformers.

Callers above the engine (the language server's settings, its remote backends, the benchmarks' option
parsing) build configurations and read results without loading a model. These types live here, and the
modules that use them with tensors (:mod:`decoding.generate`, :mod:`decoding.sampling`,
:mod:`decoding.engine`, :mod:`decoding.drafters.ngram`, :mod:`decoding.weights.quantization`,
:mod:`decoding.kv_cache`) import them back, so both import paths name the same objects.

This module imports only the standard library, :mod:`decoding.stats` and :mod:`decoding.weights.model_names`
(all torch-free; ``tests/test_torch_free_types.py`` checks it in a fresh interpreter).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from decoding.weights.model_names import AUTO
from decoding.stats import GenerationStats

#: The draft length cap per verify round unless a caller sets one. The adaptive policy picks k up to it
#: from measured acceptance and pass costs, so the cap only bounds how far a long copy may run in one
#: pass; a copy the n-gram lock follows runs past 16 tokens a pass, and the gain levels off above 32
#: (docs/decisions.md#max-draft-tokens).
DEFAULT_MAX_DRAFT_TOKENS = 32
DEFAULT_MAX_REGION_DRAFT_TOKENS = 256  # see GenerationConfig.max_region_draft_tokens
DEFAULT_PREFILL_CHUNK_TOKENS = 128  # see GenerationConfig.prefill_chunk_tokens and Engine.prefill
MIN_PARTIAL_CHARS = 4  # see GenerationConfig.answer_by
# A next-edit rewrite's prompt (about 1,000 tokens): a CPU computes pieces of 256 faster per token than
# pieces of 128, and a superseded rewrite stops within one (docs/decisions.md#prefill-chunk)
REWRITE_PREFILL_CHUNK_TOKENS = 256

QUANTIZATIONS = ("auto", "none", "fp16-weights", "int8-fp16-hybrid", "int8-hybrid", "int4-hybrid")  # EngineConfig.quantization; see decoding.weights.quantization
#: EngineConfig.engine: torch (transformers, in ``dtype``) or llama.cpp (the GGUF weights as they are;
#: decoding.weights.llama_cpp_model)
ENGINES = ("torch", "llama.cpp")


def common_prefix_length(a: Sequence, b: Sequence) -> int:
    """Length of the longest common prefix of two sliceable sequences (token lists, strings): a binary
    search over slice comparisons, which run in C, after one check of the whole shorter length."""
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class SamplingParams:
    """How to turn logits into a next-token distribution (applied by :func:`decoding.sampling.processed_probs`).

    ``temperature == 0`` means greedy decoding: the distribution is one-hot on the argmax.
    """

    temperature: float = 0.0  # 0: greedy; > 0: divide logits by it before softmax
    top_k: int = 0  # 0: off; otherwise keep the k most likely tokens
    top_p: float = 1.0  # 1.0: off; otherwise keep the smallest set whose mass reaches top_p

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 for greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 turns it off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1 turns it off), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class FinishReason(StrEnum):
    """Why a generation ended (equal to its string, as logs and JSON write it)."""

    STOP = "stop"  # a stop token or stop string ended the output
    LENGTH = "length"  # max_new_tokens reached
    CANCELLED = "cancelled"  # should_stop() turned true between rounds
    TIME = "time"  # the deadline passed, and the output ended at the next line end (whole lines)
    PARTIAL = "partial"  # answer_by passed: the output ended as it stood, before a verify round


FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED = FinishReason.STOP, FinishReason.LENGTH, FinishReason.CANCELLED


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate and how."""

    max_new_tokens: int = 64  # output tokens at most (a stop token counts)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_strings: tuple[str, ...] = ()  # the text is cut before the first occurrence of any of these
    stop_token_ids: frozenset[int] | None = None  # None: the tokenizer's and model's end-of-sequence ids
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS  # k at most per round
    #: k at most per round for the region drafter of a rewrite (:meth:`decoding.engine.Engine.rewrite`; other
    #: generations ignore it): long, so one pass can check the whole rest of a region the rewrite rejoined.
    max_region_draft_tokens: int = DEFAULT_MAX_REGION_DRAFT_TOKENS
    draft_min_confidence: float = 0.0  # a draft model stops drafting at a token it gives less than this
    seed: int | None = None  # random source for sampling, and timing-independent drafting; None: nondeterministic
    #: With ``should_stop``, the prompt is prefilled in pieces of this many tokens and ``should_stop`` is
    #: polled between them, so a superseded request stops within one piece; the pieces already fed stay
    #: cached for the next prompt that shares them. 0: one piece.
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS
    #: Token healing (:mod:`decoding.healing`): the output must begin with this text (the prompt's last
    #: token, backed off); the target's distribution is renormalised over the tokens that continue it
    #: until it is covered. ``Generation.text`` leaves it out; ``token_ids`` include the tokens that cover it.
    required_prefix: str = ""
    #: An answer in time: once ``time.perf_counter()`` passes this (seconds), the output ends at its next
    #: line break, which it keeps (finish reason ``time``). ``None``: no deadline. Local engine only.
    deadline: float | None = None
    #: An answer as it stands: once ``time.perf_counter()`` passes this (seconds), the output ends before the
    #: next verify round where its text holds at least :data:`MIN_PARTIAL_CHARS` non-space characters past
    #: the required prefix (finish reason ``partial``; else it goes on and asks again a round later).
    #: ``None``: none. Local engine only.
    answer_by: float | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if min(self.max_draft_tokens, self.max_region_draft_tokens) < 0:
            raise ValueError(f"max_draft_tokens and max_region_draft_tokens must be >= 0, got "
                             f"{self.max_draft_tokens} and {self.max_region_draft_tokens}")
        if self.prefill_chunk_tokens < 0:
            raise ValueError(f"prefill_chunk_tokens must be >= 0, got {self.prefill_chunk_tokens}")
        if not 0.0 <= self.draft_min_confidence <= 1.0:
            raise ValueError(f"draft_min_confidence must be in [0, 1], got {self.draft_min_confidence}")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop strings must be non-empty")


@dataclass
class Generation:
    """The output of one generation."""

    token_ids: list[int]  # committed new tokens, a final stop token included
    text: str  # decoded text without special tokens, cut before a stop string
    finish_reason: FinishReason
    stats: GenerationStats


class DrafterMode(StrEnum):
    """Where drafts come from (see :meth:`decoding.engine.Engine.drafter`).

    ``tree``, ``model`` and ``staged`` are the GPU-side techniques: they pay where a pass over many tokens
    costs about as much as one and the draft model's step is cheap against the target's. ``auto`` never
    picks the draft model on the CPU (:func:`decoding.choices.auto.draft_model_pays`) and never picks trees;
    name them to use them.
    """

    AUTO = "auto"  # n-gram lookup (and off the CPU, where it pays, staged or the draft model), by expected gain per round
    NGRAM = "ngram"
    TREE = "tree"  # several n-gram candidates verified in one pass (a GPU-side technique)
    MODEL = "model"  # the draft model drafts (a GPU-side technique)
    STAGED = "staged"  # n-gram drafts checked and continued by the draft model (decoding.drafters.staged; GPU-side)
    NONE = "none"  # plain decoding through the same loop: the reference


DRAFTER_MODES = tuple(DrafterMode)


@dataclass(frozen=True)
class NgramConfig:
    """Match lengths of the n-gram drafter (:class:`decoding.drafters.ngram.NgramDrafter`)."""

    # Shortest suffix that may be matched, in tokens. One token, as in transformers' prompt lookup:
    # where verifying k tokens costs about as much as one (a CPU in bf16, a GPU), even a one-token
    # match's draft pays; it gave more tokens per pass than a shortest match of 2 on edit and FIM
    # (docs/decisions.md#min-ngram).
    min_ngram: int = 1
    max_ngram: int = 6  # longest suffix tried first, in tokens

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")


@dataclass(frozen=True)
class EngineConfig:
    """Which models to load and how to draft (:meth:`decoding.engine.Engine.load`)."""

    model: str = AUTO  # see decoding.weights.model_names: auto (the real pair when installed), a pack, a path, a hub id
    draft_model: str = AUTO  # as model, or "none"; auto: the target's registered partner, else none
    device: str = "auto"  # auto: CUDA when available, else CPU
    dtype: str = "auto"  # auto: see decoding.weights.loading.resolve_dtype
    quantization: str = "auto"  # auto (decoding.choices.auto), none, int8-hybrid or int4-hybrid (CPU; decoding.weights.quantization)
    engine: str = "torch"  # what runs the passes: torch, or llama.cpp on the GGUF weights (ENGINES)
    trust_remote_code: bool = False  # run a hub repository's own code: only if the user says so
    ngram: NgramConfig = field(default_factory=NgramConfig)
