"""N-gram (prompt lookup) drafting: propose what followed the last few tokens earlier on.

The longest recent n-gram of the committed tokens (``max_ngram`` down to ``min_ngram`` tokens) is
looked up in the committed tokens themselves and in extra token sources (other open buffers). The
tokens that followed its most recent earlier occurrence are the draft. The draft is deterministic,
so verification treats its draft probabilities as one-hot (Saxena 2023, "Prompt Lookup Decoding";
Yang et al. 2023, "Inference with Reference").

Lookup is a dictionary probe per n-gram length: each :class:`NgramIndex` maps every n-gram to the
position right after its most recent occurrence, built incrementally as tokens are appended.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from decoding.drafters.base import Draft, DraftContext
from decoding.tree import DraftTree


@dataclass(frozen=True)
class NgramConfig:
    """Match lengths of the n-gram drafter."""

    min_ngram: int = 2  # shortest suffix that may be matched, in tokens
    max_ngram: int = 6  # longest suffix tried first, in tokens

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")


class _Lookups:
    """``lookup`` and ``lookup_all`` in terms of a subclass's ``matches(suffix)``."""

    def matches(self, suffix: Sequence[int]):  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def lookup(self, suffix: Sequence[int]) -> tuple[int, int] | None:
        """The longest n-gram ending ``suffix`` found here, as ``(n, continuation position)`` of its
        most recent occurrence."""
        found = self.lookup_all(suffix)
        return (found[0], found[1][0]) if found else None

    def lookup_all(self, suffix: Sequence[int]) -> tuple[int, list[int]] | None:
        """The longest n-gram ending ``suffix`` found here and its continuation positions (distinct
        next tokens, most recent first)."""
        return next(self.matches(suffix), None)


class NgramIndex(_Lookups):
    """n-grams of one token sequence -> positions right after their most recent occurrences.

    Each n-gram keeps up to ``MAX_POSITIONS`` continuation positions with distinct next tokens, most
    recent first, so a lookup can offer several different continuations (a candidate tree) at a cost
    that does not grow with the sequence. Only n-grams followed by at least one token are indexed,
    so the sequence's own suffix never matches itself.
    """

    MAX_POSITIONS = 4

    def __init__(self, config: NgramConfig, tokens: Sequence[int] = ()):
        self.config = config
        self.tokens: list[int] = []
        # n-gram -> {next token: position of that next token}, least to most recent (dict order).
        self.next_positions: dict[tuple[int, ...], dict[int, int]] = {}
        self.extend(tokens)

    def extend(self, new_tokens: Sequence[int]) -> None:
        """Append tokens and index the n-grams that now have a continuation."""
        for token in new_tokens:
            end = len(self.tokens)  # the appended token continues the n-grams ending here
            for n in range(self.config.min_ngram, min(self.config.max_ngram, end) + 1):
                key = tuple(self.tokens[end - n : end])
                continuations = self.next_positions.get(key)
                if continuations is None:
                    self.next_positions[key] = {token: end}
                    continue
                continuations.pop(token, None)  # re-insert: now the most recent
                continuations[token] = end
                if len(continuations) > self.MAX_POSITIONS:
                    del continuations[next(iter(continuations))]  # drop the least recent
            self.tokens.append(token)

    def matches(self, suffix: Sequence[int]):
        """``(n, positions)`` for every n-gram length that ends ``suffix`` and occurs here, longest first."""
        top = min(self.config.max_ngram, len(suffix))
        for n in range(top, self.config.min_ngram - 1, -1):
            continuations = self.next_positions.get(tuple(suffix[len(suffix) - n :]))
            if continuations:
                yield n, list(reversed(continuations.values()))


_WORD = array("I").itemsize  # bytes per token id in a TokenBuffer


