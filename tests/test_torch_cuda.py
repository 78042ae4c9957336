"""mpiopt.torch on CUDA tensors: the DDP hooks and DistributedOptimizer give a CUDA model the CPU model's
parameters (the same compressors, the buckets as CuPy arrays). Skipped without a GPU, torch's CUDA or CuPy."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'mpiopt[torch]')")
pytest.importorskip("cupy", reason="CuPy is not installed (pip install 'mpiopt[gpu]')")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import mpiopt.torch as mtorch  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.mpi]


def net(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(device)


def steps(model, optimizer, comm, device, count=4):
    for step in range(count):
        generator = torch.Generator().manual_seed(100 * step + comm.rank)
        x, y = torch.randn(8, 12, generator=generator), torch.randint(0, 3, (8,), generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]).numpy()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,options", [("fp16", {}), ("topk", {"ratio": 0.1}), ("powersgd", {"rank": 1})])
def test_a_hook_on_cuda_tensors_gives_the_cpu_parameters(torch_group, name, options):
    results = []
    for device in ("cpu", "cuda"):
        model = DistributedDataParallel(net(device))
        model.register_comm_hook(*mtorch.comm_hook(name, comm=torch_group, **options))
        results.append(steps(model, torch.optim.SGD(model.parameters(), lr=0.1), torch_group, device))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("zero_stage", [0, 1])
def test_distributed_optimizer_on_cuda_gives_the_cpu_parameters(torch_group, zero_stage):
    results = []
    for device in ("cpu", "cuda"):
        model = net(device)
        optimizer = mtorch.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01), model.named_parameters(),
                                                comm=torch_group, reducer="ring", zero_stage=zero_stage)
        results.append(steps(model, optimizer, torch_group, device))
        optimizer.close()
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-5)
