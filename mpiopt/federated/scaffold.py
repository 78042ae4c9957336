"""SCAFFOLD: stochastic controlled averaging, with control variates as client state.

Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", ICML 2020, Algorithm 1 with
option II.  The server keeps x and its control variate c; client i keeps
c_i (client state, zero before its first round).  Round t, for each sampled
client i of S (sent x and c: ``configure_client``):

    y_i <- x;  K times:  y_i <- y_i - eta_l (g_i(y_i) - c_i + c)          (local_gradient)
    c_i+ = c_i - c + (x - y_i) / (K eta_l)                                 (option II, end_client)
    uploads  Delta y_i = y_i - x  and  Delta c_i = c_i+ - c_i;  keeps c_i <- c_i+

and the server, over the clients that reported (uniform means, as the paper):

    x <- x + eta_g (1/|S|) sum_i Delta y_i,    c <- c + (1/N) sum_i Delta c_i   (N: all clients)

eta_l is the run's ``lr``, eta_g the ``server_lr``.  With client momentum rho
the local steps' coefficients sum to ||a_i||_1 instead of K (FedNova's
normalizer), and K eta_l above is eta_l ||a_i||_1: the mean local gradient
again; without momentum it is the paper's K eta_l.  A client that is not
sampled, drops out or fails keeps c_i, and the server adds nothing for it.

Cost: the downlink doubles (x and c), the uplink too (Delta y and Delta c);
O(d) per local step for the correction.  ``uploads_state``: Delta c_i is
per-client state in the clear, so DP and secure aggregation refuse it.
"""
import numpy as np

from ..core.registry import register
from .aggregate import ordered_sum
from .strategy import Instructions, Strategy


@register("strategy", "scaffold")
class Scaffold(Strategy):
    name = "scaffold"
    uploads_state = True
    averages = False  # uniform means over S, not n_k-weighted
    client_state = ("control",)

    def __init__(self, **options):
        super().__init__(**options)
        self.control, self.n_clients = None, None

    def setup(self, run):
        self.n_clients, self.control = run.n_clients, np.zeros(run.n_params)  # a resumed run loads c after this
        return None

    def uploads(self, n_params):
        return (("control_delta", n_params),)

    def configure_client(self, round, client):
        return Instructions(arrays={"control": self.control})

    def local_gradient(self, grad, params, ctx):
        return grad - ctx.state["control"] + ctx.instructions.arrays["control"]

    def end_client(self, update, ctx):
        steps = update.steps if update.normalizer is None else update.normalizer
        own = ctx.state["control"]
        new = own - ctx.instructions.arrays["control"] - update.delta / (steps * ctx.lr)
        update.arrays["control_delta"] = new - own
        ctx.state["control"] = new
        return update

    def aggregate_fit(self, updates):
        """(1/|S|) sum_i Delta y_i; c moves by (1/N) sum_i Delta c_i (client order)."""
        direction = ordered_sum([update.delta for update in updates])
        control = ordered_sum([update.arrays["control_delta"] for update in updates])
        self.control = self.control + control / self.n_clients
        return direction / len(updates)

    def state_dict(self):
        return {**super().state_dict(), "control": self.control.copy()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        if "control" in state:
            self.control = np.array(state["control"], dtype=np.float64)
