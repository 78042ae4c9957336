"""Workers on graphs (topologies, shortest-path times, trees) and Fragile and Amelie SGD under the uncongested links.

References outside the code: Floyd-Warshall written here for the shortest paths, brute force over every
subset of workers for the equilibrium t*, and each method's round transcribed below with an event loop of
its own: worker i's k-th gradient of a round reaches the pivot at t + tau_{j->i} + k h_i + tau_{i->j}
(exact rational times; ``links="uncongested"``), the pivot steps by Rennala's rule (Fragile) or Malenia's
(Amelie) and every worker starts again.  The paper's link model is tested in test_asyncsgd_treelinks.py.
"""
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from mpi4py import MPI

from conftest import check_async_sgd_resumes_bit_for_bit, check_mpi_run_is_the_simulated_one
from mpiopt.asyncsgd import async_sgd, get_graph, get_problem, available_methods as methods
from mpiopt.asyncsgd.graphs import Graph, equilibrium
from mpiopt.asyncsgd.methods.amelie import amelie_time
from mpiopt.asyncsgd.methods.fragile import fragile_lower_bound, fragile_time
from mpiopt.asyncsgd.settings import AsyncSGDSettings
from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream

SELF = MPI.COMM_SELF


def floyd_warshall(n, edges):
    d = [[0.0 if i == j else math.inf for j in range(n)] for i in range(n)]
    for i, j, rho in edges:
        d[i][j] = d[j][i] = min(d[i][j], rho)
    for k in range(n):
        for i in range(n):
            for j in range(n):
                d[i][j] = min(d[i][j], d[i][k] + d[k][j])
    return np.array(d)


@pytest.mark.parametrize("name, n, edges", [("line", 5, 4), ("ring", 6, 6), ("ring", 2, 1), ("mesh", 12, 17),
                                            ("mesh", 100, 180), ("torus", 12, 24), ("star", 7, 6),
                                            ("complete", 5, 10), ("mesh", 7, 6)])
def test_topologies_and_their_shortest_paths(name, n, edges):
    graph = get_graph(name, n, rho=0.75)
    assert len(graph.edges) == edges
    expected = floyd_warshall(n, graph.edges)
    np.testing.assert_allclose(graph.times(), expected, rtol=1e-14, atol=0)
    weight = {(i, j): rho for i, j, rho in graph.edges}
    weight.update({(j, i): rho for i, j, rho in graph.edges})
    for root in (0, n - 1):
        parent = graph.tree(root)
        assert parent[root] == -1
        for i in range(n):
            if i != root:  # the tree's edge to the parent lies on a shortest path from the root
                assert expected[root, i] == pytest.approx(expected[root, parent[i]] + weight[(parent[i], i)])


def test_a_mesh_is_a_grid_without_wrap_around():
    graph = get_graph("mesh", 12)  # 3 x 4
    assert graph.times()[0, 11] == 5 and graph.neighbours(5) == [1, 4, 6, 9]
    assert get_graph("torus", 12).times()[0, 11] == 2


def test_an_edge_list_file_with_times_per_edge(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("# i j rho\n0 1 0.5\n1 2 2.0  # a slow link\n\n0 2\n2 3 0\n")
    graph = get_graph("edges", 4, path=str(path), rho=3.0)
    np.testing.assert_array_equal(graph.times()[0], [0, 0.5, 2.5, 2.5])  # 0-1-2 beats the direct 3.0
    assert graph.times()[2, 3] == 0
    path.write_text("0 1 x\n")
    with pytest.raises(ValueError, match=":1: expected"):
        get_graph("edges", 2, path=str(path))
    with pytest.raises(ValueError, match="not connected"):
        Graph(4, [(0, 1, 1.0), (2, 3, 1.0)])
    with pytest.raises(ValueError, match="two different workers"):
        Graph(3, [(0, 0, 1.0)])
    with pytest.raises(ValueError, match="needs path"):
        get_graph("edges", 3)


def test_the_equilibrium_is_the_best_subset_by_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 7))
        h, tau, S = rng.uniform(0.1, 3, n), rng.uniform(0, 5, n), float(rng.integers(1, 30))
        brute = min(max(max(max(tau[i], h[i]) for i in subset), S / sum(1 / h[i] for i in subset))
                    for k in range(1, n + 1) for subset in itertools.combinations(range(n), k))
        assert equilibrium(S, h, tau) == pytest.approx(brute, rel=1e-12)


