"""Problems for SGD with heterogeneous workers: a function, its gradient and an unbiased stochastic gradient.

A problem knows nothing of workers or time.  It provides ``dim``; ``L`` (the
gradient's Lipschitz constant, exact or estimated); ``sigma2`` (the variance
E||g - grad f||^2 of one stochastic gradient, exact or estimated at x0);
``f_low`` (f* or a lower bound); ``x0()``; ``loss(x)``; ``grad(x)``;
``stochastic_grad(x, rng)`` drawing from ``rng`` only; ``worker_grad(worker,
x, rng)``, what worker ``worker`` computes (the same unless the problem is
``heterogeneous``: f = (1/n) sum_i f_i with worker i holding f_i); ``info()``; and
``data()``, the arrays it is built on by name (none for the quadratics), which
``async_sgd`` refuses collectively when any rank's hold NaN or inf
(``data_problem()``, with mpiopt.core.backend's check, as every method does).
``Delta = loss(x0) - f_low`` feeds the predicted times.

=============  ==========================================================================================
``quadratic``  f(x) = 1/2 sum_j lambda_j x_j^2, lambda log-spaced in [mu, L]; g = grad f + N(0, sigma2/d I)
``worst-case`` the tridiagonal quadratic of the lower bounds (Nesterov; Arjevani et al. 2022):
               f(x) = L/4 (1/2 x^T A x - x_1), A = tridiag(-1, 2, -1), x0 = 0; Gaussian noise as above,
               and with ``mask`` p > 0 the lower bounds' own oracle on top: [g]_j = grad_j f(x) (1 +
               1[j > prog(x)] (xi/p - 1)), xi ~ Bernoulli(p) once per gradient, prog(x) = max{j >= 0 :
               x_j != 0} (x_0 = 1): the next coordinate is learnt only when the coin falls on 1
``logistic``   L2-regularized logistic regression on scikit-learn's breast_cancer (569 x 30, standardized);
               g = the gradient on ``batch_size`` rows drawn with replacement
``mlp``        a small ReLU MLP (mpiopt.models) on scikit-learn's digits (1797 x 64, 10 classes), minibatches
``least-squares``  the finite sum f = (1/m) sum_j 1/2 (a_j^T x - b_j)^2 on seeded Gaussian rows a_j ~ N(0, I),
               b = A x_true + N(0, noise); g = the gradient on ``batch_size`` rows drawn with replacement;
               L, L_+- and f* exact (Freya PAGE's finite sum)
``heterogeneous-quadratic``  f_i(x) = 1/2 sum_j lambda_j (x_j - c_ij)^2 for worker i, centres c_i ~
               N(0, spread^2 I) (seeded), f = (1/n) sum_i f_i; Gaussian noise as above (Malenia SGD's setting)
=============  ==========================================================================================

Registered as ``register("asyncsgd-problem", name, factory, options=Options(...))``:
a factory takes ``(seed, comm, **options)``, its options are declared with
it, and every rank builds the same problem.  ``get_problem`` checks the
options against the declaration and fills in the declared defaults (the
classes' own defaults are read from the same declarations); a problem's
checks that a declaration cannot say (mu <= L) stay in the class.
"""
import math

import numpy as np

from ..core.backend import finite_problem
from ..core.options import Option, Options
from ..core.random import random_stream
from ..core.registry import lookup, names, options, register

DIM = Option("dim", int, 100, "dimension d", low=1)
NOISE = Option("noise", float, 1e-3, "sigma^2, the variance of one stochastic gradient", low=0)
SMOOTHNESS = Option("L", float, 1.0, "the gradient's Lipschitz constant", low=0, low_open=True)
QUADRATIC_OPTIONS = Options(DIM, NOISE, SMOOTHNESS, Option("mu", float, 1e-3, "the smallest eigenvalue, at most L",
                                                           low=0, low_open=True))
WORST_CASE_OPTIONS = Options(DIM, NOISE, SMOOTHNESS, Option(
    "mask", float, 0.0, "p of the Bernoulli(p) masking noise beyond prog(x) (0: none)", low=0, high=1))


