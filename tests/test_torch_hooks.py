"""mpiopt.torch at 1-4 ranks: torch.distributed from MPI, and the DDP communication hooks against torch's own
hooks (fp16_compress_hook, powerSGD_hook) and against every rank's gradient bucket compressed with mpiopt's
compressors here, decoded and averaged over MPI's own allgather."""
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'mpiopt[torch]')")
dist = pytest.importorskip("torch.distributed")
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import mpiopt.torch as mtorch  # noqa: E402
from mpiopt.compression import get_compressor  # noqa: E402
from mpiopt.core import CollectiveError  # noqa: E402

pytestmark = pytest.mark.many_ranks


def net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def batch(comm, step, rows=None):
    """This rank's batch of a step: its own rows (rank 0's is empty when ``rows`` says 0)."""
    generator = torch.Generator().manual_seed(1000 * step + comm.rank)
    count = 8 + 3 * comm.rank if rows is None else rows
    return torch.randn(count, 12, generator=generator), torch.randint(0, 3, (count,), generator=generator)


def ddp(module):
    # one bucket holding every gradient, so that a test sees the bucket as a whole
    return DistributedDataParallel(module, bucket_cap_mb=64)


def train(model, comm, steps, lr=0.1):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = batch(comm, step)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_import_without_torch_says_how_to_install_it_in_one_line():
    code = "import sys; sys.modules['torch'] = None\ntry:\n import mpiopt.torch\nexcept ImportError as e: print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    message = out.stdout.strip()
    assert "\n" not in message and 'pip install "mpiopt[torch]"' in message, out


@pytest.mark.mpi
@pytest.mark.every_rank_count
@pytest.mark.timeout(120)
def test_init_process_group_gives_torch_the_communicators_ranks(torch_group):
    comm = torch_group
    value = torch.tensor([float(comm.rank + 1)])
    dist.all_reduce(value)
    assert value.item() == comm.size * (comm.size + 1) / 2
    gathered = [torch.zeros(1) for _ in range(comm.size)]
    dist.all_gather(gathered, torch.tensor([float(comm.rank)]))
    assert [t.item() for t in gathered] == list(range(comm.size))
    # and mpiopt's collectives beside torch's
    assert comm.allreduce(comm.rank) == comm.size * (comm.size - 1) // 2


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_init_process_group_refuses_collectively(torch_group):
    with pytest.raises(CollectiveError, match="already initialized"):
        mtorch.init_process_group(torch_group)


@pytest.mark.mpi
@pytest.mark.every_rank_count  # 4 ranks: torch's 1/p scaling exact again, the reducer's steps another shape
@pytest.mark.timeout(300)
def test_fp16_hook_trains_as_torchs_fp16_compress_hook(torch_group):
    comm = torch_group
    theirs, ours = ddp(net()), ddp(net())
    theirs.register_comm_hook(None, default_hooks.fp16_compress_hook)
    ours.register_comm_hook(*mtorch.comm_hook("fp16", comm=comm))
    a, b = train(theirs, comm, 5), train(ours, comm, 5)
    # torch divides by p before its float16 sum, mpiopt after: equal while p is a power of two (exact scaling)
    # and the sums of two terms (one rounding); otherwise within the float16 rounding of the sums
    if comm.size <= 2:
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    else:
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=5 * 0.1 * comm.size * 2.0 ** -10)
    plain = train(ddp(net()), comm, 5)
    assert not torch.equal(plain, b) or comm.size == 1  # the hook ran: float16 sums differ from float32 ones


def Recorder(state, hook):
    """A hook that records each rank's bucket before the wrapped hook averages it, and the result (a function:
    DDP reads a hook's name and signature)."""
    def recorded(_, bucket):
        recorded.inputs.append(bucket.buffer().detach().clone().numpy())
        future = hook(state, bucket)
        recorded.outputs.append(future.wait().detach().clone().numpy())
        return future
    recorded.inputs, recorded.outputs = [], []
    return recorded


OPTIONS = {"topk": {"ratio": 0.1}, "randomk": {"ratio": 0.25}, "qsgd4": {"bucket_size": 64}}


