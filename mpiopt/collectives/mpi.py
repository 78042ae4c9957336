"""The baseline: MPI's own MPI_Allreduce (MPICH picks its algorithm by size).

Every hand-written reducer is measured against this one in the same run.
"""
import numpy as np
from mpi4py import MPI

from .base import Reducer


class MPIReducer(Reducer):
    name = "mpi"

    def _allreduce_into(self, source, out, ufunc):
        op = {np.add: MPI.SUM, np.maximum: MPI.MAX, np.minimum: MPI.MIN}[ufunc]
        if out.ctypes.data == source.ctypes.data:
            self.comm.Allreduce(MPI.IN_PLACE, out, op=op)
        else:
            self.comm.Allreduce(source, out, op=op)
