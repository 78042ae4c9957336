"""Hand-written reducers and MPI's own against numpy, at any rank count.

Every rank's input is made from its rank alone, so each rank makes all of them and reduces them with numpy: a
reference that does not depend on the MPI library (Open MPI's vectorized MPI_SUM saturates 8- and 16-bit
integers where MPICH and numpy wrap around), and the file passes unchanged under Open MPI and MPICH.
"""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.collectives import AsyncParameterServer, chunk_bounds, get_reducer
from mpiopt.collectives.models import fit_alpha_beta, fit_gamma_copy, predict
from mpiopt.core import CollectiveError
from mpiopt.core.comm import mpi_vendor

pytestmark = pytest.mark.every_rank_count  # the algorithms' steps differ at every rank count (odd, non-powers of two)

NAMES = ["mpi", "ring", "ring-seg", "rd", "hier", "hier-parity", "ps", "ps-sharded", "auto"]
DTYPES = [np.float64, np.float32, np.float16, np.int32, np.int64, np.uint8, np.int8]
OPS = ["sum", "max", "min", "mean"]


def _add_in_numpy(inbuf, inoutbuf, datatype):
    total = np.frombuffer(inoutbuf, dtype=np.dtype(datatype.tocode()))
    np.add(total, np.frombuffer(inbuf, dtype=total.dtype), out=total)


# For tests/test_reducer_interface.py, whose references are MPI's collectives: the sum is numpy's wrapping add
# as an MPI op of the test's own (not the "mpi" reducer's), which gives numpy's answer under any MPI.
NUMPY_SUM = MPI.Op.Create(_add_in_numpy, commute=True)
MPI_OPS = {"sum": NUMPY_SUM, "max": MPI.MAX, "min": MPI.MIN, "mean": NUMPY_SUM}
REDUCE = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 2e-2}


def make_reducer(name, comm):
    """Reducers by test name; small segments and simulated nodes exercise the special paths."""
    if name == "ring-seg":
        return get_reducer("ring-seg", comm, segment_bytes=24)
    if name == "hier-parity":
        return get_reducer("hier", comm, node_of=lambda rank: rank % 2)
    if name == "ps-sharded":
        return get_reducer("ps-sharded", comm, servers=list(range(comm.size))[::-1][:2])
    if name == "ps":
        return get_reducer("ps", comm, server=comm.size - 1)
    if name == "auto":
        return get_reducer("auto", comm, small_bytes=64, small="rd")
    return get_reducer(name, comm)


@pytest.fixture(params=NAMES)
def reducer(request, comm):
    reducer = make_reducer(request.param, comm)
    yield reducer
    reducer.close()


def data(comm, count, dtype, salt=0, rank=None):
    """Rank ``rank``'s input (this rank's when None): any rank can make any rank's."""
    rank = comm.rank if rank is None else rank
    rng = np.random.default_rng(1000 * rank + count + salt)
    if np.dtype(dtype).kind in "iu":  # integer sums may wrap around (uint8, int8), as numpy's do
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), count).astype(dtype)
    return (rng.standard_normal(count) * 10).astype(dtype)


def reference(comm, count, dtype, op, salt=0):
    """The reduction of every rank's ``data``, in numpy: integer sums wrap around in the dtype, floating
    sums are taken in float64 and rounded once."""
    inputs = np.stack([data(comm, count, dtype, salt, rank) for rank in range(comm.size)])
    return reduce_in_numpy(inputs, op)


def exact_input(rank, count, dtype):
    """Rank ``rank``'s input for the bitwise checks: integers in the upper half of an 8-bit type's range (so
    that two ranks' sum overflows it), quarters for the floating types; every order of summation gives the
    same bits, so any difference from numpy is the reducer's or the MPI's."""
    values = (np.arange(count) * 37 + rank * 101) % 61 + 60  # 60..120
    if np.dtype(dtype) == np.uint8:
        values = values * 2
    if np.dtype(dtype).kind == "f":
        return (values / 4).astype(dtype)
    return values.astype(dtype)


