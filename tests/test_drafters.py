"""N-gram lookup and the adaptive draft-length policy."""

from __future__ import annotations

import pytest

from decoding.draft_length import DraftLengthPolicy, VerifyCost, expected_gain, expected_tokens_per_pass
from decoding.drafters.base import DraftContext
from decoding.drafters.ngram import NgramConfig, NgramDrafter
from decoding.drafters.ngram_store import NgramStore
from decoding.sampling import SamplingParams

pytestmark = pytest.mark.unit


def context(tokens, k=4):
    return DraftContext(list(tokens), k, SamplingParams(), None)


def test_longest_match_wins_then_most_recent():
    drafter = NgramDrafter(NgramConfig(min_ngram=1, max_ngram=3))
    # "1 2 3" occurred once (followed by 40); "2 3" more recently (followed by 50); suffix is "1 2 3".
    draft = drafter.propose(context([1, 2, 3, 40, 41, 9, 2, 3, 50, 51, 1, 2, 3]))
    assert draft.tokens == [40, 41, 9, 2] and draft.draft_probs is None and draft.source == "ngram:context"
    draft = drafter.propose(context([7, 2, 3, 40, 8, 2, 3, 50, 51, 6, 2, 3]))
    assert draft.tokens[:2] == [50, 51]  # same length (2) -> the most recent occurrence


def test_suffix_never_matches_itself_and_no_match_gives_none():
    drafter = NgramDrafter(NgramConfig(min_ngram=2, max_ngram=4))
    assert drafter.propose(context([1, 2, 3, 4])) is None
    assert drafter.propose(context([5, 5])) is None


def test_extra_sources_and_context_precedence():
    drafter = NgramDrafter(NgramConfig(min_ngram=2, max_ngram=4), sources={"other.py": [9, 1, 2, 3, 60, 61, 62]})
    draft = drafter.propose(context([8, 1, 2, 3], k=3))
    assert draft.tokens == [60, 61, 62] and draft.source == "ngram:other.py"
    # Equal match length in the context itself: the context wins.
    draft = drafter.propose(context([1, 2, 3, 70, 71, 1, 2, 3], k=2))
    assert draft.tokens == [70, 71] and draft.source == "ngram:context"


def test_index_extends_incrementally_and_rebuilds_on_edit():
    drafter = NgramDrafter(NgramConfig(min_ngram=2, max_ngram=2))
    assert drafter.propose(context([1, 2, 3, 1])) is None
    assert drafter.propose(context([1, 2, 3, 1, 2])).tokens == [3, 1, 2]
    # An edited history (not an extension) must not propose the old text.
    assert drafter.propose(context([1, 5, 3, 1, 2])) is None
    store = NgramStore(NgramConfig(min_ngram=1, max_ngram=2))
    store.put("a", 1, [4, 5, 6])
    assert next(store.matches([4, 5])) == (2, [("a", 2)]) and list(store.matches([6])) == []


def test_expected_tokens_formula():
    # (1 - a^(k+1)) / (1 - a) / (1 + k c), computed by hand for a = 0.7, c = 0.15. (A table printed
    # with this formula in circulation, 1.72 / 1.79 / 1.40, does not match it; these values do.)
    assert [round(expected_gain(0.7, k, 0.15), 2) for k in (2, 4, 8)] == [1.68, 1.73, 1.45]
    assert round(expected_tokens_per_pass(0.7, 4), 2) == 2.77
    assert expected_tokens_per_pass(1.0, 5) == 6.0


def test_policy_shortens_drafts_for_failing_sources_and_lengthens_for_hitting_ones():
    policy = DraftLengthPolicy(max_k=8, verify_cost_per_token=0.1)
    for _ in range(30):
        policy.update("bad", 4, 0)
        policy.update("good", 4, 4)
    assert policy.choose("good") == 8 and policy.choose("good", limit=3) == 3
    assert policy.best_gain("good") > policy.best_gain("bad")
    assert policy.choose("good", limit=0) == 0 and policy.best_gain("good", limit=0) == 1.0
    # Acceptance ~0.03 is below the cost of verifying one more token (0.1): no draft at all...
    assert policy.choose("bad") == 0 and policy.best_gain("bad") == 1.0
    # ...until the source has sat out long enough for its estimate to drift back toward the prior.
    rounds = 0
    while policy.choose("bad") == 0:
        policy.idle("bad")
        rounds += 1
    assert 1 < rounds < 40 and policy.choose("bad") >= 1


