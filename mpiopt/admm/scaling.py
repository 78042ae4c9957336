"""A scaling model of consensus ADMM for the lasso: per-phase flops and bytes, and the time to solution.

What it predicts, and why it is built this way: the time to solution of
mpiopt.admm (consensus ADMM, Boyd et al. 2011, sections 7.1 and 8.2) for the
lasso on a dense m x n design whose rows are split over p ranks, from counts of
the work each phase does per rank and a handful of machine constants fitted on
the machine (benchmarks/scaling_model.py), so that a user can ask "how long at
64 or 1,000 ranks?" before owning the ranks.  Pure numpy, no MPI at import.

The machine (alpha-beta-gamma, plus a fixed overhead per iteration):

    alpha        seconds per message                      (latency)
    beta         seconds per byte on the wire             (1 / bandwidth)
    gamma_red    seconds per byte reduced, copy per byte copied (the reducers' local work)
    gamma_flop   seconds per flop of BLAS-3 work          (the Gram matrix: syrk, gemm)
    gamma_chol   seconds per flop of a Cholesky factorization (LAPACK potrf)
    gamma_mem    seconds per byte of a memory-bound pass over the rows (gemv; the data checks)
    gamma_square seconds per byte of ||A||_F^2 computed as (A * A).sum() (a temporary: ~4x a gemv)
    gamma_trsv   seconds per byte of factor read by a triangular solve
    gamma_vec    seconds per byte of O(n) vector work
    delta        seconds per ADMM iteration, fixed: the Python of the loop (residuals, rho, Anderson)
    delta_gap    seconds per duality-gap evaluation, fixed
    delta_solve  seconds per call of the solver, fixed (validation, the engine, the KKT residual at the end)
    x_call       seconds per iteration, fixed, of the x-step (scipy and kernel calls; from the tiny problem)
    comm_call    seconds per iteration, fixed, of the two reducer calls (Python; from the tiny problem)

All-reduce of k doubles (8k bytes) over p ranks, by what mpiopt's reducers do
(mpiopt.collectives; costs after Thakur, Rabenseifner and Gropp 2005):

    MPI (MPICH), 8k <= 2 KiB   recursive doubling     ceil(log2 p) (alpha + 8k beta + 8k gamma_red)
    MPI (MPICH), larger        Rabenseifner: reduce-scatter by recursive halving + all-gather by doubling
                               2 log2 p alpha + 2 (p-1)/p 8k beta + (p-1)/p 8k gamma_red
    ring                       2 (p-1) alpha + 2 (p-1)/p 8k beta + (p-1)/p 8k gamma_red
    hier (ranks share a node)  3 alpha + 8k (copy + (p-1)/p gamma_red) + 2 8k copy  (+ a ring over the nodes)
    auto (the default)         MPI below 64 KiB, else hier when a node holds several ranks, else ring

(a non-power-of-two p adds the fold of recursive doubling, 2 (alpha + 8k beta) + 8k gamma_red).

Full consensus ADMM, per rank, with m_i = m / p rows (a tall shard when m_i >= n):

    setup      the finiteness check and A_i^T b_i (two gemv passes), lambda_max (the gradient at 0 before
               the Gram exists: A_i^T (A_i 0 - b_i), two more passes; an all-reduce of n): 32 m_i n bytes
               at gamma_mem; ||A_i||_F^2 for the default rho (8 m_i n bytes at gamma_square); the Gram
               A_i^T A_i (m_i n^2 flops, syrk, formed lazily at the first factorization) and the
               Cholesky of A_i^T A_i + rho I (n^3 / 3 flops)
    iteration  x-step: two triangular solves (2 n^2 flops, 8 n^2 bytes of the factor); O(n) vector work
               (VECTOR_PASSES x 8 n bytes); z-step all-reduce of n doubles (reducer auto); residuals
               all-reduce of 5 doubles; delta
    gap        every gap_every iterations: a gemv of the Gram (2 n^2 flops, 8 n^2 bytes) and a plain MPI
               all-reduce of n + 3 doubles; delta_gap
    end        the KKT residual and the objective (two gemvs of the Gram, an all-reduce of n)
    rho change a new Cholesky (n^3 / 3 flops) per change of rho

A wide shard (m_i < n) factors the m_i x m_i matrix A_i A_i^T + rho I instead
(m_i^2 n flops for it, m_i^3 / 3 for the factor) and its x-step is two passes
over A_i (16 m_i n bytes) and two triangular solves of size m_i (8 m_i^2 bytes).

The working-set solver (``working_set=True``), per outer iteration t with working
set W_t (|W_t| columns, of which |N_t| new):

    setup      as the full solver's without the Gram and its factor, plus the column norms (an
               all-reduce of n)
    gap pass   A^T theta over all the rows (2 m_i n flops, 8 m_i n bytes), A_W w_W (8 m_i |W| bytes),
               a plain all-reduce of n + 3 doubles, delta_gap; one per outer iteration and one at the end
    gather     copy the new columns (16 m_i |N_t| bytes) and their Gram products
               (2 m_i |W_{t-1}| |N_t| + m_i |N_t|^2 flops, gemm/syrk)
    factor     Cholesky of the |W_t| x |W_t| Gram (|W_t|^3 / 3 flops)
    inner      ADMM on W_t: per iteration 2 |W_t|^2 flops (8 |W_t|^2 bytes), all-reduces of |W_t| and 5
               doubles, delta; delta_solve per inner solve (a restricted Problem, its engine, its end)

Time to solution = setup + iterations x per-iteration + gap evaluations x gap + end (+ for the
working set: the sum over outer iterations of gap pass + gather + its inner iterations).

The iteration counts are inputs (taken from a measured run): consensus ADMM's
count depends on the conditioning of the local problems and on rho, not
directly on p, as long as each shard stays tall; when m / p falls below n the
local problems become underdetermined and the count grows with p (the model
then under-predicts).  The model charges the slowest rank, which it assumes to
be any rank (equal shards, one core per rank, no oversubscription).

References: R. Thakur, R. Rabenseifner and W. Gropp, "Optimization of
collective communication operations in MPICH", IJHPCA 19(1), 2005.  S. Boyd,
N. Parikh, E. Chu, B. Peleato and J. Eckstein, "Distributed optimization and
statistical learning via the alternating direction method of multipliers",
Foundations and Trends in Machine Learning 3(1), 2011.
"""
import dataclasses
import math

