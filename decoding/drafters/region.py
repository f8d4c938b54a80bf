"""Drafting a rewrite from the original region: the region's own tokens are the draft.

A next-edit rewrite copies most of the region it rewrites (Cursor's "speculative edits"; Zed's Zeta), so
the original region, followed by the tokens of its end marker, is a nearly perfect draft. The drafter
keeps a pointer into those tokens: the index of the token the rewrite is expected to write next.

* While the target writes what the pointer expects, the pointer follows it, token by token, whoever
  drafted (an accepted region draft, the bonus token, another source's draft, a plain round).
* When the target writes something else (it inserted, deleted or replaced text), the drafter rejoins
  the region where it can tell, nearest first:

  - a token the target writes that the region holds within ``LOCAL_TOKENS`` of where they parted: the
    target left out the tokens before it, or wrote others first, and continues after it;
  - the last ``anchor_tokens`` generated tokens found in the region, nearest occurrence at or after the
    old pointer first (the rewrite goes forward), else the nearest before it (a repeated line);
  - one token written in place of the region's (a word renamed): the region's next token is guessed to
    follow, once per parting.

  A rejoin by one token (the first and last) is tentative: its drafts stay at most
  ``TENTATIVE_TOKENS`` long until the target writes one more region token after it, so a wrong guess
  costs a short pass, not a long one. Nothing found: it proposes nothing until a later anchor is found.
* Aligned, it proposes the rest of the region, end marker included, up to ``max_tokens``: one verify pass
  checks the whole remainder, so once the rewrite has rejoined the original for the rest of the region
  the generation ends in that pass at the end marker (a stop string or stop token of the caller). That is
  the exact early exit: nothing is assumed, the target verifies every token.

* With :class:`decoding.drafters.substitutions.Substitutions`, a one-token rejoin that the target
  confirms teaches a rule (the tokens it wrote instead of the region's, or inserted after one): the rest
  of the region is drafted with every rule applied, and a rule the target contradicts is dropped there.

The draft is deterministic (``draft_probs=None``): verification treats it as one-hot, exact for greedy
and sampled decoding alike.
"""

from __future__ import annotations

from bisect import bisect_left

from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.substitutions import MAX_REPLACEMENT_TOKENS, Applied, Substitutions

REGION_SOURCE = "region"  # the drafter's default name, and its source in the generation stats
LOCAL_TOKENS = 8  # how far past the parting a token the target writes rejoins the region
TENTATIVE_TOKENS = 16  # the draft length at most after a one-token rejoin, until it is confirmed


