"""``speclsp bench prompt-gate``: a paired quality comparison of two prompt variants on the same cuts.

A prompt change becomes the default only if it does not lose quality: on cuts of code the models never
saw (``--corpus 2026``, and per language ``--corpus 2026,2026-ts,2026-js,2026-rust``), every cut is
completed with both variants, and per cut the difference of two scores is taken: first line exact (the
completion's first line equals the rest of the cut line) and parses (the file with the completion inserted
is valid code: Python's ``ast``, or no tree-sitter ERROR/MISSING node, :mod:`bench.cut_sites`). Reported per
language, per cursor kind and overall: each variant's share, the mean paired difference and its 95% interval
(normal approximation over the per-cut differences). A language passes when the interval's lower end is
above ``-0.02`` on both scores; the gate passes only when every language measured passes.

Cursor kinds, each at a code line of a file that parses; the rest of the line and the next
``--cut-lines - 1`` lines are removed (what a typist has not written yet):

* ``line_start``: after the line's indentation (as an editor leaves the cursor after Enter);
* ``mid_line``: after a word boundary inside the line (a space or punctuation before the cursor);
* ``mid_token``: inside an identifier, at least one character typed and one left.

Variants: ``psm`` (prefix-suffix-middle as the server builds it, no token healing), ``psm_healed``
(the same with token healing, :mod:`decoding.healing`), ``tail_healed`` (the typed-tail layout,
:mod:`lsp_server.completion.anchor`, anchored at the cursor line's start: the line typed so far follows
``<|fim_middle|>``) and ``tail2_healed`` (anchored two lines above: those lines were typed since the
anchor too). ``--variants BASE,CANDIDATE[,...]`` compares each candidate with the base on the same cuts.
Greedy, drafter ``ngram`` (its output equals plain decoding), no time budget. A measurement command,
not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from lsprotocol import types

from bench.corpus import corpus_names
from bench.corpus_fetch import DEFAULT_CORPUS_DIR, add_fetch_arguments
from bench.cut_sites import describe, first_line, is_cut_line, parses, source_documents
from lsp_server.cli import cut_hole
from lsp_server.model.completer import complete
from lsp_server.model.draft_sources import DraftSources
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for

KINDS = ("line_start", "mid_line", "mid_token")
#: variant -> settings; a tail of N lines (``prompt_tail_lines``) is anchored N lines above the cursor's line
VARIANTS = {"psm": {"token_healing": False, "prompt_layout": "psm"},
            "psm_healed": {"token_healing": True, "prompt_layout": "psm"},
            "tail_healed": {"token_healing": True, "prompt_layout": "tail", "prompt_tail_lines": 0},
            "tail2_healed": {"token_healing": True, "prompt_layout": "tail", "prompt_tail_lines": 2},
            "tail4_healed": {"token_healing": True, "prompt_layout": "tail", "prompt_tail_lines": 4}}
GATE = -0.02  # the largest loss the interval's lower end may show


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _columns(line: str, kind: str) -> list[int]:
    """Cursor columns of ``kind`` in a code line (characters)."""
    indent = len(line) - len(line.lstrip())
    end = len(line.rstrip())
    if kind == "line_start":
        return [indent] if end > indent else []
    found = []
    for column in range(indent + 2, end - 1):
        before, after = _word(line[column - 1]), _word(line[column])
        if (kind == "mid_line" and not before and line[column] != " ") or (kind == "mid_token" and before and after):
            found.append(column)
    return found


def gate_cuts(count: int, seed: int, corpus: str, kinds: tuple[str, ...] = KINDS,
              corpus_dir: Path = DEFAULT_CORPUS_DIR, fetch_missing: bool = False,
              ) -> list[tuple[str, Document, types.Position]]:
    """``count`` (kind, document, cursor) triples from each corpus of the comma-separated ``corpus``,
    ``kinds`` in turn, chosen with ``seed``; documents carry their language id."""
    chosen = []
    for name in corpus_names(corpus):
        rng = random.Random(seed)
        candidates: dict[str, list] = {kind: [] for kind in KINDS}
        for document in source_documents(name, corpus_dir, fetch_missing):
            for number, line in enumerate(document.text.split("\n")):
                if not is_cut_line(line, document.language_id):
                    continue
                for kind in KINDS:
                    columns = _columns(line, kind)
                    if columns:
                        candidates[kind].append((document, number, columns))
        for index in range(count):
            kind = kinds[index % len(kinds)]
            document, number, columns = rng.choice(candidates[kind])
            chosen.append((kind, document, types.Position(line=number, character=rng.choice(columns))))
    return chosen


def interval(differences: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean paired difference and its 95% interval (normal approximation)."""
    mean = statistics.fmean(differences)
    spread = statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else 0.0
    return round(mean, 4), round(mean - 1.96 * spread, 4), round(mean + 1.96 * spread, 4)


