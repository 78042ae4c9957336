"""Federated consensus ADMM: each client keeps its dual variable, the server its consensus z.

Consensus ADMM (Boyd, Parikh, Chu, Peleato, Eckstein 2011, Sec. 7.1) for
min_x sum_k p_k F_k(x), with p_k = n_k / N over all K clients and F_k client
k's mean loss, written with the scaled dual u_k and penalty rho p_k:

    x_k = argmin_x F_k(x) + (rho / 2) ||x - z + u_k||^2          (inexact: E local epochs of SGD from z)
    z   = sum_k p_k (x_k + u_k)
    u_k = u_k + x_k - z

A client keeps x_k and u_k (client state; x_k = z_0, u_k = 0 before its
first round).  Under partial participation only the sampled clients move,
in the incremental form of federated ADMM (as in FedADMM, Gong, Li and
Freris 2022, and Zhou and Li 2023): the server holds z = sum_k p_k s_k, s_k =
x_k + u_k the last contribution of client k, and a sampled client k in round t

1. takes its pending dual step with the z it is sent: u_k <- u_k + x_k - z
   (skipped before its first round; with full participation this is the dual
   step of the previous iteration exactly);
2. takes the inexact x-step above from z (``local_gradient`` adds
   rho (x - z + u_k));
3. uploads delta_k = s_k^new - s_k^old (``end_client``) and keeps x_k, u_k;

and the server steps z <- z + sum_{k reported} p_k delta_k.  With every client
taking part every round (and exact x-steps) this is consensus ADMM, which
reaches the pooled model.  A client that is not sampled, drops out or fails
keeps its state and its old s_k stays in z; a straggler's fewer epochs are a
less exact x-step and are kept (``keeps_stragglers``).  Failures therefore do
not stall the iteration, but z carries the stale contributions of clients
that have been away: how much that costs is measured in docs/federated.md.

Cost: O(d) per local step for the proximal term; the uplink is FedAvg's.
The weights p_k are over all K clients, not over the reporting ones, so
``averages`` is False.
"""
import numpy as np

from ..core.options import Option, Options
from ..core.registry import register
from .aggregate import weighted_sum
from .strategy import Strategy


@register("strategy", "fedadmm")
class FedADMM(Strategy):
    name = "fedadmm"
    averages = False
    keeps_stragglers = True
    client_state = ("x", "u", "started")
    options = Options(Option("rho", float, 1.0, "the ADMM penalty", low=0, low_open=True))

    def __init__(self, **options):
        super().__init__(**options)
        self.shares, self.start = None, None

    def setup(self, run):
        rows = np.asarray(run.client_rows, dtype=np.float64)
        self.shares, self.start = rows / rows.sum(), np.array(run.params, dtype=np.float64)
        return None

    def init_client_state(self, client, n_params):
        return {"x": self.start.copy(), "u": np.zeros(n_params), "started": np.zeros(1)}

    def begin_client(self, ctx):
        state = ctx.state
        state["previous"] = state["x"] + state["u"]
        if state["started"][0]:
            state["u"] = state["u"] + state["x"] - ctx.global_params

    def local_gradient(self, grad, params, ctx):
        return grad + self.rho * (params - ctx.global_params + ctx.state["u"])

    def end_client(self, update, ctx):
        state = ctx.state
        state["x"] = ctx.global_params + update.delta
        previous = state.pop("previous")
        update.delta = state["x"] + state["u"] - previous
        state["started"][0] = 1.0
        return update

    def aggregate_fit(self, updates):
        return weighted_sum([update.delta for update in updates], [self.shares[update.client] for update in updates])

    def server_update(self, params, delta):
        """z <- z + sum_k p_k delta_k: the consensus step itself (no server learning rate or momentum)."""
        return params + delta

    def state_dict(self):
        return {"start": self.start.copy()}

    def load_state_dict(self, state):
        if "start" in state:
            self.start = np.array(state["start"], dtype=np.float64)
