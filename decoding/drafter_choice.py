"""Choices decided from step costs measured at load: whether ``auto`` drafting uses the draft model,
and which model writes inline completions (``completionModel: auto``).

Speculative decoding with draft length k, acceptance α and a draft that costs c target steps per token
gives (1 − α^(k+1)) / (1 − α) tokens per round for 1 + k·c target steps (Leviathan et al. 2022, section
3.3); an n-gram draft costs nothing. So the draft model only pays where its step is cheap against the
target's: on a 2-core CPU the 0.5B's step costs about a third of the 1.5B's (c ≈ 0.33), and there
``auto`` with the draft model lost to n-gram drafts alone on every workload (``speclsp bench decode``;
the README's command: 16.0-21.9 s against 10.5-10.6 s). With c = 0.33, k = 4 and α = 0.7 a round gives
2.8 tokens for 2.3 steps (1.2 per step), less than the n-gram lookup's typical 1.4-1.6 tokens per pass
for one step; at c ≤ 0.2 the draft model is ahead again.

Both read :func:`pass_costs`: a model's passes of 1, 2, 4, 8 and 16 tokens after a short prefill, timed at
load (the fastest of a few rounds) and kept per model, kind, device, dtype, CPU and thread count in the
cache (``pass-costs.json`` under :func:`decoding.weights.gguf_models.cache_root`), so a later load decides after a
check of a few one-token steps (the cached curve measured again where it was taken under other load).
The same curve seeds the verify-cost model of the draft-length policy
(:meth:`decoding.draft_length.VerifyCost.seed`), so the first rounds already draft at lengths the
engine's passes pay for (a llama.cpp pass of 16 tokens costs 3-9 one-token steps on our CPUs, a torch
bfloat16 one 1.0-1.4).
"""

from __future__ import annotations

import logging
import platform
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from decoding.cache_files import read_json, update_json
from decoding.weights.gguf_models import cache_root
from decoding.weights.hybrid_linear import HybridLinear
from decoding.kv_cache import cache_state, logits_width
from decoding.weights.quantization import is_quantized

log = logging.getLogger(__name__)

MAX_DRAFT_COST = 0.2  # the draft model's step over the target's at most this: auto uses it
#: A target step slower than this (ms): inline completions are written by the draft model (see
#: :func:`draft_model_completes`).
COMPLETION_STEP_MS = 50.0
_CONTEXT_TOKENS = 128
PASS_SIZES = (1, 2, 4, 8, 16)  # tokens per pass measured at load (a step, and verify passes)
_REPEATS = 5
_MIN_SECONDS = 0.5
_MAX_ROUNDS = 200
_CHECK_CONTEXT = 16
_CHECK_STEPS = 2
_FASTER = 0.8  # a check under this share of the cached step: the cached curve is measured again
_checked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {cost key: curve} checked here


@dataclass(frozen=True)
class StepCosts:
    """Milliseconds of one one-token pass of each model (the fastest round), and what they were measured on."""

    target_ms: float
    draft_ms: float
    key: str

    @property
    def ratio(self) -> float:
        """c: the draft model's step in target steps."""
        return self.draft_ms / self.target_ms if self.target_ms > 0 else float("inf")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _weights_kind(model) -> str:
    """How the linear layers hold their weights: ``dense``, a quantised tensor's class (torchao's
    ``Int4OpaqueTensor``...) or a layer class of ours (``HybridInt4Linear``, ``HybridInt8Linear``)."""
    if not isinstance(model, torch.nn.Module):
        return "own"  # a llama.cpp model: its GGUF file's types
    for module in model.modules():
        if isinstance(module, HybridLinear):
            return type(module).__name__
        if isinstance(module, torch.nn.Linear) and is_quantized(module.weight):
            return type(module.weight).__name__
    return "dense"


def cost_key(name: str, model: torch.nn.Module) -> str:
    """What a model's pass costs depend on: the model, its kind (transformers' class or llama.cpp's), how
    its weights are held (quantised or not), device, dtype, the CPU (or GPU) and its threads, torch."""
    device = model.device
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return "|".join((name, type(model).__name__, _weights_kind(model), str(device), str(model.dtype), hardware,
                     f"threads={torch.get_num_threads()}", f"torch={torch.__version__}"))


