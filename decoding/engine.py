"""The engine's front door: a loaded target (and draft), drafters by mode, and generation.

Callers above the engine (the CLI, the language server) speak token ids and text; tensors stay here.
State kept between calls, because completions for one document arrive keystroke after keystroke:

* the target's and the draft model's KV caches, one pair per cache key (a document) for the
  ``PROMPT_CACHES`` most recently used keys: a prompt reuses the longest common token prefix with the
  previous prompt of the same document, also after the user worked in another file meanwhile. Each key
  may also hold a spare pair, prefilled ahead with a prompt the document is likely to need next
  (:meth:`Engine.prefill` with ``spare``); a prompt that shares more with the spare than with the main
  pair swaps them;
* the adaptive policy's acceptance and cost estimates;
* one n-gram store of the extra token sources (other buffers, parts of the document, repository
  files), updated per source when the caller's version of a source changes.

:meth:`Engine.generate` continues a prompt; :meth:`Engine.rewrite` rewrites a region (a next-edit
suggestion), drafting first from the region's own tokens (:mod:`decoding.drafters.region`);
:meth:`Engine.prefill` puts a prompt into a cache key's KV caches ahead of either. The configuration
and result types live in :mod:`decoding.types` (torch-free) and are importable from here too.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import replace

from decoding.choices.auto import draft_model_pays
from decoding.choices.pass_costs import pass_costs
from decoding.draft_length import DraftLengthPolicy
from decoding.drafters.base import Drafter
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.drafters.ngram_store import NgramStore
from decoding.drafters.region import REGION_SOURCE, RegionDrafter
from decoding.drafters.staged import StagedDrafter
from decoding.drafters.substitutions import Substitutions
from decoding.drafters.switching import SwitchingDrafter
from decoding.generate import SpeculativeGenerator
from decoding.kv_cache import KVCacheState, cache_state
from decoding.weights.hybrid_linear import keep_long_pass_weights
from decoding.weights.loading import LoadedModel, check_draft_compatible, load_model
from decoding.weights.quantization import return_freed_memory
from decoding.weights.model_names import NO_DRAFT, resolve_pair

from decoding.types import (
    DEFAULT_PREFILL_CHUNK_TOKENS,
    DRAFTER_MODES,
    DrafterMode,
    EngineConfig,
    Generation,
    GenerationConfig,
)

log = logging.getLogger(__name__)

TREE_CANDIDATES = 4  # distinct n-gram continuations verified together in "tree" mode
PROMPT_CACHES = 4  # documents whose KV caches are kept between requests
#: The region drafter's acceptance before any evidence: a rewrite copies most of its region (Cursor
#: reports about 13x over plain decoding on its apply model), so its first drafts are already long.
REGION_PRIOR_ALPHA = 0.9
#: Modes that need a loaded draft model (without one, ``auto`` drafts from n-grams alone).
NEEDS_DRAFT_MODEL = frozenset({DrafterMode.MODEL, DrafterMode.STAGED})


class Engine:
    """A target model, an optional draft model and the state kept between generations."""

    def __init__(self, config: EngineConfig, target: LoadedModel, draft: LoadedModel | None,
                 notice: str | None = None):
        self.config = config
        self.notice = notice  # for the user: e.g. the real models are missing and the starter pair runs
        self.target = target
        self.draft = draft
        self.tokenizer = target.tokenizer
        self.generator = SpeculativeGenerator(target.model, target.tokenizer)
        self.model_drafter = ModelDrafter(draft.model, target.vocab_size) if draft is not None else None
        self.policy = DraftLengthPolicy()  # each generation caps k with GenerationConfig.max_draft_tokens
        #: Rewrites keep their own estimates: their sources hit far more often than in completions. Its
        #: max_k is only a bound: GenerationConfig.max_region_draft_tokens caps each rewrite.
        self.rewrite_policy = DraftLengthPolicy(max_k=256, priors={REGION_SOURCE: REGION_PRIOR_ALPHA})
        self._caches: OrderedDict[object, tuple[KVCacheState, KVCacheState | None]] = OrderedDict()
        self._spares: dict[object, tuple[KVCacheState, KVCacheState | None]] = {}  # per key of _caches
        self.sources = NgramStore(config.ngram)  # extra draft sources, kept between generations
        #: Ids that end a completion (see decoding.weights.capabilities; they include the end-of-sequence ids):
        #: a special token never belongs in inserted code.
        self.completion_stop_ids = target.capabilities.stop_ids
        self._thread = threading.get_ident()  # the only thread that may use the engine (see claim_thread)
        #: Whether ``auto`` drafts with the draft model (:func:`decoding.choices.auto.draft_model_pays`; set by
        #: :meth:`load`), and why.
        self.auto_uses_draft_model = draft is not None
        #: False for :meth:`draft_as_target`'s engine: a ``model`` or ``staged`` drafter asked of the pair
        #: drafts from n-grams here instead of failing.
        self.drafts_for_a_pair = True
        self.auto_reason = "no draft model: auto drafts with n-grams only" if draft is None else ""

    @classmethod
    def load(cls, config: EngineConfig, on_stage: Callable[[str], None] | None = None) -> Engine:
        """Load the target and draft models named in ``config`` (``auto`` names settled by
        :func:`decoding.weights.model_names.resolve_pair`; the engine's ``notice`` says when that fell back).

        Args:
            on_stage: called with a short description before each loading step (for progress).
        Raises:
            decoding.weights.loading.ModelLoadError: a model is missing, the draft does not fit the target, or
                ``config.quantization`` cannot run here (see :mod:`decoding.weights.quantization`).
        """
        pair = resolve_pair(config.model, config.draft_model)
        if on_stage:
            on_stage(f"loading target model {pair.target}")
        target = load_model(pair.target, config.device, config.dtype, config.trust_remote_code, on_stage,
                            config.quantization, config.engine)
        draft = None
        if pair.draft != NO_DRAFT:
            if on_stage:
                on_stage(f"loading draft model {pair.draft}")
            draft = load_model(pair.draft, str(target.model.device), config.dtype, config.trust_remote_code, on_stage,
                               config.quantization, config.engine)
            check_draft_compatible(target, draft)
        engine = cls(config, target, draft, pair.notice)
        engine.generator.verify_cost.seed(pass_costs(target))
        if draft is not None:
            engine.auto_uses_draft_model, engine.auto_reason = draft_model_pays(target, draft)  # logs its choice
        return engine

    def draft_as_target(self, notice: str | None = None) -> Engine:
        """An engine whose target is this engine's draft model and which has no draft model: the same
        weights in memory, its own KV caches, n-gram store and draft-length estimates (``auto``, and
        ``model`` or ``staged`` asked of the pair, draft from n-grams). For inline completions where the target is too slow
        (:func:`decoding.choices.auto.draft_model_completes`).

        Raises:
            ValueError: this engine has no draft model.
        """
        if self.draft is None:
            raise ValueError("no draft model is loaded: there is no smaller model to write completions")
        config = replace(self.config, model=self.draft.name, draft_model=NO_DRAFT)
        engine = Engine(config, self.draft, None, notice if notice is not None else self.notice)
        engine._thread = self._thread
        engine.drafts_for_a_pair = False
        engine.generator.verify_cost.seed(pass_costs(self.draft))
        return engine

    def keep_long_pass_weights(self) -> int:
        """Run the target on its hybrid layers' long-pass weights alone (a bfloat16 copy, float16 panels) and
        free their low-bit weights (:func:`decoding.weights.hybrid_linear.keep_long_pass_weights`): for a target that writes next edits only,
        whose passes are long (a prompt's prefill, region drafts of tens of tokens) and so already ran those
        weights, while its low-bit weights held memory (the 1.5B's int8: 1.6 GB). Its pass costs are measured
        again (or read from the cache of measured figures). Returns the bytes freed (0: no hybrid layer)."""
        self._check_thread()
        freed = keep_long_pass_weights(self.target.model)
        if freed:
            return_freed_memory()
            kept = "fp16-weights" if self.target.quantization == "int8-fp16-hybrid" else "none"
            self.target = replace(self.target, quantization=kept)
            self.generator.verify_cost.seed(pass_costs(self.target))
        return freed

    def claim_thread(self) -> None:
        """Make the calling thread the only one allowed to use this engine (the server's model thread
        calls this once it holds the engine; by default the thread that built it)."""
        self._thread = threading.get_ident()

    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread:
            raise RuntimeError(f"the engine is used from thread {threading.current_thread().name!r}; only the "
                               "thread that owns it (the model thread) may use it: submit the work there")

    def sync_sources(self, wanted: dict[Hashable, tuple[object, str | Callable[[], list[int]]]],
                     retain: set[Hashable] = frozenset(), drop: set[Hashable] = frozenset(),
                     searched: set[Hashable] = frozenset()) -> None:
        """Make the n-gram store hold ``wanted`` (``{name: (version, content)}``, content being text or a
        function returning its token ids); a source is tokenised and indexed only when new or at a new
        version. Sources not named are dropped, except those in ``retain`` (files whose changes arrive
        through :meth:`forget_source`), which stay within a token budget unless named in ``drop``; those
        in ``searched`` are searched instead of indexed. See :meth:`NgramStore.sync`.

        Raises:
            RuntimeError: called from a thread that does not own the engine (see :meth:`claim_thread`).
        """
        self._check_thread()

        def encode(content) -> list[int]:
            return content() if callable(content) else self.tokenizer.encode(content, add_special_tokens=False,
                                                                              verbose=False)

        self.sources.sync(wanted, encode, retain, drop, searched)

    def forget_source(self, name: Hashable) -> None:
        """Drop source ``name`` (e.g. its buffer was closed): it never proposes its old text again.

        Raises:
            RuntimeError: as :meth:`sync_sources`.
        """
        self._check_thread()
        self.sources.remove(name)

    def forget_cache(self, key: Hashable) -> None:
        """Drop the KV caches kept under the cache key ``key`` (see :meth:`generate`).

        Raises:
            RuntimeError: as :meth:`sync_sources`.
        """
        self._check_thread()
        self._caches.pop(key, None)
        self._spares.pop(key, None)

    def drafter(self, mode: str, sources: NgramStore | dict[str, list[int]] | None = None) -> Drafter | None:
        """The drafter for ``mode``: ``auto`` (per round the n-gram lookup, the staged drafter or the draft
        model, by expected gain), ``ngram``, ``tree`` (n-gram candidate trees), ``model``, ``staged`` (the
        lookup checked and continued by the draft model) or ``none``. N-gram drafts come from the committed tokens and
        ``sources`` (default: the engine's store, see :meth:`sync_sources`).

        Raises:
            ValueError: an unknown mode, or ``model``/``staged`` without a draft model loaded.
        """
        drafters = self._drafters(mode, sources)
        return SwitchingDrafter(drafters, self.policy) if drafters else None

    def _drafters(self, mode: str, sources: NgramStore | dict[str, list[int]] | None) -> list[Drafter]:
        """The sub-drafters of ``mode``, cheapest first (none for ``none``); errors as :meth:`drafter`."""
        try:
            kind = DrafterMode(mode)
        except ValueError:
            raise ValueError(f"unknown drafter {mode!r}; use one of {', '.join(DRAFTER_MODES)}") from None
        model = self.model_drafter
        if model is None and kind in NEEDS_DRAFT_MODEL:
            if not self.drafts_for_a_pair:
                kind = DrafterMode.NGRAM  # the draft model is this engine's target (draft_as_target)
            else:
                raise ValueError(f"drafter {kind.value!r} needs a draft model; none is loaded (draft model 'none')")

        def lookup(max_candidates: int = 1) -> NgramDrafter:
            return NgramDrafter(self.config.ngram, self.sources if sources is None else sources, max_candidates)

        match kind:
            case DrafterMode.NONE:
                return []
            case DrafterMode.NGRAM:
                return [lookup()]
            case DrafterMode.TREE:
                if self.config.engine == "llama.cpp":
                    raise ValueError("drafter 'tree' needs per-position attention masks, which the llama.cpp "
                                     "engine does not take; use ngram, auto, model or staged")
                return [lookup(TREE_CANDIDATES)]
            case DrafterMode.MODEL:
                return [model]
            case DrafterMode.STAGED:
                return [StagedDrafter(lookup(), model)]
            case DrafterMode.AUTO:
                if model is None or not self.auto_uses_draft_model:
                    return [lookup()]
                ngram = lookup()  # one lookup, shared by the staged drafter
                return [ngram, StagedDrafter(ngram, model), model]
        raise AssertionError(f"drafter mode {kind.value!r} has no case")

    def rewrite_drafter(self, mode: str, prompt_len: int, draft_ids: list[int], config: GenerationConfig,
                        sources: NgramStore | dict[str, list[int]] | None = None) -> Drafter | None:
        """The drafter of :meth:`rewrite`: the region (``draft_ids`` after a prompt of ``prompt_len``
        tokens) first, then ``mode``'s sub-drafters, sized by :attr:`rewrite_policy`; the region drafts
        up to ``config.max_region_draft_tokens`` per round, the others up to ``config.max_draft_tokens``.
        ``None`` for ``none`` (plain decoding, the reference).

        Raises:
            ValueError: as :meth:`drafter`.
        """
        others = self._drafters(mode, sources)
        if mode == "none":
            return None
        region = RegionDrafter(draft_ids, prompt_len, substitutions=Substitutions())
        caps = {d.name: config.max_draft_tokens for d in others} | {region.name: config.max_region_draft_tokens}
        return SwitchingDrafter([region, *others], self.rewrite_policy, caps=caps, idle_passed_over=True)

    def reset_caches(self) -> None:
        """Forget the cached prompts of the target and the draft model (the next prompt is prefilled cold)."""
        self._check_thread()
        self._caches.clear()
        self._spares.clear()
        self.generator.state.rollback(0)
        if self.model_drafter is not None:
            self.model_drafter.state.rollback(0)

    def _new_states(self) -> tuple[KVCacheState, KVCacheState | None]:
        return (cache_state(self.target.model),
                cache_state(self.model_drafter.model) if self.model_drafter is not None else None)

    def _use_cache(self, key: object, prompt_ids: list[int] | None = None, spare: bool = False) -> None:
        """Point the generator and the draft model at the KV caches of ``key`` (least recently used
        keys beyond ``PROMPT_CACHES`` are dropped, with their spares): its spare pair with ``spare``;
        else the main pair, after swapping in the spare when it shares more of ``prompt_ids``."""
        states = self._caches.pop(key, None)
        if states is None:
            states = self._new_states()
        held = self._spares.get(key)
        if spare:
            if held is None:
                held = self._spares[key] = self._new_states()
        elif held is not None and prompt_ids is not None and \
                held[0].common_prefix(prompt_ids) > states[0].common_prefix(prompt_ids):
            states, self._spares[key] = held, states
        self._caches[key] = states
        while len(self._caches) > PROMPT_CACHES:
            self._spares.pop(self._caches.popitem(last=False)[0], None)
        if spare:
            states = held
        self.generator.state = states[0]
        if self.model_drafter is not None:
            self.model_drafter.state = states[1]

    def cached_prefix(self, prompt_ids: list[int], cache_key: object) -> int:
        """Tokens of ``prompt_ids`` the target's caches of ``cache_key`` (main or spare) already hold (moves
        nothing)."""
        pairs = (self._caches.get(cache_key), self._spares.get(cache_key))
        return max((pair[0].common_prefix(prompt_ids) for pair in pairs if pair is not None), default=0)

    def prefill(
        self,
        prompt_ids: list[int],
        cache_key: object = None,
        should_stop: Callable[[], bool] | None = None,
        chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
        spare: bool = False,
        preempt: Callable[[], bool] | None = None,
    ) -> int:
        """Put ``prompt_ids`` into the KV caches of ``cache_key`` (the target's, then the draft model's
        if one is loaded) ahead of a :meth:`generate` or :meth:`rewrite` of a prompt that starts with it.

        Each cache reuses its longest common prefix with ``prompt_ids`` and is fed the rest but the last
        token (:meth:`decoding.kv_cache.KVCacheState.prefill`; the cache holds the committed tokens
        minus the last, so the generation's first pass feeds that one): a :meth:`generate` of this very
        prompt then reports ``stats.prefill_reused == len(prompt_ids) - 1``.

        Args:
            prompt_ids: the prompt's token ids (at least one).
            cache_key: as :meth:`generate`.
            should_stop: polled before any work and between pieces; when it returns True the prefill
                ends, and the pieces fed stay cached. ``None``: each cache is fed in one piece.
            chunk_tokens: tokens per piece with ``should_stop`` (0: one piece).
            spare: into the spare caches of ``cache_key`` (a prompt likely next; the key's prompt in use
                stays cached): a later :meth:`generate` or :meth:`prefill` of a prompt that shares more
                with it than with the main caches uses it.
            preempt: polled as ``should_stop`` and also between the model's layers: the piece in flight
                is dropped (:meth:`decoding.kv_cache.KVCacheState.prefill`).
        Returns:
            Prompt tokens fed into the target's cache by this call (the draft model's may differ).
        Raises:
            ValueError: if ``prompt_ids`` is empty, ``chunk_tokens`` negative, or ``spare`` without ``cache_key``.
            RuntimeError: as :meth:`sync_sources`.
        """
        self._check_thread()
        if not prompt_ids:
            raise ValueError("the prompt must hold at least one token")
        if chunk_tokens < 0:
            raise ValueError(f"chunk_tokens must be >= 0 (0: one piece), got {chunk_tokens}")
        if spare and cache_key is None:
            raise ValueError("a spare prefill needs a cache key")
        if cache_key is not None:
            self._use_cache(cache_key, prompt_ids, spare)
        def poll() -> bool:
            return (should_stop is not None and should_stop()) or (preempt is not None and preempt())

        if poll():
            return 0
        target = self.generator.state.prefill(prompt_ids, chunk_tokens, should_stop, preempt)
        if self.model_drafter is not None and not target.stopped and not poll():
            self.model_drafter.state.prefill(prompt_ids, chunk_tokens, should_stop, preempt)
        return target.fed

    def generate(
        self,
        prompt_ids: list[int],
        config: GenerationConfig,
        mode: str = "auto",
        sources: NgramStore | dict[str, list[int]] | None = None,
        should_stop: Callable[[], bool] | None = None,
        cache_key: object = None,
    ) -> Generation:
        """Generate with the drafter for ``mode``; see :meth:`SpeculativeGenerator.generate`.

        Args:
            cache_key: whose KV caches to use (e.g. a document URI); ``None``: the ones used last.
        Raises:
            RuntimeError: as :meth:`sync_sources`.
        """
        self._check_thread()
        if cache_key is not None:
            self._use_cache(cache_key, prompt_ids)
        return self.generator.generate(prompt_ids, self.drafter(mode, sources), config, should_stop)

    def rewrite(
        self,
        prompt_ids: list[int],
        draft_ids: list[int],
        config: GenerationConfig,
        mode: str = "auto",
        sources: NgramStore | dict[str, list[int]] | None = None,
        should_stop: Callable[[], bool] | None = None,
        cache_key: object = None,
    ) -> Generation:
        """Generate the rewrite of a region: as :meth:`generate`, drafting first from the original
        region (:class:`decoding.drafters.region.RegionDrafter`, source ``region`` in the stats), then
        from ``mode``'s sources by the same per-round policy. The output equals plain decoding of
        ``prompt_ids`` (``mode="none"``): greedy token for token, sampled in distribution.

        Args:
            prompt_ids: the rewrite prompt's token ids, ending where the new region begins.
            draft_ids: the original region's token ids followed by its end marker's. The end marker must
                also end the generation (``config.stop_strings`` or ``config.stop_token_ids``): then a
                rewrite that rejoined the original ends in the pass that checked the rest of the region.
            config: as :meth:`generate`; ``max_region_draft_tokens`` caps the region's drafts.
            mode, sources, should_stop, cache_key: as :meth:`generate`.
        Raises:
            ValueError: an unknown mode, ``model`` without a draft model, or an empty prompt.
            RuntimeError: as :meth:`sync_sources`.
        """
        self._check_thread()
        drafter = self.rewrite_drafter(mode, len(prompt_ids), draft_ids, config, sources)
        if drafter is not None:  # the round's budget must admit the region's long drafts
            config = replace(config, max_draft_tokens=max(config.max_draft_tokens, config.max_region_draft_tokens))
        if cache_key is not None:
            self._use_cache(cache_key, prompt_ids)
        return self.generator.generate(prompt_ids, drafter, config, should_stop)
