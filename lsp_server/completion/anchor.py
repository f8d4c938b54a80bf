"""Prompt anchors: where a document's typed-tail prompt is cut, kept from keystroke to keystroke.

The typed-tail layout (``completion.promptLayout: "tail"``; EFIM, Wang et al. 2025, arXiv 2505.21889) is
``[header] <|fim_prefix|>`` text before the anchor ``<|fim_suffix|>`` text after the cursor
``<|fim_middle|>`` text typed since the anchor. While the user types at the cursor, the text before the
anchor and the text after the cursor stay what they were, so the KV cache up to ``<|fim_middle|>`` is
reused and only the typed tail is prefilled; in PSM every key changes the prefix's end and the whole
suffix after it is prefilled again.

An anchor is a line start, before the line's indentation: a prompt that ends inside indentation meets a
token boundary the model never saw in training, while a line start is one for Qwen2.5-Coder's
pre-tokeniser (the line break ends its pre-token). An anchor is kept while the cursor is at or after
it, the text before it and the text after the cursor are the ones it was set with, and the tail holds at
most ``max_lines`` line breaks (the ``completion.promptTailLines`` setting) and ``MAX_TAIL_CHARS`` characters; otherwise a new one is set at the
start of the cursor's line (the cursor left the typed run, text before it was deleted, the text after the
cursor changed, or the tail grew long).

While the user types along what the model wrote (or accepts it), the tail keeps the token ids of the last
prompt (:class:`KeptTail`) and the typed rest becomes the healed text the output must start with,
instead of being tokenised again: the prompt is then the last one, its KV cache and the last output are
reused whole, and the model's own tokens of its text are what it continues from.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from lsp_server.request import CompletionRequest

MAX_TAIL_CHARS = 600  # a longer typed tail is moved into the prefix (a new anchor)
MAX_ANCHORS = 16  # documents whose anchors are kept


@dataclass(frozen=True)
class Anchor:
    """One document's anchor: an offset (code points into the document text, a line start) and the
    document text before it and after the cursor when it was set or last confirmed."""

    offset: int
    before: str  # document text [0, offset)
    after: str  # document text after the cursor

    def holds(self, text: str, cursor: int, max_lines: int) -> bool:
        """Whether this anchor still serves a cursor at ``cursor`` in ``text`` (see the module docstring)."""
        if cursor < self.offset or cursor - self.offset > MAX_TAIL_CHARS:
            return False
        if len(text) - len(self.after) != cursor or not text.startswith(self.before) or not text.endswith(self.after):
            return False
        return text.count("\n", self.offset, cursor) <= max_lines


@dataclass(frozen=True)
class KeptTail:
    """The tail of a document's last prompt: its ids after ``<|fim_middle|>``, their text, and the text the
    model wrote after them (its healed start included)."""

    ids: tuple[int, ...]
    text: str
    written: str

    def serves(self, tail: str) -> bool:
        """Whether ``tail`` (model text typed since the anchor) extends these ids along what was written."""
        return tail.startswith(self.text) and self.written.startswith(tail[len(self.text):])


def fresh_anchor(text: str, line_start: int, cursor: int, max_lines: int) -> int:
    """Where a new anchor goes for a cursor at ``cursor`` on the line starting at ``line_start``:
    ``max_lines // 2`` line starts above it (fewer at the document's start or where the tail would pass
    half of ``MAX_TAIL_CHARS``), so that a new tail already holds the lines just written, which the model
    completes better after ``<|fim_middle|>`` than before the suffix (docs/performance.md#the-typed-tail-prompt),
    and may grow by as many before it moves again."""
    offset = line_start
    for _ in range(max_lines // 2):
        if offset == 0:
            break
        above = text.rfind("\n", 0, offset - 1) + 1
        if cursor - above > MAX_TAIL_CHARS // 2:
            break
        offset = above
    return offset


def _anchor_at(text: str, offset: int, cursor: int) -> Anchor:
    """The anchor at ``offset`` for a cursor at ``cursor`` in ``text``.

    Raises:
        ValueError: ``offset`` is after ``cursor``, outside ``text``, or not a line start.
    """
    if not 0 <= offset <= cursor <= len(text) or (offset and text[offset - 1] not in "\r\n"):
        raise ValueError(f"an anchor is a line start at or before the cursor: {offset}, cursor {cursor}")
    return Anchor(offset, text[:offset], text[cursor:])


class AnchorBook:
    """The anchors of the open documents (most recently used ``MAX_ANCHORS``). Model thread only."""

    def __init__(self):
        self._anchors: OrderedDict[str, Anchor] = OrderedDict()
        self._kept: dict[str, KeptTail] = {}
        self._spares: dict[str, Anchor] = {}  # set ahead for a likely next cursor (the next line)

    def anchor_for(self, request: CompletionRequest, spare: bool = False, max_lines: int = 0) -> int:
        """The anchor offset for ``request``'s cursor: the kept one when it holds, else the spare one
        when it holds (it becomes the kept one), else a new one (kept for the next request).
        ``max_lines``: the most line breaks a typed tail may hold before the anchor moves (0: a new anchor
        on every line); a new anchor is the line start ``max_lines // 2`` lines above the cursor's
        (:func:`fresh_anchor`). With ``spare``, for a cursor expected next (:meth:`lsp_server.model.session.
        ModelSession.prepare_ahead`): a new anchor for it, set as the spare and nothing else changed."""
        text, cursor, uri = request.document.text, request.offset, request.uri
        line_start = cursor - len(request.line_prefix)
        if spare:
            offset = fresh_anchor(text, line_start, cursor, max_lines)
            self._spares[uri] = _anchor_at(text, offset, cursor)
            return offset
        anchor = self._anchors.get(uri)
        if anchor is None or not anchor.holds(text, cursor, max_lines):
            held = self._spares.pop(uri, None)
            if held is not None and held.holds(text, cursor, max_lines):
                anchor = self.place(uri, text, held.offset, cursor)
            else:
                anchor = self.place(uri, text, fresh_anchor(text, line_start, cursor, max_lines), cursor)
        self._anchors.move_to_end(uri)
        return anchor.offset

    def would_move(self, request: CompletionRequest, max_lines: int) -> bool:
        """Whether a new anchor for ``request``'s cursor would lie after its document's kept anchor, which
        holds (a new one would shorten the tail: worth preparing in idle time); False without one."""
        if not self.holds_for(request, max_lines):
            return False
        text, cursor = request.document.text, request.offset
        return fresh_anchor(text, cursor - len(request.line_prefix), cursor, max_lines) > \
            self._anchors[request.uri].offset

    def holds_for(self, request: CompletionRequest, max_lines: int) -> bool:
        """Whether ``request``'s document has a kept anchor that serves its cursor."""
        anchor = self._anchors.get(request.uri)
        return anchor is not None and anchor.holds(request.document.text, request.offset, max_lines)

    def place(self, uri: str, text: str, offset: int, cursor: int) -> Anchor:
        """Set ``uri``'s anchor at ``offset`` (a line start at or before ``cursor``).

        Raises:
            ValueError: ``offset`` is after ``cursor``, outside ``text``, or not a line start.
        """
        anchor = self._anchors[uri] = _anchor_at(text, offset, cursor)
        self._kept.pop(uri, None)
        self._anchors.move_to_end(uri)
        while len(self._anchors) > MAX_ANCHORS:
            gone = self._anchors.popitem(last=False)[0]
            self._kept.pop(gone, None)
            self._spares.pop(gone, None)
        return anchor

    def kept_tail(self, uri: str) -> KeptTail | None:
        """The tail of ``uri``'s last prompt at its current anchor (see :meth:`keep`), or ``None``."""
        return self._kept.get(uri)

    def keep(self, uri: str, tail: KeptTail) -> None:
        """Remember the tail of the prompt just generated from, for requests at the same anchor."""
        if uri in self._anchors:
            self._kept[uri] = tail

    def forget(self, uri: str) -> None:
        self._anchors.pop(uri, None)
        self._kept.pop(uri, None)
        self._spares.pop(uri, None)
