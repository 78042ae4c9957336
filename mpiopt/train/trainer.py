"""Data-parallel training of a model on MPI ranks: DDP's gradient buckets and overlap, ZeRO stages 1-3.

Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB 2020; Rajbhandari et al., "ZeRO: Memory Optimizations Toward
Training Trillion Parameter Models", SC 2020.

Every rank holds the whole training set (replicated, as
:func:`mpiopt.data.load_dataset` gives it).  Step s takes the global batch of
:class:`~mpiopt.data.MinibatchSampler` (the same at any rank count) and rank r
reads its ``row_range`` slice of it, n_r of the batch's n rows.  With
g_r = the model's gradient of the mean loss over rank r's rows,

    g = (1/n) sum_r n_r g_r

is exactly the gradient of the mean loss over the global batch (the penalty
too: the weights n_r / n add up to one), so a run at p ranks takes the
single-process steps up to the order of floating-point sums.  The backward
pass writes g_r layer by layer; each bucket of about ``bucket_bytes`` is
scaled by n_r and handed to the reducer as soon as it is complete
(:mod:`.buckets`, :mod:`.overlap`), and the ZeRO stage decides what is reduced,
stepped and gathered (:mod:`.zero`).  After the optimizer step one small
all-reduce carries the batch's loss and accuracy, the bytes and seconds of
communication and the checkpoint signals (SIGUSR1: write a checkpoint;
SIGTERM: write one and stop).

Cost per step and rank: the forward and backward pass over n/p rows, the
optimizer on n_params (stage 0) or n_params/p entries (stages 1-3), the
stage's collectives (:mod:`.zero`) and one all-reduce of seven numbers.

On a GPU (CuPy data, or ``device="gpu"``) the same loop runs with the data,
the parameters, the gradients and the optimizer state kept on the device
across steps: the model and the optimizer compute with CuPy, the sampler's
host indices pick the batch's rows on the device, and only the reducer's
buffers (staged through pinned memory unless MPI is CUDA-aware) and the
step's few numbers cross to the host.  ``TrainResult.params`` is then a CuPy
array (``mpiopt.core.backend.to_host`` gives a numpy copy).
"""
import contextlib
import dataclasses
import time

import numpy as np
from mpi4py import MPI

from ..collectives import reducer_for
from ..core.backend import device_of, finite_problem, get_array_module, select_device, to_host, to_module
from ..core.comm import resolve_comm
from ..core.partition import row_range
from ..core.signals import SignalFlags
from ..core.threads import blas_threads, plan_blas_threads
from ..data.minibatch import MinibatchSampler, take
from .buckets import BucketLayout
from .checkpoint import data_digest, join_tree, split_optimizer, split_tree, train_checkpointer, validate
from .memory import MemoryAccount
from .named import named_pieces
from .overlap import CommunicationQueue
from .printing import banner_lines, footer_lines, train_log
from .result import STOPS, TrainResult
from .settings import TrainSettings
from .zero import STAGES

STEP_COLUMNS = ("step", "epoch", "loss", "accuracy", "rows", "bytes_sent", "time", "communication", "exposed")
EPOCH_COLUMNS = ("epoch", "steps", "loss", "accuracy", "bytes_sent", "time")


@dataclasses.dataclass
class StepReport:
    """What the ranks agree on after a step (from the step's small all-reduce)."""
    loss: float
    accuracy: float
    checkpoint_requested: bool
    stop_requested: bool


