"""A causal LM's KV cache together with the token ids it holds, and the one rollback operation.

Invariant (checked after every forward and rollback): ``cache.get_seq_length() == len(token_ids)``,
i.e. the cache holds keys and values for exactly ``token_ids``, in order.

The generation loop keeps the target's cache at "the committed tokens minus the last" after every
round: the last committed token has not been fed yet; it is the first input of the next verify pass.
A draft model's cache is synchronised the same way before it drafts (:meth:`KVCacheState.sync`):
anything past the longest common prefix with the committed tokens (rejected draft tokens) is rolled
back, and committed tokens it has not seen (accepted tokens, the residual or bonus token, the last
draft token when all were accepted) are fed. Syncing by common prefix also lets a later request
reuse the prompt prefix already in the cache. :meth:`KVCacheState.prefill` puts a prompt into a cache
in that state (the prompt minus its last token), for the generation loop and for ``Engine.prefill``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from transformers import DynamicCache, PreTrainedModel

from decoding.types import common_prefix_length


@runtime_checkable
class OwnsCacheState(Protocol):
    """A model that brings its own kind of cache state (:class:`decoding.weights.llama_cpp_model.LlamaCppModel`)."""

    def new_state(self) -> CacheState: ...


class CacheState(Protocol):
    """The seam the generation loop drives: one model's KV cache and the token ids it covers.

    Implemented by :class:`KVCacheState` (a transformers model) and
    :class:`decoding.weights.llama_cpp_model.LlamaCppState` (llama.cpp). Invariant: after every operation
    the cache holds exactly the positions of ``token_ids``.
    """

    model: Any
    token_ids: list[int]
    #: The forward passes that computed the cached positions, in order: (tokens fed, positions still
    #: cached, a tree pass); empty where the engine does not record them (llama.cpp).
    history: list[tuple[int, int, bool]]

    def __len__(self) -> int: ...

    def rollback(self, keep: int) -> None: ...

    def keep(self, prefix: int, extra: list[int]) -> None: ...

    def common_prefix(self, token_ids: list[int]) -> int: ...

    def sync(self, token_ids: list[int]) -> list[int]: ...

    def prefill(self, token_ids: list[int], chunk_tokens: int = 0, should_stop: Callable[[], bool] | None = None,
                preempt: Callable[[], bool] | None = None) -> Prefill: ...

    def forward(self, new_ids: list[int], logits_to_keep: int = 0, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor: ...


def cache_state(model) -> CacheState:
    """A fresh cache state for ``model``: a transformers model's :class:`KVCacheState`, or the model's own
    kind of state where it brings one (:class:`OwnsCacheState`)."""
    return model.new_state() if isinstance(model, OwnsCacheState) else KVCacheState(model)


def logits_width(model) -> int:
    """Width of ``model``'s logits rows (may exceed the tokenizer's length when the embedding is padded)."""
    width = getattr(model, "vocab_size", None)
    if isinstance(width, int) and not hasattr(model, "get_output_embeddings"):
        return width
    head = model.get_output_embeddings()
    width = getattr(head, "out_features", None)  # read without the weight: fp16-weights unpacks it on each read
    return int(width) if isinstance(width, int) else int(head.weight.shape[0])


class Preempted(Exception):
    """Raised between a model's layers when a prefill's ``preempt`` turns true (caught by the prefill)."""


def decoder_layers(model) -> list:
    """The decoder layers of a transformers causal LM (``model.model.layers``), or ``[]`` where it has no
    such list (another kind of model: it is preempted between pieces only)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return list(layers) if isinstance(layers, torch.nn.ModuleList) else []


@dataclass(frozen=True)
class Prefill:
    """What :meth:`KVCacheState.prefill` did."""

    reused: int  # tokens of the prompt already cached (the longest common prefix, the last token excluded)
    fed: int  # tokens fed into the cache by this call (at most len(prompt) - 1 - reused)
    stopped: bool  # should_stop returned True before everything was fed


