"""Data-parallel torch training on MPI ranks: DDP (gloo) against mpiopt's hooks and DistributedOptimizer.

    mpiexec -n 2 python benchmarks/torch_train.py [--steps 20] [--rounds 3] [--output results/torch_train.json]

Two models: an MLP of about 10^7 parameters (2048 -> 2048 -> 2048 -> 1024, batch 64 a rank) and McMahan et
al. 2017's CNN for MNIST (two 5x5 convolutions of 32 and 64 channels, each with 2x2 max pooling, a 512-unit
ReLU layer, 10 outputs; 1,663,370 parameters; batch 32 a rank of 28 x 28 inputs). Configurations:

* ``ddp``: DDP with gloo and its own all-reduce;
* ``ddp+torch-fp16``: DDP with torch's ``fp16_compress_hook``;
* ``ddp+mpiopt-fp16``, ``ddp+mpiopt-topk1%``: DDP with ``mpiopt.torch.comm_hook`` (Top-1% with error
  feedback; the payloads over MPI);
* ``mpi-ring``, ``mpi-topk1%``: ``mpiopt.torch.DistributedOptimizer`` over MPI alone, the ring
  uncompressed and Top-1% with error feedback.

**Step time**: each configuration runs ``--steps`` SGD steps on random data, timed after 3 warm-up steps
(a barrier before and after every step; the median step), the configurations alternating in each of
``--rounds`` rounds; the table gives the median over the rounds. **Bytes per step**: what this rank sent
(mpiopt's counters; for gloo's all-reduce, whose bytes torch does not count, the ring's 2 (p-1)/p n bytes of
the payload dtype). **Loss**: an MLP on digits (64-256-10) trained for ``--loss-epochs`` epochs
with and without Top-1% + error feedback: the steps, seconds and bytes until the training loss first reaches
``--target-loss`` (0.05). Targets: DistributedOptimizer uncompressed at most 1.0x DDP's step time; mpiopt's
fp16 hook at most 1.1x torch's; Top-1% + EF with 20x fewer bytes to the same loss.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import mpiopt.torch
from mpiopt.core.io import write_json

CONFIGS = ("ddp", "ddp+torch-fp16", "ddp+mpiopt-fp16", "ddp+mpiopt-topk1%", "mpi-ring", "mpi-topk1%")


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                               torch.nn.ReLU(), torch.nn.Linear(2048, 1024))


def cnn():
    """McMahan et al. 2017's CNN for MNIST."""
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 28, 28)),
        torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))


MODELS = {"mlp-1e7": (mlp, 2048, 1024, 64), "cnn-mcmahan": (cnn, 784, 10, 32)}
QUICK = {"mlp-small": (lambda: torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)),
                       64, 10, 8)}


class Setup:
    """One configuration on one model: its step function and its bytes counter."""

    def __init__(self, config, make, comm):
        torch.manual_seed(0)
        module = make()
        self.n = sum(p.numel() for p in module.parameters())
        self.counter = None
        p = comm.size
        if config.startswith("ddp"):
            model = DistributedDataParallel(module, bucket_cap_mb=25)
            if config == "ddp+torch-fp16":
                model.register_comm_hook(None, default_hooks.fp16_compress_hook)
                self.model_bytes = 2 * (p - 1) / p * self.n * 2
            elif config.startswith("ddp+mpiopt"):
                name, options = ("fp16", {}) if config.endswith("fp16") else ("topk", {"ratio": 0.01})
                state, hook = mpiopt.torch.comm_hook(name, comm=comm, start_iter=0, **options)
                model.register_comm_hook(state, hook)
                self.counter = lambda: state.bytes_sent
            else:
                self.model_bytes = 2 * (p - 1) / p * self.n * 4
            self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        else:
            model = module
            compressor = {"mpi-ring": None, "mpi-topk1%": "topk"}[config]
            self.optimizer = mpiopt.torch.DistributedOptimizer(
                torch.optim.SGD(module.parameters(), lr=1e-3), module.named_parameters(), reducer="ring",
                compressor=compressor, compressor_options={"ratio": 0.01} if compressor else None, comm=comm)
            self.counter = lambda: self.optimizer.bytes_sent
        self.model = model

    def sent(self, steps):
        return self.counter() / steps if self.counter is not None else self.model_bytes

    def step(self, x, y):
        self.optimizer.zero_grad()
        torch.nn.functional.cross_entropy(self.model(x), y).backward()
        self.optimizer.step()


def step_times(comm, args, say):
    rows = []
    for model_name, (make, features, classes, batch) in (QUICK if args.quick else MODELS).items():
        generator = torch.Generator().manual_seed(comm.rank)
        x, y = torch.randn(batch, features, generator=generator), torch.randint(0, classes, (batch,),
                                                                             generator=generator)
        setups = {config: Setup(config, make, comm) for config in CONFIGS}
        times = {config: [] for config in CONFIGS}
        counted = {config: 0 for config in CONFIGS}
        for round_ in range(args.rounds):
            for config, setup in setups.items():
                for _ in range(3 if round_ == 0 else 0):
                    setup.step(x, y)
                    counted[config] += 1
                steps = []
                for _ in range(args.steps):
                    comm.Barrier()
                    tick = time.perf_counter()
                    setup.step(x, y)
                    comm.Barrier()
                    steps.append(time.perf_counter() - tick)
                    counted[config] += 1
                times[config].append(statistics.median(steps))
        for config, setup in setups.items():
            row = {"model": model_name, "config": config, "n_params": setup.n,
                   "step_s": statistics.median(times[config]), "rounds_s": times[config],
                   "bytes_per_step": setup.sent(counted[config])}
            rows.append(row)
            say(f"  {model_name:12s} {config:18s} {row['step_s'] * 1e3:8.1f} ms a step, "
                f"{row['bytes_per_step'] / 1e6:8.2f} MB sent a step")
        for setup in setups.values():
            if hasattr(setup.optimizer, "close"):
                setup.optimizer.close()
    return rows


