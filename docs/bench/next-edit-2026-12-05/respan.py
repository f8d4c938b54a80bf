"""Re-score a `speclsp bench edits --json` file over the span each suggestion replaces
(lsp_server/next_edit/span.py, as bench/edits.py scores since it came): the generations are the run's own
(the span decides only where an answer is applied). The cases are cut again from the same corpus,
split and settings, in the run's order.

Run from the repository root:
    .venv/bin/python docs/bench/next-edit-2026-12-05/respan.py RUN.json SPLIT OUT.json
"""
import json
import statistics
import sys
from types import SimpleNamespace

from bench.corpus import corpus_files
from bench.edit_cases import edit_cases
from bench.edits import _score, summarise
from lsp_server.next_edit.span import covered_span
from lsp_server.workspace.syntax import parser_for
from lsp_server.workspace.documents import Document

data = json.load(open(sys.argv[1]))
settings = data["settings"]
cases = edit_cases(corpus_files(settings["corpus"]), settings["cases"], settings["seed"], settings["region_lines"],
                   tuple(settings["workloads"].split(",")), sys.argv[2])
parser = parser_for("python")
seen, groups, before = {}, {}, {}
for entry in data["cases"]:
    key = (entry.get("format", "auto"), entry["workload"])
    index = seen.get(key, 0)
    seen[key] = index + 1
    case = cases[entry["workload"]][index]
    assert case.source == entry["source"]
    for mode, row in entry["rows"].items():
        region_start, region_end = row["region"]
        prompt = SimpleNamespace(region_start=region_start, region_end=region_end)
        start, end, text = covered_span(Document("file:///x.py", case.edited, 1, "python"), region_start, region_end,
                                        row["suggestion"])
        expected = case.expected_region(region_start, region_end)[0]
        old = _score(case, SimpleNamespace(prompt=prompt, start=region_start, end=region_end, text=row["suggestion"]),
                     expected, parser)
        row.update(_score(case, SimpleNamespace(prompt=prompt, start=start, end=end, text=text), expected, parser))
        row["span"], row["suggestion_applied"] = [start, end], text
        groups.setdefault((*key, mode), []).append(row)
        before.setdefault((*key, mode), []).append(old)
for key, rows in groups.items():
    print(key, {k: (round(statistics.mean(bool(r[k]) for r in before[key]), 2),
                    round(statistics.mean(bool(r[k]) for r in rows), 2))
                for k in ("exact", "exact_text", "parses", "unchanged", "reversal", "outside")})
data["rows"] = [{"format": r["format"], "workload": r["workload"], "mode": r["mode"],
                 **summarise(groups[(r["format"], r["workload"], r["mode"])],
                             groups.get((r["format"], r["workload"], "none")) if r["mode"] != "none" else None)}
                for r in data["rows"]]
data["rescored"] = "scores over the span each suggestion replaces (docs/bench/next-edit-2026-12-05/respan.py)"
json.dump(data, open(sys.argv[3], "w"), indent=1)
