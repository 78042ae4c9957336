"""The compressed reducer: any compressor (:mod:`mpiopt.compression`) over any reducer.

    reducer = get_reducer("ring", comm, compressor="topk", compressor_options={"ratio": 0.01})  # EF: on (biased)
    out = reducer.allreduce(grad, name="grad")            # op "sum" or "mean"; one name per buffer
    reducer.last_bytes_sent, reducer.last_bytes_received  # this call's payload bytes, this rank
    reducer.bytes_sent, reducer.bytes_received            # since construction or reset_counters()

Each call compresses this rank's buffer, moves the payloads by one of three
paths, and decodes.  B is one rank's payload bytes, p the ranks; the costs are
the ring's (alpha per message, beta per byte) plus the compressor's compute:

``allreduce`` (the default for linear compressors: none, fp16, randomk, powersgd)
    The payload (one array in its own dtype) is all-reduced by the inner
    reducer, summed in compressed form as it travels, and the sum decoded once.
    PowerSGD takes two such rounds, P then Q (see :mod:`mpiopt.compression.powersgd`).
    Ring: 2 (p-1) alpha + 2 (p-1)/p B beta per round; fp16's sum is
    rounded to float16 at each step (docs/compression.md).

``allgather`` (the default for the others: bf16, qsgd, sign, topk)
    Every rank's payload bytes are all-gathered; each rank decodes the p
    payloads and adds them in rank order (``accumulate``: sparse payloads add
    at their indices).  Ring: (p-1) alpha + (p-1) B beta, and p decodes.

``two-pass`` (DeepSpeed's compressed all-reduce, 1-bit Adam; Tang et al. 2021)
    The buffer is cut into p chunks (``offsets(n, p)``), each compressed on
    its own (worker error feedback per chunk); an all-to-all sends chunk j's
    payload to rank j, which decodes and sums the p payloads of its chunk and
    compresses the sum again (server error feedback); the inner reducer
    all-gathers the p compressed chunks and every rank decodes them.
    (p-1) alpha + (p-1)/p B beta for the all-to-all + the ring all-gather of
    the p re-compressed chunks: about 2 (p-1)/p B bytes, as an uncompressed
    ring, but the result is compressed twice.

Error feedback (:class:`~mpiopt.compression.ErrorFeedback`) wraps the
compressor when ``error_feedback`` is true, or by default (None) when the
compressor is biased and contractive (its ``error_feedback`` flag: sign, topk,
powersgd, randomk with ``unbiased=False``); ``error_feedback="ef21"`` wraps it in
:class:`~mpiopt.compression.EF21` instead (each rank sends the change of its estimate, and the reducer keeps
the sum of the estimates per buffer name and returns it; one-round compressors, not ``two-pass``).
Residuals, estimates, warm starts and random
draws are kept per buffer ``name``; without one a buffer is known by its
dtype and length (``"float32[1000]"``), so give distinct buffers of the same
size distinct names.  Each name's calls are counted (the step) and the count
keys every random draw, so all ranks agree.

**Bytes.**  ``last_bytes_sent`` / ``last_bytes_received`` are the payload
bytes this rank's messages carried in the last ``allreduce``, derived from the
algorithm: for the ring (``ring``, ``ring-seg``) the chunk sizes of its
steps, exactly (``counts_exact`` is True); for other inner reducers the same
ring formulas (a model: MPI's own algorithms do not say).  The small argument
checks (one MPI_Allreduce of three integers when ``check``) are not counted.
``bytes_sent`` / ``bytes_received`` add them up.

**Tensors.**  ``allreduce(..., shapes=[...])`` says which tensors tile the
buffer, in order (a training bucket of a model's parameters).  A compressor
that works per tensor (``per_tensor``: PowerSGD) then compresses each tensor
on its own, as the matrix ``(shape[0], -1)`` (a vector of n as n x 1), under
the name ``{name}/tensor{j}`` (its own residual, warm start and draws), as
PyTorch's ``powerSGD_hook`` does; the tensors' payloads travel together, one
all-reduce per round (``allreduce``) or one all-gather (``allgather``), so a
bucket costs the messages of one buffer.  ``two-pass`` cuts the buffer into
rank chunks, not tensors, and refuses ``shapes`` with such a compressor;
the other compressors see the buffer whole and ignore ``shapes``.

``reduce_scatter``, ``allgather`` and ``allgatherv`` go to the inner reducer
uncompressed (exact), and their bytes are the inner reducer's count (the
ring's formulas, as every reducer counts them: :mod:`.traffic`).

**CuPy buffers.**  With a CuPy ``sendbuf`` the compressor runs on the GPU
(its kernels, :mod:`mpiopt.kernels.compress`) and the payloads stay there; only
their movement touches the host: the inner reducer stages them through pinned
memory, or hands them to a CUDA-aware MPI as they are (``mpi`` inner reducer,
and the two-pass all-to-all), as :mod:`.device` describes.  Payloads are
summed (``allreduce`` mode) by the inner reducer's host algorithm on the staged
copies, so a CuPy call moves and adds the same bytes as a numpy one.
"""
import functools
from itertools import accumulate