def summarize_language(rows: list[dict], base: str, candidate: str) -> dict:
    """Per kind and overall, for the rows of one language: each variant's share of both scores, the paired
    difference and its interval; ``gate_passes``: no loss beyond ``GATE`` on either score."""
    out = {}
    for kind in (*KINDS, "all"):
        chosen = [r for r in rows if kind == "all" or r["kind"] == kind]
        if not chosen:
            continue
        entry = {"cuts": len(chosen)}
        for score in ("first_line_exact", "parses"):
            a = [float(r[base][score]) for r in chosen]
            b = [float(r[candidate][score]) for r in chosen]
            entry[score] = {base: round(statistics.fmean(a), 4), candidate: round(statistics.fmean(b), 4),
                            "difference": interval([y - x for x, y in zip(a, b)])}
        out[kind] = entry
    overall = out["all"]
    out["gate_passes"] = all(overall[s]["difference"][1] > GATE for s in ("first_line_exact", "parses"))
    return out


def summarize(rows: list[dict], base: str, candidate: str) -> dict:
    """Per language (a row without one is Python) :func:`summarize_language`; the candidate is adopted
    (``gate_passes``) only if it does not lose in any language measured; ``losing_languages`` names those
    where it does."""
    languages = list(dict.fromkeys(r.get("language", "python") for r in rows))
    per_language = {language: summarize_language([r for r in rows if r.get("language", "python") == language],
                                                 base, candidate) for language in languages}
    losing = [language for language, entry in per_language.items() if not entry["gate_passes"]]
    return {"languages": per_language, "losing_languages": losing, "gate_passes": not losing}


def _place(row: dict) -> tuple:
    """Where a cut is: kind, file name, line, column (rows before 2026-12-07 name the file alone)."""
    return row["kind"], Path(row["file"]).name, row["line"], row["column"]


def resumed_rows(args: argparse.Namespace) -> list[dict]:
    """The rows of an earlier ``--rows`` output (``--resume FILE``) run with the same settings but
    ``--cuts``: the cuts of one seed come in the same order in each corpus, so a longer run only adds cuts;
    the run takes an earlier row where a cut's place (:func:`_place`) matches.

    Raises:
        SystemExit: the file has no rows, or other settings.
    """
    earlier = json.loads(args.resume.read_text())
    ignored = ("cuts", "rows", "show_text", "resume", "corpus_dir", "fetch", "argv")
    same = {k: v for k, v in earlier["settings"].items() if k not in ignored}
    now = {k: v for k, v in vars(args).items() if k in same}
    if "rows" not in earlier or same != now:
        raise SystemExit(f"--resume needs an earlier --rows output with the same settings: {same} against {now}")
    return earlier["rows"]


