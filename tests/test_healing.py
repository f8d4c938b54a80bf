"""Token healing (decoding/healing.py): the output must begin with the backed-off text, and every path
(plain reference, n-gram chain, draft model chain, tree; greedy and sampled) follows the target's
distribution renormalised over the tokens that continue it.

The oracle is independent of the engine: a full forward pass per step, the allowed tokens found by
comparing every token's text with the required text. A wrong rule (the mask applied to the first
verify row only, not along the draft) is shown to fail the sampled test.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from decoding.drafters.base import Draft
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.generate import SpeculativeGenerator, _Run
from decoding.types import GenerationConfig
from decoding.healing import Healing, TokenBytes
from decoding.sampling import SamplingParams, processed_probs
from decoding.weights.starter import TARGET_DIR
from decoding.weights.tokenizer_loading import load_tokenizer
from decoding.tree import DraftTree
from tests.conftest import tiny_model
from tests.greedy_check import assert_greedy_equal

VOCAB = 48


def token_text(index: int) -> str:
    """Ids 0-25: one letter; ids 26-47: two letters ("ab", "bc", ..., "vw")."""
    if index < 26:
        return chr(ord("a") + index)
    first = index - 26
    return chr(ord("a") + first) + chr(ord("a") + first + 1)


class PiecesTokenizer:
    """A toy tokenizer with one- and two-letter tokens, so a required text can be covered several ways."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(token_text(int(i)) for i in ids)


def allowed_by_brute_force(required: str, output: str) -> list[int]:
    rest = required[len(output):] if required.startswith(output) and len(output) < len(required) else ""
    if not rest:
        return list(range(VOCAB))
    return [i for i in range(VOCAB) if token_text(i).startswith(rest) or rest.startswith(token_text(i))]


@pytest.mark.unit
def test_allowed_tokens_continue_the_required_text():
    table = TokenBytes(PiecesTokenizer(), VOCAB)
    assert table.allowed(b"bcd").tolist() == [1, 27]  # "b", "bc"
    assert table.allowed(b"d").tolist() == [3, 29]  # "d", "de"
    healing = Healing(table, "bcd")
    assert healing.remaining([1]) == b"cd" and healing.remaining([27]) == b"d"
    assert healing.remaining([27, 3]) is None and healing.remaining([0]) is None  # covered / left the text


@pytest.mark.unit
def test_real_tokenizer_heals_a_partial_word_and_indentation():
    tokenizer = load_tokenizer(str(TARGET_DIR), local_only=True)
    table = TokenBytes(tokenizer, len(tokenizer))
    words = {tokenizer.decode([i]) for i in table.allowed(b"pri").tolist()}
    assert {"p", "pr", "pri", "print"} <= words and not any(not w or not ("pri".startswith(w) or w.startswith("pri"))
                                                              for w in words)
    # A prompt ending in 8 spaces of indentation: the file's own 7 spaces + " self" must stay reachable.
    seven = tokenizer.convert_tokens_to_ids("Ġ" * 7)
    assert seven in table.allowed(b" " * 8).tolist()
    assert not set(table.allowed(b"pri").tolist()) & set(tokenizer.all_special_ids)
    # Closed: the indentation the user has may not grow (no 12-space token, no blank after 8 spaces).
    healing = Healing(table, " " * 8)
    twelve = tokenizer.convert_tokens_to_ids("Ġ" * 12)
    assert healing.closed and twelve not in table.allowed(b" " * 8, closed=True).tolist()
    assert twelve in table.allowed(b" " * 8).tolist()
    eight = tokenizer.convert_tokens_to_ids("Ġ" * 8)
    assert healing.remaining([eight]) == b"" and healing.remaining([seven]) == b" "
    masked = healing.mask(torch.zeros(2, len(tokenizer)), [[eight], [seven]])
    assert masked[0, tokenizer.convert_tokens_to_ids("Ġself")] == float("-inf") and masked[0, twelve] == float("-inf")
    assert masked[0, tokenizer.convert_tokens_to_ids("self")] == 0
    assert masked[1, tokenizer.convert_tokens_to_ids("Ġself")] == 0 and masked[1, twelve] == float("-inf")


def oracle_greedy(model, prompt: list[int], required: str, n: int) -> list[int]:
    """Constrained greedy by full forward passes and brute-force allowed sets."""
    ids: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, -1]
            allowed = allowed_by_brute_force(required, "".join(token_text(i) for i in ids))
            masked = torch.full_like(logits, float("-inf"))
            masked[allowed] = logits[allowed]
            ids.append(int(masked.argmax()))
    return ids


class TreeOfTwo(NgramDrafter):
    """Drafts a two-branch tree: the n-gram chain and the token every healing start allows first."""

    def propose(self, context):
        draft = super().propose(context)
        chain = list(draft.tokens) if draft is not None else []
        tree = DraftTree.from_candidates([chain or [1], [1, 28, 4], [27, 3, 4]], max_nodes=8)
        return Draft(tokens=list(tree.tokens), draft_probs=None, source="tree", tree=tree)


