"""Prompt tokenisation reused from one keystroke to the next.

Between two completion requests of one document, the prompt's prefix window usually differs only
near its end (the user typed a few characters) and its suffix not at all. Tokenising the whole
window again costs time on every request; tokenising only from the edit on costs a small fraction of
that (docs/decisions.md#prompt-tokens).

Why a spliced tokenisation equals a full one: a fast tokenizer splits text into pre-tokens (for
byte-level BPE, matches of a regular expression that looks at most one character ahead and never
behind) and runs BPE inside each pre-token. The pre-tokens that end more than a character before the
first changed character are the same in both texts, and so are their tokens; tokenising again from
the start of a pre-token restarts the scan where the full scan also started a match. Added tokens
(``<|fim_prefix|>`` and friends) are matched in the text before pre-tokenisation, so the reuse stops
that many characters short of the change as well. Other tokenizer families (a SentencePiece
``Metaspace`` that marks the first word, for example) could still differ when restarted, so every
splice is checked: the re-tokenised text starts a few pre-tokens early, and those tokens must equal
the cached ones, or the whole text is tokenised again.

A document tokenised once as a whole (:meth:`PromptEncoder.seed`, when it is opened) also serves the
first request's windows, which start inside it: tokenising again from a window's start, the scan
falls back in step with the document's pre-tokens within a few of them, and from there on the
document's tokens are the window's. That point is checked the same way before the tokens are used.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field

from decoding.types import common_prefix_length
from lsp_server.workspace.names import file_name

_OVERLAP_WORDS = 4  # pre-tokens tokenised again before the reuse point, and compared with the cache
_SLOTS = 40  # cached texts (five per document: the whole, prefix window, suffix, the parts above and below)


@dataclass(frozen=True)
class Encoded:
    """A text's tokens: ids, (start, end) character offsets, and each token's pre-token index.

    The offsets count from ``base`` characters before the text: tokens taken from a whole document
    keep the document's offsets (shifting tens of thousands of them per request would cost more than
    the tokenising saved), and :meth:`relative` shifts them when a caller needs them.
    """

    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    words: list[int | None]
    base: int = 0

    def relative(self) -> "Encoded":
        """The same tokens with offsets counted from the text's start."""
        if not self.base:
            return self
        offsets = [(a - self.base, b - self.base) for a, b in self.offsets]
        return Encoded(self.text, self.ids, offsets, self.words)


@dataclass(frozen=True)
class SourceKey:
    """The one name of a text the server tokenises or drafts from: a document (or file) by URI, or a
    part of it. Keys of the prompt encoder's cache and of the engine's n-gram sources.

    Its text (``str``, as in the per-source statistics: ``ngram:pkg/app.py#above``) is ``label``, the
    document's short name (:mod:`lsp_server.workspace.names`), and the part; never the URI.
    """

    uri: str
    part: str = "document"  # document | prefix | suffix (the prompt's windows) | above | below (outside them)
    label: str = field(default="", compare=False)  # the short name; "": the file's name

    def __str__(self) -> str:
        name = self.label or file_name(self.uri)
        return name if self.part == "document" else f"{name}#{self.part}"