def run(args: argparse.Namespace) -> int:
    from decoding.engine import Engine  # loads torch: not at parser setup
    from lsp_server.backends.local import as_backend

    base, *candidates = args.variants.split(",")
    codec = codec_for(types.PositionEncodingKind.Utf32)
    settings = Settings(model=args.model, draft_model="none", dtype=args.dtype, drafter="ngram",
                        max_new_tokens=args.max_new_tokens, time_budget_ms=0, cold_prompt_ms=0)
    engine = Engine.load(settings.engine_config())
    backend = as_backend(engine)
    earlier = {_place(row): row for row in resumed_rows(args)} if args.resume else {}
    rows = []
    kinds = tuple(args.kinds.split(","))
    if set(kinds) - set(KINDS) or set(args.variants.split(",")) - set(VARIANTS) or not candidates:
        raise SystemExit(f"--kinds takes {', '.join(KINDS)}; --variants takes {', '.join(VARIANTS)}")
    cuts = gate_cuts(args.cuts, args.seed, args.corpus, kinds, args.corpus_dir, args.fetch)
    for index, (kind, document, position) in enumerate(cuts):
        row = {"kind": kind, **describe(document, args.corpus_dir), "line": position.line + 1,
               "column": position.character}
        if _place(row) in earlier:  # resumed: the same cut, already scored
            rows.append(earlier[_place(row)])
            continue
        holed, removed = cut_hole(document, position, codec, args.cut_lines)
        for variant in (base, *candidates):
            overrides = VARIANTS[variant]
            lines_back = overrides.get("prompt_tail_lines", 0)
            request = resolve_request(holed, position, codec, replace(settings, **overrides))
            sources = DraftSources()
            if lines_back:
                line_start = request.offset - len(request.line_prefix)
                anchor = line_start
                for _ in range(lines_back):
                    if anchor == 0:
                        break
                    anchor = holed.text.rfind("\n", 0, anchor - 1) + 1
                sources.anchors.place(holed.uri, holed.text, anchor, request.offset)
            completion = complete(backend, request, sources=sources)
            inserted = completion.insert_text
            row[variant] = {
                "first_line_exact": bool(inserted.strip()) and first_line(inserted) == first_line(removed),
                "parses": bool(inserted.strip()) and parses(holed.text[:request.offset] + inserted
                                                             + holed.text[request.offset:], document.language_id),
                "text": inserted if args.show_text else None,
                "written": completion.generation.text if args.show_text else None}
        rows.append(row)
        print(f"cut {index + 1}/{len(cuts)} {row['language']} {kind}: " + " ".join(
            f"{v} {row[v]['first_line_exact']:d}" for v in (base, *candidates)), file=sys.stderr)
    result = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "run"},
              "target": engine.target.name,
              "dtype": str(engine.target.model.dtype),
              "summary": {candidate: summarize(rows, base, candidate) for candidate in candidates}}
    if args.rows:
        result["rows"] = rows
    print(json.dumps(result, indent=2))
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench prompt-gate``."""
    gate = kinds.add_parser("prompt-gate", help="paired quality comparison of two prompt variants on the same cuts")
    gate.add_argument("--corpus", default="2026",
                      help="2026 (Python written after the models' training), 2026-ts, 2026-js, 2026-rust "
                           "(bench/data/corpora-2026.json), stdlib or a directory of .py files; several with commas: "
                           "--cuts cuts from each, and the gate passes only if no language loses")
    add_fetch_arguments(gate)
    gate.add_argument("--model", default="qwen2.5-coder-0.5b")
    gate.add_argument("--dtype", default="auto")
    gate.add_argument("--cuts", type=int, default=120, help="cuts per corpus, the cursor kinds in turn")
    gate.add_argument("--cut-lines", type=int, default=3)
    gate.add_argument("--max-new-tokens", type=int, default=48)
    gate.add_argument("--variants", default="psm,psm_healed", help=f"BASE,CANDIDATE[,...] of {', '.join(VARIANTS)}")
    gate.add_argument("--kinds", default=",".join(KINDS), help=f"cursor kinds, in turn: {', '.join(KINDS)}")
    gate.add_argument("--seed", type=int, default=0)
    gate.add_argument("--rows", action="store_true", help="print every cut's scores too")
    gate.add_argument("--show-text", action="store_true", help="with --rows: the completions' text")
    gate.add_argument("--resume", type=Path, default=None, metavar="FILE",
                      help="an earlier --rows output of the same settings: its cuts are kept, only the rest is run")
    gate.set_defaults(run=run)
