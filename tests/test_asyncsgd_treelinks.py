"""Fragile and Amelie SGD under the paper's link model (Tyurin and Richtarik, NeurIPS 2024, Algorithm 4).

The reference is an event simulation of Algorithm 4 written here, instant by instant with exact rational
times: x goes down the pivot's tree (Floyd-Warshall times; the graph's tree, checked to be a shortest-path tree); every worker computes gradients one after another into its accumulator; a worker whose
link to its parent is free sends its whole accumulator, which takes the edge's time, one message per link at
a time; a parent adds what arrives and forwards it the same way; the pivot steps as soon as what it holds
meets the method's rule.  At one instant: every arrival (by sender), then every free link sends, then the
gradients that end (by worker).  On the 10 x 10 mesh with h_i = 1 and S = 120 it gives the paper's count of
13 workers at rho = 10 (a step every 41 units with 128 gradients) and 41 workers at rho = 1.
"""
import math
from fractions import Fraction

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import async_sgd, get_graph, get_problem
from mpiopt.core.random import random_stream
from mpiopt.core.registry import options

SELF = MPI.COMM_SELF


def floyd_warshall(n, edges):
    d = [[Fraction(0) if i == j else math.inf for j in range(n)] for i in range(n)]
    for i, j, rho in edges:
        d[i][j] = d[j][i] = min(d[i][j], Fraction(rho))
    for k in range(n):
        for i in range(n):
            for j in range(n):
                d[i][j] = min(d[i][j], d[i][k] + d[k][j])
    return d


def algorithm_4_round(graph, pivot, h, enough):
    """One round from time 0 on ``graph``'s tree for ``pivot`` (checked to be a shortest-path tree: the paper
    leaves the choice among such trees open, and it decides which sums travel together): (end, gradients per
    worker held by the pivot at its step)."""
    n, edges = graph.n, graph.edges
    d = floyd_warshall(n, edges)
    rho = {}
    for i, j, r in edges:
        rho[i, j] = rho[j, i] = Fraction(r)
    parent = {i: (None if p < 0 else int(p)) for i, p in enumerate(graph.tree(pivot))}
    assert parent[pivot] is None
    assert all(d[pivot][parent[i]] + rho[i, parent[i]] == d[pivot][i] for i in range(n) if i != pivot)
    h = [Fraction(v) for v in h]
    next_gradient = [d[pivot][i] + h[i] for i in range(n)]
    held = [[0] * n for _ in range(n)]          # held[w][origin]: gradients in w's accumulator
    link_free_at = [Fraction(0)] * n             # when w's link to its parent is free again
    in_flight = []                               # (arrival time, sender, counts per origin)
    pivot_counts = [0] * n
    while True:
        now = min([g for g in next_gradient] + [m[0] for m in in_flight])
        for message in sorted((m for m in in_flight if m[0] == now), key=lambda m: m[1]):
            in_flight.remove(message)
            _, sender, counts = message
            target = pivot_counts if parent[sender] == pivot else held[parent[sender]]
            for origin in range(n):
                target[origin] += counts[origin]
            if parent[sender] == pivot and enough(pivot_counts):
                return now, pivot_counts
        for w in range(n):
            if w != pivot and link_free_at[w] <= now and any(held[w]):
                in_flight.append((now + rho[w, parent[w]], w, held[w]))
                held[w], link_free_at[w] = [0] * n, now + rho[w, parent[w]]
        for w in range(n):
            if next_gradient[w] == now:
                next_gradient[w] += h[w]
                if w == pivot:
                    pivot_counts[w] += 1
                    if enough(pivot_counts):
                        return now, pivot_counts
                    continue
                held[w][w] += 1
                if link_free_at[w] <= now:
                    in_flight.append((now + rho[w, parent[w]], w, held[w]))
                    held[w], link_free_at[w] = [0] * n, now + rho[w, parent[w]]


def at_least(S):
    return lambda counts: sum(counts) >= S


def malenia(S, n):
    return lambda counts: min(counts) >= 1 and n / sum(1 / c for c in counts) >= S / n


def one_step(problem, x, counts, seed, rule):
    """x after the step: each worker's gradients summed in order, then the workers' sums in worker order."""
    noise = [random_stream(seed, "asyncsgd-gradient", i) for i in range(len(counts))]
    sums = []
    for i, c in enumerate(counts):
        total = np.zeros(problem.dim)
        if c:
            total = problem.worker_grad(i, x, noise[i])
            for _ in range(c - 1):
                total = total + problem.worker_grad(i, x, noise[i])
        sums.append(total)
    direction = np.zeros(problem.dim)
    for i, c in enumerate(counts):
        if c:
            direction += sums[i] if rule == "fragile" else sums[i] / c
    return direction / (sum(counts) if rule == "fragile" else len(counts))


@pytest.mark.parametrize("topology, n, rho, h, batch", [
    ("line", 6, 0.75, [1.0, 1.5, 0.75, 2.0, 1.25, 0.5], 9),
    ("star", 7, 2.5, [1.0, 0.5, 1.5, 0.25, 2.0, 1.0, 0.75], 14),
    ("mesh", 12, 1.25, [1.0, 1.5, 0.75, 2.0, 1.25, 3.0, 0.5, 1.0, 1.75, 0.25, 2.5, 1.0], 20)])
