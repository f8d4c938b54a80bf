"""The user's recent edits per document, for next-edit suggestions (``speclsp/nextEdit``).

Fed from ``textDocument/didChange`` (:mod:`lsp_server.features.document_sync`): each change is kept as
the text of the lines it touched, before and after (never a diff of the whole document). A burst of
typing is one edit: a change within ``COALESCE_S`` seconds of the previous one whose lines overlap or
touch the previous edit's lines is merged into it. Each document keeps its last ``MAX_EDITS`` edits,
at most ``MAX_CHARS`` characters of before and after text in all (oldest dropped first); an edit that
ends where it started (typed, then deleted) is dropped. Only documents that received a change have a
history; closing a document forgets it.

Offsets are code points into the document text; the kept texts are model text (``\\n`` line breaks).
"""

from __future__ import annotations

import bisect
import difflib
import threading
import time
from dataclasses import dataclass

from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import to_model_text

COALESCE_S = 1.5  # changes closer together than this (seconds), on touching lines, are one edit
MAX_EDITS = 5  # edits kept per document
MAX_CHARS = 4000  # before + after characters kept per document, all edits together

#: (start, end, new text) of one applied content change, code points into the text as it was then.
Change = tuple[int, int, str]


@dataclass(frozen=True)
class Edit:
    """One coalesced edit: whole lines before and after it.

    ``start`` and ``end`` are code-point offsets into the document text after the edit: the start of
    the first touched line and the end of the last one (before its line break). ``line`` is the
    0-based line of ``start``.
    """

    before: str  # the touched lines before the edit (model text, no final line break)
    after: str  # the same lines after it
    start: int
    end: int
    line: int
    time: float  # time.monotonic() seconds of the last change merged in

    def diff(self, name: str = "file") -> str:
        """A unified diff (difflib) of this edit, its hunk header numbered as in the document."""
        lines = list(difflib.unified_diff(self.before.split("\n"), self.after.split("\n"), f"a/{name}",
                                          f"b/{name}", n=max(len(self.before), len(self.after)), lineterm=""))
        if len(lines) > 2:  # renumber the hunk from the document's line
            count_before, count_after = self.before.count("\n") + 1, self.after.count("\n") + 1
            lines[2] = f"@@ -{self.line + 1},{count_before} +{self.line + 1},{count_after} @@"
        return "\n".join(lines)


def _line_span(document: Document, start: int, end: int) -> tuple[int, int, int]:
    """(line of ``start``, start of that line, end of ``end``'s line before its break), code points."""
    starts = document.lines.starts
    line = bisect.bisect_right(starts, start) - 1
    last = bisect.bisect_right(starts, end) - 1
    return line, starts[line], document.lines.line_end(last)


def changed_span(before_length: int, changes: list[Change]) -> tuple[int, int, int]:
    """Where a sequence of changes altered a text: (start, end in the text before, end in the text after).

    Everything before ``start`` and after the two ends is the same in both texts. The span covers
    every change (it may cover more than what differs).
    """
    low, high, length = None, None, before_length  # high: end of the span in the current text
    for start, end, text in changes:
        delta = len(text) - (end - start)
        low = start if low is None else min(low, start)
        high = (end if high is None else max(high, end)) + delta
        length += delta
    if low is None:
        return 0, 0, 0
    return low, before_length - (length - high), high


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b`` (a binary search over slice comparisons)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _trimmed(old: str, new: str, start: int, old_end: int, new_end: int) -> tuple[int, int, int]:
    """The span without the text that did not change at its ends, for a large span (a full-text
    change covers the whole document); a small span is returned as it is."""
    if old_end - start <= MAX_CHARS and new_end - start <= MAX_CHARS:
        return start, old_end, new_end
    a, b = old[start:old_end], new[start:new_end]
    head = _common_prefix(a, b)
    tail = _common_prefix(a[head:][::-1], b[head:][::-1])
    return start + head, old_end - tail, new_end - tail


class EditHistory:
    """One document's recent edits, oldest first."""

    def __init__(self) -> None:
        self.edits: list[Edit] = []

    def record(self, old: Document, new: Document, changes: list[Change], now: float | None = None) -> None:
        """Note that ``changes`` (as applied, in order) turned ``old`` into ``new``."""
        if not changes:
            return
        now = time.monotonic() if now is None else now
        start, old_end, new_end = _trimmed(old.text, new.text, *changed_span(len(old.text), changes))
        _, old_start, old_end = _line_span(old, start, old_end)
        line, new_start, new_end = _line_span(new, start, new_end)
        edit = Edit(to_model_text(old.text[old_start:old_end]), to_model_text(new.text[new_start:new_end]),
                    new_start, new_end, line, now)
        last = self.edits[-1] if self.edits else None
        # ``last`` is in ``old``'s coordinates; it touches this edit's lines when they overlap or are adjacent.
        if last is not None and now - last.time <= COALESCE_S and old_start <= last.end + 1 and old_end + 1 >= last.start:
            self.edits.pop()
            low, high = min(old_start, last.start), max(old_end, last.end)  # in ``old``
            before = to_model_text(old.text[low:last.start]) + last.before + to_model_text(old.text[last.end:high])
            delta = len(new.text) - len(old.text)
            line = bisect.bisect_right(new.lines.starts, low) - 1
            edit = Edit(before, to_model_text(new.text[low:high + delta]), low, high + delta, line, now)
        if edit.before != edit.after:
            self.edits.append(edit)
        self._bound()

    def _bound(self) -> None:
        del self.edits[:-MAX_EDITS]
        while sum(len(e.before) + len(e.after) for e in self.edits) > MAX_CHARS and len(self.edits) > 1:
            self.edits.pop(0)
        if self.edits and len(self.edits[0].before) + len(self.edits[0].after) > MAX_CHARS:
            self.edits.clear()  # one edit larger than the whole budget (a paste): too large to show

    def diffs(self, name: str = "file") -> list[str]:
        """The edits as unified diffs, oldest first."""
        return [edit.diff(name) for edit in self.edits]


class EditHistories:
    """Edit histories by document URI. Thread-safe (handlers write, the model thread reads)."""

    def __init__(self) -> None:
        self._histories: dict[str, EditHistory] = {}
        self._lock = threading.Lock()

    def record(self, old: Document, new: Document, changes: list[Change], now: float | None = None) -> None:
        with self._lock:
            self._histories.setdefault(new.uri, EditHistory()).record(old, new, changes, now)

    def diffs(self, uri: str, name: str = "file") -> list[str]:
        """The document's recent edits as unified diffs, oldest first (empty for one never edited)."""
        with self._lock:
            history = self._histories.get(uri)
            return history.diffs(name) if history is not None else []

    def has_edits(self, uri: str) -> bool:
        with self._lock:
            history = self._histories.get(uri)
            return history is not None and bool(history.edits)

    def forget(self, uri: str) -> None:
        with self._lock:
            self._histories.pop(uri, None)
