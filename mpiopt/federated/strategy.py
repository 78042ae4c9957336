"""What a federated strategy is: the server's rules and the client's, and the channel between them.

The shape of Flower's ``Strategy`` (``configure_fit`` / ``aggregate_fit``)
with its ``FitIns`` / ``FitRes`` channel, on flat parameter vectors and MPI.
Each round t, on every rank alike (the server's state is replicated, so the
same decisions are taken everywhere without a message):

* ``begin_round(round)``: every round, also one in which no client reports
  (Flower's ``server_round``; FedAdam's ``step_count="rounds"`` counts them);
* ``configure_fit(round, n_clients, fraction, seed, sampling="fixed")``: the
  sampled clients, sorted, drawn from ``random_stream(seed, "sample", round)``
  (the same at any rank count): with ``sampling="fixed"``
  m = ``sample_size(K, fraction)`` = ``max(1, round(fraction K))`` of the K
  without replacement, uniformly; with ``sampling="poisson"`` each client k
  independently with probability ``fraction`` (client k is in when the k-th
  of K uniform draws is below it), so a round has fraction K clients on
  average and may have none;
* ``configure_client(round, client) -> Instructions``: what a sampled client
  is sent besides the model (Flower's ``FitIns.config``): config values and
  named arrays (SCAFFOLD's server control variate), counted in the round's
  downlink bytes;

then, on the rank that owns client k (:class:`ClientRound` is what its code
sees: the instructions and its **client state**, the arrays it keeps between
the rounds it takes part in, declared by ``client_state`` and made by
``init_client_state``):

* ``begin_client(ctx)``: before local training (federated ADMM's dual step);
* ``local_epochs(epochs)``, ``local_batch_size(batch_size)``: what the
  client runs (FedSGD: one epoch of one full batch);
* ``local_gradient(grad, params, ctx)``: the gradient of the local objective
  from the model's (FedProx's proximal term, SCAFFOLD's correction);
* ``end_client(update, ctx) -> update``: the client's upload (Flower's
  ``FitRes``): its delta ``w_k - w_t``, weight n_k, steps tau_k, and the
  named extra arrays (``uploads(n_params)``) and scalar ``metrics`` the
  strategy declares; it may change ``ctx.state``.  The state is kept only
  when the update is delivered: a client that is not sampled, drops out,
  straggles out, fails or is withheld by a hook keeps its state untouched;

and on every rank again, from the gathered updates in client order:

* ``aggregate_fit(updates)``: the server's direction Delta;
  ``shortfall(len(updates))`` says, in one line, when the round has fewer
  reports than the rule asks for and what the rule does instead (the round's
  note, and a warning once per run on rank 0);
* ``server_update(params, delta)``: the server optimizer.  FedAvgM (Hsu et
  al. 2019): ``v = beta v + Delta``, ``w_{t+1} = w_t + eta_s v``; with
  ``server_lr = 1`` and ``server_momentum = 0`` (the default) it is
  ``w_t + Delta`` exactly.  Its state is checkpointed (``state_dict``).

``setup(run)`` tells the strategy the run (:class:`RunInfo`: K, every
client's rows, the model's size and starting point, the settings) and may
return a one-line problem.  A row of the all-gather is derived from the
declarations (:class:`Layout`), never a constant.

Properties are flags: ``keeps_stragglers`` (a client that ran fewer epochs
is averaged, FedProx and FedNova, or left out, FedAvg as the FedProx paper's
baseline); ``averages`` (Delta is the weighted mean sum_k p_k delta_k, so
differential privacy's clipped noisy sum and secure aggregation's masked sum
can stand in for ``aggregate_fit``); ``uploads_state`` (the uploads carry
per-client state in the clear, which DP and secure aggregation refuse);
``asynchronous`` (updates are applied as they arrive, FedBuff).

Every reporting client k sends ``delta_k = w_k - w_t``, ``n_k``, ``tau_k``
and ``||a_k||_1``, the sum of the coefficients of its local gradients in
delta_k (tau_k for plain SGD; see FedNova); p_k = n_k / sum_j n_j over the
reporting clients.

A strategy declares the options it takes as its ``options`` class attribute
(:class:`~mpiopt.core.options.Options`; a subclass extends its base's with
``Strategy.options + Options(...)``), once: the constructor takes them by
keyword and :meth:`~mpiopt.core.options.Declared.take_options` checks them, fills
the defaults and keeps each one as an attribute of the same name;
``option_values()`` reads them back in declaration order (the result's
``info["strategy_options"]``, the repr, the checkpoint's fingerprint).
``run_federated(..., strategy=name, strategy_options={...})`` checks the values
against the declaration on every rank before building the strategy.  The
weighted means, medians and trims are :mod:`.aggregate`'s.
"""
import dataclasses

