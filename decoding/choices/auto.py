"""What each ``auto`` setting chooses from figures measured on this machine (the one home of those choices).

* ``quantization: auto`` (:func:`choose_quantization`): for a float32 model on the CPU (no bfloat16
  instructions), ``fp16-weights`` where its weights are float16 values (the same model) and fbgemm's
  float16-weight product is measured faster, and ``int8-fp16-hybrid`` beside it where PyTorch's int8 kernel
  on bfloat16 inputs is faster still for a one-token pass (:mod:`decoding.choices.float32_weights`); ``int8-hybrid`` for a model on the CPU in
  bfloat16 (run by torch) where PyTorch's int8 kernel is faster than the bfloat16 product for a one-token
  pass in the layers that hold at least :data:`MIN_FASTER_SHARE` of the linear weights; else the weights as
  they are. Measured: the low-bit bound of one layer per weight shape
  (:func:`decoding.weights.hybrid_linear.fastest_low_bit_bound`). int8-hybrid weights pick the bfloat16
  model's greedy token about as often as bfloat16 itself does in another pass shape (``speclsp bench
  agreement``); ``int4-hybrid`` is another model (a quality trade), so ``auto`` never picks it.
* ``drafter: auto`` (:func:`draft_model_pays`): whether the draft model drafts beside the n-gram lookup.
  Speculative decoding with draft length k, acceptance α and a draft that costs c target steps per token
  gives (1 − α^(k+1)) / (1 − α) tokens per round for 1 + k·c target steps (Leviathan et al. 2022, section
  3.3); an n-gram draft costs nothing. So the draft model pays only where its step is cheap against the
  target's (c at most :data:`MAX_DRAFT_COST`). On the CPU it never is against n-gram drafts alone, so
  ``auto`` drafts from n-grams there; the draft model (and the ``tree`` drafter) are the GPU-side
  techniques, named by their settings until a GPU measurement decides.
* ``completionModel: auto`` (:func:`draft_model_completes`): the draft model writes inline completions
  (next edits stay with the target) where a target step costs more than :data:`COMPLETION_STEP_MS` or
  a target pass of :data:`TAIL_TOKENS` tokens (a typed tail's prefill) more than :data:`COMPLETION_TAIL_MS`.

Measured: the one-token step and the 16-token pass of each model (:func:`decoding.choices.pass_costs.pass_costs`). All figures
come from the one cache file of measured figures, or the pin that stands in for it
(:mod:`decoding.choices.figures`); each choice logs one line saying what it chose and the figures that
decided it. The figures behind these defaults: docs/decisions.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from decoding.choices import float32_weights
from decoding.choices.figures import (LOW_BIT_BOUNDS, MIN_FASTER_SHARE, cost_key, faster_share, keep_entry,
                                     known_bounds, listed_bounds)
from decoding.choices.pass_costs import pass_costs
from decoding.weights.hybrid_linear import fastest_low_bit_bound
from decoding.weights.int8_hybrid import HybridInt8Linear, fits

log = logging.getLogger(__name__)

MAX_DRAFT_COST = 0.2  # the draft model's step over the target's at most this (off the CPU): auto drafts with it
#: A target step slower than this (ms): inline completions are written by the draft model. A suggestion
#: arriving after the typist's next key is thrown away, and an answer takes a short prefill and a few
#: passes: about three passes must fit in the gap between a steady typist's keys.
COMPLETION_STEP_MS = 50.0
#: A target pass of TAIL_TOKENS tokens slower than this (ms): the draft model writes inline completions. Each
#: request first computes its typed tail (tens of tokens); that pass must fit in a steady typist's shortest
#: gap between keys. An engine's one-token step can be fast while its passes grow with each token
#: (docs/decisions.md#completion-model-auto).
COMPLETION_TAIL_MS = 150.0
TAIL_TOKENS = 16


def _decided(setting: str, model: str, reason: str) -> None:
    """The one log line of a choice: which setting, for which model, what and why."""
    log.info("%s auto for %s: %s", setting, model, reason)


def choose_quantization(model: torch.nn.Module, name: str,
                        run_dtype: torch.dtype | None = None) -> tuple[str, dict[tuple[int, int], int], str]:
    """What ``quantization: auto`` runs for ``model`` (loaded, dense, on its device and dtype) here;
    ``run_dtype``: the dtype it will run in where it was loaded narrow
    (:func:`decoding.weights.fp16_weights.narrow_load_dtype`).

    Returns:
        ``(quantization, int8 bounds per (out, in) weight shape (for ``make_int8_hybrid``; empty for
        ``none`` and ``fp16-weights``), a sentence saying why)``; the choice is logged.
    """
    device, dtype = next(model.parameters()).device, run_dtype or next(model.parameters()).dtype
    if device.type == "cpu" and dtype == torch.float32:
        packs, reason = float32_weights.choose(model, name)
        chosen, bounds = ("fp16-weights" if packs else "none"), {}
        if packs:
            hybrid, bounds, why = float32_weights.choose_int8(model, name)
            chosen, reason = ("int8-fp16-hybrid", f"{why}; {reason}") if hybrid else (chosen, f"{reason}; {why}")
        _decided("quantization", name, reason)
        return chosen, bounds, reason
    if device.type != "cpu" or dtype != torch.bfloat16:
        reason = f"none: {name} runs on {device} in {dtype}, and auto keeps its weights as they are there"
        _decided("quantization", name, reason)
        return "none", {}, reason
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    by_shape: dict[tuple[int, int], torch.nn.Linear] = {}
    for linear in linears:
        if fits(linear):
            by_shape.setdefault((linear.out_features, linear.in_features), linear)
    key = cost_key(name, model)
    bounds = known_bounds(key, set(by_shape))
    if bounds is None:
        bounds = {shape: fastest_low_bit_bound(HybridInt8Linear(linear)) for shape, linear in by_shape.items()}
        keep_entry(LOW_BIT_BOUNDS, key, lambda earlier: {f"{o}x{i}": b for (o, i), b in sorted(bounds.items())},
                   "measured low-bit bounds")
    share, listed = faster_share(linears, bounds), listed_bounds(bounds)
    if share < MIN_FASTER_SHARE:
        chosen, bounds = "none", {}
        reason = (f"none: int8 is faster for one token in {share:.0%} of {name}'s linear weights here (tokens per "
                  f"pass up to which it is, by weight shape: {listed}), under {MIN_FASTER_SHARE:.0%}: auto keeps "
                  f"{dtype} weights")
    else:
        chosen = "int8-hybrid"
        reason = (f"int8-hybrid: int8 is faster for one token in {share:.0%} of {name}'s linear weights here "
                  f"(at least {MIN_FASTER_SHARE:.0%}): int8 up to, by weight shape, {listed} tokens per pass")
    _decided("quantization", name, reason)
    return chosen, bounds, reason


@dataclass(frozen=True)
class StepCosts:
    """Milliseconds of one one-token pass of each model (the fastest round), of a :data:`TAIL_TOKENS`-token
    pass of each (0: not measured), and what they were measured on."""

    target_ms: float
    draft_ms: float
    key: str
    target_tail_ms: float = 0.0
    draft_tail_ms: float = 0.0

    @property
    def ratio(self) -> float:
        """c: the draft model's step in target steps."""
        return self.draft_ms / self.target_ms if self.target_ms > 0 else float("inf")


