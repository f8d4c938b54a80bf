"""``speclsp bench scale-out``: the simulator against cases computed by hand, and its input from a
``bench lsp --requests-json`` export."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from bench.scale_out import (
    ASSUMPTIONS,
    GpuModel,
    Request,
    Speculation,
    Trace,
    TraceRequest,
    acceptance_rate,
    editor_requests,
    largest_within,
    load_trace,
    measure,
    percentile,
    simulate,
    step_seconds,
)

pytestmark = pytest.mark.unit

# A GPU whose every step takes exactly 0.5 s: no step overhead, 1 byte of weights at 2 bytes/s, no KV
# reads, compute far below the memory time. Hand-computable latencies.
HALF_SECOND = GpuModel(weight_bytes=1.0, hbm_bytes_per_s=2.0, bandwidth_efficiency=1.0, kv_bytes_per_token=0.0,
                       peak_flops=1e30, step_overhead_s=0.0, max_batched_tokens=8192, max_running=64)
PLAIN = ASSUMPTIONS["none"]


def request(arrival: float, new_tokens: int, prompt: int = 100, editor: int = 0, abort: float = math.inf) -> Request:
    return Request(editor, arrival, prompt, prompt, new_tokens, abort_s=abort)


def test_alone_a_request_takes_one_prefill_step_and_one_step_per_further_token():
    alone = request(0.0, new_tokens=10)
    simulate([alone], HALF_SECOND, PLAIN)
    assert alone.finish_s == 5.0  # the prefill step samples token 1, nine decode steps the rest


def test_at_zero_load_the_latency_is_the_modelled_service_time():
    gpu = GpuModel()
    alone = Request(0, 1.0, prompt_tokens=1200, prefill_tokens=300, new_tokens=12)
    simulate([alone], gpu, PLAIN)
    service = step_seconds(gpu, PLAIN, [], [(300, 900)]) + sum(
        step_seconds(gpu, PLAIN, [1200 + generated], []) for generated in range(1, 12))
    assert alone.finish_s - alone.arrival_s == pytest.approx(service)
    # the decode step is memory-bound: about 15.2 GB at 0.76 x 3.35 TB/s plus 1 ms of overhead
    assert 6e-3 < step_seconds(gpu, PLAIN, [1200], []) < 8e-3


def test_simultaneous_requests_share_steps_until_the_running_limit_makes_one_wait():
    batched = [request(0.0, 4), request(0.0, 4, editor=1)]
    simulate(batched, HALF_SECOND, PLAIN)
    assert [r.finish_s for r in batched] == [2.0, 2.0]
    one_slot = [request(0.0, 4), request(0.0, 4, editor=1)]
    simulate(one_slot, GpuModel(**{**vars(HALF_SECOND), "max_running": 1}), PLAIN)
    assert [r.finish_s for r in one_slot] == [2.0, 4.0]


def test_a_superseded_request_is_aborted_and_frees_its_slot_at_the_next_step():
    gpu = GpuModel(**{**vars(HALF_SECOND), "max_running": 1})
    long = request(0.0, 100, abort=2.25)
    following = request(2.25, 3)
    simulate([long, following], gpu, PLAIN)
    assert long.finish_s is None
    assert following.finish_s == 2.5 + 1.5  # admitted at the step boundary after its arrival


def test_speculation_emits_the_accepted_drafts_plus_one_token_per_step():
    always = Speculation("all accepted", draft_tokens=2, tokens_per_step=3.0)
    fast = request(0.0, 9)
    simulate([fast], HALF_SECOND, always)
    assert fast.finish_s == 2.0  # prefill: token 1; then 3 tokens per step: 4, 7, 10 >= 9
    assert acceptance_rate(always) == 1.0 and acceptance_rate(PLAIN) == 0.0
    alpha = acceptance_rate(ASSUMPTIONS["ngram"])
    assert sum(alpha ** j for j in range(6)) == pytest.approx(2.0)


def test_verifying_drafts_costs_compute_and_drafter_passes_cost_memory_time():
    gpu = GpuModel()
    contexts = [1200] * 256
    plain, ngram, eagle = (step_seconds(gpu, ASSUMPTIONS[n], contexts, []) for n in ("none", "ngram", "eagle"))
    assert plain < ngram  # 6 tokens per request verified: compute-bound at this batch
    assert step_seconds(gpu, ASSUMPTIONS["eagle"], [1200], []) > step_seconds(gpu, PLAIN, [1200], []) + 3 * 3e-4
    assert eagle > plain


def test_percentile_ranks_unanswered_requests_last():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, math.inf, math.inf], 50) == math.inf
    assert percentile([float(v) for v in range(1, 101)], 95) == 95.0


def test_largest_within_finds_the_boundary_of_a_growing_p50():
    calls = []

    def p50(editors: int) -> float:
        calls.append(editors)
        return 100.0 + 2.0 * editors

    assert largest_within(p50, 300.0) == 100
    assert largest_within(p50, 50.0) == 0
    assert len(calls) < 25


def _trace(rows: list[dict]) -> dict:
    return {"settings": {"max_new_tokens": 64}, "requests": rows}


def row(sent: float, status: str = "ok", prompt=1200, reused=900, expected=40, budget=500.0) -> dict:
    return {"sent_s": sent, "budget_ms": budget, "status": status, "latency_ms": None, "superseded": False,
            "single_line": True, "expected_chars": expected, "prompt_tokens": prompt, "prompt_reused": reused,
            "new_tokens": 0, "finish": None}


def test_the_trace_keeps_engine_requests_and_sizes_them_from_the_ideal_completion(tmp_path):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(_trace([
        row(1.0), row(2.0, status="type-through cache hit", prompt=None, reused=None),
        row(3.0, status="superseded", prompt=None, reused=None, expected=1000),
        row(4.0, prompt=1300, reused=1000, expected=3)])))
    trace = load_trace(path, chars_per_token=4.0)
    assert [r.sent_s for r in trace.requests] == [1.0, 3.0, 4.0]  # the cache hit never reaches the engine
    assert [r.new_tokens for r in trace.requests] == [11, 64, 2]  # ceil(chars / 4) + a stop token, capped
    assert trace.requests[1].prompt_tokens == 1300 and trace.requests[1].reused_tokens == 1000  # the median
    assert trace.duration_s == 4.5


def test_editors_replay_the_stream_and_each_request_is_superseded_by_its_editors_next():
    trace = Trace((TraceRequest(0.0, 1200, 905, 10), TraceRequest(5.0, 1200, 905, 10)), duration_s=10.0)
    requests = editor_requests(trace, editors=3, gpu=GpuModel(), horizon_s=30.0, seed=1)
    assert len(requests) == 3 * 6
    for editor in range(3):
        mine = sorted((r for r in requests if r.editor == editor), key=lambda r: r.arrival_s)
        assert [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(mine)] == pytest.approx([5.0] * 5)
        assert all(a.abort_s == b.arrival_s for a, b in itertools.pairwise(mine)) and mine[-1].abort_s == math.inf
    assert {r.prefill_tokens for r in requests} == {1200 - 896}  # reuse counts whole 16-token blocks


def test_latency_grows_with_the_number_of_editors():
    trace = Trace(tuple(TraceRequest(0.4 * i, 1200, 960, 30) for i in range(25)), duration_s=10.0)
    few = measure(trace, 1, GpuModel(), PLAIN, seconds=20.0, warmup_s=2.0, editor_side_s=0.0)
    many = measure(trace, 200, GpuModel(), PLAIN, seconds=20.0, warmup_s=2.0, editor_side_s=0.0)
    assert few["p50_ms"] < many["p50_ms"]
    assert few["answered"] == 1.0 and few["mean_running"] < many["mean_running"]


def test_the_command_reports_the_largest_editor_count_and_writes_json(tmp_path, capsys):
    from bench import scale_out
    from lsp_server.cli import build_parser

    path = tmp_path / "requests.json"
    path.write_text(json.dumps(_trace([row(0.5 * i, expected=20) for i in range(20)])))
    out = tmp_path / "figures.json"
    args = build_parser().parse_args(["bench", "scale-out", "--trace", str(path), "--assumptions", "none,ngram",
                                      "--limit", "4", "--editors", "3", "--out", str(out)])
    assert args.run is scale_out.run
    assert args.run(args) == 0
    figures = json.loads(out.read_text())
    assert set(figures["sets"]) == {"none", "ngram"}
    for result in figures["sets"].values():
        assert result["largest_editors"] == 4  # 20 short requests in 10 s per editor: far from the target
        assert {row["editors"] for row in result["rows"]} >= {1, 2, 3, 4}
    assert "largest N with p50 <= 300 ms: 4" in capsys.readouterr().out
