"""The asynchronous scheduler of ``run_federated``: a strategy with ``asynchronous = True`` (FedBuff, FedAsync).

On the asynchronous parameter server
(:class:`mpiopt.collectives.async_server.AsyncParameterServer`): rank 0 serves
the global model, every other rank is a worker, and no worker ever waits for
another, so a slow client delays only its own update.  The same settings as a
synchronous run (:class:`~mpiopt.federated.settings.FederatedSettings`):
``rounds`` counts the server's steps, ``local_epochs``, ``batch_size``,
``lr``, ``momentum``, ``seed``, ``client_delays``, ``idle_timeout``,
``eval_every``, the checkpoint and the log; the strategy's options hold the
rest (``buffer_size``, ``concurrency``, the staleness weighting).

Placement: client k lives on worker ``1 + k % (p - 1)`` (only that rank reads
``clients[k]``).  A worker repeats, until the server's budget is spent:

1. pull the model w and the count v of updates the server has received
   (the worker stops once ``v >= rounds * buffer_size``);
2. draw ``concurrency`` of its clients without replacement from
   ``random_stream(seed, "fedbuff", worker, i)`` (i: the worker's i-th pull)
   and run each from w in turn with the client loop of the synchronous
   rounds (:class:`.client.ClientExecution`, round i: the strategy's
   instructions, the client's state kept on its worker, ``begin_client``,
   the local objective, ``end_client``), then sleep the client's
   ``client_delays`` seconds (an emulated slow device);
3. push each update (delta_k = w_k - w, or the model w_k itself when the
   strategy ``sends_model``), with n_k, its loss and k, tagged with v.  The
   server's step takes the delta alone, so a strategy that declares extra
   uploads or metrics is refused.

The server buffers what arrives.  An update based on the model of server
step t_k that arrives after step t has staleness tau_k = t - t_k; the
strategy weighs it by s(tau_k) and turns it into a contribution
(``contribution``: delta_k for FedBuff, w_k - w for FedAsync); once the buffer
holds K = ``buffer_size`` of them the server steps

    w <- w + (eta / K) sum_k s(tau_k) contribution_k      (eta: the strategy's server_lr)

and empties the buffer.  It accepts exactly ``rounds * K`` updates and so
takes exactly ``rounds`` steps; updates that arrive after that (workers still
training when the budget ran out) are counted as ``discarded`` and not
applied.  The model a worker pulls changes only at a server step, so tau
counts server steps, as in the papers (the parameter server's own version
counts updates; the server converts).

What is deterministic: the placement, each worker's sequence of clients and
their minibatch orders, and the number of server steps.  What is not: the
order in which updates from different workers arrive depends on timing, so
the staleness of each update, which clients fill which buffer, and the final
model vary from run to run at p > 2 ranks.  At p = 2 (one worker) the run is
deterministic: a worker's messages reach the server in the order sent.
An asynchronous strategy needs p >= 2 ranks; at one rank it raises a
CollectiveError.  The synchronous round's faults and transforms (dropouts,
stragglers, Byzantine clients, compressed uploads, hooks, Poisson sampling)
are refused with it, in one line on every rank; ``fraction`` is not used.

Checkpoints (``checkpoint``, ``checkpoint_every``): the run is a sequence of
sessions of the parameter server.  A session ends once every worker has
pulled after a checkpoint was asked for (every ``checkpoint_every`` server
steps, SIGUSR1 or SIGTERM on any rank), so the updates in flight are all
applied and no worker is half way through its clients; every rank then
writes its part (the server: the model, the partly filled buffer, its
counters and history; a worker: its pull count and its clients' state) and, unless stopped, the
next session starts where this one ended.  A worker learns a checkpoint is
due from the model it pulls; a signal on a worker reaches the server as a
marker message (not an update).  At p = 2 a resumed run is the
uninterrupted one bit for bit, sessions or not; at p > 2 it is one of the
runs the timing could have given.  The rank count must not change.

Cost: each update moves n_params + 4 floats to the server and each pull
n_params + 4 back; the server does O(n_params) work per update.
"""
import time

import numpy as np