import numpy as np

DOUBLE = 8
MPICH_SHORT_BYTES = 2048   # MPICH's recursive-doubling threshold for MPI_Allreduce
AUTO_SMALL_BYTES = 64 << 10  # mpiopt.collectives.auto.SMALL_BYTES (mirrored: no MPI import here)
VECTOR_PASSES = 40         # O(n) vector passes per iteration (rhs, relax, sums, z/u update, residual dots, Anderson)
SQUARE_PASSES = 4.0        # ||A||_F^2 as (A * A).sum() without a fitted gamma_square: gamma_mem x this per byte
RANKS = tuple(2 ** k for k in range(11))  # 1, 2, 4, ..., 1024


@dataclasses.dataclass(frozen=True)
class Network:
    """The wire: alpha (s per message), beta (s per byte), the reducers' local costs (s per byte reduced,
    s per byte copied) and the ranks per node (0: every rank on one node)."""
    alpha: float
    beta: float
    gamma_red: float = 0.0
    copy: float = 0.0
    ranks_per_node: int = 0

    def nodes(self, p):
        return 1 if not self.ranks_per_node else max(1, math.ceil(p / self.ranks_per_node))


@dataclasses.dataclass(frozen=True)
class Compute:
    """One core's rates (s per flop or per byte) and the fixed overheads (s); see the module docstring."""
    gamma_flop: float
    gamma_chol: float
    gamma_mem: float
    gamma_trsv: float
    gamma_vec: float
    delta: float
    delta_gap: float = 0.0
    gamma_square: float = None  # s per byte of ||A||_F^2; None: gamma_mem x SQUARE_PASSES
    x_call: float = 0.0         # s per iteration, fixed, of the x-step bucket (x-step, relax, sums: Python calls)
    comm_call: float = 0.0      # s per iteration, fixed, of the two reducer calls (Python; 1 rank: all of it)
    delta_solve: float = 0.0    # s per call of the solver, fixed (validation, engine, KKT, objective)

    @property
    def square(self):
        return self.gamma_square if self.gamma_square is not None else self.gamma_mem * SQUARE_PASSES


