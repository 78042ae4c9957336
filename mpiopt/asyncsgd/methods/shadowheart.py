"""Shadowheart SGD (Tyurin, Pozzi, Ilin and Richtarik, "Shadowheart SGD: distributed asynchronous SGD with
optimal time complexity under arbitrary computation and communication heterogeneity", NeurIPS 2024).

Worker i needs h_i for one stochastic gradient and tau_i = K u_i to upload
one Random-K compression of a vector (K coordinates at u_i each; omega =
d/K - 1 is the compressor's variance parameter).  With S = sigma^2/eps the
server computes the **equilibrium time**

    t* = min_j max{ max(h_pi_j, tau_pi_j), s*(j) },
    s*(j): the root of  s = [ sum_{i<=j} 1 / (2 tau_pi_i omega + 4 tau_pi_i h_pi_i omega S / s + 2 h_pi_i S) ]^(-1)

(pi sorts the workers by max(h_i, tau_i)), and every round:

    worker i:  b_i = floor(t*/h_i) gradients at x_k, summed:  g_i = sum_{l<=b_i} grad f(x_k; xi_il)
               then m_i = floor(t*/tau_i) independent compressions C_i1(g_i), ..., C_im_i(g_i) uploaded
    server:    w_i = 1 / (b_i omega + omega S + m_i S)     (workers with b_i = 0 or m_i = 0 sit out)
               x_{k+1} = x_k - gamma [ sum_i w_i sum_{j<=m_i} C_ij(g_i) ] / sum_i w_i m_i b_i

The normalisation makes the estimator unbiased (E C_ij(g_i) = b_i grad f).
A round lasts at most 2 t* (computing, then sending), so the time to an
epsilon-stationary point is O(t* L Delta / eps): optimal, up to constants,
among centralized methods that compress (the paper's lower bound has the same
t*).  Default step size gamma = 1/(2L) (the paper's Theorem, the estimator's
variance being at most eps/... by the choice of t*; see :meth:`default_step_size`).

Cost per round: worker i uploads m_i K values (its indices are rebuilt by
the server from the shared seed, :mod:`..jobs`) and downloads d; the server
waits for every participating worker, then all start again at x_{k+1}.

The equilibrium time: s - [sum ...]^(-1) = 0 is equivalent to
sum_i s^2 / (a_i s + c_i) = 1 (a_i = 2 tau_i omega + 2 h_i S, c_i = 4 tau_i
h_i omega S), whose left side increases in s: one root, found by bisection to
the last bit between 1/sum(1/a_i) and min_i (a_i + sqrt(a_i^2 + 4 c_i))/2
(0 when a term's constant part a_i + c_i is 0).  Adding workers lowers s*(j)
while max(h, tau) grows, so max{., s*(j)} is smallest where they cross: a
binary search over j finds the same minimum as trying every j (tested
against both and against brute force over subsets).
"""
import numpy as np

from ...core.options import Option, Options
from ...core.registry import register
from ..base import RoundMethod
from ..jobs import Job


def _root(a, c):
    """The s >= 0 with sum_i s^2 / (a_i s + c_i) = 1 (a_i, c_i >= 0), to the last bit; 0 when some term
    has a_i = c_i = 0."""
    a, c = np.asarray(a, dtype=np.float64), np.asarray(c, dtype=np.float64)
    if np.any((a == 0) & (c == 0)):
        return 0.0
    lo = 1 / np.sum(1 / a) if np.all(a > 0) else 0.0
    hi = float(np.min((a + np.sqrt(a * a + 4 * c)) / 2))
    lo = min(lo, hi)

    def excess(s):
        return float(np.sum(s * s / (a * s + c))) - 1

    if excess(hi) <= 0:
        return hi
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return hi if abs(excess(hi)) < abs(excess(lo)) else lo
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid


def equilibrium_root(h, tau, omega, noise):
    """s*(j) for the workers given (in any order): the root of the equilibrium equation (module docstring)."""
    h, tau = np.asarray(h, dtype=np.float64), np.asarray(tau, dtype=np.float64)
    return _root(2 * tau * omega + 2 * h * noise, 4 * tau * h * omega * noise)


def equilibrium_time(h, tau, omega, noise, exhaustive=False):
    """(t*, j*): the equilibrium time of workers with compute times ``h`` and upload times ``tau`` (one
    compressed vector each), ``omega`` the compressor's and ``noise`` = sigma^2/eps; j* the prefix of the
    workers sorted by max(h, tau) where the minimum is reached.  ``exhaustive``: try every j (else a binary
    search over j, the same minimum)."""
    h, tau = np.asarray(h, dtype=np.float64).reshape(-1), np.asarray(tau, dtype=np.float64).reshape(-1)
    if h.size == 0 or h.shape != tau.shape:
        raise ValueError("equilibrium_time needs one compute and one upload time per worker")
    if not (np.all(np.isfinite(h)) and np.all(h > 0) and np.all(np.isfinite(tau)) and np.all(tau >= 0)):
        raise ValueError("compute times must be finite and > 0, upload times finite and >= 0")
    order = np.argsort(np.maximum(h, tau), kind="stable")
    h, tau = h[order], tau[order]
    slowest = np.maximum(h, tau)
    roots = {}

    def at(j):  # max{max(h, tau) of the j-th, s*(j)} and s*(j), j 1-based
        if j not in roots:
            roots[j] = equilibrium_root(h[:j], tau[:j], omega, noise)
        return max(float(slowest[j - 1]), roots[j]), roots[j]

    n = h.size
    if exhaustive:
        values = [at(j)[0] for j in range(1, n + 1)]
        best = int(np.argmin(values))
        return values[best], best + 1
    lo, hi = 1, n + 1  # the first j with max(h, tau)_j >= s*(j), or n + 1 when none
    while lo < hi:
        mid = (lo + hi) // 2
        if slowest[mid - 1] >= at(mid)[1]:
            hi = mid
        else:
            lo = mid + 1
    candidates = [j for j in (lo - 1, lo) if 1 <= j <= n]
    best = min(candidates, key=lambda j: (at(j)[0], j))
    return at(best)[0], best