def _data_options(dataset, batch_size, alpha):
    return Options(Option("dataset", str, dataset, "the data set (registry kind dataset)"),
                   Option("batch_size", int, batch_size, "rows per stochastic gradient, drawn with replacement",
                          low=1),
                   Option("alpha", float, alpha, "L2 regularization weight", low=0))


LOGISTIC_OPTIONS = _data_options("breast_cancer", 1, 1e-3)
MLP_OPTIONS = _data_options("digits", 8, 1e-4) + Options(
    Option("hidden", object, (32,), "hidden layer widths, a sequence of integers >= 1"))


class Problem:
    name = "problem"
    f_low = 0.0
    heterogeneous = False   # True: worker i computes gradients of its own f_i (``worker_grad``)
    n_functions = None      # a heterogeneous problem's number of f_i: the run's workers must be as many
    n_samples = None        # a finite sum f = (1/m) sum_j f_j: m, with ``sample_grad(j, x)`` = grad f_j(x)
    L_pm = None             # a finite sum's L_+-: (1/m) sum_j ||grad f_j(x) - grad f_j(y)||^2 - ||grad f(x) -
    #                         grad f(y)||^2 <= L_+-^2 ||x - y||^2 (exact, or a bound: PAGE's constant)

    def sample_grad(self, j, x):
        """grad f_j(x) of a finite sum's j-th function (0-based)."""
        raise NotImplementedError(f"{self.name} is not a finite sum")

    def x0(self):
        raise NotImplementedError

    def loss(self, x):
        raise NotImplementedError

    def grad(self, x):
        raise NotImplementedError

    def loss_and_grad(self, x):
        """(f(x), grad f(x)), the same bits as ``loss`` and ``grad``; a problem may share their work."""
        return self.loss(x), self.grad(x)

    def stochastic_grad(self, x, rng):
        raise NotImplementedError

    def worker_grad(self, worker, x, rng):
        """What worker ``worker`` (0-based) computes at ``x``: a stochastic gradient of f, or of its own f_i."""
        return self.stochastic_grad(x, rng)

    def gradient_noise(self):
        """``add(g, rng)``, adding the noise to ``g = grad(x)`` in place, when every worker's ``worker_grad(w, x,
        rng)`` is bitwise ``add(grad(x), rng)``, or None: a runtime may then compute grad(x) once for the
        workers at one point, or reuse the evaluation's (the simulator does)."""
        return None

    def data(self):
        """The arrays the problem is built on, by name (features, targets); none by default."""
        return {}

    def data_problem(self):
        """Why this rank's data cannot be used (NaN or inf), or None."""
        return next(filter(None, (finite_problem(name, np.asarray(array)) for name, array in self.data().items())),
                    None)

    @property
    def Delta(self):
        return max(float(self.loss(self.x0()) - self.f_low), 0.0)

    def default_epsilon(self):
        """A target for ||grad f||^2 when the user gives none: 1e-2 of ||grad f(x0)||^2."""
        g = self.grad(self.x0())
        return 1e-2 * float(g @ g)

    def info(self):
        return {"name": self.name, "dim": self.dim, "L": self.L, "sigma2": self.sigma2, "f_low": self.f_low,
                "Delta": self.Delta, **self.options}


class GaussianNoise(Problem):
    """Exact gradients plus N(0, sigma2 / d I): E||g - grad f||^2 = sigma2 exactly."""

    def stochastic_grad(self, x, rng):
        return self._add_noise(self.grad(x), rng)

    def _add_noise(self, g, rng):
        if self.sigma2:
            g += self._noise_scale * rng.standard_normal(self.dim)
        return g

    def gradient_noise(self):
        # a subclass's own noise, or an instance's own gradient (a wrapped stochastic_grad): not known here
        plain = type(self).worker_grad is Problem.worker_grad and type(self).stochastic_grad in (
            GaussianNoise.stochastic_grad, WorstCase.stochastic_grad) and \
            not {"worker_grad", "stochastic_grad"} & vars(self).keys()
        return self._add_noise if plain else None

    def _set_noise(self, sigma2):
        if not (isinstance(sigma2, (int, float)) and math.isfinite(sigma2) and sigma2 >= 0):
            raise ValueError(f"noise (sigma^2) must be a finite number >= 0, got {sigma2!r}")
        self.sigma2 = float(sigma2)
        self._noise_scale = math.sqrt(self.sigma2 / self.dim)


