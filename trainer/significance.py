"""Paired bootstrap confidence intervals for the difference between two systems scored on the same
test articles (e.g. a reward-trained model against the MLE baseline), for one training seed or pooled over
several (a two-level bootstrap: seeds, then articles)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A mean difference and its confidence interval."""

    mean: float
    low: float
    high: float

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 0."""
        return self.low > 0 or self.high < 0


def paired_bootstrap(deltas: np.ndarray, resamples: int = 1000, seed: int = 0, level: float = 0.95) -> Interval:
    """Percentile bootstrap interval of the mean of per-article differences (row − baseline)."""
    deltas = np.asarray(deltas, dtype=float)
    if deltas.ndim != 1 or deltas.size == 0:
        raise ValueError(f"deltas must be a non-empty 1-D array, got shape {deltas.shape}")
    rng = np.random.default_rng(seed)
    # Resampling articles, each carrying its own difference, keeps both systems' scores of an article
    # together: that is what makes the bootstrap paired.
    means = deltas[rng.integers(0, deltas.size, size=(resamples, deltas.size))].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.percentile(means, [100 * tail, 100 * (1 - tail)])
    return Interval(float(deltas.mean()), float(low), float(high))


def pooled_bootstrap(deltas_per_seed: list[np.ndarray], resamples: int = 1000, seed: int = 0,
                     level: float = 0.95) -> Interval:
    """Percentile interval of the mean over training seeds of each seed's mean per-article difference.

    Two levels: each resample draws the seeds with replacement, then, independently for each seed drawn, its
    articles with replacement. An article-only bootstrap of the pooled differences would ignore that runs of one
    reward disagree from seed to seed; this interval widens when they do. One seed gives exactly
    `paired_bootstrap`'s interval (the same draws)."""
    deltas = [np.asarray(d, dtype=float) for d in deltas_per_seed]
    if not deltas or any(d.ndim != 1 or d.size == 0 for d in deltas):
        raise ValueError("deltas_per_seed must be a non-empty list of non-empty 1-D arrays")
    rng = np.random.default_rng(seed)
    n = len(deltas)
    # For every seed, `resamples × n` article resamples: one for each slot a seed can fill in a resample.
    article_means = np.stack([d[rng.integers(0, d.size, size=(resamples * n, d.size))].mean(axis=1)
                              for d in deltas]).reshape(n, resamples, n)
    picks = rng.integers(0, n, size=(resamples, n)) if n > 1 else np.zeros((resamples, 1), dtype=int)
    means = article_means[picks, np.arange(resamples)[:, None], np.arange(n)[None]].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.percentile(means, [100 * tail, 100 * (1 - tail)])
    return Interval(float(np.mean([d.mean() for d in deltas])), float(low), float(high))


def paired_differences(scores: dict[str, dict[str, float | None]], base: dict[str, dict[str, float | None]],
                       metric: str, row: str = "row", baseline: str = "baseline") -> np.ndarray:
    """`scores` − `base` on `metric`, article by article (ids sorted, so the order is the rows' order-free). Both
    must score exactly the same articles, or a ValueError names the row and how many ids differ. An article the
    metric does not apply to (None, as `trainer.evaluate` leaves it) drops out of the pairs."""
    only_row, only_base = len(scores.keys() - base.keys()), len(base.keys() - scores.keys())
    if only_row or only_base:
        raise ValueError(f"{row!r}: {only_row + only_base} article ids differ from the baseline {baseline!r} "
                         f"({only_row} only in {row!r}, {only_base} only in {baseline!r}); "
                         "the paired bootstrap needs both scored on the same articles")
    return np.array([scores[i][metric] - base[i][metric] for i in sorted(base)
                     if scores[i][metric] is not None and base[i][metric] is not None])
