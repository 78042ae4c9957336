"""Client-level differential privacy for federated averaging (DP-FedAvg).

McMahan, Ramage, Talwar, Zhang, "Learning differentially private recurrent
language models", ICLR 2018, Algorithm 1 with the fixed-size clipping and the
fixed-denominator estimator, as TensorFlow Federated's DP aggregators do:

1. each sampled client clips its model update to L2 norm S: ``clip_update``;
2. the clipped updates are summed (in mpiopt: an all-reduce, possibly masked,
   see ``secure.py``);
3. Gaussian noise N(0, (z S)^2 I) is added to the sum once: ``add_gaussian_noise``;
4. the noisy sum is divided by a count that does not depend on which clients
   took part (the number sampled, not the number that reported).

``DPAccountant`` composes the rounds with Google's ``dp-accounting`` library
(the ``mpiopt[privacy]`` extra) and reports epsilon at a given delta, for one
of two samplings, each with its own neighbouring relation:

* **Poisson sampling** with rate q (each client independently; the paper's
  Algorithm 1, ``run_federated``'s ``client_sampling="poisson"`` with q =
  ``fraction``), **add or remove one client**: the sum has sensitivity S, and
  one round is the Poisson-subsampled Gaussian with noise multiplier z;
* **a fixed number m of the K clients, without replacement**
  (``run_federated``'s default ``client_sampling="fixed"``:
  ``max(1, round(fraction K))`` clients a round),
  **replace one client** (K and m are public; the run prints them).
  Replacing client k's clipped update u by u' moves the sum by
  ||u - u'|| <= 2 S, so the Gaussian mechanism on the sum has noise
  multiplier z / 2 relative to its sensitivity, and one round is its
  sampled-without-replacement version at rate m / K.  RDP: Wang, Balle,
  Kasiviswanathan, "Subsampled Renyi differential privacy and analytical
  moments accountant", AISTATS 2019, Theorem 27 (dp-accounting's
  ``SampledWithoutReplacementDpEvent`` under ``REPLACE_ONE``), a proven upper
  bound.  Accounting this sampling as Poisson sampling at q = m / K would
  *not* be valid: a data set whose other clients all send -u makes one round
  the pair (q N(2S) + (1 - q) N(0), N(0)) (noise z S), the Poisson pair of
  sensitivity 2 S, which Poisson accounting at sensitivity S understates
  (tests/test_federated_privacy.py checks epsilon against this lower bound).

Methods: ``method="rdp"`` (default), the Renyi DP accountant (Mironov, "Renyi
differential privacy", CSF 2017) with the RDP of the sampled Gaussian
(Mironov, Talwar, Zhang 2019) or of Theorem 27 above; ``method="pld"``, the
privacy loss distribution accountant (Koskela et al. 2020; Doroshenko et al.,
"Connect the dots", PETS 2022), tighter and slower, for Poisson sampling and
for m = K (the Gaussian mechanism of sensitivity 2 S, exact); dp-accounting's
PLD accountant has no event for sampling without replacement, so it is
refused for m < K.

dp-accounting logs ``_compute_log_a_frac failed to converge`` through absl
when a fractional RDP order of the Poisson-sampled Gaussian does not converge;
it then leaves that order out (epsilon can only grow).  ``DPAccountant``
drops exactly that message while it computes; every other log record passes.

Cost: clipping and noise are O(d) per client and per round; one epsilon is a
few milliseconds (RDP) to a few tenths of a second (PLD) on the host.
"""
import contextlib
import logging
import math
import numbers

import numpy as np

from ..core.comm import first_problem
from ..core.random import random_stream
from ..core.settings import is_number

ACCOUNTING_METHODS = ("rdp", "pld")


def privacy_problem(clip_norm, noise_multiplier, delta, sampling_rate=None):
    """A message naming the first invalid privacy setting, or None.

    ``clip_norm`` S > 0, ``noise_multiplier`` z >= 0 (0: clipping only, no
    privacy), 0 < ``delta`` < 1 and, when given, 0 < ``sampling_rate`` q <= 1.
    """
    return first_problem([
        (is_number(clip_norm) and clip_norm > 0, f"clip_norm must be a finite number > 0, got {clip_norm!r}"),
        (is_number(noise_multiplier) and noise_multiplier >= 0,
         f"noise_multiplier must be a finite number >= 0, got {noise_multiplier!r}"),
        (is_number(delta) and 0 < delta < 1, f"delta must be in (0, 1), got {delta!r}"),
        (sampling_rate is None or (is_number(sampling_rate) and 0 < sampling_rate <= 1),
         f"sampling_rate must be in (0, 1], got {sampling_rate!r}"),
    ])


