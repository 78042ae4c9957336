"""Local training of one virtual client: E epochs of minibatch SGD on its rows, from the global model.

Epoch e visits the client's n_k rows in the order of a permutation drawn
from ``random_stream(seed, "client", round, client)`` (one stream per client
and round: the same at any rank count, whichever rank runs the client), in
batches of B rows (the last one smaller; ``batch_size=None``: one batch of
all rows).  Each batch's gradient is the model's (``model.loss_and_grad``)
turned into the local objective's by the strategy (FedProx's proximal term),
and the optimizer of :mod:`mpiopt.optim` (SGD; a fresh one per client and
round, as FedAvg's clients keep no state) steps the local copy.

Returns a :class:`~mpiopt.federated.strategy.ClientUpdate`: delta = w_k - w_t,
n_k, tau_k = E ceil(n_k / B) steps, ||a_k||_1 and the global model's loss on
the client's rows.  With momentum rho (PyTorch's SGD: b_j = rho b_{j-1} + g_j,
w -= lr b_j, b_1 = g_1) delta_k = -lr sum_j a_kj g_j with
a_kj = (1 - rho^(tau_k - j + 1)) / (1 - rho), so ||a_k||_1 = sum_{t=1..tau_k}
(1 - rho^t) / (1 - rho) (Wang et al. 2020, FedNova, Sec. 5), accumulated step
by step as FedNova's reference code does; tau_k without momentum.  A non-finite loss or update raises FloatingPointError (a
diverged client is a failed client).  Cost: E passes over the client's rows.

:class:`ClientExecution` is the client loop both schedulers run (the
synchronous rounds of :mod:`.runner`, the workers of :mod:`.asynchronous`):
for each client it gives the strategy's instructions (config and named
arrays), a working copy of the client's state, the strategy's client verbs
around :func:`train_client`, the upload checked against the declared
:class:`~mpiopt.federated.strategy.Layout` (delta, named extras, metrics), the
compressed upload (:mod:`.uplink`) and the hooks' ``transform_update``; the
state is kept once the update is delivered.  The schedulers decide which
clients run, from which model, and where their updates go.
"""
import dataclasses
import hashlib
import math

import numpy as np

from ..core.backend import finite_problem
from ..core.random import random_stream
from ..optim import get_optimizer
from .strategy import ClientRound, ClientUpdate, Instructions, Layout
from .uplink import Uplink


def train_client(model, X, y, global_params, strategy, *, client, round, epochs, batch_size, lr, momentum=0.0,
                 seed=0, ctx=None):
    """One client's local training in ``round``; see the module docstring.  ``ctx`` is the client's
    :class:`~mpiopt.federated.strategy.ClientRound` (its instructions and state; a stateless one by default),
    given to the strategy's ``local_gradient``; ``ctx.steps`` counts the local steps."""
    rows = y.shape[0]
    if rows == 0:
        raise ValueError(f"client {client} has no rows")
    if ctx is None:
        ctx = ClientRound(client=int(client), round=round, global_params=global_params, instructions=Instructions(),
                          state={}, rows=rows, lr=lr, epochs=epochs, batch_size=batch_size)
    batch = rows if batch_size is None else min(batch_size, rows)
    params = np.array(global_params, dtype=np.float64)
    loss = model.loss(global_params, X, y)
    optimizer = get_optimizer("sgd", lr=lr, momentum=momentum)
    stream = random_stream(seed, "client", round, client)
    steps, coefficient, normalizer = 0, 0.0, 0.0
    for _ in range(epochs):
        order = stream.permutation(rows) if batch < rows else np.arange(rows)
        for start in range(0, rows, batch):
            chosen = order[start:start + batch]
            _, grad = model.loss_and_grad(params, X[chosen], y[chosen])
            optimizer.step(params, strategy.local_gradient(grad, params, ctx))
            steps += 1
            ctx.steps = steps
            coefficient = momentum * coefficient + 1.0  # (1 - rho^t) / (1 - rho) after t steps
            normalizer += coefficient
    delta = params - global_params
    if not (math.isfinite(loss) and np.isfinite(delta).all()):
        raise FloatingPointError(f"client {client}'s local training diverged (loss {loss}, update not finite)")
    return ClientUpdate(client=int(client), delta=delta, weight=float(rows), steps=steps, loss=float(loss),
                        normalizer=normalizer)


def local_clients(model, clients, owned, problem=None):
    """({k: (X_k, y_k)} of the clients ``owned`` here, checked, and the first problem (or ``problem``)).

    A client's features or targets with NaN or inf (or sums that overflow) are a problem, as in the ADMM
    solvers (``core.backend.finite_problem``); the callers raise it on every rank (``check_collectively``).
    """
    local = {}
    if problem:
        return local, problem
    if len(clients) < 1:
        return local, "there are no clients"
    for k in owned:
        try:
            X, y = clients[k]
            X = model.check_inputs(X)
            y = model.check_targets(y, X.shape[0])
        except (ValueError, TypeError) as error:
            return local, f"client {k}: {error}"
        if y.shape[0] == 0:
            return local, f"client {k} has no rows"
        problem = finite_problem(f"client {k}: X", X) or finite_problem(f"client {k}: y", y)
        probe = getattr(model, "batch_problem", None)  # a model that can fail on a batch says so first
        if problem is None and probe is not None and not local:
            problem = probe(model.init_params(0), X, y)
        if problem:
            return local, problem
        local[k] = (X, y)
    return local, None


