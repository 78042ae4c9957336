"""Per-rank minibatches of one global sample sequence, the same at any number of ranks.

Step s (counted from 0 over all epochs) is step k = s mod S of epoch
e = s // S, with S = ``steps_per_epoch`` (ceil(n / B), or floor(n / B) with
``drop_last``).  Its global batch is

    order_e[k B : min((k + 1) B, n)],   order_e = random_stream(seed, "minibatch", e).permutation(n)

(``order_e = 0, 1, ..., n-1`` without ``shuffle``), so every epoch visits every
sample once (``drop_last`` skips the last n mod B of its order), and rank r of
p gets the ``row_range(len(batch), r, p)`` slice of it: the ranks' batches,
concatenated in rank order, are the global batch.  When a batch has fewer
indices than there are ranks, the last ranks get empty batches.

The indices are rows of the whole data set, and each rank reads its own rows:
the data must be readable by index on every rank (replicated, as
:func:`~mpiopt.data.load_dataset` gives small sets, or read from a file by
row).  This is what data-parallel SGD needs: the union of the ranks' rows is
the single-process batch, so averaging the ranks' gradients weighted by their
row counts gives the single-process gradient step for step, and a run can
resume at another number of ranks.  (Sampling each rank's batch from its own
shard instead would tie the sequence to the number of ranks.)

Cost: one permutation of n indices per epoch (cached), O(B / p) per batch; no
communication after the constructor.

The indices are always numpy arrays, drawn on the host, so a run on the GPU
visits the samples in exactly the order of a run on the CPU; :func:`take`
reads the rows of numpy or CuPy data (the indices then go to the device, B / p
integers per batch; the data stay there).
"""
import numpy as np

from ..core.backend import get_array_module
from ..core.comm import check_collectively, first_problem, resolve_comm
from ..core.partition import row_range
from ..core.random import random_stream, seed_problem

SETTINGS = ("n_samples", "batch_size", "seed", "shuffle", "drop_last")


def take(indices, *arrays):
    """The rows ``indices`` (host integers, a sampler's batch) of each array, on the array's side: numpy
    fancy indexing for numpy arrays; for CuPy arrays the indices are copied to the device once."""
    on_device = {}
    rows = []
    for array in arrays:
        xp = get_array_module(array)
        if xp is np:
            rows.append(array[indices])
        else:
            if xp not in on_device:
                on_device[xp] = xp.asarray(indices)
            rows.append(array[on_device[xp]])
    return tuple(rows)


def _is_count(value, least):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= least


class MinibatchSampler:
    """Iterate for the rest of the current epoch's batches, or ask ``batch(step)`` for any step.

    Collective: the constructor and :meth:`load_state_dict` (every rank of
    ``comm`` calls them with the same arguments); nothing else communicates.
    """

    def __init__(self, n_samples, batch_size, seed, comm=None, shuffle=True, drop_last=False):
        self.comm = resolve_comm(comm)
        problem = first_problem([
            (_is_count(n_samples, 1), f"n_samples must be an integer >= 1, got {n_samples!r}"),
            (_is_count(batch_size, 1), f"batch_size must be an integer >= 1, got {batch_size!r}"),
            (seed_problem(seed) is None, lambda: seed_problem(seed)),
            (lambda: not drop_last or batch_size <= n_samples,
             f"drop_last with batch_size={batch_size!r} > n_samples={n_samples!r} leaves no batch"),
        ])
        check_collectively(self.comm, problem, {"n_samples": n_samples, "batch_size": batch_size, "seed": seed,
                                                "shuffle": shuffle, "drop_last": drop_last})
        self.n_samples, self.batch_size, self.seed = int(n_samples), int(batch_size), int(seed)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        whole, partial = divmod(self.n_samples, self.batch_size)
        self.steps_per_epoch = whole + (partial > 0 and not self.drop_last)
        self.step = 0  # the next step iteration hands out
        self._cached = (None, None)  # (epoch, its order)

    def __repr__(self):
        return (f"MinibatchSampler(n_samples={self.n_samples}, batch_size={self.batch_size}, seed={self.seed}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, step={self.step}, "
                f"rank {self.comm.rank} of {self.comm.size})")

    def __len__(self):
        return self.steps_per_epoch

    @property
    def epoch(self):
        """The epoch of the next step."""
        return self.step // self.steps_per_epoch

    def order(self, epoch):
        """The order in which ``epoch`` visits the samples (read-only; the latest epoch asked is cached)."""
        if self._cached[0] != epoch:
            if self.shuffle:
                order = random_stream(self.seed, "minibatch", epoch).permutation(self.n_samples)
            else:
                order = np.arange(self.n_samples)
            order.flags.writeable = False
            self._cached = (epoch, order)
        return self._cached[1]

    def global_batch(self, step):
        """All ranks' indices at ``step``."""
        if not _is_count(step, 0):
            raise ValueError(f"step must be an integer >= 0, got {step!r}")
        epoch, within = divmod(int(step), self.steps_per_epoch)
        start = within * self.batch_size
        return self.order(epoch)[start:min(start + self.batch_size, self.n_samples)].copy()

    def batch(self, step):
        """This rank's indices at ``step``: its ``row_range`` slice of the global batch (possibly empty)."""
        indices = self.global_batch(step)
        start, stop = row_range(indices.size, self.comm.rank, self.comm.size)
        return indices[start:stop]

    def __iter__(self):
        """This rank's batches for the rest of the current epoch; ``step`` counts each as handed out."""
        end = (self.epoch + 1) * self.steps_per_epoch
        while self.step < end:
            self.step += 1
            yield self.batch(self.step - 1)

    def state_dict(self):
        """The next step and the settings (plain numbers)."""
        return {"step": self.step, **{name: getattr(self, name) for name in SETTINGS}}

    def load_state_dict(self, state):
        """Resume at ``state["step"]`` (collective); the settings must be this sampler's, the rank count may differ."""
        values = {name: value.item() if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0
                  else value for name, value in dict(state).items()}
        problem = first_problem(
            [(name in values, f"the sampler state lacks {name!r}") for name in ("step",) + SETTINGS]
            + [(lambda: _is_count(values["step"], 0), lambda: f"step must be an integer >= 0, got {values['step']!r}")]
            + [(lambda name=name: values[name] == getattr(self, name),
                lambda name=name: f"the saved {name}={values[name]!r} differs from this sampler's "
                                  f"{getattr(self, name)!r}") for name in SETTINGS])
        check_collectively(self.comm, problem, {"step": values.get("step")})
        self.step = int(values["step"])
