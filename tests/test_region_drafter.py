"""The region drafter of a rewrite: its pointer, re-anchoring, the long draft of an aligned region; and
the policy options that keep it from being starved (per-source caps and priors, idling when passed over)."""

from __future__ import annotations

import pytest

from decoding.draft_length import DraftLengthPolicy
from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.region import LOCAL_TOKENS, TENTATIVE_TOKENS, RegionDrafter
from decoding.drafters.switching import SwitchingDrafter
from decoding.sampling import SamplingParams

pytestmark = pytest.mark.unit

PROMPT = [90, 91, 10, 11, 12]  # the prompt may hold region tokens too: only generated ones count
END = 99  # the end marker's token
REGION = [10, 11, 12, 13, 14, 15, 16, 17]
DRAFT_IDS = [*REGION, END]


def context(generated, k=64, prompt=PROMPT):
    return DraftContext([*prompt, *generated], k, SamplingParams(), None)


def proposal(drafter, generated, k=64):
    draft = drafter.propose(context(generated, k))
    return None if draft is None else draft.tokens


def test_aligned_start_proposes_the_whole_region_and_its_end_marker_in_one_draft():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    draft = drafter.propose(context([]))
    assert draft.tokens == DRAFT_IDS and draft.draft_probs is None and draft.source == "region"
    assert proposal(RegionDrafter(DRAFT_IDS, len(PROMPT)), [], k=3) == [10, 11, 12]
    assert drafter.propose(context([], k=0)) is None


def test_pointer_follows_accepted_tokens_and_the_target_token_after_them():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    draft = drafter.propose(context([], k=3))
    drafter.observe(draft, 3)
    # The round committed the 3 accepted tokens and the target's next one, which continues the region.
    assert proposal(drafter, [10, 11, 12, 13], k=3) == [14, 15, 16]
    assert drafter.pointer == 4
    # Tokens another source drafted (or plain rounds wrote) move the pointer the same way.
    assert proposal(drafter, [10, 11, 12, 13, 14, 15], k=2) == [16, 17]


def test_a_replaced_token_is_guessed_once_with_a_short_draft_then_rejoins():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(drafter, [10, 11, 50]) == [13, 14, 15, 16, 17, END]  # 12 -> 50: 13 guessed to follow
    assert drafter._tentative
    assert proposal(drafter, [10, 11, 50, 13]) == [14, 15, 16, 17, END] and not drafter._tentative
    wrong = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(wrong, [10, 11, 50]) == [13, 14, 15, 16, 17, END]
    assert proposal(wrong, [10, 11, 50, 51]) is None  # the guess failed: no second guess
    assert proposal(wrong, [10, 11, 50, 51, 52]) is None
    assert proposal(wrong, [10, 11, 50, 51, 52, 12]) == [13, 14, 15, 16, 17, END]  # 12 written late: rejoined


def test_a_one_token_rejoin_drafts_short_until_confirmed():
    region = [*range(100, 140), END]
    drafter = RegionDrafter(region, len(PROMPT))
    assert proposal(drafter, [100, 77]) == region[2:2 + TENTATIVE_TOKENS]  # tentative: short
    assert proposal(drafter, [100, 77, 102]) == region[3:]  # confirmed: the whole rest
    assert proposal(RegionDrafter(region, len(PROMPT)), [100, 101]) == region[2:]


def test_a_token_left_out_rejoins_at_once():
    # the target renamed ``remote`` but not in prose: the draft's " remote" "_value" " side" is written
    # " remote" " side", one token left out; the next draft follows " side" in the same round
    draft_ids = [20, 21, 22, 23, 24, 25, END]
    drafter = RegionDrafter(draft_ids, len(PROMPT))
    assert proposal(drafter, [20, 21, 23]) == [24, 25, END]
    far = RegionDrafter([*range(30, 30 + LOCAL_TOKENS + 2), END], len(PROMPT))
    # beyond the window: taken as a replaced token (a guess), not as the tokens before it left out
    assert proposal(far, [30, 30 + LOCAL_TOKENS + 1]) == [*range(32, 30 + LOCAL_TOKENS + 2), END]


def test_insertion_and_deletion_re_anchor_after_the_old_pointer():
    inserted = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(inserted, [10, 11, 12, 60, 61, 13, 14, 15]) == [16, 17, END]
    deleted = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(deleted, [10, 11, 14, 15, 16]) == [17, END]  # 12, 13 deleted


