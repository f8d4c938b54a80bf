"""``speclsp bench cuts``: the corpora, the quality checks and the report, on the starter pair."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.corpus import corpus_files
from bench.cuts import cut_points, first_line, parses
from tests.conftest import STARTER_FLAGS


@pytest.mark.unit
def test_the_2026_corpus_is_code_written_in_2026_outside_copied_model_files():
    paths = corpus_files("2026")
    assert len(paths) >= 20
    for path in paths:
        assert "Copyright 2026" in path.read_text(encoding="utf-8", errors="replace")[:600]
        assert not ("transformers" in path.parts and path.parts[path.parts.index("transformers") + 1] == "models")


@pytest.mark.unit
def test_cut_points_are_in_files_that_parse_and_unknown_corpora_are_refused(tmp_path):
    (tmp_path / "ok.py").write_text("def f(x):\n    y = x + 1\n    return y\n")
    (tmp_path / "broken.py").write_text("def g(:\n    return 1\n")
    points = cut_points(2, seed=0, corpus=str(tmp_path))
    assert {p[0].uri.rsplit("/", 1)[-1] for p in points} == {"ok.py"}
    with pytest.raises(ValueError, match="fewer than --cuts"):
        cut_points(3, seed=0, corpus=str(tmp_path))
    with pytest.raises(ValueError, match="stdlib, 2026, .* or a directory"):
        corpus_files(str(tmp_path / "nowhere"))


@pytest.mark.unit
def test_quality_checks():
    assert parses("x = 1\n") and not parses("x = (\n")
    assert first_line("    return y  \nmore") == "    return y"


@pytest.mark.e2e
def test_bench_cuts_reports_quality_speed_and_exactness():
    done = subprocess.run([sys.executable, "-m", "lsp_server.cli", "bench", "cuts", "--cuts", "2", "--drafters",
                           "ngram,none", "--max-new-tokens", "8", "--json", *STARTER_FLAGS],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["models"]["target"] == "starter"
    rows = {row["drafter"]: row for row in report["rows"]}
    assert list(rows) == ["none", "ngram"]  # plain decoding first: the reference
    for row in rows.values():
        assert row["cuts"] == 2 and 0 <= row["parses"] <= row["non_empty"] <= 1 and 0 <= row["first_line_exact"] <= 1
        assert row["non_empty"] > 0, "every completion was empty"
        assert row["latency_ms_p50"] <= row["latency_ms_p95"] and row["tokens_per_pass"] >= 1
    assert rows["ngram"]["identical_to_reference"] is True