def test_a_measured_jump_from_one_to_two_tokens_stops_marginal_drafts():
    """On a CPU a two-token pass can cost a third more than a one-token pass while eight tokens cost
    hardly more than two: the measured table, not a line, decides. Acceptance 0.25 does not pay for
    the jump, acceptance 0.9 pays for long drafts."""
    table = (1.0, 1.33, 1.36, 1.39, 1.42, 1.45, 1.48, 1.51, 1.54)
    policy = DraftLengthPolicy(max_k=8, prior_alpha=0.25)
    policy.set_verify_costs(table)
    assert policy.choose("weak") == 0
    policy = DraftLengthPolicy(max_k=8, prior_alpha=0.9)
    policy.set_verify_costs(table)
    assert policy.choose("strong") == 8


def test_cheap_verification_makes_drafts_longer():
    """The same acceptance gives longer drafts when verifying a token costs less (a GPU) than more (a CPU)."""
    lengths = []
    for cost in (0.01, 0.3):
        policy = DraftLengthPolicy(max_k=16, verify_cost_per_token=cost)
        for _ in range(5):
            policy.update("src", 4, 3)
        lengths.append(policy.choose("src"))
    long, short = lengths
    assert long > short >= 1


def test_verify_cost_fits_time_against_tokens_fed():
    cost = VerifyCost(min_passes=4)
    assert cost.relative_costs(4) is None
    for n in (1, 1, 5, 5, 9, 9):
        cost.record(n, 20.0 + 2.0 * (n - 1))  # 20 ms for one token, 2 ms per extra token
    cost.record(5, 500.0)  # one stalled pass: the per-size median ignores it
    assert cost.relative_costs(1)[1] == pytest.approx(1.1)  # the line: 0.1 of a one-token pass per token
    costs = cost.relative_costs(10)  # medians where measured (k = 0, 4, 8), the line elsewhere
    assert costs[0] == 1.0 and costs[4] == pytest.approx(28 / 20) and costs[8] == pytest.approx(36 / 20)
    assert costs[2] == pytest.approx(24 / 20) and costs[10] == pytest.approx(40 / 20)
    single = VerifyCost(min_passes=2)
    for _ in range(5):
        single.record(1, 20.0)
    assert single.relative_costs(4) is None  # one size only: no slope to fit


def test_token_buffer_finds_what_the_store_finds():
    """The committed-token search (bytes.rfind over machine words) agrees with the hashed store on
    random sequences, including ids whose bytes could match across word boundaries."""
    import random

    from decoding.drafters.ngram import NgramConfig, TokenBuffer

    rng = random.Random(0)
    config = NgramConfig(min_ngram=2, max_ngram=4)
    for _ in range(200):
        tokens = [rng.choice([1, 2, 3, 256, 257, 65536 + 1, 16777216]) for _ in range(rng.randint(2, 60))]
        store, buffer = NgramStore(config, max_per_key=TokenBuffer.MAX_POSITIONS), TokenBuffer(config, tokens[:5])
        store.put("s", 0, tokens)
        buffer.extend(tokens[5:])
        suffix = tokens[-rng.randint(2, 4):]
        from_store = [(n, [position for _, position in places]) for n, places in store.matches(suffix)]
        assert list(buffer.matches(suffix)) == from_store, (tokens, suffix)


