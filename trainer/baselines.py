"""Baselines for the policy gradient: what each sample's reward is compared with.

Both are unbiased: a sample's baseline never depends on that sample itself.
"""
from __future__ import annotations

from typing import Protocol

from torch import Tensor


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
