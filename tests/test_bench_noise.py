"""The kernel-noise measure of ``bench decode`` (:mod:`bench.noise`): a generation records the shape of
every verify pass, and a replay in those shapes tells a parting that the pass shape caused (noise) from
one that verification caused (a fault)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.noise import divergence_within_noise, measure_parting, replay_logits, run_shaped_logits
from decoding.drafters.base import Draft, DraftContext
from decoding.drafters.ngram import NgramDrafter
from decoding.generate import SpeculativeGenerator
from decoding.types import GenerationConfig
from decoding.kv_cache import KVCacheState
from tests.conftest import ToyTokenizer, tiny_model

pytestmark = pytest.mark.unit

PROMPT = [3, 7, 3, 9, 1, 4, 3, 7, 3, 9, 1]
WIDTH = 5  # the pass width a shape-sensitive kernel treats differently: a draft of 4 and the root


class ConstantDrafter:
    """Drafts ``budget`` copies of one token every round, so every pass is as wide as the budget allows."""

    name = "constant"

    def __init__(self, token: int):
        self.token = token

    def propose(self, context: DraftContext) -> Draft | None:
        return Draft([self.token] * context.max_tokens, None, "constant")

    def observe(self, draft: Draft, num_accepted: int) -> None:
        pass

    def catch_up_ms(self, token_ids: list[int]) -> float:
        return 0.0

    def relax_catch_up(self) -> None:
        pass


def shape_sensitive_model(boosted: int, delta: float):
    """The tiny float32 target, but a pass of exactly ``WIDTH`` tokens adds ``delta`` to ``boosted``'s
    logit in every row: a kernel whose result depends on the batch size, as low-precision kernels do."""
    model = tiny_model(seed=0)

    class ShapeSensitiveState(KVCacheState):
        def forward(self, new_ids, logits_to_keep=0, attention_mask=None, position_ids=None):
            logits = super().forward(new_ids, logits_to_keep, attention_mask, position_ids)
            if len(new_ids) == WIDTH:
                logits = logits.clone()
                logits[:, boosted] += delta
            return logits

    model.new_state = lambda: ShapeSensitiveState(model)
    return model


def plain_first_logits() -> torch.Tensor:
    """``(V,)`` the plain tiny target's logits for the first output token after ``PROMPT``."""
    return replay_logits(tiny_model(seed=0), PROMPT, [0], 1)[0]


def test_a_generation_records_each_pass_width_and_what_it_kept():
    model = tiny_model(seed=0)
    generation = SpeculativeGenerator(model, ToyTokenizer()).generate(
        PROMPT, NgramDrafter(), GenerationConfig(max_new_tokens=24, max_draft_tokens=4))
    passes = generation.stats.passes
    assert len(passes) == generation.stats.target_passes > 1
    assert sum(kept for _, kept, _ in passes) == len(generation.token_ids) == 24
    assert sum(fed - 1 for fed, _, _ in passes) == generation.stats.drafted
    assert all(1 <= kept <= fed and not tree for fed, kept, tree in passes)
    assert "passes" not in generation.stats.to_dict()


def test_the_run_shaped_replay_reproduces_every_choice_of_a_shape_sensitive_run():
    """The run's passes were 5 wide, so its first token is the boosted runner-up; plain decoding
    (1-token passes) never sees the boost. The replay in the run's shapes gives every one of the run's
    tokens as the argmax, the step-by-step replay does not."""
    logits = plain_first_logits()
    top, runner_up = logits.topk(2).indices.tolist()
    gap = float(logits[top] - logits[runner_up])
    model = shape_sensitive_model(runner_up, gap + 0.5)
    generator = SpeculativeGenerator(model, ToyTokenizer())
    config = GenerationConfig(max_new_tokens=12, max_draft_tokens=WIDTH - 1)
    run = generator.generate(PROMPT, ConstantDrafter(token=0), config)
    plain = generator.generate(PROMPT, None, config)
    assert run.token_ids[0] == runner_up and plain.token_ids[0] == top
    last = len(run.token_ids) - 1
    shaped = run_shaped_logits(model, PROMPT, run.token_ids, run.stats.passes, last)
    assert shaped is not None and shaped.argmax(-1).tolist() == run.token_ids
    stepwise = replay_logits(model, PROMPT, run.token_ids, 1)
    assert stepwise.argmax(-1).tolist() != run.token_ids
    assert run_shaped_logits(model, PROMPT, run.token_ids, [(3, 1, True)], 0) is None  # a tree pass
    assert run_shaped_logits(model, PROMPT, run.token_ids, run.stats.passes[:1], 5) is None  # too few


