"""Meta-evaluation statistics: how well metrics agree with human judgments, and whether one
metric agrees significantly better than another (Williams' test, as Clark et al. 2019 use it).

Three protocols: summary level (every judged summary pooled), input-level pairwise system differences
(Toutanova et al. 2016 §4.3.2: `input_level_pairs`, `dominance`) and system level (`system_level`)."""
from __future__ import annotations

import math
import statistics
from typing import Mapping, Sequence

from scipy import stats

CORRELATIONS = {"spearman": stats.spearmanr, "pearson": stats.pearsonr, "kendall": stats.kendalltau}


def correlation(x: Sequence[float], y: Sequence[float], method: str = "spearman") -> float:
    """Spearman's rho, Pearson's r or Kendall's tau-b of two equally long samples."""
    return float(CORRELATIONS[method](x, y)[0])


def williams_test(r12: float, r13: float, r23: float, n: int) -> tuple[float, float]:
    """Williams' (1959) test that variable 1 correlates more with 2 than with 3, where 2 and 3
    are themselves correlated (r23) and all three are measured on the same n items.

    For metric evaluation, 1 is the human score, 2 and 3 are metrics A and B. Returns Williams'
    t (df = n - 3) and the one-sided p-value of H1: rho12 > rho13, as in Graham & Baldwin (2014).
    Both are NaN where the test is undefined: the three variables are perfectly collinear (e.g. two
    metrics that rank everything alike), or the correlations are inconsistent (possible for
    Kendall's tau, whose matrices need not be positive semi-definite).
    """
    if n <= 3:
        raise ValueError(f"Williams' test needs n > 3, got {n}")
    k = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23  # determinant of the 3x3 correlation matrix
    variance = 2 * k * (n - 1) / (n - 3) + (r12 + r13) ** 2 / 4 * (1 - r23) ** 3
    if variance <= 1e-12:
        return math.nan, math.nan
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / math.sqrt(variance)
    return t, float(stats.t.sf(t, df=n - 3))


def williams_matrix(human: Sequence[float], metrics: Mapping[str, Sequence[float]],
                    method: str = "spearman") -> dict[tuple[str, str], float]:
    """One-sided p-values {(a, b): p} that metric a correlates with `human` more than metric b,
    for every ordered pair of distinct metrics, correlations measured by `method`."""
    with_human = {name: correlation(values, human, method) for name, values in metrics.items()}
    return {(a, b): williams_test(with_human[a], with_human[b], correlation(metrics[a], metrics[b], method),
                                  len(human))[1]
            for a in metrics for b in metrics if a != b}


def system_pairs(systems: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of distinct systems, in sorted order."""
    ordered = sorted(set(systems))
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:]]


def differences(inputs: Sequence[str], systems: Sequence[str], values: Sequence[float],
                a: str, b: str) -> dict[str, float]:
    """value(input, a) − value(input, b) for every input scored for both systems (one row per input and system)."""
    by_system: dict[str, dict[str, float]] = {a: {}, b: {}}
    for item, system, value in zip(inputs, systems, values):
        if system in by_system:
            by_system[system][item] = value
    return {item: by_system[a][item] - by_system[b][item] for item in by_system[a] if item in by_system[b]}


def pearson_or_nan(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r, NaN where a side is constant (no variance, no correlation)."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    return correlation(x, y, "pearson")


def input_level_pairs(inputs: Sequence[str], systems: Sequence[str], human: Sequence[float],
                      metrics: Mapping[str, Sequence[float]]) -> dict[tuple[str, str], dict]:
    """Toutanova et al. (2016) §4.3.2, after Galley et al. (2015): for each pair of systems (A, B), the Pearson
    correlation over inputs between each metric's difference m(o_A) − m(o_B) and the human one, and the one-sided
    Williams p-value that metric m1 correlates more than m2 (on those differences).

    Rows are (inputs[i], systems[i]) with human[i] and metrics[name][i], one per input and system. Returns
    {(A, B): {"n": inputs, "pearson": {metric: r}, "williams": {(m1, m2): p}}}; NaN where undefined.
    """
    out = {}
    for a, b in system_pairs(systems):
        h = differences(inputs, systems, human, a, b)
        items = list(h)
        diffs = {name: differences(inputs, systems, values, a, b) for name, values in metrics.items()}
        series = {name: [d[item] for item in items] for name, d in diffs.items()}
        human_series = [h[item] for item in items]
        r = {name: pearson_or_nan(s, human_series) for name, s in series.items()}
        williams = {}
        for m1 in metrics:
            for m2 in metrics:
                if m1 != m2:
                    r23 = pearson_or_nan(series[m1], series[m2])
                    undefined = len(items) <= 3 or any(math.isnan(v) for v in (r[m1], r[m2], r23))
                    williams[m1, m2] = math.nan if undefined else williams_test(r[m1], r[m2], r23, len(items))[1]
        out[a, b] = {"n": len(items), "pearson": r, "williams": williams}
    return out


def dominance(pairs: Mapping[tuple[str, str], dict], alpha: float = 0.05,
              share: float = 0.8) -> dict[tuple[str, str], tuple[int, bool]]:
    """{(m1, m2): (k, dominates)}: on k system pairs m1 correlates significantly better than m2 (Williams p < alpha);
    m1 dominates m2 when k is at least `share` of the pairs (Toutanova et al. 2016: 80%)."""
    names = {m for result in pairs.values() for m in result["pearson"]}
    out = {}
    for m1 in names:
        for m2 in names - {m1}:
            k = sum(result["williams"][m1, m2] < alpha for result in pairs.values())  # NaN < alpha is False
            out[m1, m2] = (k, k >= share * len(pairs))
    return out


def system_level(systems: Sequence[str], human: Sequence[float], metrics: Mapping[str, Sequence[float]],
                 method: str = "spearman") -> dict[str, float]:
    """Correlation between each metric's mean per system and the humans' mean per system (corpus level)."""
    names = sorted(set(systems))

    def means(values: Sequence[float]) -> list[float]:
        return [statistics.fmean(v for s, v in zip(systems, values) if s == name) for name in names]

    return {metric: correlation(means(values), means(human), method) for metric, values in metrics.items()}
