"""Asynchronous federated aggregation with a buffer of K updates (FedBuff; Nguyen et al., AISTATS 2022).

``run_fedbuff(model, clients, comm=None, **settings)`` on the asynchronous
parameter server (:class:`mpiopt.collectives.async_server.AsyncParameterServer`):
rank 0 serves the global model, every other rank is a worker, and no worker
ever waits for another, so a slow client delays only its own update.

Placement: client k lives on worker ``1 + k % (p - 1)`` (only that rank reads
``clients[k]``).  A worker repeats, until the server's budget is spent:

1. pull the model w and its version v (v counts the updates the server has
   received; the worker stops once ``v >= server_steps * buffer_size``);
2. draw ``concurrency`` of its clients without replacement from
   ``random_stream(seed, "fedbuff", worker, i)`` (i: the worker's i-th pull)
   and train each from w in turn with :func:`.client.train_client` (round i,
   FedAvg's local objective), then sleep the client's ``client_delays``
   seconds (an emulated slow device);
3. push each update delta_k = w_k - w, with n_k, its loss and k, tagged
   with version v.

The server buffers what arrives.  An update based on the model of server
step t_k that arrives after step t has staleness tau_k = t - t_k and weight

    s(tau) = (1 + tau)^(-a)   ("polynomial", a = ``staleness_exponent`` = 0.5 as in the paper)
    s(tau) = 1                ("constant")

and once the buffer holds K = ``buffer_size`` updates the server steps

    w <- w + eta_g (1/K) sum_k s(tau_k) delta_k        (eta_g = ``server_lr``; paper, Algorithm 1)

and empties the buffer.  It accepts exactly ``server_steps * K`` updates
and so takes exactly ``server_steps`` steps; updates that arrive after that
(workers still training when the budget ran out) are counted as
``discarded`` and not applied.  The model a worker pulls changes only at a
server step, so tau counts server steps, as in the paper (the parameter
server's own version counts updates; the server converts).  With constant
weights and every update fresh, a step is FedAvg with equal client weights.

What is deterministic: the placement, each worker's sequence of clients and
their minibatch orders, and the number of server steps.  What is not: the
order in which updates from different workers arrive depends on timing, so
the staleness of each update, which clients fill which buffer, and the final
model vary from run to run at p > 2 ranks.  At p = 2 (one worker) the run is
deterministic: a worker's messages reach the server in the order sent.
FedBuff needs p >= 2 ranks; at one rank it raises a CollectiveError.

Cost: each update moves n_params + 3 floats to the server and each pull
n_params + 3 back; the server does O(n_params) work per update.
"""
import dataclasses
import math
import time

import numpy as np

from ..collectives.async_server import AsyncParameterServer
from ..core.comm import check_collectively, resolve_comm
from ..core.random import random_stream
from ..core.settings import Settings, is_integer, is_number
from .client import data_problem, local_clients, train_client
from .result import SCALAR_COLUMNS, FederatedResult
from .settings import local_training_checks
from .strategy import Strategy

TAIL = 3  # n_k, loss, client behind each pushed update


