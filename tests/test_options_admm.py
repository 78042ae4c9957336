"""The ADMM pieces declare their options once: penalties, losses and x-solvers.

Every built-in piece has its declaration in the registry; the front ends route today's keywords and the
``penalty_options`` / ``loss_options`` dicts through it; a bad value is one line on every rank; a user's
penalty with an option of its own (MCP's gamma) solves by name, checked against coordinate descent.
"""
import numpy as np
import pytest
from mpi4py import MPI

from conftest import error_everywhere
from mpiopt.admm import elastic_net, huber_regression, solve
from mpiopt.admm.path import regularization_path
from mpiopt.admm.penalties import Penalty
from mpiopt.admm.pieces import LAM
from mpiopt.admm.solver import Problem
from mpiopt.core import registry
from mpiopt.core.options import Option, Options

TIGHT = dict(eps_abs=1e-11, eps_rel=1e-11, max_iter=50000)


def regression(seed=0, m=240, n=6):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    x = np.array([3.0, -2.0, 0.3, 0.0, -0.1, 0.0][:n])
    return A, A @ x + 0.5 * rng.standard_normal(m)


def rows(comm, *arrays):
    return [array[comm.rank::comm.size] for array in arrays]


class MCP(Penalty):
    """The minimax concave penalty (Zhang 2010): lam |z| - z^2 / (2 gamma) up to gamma lam, then flat."""

    name = "test_mcp"
    options = Options(LAM, Option("gamma", float, 3.0, "concavity: L1 near 0, flat beyond gamma lam", low=1,
                                  low_open=True))

    def __init__(self, lam, gamma):
        self.lam, self.gamma = float(lam), float(gamma)

    @classmethod
    def lambda_max(cls, gradient, options):
        return float(np.abs(gradient).max())  # MCP's subdifferential at 0 is L1's

    def _values(self, z):
        size = np.abs(z)
        return np.where(size <= self.gamma * self.lam, self.lam * size - size * size / (2 * self.gamma),
                        0.5 * self.gamma * self.lam ** 2)

    def value(self, z):
        return float(self._values(z).sum())

    def prox(self, v, step):
        """Brute force over the three pieces' stationary points: 0, the firm-thresholded value, v."""
        size, sign = np.abs(v), np.sign(v)
        inner = np.clip((size - step * self.lam) / max(1 - step / self.gamma, 1e-300), 0, self.gamma * self.lam)
        candidates = np.stack([np.zeros_like(v), sign * inner, sign * np.maximum(size, self.gamma * self.lam)])
        costs = self._values(candidates) + (candidates - v) ** 2 / (2 * step)
        return np.take_along_axis(candidates, costs.argmin(axis=0)[None], axis=0)[0]

    def settings(self):
        return {"lam": self.lam, "gamma": self.gamma}


@pytest.fixture
def mcp():
    registry.register("penalty", "test_mcp", MCP)
    yield MCP
    registry.unregister("penalty", "test_mcp")


def mcp_by_coordinate_descent(A, b, lam, gamma, sweeps=5000):
    """The minimizer of ||Ax - b||^2 / 2 + MCP(x) by coordinate descent with the closed-form univariate MCP
    step of Breheny and Huang (2011); the objective is convex when every ||a_j||^2 > 1 / gamma."""
    x = np.zeros(A.shape[1])
    norms = (A * A).sum(axis=0)
    residual = b.copy()
    for _ in range(sweeps):
        previous = x.copy()
        for j in range(A.shape[1]):
            z = A[:, j] @ residual + norms[j] * x[j]
            if abs(z) <= lam:
                new = 0.0
            elif abs(z) <= norms[j] * gamma * lam:
                new = np.sign(z) * (abs(z) - lam) / (norms[j] - 1.0 / gamma)
            else:
                new = z / norms[j]
            residual -= A[:, j] * (new - x[j])
            x[j] = new
        if np.abs(x - previous).max() < 1e-14:
            break
    return x


@pytest.mark.parametrize("kind", ["penalty", "loss", "x_solver"])
def test_every_builtin_piece_declares_each_option_with_help_and_a_valid_default(kind):
    for name in registry.names(kind):
        declared = registry.options(kind, name)
        assert isinstance(declared, Options)
        for option in declared.values():
            assert option.help, f"{kind} {name!r}: {option.name} has no help"
            assert not option.required and option.problem(option.default) is None, (kind, name, option)
    assert list(registry.options("penalty", "elastic_net")) == ["lam", "l1_ratio"]
    assert list(registry.options("loss", "huber")) == ["delta", "x_solver", "x_solver_options"]
    assert registry.lookup("penalty", "group_lasso").weighted() and not registry.lookup("penalty", "box").weighted()


