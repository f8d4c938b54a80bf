"""``speclsp bench scale-out``: how many editors one GPU serves within a latency target, on paper.

A discrete-event simulation, not a measurement of a GPU. Input: a per-request trace written by
``speclsp bench lsp --requests-json FILE`` (typing replayed through our server): when each completion
request was sent, its prompt tokens, the prompt tokens reused from the previous prompt's KV cache, and
the length of an ideal completion (what the typist typed next). Only requests that reach the model are
sent to the engine; type-through cache hits and suppressed requests are answered on the editor side.

N editors each replay that stream, shifted by a random offset (cyclically, so the load is stationary),
against one engine modelled like vLLM's or SGLang's continuous batching: every step runs the decoding
requests (1 + k tokens each when speculating) and fills the rest of a token budget with prefill chunks,
first come first served, up to a maximum of running requests. A step costs a fixed overhead plus the
larger of its memory time (weights + KV read once, at an effective bandwidth) and its compute time
(2 x parameters FLOPs per token plus attention, at an effective FLOP rate), plus the drafter's own
sequential passes. A request's prompt is prefilled except the prefix-cache hit (its reused tokens,
rounded down to whole KV blocks); each decode step emits 1 + j tokens, j drafted tokens accepted, each
draft token accepted with a fixed probability chosen to give the assumed mean tokens per step. A
request superseded by the same editor's next request is aborted (its slot freed) and counts as not
answered in time (the typist had moved on; in the trace the next request always comes after the pause).

Latency: request sent by our server -> last token received, plus a fixed editor-side cost; p50 and p95
over requests sent in the measured window. The answer: the largest N whose p50 stays within the target.
Every assumption is a named field below, its source in the comment beside it; docs/scale-out.md
discusses them. Speed of this machine does not enter.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

DEFAULT_TRACE = Path(__file__).parent / "data" / "typing_requests.json"
ENGINE_STATUSES = ("ok", "superseded", "cancelled by client")  # requests that reached the model


@dataclass(frozen=True)
class GpuModel:
    """Qwen2.5-Coder-7B-Instruct, bf16, on one H100 SXM 80 GB (units: bytes, seconds, FLOP/s)."""

    params: float = 7.61e9  # Qwen2.5-Coder-7B model card: 7.61B parameters
    weight_bytes: float = 15.2e9  # params x 2 bytes (bf16), read once per step
    layers: int = 28  # Qwen2.5-Coder-7B config.json: num_hidden_layers
    hidden: int = 3584  # config.json: hidden_size (28 query heads x 128)
    kv_bytes_per_token: float = 57_344.0  # 2 (K, V) x 28 layers x 4 KV heads x 128 dims x 2 bytes
    hbm_bytes_per_s: float = 3.35e12  # NVIDIA H100 SXM datasheet: 3.35 TB/s HBM3
    # Effective share of peak bandwidth in decode: SGLang's docs report 158.3 tokens/s at batch 1 for
    # Llama-3.1-8B (16.1 GB bf16) on one H100 = 2.54 TB/s = 0.76; a vLLM sweep on A100 reports 77 %.
    bandwidth_efficiency: float = 0.76
    peak_flops: float = 989e12  # H100 SXM dense BF16 tensor-core peak (1,979 with sparsity)
    compute_efficiency: float = 0.5  # assumed model-FLOPs utilisation of prefill/verify batches
    step_overhead_s: float = 0.001  # assumed scheduler, sampling and launch cost per engine step
    max_batched_tokens: int = 8192  # vLLM default max_num_batched_tokens, OpenAI server, >= 70 GiB GPU
    max_running: int = 1024  # vLLM default max_num_seqs for the same case
    kv_block_tokens: int = 16  # vLLM's default KV block: prefix-cache hits count whole blocks

    def memory_seconds(self, nbytes: float) -> float:
        """Seconds to read ``nbytes`` from HBM at the effective bandwidth."""
        return nbytes / (self.hbm_bytes_per_s * self.bandwidth_efficiency)


@dataclass(frozen=True)
class Speculation:
    """One speculative-decoding assumption set (tokens, bytes)."""

    name: str
    draft_tokens: int = 0  # k: draft tokens verified per request per step
    tokens_per_step: float = 1.0  # mean tokens emitted per verify step, the bonus token included
    draft_passes: int = 0  # sequential drafter forward passes per step (n-gram lookup: none)
    draft_bytes: float = 0.0  # weights a drafter pass reads

    def __post_init__(self) -> None:
        if not 1.0 <= self.tokens_per_step <= self.draft_tokens + 1:
            raise ValueError(f"{self.name}: tokens_per_step must lie in [1, draft_tokens + 1]")


ASSUMPTIONS = {
    "none": Speculation("none"),
    # vLLM docs' n-gram example: k = 5, prompt_lookup_max = 4. 2.0 tokens/step: inside the 1.5-3 range
    # for completions; our own n-gram drafter measured 2.97 on FIM holes with Qwen2.5-Coder-0.5B
    # (docs/performance.md, "Filling holes").
    "ngram": Speculation("ngram", draft_tokens=5, tokens_per_step=2.0),
    # SGLang EAGLE-3 chain (num-steps 3, topk 1, draft tokens 4); lmsys's published EAGLE-3 drafter for
    # Llama 4 Maverick reports acceptance length 2.45 with that shape; 2.5 assumed for code. Drafter:
    # one decoder layer (~0.26B params, the EAGLE-Qwen2-7B size) + a 32k-token LM head (EAGLE-3), bf16.
    "eagle": Speculation("eagle", draft_tokens=3, tokens_per_step=2.5, draft_passes=3,
                         draft_bytes=2 * (0.26e9 + 32_000 * 3584)),
}


def acceptance_rate(spec: Speculation) -> float:
    """The per-token acceptance probability a with (1 - a^(k+1)) / (1 - a) = tokens_per_step (the
    expected tokens per step of speculative decoding with i.i.d. acceptance, Leviathan et al. 2023)."""
    k, target = spec.draft_tokens, spec.tokens_per_step
    if k == 0 or target <= 1.0:
        return 0.0
    if target >= k + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid ** j for j in range(k + 1)) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass
class Request:
    """One completion request at the engine (tokens; seconds on the simulation's clock)."""

    editor: int
    arrival_s: float
    prompt_tokens: int
    prefill_tokens: int  # prompt tokens to compute: the prefix-cache miss, at least 1
    new_tokens: int
    abort_s: float = math.inf  # the same editor's next request supersedes this one
    prefilled: int = 0
    generated: int = 0
    finish_s: float | None = None  # None: aborted or unfinished


def step_seconds(gpu: GpuModel, spec: Speculation, decode_contexts: list[int],
                 chunks: list[tuple[int, int]]) -> float:
    """Duration of one engine step, seconds: ``decode_contexts`` (tokens in the KV cache of each decoding
    request) and prefill ``chunks`` (chunk tokens, tokens before the chunk) of the other requests."""
    verify = 1 + spec.draft_tokens
    tokens = verify * len(decode_contexts) + sum(c for c, _ in chunks)
    kv_tokens = sum(decode_contexts) + sum(before + c for c, before in chunks)
    memory = gpu.memory_seconds(gpu.weight_bytes + gpu.kv_bytes_per_token * kv_tokens)
    attention = 4 * gpu.layers * gpu.hidden * (verify * sum(decode_contexts)
                                               + sum(c * (before + c / 2) for c, before in chunks))
    compute = (2 * gpu.params * tokens + attention) / (gpu.peak_flops * gpu.compute_efficiency)
    # each sequential drafter pass reads its weights and pays half a step's launch overhead (assumed)
    drafting = spec.draft_passes * (gpu.memory_seconds(spec.draft_bytes) + gpu.step_overhead_s / 2) \
        if decode_contexts else 0.0
    return gpu.step_overhead_s + max(memory, compute) + drafting


def _schedule(gpu: GpuModel, spec: Speculation, running: list[Request], waiting: deque, now: float):
    """This step's decoding requests and prefill chunks [(request, chunk tokens)]; admits waiting
    requests (dropping aborted ones) while the token budget and ``max_running`` allow."""
    decoding = [r for r in running if r.prefilled >= r.prefill_tokens]
    budget = gpu.max_batched_tokens - (1 + spec.draft_tokens) * len(decoding)
    chunks = []
    for request in running:
        if request.prefilled < request.prefill_tokens and budget > 0:
            chunk = min(budget, request.prefill_tokens - request.prefilled)
            chunks.append((request, chunk))
            budget -= chunk
    while waiting and budget > 0 and len(running) < gpu.max_running:
        request = waiting.popleft()
        if request.abort_s <= now:
            continue
        running.append(request)
        chunk = min(budget, request.prefill_tokens)
        chunks.append((request, chunk))
        budget -= chunk
    return decoding, chunks


def simulate(requests: list[Request], gpu: GpuModel, spec: Speculation, seed: int = 0) -> dict:
    """Run the engine over ``requests`` (any order); sets each one's ``finish_s``. Returns engine
    figures: steps run and the mean number of running requests per step."""
    import numpy as np

    rng = np.random.default_rng(seed)
    alpha = acceptance_rate(spec)
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    waiting: deque[Request] = deque()
    running: list[Request] = []
    now, steps, batch_sum = 0.0, 0, 0
    while pending or waiting or running:
        while pending and pending[0].arrival_s <= now:
            waiting.append(pending.popleft())
        running = [r for r in running if r.abort_s > now]  # aborted between steps: slot freed
        decoding, chunks = _schedule(gpu, spec, running, waiting, now)
        if not decoding and not chunks:
            if not pending:
                break
            now = max(now, pending[0].arrival_s)
            continue
        took = step_seconds(gpu, spec, [r.prompt_tokens + r.generated for r in decoding],
                            [(c, r.prompt_tokens - r.prefill_tokens + r.prefilled) for r, c in chunks])
        now += took
        steps, batch_sum = steps + 1, batch_sum + len(running)
        accepted = (np.minimum(rng.geometric(1 - alpha, len(decoding)) - 1, spec.draft_tokens)
                    if alpha < 1 else np.full(len(decoding), spec.draft_tokens))
        for request, extra in zip(decoding, accepted):
            request.generated += 1 + int(extra)
        for request, chunk in chunks:
            request.prefilled += chunk
            if request.prefilled >= request.prefill_tokens:
                request.generated = 1  # the last prefill chunk samples the first token
        for request in decoding + [r for r, _ in chunks]:
            if request.generated >= request.new_tokens and request.finish_s is None:
                request.finish_s = now
        running = [r for r in running if r.finish_s is None]
    return {"steps": steps, "mean_running": batch_sum / steps if steps else 0.0}


@dataclass(frozen=True)
class TraceRequest:
    """One engine-bound request of the measured stream (seconds since the replay started; tokens)."""

    sent_s: float
    prompt_tokens: int
    reused_tokens: int
    new_tokens: int


@dataclass(frozen=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    duration_s: float  # the stream's length: the last request plus its pause
    settings: dict = field(default_factory=dict)


def load_trace(path: Path, chars_per_token: float, max_new_tokens: int | None = None) -> Trace:
    """The engine-bound requests of a ``bench lsp --requests-json`` file. A request's new tokens: its
    ideal completion (``expected_chars`` / ``chars_per_token``) plus a stop token, at most
    ``max_new_tokens`` (default: the run's). Rows without token counts (superseded before the model
    started) take the median prompt and reuse of the rows that have them.

    Raises:
        ValueError: no row reached the model, or rows lack ``expected_chars`` (an older export).
    """
    data = json.loads(Path(path).read_text())
    rows = [row for row in data["requests"] if row["status"] in ENGINE_STATUSES]
    if not rows:
        raise ValueError(f"{path}: no request reached the model; run speclsp bench lsp --requests-json again")
    if any("expected_chars" not in row for row in rows):
        raise ValueError(f"{path}: rows lack expected_chars; export it again with this version of bench lsp")
    cap = max_new_tokens or data.get("settings", {}).get("max_new_tokens", 64)
    counted = [row for row in rows if row["prompt_tokens"] is not None]
    prompt_median = sorted(row["prompt_tokens"] for row in counted)[len(counted) // 2] if counted else 1
    reused_median = sorted(row["prompt_reused"] for row in counted)[len(counted) // 2] if counted else 0
    requests = []
    for row in rows:
        prompt = row["prompt_tokens"] if row["prompt_tokens"] is not None else prompt_median
        reused = row["prompt_reused"] if row["prompt_reused"] is not None else reused_median
        new = min(cap, math.ceil(row["expected_chars"] / chars_per_token) + 1)
        requests.append(TraceRequest(row["sent_s"], prompt, reused, new))
    last = data["requests"][-1]
    duration = last["sent_s"] + last.get("budget_ms", 0.0) / 1000
    return Trace(tuple(requests), duration, data.get("settings", {}))


def editor_requests(trace: Trace, editors: int, gpu: GpuModel, horizon_s: float, seed: int) -> list[Request]:
    """``editors`` copies of the stream, each shifted by a random offset and repeated (cyclically) to
    ``horizon_s``; each request is aborted when its editor's next one is sent."""
    import numpy as np

    rng = np.random.default_rng(seed)
    requests = []
    for editor in range(editors):
        offset = rng.uniform(0, trace.duration_s)
        times = []
        for cycle in range(int(horizon_s // trace.duration_s) + 2):
            for item in trace.requests:
                sent = (item.sent_s + offset) % trace.duration_s + cycle * trace.duration_s
                if sent < horizon_s:
                    times.append((sent, item))
        times.sort(key=lambda pair: pair[0])
        mine = []
        for sent, item in times:
            hit = item.reused_tokens // gpu.kv_block_tokens * gpu.kv_block_tokens
            mine.append(Request(editor, sent, item.prompt_tokens, max(1, item.prompt_tokens - hit), item.new_tokens))
        for request, following in itertools.pairwise(mine):
            request.abort_s = following.arrival_s
        requests.extend(mine)
    return requests


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``inf`` entries allowed: requests not answered in time)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def measure(trace: Trace, editors: int, gpu: GpuModel, spec: Speculation, seconds: float, warmup_s: float,
            editor_side_s: float, seed: int = 0) -> dict:
    """Latency figures (ms) of ``editors`` over ``seconds`` after ``warmup_s``: p50, p95 (``inf`` when
    the rank falls on an unanswered request), the share answered before being superseded and the
    engine's mean running requests per step."""
    requests = editor_requests(trace, editors, gpu, warmup_s + seconds, seed)
    engine = simulate(requests, gpu, spec, seed)
    window = [r for r in requests if r.arrival_s >= warmup_s]
    latencies = [(r.finish_s - r.arrival_s + editor_side_s) * 1000
                 if r.finish_s is not None and r.finish_s <= r.abort_s else math.inf for r in window]
    return {"editors": editors, "requests": len(window),
            "p50_ms": round(percentile(latencies, 50), 1), "p95_ms": round(percentile(latencies, 95), 1),
            "answered": round(sum(math.isfinite(v) for v in latencies) / len(window), 3) if window else 0.0,
            "mean_running": round(engine["mean_running"], 1)}


def largest_within(p50_ms, target_ms: float, limit: int = 4096) -> int:
    """The largest N in [1, ``limit``] with ``p50_ms(N) <= target_ms`` (0 if none), for a p50 that grows
    with N: doubling, then bisection."""
    if p50_ms(1) > target_ms:
        return 0
    good, bad = 1, None
    while bad is None and good < limit:
        trial = min(limit, good * 2)
        if p50_ms(trial) <= target_ms:
            good = trial
        else:
            bad = trial
    if bad is None:
        return good
    while bad - good > 1:
        middle = (good + bad) // 2
        if p50_ms(middle) <= target_ms:
            good = middle
        else:
            bad = middle
    return good


def evaluate(trace: Trace, gpu: GpuModel, spec: Speculation, args: argparse.Namespace) -> dict:
    """One assumption set: the largest N within the target and the figures of every N simulated."""
    measured: dict[int, dict] = {}

    def at(editors: int) -> dict:
        if editors not in measured:
            measured[editors] = measure(trace, editors, gpu, spec, args.seconds, args.warmup,
                                        args.editor_side_ms / 1000, args.seed)
        return measured[editors]

    best = largest_within(lambda n: at(n)["p50_ms"], args.target_ms, args.limit)
    for editors in args.editors:
        at(editors)
    return {"speculation": vars(spec), "largest_editors": best, "rows": [measured[n] for n in sorted(measured)]}


def run(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace, args.chars_per_token, args.max_new_tokens)
    gpu = replace(GpuModel(), compute_efficiency=args.compute_efficiency, step_overhead_s=args.step_overhead_ms / 1000,
                  max_batched_tokens=args.max_batched_tokens)
    args.seconds = args.seconds or trace.duration_s  # default: every editor's whole stream once
    count, prompt = len(trace.requests), sum(r.prompt_tokens for r in trace.requests)
    print(f"trace {args.trace}: {count} engine requests in {trace.duration_s:.0f} s ({count / trace.duration_s:.2f}/s "
          f"per editor); prompt tokens mean {prompt / count:.0f}, reused share "
          f"{sum(r.reused_tokens for r in trace.requests) / prompt:.2f}, new tokens mean "
          f"{sum(r.new_tokens for r in trace.requests) / count:.1f}")
    results = {"trace": str(args.trace), "target_ms": args.target_ms, "gpu": vars(gpu), "sets": {}}
    for name in args.assumptions:
        spec = ASSUMPTIONS[name]
        if args.tokens_per_step is not None and spec.draft_tokens:
            spec = replace(spec, tokens_per_step=args.tokens_per_step)
        result = results["sets"][name] = evaluate(trace, gpu, spec, args)
        print(f"\n{name}: k={spec.draft_tokens}, {spec.tokens_per_step} tokens/step: largest N with p50 <= "
              f"{args.target_ms:g} ms: {result['largest_editors']}")
        print("| editors | p50 ms | p95 ms | answered in time | mean running |\n|---|---|---|---|---|")
        for row in result["rows"]:
            print(f"| {row['editors']} | {row['p50_ms']} | {row['p95_ms']} | {row['answered']} | {row['mean_running']} |")
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def add_parser(kinds) -> None:
    """Register ``speclsp bench scale-out``."""
    parser = kinds.add_parser("scale-out", help="simulate N editors against one GPU serving engine (on paper): "
                                                "p50/p95 latency against N and the largest N within a p50 target")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="per-request export of speclsp bench lsp --requests-json (default: the committed one)")
    parser.add_argument("--assumptions", type=lambda v: v.split(","), default=list(ASSUMPTIONS),
                        help=f"speculation assumption sets, comma-separated, of {', '.join(ASSUMPTIONS)}")
    parser.add_argument("--editors", type=lambda v: [int(n) for n in v.split(",")], default=[],
                        help="also report these editor counts, e.g. 1,16,64")
    parser.add_argument("--target-ms", type=float, default=300.0, help="p50 latency target")
    parser.add_argument("--chars-per-token", type=float, default=4.46,
                        help="characters per token of the target's tokenizer on the typed code (Qwen2.5-Coder: "
                             "4.46 on the replayed functions)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="cap of new tokens (default: the trace's)")
    parser.add_argument("--tokens-per-step", type=float, default=None,
                        help="override the mean tokens per verify step of the speculating sets")
    parser.add_argument("--compute-efficiency", type=float, default=GpuModel.compute_efficiency,
                        help="model-FLOPs utilisation of prefill and verify")
    parser.add_argument("--step-overhead-ms", type=float, default=1000 * GpuModel.step_overhead_s)
    parser.add_argument("--max-batched-tokens", type=int, default=GpuModel.max_batched_tokens,
                        help="token budget of one engine step (vLLM --max-num-batched-tokens)")
    parser.add_argument("--editor-side-ms", type=float, default=15.0,
                        help="fixed cost outside the engine per request: our server (3.6 ms p50 measured in the "
                             "trace's run), network and the engine's HTTP front end (assumed)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="simulated seconds measured (default: the trace's length)")
    parser.add_argument("--warmup", type=float, default=15.0, help="simulated seconds before measuring")
    parser.add_argument("--limit", type=int, default=2048, help="largest editor count tried")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON to this file")
    parser.set_defaults(run=run)
