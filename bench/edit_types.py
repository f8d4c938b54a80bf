"""The data of a refactor case for ``speclsp bench edits`` (:mod:`bench.edit_cases`): replacements, the
case itself, a parsed file with its offsets, and the region the server rewrites for an edit.

Offsets are code points into the document's text (Python ``str`` indices); :mod:`ast` columns are
UTF-8 bytes and are converted here.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Replacement:
    """Text ``[start, end)`` (code points) of a document replaced by ``text``."""

    start: int
    end: int
    text: str


def apply(text: str, replacements) -> str:
    """``text`` with non-overlapping ``replacements`` (offsets into ``text``) applied.

    Raises:
        ValueError: two replacements overlap.
    """
    ordered = sorted(replacements, key=lambda r: (r.start, r.end))
    for previous, current in itertools.pairwise(ordered):
        if current.start < previous.end:
            raise ValueError(f"replacements overlap at offset {current.start}")
    for replacement in reversed(ordered):
        text = text[:replacement.start] + replacement.text + text[replacement.end:]
    return text


def shift_before(replacements, offset: int) -> int:
    """How far the ``replacements`` (offsets into one text) move ``offset``: the length change of those
    that end before it (an insertion at ``offset`` itself counts: the offset stays before the text)."""
    return sum(len(r.text) - (r.end - r.start) for r in replacements if r.end < offset or r.start < r.end == offset)


@dataclass(frozen=True)
class EditCase:
    """One refactor: the document before, the user's edits and the follow-ups (offsets into ``before``).

    ``prior`` are edits the user made earlier (each its own entry in the edit history, before
    ``user_edit``: a signature changed before its first call is), ``user_edit`` the one that just ended.
    """

    workload: str  # one of bench.edit_cases.WORKLOADS
    source: str  # where it was cut, "package/file.py:line", for the report
    before: str
    user_edit: Replacement
    followups: tuple[Replacement, ...]
    prior: tuple[Replacement, ...] = ()

    def to_edited(self, offset: int) -> int:
        """An offset into :attr:`before` (outside the user's edits) as an offset into :attr:`edited` (an
        offset where an insertion was made stays before the inserted text)."""
        return offset + shift_before((*self.prior, self.user_edit), offset)

    @property
    def before_user(self) -> str:
        """The document after the prior edits, before the user's last one."""
        return apply(self.before, self.prior)

    @property
    def user_in_before_user(self) -> Replacement:
        """:attr:`user_edit` with offsets into :attr:`before_user`."""
        shift = shift_before(self.prior, self.user_edit.start)
        return Replacement(self.user_edit.start + shift, self.user_edit.end + shift, self.user_edit.text)

    @property
    def edits_in_turn(self) -> list[Replacement]:
        """The prior edits, then the user's, each with offsets into the document as it was when made."""
        made = [*self.prior, self.user_edit]
        shifts = [shift_before(made[:i], r.start) for i, r in enumerate(made)]
        return [Replacement(r.start + shift, r.end + shift, r.text) for r, shift in zip(made, shifts)]

    @property
    def edited(self) -> str:
        """The document after the user's edits: what the server sees when asked."""
        return apply(self.before, [*self.prior, self.user_edit])

    @property
    def cursor(self) -> int:
        """Offset into :attr:`edited` where the user's edit ends (the cursor after typing it)."""
        return self.to_edited(self.user_edit.start) + len(self.user_edit.text)

    @property
    def expected(self) -> str:
        """The document after the whole refactor."""
        return apply(self.before, [*self.prior, self.user_edit, *self.followups])

    def edited_spans(self) -> list[tuple[int, int]]:
        """``[start, end)`` in :attr:`edited` of the prior edits, the user's edit and the follow-ups (these
        as they stand before being made)."""
        spans = [(self.to_edited(r.start), self.to_edited(r.start) + len(r.text)) for r in (*self.prior, self.user_edit)]
        return spans + [(self.to_edited(f.start), self.to_edited(f.start) + f.end - f.start) for f in self.followups]

    def expected_region(self, start: int, end: int) -> tuple[str, int] | None:
        """The region ``[start, end)`` of :attr:`edited` as it should read after the follow-ups that lie
        inside it, and how many do; None when a follow-up straddles the region's border."""
        inside = []
        for followup in self.followups:
            lo = self.to_edited(followup.start)
            hi = lo + followup.end - followup.start
            if start <= lo and hi <= end:
                inside.append(Replacement(lo - start, hi - start, followup.text))
            elif lo < end and hi > start:
                return None
        return apply(self.edited[start:end], inside), len(inside)


class Module:
    """One parsed file: its text, syntax tree, calls by callee name, and :mod:`ast` (1-based line,
    UTF-8 byte column) positions as code-point offsets.

    Raises:
        SyntaxError, ValueError: the text does not parse.
    """

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source
        self.tree = ast.parse(text)
        self.calls: dict[str, list[ast.Call]] = {}  # f(...) and x.f(...) under "f"
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name:
                    self.calls.setdefault(name, []).append(node)
        self.lines = text.split("\n")
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line) + 1)

    def at(self, lineno: int, col_bytes: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col_bytes].decode(errors="ignore"))

    def start(self, node: ast.AST) -> int:
        return self.at(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.at(node.end_lineno, node.end_col_offset)


def region_of(module: Module, line: int, region_lines: int) -> tuple[int, int]:
    """(first, last) 1-based lines, inclusive, of the region for an edit on ``line`` (module docstring)."""
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    spans = sorted(((node.lineno, node.end_lineno) for node in ast.walk(module.tree)
                    if isinstance(node, definitions) and node.lineno <= line <= node.end_lineno),
                   key=lambda span: span[1] - span[0])  # innermost first
    fitting = [span for span in spans if span[1] - span[0] + 1 <= region_lines]
    if fitting:
        return fitting[-1]
    low, high = spans[0] if spans else (1, len(module.lines))
    first = max(low, line - region_lines // 4)
    return first, min(high, first + region_lines - 1)