def test_the_estimators_weight_only_penalties_read_the_declarations():
    from mpiopt.estimators import LogisticRegressionADMM
    A, b = regression(1)
    with pytest.raises(ValueError, match="penalty must be one of 'l1', 'l2' "):
        LogisticRegressionADMM(penalty="elastic_net").fit(A, b > 0)


def test_the_docs_table_of_options_is_the_declarations():
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "admm.md").read_text()
    section = text.split("## Options of the pieces\n", 1)[1].split("\n## ", 1)[0]
    listed = {tuple(cell.strip().strip("`") for cell in line.split("|")[1:3])
              for line in section.splitlines() if line.startswith("| `")}
    declared = {(f"{kind} {name}", option) for kind in ("penalty", "loss", "x_solver")
                for name in registry.names(kind) for option in registry.options(kind, name)}
    assert listed == declared


def test_keywords_and_option_dicts_give_the_same_iterates():
    A, b = regression(2)
    keyword = solve(A, b, "squared", "elastic_net", 1.0, MPI.COMM_SELF, l1_ratio=0.3, max_iter=200)
    given = solve(A, b, "squared", "elastic_net", 1.0, MPI.COMM_SELF, penalty_options={"l1_ratio": 0.3},
                  max_iter=200)
    front = elastic_net(A, b, 1.0, 0.3, MPI.COMM_SELF, max_iter=200)
    front_given = elastic_net(A, b, 1.0, comm=MPI.COMM_SELF, penalty_options={"l1_ratio": 0.3}, max_iter=200)
    assert np.array_equal(keyword.x, given.x) and np.array_equal(keyword.x, front.x)
    assert np.array_equal(keyword.x, front_given.x)
    weight = solve(A, b, "squared", "l1", None, MPI.COMM_SELF, penalty_options={"lam": 1.0}, max_iter=200)
    assert np.array_equal(weight.x, solve(A, b, "squared", "l1", 1.0, MPI.COMM_SELF, max_iter=200).x)
    huber = solve(A, b, "huber", "l1", 1.0, MPI.COMM_SELF, loss_options={"delta": 0.5, "x_solver": "newton"},
                  max_iter=100)
    assert np.array_equal(huber.x, huber_regression(A, b, 1.0, MPI.COMM_SELF, delta=0.5, x_solver="newton",
                                                    max_iter=100).x)
    assert np.array_equal(huber.x, huber_regression(A, b, 1.0, MPI.COMM_SELF, max_iter=100, loss_options={
        "delta": 0.5, "x_solver": "newton"}).x)
    defaults = {"memory": 20, "max_iter": 10000}  # lbfgs's declared defaults, given: the same iterates
    logistic = solve(A, (b > 0) * 1.0, "logistic", "l2", 1.0, MPI.COMM_SELF, max_iter=60)
    spelled = solve(A, (b > 0) * 1.0, "logistic", "l2", 1.0, MPI.COMM_SELF, max_iter=60,
                    loss_options={"x_solver_options": defaults})
    assert np.array_equal(logistic.x, spelled.x)
    # the command line passes every penalty's and loss's keyword: those the chosen pieces do not take are left out
    plain = solve(A, b, "squared", "l1", 1.0, MPI.COMM_SELF, l1_ratio=0.5, lower=-np.inf, groups=None, delta=1.0,
                  x_solver="lbfgs", max_iter=200)
    assert np.array_equal(plain.x, weight.x)


def test_problem_and_path_take_the_option_dicts():
    A, b = regression(3)
    problem = Problem(A, b, "huber", MPI.COMM_SELF, loss_options={"delta": 0.7})
    assert problem.delta == 0.7 and problem.x_solver == "lbfgs" and problem.loss_options["x_solver_options"] is None
    assert problem.lambda_max("elastic_net", penalty_options={"l1_ratio": 0.5}) == problem.lambda_max("elastic_net")
    with pytest.raises(TypeError, match="unexpected keyword argument 'gamma'"):
        Problem(A, b, "huber", MPI.COMM_SELF, gamma=2.0)
    keyword = regularization_path(A, b, "squared", "elastic_net", MPI.COMM_SELF, n_lams=4, l1_ratio=0.7,
                                  working_set=False, max_iter=300)
    given = regularization_path(A, b, "squared", "elastic_net", MPI.COMM_SELF, n_lams=4, working_set=False,
                                penalty_options={"l1_ratio": 0.7}, max_iter=300)
    assert keyword.lambda_max == given.lambda_max and np.array_equal(keyword.coefs, given.coefs)
    huber = regularization_path(A, b, "huber", "l1", MPI.COMM_SELF, n_lams=3, loss_options={"delta": 0.7},
                                max_iter=100)
    assert huber.results[0].info["loss"] == "huber"


