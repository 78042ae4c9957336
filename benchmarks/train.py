"""Data-parallel training: memory per rank under ZeRO stages 0-3, and how much communication overlap hides.

    mpiexec -n 2 python benchmarks/train.py [--hidden 512,512,512] [--bucket-bytes 256K] [--steps 20] [--repeat 3]

Measured in this run:

* memory: for each ZeRO stage, the peak bytes per rank of parameters,
  gradients and optimizer state (Adam) as the trainer accounts them, and the
  ratio of their sum to stage 0's; the target is 1/p of the sharded
  categories within 10%;
* overlap: the same training with overlap off and on, for the ring and MPI
  (median of --repeat): the communication time, the part of it the backward
  pass hid, and per bucket, in the order the buckets fill (the last layers'
  gradients first), the hidden fraction.  The target is at least half of the
  communication hidden for the buckets of the last layers when the model has
  8 or more buckets; the buckets of the first layer fill when the backward
  pass has nothing left to do, so nothing can hide them.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import size_argument, start, write_result  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", default="512,512,512")
    parser.add_argument("--bucket-bytes", type=size_argument, default=256 << 10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", default="results/train.json")
    return parser.parse_args(argv)


def main(argv=None):
    args, comm, say = start(parse_args, argv)
    from mpiopt.data import load_dataset
    from mpiopt.models import get_model
    from mpiopt.optim import get_optimizer
    from mpiopt.train import train

    data = load_dataset("digits", comm=comm)
    hidden = tuple(int(h) for h in args.hidden.split(","))

    def run(**settings):
        model = get_model("mlp", n_features=data.n_features, n_classes=data.n_classes, hidden=hidden)
        return model, train(model, data.X_train, data.y_train, get_optimizer("adam", lr=1e-3), comm,
                            batch_size=args.batch_size, max_steps=args.steps, epochs=1000,
                            bucket_bytes=args.bucket_bytes, **settings)

    memory = []
    for stage in range(4):
        model, result = run(zero_stage=stage, overlap=False)
        peak = result.info["memory"]
        memory.append({"stage": stage, "params_bytes": peak["params_bytes"], "gradients_bytes": peak["gradients_bytes"],
                       "optimizer_state_bytes": peak["optimizer_state_bytes"],
                       "model_states_bytes": peak["model_states_bytes"], "buffers_bytes": peak["buffers_bytes"]})
        say(f"  stage {stage}: model states {peak['model_states_bytes']} B per rank")
    overlap = []
    for reducer in ("ring", "mpi"):
        for on in (False, True):
            runs = [run(reducer=reducer, overlap=on)[1] for _ in range(args.repeat)]
            timings = [r.timings for r in runs]
            middle = sorted(timings, key=lambda t: t["train"])[len(timings) // 2]
            # A wait for one bucket also waits for the buckets queued before it, so the hidden part is
            # counted over groups of buckets in the order they fill: the first half (the last layers'
            # gradients, filled while the backward pass goes on) and the second half.
            total, exposed = middle["bucket_communication"], middle["bucket_exposed"]
            half = len(total) // 2
            buckets = [1.0 - sum(exposed[a:b]) / sum(total[a:b]) if sum(total[a:b]) > 0 else 0.0
                       for a, b in ((0, half), (half, len(total)))]
            overlap.append({"reducer": reducer, "overlap": on,
                            "train_s": statistics.median(t["train"] for t in timings),
                            "communication_s": statistics.median(t["communication"] for t in timings),
                            "exposed_s": statistics.median(t["exposed"] for t in timings),
                            "hidden_fraction": statistics.median(t["overlap_fraction"] for t in timings),
                            "bucket_hidden_fraction": buckets})
            say(f"  {reducer} overlap {'on' if on else 'off'}: {overlap[-1]['train_s']:.3f} s, "
                f"{overlap[-1]['hidden_fraction']:.0%} of the communication hidden")
    payload = {"benchmark": "train", "ranks": comm.size, "model": f"mlp 64-{'-'.join(map(str, hidden))}-10",
               "n_params": model.n_params, "buckets": len(runs[-1].timings["bucket_communication"]),
               "bucket_bytes": args.bucket_bytes, "steps": args.steps, "repeat": args.repeat,
               "memory": memory, "overlap": overlap}
    say("\n" + report.train_tables(payload))
    write_result(comm, args.output, payload)
    return 0


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