import numpy as np
from mpi4py import MPI

from ..compression import EF21, ErrorFeedback, compressor_problem, get_compressor, pack, tensor_matrix_shape, unpack
from ..compression.base import Compressor
from ..core import registry
from ..core.backend import get_array_module, to_module
from ..core.partition import offsets
from ..core.registry import lookup
from . import device
from .base import Reducer, check_reducer_options
from .traffic import ring_allgather_bytes, ring_allreduce_bytes

MODES = ("auto", "allreduce", "allgather", "two-pass")
EXACT_COUNTS = ("ring", "ring-seg")


def compressed_reducer_problem(compressor, compressor_options=None, reducer="auto", reducer_options=None,
                               mode="auto", error_feedback=None):
    """(the argument, its one-line problem) of the first thing wrong with ``CompressedReducer(reducer, comm,
    compressor, compressor_options, reducer_options, mode=mode)``, or None; builds no communicator and sends
    nothing, so every rank can check before any work (the trainer's settings do, collectively).

    ``compressor_options`` are checked against the compressor's declaration (``ratio`` in (0, 1], ``rank``
    >= 1, ``bits`` 8 or 4, ...) and its own relations, ``reducer_options`` against the reducer's, and ``mode``
    must suit the compressor, as must ``error_feedback``.  The argument is ``"compressor"``, ``"reducer"``,
    ``"compressor_options"``, ``"reducer_options"``, ``"mode"`` or ``"error_feedback"``."""
    compressor_options, reducer_options = dict(compressor_options or {}), dict(reducer_options or {})
    made = functools.cache(lambda: get_compressor(compressor, **compressor_options))  # once its options passed
    checks = (("compressor", lambda: registry.unknown("compressor", compressor)),
              ("reducer", lambda: registry.unknown("reducer", reducer)),
              ("compressor_options", lambda: compressor_problem(compressor, compressor_options)),
              ("reducer_options", lambda: registry.options("reducer", reducer).problem(
                  reducer_options, f"reducer {reducer!r}")),
              ("mode", lambda: _mode_problem(mode, made())),
              ("error_feedback", lambda: _feedback_problem(error_feedback, made(), mode)))
    for argument, check in checks:
        message = check()
        if message:
            return argument, message
    return None


def compressor_options_problem(compressor, compressor_options=None, reducer="auto", reducer_options=None,
                               mode="auto", error_feedback=None):
    """The one-line problem of :func:`compressed_reducer_problem`, or None."""
    found = compressed_reducer_problem(compressor, compressor_options, reducer, reducer_options, mode,
                                       error_feedback)
    return None if found is None else found[1]


def _feedback_problem(error_feedback, compressor, mode):
    """What is wrong with ``error_feedback`` for ``compressor`` and ``mode``, or None."""
    if error_feedback is not None and not isinstance(error_feedback, bool) and error_feedback != "ef21":
        return f"error_feedback must be None, True, False or 'ef21', got {error_feedback!r}"
    if error_feedback == "ef21" and (compressor.rounds != 1 or mode == "two-pass"):
        return (f"error_feedback 'ef21' takes a one-round compressor and a mode other than 'two-pass'; got "
                f"{compressor.name} and mode {mode!r}")
    return None


