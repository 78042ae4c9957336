"""When does compression pay: each compressor's measured compute beside its wire time, numpy and compiled.

    python benchmarks/compression_pay.py [--size 64M] [--repeat 5] [--output results/compression_pay.json]
    mpiexec -n 2 python benchmarks/compression_pay.py --train     # and the training step check

1. **Kernels, measured** (one thread, this process; numpy twins and compiled
   kernels timed alternately, median of --repeat): ``np.copyto`` of the
   buffer, then for each compressor at its settings of docs/compression.md the work a
   rank does in one compressed all-reduce: compress (with error feedback
   where the compressed reducer adds it by default: e += x, C(e),
   e -= decoded; sign and Top-1% also without it, the compressor alone),
   decompress, accumulate (decode and add: the all-gather
   path's work per payload) and the sum of two payloads in their own dtype
   (the all-reduce path's reduction).  Throughput is bytes / (compress +
   decompress); "of copyto" the median over the rounds of copyto's time in
   that round / (compress + decompress) in that round.  PowerSGD is timed at rank 1 and rank 4 on
   the buffer as a square matrix (its two rounds on one rank).
2. **When does it pay, predicted** for one all-reduce of the buffer
   (float32) over p ranks on links of 1, 10 and 100 Gb/s, with latency
   ``--alpha-us`` per message: the dense ring,

       2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma     (gamma: this machine's float32 add),

   against each compressor by its reducer path (mpiopt.collectives.models.
   predict_compressed, without its reduction term) plus its measured compute:
   ``allreduce`` (linear): compress + (p-1)/p x the payload sum + decompress,
   per round; ``allgather``: compress + p accumulates.  A cell is marked
   where the compressor beats the dense ring; the summary lists the links and
   ranks where each does, for the numpy and the compiled kernels.
3. **Training** (``--train``, under mpiexec with 2 or more ranks): the MLP
   of benchmarks/compression.py trained for --steps steps with no
   compression, fp16 and Top-1% (error feedback on), median step time of
   --repeat runs (the three interleaved), against the uncompressed step plus
   that compressor's measured time for the model's gradient in the trainer's
   buckets (compress + decompress of each, + the payload sums on the
   all-reduce path, + p accumulates on the all-gather path), on real gradients:
   the mean over the first and the last step's.

Output: tables on rank 0 (benchmarks/report.py renders the JSON again), JSON (--output).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import size_argument, start, write_result  # noqa: E402

# name, the compressor's options, error feedback, label: the compressors at docs/compression.md's settings (and
# PowerSGD at ranks 1 and 4); error feedback False measures the compressor alone, True adds it where the
# compressor asks for it (the compressed reducer's default), ALWAYS adds it to any compressor (a user's
# ``ErrorFeedback(compressor)``: e += x, C(e), e -= decoded).
ALWAYS = "always"
CONFIGS = [
    ("fp16", {}, True, "fp16"),
    ("fp16", {}, ALWAYS, "fp16 (EF)"),
    ("bf16", {}, True, "bf16"),
    ("bf16", {}, ALWAYS, "bf16 (EF)"),
    ("qsgd8", {}, True, "qsgd 8-bit"),
    ("qsgd8", {}, ALWAYS, "qsgd 8-bit (EF)"),
    ("qsgd4", {}, True, "qsgd 4-bit"),
    ("qsgd4", {}, ALWAYS, "qsgd 4-bit (EF)"),
    ("sign", {}, True, "sign"),
    ("sign", {}, False, "sign (no EF)"),
    ("topk", {"ratio": 0.01}, True, "top-1%"),
    ("topk", {"ratio": 0.01}, False, "top-1% (no EF)"),
    ("randomk", {"ratio": 0.01}, True, "random-1%"),
    ("randomk", {"ratio": 0.01}, ALWAYS, "random-1% (EF)"),
    ("powersgd", {"rank": 1}, True, "powersgd r=1"),
    ("powersgd", {"rank": 4}, True, "powersgd r=4"),
]
PATHS = ("numpy", "compiled")
NETWORKS = (1, 10, 100)                       # Gb/s
RANKS = (1, 2, 4, 16, 64, 256, 1000)
TRAIN_CONFIGS = [("none", {}, "none"), ("fp16", {}, "fp16"), ("topk", {"ratio": 0.01}, "top-1%")]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=size_argument, default=64 << 20, help="float32 bytes of the buffer (64M)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compressors", default=",".join(label for *_, label in CONFIGS),
                        help="labels of the configurations to time")
    parser.add_argument("--alpha-us", type=float, default=5.0, help="latency per message on the network (us)")
    parser.add_argument("--train", action="store_true", help="also the training step check (2+ ranks)")
    parser.add_argument("--hidden", default="1024,1024", help="the MLP's hidden layers (--train)")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run (--train)")
    parser.add_argument("--output", default="results/compression_pay.json")
    return parser.parse_args(argv)


def main(argv=None):
    args, comm, say = start(parse_args, argv)
    import numpy as np

    from mpiopt.collectives.models import fit_gamma_copy
    from mpiopt.kernels import compiled

    wanted = set(args.compressors.split(","))
    configs = [config for config in CONFIGS if config[-1] in wanted]
    paths = PATHS if compiled.AVAILABLE else PATHS[:1]
    gamma, copy = fit_gamma_copy()
    say(f"# when does compression pay: {args.size >> 20} MiB of float32, one thread, median of {args.repeat}; "
        f"kernels: {', '.join(paths)}{'' if compiled.AVAILABLE else ' (numba is not installed)'}")
    kernels = []
    if comm.rank == 0:
        x = np.random.default_rng(0).standard_normal(args.size // 4).astype(np.float32)
        kernels = kernel_part(x, configs, paths, args.repeat, say)
    kernels = comm.bcast(kernels, root=0)
    predictions = predict_part(kernels, args.size, args.alpha_us * 1e-6, gamma)
    training = train_part(args, comm, paths, say) if args.train and comm.size > 1 else None
    payload = {"benchmark": "compression_pay", "bytes": args.size, "repeat": args.repeat, "paths": list(paths),
               "alpha_s": args.alpha_us * 1e-6, "gamma_s_per_byte": gamma, "copy_s_per_byte": copy,
               "networks_gbps": NETWORKS, "ranks": RANKS, "kernels": kernels, "predictions": predictions,
               "training": training}
    say("\n" + report.compression_pay_tables(payload))
    write_result(comm, args.output, payload)
    return 0


# -- 1. the kernels ------------------------------------------------------------------------------------------
def _seconds(function):
    began = time.perf_counter()
    function()
    return time.perf_counter() - began


def codec_calls(name, options, x, p_accumulate=True, error_feedback=True):
    """The calls one rank makes in one compressed all-reduce of ``x``, as the compressed reducer makes them:
    {"compress", "decompress", "accumulate", "payload_sum"} -> a function of no arguments (compress first).
    ``error_feedback`` False: the compressor alone, without the error feedback it would get by default;
    ALWAYS: with error feedback whether or not the compressor asks for it."""
    import numpy as np

    from mpiopt.compression import ErrorFeedback, get_compressor
    compressor = get_compressor(name, **options)
    if error_feedback == ALWAYS or (compressor.error_feedback and error_feedback):
        compressor = ErrorFeedback(compressor)
    state, out = {}, np.empty_like(x)
    calls = {}
    if getattr(compressor, "rounds", 1) > 1:     # PowerSGD: its two rounds on one rank, x as a square matrix
        side = int(np.sqrt(x.size))
        matrix = x[:side * side].reshape(side, side)
        out = out[:side * side].reshape(side, side)

        def compress():
            (p_local,), state["round"] = compressor.compress_p(matrix, name="bench")
            (state["q"],) = compressor.compress_q(p_local, state["round"])

        def decompress():
            compressor.decompress_q(state["q"], state["round"], out=out)
        calls["compress"], calls["decompress"] = compress, decompress
        calls["payload_sum"] = lambda: np.add(state["q"], state["q"], out=state["q"])
        return calls

    def compress():
        state["payload"], state["ctx"] = compressor.compress(x, name="bench")

    def decompress():
        compressor.decompress(state["payload"], state["ctx"], out=out)

    def accumulate():
        compressor.accumulate(state["payload"], state["ctx"], out)

    def payload_sum():
        from mpiopt.kernels.halves import add
        part = state["payload"][0]
        add(part, part, part) if part.dtype == np.float16 else np.add(part, part, out=part)
    calls = {"compress": compress, "decompress": decompress}
    if compressor.linear:
        calls["payload_sum"] = payload_sum
    elif p_accumulate:
        calls["accumulate"] = accumulate
    return calls


def kernel_part(x, configs, paths, repeat, say):
    """Median seconds of every call of every compressor on every path, the paths alternating."""
    import numpy as np

    from mpiopt.kernels import compiled
    target = np.empty_like(x)
    rows = [{"compressor": "copyto", "path": path, "copy_s": statistics.median(
        _seconds(lambda: np.copyto(target, x)) for _ in range(repeat))} for path in paths]
    say(f"  np.copyto: {x.nbytes / rows[0]['copy_s'] / 1e9:.2f} GB/s")
    for name, options, feedback, label in configs:
        calls = {}
        for path in paths:
            with compiled.use(path == "compiled"):
                calls[path] = codec_calls(name, options, x, error_feedback=feedback)
                for call in calls[path].values():   # warm-up (and compile)
                    call()
        times = {path: {key: [] for key in calls[path]} for path in paths}
        copies = []
        for _ in range(repeat):  # a copyto beside every round: the ratio of each round, then their median
            copies.append(_seconds(lambda: np.copyto(target, x)))
            for path in paths:
                with compiled.use(path == "compiled"):
                    for key, call in calls[path].items():
                        times[path][key].append(_seconds(call))
        for path in paths:
            row = {"compressor": label, "name": name, "path": path, "copy_s": statistics.median(copies)}
            row.update({f"{key}_s": statistics.median(values) for key, values in times[path].items()})
            row["throughput_gbs"] = x.nbytes / (row["compress_s"] + row["decompress_s"]) / 1e9
            row["of_copyto"] = statistics.median(
                copy / (compress + decompress) for copy, compress, decompress in
                zip(copies, times[path]["compress"], times[path]["decompress"]))
            rows.append(row)
            say(f"  {label:<13} {path:<8}: compress {row['compress_s'] * 1e3:7.2f} ms, decompress "
                f"{row['decompress_s'] * 1e3:7.2f} ms, {row['throughput_gbs']:5.2f} GB/s = "
                f"{row['of_copyto']:.0%} of copyto")
    return rows


# -- 2. the prediction -----------------------------------------------------------------------------------------
def compressed_seconds(row, p, fitted, nbytes):
    """(wire, compute) seconds of one compressed all-reduce by ``row``'s compressor over ``p`` ranks."""
    from mpiopt.collectives.models import predict_compressed
    from mpiopt.compression import get_compressor
    options = next(options for _, options, _, label in CONFIGS if label == row["compressor"])
    compressor = get_compressor(row["name"], **options)
    rounds = getattr(compressor, "rounds", 1)
    if rounds > 1:
        side = int((nbytes // 4) ** 0.5)
        payload = compressor.payload_bytes((side, side))
    else:
        payload = compressor.payload_bytes(nbytes // 4)
    if p <= 1:
        return 0.0, row["compress_s"] + row["decompress_s"]
    if compressor.linear:
        wire = predict_compressed("allreduce", p, payload, fitted._replace(gamma=0.0), rounds=rounds)
        compute = row["compress_s"] + row["decompress_s"] + (p - 1) / p * row["payload_sum_s"] * (
            1 if rounds == 1 else 2)
    else:
        wire = predict_compressed("allgather", p, payload, fitted)
        compute = row["compress_s"] + p * row["accumulate_s"]
    return wire, compute


def predict_part(kernels, nbytes, alpha, gamma):
    from mpiopt.collectives.models import Fitted, on_network
    from mpiopt.collectives.ring import RingReducer
    predictions = []
    for gbps in NETWORKS:
        fitted = on_network(Fitted(alpha, 0.0, gamma), gbps)
        for p in RANKS:
            dense = RingReducer.model(p, nbytes, fitted) if p > 1 else 0.0
            predictions.append({"compressor": "dense ring", "path": "-", "gbps": gbps, "ranks": p,
                                "wire_s": dense, "compute_s": 0.0, "total_s": dense, "pays": None})
            for row in kernels:
                if row["compressor"] == "copyto":
                    continue
                wire, compute = compressed_seconds(row, p, fitted, nbytes)
                predictions.append({"compressor": row["compressor"], "path": row["path"], "gbps": gbps, "ranks": p,
                                    "wire_s": wire, "compute_s": compute, "total_s": wire + compute,
                                    "pays": wire + compute < dense})
    return predictions


# -- 3. training ---------------------------------------------------------------------------------------------
def train_part(args, comm, paths, say):
    """Median step time of the MLP with none, fp16 and Top-1%, and each compressor's measured time for the
    model's gradient, on each path."""
    import numpy as np

    from mpiopt.data import load_dataset
    from mpiopt.kernels import compiled
    from mpiopt.models import get_model
    from mpiopt.optim import get_optimizer
    from mpiopt.train import train
    data = load_dataset("digits", comm=comm)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    batch = 64
    epochs = max(1, -(-args.steps * batch // data.X_train.shape[0]))
    from mpiopt.train.settings import BUCKET_BYTES
    rows = []
    for path in paths:
        with compiled.use(path == "compiled"):
            steps = {label: [] for _, _, label in TRAIN_CONFIGS}
            for _ in range(args.repeat):  # the configurations interleaved: drift hits all of them alike
                for name, options, label in TRAIN_CONFIGS:
                    model = get_model("mlp", n_features=data.n_features, n_classes=data.n_classes, hidden=hidden)
                    result = train(model, data.X_train, data.y_train, get_optimizer("adam", lr=1e-3), comm,
                                   epochs=epochs, batch_size=batch, seed=0, reducer="ring",
                                   compressor=None if name == "none" else name,
                                   compressor_options=options or None)
                    steps[label].append(comm.allreduce(result.timings["train"] / max(result.steps, 1), op=_max()))
                    if name == "none":
                        final = result.params
            # The compressors' time on real gradients (the conversions' speed depends on the values: small
            # gradients take numpy's subnormal paths): this rank's first batch at the first and the last step.
            first = (data.X_train[:batch], data.y_train[:batch])
            gradients = [model.loss_and_grad(params, *first)[1] for params in (model.init_params(0), final)]
            per_bucket = BUCKET_BYTES // gradients[0].itemsize
            for name, options, label in TRAIN_CONFIGS:
                codec = 0.0
                for gradient in gradients if name != "none" else ():  # each bucket, as the trainer calls it
                    for lo in range(0, gradient.size, per_bucket):
                        calls = codec_calls(name, options, gradient[lo:lo + per_bucket].copy())
                        for call in calls.values():
                            call()
                        measured = {key: statistics.median(_seconds(call) for _ in range(args.repeat))
                                    for key, call in calls.items()}
                        codec += (measured["compress"] + measured["decompress"] + (
                            (comm.size - 1) / comm.size * measured["payload_sum"] if "payload_sum" in measured
                            else comm.size * measured.get("accumulate", 0.0))) / len(gradients)
                codec = comm.allreduce(codec, op=_max())
                buckets = -(-model.n_params // per_bucket)
                rows.append({"compressor": label, "path": path, "step_s": statistics.median(steps[label]),
                             "codec_s": codec, "n_params": model.n_params, "buckets": buckets})
                say(f"  train {label:<7} {path:<8}: step {rows[-1]['step_s'] * 1e3:.2f} ms, compressor "
                    f"{codec * 1e3:.2f} ms ({buckets} buckets)")
    for row in rows:
        base = next(r for r in rows if r["path"] == row["path"] and r["compressor"] == "none")
        row["bound_s"] = base["step_s"] + row["codec_s"]
        row["within"] = row["step_s"] <= row["bound_s"]
    return {"model": f"mlp 64-{'-'.join(map(str, hidden))}-10", "ranks": comm.size, "batch_size": batch,
            "epochs": epochs, "rows": rows}


def _max():
    from mpi4py import MPI
    return MPI.MAX


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
