"""FedBuff and FedAsync: asynchronous strategies, run by ``run_federated`` on the parameter server.

FedBuff (Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, AISTATS 2022,
Algorithm 1): the server buffers K = ``buffer_size`` client updates and
steps

    w <- w + eta_g (1/K) sum_k s(tau_k) delta_k

with s(tau) = (1 + tau)^(-a) ("polynomial", a = ``staleness_exponent`` = 0.5
as in the paper) or 1 ("constant"); with constant weights and every update
fresh, a step is FedAvg with equal client weights.

FedAsync (Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", 2019,
Algorithm 1): every update is applied as it arrives (K = 1), mixing the
client's model w_k (trained from the model of step t - tau) into the global one,

    w <- (1 - alpha_t) w + alpha_t w_k,     alpha_t = alpha s(tau)

with s constant, polynomial (1 + tau)^(-a) or hinge (1 if tau <= b, else
1 / (a (tau - b) + 1)); its clients may add the proximal term
(rho / 2) ||w - w_tau||^2 to their local objective (``rho``; 0: plain SGD).

How they run (placement, sessions, checkpoints, what is deterministic):
:mod:`.asynchronous`.  ``run_fedbuff(model, clients, comm, buffer_size=...,
server_steps=...)`` is ``run_federated(model, clients, "fedbuff", comm,
strategy_options={...}, rounds=server_steps)`` under its older name
(``rounds`` is accepted for ``server_steps``).
"""

from ..core.options import Option, Options
from ..core.registry import register
from .strategy import Strategy

STALENESS = ("polynomial", "constant")
FEDASYNC_STALENESS = ("constant", "polynomial", "hinge")


def staleness_weight(staleness, kind="polynomial", exponent=0.5, hinge=None):
    """s(tau) for tau >= 0 server steps: ``(1 + tau)^-exponent`` ("polynomial"), 1 ("constant"), or
    1 for tau <= hinge and ``1 / (exponent (tau - hinge) + 1)`` after ("hinge", FedAsync's)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((1.0 + staleness) ** -exponent)
    if kind == "hinge" and hinge is not None:
        return 1.0 if staleness <= hinge else float(1.0 / (exponent * (staleness - hinge) + 1.0))
    raise ValueError(f"staleness must be one of {', '.join(STALENESS)}, got {kind!r}")


class AsyncStrategy(Strategy):
    """Base of the asynchronous strategies: ``weight(tau)`` and ``contribution(received, params)`` of an
    arriving update, ``buffer_size`` and ``server_lr`` of the step, ``concurrency`` of the workers."""

    asynchronous = True
    averages = False
    sends_model = False   # the worker pushes its model w_k instead of its delta
    buffer_size = 1

    def contribution(self, received, params):
        return received

    def weight(self, staleness):
        return staleness_weight(staleness, self.staleness, self.staleness_exponent)


@register("strategy", "fedbuff")
class FedBuff(AsyncStrategy):
    name = "fedbuff"
    options = Options(
        Option("buffer_size", int, 10, "K: updates the server buffers before a step", low=1),
        Option("server_lr", float, 1.0, "eta_g, the server's step", low=0, low_open=True),
        Option("staleness", str, "polynomial", "s(tau): polynomial (1 + tau)^-a or constant 1", choices=STALENESS),
        Option("staleness_exponent", float, 0.5, "a", low=0),
        Option("concurrency", int, 1, "clients a worker trains from each model it pulls", low=1))


@register("strategy", "fedasync")
class FedAsync(AsyncStrategy):
    name = "fedasync"
    sends_model = True
    options = Options(
        Option("alpha", float, 0.6, "the mixing weight: w <- (1 - alpha_t) w + alpha_t w_k", low=0, high=1,
               low_open=True),
        Option("staleness", str, "polynomial", "s(tau): constant, polynomial (1 + tau)^-a, hinge",
               choices=FEDASYNC_STALENESS),
        Option("staleness_exponent", float, 0.5, "a (polynomial and hinge)", low=0),
        Option("hinge", float, 4.0, "b: the staleness a hinge weight still takes at full weight", low=0),
        Option("rho", float, 0.0, "the clients' proximal weight (rho / 2) ||w - w_tau||^2", low=0),
        Option("concurrency", int, 1, "clients a worker trains from each model it pulls", low=1))

    @property
    def server_lr(self):
        """The server's step on w_k - w is alpha s(tau): alpha is FedAsync's server_lr."""
        return self.alpha

    def weight(self, staleness):
        return staleness_weight(staleness, self.staleness, self.staleness_exponent, self.hinge)

    def contribution(self, received, params):
        """w_k - w: the mixing step's direction (the server's step is alpha s(tau) times it)."""
        return received - params

    def local_gradient(self, grad, params, ctx):
        return grad + self.rho * (params - ctx.global_params) if self.rho else grad


def run_fedbuff(model, clients, comm=None, *, server_steps=None, **settings):
    """FedBuff under its older name: ``run_federated(model, clients, "fedbuff", comm, rounds=server_steps,
    strategy_options={buffer_size, server_lr, staleness, staleness_exponent, concurrency}, **settings)``.

    The keywords that FedBuff declares (``FedBuff.options``) are its ``strategy_options``, their defaults the
    declaration's.

    ``server_steps`` and ``rounds`` both name the server's steps (10 when neither is given); giving both is
    refused, the same CollectiveError on every rank.  Any other keyword is a setting of ``run_federated``.
    """
    from ..core.comm import check_collectively, resolve_comm
    from .runner import run_federated
    comm = resolve_comm(comm)
    rounds = settings.pop("rounds", None)
    check_collectively(comm, None if rounds is None or server_steps is None else
                       f"run_fedbuff: give rounds or server_steps (both are the server's steps), not both: "
                       f"rounds={rounds!r}, server_steps={server_steps!r}")
    options = {name: settings.pop(name) for name in FedBuff.options if name in settings}
    steps = next((value for value in (server_steps, rounds) if value is not None), 10)
    return run_federated(model, clients, "fedbuff", comm, strategy_options=options, rounds=steps, **settings)
