"""mpiopt.torch.DistributedOptimizer at 1-3 ranks against torch's DDP (gloo) on the same model, data and
seed; ZeRO-1 against stage 0; gradient accumulation against DDP's no_sync; the broadcasts; bad input."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'mpiopt[torch]')")
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import mpiopt.torch as mtorch  # noqa: E402
from mpiopt.core import CollectiveError  # noqa: E402

pytestmark = pytest.mark.many_ranks


def net(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4)).to(dtype)


def batch(comm, step, dtype=torch.float32):
    """This rank's batch: sizes differ between ranks (DDP averages each rank's mean gradient, as we do)."""
    generator = torch.Generator().manual_seed(1000 * step + comm.rank)
    rows = 6 + 5 * comm.rank
    return torch.randn(rows, 10, generator=generator, dtype=dtype), torch.randint(0, 4, (rows,), generator=generator)


def loss_of(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def run_ddp(comm, make_optimizer, steps, passes=1, hook=None):
    model = DistributedDataParallel(net())
    if hook is not None:
        model.register_comm_hook(None, hook)
    optimizer = make_optimizer(model.parameters())
    for step in range(steps):
        optimizer.zero_grad()
        for one in range(passes):
            x, y = batch(comm, passes * step + one)
            if one < passes - 1:
                with model.no_sync():
                    loss_of(model, x, y).backward()
            else:
                loss_of(model, x, y).backward()
        optimizer.step()
    return flat(model.module)


def run_ours(comm, make_optimizer, steps, passes=1, **options):
    model = net()
    optimizer = mtorch.DistributedOptimizer(make_optimizer(model.parameters()), model.named_parameters(),
                                            backward_passes_per_step=passes, comm=comm, **options)
    for step in range(steps):
        optimizer.zero_grad()
        for one in range(passes):
            x, y = batch(comm, passes * step + one)
            loss_of(model, x, y).backward()
        optimizer.step()
    optimizer.close()
    return flat(model), optimizer


SGD = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)  # noqa: E731
ADAM = lambda params: torch.optim.Adam(params, lr=0.01)  # noqa: E731


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("reducer,make_optimizer", [
    ("ring", SGD), ("ring", ADAM), ("mpi", SGD),
    # the reducers whose steps change again at 4 ranks: recursive doubling's partners, the node-aware one's
    # groups, the parameter server's three workers
    pytest.param("rd", ADAM, marks=pytest.mark.every_rank_count),
    pytest.param("hier", SGD, marks=pytest.mark.every_rank_count),
    pytest.param("ps", ADAM, marks=pytest.mark.every_rank_count)],
    ids=["ring-sgd", "ring-adam", "mpi-sgd", "rd-adam", "hier-sgd", "ps-adam"])
def test_distributed_optimizer_trains_as_ddp(torch_group, reducer, make_optimizer):
    expected = run_ddp(torch_group, make_optimizer, 5)
    # small buckets: several all-reduces that start during the backward pass
    ours, optimizer = run_ours(torch_group, make_optimizer, 5, reducer=reducer, bucket_bytes=2048)
    assert len(optimizer.buckets) > 2 and optimizer.queue.threaded  # on the communication thread
    np.testing.assert_allclose(ours, expected, rtol=2e-5, atol=2e-6)  # float32 sums in another order
    assert torch_group.size == 1 or not np.array_equal(ours, flat(net()))


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_gradient_accumulation_as_ddp_no_sync(torch_group):
    expected = run_ddp(torch_group, SGD, 3, passes=3)
    ours, _ = run_ours(torch_group, SGD, 3, passes=3, reducer="ring")
    np.testing.assert_allclose(ours, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("make_optimizer", [pytest.param(SGD, marks=pytest.mark.every_rank_count), ADAM],
                         ids=["sgd", "adam"])  # 4 ranks: 6 tensors sharded over 4 ranks
def test_zero_1_gives_stage_0s_parameters_and_keeps_a_part_of_the_state(torch_group, make_optimizer):
    stage0, _ = run_ours(torch_group, make_optimizer, 4, reducer="ring", bucket_bytes=2048)
    stage1, optimizer = run_ours(torch_group, make_optimizer, 4, reducer="ring", bucket_bytes=2048, zero_stage=1)
    np.testing.assert_array_equal(stage1, stage0)
    held = sum(p.numel() for p in optimizer.state)
    total = torch_group.allreduce(held)
    assert total == sum(p.numel() for p in net().parameters())  # every tensor's state on exactly one rank
    assert torch_group.size == 1 or held < total


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_fp16_compressed_as_ddp_with_torchs_fp16_hook(torch_group):
    expected = run_ddp(torch_group, SGD, 4, hook=default_hooks.fp16_compress_hook)
    ours, optimizer = run_ours(torch_group, SGD, 4, reducer="ring", compressor="fp16")
    if torch_group.size <= 2:  # the same float16 roundings but where torch's 1/p scaling meets subnormals first
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5)
        assert np.mean(ours == expected) > 0.99
    else:
        np.testing.assert_allclose(ours, expected, rtol=0, atol=4 * 0.1 * 10 * torch_group.size * 2.0 ** -10)
    assert optimizer.bytes_sent > 0 or torch_group.size == 1


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_broadcast_parameters_and_optimizer_state(torch_group):
    comm = torch_group
    model = net(seed=comm.rank)  # every rank its own start
    mtorch.broadcast_parameters(model, root=0, comm=comm)
    gathered = comm.allgather(flat(model))
    assert all(np.array_equal(gathered[0], other) for other in gathered)
    assert np.array_equal(gathered[0], flat(net(seed=0)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    if comm.rank == 0:  # root alone has taken a step: its moments and step count
        loss_of(model, *batch(comm, 0)).backward()
        optimizer.step()
    mtorch.broadcast_optimizer_state(optimizer, root=0, comm=comm)
    mine = optimizer.state_dict()["state"]
    assert len(mine) == 6 and all(float(entry["step"]) == 1 for entry in mine.values())
    moments = comm.allgather(np.concatenate([entry["exp_avg"].numpy().ravel() for entry in mine.values()]))
    assert all(np.array_equal(moments[0], other) for other in moments)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_module_without_parameters_is_refused_on_every_rank(torch_group):
    module = torch.nn.ReLU()
    with pytest.raises(CollectiveError, match="no parameters"):
        mtorch.DistributedOptimizer(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1),
                                    module.named_parameters(), comm=torch_group)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_parameters_that_differ_between_ranks_are_refused(torch_group):
    if torch_group.size == 1:
        pytest.skip("needs two ranks")
    model = net() if torch_group.rank == 0 else torch.nn.Linear(10, 4)
    with pytest.raises(CollectiveError, match="parameters"):
        mtorch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                                    comm=torch_group)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_nan_gradient_on_one_rank_is_refused_at_step_on_every_rank(torch_group):
    comm = torch_group
    model = net()
    optimizer = mtorch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                                            comm=comm, reducer="ring")
    x, y = batch(comm, 0)
    if comm.rank == comm.size - 1:
        x[0, 0] = float("nan")
    loss_of(model, x, y).backward()
    with pytest.raises(CollectiveError, match=f"rank {comm.size - 1}: gradient bucket 0 contains NaN"):
        optimizer.step()
    before = flat(model)
    optimizer.zero_grad()
    loss_of(model, *batch(comm, 1)).backward()  # the next step works
    optimizer.step()
    assert not np.array_equal(before, flat(model))
    optimizer.close()


def test_the_wrapper_refuses_a_bad_argument_in_one_line():
    from mpi4py import MPI
    model = net()
    with pytest.raises(CollectiveError, match="backward_passes_per_step must be an integer >= 1, got 0"):
        mtorch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                                    backward_passes_per_step=0, comm=MPI.COMM_SELF)
    with pytest.raises(CollectiveError, match="zero_stage must be 0 or 1"):
        mtorch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                                    zero_stage=2, comm=MPI.COMM_SELF)
