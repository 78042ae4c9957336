"""torch.distributed from an MPI communicator: ``init_process_group(comm=None, backend="gloo")``.

Rank and world size are the communicator's; the rendezvous is a TCPStore that rank 0 opens on a free port of
its own host (the port chosen by the system, so no race between jobs on one node), its address and port
broadcast over MPI.  Ranks on one host meet on 127.0.0.1; across hosts on rank 0's address, as
``socket.gethostbyname(socket.gethostname())`` gives it (``MPIOPT_TORCH_ADDRESS`` names another).  A failure
on any rank (a backend torch lacks, an address others cannot reach) is raised on every rank as the same
CollectiveError, so no rank waits for the others.
"""
import os
import socket
from datetime import timedelta

import torch.distributed as dist

from ..core.comm import check_collectively, resolve_comm

BACKENDS = ("gloo", "nccl", "mpi")


def _address(comm):
    """Where the other ranks reach rank 0."""
    hosts = comm.allgather(socket.gethostname())
    if os.environ.get("MPIOPT_TORCH_ADDRESS"):
        return os.environ["MPIOPT_TORCH_ADDRESS"]
    if len(set(hosts)) == 1:
        return "127.0.0.1"
    return socket.gethostbyname(hosts[0])


def init_process_group(comm=None, backend="gloo", timeout=300.0):
    """Initialize torch.distributed's default group on the ranks of ``comm`` (``MPI.COMM_WORLD`` when None),
    torch rank = MPI rank; returns the group.  ``backend``: ``"gloo"`` (CPU and CUDA tensors), ``"nccl"``
    (CUDA) or ``"mpi"`` (a torch built with MPI); ``timeout`` in seconds for the rendezvous and collectives.
    Every rank of ``comm`` must call it.  Afterwards torch's collectives (and DDP) and mpiopt's work side by
    side: call ``torch.distributed.destroy_process_group()`` before MPI finalizes."""
    comm = resolve_comm(comm)
    problem = None
    if dist.is_initialized():
        problem = "torch.distributed is already initialized"
    elif backend not in BACKENDS:
        problem = f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
    elif not dist.is_backend_available(backend):
        problem = f"this torch has no {backend!r} backend"
    elif not timeout > 0:
        problem = f"timeout must be a positive number of seconds, got {timeout!r}"
    check_collectively(comm, problem, {"backend": backend})
    if backend == "mpi":
        dist.init_process_group("mpi")
        return dist.group.WORLD
    address = _address(comm)
    store, problem = None, None
    try:
        if comm.rank == 0:
            store = dist.TCPStore(address, 0, comm.size, True, timedelta(seconds=timeout), wait_for_workers=False)
    except Exception as error:  # noqa: BLE001 - every rank must hear of it
        problem = f"cannot open a TCPStore on {address}: {error}"
    check_collectively(comm, problem)
    port = comm.bcast(store.port if store is not None else None, root=0)
    try:
        if store is None:
            store = dist.TCPStore(address, port, comm.size, False, timedelta(seconds=timeout))
        dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.size,
                                timeout=timedelta(seconds=timeout))
    except Exception as error:  # noqa: BLE001
        problem = f"{type(error).__name__}: {error}"
    check_collectively(comm, problem)
    return dist.group.WORLD
