"""Minimal text edits between an old and a new text, and their LSP form.

:func:`minimal_edits` compares the two texts as tokens (words, runs of spaces, single other
characters) with :class:`difflib.SequenceMatcher` and merges changes separated by little unchanged
text, so a renamed parameter gives one edit per occurrence, not one per character. Offsets are code
points; :func:`to_text_edits` converts them once, to the negotiated position encoding.
"""

from __future__ import annotations

import difflib
import re

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lsp_server.workspace.positions import LineIndex

#: (start, end, new text): replace ``text[start:end]`` with the new text; code points.
Replacement = tuple[int, int, str]

_TOKEN = re.compile(r"\w+|[ \t]+|\r\n|.", re.DOTALL)
MERGE_GAP_CHARS = 3  # changes separated by at most this much unchanged text (no line break) become one


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def minimal_edits(old: str, new: str, base_offset: int = 0) -> list[Replacement]:
    """Non-overlapping replacements, in order, that turn ``old`` into ``new``.

    Args:
        base_offset: added to every offset (where ``old`` starts in its document).
    Returns:
        ``[]`` when the texts are equal; ``apply_edits(old, minimal_edits(old, new)) == new`` always.
    """
    if old == new:
        return []
    a, b = _tokens(old), _tokens(new)
    a_starts, b_starts = _starts(a), _starts(b)
    edits: list[list] = []  # [start, end, new text], offsets into old
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        start, end, text = a_starts[i1], a_starts[i2], new[b_starts[j1]:b_starts[j2]]
        if edits:
            gap = old[edits[-1][1]:start]
            if len(gap) <= MERGE_GAP_CHARS and "\n" not in gap:
                edits[-1][1] = end
                edits[-1][2] += gap + text
                continue
        edits.append([start, end, text])
    return [(base_offset + start, base_offset + end, text) for start, end, text in edits]


def _starts(tokens: list[str]) -> list[int]:
    """Offsets of each token and of the end (``len(tokens) + 1`` values)."""
    starts, at = [0], 0
    for token in tokens:
        at += len(token)
        starts.append(at)
    return starts


def apply_edits(text: str, edits: list[Replacement]) -> str:
    """``text`` with non-overlapping ``edits`` applied (offsets into ``text``, any order).

    Raises:
        ValueError: edits overlap or fall outside ``text``.
    """
    out, at = [], 0
    for start, end, new_text in sorted(edits):
        if start < at or end < start or end > len(text):
            raise ValueError(f"edit ({start}, {end}) overlaps another or lies outside the text ({len(text)})")
        out += [text[at:start], new_text]
        at = end
    out.append(text[at:])
    return "".join(out)


def to_text_edits(edits: list[Replacement], lines: LineIndex, codec: PositionCodec) -> list[types.TextEdit]:
    """LSP ``TextEdit`` s of ``edits`` (code points into ``lines.text``), in ``codec``'s units."""
    return [types.TextEdit(range=types.Range(start=lines.position_at(start, codec), end=lines.position_at(end, codec)),
                           new_text=text) for start, end, text in edits]


def inline_replacement(text: str, edits: list[Replacement], cursor: int) -> Replacement | None:
    """The edits as one replacement from the cursor on, when the whole change is at or after the cursor on
    its line (what an inline completion item can show: ghost text that replaces ``text[cursor:end]``).

    Args:
        text: the document the edits apply to.
        edits: non-overlapping, in order (as :func:`minimal_edits` gives them).
        cursor: code-point offset into ``text``.
    Returns:
        ``(cursor, end, new_text)``, or ``None`` when there are no edits or one starts before the cursor
        or reaches past the cursor's line (inserted text may span lines).
    """
    if not edits or not 0 <= cursor <= len(text):
        return None
    line_end = text.find("\n", cursor)
    line_end = len(text) if line_end < 0 else line_end
    if text[line_end - 1:line_end] == "\r":
        line_end -= 1
    if edits[0][0] < cursor or edits[-1][1] > line_end:
        return None
    end = edits[-1][1]
    return cursor, end, apply_edits(text[cursor:end], [(s - cursor, e - cursor, new) for s, e, new in edits])
