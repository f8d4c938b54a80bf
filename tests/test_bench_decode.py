"""``speclsp bench decode``: the report's structure on a tiny run (not its speed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch


@pytest.mark.e2e
def test_bench_decode_reports_every_workload_and_method(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "bench", "decode", "--quick", "--methods", "ngram,tree,hf_prompt_lookup",
         "--model", "starter", "--draft-model", "starter-draft", "--dtype", "float32", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {(r["workload"], r["method"]) for r in rows} == {
        (w, m) for w in ("edit", "fim", "body", "entropy") for m in ("none", "ngram", "tree", "hf_prompt_lookup")}
    for row in rows:
        assert {"workload", "method", "tokens_per_s", "speedup_vs_plain", "speedup_vs_own_plain", "tokens_per_pass",
                "acceptance_rate", "identical_to_plain"} <= set(row)
        assert row["tokens_per_s"] > 0
        if row["method"] != "hf_prompt_lookup":  # ours: exact greedy (fp32, fixed prompts)
            assert row["identical_to_plain"] is True
            assert row["divergences_within_noise"] == row["other_divergences"] == 0
        if row["method"] == "none":
            assert row["speedup_vs_plain"] == 1.0 and row["tokens_per_pass"] == 1.0 and row["sources"] == {}
        if row["method"] in ("ngram", "tree"):  # lookup drafts only, counted per source
            # Where drafts are rarely accepted (entropy), the policy may rightly stop drafting (k = 0).
            assert row["sources"] or row["workload"] != "edit"
            assert all(name.startswith(("ngram", "tree")) for name in row["sources"])
            assert all(0 <= s["accepted"] <= s["drafted"] and s["rounds"] > 0 for s in row["sources"].values())
        if row["method"] in ("ngram", "tree"):  # lookup drafters: never above the bound in hindsight
            assert row["tokens_per_pass"] <= row["lookup_bound_tokens_per_pass"] + 1e-3
    assert "speedup" in done.stdout
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert {r["k"] for r in sweep} == {1, 2, 4, 8, 16} and all(r["tokens_per_pass"] >= 1 for r in sweep)
    for name in ("speedup_vs_k.png", "tokens_per_pass_vs_k.png", "tokens_per_s.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.model
def test_step_cost_times_the_loaded_quantized_pair():
    from bench.step_cost import step_costs, weight_bytes
    from decoding.engine import Engine
    from decoding.types import EngineConfig

    config = EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32")
    plain = Engine.load(config)
    engine = Engine.load(EngineConfig(**{**vars(config), "quantization": "int8-hybrid"}))
    rows = step_costs(engine, contexts=(32, 64), repeats=2)
    assert [(r["role"], r["quantization"], r["context"]) for r in rows] == [
        ("target", "int8-hybrid", 32), ("target", "int8-hybrid", 64), ("draft", "int8-hybrid", 32),
        ("draft", "int8-hybrid", 64)]
    assert all(r["step_ms"] > 0 and r["verify8_ms"] > 0 and r["verify16_ms"] > 0 for r in rows)
    assert all(set(r["pass_ms"]) == {"1", "2", "4", "8", "16", "32", "128", "512", "1024"} for r in rows)
    assert all(r["samples"]["1"] == 2 and r["warmup_ms"]["1024"] > 0 for r in rows)
    # the int8 weights are held beside their dequantised copy: more bytes than the float32 model's alone
    assert rows[0]["weight_bytes"] > weight_bytes(plain.target.model)


@pytest.mark.model
def test_cost_mode_times_each_k_relative_to_one_token(monkeypatch):
    from bench import step_cost as bench_decode

    monkeypatch.setitem(bench_decode.QWEN_SHAPES, "tiny", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        vocab_size=64, tie_word_embeddings=True))
    rows = bench_decode.cost(["tiny"], "cpu", context=16, repeats=2)
    assert rows[0]["model_shape"] == "tiny" and rows[0]["decode_ms"] > 0
    assert set(rows[0]["verify_ratio"]) == {"2", "4", "8", "16"} and all(v > 0 for v in rows[0]["verify_ratio"].values())


@pytest.mark.model
def test_a_divergence_is_within_noise_only_where_the_lead_is_below_the_measured_noise():
    """The classification can fail both ways: a runner-up tied exactly with the argmax is within the
    noise, the lowest-scoring token is not (float32: the measured noise is tiny), and equal outputs are
    no divergence."""
    from types import SimpleNamespace

    from bench.noise import divergence_within_noise, replay_logits
    from tests.conftest import tiny_model

    model = tiny_model(seed=0)
    prompt = [1, 2, 3]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]  # (V,)
    top, bottom = int(logits.argmax()), int(logits.argmin())
    engine = SimpleNamespace(target=SimpleNamespace(model=model))
    assert divergence_within_noise(engine, prompt, [top, 5], [top, 5], 4)[0] is False
    within, lead, noise = divergence_within_noise(engine, prompt, [top], [bottom], 4)
    assert within is False and lead > 1e-3 and 0 <= noise < 1e-4
    stepwise, passes = replay_logits(model, prompt, [top, 5, 6, 7], 1), replay_logits(model, prompt, [top, 5, 6, 7], 3)
    assert stepwise.shape == (4, 48) and torch.allclose(stepwise[0], logits, atol=1e-5)
    assert torch.allclose(stepwise, passes, atol=1e-5)
    with torch.no_grad():  # make the runner-up tie the top exactly
        second = int(logits.topk(2).indices[1])
        model.lm_head.weight[second] = model.lm_head.weight[top]
    within, lead, _ = divergence_within_noise(engine, prompt, [top], [second], 4)
    assert within is True and lead == 0


@pytest.mark.unit
def test_the_lookup_bound_counts_the_passes_of_the_best_lookup_in_hindsight():
    from bench.decode import lookup_bound_passes

    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 5]
    # A copy of the prompt after its first token: 8 tokens, k = 3 -> two full rounds of 3 + 1.
    assert lookup_bound_passes(prompt, [6, 7, 8, 9, 10, 11, 12, 5], max_draft=3) == 2
    # Novel tokens (99, 98) follow no occurrence of their context: each costs a pass of its own.
    assert lookup_bound_passes(prompt, [99, 98, 6], max_draft=3) == 3
    # The best of several places wins: 5 is followed by 6 7 8 at the start, by nothing better elsewhere.
    assert lookup_bound_passes([1, 5, 2, 5, 6, 7, 8, 5], [6, 7, 8], max_draft=3) == 1


@pytest.mark.unit
def test_no_ngram_drafter_beats_the_lookup_bound():
    """The bound is a ceiling: our n-gram drafter, at fixed k on random repetitive sequences, never
    needs fewer passes (a bound computed too high, e.g. over later tokens, fails this)."""
    import random

    from bench.decode import lookup_bound_passes
    from decoding.drafters.base import DraftContext
    from decoding.drafters.ngram import NgramDrafter

    rng = random.Random(0)
    for _ in range(50):
        base = [rng.randrange(12) for _ in range(30)]
        prompt, output = base[:20], base[20:] + base[:15] + [rng.randrange(12) for _ in range(5)]
        k = rng.choice([1, 3, 8])
        drafter, sequence, done, passes = NgramDrafter(), list(prompt), 0, 0
        while done < len(output):
            budget = min(k, len(output) - done - 1)
            draft = drafter.propose(DraftContext(sequence, budget, None, None)) if budget > 0 else None
            accepted = 0
            for token in (draft.tokens if draft else []):
                if token != output[done + accepted]:
                    break
                accepted += 1
            sequence += output[done : done + accepted + 1]
            done += accepted + 1
            passes += 1
        assert lookup_bound_passes(prompt, output, k) <= passes


@pytest.mark.unit
def test_methods_run_each_familys_plain_first_and_llama_cpp_only_for_a_model_pack(monkeypatch):
    from bench import decode as bench_decode

    assert bench_decode.chosen_methods("ngram,llama_draft,hf_assisted", "qwen2.5-coder-1.5b") == [
        "none", "ngram", "hf_assisted", "llama_plain", "llama_draft"]
    monkeypatch.setattr(bench_decode.llama_cpp, "server_binary", lambda: "/built/llama-server")
    assert "llama_ngram" in bench_decode.chosen_methods("default", "qwen2.5-coder-1.5b")
    assert not any(m.startswith("llama") for m in bench_decode.chosen_methods("default", "starter"))
    monkeypatch.setattr(bench_decode.llama_cpp, "server_binary", lambda: None)
    assert not any(m.startswith("llama") for m in bench_decode.chosen_methods("default", "qwen2.5-coder-1.5b"))
    with pytest.raises(ValueError, match="unknown methods"):
        bench_decode.chosen_methods("ngram,llama_fast", "qwen2.5-coder-1.5b")


@pytest.mark.unit
def test_each_method_learns_its_own_draft_lengths_per_workload(monkeypatch):
    """A method's drafts must not follow another method's rounds (one shared policy let the draft
    model's estimate from ``auto`` decide the ``model`` rows): one policy per method, kept over a
    workload's prompts, fresh per workload; and the generation runs under the policy it was given."""
    from types import SimpleNamespace

    from bench import decode as bench_decode

    seen: dict[tuple[str, str, int], object] = {}

    def fake_run_ours(engine, method, prompt, new_tokens, max_draft, policy):
        seen[(engine.workload, method, prompt[0])] = policy
        return bench_decode.Run([1, 2, 3], 1.0, 3, 0, 0)

    monkeypatch.setattr(bench_decode, "run_ours", fake_run_ours)
    engine = SimpleNamespace(config=SimpleNamespace(ngram=SimpleNamespace(min_ngram=1)), workload="")
    for workload in ("edit", "fim"):
        engine.workload = workload
        bench_decode.bench(engine, {workload: [([0], 3), ([1], 3)]}, 1, 4, ["none", "ngram", "model", "auto"])
    for workload in ("edit", "fim"):
        for method in ("none", "ngram", "model", "auto"):
            assert seen[(workload, method, 0)] is seen[(workload, method, 1)]  # kept over the prompts
    policies = {id(seen[(w, m, 0)]) for w in ("edit", "fim") for m in ("none", "ngram", "model", "auto")}
    assert len(policies) == 8  # none shared between methods or workloads

    class Engine:  # records the policy in force when it generates
        policy = None
        reset_caches = staticmethod(lambda: None)

        def generate(self, prompt, config, mode):
            self.used = self.policy
            return SimpleNamespace(token_ids=[7], stats=SimpleNamespace(target_passes=1, drafted=0, accepted=0, passes=[],
                                                                       prompt_passes=[], sources={}))

    fake, policy = Engine(), bench_decode.DraftLengthPolicy()
    monkeypatch.undo()
    bench_decode.run_ours(fake, "model", [1], 1, 4, policy)
    assert fake.used is policy
    bench_decode.run_ours(fake, "model", [1], 1, 4)
    assert fake.used is not policy and isinstance(fake.used, bench_decode.DraftLengthPolicy)


@pytest.mark.unit
def test_the_seed_formula_beside_the_sweep():
    from bench.decode_plots import expected_tokens_per_pass

    assert expected_tokens_per_pass(0.0, 8) == 1.0 and expected_tokens_per_pass(1.0, 8) == 9.0
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25


@pytest.mark.e2e
def test_an_emulated_cpu_kind_runs_the_command_again_in_a_child_with_its_caps():
    """The parent runs the same command line again with the avx2 caps; the child's refusal and exit status
    come back (the refusal is cheap: no model loads)."""
    from decoding.weights.cpu_flags import native_cpu_flags
    from decoding.weights.cpu_kinds import AVX2

    if AVX2.missing_flags(native_cpu_flags()):
        pytest.skip("this CPU cannot run the avx2 kind")
    done = subprocess.run([sys.executable, "-m", "lsp_server.cli", "bench", "decode", "--cpu-kind", "avx2",
                           "--engine", "llama.cpp", "--methods", "tree"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "[cpu kind] avx2: running this command again with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2" in done.stderr
    assert "--engine llama.cpp cannot run tree" in done.stderr