class TokenBuffer(_Lookups):
    """The committed tokens of one generation, searched directly instead of indexed.

    The ids live in a ``bytearray`` of machine words (``array("I")``), and an n-gram is found with
    ``bytes.rfind`` (C speed, no index to build): a new request's prompt costs a copy, not the
    per-token dictionary updates an :class:`NgramIndex` needs. Same lookup interface as
    :class:`NgramIndex`; for the long-lived extra sources the index stays the better structure.
    """

    MAX_POSITIONS = NgramIndex.MAX_POSITIONS
    MAX_PROBES = 64  # occurrences examined per n-gram length at most

    def __init__(self, config: NgramConfig, tokens: Sequence[int] = ()):
        self.config = config
        self.tokens: list[int] = list(tokens)
        self._bytes = bytearray(array("I", self.tokens).tobytes())

    def extend(self, new_tokens: Sequence[int]) -> None:
        self.tokens.extend(new_tokens)
        self._bytes.extend(array("I", new_tokens).tobytes())

    def matches(self, suffix: Sequence[int]):
        """``(n, continuation positions)`` per matching length, longest first; positions most recent
        first with distinct next tokens; an occurrence needs a token after it."""
        top = min(self.config.max_ngram, len(suffix))
        data, tokens = self._bytes, self.tokens
        for n in range(top, self.config.min_ngram - 1, -1):
            pattern = array("I", suffix[len(suffix) - n :]).tobytes()
            end = (len(tokens) - 1) * _WORD  # the match must end before the last token
            positions: list[int] = []
            seen: set[int] = set()
            for _ in range(self.MAX_PROBES):
                at = data.rfind(pattern, 0, end)
                if at < 0:
                    break
                end = at + len(pattern) - 1  # next search: strictly earlier occurrences
                if at % _WORD:
                    continue  # straddles token boundaries
                position = at // _WORD + n
                if tokens[position] not in seen:
                    seen.add(tokens[position])
                    positions.append(position)
                    if len(positions) >= self.MAX_POSITIONS:
                        break
            if positions:
                yield n, positions


class NgramDrafter:
    """Drafter proposing continuations of the longest matching recent n-gram.

    Args:
        config: n-gram lengths.
        sources: extra token sequences (or prebuilt :class:`NgramIndex` objects with the same
            config, to skip re-indexing) by name, e.g. other open buffers; searched after the
            committed tokens. On equal match length the committed tokens win, then sources in order.
    """

    name = "ngram"

    def __init__(self, config: NgramConfig | None = None,
                 sources: dict[str, Sequence[int] | NgramIndex] | None = None,
                 max_candidates: int = 1, max_tree_nodes: int = 32):
        self.config = config or NgramConfig()
        self.max_candidates = max_candidates  # > 1: propose a tree of distinct continuations
        self.max_tree_nodes = max_tree_nodes
        self.sources = {
            name: tokens if isinstance(tokens, NgramIndex) and tokens.config == self.config
            else NgramIndex(self.config, tokens.tokens if isinstance(tokens, NgramIndex) else tokens)
            for name, tokens in (sources or {}).items()
        }
        self._context = TokenBuffer(self.config)

    def _sync_context(self, token_ids: list[int]) -> None:
        held = self._context.tokens
        if len(held) <= len(token_ids) and token_ids[: len(held)] == held:
            self._context.extend(token_ids[len(held) :])
        else:
            self._context = TokenBuffer(self.config, token_ids)

    def propose(self, context: DraftContext) -> Draft | None:
        """Up to ``context.max_tokens`` tokens that followed the best match, or ``None``."""
        if context.max_tokens <= 0:
            return None
        self._sync_context(context.token_ids)
        suffix = context.token_ids[-self.config.max_ngram :]
        best: tuple[int, str, NgramIndex, int] | None = None
        for source_name, index in (("context", self._context), *self.sources.items()):
            found = index.lookup(suffix)
            if found is not None and (best is None or found[0] > best[0]):
                best = (found[0], source_name, index, found[1])
        if best is None:
            return None
        _, source_name, index, position = best
        tokens = index.tokens[position : position + context.max_tokens]
        if self.max_candidates > 1:
            tree = self._tree(suffix, context.max_tokens)
            if tree is not None and not tree.chain():
                return Draft(tokens=list(tree.tokens), draft_probs=None, source=f"ngram-tree:{source_name}", tree=tree)
        return Draft(tokens=tokens, draft_probs=None, source=f"ngram:{source_name}") if tokens else None

    def _tree(self, suffix: list[int], depth: int) -> DraftTree | None:
        """Up to ``max_candidates`` continuations with distinct first tokens, best first (longer
        match, then the committed tokens before other sources, then more recent), as a trie."""
        matches = []
        for order, index in enumerate((self._context, *self.sources.values())):
            for n, positions in index.matches(suffix):
                matches.append((-n, order, index, positions))
        matches.sort(key=lambda m: (m[0], m[1]))
        candidates: list[list[int]] = []
        first_tokens: set[int] = set()
        for _, _, index, positions in matches:
            for position in positions:
                candidate = index.tokens[position : position + depth]
                if candidate and candidate[0] not in first_tokens:
                    first_tokens.add(candidate[0])
                    candidates.append(candidate)
                if len(candidates) >= self.max_candidates:
                    return DraftTree.from_candidates(candidates, self.max_tree_nodes)
        return DraftTree.from_candidates(candidates, self.max_tree_nodes) if candidates else None

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """N-gram lookup keeps no learned state; acceptance is counted by the generation stats."""
