"""Federated learning with K virtual clients on p MPI ranks: ``run_federated(model, clients, strategy, comm)``.

This module is the synchronous round scheduler; a strategy with ``asynchronous = True`` (FedBuff, FedAsync)
goes to the asynchronous one (:mod:`.asynchronous`).  Both run each client with the same client loop
(:class:`.client.ClientExecution`).

Placement: client k lives on rank ``k % p`` (round-robin, so every rank gets
a share of any sampled subset); ``clients[k]`` is read only there, so
``clients`` may be a lazy sequence.  Each round t:

1. ``strategy.begin_round(t)``; ``strategy.configure_fit(t, K, C, seed,
   client_sampling)`` samples the clients (the same on every rank): max(1, round(C K)) of them ("fixed"), or
   each with probability C ("poisson"; possibly none);
2. each rank runs its sampled clients in turn, in client order: a client
   drops out with probability p (``random_stream(seed, "dropout", t, k)``),
   is a straggler with probability s (``random_stream(seed, "straggler", t,
   k)``: it runs a uniform 1..E epochs, and is left out unless the strategy
   ``keeps_stragglers``), else the client loop runs it.  Down the channel go
   the model and the strategy's instructions (``configure_client``: config
   values and named arrays); the client trains on its rank with a working
   copy of its client state (``begin_client``, :func:`.client.train_client`,
   ``end_client``); up comes its update: delta_k = w_k - w_t, n_k, tau_k,
   ||a_k||_1 and loss_k, with the named extra arrays (``uploads``) and scalar
   metrics the strategy declares, compressed when a ``compressor`` is set
   (:mod:`.uplink`).  The client's state is kept only when its update is
   delivered.  Before the clients train, every hook's ``begin_round(round,
   participants)`` learns the clients that will train (sampled, neither
   dropped nor left out as stragglers: the same on every rank); after a
   client trains, every hook's ``transform_update(update, client, round)``
   sees its update, on the client's rank (client-side clipping and noise,
   masks), and may return None (the upload never arrives: the client counts
   as dropped); an exception in training or a hook makes the client *failed*;
3. one ``allgatherv`` of the reducer (``settings.reducer``) moves every
   reporting client's row to every rank, laid out from the strategy's
   declarations (:class:`.strategy.Layout`: k, n_k, tau_k, ||a_k||_1, loss_k,
   the metrics, delta_k, the extra arrays), and one small ``allgather`` the
   clients' fates (dropped, straggler, failed with its error) and the
   checkpoint signals;
4. failed clients end the run with the same CollectiveError on every rank
   unless ``tolerate_failures``; otherwise every rank sorts the rows by
   client and computes, in client order, Delta = ``strategy.aggregate_fit``
   (or the ``aggregate(updates, round)`` of the one hook that has it: a
   masked sum; with fewer reports than the rule asks for, ``strategy.shortfall``
   is the round's note and a warning once per run on rank 0), then each hook's ``transform_aggregate(delta, round,
   updates)`` (server noise), then ``strategy.server_update(params, delta)``.  No report (none
   sampled, or every sampled client dropped or failed): the model is kept and the round's note
   says so, unless a hook has ``transforms_empty_rounds`` (DP-FedAvg under Poisson sampling,
   whose noise is added every round): its ``transform_aggregate(zeros, round, [])`` is then the
   round's Delta.

Summing in client order makes the model the same bit for bit at any rank
count (and on resume).  The price is the all-gather: each rank receives m w
floats for m reporting clients, w the row's width (n_params + 5 for FedAvg,
plus the declared metrics and extra arrays), where an all-reduce of the
weighted sum would move n_params; for the m << K clients of a round this is
small, and the bytes are in the history (``bytes_sent``: what the clients
uploaded, compressed or not; ``bytes_received``: the model and the
instructions' arrays sent to the clients that trained).  Checkpoints are
written at round boundaries, with each client's state in its rank's part.
"""
import contextlib
import dataclasses
import inspect
import time
import warnings
from collections.abc import Mapping

import numpy as np

