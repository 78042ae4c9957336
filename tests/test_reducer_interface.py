"""The reducer interface: every registered reducer's reduce_scatter, allgather and allgatherv against
MPI's own collectives, at any rank count; the private communicator; cost models; user reducers."""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.collectives import REDUCERS, Reducer, chunk_bounds, get_reducer, tags
from mpiopt.collectives.base import as_bytes
from mpiopt.collectives.models import Fitted, predict
from mpiopt.core import CollectiveError
from mpiopt.core.partition import offsets
from mpiopt.core.registry import names, register, unregister
from test_collectives import DTYPES, MPI_OPS, OPS, assert_agrees, data, make_reducer

pytestmark = pytest.mark.every_rank_count  # chunks, steps and partners change with every rank count

# Every registered name, and the variants that take other paths: simulated nodes, every rank a
# server (the sharded servers' own reduce-scatter), auto choosing MPI for small messages.
NAMES = list(REDUCERS) + ["hier-parity", "ps-sharded-every-rank", "auto-mpi"]


def make(name, comm):
    if name == "ps-sharded-every-rank":
        return get_reducer("ps-sharded", comm)
    if name == "auto-mpi":
        return get_reducer("auto", comm, small_bytes=64)
    return make_reducer(name, comm)


@pytest.fixture(params=NAMES)
def reducer(request, comm):
    reducer = make(request.param, comm)
    yield reducer
    reducer.close()


def counts_to_try(comm):
    """0, fewer than the ranks, not divisible by them, and larger lengths."""
    p = comm.size
    return sorted({0, 1, max(p - 1, 0), p, p + 1, 7, 13, 1001, 4099})


def mpi_reduce_scatter(comm, x, op):
    bounds = offsets(x.size, comm.size)
    out = np.empty(bounds[comm.rank + 1] - bounds[comm.rank], dtype=x.dtype)
    comm.Reduce_scatter(x, out, recvcounts=np.diff(bounds).tolist(), op=MPI_OPS[op])
    if op == "mean":
        out /= x.dtype.type(comm.size)
    return out


def mpi_allgatherv(comm, block):
    lengths = comm.allgather(block.size)
    bounds = offsets_of(lengths)
    out = np.empty(bounds[-1], dtype=block.dtype)
    itemsize = block.itemsize
    comm.Allgatherv([as_bytes(block), MPI.BYTE],
                    [as_bytes(out), [n * itemsize for n in lengths], [b * itemsize for b in bounds[:-1]], MPI.BYTE])
    return out, lengths


def offsets_of(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64).tolist()


def test_the_tests_cover_every_registered_reducer():
    assert set(names("reducer")) <= set(NAMES)
    assert list(REDUCERS)[:2] == ["mpi", "ring"]


