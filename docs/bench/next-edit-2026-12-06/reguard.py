"""Re-score a `speclsp bench edits --json` run with the server's withholding (lsp_server.next_edit.guard) as
it is now, from the same generations: a suggestion the guard withholds scores as unchanged.

    python docs/bench/next-edit-2026-12-06/reguard.py RUN.json > RESCORED.json
"""

import json
import sys
from argparse import Namespace

from bench.corpus import corpus_files
from bench.edit_cases import edit_cases
from bench.edits import _history_and_request, summarise
from lsp_server.next_edit.guard import withholds
from lsp_server.settings import Settings

run = json.load(open(sys.argv[1]))
args = Namespace(**run["settings"])
cases = edit_cases(corpus_files(args.corpus), args.cases, args.seed, args.region_lines,
                   tuple(args.workloads.split(",")), args.split)
by_source = {}
for prompt_format in dict.fromkeys(e["format"] for e in run["cases"]):
    for workload, chosen in cases.items():
        for case in chosen:
            by_source.setdefault((prompt_format, workload, case.source), []).append(case)
changed = 0
for entry in run["cases"]:
    case = by_source[(entry["format"], entry["workload"], entry["source"])].pop(0)
    history, _ = _history_and_request(case, Settings())
    diffs = history.diffs("x")
    for mode, row in entry["rows"].items():
        row.setdefault("withheld", False)  # runs before the guard
        start, end = row["span"]
        if not row.get("withheld") and withholds(case.edited[start:end], row["suggestion"], diffs[-1] if diffs else ""):
            changed += 1
            print(f"withheld now: {entry['workload']} {entry['source']} {mode}", file=sys.stderr)
            row.update(exact=False, exact_text=False, parses=True, unchanged=True, reversal=False, withheld=True,
                       outside=0)
report = []
for key in dict.fromkeys((e["format"], e["workload"]) for e in run["cases"]):
    entries = [e for e in run["cases"] if (e["format"], e["workload"]) == key]
    for mode in entries[0]["rows"]:
        report.append({"format": key[0], "workload": key[1], "mode": mode,
                       **summarise([e["rows"][mode] for e in entries], None)})
run["rows"], run["rescored"] = report, f"reguard.py: {changed} rows withheld now"
print(json.dumps(run, indent=2))
