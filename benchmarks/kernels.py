"""The GPU kernels: bandwidth against the device's peak, the ADMM lasso on GPU against CPU, compressors on GPU.

    python benchmarks/kernels.py [--sizes 1M,4M,16M,64M,256M] [--output results/kernels.json]
    python benchmarks/kernels.py --cpu-only      # the numpy twins and the compressors on the CPU (no GPU needed)
    python benchmarks/kernels.py --allow-no-gpu  # without a GPU: exit 0 and a JSON saying so (else exit 2)

One process (not under mpiexec), one GPU (device 0).  Measured in this run,
on this machine:

* **kernels**: every elementwise and packing kernel of ``mpiopt.kernels``
  (fp16/bf16 conversions, sign pack/unpack, QSGD norms, quantize and
  dequantize at 8 and 4 bits, soft-thresholding, over-relaxation, the fused
  ADMM z/u update) and, apart (they are not streaming kernels), Top-K
  selection and scatter-add of 1%, at each of ``--sizes`` (bytes of the input
  vector: float32 for the compressors' kernels, float64 for ADMM's).  The
  effective bandwidth is (bytes the operation must read + bytes it must
  write) / time, as a fraction of the GPU's peak memory bandwidth, read from
  the device: peak = 2 (double data rate) x memory clock x bus width / 8 bytes
  per second, from ``cupy.cuda.runtime.getDeviceProperties`` (memoryClockRate
  in kHz, memoryBusWidth in bits) or, on CUDA 13 where the properties no
  longer have the memory clock, ``cudaDeviceGetAttribute``
  (cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth).  A plain
  device copy (``cupy.copyto``) is measured beside them as what the memory
  system gives in practice.  The numpy twins are measured too, on the CPU of
  the same machine, at ``--cpu-sizes``, for reference;
* **lasso** (``--lasso-rows`` x ``--lasso-cols``, 100000 x 1000 by default):
  the ADMM solve with numpy data and with CuPy data (the backend follows the
  data): the whole solve at the default tolerances (setup included), the
  per-iteration time of a fixed-length run (``--iterations``, tolerances 0,
  fixed rho) and the x-step alone (a cached-factor solve), and the GPU's
  speedups over the CPU;
* **compressors**: compress and decompress of every registered compressor on
  CuPy arrays of float32 at ``--compressor-sizes`` (and on numpy arrays at
  ``--cpu-sizes``): throughput in GB/s of float32 input = bytes /
  (compress + decompress time).

GPU times come from CUDA events (``cupy.cuda.Event`` recorded around a batch
of calls, ``get_elapsed_time`` after synchronizing), CPU times from
``time.perf_counter``; each figure is the median of ``--repeat`` batches after
``--warmup`` calls (the first call also compiles the kernel), a batch being as
many calls as take about ``--min-batch-ms``.

Targets (measured, not asserted): elementwise and packing kernels at >= 70% of
the peak bandwidth at 64 MiB and more; the lasso's GPU per-iteration time >=
10x faster than the CPU's; compression at >= 100 GB/s for fp16 and sign.

Output: tables, and JSON (``--output``) with "benchmark": "kernels", rendered
by benchmarks/report.py.  Without a GPU (no CuPy, or no device) the script
stops with a message: exit status 2, or with ``--allow-no-gpu`` status 0 and a
JSON ``{"benchmark": "kernels", "gpu": null, "reason": ...}``.  A part that
fails (a kernel that does not compile, say) is recorded with its error and the
others go on; the exit status is then 1.
"""
import argparse
import math
import os
import platform
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import fill_presets, size_argument, start  # noqa: E402
from mpiopt.core.threads import available_cores  # noqa: E402

BANDWIDTH_TARGET = 0.70        # fraction of the peak, at TARGET_FROM bytes and more
TARGET_FROM = 64 << 20
SPEEDUP_TARGET = 10.0          # lasso per-iteration, GPU over CPU
COMPRESSION_TARGET_GBS = 100.0  # fp16 and sign on the GPU
COMPRESSION_TARGETS = ("fp16", "sign")
COMPRESSOR_OPTIONS = {"topk": {"ratio": 0.01}, "randomk": {"ratio": 0.01}, "powersgd": {"rank": 4}}
FRACTION = 0.01                # Top-K and scatter-add: 1% of the entries
BUCKET = 512                   # QSGD's bucket
# cudaDeviceAttr values (driver_types.h), for CUDA versions whose cudaDeviceProp lacks the memory clock
ATTRIBUTE_MEMORY_CLOCK_RATE = 36
ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37

