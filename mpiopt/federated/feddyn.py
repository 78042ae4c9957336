"""FedDyn: federated learning with a dynamic regularizer, the client's gradient as its state.

Acar, Zhao, Matas, Mattina, Whatmough, Saligrama, "Federated Learning Based
on Dynamic Regularization", ICLR 2021, Algorithm 1.  Client k keeps
g_k = grad L_k(theta_k^{t-1}) (client state, zero before its first round);
in round t a sampled client k minimizes, from theta^{t-1}, by E local epochs
of SGD (the inexact argmin the paper's experiments use),

    L_k(theta) - <g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2        (local_gradient)

and updates g_k <- g_k - alpha (theta_k^t - theta^{t-1}) (the first-order
condition of that minimum; end_client).  The server keeps h (zero at first)
and, over the clients P_t that reported (m: all clients),

    h^t = h^{t-1} - alpha (1/m) sum_{k in P_t} (theta_k^t - theta^{t-1})
    theta^t = (1/|P_t|) sum_{k in P_t} theta_k^t - h^t / alpha

so Delta = (1/|P_t|) sum_k delta_k - h^t / alpha (then the base server step,
exactly theta^t with ``server_lr = 1``).  A client that is not sampled,
drops out or fails keeps g_k.

Cost: O(d) per local step for the two extra terms; the uplink is FedAvg's.
The means are uniform (not n_k-weighted), so ``averages`` is False.
"""
import numpy as np

from ..core.options import Option, Options
from ..core.registry import register
from .aggregate import ordered_sum
from .strategy import Strategy


@register("strategy", "feddyn")
class FedDyn(Strategy):
    name = "feddyn"
    averages = False
    client_state = ("gradient",)
    options = Strategy.options + Options(
        Option("alpha", float, 0.01, "the dynamic regularizer's weight", low=0, low_open=True))

    def __init__(self, **options):
        super().__init__(**options)
        self.h, self.n_clients = None, None

    def setup(self, run):
        self.n_clients, self.h = run.n_clients, np.zeros(run.n_params)  # a resumed run loads h after this
        return None

    def local_gradient(self, grad, params, ctx):
        return grad - ctx.state["gradient"] + self.alpha * (params - ctx.global_params)

    def end_client(self, update, ctx):
        ctx.state["gradient"] = ctx.state["gradient"] - self.alpha * update.delta
        return update

    def aggregate_fit(self, updates):
        total = ordered_sum([update.delta for update in updates])
        self.h = self.h - (self.alpha / self.n_clients) * total
        return total / len(updates) - self.h / self.alpha

    def state_dict(self):
        return {**super().state_dict(), "h": self.h.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        if "h" in state:
            self.h = np.array(state["h"], dtype=np.float64)
