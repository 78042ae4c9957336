"""Round hooks for ``run_federated``: client-level differential privacy and secure aggregation.

``DPHook`` is DP-FedAvg (McMahan, Ramage, Talwar, Zhang, ICLR 2018,
Algorithm 1 with the fixed-denominator estimator), built on :mod:`.privacy`:

    Delta = (sum_{k reporting} clip(delta_k, S) + N(0, (z S)^2 I)) / D

with a denominator D fixed before the run, never the number that reported,
and an accountant that matches the run's ``client_sampling``:

* ``"fixed"`` (the default): D = m = ``strategy.sample_size(K, fraction)`` =
  max(1, round(fraction K)), the clients sampled each round without
  replacement; ``privacy.DPAccountant(z, delta=delta, sample_size=m,
  population=K)`` under the replace-one relation (sensitivity 2 S; see
  :mod:`.privacy` for why Poisson accounting at q = m / K would understate
  epsilon here): valid, and conservative;
* ``"poisson"`` (recommended with DP): each client in with probability q =
  ``fraction``, D = q K (the paper's qW with unit weights, an unbiased
  estimate of the mean), and ``privacy.DPAccountant(z, q, delta)``, the
  Poisson-subsampled Gaussian under add or remove one client (sensitivity
  S): the accountant's own assumption, tight.  The noise is added every
  round, also when no client was sampled or none reported (Algorithm 1 adds
  N(0, sigma^2 I) to theta whatever C^t is): ``transforms_empty_rounds``.

The runner's FedAvg average weights client k by n_k / sum n_j, whose
sensitivity to one client is not that of a sum, so the accountant's guarantee
would not hold.  The hook therefore replaces it with the paper's estimator:
``transform_update`` clips the update and sets its weight to 1 (the strategy
then averages uniformly, and the round's reported loss is the uniform mean
over the reporting clients), ``transform_aggregate`` turns the uniform mean
of the r reporting clients back into their sum (times r), adds the noise once
and divides by D.  K, and with it D, is public (the run prints it): dividing
the noisy sum by it is post-processing.  This holds for the strategies that
average (fedavg, fedsgd, fedprox); FedNova's step-normalized average is
refused.  Dropped, straggling and failed clients do not change the
accounting: each round counts once, whoever reported (they only leave
clipped updates out of the released sum).

``SecureAggregationHook`` is pairwise additive masking (Bonawitz et al., CCS
2017; :mod:`.secure`): each reporting client uploads
``mask_update(n_k delta_k, k, P, ...)`` on the ring Z / 2^64, where P are the
round's participants (sampled and not dropped or left out before masking);
the ring words travel bit for bit in the runner's float64 rows (a view, no
conversion).  Clients that drop after masking (probability
``drop_after_masking``, drawn from ``random_stream(session_seed,
"drop-after-masking", round, k)``) and clients that fail never arrive; the
server's ``aggregate`` sums the masked words, removes the masks shared with
the missing participants (``unmask_sum``) and divides by sum n_k: FedAvg's
weighted average up to the fixed-point step (each client's rounding is at most
2^-(f+1)).  ``seen`` holds what the aggregator received in the last round.
FedNova is refused (its average is not a weighted sum of the deltas).

Put ``DPHook`` before ``SecureAggregationHook``: the clipped, weight-1 update
is then what is masked, and the noise is added to the unmasked sum (the runner
refuses a hook that transforms updates after the aggregating hook masked them).

Both are registered as kind ``"hook"`` (``"dp"``, ``"secure_aggregation"``)
with their options declared, so ``run_federated(..., hooks=[("dp",
{"clip_norm": 1.0, "noise_multiplier": 1.1})])`` builds them by name, as a
user's own registered hook.

Cost: clipping O(d) per client; masking O(|P| d) per client; the server's
recovery O(|S| |D| d); one accountant composition per round.
"""
import dataclasses

import numpy as np

from ..core.options import Option, Options
from ..core.random import random_stream
from ..core.registry import register
from .declared import DeclaredPiece
from .privacy import DPAccountant, add_gaussian_noise, clip_update
from .secure import FRACTION_BITS, mask_update, ring_sum, to_ring, unmask_sum

