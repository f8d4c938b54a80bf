"""The drafter that switches among draft sources and sizes each draft (every engine mode drafts through it).

It wraps the cheap n-gram drafter and/or the draft-model drafters (in the ``auto`` mode: the lookup, the
staged drafter of :mod:`decoding.drafters.staged`, then the plain draft model). Each round it asks
:class:`decoding.draft_length.DraftLengthPolicy` for the draft length with the best expected gain per
source, tries the n-gram lookup first (it costs nearly nothing), and uses a costlier source only when the
cheaper ones found nothing or its expected gain is higher. With one sub-drafter it only sizes that
drafter's drafts (k = 0, no draft, when drafting does not pay).

It measures how long each model draft took and hands that to the policy's cost model; the verify pass
costs come from the generator through :class:`decoding.drafters.base.DraftContext`. A model source whose
KV cache must first catch up on many committed tokens (a cold prompt) is used only when the passes it can
save over the tokens left to generate outweigh that catch-up (measured per token by the model drafter).

Two options serve sources unlike the others (the region drafter of a rewrite, :mod:`decoding.drafters.region`):
``caps`` keeps some sources below the round's budget, so one source may draft longer than the rest; and
with ``idle_passed_over`` a source whose draft lost to a costlier source's relaxes toward the prior as one
that did not draft does, instead of keeping the estimate it had when it was last chosen for good.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace

from decoding.draft_length import DraftLengthPolicy
from decoding.drafters.base import Draft, DraftContext, Drafter


class SwitchingDrafter(Drafter):
    """Chooses among ``drafters`` (cheapest first) and sizes each draft by expected gain.

    Args:
        drafters: sub-drafters in order of cost, e.g. ``[NgramDrafter(), ModelDrafter(...)]``.
        policy: draft-length policy; k is capped by ``policy.max_k`` and the round's ``max_tokens``.
        caps: ``{source name: k at most}`` for sources that must stay below the round's ``max_tokens``
            (tokens); sources not named are capped by the round alone.
        idle_passed_over: a source that proposed a draft but lost to a costlier source counts as idle
            (:meth:`DraftLengthPolicy.idle`), so an early low estimate cannot keep it out for good.
            Off by default: the completion modes keep the behaviour their benchmarks measured.
    Raises:
        ValueError: ``drafters`` is empty, or a cap is negative.
    """

    def __init__(self, drafters: list[Drafter], policy: DraftLengthPolicy | None = None,
                 caps: Mapping[str, int] | None = None, idle_passed_over: bool = False):
        if not drafters:
            raise ValueError("SwitchingDrafter needs at least one drafter")
        if caps and min(caps.values()) < 0:
            raise ValueError(f"draft length caps must be >= 0, got {dict(caps)}")
        self.drafters = drafters
        self.policy = policy or DraftLengthPolicy()
        self.caps = dict(caps or {})
        self.idle_passed_over = idle_passed_over
        self.name = "+".join(d.name for d in drafters)
        self._last: tuple[Draft, Drafter] | None = None  # the outstanding draft and who made it

    def propose(self, context: DraftContext) -> Draft | None:
        """The draft of the first source (cheapest first) that has one and scores at least as well as
        every costlier source worth its catch-up (:meth:`_worth`); ``None`` when no source proposes anything."""
        if context.verify_costs is not None:
            self.policy.set_verify_costs(context.verify_costs)
        plans = [self.policy.plan(d.name, min(context.max_tokens, self.caps.get(d.name, context.max_tokens)))
                 for d in self.drafters]
        gains = [gain for _, gain in plans]
        catch_ups = self._catch_ups(context)
        free_gain = 1.0  # the best gain of a source without catch-up that has a draft this round (plain: 1)
        for i, drafter in enumerate(self.drafters):
            k = plans[i][0]
            if k > 0 and not self._worth(catch_ups[i], gains[i], free_gain, context):
                k = 0
                drafter.relax_catch_up()  # a cost measured too high must not shut the source out for good
            if k <= 0:
                self.policy.idle(drafter.name)
                continue
            start = time.perf_counter()
            draft = drafter.propose(replace(context, max_tokens=k))
            elapsed_ms = 1000 * (time.perf_counter() - start)
            if draft is None or not draft.tokens:
                continue
            if draft.draft_probs is not None and context.verify_ms > 0:
                self.policy.update_cost(drafter.name, elapsed_ms / len(draft.tokens), context.verify_ms)
            if catch_ups[i] == 0:
                free_gain = max(free_gain, gains[i])
            later = [gains[j] for j in range(i + 1, len(self.drafters))
                     if self._worth(catch_ups[j], gains[j], free_gain, context)]
            if not later or gains[i] >= max(later):
                self._last = (draft, drafter)
                return draft
            if self.idle_passed_over:
                self.policy.idle(drafter.name)
        return None

    def _catch_ups(self, context: DraftContext) -> list[float]:
        """Per source, its model's catch-up before it can draft (:meth:`Drafter.catch_up_ms`: feeding the
        committed tokens its KV cache lacks, e.g. a cold prompt) in verify passes; 0 for sources without
        one or where the verify time is unknown (seeded runs: decisions must not depend on timing)."""
        if context.remaining_tokens <= 0 or context.verify_ms <= 0:
            return [0.0] * len(self.drafters)
        return [d.catch_up_ms(context.token_ids) / context.verify_ms for d in self.drafters]

    @staticmethod
    def _worth(catch_up: float, gain: float, free_gain: float, context: DraftContext) -> bool:
        """Whether a source whose catch-up costs ``catch_up`` verify passes can recover it: the passes it
        saves over the tokens left, remaining * (1 / free_gain - 1 / gain), exceed the catch-up
        (``free_gain``: the best gain of the sources without catch-up that have a draft this round)."""
        return catch_up <= 0 or context.remaining_tokens * (1 / free_gain - 1 / gain) > catch_up

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Fold the outcome into the policy's acceptance estimate of the source that drafted, and pass
        it on to that drafter; a draft this drafter did not make last is ignored."""
        if self._last is None or self._last[0] is not draft:
            return
        drafter = self._last[1]
        self._last = None
        drafted = max(draft.tree.depths()) if draft.tree is not None else len(draft.tokens)  # a tree: its depth
        self.policy.update(drafter.name, drafted, num_accepted)
        drafter.observe(draft, num_accepted)