def staleness_weight(staleness, kind="polynomial", exponent=0.5):
    """s(tau): ``(1 + tau)^-exponent`` ("polynomial") or 1 ("constant"), for tau >= 0 server steps."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((1.0 + staleness) ** -exponent)
    raise ValueError(f"staleness must be one of {', '.join(STALENESS)}, got {kind!r}")


STALENESS = ("polynomial", "constant")


@dataclasses.dataclass(frozen=True)
class FedBuffSettings(Settings):
    label = "fedbuff"

    buffer_size: int = 10          # K: updates the server buffers before a step
    server_steps: int = 10         # server steps to take (the server accepts server_steps * K updates)
    server_lr: float = 1.0         # eta_g
    staleness: str = "polynomial"  # s(tau): "polynomial" (1 + tau)^-a or "constant" 1
    staleness_exponent: float = 0.5  # a
    concurrency: int = 1           # clients a worker trains from each model it pulls
    local_epochs: int = 1          # E
    batch_size: int = 10           # B; None: all of a client's rows
    lr: float = 0.01               # the clients' SGD learning rate
    momentum: float = 0.0          # the clients' SGD momentum
    seed: int = 0                  # client choice, minibatch orders, the initial model
    client_delays: tuple = None    # seconds client k sleeps after training (emulated slow devices); None: 0
    eval_every: int = 1            # server steps between test evaluations (and the last one)
    idle_timeout: float = None     # the server gives up after this many silent seconds (None: never)

    def checks(self):
        number, integer = is_number, is_integer
        delays = self.client_delays
        return [
            (integer(self.buffer_size) and self.buffer_size >= 1,
             f"buffer_size must be an integer >= 1, got {self.buffer_size!r}"),
            (integer(self.server_steps) and self.server_steps >= 0,
             f"server_steps must be an integer >= 0, got {self.server_steps!r}"),
            (number(self.server_lr) and self.server_lr > 0, f"server_lr must be a number > 0, got {self.server_lr!r}"),
            (self.staleness in STALENESS,
             f"staleness must be one of {', '.join(STALENESS)}, got {self.staleness!r}"),
            (number(self.staleness_exponent) and self.staleness_exponent >= 0,
             f"staleness_exponent must be a number >= 0, got {self.staleness_exponent!r}"),
            (integer(self.concurrency) and self.concurrency >= 1,
             f"concurrency must be an integer >= 1, got {self.concurrency!r}"),
            *local_training_checks(self),
            (delays is None or (isinstance(delays, (list, tuple)) and all(number(d) and d >= 0 for d in delays)),
             f"client_delays must be None or a sequence of seconds >= 0, got {delays!r}"),
            (integer(self.eval_every) and self.eval_every >= 1,
             f"eval_every must be an integer >= 1, got {self.eval_every!r}"),
            (self.idle_timeout is None or (number(self.idle_timeout) and self.idle_timeout > 0),
             f"idle_timeout must be None or a number > 0, got {self.idle_timeout!r}"),
        ]


def run_fedbuff(model, clients, comm=None, *, test_data=None, params=None, **settings):
    """FedBuff training of ``model`` over the K = len(clients) clients; collective over ``comm`` (p >= 2 ranks).

    ``clients[k] = (X_k, y_k)`` (read only on worker 1 + k % (p - 1));
    ``test_data`` an optional ``(X, y)`` the server evaluates every
    ``eval_every`` steps; ``params`` the starting point (default
    ``model.init_params(seed)``).  Settings: :class:`FedBuffSettings`.
    Returns a :class:`FederatedResult`, the same on every rank, with one
    history row per server step (``round`` is the step; plus ``staleness``,
    ``clients`` and ``workers`` of its buffer).  See the module docstring.
    """
    start = time.perf_counter()
    comm = resolve_comm(comm)
    problem = None if comm.size >= 2 else (
        f"FedBuff needs at least 2 ranks (rank 0 serves, the others train), got {comm.size}")
    workers = range(comm.rank - 1, len(clients), comm.size - 1) if comm.rank else ()  # rank 0 serves
    local, problem = local_clients(model, clients, workers, problem)
    problem = problem or data_problem(model, test_data, params)
    delays = settings.get("client_delays")
    if problem is None and delays is not None and len(delays) != len(clients):
        problem = f"client_delays has {len(delays)} entries for {len(clients)} clients"
    if isinstance(delays, list):
        settings["client_delays"] = tuple(delays)
    options = FedBuffSettings.collective(comm, problem, agree={"clients": len(clients), "model": repr(model)},
                                         **settings)
    params = model.init_params(options.seed) if params is None else np.array(params, dtype=np.float64)
    problem, history, info = None, None, None
    with AsyncParameterServer(model.n_params + TAIL, comm=comm) as server:
        if server.is_server:
            buffer = UpdateBuffer(model, options, params, test_data)
            stats = server.serve(np.concatenate([params, np.zeros(TAIL)]), buffer.apply, options.idle_timeout)
            params, history, info = buffer.params, buffer.history, dict(buffer.info(), server=stats)
        else:
            try:
                _work(server, model, local, options)
            except Exception as error:  # reported on every rank below, after the server has stopped
                problem = f"worker {comm.rank}: {type(error).__name__}: {error}"
            server.close()
    server.free()
    check_collectively(comm, problem)
    params, history, info = comm.bcast((params, history, info), root=0)
    loss, accuracy = _evaluate_clients(model, params, local, comm)
    elapsed = time.perf_counter() - start
    info.update(ranks=comm.size, model=repr(model), n_params=model.n_params, clients=len(clients),
                placement="client k on worker 1 + k % (ranks - 1)", settings=options.as_dict())
    return FederatedResult(status="finished", history=history, timings={"total": elapsed}, info=info,
                           params=params, rounds=len(history["round"]), loss=loss, accuracy=accuracy,
                           test_accuracy=_evaluate(model, params, test_data)[1])


class UpdateBuffer:
    """The server's ``apply``: buffers updates, steps every K of them, and records each step."""

    def __init__(self, model, settings, params, test_data):
        self.model, self.settings, self.test = model, settings, test_data
        self.params = np.array(params, dtype=np.float64)
        self.n = model.n_params
        self.budget = settings.server_steps * settings.buffer_size
        self.direction = np.zeros(self.n)
        self.buffered = []                         # (staleness, client, worker, n_k, loss) of each update
        self.received = self.accepted = self.steps = 0
        self.first_arrival = {}                    # worker -> server steps done when its first update arrived
        self.start = time.perf_counter()
        self.history = {column: [] for column in SCALAR_COLUMNS + ("failures", "note", "version", "staleness",
                                                                   "clients", "workers")}

    def apply(self, model, message, worker, lag):
        """Called by ``serve`` for each push; ``lag`` counts the updates received since the worker's pull."""
        based_on, self.received = self.received - lag, self.received + 1
        self.first_arrival.setdefault(worker, self.steps)
        if self.accepted >= self.budget:
            return
        s = self.settings
        staleness = self.steps - min(based_on, self.budget) // s.buffer_size
        weight = staleness_weight(staleness, s.staleness, s.staleness_exponent)
        self.direction += weight * message[:self.n]
        rows, loss, client = message[self.n:]
        self.buffered.append((staleness, int(client), worker, float(rows), float(loss)))
        self.accepted += 1
        if len(self.buffered) == s.buffer_size:
            self.params += (s.server_lr / s.buffer_size) * self.direction
            model[:self.n] = self.params
            self.steps += 1
            self.record()
            self.direction[:] = 0.0
            self.buffered = []

    def record(self):
        s, buffered = self.settings, self.buffered
        last = self.steps == s.server_steps
        test_loss, test_accuracy = (_evaluate(self.model, self.params, self.test)
                                    if self.steps % s.eval_every == 0 or last else (None, None))
        rows = sum(entry[3] for entry in buffered)
        values = {"round": self.steps, "sampled": len(buffered), "participants": len(buffered), "dropped": 0,
                  "stragglers": 0, "failed": 0, "loss": sum(entry[3] * entry[4] for entry in buffered) / rows,
                  "test_loss": test_loss, "test_accuracy": test_accuracy,
                  "bytes_sent": float(len(buffered) * (self.n + TAIL) * 8), "bytes_received": None,
                  "epsilon": None, "time": time.perf_counter() - self.start, "failures": [], "note": None,
                  "version": self.steps, "staleness": [entry[0] for entry in buffered],
                  "clients": [entry[1] for entry in buffered], "workers": [entry[2] for entry in buffered]}
        for column, value in values.items():
            self.history[column].append(value)

    def info(self):
        known = [tau for taus in self.history["staleness"] for tau in taus]
        return {"server_steps": self.steps, "updates_applied": self.accepted,
                "discarded": self.received - self.accepted, "first_arrival": self.first_arrival,
                "max_staleness": max(known, default=0), "mean_staleness": float(np.mean(known)) if known else 0.0}


