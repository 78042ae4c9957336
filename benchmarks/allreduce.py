"""All-reduce benchmark in the style of the OSU micro-benchmarks and nccl-tests.

    mpiexec -n 4 python benchmarks/allreduce.py -b 8 -e 256M -f 2 -n 20 -w 5

For each message size (from -b to -e, multiplied by -f) every reducer runs -w
untimed and -n timed all-reduces, one after the other, so they are compared in
the same run, under one or both timing conventions (``--convention``, default
``both``: each size is timed under OSU's, then under nccl-tests', every
reducer in turn):

``osu``
    Each timed call starts after a barrier; its time is the slowest rank's, and
    the row reports the median over the calls (osu_allreduce reports a mean).
``back-to-back``
    nccl-tests' way: after the warm-up, one barrier, then the calls back to
    back with hot buffers (no barrier between them, so a rank may start the
    next call while its neighbours finish this one); the time is the slowest
    rank's total divided by the number of calls.

    size(B) count type redop reducer conv time(us) algbw(GB/s) busbw(GB/s) #wrong vs_mpi model(us)

algbw = size / time; busbw = algbw x 2 (p-1)/p, the bytes each rank must move
(nccl-tests' convention), so busbw is comparable across rank counts.  #wrong
counts elements that differ from the exact answer in a separate, untimed call
whose data are small integers (exact in every dtype).  vs_mpi = MPI_Allreduce's
time / this reducer's time under the same convention (above 1: faster than MPI).  model is the
alpha-beta-gamma prediction with alpha, beta fitted by a ping-pong and gamma, c
by timing a local add and copy, all in this run.
Output: the table (column conv: osu or b2b), a summary against the targets (the
ring's target on the OSU convention's rows when they were timed) and, per
convention, the ring reducers' ratio to MPI from 1 MiB (median and worst),
JSON (--output; each row has its ``convention``) and a plot of busbw against
size (--plot; solid lines OSU, dashed back-to-back).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from common import size_argument, start, write_result  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-b", "--minbytes", type=size_argument, default=8, help="smallest size (default 8)")
    parser.add_argument("-e", "--maxbytes", type=size_argument, default=256 << 20, help="largest size (default 256M)")
    parser.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier (default 2)")
    parser.add_argument("-n", "--iters", type=int, default=20,
                        help="timed iterations (default 20; small messages get more, up to 1000)")
    parser.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed iterations (default 5)")
    parser.add_argument("--max-seconds", type=float, default=3.0,
                        help="fewer timed iterations (>= 3) for a size when they would take longer than this")
    parser.add_argument("-d", "--datatype", default="float32",
                        choices=["float64", "float32", "float16", "int64", "int32", "int8", "uint8"])
    parser.add_argument("-o", "--op", default="sum", choices=["sum", "max", "min", "mean"])
    parser.add_argument("--reducers", default="mpi,ring,ring-seg,rd,hier,hier-shm,ps,ps-sharded,auto",
                        help="comma-separated reducer names (mpi is always included as the baseline); "
                             "hier-shm is hier on a buffer from its shared_buffer(), reduced in place")
    parser.add_argument("--convention", default="both", choices=["osu", "back-to-back", "both"],
                        help="osu: a barrier before each timed call, the median of the slowest rank's times; "
                             "back-to-back: the calls back to back, the slowest rank's total / iterations "
                             "(nccl-tests); both (default): each size under both")
    parser.add_argument("--output", default="results/allreduce.json")
    parser.add_argument("--plot", help="PNG file: busbw against size, one line per reducer")
    return parser.parse_args(argv)


def main(argv=None):
    args, comm, say = start(parse_args, argv, outputs=("output", "plot"), plots=("plot",))
    import numpy as np
    from mpi4py import MPI

    from mpiopt.collectives import get_reducer
    from mpiopt.collectives.models import fit_alpha_beta, fit_gamma_copy, predict

    p, rank = comm.Get_size(), comm.Get_rank()
    dtype = np.dtype(args.datatype)
    names = ["mpi"] + [n for n in args.reducers.split(",") if n and n != "mpi"]
    reducers = {name: get_reducer("hier" if name == "hier-shm" else name, comm, check=False) for name in names}
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    nodes = comm.allreduce(int(node.Get_rank() == 0))
    node.Free()

    alpha, beta = fit_alpha_beta(comm)
    gamma, copy = fit_gamma_copy(dtype=dtype if dtype.kind == "f" else np.float32)
    gamma, copy = comm.bcast((gamma, copy), root=0)
    say(f"# mpiopt all-reduce benchmark: {p} ranks on {nodes} node(s), {args.datatype} {args.op}, "
        f"{args.iters} iterations ({args.warmup_iters} warm-up)")
    say(f"# fitted: alpha = {alpha * 1e6:.2f} us, beta = {beta * 1e9:.3f} ns/B ({1 / beta / 1e9 if beta else 0:.2f} GB/s), "
        f"gamma = {gamma * 1e9:.3f} ns/B, copy = {copy * 1e9:.3f} ns/B")
    conventions = CONVENTIONS[args.convention]
    header = (f"{'size(B)':>10} {'count':>10} {'type':>8} {'redop':>5} {'reducer':>10} {'conv':>4} {'time(us)':>11} "
              f"{'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>6} {'vs_mpi':>7} {'model(us)':>10}")
    say(header)

    rows = []
    for nbytes in message_sizes(args, dtype):
        count = nbytes // dtype.itemsize
        pattern = ((np.arange(count) % 7) + 1).astype(dtype)
        sendbuf = (pattern * dtype.type(rank + 1)).astype(dtype)
        recvbuf = np.empty_like(sendbuf)
        expected = expected_result(pattern, p, args.op)
        wrongs = {}
        for convention in conventions:
            mpi_time = None
            for name, reducer in reducers.items():
                call = Call(name, reducer, sendbuf, recvbuf, args.op)
                seconds, iterations = time_call(comm, args, call, convention)
                if name not in wrongs:  # checked once per size, after the first convention's timing
                    recvbuf[...] = 0
                    call.prepare()
                    call.run()
                    wrongs[name] = comm.allreduce(int(np.count_nonzero(call.output != expected)))
                call.release()
                wrong = wrongs[name]
                if name == "mpi":
                    mpi_time = seconds
                algbw = nbytes / seconds / 1e9
                busbw = algbw * (2 * (p - 1) / p if p > 1 else 1.0)
                model_name, model_options = reducer_model(name, reducer, nbytes)
                model = predict(model_name, p, nbytes, alpha, beta, gamma, copy, nodes, **model_options)
                row = {"size": nbytes, "count": count, "type": args.datatype, "redop": args.op, "reducer": name,
                       "convention": convention, "time_us": seconds * 1e6, "algbw": algbw, "busbw": busbw,
                       "wrong": wrong, "vs_mpi": mpi_time / seconds,
                       "model_us": None if model is None else model * 1e6, "iterations": iterations}
                rows.append(row)
                say(f"{nbytes:>10} {count:>10} {args.datatype:>8} {args.op:>5} {name:>10} "
                    f"{SHORT[convention]:>4} {row['time_us']:>11.2f} {algbw:>11.3f} {busbw:>11.3f} {wrong:>6} "
                    f"{row['vs_mpi']:>7.2f} {'-' if model is None else f'{model * 1e6:.2f}':>10}")
    for reducer in reducers.values():
        reducer.close()

    summary = summarize(rows, names, p)
    if rank == 0:
        print_summary(summary, names)
    write_result(comm, args.output, {"benchmark": "allreduce", "ranks": p, "nodes": nodes, "datatype": args.datatype,
                                     "op": args.op, "iters": args.iters, "warmup_iters": args.warmup_iters,
                                     "conventions": list(conventions),
                                     "fitted": {"alpha": alpha, "beta": beta, "gamma": gamma, "copy": copy},
                                     "rows": rows, "summary": summary})
    if rank == 0 and args.plot:
        plot(rows, names, p, args)
        print(f"# plot written to {args.plot}")
    return 0


CONVENTIONS = {"osu": ("osu",), "back-to-back": ("back-to-back",), "both": ("osu", "back-to-back")}
SHORT = {"osu": "osu", "back-to-back": "b2b"}


def message_sizes(args, dtype):
    """--minbytes (at least one element) to --maxbytes, multiplied by --stepfactor."""
    sizes, size = [], max(args.minbytes, dtype.itemsize)
    while size <= args.maxbytes:
        sizes.append(size)
        size *= args.stepfactor
    return sizes


def expected_result(pattern, p, op):
    """The reduction of rank r's ``pattern * (r + 1)`` over ``p`` ranks by ``op``, exactly."""
    import numpy as np
    dtype = pattern.dtype
    expected = (pattern * dtype.type(p * (p + 1) // 2)).astype(dtype)
    if op == "mean":
        return (expected / dtype.type(p)).astype(dtype)
    if op in ("max", "min"):
        return (pattern * dtype.type(p if op == "max" else 1)).astype(dtype)
    return np.asarray(expected)


def time_call(comm, args, call, convention="osu"):
    """(seconds per call, the number of timed calls) under ``convention``, after --warmup_iters untimed
    calls: ``osu``, the median over the calls of the slowest rank's time, each call after a barrier;
    ``back-to-back``, the slowest rank's time for all the calls run back to back after one barrier, divided
    by their number."""
    import numpy as np
    from mpi4py import MPI
    for _ in range(args.warmup_iters):
        call.prepare()
        call.run()
    call.prepare()
    comm.Barrier()
    began = time.perf_counter()
    call.run()
    estimate = comm.allreduce(time.perf_counter() - began, op=MPI.MAX)
    # At least --iters calls, more for small messages (up to 1000, about 50 ms in all, as OSU
    # does) so a passing disturbance cannot move the median; fewer (>= 3) past --max-seconds.
    iterations = max(args.iters, min(1000, int(0.05 / max(estimate, 1e-9))))
    iterations = max(3, min(iterations, int(args.max_seconds / max(estimate, 1e-9))))
    if convention == "back-to-back":
        call.prepare()
        with np.errstate(over="ignore", invalid="ignore"):  # hier-shm reduces its own result again and again
            comm.Barrier()
            began = time.perf_counter()
            for _ in range(iterations):
                call.run()
            total = time.perf_counter() - began
        return comm.allreduce(total, op=MPI.MAX) / iterations, iterations
    times = np.empty(iterations)
    for i in range(iterations):
        call.prepare()
        comm.Barrier()
        began = time.perf_counter()
        call.run()
        times[i] = time.perf_counter() - began
    comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    return float(np.median(times)), iterations


class Call:
    """One timed all-reduce.  ``hier-shm`` reduces, in place, a buffer that lives in the
    shared-memory window (refilled with the input before each call, outside the timing);
    every other reducer reduces ``sendbuf`` into ``recvbuf``."""

    def __init__(self, name, reducer, sendbuf, recvbuf, op):
        self.reducer, self.sendbuf, self.op = reducer, sendbuf, op
        self.shared = name == "hier-shm"
        self.output = reducer.shared_buffer(sendbuf.size, sendbuf.dtype) if self.shared else recvbuf

    def prepare(self):
        if self.shared:
            self.output[...] = self.sendbuf

    def run(self):
        source = self.output if self.shared else self.sendbuf
        self.reducer.allreduce(source, self.output, op=self.op)

    def release(self):
        if self.shared:
            self.reducer.free_shared(self.output)


def reducer_model(name, reducer, nbytes):
    """The registered reducer whose cost model applies at this size (auto: the one it picks), and the
    model's options (hier-shm: the buffer already in the window)."""
    if name == "auto":
        return reducer.choose(nbytes).name, {}
    if name == "hier-shm":
        return "hier", {"in_window": True}
    return name, {}


def summarize(rows, names, p):
    """Average busbw per reducer, the three targets of docs/collectives.md (medians of per-size ratios; on the OSU
    convention's rows when they were timed) and, per convention, the ring reducers' ratios to MPI from 1 MiB."""
    conventions = list(dict.fromkeys(r.get("convention", "osu") for r in rows))
    main = "osu" if "osu" in conventions else (conventions[0] if conventions else "osu")

    def ratios(reducer, minimum=0, maximum=float("inf"), convention=main):
        return [r["vs_mpi"] for r in rows if r["reducer"] == reducer and minimum <= r["size"] <= maximum
                and r.get("convention", "osu") == convention]

    summary = {"average_busbw": {name: statistics.mean(r["busbw"] for r in rows if r["reducer"] == name
                                                       and r.get("convention", "osu") == main)
                                 for name in names},
               "convention": main,
               "wrong": sum(r["wrong"] for r in rows if r.get("convention", "osu") == main)}
    targets = {}
    if "ring" in names and ratios("ring", 1 << 20):
        values = ratios("ring", 1 << 20)
        targets["ring_busbw_vs_mpi_from_1MiB"] = {"median": statistics.median(values), "min": min(values),
                                                  "target": 1.0}
    if "rd" in names and ratios("rd", 0, 8):
        latency = ratios("rd", 0, 8)[0]
        targets["rd_latency_vs_mpi_at_8B"] = {"value": 1 / latency, "target": 2.5}
    for name in ("hier", "hier-shm"):
        if name in names and ratios(name, 16 << 20):
            values = ratios(name, 16 << 20)
            targets[f"{name}_busbw_vs_mpi_from_16MiB"] = {"median": statistics.median(values), "min": min(values),
                                                          "target": 2.0}
    summary["targets"] = targets
    per_convention = {}
    for convention in conventions:
        for name in ("ring", "ring-seg"):
            values = ratios(name, 1 << 20, convention=convention)
            if name in names and values:
                per_convention.setdefault(convention, {})[name] = {
                    "median": statistics.median(values), "min": min(values), "sizes": len(values)}
    summary["vs_mpi_from_1MiB"] = per_convention
    return summary


def print_summary(summary, names):
    print("# Avg bus bandwidth (GB/s): " + ", ".join(f"{n} {summary['average_busbw'][n]:.3f}" for n in names))
    print(f"# #wrong in total: {summary['wrong']}")
    for key, entry in summary["targets"].items():
        if "median" in entry:
            verdict = "met" if entry["median"] >= entry["target"] else "MISSED"
            print(f"# {key}: median {entry['median']:.2f}x, worst {entry['min']:.2f}x "
                  f"(target >= {entry['target']}x): {verdict}")
        else:
            verdict = "met" if entry["value"] <= entry["target"] else "MISSED"
            print(f"# {key}: {entry['value']:.2f}x MPI's latency (target <= {entry['target']}x): {verdict}")
    for convention, entries in summary.get("vs_mpi_from_1MiB", {}).items():
        for name, entry in entries.items():
            print(f"# {name} vs MPI from 1 MiB, {convention}: median {entry['median']:.2f}x, "
                  f"worst {entry['min']:.2f}x ({entry['sizes']} sizes)")


def plot(rows, names, p, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(8, 5))
    conventions = list(dict.fromkeys(r.get("convention", "osu") for r in rows))
    for convention in conventions:
        for index, name in enumerate(names):
            points = [(r["size"], r["busbw"]) for r in rows
                      if r["reducer"] == name and r.get("convention", "osu") == convention]
            if not points:
                continue
            label = name if len(conventions) == 1 else f"{name} ({SHORT[convention]})"
            axes.plot(*zip(*points), marker=".", label=label, color=f"C{index}",
                      linestyle="--" if convention == "back-to-back" else "-",
                      linewidth=2.5 if name == "mpi" else 1.2)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("bus bandwidth (GB/s)")
    axes.set_title(f"all-reduce, {p} ranks, {args.datatype} {args.op} (median of up to {args.iters})", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(ncol=2, fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    figure.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