@torch.inference_mode()
def _pass_ms(model: torch.nn.Module) -> dict[int, float]:
    """The fastest pass (ms) of ``model`` over M tokens, M in :data:`PASS_SIZES`, after a prefill of
    ``_CONTEXT_TOKENS`` tokens, over at least ``_REPEATS`` rounds and ``_MIN_SECONDS``; the sizes are
    interleaved, so other load on the machine falls on all of them alike."""
    state, context = _prefilled(model, _CONTEXT_TOKENS + max(PASS_SIZES), _CONTEXT_TOKENS + 1)
    times: dict[int, list[float]] = {size: [] for size in PASS_SIZES}
    began = time.perf_counter()
    rounds = 0
    # The first round warms up; then at least _REPEATS rounds and _MIN_SECONDS, so that a burst of other
    # load on the machine (a test suite starting servers beside it) cannot cover every round.
    while rounds <= _REPEATS or (time.perf_counter() - began < _MIN_SECONDS and rounds < _MAX_ROUNDS):
        rounds += 1
        for size, spent in times.items():
            spent.append(timed_pass(state, context[_CONTEXT_TOKENS : _CONTEXT_TOKENS + size], _CONTEXT_TOKENS))
    return {size: min(spent[1:]) for size, spent in times.items()}  # other load only adds time


def _prefilled(model, tokens: int, prefill: int):
    """A fresh cache state of ``model`` with the first ``prefill`` of ``tokens`` seeded random token ids
    (from the first 1000 of its vocabulary) prefilled; returns the state and all the ids."""
    generator = torch.Generator().manual_seed(0)
    vocab = min(1000, logits_width(model))
    context = [int(i) for i in torch.randint(0, vocab, (tokens,), generator=generator)]
    state = cache_state(model)
    state.prefill(context[:prefill])
    return state, context


def timed_pass(state, tokens: list[int], keep: int, logits_to_keep: int = 1) -> float:
    """ms of one pass of ``tokens`` through ``state``'s model (a CUDA device synchronised before the clock
    stops), after which the cache is cut back to its first ``keep`` tokens."""
    device = state.model.device
    started = time.perf_counter()
    state.forward(tokens, logits_to_keep=logits_to_keep)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    spent = 1000 * (time.perf_counter() - started)
    state.rollback(keep)
    return spent


def _cache_file() -> Path:
    return cache_root() / "pass-costs.json"


def pass_costs(loaded) -> dict[int, float]:
    """cost(M): ms of a pass of M tokens of ``loaded`` (:class:`decoding.weights.loading.LoadedModel`) for M in
    :data:`PASS_SIZES`, from the cache or measured now (and then cached; a cache that cannot be
    written is only logged).

    A cached curve is checked once per loaded model and key: a few one-token steps are timed (3 steps
    after a 16-token prefill), and where the fastest of them comes in under ``_FASTER`` of the cached
    step, the cached curve was taken under other load (a test suite or a build beside it) and is
    measured again. The curve kept is the lower of the new, the cached and any another process wrote
    meanwhile at each M, since other load only adds time; a slower check changes nothing for the same
    reason, and a check that fails (out of memory, a context llama.cpp refuses) is logged and the cached
    curve used.
    """
    model = loaded.model
    key = cost_key(loaded.name, model)
    try:
        return dict(_checked[model][key])
    except (KeyError, TypeError):
        pass
    cached = _entry(_read_costs(), key)
    if cached is not None:
        try:
            step = _step_ms(model)
        except Exception as exc:  # noqa: BLE001 - a check must not fail a load the cache can serve
            log.warning("could not check the cached pass costs of %s (%s): using them", loaded.name, exc)
            step = cached[1]
        if step >= _FASTER * cached[1]:
            _remember(model, key, cached)
            return cached
        log.info("a %s step takes %.1f ms now against %.1f ms cached: measuring its pass costs again",
                 loaded.name, step, cached[1])
    costs = _keep(key, _pass_ms(model))
    _remember(model, key, costs)
    return costs


def _entry(known: dict, key: str) -> dict[int, float] | None:
    entry = known.get(key)
    if isinstance(entry, dict) and all(str(size) in entry for size in PASS_SIZES):
        return {size: float(entry[str(size)]) for size in PASS_SIZES}
    return None