def _work(server, model, local, settings):
    """A worker's loop (module docstring, steps 1-3) until the server's budget is spent."""
    budget = settings.server_steps * settings.buffer_size
    mine = np.array(sorted(local))
    strategy = Strategy()
    pull = 0
    while mine.size:
        message, version = server.pull()
        if version >= budget:
            return
        global_params = message[:model.n_params]
        count = min(settings.concurrency, mine.size)
        chosen = np.sort(random_stream(settings.seed, "fedbuff", server.rank, pull).choice(mine, count,
                                                                                           replace=False))
        for client in chosen:
            X, y = local[int(client)]
            update = train_client(model, X, y, global_params, strategy, client=int(client), round=pull,
                                  epochs=settings.local_epochs, batch_size=settings.batch_size, lr=settings.lr,
                                  momentum=settings.momentum, seed=settings.seed)
            if settings.client_delays is not None:
                time.sleep(settings.client_delays[int(client)])
            server.push(np.concatenate([update.delta, [update.weight, update.loss, update.client]]), version)
        pull += 1


def _evaluate(model, params, data):
    """(loss, accuracy) of ``params`` on ``data`` (None, None without data; accuracy None for a regression)."""
    if data is None:
        return None, None
    X, y = data
    accuracy = float(np.mean(model.predict(params, X) == y)) if model.n_classes else None
    return float(model.loss(params, X, y)), accuracy


def _evaluate_clients(model, params, local, comm):
    """(loss, accuracy) of ``params`` over every client's rows, summed in client order (collective)."""
    mine = [(k, model.loss(params, X, y) * y.shape[0],
             int(np.count_nonzero(model.predict(params, X) == y)) if model.n_classes else 0, y.shape[0])
            for k, (X, y) in local.items()]
    rows = sorted(row for part in comm.allgather(mine) for row in part)
    total = sum(row[3] for row in rows)
    loss = math.fsum(row[1] for row in rows) / total
    return float(loss), (sum(row[2] for row in rows) / total if model.n_classes else None)
