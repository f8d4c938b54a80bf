"""What to ask the model for at a cursor, decided once per request.

* :func:`suppresses_automatic` (on the event loop, string checks only): an *automatic* request with
  the cursor in a line's leading whitespace and code to its right gets no suggestion, because the
  user is indenting; an explicitly invoked request still completes.
* :func:`decide_mode` (on the model thread, with the prompt's prefix): code right of the cursor:
  the current line only, but for a pair the editor closed (``if (x) {|}`` after a block header,
  ``<ul>|</ul>`` in JSX/TSX, only closers right of the cursor): a block's body, or the line's rest where
  the model writes one; an empty or blank line, or a cursor right after a block header (the last
  code token before the cursor is ``:`` in Python or ``{`` in brace languages, or the ``>`` of an
  opening JSX/TSX tag, comments skipped, found with tree-sitter where there is a grammar): a
  multi-line completion; otherwise the current line only.

All text here is model text: ``\\n`` line breaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lsp_server.workspace.syntax import INDENT_BLOCK_LANGUAGES, last_token_and_parent, parser_for, syntax_window


IN_PAIR = "in a pair the editor closed"  # Mode.reason of a cursor in ``{|}`` or ``<ul>|</ul>``
_CLOSING_REST = re.compile(r"(\}|</[\w.:-]*>)[)\]};,\s]*")  # a pair's line right of the cursor: its closer, closers
_TAG = "tag"  # what :func:`_opened_block` names an opening JSX/TSX tag


@dataclass(frozen=True)
class Mode:
    """What kind of completion to ask for at a cursor."""

    multi_line: bool
    reason: str = ""


def suppresses_automatic(line_prefix: str, line_suffix: str) -> bool:
    """Whether an automatic request gets no suggestion: only whitespace left of the cursor on its line
    (``line_prefix``) and code right of it (``line_suffix``)."""
    return not line_prefix.strip() and bool(line_suffix.strip())


def decide_mode(prefix: str, line_suffix: str, language_id: str, head: str | None = None) -> Mode:
    """Single- or multi-line for a cursor with ``prefix`` (model text before it; the prompt's window
    of it is enough) and ``line_suffix`` (the text right of it on its line); ``head``: the head of the
    cursor's syntax window (:func:`lsp_server.workspace.syntax.syntax_window`) when the caller has it."""
    line_prefix = prefix[prefix.rfind("\n") + 1:]
    if line_suffix.strip():
        if _in_closed_pair(prefix, line_suffix, language_id, head):
            return Mode(True, reason=IN_PAIR)
        return Mode(False, reason="code right of the cursor")
    if not line_prefix.strip():
        return Mode(True, reason="blank line")
    if _opened_block(prefix, language_id, head) is not None:
        return Mode(True, reason="after a block header")
    return Mode(False, reason="end of a line")


def _in_closed_pair(prefix: str, line_suffix: str, language_id: str, head: str | None) -> bool:
    """Whether the cursor is in a pair the editor closed as the user typed its opener: a brace pair after a
    block header (``f() {|}``, ``=> {|});``) or an opening JSX/TSX tag and its closing tag (``<ul>|</ul>``),
    with only closers after it on the line. A single-line answer stopped at the model's first line break
    there: nothing."""
    rest = line_suffix.strip()
    found = _CLOSING_REST.fullmatch(rest)
    if language_id in INDENT_BLOCK_LANGUAGES or found is None:
        return False
    return _opened_block(prefix, language_id, head) == ("{" if found.group(1) == "}" else _TAG)


def _opened_block(prefix: str, language_id: str, head: str | None) -> str | None:
    """What opens a block right before the cursor: the block opener (``:`` in Python, ``{`` in brace
    languages; either without a grammar), :data:`_TAG` for an opening JSX/TSX tag (``<ul>``: a block of
    children), or ``None``."""
    opener = ":" if language_id in INDENT_BLOCK_LANGUAGES else "{"
    parser = parser_for(language_id)
    if parser is None:
        end = prefix.rstrip()[-1:]
        return end if end in (":", "{") else None
    if head is None:
        head, _ = syntax_window(prefix, "")  # the head does not depend on the suffix
    token = last_token_and_parent(parser, head, len(head))
    if token is None:
        return None
    return opener if token[0] == opener else _TAG if token == (">", "jsx_opening_element") else None
