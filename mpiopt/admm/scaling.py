"""A scaling model of consensus ADMM for the lasso and of the L1-logistic working sets: per-phase flops and
bytes, and the time to solution.

What it predicts, and why it is built this way: the time to solution of
mpiopt.admm (consensus ADMM, Boyd et al. 2011, sections 7.1 and 8.2) for the
lasso on a dense m x n design whose rows are split over p ranks, from counts of
the work each phase does per rank and a handful of machine constants fitted on
the machine (benchmarks/scaling_model.py), so that a user can ask "how long at
64 or 1,000 ranks?" before owning the ranks; and of the working-set solver, whose restricted problems
ADMM or (L1 / elastic-net logistic) distributed proximal Newton solve.  Pure numpy, no MPI at import.

The machine (alpha-beta-gamma, plus a fixed overhead per iteration):

    alpha        seconds per message                      (latency)
    beta         seconds per byte on the wire             (1 / bandwidth)
    node_bandwidth  bytes per second of memory bandwidth the ranks of a node share (0: not limiting): a
                 memory-bound pass then runs at max(gamma_mem, r / node_bandwidth) per byte with r ranks
                 on the node (Network.pass_rate)
    gamma_red    seconds per byte reduced, copy per byte copied (the reducers' local work)
    gamma_flop   seconds per flop of BLAS-3 work          (the Gram matrix: syrk, gemm)
    gamma_gemm   seconds per flop of the Hessian A^T (D A), a gemm of 2 m k^2 flops (None: gamma_flop)
    gamma_chol   seconds per flop of a Cholesky factorization (LAPACK potrf)
    gamma_mem    seconds per byte of a memory-bound pass over the rows (gemv; the data checks)
    gamma_square seconds per byte of ||A||_F^2 computed as (A * A).sum() (a temporary: ~4x a gemv)
    gamma_trsv   seconds per byte of factor read by a triangular solve
    gamma_vec    seconds per byte of O(n) vector work
    delta        seconds per ADMM iteration, fixed: the Python of the loop (residuals, rho, Anderson)
    delta_gap    seconds per duality-gap evaluation, fixed
    delta_solve  seconds per call of the solver, fixed (validation, the engine, the KKT residual at the end)
    gamma_exp    seconds per row of the logistic loss's Newton terms (logaddexp, tanh and their products:
                 proxnewton's one pass; other passes in EXP_UNITS of it)
    delta_newton seconds per proximal-Newton iteration, fixed (the Python of one iteration; tiny problem)
    delta_newton_solve  seconds per restricted proximal-Newton solve, fixed (the restricted problem, the
                 solver, its history; tiny problem)
    delta_coord  seconds per coordinate update of rank 0's coordinate descent (mpiopt.kernels.cd's sweep,
                 compiled by numba when installed: nanoseconds; the numpy twin's Python loop: microseconds)
    delta_epoch  seconds per epoch of that coordinate descent, fixed (the sweep's call, the violation's
                 numpy and the active set's: the Python around a compiled sweep)
    delta_certify seconds per certificate of the logistic working sets, fixed (dual point, sphere test,
                 scores and choice in Python; tiny problem)
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

The L1 (or elastic-net) logistic working sets with proximal Newton restricted solves
(``inner_solver="prox_newton"``, proxnewton.py), k = |W_t| (+ 1 with an intercept) columns:

    setup      the column squares (the finiteness check's, kept for the column norms: one pass) and
               lambda_max (the terms at 0, m_i rows at gamma_exp, and A^T phi'(0): one pass), two
               all-reduces of n
    gap pass   as above, plus the logistic certificate's transcendentals: theta = phi'(A x) and the
               loss's dual (entropy) sum, and the entropy again at the penalty's dual scale, 3 m_i rows at
               gamma_exp (EXP_UNITS), an all-reduce of 1 and the broadcast of the screening mask;
               delta_certify instead of delta_gap (the scores, the choice and the sphere test in Python).
               With the refined dual point (``refined`` = s steps, proxnewton.REFINE_STEPS: the
               certificate after a restricted solve takes theta at the margins of the solve's refined
               point, below) theta once more at those margins (m_i rows).  Only the first certificate of a
               warm start off a path (``warm_start`` columns, no sums kept) makes its refined point itself
               (workingset.py's ``refined_margin``): the gradient and the Hessian at x and the s steps
               below, on a restricted problem and solver of its own (delta_newton_solve), its coordinate
               descent ``certificate_epochs`` (the epochs outside ``info["coordinate_epochs"]``: 0 at a
               cold start).  The solve ends with one more pass for the KKT residual's gradient (m_i
               rows, 8 m_i n bytes, an all-reduce of n)
    gather     the new columns only, no Gram: from a row-major shard each entry reads a cache line
               (m_i min(64 |N_t|, 8 n) bytes), the copy and its store 16 m_i |N_t| bytes (and the cache's
               old columns when its storage doubles); the broadcast of the chosen set
    Newton     per iteration: A_W^T phi' (8 m_i k bytes at gamma_mem), an all-reduce of k + 2, the
               estimate's and the stop word's broadcasts; the Hessian A_W^T D A_W (2 m_i k^2 flops, a gemm
               at gamma_gemm, and the weighted copy D A_W, 16 m_i k bytes), an all-reduce of k^2; the
               direction's broadcast (k + 1); the full step's trial: A_W d (8 m_i k bytes), margin + step
               (24 m_i bytes), phi, phi', phi'' and the entropy (m_i rows at gamma_exp), an all-reduce of 1
               and the broadcast of the step; delta_newton.  The full step is assumed taken (Newton's
               region: each backtracking group costs another pass and all-reduce, not counted)
    epoch      rank 0's coordinate descent on H: per epoch delta_epoch, k coordinate updates at
               delta_coord and 24 k^2 bytes of rows of H at gamma_vec (an active-set sweep touches fewer:
               an upper bound, which the fit of delta_coord and delta_epoch averages)
    per solve  the first margins A_W x and their terms, the stopping iteration's gradient pass (an
               inner solve makes iterations + 1 of them) and the restricted certificate that confirms
               the stop (3 m_i rows, 8 m_i k bytes, all-reduces of k + 3 and 1, two broadcasts);
               delta_newton_solve; with ``refined`` = s the refined point for the next certificate
               (proxnewton's ``_refine``, on the loop's last Hessian: none new unless the solve stopped at
               its first iteration): s directions (each a broadcast of k + 1, A_W d and the sum: 8 m_i k
               + 24 m_i bytes) with s - 1 gradients between them (the terms, m_i rows; A_W^T phi', 8 m_i k
               bytes; an all-reduce of k + 2).  Its directions' epochs are in ``info["coordinate_epochs"]``
               with the iterations' (the epochs are spread over a solve's directions: iterations + s)

Broadcasts are charged as an MPI all-reduce of the same size (log2 p rounds, as a binomial tree's).

Time to solution = setup + iterations x per-iteration + gap evaluations x gap + end (+ for the
working set: the sum over outer iterations of gap pass + gather + its inner iterations; for proximal
Newton also its coordinate epochs and each restricted solve's own passes).

The iteration counts are inputs (taken from a measured run): consensus ADMM's
count depends on the conditioning of the local problems and on rho, not
directly on p, as long as each shard stays tall; when m / p falls below n the
local problems become underdetermined and the count grows with p (the model
then under-predicts).  The same holds for the working sets' counts (outer
iterations, sets, Newton iterations, coordinate epochs), which rank 0 decides
for every rank.  The model charges the slowest rank, which it assumes to be any
rank (equal shards, one core per rank, no oversubscription; each rank with a
core's memory bandwidth unless the network's node_bandwidth says otherwise).

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
# Transcendental passes of the logistic loss in units of newton_terms (logaddexp + tanh + products, one row):
# each pass's cost relative to newton_terms (docs/scaling.md, "Proximal Newton working sets", has the ratios)
EXP_UNITS = {"newton_terms": 1.0, "dual_residual": 1.0, "entropy": 1.0, "margin_value": 0.5}
CD_BYTES = 3 * DOUBLE      # bytes per coordinate update and column of H: its row read, the gradient read and written
CACHE_LINE = 64            # bytes read per element of a column gathered from a row-major shard


@dataclasses.dataclass(frozen=True)
class Network:
    """The wire: alpha (s per message), beta (s per byte), the reducers' local costs (s per byte reduced,
    s per byte copied), the ranks per node (0: every rank on one node) and the memory bandwidth the ranks of
    a node share (bytes/s; 0: each rank passes over its rows at gamma_mem whatever the others do)."""
    alpha: float
    beta: float
    gamma_red: float = 0.0
    copy: float = 0.0
    ranks_per_node: int = 0
    node_bandwidth: float = 0.0

    def nodes(self, p):
        return 1 if not self.ranks_per_node else max(1, math.ceil(p / self.ranks_per_node))

    def pass_rate(self, p, gamma_mem):
        """Seconds per byte of a memory-bound pass on each of p ranks: one core's gamma_mem, or the node's
        bandwidth shared by the ranks on it when that is slower (all of them streaming at once)."""
        if not self.node_bandwidth:
            return gamma_mem
        on_node = min(p, self.ranks_per_node) if self.ranks_per_node else p
        return max(gamma_mem, on_node / self.node_bandwidth)


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
    gamma_exp: float = 0.0      # s per row of the logistic loss's newton_terms (EXP_UNITS for the other passes)
    delta_newton: float = 0.0   # s per proximal-Newton iteration, fixed (Python)
    delta_newton_solve: float = 0.0  # s per restricted proximal-Newton solve, fixed
    delta_coord: float = 0.0    # s per coordinate update of rank 0's coordinate descent
    delta_epoch: float = 0.0    # s per epoch of rank 0's coordinate descent, fixed (the Python around a sweep)
    delta_certify: float = 0.0  # s per certificate of the logistic working sets, fixed
    gamma_gemm: float = None    # s per flop of the Hessian's gemm A^T (D A); None: gamma_flop

    @property
    def gemm(self):
        return self.gamma_gemm if self.gamma_gemm is not None else self.gamma_flop

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
    """One phase's work on one rank: flops at each rate, bytes at each rate, rows of transcendentals, all-reduces
    (count of doubles, reducer), coordinate updates and epochs, and fixed overheads (delta, delta_gap, and proximal Newton's:
    per iteration, per restricted solve, per certificate)."""
    gram_flops: float = 0.0
    gemm_flops: float = 0.0    # the Hessian's general product (gamma_gemm)
    chol_flops: float = 0.0
    trsv_flops: float = 0.0
    mem_bytes: float = 0.0
    square_bytes: float = 0.0
    trsv_bytes: float = 0.0
    vec_bytes: float = 0.0
    allreduces: tuple = ()   # ((count, reducer), ...)
    deltas: float = 0.0
    delta_gaps: float = 0.0
    exp_rows: float = 0.0      # rows of the logistic loss's terms, in units of newton_terms (EXP_UNITS)
    coordinates: float = 0.0   # coordinate updates of rank 0's coordinate descent
    epochs: float = 0.0        # epochs of rank 0's coordinate descent (delta_epoch each)
    newtons: float = 0.0       # proximal-Newton iterations (delta_newton each)
    newton_solves: float = 0.0  # restricted proximal-Newton solves (delta_newton_solve each)
    certificates: float = 0.0  # certificates of the logistic working sets (delta_certify each)

    @property
    def flops(self):
        return self.gram_flops + self.gemm_flops + self.chol_flops + self.trsv_flops

    @property
    def bytes(self):
        return self.mem_bytes + self.square_bytes + self.trsv_bytes + self.vec_bytes

    def __add__(self, other):
        values = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)}
        return Work(**values)

    def compute_time(self, c):
        return (self.gram_flops * c.gamma_flop + self.gemm_flops * c.gemm + self.chol_flops * c.gamma_chol
                + self.mem_bytes * c.gamma_mem + self.square_bytes * c.square + self.trsv_bytes * c.gamma_trsv
                + self.vec_bytes * c.gamma_vec
                + self.deltas * c.delta + self.delta_gaps * c.delta_gap + self.exp_rows * c.gamma_exp
                + self.coordinates * c.delta_coord + self.epochs * c.delta_epoch + self.newtons * c.delta_newton
                + self.newton_solves * c.delta_newton_solve + self.certificates * c.delta_certify)

    def comm_time(self, p, net):
        return sum(times * allreduce_time(p, count, net, reducer)
                   for count, reducer, times in _triples(self.allreduces))

    def time(self, p, c, net):
        """Seconds on each of p ranks: compute (its passes at ``net.pass_rate``) and all-reduces."""
        if net.node_bandwidth:
            c = dataclasses.replace(c, gamma_mem=net.pass_rate(p, c.gamma_mem))
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


def working_set_phases(m, n, p, sizes, inner_solver="admm", intercept=False, refined=False, warm_start=0):
    """Work per rank of the working-set solver for working sets of ``sizes`` (one per outer iteration): a dict
    with ``setup`` (the data checks, A^T b, lambda_max and the column norms), ``gap`` (the gap passes: one
    before each outer iteration and one at the end), ``gather`` (the new columns and, for ADMM, their Gram
    products), ``factor`` (ADMM: the Cholesky factorizations of the working sets' Grams), ``end`` (proximal
    Newton: the KKT residual's pass), ``certified`` (the working set's size at each gap pass), ``fresh``
    (proximal Newton: the gap pass that makes its refined point itself, a warm start's first, else None), and
    functions of a working set's size: ``inner(size)`` (one inner iteration), ``solve_once(size,
    iterations=1)`` (a restricted solve's own work besides its iterations: for proximal Newton with
    ``refined``, the refined point it leaves for the next certificate, with a Hessian of its own when it
    made no iteration) and ``epoch(size)`` (one epoch of rank 0's coordinate descent; proximal Newton only).

    ``inner_solver``: "admm" (the lasso's working sets: squared loss, a Gram grown incrementally) or
    "prox_newton" (the L1 / elastic-net logistic working sets, proxnewton.py: no Gram, the logistic
    certificate); ``intercept`` adds the intercept's column to each restricted problem (prox_newton);
    ``refined``: the certificates' refined dual point, its number of steps (prox_newton; 0 or False: none;
    True: one; module docstring); ``warm_start``: the support of a warm start off a path (prox_newton: its
    columns are gathered first and the first certificate refines its own point; 0: a cold start)."""
    newton = inner_solver == "prox_newton"
    if inner_solver not in ("admm", "prox_newton"):
        raise ValueError(f"inner_solver must be 'admm' or 'prox_newton', got {inner_solver!r}")
    mi = shard_rows(m, p)
    data = DOUBLE * mi * n
    extra, steps = int(bool(intercept)), int(refined)
    warm_start = int(warm_start) if newton else 0
    if newton:  # the column squares (validation's finiteness check, kept for the norms: one einsum pass) and
        # lambda_max (the terms at 0, m_i rows, and A^T phi'(0)); all-reduces of n for each
        setup = Work(mem_bytes=2 * data, exp_rows=mi * EXP_UNITS["newton_terms"], allreduces=((n, "mpi"), (n, "mpi")))
    else:
        setup = Work(mem_bytes=4 * data, square_bytes=data, allreduces=((n, "mpi"), (n, "mpi")))
    gap, gather, factor, previous = Work(), Work(), Work(), 0
    certified = [warm_start] + [int(size) for size in sizes]
    fresh = 0 if steps and warm_start else None
    if warm_start:  # the warm start's support, gathered before the first certificate
        gather, previous = column_gather(mi, n, warm_start, 0), warm_start
    for index, size in enumerate(certified):
        if newton:  # after a restricted solve, theta at the refined point's margins; a warm start's makes its own
            gap = gap + logistic_certificate(mi, n, size, dual_margin=bool(steps) and (index > 0 or index == fresh))
            if index == fresh:
                gap = gap + refined_point(mi, size + extra, steps, hessian=True, gradient=True) \
                    + Work(newton_solves=1.0)
        else:
            gap = gap + Work(mem_bytes=data + DOUBLE * mi * size, allreduces=((n + 3, "mpi"),), delta_gaps=1.0)
        if size and index:
            new = max(size - previous, 0)
            if newton:  # the chosen set's broadcast, then its new columns (no Gram for the logistic loss)
                gather = gather + column_gather(mi, n, new, previous) + Work(allreduces=((size, "mpi"),))
            else:
                gather = gather + Work(gram_flops=2.0 * mi * previous * new + mi * new * new,
                                       mem_bytes=2 * DOUBLE * mi * new)
                factor = factor + Work(chol_flops=size ** 3 / 3)
            previous = max(previous, size)
    phases = {"setup": setup, "gap": gap, "gather": gather, "factor": factor, "certified": certified,
              "fresh": fresh}
    if newton:
        end = Work(exp_rows=mi * EXP_UNITS["newton_terms"], mem_bytes=data, allreduces=((n, "mpi"),))

        def solve_once(size, iterations=1):
            work = newton_solve_once(mi, int(size) + extra)
            if steps:
                work = work + refined_point(mi, int(size) + extra, steps, hessian=iterations <= 0)
            return work
        return dict(phases, end=end, inner=lambda size: newton_iteration(mi, int(size) + extra),
                    solve_once=solve_once, epoch=lambda size: coordinate_epoch(int(size) + extra))
    return dict(phases, end=Work(), inner=working_set_inner, solve_once=lambda size, iterations=1: Work(),
                epoch=lambda size: Work())


def column_gather(mi, n, new, cached):
    """Gathering ``new`` columns of a row-major shard (m_i x n) into the cache of ``cached`` columns: each
    gathered entry reads a cache line (CACHE_LINE bytes, at most the whole row), the copy and its store
    write 16 m_i |N| bytes, and a cache that outgrows its storage copies its old columns (16 m_i |C| bytes;
    the storage taken as 16 columns doubled until it holds the cached ones, workingset.ColumnCache's rule
    when the sets grow by at most a doubling)."""
    capacity = 0
    while cached and capacity < cached:  # the storage after the earlier additions (a power-of-two multiple of 16)
        capacity = max(16, 2 * capacity)
    grown = cached + new > capacity and cached > 0
    read = mi * min(CACHE_LINE * new, DOUBLE * n)
    return Work(mem_bytes=read + 2 * DOUBLE * mi * new + (2 * DOUBLE * mi * cached if grown else 0))


def working_set_inner(size):
    """One inner ADMM iteration on a working set of ``size`` columns (per rank: independent of m_i)."""
    return Work(trsv_flops=2.0 * size * size, trsv_bytes=DOUBLE * size * size, vec_bytes=VECTOR_PASSES * DOUBLE * size,
                allreduces=((size, "auto"), (5, "auto")), deltas=1.0)


def logistic_certificate(mi, n, size, dual_margin=False):
    """One certificate of the logistic working sets on rank i with the working set's ``size`` columns: the
    margins from the cached columns (8 m_i |W| bytes), theta and the dual sums (dual_residual and the entropy:
    2 m_i rows), A^T theta over every column (8 m_i n bytes), an all-reduce of n + 3, the entropy at the
    penalty's dual scale (m_i rows, an all-reduce of 1), the stop's and the screening mask's broadcasts
    (1 and n bytes), delta_certify; with ``dual_margin`` (a refined point's margins given: gap.dual_point's
    ``dual_margin``) theta at those margins, dual_residual once more (m_i rows).  The refined point itself is
    not here: a restricted solve's (:func:`refined_point` in its ``solve_once``), or a warm start's first."""
    rows = mi * (EXP_UNITS["dual_residual"] * (2 if dual_margin else 1) + 2 * EXP_UNITS["entropy"])
    return Work(mem_bytes=DOUBLE * mi * (n + size), exp_rows=rows,
                allreduces=((n + 3, "mpi"), (1, "mpi"), (1, "mpi"), (math.ceil(n / DOUBLE), "mpi")),
                certificates=1.0)


def refined_point(mi, k, steps, hessian=False, gradient=False):
    """The certificate's refined point on rank i (m_i rows, k columns; proxnewton's ``_refine``): ``steps``
    directions on one Hessian, each a broadcast of k + 1 and its margins (A d, 8 m_i k bytes; the sum, 24 m_i
    bytes), with ``steps`` - 1 gradients between them (:func:`gradient_pass`).  The Hessian is the restricted
    solve's last unless ``hessian`` (a solve stopped at its first iteration, a warm start's first
    certificate: :func:`hessian_pass`), the gradient at x the solve's last unless ``gradient`` (the warm
    start's).  Rank 0's coordinate descent and the fixed costs are counted apart."""
    direction = Work(mem_bytes=DOUBLE * mi * k + 3 * DOUBLE * mi, allreduces=((k + 1, "mpi"),))
    work = (gradient_pass(mi, k) if gradient else Work()) + (hessian_pass(mi, k) if hessian else Work())
    for step in range(max(int(steps), 0)):
        work = work + direction + (gradient_pass(mi, k) if step + 1 < steps else Work())
    return work


def gradient_pass(mi, k):
    """The loss's terms at a point (m_i rows) and the gradient A^T phi' (8 m_i k bytes), its all-reduce of
    k + 2 (with f and the dual's sum)."""
    return Work(mem_bytes=DOUBLE * mi * k, exp_rows=mi * EXP_UNITS["newton_terms"], allreduces=((k + 2, "mpi"),))


def hessian_pass(mi, k):
    """The Hessian A^T D A on rank i: 2 m_i k^2 flops (a gemm at gamma_gemm) and the weighted copy D A (16 m_i k
    bytes), its all-reduce of k^2."""
    return Work(gemm_flops=2.0 * mi * k * k, mem_bytes=2 * DOUBLE * mi * k, allreduces=((k * k, "mpi"),))


def newton_iteration(mi, k):
    """One proximal-Newton iteration on rank i (m_i rows, k columns), the full step taken (module docstring):
    the gradient A^T phi' (8 m_i k bytes; its terms are the last trial's), the Hessian (:func:`hessian_pass`),
    the trial's A d (8 m_i k bytes), margin + step (24 m_i bytes) and its terms (m_i rows); all-reduces of
    k + 2, k^2 and 1, broadcasts of the estimate's word, the stop word, the direction (k + 1) and the step;
    delta_newton.  Rank 0's coordinate descent is counted apart (:func:`coordinate_epoch`)."""
    return gradient_pass(mi, k) + hessian_pass(mi, k) + Work(
        mem_bytes=DOUBLE * mi * k + 3 * DOUBLE * mi, allreduces=((k + 1, "mpi"), (1, "mpi"), (1, "mpi"), (1, "mpi"),
                                                                 (1, "mpi")), newtons=1.0)


def newton_solve_once(mi, k):
    """A restricted proximal-Newton solve's work besides its iterations, on rank i: the first margins A x and
    their terms (8 m_i k bytes, m_i rows), the stopping iteration's gradient pass (8 m_i k bytes, an
    all-reduce of k + 2, the estimate's word), the restricted certificate that confirms the stop (dual_residual
    and the entropy twice: 3 m_i rows; A^T theta, 8 m_i k bytes; all-reduces of k + 3 and 1), the stop word,
    delta_newton_solve.  The refined point it then makes is :func:`refined_point` (``solve_once``)."""
    rows = mi * (EXP_UNITS["newton_terms"] + EXP_UNITS["dual_residual"] + 2 * EXP_UNITS["entropy"])
    return Work(mem_bytes=3 * DOUBLE * mi * k, exp_rows=rows,
                allreduces=((k + 2, "mpi"), (1, "mpi"), (k + 3, "mpi"), (1, "mpi"), (1, "mpi")), newton_solves=1.0)


def coordinate_epoch(k):
    """One epoch of rank 0's coordinate descent on a k x k Hessian: delta_epoch, k coordinate updates
    (delta_coord each) and CD_BYTES k^2 bytes of vector work (a row of H and the gradient per update)."""
    return Work(epochs=1.0, coordinates=float(k), vec_bytes=CD_BYTES * k * k)


def memory_per_rank(m, n, p, sizes=None, inner_solver="admm"):
    """Bytes a rank holds: its rows (and b), the Gram and its factor (n x n for a tall shard, m_i x m_i for
    a wide one), or with ``sizes`` the working set's columns, Gram and factor (ADMM), or its columns, the
    Hessian's weighted copy, the Hessian and six m_i-vectors (proximal Newton)."""
    mi = shard_rows(m, p)
    data = DOUBLE * mi * (n + 1)
    if sizes:
        w = max(int(s) for s in sizes)
        if inner_solver == "prox_newton":
            return data + 2 * DOUBLE * mi * w + DOUBLE * w * w + 6 * DOUBLE * mi
        return data + DOUBLE * mi * w + 2 * DOUBLE * w * w
    k = n if mi >= n else mi
    return data + 2 * DOUBLE * k * k


# -- predictions -------------------------------------------------------------------------------------------------
def predict_full(m, n, p, iterations, compute, network, gap_evaluations=0, rho_changes=0):
    """Predicted seconds per phase of a full solve on p ranks: setup, x_step, communication, overhead
    (the rest of the iterations: vector work and delta), gap, solve (iterations + gap + end) and total."""
    w = full_phases(m, n, p)
    it = w["iteration"]
    x_step = iterations * (it.trsv_bytes * compute.gamma_trsv
                           + it.mem_bytes * network.pass_rate(p, compute.gamma_mem) + compute.x_call)
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


def spread(total, weights):
    """``total`` as a list, one per entry of ``weights``, in proportion to them (evenly when they sum to 0); a
    list or array ``total`` is returned as a list unchanged."""
    if np.ndim(total) != 0:
        return [float(v) for v in total]
    weights = np.asarray(weights, dtype=float)
    if not len(weights):
        return []
    if weights.sum() <= 0:
        weights = np.ones(len(weights))
    return list(float(total) * weights / weights.sum())


def predict_working_set(m, n, p, sizes, inner_iterations, compute, network, inner_solver="admm",
                        coordinate_epochs=0, intercept=False, refined=False, certificate_epochs=0, warm_start=0):
    """Predicted seconds per phase of a working-set solve on p ranks: setup, gap, gather, factor, end,
    iterations (the inner iterations), coordinate (proximal Newton: rank 0's coordinate descent in the
    restricted solves), overhead (the fixed cost and own passes of each restricted solve), solve, other, total.

    ``solve`` is what the solver's ``timings["solve"]`` measures: for ADMM the inner iterations alone (its
    restricted problems' construction, Cholesky and fixed costs are in ``other`` = setup + factor + overhead);
    for proximal Newton the whole restricted solves (iterations + coordinate + overhead, the refined points
    they make for the certificates included; ``other`` = setup + end).  ``inner_iterations``: the total
    (spread evenly over the outer iterations) or a list, one count per outer iteration; ``coordinate_epochs``
    likewise (``info["coordinate_epochs"]``: a total is spread over the outer iterations in proportion to their
    directions, the iterations' and the ``refined`` steps').  ``refined`` (proximal Newton): the refined dual
    point's steps (0: none); ``warm_start``: a warm start's support off a path (0: a cold start), whose first
    certificate makes its own refined point, its coordinate descent ``certificate_epochs`` (part of ``gap``;
    they are outside ``info["coordinate_epochs"]``, and there are none without that certificate)."""
    sizes = [int(s) for s in sizes]
    per = spread(inner_iterations, np.ones(len(sizes)))
    w = working_set_phases(m, n, p, sizes, inner_solver, intercept, refined, warm_start)
    setup = w["setup"].time(p, compute, network) + compute.delta_solve
    gap = w["gap"].time(p, compute, network)
    gather = w["gather"].time(p, compute, network)
    factor = w["factor"].time(p, compute, network)
    end = w["end"].time(p, compute, network)
    if inner_solver == "prox_newton":
        if certificate_epochs and w["fresh"] is None:
            raise ValueError("certificate_epochs are a warm start's first certificate's (warm_start > 0, refined)")
        steps = int(refined)
        epochs = spread(coordinate_epochs, [count + steps for count in per])
        iterations = sum(count * w["inner"](size).time(p, compute, network) for size, count in zip(sizes, per))
        coordinate = sum(count * w["epoch"](size).time(p, compute, network) for size, count in zip(sizes, epochs))
        overhead = sum(w["solve_once"](size, count).time(p, compute, network) for size, count in zip(sizes, per))
        if w["fresh"] is not None:
            gap += certificate_epochs * w["epoch"](w["certified"][w["fresh"]]).time(p, compute, network)
        solve, other = iterations + coordinate + overhead, setup + end
    else:
        iterations = sum(count * (working_set_inner(size).time(p, compute, network) + compute.x_call
                                  + compute.comm_call) for size, count in zip(sizes, per))
        coordinate, overhead = 0.0, len(sizes) * compute.delta_solve
        solve, other = iterations, setup + factor + overhead
    return {"setup": setup, "gap": gap, "gather": gather, "factor": factor, "end": end, "iterations": iterations,
            "coordinate": coordinate, "overhead": overhead, "solve": solve, "other": other,
            "total": other + gap + gather + solve, "memory_per_rank": memory_per_rank(m, n, p, sizes, inner_solver)}


def scaling_table(m, n, iterations, compute, network, ranks=RANKS, gap_evaluations=0, rho_changes=0,
                  memory_limit=None):
    """One row per p in ``ranks``: the full solver's predicted phases, speed-up and efficiency against p = 1,
    and whether a rank's data fits in ``memory_limit`` bytes (None: not checked)."""
    return _table(lambda p: predict_full(m, n, p, iterations, compute, network, gap_evaluations, rho_changes),
                  ranks, memory_limit)


def working_set_table(m, n, sizes, inner_iterations, compute, network, ranks=RANKS, inner_solver="admm",
                      coordinate_epochs=0, intercept=False, refined=False, certificate_epochs=0, memory_limit=None,
                      warm_start=0):
    """As :func:`scaling_table` for the working-set solver (:func:`predict_working_set`), the counts (sizes,
    inner iterations, coordinate epochs) the same at every p."""
    return _table(lambda p: predict_working_set(m, n, p, sizes, inner_iterations, compute, network, inner_solver,
                                                coordinate_epochs, intercept, refined, certificate_epochs,
                                                warm_start),
                  ranks, memory_limit)


def _table(predict, ranks, memory_limit):
    rows = []
    single = predict(1)["total"]
    for p in ranks:
        row = predict(p)
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
    """(seconds per unit of work, fixed seconds per call) from timings of one kernel at several sizes; when
    noise leaves no positive rate beside the fixed cost (a larger size timed relatively faster), the rate
    alone (fixed 0), so that a rate is never 0."""
    rate, fixed = fit_nonnegative([work, np.ones(len(work))], times)
    if rate <= 0:
        rate, fixed = fit_nonnegative([work], times)[0], 0.0
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


def fit_coordinate_descent(sizes, epochs, times, gamma_vec):
    """(delta_coord, delta_epoch): s per coordinate update and per epoch, from timings of rank 0's coordinate
    descent on k x k Hessians (``sizes``, each its ``epochs``): ``times`` less the vector work of
    :func:`coordinate_epoch` at ``gamma_vec``, fitted to epochs x k and epochs (a relative non-negative least
    squares; a compiled sweep leaves little per update and the Python around it per epoch)."""
    sizes, epochs = np.asarray(sizes, dtype=float), np.asarray(epochs, dtype=float)
    vector = epochs * CD_BYTES * sizes ** 2 * gamma_vec
    rest = np.maximum(np.asarray(times, dtype=float) - vector, 1e-12)
    delta_coord, delta_epoch = fit_nonnegative([epochs * sizes, epochs], rest)
    return float(delta_coord), float(delta_epoch)


def fit_newton_overheads(runs, compute, network):
    """(delta_newton, delta_newton_solve, delta_certify) from proximal-Newton working-set solves of tiny
    problems (where the fixed costs are most of the time).  Each run: a dict with m, n, ranks, sizes,
    iterations (one count per outer iteration), coordinate_epochs, and optionally intercept, refined (steps),
    warm_start and certificate_epochs (:func:`predict_working_set`), and the measured ``solve`` and ``gap``
    seconds.

    The model's time without these three constants (``compute``'s other rates) is subtracted; the rest of
    ``solve`` is fitted to Newton iterations and restricted solves (a relative non-negative least squares; a
    solve's refined point is in its delta_newton_solve), then, with those two (a warm start's first
    certificate is charged a delta_newton_solve for its restricted problem and refined point), the rest of
    ``gap`` to the certificates (len(sizes) + 1)."""
    def predicted(run, c):
        return predict_working_set(run["m"], run["n"], run["ranks"], run["sizes"], run["iterations"], c, network,
                                   "prox_newton", run["coordinate_epochs"], run.get("intercept", False),
                                   run.get("refined", False), run.get("certificate_epochs", 0),
                                   run.get("warm_start", 0))

    base = dataclasses.replace(compute, delta_newton=0.0, delta_newton_solve=0.0, delta_certify=0.0)
    newtons = [float(np.sum(run["iterations"])) for run in runs]
    solves = [float(len(run["sizes"])) for run in runs]
    rest = [max(run["solve"] - predicted(run, base)["solve"], 1e-12) for run in runs]
    delta_newton, delta_newton_solve = (float(v) for v in fit_nonnegative([newtons, solves], rest))
    base = dataclasses.replace(base, delta_newton=delta_newton, delta_newton_solve=delta_newton_solve)
    certificates = [float(len(run["sizes"]) + 1) for run in runs]
    rest = [max(run["gap"] - predicted(run, base)["gap"], 1e-12) for run in runs]
    delta_certify = float(fit_nonnegative([certificates], rest)[0])
    return delta_newton, delta_newton_solve, delta_certify


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