def _positive_integer(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_dim(dim):
    return _positive_integer("dim", dim)


class Quadratic(GaussianNoise):
    name = "quadratic"

    def __init__(self, dim=DIM.default, noise=NOISE.default, L=SMOOTHNESS.default,
                 mu=QUADRATIC_OPTIONS["mu"].default):
        self.dim = _check_dim(dim)
        if not (0 < mu <= L < math.inf):
            raise ValueError(f"need 0 < mu <= L, got mu={mu!r}, L={L!r}")
        self.L, self.mu = float(L), float(mu)
        self.eigenvalues = np.geomspace(mu, L, self.dim)
        self._set_noise(noise)
        self.options = {"noise": self.sigma2, "mu": self.mu}

    def x0(self):
        return np.ones(self.dim)

    def loss(self, x):
        return 0.5 * float(self.eigenvalues @ (x * x))

    def grad(self, x):
        return self.eigenvalues * x


class WorstCase(GaussianNoise):
    """f(x) = L/4 (1/2 x^T A x - x_1): ||A|| <= 4, so grad f is L-Lipschitz; f* = -L d / (8 (d + 1)).

    With ``mask`` p the stochastic gradient is Arjevani et al.'s (2022) zero-chain oracle, as the
    Rennala, Shadowheart and Fragile papers use it: the coordinates beyond prog(x) are multiplied by
    xi/p, xi ~ Bernoulli(p), one coin per gradient (drawn before the Gaussian noise).  Started at 0 the
    iterates have nonzero coordinates 1..prog(x) only, and grad f's only nonzero coordinate beyond them
    is j = prog(x) + 1, where grad_j f = -L/4 x_prog(x) (1 at prog(x) = 0), so the masking's variance
    is (1/p - 1) (L/4)^2 x_prog(x)^2 <= (1/p - 1) (L/4)^2 on the iterates in [0, 1] (the optimum is
    x*_j = 1 - j/(d + 1)): ``sigma2`` adds that bound to the Gaussian part."""

    name = "worst-case"

    def __init__(self, dim=DIM.default, noise=NOISE.default, L=SMOOTHNESS.default,
                 mask=WORST_CASE_OPTIONS["mask"].default):
        self.dim = _check_dim(dim)
        if not 0 < L < math.inf:
            raise ValueError(f"L must be a finite number > 0, got {L!r}")
        if not 0 <= mask <= 1:
            raise ValueError(f"mask (the Bernoulli p) must be in [0, 1], got {mask!r}")
        self.L, self.mask = float(L), float(mask)
        self.f_low = -self.L * self.dim / (8 * (self.dim + 1))
        self._set_noise(noise)
        self.gaussian_sigma2 = self.sigma2
        if self.mask:
            self.sigma2 += (1 / self.mask - 1) * (self.L / 4) ** 2
        self.options = {"noise": self.gaussian_sigma2, "mask": self.mask}

    def stochastic_grad(self, x, rng):
        if not self.mask:
            return super().stochastic_grad(x, rng)
        g = self.grad(x)
        coin = rng.random() < self.mask
        nonzero = np.flatnonzero(x)
        progress = int(nonzero[-1]) + 1 if nonzero.size else 0  # prog(x), 1-based coordinates
        g[progress:] *= (1 / self.mask) if coin else 0.0
        if self.gaussian_sigma2:
            g += self._noise_scale * rng.standard_normal(self.dim)
        return g

    def gradient_noise(self):
        return None if self.mask else super().gradient_noise()  # the mask's coin is drawn before the noise

    def x0(self):
        return np.zeros(self.dim)

    def _A(self, x):
        y = 2 * x
        y[1:] -= x[:-1]
        y[:-1] -= x[1:]
        return y

    def loss(self, x):
        return self.L / 4 * (0.5 * float(x @ self._A(x)) - float(x[0]))

    def grad(self, x):
        g = self._A(x)
        g[0] -= 1
        g *= self.L / 4
        return g

    def loss_and_grad(self, x):
        """One product A x for both (the recorder's evaluation at every step)."""
        if type(self).loss is not WorstCase.loss or type(self).grad is not WorstCase.grad:
            return super().loss_and_grad(x)
        g = self._A(x)
        loss = self.L / 4 * (0.5 * float(x @ g) - float(x[0]))
        g[0] -= 1
        g *= self.L / 4
        return loss, g


class HeterogeneousQuadratic(GaussianNoise):
    """f_i(x) = 1/2 sum_j lambda_j (x_j - c_ij)^2, lambda log-spaced in [mu, L]; f = (1/n) sum_i f_i =
    1/2 sum_j lambda_j ((x_j - cbar_j)^2 + var_j), so f* = 1/2 sum_j lambda_j var_j exactly, and the
    heterogeneity (1/n) sum_i ||grad f_i - grad f||^2 = sum_j lambda_j^2 var_j at every x."""

    name = "heterogeneous-quadratic"
    heterogeneous = True

    def __init__(self, seed=0, dim=DIM.default, noise=NOISE.default, L=SMOOTHNESS.default,
                 mu=QUADRATIC_OPTIONS["mu"].default, workers=8, spread=1.0):
        self.dim = _check_dim(dim)
        if not (0 < mu <= L < math.inf):
            raise ValueError(f"need 0 < mu <= L, got mu={mu!r}, L={L!r}")
        self.L, self.mu, self.n_functions = float(L), float(mu), int(workers)
        self.eigenvalues = np.geomspace(mu, L, self.dim)
        self.centres = spread * random_stream(seed, "asyncsgd-centres").standard_normal((self.n_functions, self.dim))
        self.centre = self.centres.mean(axis=0)
        spread_j = ((self.centres - self.centre) ** 2).mean(axis=0)
        self.f_low = 0.5 * float(self.eigenvalues @ spread_j)
        self.zeta2 = float((self.eigenvalues ** 2) @ spread_j)
        self._set_noise(noise)
        self.options = {"noise": self.sigma2, "mu": self.mu, "workers": self.n_functions, "spread": float(spread),
                        "zeta2": self.zeta2}

    def x0(self):
        return np.zeros(self.dim)

    def loss(self, x):
        return 0.5 * float(self.eigenvalues @ ((x - self.centre) ** 2)) + self.f_low

    def grad(self, x):
        return self.eigenvalues * (x - self.centre)

    def worker_grad(self, worker, x, rng):
        g = self.eigenvalues * (x - self.centres[worker])
        if self.sigma2:
            g += self._noise_scale * rng.standard_normal(self.dim)
        return g


class LeastSquares(Problem):
    """f(x) = (1/m) sum_j 1/2 (a_j^T x - b_j)^2: grad f_j(x) - grad f_j(y) = a_j a_j^T (x - y), so L is the
    largest eigenvalue of H = A^T A / m and L_+-^2 that of (1/m) sum_j ||a_j||^2 a_j a_j^T - H^2, both exact;
    f* from the least-squares solution; sigma2 the exact variance of a ``batch_size``-row gradient at x0 = 0."""

    name = "least-squares"

    def __init__(self, seed=0, rows=1000, dim=20, noise=1.0, batch_size=1):
        self.dim = _check_dim(dim)
        m, self.batch_size = _positive_integer("rows", rows), _positive_integer("batch_size", batch_size)
        rng = random_stream(seed, "asyncsgd-least-squares")
        self.A = rng.standard_normal((m, self.dim))
        self.b = self.A @ rng.standard_normal(self.dim) + math.sqrt(noise) * rng.standard_normal(m)
        H = self.A.T @ self.A / m
        self.L = float(np.linalg.eigvalsh(H)[-1])
        norms = np.sum(self.A * self.A, axis=1)
        self.L_pm = float(math.sqrt(max(np.linalg.eigvalsh((self.A.T * norms) @ self.A / m - H @ H)[-1], 0.0)))
        solution = np.linalg.lstsq(self.A, self.b, rcond=None)[0]
        self.f_low = self.loss(solution)
        rows_at_x0 = self.A * (-self.b)[:, None]  # grad f_j(0) = -b_j a_j
        mean = rows_at_x0.mean(axis=0)
        self.sigma2 = float((np.mean(np.sum(rows_at_x0 ** 2, axis=1)) - mean @ mean) / self.batch_size)
        self.options = {"rows": m, "noise": float(noise), "batch_size": self.batch_size, "L_pm": self.L_pm}

    @property
    def n_samples(self):
        return int(self.b.size)

    def data(self):
        return {"A (rows)": self.A, "b (targets)": self.b}

    def x0(self):
        return np.zeros(self.dim)

    def loss(self, x):
        r = self.A @ x - self.b
        return 0.5 * float(r @ r) / self.b.size

    def grad(self, x):
        return self.A.T @ (self.A @ x - self.b) / self.b.size

    def sample_grad(self, j, x):
        a = self.A[j]
        return a * (float(a @ x) - self.b[j])

    def stochastic_grad(self, x, rng):
        rows = rng.integers(0, self.b.size, self.batch_size)
        A = self.A[rows]
        return A.T @ (A @ x - self.b[rows]) / self.batch_size


class DataProblem(Problem):
    """A model of mpiopt.models on a data set; stochastic gradients on rows drawn with replacement."""

    def __init__(self, model, X, y, batch_size, seed):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.model, self.X, self.y, self.batch_size, self.seed = model, X, y, batch_size, seed
        self.dim = model.n_params
        self._x0 = model.init_params(seed)

    def data(self):
        return {"X (features)": self.X, "y (targets)": self.y}

    def _finite_data(self):
        """Raise ValueError when the data hold NaN or inf (before estimating L, f* or sigma^2 from them)."""
        problem = self.data_problem()
        if problem is not None:
            raise ValueError(problem)

    def x0(self):
        return self._x0.copy()

    def loss(self, x):
        return float(self.model.loss_and_grad(x, self.X, self.y)[0])

    def grad(self, x):
        return self.model.loss_and_grad(x, self.X, self.y)[1]

    def stochastic_grad(self, x, rng):
        rows = rng.integers(0, self.y.size, self.batch_size)
        return self.model.loss_and_grad(x, self.X[rows], self.y[rows])[1]

    @property
    def n_samples(self):
        return int(self.y.size)

    def sample_grad(self, j, x):
        """The gradient on row j alone (the regularization included: the rows' mean is grad f)."""
        return self.model.loss_and_grad(x, self.X[j:j + 1], self.y[j:j + 1])[1]

    def estimate_sigma2(self, draws=64):
        """E||g - grad f||^2 at x0, from ``draws`` stochastic gradients of a stream of its own."""
        x, rng = self.x0(), random_stream(self.seed, "asyncsgd-sigma2")
        full = self.grad(x)
        return float(np.mean([np.sum((self.stochastic_grad(x, rng) - full) ** 2) for _ in range(draws)]))

    def estimate_L(self, iterations=30, h=1e-5):
        """|largest Hessian eigenvalue| at x0 by power iteration on finite-difference Hessian-vector products."""
        x, v = self.x0(), random_stream(self.seed, "asyncsgd-L").standard_normal(self.dim)
        base, value = self.grad(x), 0.0
        for _ in range(iterations):
            v /= np.linalg.norm(v)
            hv = (self.grad(x + h * v) - base) / h
            value = float(np.linalg.norm(hv))
            v = hv
        return value


class Logistic(DataProblem):
    name = "logistic"

    def __init__(self, seed=0, comm=None, dataset=LOGISTIC_OPTIONS["dataset"].default,
                 batch_size=LOGISTIC_OPTIONS["batch_size"].default, alpha=LOGISTIC_OPTIONS["alpha"].default):
        from ..data import load_dataset
        from ..models import get_model
        data = load_dataset(dataset, comm, seed=seed)
        model = get_model("logistic", n_features=data.n_features, alpha=alpha)
        super().__init__(model, data.X_train, data.y_train, batch_size, seed)
        self._finite_data()
        Z = np.column_stack([self.X, np.ones(self.y.size)])
        self.L = float(np.linalg.eigvalsh(Z.T @ Z / (4 * self.y.size))[-1]) + alpha
        # L_+- <= sqrt((1/m) sum_j L_j^2), L_j = ||z_j||^2 / 4 + alpha the smoothness of row j's loss (a bound)
        self.L_pm = float(np.sqrt(np.mean((np.sum(Z * Z, axis=1) / 4 + alpha) ** 2)))
        self.f_low = self._minimum()
        self.sigma2 = self.estimate_sigma2()
        self.options = {"dataset": dataset, "batch_size": batch_size, "alpha": alpha, "rows": int(self.y.size)}

    def x0(self):
        return np.zeros(self.dim)

    def _minimum(self):
        from scipy.optimize import minimize
        solution = minimize(lambda w: self.model.loss_and_grad(w, self.X, self.y), self.x0(), jac=True,
                            method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10000})
        return float(solution.fun)