def test_a_parting_caused_by_the_pass_shape_is_within_noise_and_a_wrong_token_is_not():
    """Without the run's shapes the parting looks like a fault (the measure's own passes are other
    widths); with them it is noise. A token that no shape puts first stays a fault with them too."""
    logits = plain_first_logits()
    top, runner_up = logits.topk(2).indices.tolist()
    bottom = int(logits.argmin())
    gap = float(logits[top] - logits[runner_up])
    model = shape_sensitive_model(runner_up, gap + 0.5)
    engine = SimpleNamespace(target=SimpleNamespace(model=model))
    run_passes = [(WIDTH, 1, False)]
    within, lead, noise = divergence_within_noise(engine, PROMPT, [top], [runner_up], chunk=2)
    assert within is False and lead == pytest.approx(gap, abs=1e-4) and noise < 1e-4
    within, lead, noise = divergence_within_noise(engine, PROMPT, [top], [runner_up], chunk=2, passes=run_passes)
    assert within is True and noise == pytest.approx(gap + 0.5, abs=1e-4)
    within, lead, noise = divergence_within_noise(engine, PROMPT, [top], [bottom], chunk=2, passes=run_passes)
    assert within is False and lead > noise


def test_the_cache_history_names_the_pass_that_computed_each_cached_position():
    state = KVCacheState(tiny_model(seed=0))
    state.forward([1, 2, 3, 4, 5])
    state.forward([6, 7, 8])
    assert state.history == [(5, 5, False), (3, 3, False)]
    state.rollback(6)
    assert state.history == [(5, 5, False), (3, 1, False)]
    state.rollback(4)
    assert state.history == [(5, 4, False)]
    state.forward([9, 9, 9, 9])
    state.keep(4, [5, 7])  # a tree's accepted branch: positions picked out of a pass
    assert state.history == [(5, 4, False), (4, 2, True)] and len(state) == 6
    state.rollback(0)
    assert state.history == []


def test_with_the_prompts_passes_the_runs_own_computation_decides_a_parting():
    """The run-shaped replay with the prompt's recorded passes is the run's own computation: the served
    token leads there (the boosted runner-up, chosen in a 5-wide pass) or it is a fault (a token no pass
    put first), however the noise compares; a tree pass among the prompt's leaves it to the noise."""
    logits = plain_first_logits()
    top, runner_up = logits.topk(2).indices.tolist()
    bottom = int(logits.argmin())
    model = shape_sensitive_model(runner_up, float(logits[top] - logits[runner_up]) + 0.5)
    prompt_passes = [(6, 6, False), (4, 4, False)]  # len(PROMPT) - 1 positions, in two pieces
    run_passes = [(WIDTH, 1, False)]
    parting = measure_parting(model, PROMPT, [top], [runner_up], 2, (), run_passes, prompt_passes)
    assert parting.within is True and parting.served_lead == pytest.approx(0.5, abs=1e-4)
    parting = measure_parting(model, PROMPT, [top], [bottom], 2, (), run_passes, prompt_passes)
    assert parting.within is False and parting.served_lead < 0
    # a tree pass among the prompt's, or passes that miss a prompt position: the noise decides
    assert measure_parting(model, PROMPT, [top], [bottom], 2, (), run_passes, [(6, 6, True), (4, 4, False)]
                           ).served_lead is None
    assert measure_parting(model, PROMPT, [top], [runner_up], 2, (), run_passes, [(6, 6, False)]).served_lead is None


def test_a_replay_whose_earlier_top_tokens_are_not_the_outputs_is_not_the_runs_computation():
    """Recorded shapes that do not give the output's own tokens before the parting (here a 5-wide pass
    whose boost puts the runner-up first at token 0, which the output does not hold) cannot vouch for the
    parting: it counts as a fault, however the two tokens' logits compare there."""
    logits = plain_first_logits()
    top, runner_up = logits.topk(2).indices.tolist()
    model = shape_sensitive_model(runner_up, float(logits[top] - logits[runner_up]) + 0.5)
    second = int(replay_logits(tiny_model(seed=0), PROMPT, [top, 0], 1)[1].argmax())
    other = next(t for t in range(48) if t not in (second, runner_up))
    parting = measure_parting(model, PROMPT, [top, second], [top, other], 2, (), [(WIDTH, 2, False)],
                              [(10, 10, False)])
    assert parting.faithful is False and parting.within is False


def _gpu_exactness():
    """bench/device/gpu_exactness.py (a script, not a package module), imported from its file."""
    path = Path(__file__).resolve().parents[1] / "bench" / "device" / "gpu_exactness.py"
    spec = importlib.util.spec_from_file_location("gpu_exactness", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_scripts_parting_check_measures_the_run_shapes_too():
    """The GPU script classifies partings with the same measure as ``bench decode``, the run's own pass
    shapes included; a wrong token and a length difference stay faults."""
    classify_parting = _gpu_exactness().classify_parting
    logits = plain_first_logits()
    top, runner_up = logits.topk(2).indices.tolist()
    bottom = int(logits.argmin())
    model = shape_sensitive_model(runner_up, float(logits[top] - logits[runner_up]) + 0.5)
    run_passes = [(WIDTH, 1, False)]
    assert classify_parting(model, PROMPT, [top], [top], 2) == {"parted": False}
    assert classify_parting(model, PROMPT, [top], [runner_up], 2)["within_noise"] is False
    parting = classify_parting(model, PROMPT, [top], [runner_up], 2, run_passes)
    assert parting["within_noise"] is True and parting["token"] == 0 and parting["other_token"] == runner_up
    assert classify_parting(model, PROMPT, [top], [bottom], 2, run_passes)["within_noise"] is False
    assert classify_parting(model, PROMPT, [top, 1], [top], 2, run_passes)["why"] == "length differs"
