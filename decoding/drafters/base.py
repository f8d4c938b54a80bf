"""The drafter seam: a drafter proposes new tokens and observes how many were accepted.

A drafter never sees the target model. It gets a frozen :class:`DraftContext` (the committed tokens
and how many tokens it may propose) and returns a :class:`Draft` of *new tokens only*, with the
draft probabilities they were sampled from, or ``None`` for a deterministic draft (n-gram lookup),
which verification treats as one-hot.

A drafter with a model of its own also says what its model's catch-up would cost (feeding the committed
tokens its KV cache lacks) and is told when that kept it out (:mod:`decoding.drafters.switching`). The
:class:`Drafter` protocol gives those two members defaults for drafters without a catch-up; every drafter
class subclasses it explicitly, so it inherits them (PEP 544: a protocol's methods are the defaults of its
explicit subclasses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from decoding.tree import DraftTree
from decoding.types import SamplingParams


@dataclass(frozen=True)
class DraftContext:
    """What a drafter may look at in one round."""

    token_ids: list[int]  # every committed token: prompt, then generated; the last is not yet verified-upon
    max_tokens: int  # propose at most this many tokens (k)
    sampling: SamplingParams  # the processing the target uses too
    generator: torch.Generator | None  # random source for sampling drafters
    verify_ms: float = 0.0  # recent mean wall time of one target verify pass (0: not measured yet)
    min_confidence: float = 0.0  # model drafters stop before a token they give less probability than this
    verify_costs: tuple[float, ...] | None = None  # measured cost of a pass verifying k tokens over one, k = 0..
    remaining_tokens: int = 0  # tokens the generation may still commit (0: unknown); amortises a drafter's catch-up


@dataclass(frozen=True)
class Draft:
    """Proposed continuation of ``DraftContext.token_ids``."""

    tokens: list[int]  # k new token ids, k <= max_tokens
    draft_probs: torch.Tensor | None  # (k, V) float32 distributions sampled from, or None if deterministic
    source: str  # which drafter (and source) proposed it, for per-source stats
    tree: DraftTree | None = None  # several deterministic candidates as a trie; then tokens == tree.tokens


@runtime_checkable
class Drafter(Protocol):
    """Proposes draft tokens; learns from how many were accepted."""

    name: str

    def propose(self, context: DraftContext) -> Draft | None:
        """A draft of at most ``context.max_tokens`` tokens, or ``None`` when there is nothing to propose."""
        ...

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Called after verification with the number of ``draft.tokens`` the target accepted."""
        ...

    def catch_up_ms(self, token_ids: list[int]) -> float:
        """Expected ms to feed the committed tokens its model's KV cache lacks before it can draft after
        ``token_ids`` (a cold prompt: nearly all of them); 0.0 when there is nothing to catch up.

        Default: 0.0, for drafters without a model of their own (n-gram lookup, the region drafter).
        """
        return 0.0

    def relax_catch_up(self) -> None:
        """Called each round its :meth:`catch_up_ms` kept it out of drafting, so one estimate measured
        too high cannot keep it out for good. Default: nothing to relax."""
