"""Client-level differential privacy for federated averaging (DP-FedAvg).

McMahan, Ramage, Talwar, Zhang, "Learning differentially private recurrent
language models", ICLR 2018, Algorithm 1 with the fixed-size clipping and the
unbiased estimator, as TensorFlow Federated's DP aggregators do:

1. each sampled client clips its model update to L2 norm S: ``clip_update``;
2. the clipped updates are summed (in mpiopt: an all-reduce, possibly masked,
   see ``secure.py``);
3. Gaussian noise N(0, (z S)^2 I) is added to the sum once: ``add_gaussian_noise``;
4. the noisy sum is divided by the *expected* number of clients q K (not the
   number that took part, which would depend on the data of one client).

One round is the Poisson-subsampled Gaussian mechanism with sampling rate q and
noise multiplier z (sensitivity S of the sum under adding or removing one
client).  ``DPAccountant`` composes it over rounds with Google's
``dp-accounting`` library (the ``mpiopt[privacy]`` extra) and reports epsilon
at a given delta:

* ``method="rdp"`` (default): the Renyi DP accountant (Mironov, "Renyi
  differential privacy", CSF 2017) with the RDP of the sampled Gaussian
  (Mironov, Talwar, Zhang, "Renyi differential privacy of the sampled Gaussian
  mechanism", 2019), as TensorFlow Privacy and TFF report it;
* ``method="pld"``: the privacy loss distribution accountant (Koskela et al.
  2020; Doroshenko et al., "Connect the dots", PETS 2022), tighter (about 10 %
  lower epsilon for typical settings) and slower.

Cost: clipping and noise are O(d) per client and per round; one epsilon is a
few milliseconds (RDP) to a few tenths of a second (PLD) on the host.
"""
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
    leaves it.  Divide the result by the expected number of clients q K for
    DP-FedAvg's unbiased estimate of the mean update.
    """
    problem = privacy_problem(clip_norm, noise_multiplier, 0.5)
    if problem:
        raise ValueError(problem)
    aggregate = np.asarray(aggregate, dtype=np.float64)
    noise = random_stream(seed, "dp-noise", round).standard_normal(aggregate.shape)
    return aggregate + noise_multiplier * clip_norm * noise


class DPAccountant:
    """Epsilon at ``delta`` of DP-FedAvg after a number of rounds (client-level, add/remove one client).

    Each round is the Gaussian mechanism with noise multiplier z on a Poisson
    sample of the clients with rate q, composed over the rounds by
    ``dp-accounting``'s RDP (default) or PLD accountant; see the module
    docstring.  ``epsilon(rounds)`` is deterministic and reuses the accountant
    for increasing round counts, so calling it once per round costs one more
    composition each time.
    """

    def __init__(self, noise_multiplier, sampling_rate, delta, method="rdp"):
        problem = privacy_problem(1.0, noise_multiplier, delta, sampling_rate) or (
            None if method in ACCOUNTING_METHODS
            else f"method must be one of {', '.join(ACCOUNTING_METHODS)}, got {method!r}")
        if problem:
            raise ValueError(problem)
        self.noise_multiplier, self.sampling_rate, self.delta, self.method = \
            float(noise_multiplier), float(sampling_rate), float(delta), method
        self._dpa = _import_dp_accounting()
        self._accountant, self._rounds = None, 0

    def __repr__(self):
        return (f"DPAccountant(noise_multiplier={self.noise_multiplier}, sampling_rate={self.sampling_rate}, "
                f"delta={self.delta}, method={self.method!r})")

    def _new_accountant(self):
        if self.method == "rdp":
            return self._dpa.rdp.RdpAccountant()
        return self._dpa.pld.PLDAccountant()

    def epsilon(self, rounds):
        """Epsilon such that ``rounds`` rounds are (epsilon, delta)-DP; inf without noise, 0 for no rounds."""
        if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
            raise ValueError(f"rounds must be an integer >= 0, got {rounds!r}")
        if rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        if self._accountant is None or rounds < self._rounds:
            self._accountant, self._rounds = self._new_accountant(), 0
        dpa = self._dpa
        event = dpa.PoissonSampledDpEvent(self.sampling_rate, dpa.GaussianDpEvent(self.noise_multiplier))
        if rounds > self._rounds:
            self._accountant.compose(event, int(rounds) - self._rounds)
        self._rounds = int(rounds)
        return float(self._accountant.get_epsilon(self.delta))

    def describe(self, rounds):
        """One line for the round log: ``round 10: (epsilon=0.58, delta=1e-05)-DP [rdp, z=1.1, q=0.01]``."""
        return (f"round {rounds}: (epsilon={self.epsilon(rounds):.4g}, delta={self.delta:g})-DP "
                f"[{self.method}, z={self.noise_multiplier:g}, q={self.sampling_rate:g}]")


def _import_dp_accounting():
    try:
        import dp_accounting
        import dp_accounting.pld
        import dp_accounting.rdp
    except ImportError as error:
        raise ImportError("the privacy accountant needs the dp-accounting package: "
                          "pip install 'mpiopt[privacy]' (or pip install dp-accounting)") from error
    return dp_accounting