from ..collectives import reducer_for
from ..core.checkpoint import Checkpointer
from ..core.comm import CollectiveError, check_collectively, resolve_comm
from ..core.log import IterationLog
from ..core.random import random_stream
from ..core.registry import RegistryError, lookup, options_problem
from ..core.signals import SignalFlags
from ..compression import get_compressor
from .asynchronous import LOG_COLUMNS as ASYNC_LOG_COLUMNS
from .aggregate import evaluation_mean, weighted_mean
from .asynchronous import AsyncFederation, asynchronous_problem
from .attacks import byzantine_clients, forge_updates, get_attack
from .client import ClientExecution, clients_digest, data_problem, local_clients
from .hooks import Hook
from .result import LIST_COLUMNS, SCALAR_COLUMNS, FederatedResult
from .settings import FederatedSettings
from .strategies import get_strategy
from .strategy import RunInfo, Strategy

FORMAT = "mpiopt-federated-checkpoint-2"
LOG_COLUMNS = (("round", "6d"), ("clients", "7d"), ("dropped", "7d"), ("strag.", "6d"), ("failed", "6d"),
               ("byz.", "4d"), ("loss", "14.6e"), ("test acc", "8.4f"), ("MB up", "9.3f"), ("MB down", "9.3f"),
               ("time(s)", "9.3f"))


def run_federated(model, clients, strategy="fedavg", comm=None, *, strategy_options=None, test_data=None,
                  params=None, hooks=(), log_stream=None, attack_options=None, compressor_options=None, **settings):
    """Federated training of ``model`` over the K = len(clients) virtual clients; collective over ``comm``.

    ``clients[k]`` is client k's ``(X_k, y_k)`` (read only on rank k % p);
    ``strategy`` a registered name (built with ``strategy_options``) or a
    :class:`Strategy`; ``test_data`` an optional ``(X, y)`` evaluated every
    ``eval_every`` rounds; ``params`` the starting point (default
    ``model.init_params(seed)``); ``hooks`` a sequence whose entries are
    hook objects, registered hook names (kind ``"hook"``: ``"dp"``,
    ``"secure_aggregation"`` or a user's, built with their defaults) or
    ``(name, options)`` pairs (``("dp", {"clip_norm": 1.0,
    "noise_multiplier": 1.1})``), the options checked against the hook's
    declaration; a hook object has any of
    ``transform_update(update, client, round) -> update``,
    ``transform_aggregate(delta, round, updates) -> delta``, ``epsilon()``,
    ``state_dict()``/``load_state_dict(state)``, ``setup(strategy, n_clients,
    settings) -> problem``, ``begin_round(round, participants)``,
    ``aggregate(updates, round) -> delta``, ``transforms_empty_rounds`` (see
    docs/federated.md and :mod:`.hooks`).
    Settings: :class:`FederatedSettings`.  Returns a :class:`FederatedResult`,
    the same on every rank; bad settings or data raise the same
    CollectiveError on every rank.
    """
    start = time.perf_counter()
    comm = resolve_comm(comm)
    strategy, problem = _strategy(strategy, strategy_options)
    hooks, hooks_problem = _hooks(hooks)
    problem = problem or hooks_problem
    asynchronous = getattr(strategy, "asynchronous", False)
    if asynchronous:  # rank 0 serves; client k lives on worker 1 + k % (p - 1)
        if comm.size < 2:
            problem = problem or asynchronous_problem(strategy, None, (), comm.size, model.n_params)
        owned = range(comm.rank - 1, len(clients), comm.size - 1) if comm.rank else ()
    else:
        owned = range(comm.rank, len(clients), comm.size)
    local, problem = local_clients(model, clients, owned, problem)
    problem = problem or data_problem(model, test_data, params) or _delays_problem(settings, len(clients))
    options = FederatedSettings.collective(comm, problem, agree={
        "clients": len(clients), "model": repr(model), "strategy": repr(strategy)}, **settings)
    if asynchronous:
        check_collectively(comm, asynchronous_problem(strategy, options, hooks, comm.size, model.n_params))
        return _run_asynchronous(model, len(clients), local, strategy, options, comm, params, test_data,
                                 log_stream, start)
    check_collectively(comm, _hooks_problem(hooks, strategy, len(clients), options))
    attack, problem = _built("attack", options.attack, attack_options, get_attack)
    compressor, compressor_problem = _built("compressor", options.compressor, compressor_options, get_compressor)
    check_collectively(comm, problem or compressor_problem)
    columns = LOG_COLUMNS + ((("epsilon", "9.4g"),) if any(hook.reports_epsilon for hook in hooks) else ())
    federation = Federation(model, len(clients), local, strategy, options, comm, params, test_data, hooks,
                            IterationLog(options.verbose and comm.rank == 0, columns, stream=log_stream),
                            attack, compressor)
    try:
        check_collectively(comm, strategy.setup(federation.run_info()))
        return federation.run(start)
    finally:
        federation.close()


