"""benchmarks/benchopt's pieces that run without benchopt: the spawned mpiopt ranks and the duality gap.

benchopt itself is not installed in CI, so the Solver classes are not imported here; what they call is."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "benchopt"
sys.path.insert(0, str(BENCHMARK))

from benchmark_utils import problems  # noqa: E402

SPAWNED_LASSO = """
import sys
sys.path.insert(0, sys.argv[1])
from benchmark_utils import problems
from benchmark_utils.ranks import Ranks

A, b, _ = problems.design("sparse", sparse_rows=400, sparse_cols=30, sparse_density=0.1, seed=3)
lam = 0.1 * problems.lambda_max("lasso", A, b)
ranks = Ranks.get(2)
ranks.scatter(A, b)
keywords = dict(lam=lam, gap_tol=1e-10, max_iter=100000, blas_threads=1)
ranks.prepare("lasso", keywords)
x = ranks.solve("lasso", keywords).x
value = problems.primal("lasso", A, b, lam)(x)
print("ranks", ranks.comm.size, "relative gap", problems.duality_gap("lasso", A, b, lam, x, value) / value)
ranks.stop()
"""


@pytest.mark.timeout(90)
def test_spawned_ranks_solve_the_lasso_to_a_zero_duality_gap():
    """Two ranks (one spawned) solve a lasso; the gap of the closed form below certifies the optimum."""
    completed = subprocess.run([sys.executable, "-c", SPAWNED_LASSO, str(BENCHMARK)], capture_output=True,
                               text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    words = completed.stdout.split()
    assert words[:2] == ["ranks", "2"], completed.stdout
    assert 0 <= float(words[-1]) < 1e-6, completed.stdout  # at x = 0 it is 0.8


@pytest.mark.parametrize("loss", problems.LOSSES)
def test_duality_gap_is_zero_at_the_optimum_and_positive_elsewhere(loss):
    from sklearn.linear_model import Lasso, LogisticRegression
    A, b, labels = problems.design("sparse", sparse_rows=300, sparse_cols=20, sparse_density=0.2, seed=1)
    y = b if loss == "lasso" else labels
    lam = 0.2 * problems.lambda_max(loss, A, y)
    if loss == "lasso":  # scikit-learn's scalings: P / m with alpha = lam / m, and P / lam with C = 1 / lam
        model = Lasso(alpha=lam / A.shape[0], fit_intercept=False, tol=1e-14, max_iter=100000)
    else:
        model = LogisticRegression(C=1.0 / lam, l1_ratio=1.0, solver="liblinear", fit_intercept=False, tol=1e-12,
                                   max_iter=100000)
    optimum = model.fit(A, y).coef_.ravel()
    P = problems.primal(loss, A, y, lam)
    at_optimum = problems.duality_gap(loss, A, y, lam, optimum, P(optimum))
    assert abs(at_optimum) <= 1e-6 * P(optimum)
    for x in (np.zeros(A.shape[1]), optimum + 0.01):
        assert problems.duality_gap(loss, A, y, lam, x, P(x)) > 1e-3 * P(x)