def test_one_fragile_step_is_algorithm_4s_round(topology, n, rho, h, batch):
    problem = get_problem("quadratic", dim=5, noise=0.5)
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.5}, method="fragile",
                       batch=batch, tau=h, graph=topology, graph_options={"rho": rho}, seed=2, max_steps=3,
                       stop_at_epsilon=False)
    pivot = result.info["parameters"]["pivot"]
    assert result.info["parameters"]["links"] == "paper"
    end, counts = algorithm_4_round(get_graph(topology, n, rho=rho), pivot, h, at_least(batch))
    assert result.time == pytest.approx(3 * float(end), rel=1e-12)  # fixed times: every round the same
    assert result.info["workers"]["accepted"] == [3 * c for c in counts] and result.gradients == 3 * sum(counts)
    once = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.5}, method="fragile",
                     batch=batch, tau=h, graph=topology, graph_options={"rho": rho}, seed=2, max_steps=1,
                     stop_at_epsilon=False)
    x0 = problem.x0()
    np.testing.assert_array_equal(once.x, x0 - once.info["parameters"]["step_size"] *
                                  one_step(problem, x0, counts, 2, "fragile"))


def test_one_amelie_step_is_algorithm_4s_round_with_malenias_rule():
    n, h = 6, [1.0, 1.5, 0.75, 2.0, 1.25, 0.5]
    options_ = {"dim": 4, "noise": 0.5, "workers": n, "spread": 1.0}
    problem = get_problem("heterogeneous-quadratic", seed=3, **options_)
    result = async_sgd("heterogeneous-quadratic", comm=SELF, problem_options=options_, method="amelie", batch=15,
                       tau=h, graph="line", graph_options={"rho": 0.5}, seed=3, max_steps=1, stop_at_epsilon=False)
    pivot = result.info["parameters"]["pivot"]
    end, counts = algorithm_4_round(get_graph("line", n, rho=0.5), pivot, h, malenia(15, n))
    assert result.time == pytest.approx(float(end), rel=1e-12)
    assert result.info["workers"]["accepted"] == counts
    np.testing.assert_array_equal(result.x, problem.x0() - result.info["parameters"]["step_size"] *
                                  one_step(problem, problem.x0(), counts, 3, "amelie"))


@pytest.mark.parametrize("rho, workers, period, gradients", [(10.0, 13, 41, 128), (1.0, 41, 10, None)])
def test_the_papers_count_on_the_10_by_10_mesh(rho, workers, period, gradients):
    result = async_sgd("worst-case", comm=SELF, problem_options={"dim": 20, "noise": 0.01}, method="fragile",
                       tau="constant", graph="mesh", n_workers=100, graph_options={"rho": rho}, batch=120,
                       max_steps=2, stop_at_epsilon=False)
    end, counts = algorithm_4_round(get_graph("mesh", 100, rho=rho), result.info["parameters"]["pivot"], [1.0] * 100,
                                    at_least(120))
    assert sum(c > 0 for c in counts) == workers and end == period and sum(counts) == (gradients or sum(counts))
    assert sum(a > 0 for a in result.info["workers"]["accepted"]) == workers
    assert result.time == 2 * period and result.gradients == 2 * sum(counts)


def test_the_uncongested_links_stay_an_option():
    declared = options("asyncsgd-method", "fragile")["links"]
    assert declared.default == "paper" and declared.choices == ("paper", "uncongested")
    assert options("asyncsgd-method", "amelie")["links"] is declared
    common = dict(problem_options={"dim": 20, "noise": 0.01}, method="fragile", tau="constant", graph="mesh",
                  n_workers=100, graph_options={"rho": 10.0}, batch=120, max_steps=2, stop_at_epsilon=False)
    old = async_sgd("worst-case", comm=SELF, links="uncongested", **common)
    # a neighbour's round trip is 20: with 5 workers 120 gradients are in at t = 40 (40 + 4 x 20 = 120)
    assert sum(a > 0 for a in old.info["workers"]["accepted"]) == 5 and old.time == 80.0


GRAPH_TAUS = {1: [1.0], 2: [2.3, 2.65], 3: [2.25, 2.55, 2.9]}


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fragile", "amelie"])
def test_the_papers_links_on_mpi_ranks_give_the_simulators_run(comm, method):
    n = comm.size - 1
    if n not in GRAPH_TAUS:
        pytest.skip("needs 1-3 worker ranks")
    name = "quadratic" if method == "fragile" else "heterogeneous-quadratic"
    common = dict(problem_options={"dim": 4, "noise": 1.0, **({"workers": n} if method == "amelie" else {})},
                  method=method, tau=GRAPH_TAUS[n], graph="line", graph_options={"rho": 0.45}, pivot=0, batch=4,
                  max_steps=5, stop_at_epsilon=False, trace=True, seed=5)
    simulated = async_sgd(name, comm=SELF, **common)
    run = async_sgd(name, comm=comm, runtime="mpi", time_unit=0.02, **common)
    np.testing.assert_array_equal(run.x, simulated.x)
    assert run.info["workers"] == {**simulated.info["workers"], "cancelled": run.info["workers"]["cancelled"]}
    # the workers of one step may arrive in any order (their sums come in one message): compare by step
    by_step = [sorted(tuple(e[1:]) for e in trace) for trace in (run.info["trace"], simulated.info["trace"])]
    assert by_step[0] == by_step[1]
    assert simulated.time <= run.time
    parent = [-1] + list(range(n - 1))
    assert {(i, j) for i, j, _ in run.info["routes"]["messages"]} <= \
        {(i, parent[i]) for i in range(1, n)} | {(parent[i], i) for i in range(1, n)}
    assert all(np.array_equal(other, run.x) for other in comm.allgather(run.x))
