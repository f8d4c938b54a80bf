"""Verification rules on hand-made distributions where zeros force the outcome."""

import pytest
import torch

from decoding.verify import VerifyResult, greedy_verify, speculative_verify

pytestmark = pytest.mark.unit

V = 5


def one_hot(i: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(i), V).float()


def test_all_accepted_takes_bonus_from_last_row():
    target_probs = torch.stack([one_hot(1), one_hot(2), one_hot(4)])  # (k + 1, V)
    result = speculative_verify(target_probs, [1, 2], None, torch.Generator().manual_seed(0))
    assert (result.num_accepted, result.next_token) == (2, 4)


def test_zero_target_probability_rejects_and_residual_excludes_draft_token():
    target_probs = torch.stack([torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0]), one_hot(0)])
    draft_probs = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]])
    for seed in range(20):
        result = speculative_verify(target_probs, [1], draft_probs, torch.Generator().manual_seed(seed))
        assert result.num_accepted == 0
        assert result.next_token in (2, 3)


def test_residual_is_max_p_minus_q():
    # p = (.5, .5, 0, ...), q = (.5, 0, .5, ...): drafting token 2 always rejects; residual is one-hot on 1.
    target_probs = torch.stack([torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0]), one_hot(3)])
    draft_probs = torch.tensor([[0.5, 0.0, 0.5, 0.0, 0.0]])
    for seed in range(20):
        result = speculative_verify(target_probs, [2], draft_probs, torch.Generator().manual_seed(seed))
        assert (result.num_accepted, result.next_token) == (0, 1)


def test_rejection_in_middle_discards_rest():
    target_probs = torch.stack([one_hot(1), one_hot(3), one_hot(0), one_hot(0)])
    result = speculative_verify(target_probs, [1, 2, 0], None, torch.Generator().manual_seed(0))
    assert (result.num_accepted, result.next_token) == (1, 3)


def test_empty_draft_samples_from_target():
    result = speculative_verify(one_hot(4)[None], [], None, torch.Generator().manual_seed(0))
    assert (result.num_accepted, result.next_token) == (0, 4)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="k \\+ 1"):
        speculative_verify(torch.ones(2, V) / V, [1, 2], None, None)
    with pytest.raises(ValueError, match="draft_probs"):
        speculative_verify(torch.ones(3, V) / V, [1, 2], torch.ones(1, V), None)


def test_greedy_accepts_while_draft_equals_argmax():
    logits = torch.tensor([[0.0, 9.0, 0, 0, 0], [0, 0, 9.0, 0, 0], [9.0, 0, 0, 0, 0], [0, 0, 0, 0, 9.0]])
    # Row argmaxes are 1, 2, 0, 4: the draft 1, 2 matches, 3 does not, so the target's 0 comes next.
    assert greedy_verify(logits, [1, 2, 3]) == VerifyResult(num_accepted=2, next_token=0)
    result = greedy_verify(logits, [1, 2, 0])
    assert (result.num_accepted, result.next_token) == (3, 4)
    result = greedy_verify(logits, [0, 2, 0])
    assert (result.num_accepted, result.next_token) == (0, 1)
    with pytest.raises(ValueError, match="k \\+ 1"):
        greedy_verify(logits, [1, 2])