def _mode_problem(mode, compressor):
    """Why ``mode`` cannot move ``compressor``'s payloads, or None."""
    if mode not in MODES:
        return f"mode must be one of {', '.join(MODES)}, got {mode!r}"
    if mode == "allreduce" and not compressor.linear:
        return (f"compressor {compressor.name!r} is not linear: its payloads cannot be summed as they travel; "
                "use mode 'allgather' or 'two-pass'")
    return None


def split_keywords(compressor, options):
    """(compressor options, reducer options) of the older keyword form ``get_reducer(name, comm,
    compressor=..., ratio=0.01, segment_bytes=...)``: the names the compressor declares go to it, the rest to
    the reducer.  A compressor object takes no options."""
    declared = registry.options("compressor", compressor) if isinstance(compressor, str) else ()
    return ({key: value for key, value in options.items() if key in declared},
            {key: value for key, value in options.items() if key not in declared})


class CompressedReducer(Reducer):
    """``allreduce`` through a compressor (see the module docstring); built by
    ``get_reducer(name, comm, compressor=..., compressor_options=..., reducer_options=..., error_feedback=None,
    mode="auto")``.

    ``compressor`` is a registered name, built with ``compressor_options`` (checked against its declaration),
    or a compressor object (which then belongs to this reducer: its state, such as PowerSGD's warm start,
    follows this reducer's calls).  The inner reducer ``reducer`` is built with ``reducer_options``, checked
    against its declaration.  The older form passes both as keywords (``ratio=0.01, segment_bytes=4096``),
    split by the names the compressor declares; it cannot be mixed with the dicts.
    A compressor with a ``worker`` option (QSGD: its noise stream) gets this
    rank as its worker, so that the ranks draw independent noise and the sum
    stays unbiased with the variance of independent terms: an object's worker
    is set to the rank; by name the rank is the default (a ``worker`` given by
    name is kept, and must then differ between ranks).
    """

    name = "compressed"

    def __init__(self, reducer="ring", comm=None, compressor="none", compressor_options=None, reducer_options=None,
                 error_feedback=None, mode="auto", check=True, cuda_aware=None, **keywords):
        super().__init__(comm, check)
        self.inner = None
        try:
            if keywords and (compressor_options is not None or reducer_options is not None):
                raise TypeError(f"give the options as compressor_options and reducer_options, or as keywords, "
                                f"not both (got {', '.join(keywords)} as keywords)")
            if keywords:
                compressor_options, reducer_options = split_keywords(compressor, keywords)
            device.parse_setting(cuda_aware, "cuda_aware")
            base = self._build_compressor(compressor, dict(compressor_options or {}))
            problem = _feedback_problem(error_feedback, base, mode)
            if problem:
                raise ValueError(problem)
            self.error_feedback = base.error_feedback if error_feedback is None else error_feedback
            self.per_tensor = bool(getattr(base, "per_tensor", False))
            self.mode = self._resolve_mode(mode, base)
            if self.error_feedback == "ef21":
                self.compressor = EF21(base)
            else:
                self.compressor = ErrorFeedback(base) if self.error_feedback else base
            self._estimates = {}  # EF21: buffer name -> the sum over ranks of their estimates
            reducer_options = dict(reducer_options or {})
            check_reducer_options(reducer, reducer_options)
            self.inner = lookup("reducer", reducer)(comm=self.comm, check=check, **reducer_options)
            if cuda_aware is not None:
                self.cuda_aware = cuda_aware
        except Exception:
            self.close()
            raise
        settings = {key: value for key, value in base.settings().items() if key != "worker"}
        self._agree_on_options(None, {"reducer": reducer, "compressor": base.name, "settings": settings,
                                      "error_feedback": self.error_feedback, "mode": self.mode})
        self.counts_exact = reducer in EXACT_COUNTS
        self._steps = {}

    def _build_compressor(self, compressor, options):
        if not isinstance(compressor, str):
            if isinstance(compressor, ErrorFeedback):
                raise ValueError("pass the bare compressor and error_feedback=True; the reducer adds it")
            if not isinstance(compressor, Compressor):
                raise TypeError(f"compressor must be a registered name or a Compressor, got {compressor!r}")
            if options:
                raise TypeError(f"compressor_options need the compressor by name; got {', '.join(options)} for "
                                f"{compressor!r}")
            if "worker" in compressor.options:
                compressor.worker = self.rank  # built alike on every rank: make its noise independent per rank
            return compressor
        if "worker" in registry.options("compressor", compressor):
            options.setdefault("worker", self.rank)  # independent noise on every rank
        return get_compressor(compressor, **options)

    @staticmethod
    def _resolve_mode(mode, compressor):
        problem = _mode_problem(mode, compressor)
        if problem:
            raise ValueError(problem)
        if mode == "auto":
            return "allreduce" if compressor.linear else "allgather"
        return mode

    def _set_cuda_aware(self, setting):
        Reducer.cuda_aware.fset(self, setting)
        if self.inner is not None:  # the payloads move through the inner reducer
            self.inner.cuda_aware = self._cuda_aware

    cuda_aware = property(Reducer.cuda_aware.fget, _set_cuda_aware, doc=Reducer.cuda_aware.__doc__)

    # -- counters (the base class's, counting the payloads) ---------------------
    def _count(self, traffic):
        self.last_bytes_sent += traffic[0]
        self.last_bytes_received += traffic[1]

    # -- the interface --------------------------------------------------------
    def allreduce(self, sendbuf, recvbuf=None, op="sum", name=None, shapes=None):
        """The (approximate) sum or mean of every rank's ``sendbuf`` after compression; ``name`` keys the
        buffer's error-feedback residual, warm start and random draws; ``shapes``, the tensors that tile the
        buffer, lets a per-tensor compressor see each in its own shape (see the module docstring)."""
        out = self._prepare(sendbuf, recvbuf, op)
        if op not in ("sum", "mean") or sendbuf.dtype.kind != "f" or sendbuf.dtype == np.float16:
            raise ValueError(f"rank {self.rank}: compressed allreduce takes float32 or float64 buffers and op "
                             f"'sum' or 'mean', got {sendbuf.dtype} and {op!r}")
        key = f"{sendbuf.dtype}[{sendbuf.size}]" if name is None else str(name)
        tensors = self._tensors(sendbuf, out, key, shapes)
        step = self._steps.get(key, 0)
        self._steps[key] = step + 1
        self.last_bytes_sent = self.last_bytes_received = 0
        if out.size:
            if self.mode == "two-pass":
                self._two_pass_path(sendbuf, out, key, step)
            else:
                (self._allreduce_path if self.mode == "allreduce" else self._allgather_path)(tensors, step)
            if self.error_feedback == "ef21":
                self._add_estimate(key, out)
        if op == "mean":
            out /= out.dtype.type(self.size)
        self.bytes_sent += self.last_bytes_sent
        self.bytes_received += self.last_bytes_received
        return out.reshape(sendbuf.shape)

    def _add_estimate(self, key, out):
        """EF21: ``out`` (the sum of the estimates' changes) += the sum of the estimates, which becomes it."""
        estimate = self._estimates.get(key)
        xp = get_array_module(out)
        if estimate is not None and get_array_module(estimate) is not xp:
            estimate = to_module(estimate, xp)  # restored from a checkpoint for a run on the other side
        if estimate is None or estimate.shape != out.shape or estimate.dtype != out.dtype:
            estimate = xp.zeros_like(out)
        out += estimate
        estimate[...] = out
        self._estimates[key] = estimate

    def reduce_scatter(self, sendbuf, op="sum"):
        return self._uncompressed(self.inner.reduce_scatter(sendbuf, op))

    def allgather(self, chunk, count=None):
        return self._uncompressed(self.inner.allgather(chunk, count))

    def allgatherv(self, sendbuf):
        return self._uncompressed(self.inner.allgatherv(sendbuf))

    def _uncompressed(self, result):
        """``result`` of the inner reducer's operation, whose bytes (counted by the inner reducer) are now
        this reducer's last ones."""
        self._record((self.inner.last_bytes_sent, self.inner.last_bytes_received))
        return result

    def _tensors(self, sendbuf, out, key, shapes):
        """[(input, output, name)] to compress one by one: each tensor of ``shapes`` as its matrix for a
        per-tensor compressor (empty ones left out), else the whole buffer."""
        if shapes is None or not self.per_tensor:
            return [(sendbuf, out, key)]
        shapes = [tuple(int(n) for n in shape) for shape in shapes]
        sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
        if sum(sizes) != sendbuf.size or any(n < 0 for shape in shapes for n in shape):
            raise ValueError(f"rank {self.rank}: shapes {shapes} hold {sum(sizes)} elements; the buffer has "
                             f"{sendbuf.size}")
        if self.mode == "two-pass":
            raise ValueError(f"rank {self.rank}: mode 'two-pass' cuts the buffer into rank chunks, so "
                             f"{self.compressor.name} cannot compress its tensors in their own shapes; use mode "
                             "'auto' (or call allreduce without shapes)")
        flat, tensors, start = sendbuf.reshape(-1), [], 0
        for index, (shape, size) in enumerate(zip(shapes, sizes)):
            if size:
                tensors.append((flat[start:start + size].reshape(tensor_matrix_shape(shape)),
                                out[start:start + size], f"{key}/tensor{index}"))
            start += size
        return tensors

    # -- the paths --------------------------------------------------------------
    def _sum(self, payload_array, slot=0):
        """The sum over ranks of one linear payload array, by the inner reducer's algorithm, into this
        reducer's buffer ``slot`` (reused call after call, so the inner reducer's plan for it is too; valid
        until the next call); the payload is left as it was."""
        total = self._scratch(("payload-sum", slot), payload_array.size, payload_array.dtype,
                              get_array_module(payload_array))
        return self._reduce(payload_array, total)

    def _reduce(self, source, total):
        """``total`` = the sum over ranks of ``source`` (``total`` may be ``source``) by the inner reducer,
        its ring bytes counted; returns ``total``."""
        self.inner.reduce_into(source, total, "sum")
        self._count(ring_allreduce_bytes(source.size, source.itemsize, self.size, self.rank))
        return total

    def _gather_payloads(self, parts, block_bytes, xp=np):
        """Every rank's payload (rank r's is ``block_bytes[r]`` bytes; this rank's the arrays ``parts``, packed
        in place), concatenated in rank order in this reducer's buffer (valid until the next call), and the
        blocks' bounds."""
        bounds = [0, *accumulate(int(n) for n in block_bytes)]
        gathered = self._scratch("payloads", bounds[-1], np.uint8, xp)
        pack(parts, out=gathered[bounds[self.rank]:bounds[self.rank + 1]])
        self._count(ring_allgather_bytes(block_bytes, self.rank))
        self.inner.gather_into(gathered, bounds)
        return gathered, bounds

    def _sum_together(self, payload_arrays, round_=0):
        """The sums over ranks of several linear payload arrays, by one all-reduce of their concatenation
        (one message per step, as for one buffer); returned in order, as views of that sum (this reducer's
        buffers of round ``round_``, valid until the next call)."""
        if len(payload_arrays) == 1 or len({array.dtype for array in payload_arrays}) > 1:
            return [self._sum(array, (round_, index)) for index, array in enumerate(payload_arrays)]
        bounds = [0, *accumulate(array.size for array in payload_arrays)]
        joined = self._scratch(("payload-sum", round_, "joined"), bounds[-1], payload_arrays[0].dtype,
                               get_array_module(*payload_arrays))
        for array, start, stop in zip(payload_arrays, bounds[:-1], bounds[1:]):
            joined[start:stop] = array.reshape(-1)
        self._reduce(joined, joined)  # this reducer's own buffer: summed in place
        return [joined[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]

    def _allreduce_path(self, tensors, step):
        """Linear payloads summed as they travel: one all-reduce per round for all the tensors.  Every tensor
        is compressed (its payload never aliases it) before any output is written, so ``recvbuf`` may be
        ``sendbuf``."""
        compressor = self.compressor
        if compressor.rounds == 2:
            first = [compressor.compress_p(x, name, step) for x, _, name in tensors]
            p_sums = self._sum_together([payload[0] for payload, _ in first])
            second = []
            for (_, out, _), (_, state), p_sum in zip(tensors, first, p_sums):
                if state.rounds == 1:  # sent uncompressed: done
                    compressor.decompress((p_sum,), state.ctx, out)
                else:
                    second.append((state, out, compressor.compress_q(p_sum, state)[0]))
            if second:
                for (state, out, _), q_sum in zip(second, self._sum_together([q for _, _, q in second], 1)):
                    compressor.decompress_q(q_sum, state, out)
            return
        compressed = [compressor.compress(x, name, step) for x, _, name in tensors]
        sums = self._sum_together([payload[0] for payload, _ in compressed])
        for (_, out, _), (_, ctx), payload_sum in zip(tensors, compressed, sums):
            compressor.decompress((payload_sum,), ctx, out)

    def _decode_sum(self, payloads, ctx, out):
        """out = the decoded payloads added in rank order."""
        for rank, payload in enumerate(payloads):
            if rank == 0:
                self.compressor.decompress(payload, ctx, out)
            else:
                self.compressor.accumulate(payload, ctx, out)
        return out

    def _allgather_path(self, tensors, step):
        """Every rank's payloads of all the tensors, packed one after the other and all-gathered at once."""
        compressed = [self.compressor.compress(x, name, step) for x, _, name in tensors]
        sizes = [ctx.payload_bytes for _, ctx in compressed]
        gathered, bounds = self._gather_payloads(tuple(part for payload, _ in compressed for part in payload),
                                                 [sum(sizes)] * self.size, get_array_module(tensors[0][0]))
        start = 0
        for (_, out, _), (payload, ctx), size in zip(tensors, compressed, sizes):
            payloads = (payload if rank == self.rank else
                        unpack(gathered[bounds[rank] + start:bounds[rank] + start + size], ctx)
                        for rank in range(self.size))
            self._decode_sum(payloads, ctx, out)
            start += size

    def _two_pass_path(self, x, out, key, step):
        p, rank, flat = self.size, self.rank, x.reshape(-1)
        bounds = offsets(flat.size, p)
        worker = [self.compressor.compress(flat[bounds[j]:bounds[j + 1]], f"{key}/worker{j}", step)
                  for j in range(p)]
        sizes = [ctx.payload_bytes for _, ctx in worker]
        mine = sizes[rank]
        xp = get_array_module(x)
        received = self._scratch("two-pass-received", p * mine, np.uint8, xp)
        sending = pack(tuple(a for payload, _ in worker for a in payload),
                       out=self._scratch("two-pass-sending", sum(sizes), np.uint8, xp))
        with device.on_wire(self, sending, received, True) as (send, receive):  # MPI only: direct-capable
            self.comm.Alltoallv([send, sizes, [0, *accumulate(sizes[:-1])], MPI.BYTE],
                                [receive, [mine] * p, [i * mine for i in range(p)], MPI.BYTE])
        self._count((sum(sizes) - mine, (p - 1) * mine))
        ctx = worker[rank][1]
        chunk_sum = self._decode_sum((unpack(received[i * mine:(i + 1) * mine], ctx) for i in range(p)), ctx,
                                     xp.empty(bounds[rank + 1] - bounds[rank], dtype=x.dtype))
        server_payload, _ = self.compressor.compress(chunk_sum, f"{key}/server{rank}", step)
        server = [self.compressor.context((bounds[j + 1] - bounds[j],), x.dtype, f"{key}/server{j}", step)
                  for j in range(p)]
        gathered, offsets_bytes = self._gather_payloads(server_payload, [ctx.payload_bytes for ctx in server], xp)
        for j in range(p):
            self.compressor.decompress(unpack(gathered[offsets_bytes[j]:offsets_bytes[j + 1]], server[j]),
                                       server[j], out[bounds[j]:bounds[j + 1]])

    # -- state ------------------------------------------------------------------
    def state_dict(self):
        """The step counts per buffer name and the compressor's state (residuals, warm starts)."""
        compressor_state = getattr(self.compressor, "state_dict", None)
        return {"steps": dict(self._steps), "compressor": compressor_state() if compressor_state else {},
                **({"estimates": {key: value.copy() for key, value in self._estimates.items()}}
                   if self.error_feedback == "ef21" else {})}

    def load_state_dict(self, state):
        self._steps = dict(state["steps"])
        self._estimates = {key: np.array(value) for key, value in state.get("estimates", {}).items()}
        if state.get("compressor"):
            self.compressor.load_state_dict(state["compressor"])

    def close(self):
        if self.inner is not None:
            self.inner.close()
        super().close()

    def __repr__(self):
        inner = self.inner.name if self.inner is not None else None
        return (f"CompressedReducer(reducer={inner!r}, compressor={self.compressor!r}, mode={self.mode!r}, "
                f"size={self.size})")
