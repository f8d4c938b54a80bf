"""The local backend: today's speculative engine (:class:`decoding.engine.Engine`) behind the seam.

A thin adapter: it changes nothing in how the engine generates, caches or drafts, and the
generations keep their speculative statistics (per-source acceptance, passes, stage times).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Set

from decoding.choices.pass_costs import pass_costs
from decoding.engine import Engine
from decoding.types import REWRITE_PREFILL_CHUNK_TOKENS, Generation, GenerationConfig
from lsp_server.backends.base import GenerationBackend, LoadedModels, Prompt, RewritePrompt

# A spare prefill in idle time yields to a request after at most this many tokens. Any other prefill ahead
# (a next-edit prompt after an edit burst) runs in a rewrite's own pieces and is preempted between the
# model's layers when the document changes (a key), so a key does not wait for its piece; a queued
# request waits for the piece, which a request for the same prompt needs anyway.
SPARE_CHUNK_TOKENS = 32

LOCAL = "local"


class LocalBackend:
    """The local engine as a :class:`lsp_server.backends.base.GenerationBackend`."""

    name = LOCAL
    keeps_sources = True
    constrains_output = True

    def __init__(self, engine: Engine):
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.capabilities = engine.target.capabilities
        self.completion_stop_ids = engine.completion_stop_ids
        self._ms_per_token: float | None = None  # of a prefill (prompt_cost), from the measured pass costs

    def generate(self, prompt: Prompt, config: GenerationConfig, drafter: str,
                 should_stop: Callable[[], bool], cache_key: Hashable = None) -> Generation:
        """:meth:`decoding.engine.Engine.generate` on the prompt's ids (the engine's KV caches under ``cache_key``)."""
        return self.engine.generate(prompt.prompt_ids, config, drafter, should_stop=should_stop, cache_key=cache_key)

    def rewrite(self, prompt: RewritePrompt, config: GenerationConfig, drafter: str,
                should_stop: Callable[[], bool], cache_key: Hashable = None) -> Generation:
        """:meth:`decoding.engine.Engine.rewrite`, drafting from the region's own tokens first."""
        return self.engine.rewrite(prompt.prompt_ids, prompt.draft_ids, config, drafter, should_stop=should_stop,
                                   cache_key=cache_key)

    def describe(self) -> LoadedModels:
        model, engine = self.engine.target.model, self.engine
        return LoadedModels(engine.target.name, engine.draft.name if engine.draft is not None else "none",
                            str(model.device), str(model.dtype), engine.notice)

    def claim_thread(self) -> None:
        self.engine.claim_thread()

    def sync_sources(self, wanted: dict[Hashable, tuple[object, object]], retain: Set[Hashable] = frozenset(),
                     drop: Set[Hashable] = frozenset(), searched: Set[Hashable] = frozenset()) -> None:
        self.engine.sync_sources(wanted, retain=retain, drop=drop, searched=searched)

    def has_source(self, key: Hashable) -> bool:
        return key in self.engine.sources

    def forget_source(self, key: Hashable) -> None:
        self.engine.forget_source(key)

    def forget_cache(self, cache_key: Hashable) -> None:
        self.engine.forget_cache(cache_key)

    def prompt_cost(self, prompt_ids: list[int], cache_key: Hashable) -> tuple[int, float] | None:
        """The tokens of ``prompt_ids`` the caches of ``cache_key`` lack, and the measured ms per token of
        the largest pass timed at load (:func:`decoding.choices.pass_costs.pass_costs`: the target's, plus
        the draft model's where one is loaded, since a prefill feeds both)."""
        missing = len(prompt_ids) - self.engine.cached_prefix(prompt_ids, cache_key)
        if self._ms_per_token is None:
            models = [self.engine.target] + ([self.engine.draft] if self.engine.draft is not None else [])
            curves = [pass_costs(m) for m in models]
            self._ms_per_token = sum(curve[max(curve)] / max(curve) for curve in curves)
        return missing, self._ms_per_token

    def prefill(self, prompt_ids: list[int], cache_key: Hashable, should_stop: Callable[[], bool],
                spare: bool = False, preempt: Callable[[], bool] | None = None) -> int:
        """:meth:`decoding.engine.Engine.prefill` (the chunks polled with ``should_stop``)."""
        return self.engine.prefill(prompt_ids, cache_key=cache_key, should_stop=should_stop,
                                   chunk_tokens=SPARE_CHUNK_TOKENS if spare else REWRITE_PREFILL_CHUNK_TOKENS,
                                   spare=spare, preempt=preempt)


def as_backend(backend_or_engine: Engine | GenerationBackend) -> GenerationBackend:
    """A backend as it is; a bare :class:`~decoding.engine.Engine` wrapped in :class:`LocalBackend`. For the
    edges that hold an engine (the command line, ``bench/``, test fixtures); nothing below them takes one."""
    return LocalBackend(backend_or_engine) if isinstance(backend_or_engine, Engine) else backend_or_engine
