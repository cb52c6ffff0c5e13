"""Paired bootstrap confidence intervals for the difference between two systems scored on the same
test articles (e.g. a reward-trained model against the MLE baseline)."""
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


def compare_to_baseline(per_article: dict[str, dict[str, dict[str, float | None]]], baseline: str,
                        metrics: list[str], resamples: int = 1000, seed: int = 0, level: float = 0.95
                        ) -> dict[str, dict[str, Interval]]:
    """Intervals of (row − baseline) for every other row and each metric, articles paired by id.

    `per_article` maps row -> article id -> {metric: score}. Every row must score exactly the
    baseline's articles; otherwise a ValueError names the row and how many ids differ.
    """
    base = per_article[baseline]
    # Sorted ids make the differences' order, and so the resamples, independent of the rows' order.
    ids = sorted(base)
    intervals = {}
    for row, scores in per_article.items():
        if row == baseline:
            continue
        only_row, only_base = len(scores.keys() - base.keys()), len(base.keys() - scores.keys())
        if only_row or only_base:
            raise ValueError(f"{row!r}: {only_row + only_base} article ids differ from the baseline {baseline!r} "
                             f"({only_row} only in {row!r}, {only_base} only in {baseline!r}); "
                             "the paired bootstrap needs both scored on the same articles")
        # Every cell reuses `seed`, so all intervals come from the same resampled test sets. An article a
        # metric does not apply to (None, as `trainer.evaluate` leaves it) drops out of that metric's pairs.
        intervals[row] = {m: paired_bootstrap(np.array([scores[i][m] - base[i][m] for i in ids
                                                        if scores[i][m] is not None and base[i][m] is not None]),
                                              resamples, seed, level) for m in metrics}
    return intervals
