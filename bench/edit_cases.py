"""Refactor cases for ``speclsp bench edits``, cut from held-out Python files (:mod:`bench.corpus`).

A case is a document before the user's edit, the one edit the user made, and the follow-up edits that
carry it through (what a next-edit suggestion should write). Workloads (generators in
:mod:`bench.edit_refactors`):

* ``rename_parameter`` / ``rename_local``: a parameter, or a local name, of a function is renamed where
  it first occurs (the parameter list, or the first assignment); every other occurrence in the function
  follows. Occurrences are the names the function binds or reads (:mod:`ast` ``Name`` and ``arg``
  nodes: never attributes, keyword-argument names or text in strings); functions with nested scopes,
  or that declare the name ``global``/``nonlocal``, are left out. ``rename`` names both.
* ``add_parameter``: a function gets one more parameter (``context``, the last one without a default);
  its calls (``f(...)``, ``self.f(...)``, ``cls.f(...)``) in the region pass it after their positional
  arguments (by position or by keyword: both count, see :mod:`bench.edit_scoring`). From the
  definition's side (the user edits the signature; the calls in its region follow) or from the calls'
  (the user changed the signature elsewhere earlier, then passes the argument in the first call of a
  region; the later calls there follow).
* ``keyword``: a call pattern changed: one call's keyword argument is renamed (``k=`` -> ``k_value=``);
  the later calls of the same callee with that keyword in the region follow.
* ``fix_typo``: one of several repeated mistakes fixed: a name misspelled the same way at every use in a
  function (two inner letters swapped); the user corrects the first, the rest follow.

The region is the one the server rewrites for a cursor at the user's edit (``region_lines`` lines;
see :func:`lsp_server.next_edit.prompt.region_lines_around`): the outermost definition (function or
class) around the edit that spans at most ``region_lines`` lines, else ``region_lines`` lines from a
quarter of them above the edit, inside the innermost definition. :func:`region_of` computes it from
Python's own syntax tree; the measurement compares with the region the server actually chose.

Every case belongs to one split, by its file (:func:`split_of`): ``dev`` (prompts are chosen on it) or
``test`` (results are reported on it); no file gives cases to both.

Offsets are code points into the document's text (Python ``str`` indices); :mod:`ast` columns are
UTF-8 bytes and are converted here.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from bench.corpus import read_texts
from bench import edit_refactors as refactors
from bench.edit_types import EditCase, Module, Replacement, apply, region_of

__all__ = ["ALIASES", "SPLITS", "WORKLOADS", "EditCase", "Module", "Replacement", "apply", "edit_cases",
           "expand_workloads", "region_of", "split_of"]

WORKLOADS = ("rename_parameter", "rename_local", "add_parameter", "keyword", "fix_typo")
ALIASES = {"rename": ("rename_parameter", "rename_local")}  # names a --workloads list may use for several
SPLITS = ("dev", "test", "all")


def split_of(source: str) -> str:
    """``"dev"`` or ``"test"`` for a case's file (``source`` up to its ``:line``), by a hash of its name:
    about half the files each, the same on every machine."""
    file = source.rsplit(":", 1)[0]
    return "dev" if hashlib.sha256(file.encode()).digest()[0] % 2 == 0 else "test"


def expand_workloads(names) -> tuple[str, ...]:
    """Workload names with aliases (``rename``) expanded, in order, without repeats.

    Raises:
        ValueError: an unknown workload.
    """
    expanded = [w for name in names for w in ALIASES.get(name, (name,))]
    unknown = [w for w in expanded if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; use {', '.join((*WORKLOADS, *ALIASES))}")
    return tuple(dict.fromkeys(expanded))


def edit_cases(paths: list[Path], per_workload: int, seed: int, region_lines: int = 20,
               workloads: tuple[str, ...] = WORKLOADS, split: str = "all") -> dict[str, list[EditCase]]:
    """Up to ``per_workload`` cases of each workload from the files ``paths`` (those that parse) of
    ``split`` (``dev``, ``test`` or ``all``), drawn with ``seed``; the same arguments give the same cases,
    and a workload's cases are the same whichever other workloads are asked for.

    Raises:
        ValueError: an unknown workload or split.
    """
    workloads = expand_workloads(workloads)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use {', '.join(SPLITS)}")
    rngs = {w: random.Random(f"{seed}:{w}") for w in workloads}  # a workload's cases do not depend on the others
    pick = random.Random(f"{seed}:rename")  # rename_parameter and rename_local share their draws
    found: dict[str, list[EditCase]] = {w: [] for w in workloads}
    for path in paths:
        source = f"{path.parent.name}/{path.name}"
        if split != "all" and split_of(source) != split:
            continue
        texts = read_texts([path])
        if not texts:
            continue
        try:
            module = Module(texts[0], source)
        except (SyntaxError, ValueError):
            continue
        if {"rename_parameter", "rename_local"} & set(workloads):
            for case in refactors.rename_cases(module, pick, region_lines):
                if case.workload in found:
                    found[case.workload].append(case)
        if "add_parameter" in found:
            found["add_parameter"].extend(refactors.add_parameter_cases(module, region_lines))
        if "keyword" in found:
            found["keyword"].extend(refactors.keyword_cases(module, region_lines))
        if "fix_typo" in found:
            found["fix_typo"].extend(refactors.fix_typo_cases(module, rngs["fix_typo"], region_lines))
    return {w: rngs[w].sample(cases, min(per_workload, len(cases))) for w, cases in found.items()}