def loss_part(comm, args, say):
    """An MLP on digits (64-256-10) trained with and without Top-1% + EF (DDP with mpiopt's hook): the steps, seconds and
    bytes until the training loss first reaches ``--target-loss`` (checked after every epoch), and the last
    loss."""
    from mpiopt.data import load_dataset
    data = load_dataset("digits", comm)
    X = torch.tensor(data.X_train, dtype=torch.float32)[comm.rank::comm.size]
    y = torch.tensor(data.y_train)[comm.rank::comm.size]
    full, labels = torch.tensor(data.X_train, dtype=torch.float32), torch.tensor(data.y_train)
    runs = {}
    for name, options in (("none", {}), ("topk", {"ratio": 0.01})):
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        model = DistributedDataParallel(module)
        state, hook = mpiopt.torch.comm_hook(name, comm=comm, **options)
        model.register_comm_hook(state, hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        steps, seconds, reached = 0, 0.0, None
        for epoch in range(args.loss_epochs):
            tick = time.perf_counter()
            order = torch.randperm(len(y), generator=torch.Generator().manual_seed(epoch))
            for batch in order.split(32):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
                optimizer.step()
                steps += 1
            seconds += time.perf_counter() - tick
            with torch.no_grad():
                loss = float(torch.nn.functional.cross_entropy(module(full), labels))
            if reached is None and loss <= args.target_loss:
                reached = {"epoch": epoch + 1, "steps": steps, "seconds": seconds, "bytes": state.bytes_sent,
                           "loss": loss}
        runs[name] = {"loss": loss, "bytes": state.bytes_sent, "steps": steps, "seconds": seconds,
                      "reached": reached}
        where = (f"loss {args.target_loss} after {reached['steps']} steps, {reached['seconds']:.2f} s, "
                 f"{reached['bytes']:,} bytes sent" if reached else f"loss {args.target_loss} not reached")
        say(f"  digits MLP, {name:5s}: {where}; last loss {loss:.4f} after {steps} steps")
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loss-epochs", type=int, default=30)
    parser.add_argument("--target-loss", type=float, default=0.05, help="the training loss to reach (0.05)")
    parser.add_argument("--output", default="results/torch_train.json")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a small MLP, 2 steps, 1 round, 1 epoch")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds, args.loss_epochs, args.target_loss = 2, 1, 1, 10.0
    comm = MPI.COMM_WORLD
    say = (lambda text: print(text, flush=True)) if comm.rank == 0 else (lambda text: None)
    mpiopt.torch.init_process_group(comm)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // comm.size))
    say(f"torch_train: {comm.size} ranks, torch {torch.__version__}, {torch.get_num_threads()} threads a rank")
    rows = step_times(comm, args, say)
    runs = loss_part(comm, args, say)
    if comm.rank == 0:
        by = {(row["model"], row["config"]): row for row in rows}
        targets = []
        for model_name in (QUICK if args.quick else MODELS):
            ddp, ours = by[(model_name, "ddp")]["step_s"], by[(model_name, "mpi-ring")]["step_s"]
            torch16, ours16 = by[(model_name, "ddp+torch-fp16")]["step_s"], by[(model_name, "ddp+mpiopt-fp16")]["step_s"]
            targets.append({"target": f"{model_name}: DistributedOptimizer (ring) <= 1.0x DDP", "ratio": ours / ddp,
                            "met": ours <= ddp})
            targets.append({"target": f"{model_name}: mpiopt fp16 hook <= 1.1x torch's", "ratio": ours16 / torch16,
                            "met": ours16 <= 1.1 * torch16})
        dense, sparse = runs["none"]["reached"], runs["topk"]["reached"]
        fewer = dense["bytes"] / max(sparse["bytes"], 1) if dense and sparse else None
        targets.append({"target": f"Top-1% + EF: >= 20x fewer bytes to the training loss {args.target_loss}",
                        "bytes_ratio": fewer, "met": fewer is not None and fewer >= 20,
                        "steps": [run["reached"] and run["reached"]["steps"] for run in runs.values()]})
        print("\n| model | configuration | parameters | step (ms) | MB sent a step |")
        print("|---|---|---:|---:|---:|")
        for row in rows:
            print(f"| {row['model']} | {row['config']} | {row['n_params']:,} | {row['step_s'] * 1e3:.1f} | "
                  f"{row['bytes_per_step'] / 1e6:.2f} |")
        print("\n| target | measured | met |\n|---|---|---|")
        for target in targets:
            measured = (f"{target['ratio']:.2f}x" if "ratio" in target else "not reached"
                        if target["bytes_ratio"] is None else f"{target['bytes_ratio']:.1f}x fewer bytes (steps: "
                        f"{target['steps'][0]} uncompressed, {target['steps'][1]} Top-1%)")
            print(f"| {target['target']} | {measured} | {'yes' if target['met'] else 'no'} |")
        write_json(args.output, {"ranks": comm.size, "torch": torch.__version__, "rows": rows, "loss": runs,
                                 "targets": targets, "settings": vars(args)})
        print(f"JSON written to {args.output}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
