"""Time complexities of SGD with heterogeneous workers, and the step sizes, batch and threshold of the theory.

Worker i needs tau_i seconds for one stochastic gradient (sorted, tau_1 <= ...
<= tau_n).  With K = L Delta / epsilon and S = sigma^2 / epsilon, the time to an
epsilon-stationary point (E ||grad f(x)||^2 <= epsilon), constants dropped, is

    Minibatch SGD      T_MB = tau_n K (1 + S / n)
    Asynchronous SGD   T_A  = (1/n sum_i 1/tau_i)^(-1) K (1 + S / n)       (Koloskova et al. 2022;
                                                                            Mishchenko et al. 2022)
    Rennala SGD,       T_R  = min_m (1/m sum_{i<=m} 1/tau_i)^(-1) K (1 + S / m)   (Tyurin and Richtarik,
    Ringmaster ASGD                                                        NeurIPS 2023; Maranjyan,
                                                                           Tyurin and Richtarik, 2025)

T_R is the lower bound for this time model, so Rennala and Ringmaster are
optimal; the minimizing m (``m_star``) is how many of the fastest workers an
optimal method effectively uses.  For random compute times the predictions use
each worker's mean time.

The defaults of the methods are the theorems' choices, with one constant, 2,
for every step-size bound so that the methods are compared on equal terms:

    Minibatch SGD     gamma = min(1/(2L), eps n / (4 L sigma^2))
    Rennala SGD       B = max(1, ceil(S)),  gamma = min(1/(2L), eps B / (4 L sigma^2))
    Asynchronous SGD  gamma = min(1/(2 n L), eps / (4 L sigma^2));  delay-adaptive: gamma_k = min(gamma, 1/(2 L delta_k))
    Ringmaster ASGD   R = max(1, ceil(S)),  gamma = min(1/(2 R L), eps / (4 L sigma^2))
"""
import math

import numpy as np

from .power import universal_time

TABLE = ("minibatch", "asgd", "rennala", "ringmaster")  # the methods of predicted_times' table
BANNER = ("minibatch", "asgd", "rennala")  # the times a run's banner shows (Ringmaster's is Rennala's)


def _ceil(value):
    """ceil that forgives rounding: ceil(10.000000000000002) is 10."""
    return math.ceil(value * (1 - 1e-12))


def noise_ratio(sigma2, epsilon):
    """S = sigma^2 / epsilon."""
    return sigma2 / epsilon


def default_batch(sigma2, epsilon):
    """Rennala's B (and Ringmaster's R): max(1, ceil(sigma^2 / epsilon))."""
    return max(1, _ceil(noise_ratio(sigma2, epsilon)))


def _noise_bound(epsilon, sigma2, L, batch):
    return math.inf if sigma2 == 0 else epsilon * batch / (4 * L * sigma2)


def default_step_size(method, n_workers, L, sigma2, epsilon, batch=None, threshold=None):
    """The theory's step size for ``method`` (see the module docstring)."""
    if method == "minibatch":
        return min(1 / (2 * L), _noise_bound(epsilon, sigma2, L, n_workers))
    if method == "rennala":
        batch = default_batch(sigma2, epsilon) if batch is None else batch
        return min(1 / (2 * L), _noise_bound(epsilon, sigma2, L, batch))
    if method == "asgd":
        return min(1 / (2 * n_workers * L), _noise_bound(epsilon, sigma2, L, 1))
    if method == "ringmaster":
        threshold = default_batch(sigma2, epsilon) if threshold is None else threshold
        bound = 1 / (2 * L) if math.isinf(threshold) else 1 / (2 * threshold * L)
        return min(bound, _noise_bound(epsilon, sigma2, L, 1))
    raise ValueError(f"no default step size for method {method!r}")


def predicted_times(taus, sigma2, epsilon, L, Delta):
    """The predicted times to epsilon (module docstring), constants dropped.

    Returns a dict: ``minibatch``, ``asgd``, ``rennala``, ``ringmaster`` (=
    ``rennala``, the optimal time), ``m_star`` (the minimizing m), and the
    ratios ``minibatch/rennala`` and ``asgd/rennala``.
    """
    taus = np.sort(np.asarray(taus, dtype=np.float64).reshape(-1))
    if taus.size == 0 or not np.all(np.isfinite(taus)) or taus[0] <= 0:
        raise ValueError("taus must be one or more finite, positive compute times")
    for name, value in (("sigma2", sigma2), ("Delta", Delta)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    for name, value in (("epsilon", epsilon), ("L", L)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    n = taus.size
    K, S = L * Delta / epsilon, noise_ratio(sigma2, epsilon)
    m = np.arange(1, n + 1)
    harmonic = m / np.cumsum(1 / taus)       # (1/m sum_{i<=m} 1/tau_i)^(-1)
    per_m = harmonic * K * (1 + S / m)
    best = int(np.argmin(per_m))
    rennala = float(per_m[best])
    times = {"minibatch": float(taus[-1] * K * (1 + S / n)),
             "asgd": float(harmonic[-1] * K * (1 + S / n)),
             "rennala": rennala, "ringmaster": rennala, "m_star": best + 1}
    times["minibatch/rennala"] = times["minibatch"] / rennala if rennala > 0 else math.nan
    times["asgd/rennala"] = times["asgd"] / rennala if rennala > 0 else math.nan
    return times


def run_table(problem, timing, epsilon):
    """The table of a run (:func:`predicted_times`) for the default job's times (each worker's mean compute
    time, plus its dense round trip when communication costs), and under time-varying power the universal
    model's (:func:`universal_table`) over it."""
    means = timing.plain_model().mean(np.arange(1, timing.n_workers + 1))
    table = predicted_times(means, problem.sigma2, epsilon, problem.L, problem.Delta)
    if timing.time_varying:
        table.update(universal_table(problem, timing, epsilon, table))
    return table


def universal_table(problem, timing, epsilon, fixed):
    """The table under time-varying power (Tyurin, ICLR 2025, the universal computation model), by
    the model's recursion over K = L Delta/eps steps: Rennala's (optimal) time with its batch
    max(1, ceil(S)), and Minibatch's, whose K (1 + S/n) steps each wait for one gradient from every
    worker.  The paper gives ASGD only the lower bound (Rennala's time), no time of its own: its entry is
    None.  The fixed-power values stay under ``<name>_fixed_power``."""
    means = timing.plain_model().mean(np.arange(1, timing.n_workers + 1))
    K, S = problem.L * problem.Delta / epsilon, noise_ratio(problem.sigma2, epsilon)
    rennala = universal_time(timing.traces, means, default_batch(problem.sigma2, epsilon), math.ceil(K))
    minibatch = universal_time(timing.traces, means, 1, math.ceil(K * (1 + S / timing.n_workers)), "minibatch")
    out = {f"{name}_fixed_power": fixed[name] for name in ("minibatch", "asgd", "rennala")}
    out.update(minibatch=minibatch, asgd=None, rennala=rennala, ringmaster=rennala, **{"asgd/rennala": None})
    out["minibatch/rennala"] = minibatch / rennala if 0 < rennala < math.inf else math.nan
    return out