import numpy as np

from ..core.options import Option, Options
from ..core.random import random_stream
from .aggregate import weighted_mean
from .declared import DeclaredPiece
from .settings import CLIENT_SAMPLINGS


@dataclasses.dataclass
class ClientUpdate:
    """One reporting client's contribution to a round (Flower's ``FitRes``)."""
    client: int           # the client's id, 0 <= client < K
    delta: np.ndarray     # w_k - w_t, a flat float64 vector of n_params entries
    weight: float         # n_k, the client's rows
    steps: int            # tau_k, local optimizer steps taken
    loss: float           # the global model w_t's loss on the client's data (before local training)
    normalizer: float = None  # ||a_k||_1: delta_k = -lr sum_j a_kj g_j over its steps (FedNova); None: tau_k
    arrays: dict = dataclasses.field(default_factory=dict)   # the strategy's named uploads besides delta
    metrics: dict = dataclasses.field(default_factory=dict)  # the strategy's named scalar metrics


@dataclasses.dataclass
class Instructions:
    """What the server sends a sampled client besides the model (Flower's ``FitIns.config``)."""
    config: dict = dataclasses.field(default_factory=dict)   # name -> number or string
    arrays: dict = dataclasses.field(default_factory=dict)   # name -> float64 array

    @property
    def nbytes(self):
        """The bytes the arrays add to the downlink (config values are a few bytes and not counted)."""
        return sum(int(np.asarray(array).nbytes) for array in self.arrays.values())