def train(model, X_local, y_local, optimizer, comm=None, *, params=None, log_stream=None, model_options=None,
          optimizer_options=None, **settings):
    """Train ``model`` with ``optimizer`` on the rows of ``X_local``, ``y_local``; collective over ``comm``.

    ``model`` and ``optimizer`` are objects, or registered names built on every rank with ``model_options``
    and ``optimizer_options`` through their declarations (a model's ``n_features`` defaults to the columns of
    ``X_local``; :mod:`.named`).  ``reducer`` is a registered name with ``reducer_options`` and ``compressor``
    one with ``compressor_options`` (``compressor="powersgd", compressor_options={"rank": 4}``), each dict
    checked against its piece's declaration and passed to it as it is.

    Every rank passes the whole training set (the same on every rank; each
    reads its share of every global batch), its own optimizer (stages 1-3
    give it only this rank's shard) and the same settings (see
    :class:`TrainSettings`: ``epochs``, ``batch_size`` (global), ``zero_stage``,
    ``bucket_bytes``, ``overlap``, ``reducer``, ``compressor``,
    ``checkpoint``, ``device``, ...).  ``params`` is the starting point (default
    ``model.init_params(seed)``), moved to where the data are.  Returns a
    :class:`TrainResult`, the same on every rank.  Invalid settings or data
    raise the same CollectiveError on every rank (NaN or inf in the features, the
    targets or ``params`` too, on any rank).

    The run goes where the data are: CuPy ``X_local`` and ``y_local`` train on
    their GPU, numpy ones on the CPU; ``device="gpu"`` first moves numpy data
    to this rank's GPU (chosen by local rank), ``device="cpu"`` moves CuPy
    data to the host (see the module docstring).
    """
    setup_start = time.perf_counter()
    comm = resolve_comm(comm)
    model, optimizer, problem = named_pieces(model, model_options, optimizer, optimizer_options, X_local)
    X, y, data_problem = (X_local, y_local, None) if problem else _check_data(model, X_local, y_local, params)
    problem = problem or data_problem
    digest = data_digest(X, y) if problem is None else None
    options = TrainSettings.collective(comm, problem, agree={"rows": None if problem else y.shape[0],
                                                             "model": repr(model), "data (replicated)": digest},
                                       **settings)
    X, y = place(options.device, comm, X, y)
    with device_of(X), blas_threads(plan_blas_threads(options.blas_threads, comm)) as threads:
        trainer = Trainer(model, X, y, optimizer, options, comm, params, digest, train_log(
            options.verbose and comm.rank == 0, log_stream))
        try:
            return trainer.run(setup_start, threads)
        finally:
            trainer.close()


def _check_data(model, X, y, params):
    """(X, y, problem): the data as arrays, and what is wrong with them or with ``params`` (or None): shapes,
    labels, and NaN or inf anywhere (:func:`~mpiopt.core.backend.finite_problem`, as the ADMM solvers check)."""
    try:
        X = model.check_inputs(X)
        y = model.check_targets(y, X.shape[0])
        if X.shape[0] == 0:
            return X, y, "the training set has no rows"
        if params is not None:
            params = model.check_params(params)
    except ValueError as error:
        return X, y, str(error)
    problem = (finite_problem("X_local (the features)", X) or finite_problem("y_local (the targets)", y)
               or (finite_problem("params", params) if params is not None else None))
    probe = getattr(model, "batch_problem", None)  # a model that can fail on a batch says so first (TorchModel)
    if problem is None and probe is not None:
        problem = probe(model.init_params(0) if params is None else params, X, y)
    return X, y, problem


def place(device, comm, X, y):
    """(X, y) where the run goes: moved to the host for ``"cpu"``, to this rank's GPU for ``"gpu"``
    (collective: :func:`~mpiopt.core.backend.select_device` splits ``comm`` by node), left where X is
    for None (y joins X)."""
    if device == "gpu":
        select_device(comm)
        import cupy
        xp = cupy
    else:
        xp = np if device == "cpu" else get_array_module(X)
    return to_module(X, xp), to_module(y, xp)


def reducer_options(settings):
    """``get_reducer``'s options for the reducer named by ``settings.reducer`` (a Reducer object given is used as
    it is): the reducer's own options, and with a compressor the compressed reducer's, each piece's as given."""
    options = {"check": False}  # every bucket's size is fixed by construction
    if settings.compressor is None:
        return dict(options, **(settings.reducer_options or {}))
    # error feedback None: the compressor's own choice, as get_reducer makes it (unbiased ones get none)
    return dict(options, compressor=settings.compressor, compressor_options=settings.compressor_options or {},
                reducer_options=settings.reducer_options or {}, error_feedback=settings.error_feedback,
                mode=settings.compression_mode)