class Hook:
    """Base of every round hook: each method is a no-op, so a hook overrides only what it changes.

    On the client's rank: ``transform_update(update, client, round)`` sees each
    update after the strategy's ``end_client`` and returns it (changed, or None:
    the upload never arrives and the client counts as dropped).  On every rank:
    ``setup(strategy, n_clients, settings)`` returns a problem with the run or
    None; ``begin_round(round, participants)`` learns the clients that will
    train; ``aggregate(updates, round)`` replaces the strategy's
    ``aggregate_fit`` when ``replaces_aggregation`` (at most one hook);
    ``transform_aggregate(delta, round, updates)`` changes the direction before
    the server's step, also in rounds without a report when
    ``transforms_empty_rounds``; ``epsilon()`` is the privacy spent so far when
    ``reports_epsilon`` (a column of the round log); ``state_dict()`` /
    ``load_state_dict(state)`` go into the checkpoint (JSON values).
    """

    replaces_aggregation = False
    transforms_empty_rounds = False
    reports_epsilon = False

    def setup(self, strategy, n_clients, settings):
        return None

    def begin_round(self, round, participants):
        pass

    def transform_update(self, update, client, round):
        return update

    def aggregate(self, updates, round):
        raise NotImplementedError(f"{type(self).__name__} sets replaces_aggregation and must implement aggregate")

    def transform_aggregate(self, delta, round, updates):
        return delta

    def epsilon(self):
        return None

    def state_dict(self):
        return None

    def load_state_dict(self, state):
        pass

    def transforms_updates(self):
        """Whether this hook's class overrides ``transform_update`` (the runner's order check)."""
        return type(self).transform_update is not Hook.transform_update


def _strategy_problem(hook, strategy):
    """Why ``hook`` (DP, secure aggregation) cannot run with ``strategy``, from the strategy's flags, or None."""
    if strategy.uploads_state:
        return f"{hook} cannot run with {strategy.name}: it uploads per-client state in the clear"
    if not strategy.averages:
        return f"{hook} needs a strategy that averages the client updates; {strategy.name} does not"
    if strategy.asynchronous:
        return f"{hook} needs a synchronous strategy; {strategy.name} applies updates as they arrive"
    return None


def _uploads_problem(hook, settings, masks):
    """Why ``hook`` cannot run with the run's compressed uploads or Byzantine clients, or None."""
    if getattr(settings, "compressor", "none") != "none":
        return (f"{hook} cannot run with compressed uploads ({settings.compressor}): " +
                ("a masked update cannot be compressed" if masks else
                 "compressing a clipped update changes its norm, so the sensitivity bound would not hold"))
    if masks and getattr(settings, "byzantine", 0):
        return f"{hook} cannot run with Byzantine clients: their forged deltas replace the uploads in the clear"
    return None


@register("hook", "dp")
class DPHook(DeclaredPiece, Hook):
    """Client-level DP-FedAvg: clip each update to ``clip_norm``, noise the sum with ``noise_multiplier``.

    ``delta`` is the accountant's delta, ``seed`` the noise's seed
    (``random_stream(seed, "dp-noise", round)``), ``accountant`` "rdp" or
    "pld" (pld with fixed sampling only when every client is sampled, m = K).
    ``denominator`` is D (m, or q K with Poisson sampling; module docstring),
    ``sampled`` m (None with Poisson sampling),
    ``epsilon()`` epsilon at ``delta`` after the rounds run so far;
    ``clipped_norms`` holds this rank's clients' norms before clipping in the
    last round (client -> norm).
    """

    name = "dp"
    reports_epsilon = True
    options = Options(
        Option("clip_norm", float, help="S: each client's update is clipped to L2 norm S", low=0, low_open=True),
        Option("noise_multiplier", float, help="z: the noise on the sum is N(0, (z S)^2 I); 0 clips only", low=0),
        Option("delta", float, 1e-5, "the accountant's delta", low=0, high=1, low_open=True, high_open=True),
        Option("seed", int, 0, "the noise's seed (random_stream(seed, 'dp-noise', round))", low=0),
        Option("accountant", str, "rdp", "the privacy accountant (pld: with fixed sampling only when m = K)",
               choices=("rdp", "pld")))

    def __init__(self, *args, **options):
        values = self.take_options(args, options, complete=True, keep=False)
        self.clip_norm, self.noise_multiplier, self.delta = values["clip_norm"], values["noise_multiplier"], \
            values["delta"]
        self.seed, self.method = values["seed"], values["accountant"]  # self.accountant: the DPAccountant
        self.accountant, self.denominator, self.rounds, self.clipped_norms = None, None, 0, {}
        self.sampled, self.transforms_empty_rounds = None, False

    def __repr__(self):
        return (f"DPHook(clip_norm={self.clip_norm}, noise_multiplier={self.noise_multiplier}, delta={self.delta}, "
                f"accountant={self.method!r})")

    def setup(self, strategy, n_clients, settings):
        """A problem (the strategy does not average, bad accountant settings) or None."""
        problem = _strategy_problem(self, strategy) or _uploads_problem(self, settings, masks=False)
        if problem:
            return problem
        poisson = settings.client_sampling == "poisson"
        self.sampled = None if poisson else strategy.sample_size(n_clients, settings.fraction)
        self.denominator = settings.fraction * n_clients if poisson else self.sampled
        self.transforms_empty_rounds = poisson
        try:
            self.accountant = (DPAccountant(self.noise_multiplier, settings.fraction, self.delta, self.method)
                               if poisson else
                               DPAccountant(self.noise_multiplier, delta=self.delta, method=self.method,
                                            sample_size=self.sampled, population=n_clients))
        except (ValueError, ImportError) as error:
            return f"{self!r}: {error}"
        return None

    def begin_round(self, round, participants):
        self.rounds, self.clipped_norms = round + 1, {}

    def transform_update(self, update, client, round):
        clipped, norm = clip_update(update.delta, self.clip_norm)
        self.clipped_norms[client] = norm
        return dataclasses.replace(update, delta=clipped, weight=1.0)

    def transform_aggregate(self, delta, round, updates):
        """(the sum of the r clipped updates + N(0, (z S)^2 I)) / D, from their uniform mean ``delta``."""
        if self.sampled is not None and len(updates) > self.sampled:
            raise RuntimeError(f"{len(updates)} clients reported in round {round}, but the accountant counts "
                               f"{self.sampled} sampled")
        noisy_sum = add_gaussian_noise(delta * len(updates), self.clip_norm, self.noise_multiplier, self.seed, round)
        return noisy_sum / self.denominator

    def epsilon(self):
        return self.accountant.epsilon(self.rounds)

    def describe(self):
        return self.accountant.describe(self.rounds)


