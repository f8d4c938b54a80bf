"""Section 3 of ``bench/device/gpu_exactness.py``: the chi-square sampling tier
(``tests/test_sampling_exactness.py``, ``tests/test_tree.py``, ``stats`` marker) run with the tests' harness
functions and trial counts on a torch device: the exact rules must pass (p > 1e-3), the wrong rules must be
caught (p < 1e-6); in priority order within a time budget, the rest reported as skipped."""

from __future__ import annotations

import time
import traceback

import torch


def stats_tier(device: str, budget_s: float, quick: bool, results: dict, say) -> int:
    """Section 3 of ``gpu_exactness.py``: the chi-square sampling tier on ``device`` within ``budget_s``
    seconds; rows go to ``results["stats"]`` (and tracebacks to ``results["errors"]``), lines to ``say``.
    Returns the number of failures (none counted with ``quick``: too few trials for the thresholds)."""
    import numpy as np  # noqa: F401

    import tests.test_sampling_exactness as se
    import tests.test_tree as tt
    from decoding.drafters.draft_model import ModelDrafter
    from decoding.generate import SpeculativeGenerator
    from decoding.sampling import processed_probs
    from decoding.tree import DraftTree
    from tests.conftest import tiny_model

    dev = torch.device(device)
    failures = 0
    deadline = time.perf_counter() + budget_s
    if quick:  # the same code with fewer trials (the thresholds then mean little)
        se.TRIALS, tt.TRIALS, tt.CONFIDENCE_TRIALS = 200, 150, 300

    @torch.no_grad()
    def first_token_probs(target) -> torch.Tensor:  # se.target_first_token_probs, on the device
        logits = target(input_ids=torch.tensor([se.PROMPT], device=dev)).logits[0, -1]
        return processed_probs(logits, se.SAMPLING).cpu()

    @torch.no_grad()
    def exact_pairs(model) -> dict:  # tt.exact_pairs, on the device (one batched pass for the second tokens)
        v = model.config.vocab_size
        first = torch.softmax(model(input_ids=torch.tensor([tt.PROMPT], device=dev)).logits[0, -1].float(), -1)
        batch = torch.tensor([tt.PROMPT + [a] for a in range(v)], device=dev)
        second = torch.softmax(model(input_ids=batch).logits[:, -1].float(), -1)
        table = (first[:, None] * second).cpu()
        return {(a, b): float(table[a, b]) for a in range(v) for b in range(v)}

    sampling_models = (tiny_model(seed=10, vocab_size=24, init_std=0.3).to(dev),
                       tiny_model(seed=11, vocab_size=24, init_std=0.02).to(dev))
    peaked_model = tiny_model(seed=20, vocab_size=12, init_std=0.25).to(dev)
    exact = exact_pairs(peaked_model)
    first = {}
    for (a, _), p in exact.items():
        first[a] = first.get(a, 0.0) + p
    candidates = []
    for a in sorted(first, key=lambda a: -first[a])[:3]:
        candidates += [[a, b] for b in sorted(range(12), key=lambda b: -exact[(a, b)])[:2]]
    tree = DraftTree.from_candidates(candidates, max_nodes=12)

    class Recording(ModelDrafter):
        def propose(self, context):
            draft = super().propose(context)
            self.lengths.append(len(draft.tokens))
            return draft

    def first_token(drafter_cls):
        target, draft = sampling_models
        counts = se.first_token_counts(target, drafter_cls(draft, target.config.vocab_size), seed=0)
        return se.pvalue(counts, first_token_probs(target)), se.TRIALS

    def tree_pairs(generator_cls):
        if generator_cls is SpeculativeGenerator:
            counts = tt.pair_counts(generator_cls, peaked_model, tree, seed=1000)
        else:  # IndependentCandidatesGenerator draws torch.rand((), generator=...) on the default device
            with torch.device(dev):
                counts = tt.pair_counts(generator_cls, peaked_model, tree, seed=1000)
        return tt.chi_square_pvalue(counts, exact), tt.TRIALS

    def confidence(drafter):
        counts = tt.confidence_pairs(peaked_model, drafter, 0.2)
        return tt.chi_square_pvalue(counts, exact, tt.CONFIDENCE_TRIALS), tt.CONFIDENCE_TRIALS

    def confidence_exact():
        drafter = Recording(tiny_model(seed=21, vocab_size=12, init_std=0.25).to(dev), 12)
        drafter.lengths = []
        p, n = confidence(drafter)
        cut = sum(length < 3 for length in drafter.lengths)
        if not 0 < cut < len(drafter.lengths):
            raise AssertionError(f"the confidence stop cut {cut} of {len(drafter.lengths)} drafts")
        return p, n

    # (name as in the tests, must pass (True) or be caught (False), run); exact rules first.
    cases = [
        ("test_first_token_of_speculative_sampling_matches_target", True, lambda: first_token(ModelDrafter)),
        ("test_tree_sampling_follows_the_target_distribution", True, lambda: tree_pairs(SpeculativeGenerator)),
        ("test_draft_model_with_a_confidence_stop_samples_the_target_distribution", True, confidence_exact),
        ("test_argmax_draft_with_softmax_ratio_is_caught", False, lambda: first_token(se.ArgmaxDrafter)),
        ("test_checking_candidates_independently_fails_the_same_test", False,
         lambda: tree_pairs(tt.IndependentCandidatesGenerator)),
        ("test_dropping_an_unsure_token_after_sampling_it_fails_the_same_test", False,
         lambda: confidence(tt.DropUnsureTokenDrafter(tiny_model(seed=21, vocab_size=12, init_std=0.25).to(dev), 12))),
    ]
    per_generation_s = None
    for name, exact_rule, run in cases:
        trials = se.TRIALS if "first_token" in name or "argmax" in name else (
            tt.TRIALS if "tree" in name or "independently" in name else tt.CONFIDENCE_TRIALS)
        left = deadline - time.perf_counter()
        if per_generation_s is not None and 1.5 * per_generation_s * trials > left:
            say(f"  stats {name}: SKIPPED (needs ~{per_generation_s * trials:.0f}s, {left:.0f}s left)")
            results["stats"].append({"test": name, "skipped": True})
            continue
        t0 = time.perf_counter()
        try:
            p, n = run()
            ok = p > 1e-3 if exact_rule else p < 1e-6
            error = None
        except Exception as exc:  # noqa: BLE001 - report and go on
            p, n, ok, error = float("nan"), trials, False, f"{type(exc).__name__}: {exc}"
            results["errors"].append({"where": name, "traceback": traceback.format_exc()})
        spent = time.perf_counter() - t0
        per_generation_s = spent / n
        failures += not ok and not quick  # --quick: too few trials for the thresholds to mean anything
        results["stats"].append({"test": name, "exact_rule": exact_rule, "p": p, "trials": n, "ok": ok,
                                 "seconds": round(spent, 1), "error": error})
        say(f"  stats {name}: {'PASS' if ok else 'FAIL'} p={p:.3g} ({'must be > 1e-3' if exact_rule else 'must be < 1e-6'})"
            f", {n} runs in {spent:.1f}s" + (f" ERROR {error}" if error else ""))
    return failures
