"""The self-critical objective as small pure functions (Rennie et al. 2017; the mixed loss of Paulus et al. 2018):
what `trainer.module.SummarizationModule` computes from a batch's rollouts, and what its step logs about them.

Shapes: B articles, k samples per article (N = B·k sample rows, article i's at rows i·k … i·k + k − 1), T steps.
The rollouts themselves (sampling and the greedy rows) are `models.decoding.sample_and_greedy`. The baselines
(greedy, leave-one-out) are unbiased: a sample's baseline never depends on that sample itself.
"""
from __future__ import annotations

from typing import Mapping, Protocol

import torch
from torch import Tensor

from models.text.ngrams import distinct_ngram_ratio, lead_copy_rate, novel_ngram_rate, repeated_ngram_rate


class Baseline(Protocol):
    """`__call__(sample_rewards [B, k], greedy_rewards [B] or None) -> baselines [B, k]`."""

    needs_greedy: bool  # the decode adds one greedy row per article

    def __call__(self, sample_rewards: Tensor, greedy_rewards: Tensor | None) -> Tensor: ...


class GreedyBaseline:
    """Self-critical (Rennie et al. 2017): the reward of the article's greedy decode, for each of its k samples."""

    needs_greedy = True

    def __call__(self, sample_rewards: Tensor, greedy_rewards: Tensor | None) -> Tensor:
        return greedy_rewards[:, None].expand_as(sample_rewards)


class LeaveOneOut:
    """RLOO (Kool et al. 2019): each sample's baseline is the mean reward of the article's other k − 1 samples."""

    needs_greedy = False

    def __init__(self, samples: int):
        if samples < 2:
            raise ValueError(f"rl.baseline=leave_one_out needs rl.samples >= 2, got {samples}")

    def __call__(self, sample_rewards: Tensor, greedy_rewards: Tensor | None) -> Tensor:
        k = sample_rewards.size(1)
        return (sample_rewards.sum(1, keepdim=True) - sample_rewards) / (k - 1)


def self_critical_loss(sample_log_probs: Tensor, sample_lengths: Tensor, advantage: Tensor,
                       length_normalize: bool = False) -> Tensor:
    """−A·Σ_t log p(ŷ_t) per sample, summed over the sample up to and including its first </s> (`sample_lengths`
    [N]), A the sample's advantage r(ŷ) − b over its baseline (the greedy decode's reward: self-critical).
    sample_log_probs [N, T], advantage [N]. Returns [N]."""
    steps = torch.arange(sample_log_probs.size(1), device=sample_log_probs.device)[None]
    mask = steps < sample_lengths[:, None]
    sequence = (sample_log_probs * mask).sum(1)
    if length_normalize:
        sequence = sequence / sample_lengths.clamp(min=1)
    return -advantage.detach() * sequence


def length_neutral_advantage(advantage: Tensor, length_gap: Tensor, strength: float = 1.0) -> Tensor:
    """The advantages [B, k] less `strength` × the slope of their least-squares line on the samples' length gaps over
    their baselines ([B, k], tokens; the baseline's length taken as its reward is), where that slope is positive:
    A − s·max(b, 0)·Δℓ. At strength 1 the batch's advantages no longer rise with a sample's length, so the gradient
    does not pay (to first order) for writing longer, only for what the reward sees at equal length: the training
    twin of table4's gain at equal length (`evaluation.significance.at_equal_length`). A reward that prefers shorter
    samples (one that learns to stop a loop) keeps that; gaps that do not vary leave the advantages as they are."""
    gap = length_gap.float()
    centred = gap - gap.mean()
    spread = (centred * centred).sum()
    if strength == 0 or spread == 0:
        return advantage
    slope = (centred * (advantage - advantage.mean())).sum() / spread
    return advantage - strength * slope.clamp(min=0) * gap


def mixed_loss(gamma: float, rl_per_article: Tensor, mle: Tensor, any_reference: bool) -> Tensor:
    """γ·L_RL + (1 − γ)·L_MLE, L_RL the mean over articles [B]; a batch without any reference has no MLE term, and
    trains on L_RL alone."""
    return gamma * rl_per_article.mean() + (1 - gamma) * mle if any_reference else rl_per_article.mean()


def nan_std(values: Tensor) -> Tensor | float:
    """The standard deviation of the values that are not NaN (0 for fewer than two)."""
    values = values[~values.isnan()]
    return values.std() if values.numel() > 1 else 0.0


def advantage_statistics(advantage: Tensor) -> dict[str, Tensor | float]:
    """The samples' advantages over their baselines [B, k]: mean, spread, and the share exactly at their baseline
    (no gradient from those: the batch teaches nothing there)."""
    return {"advantage_mean": advantage.mean(), "advantage_std": advantage.std() if advantage.numel() > 1 else 0.0,
            "zero_advantage": (advantage == 0).float().mean()}


def sample_statistics(ids: Tensor, lengths: Tensor, src_ext: Tensor, src_lengths: Tensor, sentence_ends: Tensor,
                      base: int) -> dict[str, Tensor]:
    """What the samples [N, T] look like: their length, repeated, novel and distinct trigrams, and the share of their
    trigrams copied from the article's lead-3 (src_ext [N, S] and src_lengths [N]: each sample's own article; ids
    below `base`, the extended vocabulary's size)."""
    return {"sample_length": lengths.float().mean(),
            "repeated_trigrams": repeated_ngram_rate(ids, lengths, base),
            "novel_trigrams": novel_ngram_rate(ids, lengths, src_ext, src_lengths, base),
            "distinct_trigrams": distinct_ngram_ratio(ids, lengths, base),
            "lead3_copy": lead_copy_rate(ids, lengths, src_ext, src_lengths, sentence_ends, base)}


def term_statistics(terms: Mapping[str, Tensor], diagnostics: Mapping[str, float]) -> dict[str, Tensor | float]:
    """Each part of a reward on the samples (`terms`, [N] each: mean and spread, NaN rows left out) and what the
    reward says about its last call, under `reward/`."""
    parts: dict[str, Tensor | float] = {}
    for name, value in terms.items():
        parts |= {f"reward/{name}": value.nanmean(), f"reward/{name}_std": nan_std(value)}
    return parts | {f"reward/{key}": value for key, value in diagnostics.items()}
