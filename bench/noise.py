"""Kernel noise: whether an output that leaves plain greedy decoding's did so because the same tokens'
logits differ with the shape of the pass that computed them, or because of a fault.

The logits of a position depend, in low precision, on how many tokens the pass computing it held and
on how each earlier position's keys and values were computed (one step at a time, in verify passes of
k + 1, in a prefill's micro-batches): matrix kernels pick other tilings and accumulation orders per
batch size. :func:`divergence_within_noise` measures how far that moves the parting tokens' lead and
compares the lead with it (docs/exactness.md, "Exactness in low precision").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decoding.kv_cache import cache_state


@torch.inference_mode()
def replay_logits(model, prompt: list[int], output: list[int], chunk: int, prompt_chunk: int = 0) -> torch.Tensor:
    """Teacher-forced logits predicting each token of ``output``: the prompt but its last token in one
    pass (or in pieces of ``prompt_chunk`` tokens, as a server's prefill in pieces builds it), then the last
    prompt token and ``output[:-1]`` fed ``chunk`` tokens per pass, as plain decoding (``chunk`` 1) or a
    verify pass over ``chunk`` tokens computes them.

    Returns:
        ``(len(output), V)`` float32 logits.
    """
    state = cache_state(model)
    head = prompt[:-1]
    step = prompt_chunk or max(1, len(head))
    for i in range(0, len(head), step):
        state.forward(head[i:i + step], logits_to_keep=1)
    fed = prompt[-1:] + output[:-1]
    return torch.cat([state.forward(fed[i:i + chunk]).float() for i in range(0, len(fed), chunk)])


def feed_shaped(state, token_ids: list[int], passes: list[tuple[int, int, bool]],
                logits: bool = True) -> list[torch.Tensor] | None:
    """Feed ``token_ids`` into ``state`` in the pass shapes ``passes`` ((tokens fed, tokens kept, a tree
    pass) each, in order), the cache cut back after each pass to what it kept, and return each pass's
    kept rows' logits.

    A pass's rows past the ones it kept were other tokens in the run (rejected draft tokens, a prompt that
    changed since); they are fed as repeats of the last kept token here. Only the pass width reaches the
    kept rows: attention is causal and a matrix kernel computes each row from its own activations.

    Returns:
        the kept rows' ``(kept, V)`` logits per pass (those covering ``token_ids`` only; none without
        ``logits``, which computes only a row per pass, as a prefill does), or ``None`` when
        a tree pass comes first (its attention mask was not recorded) or ``passes`` cover fewer tokens.
    """
    rows, position, start = [], 0, len(state)
    for width, kept, tree in passes:
        if position >= len(token_ids):
            break
        if tree:
            return None
        piece = token_ids[position:position + min(kept, width)]
        piece = piece + piece[-1:] * (width - len(piece))
        out = state.forward(piece, logits_to_keep=0 if logits else 1)
        if logits:
            rows.append(out[:kept])
        position += kept
        state.rollback(start + min(position, len(token_ids)))
    return rows if position >= len(token_ids) else None


@torch.inference_mode()
def run_shaped_logits(model, prompt: list[int], output: list[int], passes: list[tuple[int, int, bool]],
                      upto: int, prompt_passes: list[tuple[int, int, bool]] | None = None) -> torch.Tensor | None:
    """Teacher-forced logits predicting ``output[:upto + 1]``, computed in the very pass shapes of the run
    that wrote ``output`` (:func:`feed_shaped`): the prompt but its last token in the passes that computed
    it in the run's cache (``prompt_passes``, over earlier requests too; ``None``: in one pass, as a
    generation's prefill from a cold cache without a poll), then each verify pass as wide as it was.

    With both shapes from a server's own run this is the server's computation again, kernel for kernel:
    the logits verification chose from.

    Args:
        passes: the run's ``GenerationStats.passes``: (tokens fed, tokens kept, a tree pass) in order.
        upto: the last output index wanted; ``output[:upto]`` must be what the run committed.
        prompt_passes: the run's ``GenerationStats.prompt_passes``, or ``None``.
    Returns:
        ``(upto + 1, V)`` float32 logits, or ``None`` when a tree pass came first, ``passes`` end before
        ``upto`` or ``prompt_passes`` do not cover the prompt but its last token.
    """
    state = cache_state(model)
    head = prompt[:-1]
    if prompt_passes is None:
        if head:
            state.forward(head, logits_to_keep=1)
    elif (sum(kept for _, kept, _ in prompt_passes) != len(head)
          or feed_shaped(state, head, prompt_passes, logits=False) is None):
        return None
    rows = feed_shaped(state, (prompt[-1:] + output)[:upto + 1], passes)
    return None if rows is None else torch.cat(rows).float()[:upto + 1]


@dataclass(frozen=True)
class Parting:
    """Where an output first leaves plain greedy decoding's, measured (:func:`measure_parting`)."""

    within: bool  # within the kernel noise, or (with the run's own shapes) the top token of its own computation
    lead: float  # the plain token's logit minus the other output's token's, step by step as plain decoding
    noise: float  # the largest move of that lead between the step-by-step computation and any other shape
    # (where the run's own computation decides: between step-by-step and that computation alone)
    served_lead: float | None  # the other output's token's logit minus the plain one's in the run's own
    # computation replayed (prompt and verify passes in their recorded shapes); None without those shapes
    faithful: bool | None = None  # that replay's top tokens before the parting are the output's (else it is
    # not the run's computation, and the parting counts as a fault); None without those shapes


