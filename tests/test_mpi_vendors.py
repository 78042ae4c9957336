"""The same answers under Open MPI and MPICH: every reducer against numpy on fixed inputs.

tests/test_collectives.py checks the reducers against MPI_Allreduce in the same run, which follows the MPI
library: Open MPI's vectorized MPI_SUM saturates 8- and 16-bit integers (its AVX op component: 127 + 1 = 127,
for more than a few elements), where MPICH and numpy wrap around (127 + 1 = -128).  Here the reference is
numpy's, written in the test from every rank's inputs, which each rank can make: small integers (scaled by
1/4 for the floating types), so that every order of summation gives the same bits and any difference is the
MPI's.  CI runs the MPI tests under both MPIs (.ci/run).
"""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.collectives import get_reducer
from mpiopt.core.comm import mpi_vendor

pytestmark = pytest.mark.many_ranks  # the chunks, the ring's steps and the nodes change with the rank count

# the node-aware reducer on the real nodes (MPI_COMM_TYPE_SHARED) and on simulated ones (ranks by parity)
REDUCERS = {"mpi": {}, "ring": {}, "ring-seg": {"segment_bytes": 24}, "rd": {}, "hier": {},
            "hier-parity": {"node_of": lambda rank: rank % 2}, "ps": {}, "ps-sharded": {}, "auto": {}}
DTYPES = [np.float64, np.float32, np.int64, np.int32, np.int8, np.uint8]
COUNTS = [1, 7, 1000]  # 1000: long enough for an MPI's vectorized ops
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def fixed_input(rank, count, dtype):
    """Rank ``rank``'s input: integers in the upper half of an 8-bit type's range (so that two ranks' sum
    overflows it), quarters for the floating types; any rank can make any rank's."""
    values = (np.arange(count) * 37 + rank * 101) % 61 + 60 - 7 * rank  # 60..120, shifted down per rank
    if np.dtype(dtype) == np.uint8:
        values = values * 2
    if np.dtype(dtype).kind == "f":
        return (values / 4).astype(dtype)
    return values.astype(dtype)


def numpy_reference(size, count, dtype, op):
    """The reduction of every rank's input, in numpy (integer sums wrap around in the dtype)."""
    inputs = np.stack([fixed_input(rank, count, dtype) for rank in range(size)])
    return REDUCE[op](inputs, axis=0).astype(dtype) if op != "sum" else np.sum(inputs, axis=0, dtype=dtype)


@pytest.fixture(params=list(REDUCERS))
def reducer(request, comm):
    name = "hier" if request.param == "hier-parity" else request.param
    reducer = get_reducer(name, comm, **REDUCERS[request.param])
    yield reducer
    reducer.close()


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("op", list(REDUCE))
def test_every_reducer_gives_numpys_answer_on_fixed_inputs_under_any_mpi(comm, reducer, dtype, op):
    for count in COUNTS:
        result = reducer.allreduce(fixed_input(comm.rank, count, dtype), op=op)
        expected = numpy_reference(comm.size, count, dtype, op)
        assert result.dtype == expected.dtype and np.array_equal(result, expected), (
            f"{reducer.name} {op} of {count} {np.dtype(dtype).name} under {mpi_vendor()} differs from numpy's at "
            f"{np.flatnonzero(result != expected)[:5].tolist()}: {result[result != expected][:5].tolist()} "
            f"instead of {expected[result != expected][:5].tolist()}")


@pytest.mark.mpi
@pytest.mark.parametrize("node_of", [None, lambda rank: rank % 2], ids=["shared-memory-nodes", "parity-nodes"])
def test_node_aware_reduce_scatter_and_allgather_give_numpys_answer(comm, node_of):
    reducer = get_reducer("hier", comm, node_of=node_of)
    try:
        count = 1003
        whole = numpy_reference(comm.size, count, np.int8, "sum")
        chunk = reducer.reduce_scatter(fixed_input(comm.rank, count, np.int8), op="sum")
        gathered = reducer.allgather(chunk, count=count)
        assert np.array_equal(gathered, whole), f"under {mpi_vendor()}"
        shared = reducer.shared_buffer(count, np.float64)
        shared[...] = fixed_input(comm.rank, count, np.float64)
        reducer.allreduce(shared, shared)
        assert np.array_equal(shared, numpy_reference(comm.size, count, np.float64, "sum"))
        reducer.free_shared(shared)
    finally:
        reducer.close()


@pytest.mark.parametrize("version, vendor", [
    ("Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11, repo rev: v5.0.11rc1",
     "openmpi"),
    ("MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 20:45:26 UTC 2026\nMPICH ABI:          18:2:6",
     "mpich"),
    ("Intel(R) MPI Library 2021.12 for Linux* OS", "mpich"),
    ("MPI library of some vendor 1.0", "other"),
])
def test_mpi_vendor_is_read_from_the_library_version(version, vendor):
    assert mpi_vendor(version) == vendor


def test_mpi_vendor_names_the_library_that_mpi4py_loaded():
    version = MPI.Get_library_version()
    assert mpi_vendor() == mpi_vendor(version) and mpi_vendor() in ("openmpi", "mpich")