def clip_update(update, clip_norm):
    """``(clipped, norm)``: ``update`` scaled by min(1, clip_norm / ||update||_2), and its norm before.

    An update within the ball is returned unchanged (a copy); ``clipped`` is a
    new float array, ``update`` is not modified.
    """
    if not (is_number(clip_norm) and clip_norm > 0):
        raise ValueError(f"clip_norm must be a finite number > 0, got {clip_norm!r}")
    update = np.asarray(update, dtype=np.float64)
    norm = float(np.linalg.norm(update))
    if not math.isfinite(norm):
        raise ValueError(f"the update has a non-finite norm ({norm}); it cannot be clipped")
    return update * min(1.0, clip_norm / norm) if norm > 0 else update.copy(), norm


def add_gaussian_noise(aggregate, clip_norm, noise_multiplier, seed, round):
    """``aggregate`` (the sum of clipped updates) plus N(0, (noise_multiplier * clip_norm)^2) per coordinate.

    The noise is drawn from ``random_stream(seed, "dp-noise", round)``, so every
    rank that holds the same all-reduced sum adds the same noise and the noisy
    aggregate stays identical everywhere without another message.  This
    simulation therefore lets every rank know the noise; in a real deployment
    the server alone draws it (from a secret seed) and only the noisy sum
    leaves it.  Divide the result by a count that does not depend on who
    reported: the m clients sampled (``DPHook``), or the expected q K under
    Poisson sampling.
    """
    problem = privacy_problem(clip_norm, noise_multiplier, 0.5)
    if problem:
        raise ValueError(problem)
    aggregate = np.asarray(aggregate, dtype=np.float64)
    noise = random_stream(seed, "dp-noise", round).standard_normal(aggregate.shape)
    return aggregate + noise_multiplier * clip_norm * noise


