"""Paired bootstrap confidence intervals for the difference between two systems scored on the same
test articles (e.g. a reward-trained model against the MLE baseline), for one training seed or pooled over
several (a two-level bootstrap: seeds, then articles): of the mean difference, or, given each article's length
difference, of the difference at equal length (`at_equal_length`)."""
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


def at_equal_length(deltas: np.ndarray, length_gaps: np.ndarray) -> float:
    """The difference at equal length: the intercept of the least-squares line of the per-article differences on
    the per-article length differences (row − baseline, tokens), i.e. the line's value where the two summaries are
    as long. A row that only writes longer gains along the line, not at its intercept (the length-controlled
    comparison of AlpacaEval 2.0, Dubois et al. 2024). Length gaps that do not vary leave the mean difference."""
    return float(_statistic(_columns(np.asarray(deltas, float), np.asarray(length_gaps, float)).mean(axis=0)))


def _columns(deltas: np.ndarray, length_gaps: np.ndarray | None) -> np.ndarray:
    """Per article [n, c], the columns whose means the statistic is a function of: Δ alone, or Δ, ℓ, Δ·ℓ and ℓ²."""
    if length_gaps is None:
        return deltas[:, None]
    if length_gaps.shape != deltas.shape:
        raise ValueError(f"length_gaps must match deltas, got shapes {length_gaps.shape} and {deltas.shape}")
    return np.stack([deltas, length_gaps, deltas * length_gaps, length_gaps * length_gaps], axis=1)


def _statistic(means: np.ndarray) -> np.ndarray:
    """The statistic of column means [..., c]: the mean difference, or the intercept Δ̄ − slope·ℓ̄ with slope
    (mean(Δ·ℓ) − Δ̄·ℓ̄) / (mean(ℓ²) − ℓ̄²), 0 where the lengths do not vary."""
    if means.shape[-1] == 1:
        return means[..., 0]
    delta, gap, cross, square = np.moveaxis(means, -1, 0)
    variance = square - gap * gap
    varies = variance > 1e-9 * np.maximum(square, 1.0)  # rounding leaves a constant gap's variance a hair above 0
    slope = np.where(varies, (cross - delta * gap) / np.where(varies, variance, 1.0), 0.0)
    return delta - slope * gap


def _resampled(columns: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """The statistic of each resample of articles (`picks` [..., n] article indices), column by column."""
    return _statistic(np.stack([columns[:, j][picks].mean(axis=-1) for j in range(columns.shape[1])], axis=-1))


def paired_bootstrap(deltas: np.ndarray, resamples: int = 1000, seed: int = 0, level: float = 0.95,
                     length_gaps: np.ndarray | None = None) -> Interval:
    """Percentile bootstrap interval of the mean of per-article differences (row − baseline), or, with each
    article's `length_gaps`, of the difference at equal length (`at_equal_length`), from the same resamples."""
    deltas = np.asarray(deltas, dtype=float)
    if deltas.ndim != 1 or deltas.size == 0:
        raise ValueError(f"deltas must be a non-empty 1-D array, got shape {deltas.shape}")
    columns = _columns(deltas, None if length_gaps is None else np.asarray(length_gaps, dtype=float))
    rng = np.random.default_rng(seed)
    # Resampling articles, each carrying its own difference, keeps both systems' scores of an article
    # together: that is what makes the bootstrap paired.
    stats = _resampled(columns, rng.integers(0, deltas.size, size=(resamples, deltas.size)))
    tail = (1 - level) / 2
    low, high = np.percentile(stats, [100 * tail, 100 * (1 - tail)])
    return Interval(float(_statistic(columns.mean(axis=0))), float(low), float(high))


def pooled_bootstrap(deltas_per_seed: list[np.ndarray], resamples: int = 1000, seed: int = 0,
                     level: float = 0.95, length_gaps_per_seed: list[np.ndarray] | None = None) -> Interval:
    """Percentile interval of the mean over training seeds of each seed's mean per-article difference (with
    `length_gaps_per_seed`: of each seed's difference at equal length, `at_equal_length`).

    Two levels: each resample draws the seeds with replacement, then, independently for each seed drawn, its
    articles with replacement. An article-only bootstrap of the pooled differences would ignore that runs of one
    reward disagree from seed to seed; this interval widens when they do. One seed gives exactly
    `paired_bootstrap`'s interval (the same draws)."""
    deltas = [np.asarray(d, dtype=float) for d in deltas_per_seed]
    if not deltas or any(d.ndim != 1 or d.size == 0 for d in deltas):
        raise ValueError("deltas_per_seed must be a non-empty list of non-empty 1-D arrays")
    gaps = length_gaps_per_seed or [None] * len(deltas)
    columns = [_columns(d, None if g is None else np.asarray(g, dtype=float)) for d, g in zip(deltas, gaps)]
    rng = np.random.default_rng(seed)
    n = len(deltas)
    # For every seed, `resamples × n` article resamples: one for each slot a seed can fill in a resample.
    article_stats = np.stack([_resampled(c, rng.integers(0, c.shape[0], size=(resamples * n, c.shape[0])))
                              for c in columns]).reshape(n, resamples, n)
    picks = rng.integers(0, n, size=(resamples, n)) if n > 1 else np.zeros((resamples, 1), dtype=int)
    stats = article_stats[picks, np.arange(resamples)[:, None], np.arange(n)[None]].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.percentile(stats, [100 * tail, 100 * (1 - tail)])
    return Interval(float(np.mean([_statistic(c.mean(axis=0)) for c in columns])), float(low), float(high))


def paired_differences(scores: dict[str, dict[str, float | None]], base: dict[str, dict[str, float | None]],
                       metric: str | list[str], row: str = "row", baseline: str = "baseline") -> np.ndarray:
    """`scores` − `base` on `metric`, article by article (ids sorted, so the order is the rows' order-free): [n], or,
    for a list of metrics, [n, metrics] (e.g. a metric and `tokens`, for `at_equal_length`). Both must score exactly
    the same articles, or a ValueError names the row and how many ids differ. An article a metric does not apply to
    (None, as `trainer.evaluate` leaves it) drops out of the pairs."""
    only_row, only_base = len(scores.keys() - base.keys()), len(base.keys() - scores.keys())
    if only_row or only_base:
        raise ValueError(f"{row!r}: {only_row + only_base} article ids differ from the baseline {baseline!r} "
                         f"({only_row} only in {row!r}, {only_base} only in {baseline!r}); "
                         "the paired bootstrap needs both scored on the same articles")
    keys = [metric] if isinstance(metric, str) else list(metric)
    pairs = np.array([[scores[i][k] - base[i][k] for k in keys] for i in sorted(base)
                      if all(scores[i][k] is not None and base[i][k] is not None for k in keys)], dtype=float)
    pairs = pairs.reshape(-1, len(keys))
    return pairs[:, 0] if isinstance(metric, str) else pairs
