"""Seeded random streams per purpose, and the synthetic data they generate unchanged."""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core.random import random_stream, seed_problem
from mpiopt.data import make_lasso
from mpiopt.data.synthetic import BLOCK_ROWS, lasso_rows, true_coefficients


def old_generator(seed, *stream):
    """data/synthetic.py's private helper before random_stream replaced it."""
    return np.random.default_rng(np.random.SeedSequence([seed, *stream]))


def old_lasso_rows(m, n, start, stop, density, noise, seed, correlation):
    """lasso_rows as written before random_stream (the reference the new code must reproduce bit for bit)."""
    rng = old_generator(seed, 0)
    x_true = np.zeros(n)
    support = rng.choice(n, size=min(max(1, int(round(density * n))), n), replace=False)
    x_true[np.sort(support)] = rng.standard_normal(support.size)
    A, b = np.empty((stop - start, n)), np.empty(stop - start)
    for block in range(start // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS + 1 if stop > start else 0):
        block_start, block_stop = block * BLOCK_ROWS, min((block + 1) * BLOCK_ROWS, m)
        rng = old_generator(seed, 1, block)
        block_A = rng.standard_normal((block_stop - block_start, n))
        if correlation:
            shared = rng.standard_normal((block_stop - block_start, 1))
            block_A *= np.sqrt(1.0 - correlation)
            block_A += np.sqrt(correlation) * shared
        block_A *= 1.0 / np.sqrt(m)
        block_b = block_A @ x_true + noise * rng.standard_normal(block_stop - block_start)
        lo, hi = max(start, block_start), min(stop, block_stop)
        A[lo - start:hi - start] = block_A[lo - block_start:hi - block_start]
        b[lo - start:hi - start] = block_b[lo - block_start:hi - block_start]
    return A, b, x_true


@pytest.mark.parametrize("seed", [0, 7, 2**40])
@pytest.mark.parametrize("keys", [(0,), (1, 0), (1, 3), (5, 6, 7)])
def test_integer_purposes_are_the_seed_sequence_of_seed_and_keys(seed, keys):
    expected = old_generator(seed, *keys).standard_normal(50)
    assert np.array_equal(random_stream(seed, *keys).standard_normal(50), expected)


def test_string_purposes_are_stable_across_processes_and_runs():
    # Python's hash is salted per process; the CRC-32 of a name is not, so these numbers never change.
    assert random_stream(7, "minibatch", 2).integers(0, 2**32, 3).tolist() == [4123616029, 2111374742, 2850938698]
    assert random_stream(0, "init_params").integers(0, 1000, 4).tolist() == [978, 350, 78, 560]


def test_each_purpose_seed_and_key_gives_its_own_stream():
    draws = [random_stream(seed, *purpose).integers(0, 2**63, 4).tobytes()
             for seed in (0, 1) for purpose in [("minibatch", 0), ("minibatch", 1), ("init_params",),
                                               ("dataset-split", "digits"), ("dataset-split", "breast_cancer"),
                                               (1, 0, 1), (1, 1, 0)]]
    assert len(set(draws)) == len(draws)


def test_numpy_integers_name_the_same_stream_as_python_integers():
    assert np.array_equal(random_stream(np.int64(3), "minibatch", np.uint32(4)).random(5),
                          random_stream(3, "minibatch", 4).random(5))


@pytest.mark.parametrize("seed, message", [(-1, "seed must be an integer >= 0, got -1"),
                                           (1.5, "seed must be an integer >= 0, got 1.5"),
                                           (None, "seed must be an integer >= 0, got None"),
                                           (True, "seed must be an integer >= 0, got True")])
def test_bad_seeds_are_rejected_with_the_value(seed, message):
    assert seed_problem(seed) == message
    with pytest.raises(ValueError, match=message):
        random_stream(seed, "minibatch")


def test_bad_purpose_keys_are_rejected():
    with pytest.raises(TypeError, match=r"a purpose key must be a string or an integer, got 0.5 \(float\)"):
        random_stream(0, "minibatch", 0.5)
    with pytest.raises(ValueError, match=r"an integer purpose key must be in \[0, 2\*\*32\), got -1"):
        random_stream(0, -1)
    with pytest.raises(ValueError, match=r"in \[0, 2\*\*32\), got 4294967296"):
        random_stream(0, 2**32)


@pytest.mark.parametrize("correlation", [0.0, 0.4])
def test_synthetic_lasso_rows_are_bit_identical_to_the_old_generator(correlation):
    m, n = BLOCK_ROWS + 300, 9  # two blocks
    expected_A, expected_b, expected_x = old_lasso_rows(m, n, 0, m, 0.3, 0.05, 11, correlation)
    A, b = lasso_rows(m, n, 0, m, density=0.3, noise=0.05, seed=11, correlation=correlation)
    assert np.array_equal(A, expected_A) and np.array_equal(b, expected_b)
    assert np.array_equal(true_coefficients(n, 0.3, 11), expected_x)
    part_A, part_b = lasso_rows(m, n, BLOCK_ROWS - 5, m - 7, density=0.3, noise=0.05, seed=11,
                                correlation=correlation)
    assert np.array_equal(part_A, expected_A[BLOCK_ROWS - 5:m - 7])
    assert np.array_equal(part_b, expected_b[BLOCK_ROWS - 5:m - 7])


def test_make_lasso_is_bit_identical_to_the_old_generator():
    A, b, x_true = make_lasso(500, 40, density=0.1, noise=0.01, seed=3, comm=MPI.COMM_SELF)
    expected_A, expected_b, expected_x = old_lasso_rows(500, 40, 0, 500, 0.1, 0.01, 3, 0.0)
    assert np.array_equal(A, expected_A) and np.array_equal(b, expected_b) and np.array_equal(x_true, expected_x)
