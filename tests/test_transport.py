import math

import numpy as np
import ot
import pytest

from rewards.mover import document_bag, without_shared_mass
from rewards.transport import transport_cost


def random_problem(rng, ties: bool):
    """Histograms of small integer counts (many equal weights: degenerate bases) and costs that are
    either continuous or rounded to one decimal (many equal costs, some zero)."""
    n, m = rng.integers(1, 16, 2)
    a, b = rng.integers(1, 4, n).astype(float), rng.integers(1, 4, m).astype(float)
    cost = np.round(rng.random((n, m)) * 3, 1) if ties else rng.random((n, m)) * 5
    return a / a.sum(), b / b.sum(), cost


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("dantzig_pivots", [10_000, 0])  # 0: Bland's rule from the start
def test_matches_pot_exact_emd(ties, dantzig_pivots):
    rng = np.random.default_rng(int(ties))
    for _ in range(400):
        a, b, cost = random_problem(rng, ties)
        assert transport_cost(a, b, cost, dantzig_pivots) == pytest.approx(ot.emd2(a, b, cost), abs=1e-12)


def test_matches_pot_on_euclidean_problems_with_shared_points():
    # Word bags share points (cost 0): the start keeps that mass in place.
    rng = np.random.default_rng(3)
    for _ in range(200):
        points = rng.normal(size=(12, 5))
        x, y = points[rng.choice(12, 8, replace=False)], points[rng.choice(12, 6, replace=False)]
        a, b = rng.integers(1, 5, 8).astype(float), rng.integers(1, 5, 6).astype(float)
        a, b = a / a.sum(), b / b.sum()
        cost = ot.dist(x, y, metric="euclidean")
        assert transport_cost(a, b, cost) == pytest.approx(ot.emd2(a, b, cost), abs=1e-10)


def test_matches_pot_on_large_problems():
    # Over 1,024 cells the entering cell comes from a block search, not the whole matrix.
    rng = np.random.default_rng(5)
    for n, m in [(40, 30), (70, 90), (150, 120)]:
        a, b = rng.integers(1, 5, n).astype(float), rng.integers(1, 5, m).astype(float)
        x, y = rng.normal(size=(n, 8)), rng.normal(size=(m, 8))
        y[:10] = x[:10]
        cost = ot.dist(x, y, metric="euclidean")
        assert transport_cost(a / a.sum(), b / b.sum(), cost) == pytest.approx(
            ot.emd2(a / a.sum(), b / b.sum(), cost), abs=1e-10)


def test_hand_computed_case():
    # (1/2, 1/2) -> (1/4, 3/4) on a line: points 0, 1 -> 0, 1; move 1/4 from 0 to 1.
    cost = np.abs(np.subtract.outer([0.0, 1.0], [0.0, 1.0]))
    assert transport_cost(np.array([0.5, 0.5]), np.array([0.25, 0.75]), cost) == pytest.approx(0.25)
    assert transport_cost(np.array([1.0]), np.array([0.5, 0.5]), np.array([[2.0, 4.0]])) == pytest.approx(3.0)


def test_too_few_pivots_give_nan():
    rng = np.random.default_rng(4)
    a, b, cost = random_problem(rng, ties=False)
    while transport_cost(a, b, cost, 10_000, 0) == transport_cost(a, b, cost):  # a start that is not optimal
        a, b, cost = random_problem(rng, ties=False)
    assert math.isnan(transport_cost(a, b, cost, 10_000, 0))


def test_document_bag_words_then_sentences():
    table = np.array([[0.0, 0.0], [0.0, 4.0], [3.0, 4.0]])
    rows, keep = np.array([0, 1, 5, 0, 2]), np.array([True, True, False, True, True])
    sentence = np.array([0, 0, 0, 1, 1])
    points, weights = document_bag(rows, keep, sentence, table, table[:0], 0.5, 0.5)
    # types 0 (twice), 1, 2; sentences {0, 1} and {0, 2}; |A| = 4
    np.testing.assert_allclose(points, [[0, 0], [0, 4], [3, 4], [0, 2], [1.5, 2]])
    np.testing.assert_allclose(weights, [0.25, 0.125, 0.125, 0.25, 0.25])
    with pytest.raises(ValueError, match="sentence indices"):
        document_bag(rows, keep, sentence[::-1].copy(), table, table[:0], 0.5, 0.5)


def test_mass_at_shared_points_stays_and_the_distance_does_not_change():
    # Euclidean costs are a metric, so mass both sides hold at one point stays there in some optimal
    # plan. Points repeat within a side too (an S+WMS one-word sentence sits on its word).
    rng = np.random.default_rng(6)
    shrunk = 0
    for _ in range(300):
        points = rng.normal(size=(10, 4))
        x, y = points[rng.integers(0, 10, 9)], points[rng.integers(0, 10, 7)]
        a, b = rng.integers(1, 5, 9).astype(float), rng.integers(1, 5, 7).astype(float)
        a, b = a / a.sum(), b / b.sum()
        cost = ot.dist(x, y, metric="euclidean")
        left_a, left_b, left_cost = without_shared_mass(a, b, cost)
        assert left_a.sum() == pytest.approx(left_b.sum(), abs=1e-12)
        assert (left_cost > 0).all()
        expected = ot.emd2(a, b, cost)
        got = transport_cost(left_a, left_b, left_cost) if left_a.size and left_b.size else 0.0
        assert got == pytest.approx(expected, abs=1e-10)
        shrunk += left_a.size + left_b.size < a.size + b.size
    assert shrunk > 250
    same = np.array([0.25, 0.75])
    assert [side.size for side in without_shared_mass(same, same, np.array([[0.0, 1.0], [1.0, 0.0]]))] == [0, 0, 0]
