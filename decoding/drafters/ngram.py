"""N-gram (prompt lookup) drafting: propose what followed the last few tokens earlier on.

The longest recent n-gram of the committed tokens (``max_ngram`` down to ``min_ngram`` tokens) is
looked up in the committed tokens themselves and in extra token sources (other open buffers). The
tokens that followed its most recent earlier occurrence are the draft. The draft is deterministic,
so verification treats its draft probabilities as one-hot (Saxena 2023, "Prompt Lookup Decoding";
Yang et al. 2023, "Inference with Reference").

The committed tokens are searched directly (:class:`TokenBuffer`); the extra sources live in one
:class:`decoding.drafters.ngram_store.NgramStore`, a dictionary probe per n-gram length.

A chain draft also locks onto the place it copied from: a :class:`decoding.drafters.region.RegionDrafter`
over the next :data:`FOLLOW_TOKENS` tokens there follows what the target writes, rejoins the copy where
the target parted from it and rejoined it, and learns the changes it made there
(:mod:`decoding.drafters.substitutions`).

* Once the lock has followed :data:`FOLLOW_AFTER` tokens, its draft comes first while it is aligned for
  sure.
* While it is lost or on an unconfirmed guess, the lookup drafts. The lookup locks again, unless the lock
  is on such a guess, which the next round may confirm.

So a function written again with a name renamed drafts each later occurrence of the name renamed. A
lookup of the renamed name would find only the target's own recent text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.ngram_store import NgramStore
from decoding.drafters.region import RegionDrafter
from decoding.drafters.substitutions import Substitutions
from decoding.drafters.token_buffer import TokenBuffer
from decoding.tree import DraftTree
from decoding.types import NgramConfig  # defined there (torch-free); imported here too

FOLLOW_TOKENS = 512  # tokens of the copied place a lock follows
FOLLOW_AFTER = 2  # generated tokens a lock must have followed before its drafts come first
FOLLOW_REACH = 32  # how far from where it parted a lock re-anchors, in tokens (farther: the lookup's job)


class NgramDrafter(Drafter):
    """Drafter proposing continuations of the longest matching recent n-gram.

    Args:
        config: n-gram lengths.
        sources: extra token sources searched after the committed tokens: an :class:`NgramStore`
            with the same config (used as is, e.g. the engine's), or ``{name: token ids}`` (indexed
            here). On equal match length the committed tokens win, then the most recently indexed
            source (for a dict: the earlier entry).
        max_candidates: more than 1 proposes a tree of that many distinct continuations.
    Raises:
        ValueError: a store built with another n-gram config.
    """

    name = "ngram"

    def __init__(self, config: NgramConfig | None = None,
                 sources: NgramStore | Mapping[str, Sequence[int]] | None = None,
                 max_candidates: int = 1, max_tree_nodes: int = 32):
        self.config = config or NgramConfig()
        self.max_candidates = max_candidates
        self.max_tree_nodes = max_tree_nodes
        if isinstance(sources, NgramStore):
            if sources.config != self.config:
                raise ValueError(f"the store's n-gram config {sources.config} is not the drafter's {self.config}")
            self.store = sources
        else:
            self.store = NgramStore(self.config)
            for name, tokens in reversed(list((sources or {}).items())):  # the first entry is the most recent
                self.store.put(name, None, tokens)
        self._context = TokenBuffer(self.config)
        self._lock: RegionDrafter | None = None  # the follower of the last copy, named "ngram:<source>"
        self.substitutions = Substitutions()

    def _sync_context(self, token_ids: list[int]) -> None:
        held = self._context.tokens
        if len(held) <= len(token_ids) and token_ids[: len(held)] == held:
            self._context.extend(token_ids[len(held) :])
        else:  # another generation: nothing learned from the last one applies
            self._context = TokenBuffer(self.config, token_ids)
            self._lock, self.substitutions = None, Substitutions()

    def _followed(self, context: DraftContext) -> Draft | None:
        """The lock's draft once it has followed :data:`FOLLOW_AFTER` tokens and is aligned for sure (not
        on a one-token rejoin that the target has not confirmed yet), else ``None``."""
        if self._lock is None:
            return None
        draft = self._lock.propose(context)
        return None if draft is None or self._lock.matched < FOLLOW_AFTER or self._lock.tentative else draft

    def _matches(self, suffix: list[int]):
        """``(n, order, tokens, positions)`` per match, longest first and the committed tokens
        (order 0) before the store (order 1)."""
        found = [(n, 0, "context", self._context.tokens, positions) for n, positions in self._context.matches(suffix)]
        for n, places in self.store.matches(suffix):
            for name, position in places:
                found.append((n, 1, name, self.store.tokens(name), [position]))
        found.sort(key=lambda m: (-m[0], m[1]))  # stable: the store's most recent places stay first
        return found

    def propose(self, context: DraftContext) -> Draft | None:
        """Up to ``context.max_tokens`` tokens that followed the best match, or ``None``."""
        if context.max_tokens <= 0:
            return None
        self._sync_context(context.token_ids)
        suffix = context.token_ids[-self.config.max_ngram :]
        if self.max_candidates > 1:
            matches = self._matches(suffix)
            if not matches:
                return None
            tree = self._tree(matches, context.max_tokens)
            if tree is not None and not tree.chain():
                return Draft(tokens=list(tree.tokens), draft_probs=None, source=f"ngram-tree:{matches[0][2]}", tree=tree)
            _, _, source_name, tokens, positions = matches[0]
        else:
            followed = self._followed(context)
            if followed is not None:
                return followed
            best = self._context.lookup(suffix)
            source_name, tokens, position = "context", self._context.tokens, best[1] if best else 0
            for n, places in self.store.matches(suffix):  # longest first: only the first length matters
                if best is None or n > best[0]:
                    source_name, position = places[0]
                    tokens, best = self.store.tokens(source_name), (n, position)
                break
            if best is None:
                return None
            if self._lock is not None and self._lock.tentative and self._lock.matched >= FOLLOW_AFTER:
                positions = [position]  # the lock may be confirmed next round: keep it, and what it may learn
            else:
                self._lock = RegionDrafter(tokens[position : position + FOLLOW_TOKENS], len(context.token_ids),
                                           name=f"ngram:{source_name}", substitutions=self.substitutions,
                                           anchor_reach=FOLLOW_REACH)
                return self._lock.propose(context)
        draft = tokens[positions[0] : positions[0] + context.max_tokens]
        return Draft(tokens=draft, draft_probs=None, source=f"ngram:{source_name}") if draft else None

    def _tree(self, matches, depth: int) -> DraftTree | None:
        """Up to ``max_candidates`` continuations with distinct first tokens, best first (longer
        match, then the committed tokens before other sources, then more recent), as a trie."""
        candidates: list[list[int]] = []
        first_tokens: set[int] = set()
        for _, _, _, tokens, positions in matches:
            for position in positions:
                candidate = tokens[position : position + depth]
                if candidate and candidate[0] not in first_tokens:
                    first_tokens.add(candidate[0])
                    candidates.append(candidate)
                if len(candidates) >= self.max_candidates:
                    return DraftTree.from_candidates(candidates, self.max_tree_nodes)
        return DraftTree.from_candidates(candidates, self.max_tree_nodes) if candidates else None

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """N-gram lookup keeps no learned state; acceptance is counted by the generation stats."""
