"""The speculative generation loop: prefill, then draft, verify in one target pass, commit, repeat.

:meth:`SpeculativeGenerator.generate` prefills the uncached part of the prompt, then runs rounds:

1. draft (:meth:`~SpeculativeGenerator._draft`): the drafter proposes k tokens after the committed
   ones (k = 0 without a drafter: plain decoding through the very same code, the reference the
   speculative paths must equal);
2. verify (:meth:`~SpeculativeGenerator._verify`): the target runs one forward pass over
   ``[last committed] + draft`` (k + 1 positions; a candidate tree is fed whole with a tree attention
   mask); :func:`decoding.verify.greedy_verify` or :func:`decoding.verify.speculative_verify` (a chain)
   or :func:`decoding.tree.tree_verify` (a tree) accepts a prefix (a branch) of the draft and yields
   one more token (residual sample or bonus token); the target's KV cache is then rolled back to
   "committed tokens minus the last" (the rollback is part of the timed pass: its cost is the pass's);
3. commit (:meth:`_Run.commit`): the accepted tokens and that token are committed one at a time, each
   checked against the stop tokens, the stop strings and ``max_new_tokens`` (docs/cases.md D1-D3):
   nothing past a stop is committed or counted, and after the last round nothing past it stays cached;
4. learn (:func:`_learn`): the stats count the round's draft, and the drafter observes how many
   tokens the target accepted.

The verify pass times feed the cost model (:class:`decoding.draft_length.VerifyCost`), which drafters
receive through :class:`decoding.drafters.base.DraftContext`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from tokenizers.decoders import DecodeStream
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from decoding.draft_length import VerifyCost
from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.healing import Healing, TokenBytes
from decoding.kv_cache import CacheState, cache_state, logits_width
from decoding.sampling import processed_probs
from decoding.stats import GenerationStats
from decoding.tree import DraftTree, tree_attention, tree_verify

from decoding.types import (
    FINISH_CANCELLED,
    FINISH_LENGTH,
    FINISH_STOP,
    MIN_PARTIAL_CHARS,
    FinishReason,
    Generation,
    GenerationConfig,
)
from decoding.verify import VerifyResult, greedy_verify, speculative_verify


def end_of_sequence_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """End-of-sequence ids of the tokenizer and the model's generation config."""
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, Iterable):
            ids.update(int(v) for v in value)
    return frozenset(ids)


