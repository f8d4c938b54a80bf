"""Substitutions learned from a copy (decoding/drafters/substitutions.py), the region drafter that learns
and drafts them, and the n-gram drafter's lock on the place it copies from."""

from __future__ import annotations

import pytest

from decoding.drafters.base import DraftContext
from decoding.drafters.ngram import FOLLOW_AFTER, NgramDrafter
from decoding.drafters.region import RegionDrafter
from decoding.drafters.substitutions import MAX_RULES, Rule, Substitutions
from decoding.sampling import SamplingParams

pytestmark = pytest.mark.unit

PROMPT = [90, 91]


def proposal(drafter, generated, k=64, prompt=PROMPT):
    draft = drafter.propose(DraftContext([*prompt, *generated], k, SamplingParams(), None))
    return None if draft is None else draft.tokens


def test_rules_of_each_kind_and_their_application():
    rules = Substitutions()
    renamed = rules.learn(left=5, replaced=[7], written=[8])
    assert renamed == Rule((7,), (8,))
    inserted = rules.learn(left=3, replaced=[], written=[40, 41])
    assert inserted == Rule((3,), (3, 40, 41)) and inserted.kept == 1
    deleted = rules.learn(left=1, replaced=[20, 21], written=[])
    assert deleted == Rule((20, 21), ())
    assert rules.learn(left=None, replaced=[], written=[40]) is None  # an insertion needs a left token
    assert rules.learn(left=1, replaced=[7], written=[7]) is None  # no change
    applied = rules.apply([3, 7, 20, 21, 9, 7], offset=10)
    assert applied.tokens == [3, 40, 41, 8, 9, 8]
    # the left token of the insertion is copied; what a rule made restarts at its pattern's copied part
    assert applied.made_by == [None, inserted, inserted, renamed, deleted, renamed]
    assert applied.restart == [10, 11, 11, 11, 12, 15]


def test_a_new_rule_for_the_same_pattern_replaces_the_old_and_the_oldest_go_first():
    rules = Substitutions()
    rules.learn(None, [7], [8])
    rules.learn(None, [7], [9])
    assert rules.rules == [Rule((7,), (9,))]
    for token in range(100, 100 + MAX_RULES + 3):
        rules.learn(None, [token], [token + 1000])
    assert len(rules.rules) == MAX_RULES and rules.rules[0].pattern == (103,)


def test_a_confirmed_rename_is_drafted_at_every_later_occurrence():
    # the region: 10 NAME 11 12 NAME 13 NAME 14; the target renames NAME (7) to 8 everywhere
    region = [10, 7, 11, 12, 7, 13, 7, 14]
    plain = RegionDrafter(region, len(PROMPT))
    learning = RegionDrafter(region, len(PROMPT), substitutions=Substitutions())
    for drafter in (plain, learning):
        assert proposal(drafter, [10, 8]) == [11, 12, 7, 13, 7, 14]  # a guess: 8 replaced 7
    assert proposal(plain, [10, 8, 11]) == [12, 7, 13, 7, 14]
    assert proposal(learning, [10, 8, 11]) == [12, 8, 13, 8, 14]  # confirmed: the rule applies ahead


def test_an_insertion_is_learned_and_its_token_is_then_guessed_as_an_insertion():
    # the target writes "weight_value" where the region has "weight": 7 -> 7 40 at each occurrence
    region = [10, 7, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3, 7, 20, 21]
    rules = Substitutions()
    drafter = RegionDrafter(region, len(PROMPT), substitutions=rules)
    assert proposal(drafter, [10, 7, 40]) == region[3:]  # first taken as a replacement of 11: wrong
    assert proposal(drafter, [10, 7, 40, 11]) == region[3:]  # 11 rejoins: an insertion, not confirmed yet
    assert proposal(drafter, [10, 7, 40, 11, 12]) == [13, 14, 15, 16, 17, 18, 19, 3, 7, 40, 20, 21]
    assert rules.rules == [Rule((7,), (7, 40))]
    # another token before the same insertion ("(weight" and " weight" are two tokens): guessed as one
    other = RegionDrafter([30, 31, 32, 33, 34, 35], len(PROMPT), substitutions=rules)
    assert proposal(other, [30, 31, 40]) == [32, 33, 34, 35]


def test_a_rule_the_target_contradicts_is_dropped_and_the_region_drafted_as_it_was():
    rules = Substitutions()
    rules.learn(None, [7], [8])
    region = [10, 7, 11, 7, 12]
    drafter = RegionDrafter(region, len(PROMPT), substitutions=rules)
    assert proposal(drafter, []) == [10, 8, 11, 8, 12]
    assert proposal(drafter, [10, 7]) == [11, 7, 12]  # wrote 7 where the rule made 8: the rule goes
    assert rules.rules == [] and drafter.aligned