def reduce_in_numpy(inputs, op):
    """``op`` over the first axis of ``inputs`` (one row per rank), in their dtype."""
    dtype = inputs.dtype
    if op in ("max", "min"):
        return REDUCE[op](inputs, axis=0)
    total = np.add.reduce(inputs, axis=0, dtype=dtype if dtype.kind in "iu" else np.float64)
    return (total / len(inputs) if op == "mean" else total).astype(dtype)


def assert_agrees(result, expected, dtype, op):
    if np.dtype(dtype).kind in "iu" or op in ("max", "min"):
        assert np.array_equal(result, expected)
    else:
        scale = max(float(np.abs(expected.astype(np.float64)).max(initial=0.0)), 1.0)
        assert np.abs(result.astype(np.float64) - expected.astype(np.float64)).max(initial=0.0) \
            <= TOLERANCE[dtype] * scale * 10


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("op", OPS)
def test_reducer_matches_numpy_for_every_dtype_op_and_length(comm, reducer, dtype, op):
    if op == "mean" and np.dtype(dtype).kind in "iu":
        pytest.skip("mean is defined for floating types")
    for count in sorted({0, 1, max(comm.size - 1, 0), 7, 13, 1000, 10007}):
        x = data(comm, count, dtype)
        before = x.copy()
        result = reducer.allreduce(x, op=op)
        assert np.array_equal(x, before), "out-of-place call changed sendbuf"
        assert result.dtype == x.dtype and result.shape == x.shape
        assert_agrees(result, reference(comm, count, dtype, op), dtype, op)
        if reducer.name != "mpi":
            copies = comm.allgather(result.tobytes())
            assert all(c == copies[0] for c in copies), "ranks hold different results"


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_every_reducer_gives_numpys_bits_on_exact_inputs_and_wraps_narrow_integer_sums(comm):
    """Bitwise, for every reducer, dtype and op: allreduce out of place and in place, reduce_scatter (at 2
    ranks both MPI_Reduce_scatter_block and MPI_Reduce_scatter) and allgather; 1000 elements are enough for an
    MPI's vectorized ops."""
    wrong = []
    for name in NAMES:
        reducer = make_reducer(name, comm)
        for dtype in DTYPES:
            for op in OPS if np.dtype(dtype).kind == "f" else ["sum", "max", "min"]:
                for count in (1, 7, 1000):
                    whole = reduce_in_numpy(np.stack([exact_input(rank, count, dtype)
                                                      for rank in range(comm.size)]), op)
                    bounds = chunk_bounds(count, comm.size)
                    mine = exact_input(comm.rank, count, dtype)
                    in_place = mine.copy()
                    reducer.allreduce(in_place, in_place, op=op)
                    chunk = reducer.reduce_scatter(mine, op=op)
                    results = {"allreduce": (reducer.allreduce(mine, op=op), whole),
                               "in-place allreduce": (in_place, whole),
                               "reduce_scatter": (chunk, whole[bounds[comm.rank]:bounds[comm.rank + 1]]),
                               "allgather": (reducer.allgather(chunk, count), whole)}
                    wrong += [f"{name} {operation} {op} of {count} {np.dtype(dtype).name}: "
                              f"{result[:4].tolist()}... instead of {expected[:4].tolist()}..."
                              for operation, (result, expected) in results.items()
                              if result.dtype != expected.dtype or result.tobytes() != expected.tobytes()]
        reducer.close()
    assert not wrong, f"rank {comm.rank} under {mpi_vendor()}: not numpy's bits in " + "; ".join(wrong[:8])


@pytest.mark.mpi
def test_in_place_and_given_recvbuf(comm, reducer):
    x = data(comm, 1001, np.float64)
    expected = reference(comm, 1001, np.float64, "sum")
    out = np.full_like(x, np.nan)
    assert reducer.allreduce(x, out) is not None
    assert_agrees(out, expected, np.float64, "sum")
    y = x.copy()
    reducer.allreduce(y, y)
    assert_agrees(y, expected, np.float64, "sum")
    matrix = x[:1000].reshape(20, 50).copy()
    reducer.allreduce(matrix, matrix, op="max")
    assert np.array_equal(matrix, reference(comm, 1001, np.float64, "max")[:1000].reshape(20, 50))