class _Output:
    """Commits tokens one at a time and decides when to stop (docs/cases.md D1-D3).

    Stop strings are looked for in text decoded incrementally (tokenizers' ``DecodeStream``: one step
    per token instead of decoding the whole output again), and only in its new part; the final text
    is one full decode cut at the first stop string, so it is what decoding the tokens at once gives.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: GenerationConfig, stop_ids: frozenset[int]):
        self.tokenizer, self.config, self.stop_ids = tokenizer, config, stop_ids
        self._required = len(config.required_prefix)  # stop strings are looked for only after it
        self._line_end_from: int | None = None  # past the deadline: the text length when it passed
        self.token_ids: list[int] = []
        self.text = ""  # decoded so far (incrementally), special tokens skipped
        self.finish_reason: FinishReason | None = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._stream = (backend, DecodeStream(skip_special_tokens=True)) if backend is not None else None
        self._longest_stop = max((len(s) for s in config.stop_strings), default=0)

    def _extend_text(self, token: int) -> int:
        """Decode ``token`` onto ``self.text``; returns where the newly decoded text may first hold a
        stop string (the last ``longest stop - 1`` characters before it and the new text)."""
        before = len(self.text)
        if self._stream is not None:
            chunk = self._stream[1].step(self._stream[0], token)
            self.text += chunk or ""
        else:
            self.text = self.tokenizer.decode(self.token_ids, skip_special_tokens=True)
            before = min(before, len(self.text))
        return max(0, before - self._longest_stop + 1)

    def _stop_cut(self, text: str, start: int = 0) -> int | None:
        cuts = [i for i in (text.find(s, start) for s in self.config.stop_strings) if i >= 0]
        return min(cuts) if cuts else None

    def commit(self, token: int) -> bool:
        """Append ``token``; returns True when the output is finished (the token is kept)."""
        self.token_ids.append(token)
        if token in self.stop_ids:
            self.finish_reason = FINISH_STOP
            return True
        deadline = self.config.deadline
        if self.config.stop_strings or deadline is not None:
            before = len(self.text)
            start = max(self._extend_text(token), self._required)
            if self.config.stop_strings and self._stop_cut(self.text, start) is not None:
                self.finish_reason = FINISH_STOP
                return True
            if deadline is not None:
                if self._line_end_from is None and time.perf_counter() >= deadline:
                    self._line_end_from = max(before, self._required)
                if self._line_end_from is not None and self._past_a_written_line(before):
                    self.finish_reason = FinishReason.TIME
                    return True
        if len(self.token_ids) >= self.config.max_new_tokens:
            self.finish_reason = FINISH_LENGTH
            return True
        return False

    def _past_a_written_line(self, before: int) -> bool:
        """Past the deadline: whether the text now holds a line end after some written text (a blank first
        line does not end the output: an answer of nothing but a line break shows nothing); moves
        ``_line_end_from`` past blank lines so :meth:`final_text` cuts at the right line end."""
        start = max(before, self._line_end_from)
        while (end := self.text.find("\n", start)) >= 0:
            if self.text[self._required:end].strip():
                self._line_end_from = start
                return True
            start = self._line_end_from = end + 1
        return False

    def partial_due(self) -> bool:
        """Whether ``config.answer_by`` has passed and the text holds enough to answer as it stands."""
        answer_by = self.config.answer_by
        if answer_by is None or time.perf_counter() < answer_by:
            return False
        return len(self.final_text().strip()) >= MIN_PARTIAL_CHARS

    def final_text(self) -> str:
        """The output text: the committed tokens decoded at once (stop tokens dropped), less the
        required prefix (empty when it was not covered: cancelled or cut by length first), cut before
        the first stop string."""
        kept = [t for t in self.token_ids if t not in self.stop_ids]
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        required = self.config.required_prefix
        if required:
            text = text[len(required):] if text.startswith(required) else ""
        cut = self._stop_cut(text) if self.config.stop_strings else None
        text = text if cut is None else text[:cut]
        if self.finish_reason in (None, FinishReason.PARTIAL):
            text = text.rstrip("\ufffd")  # a character whose bytes the next tokens would complete
        if self.finish_reason == FinishReason.TIME and self._line_end_from is not None:
            line_end = text.find("\n", max(0, self._line_end_from - len(required)))
            text = text if line_end < 0 else text[: line_end + 1]
        return text


@dataclass
class _Run:
    """The state of one :meth:`SpeculativeGenerator.generate` call."""

    config: GenerationConfig
    generator: torch.Generator  # random source of sampling and of sampling drafters
    output: _Output  # the committed new tokens and the stop decision
    stats: GenerationStats
    committed: list[int]  # every committed token id: the prompt, then the new tokens
    started: float  # time.perf_counter() seconds at the start of the call
    healing: Healing | None = None  # the required-prefix constraint (config.required_prefix), if any

    def constrain(self, logits: torch.Tensor, drafts: list[list[int]]) -> torch.Tensor:
        """``(R, V)`` target logits with token healing's mask applied; ``drafts[r]``: the draft tokens
        before row r's position (after the committed output)."""
        output = self.output.token_ids
        if self.healing is None or not self.healing.active(len(output)):
            return logits
        return self.healing.mask(logits, [output + draft for draft in drafts])

    def draft_budget(self) -> int:
        """Draft tokens this round may verify (k at most): a round commits k + 1 tokens at most, so
        never draft past ``max_new_tokens``."""
        return min(self.config.max_draft_tokens, self.config.max_new_tokens - len(self.output.token_ids) - 1)

    def commit(self, tokens: list[int]) -> int:
        """Commit ``tokens`` one at a time until the output is finished; returns how many were committed."""
        num_committed = 0
        for token in tokens:
            num_committed += 1
            self.committed.append(token)
            if self.output.commit(token):
                break
        return num_committed

    def result(self) -> Generation:
        """The :class:`Generation`, with the total time (ms) stopped now."""
        self.stats.new_tokens = len(self.output.token_ids)
        self.stats.ms["total"] = 1000 * (time.perf_counter() - self.started)
        return Generation(self.output.token_ids, self.output.final_text(), self.output.finish_reason, self.stats)


@dataclass(frozen=True)
class _Verified:
    """The outcome of one verify pass."""

    result: VerifyResult  # num_accepted, and the residual sample or bonus token
    draft_tokens: list[int]  # the draft whose first num_accepted tokens were accepted (a tree: its accepted branch)
    num_drafted: int  # draft tokens the pass fed after the last committed one (a tree: all its nodes)

    @property
    def new_tokens(self) -> list[int]:
        """What the round commits unless a stop comes first: the accepted tokens, then the next token."""
        return [*self.draft_tokens[: self.result.num_accepted], self.result.next_token]


def _learn(run: _Run, drafter: Drafter, draft: Draft, verified: _Verified, num_committed: int) -> None:
    """After a drafted round: the stats count the draft tokens that were committed, and the drafter
    learns how many the target accepted, even where a stop cut the round short (that is no rejection).

    Args:
        num_committed: tokens the round committed (``<= num_accepted + 1``).
    """
    num_accepted = verified.result.num_accepted
    run.stats.record_draft(draft.source, verified.num_drafted, min(num_accepted, num_committed))
    drafter.observe(draft, num_accepted)