class PromptEncoder:
    """Tokenises prompt parts, reusing the cached tokens of the previous text under the same key.

    Not thread-safe: the model worker thread is its only user.

    Args:
        tokenizer: a transformers tokenizer; without a fast backend every call tokenises in full.
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
        self._margin = 2 + max((len(token) for token in added), default=0)  # lookahead + added tokens
        self._cache: OrderedDict[object, Encoded] = OrderedDict()
        self.reused_tokens = 0  # tokens taken from the cache (for tests and tracing)

    def _full(self, text: str) -> Encoded:
        if self._backend is not None:
            encoding = self._backend.encode(text, add_special_tokens=False)
            return Encoded(text, list(encoding.ids), list(encoding.offsets), list(encoding.word_ids))
        encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        ids = list(encoded["input_ids"])
        return Encoded(text, ids, [tuple(o) for o in encoded["offset_mapping"]], list(range(len(ids))))

    def _spliced(self, old: Encoded, text: str) -> Encoded | None:
        safe = common_prefix_length(old.text, text) - self._margin  # characters whose tokens may be kept
        kept = bisect.bisect_right(old.offsets, safe + old.base, key=_end)  # old tokens ending at or before `safe`
        if kept == 0:
            return None
        last_word = old.words[kept - 1]
        if last_word is not None and kept < len(old.words) and old.words[kept] == last_word:
            while kept > 0 and old.words[kept - 1] == last_word:  # a pre-token straddles: drop all of it
                kept -= 1
        restart, words_seen = kept, 0
        while restart > 0 and words_seen < _OVERLAP_WORDS:  # back up a few whole pre-tokens to compare
            word = old.words[restart - 1]
            while restart > 0 and old.words[restart - 1] == word:
                restart -= 1
            words_seen += 1
        if restart == kept:
            return None
        start = old.offsets[restart][0] - old.base
        tail = self._full(text[start:])
        overlap = kept - restart
        at = start + old.base
        shifted = [(a + at, b + at) for a, b in tail.offsets]
        if tail.ids[:overlap] != old.ids[restart:kept] or shifted[:overlap] != old.offsets[restart:kept]:
            return None  # this tokenizer does not restart cleanly here
        first_word = (old.words[restart - 1] + 1) if restart and old.words[restart - 1] is not None else 0
        words = [None if w is None else w + first_word for w in tail.words]
        self.reused_tokens += restart
        return Encoded(text, old.ids[:restart] + tail.ids, old.offsets[:restart] + shifted,
                       old.words[:restart] + words, old.base)

    def _rebased(self, document: Encoded, start: int, length: int) -> Encoded | None:
        """Tokens of about ``document.text[start:start + length]`` (whole tokens) from the document's
        own, or ``None`` when the restarted scan does not fall in step with them within a few
        pre-tokens. The result keeps the document's offsets (``base`` = ``start``)."""
        if document.base:
            return None
        first = bisect.bisect_left(document.offsets, (start, -1))  # the first token starting at or after `start`
        join = _past_words(document.words, first, 2)  # two whole pre-tokens in: past the restart's effects
        check = _past_words(document.words, join, _OVERLAP_WORDS)  # a few more, compared
        if check == join:
            return None
        head = self._full(document.text[start:document.offsets[check - 1][1]])
        shifted = [(a + start, b + start) for a, b in head.offsets]
        try:
            at = shifted.index(document.offsets[join])
        except ValueError:
            return None
        if (head.ids[at:] != document.ids[join:check] or shifted[at:] != document.offsets[join:check]
                or _word_breaks(head.words[at:]) != _word_breaks(document.words[join:check])):
            return None
        end = max(check, bisect.bisect_right(document.offsets, (start + length + self._margin, 2**62)))
        # the head's pre-token numbers, moved to run into the document's
        shift = (document.words[join] or 0) - (head.words[at] or 0)
        words = [None if w is None else w + shift for w in head.words[:at]] + document.words[join:end]
        self.reused_tokens += end - join
        return Encoded(document.text[start:document.offsets[end - 1][1]], head.ids[:at] + document.ids[join:end],
                       shifted[:at] + document.offsets[join:end], words, start)

    def _from_document(self, origin: tuple[object, int], length: int) -> Encoded | None:
        document = self._cache.get(origin[0])
        if document is None:
            return None
        start = origin[1] if origin[1] >= 0 else len(document.text) + origin[1]
        if not 0 <= start <= len(document.text):
            return None
        self._cache.move_to_end(origin[0])
        return self._rebased(document, start, length)

    def forget(self, uri: str) -> None:
        """Drop every text cached under a :class:`SourceKey` of ``uri`` (the document was closed)."""
        for key in [k for k in self._cache if isinstance(k, SourceKey) and k.uri == uri]:
            del self._cache[key]

    def seed(self, key: object, text: str) -> None:
        """Tokenise a whole document under ``key``, for :meth:`encode` calls that name it as ``origin``."""
        self.encode(key, text)

    def holds(self, key: object) -> bool:
        """Whether tokens are cached under ``key``."""
        return key in self._cache

    def encode(self, key: object, text: str, origin: tuple[object, int] | None = None,
               ) -> tuple[list[int], list[tuple[int, int]]]:
        """``(ids, offsets)`` of ``text`` (no special tokens added), as a full tokenisation gives them;
        reuses the tokens cached under ``key`` where the texts agree. Callers must not modify them.

        Args:
            origin: ``(document key, offset)``: where ``text`` probably starts in a document given to
                :meth:`seed` (a negative offset counts from the document's end, for text below an
                edit); its tokens serve when less than half of ``text`` begins as the one cached
                under ``key`` does (nothing cached yet, or the text moved).
        """
        encoded = self._encode(key, text, origin)
        if encoded.base:
            encoded = self._cache[key] = encoded.relative()
        return encoded.ids, encoded.offsets

    def ids(self, key: object, text: str, origin: tuple[object, int] | None = None) -> list[int]:
        """The ids of :meth:`encode`, without shifting offsets (cheaper for a large part of a document)."""
        return self._encode(key, text, origin).ids

    def _encode(self, key: object, text: str, origin: tuple[object, int] | None) -> Encoded:
        old = self._cache.pop(key, None)
        encoded = None
        if self._backend is not None:
            shared = common_prefix_length(old.text, text) if old is not None else 0
            if shared < len(text) // 2 and origin is not None:  # the text moved: try the document's tokens
                rebased = self._from_document(origin, len(text))
                if rebased is not None and common_prefix_length(rebased.text, text) > shared:
                    old = rebased
            if old is not None:
                encoded = old if old.text == text else self._spliced(old, text)
        if encoded is None:
            encoded = self._full(text)
        self._cache[key] = encoded
        while len(self._cache) > _SLOTS:
            self._cache.popitem(last=False)
        return encoded


def _past_words(words: list[int | None], index: int, count: int) -> int:
    """The token index ``count`` whole pre-tokens after ``index`` (or the end)."""
    for _ in range(count):
        if index >= len(words):
            break
        word = words[index]
        while index < len(words) and words[index] == word:
            index += 1
    return index


def _end(offset: tuple[int, int]) -> int:
    return offset[1]


def _word_breaks(words: list[int | None]) -> list[bool]:
    """Whether each token starts a new pre-token (relative to the one before it)."""
    return [i == 0 or words[i] is None or words[i] != words[i - 1] for i in range(len(words))]
