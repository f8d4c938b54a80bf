"""One sentence naming what the latest edit did and where else it applies, for the rewrite prompt's
instruction (the ``chat`` format): a small model that sees only the diff often copies the region
unchanged; told "the function ``f`` takes a new parameter ``x``: pass ``x`` in every call of ``f``", it
carries the edit through more often (``speclsp bench edits``, docs/next-edit.md).

Recognised, from the latest diff's changed lines (:func:`lsp_server.next_edit.formats.split_diff`):

* one identifier replaced by another and nothing else (a rename, a typo fixed, a keyword renamed: the
  keyword case names the callee);
* text inserted after an argument (``, x``) in a definition (``def``/``function``/``fn``/``func``) or in a
  call: a new parameter, or a new argument of a call.

Anything else gives ``None`` (the diff speaks for itself). Heuristic and syntax-light on purpose; it
changes the prompt only, never what verification accepts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lsp_server.next_edit.formats import split_diff

_WORD = re.compile(r"\w+")
_DEFINITION = re.compile(r"\b(?:def|function|fn|func)\s+(\w+)\s*\(")
_ADDED_ARGUMENT = re.compile(r"^\s*,\s*(\w+)\s*$|^\s*(\w+)\s*,\s*$")  # ", x" after an argument, or "x, " before one


def renamed_word(diffs) -> tuple[str, str] | None:
    """(old, new) when the latest edit replaced one identifier by another and changed nothing else on
    its lines (a rename, a keyword renamed, a typo fixed); else None."""
    if not diffs:
        return None
    original, updated = split_diff(diffs[-1])
    old_words, new_words = _WORD.findall(original), _WORD.findall(updated)
    if len(old_words) != len(new_words):
        return None
    pairs = {(a, b) for a, b in zip(old_words, new_words) if a != b}
    if len(pairs) != 1:
        return None
    (old, new), = pairs
    if not (old.isidentifier() and new.isidentifier()) or _WORD.sub(lambda m: new if m.group() == old else m.group(),
                                                                      original) != updated:
        return None
    return old, new


def _callee_before(text: str, at: int) -> str | None:
    """The name before the innermost unclosed ``(`` left of ``at``, if any."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                match = re.search(r"(\w+)\s*$", text[:i])
                return match.group(1) if match else None
            depth -= 1
    return None


@dataclass(frozen=True)
class LatestEdit:
    """What the latest edit did, where it is recognised (module docstring)."""

    kind: str  # "rename", "keyword" (a keyword argument renamed), "parameter" (a definition's new one) or
    # "argument" (a call's new one)
    old: str  # the old name (rename, keyword); "" otherwise
    new: str  # the new name, or the parameter or argument added
    callee: str = ""  # keyword, argument: the callee; parameter: the function


def latest_edit(diffs) -> LatestEdit | None:
    """What the latest of ``diffs`` (unified diffs, oldest first) did, or None (module docstring)."""
    renamed = renamed_word(diffs)
    if renamed is not None:
        old, new = renamed
        original, _ = split_diff(diffs[-1])
        keyword = re.search(rf"\b{re.escape(old)}\s*=(?!=)", original)
        callee = _callee_before(original, keyword.start()) if keyword else None
        if callee is not None and not _DEFINITION.search(original):
            return LatestEdit("keyword", old, new, callee)
        return LatestEdit("rename", old, new)
    if not diffs:
        return None
    original, updated = split_diff(diffs[-1])
    head = 0
    while head < min(len(original), len(updated)) and original[head] == updated[head]:
        head += 1
    tail = 0
    while tail < min(len(original), len(updated)) - head and original[-1 - tail] == updated[-1 - tail]:
        tail += 1
    removed, inserted = original[head:len(original) - tail], updated[head:len(updated) - tail]
    added = _ADDED_ARGUMENT.match(inserted)
    if removed or added is None:
        return None
    name = added.group(1) or added.group(2)
    definition = _DEFINITION.search(updated)
    callee = _callee_before(updated, head)
    if definition is not None and definition.end() <= head and callee == definition.group(1):
        return LatestEdit("parameter", "", name, definition.group(1))
    return LatestEdit("argument", "", name, callee) if callee is not None else None


def edit_summary(diffs) -> str | None:
    """The sentence for the latest of ``diffs`` (unified diffs, oldest first), or None (module docstring)."""
    edit = latest_edit(diffs)
    if edit is None:
        return None
    old, new, callee = edit.old, edit.new, edit.callee
    if edit.kind == "keyword":
        return (f"The keyword argument `{old}=` of `{callee}(...)` is now `{new}=`: make the same change in the "
                f"other calls of `{callee}` in the region.")
    if edit.kind == "rename":
        return f"`{old}` was renamed to `{new}`: rename every other `{old}` in the region that means the same thing."
    if edit.kind == "parameter":
        return (f"The function `{callee}` takes a new parameter `{new}`: pass `{new}` in every call of "
                f"`{callee}` in the region.")
    return (f"The call of `{callee}` now passes `{new}` as its last positional argument: pass `{new}` the same "
            f"way in the other calls of `{callee}` in the region that take the same arguments.")
