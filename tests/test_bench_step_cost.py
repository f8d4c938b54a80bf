"""``speclsp bench step-cost``: cost(M) for every weight path, on the starter pair (the real pair's figures
are in docs/performance.md; timing is not asserted, only that every size is measured and reported)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.step_cost_grid import interpolated_ms, markdown, workload_rates


@pytest.mark.unit
def test_costs_between_measured_sizes_are_interpolated_and_outside_refused():
    pass_ms = {"1": 10.0, "4": 16.0, "8": 40.0, "1024": 1000.0}
    assert interpolated_ms(pass_ms, 4) == 16.0
    assert interpolated_ms(pass_ms, 2) == pytest.approx(12.0)
    assert interpolated_ms(pass_ms, 6) == pytest.approx(28.0)
    with pytest.raises(ValueError, match="outside"):
        interpolated_ms(pass_ms, 0.5)
    with pytest.raises(ValueError, match="outside"):
        interpolated_ms({"1": 10.0}, 2)
    assert interpolated_ms({"1": 10.0}, 1) == 10.0


@pytest.mark.unit
def test_workload_rates_follow_the_tokens_per_pass():
    # cost(1) 10 ms, cost(4) 20 ms, cost(13) between 8 (30 ms) and 16 (50 ms): 30 + 5/8 * 20 = 42.5 ms
    pass_ms = {"1": 10.0, "4": 20.0, "8": 30.0, "16": 50.0, "1024": 2000.0}
    rates = workload_rates(pass_ms)
    assert rates["plain"] == 100.0
    assert rates["edit"] == pytest.approx(1000 * 8.5 / 42.5, abs=0.01)
    assert rates["fim"] == pytest.approx(1000 * 1.4 / 20.0, abs=0.01)
    # 32 tokens: the 1024-token prefill, then 32 / 1.4 passes of 4 tokens
    assert rates["fim_with_prompt"] == pytest.approx(1000 * 32 / (2000 + 32 / 1.4 * 20), abs=0.01)


@pytest.mark.unit
def test_a_path_that_cannot_load_gets_a_row_that_says_why(monkeypatch, tmp_path):
    import bench.weight_paths
    from bench.step_cost_grid import measure_one
    from decoding.errors import ModelLoadError

    def refuse(path, model, cache):
        raise ModelLoadError("da8w4_linear_cpu is not built")

    monkeypatch.setattr(bench.weight_paths, "load", refuse)
    rows = measure_one("torch-da8w4-compiled", "starter", (16,), 1, tmp_path)
    assert len(rows) == 1 and "da8w4_linear_cpu is not built" in rows[0]["unavailable"]
    assert "Not measured here" in markdown(rows) and "torch-da8w4-compiled" in markdown(rows)


@pytest.mark.unit
def test_da8w4_is_refused_exactly_when_its_kernel_is_missing():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao")
    from bench.weight_paths import candidate_config
    from decoding.errors import ModelLoadError

    built = "CPU" in torch._C._dispatch_dump("torchao::da8w4_linear_cpu")
    if built:
        assert candidate_config("da8w4").group_size == 128
    else:
        with pytest.raises(ModelLoadError, match="da8w4_linear_cpu"):
            candidate_config("da8w4")


@pytest.mark.model
def test_step_cost_command_measures_each_path_in_its_own_process(tmp_path):
    out = tmp_path / "grid"
    done = subprocess.run([sys.executable, "-m", "bench.step_cost_grid", "--models", "starter",
                           "--paths", "torch-bf16,torch-int4-hybrid", "--contexts", "16,40",
                           "--repeats", "1", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((out / "step_cost.json").read_text())
    assert [(r["path"], r["context"]) for r in rows] == [
        ("torch-bf16", 16), ("torch-bf16", 40), ("torch-int4-hybrid", 16), ("torch-int4-hybrid", 40)]
    sizes = {"1", "2", "4", "8", "16", "32", "128", "512", "1024"}
    assert all(set(r["pass_ms"]) == sizes and min(r["pass_ms"].values()) > 0 for r in rows)
    bf16, int4 = rows[0]["weight_bytes"], rows[2]["weight_bytes"]
    assert int4 > bf16  # the int4 weights (plus scales) beside their dequantised bfloat16 copy
    table = (out / "step_cost.md").read_text()
    assert "### starter, 16-token prompt" in table and "| torch-int4-hybrid |" in table
    assert (out / "cost_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.model
def test_the_gpu_cost_script_runs_its_code_path_on_the_cpu(tmp_path):
    """bench/device/gpu_cost.py waits for a lent GPU; its tiny-shape CPU run keeps it from rotting."""
    script = Path(__file__).resolve().parents[1] / "bench" / "device" / "gpu_cost.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--dtype", "float32",
                           "--shapes", "tiny", "--contexts", "64", "--repeats", "1", "--new-tokens", "16",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "gpu_cost.json").read_text())
    cost = [r for r in rows if r["kind"] == "cost"]
    loops = {r["loop"]: r for r in rows if r["kind"] == "loop"}
    assert len(cost) == 1 and cost[0]["context"] == 64 and min(cost[0]["pass_ms"].values()) > 0
    assert loops["plain"]["fed_per_round"] == 1.0 and loops["plain"]["tokens_per_round"] == 1.0
    assert loops["ngram"]["fed_per_round"] > 1.5  # the repeated prompt gives the lookup a draft every round
    assert all(r["round_ms"] >= r["verify_ms"] > 0 for r in loops.values())


@pytest.mark.model
def test_the_gpu_exactness_script_runs_every_section_on_the_cpu(tmp_path):
    """bench/device/gpu_exactness.py (and its chi-square section, gpu_stats.py) waits for a lent GPU; a
    quick CPU run of every section keeps it in step with the tests' helpers it calls."""
    script = Path(__file__).resolve().parents[1] / "bench" / "device" / "gpu_exactness.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu", "--quick", "--dtypes", "float32",
                           "--new-tokens", "12", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_exactness.json").read_text())
    assert results["errors"] == [] and set(results["failures"].values()) == {0}
    assert set(results["failures"]) == {"timing-float32", "greedy-starter-float32", "greedy-tiny-float32",
                                        "stats-float32"}
    greedy = [r for r in results["greedy_starter"] if "policy" in r]
    assert len(greedy) == 24 and all(r["ok"] for r in greedy) and any(r["drafted"] > 0 for r in greedy)
    assert results["greedy_tiny"] and all(r["ok"] for r in results["greedy_tiny"])
    assert len(results["stats"]) == 6 and all(0.0 <= r["p"] <= 1.0 for r in results["stats"])
    assert {r["tokens"] for r in results["timings"]} == {1, 16, 17}
