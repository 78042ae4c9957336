"""FedAdagrad, FedAdam, FedYogi: an adaptive optimizer on the server, fed the averaged client update.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan, "Adaptive
Federated Optimization", ICLR 2021, Algorithm 2.  The clients run FedAvg's
local SGD (the run's ``lr`` is eta_l); the server treats the weighted
average Delta_t = sum_k p_k delta_k as a pseudo-gradient:

    m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t
    v_t = v_{t-1} + Delta_t^2                                   (FedAdagrad)
    v_t = beta_2 v_{t-1} + (1 - beta_2) Delta_t^2               (FedAdam)
    v_t = v_{t-1} - (1 - beta_2) Delta_t^2 sign(v_{t-1} - Delta_t^2)   (FedYogi)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

with m_0 = v_0 = 0, elementwise, as Flower's ``FedAdagrad``, ``FedAdam`` and
``FedYogi`` (flwr 1.x, ``server/strategy/fed*.py``), whose defaults are these
classes' defaults.  Flower's FedAdam scales eta by the bias correction
sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1)) for its 1-based round t
(``bias_correction="flower"``, the default here, so the two are equal); the
paper has none (``"none"``) and Kingma and Ba's Adam uses the exponent t
(``"adam"``).  What t counts is ``step_count``: ``"steps"`` (the default),
the server steps taken, so a round in which no client reported (every
sampled client dropped, or Poisson sampling drew none) takes no step and
leaves t as it was; or ``"rounds"``, Flower's ``server_round``, every round
whether or not it moved the model.  The default is the steps because the
correction divides out the weight that the zero start m_0 = v_0 = 0 still
carries in m and v, (1 - beta^s) after s updates of the moments, and a round
without reports does not update them; counting rounds over-corrects after
empty rounds (smaller steps than Adam's).  The two agree when every round
reports.  FedAdagrad and FedYogi have no correction: no count enters their
step, so an empty round changes nothing, in Flower too.

Because the server step only post-processes the average, these strategies
``average``: DP-FedAvg's noisy clipped mean and secure aggregation's masked
sum stand in for it.  Cost: O(d) per round on the server; m and v are
checkpointed.
"""
import numpy as np

from ..core.options import Option, Options
from ..core.registry import register
from .strategy import Strategy

BIAS_CORRECTIONS = ("flower", "adam", "none")
STEP_COUNTS = ("steps", "rounds")


def server_optimizer_options(eta, beta_1, beta_2, tau):
    """The four options of a server optimizer, declared with one subclass's defaults (Flower's)."""
    return Options(
        Option("eta", float, eta, "the server's learning rate", low=0, low_open=True),
        Option("beta_1", float, beta_1, "the first moment's decay", low=0, high=1, high_open=True),
        Option("beta_2", float, beta_2, "the second moment's decay (FedAdam, FedYogi)", low=0, high=1,
               high_open=True),
        Option("tau", float, tau, "the adaptivity: added to sqrt(v)", low=0, low_open=True))


class FedOpt(Strategy):
    """The shared rule; a subclass names its second moment (``second_moment``) and declares its defaults."""

    name = "fedopt"

    def __init__(self, **options):
        super().__init__(**options)
        self.m = self.v = None
        self.steps = 0

    def setup(self, run):
        self.m = self.v = None  # a resumed run loads them after this
        self.steps = 0
        return None

    def second_moment(self, v, delta):
        raise NotImplementedError

    def step_size(self):
        return self.eta

    def server_update(self, params, delta):
        self.steps += 1
        self.m = (1 - self.beta_1) * delta if self.m is None else self.beta_1 * self.m + (1 - self.beta_1) * delta
        self.v = self.second_moment(np.zeros_like(delta) if self.v is None else self.v, delta)
        return params + self.step_size() * self.m / (np.sqrt(self.v) + self.tau)

    def state_dict(self):
        if self.m is None:
            return {"steps": np.array(self.steps)}
        return {"m": self.m.copy(), "v": self.v.copy(), "steps": np.array(self.steps)}

    def load_state_dict(self, state):
        self.m = None if "m" not in state else np.array(state["m"], dtype=np.float64)
        self.v = None if "v" not in state else np.array(state["v"], dtype=np.float64)
        self.steps = int(state.get("steps", 0))


@register("strategy", "fedadagrad")
class FedAdagrad(FedOpt):
    name = "fedadagrad"
    options = server_optimizer_options(eta=1e-1, beta_1=0.0, beta_2=0.0, tau=1e-9)

    def second_moment(self, v, delta):
        return v + delta * delta


@register("strategy", "fedadam")
class FedAdam(FedOpt):
    name = "fedadam"
    options = server_optimizer_options(eta=1e-1, beta_1=0.9, beta_2=0.99, tau=1e-9) + Options(
        Option("bias_correction", str, "flower", "eta's bias correction: flower (exponent t + 1, Flower's "
               "FedAdam), adam (exponent t) or none (the paper's Algorithm 2)", choices=BIAS_CORRECTIONS),
        Option("step_count", str, "steps", "what t of the bias correction counts: steps (the server steps taken; "
               "a round without reports takes none) or rounds (every round, Flower's server_round)",
               choices=STEP_COUNTS))

    def __init__(self, **options):
        super().__init__(**options)
        self.rounds = 0

    def begin_round(self, round):
        self.rounds = round + 1  # Flower's 1-based server_round

    def second_moment(self, v, delta):
        return self.beta_2 * v + (1 - self.beta_2) * (delta * delta)

    def step_size(self):
        if self.bias_correction == "none":
            return self.eta
        count = self.rounds if self.step_count == "rounds" else self.steps
        t = count + (1.0 if self.bias_correction == "flower" else 0.0)
        return self.eta * np.sqrt(1 - np.power(self.beta_2, t)) / (1 - np.power(self.beta_1, t))


@register("strategy", "fedyogi")
class FedYogi(FedOpt):
    name = "fedyogi"
    options = server_optimizer_options(eta=1e-2, beta_1=0.9, beta_2=0.99, tau=1e-3)

    def second_moment(self, v, delta):
        square = delta * delta
        return v - (1.0 - self.beta_2) * square * np.sign(v - square)