# -- all-reduce ------------------------------------------------------------------------------------------------
def _fold(p, nbytes, net):
    """Extra cost of recursive doubling at a non-power-of-two p (the fold in and out of 2 (p - 2^k) ranks)."""
    power = 1 << (p.bit_length() - 1)
    return 0.0 if power == p else 2 * (net.alpha + nbytes * net.beta) + nbytes * net.gamma_red


def recursive_doubling_time(p, nbytes, net):
    """log2 p rounds of one exchange of the whole vector (the rd reducer's and MPICH's short-message model)."""
    if p <= 1:
        return 0.0
    steps = p.bit_length() - 1
    return steps * (net.alpha + nbytes * (net.beta + net.gamma_red)) + _fold(p, nbytes, net)


def rabenseifner_time(p, nbytes, net):
    """Reduce-scatter by recursive halving then all-gather by recursive doubling (MPICH's long messages)."""
    if p <= 1:
        return 0.0
    power = 1 << (p.bit_length() - 1)
    steps = power.bit_length() - 1
    share = (power - 1) / power
    return (2 * steps * net.alpha + 2 * share * nbytes * net.beta + share * nbytes * net.gamma_red
            + _fold(p, nbytes, net))


def mpi_allreduce_time(p, nbytes, net):
    """MPI_Allreduce as MPICH does it by default: recursive doubling up to 2 KiB, Rabenseifner above."""
    if nbytes <= MPICH_SHORT_BYTES:
        return recursive_doubling_time(p, nbytes, net)
    return rabenseifner_time(p, nbytes, net)


def ring_time(p, nbytes, net):
    """Ring reduce-scatter + ring all-gather (mpiopt.collectives.ring.RingReducer.model)."""
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * net.alpha + 2 * (p - 1) / p * nbytes * net.beta + (p - 1) / p * nbytes * net.gamma_red


def hier_time(p, nbytes, net):
    """Shared-memory window on each node, a ring over the node leaders (HierarchicalReducer.model)."""
    if p <= 1:
        return 0.0
    nodes = net.nodes(p)
    leaders = ring_time(nodes, nbytes, net) + nbytes * net.copy if nodes > 1 else 0.0
    return 3 * net.alpha + nbytes * (net.copy + (p - 1) / p * net.gamma_red) + 2 * nbytes * net.copy + leaders


def allreduce_time(p, count, net, reducer="auto"):
    """Seconds of one all-reduce of ``count`` doubles over ``p`` ranks by ``reducer`` (mpi, rd, ring, hier, auto)."""
    nbytes = DOUBLE * count
    if p <= 1:
        return 0.0
    if reducer == "auto":
        if nbytes < AUTO_SMALL_BYTES:
            return mpi_allreduce_time(p, nbytes, net)
        return hier_time(p, nbytes, net) if p > net.nodes(p) else ring_time(p, nbytes, net)
    models = {"mpi": mpi_allreduce_time, "rd": recursive_doubling_time, "ring": ring_time, "hier": hier_time}
    return models[reducer](p, nbytes, net)


