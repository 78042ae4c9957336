"""Workers on a graph: topologies, edge times, shortest-path times and trees, and what the decentralized
methods share (Tyurin and Richtarik, "On the optimal time complexities in decentralized stochastic
asynchronous optimization", NeurIPS 2024).

Worker i sends a vector to a neighbour j in rho_ij (the edge's time, the same
both ways); a vector from i to j takes the shortest-path time tau_{i->j}
(Dijkstra over the edge times, scipy.sparse.csgraph).  A method on a graph
picks a pivot j: x travels from j on a shortest-path tree and the workers'
partial sums of gradients come back along it (:class:`TreeJobs`, the rounds'
jobs; :mod:`.treelinks`, the paper's links).  Its time is built from

    t*(S, h, tau) = min_k max{max(tau_pi_k, h_pi_k), S (sum_{i<=k} 1/h_pi_i)^(-1)}

(:func:`equilibrium`), pi sorting the workers by max(tau_i, h_i) for that
pivot; :func:`best_pivot` is the j of least t*(S, h, tau_{.->j} +
tau_{j->.}) (among ties the most central: the least max_i tau_{i->j} +
tau_{j->i}).  The methods' own times, T_Fragile, its lower bound and
T_Amelie, are in :mod:`.methods.fragile` and :mod:`.methods.amelie`.

Topologies (registry kind ``asyncsgd-graph``):
``line``, ``ring``, ``mesh`` (2-D, rows x columns with rows the largest
divisor of n at most sqrt(n), no wrap-around), ``torus`` (the mesh wrapped),
``star`` (worker 0 the centre), ``complete``, and ``edges`` (a text file of
lines ``i j rho``, 0-based, or ``i j`` with the option's rho); every named
topology takes ``rho``, one time for every edge.
"""
import math

import numpy as np

from ..core.options import Option, Options
from ..core.registry import lookup, names, options, register
from ..core.random import random_stream
from .jobs import PLAIN, Job
from .treelinks import tree_round

RHO = Option("rho", float, 1.0, "the time to send one vector along an edge", low=0)


class Graph:
    """An undirected graph of ``n`` workers with a time per edge; ``edges`` (i, j, rho) with i != j."""

    def __init__(self, n, edges, name="edges"):
        self.n, self.name = int(n), name
        if self.n < 1:
            raise ValueError(f"a graph needs at least one worker, got n={n!r}")
        clean = {}
        for i, j, rho in edges:
            i, j, rho = int(i), int(j), float(rho)
            if not (0 <= i < self.n and 0 <= j < self.n) or i == j:
                raise ValueError(f"an edge joins two different workers of 0..{self.n - 1}, got ({i}, {j})")
            if not (math.isfinite(rho) and rho >= 0):
                raise ValueError(f"an edge's time must be a finite number >= 0, got {rho!r} on ({i}, {j})")
            key = (min(i, j), max(i, j))
            clean[key] = min(rho, clean.get(key, math.inf))
        self.edges = [(i, j, rho) for (i, j), rho in sorted(clean.items())]
        from scipy.sparse.csgraph import connected_components  # here, not at the top: only graphs need scipy.sparse
        if self.n > 1 and connected_components(self._matrix(), directed=False)[0] != 1:
            raise ValueError(f"the graph of {self.n} workers is not connected: some workers cannot be reached")
        self._times = self._predecessors = None

    def _matrix(self):
        # a zero-time edge is stored as a tiny positive weight (csgraph reads 0 as "no edge"), then exact 0
        rows = [i for i, _, _ in self.edges] + [j for _, j, _ in self.edges]
        cols = [j for _, j, _ in self.edges] + [i for i, _, _ in self.edges]
        weights = [rho or 1e-300 for _, _, rho in self.edges] * 2
        from scipy.sparse import coo_matrix  # here, not at the top: only graphs need scipy.sparse
        return coo_matrix((weights, (rows, cols)), shape=(self.n, self.n)).tocsr()

    def neighbours(self, worker):
        return sorted({j for i, j, _ in self.edges if i == worker} | {i for i, j, _ in self.edges if j == worker})

    def times(self):
        """tau[i, j], the shortest-path time from i to j (0 on the diagonal)."""
        if self._times is None:
            from scipy.sparse.csgraph import shortest_path  # here, not at the top: only graphs need scipy.sparse
            times, self._predecessors = shortest_path(self._matrix(), method="D", directed=False,
                                                      return_predecessors=True)
            times[times < 1e-250] = 0.0
            self._times = times
        return self._times

    def tree(self, root):
        """The shortest-path tree from ``root``: parent[i] (-1 at the root), x's way out and the sums' way back."""
        self.times()
        parent = self._predecessors[root].astype(np.int64)
        parent[root] = -1
        return parent

    def describe(self):
        return f"{self.name} graph of {self.n} workers, {len(self.edges)} edges"


