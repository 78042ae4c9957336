import numpy as np
import pytest

from mpiopt.admm import soft_threshold


def test_soft_threshold_matches_closed_form_exactly():
    v = np.array([-3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.5])
    expected = np.array([-2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.5])
    result = soft_threshold(v, 1.0)
    assert np.array_equal(result, expected)


def test_soft_threshold_with_zero_threshold_is_identity():
    v = np.random.default_rng(0).standard_normal(100)
    assert np.array_equal(soft_threshold(v, 0.0), v)


@pytest.mark.parametrize("kappa", [0.1, 0.7, 3.0])
def test_soft_threshold_is_the_l1_proximal_operator(kappa):
    """S_kappa(v) minimises kappa |z| + (z - v)^2 / 2: compare with a fine grid search."""
    grid = np.linspace(-6, 6, 120001)
    for v in (-4.2, -0.3, 0.0, 0.05, 1.9):
        best = grid[np.argmin(kappa * np.abs(grid) + 0.5 * (grid - v) ** 2)]
        assert abs(soft_threshold(np.array([v]), kappa)[0] - best) <= 1e-4
