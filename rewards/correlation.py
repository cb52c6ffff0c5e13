"""Meta-evaluation statistics: how well metrics agree with human judgments, and whether one
metric agrees significantly better than another (Williams' test, as Clark et al. 2019 use it)."""
from __future__ import annotations

import math
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
