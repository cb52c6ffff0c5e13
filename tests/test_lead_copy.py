"""The copy monitor: the share of summary trigrams found verbatim in the article's first three sentences."""
import pytest
import torch

from models.text.ngrams import lead_copy_rate, lead_lengths

DOT, BANG = 1, 2


def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows]), torch.tensor([len(r) for r in rows])


def test_lead_lengths_stop_after_the_third_sentence():
    source, lengths = pad([[5, 6, DOT, 7, BANG, 8, 9, DOT, 10, 11, DOT], [5, 6, DOT, 7]])
    assert lead_lengths(source, lengths, torch.tensor([DOT, BANG])).tolist() == [8, 4]  # 3 sentences, or all


def test_lead_copy_rate_hand_computed():
    # row 0's lead is "5 6 . 7 ! 8 9 ."; "10 11 12" comes after it. pads add nothing
    source, source_lengths = pad([[5, 6, DOT, 7, BANG, 8, 9, DOT, 10, 11, 12, DOT], [20, 21, 22, DOT]])
    summary, summary_lengths = pad([[5, 6, DOT, 7, 99, 10, 11, 12], [20, 21, 22, 8, 9, DOT]])
    rate = lead_copy_rate(summary, summary_lengths, source, source_lengths, torch.tensor([DOT, BANG]), base=100)
    # row 0 trigrams: (5 6 .) (6 . 7) in the lead; (. 7 99) (7 99 10) (99 10 11) nowhere; (10 11 12) after the lead
    # row 1: (20 21 22) in its lead; (8 9 .) is in row 0's lead only, which does not count; 1 of 4
    assert float(rate) == pytest.approx((2 + 1) / (6 + 4))