from ..collectives.async_server import AsyncParameterServer, ParameterServerTimeout
from ..core.checkpoint import Checkpointer
from ..core.comm import check_collectively
from ..core.random import random_stream
from ..core.signals import SignalFlags
from .aggregate import evaluation_mean_exact
from .client import ClientExecution, clients_digest
from .result import LIST_COLUMNS, SCALAR_COLUMNS, FederatedResult

FORMAT = "mpiopt-federated-async-checkpoint-1"
# Behind each pushed update: n_k, loss, client (-1: a worker's signal, not an update), the updates the server had
# received when the worker pulled.  Behind the served model: FLAG (GO, SPENT: the budget is spent, PAUSE: a
# checkpoint is due), the updates received so far, two zeros.
TAIL = 4
GO, SPENT, PAUSE = 0.0, 1.0, 2.0
LOG_COLUMNS = (("step", "6d"), ("updates", "7d"), ("max tau", "7d"), ("loss", "14.6e"), ("test acc", "8.4f"),
               ("time(s)", "9.3f"))


def asynchronous_problem(strategy, settings, hooks, n_ranks, n_params):
    """Why ``strategy`` (asynchronous) cannot run with these settings, or None."""
    if n_ranks < 2:
        return f"{strategy.name} needs at least 2 ranks (rank 0 serves, the others train), got {n_ranks}"
    declared = [name for name, _ in strategy.uploads(n_params)] + list(strategy.metrics)
    if declared:
        return (f"{strategy.name} is asynchronous: the server's step takes each update's delta alone, so the "
                f"declared uploads and metrics {', '.join(declared)} would never arrive")
    unused = [f"{name}={getattr(settings, name)!r}" for name, default in
              (("dropout", 0.0), ("stragglers", 0.0), ("byzantine", 0.0), ("compressor", "none"),
               ("client_sampling", "fixed")) if getattr(settings, name) != default]
    if hooks:
        unused.append(f"hooks {', '.join(type(hook).__name__ for hook in hooks)}")
    if unused:
        return (f"{strategy.name} is asynchronous: {', '.join(unused)} belong to the synchronous rounds "
                "(dropouts, stragglers, Byzantine clients, compressed uploads, hooks, Poisson sampling)")
    return None