def test_the_predicted_times_are_the_papers_formulas():
    graph, h = get_graph("line", 4, rho=2.0), np.array([1.0, 0.5, 3.0, 1.0])
    value, pivot = fragile_time(graph, h, 8.0, 1.0, 2.0, 3.0)
    tau = floyd_warshall(4, graph.edges)
    per_pivot = [equilibrium(8, h, tau[:, j] + tau[j, :]) for j in range(4)]
    assert per_pivot[pivot] == min(per_pivot) and value == 2.0 * 3.0 / 1.0 * min(per_pivot)
    assert amelie_time(graph, h, 8.0, 0.5, 2.0, 3.0) == 2.0 * 3.0 / 0.5 * max(6.0, 3.0, 8.0 / (4 * 0.5) * h.mean())


def transcribed_round_method(problem, h, graph, pivot, rule, steps, gamma, seed):
    """Rennala's rule (``rule="fragile"``: the first S arrivals) or Malenia's (``"amelie"``) on the tree."""
    n, tau = len(h), floyd_warshall(len(h), graph.edges)
    trip = [Fraction(tau[pivot, i]) + Fraction(tau[i, pivot]) for i in range(n)]
    h = [Fraction(v) for v in h]
    noise = [random_stream(seed, "asyncsgd-gradient", i) for i in range(n)]
    x, t, accepted = problem.x0(), Fraction(0), [0] * n
    S = rule[1]
    for _ in range(steps):
        k = [0] * n
        sums, counts, total, count = [np.zeros(problem.dim) for _ in range(n)], [0] * n, np.zeros(problem.dim), 0

        def enough():
            if rule[0] == "fragile":
                return count >= S
            return min(counts) >= 1 and n / sum(1.0 / c for c in counts) >= S / n
        while not enough():
            when, i = min((t + trip[i] + (k[i] + 1) * h[i], i) for i in range(n))
            k[i] += 1
            g = problem.worker_grad(i, x, noise[i])
            if rule[0] == "fragile":
                total, count = total + g, count + 1
            else:
                sums[i], counts[i] = sums[i] + g, counts[i] + 1
            accepted[i] += 1
        t = when
        if rule[0] == "fragile":
            x = x - gamma * (total / count)
        else:
            direction = np.zeros(problem.dim)
            for i in range(n):
                direction += sums[i] / counts[i]
            x = x - gamma * (direction / n)
    return x, float(t), accepted


@pytest.mark.parametrize("topology, rho, batch", [("mesh", 0.5, 6), ("line", 0.25, 4), ("star", 4.0, 10)])
def test_fragile_is_its_round_on_the_tree(topology, rho, batch):
    h = [1.0, 1.5, 0.75, 2.0, 1.25, 3.0]
    graph = get_graph(topology, 6, rho=rho)
    problem = get_problem("quadratic", dim=5, noise=0.5)
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.5}, method="fragile",
                       batch=batch, tau=h, n_workers=6, graph=topology, graph_options={"rho": rho}, seed=2, max_steps=7,
                       stop_at_epsilon=False, links="uncongested")
    pivot = result.info["parameters"]["pivot"]
    tau = floyd_warshall(6, graph.edges)
    per_pivot = [equilibrium(batch, np.array(h), tau[:, j] + tau[j, :]) for j in range(6)]
    tied = [j for j in range(6) if per_pivot[j] <= min(per_pivot) * (1 + 1e-12)]
    assert pivot == min(tied, key=lambda j: (max(tau[:, j] + tau[j, :]), j))  # ties: the most central
    expected, end, accepted = transcribed_round_method(problem, h, graph, pivot, ("fragile", batch), 7,
                                                       1 / (2 * problem.L), 2)
    np.testing.assert_array_equal(result.x, expected)
    assert result.time == end and result.info["workers"]["accepted"] == accepted
    assert result.predicted["fragile"] == pytest.approx(problem.L * problem.Delta / result.info["epsilon"] *
                                                        min(per_pivot), rel=1e-12)


def test_amelie_is_its_round_on_the_tree():
    h = [1.0, 1.5, 0.75, 2.0, 1.25]
    options = {"dim": 4, "noise": 0.5, "workers": 5, "spread": 1.0}
    problem = get_problem("heterogeneous-quadratic", seed=3, **options)
    result = async_sgd("heterogeneous-quadratic", comm=SELF, problem_options=options, method="amelie", batch=9,
                       tau=h, n_workers=5, graph="ring", graph_options={"rho": 0.5}, seed=3, max_steps=6,
                       stop_at_epsilon=False, links="uncongested")
    graph = get_graph("ring", 5, rho=0.5)
    tau = floyd_warshall(5, graph.edges)
    pivot = result.info["parameters"]["pivot"]
    assert max(tau[pivot] + tau[:, pivot]) == min(max(tau[j] + tau[:, j]) for j in range(5))
    expected, end, accepted = transcribed_round_method(problem, h, graph, pivot, ("amelie", 9), 6,
                                                       1 / (2 * problem.L), 3)
    np.testing.assert_array_equal(result.x, expected)
    assert result.time == end and result.info["workers"]["accepted"] == accepted
    assert result.predicted["amelie"] == amelie_time(graph, h, problem.sigma2, result.info["epsilon"], problem.L,
                                                     problem.Delta)


