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


def sparse_block(seed, rows=40, columns=19):
    import scipy.sparse
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((rows, columns)) * (rng.random((rows, columns)) < 0.3)
    dense[:, 0] = rng.standard_normal(rows)  # a fully dense column, as text's frequent terms
    dense[:, 3] = 0.0                        # and an empty one
    csc = scipy.sparse.csc_matrix(dense)
    csr = csc.tocsr()
    csr.sort_indices()
    return dense, csc, csr, rng.random(rows) + 0.1


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("on", [False, True])
def test_the_block_kernels_are_the_dense_products(seed, on):
    """Column blocks of a CSC matrix: A_B^T w, w += diag(v) A_B delta and the diagonal blocks A_B^T diag(v) A_B,
    against numpy's dense products, compiled (numba) and numpy twins alike."""
    if on and not compiled.AVAILABLE:
        pytest.skip("numba is not installed")
    dense, csc, csr, weights = sparse_block(seed)
    width = 5
    starts = np.arange(0, dense.shape[1], width)
    sizes = np.minimum(width, dense.shape[1] - starts).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes * sizes)[:-1]]).astype(np.int64)
    w = np.random.default_rng(seed + 10).standard_normal(dense.shape[0])
    with compiled.use(on):
        blocks = np.zeros(int((sizes * sizes).sum()))
        cd.block_hessians(csc, csr, weights, width, offsets, sizes, blocks)
        for lo, size, offset in zip(starts, sizes, offsets):
            piece = dense[:, lo:lo + size]
            assert np.allclose(blocks[offset:offset + size * size].reshape(size, size), piece.T @ (weights[:, None] * piece),
                               rtol=1e-13, atol=1e-13)
            out = np.empty(size)
            cd.block_gradient(csc, lo, lo + size, w, out)
            assert np.allclose(out, piece.T @ w, rtol=1e-13, atol=1e-13)
            delta = np.linspace(-1, 1, size)
            delta[0] = 0.0
            expected = w + weights * (piece @ delta)
            cd.block_update(csc, lo, lo + size, delta, weights, w)
            assert np.allclose(w, expected, rtol=1e-13, atol=1e-13)


@pytest.mark.skipif(not compiled.AVAILABLE, reason="numba is not installed (the numpy twin runs)")
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_block_solve_is_bitwise_the_numpy_twin(seed):
    H, grad, x, l1, l2, _ = problem(seed, 9, 0)
    runs = []
    for solve in (cd.block_solve_numpy, cd.block_solve_compiled):
        y, r = x.copy(), grad.copy()
        runs.append((solve(H, np.diag(H).copy(), y, r, float(l1), float(l2), 1e-9, 6), y, r))
    (first_a, epochs_a), y_a, r_a = runs[0]
    (first_b, epochs_b), y_b, r_b = runs[1]
    assert first_a == first_b and epochs_a == epochs_b
    assert y_a.tobytes() == y_b.tobytes() and r_a.tobytes() == r_b.tobytes()
