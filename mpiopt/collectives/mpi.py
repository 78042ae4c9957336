"""The baseline: MPI's own collectives (MPICH picks each one's algorithm by size).

    allreduce       MPI_Allreduce
    reduce_scatter  MPI_Reduce_scatter_block when the p chunks are equal, else
                    MPI_Reduce_scatter with the ``offsets`` counts
    allgather(v)    MPI_Allgatherv on the bytes (the base class's hook)

Every hand-written reducer is measured against this one in the same run.  MPICH
chooses among several algorithms per call, so there is no single cost model:
``model`` returns None.

With CuPy buffers and a CUDA-aware MPI (:mod:`.device`) the device buffers go
to MPI as they are; otherwise they are staged through pinned host memory.
"""
import numpy as np
from mpi4py import MPI

from ..core.registry import register
from .base import Reducer
from .device import address

MPI_OPS = {np.add: MPI.SUM, np.maximum: MPI.MAX, np.minimum: MPI.MIN}


@register("reducer", "mpi")
class MPIReducer(Reducer):
    name = "mpi"
    direct_capable = True  # MPI does the arithmetic: a CUDA-aware MPI takes CuPy buffers as they are

    def _allreduce_into(self, source, out, ufunc):
        if address(out) == address(source):
            self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI_OPS[ufunc])
        else:
            self.comm.Allreduce(source, out, op=MPI_OPS[ufunc])

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        counts = [bounds[r + 1] - bounds[r] for r in range(self.size)]
        if len(set(counts)) == 1:
            self.comm.Reduce_scatter_block(source, out, op=MPI_OPS[ufunc])
        else:
            self.comm.Reduce_scatter(source, out, recvcounts=counts, op=MPI_OPS[ufunc])
