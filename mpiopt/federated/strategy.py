"""What a federated strategy is: which clients train, what they minimize, how the server combines them.

The shape of Flower's ``Strategy`` (``configure_fit`` / ``aggregate_fit``),
on flat parameter vectors.  Every client k that reports in round t sends
its update ``delta_k = w_k - w_t`` (its local model minus the global one),
its weight ``n_k`` (rows of local data), its number of local steps
``tau_k`` and ``||a_k||_1``, the sum of the coefficients of its local
gradients in delta_k (tau_k for plain SGD; see FedNova); with ``p_k = n_k / sum_j n_j`` over the reporting clients, a
strategy gives

* ``configure_fit(round, n_clients, fraction, seed, sampling="fixed")``: the
  sampled clients, sorted, drawn from ``random_stream(seed, "sample", round)``
  (the same at any rank count): with ``sampling="fixed"``
  m = ``sample_size(K, fraction)`` = ``max(1, round(fraction K))`` of the K
  without replacement, uniformly; with ``sampling="poisson"`` each client k
  independently with probability ``fraction`` (client k is in when the k-th
  of K uniform draws is below it), so a round has fraction K clients on
  average and may have none;
* ``local_epochs(epochs)``, ``local_batch_size(batch_size)``: what the
  clients run (FedSGD: one epoch of one full batch);
* ``local_gradient(grad, params, global_params)``: the gradient of the local
  objective from the model's (FedProx adds its proximal term);
* ``keeps_stragglers``: whether a client that ran fewer epochs is averaged
  (FedProx, FedNova) or left out (FedAvg, as the FedProx paper's baseline);
* ``aggregate_fit(updates)``: the server's direction Delta from the updates
  (client order);
* ``server_update(params, delta)``: the server optimizer (FedAvgM, Hsu et
  al. 2019): ``v = beta v + Delta``, ``w_{t+1} = w_t + eta_s v``; with
  ``server_lr = 1`` and ``server_momentum = 0`` (the default) it is
  ``w_t + Delta`` exactly.  Its state (``v``) is checkpointed.

A strategy declares the options it takes as its ``options`` class attribute
(:class:`~mpiopt.core.options.Options`; a subclass extends its base's with
``Strategy.options + Options(...)``) and keeps each one as an attribute of the
same name; ``option_values()`` reads them back in declaration order (the
result's ``info["strategy_options"]``, the repr, the checkpoint's fingerprint).
``run_federated(..., strategy=name, strategy_options={...})`` checks the values
against the declaration on every rank before building the strategy.
"""
import dataclasses

import numpy as np

from ..core.options import Option, Options
from ..core.random import random_stream
from ..core.settings import is_number
from .settings import CLIENT_SAMPLINGS


@dataclasses.dataclass
class ClientUpdate:
    """One reporting client's contribution to a round."""
    client: int           # the client's id, 0 <= client < K
    delta: np.ndarray     # w_k - w_t, a flat float64 vector of n_params entries
    weight: float         # n_k, the client's rows
    steps: int            # tau_k, local optimizer steps taken
    loss: float           # the global model w_t's loss on the client's data (before local training)
    normalizer: float = None  # ||a_k||_1: delta_k = -lr sum_j a_kj g_j over its steps (FedNova); None: tau_k


class Strategy:
    """Base of every strategy: FedAvg's rules; subclasses change what differs (see the module docstring)."""

    name = "strategy"
    keeps_stragglers = False
    options = Options(
        Option("server_lr", float, 1.0, "eta_s, the server's step on the aggregated update (FedAvgM)",
               low=0, low_open=True),
        Option("server_momentum", float, 0.0, "beta, the server's momentum on the aggregated update (FedAvgM)",
               low=0, high=1, high_open=True))

    def __init__(self, server_lr=1.0, server_momentum=0.0):
        if not (is_number(server_lr) and server_lr > 0):
            raise ValueError(f"{self.name}: server_lr must be a number > 0, got {server_lr!r}")
        if not (is_number(server_momentum) and 0 <= server_momentum < 1):
            raise ValueError(f"{self.name}: server_momentum must be a number in [0, 1), got {server_momentum!r}")
        self.server_lr, self.server_momentum = float(server_lr), float(server_momentum)
        self.velocity = None

    def option_values(self):
        """The declared options' values, in declaration order (in the checkpoint's fingerprint and the result's
        info)."""
        return {name: getattr(self, name, None) for name in type(self).options}

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.option_values().items())})"

    # -- configure_fit ------------------------------------------------------------------
    def sample_size(self, n_clients, fraction):
        """m = max(1, round(fraction K)) (halves rounded up, at most K): how many clients ``configure_fit`` samples."""
        return min(n_clients, max(1, int(round_half_up(fraction * n_clients))))

    def configure_fit(self, round, n_clients, fraction, seed, sampling="fixed"):
        """The sorted ids of the clients sampled in ``round``: ``sample_size`` of them ("fixed"), or each with
        probability ``fraction`` ("poisson")."""
        if sampling == "poisson":
            return np.flatnonzero(random_stream(seed, "sample", round).random(n_clients) < fraction)
        if sampling != "fixed":
            raise ValueError(f"sampling must be one of {', '.join(CLIENT_SAMPLINGS)}, got {sampling!r}")
        count = self.sample_size(n_clients, fraction)
        if count == n_clients:
            return np.arange(n_clients)
        return np.sort(random_stream(seed, "sample", round).choice(n_clients, size=count, replace=False))

    def local_epochs(self, epochs):
        return epochs

    def local_batch_size(self, batch_size):
        return batch_size

    def local_gradient(self, grad, params, global_params):
        """The gradient of the client's local objective at ``params`` (the model's, by default)."""
        return grad

    # -- aggregate_fit --------------------------------------------------------------------
    def aggregate_fit(self, updates):
        """Delta = sum_k p_k delta_k, summed in client order."""
        total = sum(update.weight for update in updates)
        delta = np.zeros_like(updates[0].delta)
        for update in updates:
            delta += (update.weight / total) * update.delta
        return delta

    def server_update(self, params, delta):
        """w_t + eta_s v with v = beta v + Delta (FedAvgM); w_t + Delta by default."""
        if self.server_momentum:
            self.velocity = delta.copy() if self.velocity is None else self.server_momentum * self.velocity + delta
            delta = self.velocity
        return params + self.server_lr * delta if self.server_lr != 1.0 else params + delta

    def state_dict(self):
        return {} if self.velocity is None else {"velocity": self.velocity.copy()}

    def load_state_dict(self, state):
        velocity = state.get("velocity")
        self.velocity = None if velocity is None else np.array(velocity, dtype=np.float64)


def round_half_up(value):
    return np.floor(value + 0.5)