class ModelProblem(DataProblem):
    """Any model of mpiopt's interface (an mpiopt.models model, a :class:`mpiopt.torch.TorchModel`) on the rows
    (X, y): minibatches of ``batch_size`` rows drawn with replacement; L and sigma^2 estimated at x0 (the model's
    ``init_params(seed)``), since such a model has no known smoothness constant."""

    name = "model"

    def __init__(self, model, X, y, batch_size=8, seed=0):
        super().__init__(model, X, y, batch_size, seed)
        self._finite_data()
        self.L = self.estimate_L()
        self.sigma2 = self.estimate_sigma2()
        self.options = {"model": repr(model), "batch_size": batch_size, "rows": int(self.y.size), "L_estimated": True}


class SmallMLP(ModelProblem):
    name = "mlp"

    def __init__(self, seed=0, comm=None, dataset=MLP_OPTIONS["dataset"].default, hidden=MLP_OPTIONS["hidden"].default,
                 batch_size=MLP_OPTIONS["batch_size"].default, alpha=MLP_OPTIONS["alpha"].default):
        from ..data import load_dataset
        from ..models import get_model
        data = load_dataset(dataset, comm, seed=seed)
        model = get_model("mlp", n_features=data.n_features, n_classes=data.n_classes, hidden=tuple(hidden),
                          alpha=alpha)
        super().__init__(model, data.X_train, data.y_train, batch_size, seed)
        self.options = {"dataset": dataset, "hidden": list(hidden), "batch_size": batch_size, "alpha": alpha,
                        "rows": int(self.y.size), "L_estimated": True}


