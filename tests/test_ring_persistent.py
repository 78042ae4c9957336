"""The ring's plans (persistent requests on fixed buffers, no copies): bit for bit what the ring computes,
whatever buffers, sizes, dtypes and ops follow one another, and nothing left behind by ``close``."""
import gc

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.collectives import get_reducer
from mpiopt.collectives.ring import PLAN_CACHE
from mpiopt.collectives.traffic import ring_allgather_bytes, ring_allreduce_bytes
from mpiopt.core.partition import offsets

pytestmark = [pytest.mark.every_rank_count, pytest.mark.timeout(120)]  # the ring's steps change with every rank count

VARIANTS = ["ring", "ring-seg", "ring-seg-tiny"]
DTYPES = [np.float64, np.float32, np.float16, np.int32, np.int64, np.uint8, np.int8]
UFUNCS = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}
MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}


@pytest.fixture(params=VARIANTS)
def ring(request, comm):
    reducer = make(request.param, comm)
    yield reducer
    reducer.close()


TINY_SEGMENT = 24  # bytes: many segments per chunk


def make(name, comm):
    """ring; ring-seg with its default segments; ring-seg with segments of 24 bytes (many per chunk)."""
    if name == "ring-seg-tiny":
        return get_reducer("ring-seg", comm, segment_bytes=TINY_SEGMENT)
    return get_reducer(name, comm)


def lengths(p, reducer=None):
    """Empty chunks (n < p), n not divisible by p, and longer vectors; with 24-byte segments up to 1000
    entries, already tens to hundreds of segments per chunk (10007 would only repeat them, thousands of times)."""
    longest = 1000 if getattr(reducer, "segment_bytes", 0) == TINY_SEGMENT else 10007
    return sorted({1, max(p - 1, 1), p + 1, 7, 1000, longest})


def random_data(comm, count, dtype, salt=0):
    rng = np.random.default_rng(7919 * comm.rank + 31 * count + salt)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), count).astype(dtype)
    return (rng.standard_normal(count) * 10).astype(dtype)


def ring_order(comm, x, op):
    """The ring's result computed here from every rank's ``x``: chunk c is complete at rank c as
    x_c + (x_{c-1} + ... (x_{c+2} + x_{c+1})) (each rank adds its own chunk first, then the incoming one)."""
    p = comm.size
    every = comm.allgather(x)
    bounds = offsets(x.size, p)
    ufunc = UFUNCS[op]
    out = np.empty_like(x)
    for c in range(p):
        lo, hi = bounds[c], bounds[c + 1]
        total = every[(c + 1) % p][lo:hi].copy()
        for k in range(2, p + 1):
            total = ufunc(every[(c + k) % p][lo:hi], total)
        out[lo:hi] = total
    if op == "mean":
        out /= x.dtype.type(p)
    return out


def mpi_allreduce(comm, x, op):
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=MPI_OPS[op])
    return out


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
def test_exact_values_match_mpi_allreduce_bit_for_bit(comm, ring, dtype):
    """Small integers (exact in every dtype, float16 included): MPI_Allreduce's answer, out of place and in
    place, for every op and length, twice on the same buffers (the second call runs the cached plan)."""
    for op in ("sum", "max", "min"):
        for count in lengths(comm.size, ring):
            rng = np.random.default_rng(100 * comm.rank + count)
            x = rng.integers(-5, 6 if np.dtype(dtype).kind != "u" else 11, count).astype(dtype)
            if np.dtype(dtype).kind == "u":
                x = rng.integers(0, 11, count).astype(dtype)
            expected = mpi_allreduce(comm, x, op)
            out = np.full_like(x, 99)
            for _ in range(2):
                before = x.copy()
                assert ring.allreduce(x, out, op=op) is not None
                assert same_bits(out, expected), (op, count)
                assert same_bits(x, before), "out-of-place call changed sendbuf"
            y = x.copy()
            ring.allreduce(y, y, op=op)
            assert same_bits(y, expected), ("in place", op, count)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_random_floats_are_summed_in_the_rings_order(comm, ring, dtype, op):
    for count in lengths(comm.size, ring):
        x = random_data(comm, count, dtype)
        expected = ring_order(comm, x, op)
        assert same_bits(ring.allreduce(x, op=op), expected), ("new array", count)
        out = np.empty_like(x)
        for _ in range(3):
            ring.allreduce(x, out, op=op)
            assert same_bits(out, expected), ("given recvbuf, repeated", count)
        y = x.copy()
        ring.allreduce(y, y, op=op)
        assert same_bits(y, expected), ("in place", count)


