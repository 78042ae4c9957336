"""The registered strategies: FedAvg (and FedAvgM), FedSGD, FedProx, FedNova; ``get_strategy(name, **options)``.

FedAvg, McMahan et al., "Communication-Efficient Learning of Deep Networks
from Decentralized Data", AISTATS 2017: each round a fraction C of the K
clients runs E epochs of minibatch SGD (batch B) from w_t, and

    w_{t+1} = w_t + sum_k (n_k / n) (w_k - w_t)        (n: the reporting clients' rows)

FedAvgM (Hsu et al. 2019) is FedAvg with ``server_momentum`` (any strategy
takes ``server_lr`` and ``server_momentum``; see :mod:`.strategy`).

FedSGD (same paper): E = 1 and B = all of a client's rows, so each client
takes one gradient step and w_{t+1} = w_t - lr sum_k (n_k / n) grad F_k(w_t):
with every client taking part, full-batch gradient descent.

FedProx, Li et al., "Federated Optimization in Heterogeneous Networks",
MLSys 2020: client k minimizes F_k(w) + (mu / 2) ||w - w_t||^2 (its gradient
gains mu (w - w_t)); stragglers that ran fewer epochs are still averaged.
With mu = 0 it is FedAvg that keeps stragglers.

FedNova, Wang et al., "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization", NeurIPS 2020: client k's update is
delta_k = -lr sum_j a_kj g_kj over its local steps; each update is normalized
by ||a_k||_1 and re-scaled by the effective step count,

    d_k = (w_k - w_t) / ||a_k||_1,   tau_eff = sum_k p_k ||a_k||_1,   w_{t+1} = w_t + tau_eff sum_k p_k d_k,

so clients that took more steps no longer pull the model toward their own
optimum.  For plain local SGD a_k is tau_k ones (||a_k||_1 = tau_k); with
client momentum rho, a_kj = (1 - rho^(tau_k - j + 1)) / (1 - rho) and
||a_k||_1 = sum_{t=1..tau_k} (1 - rho^t) / (1 - rho) (the paper's Sec. 5 and
its reference code's ``local_normalizing_vec``), which each client reports
(``ClientUpdate.normalizer``, :mod:`.client`).  Dividing by tau_k under
momentum would leave a bias that does not vanish as lr -> 0.  Stragglers
are kept (unequal tau_k is what FedNova is for).

Cost of an aggregation: O(m n_params) for m reporting clients.
"""
from ..core.options import Option, Options
from ..core.registry import lookup, register
from .aggregate import weighted_mean
from .strategy import Strategy


@register("strategy", "fedavg")
class FedAvg(Strategy):
    name = "fedavg"


@register("strategy", "fedsgd")
class FedSGD(Strategy):
    name = "fedsgd"

    def local_epochs(self, epochs):
        return 1

    def local_batch_size(self, batch_size):
        return None  # the whole local data set


@register("strategy", "fedprox")
class FedProx(Strategy):
    name = "fedprox"
    keeps_stragglers = True
    options = Strategy.options + Options(
        Option("mu", float, 0.01, "the proximal weight: a client minimizes F_k(w) + (mu / 2) times the squared "
               "distance to w_t", low=0))

    def local_gradient(self, grad, params, ctx):
        return grad + self.mu * (params - ctx.global_params) if self.mu else grad


@register("strategy", "fednova")
class FedNova(Strategy):
    name = "fednova"
    keeps_stragglers = True
    averages = False  # the step-normalized average is not a weighted sum of the deltas

    def aggregate_fit(self, updates):
        """tau_eff sum_k p_k delta_k / ||a_k||_1 with tau_eff = sum_k p_k ||a_k||_1, in client order."""
        weights = [update.weight for update in updates]
        norms = [update.steps if update.normalizer is None else update.normalizer for update in updates]
        effective_steps = weighted_mean(norms, weights)
        return effective_steps * weighted_mean([update.delta for update in updates], weights, divisors=norms)


def get_strategy(name, **options):
    """The strategy registered as ``name``, built with ``options`` (its declared ``options``: ``mu`` for
    fedprox; ``server_lr``, ``server_momentum`` for all).  The constructor checks them against the
    declaration (TypeError for an undeclared one, ValueError for a refused value); ``run_federated`` checks
    them first, on every rank."""
    return lookup("strategy", name)(**options)