def data_problem(model, test_data, params):
    """The first problem with the test data or the starting parameters (NaN or inf included), or None."""
    if test_data is not None:
        try:
            X = model.check_inputs(test_data[0])
            y = model.check_targets(test_data[1], X.shape[0])
        except (ValueError, TypeError) as error:
            return f"test_data: {error}"
        problem = finite_problem("test_data: X", X) or finite_problem("test_data: y", y)
        if problem:
            return problem
    if params is None:
        return None
    try:
        params = model.check_params(params)
    except (ValueError, TypeError) as error:
        return f"params: {error}"
    return finite_problem("params", params)


def clients_digest(local):
    """The SHA-256 of this rank's clients (their ids, shapes, dtypes and bytes): a checkpoint's fingerprint."""
    digest = hashlib.sha256()
    for client, (X, y) in local.items():
        digest.update(f"{client}{X.shape}{y.dtype}".encode())
        digest.update(np.ascontiguousarray(X).tobytes())
        digest.update(np.ascontiguousarray(y).tobytes())
    return digest.hexdigest()


class ClientStates:
    """The state of the clients this rank owns: client -> {name: float64 array}, made by the strategy's
    ``init_client_state`` at a client's first round and replaced only when its update is delivered.

    In a checkpoint each array is one of this rank's arrays, ``client{k}_{name}`` (the Checkpointer stores it
    as ``rank{r}_client{k}_{name}``), so a resumed run continues bit for bit."""

    PREFIX = "client"

    def __init__(self, strategy, n_params):
        self.strategy, self.n_params, self.states = strategy, n_params, {}

    def working(self, client):
        """A copy of client ``client``'s state for a round (its initial state before its first)."""
        state = self.states.get(client)
        if state is None:
            return {name: np.array(value, dtype=np.float64)
                    for name, value in self.strategy.init_client_state(client, self.n_params).items()}
        return {name: value.copy() for name, value in state.items()}

    def commit(self, client, state):
        if state:
            self.states[client] = state

    def arrays(self):
        """This rank's part of a checkpoint."""
        return {f"{self.PREFIX}{client}_{name}": value for client, state in sorted(self.states.items())
                for name, value in state.items()}

    def load(self, arrays):
        self.states = {}
        for key, value in arrays.items():
            if key.startswith(self.PREFIX) and "_" in key:
                client, name = key[len(self.PREFIX):].split("_", 1)
                self.states.setdefault(int(client), {})[name] = np.array(value, dtype=np.float64)


@dataclasses.dataclass
class ClientOutcome:
    """What one client's execution gives its scheduler."""
    client: int
    received: int               # the bytes sent to the client: the model and its instructions' arrays
    update: ClientUpdate = None  # the upload as the server receives it; None: a hook withheld it, or it failed
    sent: int = 0               # the upload's bytes
    error: Exception = None     # what training, the strategy or a hook raised: the client failed


class ClientExecution:
    """The clients of this rank as both schedulers run them: ``run(round, clients, global_params)`` (module
    docstring); ``layout``, ``states`` and ``uplink`` are the declared row, the clients' state and the
    compressed uploads (None without a compressor)."""

    def __init__(self, model, local, strategy, settings, hooks=(), compressor=None):
        self.model, self.local, self.strategy, self.settings, self.hooks = model, local, strategy, settings, hooks
        self.layout = Layout(strategy, model.n_params)
        self.states = ClientStates(strategy, model.n_params)
        self.uplink = (Uplink(compressor, settings.uplink_feedback, self.layout)
                       if compressor is not None and settings.compressor != "none" else None)

    def run(self, round, clients, global_params):
        """Each ``(client, epochs)`` of ``clients`` (this rank's) trained from ``global_params`` in turn: yields
        its :class:`ClientOutcome`; a failure is reported in it, never raised (the instructions excepted)."""
        for client, epochs in clients:
            instructions = self.strategy.configure_client(round, client)
            received = global_params.nbytes + instructions.nbytes
            try:
                update, state, sent = self.train(round, client, epochs, global_params, instructions)
            except Exception as error:  # the scheduler reports it to every rank
                yield ClientOutcome(client, received, error=error)
                continue
            if update is not None:
                self.states.commit(client, state)
            yield ClientOutcome(client, received, update, sent)

    def train(self, round, client, epochs, global_params, instructions):
        """(the client's update after the strategy's ``end_client``, the uplink and every hook's
        ``transform_update``, or None if a hook withheld it; the client's working state; the upload's bytes):
        raises what training raises."""
        s, strategy = self.settings, self.strategy
        X, y = self.local[client]
        ctx = ClientRound(client=client, round=round, global_params=global_params, instructions=instructions,
                          state=self.states.working(client), rows=int(y.shape[0]), lr=s.lr, epochs=epochs,
                          batch_size=strategy.local_batch_size(s.batch_size))
        strategy.begin_client(ctx)
        update = train_client(self.model, X, y, global_params, strategy, client=client, round=round, epochs=epochs,
                              batch_size=ctx.batch_size, lr=s.lr, momentum=s.momentum, seed=s.seed, ctx=ctx)
        update = strategy.end_client(update, ctx)
        problem = self.layout.problem(update)
        if problem:
            raise ValueError(f"{strategy.name}: {problem}")
        sent = 8 * self.layout.width
        if self.uplink is not None:
            update, sent = self.uplink.encode(update, ctx)
        for hook in self.hooks:
            if update is not None:
                update = hook.transform_update(update, client, round)
        return update, ctx.state, sent