def test_on_a_slow_mesh_only_the_pivot_and_its_near_workers_contribute():
    contributing = {}
    for rho in (0.1, 1.0, 10.0):
        result = async_sgd("worst-case", comm=SELF, problem_options={"dim": 20, "noise": 0.01}, method="fragile",
                           n_workers=100, tau="constant", graph="mesh", graph_options={"rho": rho}, batch=16,
                           max_steps=5, stop_at_epsilon=False)
        contributing[rho] = sum(a > 0 for a in result.info["workers"]["accepted"])
    # S = 16 gradients at h = 1: within a round of about 16 / k units only workers whose round trip fits count
    assert contributing[10.0] == 1 and contributing[1.0] < contributing[0.1] and contributing[0.1] > 8


def test_the_graph_methods_need_a_graph_and_refuse_a_bad_pivot():
    with pytest.raises(CollectiveError, match="needs the workers' graph"):
        async_sgd("quadratic", comm=SELF, method="fragile", n_workers=3, max_steps=1)
    with pytest.raises(CollectiveError, match="pivot 5"):
        async_sgd("quadratic", comm=SELF, method="fragile", n_workers=3, graph="line", pivot=5, max_steps=1)
    with pytest.raises(CollectiveError, match="graph must be"):
        async_sgd("quadratic", comm=SELF, method="fragile", n_workers=3, graph="hypercube", max_steps=1)
    assert "fragile" not in methods(AsyncSGDSettings(), "quadratic")
    assert {"fragile", "amelie"} <= set(methods(AsyncSGDSettings(graph="ring"), "quadratic"))


def test_a_checkpointed_fragile_run_resumes_bit_for_bit(tmp_path):
    check_async_sgd_resumes_bit_for_bit(
        tmp_path, "quadratic", get_problem("quadratic", dim=5, noise=1.0), "stochastic_grad", 70,
        problem_options={"dim": 5, "noise": 1.0}, seed=1, method="fragile", batch=5, tau="lognormal",
        graph="torus", graph_options={"rho": 0.3}, n_workers=9, stop_at_epsilon=False, max_steps=30)


# -- on MPI ranks: the tree's times emulated as the jobs' delays, the simulator's iterates -------------------
GRAPH_TAUS = {1: [1.0], 2: [2.3, 2.65], 3: [2.25, 2.55, 2.9]}
AMELIE_TAUS = {**GRAPH_TAUS, 3: [2.25, 2.55, 3.3]}  # its rounds wait for the slowest: arrivals 0.6 apart


def check_the_vectors_travelled_along_the_tree(run, pivot):
    """Every routed message crossed an edge of the pivot's tree (parent[] recomputed here from Floyd-Warshall),
    and each edge carried at least one job down and one gradient up for every gradient used from below it."""
    routes, n = run.info["routes"], run.info["n_workers"]
    assert routes["pivot"] == pivot
    line = floyd_warshall(n, [(i, i + 1, 1.0) for i in range(n - 1)])
    parent = [-1 if i == pivot else (i - 1 if i > pivot else i + 1) for i in range(n)]
    assert routes["parent"] == parent and all(line[pivot, i] == abs(i - pivot) for i in range(n))
    edges = {(i, j): count for i, j, count in routes["messages"]}
    assert set(edges) <= {(i, parent[i]) for i in range(n) if parent[i] >= 0} | \
        {(parent[i], i) for i in range(n) if parent[i] >= 0}
    accepted = run.info["workers"]["accepted"]
    for child in range(n):
        if parent[child] < 0:
            continue
        below = sum(accepted[i] for i in range(n) if abs(i - pivot) >= abs(child - pivot)
                    and (i - pivot) * (child - pivot) > 0)
        assert edges.get((parent[child], child), 0) >= below and edges.get((child, parent[child]), 0) >= below
    assert n == 1 or sum(accepted) > accepted[pivot]  # some used gradients came up the tree


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
def test_fragile_on_mpi_ranks_gives_the_simulators_iterates_along_the_trees_edges(comm):
    # the pivot is chosen by the method (worker 0 for these times, as a given pivot 0 would be: one run)
    simulated, run = check_mpi_run_is_the_simulated_one(
        comm, "quadratic", GRAPH_TAUS, 0.29, 0.3, problem_options={"dim": 4, "noise": 1.0}, method="fragile",
        graph="line", graph_options={"rho": 0.45}, batch=2, pivot=None, max_steps=4, stop_at_epsilon=False,
        trace=True, seed=5, links="uncongested")
    assert simulated.info["parameters"]["pivot"] == 0
    check_the_vectors_travelled_along_the_tree(run, 0)


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
def test_amelie_on_mpi_ranks_gives_the_simulators_iterates_along_the_trees_edges(comm):
    simulated, run = check_mpi_run_is_the_simulated_one(
        comm, "heterogeneous-quadratic", AMELIE_TAUS, 0.29, 0.3,
        problem_options={"dim": 4, "noise": 1.0, "workers": comm.size - 1}, method="amelie", graph="line",
        graph_options={"rho": 0.45}, pivot=0, batch=2, max_steps=4, stop_at_epsilon=False, trace=True, seed=5,
        links="uncongested")
    check_the_vectors_travelled_along_the_tree(run, 0)