def test_store_updates_per_source_and_never_proposes_old_text():
    config = NgramConfig(min_ngram=2, max_ngram=3)
    store = NgramStore(config)
    store.put("a.py", 1, [1, 2, 3, 10, 11])
    store.put("b.py", 1, [1, 2, 3, 20, 21])
    drafter = NgramDrafter(config, store)
    # Equal match length: the most recently indexed source first; a tree offers both.
    assert drafter.propose(context([7, 1, 2, 3], k=2)).tokens == [20, 21]
    tree = NgramDrafter(config, store, max_candidates=4).propose(context([7, 1, 2, 3], k=2))
    assert sorted(tree.tree.tokens) == [10, 11, 20, 21]
    # b.py edited: its old continuation is gone, the new one is proposed.
    assert store.put("b.py", 2, [1, 2, 3, 30, 31]) and not store.put("b.py", 2, [0])
    assert drafter.propose(context([7, 1, 2, 3], k=2)).tokens == [30, 31]
    # b.py removed: only a.py is left; then sync to nothing empties the table.
    store.sync({"a.py": (1, [1, 2, 3, 10, 11])})
    assert store.names() == ["a.py"] and drafter.propose(context([7, 1, 2, 3], k=2)).tokens == [10, 11]
    store.sync({})
    assert len(store) == 0 and store._table == {} and drafter.propose(context([7, 1, 2, 3], k=2)) is None


def test_store_retains_watched_files_within_a_budget_unless_dropped():
    """A retained source that leaves the wanted set stays (no re-indexing when it comes back), up to
    the token budget, least recently wanted out first; ``drop`` and ``remove`` still take it out."""
    config = NgramConfig(min_ngram=2, max_ngram=2)
    store = NgramStore(config, max_retained_tokens=8)
    a, b, c = [1, 2, 3, 4, 5], [1, 2, 6, 7, 8], [9, 9, 9]
    store.sync({"a": (1, a), "b": (1, b)}, retain={"a", "b"})
    store.sync({"c": (1, c)})  # a and b leave: 10 tokens retained would exceed 8, so a (older) goes
    assert store.names() == ["b", "c"]
    store.sync({"b": (1, b)}, retain={"b"})
    assert store.names() == ["b"]  # c was not marked to retain
    assert not store.put("b", 1, [0])  # b is still indexed at version 1: nothing to do
    store.sync({}, drop={"b"})
    assert len(store) == 0
    store.sync({"a": (1, a)}, retain={"a"})
    store.sync({})
    assert store.names() == ["a"] and store.remove("a") and len(store) == 0


def test_store_lookup_reads_a_bounded_number_of_places():
    """A thousand sources sharing an n-gram: a lookup returns at most ``max_per_key`` places, the
    most recent first (its cost does not grow with the number of sources)."""
    config = NgramConfig(min_ngram=2, max_ngram=2)
    store = NgramStore(config, max_per_key=8)
    for i in range(1000):
        store.put(f"f{i}", 0, [5, 6, 100 + i])
    (n, places), = store.matches([5, 6])
    assert n == 2 and places == [(f"f{i}", 2) for i in range(999, 991, -1)]
    with pytest.raises(ValueError):
        NgramDrafter(NgramConfig(min_ngram=1, max_ngram=2), store)



def test_searched_sources_match_like_indexed_ones_and_leave_no_trace():
    """A source put with indexed=False (searched by bytes.rfind) gives the places an indexed one gives,
    ordered with the other sources by recency, and removing it leaves nothing behind."""
    import random

    rng = random.Random(1)
    config = NgramConfig(min_ngram=2, max_ngram=4)
    for _ in range(100):
        texts = {name: [rng.choice([1, 2, 3, 4, 300, 70000]) for _ in range(rng.randint(3, 40))] for name in "abc"}
        searched_as = set(rng.sample(sorted(texts), rng.randint(0, 3)))
        indexed, mixed = NgramStore(config, max_per_key=4), NgramStore(config, max_per_key=4)
        for name, tokens in texts.items():
            indexed.put(name, 0, tokens)
            mixed.put(name, 0, tokens, indexed=name not in searched_as)
        suffix = [rng.choice([1, 2, 3, 4]) for _ in range(4)]
        assert list(mixed.matches(suffix)) == list(indexed.matches(suffix)), (texts, searched_as, suffix)
    mixed.sync({})
    assert len(mixed) == 0 and mixed._table == {} and mixed._searched == {}
    mixed.sync({"s": (1, [5, 6, 7, 5, 6, 8])}, searched={"s"})
    assert "s" in mixed._searched and next(mixed.matches([5, 6])) == (2, [("s", 5), ("s", 2)])