def plan(h, tau, omega, noise, t_star):
    """(b, m, w): gradients, messages and weight of every worker at the equilibrium time ``t_star``
    (0, 0, 0 for a worker that sits out)."""
    h, tau = np.asarray(h, dtype=np.float64), np.asarray(tau, dtype=np.float64)
    b = np.floor(t_star / h).astype(np.int64)
    with np.errstate(divide="ignore"):
        m = np.where(tau > 0, np.floor(t_star / np.where(tau > 0, tau, 1)), 0).astype(np.int64)
    taking = (b > 0) & (m > 0)
    b, m = np.where(taking, b, 0), np.where(taking, m, 0)
    denominator = b * omega + omega * noise + m * noise
    with np.errstate(divide="ignore"):
        w = np.where(taking, 1 / np.where(denominator > 0, denominator, 1), 0.0)
    if np.any(taking & (denominator == 0)):  # no noise and no compression: every taking worker alike
        w = taking.astype(np.float64)
    return b, m, w


@register("asyncsgd-method", "shadowheart")
class ShadowheartSGD(RoundMethod):
    """Rounds at the equilibrium time: worker i sends m_i Random-K compressions of its sum of b_i gradients."""

    name = "shadowheart"
    planned = ("jobs", "h", "tau", "b", "m", "weights")
    options = Options(
        Option("coordinates", int, None, "K, the coordinates of each Random-K message (None: max(1, d // 100))",
               low=1))

    @classmethod
    def unavailable(cls, settings, problem=None):
        return None if settings.upload is not None else "it needs upload times (--upload)"

    @classmethod
    def timing_options(cls, values, problem, epsilon, timing):
        if timing is None or not np.any(timing.upload_per_coordinate()):
            raise ValueError(f"{cls.owner()} needs upload times per coordinate (upload=...): it sends "
                             "compressed vectors because sending costs")
        k = values["coordinates"] or max(1, problem.dim // 100)
        if k > problem.dim:
            raise ValueError(f"{cls.owner()}: coordinates K = {k} is more than d = {problem.dim}")
        h = timing.compute_means()
        tau = k * timing.upload_per_coordinate()
        omega, noise = problem.dim / k - 1, problem.sigma2 / epsilon
        t_star, _ = equilibrium_time(h, tau, omega, noise)
        return {"coordinates": k, "h": h, "tau": tau, "omega": omega, "noise": noise, "t_star": t_star}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return 1 / (2 * problem.L)

    def __init__(self, x0, n_workers, step_size, coordinates, h, tau, omega, noise, t_star):
        super().__init__(x0, n_workers, step_size)
        self.coordinates, self.omega, self.noise, self.t_star = int(coordinates), float(omega), float(noise), \
            float(t_star)
        self.h, self.tau = np.asarray(h, dtype=np.float64), np.asarray(tau, dtype=np.float64)
        self.b, self.m, self.weights = plan(self.h, self.tau, self.omega, self.noise, self.t_star)
        self.normaliser = float(np.sum(self.weights * self.m * self.b))
        self.jobs = [Job(int(b), int(m), self.coordinates) if b else None for b, m in zip(self.b, self.m)]
        self.participants = int(np.count_nonzero(self.b))

    def parameters(self):
        return {"step_size": self.step_size, "coordinates": self.coordinates, "omega": self.omega,
                "t_star": self.t_star, "participants": self.participants}

    def predicted(self, problem, timing, epsilon):
        return {"shadowheart": self.t_star * problem.L * problem.Delta / epsilon, "t_star": self.t_star}

    def arrive(self, worker, grad, k_at):
        self.accepted[worker] += int(self.b[worker])
        if not self.keep(worker, grad, k_at):
            return ()
        self._step(self.round_total() / self.normaliser, self.step_size)
        return self.round_plan()


def shadowheart_time(h, tau, omega, noise, L, Delta, epsilon):
    """The predicted time t* L Delta / eps (constants dropped) and t*."""
    t_star, _ = equilibrium_time(h, tau, omega, noise)
    return t_star * L * Delta / epsilon, t_star


__all__ = ["ShadowheartSGD", "equilibrium_root", "equilibrium_time", "plan", "shadowheart_time"]
