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

from collections.abc import Sequence
from dataclasses import dataclass

from decoding.drafters.base import Draft, DraftContext


@dataclass(frozen=True)
class NgramConfig:
    """Match lengths of the n-gram drafter."""

    min_ngram: int = 2  # shortest suffix that may be matched, in tokens
    max_ngram: int = 6  # longest suffix tried first, in tokens

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")


class NgramIndex:
    """n-grams of one token sequence -> position right after their most recent occurrence.

    Only n-grams followed by at least one token are indexed, so the sequence's own suffix never
    matches itself.
    """

    def __init__(self, config: NgramConfig, tokens: Sequence[int] = ()):
        self.config = config
        self.tokens: list[int] = []
        self.next_position: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, new_tokens: Sequence[int]) -> None:
        """Append tokens and index the n-grams that now have a continuation."""
        for token in new_tokens:
            end = len(self.tokens)  # the appended token continues the n-grams ending here
            for n in range(self.config.min_ngram, min(self.config.max_ngram, end) + 1):
                self.next_position[tuple(self.tokens[end - n : end])] = end
            self.tokens.append(token)

    def lookup(self, suffix: Sequence[int]) -> tuple[int, int] | None:
        """The longest n-gram ending ``suffix`` found here, as ``(n, continuation position)``."""
        top = min(self.config.max_ngram, len(suffix))
        for n in range(top, self.config.min_ngram - 1, -1):
            position = self.next_position.get(tuple(suffix[len(suffix) - n :]))
            if position is not None:
                return n, position
        return None


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
                 sources: dict[str, Sequence[int] | NgramIndex] | None = None):
        self.config = config or NgramConfig()
        self.sources = {
            name: tokens if isinstance(tokens, NgramIndex) and tokens.config == self.config
            else NgramIndex(self.config, tokens.tokens if isinstance(tokens, NgramIndex) else tokens)
            for name, tokens in (sources or {}).items()
        }
        self._context = NgramIndex(self.config)

    def _sync_context(self, token_ids: list[int]) -> None:
        indexed = self._context.tokens
        if len(indexed) <= len(token_ids) and token_ids[: len(indexed)] == indexed:
            self._context.extend(token_ids[len(indexed) :])
        else:
            self._context = NgramIndex(self.config, token_ids)

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
        return Draft(tokens=tokens, draft_probs=None, source=f"ngram:{source_name}") if tokens else None

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """N-gram lookup keeps no learned state; acceptance is counted by the generation stats."""
