"""The drafter that switches among draft sources and sizes each draft (every engine mode drafts through it).

It wraps the cheap n-gram drafter and/or the draft-model drafter (one of them, or both in the ``auto``
mode). Each round it asks :class:`decoding.draft_length.DraftLengthPolicy` for the draft length with
the best expected gain per source, tries the n-gram lookup first (it costs nearly nothing), and uses
the draft model only when the lookup found nothing or the model's expected gain is higher. With one
sub-drafter it only sizes that drafter's drafts (k = 0, no draft, when drafting does not pay).

It measures how long each model draft took and hands that to the policy's cost model; the verify pass
costs come from the generator through :class:`decoding.drafters.base.DraftContext`.
"""

from __future__ import annotations

import time
from dataclasses import replace

from decoding.draft_length import DraftLengthPolicy
from decoding.drafters.base import Draft, DraftContext, Drafter


class SwitchingDrafter:
    """Chooses among ``drafters`` (cheapest first) and sizes each draft by expected gain.

    Args:
        drafters: sub-drafters in order of cost, e.g. ``[NgramDrafter(), ModelDrafter(...)]``.
        policy: draft-length policy; k is capped by ``policy.max_k`` and the round's ``max_tokens``.
    Raises:
        ValueError: ``drafters`` is empty.
    """

    def __init__(self, drafters: list[Drafter], policy: DraftLengthPolicy | None = None):
        if not drafters:
            raise ValueError("SwitchingDrafter needs at least one drafter")
        self.drafters = drafters
        self.policy = policy or DraftLengthPolicy()
        self.name = "+".join(d.name for d in drafters)
        self._last: tuple[Draft, Drafter] | None = None  # the outstanding draft and who made it

    def propose(self, context: DraftContext) -> Draft | None:
        """The draft of the first source (cheapest first) that has one and scores at least as well as
        every costlier source; ``None`` when no source proposes anything."""
        if context.verify_costs is not None:
            self.policy.set_verify_costs(context.verify_costs)
        plans = [self.policy.plan(d.name, context.max_tokens) for d in self.drafters]
        gains = [gain for _, gain in plans]
        for i, drafter in enumerate(self.drafters):
            k = plans[i][0]
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
            if i == len(self.drafters) - 1 or gains[i] >= max(gains[i + 1 :]):
                self._last = (draft, drafter)
                return draft
        return None

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