def divergence_within_noise(engine, prompt: list[int], reference: list[int], tokens: list[int], chunk: int,
                            prompt_chunks: tuple[int, ...] = (),
                            passes: list[tuple[int, int, bool]] | None = None) -> tuple[bool, float, float]:
    """:func:`lead_within_noise` of ``engine.target.model`` (anything with ``target.model``)."""
    return lead_within_noise(engine.target.model, prompt, reference, tokens, chunk, prompt_chunks, passes)


def lead_within_noise(model, prompt: list[int], reference: list[int], tokens: list[int], chunk: int,
                      prompt_chunks: tuple[int, ...] = (),
                      passes: list[tuple[int, int, bool]] | None = None) -> tuple[bool, float, float]:
    """(within noise, lead, noise) of :func:`measure_parting` without the prompt's recorded shapes."""
    parting = measure_parting(model, prompt, reference, tokens, chunk, prompt_chunks, passes)
    return parting.within, parting.lead, parting.noise


def measure_parting(model, prompt: list[int], reference: list[int], tokens: list[int], chunk: int,
                    prompt_chunks: tuple[int, ...] = (), passes: list[tuple[int, int, bool]] | None = None,
                    prompt_passes: list[tuple[int, int, bool]] | None = None, healing=None) -> Parting:
    """Where ``tokens`` first leaves ``reference`` (our plain greedy output), whether that is kernel noise.

    The two competing tokens are the reference's and the other output's at the parting position; their
    lead (reference logit minus the other) is computed over the reference's positions up to the parting
    one step by step, as plain decoding did, and again in other shapes: in passes of ``chunk`` tokens, as
    verification does (not lined up with the real run's passes); for each of ``prompt_chunks``, step by
    step after the prompt was prefilled in pieces of that many tokens (a server builds a prompt's KV in
    pieces, over several requests); and, with ``passes`` (the run's ``GenerationStats.passes``), in the
    run's own pass shapes (:func:`run_shaped_logits`). The noise is the largest change of that lead
    between the step-by-step computation and any other at any of those positions; the parting is within
    noise when the step-by-step lead at the parting position is no larger.

    A fault cannot hide in the run-shaped replay: it computes the logits afresh and the same way, so a
    token that verification wrongly accepted still trails there, and the lead barely moves. In float32
    the noise is about 1e-5 and a real fault stands far outside it; in bfloat16 it reaches whole logits
    on the real 1.5B (docs/exactness.md, "Exactness in low precision").

    With ``prompt_passes`` too (``GenerationStats.prompt_passes``: how the run's cache computed the
    prompt, over earlier requests), the run-shaped replay is the run's own computation, kernel for kernel,
    and decides alone: greedy verification commits the top token of its own pass, so the replay's top token
    (under ``healing``'s mask, as the run applied it) must be the output's at every position up to the
    parting one. At the parting that makes it the run's choice; anywhere else a fault, however small the
    lead (``served_lead``); before the parting the replay is not the run's computation (``faithful``
    False), which counts as a fault too. No other shape is replayed then, and ``noise`` is the lead's move
    in the run's own computation. A tree pass in either record leaves the decision to the noise.

    Args:
        model: a model :func:`decoding.kv_cache.cache_state` takes.
        healing: the run's :class:`decoding.healing.Healing` constraint, or ``None``.
    Returns:
        :class:`Parting`; a length difference is never within noise.
    """
    common = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), None)
    if common is None:
        return Parting(False, float("nan"), float("nan"), None)
    ours, other = reference[common], tokens[common]
    stepwise = replay_logits(model, prompt, reference[:common + 1], 1)
    lead_stepwise = stepwise[:, ours] - stepwise[:, other]  # (common + 1,)

    def moved(logits: torch.Tensor) -> float:
        return float((lead_stepwise - (logits[:, ours] - logits[:, other])).abs().max())

    if passes and prompt_passes is not None:
        own = run_shaped_logits(model, prompt, tokens, passes, common, prompt_passes)
        if own is not None:  # the run's own computation decides alone: no other shape is replayed
            served_lead = float(own[common, other] - own[common, ours])
            paths = [tokens[:i] for i in range(common + 1)]
            top = (healing.mask(own, paths) if healing is not None else own).argmax(-1).tolist()
            faithful = top[:common] == tokens[:common]
            return Parting(faithful and top[common] == other, float(lead_stepwise[common]), moved(own), served_lead,
                           faithful)
    # A pass of ``chunk`` tokens from every position up to the parting one, the first included: the
    # tokens after it only give the pass its length (positions before them do not see them).
    span = max(2, chunk)
    padded = (reference + reference[-1:] * span)[:common + span]
    noise = moved(replay_logits(model, prompt, padded, span)[:common + 1])
    for prompt_chunk in prompt_chunks:
        noise = max(noise, moved(replay_logits(model, prompt, reference[:common + 1], 1, prompt_chunk)))
    if passes:
        shaped = run_shaped_logits(model, prompt, tokens, passes, common)
        if shaped is not None:
            noise = max(noise, moved(shaped))
    lead = float(lead_stepwise[common])
    return Parting(lead <= noise, lead, noise, None)
