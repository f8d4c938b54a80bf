"""Type-through cache: when the user types the start of the completion on show, answer with the rest.

Editors ask again after every keystroke. If the document is exactly what it was when a completion was
answered, plus characters typed at the cursor that match that completion's start, the rest of the
same completion is the answer: no model call, no queue. One entry per document; a document whose
text differs anywhere else misses. Offsets are code points into the document text.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class _Shown:
    offset: int  # cursor offset the completion was computed for
    before: str  # document text before that cursor
    after: str  # document text after that cursor
    insert_text: str  # the completion, in the document's line ending


class TypeThroughCache:
    """Last answered completion per document URI."""

    def __init__(self) -> None:
        self._entries: dict[str, _Shown] = {}

    def remember(self, uri: str, text: str, offset: int, insert_text: str) -> None:
        """Record that ``insert_text`` was answered for ``text`` with the cursor at ``offset``."""
        if insert_text:
            self._entries[uri] = _Shown(offset, text[:offset], text[offset:], insert_text)

    def lookup(self, uri: str, text: str, offset: int) -> str | None:
        """The rest of the remembered completion if ``text`` is the remembered text with a prefix of
        it typed at the old cursor and the cursor now after it; ``None`` otherwise (also when the
        completion has been typed in full)."""
        entry = self._entries.get(uri)
        if entry is None or offset < entry.offset or len(text) - offset != len(entry.after):
            return None
        typed = text[entry.offset:offset]
        if (len(typed) >= len(entry.insert_text) or not entry.insert_text.startswith(typed)
                or text[offset:] != entry.after or not text.startswith(entry.before)):
            return None
        return entry.insert_text[len(typed):]

    def forget(self, uri: str) -> None:
        self._entries.pop(uri, None)
