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
Heterogeneous Federated Optimization", NeurIPS 2020 (plain local SGD, for
which the paper's a_k is a vector of tau_k ones): each update is normalized
by its step count and re-scaled by the effective step count,

    d_k = (w_k - w_t) / tau_k,   tau_eff = sum_k p_k tau_k,   w_{t+1} = w_t + tau_eff sum_k p_k d_k,

so clients that took more steps no longer pull the model toward their own
optimum.  Stragglers are kept (unequal tau_k is what FedNova is for).

Cost of an aggregation: O(m n_params) for m reporting clients.
"""
import numpy as np

from ..core.registry import lookup, register
from ..core.settings import is_number
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

    def __init__(self, mu=0.01, server_lr=1.0, server_momentum=0.0):
        if not (is_number(mu) and mu >= 0):
            raise ValueError(f"fedprox: mu must be a number >= 0, got {mu!r}")
        super().__init__(server_lr, server_momentum)
        self.mu = float(mu)

    def options(self):
        return dict(super().options(), mu=self.mu)

    def local_gradient(self, grad, params, global_params):
        return grad + self.mu * (params - global_params) if self.mu else grad


@register("strategy", "fednova")
class FedNova(Strategy):
    name = "fednova"
    keeps_stragglers = True

    def aggregate_fit(self, updates):
        total = sum(update.weight for update in updates)
        effective_steps = sum((update.weight / total) * update.steps for update in updates)
        direction = np.zeros_like(updates[0].delta)
        for update in updates:
            direction += (update.weight / total / update.steps) * update.delta
        return effective_steps * direction


def get_strategy(name, **options):
    """The strategy registered as ``name``, built with ``options`` (``mu`` for fedprox; ``server_lr``,
    ``server_momentum`` for all)."""
    return lookup("strategy", name)(**options)
