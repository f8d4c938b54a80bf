"""``speclsp bench decode``: the report's structure on a tiny run (not its speed)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_decode_reports_every_workload_and_method(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "bench", "decode", "--quick", "--methods", "ngram,tree,hf_prompt_lookup",
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {(r["workload"], r["method"]) for r in rows} == {
        (w, m) for w in ("edit", "fim", "entropy") for m in ("none", "ngram", "tree", "hf_prompt_lookup")}
    for row in rows:
        assert {"workload", "method", "tokens_per_s", "speedup_vs_plain", "tokens_per_pass", "acceptance_rate",
                "identical_to_plain"} <= set(row)
        assert row["tokens_per_s"] > 0
        if row["method"] != "hf_prompt_lookup":  # ours: exact greedy (fp32, fixed prompts)
            assert row["identical_to_plain"] is True
        if row["method"] == "none":
            assert row["speedup_vs_plain"] == 1.0 and row["tokens_per_pass"] == 1.0
    assert "speedup" in done.stdout