PROMPT = [3, 7, 11, 1, 2, 3, 7, 11, 1, 2, 3, 4, 5]


@pytest.mark.model
@pytest.mark.parametrize("required", ["bcd", "b", "cdefg"])
@pytest.mark.parametrize("kind", ["ngram", "self", "random", "tree"])
def test_healed_speculative_greedy_equals_healed_plain_and_the_oracle(target_model, random_draft_model, kind, required):
    generator = SpeculativeGenerator(target_model, PiecesTokenizer())
    config = GenerationConfig(max_new_tokens=12, max_draft_tokens=4, required_prefix=required,
                              stop_token_ids=frozenset())
    plain = generator.generate(PROMPT, None, config)
    oracle = oracle_greedy(target_model, PROMPT, required, 12)
    assert plain.token_ids == oracle
    assert "".join(token_text(i) for i in plain.token_ids).startswith(required)
    assert plain.text == "".join(token_text(i) for i in plain.token_ids)[len(required):]
    drafter = {"ngram": NgramDrafter(), "self": ModelDrafter(target_model, VOCAB),
               "random": ModelDrafter(random_draft_model, VOCAB), "tree": TreeOfTwo()}[kind]
    spec = generator.generate(PROMPT, drafter, config)
    assert_greedy_equal(target_model, PROMPT, spec.token_ids, plain.token_ids)
    assert spec.text == plain.text
    if kind == "self":
        assert spec.stats.accepted > 0


@pytest.mark.model
def test_stop_strings_are_looked_for_after_the_required_text(target_model):
    generator = SpeculativeGenerator(target_model, PiecesTokenizer())
    plain = generator.generate(PROMPT, None, GenerationConfig(max_new_tokens=6, stop_token_ids=frozenset(),
                                                              required_prefix="bcd", stop_strings=("c",)))
    assert "".join(token_text(i) for i in plain.token_ids).startswith("bcd")  # not stopped inside "bcd"
    assert "c" not in plain.text


SAMPLING = SamplingParams(temperature=1.0)
REQUIRED = "bcd"
TRIALS = 3000


@torch.no_grad()
def oracle_pair_probs(target) -> dict[tuple[int, int], float]:
    """P(first two tokens) under the constraint, by full forward passes."""
    def step(ids: list[int]) -> torch.Tensor:
        logits = target(input_ids=torch.tensor([PROMPT + ids])).logits[0, -1]
        allowed = allowed_by_brute_force(REQUIRED, "".join(token_text(i) for i in ids))
        masked = torch.full_like(logits, float("-inf"))
        masked[allowed] = logits[allowed]
        return processed_probs(masked, SAMPLING)
    first = step([])
    pairs = {}
    for a in torch.nonzero(first).flatten().tolist():
        second = step([a])
        for b in torch.nonzero(second).flatten().tolist():
            pairs[(a, b)] = float(first[a] * second[b])
    return pairs


def pair_pvalue(target, drafter, seed: int) -> float:
    generator = SpeculativeGenerator(target, PiecesTokenizer())
    config = GenerationConfig(max_new_tokens=2, sampling=SAMPLING, max_draft_tokens=2, stop_token_ids=frozenset(),
                              required_prefix=REQUIRED)
    pairs = oracle_pair_probs(target)
    counts = dict.fromkeys(pairs, 0)
    outside = 0
    for trial in range(TRIALS):
        ids = tuple(generator.generate(PROMPT, drafter, replace(config, seed=seed + trial)).token_ids)
        if ids in counts:
            counts[ids] += 1
        else:
            outside += 1
    if outside:
        return 0.0
    keys = [k for k in pairs if pairs[k] > 0]
    expected = np.array([pairs[k] for k in keys]) * TRIALS
    return float(chisquare(np.array([counts[k] for k in keys]), expected / expected.sum() * TRIALS).pvalue)


@pytest.fixture(scope="module")
def peaked_pair():
    return tiny_model(seed=10, vocab_size=VOCAB, init_std=0.3), tiny_model(seed=11, vocab_size=VOCAB, init_std=0.3)


@pytest.mark.stats
def test_healed_speculative_sampling_follows_the_constrained_target(peaked_pair):
    target, draft = peaked_pair
    assert len(oracle_pair_probs(target)) >= 4  # several ways to cover the text, each with mass
    assert pair_pvalue(target, ModelDrafter(draft, VOCAB), seed=0) > 1e-3


@pytest.mark.stats
def test_mask_on_the_first_row_only_is_caught(peaked_pair, monkeypatch):
    target, draft = peaked_pair
    original = _Run.constrain

    def first_row_only(self, logits, drafts):  # WRONG: the rows after the first draft token go unmasked
        masked = original(self, logits, drafts)
        if masked is not logits and logits.shape[0] > 1:
            masked[1:] = logits[1:]
        return masked

    monkeypatch.setattr(_Run, "constrain", first_row_only)
    assert pair_pvalue(target, ModelDrafter(draft, VOCAB), seed=0) < 1e-6


