"""The paper's link model of a pivot's tree: one round of Algorithm 4 (Tyurin and Richtarik, "On the optimal time
complexities in decentralized stochastic asynchronous optimization", NeurIPS 2024), event by event.

At the round's start (time 0) the pivot holds x_k and sends it down its shortest-path tree: x reaches
worker i at tau_{pivot->i} (the down messages use the links' other direction, so the sums going up do not
delay them).  From then on worker i computes stochastic gradients at x_k one after another and adds each
into its accumulator.  Whenever its link to its parent is free and the accumulator holds something, it
sends the whole accumulator (the sums and counts of the workers that computed them) and empties it; the
message takes the edge's time rho, and a link carries one message at a time.  A parent adds what arrives
to its own accumulator and forwards it the same way.  The pivot adds its own gradients and what arrives,
and steps as soon as the counts it holds satisfy the method's rule (Fragile: at least S gradients; Amelie:
Malenia's), with every gradient it holds then (B >= S: a message may bring many).

Events at the same time are taken in this order: every message that arrives then (by sender), then every
link that is free then sends, then the gradients that end then (by worker).  So a parent forwards what
its children delivered at the instant its link frees, and a gradient that ends at that instant waits for
the next message.  This is the reading of the paper's simultaneous events that gives its count on the
10 x 10 mesh (rho = 10, h_i = 1, S = 120: 13 workers, the pivot's step at 41 with 128 gradients); the
others give fewer gradients or workers at that step.

Cost: one heap operation per gradient and per message of the round, O((B + messages) log n).
"""
import heapq
import math

import numpy as np

ARRIVE, SEND, GRADIENT = 0, 1, 2  # the order of simultaneous events


def tree_round(parent, up, down, gradient_time, enough):
    """One round: (end, counts, last) with ``counts[i]`` worker i's gradients that the pivot's step uses and
    ``last[i]`` when the last of them reached the pivot (the pivot's own: when it was computed), times from
    the round's start.

    ``parent``: each worker's parent on the tree (-1 at the pivot); ``up[i]``: the time of the edge from i
    to its parent; ``down[i]``: when x reaches i; ``gradient_time(i, t)``: how long worker i's gradient
    begun at t takes (inf: it never ends); ``enough(counts)``: the method's rule on the pivot's counts.
    RuntimeError when the rule can never hold."""
    n = len(parent)
    pivot = int(np.flatnonzero(np.asarray(parent) < 0)[0])
    counts, last = np.zeros(n, dtype=np.int64), np.zeros(n)
    held = [dict() for _ in range(n)]  # each worker's accumulator: origin -> gradients
    busy = [False] * n
    events, order = [], 0

    def push(time, kind, worker, payload=None):
        nonlocal order
        heapq.heappush(events, (time, kind, worker, order, payload))
        order += 1

    def compute(worker, begun):
        took = gradient_time(worker, begun)
        if took < math.inf:
            push(begun + took, GRADIENT, worker)

    def send(worker, time):
        busy[worker] = True
        push(time + up[worker], ARRIVE, worker, held[worker])
        held[worker] = {}

    for worker in range(n):
        compute(worker, float(down[worker]))
    while events:
        time, kind, worker, _, payload = heapq.heappop(events)
        if kind == GRADIENT:
            compute(worker, time)
            if worker == pivot:
                counts[worker] += 1
                last[worker] = time
            else:
                held[worker][worker] = held[worker].get(worker, 0) + 1
                if not busy[worker]:
                    send(worker, time)
                continue
        elif kind == ARRIVE:
            to = int(parent[worker])
            push(time, SEND, worker, True)  # its link is free once the message is in
            if to != pivot:
                mine = held[to]
                for origin, count in payload.items():
                    mine[origin] = mine.get(origin, 0) + count
                if not busy[to]:
                    push(time, SEND, to, False)
                continue
            for origin, count in payload.items():
                counts[origin] += count
                last[origin] = time
        else:
            if payload:
                busy[worker] = False
            if not busy[worker] and held[worker]:
                send(worker, time)
            continue
        if enough(counts):
            return time, counts, last
    raise RuntimeError("the round never ends: the pivot's rule cannot hold with the gradients that can reach it")