# -- work counts -------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Work:
    """One phase's work on one rank: flops at each rate, bytes at each rate, all-reduces (count of doubles,
    reducer) and fixed overheads (delta, delta_gap)."""
    gram_flops: float = 0.0
    chol_flops: float = 0.0
    trsv_flops: float = 0.0
    mem_bytes: float = 0.0
    square_bytes: float = 0.0
    trsv_bytes: float = 0.0
    vec_bytes: float = 0.0
    allreduces: tuple = ()   # ((count, reducer), ...)
    deltas: float = 0.0
    delta_gaps: float = 0.0

    @property
    def flops(self):
        return self.gram_flops + self.chol_flops + self.trsv_flops

    @property
    def bytes(self):
        return self.mem_bytes + self.square_bytes + self.trsv_bytes + self.vec_bytes

    def __add__(self, other):
        values = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        return Work(**values)

    def compute_time(self, c):
        return (self.gram_flops * c.gamma_flop + self.chol_flops * c.gamma_chol + self.mem_bytes * c.gamma_mem
                + self.square_bytes * c.square + self.trsv_bytes * c.gamma_trsv + self.vec_bytes * c.gamma_vec
                + self.deltas * c.delta + self.delta_gaps * c.delta_gap)

    def comm_time(self, p, net):
        return sum(times * allreduce_time(p, count, net, reducer)
                   for count, reducer, times in _triples(self.allreduces))

    def time(self, p, c, net):
        return self.compute_time(c) + self.comm_time(p, net)


def _triples(allreduces):
    """(count, reducer, times) for each all-reduce entry ((count, reducer) means once)."""
    return [entry if len(entry) == 3 else (entry[0], entry[1], 1.0) for entry in allreduces]


def shard_rows(m, p):
    """Rows on the largest shard (the slowest rank) when m rows are split as evenly as possible over p ranks."""
    return math.ceil(m / p)


def full_phases(m, n, p):
    """Work per rank of full consensus ADMM for the lasso (squared loss, L1, no intercept): a dict with
    ``setup``, ``iteration``, ``gap``, ``end`` and ``refactor`` (one change of rho), and ``shard``
    ("tall" or "wide").  Flop and byte counts as in the module docstring."""
    mi = shard_rows(m, p)
    tall = mi >= n
    data = DOUBLE * mi * n
    if tall:
        gram = Work(gram_flops=mi * n * n)
        factor = Work(chol_flops=n ** 3 / 3)
        x_step = Work(trsv_flops=2 * n * n, trsv_bytes=DOUBLE * n * n)
    else:
        gram = Work(gram_flops=mi * mi * n)
        factor = Work(chol_flops=mi ** 3 / 3)
        x_step = Work(trsv_flops=2 * mi * mi + 4 * mi * n, trsv_bytes=DOUBLE * mi * mi, mem_bytes=2 * data)
    gram_gemv = DOUBLE * n * n if tall else 2 * data  # a gradient or a value from the Gram, or two passes
    setup = Work(mem_bytes=4 * data, square_bytes=data, allreduces=((n, "mpi"),)) + gram + factor
    iteration = x_step + Work(vec_bytes=VECTOR_PASSES * DOUBLE * n, allreduces=((n, "auto"), (5, "auto")),
                              deltas=1.0)
    gap = Work(mem_bytes=gram_gemv, allreduces=((n + 3, "mpi"),), delta_gaps=1.0)
    end = Work(mem_bytes=2 * gram_gemv, allreduces=((n, "auto"), (1, "mpi")))
    return {"setup": setup, "iteration": iteration, "gap": gap, "end": end, "refactor": factor,
            "shard": "tall" if tall else "wide"}


def working_set_phases(m, n, p, sizes):
    """Work per rank of the working-set solver for working sets of ``sizes`` (one per outer iteration): a dict
    with ``setup`` (the data checks, A^T b, lambda_max and the column norms), ``gap`` (the gap passes: one
    before each outer iteration and one at the end), ``gather`` (the new columns and their Gram products),
    ``factor`` (the Cholesky factorizations of the working sets' Grams) and ``inner(size)`` (one inner
    iteration's Work)."""
    mi = shard_rows(m, p)
    data = DOUBLE * mi * n
    setup = Work(mem_bytes=4 * data, square_bytes=data, allreduces=((n, "mpi"), (n, "mpi")))
    gap, gather, factor, previous = Work(), Work(), Work(), 0
    for size in [0] + list(sizes):
        size = int(size)
        gap = gap + Work(mem_bytes=data + DOUBLE * mi * size, allreduces=((n + 3, "mpi"),), delta_gaps=1.0)
        if size:
            new = max(size - previous, 0)
            gather = gather + Work(gram_flops=2.0 * mi * previous * new + mi * new * new,
                                   mem_bytes=2 * DOUBLE * mi * new)
            factor = factor + Work(chol_flops=size ** 3 / 3)
            previous = max(previous, size)
    return {"setup": setup, "gap": gap, "gather": gather, "factor": factor, "inner": working_set_inner}