class AsyncFederation:
    """The sessions of the parameter server, the checkpoints between them, and the result."""

    def __init__(self, model, n_clients, local, strategy, settings, comm, params, test_data, log):
        self.model, self.n_clients, self.local, self.settings = model, n_clients, local, settings
        self.strategy, self.comm, self.test, self.log = strategy, comm.Dup(), test_data, log
        self.buffer = UpdateBuffer(model, strategy, settings, params, test_data, log) if comm.rank == 0 else None
        self.clients = ClientExecution(model, local, strategy, settings)
        self.pulls, self.steps, self.checkpointer, self.stats = 0, 0, None, []

    def run(self, setup_start):
        s = self.settings
        if s.checkpoint:
            self.checkpointer = Checkpointer(s.checkpoint, self.comm, self.fingerprint(), FORMAT, self.strategy.name)
            self.checkpointer.restore(self.restore, _validate)
        resumed_at, status = self.steps, "finished"
        setup = time.perf_counter() - setup_start
        if self.buffer is not None:
            self.buffer.start = time.perf_counter()
        self.log.banner(f"mpiopt federated learning, asynchronous ({self.strategy.name})",
                        self.banner_lines(setup, resumed_at))
        rounds_start = time.perf_counter()
        with SignalFlags(self.checkpointer is not None) as signals:
            while True:
                spent, due, stop = self.session(signals)
                if self.checkpointer is not None and (due or stop or (spent and self.steps > resumed_at)):
                    self.checkpointer.write(*self.state())
                if spent or stop:
                    status = "finished" if spent else "interrupted"
                    break
        rounds_time = time.perf_counter() - rounds_start
        result = self.result(status, resumed_at, {"setup": setup, "rounds": rounds_time, "total": setup + rounds_time})
        self.log.footer([f"status:    {result.status} after {result.rounds} server steps",
                         f"clients:   loss {result.loss:.8e}", f"time:      {rounds_time:.3f} s"])
        return result

    def session(self, signals):
        """One session of the parameter server, until every worker has pulled after the budget was spent or a
        checkpoint was asked for: (budget spent, checkpoint asked for, stop asked for), the same on every rank."""
        problem = None
        with AsyncParameterServer(self.model.n_params + TAIL, comm=self.comm) as server:
            if server.is_server:
                self.buffer.signals = signals
                try:
                    self.stats.append(server.serve(self.buffer.served(), self.buffer.apply,
                                                   self.settings.idle_timeout))
                except ParameterServerTimeout as error:
                    problem = str(error)
            else:
                try:
                    self.pulls = _work(server, self.clients, self.pulls, signals)
                except Exception as error:  # reported on every rank below, after the server has stopped
                    problem = f"worker {self.comm.rank}: {type(error).__name__}: {error}"
                server.close()
        server.free()
        check_collectively(self.comm, problem)
        usr1, term = signals.take()
        asked = self.buffer.take_requests(usr1, term) if self.buffer is not None else None
        shared = self.comm.allgather((usr1, term, asked))
        spent, due, stop, self.steps = shared[0][2]
        return spent, due or any(part[0] for part in shared), stop or any(part[1] for part in shared)

    def result(self, status, resumed_at, timings):
        model, buffer = self.model, self.buffer
        params, history, info = ((buffer.params, buffer.history, buffer.info()) if buffer is not None
                                 else (None, None, None))
        params, history, info = self.comm.bcast((params, history, info), root=0)
        loss, accuracy = _evaluate_clients(model, params, self.local, self.comm)
        server = self.stats[-1] if len(self.stats) == 1 else {"sessions": self.stats}
        info.update(ranks=self.comm.size, model=repr(model), n_params=model.n_params, clients=self.n_clients,
                    strategy=self.strategy.name, strategy_options=self.strategy.option_values(),
                    placement="client k on worker 1 + k % (ranks - 1)", settings=self.settings.as_dict(),
                    server=self.comm.bcast(server, root=0), resumed_at=resumed_at,
                    stop="rounds" if status == "finished" else "signal")
        return FederatedResult(status=status, history=history, timings=timings, info=info, params=params,
                               rounds=len(history["round"]), loss=loss, accuracy=accuracy,
                               test_accuracy=_evaluate(model, params, self.test)[1])

    # -- checkpoints -----------------------------------------------------------------------
    def fingerprint(self):
        s = self.settings
        return {"model": repr(self.model), "n_params": self.model.n_params, "clients": self.n_clients,
                "data": clients_digest(self.local), "strategy": repr(self.strategy),
                **{name: getattr(s, name) for name in ("local_epochs", "batch_size", "lr", "momentum", "seed")}}

    def state(self):
        """(shared arrays, this rank's arrays, meta) of :meth:`Checkpointer.write`: the server's buffer, the
        workers' pull counts and their clients' state."""
        shared, meta = self.buffer.state() if self.buffer is not None else ({}, {})
        return shared, {"pulls": np.array(self.pulls), **self.clients.states.arrays()}, meta

    def restore(self, shared, mine, meta):
        self.pulls, self.steps = int(mine["pulls"]), int(meta["steps"])
        self.clients.states.load(mine)
        if self.buffer is not None:
            self.buffer.load(shared, meta)

    def banner_lines(self, setup, resumed_at):
        s, strategy = self.settings, self.strategy
        return [f"model:     {self.model!r}",
                f"clients:   {self.n_clients} on {self.comm.size - 1} workers (client k on worker 1 + k % "
                f"{self.comm.size - 1}); rank 0 serves",
                f"server:    {s.rounds} steps of K={strategy.buffer_size} updates; {strategy!r}",
                f"clients:   E={s.local_epochs}, B={s.batch_size}, lr={s.lr}, momentum={s.momentum}",
                f"setup:     {setup:.3f} s" + (f"; resumed at server step {resumed_at}" if resumed_at else "")]


