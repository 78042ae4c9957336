"""Gap-safe screening: time and features kept, with and without (docs/admm.md "Screening").

    mpiexec -n 2 python benchmarks/screening.py

Rows split evenly over the ranks; medians of ``REPEATS`` solves, alternating off and on.
"""
import time

import numpy as np
from mpi4py import MPI

from mpiopt.admm.path import regularization_path
from mpiopt.admm.solver import Problem

REPEATS = 5


def problem(m, n, seed, logistic=False):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    truth = np.where(rng.random(n) < 0.02, rng.standard_normal(n), 0.0)
    b = A @ truth + 0.5 * rng.standard_normal(m)
    return A, (np.sign(b) if logistic else b)


def main():
    comm = MPI.COMM_WORLD
    cases = [("lasso, tall 20000 x 500, lam 0.1 max", (20000, 500, False), dict(lam_ratio=0.1)),
             ("lasso, wide 2000 x 5000, lam 0.1 max", (2000, 5000, False), dict(lam_ratio=0.1)),
             ("L1 logistic 5000 x 500, lam 0.1 max", (5000, 500, True), dict(lam_ratio=0.1)),
             ("lasso path, wide 2000 x 5000, 20 lams to 0.05", (2000, 5000, False), "path")]
    for name, (m, n, logistic), how in cases:
        A, b = problem(m, n, 0, logistic)
        start, stop = m * comm.rank // comm.size, m * (comm.rank + 1) // comm.size
        loss = "logistic" if logistic else "squared"
        times = {False: [], True: []}
        kept = {}
        for _ in range(REPEATS):
            for screening in (False, True):
                comm.Barrier()
                tick = time.perf_counter()
                if how == "path":
                    result = regularization_path(A[start:stop], b[start:stop], loss, "l1", comm=comm, n_lams=20,
                                                 lam_min_ratio=0.05, screening=screening)
                    kept[screening] = float(np.mean([n - r.info.get("screened", 0) for r in result.results]))
                else:
                    problem_ = Problem(A[start:stop], b[start:stop], loss, comm)
                    result = problem_.solve("l1", screening=screening, **how)
                    kept[screening] = n - result.info.get("screened", 0)
                times[screening].append(time.perf_counter() - tick)
        if comm.rank == 0:
            off, on = np.median(times[False]), np.median(times[True])
            print(f"| {name} | {off:.3f} s | {on:.3f} s | {off / on:.2f}x | {kept[False]:.0f} | {kept[True]:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