PRESETS = {
    "full": {"sizes": "1M,4M,16M,64M,256M", "cpu_sizes": "1M,64M", "compressor_sizes": "16M,64M,256M",
             "lasso_rows": 100000, "lasso_cols": 1000, "iterations": 200, "repeat": 7, "solve_repeat": 3,
             "warmup": 2},
    "quick": {"sizes": "64K", "cpu_sizes": "64K", "compressor_sizes": "64K", "lasso_rows": 2000, "lasso_cols": 50,
              "iterations": 20, "repeat": 2, "solve_repeat": 1, "warmup": 1},
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="input bytes of the GPU kernels (1M,4M,16M,64M,256M)")
    parser.add_argument("--cpu-sizes", help="input bytes of the numpy twins and the CPU compressors (1M,64M)")
    parser.add_argument("--compressor-sizes", help="float32 input bytes of the GPU compressors (16M,64M,256M)")
    parser.add_argument("--lasso-rows", type=int, help="rows of the lasso (100000)")
    parser.add_argument("--lasso-cols", type=int, help="columns of the lasso (1000)")
    parser.add_argument("--lam-ratio", type=float, default=0.1, help="lam as a fraction of lambda_max")
    parser.add_argument("--iterations", type=int, help="iterations of the fixed-length lasso run (200)")
    parser.add_argument("--repeat", type=int, help="timed batches per figure (median; 7)")
    parser.add_argument("--solve-repeat", type=int, help="whole lasso solves per backend (median; 3)")
    parser.add_argument("--warmup", type=int, help="untimed calls first (2)")
    parser.add_argument("--min-batch-ms", type=float, default=2.0, help="calls per timed batch: about this long")
    parser.add_argument("--parts", default="kernels,lasso,compressors", help="which parts to run")
    parser.add_argument("--cpu-only", action="store_true",
                        help="only the numpy twins and the CPU side of the other parts (no GPU needed)")
    parser.add_argument("--allow-no-gpu", action="store_true",
                        help="without a GPU, write a JSON saying so and exit 0 (else exit 2)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--output", default="results/kernels.json")
    args = parser.parse_args(argv)
    fill_presets(args, PRESETS)
    args.parts = [part for part in args.parts.split(",") if part]
    unknown = set(args.parts) - {"kernels", "lasso", "compressors"}
    if unknown:
        parser.error(f"unknown parts {', '.join(sorted(unknown))}; choose from kernels, lasso, compressors")
    return args


# -- the code measured, imported in this one place (its names may still change) -------------------------------
def load_api():
    """The kernels, compressors and solver pieces this benchmark measures, as one namespace."""
    from types import SimpleNamespace

    from mpiopt import kernels
    from mpiopt.admm import lasso
    from mpiopt.admm.design import Design
    from mpiopt.admm.losses import SquaredLossShard
    from mpiopt.admm.solver import Problem
    from mpiopt.compression import COMPRESSORS, get_compressor
    from mpiopt.data.synthetic import make_lasso
    return SimpleNamespace(kernels=kernels, lasso=lasso, Problem=Problem, Design=Design,
                           SquaredLossShard=SquaredLossShard, compressor_names=list(COMPRESSORS),
                           get_compressor=get_compressor, make_lasso=make_lasso)


