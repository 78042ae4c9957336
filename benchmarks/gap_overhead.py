"""Per-iteration cost of the duality gap (mpiopt.admm.gap): ADMM with the gap off, every 10 and every iteration.

    mpiexec -n 2 python benchmarks/gap_overhead.py [--repeat 5]

The stopping rules are off (eps 0, gap_tol 0), so every run does the same
iterations; medians over ``--repeat`` solves, and the time of one gap
evaluation from ``timings["gap"]``.
"""
import argparse

import numpy as np
import scipy.sparse
from mpi4py import MPI

from mpiopt.admm import solve


def shard(comm, m, n, seed, sparse=False, logistic=False):
    rng = np.random.default_rng(seed + comm.rank)
    rows = m // comm.size
    if sparse:
        A = scipy.sparse.random(rows, n, density=0.01, format="csr", random_state=seed + comm.rank)
    else:
        A = rng.standard_normal((rows, n))
    w = np.zeros(n)
    w[:n // 20] = 1.0
    b = A @ w + 0.1 * rng.standard_normal(rows)
    return A, ((b > 0).astype(float) if logistic else b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the row counts")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rows = lambda m: max(int(m * args.scale), 4 * comm.size)  # noqa: E731
    cases = [("lasso dense 20000x500", shard(comm, rows(20000), 500, 0), "squared", 300),
             ("lasso sparse 200000x2000 (1%)", shard(comm, rows(200000), 2000, 1, sparse=True), "squared", 300),
             ("logistic L1 dense 20000x200", shard(comm, rows(20000), 200, 2, logistic=True), "logistic", 60)]
    for name, (A, b), loss, iterations in cases:
        measured = {}
        for label, extra in [("off", {}), ("every 10", dict(gap_tol=0.0, gap_every=10)),
                             ("every 1", dict(gap_tol=0.0, gap_every=1))]:
            per, one = [], []
            for _ in range(args.repeat):
                result = solve(A, b, loss, "l1", comm=comm, lam_ratio=0.05, eps_abs=0, eps_rel=0,
                               max_iter=iterations, **extra)
                per.append(result.timings["solve"] / result.iterations)
                evaluations = max(1, sum(1 for gap in result.history.get("gap", []) if gap == gap))
                one.append(result.timings["gap"] / evaluations)
            measured[label] = (float(np.median(per)), float(np.median(one)))
        if comm.rank == 0:
            base = measured["off"][0]
            parts = [f"{label}: {1e3 * measured[label][0]:.3f} ms ({100 * (measured[label][0] / base - 1):+.1f}%)"
                     for label in ("every 10", "every 1")]
            print(f"{name}: per iteration, gap off {1e3 * base:.3f} ms | " + " | ".join(parts)
                  + f" | one gap evaluation {1e3 * measured['every 1'][1]:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
