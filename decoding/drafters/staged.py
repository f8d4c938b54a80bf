"""Staged drafting: the draft model takes an n-gram draft as its own draft, then continues it.

The draft model reads the n-gram draft d_1..d_L in one forward pass and verifies it against its own
distributions q_i by the speculative-sampling rule with a one-hot proposal: d_i is kept with probability
q_i(d_i) (greedy: while d_i is q_i's argmax); at the first refusal a token is drawn from
norm(max(0, q_i - onehot(d_i))) and the model drafts on autoregressively. Every token is then distributed
exactly as the draft model's own draft, so ``draft_probs`` are its q rows and the target's verification
stays exact, but the stretch the lookup got right costs one draft pass instead of one pass per token
(Spector & Re 2023, "Accelerating LLM Inference with Staged Speculative Decoding", with n-gram lookup
as the lowest stage; Leviathan et al. 2022 for the rule). Where no n-gram matches it proposes nothing
(in ``auto`` the plain model drafter may then fill the round). The switching drafter sizes and chooses it like any
source (:mod:`decoding.drafters.switching`): it costs more than the free lookup and less per token than
the plain model drafter.
"""

from __future__ import annotations

import torch

from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.draft_model import ModelDrafter, unsure
from decoding.drafters.ngram import NgramDrafter
from decoding.sampling import processed_probs
from decoding.verify import greedy_verify, speculative_verify


class StagedDrafter(Drafter):
    """The n-gram draft checked and continued by the draft model (see the module docstring).

    Args:
        ngram: the lookup (one candidate; a tree drafter's trees are not staged).
        model: the draft-model drafter whose model, KV cache and confidence threshold it shares.
    """

    name = "staged"

    def __init__(self, ngram: NgramDrafter, model: ModelDrafter):
        if ngram.max_candidates > 1:
            raise ValueError("the staged drafter stages single n-gram drafts, not candidate trees")
        self.ngram = ngram
        self.model = model

    def propose(self, context: DraftContext) -> Draft | None:
        """Up to ``context.max_tokens`` tokens distributed as the draft model's, with ``draft_probs``
        ``(k, V_target)`` float32; ``None`` when the lookup finds nothing."""
        lookup = self.ngram.propose(context)
        if lookup is None:
            return None
        proposed = lookup.tokens[: context.max_tokens]
        state = self.model.state
        new_ids = state.sync(context.token_ids)
        base = len(state) + len(new_ids)  # cached positions once the committed tokens are fed
        logits = self.model.feed(new_ids + proposed, len(proposed) + 1)  # (L+1, V)
        probs = processed_probs(logits, context.sampling)  # (L+1, V) float32
        threshold = max(self.model.min_confidence, context.min_confidence)
        # The first position (1..L) whose token the draft is too unsure of to draft: the lookup token
        # there, or at L the token after the lookup. Decided from the distributions alone.
        stop_at = next((i for i in range(1, len(proposed) + 1) if unsure(logits[i], probs[i], context, threshold)),
                       None) if threshold > 0 else None
        checked = len(proposed) if stop_at is None else stop_at
        if context.sampling.greedy:
            result = greedy_verify(logits[: checked + 1], proposed[:checked])
        else:
            result = speculative_verify(probs[: checked + 1], proposed[:checked], None, context.generator)
        tokens = proposed[: result.num_accepted]
        rows = list(probs[: result.num_accepted])
        state.rollback(base + result.num_accepted)
        if result.num_accepted == checked and (stop_at is not None or len(tokens) == context.max_tokens):
            return self._draft(tokens, rows, lookup.source)  # unsure at the next token, or full
        tokens.append(result.next_token)  # the residual sample, or the draft's own next token
        rows.append(probs[result.num_accepted])
        self.model.extend([result.next_token], tokens, rows, context)
        return self._draft(tokens, rows, lookup.source)

    @staticmethod
    def _draft(tokens: list[int], rows: list[torch.Tensor], lookup_source: str) -> Draft | None:
        if not tokens:
            return None
        return Draft(tokens=tokens, draft_probs=torch.stack(rows), source=f"staged:{lookup_source.split(':', 1)[-1]}")

    def catch_up_ms(self, token_ids: list[int]) -> float:
        """The draft model's catch-up before drafting (:meth:`ModelDrafter.catch_up_ms`)."""
        return self.model.catch_up_ms(token_ids)

    def relax_catch_up(self) -> None:
        """See :meth:`ModelDrafter.relax_catch_up`."""
        self.model.relax_catch_up()

    def observe(self, draft: Draft, num_accepted: int) -> None:
        """Nothing to learn; the next :meth:`propose` rolls the draft model's cache back."""