@pytest.mark.unit
def test_tree_paths_name_each_rows_branch():
    tree = DraftTree.from_candidates([[5, 6, 7], [5, 8]], max_nodes=8)
    assert tree.paths() == [[], [5], [5, 6], [5, 6, 7], [5, 8]]
    assert list(itertools.chain.from_iterable(tree.paths()))  # not empty


class LinesTokenizer(PiecesTokenizer):
    """As :class:`PiecesTokenizer`, with id 19 a line break (the tiny target writes it some 20 tokens in)."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join("\n" if int(i) == 19 else token_text(int(i)) for i in ids)


@pytest.mark.model
@pytest.mark.parametrize("kind", ["plain", "ngram", "self"])
def test_a_passed_deadline_ends_the_output_at_its_next_line_end(target_model, kind):
    # The output without a deadline must hold a line break past its first rounds for the check to mean anything.
    prompt = [0, 5, 6, 0, 5, 6, 0, 5, 6, 0, 5]
    generator = SpeculativeGenerator(target_model, LinesTokenizer())
    config = GenerationConfig(max_new_tokens=40, max_draft_tokens=4, stop_token_ids=frozenset(), stop_strings=("zz",))
    free = generator.generate(prompt, None, config)
    assert "\n" in free.text[8:], "the tiny model must write a line break after several tokens"
    drafter = {"plain": None, "ngram": NgramDrafter(), "self": ModelDrafter(target_model, VOCAB)}[kind]
    timed = generator.generate(prompt, drafter, replace(config, deadline=0.0))
    assert timed.finish_reason == "time"
    assert timed.text == free.text[: free.text.index("\n") + 1]
    assert timed.token_ids == free.token_ids[: len(timed.token_ids)]


@pytest.mark.unit
def test_a_passed_deadline_does_not_end_the_output_at_a_blank_first_line():
    """An answer past its time whose first line is blank goes on to the end of its first written line
    (ending at the blank line answered a line break alone: nothing to show; issue 52's empty FIM answers)."""
    from decoding.generate import _Output

    config = GenerationConfig(max_new_tokens=40, stop_token_ids=frozenset(), stop_strings=("zz",), deadline=0.0)
    output = _Output(LinesTokenizer(), config, frozenset())
    assert [output.commit(token) for token in (19, 19, 5, 6, 19)] == [False, False, False, False, True]
    assert output.finish_reason == "time" and output.final_text() == "\n\n" + token_text(5) + token_text(6) + "\n"


@pytest.mark.model
@pytest.mark.parametrize("kind", ["plain", "ngram", "self"])
def test_a_passed_answer_by_ends_the_output_as_it_stands_once_it_holds_enough(target_model, kind):
    """``answer_by``: the answer before the next key is a prefix of the whole answer (exactness), ended at a
    round's end once it holds MIN_PARTIAL_CHARS characters; without enough text it goes on."""
    from decoding.types import MIN_PARTIAL_CHARS

    prompt = [0, 5, 6, 0, 5, 6, 0, 5, 6, 0, 5]
    generator = SpeculativeGenerator(target_model, LinesTokenizer())
    config = GenerationConfig(max_new_tokens=40, max_draft_tokens=4, stop_token_ids=frozenset(), stop_strings=("zz",))
    free = generator.generate(prompt, None, config)
    drafter = {"plain": None, "ngram": NgramDrafter(), "self": ModelDrafter(target_model, VOCAB)}[kind]
    partial = generator.generate(prompt, drafter, replace(config, answer_by=0.0))
    assert partial.finish_reason == "partial"
    assert len(partial.text.strip()) >= MIN_PARTIAL_CHARS and len(partial.token_ids) < len(free.token_ids)
    assert free.text.startswith(partial.text) and partial.token_ids == free.token_ids[: len(partial.token_ids)]
    later = generator.generate(prompt, drafter, replace(config, answer_by=time.perf_counter() + 3600))
    assert later.token_ids == free.token_ids and later.finish_reason != "partial"  # not passed: the whole answer


@pytest.mark.unit
def test_the_prompt_backs_off_its_last_token_and_names_it():
    from lsprotocol import types

    from lsp_server.completion.prompt import build_prompt
    from lsp_server.request import resolve_request
    from lsp_server.settings import Settings
    from lsp_server.workspace.documents import Document
    from lsp_server.workspace.positions import codec_for

    tokenizer = load_tokenizer(str(TARGET_DIR), local_only=True)
    document = Document("file:///a.py", "def main():\n    pri\n    return 1\n", 0, "python")
    request = resolve_request(document, types.Position(line=1, character=7), codec_for("utf-16"), Settings())
    whole = build_prompt(request, tokenizer)
    healed = build_prompt(request, tokenizer, heal=True)
    assert whole.healed == "" and healed.healed.endswith("pri") and "    pri".endswith(healed.healed)
    assert healed.prefix == whole.prefix  # postprocessing still sees the whole text before the cursor
    fim_suffix = whole.prompt_ids.index(tokenizer.convert_tokens_to_ids("<|fim_suffix|>"))
    assert healed.prompt_ids == whole.prompt_ids[: fim_suffix - 1] + whole.prompt_ids[fim_suffix:]
