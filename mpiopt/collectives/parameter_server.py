"""Synchronous parameter-server all-reduce baselines on point-to-point.

Single server (``ps``): every worker sends its whole buffer to the server, which
reduces them in rank order and sends the result back to each.  The server's
link carries 2 (p-1) n bytes, so time grows linearly with p:

    T_ps = 2 (p-1) (alpha + n beta) + (p-1) n gamma

Sharded servers (``ps-sharded``): the buffer is cut into one contiguous key
range per server; each rank sends range s to server s, each server reduces its
range and returns it.  With every rank a server this moves the same bytes as
the ring, but all at once instead of in a pipeline:

    T_sharded = 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma   (s = p servers)

Which ranks are servers is explicit (``servers=``); a server also contributes
its own buffer, as in colocated deployments (BytePS, Horovod's PS mode).
"""
from mpi4py import MPI

from ..core.comm import check_collectively
from .base import Reducer, as_bytes, chunk_bounds

TAG_PUSH, TAG_RESULT = 20, 21


class ShardedParameterServerReducer(Reducer):
    """Servers own contiguous key ranges; ``servers=[0]`` is the single-server baseline."""

    name = "ps-sharded"

    def __init__(self, comm=None, check=True, servers=None):
        super().__init__(comm, check)
        servers = list(range(self.size)) if servers is None else [int(s) for s in servers]
        problem = None
        if not servers or len(set(servers)) != len(servers) or not all(0 <= s < self.size for s in servers):
            problem = f"servers must be distinct ranks in 0..{self.size - 1}, got {servers}"
        check_collectively(self.comm, problem, {"servers": servers})
        self.servers = servers

    def _allreduce_inplace(self, buffer, ufunc):
        bounds = chunk_bounds(buffer.size, len(self.servers))
        itemsize = buffer.itemsize
        # Pushes go out of a snapshot, so results can land in ``buffer`` while pushes are in flight.
        outgoing = self.scratch("ps-out", buffer.size, buffer.dtype)
        outgoing[...] = buffer
        out_wire, in_wire = as_bytes(outgoing), as_bytes(buffer)
        requests = []
        for shard, server in enumerate(self.servers):
            lo, hi = bounds[shard] * itemsize, bounds[shard + 1] * itemsize
            if server != self.rank and hi > lo:
                requests.append(self.comm.Isend([out_wire[lo:hi], MPI.BYTE], server, TAG_PUSH))
                requests.append(self.comm.Irecv([in_wire[lo:hi], MPI.BYTE], server, TAG_RESULT))
        if self.rank in self.servers:
            shard = self.servers.index(self.rank)
            lo, hi = bounds[shard], bounds[shard + 1]
            if hi > lo:
                mine = buffer[lo:hi]
                incoming = self.scratch("ps-in", hi - lo, buffer.dtype)
                # Reduce in rank order, whatever order the pushes arrive in.
                for source in range(self.size):
                    if source != self.rank:
                        self.comm.Recv([as_bytes(incoming), MPI.BYTE], source, TAG_PUSH)
                        ufunc(mine, incoming, out=mine)
                requests += [self.comm.Isend([as_bytes(mine), MPI.BYTE], destination, TAG_RESULT)
                             for destination in range(self.size) if destination != self.rank]
        MPI.Request.Waitall(requests)

    def reduce_scatter(self, sendbuf, op="sum"):
        """The reduced key range owned by this rank (empty if it is not a server)."""
        out = self.allreduce(sendbuf, None, op)
        if self.rank not in self.servers:
            return out[:0].copy()
        bounds = chunk_bounds(out.size, len(self.servers))
        shard = self.servers.index(self.rank)
        return out.reshape(-1)[bounds[shard]:bounds[shard + 1]].copy()


class ParameterServerReducer(ShardedParameterServerReducer):
    """One server holds every key: the classic synchronous parameter server."""

    name = "ps"

    def __init__(self, comm=None, check=True, server=0):
        super().__init__(comm, check, servers=[server])