def equilibrium(S, h, tau):
    """t*(S, h, tau) = min_k max{max(tau_pi_k, h_pi_k), S (sum_{i<=k} 1/h_pi_i)^(-1)}, pi sorting by max(tau, h)."""
    h, tau = np.asarray(h, dtype=np.float64), np.asarray(tau, dtype=np.float64)
    order = np.argsort(np.maximum(tau, h), kind="stable")
    first = np.maximum(tau, h)[order]
    return float(np.min(np.maximum(first, S / np.cumsum(1.0 / h[order]))))


def best_pivot(graph, h, S):
    """(min_j t*(S, h, tau_{.->j} + tau_{j->.}), the pivot j attaining it; among ties the most central)."""
    tau = graph.times()
    values = np.array([equilibrium(S, h, tau[:, j] + tau[j, :]) for j in range(graph.n)])
    tied = np.flatnonzero(values <= values.min() * (1 + 1e-12))  # ties: the most central of them, then the first
    pivot = int(tied[np.argmin(np.max(tau[:, tied] + tau[tied, :].T, axis=0))])
    return float(values[pivot]), pivot


def _mesh_shape(n):
    rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    return rows, n // rows


def _grid(n, rho, wrap):
    rows, cols = _mesh_shape(n)
    edges = []
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            if c + 1 < cols or (wrap and cols > 2):
                edges.append((i, r * cols + (c + 1) % cols, rho))
            if r + 1 < rows or (wrap and rows > 2):
                edges.append((i, ((r + 1) % rows) * cols + c, rho))
    return Graph(n, edges, "torus" if wrap else "mesh")


def _edge_file(n, path, rho=RHO.default):
    return Graph(n, _read_edges(path, rho), "edges")


def _read_edges(path, rho=RHO.default):
    edges = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split("#")[0].split()
            if not fields:
                continue
            if len(fields) not in (2, 3):
                raise ValueError(f"{path}:{number}: expected 'i j' or 'i j rho', got {line.strip()!r}")
            try:
                edges.append((int(fields[0]), int(fields[1]), float(fields[2]) if len(fields) == 3 else rho))
            except ValueError:
                raise ValueError(f"{path}:{number}: expected integers i j and a number rho, got "
                                 f"{line.strip()!r}") from None
    return edges


register("asyncsgd-graph", "line", lambda n, rho=RHO.default: Graph(n, [(i, i + 1, rho) for i in range(n - 1)],
                                                                    "line"), options=Options(RHO))
register("asyncsgd-graph", "ring", lambda n, rho=RHO.default: Graph(
    n, [(i, (i + 1) % n, rho) for i in range(n if n > 2 else n - 1)], "ring"), options=Options(RHO))
register("asyncsgd-graph", "mesh", lambda n, rho=RHO.default: _grid(n, rho, False), options=Options(RHO))
register("asyncsgd-graph", "torus", lambda n, rho=RHO.default: _grid(n, rho, True), options=Options(RHO))
register("asyncsgd-graph", "star", lambda n, rho=RHO.default: Graph(n, [(0, i, rho) for i in range(1, n)], "star"),
         options=Options(RHO))
