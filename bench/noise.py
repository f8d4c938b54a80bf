"""Kernel noise: whether an output that leaves plain greedy decoding's did so because the same tokens'
logits differ with the shape of the pass that computed them, or because of a fault.

The logits of a position depend, in low precision, on how many tokens the pass computing it held and
on how each earlier position's keys and values were computed (one step at a time, in verify passes of
k + 1, in a prefill's micro-batches): matrix kernels pick other tilings and accumulation orders per
batch size. :func:`divergence_within_noise` measures how far that moves the parting tokens' lead and
compares the lead with it (docs/exactness.md, "Exactness in low precision").
"""

from __future__ import annotations

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


@torch.inference_mode()
def run_shaped_logits(model, prompt: list[int], output: list[int], passes: list[tuple[int, int, bool]],
                      upto: int) -> torch.Tensor | None:
    """Teacher-forced logits predicting ``output[:upto + 1]``, computed in the very pass shapes of the run
    that wrote ``output``: the prompt but its last token in one pass (as a generation's prefill without a
    poll), then each verify pass as wide as it was, the cache cut back to what that pass kept.

    A pass's rows past the ones it kept were the run's rejected draft tokens; they are fed as repeats of
    the last known token here. Only the pass width reaches the kept rows: attention is causal and a
    matrix kernel computes each row from its own activations.

    Args:
        passes: the run's ``GenerationStats.passes``: (tokens fed, tokens kept, a tree pass) in order.
        upto: the last output index wanted; ``output[:upto]`` must be what the run committed.
    Returns:
        ``(upto + 1, V)`` float32 logits, or ``None`` when a tree pass came first (its attention mask was
        not recorded) or ``passes`` end before ``upto``.
    """
    state = cache_state(model)
    if len(prompt) > 1:
        state.forward(prompt[:-1], logits_to_keep=1)
    fed = prompt[-1:] + output
    rows, position = [], 0
    for width, kept, tree in passes:
        if position > upto:
            break
        if tree:
            return None
        piece = fed[position:position + width]
        piece = piece + piece[-1:] * (width - len(piece))
        rows.append(state.forward(piece).float()[:kept])
        position += kept
        state.rollback(len(prompt) - 1 + position)
    if position <= upto:
        return None
    return torch.cat(rows)[:upto + 1]


def divergence_within_noise(engine, prompt: list[int], reference: list[int], tokens: list[int], chunk: int,
                            prompt_chunks: tuple[int, ...] = (),
                            passes: list[tuple[int, int, bool]] | None = None) -> tuple[bool, float, float]:
    """:func:`lead_within_noise` of ``engine.target.model`` (anything with ``target.model``)."""
    return lead_within_noise(engine.target.model, prompt, reference, tokens, chunk, prompt_chunks, passes)


def lead_within_noise(model, prompt: list[int], reference: list[int], tokens: list[int], chunk: int,
                      prompt_chunks: tuple[int, ...] = (),
                      passes: list[tuple[int, int, bool]] | None = None) -> tuple[bool, float, float]:
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

    Args:
        model: a model :func:`decoding.kv_cache.cache_state` takes.
    Returns:
        (within noise, the reference token's lead in logits, the measured noise); a length difference
        is never within noise.
    """
    common = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), None)
    if common is None:
        return False, float("nan"), float("nan")
    ours, other = reference[common], tokens[common]
    stepwise = replay_logits(model, prompt, reference[:common + 1], 1)
    lead_stepwise = stepwise[:, ours] - stepwise[:, other]  # (common + 1,)

    def moved(logits: torch.Tensor) -> float:
        return float((lead_stepwise - (logits[:, ours] - logits[:, other])).abs().max())

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
    return lead <= noise, lead, noise