@pytest.mark.mpi(min_size=2)
def test_plans_are_reused_for_the_same_buffers_and_rebuilt_for_others(comm, ring):
    x = random_data(comm, 4099, np.float64)
    out = np.empty_like(x)
    expected = ring_order(comm, x, "sum")
    ring.allreduce(x, out)
    plans = dict(ring._plans)
    assert len(plans) == 1
    for _ in range(3):
        out[...] = 0
        ring.allreduce(x, out)
        assert same_bits(out, expected)
    assert all(ring._plans[key] is plan for key, plan in plans.items()), "same buffers: the same plan"
    # Other buffers, sizes, dtypes and ops, in turn, then the first ones again: every answer exact.
    for call in range(2 * PLAN_CACHE + 3):
        dtype = (np.float64, np.float32, np.int32, np.float16)[call % 4]
        count = (1, comm.size + 1, 1000, 4099, 17)[call % 5]
        op = ("sum", "max", "min")[call % 3]
        y = random_data(comm, count, dtype, salt=call)
        assert same_bits(ring.allreduce(y, op=op), ring_order(comm, y, op)), call
        z = y.copy()
        ring.allreduce(z, z, op=op)
        assert same_bits(z, ring_order(comm, y, op)), call
        assert len(ring._plans) <= PLAN_CACHE
    ring.allreduce(x, out)
    assert same_bits(out, expected)
    assert (ring.last_bytes_sent, ring.last_bytes_received) == ring_allreduce_bytes(x.size, 8, comm.size, comm.rank)


@pytest.mark.mpi(min_size=2)
def test_a_plan_is_never_started_on_a_buffer_whose_array_has_died(comm, ring):
    """Two arrays at the same address, one after the other (the second made when the first is gone): the
    plan built on the first is dropped and its requests freed, not run on the second."""
    raw = bytearray(8 * 1001)
    first = np.frombuffer(raw, dtype=np.float64)
    first[...] = random_data(comm, 1001, np.float64)
    expected = ring_order(comm, first.copy(), "sum")
    ring.allreduce(first, first)
    assert same_bits(first, expected)
    (key, plan), = ring._plans.items()
    requests = list(plan.requests)
    assert requests and all(request != MPI.REQUEST_NULL for request in requests)
    address = first.ctypes.data
    del first
    gc.collect()
    second = np.frombuffer(raw, dtype=np.float64)
    assert second.ctypes.data == address
    second[...] = random_data(comm, 1001, np.float64, salt=1)
    expected = ring_order(comm, second.copy(), "sum")
    ring.allreduce(second, second)
    assert same_bits(second, expected)
    assert ring._plans[key] is not plan
    assert all(request == MPI.REQUEST_NULL for request in requests), "the dropped plan's requests are freed"


@pytest.mark.mpi(min_size=2)
def test_views_of_one_array_share_the_plan(comm, ring):
    """A new view of the same memory each call (``reshape``, as every call makes) keeps the plan."""
    x = random_data(comm, 12 * 10, np.float32).reshape(12, 10)
    out = np.empty_like(x)
    expected = ring_order(comm, x.reshape(-1), "sum").reshape(12, 10)
    ring.allreduce(x, out)
    plan = next(iter(ring._plans.values()))
    for _ in range(3):
        ring.allreduce(x[:], out[:])
        assert same_bits(out, expected)
    assert list(ring._plans.values()) == [plan]


@pytest.mark.mpi(min_size=2)
def test_reduce_scatter_allgather_and_allgatherv_are_exact_and_repeatable(comm, ring):
    p, rank = comm.size, comm.rank
    for count in lengths(p, ring):
        x = random_data(comm, count, np.float64)
        full = ring_order(comm, x, "sum")
        bounds = offsets(count, p)
        for _ in range(2):
            chunk = ring.reduce_scatter(x)
            assert same_bits(chunk, full[bounds[rank]:bounds[rank + 1]]), count
            assert same_bits(ring.allgather(chunk, count), full), count
            assert (ring.last_bytes_sent, ring.last_bytes_received) == ring_allgather_bytes(
                [(bounds[r + 1] - bounds[r]) * 8 for r in range(p)], rank)
        block = np.arange(rank + 1 + count % 3, dtype=np.int32) * (rank + 1)
        for _ in range(2):
            gathered, counts = ring.allgatherv(block)
            assert counts == [r + 1 + count % 3 for r in range(p)]
            assert same_bits(gathered, np.concatenate(comm.allgather(block)))


@pytest.mark.mpi(min_size=2)
def test_close_frees_every_persistent_request(comm):
    ring = get_reducer("ring", comm)
    x = random_data(comm, 1000, np.float32)
    ring.allreduce(x)
    ring.reduce_scatter(x)
    ring.allgatherv(x[:3 + comm.rank])
    requests = [request for plan in ring._plans.values() for request in plan.requests]
    assert len(ring._plans) == 3 and requests
    ring.close()
    assert not ring._plans
    assert all(request == MPI.REQUEST_NULL for request in requests)
    with pytest.raises(MPI.Exception):  # its communicator is freed: an error here, not a hang or a stale plan
        ring.reduce_into(x, np.empty_like(x))
    again = get_reducer("ring", comm)  # a new reducer on the same communicator works from scratch
    assert same_bits(again.allreduce(x), ring_order(comm, x, "sum"))
    again.close()
    ring.close()  # twice: nothing left to free


@pytest.mark.mpi
def test_one_rank_copies_without_plans(comm):
    if comm.size > 1:
        pytest.skip("the one-rank path")
    ring = get_reducer("ring-seg", comm, segment_bytes=24)
    x = random_data(comm, 101, np.float64)
    assert same_bits(ring.allreduce(x), x)
    assert same_bits(ring.reduce_scatter(x), x)
    assert not ring._plans
    ring.close()