class KVCacheState:
    """The KV cache of one model and the token ids it covers."""

    def __init__(self, model: PreTrainedModel):
        self.model = model
        # No config: a config-built cache gives sliding-window layers that refuse to crop once full.
        # Without it every layer keeps all positions (the attention mask still applies the window).
        self.cache = DynamicCache()
        self.token_ids: list[int] = []
        # How the cached positions were computed, in order: per forward pass still in the cache, (tokens it
        # fed, its positions still cached, a tree pass). Kernels round differently per pass width, so a
        # replay needs these shapes to compute the same keys and values (bench.noise.run_shaped_logits).
        self.history: list[tuple[int, int, bool]] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    def rollback(self, keep: int) -> None:
        """Drop cached positions so that exactly the first ``keep`` tokens remain.

        Raises:
            ValueError: if ``keep`` is negative or more than the cache holds.
        """
        if not 0 <= keep <= len(self.token_ids):
            raise ValueError(f"cannot keep {keep} tokens of a cache holding {len(self.token_ids)}")
        remove = len(self.token_ids) - keep
        if remove:
            self.cache.crop(-remove)  # transformers 5: a negative count of tokens to remove
            del self.token_ids[keep:]
            self._trim_history(keep, keep + remove)
        self._check()

    def _trim_history(self, keep: int, held: int) -> None:
        """Cut :attr:`history` (covering ``held`` positions) to the passes, or the first positions of the
        last one, that computed the first ``keep`` positions; from the end, as rollbacks cut few."""
        while self.history and held - self.history[-1][1] >= keep:
            held -= self.history.pop()[1]
        if held > keep:
            fed, kept, tree = self.history[-1]
            self.history[-1] = (fed, kept - (held - keep), tree)

    def common_prefix(self, token_ids: list[int]) -> int:
        """Length of the longest common prefix of the cached ids and ``token_ids``."""
        return common_prefix_length(self.token_ids, token_ids)

    def sync(self, token_ids: list[int]) -> list[int]:
        """Roll back to the common prefix with ``token_ids`` and return the ids still to feed.

        At least one id is always left to feed (the last one), so the caller gets fresh logits for
        the position after ``token_ids``.

        Raises:
            ValueError: if ``token_ids`` is empty.
        """
        if not token_ids:
            raise ValueError("cannot sync a cache to an empty token sequence")
        keep = min(self.common_prefix(token_ids), len(token_ids) - 1)
        self.rollback(keep)
        return token_ids[keep:]

    def prefill(self, token_ids: list[int], chunk_tokens: int = 0,
                should_stop: Callable[[], bool] | None = None, preempt: Callable[[], bool] | None = None) -> Prefill:
        """Bring the cache to ``token_ids`` minus the last token (the loop's invariant: the next pass
        feeds that one), reusing the longest cached common prefix (:meth:`sync`) and feeding the rest.

        With ``should_stop`` the rest is fed in pieces of ``chunk_tokens`` tokens (0: one piece) and
        ``should_stop`` is polled between pieces, not before the first; when it returns True feeding
        stops and the pieces fed stay cached. Without it there is nothing to poll: one piece.
        ``preempt`` is polled between pieces and also before each decoder layer (:func:`decoder_layers`)
        within one: when it returns True the piece in flight is dropped (its layers cropped back) and
        feeding stops, the pieces before it cached (for a prefill nobody waits for, stopped at once).

        Raises:
            ValueError: if ``token_ids`` is empty.
        """
        pending = self.sync(token_ids)  # the uncached tokens, the last always among them
        reused, to_feed = len(token_ids) - len(pending), pending[:-1]
        pieces = should_stop is not None or preempt is not None
        step = chunk_tokens if pieces and chunk_tokens > 0 else max(len(to_feed), 1)

        def stop() -> bool:
            return (should_stop is not None and should_stop()) or (preempt is not None and preempt())

        with self._preemptible(preempt):
            for start in range(0, len(to_feed), step):
                if start and stop():  # superseded: what is cached so far serves the next prompt
                    return Prefill(reused, start, stopped=True)
                try:
                    self.forward(to_feed[start : start + step], logits_to_keep=1)
                except Preempted:
                    return Prefill(reused, start, stopped=True)
        return Prefill(reused, len(to_feed), stopped=False)

    @contextmanager
    def _preemptible(self, preempt: Callable[[], bool] | None):
        """Within it, a forward raises :class:`Preempted` before a decoder layer once ``preempt()`` is true."""
        if preempt is None:
            yield
            return

        def check(module, args):
            if preempt():
                raise Preempted

        handles = [layer.register_forward_pre_hook(check) for layer in decoder_layers(self.model)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def keep(self, prefix: int, extra: list[int]) -> None:
        """Keep the first ``prefix`` cached positions and then the positions ``extra`` (ascending
        indices into the cache), dropping the rest: the accepted branch of a verified tree.

        Raises:
            ValueError: if an index is out of range or not ascending past ``prefix``.
        """
        held = len(self.token_ids)
        if not 0 <= prefix <= held or any(not prefix <= i < held for i in extra) or extra != sorted(set(extra)):
            raise ValueError(f"cannot keep {prefix} + {extra} of a cache holding {held}")
        if extra == list(range(prefix, prefix + len(extra))):
            self.rollback(prefix + len(extra))  # a plain prefix: crop
            return
        index = torch.tensor([*range(prefix), *extra], device=self.model.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
        self.token_ids = self.token_ids[:prefix] + [self.token_ids[i] for i in extra]
        self._trim_history(prefix, held)
        self.history.append((held - prefix, len(extra), True))  # positions picked out of a tree's passes
        self._check()

    @torch.inference_mode()
    def forward(self, new_ids: list[int], logits_to_keep: int = 0, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Feed ``new_ids`` after the cached tokens and return their logits.

        Args:
            new_ids: token ids to append (at least one).
            logits_to_keep: 0 for the logits of every new position, n for the last n only.
            attention_mask: optional ``(1, 1, n, cached + n)`` additive mask (a candidate tree's);
                default: causal.
            position_ids: optional ``(1, n)`` positions to go with ``attention_mask``.
        Returns:
            ``(n, V)`` logits in the model's dtype on the model's device.
        """
        if not new_ids:
            raise ValueError("forward needs at least one new token")
        input_ids = torch.tensor([new_ids], device=self.model.device)  # (1, n)
        try:
            extra = {} if attention_mask is None else {"attention_mask": attention_mask, "position_ids": position_ids}
            out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep,
                             **extra)
        except Preempted:  # the layers before the preempted one appended the new positions: drop them
            for layer in self.cache.layers:
                extra = layer.get_seq_length() - len(self.token_ids)
                if extra > 0:
                    layer.crop(-extra)
            self._check()
            raise
        except BaseException:
            # Layers before the failing one already appended the new positions: start over empty
            # rather than keep a cache that disagrees with token_ids.
            self.cache, self.token_ids, self.history = DynamicCache(), [], []
            raise
        if out.cache is not None:
            self.cache = out.cache
        self.token_ids.extend(new_ids)
        self.history.append((len(new_ids), len(new_ids), attention_mask is not None))
        self._check()
        return out.logits[0]  # (n, V)

    def _check(self) -> None:
        held = self.cache.get_seq_length()
        assert held == len(self.token_ids), f"KV cache holds {held} positions for {len(self.token_ids)} token ids"
