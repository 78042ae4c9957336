"""Gradient compression: what each compressor costs, saves, and does to training.

    mpiexec -n 2 python benchmarks/compression.py [--sizes 1M,4M,16M,64M] [--hidden 1024,1024] [--epochs 4]
                                                  [--output results/compression.json] [--plot results/compression.png]

Measured in this run, on this machine:

* per compressor: payload bytes / float32 bytes (exact, from the payload),
  compress and decompress throughput (GB/s of float32 input, median of
  --repeat) at each size;
* one all-reduce of a float32 gradient of --allreduce-size bytes through the
  compressed reducer over the hand-written ring, beside the uncompressed ring
  and MPI_Allreduce (median of --repeat barrier-timed calls), with the bytes
  this rank sent;
* training an MLP on scikit-learn's digits (64 -> --hidden -> 10, over 1M
  parameters by default) with Adam for --epochs epochs at a global batch of
  --batch-size, each compressor with its default error feedback, beside no
  compression: final training loss and accuracy, test accuracy, bytes sent.

Predicted, not measured (these machines share memory, so compression's
benefit is hidden here): with alpha, beta, gamma fitted in the same run,
mpiopt.collectives.models.predict_compressed gives the communication time of
one step of that MLP's (float64) gradient at 1, 10 and 100 Gb/s (the fitted latency, the
link's bandwidth) for 2 and 1,000 ranks; the measured compute of the step
(forward, backward, compress, decompress) is added.  A 1% Top-K gathered from
1,000 ranks moves more bytes than a dense ring: the table says so.

Output: tables on rank 0, JSON (--output), and with --plot a figure of
training loss against bytes sent and against predicted time at 10 Gb/s.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import median_time, size_argument, start, write_result  # noqa: E402

# name, options, label: each compressor at the settings of docs/compression.md's tables.
CONFIGS = [
    ("none", {}, "none"),
    ("fp16", {}, "fp16"),
    ("bf16", {}, "bf16"),
    ("qsgd8", {}, "qsgd 8-bit"),
    ("qsgd4", {}, "qsgd 4-bit"),
    ("sign", {}, "sign"),
    ("topk", {"ratio": 0.01}, "top-1%"),
    ("randomk", {"ratio": 0.01}, "random-1%"),
    ("powersgd", {"rank": 4}, "powersgd r=4"),
]
NETWORKS = (1, 10, 100)   # Gb/s
RANKS = (2, 1000)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,4M,16M,64M", help="buffer sizes for the throughput (float32 bytes)")
    parser.add_argument("--allreduce-size", type=size_argument, default=16 << 20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hidden", default="1024,1024", help="MLP hidden layers")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--compressors", default=",".join(label for _, _, label in CONFIGS),
                        help="labels of the configurations to run")
    parser.add_argument("--output", default="results/compression.json")
    parser.add_argument("--plot", help="PNG file: loss against bytes sent and against predicted time at 10 Gb/s")
    return parser.parse_args(argv)


def main(argv=None):
    args, comm, say = start(parse_args, argv, outputs=("output", "plot"), plots=("plot",))
    from mpiopt.collectives.models import Fitted, fit_alpha_beta, fit_gamma_copy

    wanted = set(args.compressors.split(","))
    configs = [config for config in CONFIGS if config[2] in wanted]
    alpha, beta = fit_alpha_beta(comm)
    gamma, copy = fit_gamma_copy()
    fitted = Fitted(alpha, beta, gamma, copy)
    say(f"# compression benchmark: {comm.size} ranks; fitted alpha = {alpha * 1e6:.2f} us, "
        f"beta = {beta * 1e9:.3f} ns/B, gamma = {gamma * 1e9:.3f} ns/B")
    codec = codec_part(args, comm, configs, say)
    allreduce = allreduce_part(args, comm, configs, say)
    # 3. Training the MLP, each compressor against none.
    training = train_part(args, comm, configs, say)
    predictions = predictions_part(training, configs, fitted)
    payload = {"benchmark": "compression", "ranks": comm.size, "fitted": fitted._asdict(), "repeat": args.repeat,
               "codec": codec, "allreduce": allreduce, "allreduce_bytes": args.allreduce_size, "training": training,
               "predictions": predictions, "networks_gbps": NETWORKS, "predicted_ranks": RANKS}
    say("\n" + report.compression_tables(payload))
    write_result(comm, args.output, payload)
    if comm.rank == 0 and args.plot:
        plot(training, predictions, args.plot)
        print(f"plot written to {args.plot}")
    return 0


def codec_part(args, comm, configs, say):
    """1. Ratio and throughput of each compressor, on rank 0's core alone (every rank gets the rows)."""
    import numpy as np

    from mpiopt.compression import get_compressor

    sizes = [size_argument(text) for text in args.sizes.split(",")]
    codec = []
    if comm.rank == 0:
        rng = np.random.default_rng(0)
        for name, options, label in configs:
            for nbytes in sizes:
                x = rng.standard_normal(nbytes // 4).astype(np.float32)
                compressor = get_compressor(name, **options)
                if getattr(compressor, "rounds", 1) > 1:   # PowerSGD: time its two rounds as one encode
                    encode, decode = _powersgd_codec(compressor, x)
                else:
                    encode, decode = _codec(compressor, x)
                encode()
                compress = statistics.median(_seconds(encode) for _ in range(args.repeat))
                decompress = statistics.median(_seconds(decode) for _ in range(args.repeat))
                payload = compressor.payload_bytes(x.shape, x.dtype)
                codec.append({"compressor": label, "bytes": nbytes, "payload_bytes": int(payload),
                              "ratio": nbytes / payload, "compress_s": compress, "decompress_s": decompress,
                              "throughput_gbs": nbytes / (compress + decompress) / 1e9})
                say(f"  {label:<13} {nbytes >> 20:>4} MiB: {nbytes / payload:7.1f}x fewer bytes, compress "
                    f"{nbytes / compress / 1e9:6.2f} GB/s, decompress {nbytes / decompress / 1e9:6.2f} GB/s, "
                    f"both {codec[-1]['throughput_gbs']:.2f} GB/s")
    return comm.bcast(codec, root=0)


def allreduce_part(args, comm, configs, say):
    """2. One all-reduce through the compressed reducer over the ring, beside the ring and MPI."""
    import numpy as np

    from mpiopt.collectives import get_reducer

    gradient = np.random.default_rng(comm.rank).standard_normal(args.allreduce_size // 4).astype(np.float32)
    allreduce = []
    baselines = [("MPI_Allreduce", "mpi", None, {}), ("ring", "ring", None, {})]
    for label, inner, name, options in baselines + [(label, "ring", name, options) for name, options, label in configs]:
        reducer = (get_reducer(inner, comm, compressor=name, compressor_options=options) if name else
                   get_reducer(inner, comm))
        out = np.empty_like(gradient)
        call = (lambda: reducer.allreduce(gradient, out, name="gradient")) if name else (
            lambda: reducer.allreduce(gradient, out))
        call()
        _, seconds = median_time(comm, call, args.repeat)
        sent = reducer.last_bytes_sent if name else None
        allreduce.append({"reducer": label, "seconds": seconds, "bytes_sent": sent})
        say(f"  all-reduce of {args.allreduce_size >> 20} MiB, {label:<14}: {seconds * 1e3:8.2f} ms"
            + (f", {sent} bytes sent by rank 0" if sent is not None else ""))
        reducer.close()
    return allreduce


def predictions_part(training, configs, fitted):
    """4. The network model: predicted time per step of that MLP's gradient, on links this machine does not
    have."""
    import numpy as np

    from mpiopt.collectives.models import on_network, predict_compressed
    from mpiopt.compression import bucket_payload_bytes, get_compressor

    predictions = []
    for run in training["runs"]:
        label = run["compressor"]
        name, options = next((name, options) for name, options, text in configs if text == label)
        compressor = get_compressor(name, **options)
        path = "allreduce" if compressor.linear else "allgather"
        # the trainer's gradients are float64; PowerSGD compresses each of the model's tensors in its shape
        payload = bucket_payload_bytes(compressor, training["shapes"], np.float64)
        for gbps in NETWORKS:
            for p in RANKS:
                wire = predict_compressed(path, p, payload, on_network(fitted, gbps),
                                          rounds=getattr(compressor, "rounds", 1))
                step = run["compute_per_step"] + wire
                predictions.append({"compressor": label, "gbps": gbps, "ranks": p, "path": path,
                                    "payload_bytes": payload, "communication_s": wire, "step_s": step})
    return predictions


def _seconds(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _codec(compressor, x):
    state = {}

    def encode():
        state["payload"], state["ctx"] = compressor.compress(x, name="bench")

    out = x.copy()

    def decode():
        compressor.decompress(state["payload"], state["ctx"], out=out)
    return encode, decode


def _powersgd_codec(compressor, x):
    """PowerSGD's work on one rank without communication: P = M Q, orthogonalize P, Q = M^T P; decode P Q^T."""
    state = {}

    def encode():
        (p_local,), state["round"] = compressor.compress_p(x, name="bench")
        (state["q"],) = compressor.compress_q(p_local, state["round"])   # one rank: the sum of P is its own
    out = x.copy()

    def decode():
        compressor.decompress_q(state["q"], state["round"], out=out)
    return encode, decode


def train_part(args, comm, configs, say):
    """The MLP on digits with Adam, each compressor with its default error feedback; same seed, same steps."""
    import numpy as np

    from mpiopt.data import load_dataset
    from mpiopt.models import get_model
    from mpiopt.optim import get_optimizer
    from mpiopt.train import train
    data = load_dataset("digits", comm=comm)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    runs = []
    n_params = shapes = None
    for name, options, label in configs:
        model = get_model("mlp", n_features=data.n_features, n_classes=data.n_classes, hidden=hidden)
        n_params, shapes = model.n_params, [list(shape) for shape in model.shapes]
        optimizer = get_optimizer("adam", lr=args.lr)
        result = train(model, data.X_train, data.y_train, optimizer, comm, epochs=args.epochs,
                       batch_size=args.batch_size, seed=0, reducer="ring",
                       compressor=None if name == "none" else name, compressor_options=options or None)
        test_accuracy = float(np.mean(model.predict(result.params, data.X_test) == data.y_test))
        history = result.history
        timings = result.timings
        steps = max(result.steps, 1)
        runs.append({"compressor": label, "loss": result.loss, "accuracy": result.accuracy,
                     "test_accuracy": test_accuracy, "steps": result.steps,
                     "bytes_sent": int(sum(history["bytes_sent"])), "loss_history": list(history["loss"]),
                     "bytes_history": [int(b) for b in history["bytes_sent"]],
                     "compute_per_step": (timings["compute"] + timings["optimizer"]) / steps,
                     "train_seconds": timings["train"]})
        say(f"  train {label:<13}: loss {result.loss:.6f}, accuracy {result.accuracy:.4f}, test accuracy "
            f"{test_accuracy:.4f}, {runs[-1]['bytes_sent']} bytes sent by rank 0 in {result.steps} steps")
    return {"model": f"mlp 64-{'-'.join(map(str, hidden))}-10", "n_params": n_params, "shapes": shapes,
            "epochs": args.epochs, "batch_size": args.batch_size, "runs": runs}


def plot(training, predictions, path):
    import matplotlib
    import numpy as np
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (by_bytes, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    window = 10  # the minibatch loss, averaged over the last 10 steps
    for run in training["runs"]:
        losses = np.asarray(run["loss_history"])
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid") if losses.size >= window else losses
        sent = np.cumsum(run["bytes_history"])[losses.size - smooth.size:]
        by_bytes.plot(np.maximum(sent, 1), smooth, label=run["compressor"])
        step = next(row["step_s"] for row in predictions
                    if row["compressor"] == run["compressor"] and row["gbps"] == 10 and row["ranks"] == 2)
        by_time.plot(step * np.arange(losses.size - smooth.size + 1, losses.size + 1), smooth, label=run["compressor"])
    by_bytes.set(xscale="log", yscale="log", xlabel="bytes sent by rank 0 (measured)",
                 ylabel=f"minibatch loss (mean of {window} steps)", title=training["model"])
    by_time.set(yscale="log", xlabel="predicted time at 10 Gb/s, 2 ranks (s)",
                ylabel=f"minibatch loss (mean of {window} steps)", title="time predicted, not measured")
    by_bytes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