class DPAccountant:
    """Epsilon at ``delta`` of DP-FedAvg after a number of rounds, for one of two samplings (module docstring).

    ``DPAccountant(z, q, delta)``: Poisson sampling with rate q, add or remove
    one client.  ``DPAccountant(z, delta=delta, sample_size=m,
    population=K)``: m of the K clients without replacement each round,
    replace one client.  z is the noise's standard deviation over the clip
    norm S in both.  Rounds are composed by ``dp-accounting``'s RDP (default)
    or PLD accountant.  ``epsilon(rounds)`` is deterministic; RDP computes one
    round's RDP once (T rounds have T times it), PLD reuses its composition
    for increasing round counts (one more composition per call).
    """

    def __init__(self, noise_multiplier, sampling_rate=None, delta=1e-5, method="rdp", *, sample_size=None,
                 population=None):
        fixed = sample_size is not None or population is not None
        problem = privacy_problem(1.0, noise_multiplier, delta, None if fixed else sampling_rate) or (
            None if method in ACCOUNTING_METHODS
            else f"method must be one of {', '.join(ACCOUNTING_METHODS)}, got {method!r}") or (
            _fixed_sample_problem(sampling_rate, sample_size, population, method) if fixed
            else None if sampling_rate is not None else "give sampling_rate, or sample_size and population")
        if problem:
            raise ValueError(problem)
        self.noise_multiplier, self.delta, self.method = float(noise_multiplier), float(delta), method
        self.sample_size, self.population = (int(sample_size), int(population)) if fixed else (None, None)
        self.sampling_rate = sample_size / population if fixed else float(sampling_rate)
        self.sampling = "without replacement" if fixed else "poisson"
        self.neighbouring = "replace one" if fixed else "add or remove one"
        self._dpa = _import_dp_accounting()
        self._accountant, self._rounds = None, 0

    def __repr__(self):
        sampling = (f"sample_size={self.sample_size}, population={self.population}" if self.sample_size is not None
                    else f"sampling_rate={self.sampling_rate}")
        return (f"DPAccountant(noise_multiplier={self.noise_multiplier}, {sampling}, delta={self.delta}, "
                f"method={self.method!r})")

    def _new_accountant(self):
        relation = self._dpa.NeighboringRelation
        relation = relation.REPLACE_ONE if self.sample_size is not None else relation.ADD_OR_REMOVE_ONE
        if self.method == "rdp":
            return self._dpa.rdp.RdpAccountant(neighboring_relation=relation)
        return self._dpa.pld.PLDAccountant(relation)

    def _round_event(self):
        """One round as a dp-accounting event (module docstring)."""
        dpa, z = self._dpa, self.noise_multiplier
        if self.sample_size is None:
            return dpa.PoissonSampledDpEvent(self.sampling_rate, dpa.GaussianDpEvent(z))
        if self.method == "pld":  # m = K: PLD's REPLACE_ONE Gaussian moves each of u, u' (norm <= S) by S: exact
            return dpa.GaussianDpEvent(z)
        # dp-accounting's RDP takes the noise over the sensitivity under the relation: 2 S under replace-one
        return dpa.SampledWithoutReplacementDpEvent(self.population, self.sample_size, dpa.GaussianDpEvent(z / 2))

    def epsilon(self, rounds):
        """Epsilon such that ``rounds`` rounds are (epsilon, delta)-DP; inf without noise, 0 for no rounds."""
        if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
            raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
        if rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        with _quiet_unconverged_orders():
            if self.method == "rdp":  # T rounds have T times one round's RDP: computed once (seconds for m of K)
                if self._accountant is None:
                    self._accountant = self._new_accountant()
                    self._accountant.compose(self._round_event(), 1)
                rdp = self._dpa.rdp.rdp_privacy_accountant
                return float(rdp.compute_epsilon(self._accountant.orders, rounds * self._accountant.rdp,
                                                 self.delta)[0])
            if self._accountant is None or rounds < self._rounds:
                self._accountant, self._rounds = self._new_accountant(), 0
            if rounds > self._rounds:
                self._accountant.compose(self._round_event(), int(rounds) - self._rounds)
            self._rounds = int(rounds)
            return float(self._accountant.get_epsilon(self.delta))

    def describe(self, rounds):
        """One line for the round log: ``round 10: (epsilon=0.58, delta=1e-05)-DP [rdp, z=1.1, Poisson q=0.01, add or
        remove one]``."""
        sampling = (f"Poisson q={self.sampling_rate:g}, add or remove one" if self.sample_size is None else
                    f"{self.sample_size} of {self.population} clients without replacement, replace one")
        return (f"round {rounds}: (epsilon={self.epsilon(rounds):.4g}, delta={self.delta:g})-DP "
                f"[{self.method}, z={self.noise_multiplier:g}, {sampling}]")


def _fixed_sample_problem(sampling_rate, sample_size, population, method):
    integer = lambda value: isinstance(value, numbers.Integral) and not isinstance(value, bool)  # noqa: E731
    return first_problem([
        (sampling_rate is None, "give sampling_rate (Poisson sampling) or sample_size and population, not both"),
        (integer(population) and population >= 1, f"population must be an integer >= 1, got {population!r}"),
        (lambda: integer(sample_size) and 1 <= sample_size <= population,
         f"sample_size must be an integer in [1, population={population}], got {sample_size!r}"),
        (lambda: method != "pld" or sample_size == population,
         f"the pld accountant cannot account {sample_size} of {population} clients sampled without replacement "
         "(dp-accounting's PLD has no such event); use method='rdp'"),
    ])


UNCONVERGED_ORDER = "_compute_log_a_frac failed to converge"


class _DropUnconvergedOrders:
    """A logging filter that drops dp-accounting's note that it left a fractional RDP order out."""

    def filter(self, record):
        return not str(record.msg).startswith(UNCONVERGED_ORDER)


@contextlib.contextmanager
def _quiet_unconverged_orders():
    """dp-accounting's ``_compute_log_a_frac failed to converge`` warnings (absl) left out; nothing else."""
    log = logging.getLogger("absl")
    drop = _DropUnconvergedOrders()
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


def _import_dp_accounting():
    try:
        import dp_accounting
        import dp_accounting.pld
        import dp_accounting.rdp
    except ImportError as error:
        raise ImportError("the privacy accountant needs the dp-accounting package: "
                          "pip install 'mpiopt[privacy]' (or pip install dp-accounting)") from error
    return dp_accounting