@register("hook", "secure_aggregation")
class SecureAggregationHook(DeclaredPiece, Hook):
    """Pairwise-masked aggregation of the weighted updates, with recovery of clients that drop after masking.

    ``session_seed`` derives the pair seeds (see :mod:`.secure`: a simulation,
    not a key agreement); ``fraction_bits`` the fixed-point precision;
    ``drop_after_masking`` the probability that a masking client's upload
    never arrives.  ``seen``: client -> the uint64 words the aggregator
    received from it in the last round; ``dropped_after_masking``: the
    clients of the last round whose masks were recovered.
    """

    name = "secure_aggregation"
    replaces_aggregation = True
    options = Options(
        Option("session_seed", int, help="derives the pair seeds (a simulation, not a key agreement)", low=0),
        Option("fraction_bits", int, FRACTION_BITS, "f: the fixed-point precision, a step of 2^-f", low=0, high=62),
        Option("drop_after_masking", float, 0.0, "the probability that a masking client's upload never arrives",
               low=0, high=1, high_open=True))

    def __init__(self, *args, **options):
        self.take_options(args, options, complete=True)
        self.participants, self.seen, self.dropped_after_masking = [], {}, []

    def __repr__(self):
        return (f"SecureAggregationHook(fraction_bits={self.fraction_bits}, "
                f"drop_after_masking={self.drop_after_masking})")

    def setup(self, strategy, n_clients, settings):
        return _strategy_problem(self, strategy) or _uploads_problem(self, settings, masks=True)

    def begin_round(self, round, participants):
        self.participants = [int(k) for k in participants]

    def transform_update(self, update, client, round):
        """The masked n_k delta_k as float64-viewed ring words, or None when the client drops after masking."""
        weighted = update.weight * update.delta
        if len(self.participants) > 1:
            masked = mask_update(weighted, client, self.participants, self.session_seed, round, self.fraction_bits)
        else:  # a lone participant's update is the sum itself: nothing to hide it in
            masked = to_ring(weighted, self.fraction_bits)
        if self.drop_after_masking and random_stream(self.session_seed, "drop-after-masking", round,
                                                     client).random() < self.drop_after_masking:
            return None
        return dataclasses.replace(update, delta=masked.view(np.float64))

    def aggregate(self, updates, round):
        """sum_k n_k delta_k / sum_k n_k over the updates that arrived, from their masked words."""
        self.seen = {update.client: update.delta.view(np.uint64).copy() for update in updates}
        survivors = sorted(self.seen)
        self.dropped_after_masking = sorted(set(self.participants) - set(survivors))
        total = unmask_sum(ring_sum(self.seen[k] for k in survivors), survivors, self.dropped_after_masking,
                           self.session_seed, round, self.fraction_bits)
        return total / sum(update.weight for update in updates)