def test_chunk_bounds_is_the_partition_rule():
    assert chunk_bounds is offsets
    assert offsets(10, 4) == [0, 3, 6, 8, 10] and offsets(2, 4) == [0, 1, 2, 2, 2] and offsets(0, 3) == [0, 0, 0, 0]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_reduce_scatter_matches_mpi_reduce_scatter_for_every_op_and_uneven_length(comm, reducer, dtype):
    for op in OPS:
        if op == "mean" and np.dtype(dtype).kind in "iu":
            continue
        for count in counts_to_try(comm):
            x = data(comm, count, dtype)
            before = x.copy()
            chunk = reducer.reduce_scatter(x, op=op)
            assert np.array_equal(x, before), "reduce_scatter changed sendbuf"
            bounds = offsets(count, comm.size)
            assert chunk.dtype == x.dtype and chunk.shape == (bounds[comm.rank + 1] - bounds[comm.rank],)
            assert_agrees(chunk, mpi_reduce_scatter(comm, x, op), dtype, op)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_allgather_matches_mpi_allgatherv_and_inverts_reduce_scatter(comm, reducer, dtype):
    for count in counts_to_try(comm):
        bounds = offsets(count, comm.size)
        chunk = data(comm, bounds[comm.rank + 1] - bounds[comm.rank], dtype, salt=count)
        expected, _ = mpi_allgatherv(comm, chunk)
        assert np.array_equal(reducer.allgather(chunk), expected)
        assert np.array_equal(reducer.allgather(chunk, count), expected)
        x = data(comm, count, dtype)
        full = np.empty_like(x)
        comm.Allreduce(x, full, op=MPI.MAX)
        assert np.array_equal(reducer.allgather(reducer.reduce_scatter(x, op="max")), full)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_allgatherv_matches_mpi_for_contributions_of_any_length_including_none(comm, reducer, dtype):
    r, p = comm.rank, comm.size
    layouts = {"all empty": 0, "rank 0 empty": 3 * r, "odd ranks only": 5 * (r % 2),
               "last rank only": 17 * (r == p - 1), "one each": 1, "large, uneven": 1000 + r}
    for layout, length in layouts.items():
        block = data(comm, length, dtype, salt=length)
        gathered, lengths = reducer.allgatherv(block)
        expected, expected_lengths = mpi_allgatherv(comm, block)
        assert lengths == expected_lengths, layout
        assert gathered.dtype == block.dtype and np.array_equal(gathered, expected), layout


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_new_operations_check_their_arguments_on_every_rank(comm, reducer):
    if comm.size == 1:
        pytest.skip("needs two ranks to disagree")
    last = comm.size - 1
    with pytest.raises(CollectiveError, match="reduce_scatter arguments differ across ranks") as caught:
        reducer.reduce_scatter(np.ones(10 + (comm.rank == last)))
    assert f"rank {last}: " in str(caught.value) and "length 11" in str(caught.value)
    with pytest.raises(CollectiveError, match=f"rank {last}: chunk has 5 elements"):
        reducer.allgather(np.ones(5 if comm.rank == last else 1))
    with pytest.raises(CollectiveError, match="allgatherv arguments differ across ranks: dtype float32"):
        reducer.allgatherv(np.ones(3, dtype=np.float32 if comm.rank == last else np.float64))
    with pytest.raises(CollectiveError, match="dtype complex128 is not supported"):
        reducer.allgatherv(np.ones(2, dtype=np.complex128 if comm.rank == 0 else np.float64))
    messages = comm.allgather(str(caught.value))
    assert all(m == messages[0] for m in messages)
    assert np.array_equal(reducer.allgather(reducer.reduce_scatter(np.ones(9))), np.full(9, comm.size)), \
        "reducer unusable after errors"


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_reducer_messages_never_meet_the_users_even_on_the_same_tags(comm, reducer):
    """Messages of the user's posted on the user's communicator, on every tag of the table, to and from
    both ring neighbours, before the calls: the reducer works on its own Dup and never consumes them."""
    every_tag = sorted({value for key, value in vars(tags).items() if key.isupper()})
    neighbours = sorted({(comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size})
    mine = np.array([1000 + comm.rank], dtype=np.int64)
    sends = [comm.Isend(mine, neighbour, tag) for neighbour in neighbours for tag in every_tag]
    assert MPI.Comm.Compare(comm, reducer.comm) == MPI.CONGRUENT, "the reducer must work on a duplicate"
    x = data(comm, 1001, np.int64)
    assert np.array_equal(reducer.allreduce(x), reference_allreduce(comm, x))
    assert np.array_equal(reducer.reduce_scatter(x), mpi_reduce_scatter(comm, x, "sum"))
    assert np.array_equal(reducer.allgather(reducer.reduce_scatter(x)), reference_allreduce(comm, x))
    gathered, lengths = reducer.allgatherv(x[:comm.rank + 1])
    assert np.array_equal(gathered, mpi_allgatherv(comm, x[:comm.rank + 1])[0])
    received = np.empty(1, dtype=np.int64)
    for neighbour in neighbours:
        for tag in every_tag:
            comm.Recv(received, neighbour, tag)
            assert received[0] == 1000 + neighbour, f"the user's message on tag {tag} was changed"
    MPI.Request.Waitall(sends)


def reference_allreduce(comm, x):
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=MPI_OPS["sum"])  # numpy's wrapping add: the same bits under every MPI
    return out


