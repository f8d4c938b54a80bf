"""Many named token sources (open buffers, parts of the current document, repository files) in one
n-gram table, for the n-gram drafter.

One dictionary maps each n-gram (``min_ngram`` to ``max_ngram`` tokens) to the places it was followed
by a token, across all sources: ``{(source, next token): position}``, least to most recently indexed.
A lookup is one probe per n-gram length and reads at most ``max_per_key`` entries, so its cost does
not grow with the number of sources or their size (hashed n-grams to positions; a suffix automaton
would answer longer matches but cannot drop one source's text without a rebuild).

Updates are per source: :meth:`NgramStore.put` indexes a new or changed source (its old text is
removed first) and :meth:`NgramStore.remove` takes a source's entries out again, so a removed or
edited source never proposes its old text. Each n-gram keeps the ``max_per_key`` most recent entries
(distinct source and next token); entries of other sources evicted by that cap do not come back when
a source is removed.

Indexing costs time per token, a spike where it happens on a request's path
(docs/decisions.md#ngram-index). A source put with ``indexed=False`` is searched instead
(:class:`decoding.drafters.token_buffer.TokenBuffer`, ``bytes.rfind``): free to add and remove, and
a lookup scans its tokens, so it suits text that changes in steps while the user types (the parts of
the current document outside the prompt) and is not too large.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from decoding.drafters.token_buffer import TokenBuffer


@dataclass
class _Source:
    version: object
    tokens: list[int]
    retain: bool = False  # may stay after it is no longer wanted (see NgramStore.sync)


class NgramStore:
    """The n-gram table of a set of named token sources.

    Args:
        config: n-gram lengths (a :class:`decoding.types.NgramConfig`).
        max_per_key: entries kept per n-gram, most recent first.
    """

    def __init__(self, config, max_per_key: int = 8, max_retained_tokens: int = 200_000):
        if max_per_key < 1:
            raise ValueError(f"max_per_key must be >= 1, got {max_per_key}")
        self.config = config
        self.max_per_key = max_per_key
        self.max_retained_tokens = max_retained_tokens
        self._sources: dict[str, _Source] = {}
        self._table: dict[tuple[int, ...], dict[tuple[str, int], int]] = {}
        self._searched: dict[str, TokenBuffer] = {}  # sources put with indexed=False

    def __contains__(self, name: str) -> bool:
        return name in self._sources

    def __len__(self) -> int:
        return len(self._sources)

    def names(self) -> list[str]:
        """Source names, least to most recently indexed or wanted."""
        return list(self._sources)

    def version(self, name: str) -> object:
        """The version ``name`` was indexed at (``KeyError`` when it is not here)."""
        return self._sources[name].version

    def tokens(self, name: str) -> list[int]:
        """The token ids of source ``name`` (``KeyError`` when it is not here)."""
        return self._sources[name].tokens

    def total_tokens(self) -> int:
        return sum(len(s.tokens) for s in self._sources.values())

    def _keys(self, tokens: list[int]) -> Iterator[tuple[tuple[int, ...], int, int]]:
        """(n-gram, next token, its position) for every n-gram of ``tokens`` followed by a token."""
        low, high = self.config.min_ngram, self.config.max_ngram
        for end in range(low, len(tokens)):
            for n in range(low, min(high, end) + 1):
                yield tuple(tokens[end - n : end]), tokens[end], end

    def put(self, name: str, version: object, tokens: Sequence[int], indexed: bool = True) -> bool:
        """Index ``tokens`` as source ``name`` at ``version``; a different earlier version is removed
        first. Returns whether anything changed (``False``: that version is already indexed).
        ``indexed=False``: the source is searched at lookup instead of indexed (see the module notes)."""
        held = self._sources.get(name)
        if held is not None and held.version == version:
            return False
        if held is not None:
            self.remove(name)
        source = _Source(version, list(tokens))
        self._sources[name] = source
        if not indexed:
            self._searched[name] = TokenBuffer(self.config, source.tokens)
            return True
        table, cap = self._table, self.max_per_key
        for key, next_token, position in self._keys(source.tokens):
            entries = table.get(key)
            if entries is None:
                table[key] = {(name, next_token): position}
                continue
            entry = (name, next_token)
            entries.pop(entry, None)  # re-insert: now the most recent
            entries[entry] = position
            if len(entries) > cap:
                del entries[next(iter(entries))]  # drop the least recent
        return True

    def remove(self, name: str) -> bool:
        """Take source ``name`` out of the table; ``False`` when it was not here."""
        source = self._sources.pop(name, None)
        if source is None:
            return False
        if self._searched.pop(name, None) is not None:
            return True
        table = self._table
        for key, next_token, _ in self._keys(source.tokens):
            entries = table.get(key)
            if entries is not None and entries.pop((name, next_token), None) is not None and not entries:
                del table[key]
        return True

    def sync(self, wanted: Mapping[str, tuple[object, Sequence[int] | None]], encode=None,
             retain: frozenset[str] | set[str] = frozenset(), drop: frozenset[str] | set[str] = frozenset(),
             searched: frozenset[str] | set[str] = frozenset()) -> None:
        """Make the store hold ``wanted`` (``{name: (version, tokens)}``).

        New sources and ones at another version are indexed. Sources not in ``wanted`` are removed,
        except those named in ``retain`` when they were last wanted: they stay (least recently wanted
        first out beyond ``max_retained_tokens``), so a repository file that leaves and re-enters the
        caller's selection is not indexed again. Retain only sources whose changes the caller reports
        with :meth:`remove` (e.g. files under a file watcher); names in ``drop`` go in any case (e.g. a
        retained file that is now open in the editor, whose buffer is what counts). With ``encode``,
        ``tokens`` may be text, encoded only when that source needs indexing. Sources named in
        ``searched`` are put with ``indexed=False``.
        """
        retained = 0
        for name in reversed(list(self._sources)):  # most recently indexed or wanted first
            if name in wanted:
                continue
            source = self._sources[name]
            if source.retain and name not in drop and retained + len(source.tokens) <= self.max_retained_tokens:
                retained += len(source.tokens)
            else:
                self.remove(name)
        for name, (version, content) in wanted.items():
            held = self._sources.get(name)
            if held is None or held.version != version:
                self.put(name, version, encode(content) if encode is not None else content, name not in searched)
            else:  # still wanted: now the most recently wanted
                self._sources[name] = self._sources.pop(name)
            self._sources[name].retain = name in retain

    def matches(self, suffix: Sequence[int]) -> Iterator[tuple[int, list[tuple[str, int]]]]:
        """``(n, [(source, continuation position), ...])`` for every n-gram length ending ``suffix``
        that occurs here, longest first; places most recently indexed source first (within a
        source, most recent first), with distinct next tokens, at most ``max_per_key`` of them."""
        top = min(self.config.max_ngram, len(suffix))
        rank = {name: i for i, name in enumerate(self._sources)} if self._searched else None
        for n in range(top, self.config.min_ngram - 1, -1):
            entries = self._table.get(tuple(suffix[len(suffix) - n :]))
            found = [(name, next_token, position) for (name, next_token), position in reversed(entries.items())] \
                if entries else []
            if rank is not None:
                for name, buffer in self._searched.items():
                    found += [(name, buffer.tokens[p], p) for p in buffer.positions(suffix, n)]
                found.sort(key=lambda place: -rank[place[0]])  # stable: each source keeps its own order
            if not found:
                continue
            seen: set[int] = set()
            places = []
            for name, next_token, position in found:
                if next_token not in seen:
                    seen.add(next_token)
                    places.append((name, position))
                    if len(places) >= self.max_per_key:
                        break
            yield n, places
