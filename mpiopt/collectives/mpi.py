"""The baseline: MPI's own MPI_Allreduce (MPICH picks its algorithm by size).

Every hand-written reducer is measured against this one in the same run.
"""
from mpi4py import MPI

from .base import Reducer

MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "mean": MPI.SUM}


class MPIReducer(Reducer):
    name = "mpi"

    def allreduce(self, sendbuf, recvbuf=None, op="sum"):
        out = self._prepare_out(sendbuf, recvbuf, op)
        if self.size > 1 and out.size:
            self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI_OPS[op])
        if op == "mean":
            out /= out.dtype.type(self.size)
        return out.reshape(sendbuf.shape)

    def _prepare_out(self, sendbuf, recvbuf, op):
        return self._prepare(sendbuf, recvbuf, op)