def test_the_lower_bound_is_the_papers_formula_and_within_2_log_n_plus_1_of_fragiles_time():
    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.integers(1, 7))
        edges = [(i, int(rng.integers(0, i)), float(rng.uniform(0, 4))) for i in range(1, n)]  # a random tree
        edges += [(int(a), int(b), float(rng.uniform(0, 4))) for a, b in rng.integers(0, n, (n, 2)) if a != b]
        graph, h = Graph(n, edges), rng.uniform(0.2, 3, n)
        sigma2, epsilon, L, Delta = float(rng.integers(1, 40)), 1.0, 2.0, 3.0  # sigma^2/eps a whole number
        tau = floyd_warshall(n, graph.edges)
        brute = min(min(max(max(max(tau[i][j] / math.log(n + 1), h[i]) for i in subset),
                            sigma2 / epsilon / sum(1 / h[i] for i in subset))
                        for k in range(1, n + 1) for subset in itertools.combinations(range(n), k))
                    for j in range(n))
        lower = fragile_lower_bound(graph, h, sigma2, epsilon, L, Delta)
        assert lower == pytest.approx(L * Delta / epsilon * brute, rel=1e-12)
        upper = fragile_time(graph, h, sigma2, epsilon, L, Delta)[0]
        assert lower <= upper * (1 + 1e-12) and upper <= 2 * math.log(n + 1) * lower * (1 + 1e-12), trial


def test_every_run_on_a_graph_predicts_the_decentralized_methods_times():
    result = async_sgd("quadratic", comm=SELF, method="rennala", n_workers=9, tau="sqrt", graph="mesh",
                       graph_options={"rho": 2.0}, max_steps=2)
    problem, graph = get_problem("quadratic"), get_graph("mesh", 9, rho=2.0)
    h, epsilon = np.sqrt(np.arange(1, 10)), result.info["epsilon"]
    assert result.predicted["fragile"] == fragile_time(graph, h, problem.sigma2, epsilon, problem.L,
                                                       problem.Delta)[0]
    assert result.predicted["amelie"] == amelie_time(graph, h, problem.sigma2, epsilon, problem.L, problem.Delta)
    assert result.predicted["fragile_lower_bound"] == fragile_lower_bound(graph, h, problem.sigma2, epsilon,
                                                                          problem.L, problem.Delta)
    assert "fragile" not in async_sgd("quadratic", comm=SELF, n_workers=3, max_steps=1).predicted


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
def test_a_fragile_mpi_run_in_checkpointed_sessions_drains_its_routes_each_time(tmp_path, comm):
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker")
    path = comm.bcast(str(tmp_path / "fragile.npz") if comm.rank == 0 else None)
    common = dict(comm=comm, runtime="mpi", method="fragile", pivot=0, batch=3, graph="line",
                  graph_options={"rho": 0.2}, tau="sqrt", time_unit=2e-3, max_steps=24, stop_at_epsilon=False,
                  problem_options={"dim": 4, "noise": 1.0}, seed=2, checkpoint=path, idle_timeout=60.0)
    run = async_sgd("quadratic", checkpoint_every=5, **common)
    assert run.status == "finished" and run.steps == 24 and run.info["resumed_at"] == 0
    n = comm.size - 1
    parent = [-1] + list(range(n - 1))
    assert {(i, j) for i, j, _ in run.info["routes"]["messages"]} <= \
        {(i, parent[i]) for i in range(1, n)} | {(parent[i], i) for i in range(1, n)}
    again = async_sgd("quadratic", **common)
    assert again.info["resumed_at"] == 24 and np.array_equal(again.x, run.x)
