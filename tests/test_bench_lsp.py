"""``speclsp bench lsp``: the report's structure on a tiny run (not its speed), and the figures'
arithmetic on hand-made samples."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.lsp import pause_range, percentile, pick_functions, request_rows, summarize
from tests.conftest import STARTER_FLAGS


@pytest.mark.unit
def test_summary_joins_client_samples_with_server_records_in_request_order():
    samples = [
        {"latency_ms": 121.0, "single_line": True},
        {"latency_ms": 2.0, "single_line": True},
        {"single_line": False, "pending": None},  # superseded by typing
        {"latency_ms": 300.0, "single_line": False},
    ]
    records = {
        1: {"id": 1, "status": "ok", "ms": {"rpc_in": 0.3, "queue": 1.0, "context": 1.5, "prefill": 50.0, "draft": 10.0,
                                            "verify": 57.0, "decode_other": 0.2, "rpc_out": 0.2, "total": 120.4},
            "tokens_per_pass": 2.0},
        2: {"id": 2, "status": "type-through cache hit", "ms": {"total": 0.3}},
        3: {"id": 3, "status": "superseded"},
        4: {"id": 4, "status": "ok", "ms": {"prefill": 100.0, "draft": 50.0, "verify": 140.0, "total": 296.0},
            "tokens_per_pass": 4.0},
    }
    result = summarize(samples, records, [("json/x.py", "", 0, 0)])
    assert result["requests"] == 4 and result["cancelled"] == 1
    assert result["latency_ms"]["count"] == 2 and result["single_line_latency_ms"]["p50"] == 121.0
    # server overhead: the server's total minus model time (3.4 and 6.0); end to end: the client's
    # latency minus model time (4.0 and 10.0)
    assert (result["overhead_ms"]["p50"], result["overhead_ms"]["p95"]) == (3.4, 6.0)
    assert (result["end_to_end_overhead_ms"]["p50"], result["end_to_end_overhead_ms"]["p95"]) == (4.0, 10.0)
    # per request, rpc_in + queue + context + decode_other + postprocess + rpc_out + server_other = overhead:
    # 3.4 = 0.3 + 1 + 1.5 + 0.2 + 0 + 0.2 + 0.2, and 6.0 = server_other; transport = latency - total
    parts = result["overhead_parts_ms"]
    assert parts["queue"]["p95"] == 1.0 and parts["context"]["p95"] == 1.5 and parts["postprocess"]["p95"] == 0.0
    assert parts["decode_other"]["p95"] == 0.2 and parts["rpc_in"]["p95"] == 0.3 and parts["rpc_out"]["p95"] == 0.2
    assert (parts["server_other"]["p50"], parts["server_other"]["p95"]) == (0.2, 6.0)
    assert (parts["transport"]["p50"], parts["transport"]["p95"]) == (0.6, 4.0)
    assert result["cache_hit_ms"]["p50"] == 2.0 and result["cache_hit_rate"] == round(1 / 3, 4)
    assert result["tokens_per_pass"] == 3.0


@pytest.mark.unit
def test_percentile():
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([float(v) for v in range(1, 101)], 50) == 51.0
    assert percentile([float(v) for v in range(1, 101)], 95) == 95.0


@pytest.mark.unit
def test_pause_range_reads_low_and_high_milliseconds_and_refuses_the_rest():
    import argparse

    assert pause_range("300,700") == (300.0, 700.0)
    assert pause_range("2000,2000") == (2000.0, 2000.0)
    for bad in ("700,300", "0,10", "5", "a,b", "1,2,3"):
        with pytest.raises(argparse.ArgumentTypeError):
            pause_range(bad)


@pytest.mark.unit
def test_functions_come_from_held_out_files():
    picked = pick_functions(3, seed=0)
    assert len(picked) == 3
    for name, text, start, end in picked:
        assert name.split("/")[0] in ("json", "email")
        assert text[start:].startswith("def ") and 3 <= text[start:end].count("\n") + 1 <= 25


@pytest.mark.e2e
def test_bench_lsp_writes_results_json(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "bench", "lsp", "--functions", "1", "--max-new-tokens", "4", *STARTER_FLAGS,
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "results.json").read_text())
    for key in ("latency_ms", "overhead_ms", "cache_hit_ms", "cache_hit_rate", "cancelled", "tokens_per_pass"):
        assert key in result
    assert set(result["latency_ms"]) >= {"p50", "p95", "p99"} and set(result["overhead_ms"]) >= {"p50", "p95"}
    assert "p50" in result["cache_hit_ms"] and result["requests"] >= 1
    # At least one request was answered by the model (the report does not say whether answers were empty).
    assert result["latency_ms"]["count"] >= 1 and result["tokens_per_pass"] >= 1
    assert "latency_ms" in done.stdout  # the table on stdout


@pytest.mark.unit
def test_keystroke_figures_add_the_change_to_the_completion_less_model_time():
    from bench.keystrokes import code_like_text, document_sizes, summarize_keystrokes

    samples = [{"probe_ms": 2.0, "keystroke_ms": 7.0, "completion_ms": 60.0},
               {"probe_ms": 3.0, "keystroke_ms": 2.5, "completion_ms": 30.0}]  # a change faster than noise: 0
    records = [{"id": 1, "status": "ok", "ms": {"prefill": 40.0, "draft": 5.0, "verify": 5.0, "total": 54.0}},
               {"id": 2, "status": "type-through cache hit", "ms": {"total": 1.0}}]
    result = summarize_keystrokes(12.0, samples, records)
    assert result["change_ms"] == {"p50": 0.0, "p95": 5.0}  # 7 - 2, and max(0, 2.5 - 3)
    assert result["completion_overhead_ms"] == {"p50": 1.0, "p95": 4.0}  # 54 - 50 and 1 - 0
    assert result["keystroke_server_ms"] == {"p50": 1.0, "p95": 9.0}  # 5 ms change + 4 ms outside the model
    assert result["statuses"] == {"ok": 1, "type-through cache hit": 1} and result["open_ms"] == 12.0
    assert document_sizes("1,10,50") == [1.0, 10.0, 50.0]
    text = code_like_text(10_000)
    assert 10_000 <= len(text) < 10_400 and text.isascii() and "\r" not in text


@pytest.mark.unit
def test_request_rows_join_client_samples_with_trace_records_in_request_order():
    samples = [
        {"sent_s": 1.5, "budget_ms": 420.0, "single_line": True, "expected_chars": 12, "latency_ms": 130.25},
        {"sent_s": 2.25, "budget_ms": 310.0, "single_line": False, "expected_chars": 80, "pending": None},
        {"sent_s": 3.0, "budget_ms": 650.0, "single_line": True, "expected_chars": 5, "latency_ms": 1.5},
    ]
    records = {
        7: {"id": 7, "status": "ok", "prefill_computed": 260, "prefill_reused": 930, "tokens": 9, "finish": "stop"},
        8: {"id": 8, "status": "superseded"},  # superseded while queued: the model never ran
        9: {"id": 9, "status": "type-through cache hit", "ms": {"total": 0.3}},
    }
    rows = request_rows(samples, records)
    assert [row["sent_s"] for row in rows] == [1.5, 2.25, 3.0]
    assert rows[0] == {"sent_s": 1.5, "budget_ms": 420.0, "status": "ok", "latency_ms": 130.25, "superseded": False,
                       "single_line": True, "expected_chars": 12, "prompt_tokens": 1190, "prompt_reused": 930,
                       "new_tokens": 9, "finish": "stop"}
    assert rows[1]["superseded"] and rows[1]["latency_ms"] is None and rows[1]["prompt_tokens"] is None
    assert rows[2]["status"] == "type-through cache hit" and rows[2]["new_tokens"] is None
