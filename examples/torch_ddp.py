"""A torch model trained by DDP on MPI ranks, its gradients compressed by one of mpiopt's compressors.

    mpiexec -n 2 python examples/torch_ddp.py --compressor topk --ratio 0.01

torch.distributed is set up from MPI (no environment variables), the digits data set (8x8 images, 10
classes) is split over the ranks, and DDP averages the gradients through mpiopt's DDP hook: the payloads
travel over MPI, with error feedback where the compressor is biased. Prints the test accuracy and the
bytes each rank sent per step against the dense gradient's.
"""
import argparse

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel

import mpiopt.torch
from mpiopt.data import load_dataset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compressor", default="topk", help="fp16, bf16, qsgd, sign, topk, randomk, powersgd, none")
    parser.add_argument("--ratio", type=float, default=0.01, help="topk, randomk: the share of entries sent")
    parser.add_argument("--rank", type=int, default=2, help="powersgd: the rank")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    mpiopt.torch.init_process_group(comm)
    data = load_dataset("digits", comm)
    torch.manual_seed(0)  # the same initial model on every rank
    module = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model = DistributedDataParallel(module)
    options = {"topk": {"ratio": args.ratio}, "randomk": {"ratio": args.ratio},
               "powersgd": {"rank": args.rank}}.get(args.compressor, {})
    state, hook = mpiopt.torch.comm_hook(args.compressor, comm=comm, **options)
    model.register_comm_hook(state, hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    X = torch.tensor(data.X_train, dtype=torch.float32)[comm.rank::comm.size]  # this rank's rows
    y = torch.tensor(data.y_train)[comm.rank::comm.size]
    steps = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
        for batch in order.split(32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
            optimizer.step()
            steps += 1
    with torch.no_grad():
        predicted = module(torch.tensor(data.X_test, dtype=torch.float32)).argmax(1).numpy()
    dense = 4 * sum(p.numel() for p in module.parameters())
    if comm.rank == 0:
        print(f"{args.compressor}: test accuracy {(predicted == data.y_test).mean():.3f} after {steps} steps; "
              f"rank 0 sent {state.bytes_sent / steps:,.0f} bytes a step (the dense gradient: {dense:,} bytes)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
