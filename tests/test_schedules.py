import pytest

from trainer.schedules import Constant, IncreasingFrom, LinearRamp


def test_constant():
    assert Constant(0.9984)(0) == Constant(0.9984)(10**6) == 0.9984


def test_linear_ramp_hits_endpoints_and_midpoint():
    g = LinearRamp(0.5, 0.9, steps=100)
    assert g(0) == 0.5 and g(50) == pytest.approx(0.7) and g(100) == pytest.approx(0.9) and g(10**6) == pytest.approx(0.9)


def test_increasing_from_097():
    g = IncreasingFrom(start=0.97, decay=0.999, cap=0.9984)
    assert g(0) == pytest.approx(0.97)
    assert g(100) == pytest.approx(1 - 0.03 * 0.999 ** 100)
    assert all(g(t) <= g(t + 1) for t in range(0, 5000, 50))
    assert g(10**6) == 0.9984


@pytest.mark.parametrize("make", [lambda: Constant(1.5), lambda: LinearRamp(0.1, 2, 10),
                                  lambda: LinearRamp(0.1, 0.2, 0), lambda: IncreasingFrom(decay=0)])
def test_bad_values_are_rejected(make):
    with pytest.raises(ValueError, match="gamma"):
        make()
