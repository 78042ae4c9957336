"""The compiled float16 sum (mpiopt.kernels.halves) against numpy's own float16 add, bit for bit."""
import numpy as np
import pytest

from mpiopt.kernels import compiled, halves

pytest.importorskip("numba")

ALL_HALVES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _same(expected, got):
    """Bitwise equal, NaN for NaN (numpy's NaN payloads are not part of the claim)."""
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(expected.view(np.uint16)[~nan], got.view(np.uint16)[~nan])


def _reference(a, b):
    with np.errstate(all="ignore"):
        return np.add(a, b)


def test_every_half_plus_a_spread_of_halves():
    # every half against values that exercise each rounding regime: ties at every exponent, overflow past
    # 65504, subnormal results, signed zeros, infinities, NaN
    partners = np.array([0.0, -0.0, 2.0 ** -24, -(2.0 ** -24), 2.0 ** -14, 2.0 ** -15, 1.0, -1.0, 1.0 + 2.0 ** -10,
                         0.5, 3.0, 1024.0, 2048.0, -2048.0, 32768.0, 65504.0, -65504.0, 32.0, np.inf, -np.inf, np.nan],
                        dtype=np.float16)
    for partner in partners:
        b = np.full(ALL_HALVES.size, partner, dtype=np.float16)
        out = np.empty_like(ALL_HALVES)
        with compiled.use(True):
            halves.add(ALL_HALVES, b, out)
        _same(_reference(ALL_HALVES, b), out)


def test_random_pairs_in_place_and_odd_lengths():
    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 2047, 2048, 2049, 10007, 2 * halves.CHUNK + 5):
        a = rng.choice(ALL_HALVES, n)
        b = (rng.standard_normal(n) * 10.0 ** rng.integers(-7, 5, n)).astype(np.float16)
        expected = _reference(a, b)
        for into in ("a", "b", "both", "new"):  # into an input (by pieces, as the ring reduces) or apart
            left, right = a.copy(), b.copy()
            if into == "both":
                left = right
                expected_now = _reference(right, right)
            else:
                expected_now = expected
            out = {"a": left, "b": right, "both": right, "new": np.empty_like(right)}[into]
            with compiled.use(True):
                assert halves.add(left, right, out) is out
            _same(expected_now, out)


def test_the_switch_runs_numpy_and_other_dtypes_fall_back():
    a = np.arange(10, dtype=np.float16)
    out = np.empty_like(a)
    with compiled.use(False):
        assert not compiled.enabled()
        halves.add(a, a, out)
    np.testing.assert_array_equal(out, a + a)
    wide = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(halves.add(wide, wide, np.empty_like(wide)), 2 * wide)


@pytest.mark.mpi(min_size=2)
@pytest.mark.many_ranks
@pytest.mark.parametrize("name", ["ring", "ring-seg", "rd", "hier", "ps", "ps-sharded"])
def test_hand_written_reducers_sum_halves_as_numpy_does(name, comm, monkeypatch):
    """A float16 sum reduced through mpiopt.collectives.base.combiner: the compiled add and numpy's add give the
    same bits at every step, so the all-reduce is bitwise the same with the compiled kernels on and off; and
    equal to the sum of the ranks' float32 values within float16's rounding."""
    from mpiopt.collectives import get_reducer
    rng = np.random.default_rng(100 + comm.rank)
    x = (rng.standard_normal(50_003) * 30).astype(np.float16)
    x[:5] = [np.inf, -np.inf, 65504, -0.0, 6e-8]
    reducer = get_reducer(name, comm)
    try:
        with compiled.use(False), np.errstate(over="ignore"):  # 65504 + 65504 overflows to inf, as it should
            expected = reducer.allreduce(x.copy())
        calls = []
        compiled_add = halves._add_compiled
        monkeypatch.setattr(halves, "_add_compiled", lambda *args: calls.append(1) or compiled_add(*args))
        with compiled.use(True):
            got = reducer.allreduce(x.copy())
    finally:
        reducer.close()
    _same(expected, got)
    assert comm.allreduce(len(calls)) > 0  # the compiled sum ran (on the ranks that reduce)
    exact = comm.allreduce(x[5:].astype(np.float64))
    assert np.allclose(got[5:].astype(np.float64), exact, rtol=2e-2, atol=0.5 * comm.size)
