"""Refactor cases for ``speclsp bench edits``, cut from held-out Python files (:mod:`bench.corpus`).

A case is a document before the user's edit, the one edit the user made, and the follow-up edits that
carry it through (what a next-edit suggestion should write). Three workloads:

* ``rename``: a parameter or local name of a function is renamed where it first occurs (the parameter
  list, or the first assignment); every other occurrence in the function follows. Occurrences are
  the names the function binds or reads (:mod:`ast` ``Name`` and ``arg`` nodes: never attributes,
  keyword-argument names or text in strings); functions with nested scopes, or that declare the name
  ``global``/``nonlocal``, are left out.
* ``add_parameter``: a function taking only plain positional parameters gets one more at the end of
  its parameter list; its calls (``f(...)``, ``self.f(...)``, ``cls.f(...)``) in the region, passing
  exactly its positional parameters, pass the new parameter by name as their last argument.
* ``keyword``: one call's keyword argument is renamed (``k=`` -> ``k_value=``); the later calls of the
  same callee with that keyword in the region follow.

The region is the one the server rewrites for a cursor at the user's edit (``region_lines`` lines;
see :func:`lsp_server.rewrite_prompt.region_lines_around`): the outermost definition (function or
class) around the edit that spans at most ``region_lines`` lines, else ``region_lines`` lines from a
quarter of them above the edit, inside the innermost definition. :func:`region_of` computes it from
Python's own syntax tree; the measurement compares with the region the server actually chose.

Offsets are code points into the document's text (Python ``str`` indices); :mod:`ast` columns are
UTF-8 bytes and are converted here.
"""

from __future__ import annotations

import ast
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import read_texts

WORKLOADS = ("rename", "add_parameter", "keyword")
MIN_FUNCTION_LINES = 4  # shorter functions have too little to carry an edit through
NEW_PARAMETER = "context"  # the parameter add_parameter adds (functions already using the name are skipped)
NEW_NAME_SUFFIX = "_value"  # rename and keyword: `name` becomes `name_value`


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


@dataclass(frozen=True)
class EditCase:
    """One refactor: the document before, the user's edit and the follow-ups (offsets into ``before``)."""

    workload: str  # one of WORKLOADS
    source: str  # where it was cut, "package/file.py:line", for the report
    before: str
    user_edit: Replacement
    followups: tuple[Replacement, ...]

    @property
    def edited(self) -> str:
        """The document after the user's edit: what the server sees when asked."""
        return apply(self.before, [self.user_edit])

    @property
    def cursor(self) -> int:
        """Offset into :attr:`edited` where the user's edit ends (the cursor after typing it)."""
        return self.user_edit.start + len(self.user_edit.text)

    @property
    def expected(self) -> str:
        """The document after the whole refactor."""
        return apply(self.before, [self.user_edit, *self.followups])

    def expected_region(self, start: int, end: int) -> tuple[str, int] | None:
        """The region ``[start, end)`` of :attr:`edited` as it should read after the follow-ups that lie
        inside it, and how many do; None when a follow-up straddles the region's border."""
        shift = len(self.user_edit.text) - (self.user_edit.end - self.user_edit.start)
        inside = []
        for followup in self.followups:
            moved = shift if followup.start >= self.user_edit.end else 0
            lo, hi = followup.start + moved, followup.end + moved
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


def _functions(tree: ast.AST, region_lines: int) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions a region holds whole."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and MIN_FUNCTION_LINES <= node.end_lineno - node.lineno + 1 <= region_lines]


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


def _has_nested_scope(function: ast.AST) -> bool:
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    return any(isinstance(node, scopes) for node in ast.walk(function) if node is not function)


def rename_cases(module: Module, rng: random.Random, region_lines: int) -> Iterator[EditCase]:
    """One ``rename`` case per function with a name occurring 3 times or more (see the module docstring)."""
    text, offsets = module.text, module
    for function in _functions(module.tree, region_lines):
        if _has_nested_scope(function):
            continue
        declared = {name for node in ast.walk(function) if isinstance(node, (ast.Global, ast.Nonlocal))
                    for name in node.names}
        # Parameters (not their annotations or defaults, which belong to the enclosing scope), then the
        # names the body binds, then every read and write of those in the body.
        occurrences: dict[str, list[int]] = {}
        body_nodes = [node for statement in function.body for node in ast.walk(statement)]
        for node in ast.walk(function.args):
            if isinstance(node, ast.arg) and node.arg not in ("self", "cls"):
                occurrences.setdefault(node.arg, []).append(offsets.start(node))
        for node in body_nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                occurrences.setdefault(node.id, [])
        for node in body_nodes:
            if isinstance(node, ast.Name) and node.id in occurrences:
                occurrences[node.id].append(offsets.start(node))
        body = text[offsets.start(function):offsets.end(function)]
        names = sorted(name for name, found in occurrences.items() if len(found) >= 3 and name not in declared
                       and len(name) > 1 and name + NEW_NAME_SUFFIX not in body
                       and all(text[o:o + len(name)] == name for o in found))
        if not names:
            continue
        name = rng.choice(names)
        first, *rest = sorted(set(occurrences[name]))
        new_name = name + NEW_NAME_SUFFIX
        yield EditCase("rename", f"{module.source}:{function.lineno}", text, Replacement(first, first + len(name), new_name),
                       tuple(Replacement(o, o + len(name), new_name) for o in rest))


