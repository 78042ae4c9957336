"""Data parallelism over MPI without torch.distributed, as Horovod does it: ``DistributedOptimizer``.

    optimizer = mpiopt.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                                  model.named_parameters(), reducer="ring")
    mpiopt.torch.broadcast_parameters(model, root=0)
    mpiopt.torch.broadcast_optimizer_state(optimizer, root=0)
    loss.backward(); optimizer.step(); optimizer.zero_grad()

The wrapper gives every parameter's ``.grad`` a view into one flat gradient buffer (so the gradients
are all-reduced where the backward pass writes them: on CPU the reducer works on a numpy view of that
memory, no copy).  The buffer is cut into buckets of whole tensors from its end (``bucket_bytes``, 25 MiB
as DDP's), in the order the backward pass fills them; a post-accumulate-grad hook on each parameter counts
its gradients, and once every parameter of a bucket has had ``backward_passes_per_step`` of them the
bucket's all-reduce (the mean over the ranks) starts on mpiopt's communication thread while the backward
pass goes on (:class:`mpiopt.train.overlap.CommunicationQueue`).  Buckets start in order on every rank, so
the collectives match.  ``step()`` starts the buckets still waiting (parameters that got no gradient count
as zeros, as Horovod's), waits for them all, then steps the wrapped optimizer.

* ``reducer``: any registered reducer (``auto``, ``ring``, ``rd``, ``hier``, ``ps``, ...); with
  ``compressor`` (and ``compressor_options``, ``error_feedback``) a compressed reducer over it, each bucket
  its own buffer name (PowerSGD gets each tensor in its own shape).
* ``backward_passes_per_step``: gradients of that many backward passes are summed locally before they move
  (Horovod's gradient accumulation); ``step()`` after each group.
* ``zero_stage=1`` (ZeRO-1, Rajbhandari et al. 2020): the parameters are split over the ranks in contiguous
  runs of whole tensors of about n/p entries; each rank keeps the wrapped optimizer's state for its own run
  only (an optimizer of the same class and options over those tensors), steps them, and the runs are then
  all-gathered.  The updates are those of stage 0, bit for bit.
* ``zero_grad()`` zeroes the flat buffer in place (the views stay; ``set_to_none`` is ignored).  A
  parameter whose ``.grad`` was replaced (``model.zero_grad()`` sets them to None) is copied back into the
  buffer by its hook.

Every rank must build the wrapper with the same parameters (names, shapes, dtypes: checked collectively).
A NaN or inf in any rank's gradient is refused at ``step()`` on every rank as one CollectiveError.
"""
import hashlib

import numpy as np
import torch
from mpi4py import MPI

from ..collectives import get_reducer
from ..collectives.compressed import compressor_options_problem
from ..core.backend import finite_problem
from ..core.comm import check_collectively, resolve_comm
from ..core.partition import offsets
from ..models.base import count_problem
from ..train.buckets import tensor_bucket_bounds
from ..train.overlap import CommunicationQueue
from .tensors import as_array

BUCKET_BYTES = 25 << 20  # DDP's bucket_cap_mb
FLOATS = (torch.float32, torch.float64)


def _digest(items):
    return hashlib.sha256(repr(items).encode()).hexdigest()[:16]


def _host_view(tensor):
    """A numpy array sharing the memory of a contiguous CPU tensor, as bytes when numpy lacks its dtype."""
    tensor = tensor.detach()
    if tensor.dtype in (torch.bfloat16,) or tensor.is_complex():
        tensor = tensor.reshape(-1).view(torch.uint8)
    return tensor.numpy()