def _delays_problem(settings, n_clients):
    """A ``client_delays`` list of the wrong length (a list becomes a tuple, as the settings keep it), or None."""
    delays = settings.get("client_delays")
    if isinstance(delays, list):
        settings["client_delays"] = delays = tuple(delays)
    if isinstance(delays, tuple) and len(delays) != n_clients:
        return f"client_delays has {len(delays)} entries for {n_clients} clients"
    return None


def _run_asynchronous(model, n_clients, local, strategy, settings, comm, params, test_data, log_stream, start):
    """An asynchronous strategy's run (:mod:`.asynchronous`)."""
    params = model.init_params(settings.seed) if params is None else np.array(params, dtype=np.float64)
    run = AsyncFederation(model, n_clients, local, strategy, settings, comm, params, test_data,
                          IterationLog(settings.verbose and comm.rank == 0, ASYNC_LOG_COLUMNS, stream=log_stream))
    try:
        return run.run(start)
    finally:
        run.comm.Free()


def _strategy(strategy, options):
    """(the strategy, None) or (None, the one-line problem): a name's ``options`` are checked against its
    declaration (``registry.options("strategy", name)``) before it is built."""
    if isinstance(strategy, Strategy):
        return strategy, ("strategy_options go with a strategy name, not a Strategy" if options else None) or \
            _signature_problem(strategy)
    built, problem = _built("strategy", strategy, options, get_strategy)
    return built, problem or (_signature_problem(built) if built is not None else None)


def _signature_problem(strategy):
    """A strategy written for the closed channel (``local_gradient(grad, params, global_params)``), or None."""
    parameters = list(inspect.signature(strategy.local_gradient).parameters)
    if len(parameters) == 3 and parameters[2] == "global_params":
        return (f"{type(strategy).__name__}.local_gradient(grad, params, global_params): the third argument is now "
                "the client's ClientRound ctx (the model it received is ctx.global_params)")
    return None


def _built(kind, name, options, build):
    """(``build(name, **options)``, None) once ``options`` meet the declaration of ``kind`` ``name``, or
    (None, the problem): an unknown name or option, a value outside its declaration, the piece's own check."""
    if options is not None and not isinstance(options, Mapping):
        return None, f"{kind}_options must be a dict of option name -> value, got {options!r}"
    problem = options_problem(kind, name, dict(options or {}), complete=True)
    if problem:
        return None, problem
    try:
        return build(name, **(options or {})), None
    except (RegistryError, TypeError, ValueError) as error:
        return None, str(error)


