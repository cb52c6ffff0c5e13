"""trainer/rl.py, the self-critical objective's pure functions, against hand-computed values."""
import math

import torch

import pytest

from trainer.rl import (advantage_statistics, length_neutral_advantage, mixed_loss, nan_std, sample_statistics,
                        term_statistics)


def test_the_mixed_loss_weighs_rl_and_mle_by_gamma_and_drops_mle_without_references():
    rl = torch.tensor([1.0, 3.0])  # per article: mean 2
    assert math.isclose(float(mixed_loss(0.7, rl, torch.tensor(10.0), any_reference=True)), 0.7 * 2 + 0.3 * 10,
                        rel_tol=1e-6)
    assert float(mixed_loss(0.7, rl, torch.tensor(10.0), any_reference=False)) == 2.0


def test_advantage_statistics():
    stats = advantage_statistics(torch.tensor([[0.5, 0.0], [-0.5, 0.0]]))
    assert float(stats["advantage_mean"]) == 0.0 and float(stats["zero_advantage"]) == 0.5
    assert math.isclose(float(stats["advantage_std"]), math.sqrt(0.5 / 3), rel_tol=1e-6)
    assert advantage_statistics(torch.tensor([[0.3]]))["advantage_std"] == 0.0  # one sample has no spread


def test_term_statistics_leave_out_rows_a_term_does_not_apply_to():
    stats = term_statistics({"rouge_l": torch.tensor([0.2, float("nan"), 0.4])}, {"qa_questions": 3.0})
    assert math.isclose(float(stats["reward/rouge_l"]), 0.3, rel_tol=1e-6)
    assert math.isclose(float(stats["reward/rouge_l_std"]), math.sqrt(0.02), rel_tol=1e-5)
    assert stats["reward/qa_questions"] == 3.0
    assert nan_std(torch.tensor([float("nan"), 1.0])) == 0.0


def test_sample_statistics_of_a_sample_that_repeats_and_copies_the_lead():
    """ids 5 6 7 5 6 7 (length 6): 4 trigrams, 1 repeated, 3 distinct of 4. Its article, 5 6 7 . 5 6 7 . (`.` = 9,
    two sentences: all of it is the lead-3), holds (5 6 7) but not (6 7 5) or (7 5 6): half the trigrams are novel,
    half copied from the lead."""
    ids = torch.tensor([[5, 6, 7, 5, 6, 7]])
    stats = sample_statistics(ids, torch.tensor([6]), torch.tensor([[5, 6, 7, 9, 5, 6, 7, 9]]), torch.tensor([8]),
                              torch.tensor([9]), base=10)
    assert float(stats["sample_length"]) == 6.0
    assert math.isclose(float(stats["repeated_trigrams"]), 1 / 4)
    assert math.isclose(float(stats["distinct_trigrams"]), 3 / 4)
    assert float(stats["novel_trigrams"]) == 0.5
    assert float(stats["lead3_copy"]) == 0.5


@pytest.mark.parametrize("strength", [0.0, 0.5, 1.0])
def test_length_neutral_advantage_takes_out_the_share_that_rises_with_length(strength):
    """Advantages 1 + 0.5·gap + a residual that is centred and orthogonal to the centred gaps (−1.5, −0.5, 0.5, 1.5):
    the least-squares slope is exactly 0.5, and `strength` of it comes out."""
    gap = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    residual = torch.tensor([[0.1, -0.1], [-0.1, 0.1]])
    advantage = 1 + 0.5 * gap + residual
    torch.testing.assert_close(length_neutral_advantage(advantage, gap, strength), advantage - strength * 0.5 * gap)
    if strength == 1.0:
        torch.testing.assert_close(length_neutral_advantage(advantage, gap), 1 + residual)


def test_length_neutral_advantage_leaves_a_preference_for_shorter_samples_alone():
    gap = torch.tensor([[0.0, 1.0], [2.0, 3.0]])
    advantage = 1 - 0.5 * gap
    assert torch.equal(length_neutral_advantage(advantage, gap), advantage)


def test_length_neutral_advantage_leaves_gaps_without_spread_alone():
    advantage = torch.tensor([[0.3, -0.2]])
    assert torch.equal(length_neutral_advantage(advantage, torch.full((1, 2), 4.0)), advantage)
