"""Pass costs measured at load: a model's passes of 1, 2, 4, 8 and 16 tokens after a short prefill.

They decide two choices (:mod:`decoding.choices.auto`: whether ``auto`` drafting uses the draft model,
and which model writes inline completions) and seed the verify-cost model of the draft-length policy
(:meth:`decoding.draft_length.VerifyCost.seed`), so the first rounds already draft at lengths the engine's
passes pay for. A curve is the fastest of a few rounds, kept per cost key in the one cache file of
measured figures (:mod:`decoding.choices.figures`), so a later load decides after a check of a few
one-token steps (a cached curve is measured again where it was taken under other load). A pinned curve
(:data:`decoding.choices.figures.PIN_VARIABLE`) is used as it is.
"""

from __future__ import annotations

import logging
import time
import weakref

import torch

from decoding.choices.figures import PASS_MS, cost_key, keep_entry, lookup
from decoding.kv_cache import cache_state, logits_width

log = logging.getLogger(__name__)

_CONTEXT_TOKENS = 128
PASS_SIZES = (1, 2, 4, 8, 16)  # tokens per pass measured at load (a step, and verify passes)
_REPEATS = 5
_MIN_SECONDS = 0.5
_MAX_ROUNDS = 200
_CHECK_CONTEXT = 16
_CHECK_STEPS = 2
_FASTER = 0.8  # a check under this share of the cached step: the cached curve is measured again
_checked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {cost key: curve} checked here


def pass_costs(loaded) -> dict[int, float]:
    """cost(M): ms of a pass of M tokens of ``loaded`` (:class:`decoding.weights.loading.LoadedModel`) for M in
    :data:`PASS_SIZES`: pinned, from the cache, or measured now (and then cached; a cache that cannot be
    written is only logged).

    A cached curve is checked once per loaded model and key: a few one-token steps are timed (after a
    short prefill), and where the fastest of them comes in under ``_FASTER`` of the cached step, the
    cached curve was taken under other load (a test suite or a build beside it) and is measured again.
    The curve kept is the lower of the new, the cached and any another process wrote meanwhile at each
    M, since other load only adds time; a slower check changes nothing for the same reason, and a check
    that fails (out of memory, a context llama.cpp refuses) is logged and the cached curve used.
    """
    model = loaded.model
    key = cost_key(loaded.name, model)
    try:
        return dict(_checked[model][key])
    except (KeyError, TypeError):
        pass
    entry, pinned = lookup(PASS_MS, key)
    cached = _curve(entry)
    if cached is not None and pinned:
        return cached
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


def _curve(entry: dict | None) -> dict[int, float] | None:
    if isinstance(entry, dict) and all(str(size) in entry for size in PASS_SIZES):
        return {size: float(entry[str(size)]) for size in PASS_SIZES}
    return None


def _keep(key: str, costs: dict[int, float]) -> dict[int, float]:
    """Write ``costs`` under ``key`` into the cache file, each M's cost the lower of ``costs`` and the
    file's, the file read again under its lock so that processes measuring at the same time keep theirs;
    returns the curve written (a cache that cannot be written is only logged: then ``costs``)."""
    costs = {size: round(ms, 3) for size, ms in costs.items()}
    kept = dict(costs)

    def merge(earlier: dict | None) -> dict:
        known = _curve(earlier)
        if known is not None:
            kept.update({size: min(ms, known[size]) for size, ms in costs.items()})
        return {str(size): ms for size, ms in kept.items()}

    return kept if keep_entry(PASS_MS, key, merge, "measured pass costs") else costs


def _remember(model, key: str, costs: dict[int, float]) -> None:
    try:
        _checked.setdefault(model, {})[key] = dict(costs)
    except TypeError:  # a model that takes no weak reference is checked on every call
        pass


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


@torch.inference_mode()
def _step_ms(model) -> float:
    """The fastest of ``_CHECK_STEPS`` one-token passes (ms) of ``model`` after a warm-up step and a
    ``_CHECK_CONTEXT``-token prefill: the check of a cached curve."""
    state, context = _prefilled(model, _CHECK_CONTEXT + 1, _CHECK_CONTEXT)
    spent = [timed_pass(state, context[_CHECK_CONTEXT:], _CHECK_CONTEXT) for _ in range(_CHECK_STEPS + 1)]
    return min(spent[1:])


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