def reference_mean(comm, name, inputs, feedback):
    """Each step's mean over ranks of the decoded payloads of every rank's bucket, by a compressor of this
    module's own (error feedback or EF21 written out here), decoded after MPI's allgather."""
    options = dict(OPTIONS.get(name, {}), **({"worker": comm.rank} if name.startswith("qsgd") else {}))
    compressor, held, means, estimates = get_compressor(name, **options), None, [], 0
    for step, x in enumerate(inputs):
        key = f"bucket0[{x.size}]"
        held = np.zeros_like(x) if held is None else held
        sent = x + held if feedback == "ef" else x - held if feedback == "ef21" else x
        payload, ctx = compressor.compress(sent, key, step)
        mine = compressor.decompress(payload, ctx)
        if feedback == "ef":
            held = sent - mine
        elif feedback == "ef21":
            held = held + mine
        total = np.zeros_like(x)
        for rank_payload in comm.allgather(payload):
            total += compressor.decompress(rank_payload, ctx)
        if feedback == "ef21":  # the sum of the ranks' estimates, kept as the reducer keeps it
            estimates = total + estimates
            total = estimates
        means.append(total / np.float32(comm.size))
    return means


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,feedback", [
    ("fp16", "none"), ("bf16", "none"), ("qsgd", "none"), ("qsgd4", "none"), ("sign", "ef"),
    pytest.param("topk", "ef", marks=pytest.mark.every_rank_count),
    ("randomk", "none"), pytest.param("topk", "ef21", marks=pytest.mark.every_rank_count), ("sign", "ef21"),
    ("topk", "none")])
def test_every_compressor_hook_averages_the_decoded_buckets(torch_group, name, feedback):
    comm = torch_group
    error_feedback = {"none": False, "ef": True, "ef21": "ef21"}[feedback]
    model = ddp(net())
    state, hook = mtorch.comm_hook(name, error_feedback=error_feedback, comm=comm, start_iter=0,
                                   **OPTIONS.get(name, {}))
    assert state.reducer.error_feedback == error_feedback
    recorder = Recorder(state, hook)
    model.register_comm_hook(None, recorder)
    train(model, comm, 4)
    expected = reference_mean(comm, name, recorder.inputs, feedback)
    linear = name in ("fp16", "randomk")  # summed as payloads in the ring, in their own dtype
    for step, (out, want) in enumerate(zip(recorder.outputs, expected)):
        if linear:  # the reference rounds each decoded payload's sum in float32, the ring each payload sum
            eps = 2.0 ** -11 if name == "fp16" else 2.0 ** -24
            np.testing.assert_allclose(out, want, rtol=0, atol=comm.size * eps * np.abs(want).max() + 1e-30)
        else:
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7, err_msg=f"step {step}")
    assert state.iteration == 4 and state.bytes_sent >= 0


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("arguments,match", [
    ({"name": "topk", "ratio": 2.0}, "ratio"),
    ({"name": "nope"}, "nope"),
    ({"name": "powersgd", "error_feedback": "ef21"}, "one-round"),
    ({"name": "fp16", "start_iter": -1}, "start_iter")])
def test_bad_hook_options_are_refused_on_every_rank(torch_group, arguments, match):
    with pytest.raises(CollectiveError, match=match):
        mtorch.comm_hook(comm=torch_group, **arguments)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_nan_gradient_on_one_rank_is_refused_on_every_rank(torch_group):
    comm = torch_group
    model = ddp(net())
    model.register_comm_hook(*mtorch.comm_hook("topk", comm=comm, ratio=0.1))
    x, y = batch(comm, 0)
    if comm.rank == comm.size - 1:
        x[0, 0] = float("nan")
    with pytest.raises(CollectiveError, match=f"rank {comm.size - 1}: gradient bucket .* NaN"):
        torch.nn.functional.cross_entropy(model(x), y).backward()


def test_hooks_that_keep_state_start_after_ddps_bucket_rebuild(torch_group):
    assert mtorch.comm_hook("topk", comm=torch_group, ratio=0.1)[0].start_iter == 2  # error feedback
    assert mtorch.comm_hook("topk", comm=torch_group, ratio=0.1, error_feedback="ef21")[0].start_iter == 2
    assert mtorch.comm_hook("powersgd", comm=torch_group, error_feedback=False)[0].start_iter == 2  # warm start
    assert mtorch.comm_hook("fp16", comm=torch_group)[0].start_iter == 0
    assert mtorch.comm_hook("qsgd", comm=torch_group)[0].start_iter == 0