@pytest.mark.mpi
@pytest.mark.timeout(30)
def test_close_frees_the_private_communicator(comm):
    reducer = get_reducer("auto", comm)
    private = [reducer.comm, reducer.small.comm, reducer.large.comm]
    assert all(MPI.Comm.Compare(comm, c) == MPI.CONGRUENT for c in private)
    reducer.close()
    assert reducer.comm == MPI.COMM_NULL and reducer.small.comm == MPI.COMM_NULL
    reducer.close()  # a second close does nothing
    assert comm != MPI.COMM_NULL and comm.allreduce(1) == comm.size, "the user's communicator is untouched"


class StarReducer(Reducer):
    """Every rank sends to rank 0, which reduces in rank order and broadcasts the result."""

    name = "test-star"

    @classmethod
    def model(cls, p, nbytes, fitted):
        return (p - 1) * (fitted.alpha + nbytes * (fitted.beta + fitted.gamma)) + (p - 1) * fitted.alpha

    def _allreduce_inplace(self, buffer, ufunc):
        incoming = self.scratch("star", buffer.size, buffer.dtype)
        if self.rank == 0:
            for source in range(1, self.size):
                self.comm.Recv([as_bytes(incoming), MPI.BYTE], source, tags.USER)
                ufunc(buffer, incoming, out=buffer)
        else:
            self.comm.Send([as_bytes(buffer), MPI.BYTE], 0, tags.USER)
        self.comm.Bcast([as_bytes(buffer), MPI.BYTE], root=0)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_user_registered_reducer_is_usable_by_name_with_the_whole_interface(comm):
    register("reducer", "test-star", StarReducer)
    try:
        assert "test-star" in REDUCERS and REDUCERS["test-star"] is StarReducer
        with get_reducer("test-star", comm) as star:
            for dtype in DTYPES:
                x = data(comm, 1001, dtype)
                assert_agrees(star.allreduce(x), reference_allreduce(comm, x), dtype, "sum")
                assert_agrees(star.reduce_scatter(x, op="min"), mpi_reduce_scatter(comm, x, "min"), dtype, "min")
                chunk = star.reduce_scatter(x, op="max")
                expected = np.empty_like(x)
                comm.Allreduce(x, expected, op=MPI.MAX)
                assert np.array_equal(star.allgather(chunk), expected)
                gathered, lengths = star.allgatherv(x[:2 * comm.rank])
                assert lengths == [2 * r for r in range(comm.size)]
                assert np.array_equal(gathered, mpi_allgatherv(comm, x[:2 * comm.rank])[0])
        assert predict("test-star", 4, 1000, 1e-6, 1e-9, 1e-10) == pytest.approx(3 * (1e-6 + 1000 * 1.1e-9) + 3e-6)
    finally:
        unregister("reducer", "test-star")
    assert "test-star" not in REDUCERS


def test_an_unknown_name_lists_the_registered_reducers():
    with pytest.raises(ValueError, match="reducer must be one of mpi, ring, ring-seg, rd, hier, ps, ps-sharded, auto"):
        get_reducer("tree")


def test_every_reducer_class_carries_its_cost_model():
    fitted = Fitted(alpha=2e-6, beta=1e-10, gamma=5e-11, copy=8e-11, nodes=1)
    n = 1 << 20
    for name, reducer_class in REDUCERS.items():
        seconds = reducer_class.model(4, n, fitted)
        assert seconds is None if name == "mpi" else seconds > 0, name
        assert predict(name, 4, n, *fitted) == seconds, name
    ring = REDUCERS["ring"].model(4, n, fitted)
    assert REDUCERS["ring-seg"].model(4, n, fitted) == ring == REDUCERS["ps-sharded"].model(4, n, fitted)
    assert REDUCERS["ps"].model(4, n, fitted) == pytest.approx(6 * (2e-6 + n * 1e-10) + 3 * n * 5e-11)
    assert REDUCERS["hier"].model(4, n, fitted, in_window=True) == pytest.approx(
        REDUCERS["hier"].model(4, n, fitted) - 2 * n * 8e-11)
    assert REDUCERS["auto"].model(4, 1024, fitted) is None  # MPI below 64 KiB
    assert REDUCERS["auto"].model(4, n, fitted) == REDUCERS["hier"].model(4, n, fitted)  # 4 ranks on 1 node
    assert REDUCERS["auto"].model(4, n, fitted._replace(nodes=4)) == ring
    assert predict("mpi", 1, n, *fitted) == 0.0
