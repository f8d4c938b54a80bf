"""The refactors ``speclsp bench edits`` cuts from a parsed file (:class:`bench.edit_cases.Module`), one
generator per workload (see :mod:`bench.edit_cases` for what each workload is).

Offsets are code points into the module's text.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator

from bench.edit_types import EditCase, Module, Replacement, region_of

MIN_FUNCTION_LINES = 4  # shorter functions have too little to carry an edit through
NEW_PARAMETER = "context"  # the parameter add_parameter adds (functions already using the name are skipped)
NEW_NAME_SUFFIX = "_value"  # rename and keyword: `name` becomes `name_value`
MIN_TYPO_NAME = 5  # fix_typo: names at least this long (a swap of two inner letters reads as a typo)


def _functions(tree: ast.AST, region_lines: int) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions a region holds whole."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and MIN_FUNCTION_LINES <= node.end_lineno - node.lineno + 1 <= region_lines]


def _has_nested_scope(function: ast.AST) -> bool:
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    return any(isinstance(node, scopes) for node in ast.walk(function) if node is not function)


def function_names(module: Module, function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[bool, list[int]]]:
    """``{name: (is a parameter, sorted offsets of its occurrences)}`` for the names a function without
    nested scopes binds (parameters, then the names its body assigns), each read and write of them;
    ``{}`` for a function with a nested scope. Names declared ``global``/``nonlocal``, one-letter names,
    ``self``/``cls`` and names whose occurrences are not spelled at their offsets are left out."""
    if _has_nested_scope(function):
        return {}
    declared = {name for node in ast.walk(function) if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names}
    occurrences: dict[str, list[int]] = {}
    parameters = set()
    body_nodes = [node for statement in function.body for node in ast.walk(statement)]
    for node in ast.walk(function.args):  # not their annotations or defaults (the enclosing scope's)
        if isinstance(node, ast.arg) and node.arg not in ("self", "cls"):
            occurrences.setdefault(node.arg, []).append(module.start(node))
            parameters.add(node.arg)
    for node in body_nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            occurrences.setdefault(node.id, [])
    for node in body_nodes:
        if isinstance(node, ast.Name) and node.id in occurrences:
            occurrences[node.id].append(module.start(node))
    text = module.text
    return {name: (name in parameters, sorted(set(found))) for name, found in occurrences.items()
            if name not in declared and len(name) > 1 and all(text[o:o + len(name)] == name for o in found)}


def rename_cases(module: Module, rng: random.Random, region_lines: int) -> Iterator[EditCase]:
    """Per function, one ``rename_parameter`` and one ``rename_local`` case, each of a name occurring 3
    times or more, renamed at its first occurrence (the parameter list, or the first assignment)."""
    text = module.text
    for function in _functions(module.tree, region_lines):
        body = text[module.start(function):module.end(function)]
        names = function_names(module, function)
        for workload, want_parameter in (("rename_parameter", True), ("rename_local", False)):
            chosen = sorted(name for name, (is_parameter, found) in names.items() if is_parameter == want_parameter
                            and len(found) >= 3 and name + NEW_NAME_SUFFIX not in body)
            if not chosen:
                continue
            name = rng.choice(chosen)
            first, *rest = names[name][1]
            new_name = name + NEW_NAME_SUFFIX
            yield EditCase(workload, f"{module.source}:{function.lineno}", text, Replacement(first, first + len(name), new_name),
                           tuple(Replacement(o, o + len(name), new_name) for o in rest))


def _typo(name: str, rng: random.Random) -> str | None:
    """``name`` with two different adjacent letters inside it swapped (not the first or the last)."""
    spots = [i for i in range(1, len(name) - 2) if name[i] != name[i + 1] and name[i].isalpha() and name[i + 1].isalpha()]
    if not spots:
        return None
    i = rng.choice(spots)
    return name[:i] + name[i + 1] + name[i] + name[i + 2:]


def fix_typo_cases(module: Module, rng: random.Random, region_lines: int) -> Iterator[EditCase]:
    """One ``fix_typo`` case per function: a name (parameter or local, 3 uses or more, at least
    ``MIN_TYPO_NAME`` letters) misspelled the same way at every use in the function (the document
    before); the user corrects its first occurrence, the rest should follow."""
    text = module.text
    for function in _functions(module.tree, region_lines):
        body = text[module.start(function):module.end(function)]
        names = function_names(module, function)
        chosen = sorted(name for name, (_, found) in names.items() if len(found) >= 3 and len(name) >= MIN_TYPO_NAME)
        if not chosen:
            continue
        name = rng.choice(chosen)
        typo = _typo(name, rng)
        if typo is None or typo in body:
            continue
        first, *rest = names[name][1]  # a typo has the name's length: offsets stay
        before = text
        for offset in reversed(names[name][1]):
            before = before[:offset] + typo + before[offset + len(name):]
        yield EditCase("fix_typo", f"{module.source}:{function.lineno}", before, Replacement(first, first + len(name), name),
                       tuple(Replacement(o, o + len(name), name) for o in rest))


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


def _signature_change(module: Module, function) -> tuple[Replacement, list[tuple[ast.Call, Replacement]]] | None:
    """``context`` added to ``function`` as its last parameter without a default (before the defaulted
    ones), and its calls that pass exactly the parameters without defaults by position (keyword arguments
    after them allowed) passing it after them: (the definition's edit, [(call, its edit)]); None for a
    function with ``*args``, positional-only parameters, no parameter, or a ``context`` already."""
    text, args = module.text, function.args
    required = args.args[:len(args.args) - len(args.defaults)]
    if (args.vararg or args.posonlyargs or not required
            or NEW_PARAMETER in text[module.start(function):module.end(function)]):
        return None
    is_method = required[0].arg in ("self", "cls")
    at = module.end(required[-1])
    calls = []
    for call, through_attribute in _calls_of(module, function):
        expected_args = len(required) - (1 if is_method and through_attribute else 0)
        if (len(call.args) != expected_args or any(isinstance(a, ast.Starred) for a in call.args)
                or any(k.arg is None or k.arg == NEW_PARAMETER for k in call.keywords)):
            continue
        if call.args:
            end = module.end(call.args[-1])
            calls.append((call, Replacement(end, end, f", {NEW_PARAMETER}")))
        elif not call.keywords and text[module.end(call) - 1] == ")":
            end = module.end(call) - 1
            calls.append((call, Replacement(end, end, NEW_PARAMETER)))
    return Replacement(at, at, f", {NEW_PARAMETER}"), calls


def add_parameter_cases(module: Module, region_lines: int) -> Iterator[EditCase]:
    """``add_parameter`` cases of each function (:func:`_signature_change`), from either side:

    * the definition's: the user adds the parameter; the calls in the definition's region follow;
    * the calls': the user added the parameter to a definition outside the region earlier (a prior edit)
      and now passes it in the first call of a region; the later calls in that region follow.
    """
    for function in (node for node in ast.walk(module.tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
        change = _signature_change(module, function)
        if change is None:
            continue
        definition, calls = change
        lines = function.end_lineno - function.lineno + 1
        if MIN_FUNCTION_LINES <= lines <= region_lines:
            first, last = region_of(module, function.args.args[-1].end_lineno, region_lines)
            inside = [edit for call, edit in calls if first <= call.lineno <= call.end_lineno <= last]
            if inside:
                yield EditCase("add_parameter", f"{module.source}:{function.lineno}", module.text, definition,
                               tuple(inside))
        ordered = sorted(calls, key=lambda pair: (pair[0].lineno, pair[0].col_offset))
        for index, (call, edit) in enumerate(ordered):
            first, last = region_of(module, call.lineno, region_lines)
            if first <= function.lineno <= last:
                continue  # the definition's side covers it
            later = [e for c, e in ordered[index + 1:] if c.end_lineno <= last]
            if later:
                yield EditCase("add_parameter", f"{module.source}:{call.lineno}", module.text, edit, tuple(later),
                               prior=(definition,))
                break


def keyword_cases(module: Module, region_lines: int) -> Iterator[EditCase]:
    """One ``keyword`` case per (callee, keyword) used by two calls or more in a region (a call pattern
    changed: ``k=`` becomes ``k_value=`` in one call, the later calls of the callee should follow)."""
    text = module.text
    uses: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (callee text, keyword) -> [(line, offset)]
    for node in (call for calls in module.calls.values() for call in calls):
        callee = text[module.start(node.func):module.end(node.func)]
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            start = module.start(keyword)
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