def _hooks(entries):
    """(the hooks, None) or ([], the first problem): each entry is a hook object, a registered hook's name
    (kind ``"hook"``, built with its defaults) or a ``(name, options)`` pair, the options checked against the
    hook's declaration (``registry.options("hook", name)``) before it is built."""
    hooks = []
    for entry in entries:
        if isinstance(entry, str) or (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
            name, options = (entry, None) if isinstance(entry, str) else entry
            hook, problem = _built("hook", name, options, lambda name, **values: lookup("hook", name)(**values))
            if problem:
                return [], problem
            entry = hook
        if not isinstance(entry, Hook):
            return [], (f"a hook must be a mpiopt.federated.Hook (its methods are no-ops to override), a registered "
                        f"hook's name or a (name, options) pair; got {entry!r}")
        hooks.append(entry)
    return hooks, None


def _hooks_problem(hooks, strategy, n_clients, settings):
    """The first hook's problem with this run (its ``setup``), or two hooks that both replace the aggregation."""
    aggregating = [index for index, hook in enumerate(hooks) if hook.replaces_aggregation]
    if len(aggregating) > 1:
        return "at most one hook may replace the aggregation (aggregate), got " + ", ".join(
            repr(hooks[index]) for index in aggregating)
    later = [hook for hook in hooks[aggregating[0] + 1:] if hook.transforms_updates()] if aggregating else []
    if later:  # it would see updates the aggregating hook already encoded (secure aggregation's masks)
        return (f"{later[0]!r} transforms updates after {hooks[aggregating[0]]!r} encodes them; "
                "put it before (differential privacy's clipping goes before secure aggregation)")
    for hook in hooks:
        problem = hook.setup(strategy, n_clients, settings)
        if problem:
            return problem
    return None


@dataclasses.dataclass
class RoundReport:
    """What every rank knows after a round's two collectives."""
    updates: list        # ClientUpdate of each reporting client, in client order
    fates: dict          # client -> "dropped", "straggler" or "failed"
    failures: list       # [{"client": k, "error": message}]
    bytes_sent: float
    bytes_received: float  # the model and the instructions sent to the clients that trained
    checkpoint_requested: bool
    stop_requested: bool
    byzantine: list = dataclasses.field(default_factory=list)  # the reporting clients whose deltas were forged


class Federation:
    """The synchronous round scheduler: ``round`` samples the clients, runs this rank's with the client loop
    and aggregates their updates; ``run`` repeats it and builds the result."""

    def __init__(self, model, n_clients, local, strategy, settings, comm, params, test_data, hooks, log, attack=None,
                 compressor=None):
        self.model, self.n_clients, self.local, self.strategy = model, n_clients, local, strategy
        self.settings, self.log, self.hooks = settings, log, list(hooks)
        self.comm = comm.Dup()
        self.resources = contextlib.ExitStack()  # the reducer when this run built it from its name
        self.reducer = self.resources.enter_context(reducer_for(settings.reducer, comm))
        self.params = np.array(model.init_params(settings.seed) if params is None else params, dtype=np.float64)
        self.test = None if test_data is None else (model.check_inputs(test_data[0]),
                                                    model.check_targets(test_data[1], len(test_data[1])))
        self.history = {column: [] for column in SCALAR_COLUMNS + LIST_COLUMNS + ("failures", "note")}
        self.next_round, self.elapsed_before, self.checkpointer = 0, 0.0, None
        self.warned = False  # the strategy's shortfall is warned once per run
        self.clients = ClientExecution(model, local, strategy, settings, self.hooks, compressor)
        self.attack, self.byzantine = attack, set(int(k) for k in byzantine_clients(n_clients, settings.byzantine,
                                                                                    settings.seed))
        sizes = self.comm.allgather({client: int(y.shape[0]) for client, (_, y) in local.items()})
        self.client_rows = tuple(size for _, size in sorted((k, v) for part in sizes for k, v in part.items()))

    def run_info(self):
        return RunInfo(n_clients=self.n_clients, client_rows=self.client_rows, n_params=self.model.n_params,
                       params=self.params.copy(), settings=self.settings)

    # -- a sampled client's fate -------------------------------------------------------
    def fate(self, round, client):
        """("dropped" | "straggler" | None, local epochs) of a sampled client this round."""
        s, epochs = self.settings, self.strategy.local_epochs(self.settings.local_epochs)
        if s.dropout and random_stream(s.seed, "dropout", round, client).random() < s.dropout:
            return "dropped", 0
        stream = random_stream(s.seed, "straggler", round, client)
        if s.stragglers and stream.random() < s.stragglers:
            epochs = int(stream.integers(1, epochs + 1))
            return (None if self.strategy.keeps_stragglers else "straggler"), epochs
        return None, epochs

    # -- one round ------------------------------------------------------------------------
    def run_clients(self, round, sampled, signals):
        """This rank's sampled clients in turn (the shared client loop), then the round's all-gathers: a
        RoundReport."""
        rows, fates, failures, downlink, uplink, training = [], {}, [], 0, 0, []
        for client in (int(k) for k in sampled if k % self.comm.size == self.comm.rank):
            fate, epochs = self.fate(round, client)
            if fate:
                fates[client] = fate
            else:
                training.append((client, epochs))
        for outcome in self.clients.run(round, training, self.params):
            downlink += outcome.received
            if outcome.error is not None:  # a client's failure is reported, never a hang
                fates[outcome.client] = "failed"
                failures.append({"client": outcome.client,
                                 "error": f"{type(outcome.error).__name__}: {outcome.error}"})
            elif outcome.update is None:
                fates[outcome.client] = "dropped"
            else:
                rows.append(self.clients.layout.row(outcome.update))
                uplink += outcome.sent
        payload = np.concatenate(rows) if rows else np.zeros(0)
        gathered, _ = self.reducer.allgatherv(payload)
        usr1, term = signals.take()
        shared = self.comm.allgather((fates, failures, usr1, term, downlink, uplink))
        all_fates = {k: v for part in shared for k, v in part[0].items()}
        all_failures = sorted((f for part in shared for f in part[1]), key=lambda f: f["client"])
        return RoundReport(self.clients.layout.updates(gathered), dict(sorted(all_fates.items())), all_failures,
                           float(sum(part[5] for part in shared)), float(sum(part[4] for part in shared)),
                           any(part[2] for part in shared), any(part[3] for part in shared))

    def round(self, round, signals):
        s = self.settings
        self.strategy.begin_round(round)
        sampled = self.strategy.configure_fit(round, self.n_clients, s.fraction, s.seed, s.client_sampling)
        if self.hooks:
            participants = [int(k) for k in sampled if self.fate(round, int(k))[0] is None]
            for hook in self.hooks:
                hook.begin_round(round, participants)
        report = self.run_clients(round, sampled, signals)
        if report.failures and not s.tolerate_failures:
            raise CollectiveError({f["client"] % self.comm.size: f"client {f['client']} failed in round {round}: "
                                   f"{f['error']} (tolerate_failures=True leaves it out)" for f in report.failures})
        updates, loss, note = report.updates, None, None
        updates, report.byzantine = forge_updates(updates, self.attack, self.byzantine, round, s.seed)
        transforms = [hook for hook in self.hooks if updates or hook.transforms_empty_rounds]
        if updates:
            note = self.strategy.shortfall(len(updates))
            if note:
                self.warn_once(round, note)
            aggregators = [hook for hook in self.hooks if hook.replaces_aggregation]
            try:  # the same on every rank: a rule that cannot run on this round's reports fails everywhere alike
                delta = (aggregators[0].aggregate(updates, round) if aggregators
                         else self.strategy.aggregate_fit(updates))
            except ValueError as error:
                raise CollectiveError({rank: f"round {round}: {error}" for rank in range(self.comm.size)}) from None
            loss = weighted_mean([update.loss for update in updates], [update.weight for update in updates])
        else:
            delta = np.zeros_like(self.params)
            kept = f"the model takes {type(transforms[0]).__name__}'s step alone" if transforms else "the model is kept"
            note = f"no client {'was sampled' if len(sampled) == 0 else 'reported'}; {kept}"
        for hook in transforms:
            delta = hook.transform_aggregate(delta, round, updates)
        if updates or transforms:
            self.params = self.strategy.server_update(self.params, delta)
        self.record(round, sampled, report, loss, note)
        return report

    def warn_once(self, round, message):
        """A RuntimeWarning on rank 0, the first time in this run that a round needs one."""
        if not self.warned and self.comm.rank == 0:
            warnings.warn(f"round {round + 1}: {message} (warned once per run; each such round's note says so)",
                          RuntimeWarning, stacklevel=2)
        self.warned = True

    def record(self, round, sampled, report, loss, note):
        s, fates = self.settings, list(report.fates.values())
        last = round + 1 == s.rounds
        test_loss, test_accuracy = self.evaluate_test() if (round + 1) % s.eval_every == 0 or last else (None, None)
        epsilons = [hook.epsilon() for hook in self.hooks if hook.reports_epsilon]
        values = {"round": round + 1, "sampled": len(sampled), "participants": len(report.updates),
                  "dropped": fates.count("dropped"), "stragglers": fates.count("straggler"),
                  "failed": fates.count("failed"), "loss": loss, "test_loss": test_loss,
                  "test_accuracy": test_accuracy, "bytes_sent": report.bytes_sent,
                  "bytes_received": report.bytes_received, "epsilon": epsilons[0] if epsilons else None,
                  "time": self.elapsed_before + time.perf_counter() - self.start, "failures": report.failures,
                  "note": note, "sampled_clients": [int(k) for k in sampled],
                  "dropped_clients": [k for k, fate in report.fates.items() if fate == "dropped"],
                  "straggler_clients": [k for k, fate in report.fates.items() if fate == "straggler"],
                  "failed_clients": [f["client"] for f in report.failures], "byzantine_clients": report.byzantine}
        for column, value in values.items():
            self.history[column].append(value)
        if round + 1 == 1 or (round + 1) % s.log_every == 0 or last:
            self.log.row(round + 1, values["participants"], values["dropped"], values["stragglers"],
                         values["failed"], len(report.byzantine), float("nan") if loss is None else loss,
                         float("nan") if test_accuracy is None else test_accuracy, report.bytes_sent / 1e6,
                         report.bytes_received / 1e6, values["time"], float("nan") if values["epsilon"] is None else values["epsilon"])
        if note:
            self.log.note(f"round {round + 1}: {note}")

    # -- evaluation ----------------------------------------------------------------------
    def evaluate_test(self):
        if self.test is None:
            return None, None
        X, y = self.test
        loss = float(self.model.loss(self.params, X, y))
        accuracy = float(np.mean(self.model.predict(self.params, X) == y)) if self.model.n_classes else None
        return loss, accuracy

    def evaluate_clients(self):
        """(loss, accuracy) of the global model over every client's rows, summed in client order."""
        mine = []
        for client, (X, y) in self.local.items():
            correct = int(np.count_nonzero(self.model.predict(self.params, X) == y)) if self.model.n_classes else 0
            mine.append((client, self.model.loss(self.params, X, y) * y.shape[0], correct, y.shape[0]))
        return evaluation_mean(sorted(row for part in self.comm.allgather(mine) for row in part),
                               self.model.n_classes)

    # -- checkpoints -----------------------------------------------------------------------
    def fingerprint(self):
        s, uplink = self.settings, self.clients.uplink
        return {"model": repr(self.model), "n_params": self.model.n_params, "clients": self.n_clients,
                "data": clients_digest(self.local), "strategy": repr(self.strategy),
                "attack": repr(self.attack) if s.byzantine else None,
                "uplink": None if uplink is None else {"compressor": s.compressor,
                                                       "options": uplink.compressor.settings(),
                                                       "feedback": uplink.feedback},
                **{name: getattr(s, name) for name in ("fraction", "client_sampling", "local_epochs", "batch_size",
                                                       "lr", "momentum", "seed", "dropout", "stragglers",
                                                       "tolerate_failures", "byzantine")}}

    def use_checkpoint(self, path):
        self.checkpointer = Checkpointer(path, self.comm, self.fingerprint(), FORMAT, "federated")
        return self.checkpointer.restore(self.restore, _validate)

    def state(self, elapsed):
        shared = {"params": self.params, **{f"strategy_{key}": value
                                            for key, value in self.strategy.state_dict().items()}}
        meta = {"round": self.next_round, "history": self.history, "elapsed": elapsed,
                "hooks": [hook.state_dict() for hook in self.hooks]}
        return shared, self.clients.states.arrays(), meta

    def restore(self, shared, mine, meta):
        self.params = np.array(shared["params"], dtype=np.float64)
        self.model.check_params(self.params)
        self.strategy.load_state_dict({key[len("strategy_"):]: value for key, value in shared.items()
                                       if key.startswith("strategy_")})
        for hook, state in zip(self.hooks, meta.get("hooks", [])):
            if state is not None:
                hook.load_state_dict(state)
        self.clients.states.load(mine)
        self.history = {column: list(values) for column, values in meta["history"].items()}
        self.next_round, self.elapsed_before = int(meta["round"]), float(meta["elapsed"])

    # -- the loop --------------------------------------------------------------------------
    def run(self, setup_start):
        s = self.settings
        if s.checkpoint:
            self.use_checkpoint(s.checkpoint)
        resumed_at, status = self.next_round, "finished"
        self.start = time.perf_counter()
        setup = self.start - setup_start
        info = self.describe(resumed_at)
        self.log.banner("mpiopt federated learning", banner_lines(info, s, setup))
        with SignalFlags(self.checkpointer is not None) as signals:
            while self.next_round < s.rounds:
                report = self.round(self.next_round, signals)
                self.next_round += 1
                every = s.checkpoint_every and self.next_round % s.checkpoint_every == 0
                if self.checkpointer is not None and (every or report.checkpoint_requested or report.stop_requested):
                    self.checkpointer.write(*self.state(self.elapsed()))
                if report.stop_requested:
                    status = "interrupted"
                    break
        if self.checkpointer is not None and status == "finished" and self.next_round > resumed_at:
            self.checkpointer.write(*self.state(self.elapsed()))
        loss, accuracy = self.evaluate_clients()
        rounds_time = time.perf_counter() - self.start
        stop = "rounds" if status == "finished" else "signal"
        result = FederatedResult(
            status=status, history=self.history, timings={"setup": setup, "rounds": rounds_time,
                                                          "total": setup + rounds_time},
            info=dict(info, rounds_run=self.next_round - resumed_at, stop=stop),
            params=self.params, rounds=self.next_round,
            loss=loss, accuracy=accuracy, test_accuracy=self.evaluate_test()[1])
        self.log.footer(footer_lines(result))
        return result

    def elapsed(self):
        return self.elapsed_before + time.perf_counter() - self.start

    def describe(self, resumed_at):
        rows = list(self.client_rows)
        return {"ranks": self.comm.size, "model": repr(self.model), "n_params": self.model.n_params,
                "strategy": self.strategy.name, "strategy_options": self.strategy.option_values(),
                "keeps_stragglers": self.strategy.keeps_stragglers, "clients": self.n_clients, "client_rows": rows,
                "placement": "client k on rank k % ranks", "reducer": self.reducer.name, "sampling": self.sampling(),
                "settings": self.settings.as_dict(), "resumed_at": resumed_at,
                "byzantine_clients": sorted(self.byzantine), "flags": {
                    flag: getattr(self.strategy, flag) for flag in ("averages", "uploads_state", "asynchronous")}}

    def sampling(self):
        """How each round's clients are drawn, in words (the banner and ``info``)."""
        s, n_clients = self.settings, self.n_clients
        if s.client_sampling == "poisson":
            return f"poisson: each client with probability {s.fraction:g}, {s.fraction * n_clients:g} expected"
        return f"{self.strategy.sample_size(n_clients, s.fraction)} of {n_clients} without replacement"

    def close(self):
        self.resources.close()
        self.comm.Free()


def _validate(shared, parts, meta):
    """Rank 0's check that the file holds what a federated checkpoint holds."""
    missing = [key for key in ("round", "history", "elapsed") if key not in meta]
    if missing or "params" not in shared:
        raise ValueError(f"entries {', '.join(missing + ([] if 'params' in shared else ['params']))} are missing")


def banner_lines(info, settings, setup):
    rows = info["client_rows"]
    return [f"model:     {info['model']}",
            f"strategy:  {info['strategy']} {info['strategy_options']}; "
            f"{'keeps' if info['keeps_stragglers'] else 'drops'} stragglers",
            f"clients:   {info['clients']} on {info['ranks']} ranks (client k on rank k % {info['ranks']}); "
            f"{sum(rows)} rows, {min(rows)}-{max(rows)} per client",
            f"rounds:    {settings.rounds}, fraction {settings.fraction} ({info['sampling']}), "
            f"E={settings.local_epochs}, B={settings.batch_size}, lr={settings.lr}; dropout {settings.dropout}, "
            f"stragglers {settings.stragglers}",
            *([f"uploads:   compressed by {settings.compressor}, feedback {settings.uplink_feedback}"]
              if settings.compressor != "none" else []),
            *([f"byzantine: {len(info['byzantine_clients'])} clients ({settings.byzantine:g} of K), attack "
               f"{settings.attack}"] if settings.byzantine else []),
            f"setup:     {setup:.3f} s" + (f"; resumed at round {info['resumed_at']}" if info["resumed_at"] else "")]


def footer_lines(result):
    accuracy = "" if result.accuracy is None else f", accuracy {result.accuracy:.4f}"
    test = "" if result.test_accuracy is None else f"; test accuracy {result.test_accuracy:.4f}"
    return [f"status:    {result.status} after {result.rounds} rounds",
            f"clients:   loss {result.loss:.8e}{accuracy}{test}",
            f"time:      {result.timings['rounds']:.3f} s"]