register("asyncsgd-graph", "complete", lambda n, rho=RHO.default: Graph(
    n, [(i, j, rho) for i in range(n) for j in range(i + 1, n)], "complete"), options=Options(RHO))
register("asyncsgd-graph", "edges", _edge_file, options=Options(
    Option("path", str, None, "a text file of lines 'i j rho' (or 'i j': the rho option's time), 0-based"), RHO))


def get_graph(graph, n, **values):
    """A Graph of ``n`` workers from a registered topology's name and its declared options, or a Graph as it is
    (its size checked)."""
    if isinstance(graph, Graph):
        if graph.n != n:
            raise ValueError(f"the graph has {graph.n} workers, the run {n}")
        return graph
    factory = lookup("asyncsgd-graph", graph)
    resolved = options("asyncsgd-graph", graph).resolve(values, f"asyncsgd-graph {graph!r}")
    if graph == "edges" and not resolved.get("path"):
        raise ValueError("asyncsgd-graph 'edges' needs path=FILE")
    return factory(int(n), **resolved)


def graph_workers(graph, **values):
    """How many workers a topology names by itself (an edge list file: its largest worker + 1), else None."""
    if graph != "edges" or not values.get("path"):
        return None
    return 1 + max((max(i, j) for i, j, _ in _read_edges(values["path"])), default=0)


def pivot_times(graph, pivot):
    """(before, after) per worker for ``pivot``: tau_{pivot->i} (x's way out on the tree) and tau_{i->pivot}."""
    tau = graph.times()
    return tau[pivot, :].copy(), tau[:, pivot].copy()


def graph_of(cls, timing):
    """The run's graph for a graph method ``cls``; ValueError when the run has none."""
    graph = None if timing is None else timing.graph
    if graph is None:
        raise ValueError(f"{cls.owner()} needs the workers' graph (graph=... : "
                         f"{', '.join(names('asyncsgd-graph'))})")
    return graph


PAPER, UNCONGESTED = "paper", "uncongested"
LINKS = Option("links", str, PAPER, "how the tree's links are timed: 'paper' (Algorithm 4: each worker sends its "
                                    "accumulated sum to its parent, one message per link at a time, and the parents "
                                    "add what arrives) or 'uncongested' (worker i's k-th gradient reaches the pivot "
                                    "at tau_{j->i} + k h_i + tau_{i->j}, any number of messages on a link at once)",
               choices=(PAPER, UNCONGESTED))


