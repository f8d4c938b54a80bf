"""What to ask the model for at a cursor, decided once per request.

* :func:`suppresses_automatic` (on the event loop, string checks only): an *automatic* request with
  the cursor in a line's leading whitespace and code to its right gets no suggestion, because the
  user is indenting; an explicitly invoked request still completes.
* :func:`decide_mode` (on the model thread, with the prompt's prefix): code right of the cursor:
  the current line only, but for a brace pair the editor closed (``if (x) {|}``, only closers right of
  the cursor, after a block header): a block's body, or the line's rest where the model writes one; an
  empty or blank line, or a cursor right after a block header (the last
  code token before the cursor is ``:`` in Python or ``{`` in brace languages, or the ``>`` of an
  opening JSX/TSX tag, comments skipped, found with tree-sitter where there is a grammar): a
  multi-line completion; otherwise the current line only.

All text here is model text: ``\\n`` line breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.workspace.syntax import INDENT_BLOCK_LANGUAGES, last_token_and_parent, parser_for, syntax_window


BETWEEN_BRACES = "between a block's braces"  # Mode.reason of a cursor in a brace pair the editor closed
_CLOSING_REST = frozenset(")]};, \t")  # what a brace pair's line may hold right of the cursor


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
        if _in_brace_pair(prefix, line_suffix, language_id, head):
            return Mode(True, reason=BETWEEN_BRACES)
        return Mode(False, reason="code right of the cursor")
    if not line_prefix.strip():
        return Mode(True, reason="blank line")
    if _after_block_header(prefix, language_id, head):
        return Mode(True, reason="after a block header")
    return Mode(False, reason="end of a line")


def _in_brace_pair(prefix: str, line_suffix: str, language_id: str, head: str | None) -> bool:
    """Whether the cursor is in a brace pair the editor closed as the user typed ``{`` (``f() {|}``,
    ``=> {|});``): after a block header, only closers right of the cursor, a ``}`` first. A single-line
    answer stopped at the model's first line break there: nothing."""
    rest = line_suffix.strip()
    return (language_id not in INDENT_BLOCK_LANGUAGES and rest.startswith("}") and set(rest) <= _CLOSING_REST
            and _after_block_header(prefix, language_id, head))


def _after_block_header(prefix: str, language_id: str, head: str | None) -> bool:
    opener = ":" if language_id in INDENT_BLOCK_LANGUAGES else "{"
    parser = parser_for(language_id)
    if parser is None:
        return prefix.rstrip().endswith((":", "{"))
    if head is None:
        head, _ = syntax_window(prefix, "")  # the head does not depend on the suffix
    token = last_token_and_parent(parser, head, len(head))
    # an opening JSX/TSX tag (``<ul>``) opens a block of children as ``{`` opens one of statements
    return token is not None and (token[0] == opener or token == (">", "jsx_opening_element"))
