"""Type-through cache: when the user types the start of the completion on show, answer with the rest.

Editors ask again after every keystroke. If the document is exactly what it was when a completion was
answered, plus characters typed at the cursor that match that completion's start, the rest of the
same completion is the answer: no model call, no queue. One entry per document; a document whose
text differs anywhere else misses. Offsets are code points into the document text.

An entry holds the answered snapshot's text itself (shared with that snapshot, not copied), and a
lookup compares in C (``str.startswith`` / ``str.endswith``, after cheap length checks): in a 10 MB
document a keystroke costs a few memory-speed comparisons, and the cache keeps no copies of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class _Shown:
    offset: int  # cursor offset the completion was computed for
    text: str  # the document text it was computed for (the snapshot's own string)
    insert_text: str  # the completion, in the document's line ending


class TypeThroughCache:
    """Last answered completion per document URI."""

    def __init__(self) -> None:
        self._entries: dict[str, _Shown] = {}

    def remember(self, uri: str, text: str, offset: int, insert_text: str) -> None:
        """Record that ``insert_text`` was answered for ``text`` with the cursor at ``offset``."""
        if insert_text:
            self._entries[uri] = _Shown(offset, text, insert_text)

    def lookup(self, uri: str, text: str, offset: int) -> str | None:
        """The rest of the remembered completion if ``text`` is the remembered text with a prefix of
        it typed at the old cursor and the cursor now after it; ``None`` otherwise (also when the
        completion has been typed in full)."""
        entry = self._entries.get(uri)
        if entry is None or offset < entry.offset or len(text) - offset != len(entry.text) - entry.offset:
            return None
        typed = text[entry.offset:offset]
        if len(typed) >= len(entry.insert_text) or not entry.insert_text.startswith(typed):
            return None
        if not _same_around(entry.text, entry.offset, text, offset):
            return None
        return entry.insert_text[len(typed):]

    def forget(self, uri: str) -> None:
        self._entries.pop(uri, None)


def _same_around(old: str, old_offset: int, new: str, new_offset: int) -> bool:
    """Whether ``new`` holds ``old``'s text before ``old_offset`` at its start and ``old``'s text from
    ``old_offset`` on from ``new_offset`` on (the caller has checked the lengths): one copy of ``old``
    in two slices, two comparisons in C."""
    return new.startswith(old[:old_offset]) and new.endswith(old[old_offset:], new_offset)