def _calls_of(module: Module, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.Call, bool]]:
    """(call, through self/cls) for the calls of ``function`` by its name anywhere in ``module``."""
    found = []
    for node in module.calls.get(function.name, ()):
        callee = node.func
        if isinstance(callee, ast.Name) and callee.id == function.name:
            found.append((node, False))
        elif (isinstance(callee, ast.Attribute) and callee.attr == function.name and isinstance(callee.value, ast.Name)
              and callee.value.id in ("self", "cls")):
            found.append((node, True))
    return found


def add_parameter_cases(module: Module, region_lines: int) -> Iterator[EditCase]:
    """One ``add_parameter`` case per function with a call in its region (see the module docstring)."""
    text, offsets = module.text, module
    for function in _functions(module.tree, region_lines):
        args = function.args
        if (args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults or not args.args
                or NEW_PARAMETER in text[offsets.start(function):offsets.end(function)]):
            continue
        is_method = args.args[0].arg in ("self", "cls")
        first, last = region_of(module, args.args[-1].end_lineno, region_lines)
        followups = []
        for call, through_attribute in _calls_of(module, function):
            expected_args = len(args.args) - (1 if is_method and through_attribute else 0)
            if (not first <= call.lineno <= call.end_lineno <= last or call.keywords or len(call.args) != expected_args
                    or any(isinstance(a, ast.Starred) for a in call.args)):
                continue
            if call.args:
                at = offsets.end(call.args[-1])
                followups.append(Replacement(at, at, f", {NEW_PARAMETER}"))
            elif text[offsets.end(call) - 1] == ")":
                at = offsets.end(call) - 1
                followups.append(Replacement(at, at, NEW_PARAMETER))
        if followups:
            at = offsets.end(args.args[-1])
            yield EditCase("add_parameter", f"{module.source}:{function.lineno}", text,
                           Replacement(at, at, f", {NEW_PARAMETER}"), tuple(followups))


def keyword_cases(module: Module, region_lines: int) -> Iterator[EditCase]:
    """One ``keyword`` case per (callee, keyword) used by two calls or more in a region (see the module docstring)."""
    text, offsets = module.text, module
    uses: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (callee text, keyword) -> [(line, offset)]
    for node in (call for calls in module.calls.values() for call in calls):
        callee = text[offsets.start(node.func):offsets.end(node.func)]
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            start = offsets.start(keyword)
            if text[start:start + len(keyword.arg)] == keyword.arg:
                uses.setdefault((callee, keyword.arg), []).append((keyword.lineno, start))
    for (_, name), found in sorted(uses.items()):
        found.sort()
        (first_line, first), *rest = found
        _, last_line = region_of(module, first_line, region_lines)
        later = [start for line, start in rest if line <= last_line]
        if later and name + NEW_NAME_SUFFIX not in text:
            new_name = name + NEW_NAME_SUFFIX
            yield EditCase("keyword", f"{module.source}:{first_line}", text, Replacement(first, first + len(name), new_name),
                           tuple(Replacement(s, s + len(name), new_name) for s in later))


def edit_cases(paths: list[Path], per_workload: int, seed: int, region_lines: int = 20,
               workloads: tuple[str, ...] = WORKLOADS) -> dict[str, list[EditCase]]:
    """Up to ``per_workload`` cases of each workload from the files ``paths`` (those that parse), drawn
    with ``seed``; the same arguments give the same cases, and a workload's cases are the same whichever
    other workloads are asked for.

    Raises:
        ValueError: an unknown workload.
    """
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; use {', '.join(WORKLOADS)}")
    rngs = {w: random.Random(f"{seed}:{w}") for w in workloads}  # a workload's cases do not depend on the others
    found: dict[str, list[EditCase]] = {w: [] for w in workloads}
    for path in paths:
        texts = read_texts([path])
        if not texts:
            continue
        try:
            module = Module(texts[0], f"{path.parent.name}/{path.name}")
        except (SyntaxError, ValueError):
            continue
        for workload in workloads:
            if workload == "rename":
                found[workload].extend(rename_cases(module, rngs[workload], region_lines))
            elif workload == "add_parameter":
                found[workload].extend(add_parameter_cases(module, region_lines))
            else:
                found[workload].extend(keyword_cases(module, region_lines))
    return {w: rngs[w].sample(cases, min(per_workload, len(cases))) for w, cases in found.items()}