class TreeJobs:
    """The jobs of a pivot's rounds on a graph, for a method that restarts every worker after each step, under
    one of two link models (the option ``links``).

    ``paper`` (:mod:`.treelinks`): at each round's start the method plays the round of Algorithm 4 through
    (the compute times drawn from its own stream) up to the step its rule allows: how many of each
    worker's gradients the pivot then holds and when the last of them reached it.  Each such worker gets
    one job, that many gradients summed, planned to take that long; the step comes when all of them are
    in, and adds the workers' sums in worker order whatever the order of arrival, so every runtime gives
    the same bits.  The workers left out (their gradients would come too late) sit the round out.

    ``uncongested``: a worker's first job of a round waits for x to reach it (tau_{pivot->i}) and its
    result's travel back (tau_{i->pivot}); the next ones of the round are priced by their compute time
    alone, so its k-th gradient of the round reaches the pivot at t_round + tau_{pivot->i} + h_i1 + ... +
    h_ik + tau_{i->pivot}, as if a link carried any number of messages at once."""

    seeded = True  # the paper's rounds draw random compute times from the method's own stream
    routed = True  # x and the sums travel on the pivot's tree (on MPI, over the graph's topology)

    @classmethod
    def unavailable(cls, settings, problem=None):
        return None if settings.graph is not None else "it needs the workers' graph (--graph)"

    @classmethod
    def tree_options(cls, graph, pivot, links, timing):
        """The pivot's keywords of ``__init__``: the pivot, the link model, the tree and its times per worker."""
        if pivot >= graph.n:
            raise ValueError(f"{cls.owner()}: pivot {pivot} is not a worker of 0..{graph.n - 1}")
        if links == PAPER and timing.compute.real:
            raise ValueError(f"{cls.owner()}: the paper's links plan each round from modelled compute times; "
                             "tau 'real' needs links='uncongested'")
        before, after = pivot_times(graph, pivot)
        parent = graph.tree(pivot)
        up = np.array([0.0 if p < 0 else graph.times()[i, p] for i, p in enumerate(parent)])
        return {"pivot": int(pivot), "before": before, "after": after, "links": links, "parent": parent, "up": up,
                "timing": timing}

    def tree_parameters(self):
        return {"pivot": self.pivot, "links": self.links, "round_trip_max": float(np.max(self.before + self.after))}

    def _tree_jobs(self, pivot, before, after, links, parent, up, timing, seed):
        self.pivot, self.links = int(pivot), links
        self.before, self.after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
        self.round_of = np.full(self.n_workers, -1, dtype=np.int64)  # the step of each worker's last first job
        self.parent, self.up, self.timing = np.asarray(parent), np.asarray(up, dtype=np.float64), timing
        self.tree_stream = random_stream(seed, "asyncsgd-tree-tau")
        self.round_counts = np.zeros(self.n_workers, dtype=np.int64)  # the round's planned gradients per worker
        self.round_last = np.zeros(self.n_workers)                     # and each worker's planned job time
        self.round_got = np.zeros(self.n_workers, dtype=bool)         # whose sum is in
        self.round_sums = np.zeros((self.n_workers, self.x.size)) if links == PAPER else np.zeros((0, 0))
        self._fixed_plan = None

    def state(self, skip=()):
        return super().state(skip=("timing", "_fixed_plan", *skip))

    def _plan_round(self):
        """Play this round of Algorithm 4 from now: the workers that take part, in worker order."""
        timing = self.timing
        fixed = timing.plain_model().fixed and not timing.time_varying
        if self._fixed_plan is None or not fixed:
            began, rng = self.now, self.tree_stream

            def gradient_time(worker, t):
                return timing.price(worker + 1, PLAIN, rng, start=began + t)[0]
            _, counts, last = tree_round(self.parent, self.up, self.before, gradient_time, self.tree_rule)
            self._fixed_plan = (counts.copy(), last.copy())
        self.round_counts[:], self.round_last[:] = self._fixed_plan
        self.round_got[:] = False
        return [int(w) for w in np.flatnonzero(self.round_counts)]

    def start(self):
        return self._plan_round() if self.links == PAPER else super().start()

    def job(self, worker):
        if self.links == PAPER:
            count = int(self.round_counts[worker])
            return Job(gradients=count, duration=float(self.round_last[worker])) if count else None
        if self.round_of[worker] == self.k:
            return PLAIN
        self.round_of[worker] = self.k
        return Job(before=float(self.before[worker]), after=float(self.after[worker]))

    def arrive(self, worker, grad, k_at):
        if self.links != PAPER:
            return super().arrive(worker, grad, k_at)
        if k_at != self.k or self.round_got[worker]:  # every round restarts its workers: a runtime bug
            raise RuntimeError(f"{self.name}: worker {worker} sent step {k_at}'s result at step {self.k}")
        self.round_sums[worker] = grad
        self.round_got[worker] = True
        self.accepted[worker] += self.finished
        if np.count_nonzero(self.round_got) < np.count_nonzero(self.round_counts):
            return ()
        self.tree_step(self.round_sums, self.round_counts)
        self.round_sums[:] = 0
        return self._plan_round()