def test_repeated_lines_anchor_at_the_nearest_occurrence_forward_else_backward():
    region = [1, 2, 3, 7, 1, 2, 3, 8, 9, END]
    forward = RegionDrafter(region, len(PROMPT))
    # 1 2 3 7 copied, then 5 inserted before the second "1 2 3": the occurrence after the pointer wins.
    assert proposal(forward, [1, 2, 3, 7, 5, 1, 2, 3]) == [8, 9, END]
    thrice = RegionDrafter([1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 3, 9, END], len(PROMPT))
    assert proposal(thrice, [1, 2, 3, 7, 5, 1, 2, 3]) == [8, 1, 2, 3, 9, END]  # the nearest, not the last
    backward = RegionDrafter([1, 2, 3, 7, 8, 9, END], len(PROMPT))
    # The target writes "1 2 3" again after "7": it only occurs before the pointer, so go back there.
    assert proposal(backward, [1, 2, 3, 7, 1, 2, 3]) == [7, 8, 9, END]
    twice_before = RegionDrafter(region, len(PROMPT))
    # Diverging at the pointer 8 (after "8"), "1 2 3" ends at 3 and 7: the nearest before the pointer wins.
    assert proposal(twice_before, [1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 3]) == [8, 9, END]


def test_anchor_not_found_proposes_nothing_and_a_later_anchor_is_found():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(drafter, [70, 71, 72]) is None
    assert proposal(drafter, [70, 71, 72, 73]) is None and not drafter.aligned
    assert proposal(drafter, [70, 71, 72, 73, 13, 14, 15]) == [16, 17, END]


def test_first_token_differs_anchors_on_the_tokens_generated_so_far():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(drafter, [12]) == [13, 14, 15, 16, 17, END]  # the first two region tokens dropped
    assert proposal(RegionDrafter(DRAFT_IDS, len(PROMPT)), [77]) == [11, 12, 13, 14, 15, 16, 17, END]  # a guess


def test_end_of_region_proposes_nothing():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(drafter, [*REGION]) == [END]
    assert proposal(drafter, DRAFT_IDS) is None


def test_a_new_generation_starts_from_the_region_start():
    drafter = RegionDrafter(DRAFT_IDS, len(PROMPT))
    assert proposal(drafter, [10, 11, 12, 13, 14]) == [15, 16, 17, END]
    assert proposal(drafter, [10]) == [11, 12, 13, 14, 15, 16, 17, END]


def test_invalid_arguments_are_refused():
    with pytest.raises(ValueError, match="anchor_tokens"):
        RegionDrafter(DRAFT_IDS, 0, anchor_tokens=0)
    with pytest.raises(ValueError, match="prompt_len"):
        RegionDrafter(DRAFT_IDS, -1)


class FixedDrafter(Drafter):
    """Always proposes ``tokens`` (cut to the round's k)."""

    def __init__(self, name, tokens, probs=None):
        self.name, self.tokens, self.probs = name, tokens, probs

    def propose(self, context):
        return Draft(self.tokens[: context.max_tokens], self.probs, self.name)

    def observe(self, draft, num_accepted):
        pass


def test_caps_keep_other_sources_short_while_the_region_drafts_long():
    policy = DraftLengthPolicy(max_k=64, verify_cost_per_token=0.0, priors={"region": 0.99})
    region, other = FixedDrafter("region", list(range(100))), FixedDrafter("other", list(range(100)))
    switching = SwitchingDrafter([region, other], policy, caps={"other": 4})
    assert len(switching.propose(context([], k=40)).tokens) == 40  # capped by the round, not by "other"'s cap
    assert policy.plan("other", 40) != policy.plan("other", 4)
    lone = SwitchingDrafter([other], policy, caps={"other": 4})
    assert len(lone.propose(context([], k=40)).tokens) == 4
    with pytest.raises(ValueError, match="caps"):
        SwitchingDrafter([other], policy, caps={"other": -1})


def test_a_source_passed_over_relaxes_toward_its_prior_only_when_asked():
    def passed_over_alpha(idle_passed_over: bool) -> float:
        policy = DraftLengthPolicy(max_k=8, verify_cost_per_token=0.0, priors={"region": 0.9})
        for _ in range(3):
            policy.update("region", 8, 1)  # a poor start: the region now scores below the other source
        policy.update("other", 8, 8)
        switching = SwitchingDrafter([FixedDrafter("region", [1] * 8), FixedDrafter("other", [2] * 8)], policy,
                                     idle_passed_over=idle_passed_over)
        low = policy.estimate("region").alpha
        for _ in range(10):
            assert switching.propose(context([], k=8)).source == "other"
        return policy.estimate("region").alpha - low

    assert passed_over_alpha(False) == 0.0  # the completion modes' behaviour: frozen while passed over
    assert passed_over_alpha(True) > 0.05


def test_per_source_priors_start_and_relax_estimates():
    policy = DraftLengthPolicy(prior_alpha=0.6, priors={"region": 0.9})
    assert policy.estimate("region").alpha == 0.9 and policy.estimate("ngram").alpha == 0.6
    assert policy.choose("region", 64) > policy.choose("ngram", 64)
    policy.update("region", 4, 0)
    before = policy.estimate("region").alpha
    policy.idle("region")
    assert before < policy.estimate("region").alpha < 0.9
    with pytest.raises(ValueError, match="prior"):
        DraftLengthPolicy(priors={"region": 1.5})
