"""The compressed reducer at 1-4 ranks: its decoded sum against the sum of every rank's decoded payload
(computed here with a twin compressor and MPI's own allgather), each path, uneven and empty buffers,
the bytes it counts against the payload sizes, error feedback across ranks, options and errors."""
import numpy as np
import pytest

from mpiopt.collectives import CompressedReducer, get_reducer
from mpiopt.compression import ErrorFeedback, get_compressor
from mpiopt.core import CollectiveError
from mpiopt.core.partition import offsets

pytestmark = pytest.mark.every_rank_count  # the ring's steps and the gathered payloads change with every rank count

ALLGATHERED = ["bf16", "qsgd8", "qsgd4", "sign", "topk"]
SUMMED = ["none", "fp16", "randomk"]
OPTIONS = {"topk": {"ratio": 0.1}, "randomk": {"ratio": 0.25}, "qsgd4": {"bucket_size": 64}}


def sizes(comm):
    """Empty, fewer elements than ranks, not divisible by the ranks, larger."""
    return sorted({0, 1, max(comm.size - 1, 1), comm.size + 1, 1001})


def local_data(comm, n, dtype=np.float32, salt=0):
    return (np.random.default_rng(100 * comm.rank + n + salt).standard_normal(n) * 4).astype(dtype)


def twin(name, worker):
    return get_compressor(name, **OPTIONS.get(name, {}), **({"worker": worker} if name.startswith("qsgd") else {}))


