"""PyTorch models and training with mpiopt's compressors and collectives, on MPI ranks.

* :func:`init_process_group`: torch.distributed set up from an MPI communicator (rank, size and the
  rendezvous from MPI), so a torch script runs under ``mpiexec`` or ``srun`` with no environment variables;
* :func:`comm_hook`: a DDP communication hook for every mpiopt compressor (fp16, bf16, QSGD, sign, Top-K,
  Random-K, PowerSGD), with error feedback or EF21, moving the payloads over MPI through mpiopt's reducers;
* :class:`DistributedOptimizer`, :func:`broadcast_parameters`, :func:`broadcast_optimizer_state`: data
  parallelism over MPI alone, Horovod-style, with any reducer or compressor and ZeRO-1;
* :class:`TorchModel`: an ``nn.Module`` as an mpiopt model, for ``train()``, ``run_federated`` and
  ``async_sgd``.

Needs the ``torch`` extra (``pip install "mpiopt[torch]"``); nothing else in mpiopt imports torch.
docs/torch.md has a complete script for each.
"""
try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - the one-line answer is the point
    raise ImportError('mpiopt.torch needs PyTorch: pip install "mpiopt[torch]" (on a machine without a GPU, '
                      'pip install torch --index-url https://download.pytorch.org/whl/cpu first)') from None

from .distributed import init_process_group
from .hooks import HookState, comm_hook
from .model import TorchModel
from .optimizer import DistributedOptimizer, broadcast_optimizer_state, broadcast_parameters

__all__ = ["DistributedOptimizer", "HookState", "TorchModel", "broadcast_optimizer_state", "broadcast_parameters",
           "comm_hook", "init_process_group"]
