"""Coordinate-descent sweeps (mpiopt.kernels.cd): the compiled sweep (numba, when installed) is bitwise the
numpy twin, and both give the minimizer a brute force over sign patterns gives (test_admm_proxnewton.py)."""
import numpy as np
import pytest

from mpiopt.kernels import cd, compiled


def problem(seed, size, free):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((3 * size, size))
    H = B.T @ B / size
    if seed % 3 == 0:
        H[:, 0] = H[0, :] = 0.0  # a zero column: its coordinate is skipped
    grad = rng.standard_normal(size) * 2
    x = np.where(rng.random(size) < 0.5, rng.standard_normal(size), 0.0)
    return H, grad, x, 0.7 * (seed % 2), 0.3 * (seed % 4 == 1), size - free


@pytest.mark.skipif(not compiled.AVAILABLE, reason="numba is not installed (the numpy twin runs)")
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("size, free", [(1, 0), (7, 1), (60, 0), (200, 1)])
def test_the_compiled_sweep_is_bitwise_the_numpy_twin(seed, size, free):
    H, grad, x, l1, l2, penalized = problem(seed, size, free)
    diagonal = np.diag(H).copy()
    runs = []
    for sweep in (cd.sweep_numpy, cd.sweep_compiled):
        y, r = x.copy(), grad + H @ np.zeros(size)
        order = np.arange(size, dtype=np.int64)
        for _ in range(5):
            sweep(order, y, r, H, diagonal, float(l1), float(l2), penalized)
            order = np.flatnonzero(y != 0).astype(np.int64)
        runs.append((y, r))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    assert runs[0][0].tobytes() == runs[1][0].tobytes()  # the signs of zeros too


def test_without_numba_the_twin_runs(monkeypatch):
    """``sweep`` dispatches to the twin when the compiled kernels are off, and the result is a minimizer."""
    monkeypatch.setattr(cd, "sweep_compiled", None)  # called, it would fail: the switch must keep it out
    with compiled.use(False):
        _check_minimizer()


def _check_minimizer():
    H, grad, x, _, _, penalized = problem(4, 6, 0)
    y, r = x.copy(), grad.copy()
    order = np.arange(6, dtype=np.int64)
    for _ in range(2000):
        cd.sweep(order, y, r, H, np.diag(H).copy(), 0.0, 0.0, penalized)
    # no penalty: y minimizes grad^T (y - x) + (y - x)^T H (y - x) / 2, so H (y - x) = -grad
    assert np.allclose(H @ (y - x), -grad, atol=1e-8)