class SpeculativeGenerator:
    """Generates with one target model, any drafter, and a KV cache kept between calls.

    The cache persists across :meth:`generate` calls: a prompt sharing a prefix with the previous
    one reuses that prefix (the stats report computed vs reused prefill tokens).

    Args:
        model: the target causal LM, in eval mode.
        tokenizer: its tokenizer (used for stop strings and the output text).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        self.model = model
        self.tokenizer = tokenizer
        self.state: CacheState = cache_state(model)
        self.default_stop_ids = end_of_sequence_ids(model, tokenizer)
        self.verify_cost = VerifyCost()  # the verify passes' times: the cost model's verify part

    def generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        config: GenerationConfig,
        should_stop: Callable[[], bool] | None = None,
    ) -> Generation:
        """Generate a continuation of ``prompt_ids``.

        Args:
            prompt_ids: the prompt's token ids (at least one).
            drafter: proposes draft tokens each round; ``None`` for plain decoding.
            config: limits, sampling and stops.
            should_stop: polled before the prefill, between prefill pieces and before each verify
                round; when it returns True the generation ends with finish reason ``"cancelled"`` and
                what was committed so far.
        Returns:
            :class:`Generation`.
        Raises:
            ValueError: if ``prompt_ids`` is empty.
        """
        if not prompt_ids:
            raise ValueError("the prompt must hold at least one token")
        stats, started = GenerationStats(prompt_tokens=len(prompt_ids)), time.perf_counter()
        stop_ids = config.stop_token_ids if config.stop_token_ids is not None else self.default_stop_ids
        run = _Run(config, self._generator(config.seed), _Output(self.tokenizer, config, stop_ids), stats,
                   list(prompt_ids), started, self.healing(config))
        if should_stop is not None and should_stop():
            run.output.finish_reason = FINISH_CANCELLED
            return run.result()  # before any work: the cache is left as the previous call left it
        self._prefill(run, should_stop)
        while run.output.finish_reason is None:
            if should_stop is not None and should_stop():
                run.output.finish_reason = FINISH_CANCELLED
                break
            if run.output.partial_due():
                run.output.finish_reason = FinishReason.PARTIAL
                break
            budget = run.draft_budget()
            draft = self._draft(run, drafter, budget)
            verified = self._verify(run, draft, budget)
            num_committed = run.commit(verified.new_tokens)
            if draft is not None:
                _learn(run, drafter, draft, verified, num_committed)
        # Nothing past the output stays cached: keep at most the committed tokens minus the last.
        self.state.rollback(min(len(self.state), max(len(run.committed) - 1, 0)))
        return run.result()

    def healing(self, config: GenerationConfig) -> Healing | None:
        """The constraint for ``config.required_prefix`` (``None`` without one); a replay applies it too."""
        if not config.required_prefix:
            return None
        vocab_size = logits_width(self.model)
        return Healing(TokenBytes.of(self.tokenizer, vocab_size, self.default_stop_ids), config.required_prefix)

    def _generator(self, seed: int | None) -> torch.Generator:
        """A random source on the model's device, seeded with ``seed`` (``None``: nondeterministically)."""
        generator = torch.Generator(device=self.model.device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        return generator

    def _prefill(self, run: _Run, should_stop: Callable[[], bool] | None) -> None:
        """Feed the uncached prompt tokens but the last (the first round feeds that one) into the cache
        (:meth:`KVCacheState.prefill`).

        With ``should_stop``, in pieces of ``config.prefill_chunk_tokens`` tokens, polling it between
        pieces; when it turns true the output finishes as cancelled and the pieces fed stay cached.
        Adds the prefill time (ms) and the reused / computed prompt token counts to the stats.
        """
        t0 = time.perf_counter()
        prefill = self.state.prefill(run.committed, run.config.prefill_chunk_tokens, should_stop)
        run.stats.prefill_reused = prefill.reused
        run.stats.prompt_passes = list(self.state.history)  # empty for a llama.cpp state (it keeps none)
        run.stats.prefill_computed = len(run.committed) - prefill.reused  # the last: fed by the first round
        if prefill.stopped:
            run.output.finish_reason = FINISH_CANCELLED
        if prefill.fed:
            run.stats.ms["prefill"] += 1000 * (time.perf_counter() - t0)

    def _draft(self, run: _Run, drafter: Drafter | None, budget: int) -> Draft | None:
        """The drafter's proposal of at most ``budget`` tokens after the committed ones, or ``None``
        (no drafter, no budget, or nothing to propose). Adds the drafting time (ms) to the stats.

        The drafter gets the cost model's figures (the mean verify pass in ms, and the cost of
        verifying k tokens over one, k = 0..budget) only without a seed: with a seed, drafting
        decisions must not depend on wall-clock timing, or the same seed would consume the random
        stream differently from run to run.
        """
        if drafter is None or budget <= 0:
            return None
        t0 = time.perf_counter()
        timed = run.config.seed is None
        context = DraftContext(run.committed, budget, run.config.sampling, run.generator,
                               self.verify_cost.mean_ms if timed else 0.0, run.config.draft_min_confidence,
                               self.verify_cost.relative_costs(budget) if timed else None,
                               run.config.max_new_tokens - len(run.output.token_ids))
        draft = drafter.propose(context)
        run.stats.ms["draft"] += 1000 * (time.perf_counter() - t0)
        return draft

    def _verify(self, run: _Run, draft: Draft | None, budget: int) -> _Verified:
        """One timed target pass over the last committed token and ``draft`` (a chain cut to ``budget``
        tokens, or a tree; none: plain decoding). Afterwards the cache holds the committed tokens and the
        accepted ones: once the round is committed, "committed tokens minus the last" (the rollback
        invariant). Adds the pass and its time (ms) to the stats and records it in the cost model."""
        t0 = time.perf_counter()
        root_token = run.committed[-1]
        if draft is not None and draft.tree is not None:
            result, branch = self._verify_tree(root_token, draft.tree, run)
            verified = _Verified(result, branch, len(draft.tree))
        else:
            tokens = draft.tokens[:budget] if draft is not None else []
            probs = draft.draft_probs if draft is not None else None  # (k', V) float32, or None: deterministic
            draft_probs = probs[: len(tokens)] if probs is not None else None  # (k, V)
            verified = _Verified(self._verify_chain(root_token, tokens, draft_probs, run), tokens, len(tokens))
        elapsed_ms = 1000 * (time.perf_counter() - t0)
        run.stats.ms["verify"] += elapsed_ms
        run.stats.target_passes += 1
        run.stats.passes.append((1 + verified.num_drafted, 1 + verified.result.num_accepted,
                                 draft is not None and draft.tree is not None))
        self.verify_cost.record(1 + verified.num_drafted, elapsed_ms)
        return verified

    def _verify_chain(self, root_token: int, draft_tokens: list[int], draft_probs: torch.Tensor | None,
                      run: _Run) -> VerifyResult:
        """One target pass over ``[root_token] + draft_tokens`` (k + 1 positions), verified greedily or
        by speculative sampling; keeps the accepted tokens in the cache.

        Args:
            root_token: the last committed token (not cached yet).
            draft_tokens: the k draft token ids.
            draft_probs: ``(k, V)`` float32 draft distributions, or ``None`` for a deterministic draft.
        """
        cached_before = len(self.state)  # == committed tokens - 1
        target_logits = self.state.forward([root_token, *draft_tokens]).float()  # (k + 1, V)
        target_logits = run.constrain(target_logits, [draft_tokens[:row] for row in range(len(draft_tokens) + 1)])
        if run.config.sampling.greedy:
            result = greedy_verify(target_logits, draft_tokens)
        else:
            target_probs = processed_probs(target_logits, run.config.sampling)  # (k + 1, V)
            result = speculative_verify(target_probs, draft_tokens, draft_probs, run.generator)
        # Rollback invariant: the cache holds the committed tokens minus the last.
        self.state.rollback(cached_before + 1 + result.num_accepted)
        return result

    @torch.inference_mode()
    def _verify_tree(self, root_token: int, tree: DraftTree, run: _Run) -> tuple[VerifyResult, list[int]]:
        """One target pass over a candidate tree; keeps the accepted branch in the cache.

        Returns the result (``num_accepted`` = branch length) and the accepted branch's tokens.
        """
        cached_before = len(self.state)
        dtype = self.state.model.dtype
        mask, positions = tree_attention(tree, cached_before, dtype, self.state.model.device)
        target_logits = self.state.forward([root_token, *tree.tokens], attention_mask=mask,
                                           position_ids=positions).float()  # (T + 1, V)
        target_logits = run.constrain(target_logits, tree.paths())
        sampling = run.config.sampling
        target_probs = None if sampling.greedy else processed_probs(target_logits, sampling)
        outcome = tree_verify(target_logits, target_probs, tree, run.generator)
        # Rollback invariant: the cache holds the committed tokens minus the last (root + branch).
        self.state.keep(cached_before + 1, [cached_before + 1 + node for node in outcome.path])
        return VerifyResult(len(outcome.path), outcome.next_token), [tree.tokens[n] for n in outcome.path]
