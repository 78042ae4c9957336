"""Byzantine-robust aggregation: coordinate-wise median, trimmed mean, Krum, multi-Krum, Bulyan.

Each replaces FedAvg's weighted mean of the round's deltas (the local
training is FedAvg's) by a rule that a few arbitrary updates cannot move
far, computed as Flower's ``server/strategy/aggregate.py`` does it (the
same operations in the same order, on the deltas; the rules commute with
adding w_t to every update, so on Flower's parameters they give
w_t + Delta):

* ``median`` (Yin et al., ICML 2018): Delta_j = the median of the delta_kj,
  ``np.median`` over the clients (Flower's ``aggregate_median``).
* ``trimmed_mean`` (Yin et al. 2018), ``beta`` in [0, 0.5): per coordinate,
  drop the floor(beta n) smallest and largest values and average the rest
  (``aggregate_trimmed_avg``, scipy's ``trim_mean``).
* ``krum`` (Blanchard, El Mhamdi, Guerraoui, Stainer, NeurIPS 2017), with
  ``num_malicious`` f: client i's score is the sum of its squared distances to
  its n - f - 2 nearest others (at least 1); Delta is the update of least score.
* ``multikrum`` (same paper): the n-weighted mean (n_k) of the ``to_keep``
  updates of least score (Flower's ``aggregate_krum`` with ``to_keep``).
* ``bulyan`` (El Mhamdi, Guerraoui, Rouault, ICML 2018), needs n >= 4 f + 3:
  theta = n - 2 f times select the Krum winner of the remaining updates and
  set it aside; then, per coordinate, the mean of the beta = theta - 2 f
  selected values closest to their median (``aggregate_bulyan`` with Krum).

Breakdown points (the share of Byzantine updates each tolerates): median and
Krum below 1/2 (Krum needs 2 f + 2 < n), trimmed mean below beta, Bulyan
f <= (n - 3) / 4.

Fewer reports than a rule asks for (``fewest_reports``: the trimmed mean's
floor(beta n) >= 1, Krum's n - f - 2 >= 1, multi-Krum's n >= to_keep,
Bulyan's n >= 4 f + 3).  When no round can have that many (fixed sampling's
m, or all K under Poisson sampling) ``setup`` refuses the run before its
first round.  When dropouts, stragglers or failures leave a round short,
each rule does one thing, named by ``shortfall`` (the round's note and a
warning once per run): the trimmed mean cuts floor(beta n) (none: the mean)
and Krum scores by max(1, n - f - 2) neighbours, both as Flower does;
multi-Krum averages all n reports (Flower 1.42 keeps to_keep - n of them when
n < to_keep < 2 n, its slice wrapping around, which is not a rule); Bulyan
raises a ValueError, as Flower's does, which the runner turns into the same
CollectiveError on every rank.

The arithmetic of each rule is :mod:`.aggregate`'s (``median``,
``trimmed_mean``, ``krum``, ``multi_krum``, ``bulyan``); this module holds
the rules' conditions and what they do when a round is short.

Cost per round, n updates of d: median and trimmed mean O(n d) (a partition
per coordinate); Krum O(n^2 d) for the distances; Bulyan O(n^3 d) (theta
Krum selections).  None of them ``averages``: differential privacy and
secure aggregation refuse them.
"""
import numpy as np

from ..core.options import Option, Options
from ..core.registry import register
from .aggregate import bulyan, krum, median, multi_krum, trimmed_mean
from .strategy import Strategy


class RobustStrategy(Strategy):
    averages = False

    def fewest_reports(self):
        """(n, why): the fewest reports with which the rule is the one it names, and its condition in words."""
        return 1, "n >= 1"

    def setup(self, run):
        """A run in which no round can have the reports the rule needs is refused (one line), else None."""
        need, why = self.fewest_reports()
        most, how = most_reports(self, run)
        if most >= need:
            return None
        return (f"{self.name} needs at least {need} reporting clients a round ({why}), and a round has at most "
                f"{most} ({how}): sample more clients or relax the rule's options")

    def shortfall(self, reports):
        need, why = self.fewest_reports()
        return None if reports >= need else f"{reports} reports, fewer than {need} ({why}): {self.fallback(reports)}"

    def fallback(self, reports):
        """What the rule does with too few reports, in words."""
        raise NotImplementedError

    def aggregate_fit(self, updates):
        return self.rule(np.array([update.delta for update in updates]),
                         np.array([update.weight for update in updates]))

    def rule(self, deltas, weights):
        raise NotImplementedError