def _read_costs() -> dict:
    return read_json(_cache_file())


def _keep(key: str, costs: dict[int, float]) -> dict[int, float]:
    """Write ``costs`` under ``key`` into the cache file, each M's cost the lower of ``costs`` and the
    file's, the file read again under a lock so that processes measuring at the same time keep theirs;
    returns the curve written (a cache that cannot be written is only logged: then ``costs``)."""
    costs = {size: round(ms, 3) for size, ms in costs.items()}
    kept = dict(costs)

    def merge(known: dict) -> None:
        earlier = _entry(known, key)
        if earlier is not None:
            kept.update({size: min(ms, earlier[size]) for size, ms in costs.items()})
        known[key] = {str(size): ms for size, ms in kept.items()}

    return kept if update_json(_cache_file(), merge, "measured pass costs") else costs


def _remember(model, key: str, costs: dict[int, float]) -> None:
    try:
        _checked.setdefault(model, {})[key] = dict(costs)
    except TypeError:  # a model that takes no weak reference is checked on every call
        pass


@torch.inference_mode()
def _step_ms(model) -> float:
    """The fastest of ``_CHECK_STEPS`` one-token passes (ms) of ``model`` after a warm-up step and a
    ``_CHECK_CONTEXT``-token prefill: the check of a cached curve."""
    state, context = _prefilled(model, _CHECK_CONTEXT + 1, _CHECK_CONTEXT)
    spent = [timed_pass(state, context[_CHECK_CONTEXT:], _CHECK_CONTEXT) for _ in range(_CHECK_STEPS + 1)]
    return min(spent[1:])


def measured_costs(target, draft) -> StepCosts:
    """The one-token step costs of ``target`` and ``draft`` (:func:`pass_costs`)."""
    key = f"{cost_key(target.name, target.model)} / {draft.name}"
    return StepCosts(pass_costs(target)[1], pass_costs(draft)[1], key)


def draft_model_pays(target, draft) -> tuple[bool, str]:
    """Whether ``auto`` should draft with the draft model here, and why (a sentence for the log)."""
    costs = measured_costs(target, draft)
    pays = costs.ratio <= MAX_DRAFT_COST
    reason = (f"a {draft.name} step costs {costs.ratio:.2f} of a {target.name} step here "
              f"({costs.draft_ms:.1f} against {costs.target_ms:.1f} ms): auto drafts with "
              + ("the draft model and n-grams" if pays else f"n-grams only (the draft model pays below {MAX_DRAFT_COST})"))
    return pays, reason


def draft_model_completes(target, draft) -> tuple[bool, str]:
    """Whether the draft model, not the target, should write inline completions here
    (``completionModel: auto``), and why (a sentence for the log).

    A typist's next key comes 90-300 ms after the last (150-300 ms at a steady pace), and a suggestion
    that arrives after it is thrown away; an answer takes a short prefill and a few passes. Where one
    target pass costs more than ``COMPLETION_STEP_MS`` (three passes within a steady typist's shortest
    gap), the smaller model, drafting from n-grams, serves more. On 2-core CPUs it did at every target
    step measured (``speclsp bench lsp --typist``, docs/performance.md#a-typist): 1.5B 749 ms against
    0.5B 472 ms, 39.7% of the characters from the 0.5B's suggestions against 15.4%; 161.6 ms, 43.6%
    against 31.9%; int8-hybrid 121.7 ms, 35.5-37.7% against 22.9%; int4-hybrid 76.8 ms, at the fast pace
    24.1-25.1% (the bfloat16 0.5B) against 3.2%. On a GPU both steps are a few tens of ms and the target writes them.
    """
    costs = measured_costs(target, draft)
    uses = costs.target_ms > COMPLETION_STEP_MS and costs.draft_ms < costs.target_ms
    reason = (f"a {target.name} step costs {costs.target_ms:.1f} ms here ({draft.name}: {costs.draft_ms:.1f} ms): "
              + (f"inline completions are written by {draft.name} with n-gram drafts, next edits by {target.name} "
                 f"(the target writes completions where its step is at most {COMPLETION_STEP_MS:.0f} ms)"
                 if uses else f"{target.name} writes inline completions"))
    return uses, reason
