"""Each row's difference from its baseline, per metric: paired by article with the run it started from, pooled over
seeds by a two-level bootstrap (`evaluation.significance`), and the same at equal length; and each reward row beside
the length-only control."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evaluation.runs import Run
from evaluation.significance import Interval, paired_bootstrap, paired_differences, pooled_bootstrap
from trainer.evaluate import SHAPE_KEYS


LEVEL = 0.95


EXTRAPOLATED = 0.05  # the share of articles below which equal length lies outside the row's length differences


def format_interval(interval: Interval) -> str:
    return f"{interval.mean:+.2f} [{interval.low:+.2f}, {interval.high:+.2f}]"


@dataclass
class Comparison:
    """A row's difference from the baseline on one metric: pooled over its seeds, and seed by seed; and the same at
    equal length (`at_equal_length`; None for the lengths themselves, or runs whose lengths were not scored)."""

    pooled: Interval
    per_seed: dict[int | None, Interval]
    equal_length: Interval | None = None
    equal_length_per_seed: dict[int | None, Interval] = field(default_factory=dict)
    extrapolated: bool = False  # fewer than EXTRAPOLATED of its articles on one side of equal length

    def equal_length_cell(self) -> str:
        return starred(self.equal_length) + ("†" if self.extrapolated else "")

    @property
    def significant_seeds(self) -> int:
        return sum(interval.significant for interval in self.per_seed.values())


def compare_rows(rows: dict[str, list[Run]], pairs: dict[Path, Run], scores: dict[Path, dict], metrics: list[str],
                 resamples: int, seed: int) -> dict[str, dict[str, Comparison]]:
    """Every non-baseline row's `Comparison` on each metric that its runs scored (a metric read at test time, such as
    an MLE run's LS-Score, may be missing from another run), each run paired by article with its own baseline; at
    equal length too, where the runs' summaries' `tokens` were scored."""
    out = {}
    for row, runs in rows.items():
        if runs[0].path not in pairs:
            continue
        out[row] = {}
        for metric in metrics:
            if any(metric not in article for run in runs for article in scores[run.path].values()):
                continue
            lengths = metric not in SHAPE_KEYS and all("tokens" in article for run in [*runs, *(pairs[r.path] for r in
                                                       runs)] for article in scores[run.path].values())
            keys = [metric, "tokens"] if lengths else [metric]
            pairs_of = {run.seed: paired_differences(scores[run.path], scores[pairs[run.path].path], keys, row,
                                                     pairs[run.path].row) for run in runs}
            deltas = [d[:, 0] for d in pairs_of.values()]
            comparison = Comparison(pooled_bootstrap(deltas, resamples, seed, LEVEL),
                                    {s: paired_bootstrap(d[:, 0], resamples, seed, LEVEL) for s, d in pairs_of.items()})
            if lengths:
                gaps = [d[:, 1] for d in pairs_of.values()]
                pooled_gaps = np.concatenate(gaps)
                comparison.extrapolated = bool(min(np.mean(pooled_gaps <= 0), np.mean(pooled_gaps >= 0)) < EXTRAPOLATED)
                comparison.equal_length = pooled_bootstrap(deltas, resamples, seed, LEVEL, gaps)
                comparison.equal_length_per_seed = {s: paired_bootstrap(d[:, 0], resamples, seed, LEVEL, d[:, 1])
                                                    for s, d in pairs_of.items()}
            out[row][metric] = comparison
    return out


def compare_with_control(rows: dict[str, list[Run]], scores: dict[Path, dict], own: dict[str, str], resamples: int,
                         seed: int) -> tuple[str | None, dict[str, Interval]]:
    """The control row (the length-only reward's), and each other reward row's difference from it on its own
    metric: each seed's run paired by article with the control's run of that seed, pooled over the seeds both have."""
    control = next((row for row, runs in rows.items() if runs[0].control), None)
    if control is None:
        return None, {}
    by_seed = {run.seed: run for run in rows[control]}
    out = {}
    for row, metric in own.items():
        runs = [run for run in rows[row] if run.seed in by_seed and not run.control]
        if not runs or any(metric not in article for run in [*runs, *rows[control]]
                           for article in scores[run.path].values()):
            continue
        deltas = [paired_differences(scores[run.path], scores[by_seed[run.seed].path], metric, row, control)
                  for run in runs]
        out[row] = pooled_bootstrap(deltas, resamples, seed, LEVEL)
    return control, out


def best_row(results: dict[str, dict[str, float]], metric: str, candidate: str) -> str:
    """The row with the highest mean on `metric`: `candidate` where it ties for the top."""
    top = max(results[r][metric] for r in results if metric in results[r])
    return candidate if results[candidate][metric] >= top else next(r for r in results if results[r].get(metric) == top)


def starred(interval: Interval) -> str:
    return format_interval(interval) + ("*" if interval.significant else "")


def interval_fields(interval: Interval) -> dict[str, float | bool]:
    return {"delta": interval.mean, "low": interval.low, "high": interval.high, "significant": interval.significant}