def most_reports(strategy, run):
    """(the most reports a round of ``run`` can have, in words): fixed sampling's m, or all K clients."""
    settings, clients = run.settings, run.n_clients
    if settings is None or settings.client_sampling == "poisson":
        return clients, f"all {clients} clients"
    sampled = strategy.sample_size(clients, settings.fraction)
    return sampled, f"{sampled} of the {clients} clients sampled, fraction {settings.fraction:g}"


def smallest_cut_count(beta):
    """The fewest n with floor(beta n) >= 1 (1 for beta = 0: nothing is to be cut)."""
    if beta == 0:
        return 1
    n = max(1, int(np.ceil(1.0 / beta)) - 1)
    while int(beta * n) < 1:  # the float product, as trimmed_mean computes it
        n += 1
    return n


@register("strategy", "median")
class Median(RobustStrategy):
    name = "median"

    def rule(self, deltas, weights):
        return median(deltas)


@register("strategy", "trimmed_mean")
class TrimmedMean(RobustStrategy):
    name = "trimmed_mean"
    options = Strategy.options + Options(
        Option("beta", float, 0.2, "the share cut from each end of every coordinate", low=0, high=0.5,
               high_open=True))

    def fewest_reports(self):
        return smallest_cut_count(self.beta), f"floor(beta n) >= 1 with beta = {self.beta:g}"

    def fallback(self, reports):
        return "trimmed_mean cuts none of them and takes their plain mean, as Flower's FedTrimmedAvg"

    def rule(self, deltas, weights):
        return trimmed_mean(deltas, self.beta)


def _malicious_option():
    return Option("num_malicious", int, 0, "f: the Byzantine updates the rule assumes", low=0)


def _krum_condition(num_malicious):
    return num_malicious + 3, f"n - f - 2 >= 1 with f = {num_malicious}"


def _krum_fallback(name, reports, num_malicious):
    return (f"{name} scores each by its max(1, n - f - 2) = {max(1, reports - num_malicious - 2)} nearest others, "
            "as Flower's Krum")


@register("strategy", "krum")
class Krum(RobustStrategy):
    name = "krum"
    options = Strategy.options + Options(_malicious_option())

    def fewest_reports(self):
        return _krum_condition(self.num_malicious)

    def fallback(self, reports):
        return _krum_fallback(self.name, reports, self.num_malicious)

    def rule(self, deltas, weights):
        return krum(deltas, self.num_malicious)


@register("strategy", "multikrum")
class MultiKrum(RobustStrategy):
    name = "multikrum"
    options = Strategy.options + Options(
        _malicious_option(),
        Option("to_keep", int, 1, "m: the updates of least score averaged (weighted by n_k)", low=1))

    def fewest_reports(self):
        need, why = _krum_condition(self.num_malicious)
        return (need, why) if need >= self.to_keep else (self.to_keep, f"n >= to_keep = {self.to_keep}")

    def fallback(self, reports):
        kept = f"multikrum averages all {reports}" if reports < self.to_keep else None
        scored = (_krum_fallback(self.name, reports, self.num_malicious)
                  if reports < _krum_condition(self.num_malicious)[0] else None)
        return "; ".join(part for part in (scored, kept) if part)

    def rule(self, deltas, weights):
        return multi_krum(deltas, weights, self.num_malicious, self.to_keep)


@register("strategy", "bulyan")
class Bulyan(RobustStrategy):
    name = "bulyan"
    options = Strategy.options + Options(_malicious_option())

    def fewest_reports(self):
        return 4 * self.num_malicious + 3, f"n >= 4 f + 3 with f = {self.num_malicious}"

    def shortfall(self, reports):
        return None  # the rule refuses the round instead (its ValueError), as Flower's Bulyan does

    def rule(self, deltas, weights):
        return bulyan(deltas, self.num_malicious)