# -- the GPU: is there one, and its peak bandwidth ---------------------------------------------------------------
def find_gpu():
    """(the cupy module, None) when CuPy sees a device, else (None, the reason there is no GPU)."""
    try:
        import cupy
    except ImportError as error:
        return None, f"CuPy is not installed ({error}); pip install -e '.[gpu]' on a machine with a GPU"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CUDARuntimeError: no driver, an old driver, no device
        return None, f"CuPy {cupy.__version__} finds no CUDA device ({type(error).__name__}: {error})"
    if count < 1:
        return None, f"CuPy {cupy.__version__} finds no CUDA device (getDeviceCount() = {count})"
    return cupy, None


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gpu_info(cupy, device=0):
    """The device's name, compute capability, memory and peak memory bandwidth (see the module docstring)."""
    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(device)
    clock_khz, bus_bits = props.get("memoryClockRate"), props.get("memoryBusWidth")
    source = "cudaGetDeviceProperties"
    if not clock_khz or not bus_bits:
        try:
            clock_khz = runtime.deviceGetAttribute(
                getattr(runtime, "cudaDevAttrMemoryClockRate", ATTRIBUTE_MEMORY_CLOCK_RATE), device)
            bus_bits = runtime.deviceGetAttribute(
                getattr(runtime, "cudaDevAttrGlobalMemoryBusWidth", ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH), device)
            source = "cudaDeviceGetAttribute"
        except Exception as error:
            clock_khz, bus_bits, source = None, None, f"unavailable ({type(error).__name__}: {error})"
    peak = 2.0 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None
    try:
        driver = runtime.driverGetVersion()
    except Exception:
        driver = None
    return {"device": device, "name": _text(props.get("name", "?")),
            "compute_capability": f"{props.get('major')}.{props.get('minor')}",
            "total_memory_bytes": int(props.get("totalGlobalMem", 0)),
            "multiprocessors": props.get("multiProcessorCount"),
            "memory_clock_khz": clock_khz, "memory_bus_bits": bus_bits, "peak_source": source,
            "peak_bytes_per_s": peak, "peak_gbs": peak / 1e9 if peak else None,
            "peak_formula": "2 x memory clock (Hz) x bus width (bits) / 8",
            "cupy": cupy.__version__, "cuda_runtime": runtime.runtimeGetVersion(), "cuda_driver": driver}