@pytest.mark.mpi
def test_repeated_calls_reuse_scratch_buffers(comm, reducer):
    for call in range(6):
        x = data(comm, 4099, np.float32, salt=call)
        result = reducer.allreduce(x, x)
        assert_agrees(result, reference(comm, 4099, np.float32, "sum", salt=call), np.float32, "sum")
        if call == 1:
            scratch = {key: buffer.ctypes.data for key, buffer in reducer._scratch.items()}
    assert {key: buffer.ctypes.data for key, buffer in reducer._scratch.items()} == scratch


@pytest.mark.mpi
def test_lengths_that_disagree_raise_on_every_rank(comm, reducer):
    if comm.size == 1:
        pytest.skip("needs two ranks to disagree")
    x = np.ones(10 + (comm.rank == comm.size - 1), dtype=np.float64)
    with pytest.raises(CollectiveError, match="allreduce arguments differ across ranks") as caught:
        reducer.allreduce(x)
    messages = comm.allgather(str(caught.value))
    assert all(m == messages[0] for m in messages)
    assert f"rank {comm.size - 1}: " in messages[0] and "length 11" in messages[0]
    assert np.array_equal(reducer.allreduce(np.ones(3)), np.full(3, comm.size)), "reducer unusable after error"


@pytest.mark.mpi
def test_bad_arguments_raise_on_every_rank(comm):
    ring = get_reducer("ring", comm)
    with pytest.raises(CollectiveError, match="op 'mean' needs a floating dtype"):
        ring.allreduce(np.ones(4, dtype=np.int32), op="mean")
    with pytest.raises(CollectiveError, match="dtype complex128 is not supported"):
        ring.allreduce(np.ones(4, dtype=np.complex128))
    with pytest.raises(CollectiveError, match="op must be one of sum, max, min, mean, got 'prod'"):
        ring.allreduce(np.ones(4), op="prod")
    with pytest.raises(ValueError, match="unknown reducer 'tree'"):
        get_reducer("tree", comm)


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["ring", "hier", "hier-parity", "rd"])
def test_large_message(comm, name):
    """64 MiB of float64 plus one element: a prime-ish length far above every threshold."""
    reducer = make_reducer(name, comm)
    x = np.full((8 << 20) + 1, comm.rank + 0.5)
    x[::3] = -comm.rank
    result = reducer.allreduce(x, x)
    expected = np.full(x.size, sum(r + 0.5 for r in range(comm.size)))
    expected[::3] = -sum(range(comm.size))
    assert np.array_equal(result, expected)
    reducer.close()


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["ring", "ps-sharded"])
def test_reduce_scatter_and_allgather_halves(comm, name):
    reducer = get_reducer(name, comm)
    count = 103
    x = data(comm, count, np.int64)
    full = reference(comm, count, np.int64, "sum")
    chunk = reducer.reduce_scatter(x)
    bounds = chunk_bounds(count, comm.size)
    assert np.array_equal(chunk, full[bounds[comm.rank]:bounds[comm.rank + 1]])
    if name == "ring":
        assert np.array_equal(reducer.allgather(chunk, count), full)


@pytest.mark.mpi
def test_hier_uses_one_window_per_node_and_frees_it(comm):
    reducer = get_reducer("hier", comm, node_of=lambda rank: rank % 2)
    assert reducer.nodes == min(comm.size, 2)
    assert reducer.local_size == len(range(comm.rank % 2, comm.size, 2))
    assert np.array_equal(reducer.allreduce(np.ones(100)), np.full(100, comm.size))
    assert (reducer._scratch_slots is not None) == (comm.size > 1), "the window is made on first use"
    reducer.close()
    assert reducer._scratch_slots is None


@pytest.mark.mpi
@pytest.mark.parametrize("node_of", [None, lambda rank: rank % 2], ids=["one-node", "parity-nodes"])
def test_hier_shared_buffer_reduces_in_place_without_copies(comm, node_of):
    reducer = get_reducer("hier", comm, node_of=node_of)
    buffer = reducer.shared_buffer(1001, np.float32)
    assert buffer.shape == (1001,) and np.all(buffer == 0)
    for call in range(3):
        buffer[...] = data(comm, 1001, np.float32, salt=call)
        expected = reference(comm, 1001, np.float32, "sum", salt=call)
        address = buffer.ctypes.data
        result = reducer.allreduce(buffer, buffer)
        assert result.ctypes.data == address
        assert_agrees(buffer, expected, np.float32, "sum")
        assert comm.allgather(buffer.tobytes()) == [buffer.tobytes()] * comm.size
    private = data(comm, 1001, np.float32, salt=9)
    assert_agrees(reducer.allreduce(private), reference(comm, 1001, np.float32, "sum", salt=9), np.float32, "sum")
    reducer.close()


