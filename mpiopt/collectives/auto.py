"""``auto``: pick the all-reduce algorithm by message size.

The rule follows the measurements of docs/collectives.md ("Choosing a reducer"):

* below ``small_bytes`` (64 KiB) latency dominates, and MPI's own
  MPI_Allreduce beats hand-written code driven from Python, so ``small``
  defaults to ``mpi``; pass ``small="rd"`` to stay on hand-written code;
* from 64 KiB the node-aware shared-memory reducer, wherever a node holds
  more than one rank (it moves no MPI messages within the node); with one
  rank per node the ring, whose bandwidth term is optimal.

Pass your own threshold after running benchmarks/allreduce.py on your machine.

The chosen reducer runs through its public building blocks (``reduce_into``,
``reduce_scatter_into``, ``gather_into``), on the buffers this reducer has
checked.  The other operations go the same way, by the bytes they move:
``reduce_scatter`` and ``allgather``/``allgatherv`` (by the size of the
gathered vector) call the chosen reducer's, so the costs are those of
``mpi``, ``hier`` or ``ring``.

CuPy buffers (:mod:`.device`): with a CUDA-aware MPI those below
``small_bytes`` go to MPI as they are (``small="mpi"``); the others, and all
of them without CUDA-aware MPI, are staged through pinned host memory.
"""
from mpi4py import MPI

from ..core.options import Option, Options
from ..core.registry import register
from .base import UFUNC_OPS, Reducer
from .hierarchical import HierarchicalReducer
from .mpi import MPIReducer
from .recursive_doubling import RecursiveDoublingReducer
from .ring import RingReducer

SMALL_BYTES = 64 << 10
SMALL = {"mpi": MPIReducer, "rd": RecursiveDoublingReducer}


@register("reducer", "auto")
class AutoReducer(Reducer):
    name = "auto"
    options = Options(
        Option("small_bytes", int, SMALL_BYTES, "below this many bytes the small-message algorithm", low=0),
        Option("small", str, "mpi", "the small-message algorithm", choices=tuple(SMALL))) + HierarchicalReducer.options

    def __init__(self, comm=None, check=True, small_bytes=SMALL_BYTES, small="mpi", node_of=None):
        problem = self.options["small"].problem(small)  # built directly, without get_reducer's check
        if problem:
            raise ValueError(problem)
        super().__init__(comm, check)
        self.small_bytes = int(small_bytes)
        self.small = SMALL[small](self.comm, check=False)
        hierarchical = HierarchicalReducer(self.comm, check=False, node_of=node_of)
        if self.comm.allreduce(hierarchical.local_size, op=MPI.MAX) > 1:
            self.large = hierarchical
        else:
            hierarchical.close()
            self.large = RingReducer(self.comm, check=False)

    @classmethod
    def model(cls, p, nbytes, fitted, small_bytes=SMALL_BYTES, small="mpi"):
        """The model of the reducer chosen at this size: hier when some node holds several ranks
        (``p > fitted.nodes``), else the ring."""
        if nbytes < small_bytes:
            return SMALL[small].model(p, nbytes, fitted)
        return (HierarchicalReducer if p > fitted.nodes else RingReducer).model(p, nbytes, fitted)

    def choose(self, nbytes):
        """The reducer used for a buffer of ``nbytes``."""
        return self.small if nbytes < self.small_bytes else self.large

    def _direct_capable(self, nbytes):
        return self.choose(nbytes).direct_capable

    def _set_cuda_aware(self, setting):
        Reducer.cuda_aware.fset(self, setting)
        for part in (self.small, self.large):  # the chosen one routes the buffers again: alike
            part.cuda_aware = self._cuda_aware

    cuda_aware = property(Reducer.cuda_aware.fget, _set_cuda_aware, doc=Reducer.cuda_aware.__doc__)

    def _allreduce_into(self, source, out, ufunc):
        self.choose(out.nbytes).reduce_into(source, out, UFUNC_OPS[ufunc])

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        self.choose(source.nbytes).reduce_scatter_into(source, out, UFUNC_OPS[ufunc])

    def _allgather_into(self, out, bounds):
        self.choose(out.nbytes).gather_into(out, bounds)

    def close(self):
        super().close()
        self.small.close()
        self.large.close()