def _parameters_problem(named, optimizer):
    if not named:
        return "no parameters to train: the module has none that require a gradient"
    names = [name for name, _ in named]
    if len(set(names)) != len(names):
        return f"parameter names repeat: {sorted({name for name in names if names.count(name) > 1})}"
    kinds = {(parameter.dtype, parameter.device) for _, parameter in named}
    if len(kinds) > 1:
        return f"the parameters must share one dtype and device, got {sorted(map(str, kinds))}"
    dtype = next(iter(kinds))[0]
    if dtype not in FLOATS:
        return f"the parameters must be float32 or float64, got {dtype}"
    ours = {id(parameter) for _, parameter in named}
    missing = [index for group in optimizer.param_groups for index, parameter in enumerate(group["params"])
               if id(parameter) not in ours]
    if missing:
        return f"the optimizer steps {len(missing)} parameters that named_parameters does not list"
    return None


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` (see the module docstring); ``named_parameters``: the module's
    ``named_parameters()`` (those without ``requires_grad`` are left alone)."""

    def __init__(self, optimizer, named_parameters, reducer="auto", compressor=None, compressor_options=None,
                 backward_passes_per_step=1, comm=None, error_feedback=None, bucket_bytes=BUCKET_BYTES,
                 zero_stage=0, overlap=True, check=True):
        # torch.optim.Optimizer's constructor is not called: the wrapped optimizer owns the groups and state
        comm = resolve_comm(comm)
        named = [(str(name), parameter) for name, parameter in named_parameters if parameter.requires_grad]
        problem = None
        if not isinstance(optimizer, torch.optim.Optimizer):
            problem = f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        problem = problem or _parameters_problem(named, optimizer)
        problem = problem or count_problem("backward_passes_per_step", backward_passes_per_step, 1)
        if problem is None and zero_stage not in (0, 1):
            problem = f"zero_stage must be 0 or 1, got {zero_stage!r}"
        problem = problem or count_problem("bucket_bytes", bucket_bytes, 1)
        if problem is None and compressor is not None:
            problem = compressor_options_problem(compressor, compressor_options, reducer, None, "auto",
                                                 error_feedback)
        layout = [(name, tuple(parameter.shape), str(parameter.dtype)) for name, parameter in named]
        check_collectively(comm, problem,
                           {"parameters": _digest(layout), "reducer": reducer, "compressor": compressor,
                            "backward_passes_per_step": backward_passes_per_step, "zero_stage": zero_stage})
        self.comm, self.optimizer, self.check = comm, optimizer, bool(check)
        self.parameters_ = [parameter for _, parameter in named]
        self.backward_passes_per_step, self.zero_stage = backward_passes_per_step, zero_stage
        self.param_groups, self.defaults = optimizer.param_groups, optimizer.defaults
        self.reducer = get_reducer(reducer, comm, **({} if compressor is None else {
            "compressor": compressor, "compressor_options": compressor_options or {},
            "error_feedback": error_feedback}))
        self.compressed = compressor is not None
        self._flat_setup(bucket_bytes)
        self.queue = CommunicationQueue(overlap)
        self._handles = [parameter.register_post_accumulate_grad_hook(self._make_hook(index))
                         for index, parameter in enumerate(self.parameters_)]
        self._reset_counts()
        self._shard = self._zero_setup() if zero_stage == 1 else None

    # -- the flat gradient and its buckets -------------------------------------------------------------
    def _flat_setup(self, bucket_bytes):
        first = self.parameters_[0]
        sizes = [parameter.numel() for parameter in self.parameters_]
        self.starts = np.cumsum([0] + sizes).tolist()
        self.flat = torch.zeros(self.starts[-1], dtype=first.dtype, device=first.device)
        self.array = as_array(self.flat)[0]  # a view: the dtype is float32 or float64
        # each parameter's .grad: a view of the buffer, made once (the hooks compare with it at every backward)
        self.views = [self.flat[start:stop].view_as(parameter)
                      for parameter, start, stop in zip(self.parameters_, self.starts[:-1], self.starts[1:])]
        for view, parameter in zip(self.views, self.parameters_):
            if parameter.grad is not None:
                view.copy_(parameter.grad)
            parameter.grad = view
        bounds = tensor_bucket_bounds([(0, self.starts[-1])], max(1, bucket_bytes // first.element_size()), False,
                                      sizes)
        self.buckets = bounds  # [(start, stop)] in the order the backward pass fills them
        self.bucket_of = [next(k for k, (start, stop) in enumerate(bounds) if start <= self.starts[i] < stop)
                          if sizes[i] else len(bounds) - 1 for i in range(len(sizes))]
        self.bucket_members = [[i for i in range(len(sizes)) if self.bucket_of[i] == k] for k in range(len(bounds))]
        self.bucket_shapes = [[tuple(self.parameters_[i].shape) for i in members] for members in self.bucket_members]

    def _reset_counts(self):
        self._passes = [0] * len(self.parameters_)
        self._filled = [0] * len(self.buckets)
        self._started = 0  # buckets started, in order

    def _make_hook(self, index):
        def accumulated(parameter):
            view = self.views[index]
            if parameter.grad is not view and parameter.grad.data_ptr() != view.data_ptr():
                view.copy_(parameter.grad)  # a new .grad (after set_to_none): back into the flat buffer
                parameter.grad = view
            self._passes[index] += 1
            if self._passes[index] == self.backward_passes_per_step:
                bucket = self.bucket_of[index]
                self._filled[bucket] += 1
                self._start_ready()
        return accumulated

    def _start_ready(self, everything=False):
        while self._started < len(self.buckets) and (
                everything or self._filled[self._started] == len(self.bucket_members[self._started])):
            self.queue.submit(self._started, self._allreduce, self._started)
            self._started += 1

    def _allreduce(self, bucket):
        start, stop = self.buckets[bucket]
        piece = self.array[start:stop]
        if self.check:
            check_collectively(self.comm, finite_problem(f"gradient bucket {bucket}", piece))
        if self.compressed:
            self.reducer.allreduce(piece, piece, op="mean", name=f"bucket{bucket}", shapes=self.bucket_shapes[bucket])
        else:
            self.reducer.allreduce(piece, piece, op="mean")

    def synchronize(self):
        """Start the buckets still waiting, in order, and wait for every all-reduce of this step."""
        self._start_ready(everything=True)
        first = None
        while self.queue.pending:  # every bucket's collective ends on every rank, even after an error
            try:
                self.queue.wait(self.queue.pending[0])
            except Exception as error:  # noqa: BLE001 - the first is raised once all have ended
                self.queue.pending.pop(0)
                first = first or error
        self._reset_counts()
        if first is not None:
            raise first

    # -- ZeRO-1 -------------------------------------------------------------------------------------------
    def _zero_setup(self):
        """This rank's contiguous run of whole tensors and an optimizer of the wrapped one's class over it."""
        p, rank = self.comm.size, self.comm.rank
        ideal = offsets(self.starts[-1], p)
        cuts = [0] + [min(range(len(self.starts)), key=lambda i: abs(self.starts[i] - ideal[r])) for r in range(1, p)]
        cuts = np.maximum.accumulate(cuts + [len(self.parameters_)]).tolist()
        self.owned = range(cuts[rank], cuts[rank + 1])
        # every rank's run in the flat vector, as Allgatherv's counts and displacements
        self.runs = ([self.starts[cuts[r + 1]] - self.starts[cuts[r]] for r in range(p)],
                     [self.starts[cuts[r]] for r in range(p)])
        self.flat_params = torch.empty_like(self.flat)
        mine = {id(self.parameters_[i]) for i in self.owned}
        groups, self._group_of = [], []  # the inner optimizer's groups, and the wrapped one's group of each
        for number, group in enumerate(self.optimizer.param_groups):
            params = [parameter for parameter in group["params"] if id(parameter) in mine]
            if params:
                groups.append(dict(_options(group), params=params))
                self._group_of.append(number)
        inner = type(self.optimizer)(groups, **self.optimizer.defaults) if groups else None
        self.optimizer.state.clear()  # the full state is never kept: each rank holds its run's
        return inner

    def _zero_step(self, closure):
        inner = self._shard
        if inner is not None:
            for shard_group, number in zip(inner.param_groups, self._group_of):  # a scheduler's lr, and the rest
                shard_group.update(_options(self.optimizer.param_groups[number]))
            inner.step(closure)
        flat = self.flat_params
        for i in self.owned:
            flat[self.starts[i]:self.starts[i + 1]].copy_(self.parameters_[i].detach().reshape(-1))
        host = flat.cpu() if flat.is_cuda else flat  # CUDA: through the host
        self.comm.Allgatherv(MPI.IN_PLACE, [_host_view(host), self.runs])
        if host is not flat:
            flat.copy_(host)
        with torch.no_grad():
            for i, parameter in enumerate(self.parameters_):
                if i not in self.owned:
                    parameter.copy_(flat[self.starts[i]:self.starts[i + 1]].view_as(parameter))

    # -- the optimizer interface ---------------------------------------------------------------------------
    def step(self, closure=None):
        """Synchronize the gradients (the mean over the ranks), then step the wrapped optimizer."""
        self.synchronize()
        if self.zero_stage == 1:
            return self._zero_step(closure)
        return self.optimizer.step(closure)

    def zero_grad(self, set_to_none=True):
        """Zero the flat gradient buffer in place (every parameter's .grad is a view of it)."""
        with torch.no_grad():
            self.flat.zero_()
        for view, parameter in zip(self.views, self.parameters_):
            if parameter.grad is None or parameter.grad.data_ptr() != view.data_ptr():
                parameter.grad = view

    @property
    def stepping(self):
        """The optimizer this rank steps: the wrapped one, or with ZeRO-1 the one over its run (None when the
        run is empty)."""
        return self._shard if self.zero_stage == 1 else self.optimizer

    @property
    def state(self):
        return self.stepping.state if self.stepping is not None else {}

    def state_dict(self):
        """The state dict of :attr:`stepping` (ZeRO-1: this rank's run's)."""
        return self.stepping.state_dict() if self.stepping is not None else {}

    def load_state_dict(self, state):
        if self.stepping is not None:
            self.stepping.load_state_dict(state)

    @property
    def bytes_sent(self):
        return self.reducer.bytes_sent

    def close(self):
        """Remove the hooks and end the communication thread (the parameters keep their .grad views)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.queue.close()
        self.reducer.close()

    def __repr__(self):
        return (f"DistributedOptimizer({type(self.optimizer).__name__}, {len(self.parameters_)} tensors, "
                f"{len(self.buckets)} buckets, reducer {type(self.reducer).__name__}, zero_stage {self.zero_stage})")


def _options(group):
    """A parameter group's options (everything but its parameters)."""
    return {key: value for key, value in group.items() if key != "params"}


def _tensors_of(target):
    if isinstance(target, torch.nn.Module):
        return list(target.state_dict().values())
    if isinstance(target, dict):
        return list(target.values())
    items = list(target)
    return [item[1] if isinstance(item, tuple) else item for item in items]


def broadcast_parameters(target, root=0, comm=None):
    """Every rank's parameters (and buffers) set to rank ``root``'s, in place: ``target`` a module (its
    ``state_dict()``), a dict of tensors or an iterable of tensors or (name, tensor) pairs."""
    comm = resolve_comm(comm)
    tensors = _tensors_of(target)
    problem = None if 0 <= root < comm.size else f"root must be a rank of the communicator, got {root!r}"
    check_collectively(comm, problem, {"tensors": _digest([(tuple(t.shape), str(t.dtype)) for t in tensors])})
    with torch.no_grad():
        for tensor in tensors:
            if tensor.is_cuda or not tensor.is_contiguous():
                host = tensor.detach().cpu().contiguous()
                comm.Bcast(_host_view(host), root=root)
                tensor.copy_(host)
            else:
                comm.Bcast(_host_view(tensor), root=root)


def broadcast_optimizer_state(optimizer, root=0, comm=None):
    """Rank ``root``'s optimizer state (its ``state_dict()``: the per-parameter buffers and the groups'
    options) loaded on every rank.  Every rank's optimizer must have the same parameter groups."""
    comm = resolve_comm(comm)
    target = optimizer.optimizer if isinstance(optimizer, DistributedOptimizer) else optimizer
    if isinstance(optimizer, DistributedOptimizer) and optimizer.zero_stage == 1:
        raise ValueError("with zero_stage=1 each rank keeps its own part of the state: nothing to broadcast")
    groups = [len(group["params"]) for group in target.param_groups]
    check_collectively(comm, None if 0 <= root < comm.size else f"root must be a rank, got {root!r}",
                       {"groups": groups})
    state = target.state_dict() if comm.rank == root else None

    def to_host(value):
        if isinstance(value, torch.Tensor):
            return ("tensor", value.detach().cpu().numpy(), str(value.dtype))
        if isinstance(value, dict):
            return {key: to_host(item) for key, item in value.items()}
        if isinstance(value, list):
            return [to_host(item) for item in value]
        return value

    def to_tensor(value, device):
        if isinstance(value, tuple) and len(value) == 3 and value[0] == "tensor":
            return torch.from_numpy(np.array(value[1])).to(device)
        if isinstance(value, dict):
            return {key: to_tensor(item, device) for key, item in value.items()}
        if isinstance(value, list):
            return [to_tensor(item, device) for item in value]
        return value

    state = comm.bcast(to_host(state) if state is not None else None, root=root)
    if comm.rank != root:
        device = target.param_groups[0]["params"][0].device if target.param_groups[0]["params"] else "cpu"
        target.load_state_dict(to_tensor(state, device))
