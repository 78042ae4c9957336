"""Alpha-beta-gamma cost models of the all-reduce algorithms, and fitting them.

alpha is the latency of one message, beta the time per byte on the wire, gamma
the time per byte of local reduction and c the time per byte of a memory copy.
They are fitted on the machine: alpha and beta from a ping-pong between ranks 0
and 1 (half the round trip = alpha + n beta; alpha from the messages of at most
1 KiB, beta from those of at least 64 KiB), gamma and c from timing numpy's add
and copy on local buffers.

Each reducer class carries its own model, ``Reducer.model(p, nbytes, fitted)``
with ``fitted`` a :class:`Fitted`; :func:`predict` looks the class up by its
registered name.

The same models answer "what if": :func:`on_network` keeps the fitted latency
and replaces the wire's beta by a link of a given bandwidth (1, 10, 100 Gb/s),
and :func:`predict_compressed` gives the time of one compressed all-reduce by
each of the compressed reducer's paths (mpiopt.collectives.compressed) for any
rank count, so a user can choose a compressor for a cluster they are not on.
"""
import time
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..core.comm import resolve_comm
from ..core.registry import lookup
from . import tags


class Fitted(NamedTuple):
    """The constants a cost model needs: fitted on this machine, and the nodes the ranks span."""

    alpha: float        # seconds per message
    beta: float         # seconds per byte on the wire
    gamma: float        # seconds per byte reduced
    copy: float = 0.0   # seconds per byte copied (c)
    nodes: int = 1


def predict(name, p, nbytes, alpha, beta, gamma, copy=0.0, nodes=1, **options):
    """Predicted seconds of one all-reduce of ``nbytes`` over ``p`` ranks by the reducer registered
    as ``name``, or None if it has no model; ``options`` go to its ``model`` (hier: ``in_window``)."""
    if p <= 1:
        return 0.0
    return lookup("reducer", name).model(p, nbytes, Fitted(alpha, beta, gamma, copy, nodes), **options)


def fit_alpha_beta(comm=None, sizes=None, repeats=50):
    """(alpha, beta) from a ping-pong between ranks 0 and 1; every rank gets the result.

    With one rank there is no wire: returns (0.0, 0.0).
    """
    comm = resolve_comm(comm)
    if comm.Get_size() < 2:
        return 0.0, 0.0
    sizes = sizes or [8 << k for k in range(0, 22, 3)]  # 8 B .. 16 MiB
    rank = comm.Get_rank()
    times = []
    buffer = np.zeros(max(sizes), dtype=np.uint8)
    for nbytes in sizes:
        count = max(3, min(repeats, int(2e8 // max(nbytes, 1))))
        wire = [buffer[:nbytes], MPI.BYTE]
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(count):
            if rank == 0:
                comm.Send(wire, 1, tags.PING_PONG)
                comm.Recv(wire, 1, tags.PING_PONG)
            elif rank == 1:
                comm.Recv(wire, 0, tags.PING_PONG)
                comm.Send(wire, 0, tags.PING_PONG)
        times.append((time.perf_counter() - start) / count / 2)
    times = comm.bcast(times, root=0)
    return _fit(sizes, times)


def _fit(sizes, times, small=1024, large=64 << 10):
    """alpha from the small messages (latency-bound), beta from the large ones (bandwidth-bound).

    A single least-squares line over all sizes is dominated by the large
    messages and leaves alpha at the mercy of noise; fitting each where it
    dominates is robust.
    """
    sizes, times = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    alpha = float(np.median(times[sizes <= small])) if np.any(sizes <= small) else float(times.min())
    big = sizes >= large
    beta = 0.0
    if big.sum() >= 2:  # the slope of a line through the large messages only, so alpha's noise does not leak in
        beta = float(np.polyfit(sizes[big], times[big], 1)[0])
    if beta <= 0 and big.any():  # one large size, or a line that a loaded machine's noise tilted down (a 64 KiB
        largest = int(np.argmax(sizes))  # ping-pong slower than the 1 MiB one): the largest message over alpha
        beta = float((times[largest] - alpha) / sizes[largest])
    return max(alpha, 0.0), max(beta, 0.0)


def fit_gamma_copy(nbytes=32 << 20, repeats=5, dtype=np.float32):
    """(gamma, c): seconds per byte of an in-place add and of a copy, on this process."""
    a = np.ones(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    b = np.ones_like(a)
    add, copy = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        np.add(a, b, out=a)
        add.append(time.perf_counter() - start)
        start = time.perf_counter()
        np.copyto(a, b)
        copy.append(time.perf_counter() - start)
    return float(np.median(add)) / nbytes, float(np.median(copy)) / nbytes


def on_network(fitted, gbps):
    """``fitted`` with the wire replaced by a link of ``gbps`` gigabits per second (beta = 8 / (gbps 1e9) s/B)."""
    return fitted._replace(beta=8.0 / (gbps * 1e9))


PATHS = ("allreduce", "allgather", "two-pass")


def predict_compressed(path, p, payload_bytes, fitted, rounds=1):
    """Seconds on the wire of one compressed all-reduce of ``payload_bytes`` per rank over ``p`` ranks.

    allreduce  (linear payloads, summed as they travel; ring):   rounds * (2 (p-1) alpha + 2 (p-1)/p B beta)
               plus the reduction of the payload: rounds * (p-1)/p B gamma
    allgather  (every rank receives every payload):             (p-1) alpha + (p-1) B beta
    two-pass   (all-to-all of chunks, decode-sum-recompress at the owner, all-gather of the p chunks):
                                                                2 (p-1) alpha + 2 (p-1)/p B beta
    The compressor's own compute (compress, decompress, p decodes for
    allgather) is measured, not modelled, and added by the caller.
    """
    if p <= 1:
        return 0.0
    alpha, beta, gamma = fitted.alpha, fitted.beta, fitted.gamma
    if path == "allreduce":
        return rounds * (2 * (p - 1) * alpha + 2 * (p - 1) / p * payload_bytes * beta
                         + (p - 1) / p * payload_bytes * gamma)
    if path == "allgather":
        return (p - 1) * alpha + (p - 1) * payload_bytes * beta
    if path == "two-pass":
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * payload_bytes * beta
    raise ValueError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