def test_anchor_reach_keeps_a_follower_from_jumping_far():
    region = [*range(100, 160), 1, 2, 3, 4]
    near = RegionDrafter(region, len(PROMPT), anchor_reach=8)
    assert proposal(near, [100, 1, 2, 3]) is None  # 1 2 3 ends 63 tokens away
    anywhere = RegionDrafter(region, len(PROMPT))
    assert proposal(anywhere, [100, 1, 2, 3]) == [4]


def _run(drafter, prompt, output, k=16):
    """Greedy rounds against a known target output: the passes, and the drafts."""
    committed, done, passes, drafts = list(prompt), 0, 0, []
    while done < len(output):
        budget = min(k, len(output) - done - 1)
        draft = drafter.propose(DraftContext(list(committed), budget, SamplingParams(), None)) if budget else None
        accepted = 0
        if draft is not None:
            drafts.append(draft.tokens)
            while accepted < len(draft.tokens) and draft.tokens[accepted] == output[done + accepted]:
                accepted += 1
            drafter.observe(draft, accepted)
        committed += output[done : done + accepted + 1]
        done, passes = done + accepted + 1, passes + 1
    return passes, drafts


def test_ngram_lock_drafts_a_function_written_again_with_a_name_renamed():
    # "def f(w): g(w, a) ; h(w, b) ; return w" then the same with w -> w _v (token 7 -> 7 40)
    body = [50, 51, 7, 52, 53, 60, 54, 7, 55, 61, 56, 62, 53, 63, 54, 7, 55, 64, 56, 62, 53, 65, 7, 57]
    prompt = [*body, 70, 71, 50, 51, 7, 40, 52]
    output = [53, 60, 54, 7, 40, 55, 61, 56, 62, 53, 63, 54, 7, 40, 55, 64, 56, 62, 53, 65, 7, 40, 57]
    passes, drafts = _run(NgramDrafter(), prompt, output)
    # the first occurrence teaches the insertion; the later ones are drafted with it and accepted
    assert drafts[-1] == output[7:22]  # both later occurrences renamed, all accepted
    assert passes == 4
    lookup_only = NgramDrafter()
    lookup_only._followed = lambda context: None  # the lock never drafts: the lookup alone
    assert _run(lookup_only, prompt, output)[0] > passes


def test_ngram_lock_needs_followed_tokens_and_a_new_generation_forgets_the_rules():
    drafter = NgramDrafter()
    prompt = [1, 2, 3, 4, 5, 6, 1, 2]
    assert proposal(drafter, [], prompt=prompt) == [3, 4, 5, 6, 1, 2]
    assert drafter._lock.matched == 0 < FOLLOW_AFTER
    drafter.substitutions.learn(None, [3], [30])
    old = drafter._lock
    assert proposal(drafter, [], prompt=[1, 2, 9, 1, 2]) == [9, 1, 2]  # not an extension: another generation
    assert drafter.substitutions.rules == [] and drafter._lock is not old


def test_a_rule_learned_inside_another_rules_tokens_keeps_that_rule():
    # found by a review's fuzzing: the redraft began inside the other rule's tokens and doubled or lost them
    replaced = Substitutions()
    replaced.learn(None, [3, 4], [6, 7, 8])
    drafter = RegionDrafter([1, 2, 3, 4, 5], len(PROMPT), substitutions=replaced)
    assert proposal(drafter, []) == [1, 2, 6, 7, 8, 5]
    assert proposal(drafter, [1, 9]) == [6, 7, 8, 5]  # 9 written for 2: a guess
    assert proposal(drafter, [1, 9, 6]) == [7, 8, 5]  # confirmed: 2 -> 9 learned, 3 4 -> 6 7 8 kept
    assert Rule((3, 4), (6, 7, 8)) in replaced.rules
    inserted = Substitutions()
    inserted.learn(3, [], [6, 7])
    drafter = RegionDrafter([1, 2, 3, 5], len(PROMPT), substitutions=inserted)
    assert proposal(drafter, [1, 9]) == [3, 6, 7, 5]
    assert proposal(drafter, [1, 9, 3]) == [6, 7, 5]


def test_rules_apply_to_the_token_after_a_deletion():
    rules = Substitutions()
    rules.learn(1, [7], [])
    assert rules.apply([7, 7, 5]).tokens == [5]
    rules.learn(1, [8], [9])
    assert rules.apply([7, 8, 5]).tokens == [9, 5]
    applied = rules.apply([7, 5, 6])
    assert applied.tokens == [5, 6] and applied.made_by[0] == Rule((7,), ()) and applied.restart[0] == 0


def test_anchor_reach_takes_a_near_occurrence_behind_over_a_far_one_ahead():
    drafter = RegionDrafter([*range(1, 9), *range(100, 160), 1, 2, 3, 9], len(PROMPT), anchor_reach=32)
    drafter.pointer = 6
    assert drafter.anchor([1, 2, 3]) == 3
