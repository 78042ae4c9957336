"""Plumbing every benchmark shares: the opening of main, sizes, barrier-timed medians, the non-spinning wait,
output on rank 0.

* ``start(parse_args, argv, outputs, plots)``: every ``main``'s opening, (args,
  comm, say): this rank's share of the cores for BLAS, the arguments, the
  communicator, the output files checked (and matplotlib, for a plot) on every
  rank before minutes of work, rank 0's printer;
* ``size_argument``: "8", "64K", "256M", "1G" as bytes (the OSU / nccl-tests syntax);
* ``timed(comm, function)``: the ranks start together (a barrier) and the time
  reported is the slowest rank's; ``median_time`` repeats it and takes the median;
* ``wait_without_spinning``: ranks that wait for rank 0 (running scikit-learn
  with every core) sleep instead of spinning in an MPI wait;
* ``printer(comm)`` prints on rank 0 only; ``write_result`` writes the JSON on rank 0;
* ``summarize``: time to solution from a ladder of tolerances;
* ``fill_presets(args, presets)``: the flags left unset take the "quick" or "full" preset's values.
"""
import argparse
import re
import statistics
import time

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def start(parse_args, argv=None, outputs=("output",), plots=(), comm=None):
    """The opening of every benchmark's ``main``: returns (args, comm, say).

    It gives this rank its share of the node's cores for BLAS and OpenMP before
    numpy's libraries start their thread pools (``set_blas_threads_from_mpi``),
    parses ``argv`` with ``parse_args``, takes ``comm`` (COMM_WORLD by default:
    ``resolve_comm``), and checks collectively, before minutes of work, that
    rank 0 can write the files that the arguments named in ``outputs`` hold
    (None values are skipped; a callable of ``args`` and ``comm`` gives the paths itself)
    and that matplotlib imports when one of the arguments ``plots`` is given.
    ``say`` prints on rank 0 only."""
    from mpiopt.core.threads import set_blas_threads_from_mpi
    set_blas_threads_from_mpi()
    args = parse_args(argv)
    from mpiopt.core.comm import check_collectively, resolve_comm
    from mpiopt.core.io import check_writable
    comm = resolve_comm(comm)
    paths = outputs(args, comm) if callable(outputs) else [getattr(args, name) for name in outputs]
    check_writable(list(paths), comm)
    wanted = [f"--{name}" for name in plots if getattr(args, name, None)]
    problem = None
    if wanted and comm.rank == 0:
        from mpiopt.core.result import require_plotting
        try:
            require_plotting()
        except ImportError as error:
            problem = f"{wanted[0]}: {error}"
    check_collectively(comm, problem)
    return args, comm, printer(comm)


def fill_presets(args, presets):
    """Give every flag of ``args`` left at None the value of ``presets["quick"]`` (with ``--quick``) or
    ``presets["full"]``: a flag given always wins.  Returns ``args``."""
    for name, value in presets["quick" if args.quick else "full"].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def size_argument(text):
    match = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 8, 64K, 256M, got {text!r}")
    return int(match.group(1)) * UNITS[match.group(2)]


def printer(comm):
    """print, flushed, on rank 0 only."""
    return (lambda *a: print(*a, flush=True)) if comm.rank == 0 else (lambda *a: None)


def timed(comm, function):
    """(function(), seconds of the slowest rank), every rank starting after a barrier."""
    from mpi4py import MPI
    comm.Barrier()
    start = time.perf_counter()
    value = function()
    return value, comm.allreduce(time.perf_counter() - start, op=MPI.MAX)


def median_time(comm, function, repeat):
    """(the last run's value, the median of ``repeat`` barrier-timed runs in seconds)."""
    runs = [timed(comm, function) for _ in range(repeat)]
    return runs[-1][0], statistics.median(seconds for _, seconds in runs)


def wait_without_spinning(comm):
    """The ranks that are not running scikit-learn wait here without taking a core (MPI waits spin)."""
    from mpiopt.core.comm import quiet_barrier
    quiet_barrier(comm)


def write_result(comm, path, payload):
    """Write the benchmark's JSON on rank 0 (atomically) and say where."""
    from mpiopt.core.io import write_json
    if comm.rank == 0:
        write_json(path, payload)
        print(f"JSON written to {path}", flush=True)


def summarize(runs, target):
    """Per solver: the loosest tolerance whose run is within ``target`` of the best objective, and its time."""
    summary = {}
    for solver in dict.fromkeys(run["solver"] for run in runs):
        reached = [run for run in runs if run["solver"] == solver and run["relative_gap"] <= target]
        best = max(reached, key=lambda run: run["tolerance"]) if reached else None
        summary[solver] = {"tolerance": best["tolerance"] if best else None,
                           "seconds": best["seconds"] if best else None,
                           "iterations": best["iterations"] if best else None}
    return summary
