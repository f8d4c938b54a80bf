"""Candidate trees (decoding.tree): trie building, the tree attention mask, verification, the cache
keeping only the accepted branch; greedy equivalence and a chi-square test through the generation
loop, with a wrong rule (checking candidates independently) shown to fail the same test."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from decoding.drafters.base import Draft, Drafter
from decoding.drafters.ngram import NgramDrafter
from decoding.generate import SpeculativeGenerator
from decoding.types import GenerationConfig
from decoding.kv_cache import KVCacheState
from decoding.sampling import SamplingParams, processed_probs
from decoding.tree import DraftTree, tree_attention, tree_verify
from decoding.verify import VerifyResult
from tests.conftest import ToyTokenizer, tiny_model
from tests.greedy_check import assert_greedy_equal


@pytest.mark.unit
def test_candidates_merge_into_a_trie_within_the_node_limit():
    tree = DraftTree.from_candidates([[5, 6, 7], [5, 6, 8], [9, 1]], max_nodes=10)
    assert tree.tokens == (5, 6, 7, 8, 9, 1) and tree.parents == (-1, 0, 1, 1, -1, 4)
    assert tree.depths() == [1, 2, 3, 3, 1, 2] and tree.children(-1) == {5: 0, 9: 4} and not tree.chain()
    cut = DraftTree.from_candidates([[5, 6, 7], [9, 1]], max_nodes=4)
    assert cut.tokens == (5, 6, 7, 9)
    assert DraftTree.from_candidates([[1, 2, 3]], 8).chain()
    with pytest.raises(ValueError):
        DraftTree((1, 2), (-1, 1))  # a node cannot be its own parent


@pytest.mark.unit
def test_mask_lets_each_node_see_the_prefix_the_root_and_its_ancestors():
    tree = DraftTree.from_candidates([[5, 6], [9]], max_nodes=8)  # nodes: 5, 6 (child of 5), 9
    mask, positions = tree_attention(tree, past_length=3, dtype=torch.float32, device="cpu")
    visible = (mask[0, 0] == 0).int().tolist()
    assert visible == [[1, 1, 1, 1, 0, 0, 0],   # root
                       [1, 1, 1, 1, 1, 0, 0],   # 5
                       [1, 1, 1, 1, 1, 1, 0],   # 6 (after 5)
                       [1, 1, 1, 1, 0, 0, 1]]   # 9
    assert positions.tolist() == [[3, 4, 5, 4]]


def forced_logits(rows: list[int], vocab: int = 12) -> torch.Tensor:
    """Logits whose argmax (and only possible sample) at row i is ``rows[i]``."""
    logits = torch.full((len(rows), vocab), float("-inf"))
    for i, token in enumerate(rows):
        logits[i, token] = 0.0
    return logits


@pytest.mark.unit
def test_verify_follows_the_branch_the_target_takes():
    tree = DraftTree.from_candidates([[5, 6, 7], [5, 8], [9]], max_nodes=8)  # 5, 6, 7, 8, 9
    # root -> 5, at 5 -> 8, at 8 -> 3 (no child): path 5, 8; next 3.
    logits = forced_logits([5, 8, 0, 0, 3, 0])
    assert tree_verify(logits, None, tree, None).path == [0, 3]
    assert tree_verify(logits, None, tree, None).next_token == 3
    sampled = tree_verify(logits, torch.softmax(logits, -1), tree, torch.Generator().manual_seed(0))
    assert sampled.path == [0, 3] and sampled.next_token == 3
    assert tree_verify(forced_logits([1, 0, 0, 0, 0, 0]), None, tree, None).path == []  # nothing accepted


@pytest.mark.model
def test_tree_logits_equal_plain_forward_and_the_cache_keeps_only_the_accepted_branch():
    model = tiny_model(seed=3)
    prompt = [1, 5, 7, 9, 11, 2]
    tree = DraftTree.from_candidates([[3, 8, 4], [3, 10], [6]], max_nodes=8)  # 3, 8, 4, 10, 6
    state = KVCacheState(model)
    state.forward(prompt[:-1])
    mask, positions = tree_attention(tree, len(state), model.dtype, model.device)
    logits = state.forward([prompt[-1], *tree.tokens], attention_mask=mask, position_ids=positions)
    with torch.no_grad():
        for branch, rows in (([3, 8, 4], [0, 1, 2, 3]), ([3, 10], [0, 1, 4]), ([6], [0, 5])):
            plain = model(input_ids=torch.tensor([prompt + branch])).logits[0, len(prompt) - 1:]
            torch.testing.assert_close(logits[rows], plain, atol=1e-5, rtol=1e-5)
    # Keep root + the branch 3, 10 (nodes 0 and 3): the cache now equals a fresh forward of it.
    base = len(prompt) - 1
    state.keep(base + 1, [base + 1 + 0, base + 1 + 3])
    assert state.token_ids == prompt + [3, 10]
    next_logits = state.forward([7])[-1]
    with torch.no_grad():
        fresh = model(input_ids=torch.tensor([prompt + [3, 10, 7]])).logits[0, -1]
    torch.testing.assert_close(next_logits, fresh, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        state.keep(2, [1])


REPETITIVE = [7, 3, 9, 4, 7, 3, 12, 5, 7, 3, 9, 4, 7, 3, 12, 5, 7, 3, 20, 21, 7, 3, 9, 4, 7, 3]


@pytest.mark.model
@pytest.mark.parametrize("k", [2, 4, 8])
def test_tree_greedy_equals_plain_greedy(target_model, toy_tokenizer, k):
    generator = SpeculativeGenerator(target_model, toy_tokenizer)
    config = GenerationConfig(max_new_tokens=30, max_draft_tokens=k)
    plain = generator.generate(REPETITIVE, None, config)
    drafter = NgramDrafter(max_candidates=4)
    spec = generator.generate(REPETITIVE, drafter, config)
    assert_greedy_equal(target_model, REPETITIVE, spec.token_ids, plain.token_ids)
    assert any(name.startswith("ngram-tree") for name in spec.stats.sources), "the prompt must give trees"
    assert spec.stats.target_passes > 1


class FixedTreeDrafter(Drafter):
    """Proposes the same tree every round (deterministic candidates)."""

    name = "fixed-tree"

    def __init__(self, tree: DraftTree):
        self.tree = tree

    def propose(self, context):
        return Draft(tokens=list(self.tree.tokens), draft_probs=None, source="fixed-tree", tree=self.tree)

    def observe(self, draft, num_accepted):
        pass


class IndependentCandidatesGenerator(SpeculativeGenerator):
    """WRONG: tests each root candidate on its own (accept with probability p(candidate)), keeps the
    first accepted one, else samples from p. It over-weights the candidates listed first."""

    def _verify_tree(self, root_token, tree, run):
        generator = run.generator
        logits = self.state.forward([root_token]).float()
        probs = processed_probs(logits, run.config.sampling)[0]
        for token in tree.children(-1):
            if float(torch.rand((), generator=generator)) < float(probs[token]):
                return VerifyResult(0, token), []
        return VerifyResult(0, int(torch.multinomial(probs, 1, generator=generator))), []


SAMPLING = SamplingParams(temperature=1.0)
TRIALS = 3000


def pair_counts(generator_cls, model, tree, seed: int) -> dict[tuple[int, int], int]:
    generator = generator_cls(model, ToyTokenizer())
    config = GenerationConfig(max_new_tokens=2, sampling=SAMPLING, max_draft_tokens=4, stop_token_ids=frozenset())
    counts: dict[tuple[int, int], int] = {}
    for trial in range(TRIALS):
        result = generator.generate(PROMPT, FixedTreeDrafter(tree), replace(config, seed=seed + trial))
        key = tuple(result.token_ids[:2])
        counts[key] = counts.get(key, 0) + 1
    return counts


PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@torch.no_grad()
def exact_pairs(model) -> dict[tuple[int, int], float]:
    first = torch.softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1].float(), -1)
    table = {}
    for a in range(model.config.vocab_size):
        second = torch.softmax(model(input_ids=torch.tensor([PROMPT + [a]])).logits[0, -1].float(), -1)
        for b in range(model.config.vocab_size):
            table[(a, b)] = float(first[a] * second[b])
    return table


def chi_square_pvalue(counts, expected_probs, trials: int = TRIALS) -> float:
    keys = sorted(expected_probs, key=lambda k: -expected_probs[k])
    observed, expected, rest_obs, rest_exp = [], [], 0, 0.0
    for key in keys:
        e = expected_probs[key] * trials
        if e >= 5:
            observed.append(counts.get(key, 0))
            expected.append(e)
        else:
            rest_obs += counts.get(key, 0)
            rest_exp += e
    observed.append(rest_obs)
    expected.append(rest_exp)
    expected = np.array(expected) * (sum(observed) / sum(expected))
    return float(chisquare(observed, expected).pvalue)


@pytest.fixture(scope="module")
def peaked():
    model = tiny_model(seed=20, vocab_size=12, init_std=0.25)
    exact = exact_pairs(model)
    first = {}
    for (a, _), p in exact.items():
        first[a] = first.get(a, 0.0) + p
    top = sorted(first, key=lambda a: -first[a])[:3]
    # A tree over the likely first tokens, each with two likely second tokens.
    candidates = []
    for a in top:
        seconds = sorted(range(12), key=lambda b: -exact[(a, b)])[:2]
        candidates += [[a, b] for b in seconds]
    return model, exact, DraftTree.from_candidates(candidates, max_nodes=12)


@pytest.mark.stats
def test_tree_sampling_follows_the_target_distribution(peaked):
    model, exact, tree = peaked
    assert len(tree.children(-1)) == 3
    counts = pair_counts(SpeculativeGenerator, model, tree, seed=1000)
    assert chi_square_pvalue(counts, exact) > 0.001


@pytest.mark.stats
def test_checking_candidates_independently_fails_the_same_test(peaked):
    model, exact, tree = peaked
    counts = pair_counts(IndependentCandidatesGenerator, model, tree, seed=1000)
    assert chi_square_pvalue(counts, exact) < 1e-6


class DropUnsureTokenDrafter(Drafter):
    """WRONG: samples each draft token, then drops it (ending the draft) when its own draft
    probability is under the threshold. The kept tokens then follow a truncated q, while
    verification divides by the full q."""

    name = "drop-unsure"

    def __init__(self, model, vocab_size: int):
        from decoding.drafters.draft_model import ModelDrafter

        self.inner = ModelDrafter(model, vocab_size)

    def propose(self, context):
        from decoding.sampling import sample

        inner = self.inner
        new_ids = inner.state.sync(context.token_ids)
        tokens, rows = [], []
        for _ in range(context.max_tokens):
            probs = processed_probs(inner.fit_vocab(inner.state.forward(new_ids, logits_to_keep=1)[-1]), context.sampling)
            token = sample(probs, context.generator)
            if tokens and float(probs[token]) < context.min_confidence:
                break
            tokens.append(token)
            rows.append(probs)
            new_ids = [token]
        return Draft(tokens=tokens, draft_probs=torch.stack(rows), source="drop-unsure")

    def observe(self, draft, num_accepted):
        pass


CONFIDENCE_TRIALS = 6000


def confidence_pairs(model, drafter, min_confidence: float) -> dict[tuple[int, int], int]:
    generator = SpeculativeGenerator(model, ToyTokenizer())
    # max_new_tokens 4: the first round may draft 3 tokens; the first two output tokens are compared.
    config = GenerationConfig(max_new_tokens=4, sampling=SAMPLING, max_draft_tokens=3, stop_token_ids=frozenset(),
                              draft_min_confidence=min_confidence)
    counts: dict[tuple[int, int], int] = {}
    for trial in range(CONFIDENCE_TRIALS):
        result = generator.generate(PROMPT, drafter, replace(config, seed=5000 + trial))
        key = tuple(result.token_ids[:2])
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.stats
def test_draft_model_with_a_confidence_stop_samples_the_target_distribution(peaked):
    """The stop is decided from the draft's distribution before sampling: output stays exact."""
    from decoding.drafters.draft_model import ModelDrafter

    class Recording(ModelDrafter):
        def propose(self, context):
            draft = super().propose(context)
            self.lengths.append(len(draft.tokens))
            return draft

    model, exact, _ = peaked
    drafter = Recording(tiny_model(seed=21, vocab_size=12, init_std=0.25), 12)
    drafter.lengths = []
    counts = confidence_pairs(model, drafter, 0.2)
    assert 0 < sum(length < 3 for length in drafter.lengths) < len(drafter.lengths)  # the stop cut some drafts
    assert chi_square_pvalue(counts, exact, CONFIDENCE_TRIALS) > 0.001


@pytest.mark.stats
def test_dropping_an_unsure_token_after_sampling_it_fails_the_same_test(peaked):
    model, exact, _ = peaked
    drafter = DropUnsureTokenDrafter(tiny_model(seed=21, vocab_size=12, init_std=0.25), 12)
    counts = confidence_pairs(model, drafter, 0.2)
    assert chi_square_pvalue(counts, exact, CONFIDENCE_TRIALS) < 1e-6