@dataclasses.dataclass
class ClientRound:
    """What a client's side of a strategy sees in one round (``begin_client``, ``local_gradient``,
    ``end_client``), on the rank that owns the client."""
    client: int
    round: int
    global_params: np.ndarray   # w_t, as received (read-only by convention)
    instructions: Instructions
    state: dict                 # a working copy of the client's state: kept only if the update is delivered
    rows: int                   # n_k
    lr: float                   # the local SGD learning rate
    epochs: int                 # the local epochs this round (fewer for a kept straggler)
    batch_size: int             # the local batch (None: all rows)
    steps: int = 0              # local steps taken so far (set by the local loop)


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What ``Strategy.setup`` learns of the run, the same on every rank."""
    n_clients: int
    client_rows: tuple          # n_k of every client, in client order
    n_params: int
    params: np.ndarray          # the starting point w_0
    settings: object            # the run's FederatedSettings


class Layout:
    """The row of one client's upload in the round's all-gather, from what the strategy declares:
    client, n_k, tau_k, ||a_k||_1, loss, the declared metrics, then delta and each declared upload array."""

    SCALARS = ("client", "weight", "steps", "normalizer", "loss")

    def __init__(self, strategy, n_params):
        self.metrics = tuple(strategy.metrics)
        self.arrays = (("delta", int(n_params)),) + tuple((name, int(size))
                                                          for name, size in strategy.uploads(n_params))
        self.head = len(self.SCALARS) + len(self.metrics)
        self.width = self.head + sum(size for _, size in self.arrays)

    def row(self, update):
        normalizer = update.steps if update.normalizer is None else update.normalizer
        parts = [[update.client, update.weight, update.steps, normalizer, update.loss],
                 [update.metrics[name] for name in self.metrics], update.delta]
        parts += [update.arrays[name] for name, _ in self.arrays[1:]]
        return np.concatenate([np.asarray(part, dtype=np.float64).reshape(-1) for part in parts])

    def problem(self, update):
        """Why ``update`` does not fit the declared row, or None."""
        missing = [name for name in self.metrics if name not in update.metrics]
        missing += [name for name, _ in self.arrays[1:] if name not in update.arrays]
        if missing:
            return f"the update of client {update.client} lacks the declared {', '.join(missing)}"
        for name, size in self.arrays:
            got = np.size(update.delta if name == "delta" else update.arrays[name])
            if got != size:
                return f"the update of client {update.client}: {name} has {got} entries, the layout {size}"
        return None

    def updates(self, gathered):
        """The ClientUpdates of the gathered rows, sorted by client."""
        table = gathered.reshape(-1, self.width)
        table = table[np.argsort(table[:, 0], kind="stable")]
        updates = []
        for row in table:
            arrays, start = {}, self.head
            for name, size in self.arrays:
                arrays[name] = row[start:start + size]
                start += size
            updates.append(ClientUpdate(client=int(row[0]), delta=arrays.pop("delta"), weight=float(row[1]),
                                        steps=int(row[2]), normalizer=float(row[3]), loss=float(row[4]),
                                        arrays=arrays, metrics={name: float(row[5 + index])
                                                                for index, name in enumerate(self.metrics)}))
        return updates


class Strategy(DeclaredPiece):
    """Base of every strategy: FedAvg's rules; subclasses change what differs (see the module docstring)."""

    name = "strategy"
    keeps_stragglers = False   # a straggler's fewer epochs are averaged (True) or left out
    averages = True            # Delta is the weighted mean of the deltas (DP and secure aggregation may replace it)
    uploads_state = False      # the uploads carry per-client state in the clear (DP, secure aggregation refuse it)
    asynchronous = False       # updates are applied as they arrive (FedBuff, FedAsync)
    client_state = ()          # the names of the arrays each client keeps between rounds (init_client_state)
    metrics = ()               # the names of the scalar metrics each update carries (end_client)
    options = Options(
        Option("server_lr", float, 1.0, "eta_s, the server's step on the aggregated update (FedAvgM)",
               low=0, low_open=True),
        Option("server_momentum", float, 0.0, "beta, the server's momentum on the aggregated update (FedAvgM)",
               low=0, high=1, high_open=True))

    def __init__(self, **options):
        """The declared ``options`` by keyword (the defaults for the rest), kept as attributes."""
        self.take_options(values=options)
        self.velocity = None

    def setup(self, run):
        """Learn the run (a :class:`RunInfo`); a one-line problem with it, or None."""
        return None

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.option_values().items())})"

    def begin_round(self, round):
        """The start of ``round`` (0-based), on every rank, whether or not any client reports in it."""

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

    def uploads(self, n_params):
        """(name, size) of each array an update carries besides delta (declared: the all-gather's row)."""
        return ()

    def configure_client(self, round, client):
        """The :class:`Instructions` for a sampled client (none by default)."""
        return Instructions()

    # -- the client's side ----------------------------------------------------------------
    def init_client_state(self, client, n_params):
        """The state of a client before its first round: {name: array} for each name of ``client_state``."""
        return {name: np.zeros(n_params) for name in self.client_state}

    def begin_client(self, ctx):
        """Before the client's local training (a :class:`ClientRound`)."""

    def local_gradient(self, grad, params, ctx):
        """The gradient of the client's local objective at ``params`` (the model's, by default)."""
        return grad

    def end_client(self, update, ctx):
        """The client's upload after training: ``update`` with its declared arrays and metrics."""
        return update

    # -- aggregate_fit --------------------------------------------------------------------
    def aggregate_fit(self, updates):
        """Delta = sum_k p_k delta_k, summed in client order."""
        return weighted_mean([update.delta for update in updates], [update.weight for update in updates])

    def shortfall(self, reports):
        """None, or one line: ``reports`` updates are fewer than the rule asks for, and what it does with them."""
        return None

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
