"""How much of the document a next-edit rewrite covers: its region, widened to the lines around it that
the answer writes again.

Shown the file around the region, a model asked to rewrite a region that ends inside a statement or a
block often goes on past the region's end, writing the lines that follow it in the file (as they are, or
with the edit carried into them), and it sometimes begins with lines from above the region (an import
line above a function). Applied over the region alone, such an answer writes those lines a second time.
:func:`covered_span` aligns the answer's lines with the region and the lines around it (difflib, as
:mod:`lsp_server.next_edit.text_edits`) and widens the span to the outermost lines around the region that the
answer reproduces; the suggestion's edits are computed over that span, so a line written again is no
edit at all, and a line the answer changed past the region is an edit there. The model's output is not
touched: only where it is applied.
"""

from __future__ import annotations

import bisect
import difflib
import re

from lsp_server.workspace.documents import Document


def _good(tag: str, i1: int, i2: int, j1: int, j2: int) -> bool:
    """An alignment step that rewrites document lines one for one (the same or changed), dropping none."""
    return tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1)


def covered_span(document: Document, region_start: int, region_end: int, new_text: str) -> tuple[int, int, str]:
    """The span of the document that a rewrite of the region replaces, and its new text.

    Args:
        region_start: code points into ``document.text``: the start of the region's first line.
        region_end: the end of the region's last line, before its line break.
        new_text: the rewritten region (any line breaks).
    Returns:
        (start, end, text): ``start`` moved up to the first line above the region, ``end`` down to the last
        line below it, that the answer writes again (the same text but for trailing white space, in the
        document's order, and not only blank lines; at most as many lines each way as the answer has),
        through lines it rewrites one for one; where the answer leaves out or adds lines among those, the
        span stops before them and ``text`` drops the answer's lines beyond (they repeat lines the span
        no longer covers). Otherwise ``text`` is ``new_text``.
    """
    lines = document.lines
    breaks = re.findall(r"\r\n|\r|\n", new_text)
    new_lines = re.split(r"\r\n|\r|\n", new_text)
    new_keys = [line.rstrip() for line in new_lines]
    first = bisect.bisect_right(lines.starts, region_start) - 1
    last = bisect.bisect_right(lines.starts, region_end) - 1
    low = max(0, first - len(new_keys))
    keys = [lines.line_text(i).rstrip() for i in range(low, min(lines.line_count, last + 1 + len(new_keys)))]
    top, bottom = first - low, last + 1 - low  # the region is keys[top:bottom]
    ops = difflib.SequenceMatcher(None, keys, new_keys, autojunk=False).get_opcodes()
    seen = [(i1, i2) for tag, i1, i2, _, _ in ops if tag == "equal"]
    above = min((i for i1, i2 in seen for i in range(i1, min(i2, top)) if keys[i]), default=top)
    below = max((i + 1 for i1, i2 in seen for i in range(max(i1, bottom), i2) if keys[i]), default=bottom)
    keep_from, keep_to = 0, len(new_lines)  # the answer's lines kept
    for tag, i1, i2, j1, j2 in reversed(ops) if above < top else ():  # from the region's top up to ``above``
        if i1 >= top or i2 <= above:
            continue
        if not _good(tag, i1, i2, j1, j2):  # stop there; an answer's lines for region lines stay
            above, keep_from = min(i2, top), j2 if i2 <= top else j1
            break
    for tag, i1, i2, j1, j2 in ops if below > bottom else ():  # from the region's bottom down to ``below``
        if i2 <= bottom or i1 >= below:
            continue
        if not _good(tag, i1, i2, j1, j2):
            below, keep_to = max(i1, bottom), j1 if i1 >= bottom else j2
            break
    if (keep_from, keep_to) != (0, len(new_lines)):
        pieces = [new_lines[j] + (breaks[j] if j < len(breaks) else "") for j in range(keep_from, keep_to)]
        new_text = "".join(pieces)
        if keep_to < len(new_lines):
            new_text = new_text[:len(new_text) - len(breaks[keep_to - 1])] if keep_to > keep_from else ""
    start = lines.starts[low + above] if above < top else region_start
    end = lines.line_end(low + below - 1) if below > bottom else region_end
    return start, end, new_text