register("asyncsgd-problem", "quadratic", lambda seed=0, comm=None, **values: Quadratic(**values),
         options=QUADRATIC_OPTIONS)
register("asyncsgd-problem", "worst-case", lambda seed=0, comm=None, **values: WorstCase(**values),
         options=WORST_CASE_OPTIONS)
register("asyncsgd-problem", "heterogeneous-quadratic",
         lambda seed=0, comm=None, **values: HeterogeneousQuadratic(seed=seed, **values),
         options=QUADRATIC_OPTIONS + Options(
             Option("workers", int, 8, "n, the number of functions f_i (one per worker)", low=1),
             Option("spread", float, 1.0, "the standard deviation of the centres c_ij", low=0)))
register("asyncsgd-problem", "least-squares",
         lambda seed=0, comm=None, **values: LeastSquares(seed=seed, **values), options=Options(
             Option("rows", int, 1000, "m, the number of functions f_j (rows)", low=1),
             Option("dim", int, 20, "dimension d", low=1),
             Option("noise", float, 1.0, "the variance of the targets' noise", low=0),
             Option("batch_size", int, 1, "rows per stochastic gradient, drawn with replacement", low=1)))
register("asyncsgd-problem", "logistic", Logistic, options=LOGISTIC_OPTIONS)
register("asyncsgd-problem", "mlp", SmallMLP, options=MLP_OPTIONS)
PROBLEMS = names("asyncsgd-problem")
FINITE_SUMS = ("least-squares", "logistic")  # the built-in problems with n_samples, sample_grad and L_pm


def get_problem(problem, seed=0, comm=None, **values):
    """A Problem from a registered name, built with its declared options ``values`` (checked, the defaults
    filled in; ValueError with the one-line problem), or a Problem given as it is."""
    if isinstance(problem, Problem):
        return problem
    factory = lookup("asyncsgd-problem", problem)
    return factory(seed=seed, comm=comm, **options("asyncsgd-problem", problem).resolve(
        values, f"asyncsgd-problem {problem!r}"))