def host_info():
    import numpy
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as stream:
            cpu = next((line.split(":", 1)[1].strip() for line in stream if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": available_cores(), "python": platform.python_version(), "numpy": numpy.__version__,
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "platform": platform.platform()}


# -- timing ------------------------------------------------------------------------------------------------
class CpuTimer:
    """Seconds of ``calls`` calls of a function by the host's clock."""
    backend = "numpy"

    def batch(self, function, calls):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        return time.perf_counter() - start

    def free(self):
        pass


class GpuTimer:
    """Seconds of ``calls`` calls of a function by CUDA events on the current stream."""
    backend = "cupy"

    def __init__(self, cupy):
        self.cupy = cupy
        self.start, self.stop = cupy.cuda.Event(), cupy.cuda.Event()

    def batch(self, function, calls):
        self.start.record()
        for _ in range(calls):
            function()
        self.stop.record()
        self.stop.synchronize()
        return self.cupy.cuda.get_elapsed_time(self.start, self.stop) / 1e3

    def free(self):
        self.cupy.get_default_memory_pool().free_all_blocks()


def per_call(timer, function, repeat, warmup, min_batch_s, max_calls=1000):
    """Median seconds per call of ``function``: ``warmup`` untimed calls, then ``repeat`` batches of as many
    calls as take about ``min_batch_s`` (judged from one timed call)."""
    for _ in range(max(warmup, 1)):
        function()
    once = timer.batch(function, 1)
    calls = max(1, min(max_calls, math.ceil(min_batch_s / max(once, 1e-9))))
    return statistics.median(timer.batch(function, calls) / calls for _ in range(max(repeat, 1)))


# -- the kernels -----------------------------------------------------------------------------------------------
class Kernel:
    """One kernel measured: how to set its inputs up (untimed) and the bytes it must move per call.

    ``setup(k, xp, x)`` gets the kernels' namespace, the array module and the input vector (float32 or
    float64, n entries) and returns the call; ``moved(n)`` is bytes read + bytes written by that call;
    ``streaming`` kernels are held to the bandwidth target (Top-K and scatter-add are not)."""

    def __init__(self, name, dtype, setup, moved, streaming=True):
        self.name, self.dtype, self.setup, self.moved, self.streaming = name, dtype, setup, moved, streaming


def _qsgd_quantize(bits):
    def setup(k, xp, x):
        norms = k.qsgd_norms(x, BUCKET, "l2")
        return lambda: k.qsgd_quantize(x, bits, BUCKET, "l2", seed=0, stream_key=("bench",), step=0, norms=norms)
    return setup


def _qsgd_dequantize(bits):
    def setup(k, xp, x):
        norms, stored = k.qsgd_quantize(x, bits, BUCKET, "l2", seed=0, stream_key=("bench",), step=0)
        out = xp.empty_like(x)
        return lambda: k.qsgd_dequantize(norms, stored, x.size, bits, BUCKET, out=out)
    return setup


def _from(encode, decode):
    def setup(k, xp, x):
        encoded, out = getattr(k, encode)(x), xp.empty_like(x)
        return lambda: getattr(k, decode)(encoded, out=out)
    return setup


def _sign_unpack(k, xp, x):
    bits, scale = k.sign_pack(x)
    out = xp.empty_like(x)
    return lambda: k.sign_unpack(bits, scale, x.size, out=out)


def _scatter_add(k, xp, x):
    values, indices = k.topk_select(x, max(1, int(x.size * FRACTION)))
    out = xp.zeros_like(x)
    return lambda: k.scatter_add(out, indices, values)


def _copy(k, xp, x):
    out = xp.empty_like(x)
    return lambda: xp.copyto(out, x)


def _z_u_update(k, xp, x):
    u, relaxed = x * 0.5, x * 0.25
    return lambda: k.z_u_update(x, 2.0, 0.1, u, relaxed, 0)


def _relax(k, xp, x):
    z, out = x * 0.5, xp.empty_like(x)
    return lambda: k.relax(x, z, 1.6, out=out)


def _soft_threshold(k, xp, x):
    out = xp.empty_like(x)
    return lambda: k.soft_threshold(x, 0.5, out=out)


def _top(n):
    return max(1, int(n * FRACTION))


KERNELS = [
    Kernel("copy (reference)", "float32", _copy, lambda n: 8 * n),
    Kernel("to_fp16", "float32", lambda k, xp, x: lambda: k.to_fp16(x), lambda n: 6 * n),
    Kernel("from_fp16", "float32", _from("to_fp16", "from_fp16"), lambda n: 6 * n),
    Kernel("to_bf16", "float32", lambda k, xp, x: lambda: k.to_bf16(x), lambda n: 6 * n),
    Kernel("from_bf16", "float32", _from("to_bf16", "from_bf16"), lambda n: 6 * n),
    Kernel("sign_pack", "float32", lambda k, xp, x: lambda: k.sign_pack(x), lambda n: 4 * n + -(-n // 8) + 4),
    Kernel("sign_unpack", "float32", _sign_unpack, lambda n: -(-n // 8) + 4 + 4 * n),
    Kernel("qsgd_norms", "float32", lambda k, xp, x: lambda: k.qsgd_norms(x, BUCKET, "l2"),
           lambda n: 4 * n + 4 * -(-n // BUCKET)),
    Kernel("qsgd_quantize 8-bit", "float32", _qsgd_quantize(8), lambda n: 4 * n + 4 * -(-n // BUCKET) + n),
    Kernel("qsgd_quantize 4-bit", "float32", _qsgd_quantize(4),
           lambda n: 4 * n + 4 * -(-n // BUCKET) + -(-n // 2)),
    Kernel("qsgd_dequantize 8-bit", "float32", _qsgd_dequantize(8), lambda n: n + 4 * -(-n // BUCKET) + 4 * n),
    Kernel("qsgd_dequantize 4-bit", "float32", _qsgd_dequantize(4),
           lambda n: -(-n // 2) + 4 * -(-n // BUCKET) + 4 * n),
    Kernel("soft_threshold", "float64", _soft_threshold, lambda n: 16 * n),
    Kernel("relax", "float64", _relax, lambda n: 24 * n),
    Kernel("z_u_update", "float64", _z_u_update, lambda n: 40 * n),
    Kernel("topk_select 1%", "float32", lambda k, xp, x: lambda: k.topk_select(x, _top(x.size)),
           lambda n: 4 * n + 8 * _top(n), streaming=False),
    Kernel("scatter_add 1%", "float32", _scatter_add, lambda n: 16 * _top(n), streaming=False),
]


def _input(xp, nbytes, dtype):
    """A standard normal vector of ``nbytes`` bytes of ``dtype``, made on the host with a fixed seed."""
    import numpy as np
    itemsize = np.dtype(dtype).itemsize
    host = np.random.default_rng(0).standard_normal(max(1, nbytes // itemsize), dtype=np.float32).astype(dtype)
    return host if xp is np else xp.asarray(host)


def kernels_part(api, xp, timer, sizes, args, peak, say, errors):
    rows = []
    for nbytes in sizes:
        inputs = {}
        for kernel in KERNELS:
            row = {"kernel": kernel.name, "backend": timer.backend, "dtype": kernel.dtype, "bytes": nbytes,
                   "streaming": kernel.streaming}
            try:
                if kernel.dtype not in inputs:
                    inputs[kernel.dtype] = _input(xp, nbytes, kernel.dtype)
                x = inputs[kernel.dtype]
                call = kernel.setup(api.kernels, xp, x)
                seconds = per_call(timer, call, args.repeat, args.warmup, args.min_batch_ms / 1e3)
                moved = kernel.moved(x.size)
                row.update(elements=int(x.size), bytes_moved=int(moved), seconds=seconds, gbs=moved / seconds / 1e9,
                           fraction_of_peak=moved / seconds / peak if peak else None)
                say(f"  {timer.backend:<5} {kernel.name:<22} {report.human(nbytes):>9}: {seconds * 1e6:10.1f} us "
                    f"{row['gbs']:8.1f} GB/s" + (f" {row['fraction_of_peak']:6.1%} of peak" if peak else ""))
            except Exception as error:  # recorded, and the other kernels go on
                row["error"] = f"{type(error).__name__}: {error}"
                errors.append(f"kernel {kernel.name} ({timer.backend}, {nbytes} bytes): {row['error']}")
                say(f"  {timer.backend:<5} {kernel.name:<22} {report.human(nbytes):>9}: FAILED {row['error']}")
                traceback.print_exc()
            rows.append(row)
            timer.free()
        del inputs
        timer.free()
    return rows


# -- the lasso -------------------------------------------------------------------------------------------------
def lasso_side(api, xp, timer, A, b, lam, args, say):
    """One backend's whole solve, per-iteration time and x-step time on (A, b) already in ``xp``."""
    from mpi4py import MPI
    comm = MPI.COMM_SELF
    solves, setups, result = [], [], None
    for _ in range(max(args.solve_repeat, 1) + 1):   # the first solve warms up (kernels compiled, libraries loaded)
        start = time.perf_counter()
        result = api.lasso(A, b, lam, comm=comm, working_set=False)  # the full solver on both sides
        objective = float(result.objective)       # a host number: the GPU's work is done
        solves.append(time.perf_counter() - start)
        setups.append(float(result.timings["setup"]))
    solve_s = statistics.median(solves[1:])
    problem = api.Problem(A, b, "squared", comm)   # the fixed-length runs share one setup (Gram matrix)
    fixed = []
    for _ in range(max(args.solve_repeat, 1)):
        run = problem.solve("l1", lam, eps_abs=0.0, eps_rel=0.0, max_iter=args.iterations, adaptive_rho="none",
                            anderson=0)
        fixed.append(run.timings["per_iteration"])
    del problem
    rho = float(result.info.get("rho_final") or 1.0)
    shard = api.SquaredLossShard(api.Design(A, False, xp), b, xp)
    shard.factorize(rho)
    v = xp.ones(A.shape[1])
    x_step = per_call(timer, lambda: shard.prox(v), args.repeat, args.warmup, args.min_batch_ms / 1e3)
    side = {"solve_s": solve_s, "solve_runs_s": solves[1:], "iterations": int(result.iterations),
            "status": result.status, "objective": objective, "setup_s": statistics.median(setups[1:]),
            "per_iteration_s": statistics.median(fixed), "x_step_s": x_step, "rho": rho,
            "method": getattr(shard, "method", None)}
    say(f"  lasso {timer.backend:<5}: solve {solve_s:.3f} s ({side['iterations']} iterations, setup "
        f"{side['setup_s']:.3f} s), {side['per_iteration_s'] * 1e3:.3f} ms per iteration, x-step "
        f"{x_step * 1e6:.1f} us")
    return side


def lasso_part(api, cupy, args, say, errors):
    import numpy as np
    from mpi4py import MPI
    rows, cols = args.lasso_rows, args.lasso_cols
    A, b, _ = api.make_lasso(rows, cols, comm=MPI.COMM_SELF)
    lam = args.lam_ratio * float(np.abs(A.T @ b).max())
    part = {"rows": rows, "cols": cols, "lam": lam, "lam_ratio": args.lam_ratio, "iterations": args.iterations}
    sides = [("cpu", np, CpuTimer())] + ([("gpu", cupy, GpuTimer(cupy))] if cupy is not None else [])
    for label, xp, timer in sides:
        try:
            data = (A, b) if xp is np else (cupy.asarray(A), cupy.asarray(b))
            part[label] = lasso_side(api, xp, timer, *data, lam, args, say)
        except Exception as error:
            part[label] = {"error": f"{type(error).__name__}: {error}"}
            errors.append(f"lasso on {label}: {part[label]['error']}")
            traceback.print_exc()
        timer.free()
    cpu, gpu = part.get("cpu", {}), part.get("gpu", {})
    if "solve_s" in cpu and "solve_s" in gpu:
        part["speedups"] = {"solve": cpu["solve_s"] / gpu["solve_s"],
                            "per_iteration": cpu["per_iteration_s"] / gpu["per_iteration_s"],
                            "x_step": cpu["x_step_s"] / gpu["x_step_s"], "setup": cpu["setup_s"] / gpu["setup_s"],
                            "objective_relative_difference": abs(gpu["objective"] - cpu["objective"])
                            / max(abs(cpu["objective"]), 1e-300)}
        say("  lasso GPU speedups: " + ", ".join(f"{key} {value:.2f}x" for key, value in part["speedups"].items()
                                                  if key != "objective_relative_difference"))
    return part


# -- the compressors -------------------------------------------------------------------------------------------
def _codec(compressor, x, out):
    """(encode, decode) closures of one compressor on x; PowerSGD's two rounds count as one encode."""
    state = {}
    if getattr(compressor, "rounds", 1) > 1:
        def encode():
            (p_local,), state["round"] = compressor.compress_p(x, name="bench")
            (state["q"],) = compressor.compress_q(p_local, state["round"])   # one rank: its own P is the sum

        def decode():
            compressor.decompress_q(state["q"], state["round"], out=out)
        return encode, decode

    def encode():
        state["payload"], state["ctx"] = compressor.compress(x, name="bench")

    def decode():
        compressor.decompress(state["payload"], state["ctx"], out=out)
    return encode, decode


def compressors_part(api, xp, timer, sizes, args, say, errors):
    rows = []
    for nbytes in sizes:
        x = _input(xp, nbytes, "float32")
        out = xp.empty_like(x)
        for name in api.compressor_names:
            row = {"compressor": name, "backend": timer.backend, "bytes": nbytes,
                   "options": COMPRESSOR_OPTIONS.get(name, {})}
            try:
                compressor = api.get_compressor(name, **row["options"])
                encode, decode = _codec(compressor, x, out)
                encode()
                compress = per_call(timer, encode, args.repeat, args.warmup, args.min_batch_ms / 1e3)
                decompress = per_call(timer, decode, args.repeat, args.warmup, args.min_batch_ms / 1e3)
                payload = compressor.payload_bytes(x.shape, x.dtype)
                row.update(payload_bytes=int(payload), ratio=nbytes / payload, compress_s=compress,
                           decompress_s=decompress, compress_gbs=nbytes / compress / 1e9,
                           decompress_gbs=nbytes / decompress / 1e9,
                           throughput_gbs=nbytes / (compress + decompress) / 1e9)
                say(f"  {timer.backend:<5} {name:<9} {report.human(nbytes):>9}: compress {row['compress_gbs']:8.2f} "
                    f"GB/s, decompress {row['decompress_gbs']:8.2f} GB/s, both {row['throughput_gbs']:8.2f} GB/s")
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
                errors.append(f"compressor {name} ({timer.backend}, {nbytes} bytes): {row['error']}")
                say(f"  {timer.backend:<5} {name:<9} {report.human(nbytes):>9}: FAILED {row['error']}")
                traceback.print_exc()
            rows.append(row)
            timer.free()
        del x, out
        timer.free()
    return rows


# -- the targets -----------------------------------------------------------------------------------------------
def targets(result):
    """Each target's measured value and whether it is met (None: not measured in this run)."""
    gpu_rows = [row for row in result.get("kernels", []) if row["backend"] == "cupy"]
    per_kernel = {}
    for row in gpu_rows:
        if row["streaming"] and row["bytes"] >= TARGET_FROM and "copy" not in row["kernel"]:
            fraction = row.get("fraction_of_peak")
            entry = per_kernel.setdefault(row["kernel"], None)
            if fraction is not None:
                per_kernel[row["kernel"]] = fraction if entry is None else min(entry, fraction)
    measured = [value for value in per_kernel.values() if value is not None]
    bandwidth = {"target": BANDWIDTH_TARGET, "from_bytes": TARGET_FROM, "per_kernel": per_kernel,
                 "worst": min(measured) if measured else None,
                 "met": (min(measured) >= BANDWIDTH_TARGET) if measured else None}
    speedups = (result.get("lasso") or {}).get("speedups") or {}
    value = speedups.get("per_iteration")
    lasso = {"target": SPEEDUP_TARGET, "value": value, "met": value >= SPEEDUP_TARGET if value else None}
    compression = {}
    for name in COMPRESSION_TARGETS:
        rows = [row for row in result.get("compressors", []) if row["backend"] == "cupy"
                and row["compressor"] == name and "throughput_gbs" in row]
        best = max(rows, key=lambda row: row["bytes"]) if rows else None  # at the largest size measured
        gbs = best["throughput_gbs"] if best else None
        compression[name] = {"target_gbs": COMPRESSION_TARGET_GBS, "value_gbs": gbs,
                             "bytes": best["bytes"] if best else None,
                             "met": gbs >= COMPRESSION_TARGET_GBS if gbs is not None else None}
    return {"bandwidth": bandwidth, "lasso_per_iteration": lasso, "compression": compression}


def main(argv=None):
    from mpi4py import MPI

    from mpiopt.core.io import write_json

    args, _, say = start(parse_args, argv, comm=MPI.COMM_SELF)  # one process: it measures one GPU
    if MPI.COMM_WORLD.size > 1:
        if MPI.COMM_WORLD.rank == 0:
            print("kernels benchmark: run it as one process (it measures one GPU), not under mpiexec -n "
                  f"{MPI.COMM_WORLD.size}", file=sys.stderr)
        return 2

    cupy, reason = (None, "--cpu-only") if args.cpu_only else find_gpu()
    if cupy is None and not args.cpu_only:
        print(f"kernels benchmark: no GPU here: {reason}", file=sys.stderr, flush=True)
        if not args.allow_no_gpu:
            print("  (--allow-no-gpu: exit 0 with a JSON saying so; --cpu-only: measure the numpy twins)",
                  file=sys.stderr)
            return 2
        payload = {"benchmark": "kernels", "gpu": None, "reason": reason, "host": host_info()}
        write_json(args.output, payload)
        say(f"JSON written to {args.output}")
        return 0

    api = load_api()
    gpu = gpu_info(cupy) if cupy is not None else None
    peak = gpu["peak_bytes_per_s"] if gpu else None
    result = {"benchmark": "kernels", "mode": "cpu-only" if args.cpu_only else "gpu", "gpu": gpu,
              "host": host_info(), "repeat": args.repeat, "warmup": args.warmup, "min_batch_ms": args.min_batch_ms,
              "quick": args.quick, "parts": args.parts, "arguments": vars(args)}
    if args.cpu_only:
        result["reason"] = "--cpu-only: the numpy twins and the CPU compressors; the GPU numbers are pending"
    say(f"# kernels benchmark: {'GPU ' + gpu['name'] if gpu else 'CPU only'}"
        + (f", peak {gpu['peak_gbs']:.0f} GB/s ({gpu['peak_source']})" if gpu and gpu["peak_gbs"] else "")
        + f"; host {result['host']['cpu']}, {result['host']['cores']} cores")
    sizes = [size_argument(text) for text in args.sizes.split(",")]
    cpu_sizes = [size_argument(text) for text in args.cpu_sizes.split(",")]
    compressor_sizes = [size_argument(text) for text in args.compressor_sizes.split(",")]
    result.update(sizes=sizes if cupy is not None else [], cpu_sizes=cpu_sizes,
                  compressor_sizes=compressor_sizes if cupy is not None else [])
    errors = []
    import numpy as np
    if "kernels" in args.parts:
        rows = []
        if cupy is not None:
            rows += kernels_part(api, cupy, GpuTimer(cupy), sizes, args, peak, say, errors)
        rows += kernels_part(api, np, CpuTimer(), cpu_sizes, args, None, say, errors)
        result["kernels"] = rows
    if "lasso" in args.parts:
        result["lasso"] = lasso_part(api, cupy, args, say, errors)
    if "compressors" in args.parts:
        rows = []
        if cupy is not None:
            rows += compressors_part(api, cupy, GpuTimer(cupy), compressor_sizes, args, say, errors)
        rows += compressors_part(api, np, CpuTimer(), cpu_sizes, args, say, errors)
        result["compressors"] = rows
    result["targets"] = targets(result)
    result["errors"] = errors
    say("\n" + report.kernels_tables(result))
    write_json(args.output, result)
    say(f"JSON written to {args.output}")
    if errors:
        print(f"kernels benchmark: {len(errors)} part(s) failed:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