def working_set_inner(size):
    """One inner ADMM iteration on a working set of ``size`` columns (a tall Gram on the working set)."""
    return Work(trsv_flops=2 * size * size, trsv_bytes=DOUBLE * size * size, vec_bytes=VECTOR_PASSES * DOUBLE * size,
                allreduces=((size, "auto"), (5, "auto")), deltas=1.0)


def memory_per_rank(m, n, p, sizes=None):
    """Bytes a rank holds: its rows (and b), the Gram and its factor (n x n for a tall shard, m_i x m_i for
    a wide one), or with ``sizes`` the working set's columns, Gram and factor."""
    mi = shard_rows(m, p)
    data = DOUBLE * mi * (n + 1)
    if sizes:
        w = max(int(s) for s in sizes)
        return data + DOUBLE * mi * w + 2 * DOUBLE * w * w
    k = n if mi >= n else mi
    return data + 2 * DOUBLE * k * k


# -- predictions -------------------------------------------------------------------------------------------------
def predict_full(m, n, p, iterations, compute, network, gap_evaluations=0, rho_changes=0):
    """Predicted seconds per phase of a full solve on p ranks: setup, x_step, communication, overhead
    (the rest of the iterations: vector work and delta), gap, solve (iterations + gap + end) and total."""
    w = full_phases(m, n, p)
    it = w["iteration"]
    x_step = iterations * (it.trsv_bytes * compute.gamma_trsv + it.mem_bytes * compute.gamma_mem
                           + compute.x_call)
    communication = iterations * (it.comm_time(p, network) + compute.comm_call)
    overhead = iterations * (it.vec_bytes * compute.gamma_vec + it.deltas * compute.delta)
    gap = gap_evaluations * w["gap"].time(p, compute, network)
    refactor = rho_changes * w["refactor"].time(p, compute, network)
    end = w["end"].time(p, compute, network)
    setup = w["setup"].time(p, compute, network) + compute.delta_solve
    solve = x_step + communication + overhead + gap + refactor + end
    return {"setup": setup, "x_step": x_step, "communication": communication, "overhead": overhead,
            "gap": gap, "solve": solve, "total": setup + solve, "shard": w["shard"],
            "memory_per_rank": memory_per_rank(m, n, p)}


def predict_working_set(m, n, p, sizes, inner_iterations, compute, network):
    """Predicted seconds per phase of a working-set solve on p ranks: setup, gap, gather, factor, solve (the
    inner iterations), overhead (the fixed cost of each inner solve), other (setup + factor + overhead:
    what the solver's timings do not name) and total.  ``inner_iterations``: the total (spread evenly over
    the outer iterations) or a list, one count per outer iteration."""
    sizes = [int(s) for s in sizes]
    if np.ndim(inner_iterations) == 0:
        per = [inner_iterations / max(len(sizes), 1)] * len(sizes)
    else:
        per = list(inner_iterations)
    w = working_set_phases(m, n, p, sizes)
    setup = w["setup"].time(p, compute, network) + compute.delta_solve
    gap = w["gap"].time(p, compute, network)
    gather = w["gather"].time(p, compute, network)
    factor = w["factor"].time(p, compute, network)
    solve = sum(count * (working_set_inner(size).time(p, compute, network) + compute.x_call + compute.comm_call)
                for size, count in zip(sizes, per))
    overhead = len(sizes) * compute.delta_solve
    other = setup + factor + overhead
    return {"setup": setup, "gap": gap, "gather": gather, "factor": factor, "solve": solve, "overhead": overhead,
            "other": other, "total": other + gap + gather + solve, "memory_per_rank": memory_per_rank(m, n, p, sizes)}