class RegionDrafter(Drafter):
    """Drafter proposing the original region's tokens after the pointer (see the module docstring).

    Args:
        draft_ids: the original region's token ids followed by its end marker's (the caller appends them).
        prompt_len: tokens of the prompt; ``DraftContext.token_ids[prompt_len:]`` are the generated ones.
        anchor_tokens: generated tokens matched to re-anchor (fewer while fewer have been generated).
        name: the source name in the policy and the stats.
        substitutions: rules to draft the region with and to learn into (shared with other drafters
            copying for the same generation); ``None``: the region is drafted as it is.
        anchor_reach: re-anchor only this many tokens from the pointer at most (``None``: anywhere).
    Raises:
        ValueError: ``anchor_tokens < 1`` or ``prompt_len < 0``.
    """

    def __init__(self, draft_ids: list[int], prompt_len: int, anchor_tokens: int = 3, name: str = REGION_SOURCE,
                 substitutions: Substitutions | None = None, anchor_reach: int | None = None):
        if anchor_tokens < 1:
            raise ValueError(f"anchor_tokens must be >= 1, got {anchor_tokens}")
        if prompt_len < 0:
            raise ValueError(f"prompt_len must be >= 0, got {prompt_len}")
        self._original = list(draft_ids)
        self.substitutions = substitutions
        self._set_tail(0, self._rewritten(0))
        self.prompt_len = prompt_len
        self.anchor_tokens = anchor_tokens
        self.anchor_reach = anchor_reach
        self.name = name
        self.pointer = 0  # index into draft_ids of the token expected next
        self.aligned = True  # the generated tokens so far end where the pointer is (the start: nothing generated)
        self._seen = 0  # generated tokens the pointer accounts for
        self.matched = 0  # generated tokens that were the draft's token at the pointer
        self._parted = 0  # the pointer where the target last wrote something else
        self._since_parted = 0  # generated tokens since then, while lost
        self._tentative = False  # rejoined by one token; not confirmed yet
        self._written: list[int] = []  # generated tokens since the parting
        self._pending: tuple[int, int, list[int]] | None = None  # a tentative rejoin's change, to learn once confirmed

    def _rewritten(self, start: int) -> Applied:
        """The original region from index ``start`` on, with the substitution rules applied."""
        if self.substitutions is None or not self.substitutions.rules:
            rest = self._original[start:]
            return Applied(rest, [None] * len(rest), list(range(start, len(self._original))))
        return self.substitutions.apply(self._original[start:], offset=start)

    def _set_tail(self, at: int, tail: Applied) -> None:
        """Replace the draft from index ``at`` on by ``tail``."""
        if at == 0:
            self.draft_ids, self._made_by, self._restart = tail.tokens, tail.made_by, tail.restart
        else:
            self.draft_ids = self.draft_ids[:at] + tail.tokens
            self._made_by = self._made_by[:at] + tail.made_by
            self._restart = self._restart[:at] + tail.restart
        self._ends_index: dict[tuple[int, ...], list[int]] | None = None  # built when first needed

    def _redraft(self, at: int) -> None:
        """Draft the region again from index ``at`` on with the rules as they are now."""
        if at < len(self.draft_ids):
            self._set_tail(at, self._rewritten(self._restart[at]))

    @property
    def _ends(self) -> dict[tuple[int, ...], list[int]]:
        """Where each ``anchor_tokens``-gram of the draft ends (the index after it), ascending."""
        if self._ends_index is None:
            self._ends_index, n = {}, self.anchor_tokens
            for end in range(n, len(self.draft_ids) + 1):
                self._ends_index.setdefault(tuple(self.draft_ids[end - n : end]), []).append(end)
        return self._ends_index

    def propose(self, context: DraftContext) -> Draft | None:
        """``draft_ids[pointer : pointer + max_tokens]`` once the pointer follows the generated tokens;
        ``None`` when lost (no anchor found), at the region's end, or when ``max_tokens`` is 0."""
        self._follow(context.token_ids[self.prompt_len :])
        if context.max_tokens <= 0 or not self.aligned:
            return None
        limit = min(context.max_tokens, TENTATIVE_TOKENS) if self._tentative else context.max_tokens
        draft = self.draft_ids[self.pointer : self.pointer + limit]
        return Draft(tokens=draft, draft_probs=None, source=self.name) if draft else None

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Nothing to do here: the next :meth:`propose` moves the pointer over the committed tokens,
        the ``num_accepted`` accepted ones and the token the target added after them."""

    def _follow(self, generated: list[int]) -> None:
        """Move the pointer over the generated tokens not seen yet, rejoining the region where they part
        from it (see the module docstring). Generated tokens that are not an extension of those seen (a
        new generation): start again from the region's start."""
        if len(generated) < self._seen:
            self.pointer, self.aligned, self._seen, self._tentative, self._pending = 0, True, 0, False, None
            self.matched = 0
        for token in generated[self._seen :]:
            if self.aligned:
                if self._expects(token):
                    self.pointer += 1
                    self.matched += 1
                    if self._tentative:
                        self._confirm()
                    continue
                if not self._tentative:  # a failed guess keeps the first parting
                    self._parted, self._written = self.pointer, []
                self.aligned, self._since_parted, self._pending = False, 0, None
            self._since_parted += 1
            if len(self._written) <= MAX_REPLACEMENT_TOKENS:  # longer changes are not learned
                self._written.append(token)
            local = self.draft_ids[self._parted : self._parted + LOCAL_TOKENS]
            if token in local:
                at = self._parted + local.index(token)
                self.pointer, self.aligned, self._tentative = at + 1, True, True
                whole = len(self._written) <= MAX_REPLACEMENT_TOKENS  # not cut short above
                self._pending = (self._parted, at, self._written[:-1]) if whole else None
        if not self.aligned and generated:
            if self._since_parted == 1 and not self._tentative and self._inserted_before(generated[-1]):
                # the token a learned insertion inserts: guess it was inserted again, the region's token next
                self.pointer, self.aligned, self._tentative = self._parted, True, True
                self._pending = (self._parted, self._parted, list(self._written))
            elif (found := self.anchor(generated[-self.anchor_tokens :])) is not None:
                self.pointer, self.aligned, self._tentative, self._pending = found, True, False, None
            elif self._since_parted == 1 and not self._tentative and self._parted < len(self.draft_ids):
                self.pointer, self.aligned, self._tentative = self._parted + 1, True, True
                self._pending = (self._parted, self._parted + 1, list(self._written))
        self._seen = len(generated)

    def _inserted_before(self, token: int) -> bool:
        """Whether a learned insertion inserts ``token`` first."""
        rules = self.substitutions.rules if self.substitutions is not None else []
        return any(r.kept == len(r.pattern) and r.replacement[r.kept] == token for r in rules)

    @property
    def tentative(self) -> bool:
        """Aligned by a one-token rejoin that the target has not confirmed yet."""
        return self.aligned and self._tentative

    def _expects(self, token: int) -> bool:
        """Whether ``token`` is the draft's token at the pointer; a rule that made a token the target did
        not write there is dropped and the draft made again from that token on, until one fits or none
        was made by a rule."""
        while self.pointer < len(self.draft_ids):
            if self.draft_ids[self.pointer] == token:
                return True
            rule = self._made_by[self.pointer]
            if rule is None or self.substitutions is None:
                return False
            self.substitutions.drop(rule)
            self._redraft(self.pointer)
        return False

    def _confirm(self) -> None:
        """The target wrote a region token after a one-token rejoin: learn the change it made there (the
        draft's tokens ``[start, end)`` written as ``written``) and draft the rest with it."""
        self._tentative = False
        pending, self._pending = self._pending, None
        if pending is None or self.substitutions is None:
            return
        start, end, written = pending
        if any(made is not None for made in self._made_by[max(start - 1, 0) : end]):
            return  # the change was to tokens a rule made: keep to rules over copied text
        left = self.draft_ids[start - 1] if start > 0 else None
        if self.substitutions.learn(left, self.draft_ids[start:end], written) is not None:
            at = self.pointer
            while at < len(self.draft_ids) and self._made_by[at] is not None:
                at += 1  # inside another rule's tokens: draft again from the next copied token
            self._redraft(at)

    def anchor(self, suffix: list[int]) -> int | None:
        """The index after an occurrence of ``suffix`` in ``draft_ids``: the first occurrence ending
        at or after the pointer, else the last one ending before it; ``None`` if it does not occur, or
        not within ``anchor_reach`` tokens of the pointer.

        Args:
            suffix: 1 to ``anchor_tokens`` token ids (shorter only at the start of a rewrite).
        """
        if len(suffix) == self.anchor_tokens:
            ends = self._ends.get(tuple(suffix), [])
        else:
            n = len(suffix)
            ends = [e for e in range(n, len(self.draft_ids) + 1) if self.draft_ids[e - n : e] == suffix]
        if not ends:
            return None
        if self.anchor_reach is not None:
            ends = [e for e in ends if abs(e - self.pointer) <= self.anchor_reach]
            if not ends:
                return None
        at = bisect_left(ends, self.pointer)
        return ends[at] if at < len(ends) else ends[-1]