def _validate(shared, parts, meta):
    """Rank 0's check that the file holds what a FedBuff checkpoint holds."""
    missing = [key for key in UpdateBuffer.META if key not in meta]
    missing += [key for key in ("params", "direction") if key not in shared]
    missing += [f"rank{rank}_pulls" for rank, part in enumerate(parts) if "pulls" not in part]
    if missing:
        raise ValueError(f"entries {', '.join(missing)} are missing")


class UpdateBuffer:
    """The server's ``apply``: buffers updates, steps every K of them, and records each step."""

    META = ("steps", "received", "accepted", "buffered", "first_arrival", "history", "elapsed")

    def __init__(self, model, strategy, settings, params, test_data, log):
        self.model, self.strategy, self.settings, self.test, self.log = model, strategy, settings, test_data, log
        self.params = np.array(params, dtype=np.float64)
        self.n = model.n_params
        self.budget = settings.rounds * strategy.buffer_size
        self.direction = np.zeros(self.n)
        self.buffered = []                         # (staleness, client, worker, n_k, loss) of each update
        self.received = self.accepted = self.steps = 0
        self.first_arrival = {}                    # worker -> server steps done when its first update arrived
        self.start, self.elapsed_before = time.perf_counter(), 0.0
        self.checkpoint_every = settings.checkpoint_every if settings.checkpoint else 0
        self.asked = {"due": False, "usr1": False, "term": False}
        self.signals = None                        # the run's SignalFlags (set by the session that serves)
        self.history = {column: [] for column in SCALAR_COLUMNS + LIST_COLUMNS + (
            "failures", "note", "version", "staleness", "clients", "workers")}

    def served(self):
        """The model a session serves: the parameters, then GO or SPENT and the updates received."""
        return np.concatenate([self.params, [SPENT if self.accepted >= self.budget else GO, self.received, 0, 0]])

    def apply(self, model, message, worker, lag):
        """Called by ``serve`` for each push (``lag``: the parameter server's count, unused: a push carries
        the updates received when its worker pulled)."""
        rows, loss, client, based_on = message[self.n:]
        usr1, term = self.signals.take()
        if client < 0 or usr1 or term:  # a worker's or the server's signal: end the session
            self.asked.update(usr1=self.asked["usr1"] or bool(usr1) or (client < 0 and rows > 0),
                              term=self.asked["term"] or bool(term) or (client < 0 and loss > 0))
            if model[self.n] == GO:
                model[self.n] = PAUSE
            if client < 0:
                return
        self.received += 1
        model[self.n + 1] = self.received
        self.first_arrival.setdefault(worker, self.steps)
        if self.accepted >= self.budget:
            return
        strategy = self.strategy
        staleness = self.steps - min(int(based_on), self.budget) // strategy.buffer_size
        self.direction += strategy.weight(staleness) * strategy.contribution(message[:self.n], self.params)
        self.buffered.append((staleness, int(client), worker, float(rows), float(loss)))
        self.accepted += 1
        if len(self.buffered) == strategy.buffer_size:
            self.step(model)

    def step(self, model):
        self.params += (self.strategy.server_lr / self.strategy.buffer_size) * self.direction
        model[:self.n] = self.params
        self.steps += 1
        self.record()
        self.direction[:] = 0.0
        self.buffered = []
        if self.accepted >= self.budget:
            model[self.n] = SPENT
        elif self.checkpoint_every and self.steps % self.checkpoint_every == 0:
            self.asked["due"] = True
            model[self.n] = PAUSE

    def take_requests(self, usr1, term):
        """(budget spent, checkpoint asked for, stop asked for, steps) after a session; clears the requests."""
        asked, self.asked = self.asked, {"due": False, "usr1": False, "term": False}
        return (self.accepted >= self.budget, asked["due"] or asked["usr1"] or bool(usr1),
                asked["term"] or bool(term), self.steps)

    def record(self):
        s, buffered = self.settings, self.buffered
        last = self.steps == s.rounds
        test_loss, test_accuracy = (_evaluate(self.model, self.params, self.test)
                                    if self.steps % s.eval_every == 0 or last else (None, None))
        rows = sum(entry[3] for entry in buffered)
        values = {"round": self.steps, "sampled": len(buffered), "participants": len(buffered), "dropped": 0,
                  "stragglers": 0, "failed": 0, "loss": sum(entry[3] * entry[4] for entry in buffered) / rows,
                  "test_loss": test_loss, "test_accuracy": test_accuracy,
                  "bytes_sent": float(len(buffered) * (self.n + TAIL) * 8), "bytes_received": None,
                  "epsilon": None, "time": self.elapsed(), "failures": [], "note": None,
                  "sampled_clients": [entry[1] for entry in buffered], "dropped_clients": [],
                  "straggler_clients": [], "failed_clients": [], "byzantine_clients": [],
                  "version": self.steps, "staleness": [entry[0] for entry in buffered],
                  "clients": [entry[1] for entry in buffered], "workers": [entry[2] for entry in buffered]}
        for column, value in values.items():
            self.history[column].append(value)
        if self.steps == 1 or self.steps % s.log_every == 0 or last:
            self.log.row(self.steps, len(buffered), max(values["staleness"]), values["loss"],
                         float("nan") if test_accuracy is None else test_accuracy, values["time"])

    def elapsed(self):
        return self.elapsed_before + time.perf_counter() - self.start

    def info(self):
        known = [tau for taus in self.history["staleness"] for tau in taus]
        return {"server_steps": self.steps, "updates_applied": self.accepted,
                "discarded": self.received - self.accepted, "first_arrival": self.first_arrival,
                "max_staleness": max(known, default=0), "mean_staleness": float(np.mean(known)) if known else 0.0}

    def state(self):
        """(shared arrays, meta) of a checkpoint: the model, the partial sum of the buffer, the counters."""
        meta = {"steps": self.steps, "received": self.received, "accepted": self.accepted,
                "buffered": self.buffered, "first_arrival": sorted(self.first_arrival.items()),
                "history": self.history, "elapsed": self.elapsed()}
        return {"params": self.params, "direction": self.direction}, meta

    def load(self, shared, meta):
        self.params = self.model.check_params(np.array(shared["params"], dtype=np.float64))
        self.direction = np.array(shared["direction"], dtype=np.float64)
        self.steps, self.received, self.accepted = (int(meta[key]) for key in ("steps", "received", "accepted"))
        self.buffered = [tuple(entry) for entry in meta["buffered"]]
        self.first_arrival = {int(worker): int(steps) for worker, steps in meta["first_arrival"]}
        self.history = {column: list(values) for column, values in meta["history"].items()}
        self.elapsed_before = float(meta["elapsed"])