def scaling_table(m, n, iterations, compute, network, ranks=RANKS, gap_evaluations=0, rho_changes=0,
                  memory_limit=None):
    """One row per p in ``ranks``: the full solver's predicted phases, speed-up and efficiency against p = 1,
    and whether a rank's data fits in ``memory_limit`` bytes (None: not checked)."""
    rows = []
    single = predict_full(m, n, 1, iterations, compute, network, gap_evaluations, rho_changes)["total"]
    for p in ranks:
        row = predict_full(m, n, p, iterations, compute, network, gap_evaluations, rho_changes)
        row["ranks"] = p
        row["speedup"] = single / row["total"]
        row["efficiency"] = row["speedup"] / p
        row["fits"] = None if memory_limit is None else row["memory_per_rank"] <= memory_limit
        rows.append(row)
    return rows


# -- fitting -----------------------------------------------------------------------------------------------------
def fit_nonnegative(columns, times, relative=True):
    """Least squares of ``times`` on ``columns`` (a list of arrays, one per unknown), each residual weighted
    by 1 / time when ``relative`` (so that microseconds and seconds count alike); negative coefficients are
    dropped and the rest refitted (a small non-negative least squares)."""
    X = np.column_stack([np.asarray(c, dtype=float) for c in columns])
    t = np.asarray(times, dtype=float)
    weights = 1.0 / np.maximum(t, 1e-300) if relative else np.ones_like(t)
    active = list(range(X.shape[1]))
    coefficients = np.zeros(X.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(X[:, active] * weights[:, None], t * weights, rcond=None)
        if np.all(solution >= 0):
            coefficients[active] = solution
            break
        active.pop(int(np.argmin(solution)))
    return coefficients


def fit_rate(work, times):
    """(seconds per unit of work, fixed seconds per call) from timings of one kernel at several sizes."""
    rate, fixed = fit_nonnegative([work, np.ones(len(work))], times)
    return float(rate), float(fixed)


def fit_alpha_beta(p, counts, times, reducer="mpi", gamma_red=0.0):
    """(alpha, beta) from all-reduce timings of ``counts`` doubles on ``p`` ranks, under ``reducer``'s model.

    The model is linear in alpha and beta once gamma_red is given, so its columns are the model evaluated
    at (alpha, beta) = (1, 0) and (0, 1), and the fit is a relative non-negative least squares."""
    zero = Network(0.0, 0.0, gamma_red)
    base = np.array([allreduce_time(p, k, zero, reducer) for k in counts])
    a = np.array([allreduce_time(p, k, Network(1.0, 0.0), reducer) for k in counts])
    b = np.array([allreduce_time(p, k, Network(0.0, 1.0), reducer) for k in counts])
    rest = np.maximum(np.asarray(times, dtype=float) - base, 1e-12)
    alpha, beta = fit_nonnegative([a, b], rest)
    return float(alpha), float(beta)


# -- tables ------------------------------------------------------------------------------------------------------
def format_table(headers, rows):
    """A Markdown table (strings as they are, floats to 3 significant digits)."""
    def cell(value):
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)
    body = [[cell(v) for v in row] for row in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def seconds(value):
    """A duration for a table: us, ms, s, min or h."""
    if value is None or not math.isfinite(value):
        return "-"
    for limit, unit, scale in ((1e-3, "us", 1e6), (1.0, "ms", 1e3), (120.0, "s", 1.0), (7200.0, "min", 1 / 60)):
        if value < limit and value * scale < 999.5:
            return f"{value * scale:.3g} {unit}"
    return f"{value / 3600:.3g} h"


def human_bytes(value):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.3g} {unit}"
        value /= 1024.0
