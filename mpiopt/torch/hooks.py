"""DDP communication hooks for every mpiopt compressor: ``state, hook = comm_hook(name, ...)``.

    model = torch.nn.parallel.DistributedDataParallel(module)
    state, hook = mpiopt.torch.comm_hook("topk", ratio=0.01)      # error feedback on: Top-K is biased
    model.register_comm_hook(state, hook)

DDP calls the hook with each gradient bucket once its gradients are complete; the hook all-reduces the
bucket's mean through an mpiopt :class:`~mpiopt.collectives.CompressedReducer` over the MPI communicator
``comm`` (the payloads travel over MPI, not through torch.distributed), writes it into the bucket and returns
a completed future.  What it does is what ``train()`` does with a compressor:

* **Compressors**: any registered name (``fp16``, ``bf16``, ``qsgd``, ``qsgd4``, ``sign``, ``topk``,
  ``randomk``, ``powersgd``, a plugin's) with its options (``ratio=0.01``, ``rank=4``, ``bits=4``, ...),
  checked against its declaration on every rank before any bucket moves.
* **Error feedback** (``error_feedback``): None (the compressor's default: on for the biased ones, sign,
  Top-K, PowerSGD, off for the unbiased), True, False, or ``"ef21"`` (EF21, one-round compressors).
  Residuals, EF21 estimates, warm starts and random draws are kept per bucket, under the name
  ``bucket{index}[{elements}]``, so the buckets DDP rebuilds after its first iteration start afresh.
* **Tensors**: a compressor that works on a tensor's shape (PowerSGD) gets each gradient of the bucket
  (``bucket.gradients()``) as the matrix ``(shape[0], -1)``, as torch's ``powerSGD_hook`` does; biases and
  the tensors too small to gain travel uncompressed (PowerSGD's rule, rows cols < (rows + cols) r).  The
  other compressors see the bucket whole.
* **Warm-up** (``start_iter``): the first ``start_iter`` iterations all-reduce uncompressed, as torch's
  ``start_powerSGD_iter``.  By default (None) 2 where the hook keeps state from one iteration to the next
  (error feedback, EF21, PowerSGD's warm start), since DDP rebuilds its buckets after the first iteration and
  a residual would then meet another bucket's gradients (torch's PowerSGD hook asks for 2 for the same
  reason); 0 for the stateless ones.
* **Devices and dtypes**: CPU tensors are all-reduced in place as numpy views, CUDA tensors as CuPy arrays
  (mpiopt's reducers stage them through pinned memory, or pass them to a CUDA-aware MPI); buckets of
  float16 or bfloat16 parameters go through a float32 copy.  The bf16 compressor runs on CPU tensors too
  (torch's own ``bf16_compress_hook`` needs NCCL).
* **Bad gradients**: a NaN or inf in any rank's bucket is raised on every rank as the same CollectiveError
  (``check=False`` skips that pass over the bucket and its small all-gather).

``state.bytes_sent`` counts the payload bytes this rank sent; ``state.state_dict()`` /
``load_state_dict`` hold the residuals, estimates and warm starts for a checkpoint.
"""
import torch

from ..collectives import get_reducer
from ..collectives.compressed import compressor_options_problem
from ..core.backend import finite_problem
from ..core.comm import check_collectively, resolve_comm
from ..models.base import count_problem
from .tensors import as_array, write_back


class HookState:
    """What a hook keeps between calls: the compressed reducer (over ``comm``), the iteration count."""

    def __init__(self, compressor, error_feedback=None, comm=None, reducer="auto", start_iter=None, check=True,
                 **options):
        comm = resolve_comm(comm)
        problem = compressor_options_problem(compressor, options, reducer, None, "auto", error_feedback)
        if problem is None and start_iter is not None:
            problem = count_problem("start_iter", start_iter, 0)
        check_collectively(comm, problem,
                           {"compressor": compressor, "start_iter": start_iter})
        self.comm, self.check = comm, bool(check)
        self.reducer = get_reducer(reducer, comm, compressor=compressor, compressor_options=options,
                                   error_feedback=error_feedback)
        stateful = bool(self.reducer.error_feedback) or getattr(self.reducer.compressor, "warm_start", False)
        self.start_iter = (2 if stateful else 0) if start_iter is None else start_iter
        self.iteration = 0
        self.bytes_sent = 0

    @property
    def compressing(self):
        return self.iteration >= self.start_iter

    def allreduce_mean(self, array, name, shapes):
        """The mean over ranks of ``array`` into ``array``: compressed once warm, else exact."""
        if self.check:
            check_collectively(self.comm, finite_problem(f"gradient bucket {name}", array))
        if self.compressing:
            out = self.reducer.allreduce(array, op="mean", name=name, shapes=shapes)
            self.bytes_sent += self.reducer.last_bytes_sent
            array[...] = out
        else:
            inner = self.reducer.inner
            inner.allreduce(array, array, op="mean")
            self.bytes_sent += inner.last_bytes_sent

    def state_dict(self):
        return {"iteration": self.iteration, "reducer": self.reducer.state_dict()}

    def load_state_dict(self, state):
        self.iteration = int(state["iteration"])
        self.reducer.load_state_dict(state["reducer"])

    def close(self):
        self.reducer.close()


def hook(state, bucket):
    """The DDP communication hook of a :class:`HookState` (see the module docstring)."""
    buffer = bucket.buffer()
    array, copied = as_array(buffer)
    name = f"bucket{bucket.index()}[{buffer.numel()}]"
    shapes = [tuple(gradient.shape) for gradient in bucket.gradients()]
    state.allreduce_mean(array, name, shapes)
    if copied:
        write_back(array, buffer)
    if bucket.is_last():
        state.iteration += 1
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


def comm_hook(name, error_feedback=None, comm=None, reducer="auto", start_iter=None, check=True, **options):
    """``(state, hook)`` for ``ddp_model.register_comm_hook(state, hook)``: every bucket's mean all-reduced
    over ``comm`` (MPI) through the compressor ``name`` with its ``options`` and the reducer ``reducer``
    (see the module docstring).  Every rank of ``comm`` must call it, with the same arguments."""
    return HookState(name, error_feedback, comm, reducer, start_iter, check, **options), hook
