"""Committed tokens searched directly: n-gram lookup by ``bytes.rfind`` over machine words.

Used for the tokens of the current generation (they change every round) and for draft sources that
are searched rather than indexed (:class:`decoding.drafters.ngram_store.NgramStore`): building the
buffer costs a copy, where an n-gram index costs several dictionary updates per token.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from decoding.types import NgramConfig


_WORD = array("I").itemsize  # bytes per token id in a TokenBuffer


class TokenBuffer:
    """The committed tokens of one generation, searched directly instead of indexed.

    The ids live in a ``bytearray`` of machine words (``array("I")``), and an n-gram is found with
    ``bytes.rfind`` (C speed, no index to build): a new request's prompt costs a copy, not the
    per-token dictionary updates an index needs. For the long-lived extra sources the indexed
    :class:`decoding.drafters.ngram_store.NgramStore` is the better structure.
    """

    MAX_POSITIONS = 4  # continuations with distinct next tokens returned per n-gram length
    MAX_PROBES = 64  # occurrences examined per n-gram length at most

    def __init__(self, config: NgramConfig, tokens: Sequence[int] = ()):
        self.config = config
        self.tokens: list[int] = list(tokens)
        self._bytes = bytearray(array("I", self.tokens).tobytes())

    def extend(self, new_tokens: Sequence[int]) -> None:
        self.tokens.extend(new_tokens)
        self._bytes.extend(array("I", new_tokens).tobytes())

    def lookup(self, suffix: Sequence[int]) -> tuple[int, int] | None:
        """The longest n-gram ending ``suffix`` found here, as ``(n, continuation position)`` of its
        most recent occurrence."""
        found = next(self.matches(suffix), None)
        return (found[0], found[1][0]) if found else None

    def matches(self, suffix: Sequence[int]):
        """``(n, continuation positions)`` per matching length, longest first; positions most recent
        first with distinct next tokens; an occurrence needs a token after it."""
        top = min(self.config.max_ngram, len(suffix))
        for n in range(top, self.config.min_ngram - 1, -1):
            positions = self.positions(suffix, n)
            if positions:
                yield n, positions

    def positions(self, suffix: Sequence[int], n: int) -> list[int]:
        """Continuation positions of the last ``n`` tokens of ``suffix`` (see :meth:`matches`)."""
        data, tokens = self._bytes, self.tokens
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
        return positions