def decoded_sum(comm, compressor, x, name, step):
    """Every rank's payload of ``x`` decoded and added in rank order, as a rank that received them would."""
    payload, ctx = compressor.compress(x, name, step)
    total = np.zeros(x.size, dtype=x.dtype)
    for rank_payload in comm.allgather(payload):
        total += compressor.decompress(rank_payload, ctx)
    return total, ctx


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("compressor", ALLGATHERED + SUMMED)
def test_decoded_sum_equals_the_sum_of_every_ranks_decoded_payload(comm, compressor):
    reducer = get_reducer("ring", comm, compressor=compressor, error_feedback=False,
                          compressor_options=OPTIONS.get(compressor, {}))
    reference = twin(compressor, comm.rank)
    assert reducer.mode == ("allreduce" if compressor in SUMMED else "allgather")
    for step, n in enumerate(sizes(comm)):
        for repeat in range(2):  # the step advances per buffer name
            x = local_data(comm, n, salt=repeat)
            out = reducer.allreduce(x, name=f"g{n}")
            expected, ctx = decoded_sum(comm, reference, x, f"g{n}", repeat)
            assert out.shape == x.shape and out.dtype == x.dtype
            if compressor in ALLGATHERED:
                assert np.array_equal(out, expected), (n, repeat)
            else:  # summed as payloads in the ring: float16 or float32 roundings of the partial sums
                magnitude = comm.size * np.abs(expected).max(initial=0)
                eps = 2.0 ** -11 if compressor == "fp16" else 2.0 ** -24
                np.testing.assert_allclose(out, expected, rtol=0, atol=comm.size * eps * magnitude + 1e-30)
    reducer.close()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fp16_sums_of_exactly_representable_values_are_exact(comm):
    with get_reducer("ring", comm, compressor="fp16") as reducer:
        x = np.arange(-500, 501, dtype=np.float32) / 8 + comm.rank
        assert np.array_equal(reducer.allreduce(x), comm.allreduce(x.astype(np.float64)))


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("compressor", ["sign", "topk", "qsgd8", "bf16"])
def test_two_pass_decodes_the_recompressed_sum_of_each_chunk(comm, compressor):
    """DeepSpeed's path: chunk j's payloads decoded and summed at rank j, compressed again there, gathered."""
    reducer = get_reducer("ring", comm, compressor=compressor, error_feedback=False, mode="two-pass",
                          compressor_options=OPTIONS.get(compressor, {}))
    workers = twin(compressor, comm.rank)
    servers = [twin(compressor, owner) for owner in range(comm.size)]
    for n in sizes(comm):
        x = local_data(comm, n)
        out = reducer.allreduce(x, name=f"g{n}")
        bounds = offsets(n, comm.size)
        for j in range(comm.size):
            chunk_sum, _ = decoded_sum(comm, workers, x[bounds[j]:bounds[j + 1]], f"g{n}/worker{j}", 0)
            payload, ctx = servers[j].compress(chunk_sum, f"g{n}/server{j}", 0)
            assert np.array_equal(out[bounds[j]:bounds[j + 1]], servers[j].decompress(payload, ctx)), (n, j)
    reducer.close()


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("error_feedback", [False, True])
def test_powersgd_over_ranks_equals_powersgd_of_the_sum(comm, error_feedback):
    """Both rounds are linear: P = (sum M_i) Q and Q = (sum M_i)^T P^, so the ranks get what one worker
    holding the sum would (without error feedback; with it, the first step)."""
    reducer = get_reducer("ring", comm, compressor="powersgd", compressor_options={"rank": 2},
                          error_feedback=error_feedback)
    single = get_compressor("powersgd", rank=2)
    assert reducer.mode == "allreduce" and reducer.error_feedback == error_feedback
    for step in range(1 if error_feedback else 3):
        x = local_data(comm, 1001, np.float64, salt=step)
        out = reducer.allreduce(x, name="w")
        payload, ctx = single.compress(comm.allreduce(x), name="w")
        np.testing.assert_allclose(out, single.decompress(payload, ctx), rtol=1e-9, atol=1e-9)
        p_round, q_round = expected_ring_bytes(comm, 32 * 2, 8), expected_ring_bytes(comm, 32 * 2, 8)  # 32 x 32
        assert (reducer.last_bytes_sent, reducer.last_bytes_received) == (p_round[0] + q_round[0],
                                                                          p_round[1] + q_round[1])
    small = reducer.allreduce(np.full(9, 1.0 + comm.rank), name="bias")  # 3 x 3: sent uncompressed, exact
    assert np.array_equal(small, np.full(9, comm.size * (comm.size + 1) / 2))
    reducer.close()


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["auto", "allgather"])
def test_powersgd_compresses_each_tensor_of_a_buffer_in_its_own_shape(comm, mode):
    """A buffer of a 64 x 1024 rank-1 matrix, a bias and a 3 x 2 x 2 tensor: the matrix comes back to
    rounding at rank 1 (viewed flat, as a near-square matrix, it does not), the bias (64 x 1) and the small
    tensor (3 x 4: not worth compressing) exactly; one round of P for all three, one of Q for the matrix."""
    rng = np.random.default_rng(comm.rank)
    matrix = np.outer(rng.standard_normal(64), np.linspace(-1, 1, 1024)) if comm.rank == 0 else np.zeros((64, 1024))
    bias, small = rng.standard_normal(64), rng.standard_normal((3, 2, 2))
    buffer = np.concatenate([matrix.ravel(), bias, small.ravel()])
    shapes = [(64, 1024), (64,), (3, 2, 2)]
    reducer = get_reducer("ring", comm, compressor="powersgd", compressor_options={"rank": 1},
                          error_feedback=False, mode=mode)
    exact = comm.allreduce(buffer)
    out = reducer.allreduce(buffer, name="bucket", shapes=shapes)
    assert np.linalg.norm(out - exact) <= 1e-14 * np.linalg.norm(exact)
    flat = reducer.allreduce(buffer, name="flat")
    assert np.linalg.norm(flat[:65536] - exact[:65536]) > 0.1 * np.linalg.norm(exact[:65536])
    assert sorted(reducer.state_dict()["compressor"]) == ["bucket/tensor0", "flat"]  # warm starts: the matrices
    if mode == "auto":
        rows = int(np.ceil(np.sqrt(buffer.size)))
        cols = -(-buffer.size // rows)
        flat_rounds = [expected_ring_bytes(comm, rows, 8), expected_ring_bytes(comm, cols, 8)]
        assert reducer.last_bytes_sent == sum(sent for sent, _ in flat_rounds)
        reducer.allreduce(buffer, name="bucket", shapes=shapes)
        tensor_rounds = [expected_ring_bytes(comm, 64 + 64 + 12, 8), expected_ring_bytes(comm, 1024, 8)]
        assert reducer.last_bytes_sent == sum(sent for sent, _ in tensor_rounds)
    with pytest.raises(ValueError, match="hold 65536 elements; the buffer has 65612"):
        reducer.allreduce(buffer, name="bad", shapes=[(64, 1024)])
    reducer.close()
    two_pass = get_reducer("ring", comm, compressor="powersgd", compressor_options={"rank": 1},
                           mode="two-pass")
    with pytest.raises(ValueError, match="two-pass"):
        two_pass.allreduce(buffer, name="bucket", shapes=shapes)
    two_pass.close()


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("compressor", ["qsgd", "qsgd4"])
def test_a_qsgd_object_draws_independent_noise_on_every_rank(comm, compressor):
    """A QSGD object built alike on every rank (worker 0) and handed to the reducer: the reducer sets its
    worker to the rank, so the ranks' noise differs and the sum of p ranks' decoded payloads of the same x has
    p times the variance of one, sum_i (N/s)^2 f_i (1 - f_i) with f_i the fraction of s x_i / N (stochastic
    rounding); the same noise on every rank would give p^2 times."""
    n, trials = 2000, 200
    x = np.random.default_rng(7).standard_normal(n)  # the same on every rank
    reducer = get_reducer("mpi", comm, compressor=get_compressor(compressor, bucket_size=n))
    assert reducer.compressor.worker == comm.rank
    norms, levels = reducer.compressor.compress(x, "probe", step=0)[0]
    everyone = comm.allgather(levels)
    assert all(not np.array_equal(everyone[0], other) for other in everyone[1:])
    s = reducer.compressor.levels
    y = s * x / np.float64(norms[0])
    fraction = y - np.floor(y)
    one_rank = float(np.sum((np.float64(norms[0]) / s) ** 2 * fraction * (1 - fraction)))
    spread = sum(float(np.sum((reducer.allreduce(x, name="g") - comm.size * x) ** 2)) for _ in range(trials)) / trials
    assert 0.85 <= spread / (comm.size * one_rank) <= 1.15, (spread, comm.size * one_rank)
    reducer.close()


def expected_ring_bytes(comm, count, itemsize):
    """(sent, received) of the ring all-reduce of ``count`` elements: the reduce-scatter sends every chunk
    but this rank's and receives every chunk but its left neighbour's; the all-gather sends every chunk but
    the right neighbour's and receives every chunk but this rank's."""
    if comm.size == 1 or count == 0:
        return 0, 0
    bounds = offsets(count, comm.size)
    chunk = [bounds[c + 1] - bounds[c] for c in range(comm.size)]
    r, p = comm.rank, comm.size
    sent = (count - chunk[r]) + (count - chunk[(r + 1) % p])
    received = (count - chunk[(r - 1) % p]) + (count - chunk[r])
    return sent * itemsize, received * itemsize


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["auto", "allgather", "two-pass"])
@pytest.mark.parametrize("compressor", ["fp16", "sign", "topk", "qsgd4", "randomk"])
def test_bytes_counted_equal_the_payload_sizes(comm, compressor, mode):
    p, r = comm.size, comm.rank
    with get_reducer("ring", comm, compressor=compressor, mode=mode,
                     compressor_options=OPTIONS.get(compressor, {})) as reducer:
        assert reducer.counts_exact
        sent = received = 0
        for n in sizes(comm):
            x = local_data(comm, n)
            reducer.allreduce(x, name=f"g{n}")
            path = reducer.mode
            single = twin(compressor, r)
            if n == 0 or p == 1:
                expected = (0, 0)
            elif path == "allreduce":
                ctx = single.context((n,), x.dtype)
                ((dtype, count),) = ctx.parts
                expected = expected_ring_bytes(comm, count, np.dtype(dtype).itemsize)
            elif path == "allgather":
                payload = single.payload_bytes(n, x.dtype)
                expected = ((p - 1) * payload, (p - 1) * payload)
            else:
                bounds = offsets(n, p)
                chunks = [single.payload_bytes(bounds[j + 1] - bounds[j], x.dtype) for j in range(p)]
                # all-to-all: my chunks for the others, everyone's payload of my chunk; then the ring
                # all-gather of the re-compressed chunks: all but my right neighbour's out, all but mine in
                expected = (sum(chunks) - chunks[r] + sum(chunks) - chunks[(r + 1) % p],
                            (p - 1) * chunks[r] + sum(chunks) - chunks[r])
            counted = (reducer.last_bytes_sent, reducer.last_bytes_received)
            every_rank = comm.allgather((counted, expected))  # so that every rank fails alike
            assert all(mine == theirs for mine, theirs in every_rank), (n, path, every_rank)
            assert sum(c[0] for c, _ in every_rank) == sum(c[1] for c, _ in every_rank), \
                "bytes sent by all ranks must equal bytes received"
            sent, received = sent + expected[0], received + expected[1]
        assert (reducer.bytes_sent, reducer.bytes_received) == (sent, received)
        reducer.reset_counters()
        assert reducer.bytes_sent == reducer.bytes_received == reducer.last_bytes_sent == 0


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("compressor", ["sign", "topk", "powersgd"])
def test_error_feedback_is_on_by_default_for_biased_compressors_and_loses_nothing(comm, compressor):
    """sum over calls of the results + every rank's residual = sum over calls of every rank's input."""
    with get_reducer("ring", comm, compressor=compressor, compressor_options=OPTIONS.get(compressor, {})) as reducer:
        assert reducer.error_feedback and isinstance(reducer.compressor, ErrorFeedback)
        results = inputs = 0.0
        for step in range(4):
            x = local_data(comm, 1001, np.float64, salt=step)
            results = results + reducer.allreduce(x, name="g")
            inputs = inputs + comm.allreduce(x)
        residuals = comm.allreduce(reducer.compressor.residual("g"))
        np.testing.assert_allclose(results + residuals, inputs, rtol=1e-9, atol=1e-9)
    for unbiased in ["qsgd8", "fp16", "none"]:
        with get_reducer("ring", comm, compressor=unbiased) as reducer:
            assert not reducer.error_feedback
    with get_reducer("ring", comm, compressor="topk", error_feedback=False) as reducer:
        assert not reducer.error_feedback


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_mean_divides_the_sum_and_other_ops_and_dtypes_are_refused_on_every_rank(comm):
    with get_reducer("ring", comm, compressor="none") as reducer:
        x = local_data(comm, 101)
        np.testing.assert_allclose(reducer.allreduce(x, op="mean"), reducer.allreduce(x) / comm.size, rtol=1e-6)
        buffer = x.copy()
        assert reducer.allreduce(buffer, buffer) is not None
        np.testing.assert_allclose(buffer, reducer.allreduce(x), rtol=1e-6)
        with pytest.raises(ValueError, match="compressed allreduce takes float32 or float64 buffers and op "
                                             "'sum' or 'mean', got float32 and 'max'"):
            reducer.allreduce(x, op="max")
        with pytest.raises(ValueError, match="got int64 and 'sum'"):
            reducer.allreduce(np.arange(5))
        if comm.size > 1:
            with pytest.raises(CollectiveError, match="arguments differ across ranks"):
                reducer.allreduce(local_data(comm, 10 + (comm.rank == 0)))
        np.testing.assert_allclose(reducer.allreduce(np.ones(3)), np.full(3, comm.size))


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_options_go_to_the_compressor_or_the_inner_reducer_and_the_rest_is_delegated(comm):
    with get_reducer("ring-seg", comm, compressor="topk", ratio=0.5, segment_bytes=16) as keywords:
        assert keywords.inner.segment_bytes == 16 and keywords.compressor.compressor.ratio == 0.5  # the older form
    with get_reducer("ring-seg", comm, compressor="topk", compressor_options={"ratio": 0.5},
                     reducer_options={"segment_bytes": 16}) as reducer:
        assert isinstance(reducer, CompressedReducer) and reducer.inner.segment_bytes == 16
        assert reducer.compressor.compressor.ratio == 0.5 and reducer.counts_exact
        x = local_data(comm, 1001, np.float64)
        assert np.array_equal(reducer.reduce_scatter(x), get_reducer("ring", comm).reduce_scatter(x))
        chunk = reducer.reduce_scatter(x)
        np.testing.assert_allclose(reducer.allgather(chunk), comm.allreduce(x), rtol=1e-12)
        gathered, lengths = reducer.allgatherv(x[:comm.rank])
        assert lengths == list(range(comm.size))
    with get_reducer("mpi", comm, compressor=get_compressor("qsgd8", worker=comm.rank)) as reducer:
        assert not reducer.counts_exact and reducer.inner.name == "mpi"
        assert reducer.allreduce(local_data(comm, 10)).shape == (10,)
    with pytest.raises(TypeError, match="error_feedback needs a compressor"):
        get_reducer("ring", comm, error_feedback=True)
    with pytest.raises(ValueError, match="'sign' is not linear"):
        get_reducer("ring", comm, compressor="sign", mode="allreduce")
    with pytest.raises(TypeError):
        get_reducer("ring", comm, compressor="topk", no_such_option=1)
    with pytest.raises(TypeError, match="compressor 'topk' takes ratio, k; got segment_bytes"):
        get_reducer("ring", comm, compressor="topk", compressor_options={"segment_bytes": 16})
    with pytest.raises(TypeError, match="reducer 'ring' takes segment_bytes; got ratio"):
        get_reducer("ring", comm, compressor="topk", reducer_options={"ratio": 0.5})
    with pytest.raises(TypeError, match="not both"):
        get_reducer("ring", comm, compressor="topk", compressor_options={"ratio": 0.5}, segment_bytes=16)
    with pytest.raises(TypeError, match="compressor_options need the compressor by name"):
        get_reducer("ring", comm, compressor=get_compressor("topk"), compressor_options={"ratio": 0.5})


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_restored_reducer_continues_exactly(comm):
    first = get_reducer("ring", comm, compressor="powersgd", compressor_options={"rank": 2})
    for step in range(2):
        first.allreduce(local_data(comm, 500, salt=step), name="w")
    second = get_reducer("ring", comm, compressor="powersgd", compressor_options={"rank": 2})
    second.load_state_dict(first.state_dict())
    x = local_data(comm, 500, salt=9)
    assert np.array_equal(first.allreduce(x, name="w"), second.allreduce(x, name="w"))
    first.close()
    second.close()
