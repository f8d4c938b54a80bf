"""Drafting with a small causal LM that shares the target's tokenizer.

The draft model keeps its own KV cache (:class:`decoding.kv_cache.KVCacheState`), synchronised to the
committed tokens before each draft: rejected draft tokens are rolled back and committed tokens it has
not seen yet (including the last draft token after a fully accepted round) are fed then. Each draft
token is *sampled* from the draft's processed distribution (temperature, top-k, top-p exactly as the
target's), and that distribution is returned as the draft probabilities (docs/cases.md D4, D5).

Drafting stops early when the draft is unsure: when the largest probability of the next draft
distribution (processed when sampling, plain softmax when greedy) is below ``min_confidence``, the
draft ends before that token (the first token is always drafted). The decision is made from the
distribution *before* sampling: deciding on the sampled token and dropping it would make the kept
tokens follow a truncated q, not the q verification divides by, and bias the output (a chi-square
test catches exactly that). It saves draft steps the target would likely reject.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.kv_cache import cache_state
from decoding.sampling import processed_probs, sample

CATCH_UP_TOKENS = 32  # a pass feeding at least this many tokens is a catch-up (its time per token is measured)


class ModelDrafter(Drafter):
    """Drafter sampling k tokens autoregressively from a draft model.

    Args:
        model: the draft causal LM (eval mode), same tokenizer as the target.
        target_vocab_size: width of the target's logits. Draft logits are cut or padded with
            ``-inf`` to it, so draft and target distributions live on the same ids; ids the draft
            cannot produce get draft probability 0, which keeps verification exact.
    """

    name = "model"

    def __init__(self, model: PreTrainedModel, target_vocab_size: int, min_confidence: float = 0.0):
        if not 0.0 <= min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
        self.model = model
        self.target_vocab_size = target_vocab_size
        self.min_confidence = min_confidence  # stop drafting at a token the draft gives less than this
        self.state = cache_state(model)
        self.catch_up_ms_per_token = 0.0  # EMA of ms per token fed in long catch-up passes (0: none measured)
        self._catch_up_passes = 0  # long passes seen

    def fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """``(n, V_draft)`` -> ``(n, V_target)`` logits, padding with -inf or cutting."""
        width = logits.shape[-1]
        if width == self.target_vocab_size:
            return logits
        if width > self.target_vocab_size:
            return logits[..., : self.target_vocab_size]
        pad = logits.new_full((*logits.shape[:-1], self.target_vocab_size - width), float("-inf"))
        return torch.cat([logits, pad], dim=-1)

    def catch_up_ms(self, token_ids: list[int]) -> float:
        """Expected ms to feed the committed tokens its KV cache lacks (a cold prompt: all of them)
        before it can draft after ``token_ids``; 0 until a long catch-up pass has been measured."""
        unseen = len(token_ids) - min(self.state.common_prefix(token_ids), len(token_ids) - 1)
        return unseen * self.catch_up_ms_per_token if unseen >= CATCH_UP_TOKENS else 0.0

    def feed(self, new_ids: list[int], logits_to_keep: int) -> torch.Tensor:
        """``state.forward`` with the logits fitted to the target's vocabulary, ``(n, V_target)``; the
        time of a pass over at least :data:`CATCH_UP_TOKENS` tokens updates :attr:`catch_up_ms_per_token`."""
        start = time.perf_counter()
        logits = self.fit_vocab(self.state.forward(new_ids, logits_to_keep=logits_to_keep))
        if len(new_ids) >= CATCH_UP_TOKENS:
            if logits.is_cuda:
                torch.cuda.synchronize(logits.device)  # time the work, not its launch
            ms = 1000 * (time.perf_counter() - start) / len(new_ids)
            if self._catch_up_passes:  # the first long pass pays one-time setup: not a measurement
                self.catch_up_ms_per_token = ms if self.catch_up_ms_per_token == 0 else \
                    0.5 * self.catch_up_ms_per_token + 0.5 * ms
            self._catch_up_passes += 1
        return logits

    def relax_catch_up(self, fraction: float = 0.02) -> None:
        """Lower the catch-up estimate by ``fraction``: called each round the estimate kept this drafter
        out, so one slow measurement cannot keep it out for good (it is measured again once it drafts)."""
        self.catch_up_ms_per_token *= 1.0 - fraction

    def propose(self, context: DraftContext) -> Draft | None:
        """Sample ``context.max_tokens`` tokens; ``draft_probs`` is ``(k, V_target)`` float32."""
        if context.max_tokens <= 0:
            return None
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        self.extend(self.state.sync(context.token_ids), tokens, rows, context)
        return Draft(tokens=tokens, draft_probs=torch.stack(rows), source="model")  # (k, V)

    def extend(self, new_ids: list[int], tokens: list[int], rows: list[torch.Tensor], context: DraftContext) -> None:
        """Draft on autoregressively after ``tokens`` until ``context.max_tokens`` or the draft is unsure,
        appending to ``tokens`` and their processed distributions ``(V,)`` to ``rows``.

        Args:
            new_ids: ids to feed before the next token's logits (the cache holds everything before).
        """
        threshold = max(self.min_confidence, context.min_confidence)
        while len(tokens) < context.max_tokens:
            logits = self.feed(new_ids, logits_to_keep=1)[-1]  # (V,)
            probs = processed_probs(logits, context.sampling)  # (V,)
            if tokens and threshold > 0 and unsure(logits, probs, context, threshold):
                break
            token = int(probs.argmax()) if context.sampling.greedy else sample(probs, context.generator)
            tokens.append(token)
            rows.append(probs)
            new_ids = [token]
        # The last draft token is not fed here: if it is accepted, the next sync feeds it.

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Nothing to learn; the next :meth:`propose` rolls back the rejected tokens."""


def unsure(logits: torch.Tensor, probs: torch.Tensor, context: DraftContext, threshold: float) -> bool:
    """Whether the draft ends before the token of ``logits``/``probs`` (both ``(V,)``): its largest
    probability is below ``threshold``. Decided from the distribution, before sampling: dropping a
    token *after* seeing it would leave the kept tokens distributed unlike the q verification assumes.
    Greedy "probs" are one-hot: the draft's belief is its plain softmax then."""
    belief = torch.softmax(logits.float(), -1) if context.sampling.greedy else probs  # (V,)
    return float(belief.max()) < threshold