def measured_costs(target, draft) -> StepCosts:
    """The one-token step and :data:`TAIL_TOKENS`-token pass costs of ``target`` and ``draft``
    (:func:`decoding.choices.pass_costs.pass_costs`)."""
    key = f"{cost_key(target.name, target.model)} / {draft.name}"
    target_costs, draft_costs = pass_costs(target), pass_costs(draft)
    return StepCosts(target_costs[1], draft_costs[1], key, target_costs.get(TAIL_TOKENS, 0.0),
                     draft_costs.get(TAIL_TOKENS, 0.0))


def draft_model_pays(target, draft) -> tuple[bool, str]:
    """Whether ``drafter: auto`` drafts with the draft model (``target``, ``draft``: loaded models), and
    why; the choice is logged. Never on the CPU (there n-gram drafts alone serve better: the module
    docstring); elsewhere where the draft model's measured step costs at most :data:`MAX_DRAFT_COST` of
    the target's."""
    device = target.model.device
    if device.type == "cpu":
        pays = False
        reason = (f"n-grams only: {target.name} runs on the CPU, where auto never drafts with a draft model "
                  f"(the draft model and tree drafters are named by their settings)")
    else:
        costs = measured_costs(target, draft)
        pays = costs.ratio <= MAX_DRAFT_COST
        reason = (f"{'the draft model and n-grams' if pays else 'n-grams only'}: a {draft.name} step costs "
                  f"{costs.ratio:.2f} of a {target.name} step on {device} ({costs.draft_ms:.1f} against "
                  f"{costs.target_ms:.1f} ms; the draft model pays at most {MAX_DRAFT_COST})")
    _decided("drafter", target.name, reason)
    return pays, reason


def draft_model_completes(target, draft) -> tuple[bool, str]:
    """Whether the draft model, not the target, writes inline completions (``completionModel: auto``),
    and why; the choice is logged. Where one target step costs more than :data:`COMPLETION_STEP_MS` or
    a :data:`TAIL_TOKENS`-token target pass more than :data:`COMPLETION_TAIL_MS` (and the draft's step is
    cheaper), the smaller model, drafting from n-grams, serves a typist more suggestions in time
    (``speclsp bench lsp --typist``, ``--first-answer``)."""
    costs = measured_costs(target, draft)
    slow = costs.target_ms > COMPLETION_STEP_MS or costs.target_tail_ms > COMPLETION_TAIL_MS
    uses = slow and costs.draft_ms < costs.target_ms
    who = (f"{draft.name} writes inline completions with n-gram drafts, {target.name} next edits" if uses
           else f"{target.name} writes inline completions")
    reason = (f"{who}: a {target.name} step costs {costs.target_ms:.1f} ms here and a {TAIL_TOKENS}-token pass "
              f"{costs.target_tail_ms:.1f} ms ({draft.name}: {costs.draft_ms:.1f} and {costs.draft_tail_ms:.1f} ms); "
              f"the target writes them where its step is at most {COMPLETION_STEP_MS:.0f} ms and that pass at most "
              f"{COMPLETION_TAIL_MS:.0f} ms")
    _decided("completionModel", target.name, reason)
    return uses, reason
