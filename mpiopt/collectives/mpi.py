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

Sums of 8- and 16-bit integers on the host go to MPI as a user-defined op that
adds with numpy (:func:`mpi_op`): Open MPI's vectorized MPI_SUM (its AVX op
component) saturates them (127 + 1 = 127) where MPICH, numpy and the
hand-written reducers wrap around (127 + 1 = -128), and a reducer's answer must
not depend on the MPI it runs on.
"""
import functools

import numpy as np
from mpi4py import MPI

from ..core.registry import register
from .base import Reducer
from .device import address

MPI_OPS = {np.add: MPI.SUM, np.maximum: MPI.MAX, np.minimum: MPI.MIN}


def _add_with_numpy(inbuf, inoutbuf, datatype):
    """The user function of :func:`numpy_sum`: ``inoutbuf += inbuf``, wrapping around as numpy does."""
    dtype = np.dtype(datatype.tocode())
    total = np.frombuffer(inoutbuf, dtype=dtype)
    np.add(total, np.frombuffer(inbuf, dtype=dtype), out=total)


@functools.cache
def numpy_sum():
    """MPI_SUM computed by numpy, as a user-defined op created once per process.  It is never freed by
    hand: mpi4py frees it when the object goes, and skips that once MPI is finalized (MPI_Finalize
    releases it)."""
    return MPI.Op.Create(_add_with_numpy, commute=True)


def mpi_op(ufunc, buffer):
    """The MPI op that reduces ``buffer`` (a numpy or CuPy array) by ``ufunc`` (np.add, np.maximum or
    np.minimum) with numpy's answer on any MPI: numpy's wrapping add for a sum of 8- or 16-bit integers
    on the host (see the module docstring), MPI's own op otherwise (device buffers included: the user
    function cannot read device memory, and no GPU sum saturates)."""
    dtype = buffer.dtype
    if ufunc is np.add and dtype.kind in "iu" and dtype.itemsize < 4 and isinstance(buffer, np.ndarray):
        return numpy_sum()
    return MPI_OPS[ufunc]


@register("reducer", "mpi")
class MPIReducer(Reducer):
    name = "mpi"
    direct_capable = True  # MPI does the arithmetic: a CUDA-aware MPI takes CuPy buffers as they are

    def _allreduce_into(self, source, out, ufunc):
        if address(out) == address(source):
            self.comm.Allreduce(MPI.IN_PLACE, out, op=mpi_op(ufunc, out))
        else:
            self.comm.Allreduce(source, out, op=mpi_op(ufunc, out))

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        counts = [bounds[r + 1] - bounds[r] for r in range(self.size)]
        if len(set(counts)) == 1:
            self.comm.Reduce_scatter_block(source, out, op=mpi_op(ufunc, out))
        else:
            self.comm.Reduce_scatter(source, out, recvcounts=counts, op=mpi_op(ufunc, out))