@pytest.mark.mpi
def test_async_parameter_server_shuts_down_cleanly_with_idle_workers(comm):
    server = AsyncParameterServer(5, comm=comm, server=0)
    if comm.rank == 0:
        model = np.zeros(5)
        stats = server.serve(model)
        active = [r for r in range(1, comm.size) if r % 2 == 1]
        assert stats["pushes"] == {r: (3 if r in active else 0) for r in range(1, comm.size)}
        assert np.array_equal(model, np.full(5, 3.0 * sum(active)))
        assert stats["version"] == 3 * len(active)
    elif comm.rank % 2 == 1:
        for _ in range(3):
            model, version = server.pull()
            server.push(np.full(5, float(comm.rank)), version)
        server.close()
    else:
        server.close()  # an idle worker: never pushes or pulls
    server.free()
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_async_parameter_server_reports_staleness(comm):
    server = AsyncParameterServer(2, comm=comm, server=comm.size - 1)
    if server.is_server:
        seen = []
        stats = server.serve(np.zeros(2), apply=lambda model, update, worker, lag: seen.append(lag))
        assert stats["max_staleness"] == max(seen)
        assert len(seen) == 2 * (comm.size - 1)
    else:
        model, version = server.pull()
        server.push(np.ones(2), version)
        server.push(np.ones(2), version)  # based on an older model: staleness >= 1
        server.close()
    server.free()


def test_cost_models_follow_the_closed_forms():
    alpha, beta, gamma = 1e-6, 1e-9, 5e-10
    n = 1 << 20
    assert predict("ring", 4, n, alpha, beta, gamma) == pytest.approx(6 * alpha + 1.5 * n * beta + 0.75 * n * gamma)
    assert predict("rd", 4, n, alpha, beta, gamma) == pytest.approx(2 * (alpha + n * beta + n * gamma))
    assert predict("rd", 3, n, alpha, beta, gamma) == pytest.approx(
        (alpha + n * beta + n * gamma) + 2 * (alpha + n * beta) + n * gamma)
    assert predict("ps", 4, n, alpha, beta, gamma) == pytest.approx(6 * (alpha + n * beta) + 3 * n * gamma)
    assert predict("mpi", 4, n, alpha, beta, gamma) is None
    ring_bytes = [predict("ring", p, n, 0, beta, 0) / (n * beta) for p in (2, 4, 8, 64)]
    assert ring_bytes == pytest.approx([2 * (p - 1) / p for p in (2, 4, 8, 64)])


@pytest.mark.mpi
def test_fitted_parameters_are_real_times_and_shared(comm):
    # A latency is never zero; the per-byte slope can fit to 0 when a loaded machine slows a small message
    # more than a large one (the fit's arithmetic is checked against known parameters below).
    alpha, beta = fit_alpha_beta(comm, sizes=[8, 1 << 10, 1 << 16, 1 << 20], repeats=5)
    gamma, copy = fit_gamma_copy(nbytes=1 << 20, repeats=3)
    assert gamma > 0 and copy > 0
    if comm.size > 1:
        assert alpha > 0 and beta >= 0 and np.isfinite(beta)
    else:
        assert (alpha, beta) == (0.0, 0.0)
    assert comm.allgather((alpha, beta)) == [(alpha, beta)] * comm.size


def test_alpha_beta_fit_recovers_known_parameters():
    from mpiopt.collectives.models import _fit
    sizes = [8 << k for k in range(0, 22, 3)]
    alpha, beta = 5e-6, 1e-10
    assert _fit(sizes, [alpha + n * beta for n in sizes]) == pytest.approx((alpha, beta), rel=0.02)
