"""A previous-token attention head built at initialisation, so induction (copying) forms early.

An induction head needs two parts (Olsson et al. 2022, "In-context Learning and Induction Heads",
sections 2-3): a *previous-token head* in an early layer that writes each position's preceding token
into the residual stream, and a later head that matches the current token against it and copies what
followed. The paper's "smeared key" experiment shows that the previous-token half is what delays the
phase change. With rotary position embeddings (Su et al. 2021, "RoFormer", section 3.4) that half can
be set directly: a query and a key that do not depend on the input (projection biases, zero weights)
give an attention score that depends only on the distance between the two positions, and choosing the
query's phase per frequency makes that score peak at distance one.

Training writes the head again after every optimizer step (``train.py``), so its pattern stays
fixed while the other heads learn to use it: left free, fine-tuning the trained starter target eroded
it from 0.99 to 0.52 of its attention on the previous token within 74 steps.

Measured once on the starter draft (2 layers, width 128), fine-tuned on standard-library code chunks
followed by their repeat (loss on the repeat only, 16 x 256-token batches, lr 3e-3): the repeat's
loss was 1.43 nats after 240 steps with this head and 3.51 without it.
"""

from __future__ import annotations

import math

import torch
from transformers import Qwen2ForCausalLM


@torch.no_grad()
def install_previous_token_head(model: Qwen2ForCausalLM, layer: int = 0, head: int = 0, pairs: int = 12,
                                margin: float = 14.0, distance: int = 1) -> float:
    """Turn query head ``head`` of ``layer`` into a previous-token head, in place.

    The head's query projection weights become zero and its bias a constant vector; the first ``pairs``
    rotary frequency pairs of its key/value group's key become a constant too (bias ``A``, zero weights).
    With HF's rotary layout (pair ``i`` is dimensions ``i`` and ``i + head_dim/2``, angle
    ``position * inv_freq[i]``) the score between positions m and n is
    ``A**2 / sqrt(head_dim) * sum_i cos((m - n - d) * inv_freq[i])`` for ``d = distance``: largest at
    ``m - n = d``, ahead of ``d - 1`` and ``d + 1`` by ``margin`` nats. Heads built with distances 1, 2, 3
    in one key/value group share that constant key and together write the three preceding tokens into
    the residual stream, so a later head can match a three-token context instead of one token (on
    held-out code chunks repeated once, predicting the repeat from the majority follower of the last
    n tokens is right 0.66 of the time for n = 1 and 0.93 for n = 3; measured, teacher-forced). Key dimensions outside those pairs keep their weights, so the
    other query heads that share the key/value head keep most of their content-based keys.

    Args:
        model: a Qwen2 model with attention biases (Qwen2 has q/k/v biases) and default RoPE.
        pairs: rotary frequency pairs used, highest frequencies first; at most ``head_dim / 2``.
        margin: attention-logit margin (nats) of the previous token over its neighbours.
        distance: how many positions back the head looks (1: the previous token).
    Returns:
        ``A``, the magnitude set per pair.
    Raises:
        ValueError: ``head`` or ``pairs`` out of range, or projections without biases.
    """
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    half = head_dim // 2
    if not 0 <= head < cfg.num_attention_heads or not 0 < pairs <= half or distance < 1:
        raise ValueError(f"head {head}, pairs {pairs} or distance {distance} out of range for "
                         f"{cfg.num_attention_heads} heads of {head_dim}")
    attn = model.model.layers[layer].self_attn
    if attn.q_proj.bias is None or attn.k_proj.bias is None:
        raise ValueError("the query and key projections need biases")
    inv_freq = model.model.rotary_emb.inv_freq[:pairs].float()  # (pairs,) radians per position
    amplitude = math.sqrt(margin * math.sqrt(head_dim) / float((1 - torch.cos(inv_freq)).sum()))
    q0 = head * head_dim
    attn.q_proj.weight[q0 : q0 + head_dim] = 0
    attn.q_proj.bias[q0 : q0 + head_dim] = 0
    attn.q_proj.bias[q0 : q0 + pairs] = amplitude * torch.cos(distance * inv_freq)
    attn.q_proj.bias[q0 + half : q0 + half + pairs] = -amplitude * torch.sin(distance * inv_freq)
    k0 = (head // (cfg.num_attention_heads // cfg.num_key_value_heads)) * head_dim
    for start, value in ((k0, amplitude), (k0 + half, 0.0)):
        attn.k_proj.weight[start : start + pairs] = 0
        attn.k_proj.bias[start : start + pairs] = value
    return amplitude