def bad_calls(A, b):
    return [
        (lambda: solve(A, b, "squared", "l1", 1.0, penalty_options={"gamma": 3.0}),
         "penalty 'l1' takes lam; got gamma"),
        (lambda: solve(A, b, "squared", "elastic_net", 1.0, l1_ratio=0.3, penalty_options={"l1_ratio": 0.3}),
         "l1_ratio given twice: as a keyword and in penalty_options; give each option once"),
        (lambda: solve(A, b, "squared", "l1", 1.0, penalty_options={"lam": 1.0}),
         "lam given twice: as the argument and in penalty_options"),
        (lambda: solve(A, b, "squared", "box", None, lower=1.0, upper=0.0),
         "lower must be <= upper, but lower > upper at 6 of the 6 columns"),
        (lambda: solve(A, b, "squared", "box", None, lower=np.zeros(4)),
         "lower must be a number or an array of 6 bounds, got shape (4,)"),
        (lambda: solve(A, b, "huber", "l1", 1.0, loss_options={"delta": -1.0}),
         "loss 'huber': delta must be a float > 0, got -1.0"),
        (lambda: solve(A, b, "huber", "l1", 1.0, loss_options={"scale": 2.0}),
         "loss 'huber' takes delta, x_solver, x_solver_options; got scale"),
        (lambda: solve(A, (b > 0) * 1.0, "logistic", "l1", 1.0, x_solver="newton", loss_options={"x_solver_options":
                                                                                        {"max_iter": 0}}),
         "x_solver 'newton': max_iter must be an int >= 1, got 0"),
        (lambda: solve(A, b, "squared", "test_mcp", 1.0, penalty_options={"gamma": 0.5}),
         "penalty 'test_mcp': gamma must be a float > 1, got 0.5"),
        (lambda: solve(A, b, "squared", "test_mcp", -1.0, gamma=3.0),
         "lam must be a finite number >= 0, got -1.0"),
    ]


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_bad_option_is_one_line_on_every_rank(comm, mcp):
    A, b = rows(comm, *regression(4))
    for index, (call, message) in enumerate(bad_calls(A, b)):
        error = error_everywhere(comm, call, f"call {index} raised nothing ({message})")
        assert message in str(error) and "\n" not in str(error), str(error)
        assert set(error.problems) == set(range(comm.size))


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_users_penalty_with_its_own_option_solves_by_name(comm, mcp):
    A, b = regression(5)
    A_local, b_local = rows(comm, A, b)
    lam, gamma = 40.0, 2.5
    result = solve(A_local, b_local, "squared", "test_mcp", lam, comm, penalty_options={"gamma": gamma}, **TIGHT)
    reference = mcp_by_coordinate_descent(A, b, lam, gamma)
    assert result.status == "converged" and result.info["penalty"] == "test_mcp"
    assert np.abs(result.x - reference).max() < 1e-6
    lasso = solve(A_local, b_local, "squared", "l1", lam, comm, **TIGHT)
    assert (reference == 0).any() and np.abs(lasso.x - result.x).max() > 1e-3  # gamma's concavity shows
    objective = 0.5 * np.sum((A @ reference - b) ** 2) + MCP(lam, gamma).value(reference)
    assert result.objective == pytest.approx(objective, rel=1e-9)
    keyword = solve(A_local, b_local, "squared", "test_mcp", lam, comm, gamma=gamma, **TIGHT)
    assert np.array_equal(keyword.x, result.x)
    default = solve(A_local, b_local, "squared", "test_mcp", lam, comm, **TIGHT)  # gamma's declared default, 3
    assert np.abs(default.x - mcp_by_coordinate_descent(A, b, lam, 3.0)).max() < 1e-6
    ratio = solve(A_local, b_local, "squared", "test_mcp", None, comm, lam_ratio=0.2,
                  penalty_options={"gamma": gamma}, **TIGHT)
    assert ratio.info["lambda_max"] == pytest.approx(np.abs(A.T @ b).max(), rel=1e-12)
    assert np.abs(ratio.x - mcp_by_coordinate_descent(A, b, 0.2 * np.abs(A.T @ b).max(), gamma)).max() < 1e-6
