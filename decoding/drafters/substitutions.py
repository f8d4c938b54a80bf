"""Substitutions learned from a copy: where the target wrote other tokens than the text it copies, the
same change is drafted at the copy's later occurrences.

An edit that renames, retypes or re-prefixes a name changes it the same way wherever it occurs (a
function written again with ``weight`` renamed ``weight_value``; a rewrite that carries a rename through
a region). A drafter that copies the old text parts from the target at every occurrence and spends a
verify pass on each. A :class:`Substitutions` remembers each change the target confirmed (it wrote the
copied text again right after it) as a rule of token ids:

* a replacement or a deletion: ``pattern`` (the copied tokens the target did not write) ->
  ``replacement`` (the tokens it wrote instead, maybe none);
* an insertion: ``(left,)`` -> ``(left, *inserted)``, with ``left`` the copied token before the
  inserted ones (an insertion needs a place to attach to).

:meth:`Substitutions.apply` rewrites the rest of the copy with every rule, and says which rule made each
token, so a rule the target then contradicts is dropped (:meth:`Substitutions.drop`). A rule is a guess
the target verifies like any other draft token, so rules change how many tokens a pass accepts, never
which tokens are committed.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_RULES = 16  # rules kept; the oldest goes first
MAX_PATTERN_TOKENS = 8  # the longest copied span a rule replaces
MAX_REPLACEMENT_TOKENS = 16  # the most tokens a rule writes instead


@dataclass(frozen=True)
class Rule:
    """Copied tokens ``pattern`` are written as ``replacement`` (token ids)."""

    pattern: tuple[int, ...]
    replacement: tuple[int, ...]

    @property
    def kept(self) -> int:
        """Leading tokens that the rule leaves as they are (the left token of an insertion)."""
        n = 0
        while n < min(len(self.pattern), len(self.replacement)) and self.pattern[n] == self.replacement[n]:
            n += 1
        return n


@dataclass
class Applied:
    """A copy rewritten by the rules: ``tokens``, and per token the rule that made it (``None``: copied
    as it was) and the index in the original tokens to restart from if that rule is dropped there."""

    tokens: list[int]
    made_by: list[Rule | None]
    restart: list[int]


class Substitutions:
    """The rules one generation has learned, oldest first (at most :data:`MAX_RULES`)."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []

    def learn(self, left: int | None, replaced: list[int], written: list[int]) -> Rule | None:
        """Remember that the target wrote ``written`` where the copy had ``replaced``, after the copied
        token ``left`` (``None``: nothing copied before). Returns the rule, or ``None`` when there is
        nothing to learn (no change, an insertion with no left token, spans over the limits). A rule for
        the same pattern replaces the old one."""
        if replaced == written or len(replaced) > MAX_PATTERN_TOKENS or len(written) > MAX_REPLACEMENT_TOKENS:
            return None
        if replaced:
            rule = Rule(tuple(replaced), tuple(written))
        elif left is None:
            return None
        else:
            rule = Rule((left,), (left, *written))
        self.rules = [r for r in self.rules if r.pattern != rule.pattern][-(MAX_RULES - 1):] + [rule]
        return rule

    def drop(self, rule: Rule) -> None:
        """Forget ``rule`` (the target did not write what it made)."""
        self.rules = [r for r in self.rules if r is not rule]

    def apply(self, tokens: list[int], offset: int = 0) -> Applied:
        """``tokens`` with every rule applied left to right, the longest pattern first where several
        match; ``offset`` is added to the restart indices (``tokens`` starts there in the original)."""
        by_first: dict[int, list[Rule]] = {}
        for rule in sorted(self.rules, key=lambda r: -len(r.pattern)):
            by_first.setdefault(rule.pattern[0], []).append(rule)
        out = Applied([], [], [])
        deleted: tuple[Rule, int] | None = None  # a deletion just applied, and where to restart if it is dropped
        i = 0
        while i < len(tokens):
            rule = next((r for r in by_first.get(tokens[i], ())
                         if tuple(tokens[i: i + len(r.pattern)]) == r.pattern), None)
            if rule is None:
                # The token after a deletion stands for it: dropped there, the deleted tokens come back.
                out.tokens.append(tokens[i])
                out.made_by.append(deleted[0] if deleted else None)
                out.restart.append(deleted[1] if deleted else offset + i)
                deleted, i = None, i + 1
                continue
            kept = rule.kept
            for j, token in enumerate(rule.replacement):
                out.tokens.append(token)
                out.made_by.append(None if j < kept else rule)
                out.restart.append(offset + i + min(j, kept))
            deleted = (rule, offset + i + kept) if len(rule.replacement) == kept else None
            i += len(rule.pattern)
        return out