def _work(server, clients, pull, signals):
    """A worker's loop (module docstring, steps 1-3) from its ``pull``-th pull until the server's budget is
    spent or a checkpoint is due; returns the pulls made in all."""
    settings, strategy = clients.settings, clients.strategy
    mine = np.array(sorted(clients.local))
    n = clients.model.n_params
    epochs = strategy.local_epochs(settings.local_epochs)
    while mine.size:
        usr1, term = signals.take()
        if usr1 or term:  # the server ends the session: a marker, not an update
            server.push(np.concatenate([np.zeros(n), [usr1, term, -1.0, 0.0]]))
        message, version = server.pull()
        if message[n] != GO:
            return pull
        global_params, based_on = message[:n], message[n + 1]
        count = min(strategy.concurrency, mine.size)
        chosen = np.sort(random_stream(settings.seed, "fedbuff", server.rank, pull).choice(mine, count,
                                                                                           replace=False))
        for outcome in clients.run(pull, [(int(client), epochs) for client in chosen], global_params):
            if outcome.error is not None:  # the session reports it on every rank
                raise outcome.error
            if settings.client_delays is not None:
                time.sleep(settings.client_delays[outcome.client])
            update = outcome.update
            sent = global_params + update.delta if strategy.sends_model else update.delta
            server.push(np.concatenate([sent, [update.weight, update.loss, update.client, based_on]]), version)
        pull += 1
    return pull


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
    return evaluation_mean_exact(sorted(row for part in comm.allgather(mine) for row in part), model.n_classes)