class Trainer:
    """The training loop: ``step`` takes one optimizer step, ``run`` repeats it and builds the result."""

    def __init__(self, model, X, y, optimizer, settings, comm, params, digest, log):
        self.model, self.X, self.y, self.optimizer, self.settings, self.log = model, X, y, optimizer, settings, log
        with contextlib.ExitStack() as stack:  # closed by close(); here only when the construction fails
            self.comm = comm.Dup()  # the per-step all-reduce and the evaluation; the reducer has its own
            stack.callback(self.comm.Free)
            # A reducer named is built and owned (closed with the stack); a Reducer object is the caller's.
            self.reducer = stack.enter_context(reducer_for(settings.reducer, comm, **reducer_options(settings)))
            # A compressor that works on each tensor in its own shape (PowerSGD) gets buckets of whole tensors.
            per_tensor = getattr(self.reducer, "per_tensor", False)
            self.layout = BucketLayout(model.layer_bounds(), settings.bucket_bytes, settings.zero_stage >= 2,
                                       comm.rank, comm.size, tensor_shapes=model.shapes if per_tensor else None)
            self.memory = MemoryAccount(settings.trace_memory)
            stack.callback(self.memory.close)
            self.xp = get_array_module(X)  # numpy, or CuPy: the run's arrays live where the data are
            self.device = None if self.xp is np else X.device.id
            self.queue = CommunicationQueue(settings.overlap, self.device)
            stack.callback(self.queue.close)
            start = to_module(model.init_params(settings.seed) if params is None else params, self.xp)
            self.strategy = STAGES[settings.zero_stage](model, start, self.layout, self.reducer, self.queue,
                                                        self.memory)
            self.sampler = MinibatchSampler(y.shape[0], settings.batch_size, settings.seed, comm,
                                            shuffle=settings.shuffle, drop_last=settings.drop_last)
            self.stack = stack.pop_all()
        self.history = {column: [] for column in STEP_COLUMNS}
        self.epoch_history = {column: [] for column in EPOCH_COLUMNS}
        self.elapsed_before = self.compute_time = self.optimizer_time = 0.0
        self.checkpointer = None
        self.digest = digest

    # -- checkpoints ----------------------------------------------------------------
    def fingerprint(self):
        s = self.settings
        return {"model": repr(self.model), "n_params": self.model.n_params, "data": self.digest,
                "rows": int(self.y.shape[0]), "batch_size": s.batch_size, "seed": s.seed, "shuffle": s.shuffle,
                "drop_last": s.drop_last, "zero_stage": s.zero_stage, "bucket_bytes": s.bucket_bytes,
                "optimizer": self.optimizer.name, "compressor": s.compressor,
                "compressor_options": s.compressor_options, "error_feedback": self.error_feedback(),
                # the mode moves the payloads (fp16's sums round in transit or not); named only when chosen,
                # so that a run in the default mode keeps the fingerprint it always had
                **({"compression_mode": s.compression_mode} if s.compression_mode != "auto" else {}),
                # every hyperparameter: a resume at another lr, momentum, ... is refused, naming it
                **{f"optimizer {name}": value for name, value in self.optimizer.hyperparameters().items()}}

    def error_feedback(self):
        """Whether the reducer's compressor runs with error feedback (None without compression)."""
        return getattr(self.reducer, "error_feedback", None)

    def use_checkpoint(self, path):
        """Checkpoint to ``path`` and resume from it when it exists (collective); returns whether it resumed."""
        self.checkpointer = train_checkpointer(path, self.comm, self.fingerprint())
        saved = {}
        resumed = self.checkpointer.restore(lambda *state: saved.update(state=state) or self.restore(*state),
                                            validate)
        if resumed:
            self.sampler.load_state_dict(saved["state"][2]["sampler"])  # collective: outside restore's apply
        return resumed

    def state(self, elapsed):
        shared, mine = ({key: to_host(value) for key, value in part.items()} for part in self.strategy.state())
        values, arrays = split_optimizer(self.optimizer.state_dict())
        (shared if self.settings.zero_stage == 0 else mine).update(
            {f"optimizer_{key}": value for key, value in arrays.items()})
        reducer_values, reducer_arrays = split_tree(self.reducer_state())
        mine.update({f"reducer.{key}": value for key, value in reducer_arrays.items()})
        meta = {"sampler": self.sampler.state_dict(), "optimizer": values, "reducer": reducer_values,
                "history": self.history, "epoch_history": self.epoch_history, "elapsed": elapsed}
        return shared, mine, meta

    def restore(self, shared, mine, meta):
        self.strategy.restore(shared, mine)
        optimizer_arrays = shared if self.settings.zero_stage == 0 else mine
        self.optimizer.load_state_dict(dict(meta["optimizer"], **{
            key[len("optimizer_"):]: value for key, value in optimizer_arrays.items() if key.startswith("optimizer_")}))
        self.memory.set("optimizer_state", *self.optimizer.state.values())
        if meta["reducer"]:
            self.reducer.load_state_dict(join_tree(meta["reducer"], {
                key[len("reducer."):]: value for key, value in mine.items() if key.startswith("reducer.")}))
        self.history = {column: list(meta["history"][column]) for column in STEP_COLUMNS}
        self.epoch_history = {column: list(meta["epoch_history"][column]) for column in EPOCH_COLUMNS}
        self.elapsed_before = float(meta["elapsed"])

    def reducer_state(self):
        """The reducer's own state (a compressed reducer's error-feedback residuals), or nothing."""
        state_dict = getattr(self.reducer, "state_dict", None)
        return state_dict() if state_dict is not None else {}

    def checkpoint(self, elapsed, now):
        if self.checkpointer is not None and now:
            self.checkpointer.write(*self.state(elapsed))

    # -- one step -------------------------------------------------------------------
    def correct(self, scores, labels):
        """How many of the batch's rows the model classifies right (0 for a regression)."""
        if self.model.n_classes is None or labels.size == 0:
            return 0
        xp = get_array_module(scores)
        predicted = scores > 0 if scores.ndim == 1 else xp.argmax(scores, axis=1)
        return int(xp.count_nonzero(predicted == labels))

    def step(self, signals):
        """One optimizer step on the sampler's next global batch; returns the ranks' StepReport."""
        strategy, queue, step = self.strategy, self.queue, self.sampler.step
        rows, global_rows = self.sampler.batch(step), self.sampler.global_batch(step).size
        self.sampler.step += 1
        exposed, communication, sent, waited = queue.exposed, queue.communication, self.strategy.bytes_sent, queue.waited
        strategy.begin(rows.size)
        tick = time.perf_counter()
        X, y = take(rows, self.X, self.y)
        loss, scores = self.model.loss_and_grad_by_layer(strategy.fetch, X, y, strategy.grad_of, strategy.ready)
        correct = self.correct(scores, y)
        strategy.finish(global_rows)
        tock = time.perf_counter()
        self.compute_time += tock - tick - (queue.waited - waited)  # every wait, communication or not
        waited = queue.waited
        strategy.step(self.optimizer)
        self.optimizer_time += time.perf_counter() - tock - (queue.waited - waited)
        usr1, term = signals.take()
        sums = np.array([loss * rows.size, correct, self.strategy.bytes_sent - sent, queue.communication - communication,
                         queue.exposed - exposed, usr1, term], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        size = self.comm.size
        report = StepReport(loss=float(sums[0]) / global_rows,
                            accuracy=float(sums[1]) / global_rows if self.model.n_classes else None,
                            checkpoint_requested=sums[5] > 0, stop_requested=sums[6] > 0)
        self.record(step, report, global_rows, sums[2] / size, sums[3] / size, sums[4] / size)
        return report

    def record(self, step, report, global_rows, bytes_sent, communication, exposed):
        """A row of the step history, and of the epoch history when the step ends an epoch."""
        epoch = step // self.sampler.steps_per_epoch
        values = (step + 1, epoch, report.loss, report.accuracy, global_rows, float(bytes_sent),
                  self.elapsed_before + time.perf_counter() - self.start, float(communication), float(exposed))
        for column, value in zip(STEP_COLUMNS, values):
            self.history[column].append(value)
        if (step + 1) % self.sampler.steps_per_epoch == 0:
            self.record_epoch(epoch)

    def record_epoch(self, epoch):
        """The epoch's mean loss and accuracy over its rows, its bytes and the time at its end."""
        h = self.history
        mine = [index for index, value in enumerate(h["epoch"]) if value == epoch]
        rows = np.array([h["rows"][index] for index in mine], dtype=np.float64)
        loss = float(np.dot(rows, [h["loss"][index] for index in mine]) / rows.sum())
        accuracy = (float(np.dot(rows, [h["accuracy"][index] for index in mine]) / rows.sum())
                    if self.model.n_classes else None)
        values = (epoch, len(mine), loss, accuracy, float(sum(h["bytes_sent"][index] for index in mine)),
                  h["time"][mine[-1]])
        for column, value in zip(EPOCH_COLUMNS, values):
            self.epoch_history[column].append(value)

    def log_row(self, done):
        h, last = self.history, len(self.history["step"]) - 1
        step = h["step"][last]
        if self.log is None or not (done or step == 1 or step % self.settings.log_every == 0):
            return
        communication, exposed = h["communication"][last], h["exposed"][last]
        hidden = 1.0 - exposed / communication if communication > 0 else 0.0
        accuracy = h["accuracy"][last]
        self.log.row(step, h["epoch"][last], h["loss"][last], float("nan") if accuracy is None else accuracy,
                     h["bytes_sent"][last] / 1e6, 1e3 * communication, max(hidden, 0.0), h["time"][last])

    # -- the loop -------------------------------------------------------------------
    def total_steps(self):
        total = self.settings.epochs * self.sampler.steps_per_epoch
        return total if self.settings.max_steps is None else min(total, self.settings.max_steps)

    def run(self, setup_start, threads):
        s = self.settings
        resumed = self.use_checkpoint(s.checkpoint) if s.checkpoint else False
        resumed_at = self.sampler.step
        setup_time = time.perf_counter() - setup_start
        info = self.describe()
        if self.log is not None:
            self.log.banner("mpiopt data-parallel training", banner_lines(info, s, threads, resumed_at, setup_time))
            if resumed and resumed_at >= self.total_steps():
                self.log.note(f"resumed at step {resumed_at}, nothing left to do")
        self.start = time.perf_counter()
        stop = self.loop()
        train_time = time.perf_counter() - self.start
        result = self.result(STOPS[stop], dict(info, stop=stop), setup_time, train_time, resumed_at)
        if self.log is not None:
            self.log.footer(footer_lines(result))
        return result

    def loop(self):
        """Take the steps left; returns why they stopped (``info["stop"]``: a key of :data:`.result.STOPS`)."""
        s, total, stop = self.settings, self.total_steps(), None
        with SignalFlags(self.checkpointer is not None) as signals:
            while stop is None and self.sampler.step < total:
                report = self.step(signals)
                elapsed = time.perf_counter() - self.start
                stop = ("signal" if report.stop_requested else
                        "time_limit" if s.time_limit and elapsed >= s.time_limit else None)
                done = stop is not None or self.sampler.step >= total
                self.log_row(done)
                every = s.checkpoint_every and self.sampler.step % s.checkpoint_every == 0
                self.checkpoint(self.elapsed_before + elapsed, done or report.checkpoint_requested or every)
        if stop is None:
            stop = "epochs" if self.sampler.step >= s.epochs * self.sampler.steps_per_epoch else "max_steps"
        return stop

    # -- the answer -----------------------------------------------------------------
    def evaluate(self, params):
        """(loss, accuracy) over the whole training set at ``params``, each rank taking its rows (collective)."""
        start, stop = row_range(self.y.shape[0], self.comm.rank, self.comm.size)
        X, y = self.X[start:stop], self.y[start:stop]
        correct = int(self.xp.count_nonzero(self.model.predict(params, X) == y)) if self.model.n_classes else 0
        sums = np.array([self.model.loss(params, X, y) * (stop - start), correct])
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        rows = self.y.shape[0]
        return float(sums[0]) / rows, (float(sums[1]) / rows if self.model.n_classes else None)

    def describe(self):
        s = self.settings
        notes = [self.queue.note] if self.queue.note else []
        return {"ranks": self.comm.size, "model": repr(self.model), "n_params": self.model.n_params,
                "rows": int(self.y.shape[0]), "steps_per_epoch": self.sampler.steps_per_epoch,
                "optimizer": repr(self.optimizer), "reducer": self.reducer.name, "compressor": s.compressor,
                "error_feedback": self.error_feedback(),
                "overlap": self.queue.threaded, "zero_stage": s.zero_stage, "buckets": self.layout.describe(),
                "data": "replicated", "device": "cpu" if self.device is None else f"gpu {self.device}",
                "settings": s.as_dict(), "notes": notes}

    def timings(self, setup_time, train_time, steps_run):
        """Seconds of this run: communication and exposed are the sums of its steps' rows of the history
        (each averaged over the ranks, as the log shows them), so the summary is what the rows add up to;
        per bucket the same averages (collective)."""
        queue, h = self.queue, self.history
        first = len(h["step"]) - steps_run
        communication, exposed = float(sum(h["communication"][first:])), float(sum(h["exposed"][first:]))
        hidden = max(communication - exposed, 0.0)  # >= 0 on every rank and step; max() for the roundings only
        reduce_labels = sorted(label[1] for label in queue.by_label if label[0] == "reduce")
        buckets = np.array([queue.by_label[("reduce", k)] for k in reduce_labels], dtype=np.float64).reshape(-1, 2)
        self.comm.Allreduce(MPI.IN_PLACE, buckets, op=MPI.SUM)
        buckets /= self.comm.size
        return {"setup": setup_time, "train": train_time, "compute": self.compute_time,
                "optimizer": self.optimizer_time, "communication": communication, "exposed": exposed,
                "hidden": hidden, "overlap_fraction": hidden / communication if communication > 0 else 0.0,
                "bucket_communication": buckets[:, 0].tolist(), "bucket_exposed": buckets[:, 1].tolist(),
                "total": setup_time + train_time}

    def result(self, status, info, setup_time, train_time, resumed_at):
        memory = self.memory.report()  # before the final gather of stage 3, which is not training
        per_rank = self.comm.allgather(memory)
        params = self.strategy.full_params()
        loss, accuracy = self.evaluate(params)
        info = dict(info, memory={key: max(rank[key] for rank in per_rank) for key in memory},
                    memory_per_rank=per_rank, resumed_at=resumed_at, steps_run=self.sampler.step - resumed_at)
        timings = self.timings(setup_time, train_time, self.sampler.step - resumed_at)
        timings["total"] = time.perf_counter() - self.start + setup_time
        return TrainResult(status=status, history=self.history, timings=timings, info=info, params=params,
                           loss=loss, accuracy=accuracy, steps=self.sampler.step, epoch_history=self.epoch_history)

    def close(self):
        """The queue, the memory trace, the reducer when the trainer built it, the communicator."""
        self.stack.close()