def torch_first_qs(model, rank, seed=0):
    """The first Q of each tensor torch's powerSGD_hook compresses, drawn as it draws them (one seed from
    np.random.RandomState(seed), one randn per tensor in its order, the tensors grouped by shape), normalized
    (its Gram-Schmidt, for rank 1): {index in the bucket: Q (cols x rank)}."""
    generator_seed = np.random.RandomState(seed).randint(1_000_000_000)
    shapes = [tuple(p.shape) for p in reversed(list(model.parameters()))]  # DDP's bucket order
    chosen = {}
    for index, shape in enumerate(shapes):
        n, m = shape[0], int(np.prod(shape[1:], dtype=np.int64))
        r = min(n, m, rank)
        if (n + m) * r * 2 < n * m:  # torch's _should_compress at min_compression_rate 2
            chosen.setdefault((n, m), []).append(index)
    qs = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(generator_seed)
        for (n, m), indices in chosen.items():
            for index in indices:
                q = torch.randn(1, m, min(n, m, rank), dtype=torch.float32)[0]
                q, _ = torch.linalg.qr(q)
                qs[index] = q.numpy().astype(np.float32)
    return qs


def relative_errors(comm, recorder, start):
    """Per compressed step: ||the hook's mean - the exact mean|| / ||the exact mean||."""
    errors = []
    for x, out in list(zip(recorder.inputs, recorder.outputs))[start:]:
        exact = np.empty_like(x)
        comm.Allreduce(x, exact)
        exact /= comm.size
        errors.append(np.linalg.norm(out - exact) / np.linalg.norm(exact))
    return np.array(errors)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("rank", [1, 2])
def test_powersgd_hook_matches_torchs_powersgd_hook(torch_group, rank):
    comm = torch_group
    steps, start = 6, 2
    theirs_state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                               start_powerSGD_iter=start, use_error_feedback=False,
                                               warm_start=True, random_seed=0)
    theirs = ddp(net())
    their_recorder = Recorder(theirs_state, powerSGD_hook.powerSGD_hook)
    theirs.register_comm_hook(None, their_recorder)
    a = train(theirs, comm, steps)

    ours = ddp(net())
    state, hook = mtorch.comm_hook("powersgd", comm=comm, rank=rank, error_feedback=False)
    assert state.start_iter == start
    size = sum(p.numel() for p in ours.parameters())
    # the same first draws as torch's: its Q of each compressed tensor, under our name for that tensor
    state.reducer.compressor.load_state_dict({f"bucket0[{size}]/tensor{index}": q
                                              for index, q in torch_first_qs(ours.module, rank).items()})
    our_recorder = Recorder(state, hook)
    ours.register_comm_hook(None, our_recorder)
    b = train(ours, comm, steps)
    for step, (mine, torchs) in enumerate(zip(our_recorder.outputs, their_recorder.outputs)):
        np.testing.assert_allclose(mine, torchs, rtol=1e-4, atol=1e-6, err_msg=f"step {step}")
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6)
    errors = relative_errors(comm, our_recorder, start)
    assert comm.size == 1 or (errors > 1e-3).all()  # compressed: not the exact mean


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_powersgd_hook_with_error_feedback_approximates_as_torchs(torch_group):
    """With error feedback: torch keeps M_i - P^ Q^T (the mean Q), mpiopt each rank's own M_i - P^ Q_i^T
    (Vogels et al.'s Algorithm 2). The residuals differ, but their mean is the same, and PowerSGD's result
    depends on the ranks' inputs through their sum alone: the same steps, to float32 rounding."""
    comm = torch_group
    steps, start = 8, 2
    theirs_state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                               start_powerSGD_iter=start, use_error_feedback=True,
                                               warm_start=True, random_seed=0)
    theirs = ddp(net())
    their_recorder = Recorder(theirs_state, powerSGD_hook.powerSGD_hook)
    theirs.register_comm_hook(None, their_recorder)
    train(theirs, comm, steps)
    ours = ddp(net())
    state, hook = mtorch.comm_hook("powersgd", comm=comm, rank=1)
    size = sum(p.numel() for p in ours.parameters())
    state.reducer.compressor.load_state_dict({"residuals": {}, "compressor": {
        f"bucket0[{size}]/tensor{index}": q for index, q in torch_first_qs(ours.module, 1).items()}})
    our_recorder = Recorder(state, hook)
    ours.register_comm_hook(None, our_recorder)
    train(ours, comm, steps)
    for step, (mine, torchs) in enumerate(zip(our_recorder.outputs, their_recorder.outputs)):
        np.testing.assert_allclose(mine, torchs, rtol=1e-4, atol=1e-6, err_msg=f"step {step}")
    mine, torchs = relative_errors(comm, our_recorder, start), relative_errors(comm, their_recorder, start)
    np.testing.assert_allclose(mine, torchs, rtol=1e-3)
    assert (mine > 1e-3).all()  # compressed, and the residuals carried: not the exact mean
