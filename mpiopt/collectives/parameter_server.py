"""Synchronous parameter-server all-reduce baselines on point-to-point.

Single server (``ps``): every worker sends its whole buffer to the server, which
reduces them in rank order and sends the result back to each.  The server's
link carries 2 (p-1) n bytes, so time grows linearly with p:

    T_ps = 2 (p-1) (alpha + n beta) + (p-1) n gamma

Sharded servers (``ps-sharded``): the buffer is cut into one contiguous key
range per server (``offsets(n, s)``); each rank sends range k to server k, each
server reduces its range and returns it.  With s servers the busiest server
receives and sends (p-1) n/s bytes; with every rank a server this moves the
same bytes as the ring, but all at once instead of in a pipeline:

    T_sharded = 2 (p-1) alpha + 2 (p-1)/s n beta + (p-1)/s n gamma   (s = 1: T_ps; s = p: T_ring)

Reduce-scatter is the same push and reduction, but each server returns to rank
r only the part of its range inside rank r's ``offsets(n, p)`` chunk, so the
results carry n bytes in all instead of p n (with s = p the servers' ranges are
the chunks, and nothing is returned at all):

    T_sharded_reduce_scatter = (p-1) alpha + (p-1)/s n (beta + gamma)  [+ about p/s + 1 returns of n/s bytes]

All-gather and allgatherv take the base class's fallback, MPI_Allgatherv.

Which ranks are servers is explicit (``servers=``); a server also contributes
its own buffer, as in colocated deployments (BytePS, Horovod's PS mode).
"""
import numpy as np
from mpi4py import MPI

from ..core.partition import offsets
from ..core.options import Option, Options
from ..core.registry import register
from . import tags
from .base import Reducer, as_bytes, combiner


def wire(array):
    return [as_bytes(array), MPI.BYTE]


class ShardedParameterServerReducer(Reducer):
    """Servers own contiguous key ranges; ``servers=[0]`` is the single-server baseline."""

    name = "ps-sharded"
    options = Options(Option("servers", object, None, "the server ranks, distinct (each owns a key range); "
                                                      "None: every rank"))

    def __init__(self, comm=None, check=True, servers=None):
        super().__init__(comm, check)
        servers = list(range(self.size)) if servers is None else [int(s) for s in servers]
        problem = None
        if not servers or len(set(servers)) != len(servers) or not all(0 <= s < self.size for s in servers):
            problem = f"servers must be distinct ranks in 0..{self.size - 1}, got {servers}"
        self._agree_on_options(problem, {"servers": servers})
        self.servers = servers

    @classmethod
    def model(cls, p, nbytes, fitted, servers=None):
        """T_sharded with ``servers`` servers (default: every rank)."""
        s, n = (p if servers is None else servers), float(nbytes)
        return 2 * (p - 1) * fitted.alpha + 2 * (p - 1) / s * n * fitted.beta + (p - 1) / s * n * fitted.gamma

    def _allreduce_into(self, source, out, ufunc):
        if out.ctypes.data == source.ctypes.data:
            # Pushes go out of a snapshot, so results can land in ``out`` while pushes are in flight.
            source = self.scratch("ps-out", out.size, out.dtype)
            np.copyto(source, out)
        self._push_reduce_return(source, out, 0, ufunc, lambda rank: (0, source.size))

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        self._push_reduce_return(source, out, bounds[self.rank], ufunc, lambda rank: (bounds[rank], bounds[rank + 1]))

    def _push_reduce_return(self, source, out, start, ufunc, wanted):
        """Push range k of ``source`` to server k; each server reduces its range in rank order and
        returns to every rank the part of it inside ``wanted(rank)`` (an element range).  This
        rank's part lands in ``out``, which holds elements ``start`` onwards."""
        ranges = offsets(source.size, len(self.servers))
        mine_low, mine_high = wanted(self.rank)
        ufunc = combiner(ufunc, source.dtype)
        requests = []
        for shard, server in enumerate(self.servers):
            low, high = ranges[shard], ranges[shard + 1]
            if server != self.rank and high > low:
                requests.append(self.comm.Isend(wire(source[low:high]), server, tags.PS_PUSH))
                back_low, back_high = max(low, mine_low), min(high, mine_high)
                if back_high > back_low:
                    requests.append(self.comm.Irecv(wire(out[back_low - start:back_high - start]), server,
                                                    tags.PS_RESULT))
        if self.rank in self.servers:
            shard = self.servers.index(self.rank)
            low, high = ranges[shard], ranges[shard + 1]
            if high > low:
                in_out = mine_low <= low and high <= mine_high  # this rank wants its whole range: reduce in out
                total = out[low - start:high - start] if in_out else self.scratch("ps-total", high - low, out.dtype)
                np.copyto(total, source[low:high])
                incoming = self.scratch("ps-in", high - low, out.dtype)
                # Reduce in rank order, whatever order the pushes arrive in.
                for origin in range(self.size):
                    if origin != self.rank:
                        self.comm.Recv(wire(incoming), origin, tags.PS_PUSH)
                        ufunc(total, incoming, out=total)
                for destination in range(self.size):
                    back_low, back_high = wanted(destination)
                    back_low, back_high = max(low, back_low), min(high, back_high)
                    if back_high <= back_low:
                        continue
                    part = total[back_low - low:back_high - low]
                    if destination != self.rank:
                        requests.append(self.comm.Isend(wire(part), destination, tags.PS_RESULT))
                    elif not in_out:
                        np.copyto(out[back_low - start:back_high - start], part)
        MPI.Request.Waitall(requests)


class ParameterServerReducer(ShardedParameterServerReducer):
    """One server holds every key: the classic synchronous parameter server."""

    name = "ps"
    options = Options(Option("server", int, 0, "the server's rank", low=0))

    def __init__(self, comm=None, check=True, server=0):
        super().__init__(comm, check, servers=[server])

    @classmethod
    def model(cls, p, nbytes, fitted):
        return ShardedParameterServerReducer.model(p, nbytes, fitted, servers=1)


# Registered once both classes exist, the single server first.
register("reducer", "ps", ParameterServerReducer)
register("reducer", "ps-sharded", ShardedParameterServerReducer)
