"""How ``speclsp bench edits`` scores one next-edit suggestion against its case (:mod:`bench.edit_cases`).

All functions take the case, the region the server chose (``[start, end)``, code points into the edited
document, :attr:`bench.edit_cases.EditCase.edited`) and the suggested region (the model's rewrite):

* :func:`equivalent`: the document after the suggestion equals the expected document as Python (same
  :mod:`ast`, same comments), after the edit's own convention: a new argument passed by keyword
  (``context=context``) counts as passed by position. Text-equal implies equivalent.
* :func:`reversal`: the suggestion undid the user's edit (the user's line reads as before it again).
* :func:`outside_reach`: lines changed that hold neither the user's edit nor a follow-up (a line written
  in from the context, a reformatted line elsewhere, a deleted one).
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize

from bench.edit_cases import EditCase
from bench.edit_refactors import NEW_PARAMETER


class _KeywordToPosition(ast.NodeTransformer):
    """``f(a, context=context)`` -> ``f(a, context)``: the new argument by keyword or by position."""

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        for keyword in list(node.keywords):
            if keyword.arg == NEW_PARAMETER and isinstance(keyword.value, ast.Name) and keyword.value.id == NEW_PARAMETER:
                node.keywords.remove(keyword)
                node.args.append(keyword.value)
        return node


def _comments(text: str) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]


def equivalent(document: str, expected: str) -> bool:
    """Whether two documents are the same Python program with the same comments (see the module docstring);
    False when ``document`` does not parse."""
    if document == expected:
        return True
    try:
        trees = [_KeywordToPosition().visit(ast.parse(text)) for text in (document, expected)]
        return ast.dump(trees[0]) == ast.dump(trees[1]) and _comments(document) == _comments(expected)
    except (SyntaxError, ValueError, tokenize.TokenError):
        return False


def _line_at(text: str, offset: int) -> tuple[int, int]:
    """(start, end) of the line holding ``offset``, end before its line break."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return start, len(text) if end < 0 else end


def reversal(case: EditCase, start: int, end: int, suggested: str) -> bool:
    """Whether the suggested region holds the user's edited line as it was before the edit and no longer
    as the user left it."""
    edited = case.edited
    line_start, line_end = _line_at(edited, case.cursor)
    if not (start <= line_start and line_end <= end):
        return False
    edited_line = edited[line_start:line_end]
    user = case.user_in_before_user
    old_start, old_end = _line_at(case.before_user, user.start)
    old_line = case.before_user[old_start:old_end]
    lines = suggested.split("\n")
    return old_line != edited_line and old_line in lines and edited_line not in lines


def reach_lines(case: EditCase, start: int, end: int) -> set[int]:
    """0-based lines of the region ``[start, end)`` of the edited document that hold one of the user's
    edits or a follow-up."""
    region = case.edited[start:end]
    lines = set()
    for lo, hi in case.edited_spans():
        if hi < start or lo > end:
            continue
        first = region.count("\n", 0, max(0, lo - start))
        last = region.count("\n", 0, max(0, min(hi, end) - start))
        lines.update(range(first, last + 1))
    return lines


def outside_reach(case: EditCase, start: int, end: int, suggested: str) -> int:
    """How many lines the suggestion changed, deleted or added outside :func:`reach_lines` (a line
    added counts as outside; a changed block counts its old lines outside the reach, at least one
    when it adds lines)."""
    old = case.edited[start:end].rstrip("\n").split("\n")
    new = suggested.rstrip("\n").split("\n")
    reach = reach_lines(case, start, end)
    count = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        outside = sum(1 for i in range(i1, i2) if i not in reach)
        count += max(outside, (j2 - j1) - (i2 - i1), 1 if i1 == i2 else 0)
    return count
