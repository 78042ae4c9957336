"""Graph methods on MPI ranks: the vectors travel along the pivot's tree over an MPI distributed-graph topology.

A method that declares ``routed = True`` (:class:`.graphs.TreeJobs`, the
decentralized methods of :mod:`.methods`) runs on workers joined by a graph
(:mod:`.graphs`); the pivot j broadcasts x_k on its shortest-path tree and
the gradients come back up the same tree.  On the MPI
runtime (:mod:`.mpi`) every rank joins a communicator made by
``Create_dist_graph_adjacent`` whose edges are the graph's (worker i is rank
i + 1; the server, rank 0, has no edges and sits beside the pivot), and:

* a JOB for worker i goes from the server to the pivot's rank, then from
  rank to rank down the tree (each hop a neighbour of the topology) to i;
* worker i's result goes to its parent, and from parent to parent up to the
  pivot, which hands it to the server.

A worker forwards while it computes: it probes the topology between the
slices of its emulated compute time (``POLL`` seconds), so a hop adds the
real latency of one message and a probe.  The tree's times themselves stay
emulated as each job's delays (``Job.before``/``after``), which both runtimes
price the same way, so the MPI run still gives the simulator's iterates.  The
gradients are not merged on the way (the paper's partial sums): each travels
on its own, so the server receives what the simulator's events carry.

Cost per job of worker i at depth D_i: D_i hops down and D_i up, the vector
of d float64 and a header each; per step of a round on the tree, x crosses a tree
edge once for every worker below it.

Shutdown: a message may be between two workers when the server sends STOP.
Each worker then stops forwarding, sends DONE with how many messages it sent
to each worker on the topology, and keeps receiving (dropping) until it has
received what the server, summing every DONE, tells it to expect (FLUSH).
Every send is matched before any rank leaves the session.
"""
import time as clock

import numpy as np
from mpi4py import MPI

from ..collectives.tags import ASGD_DONE, ASGD_FLUSH, ASGD_GRAD, ASGD_ROUTE

POLL = 5e-4     # seconds between probes while draining
UP = -1         # a routed message's destination: the server, up the tree


def tree_of(method, timing):
    """{"pivot", "parent"} for a method whose vectors travel on a pivot's tree (``method.routed``), else None."""
    if not method.routed or timing.graph is None:
        return None
    return {"pivot": int(method.pivot), "parent": timing.graph.tree(int(method.pivot)).tolist()}


def topology(comm, graph):
    """The distributed-graph communicator of ``graph`` over ``comm`` (worker i on rank i + 1; rank 0 alone);
    collective over ``comm``."""
    neighbours = [] if comm.rank == 0 else [j + 1 for j in graph.neighbours(comm.rank - 1)]
    return comm.Create_dist_graph_adjacent(neighbours, neighbours, reorder=False)


def describe(tree, messages):
    """What a run's ``info["routes"]`` holds: the pivot, the topology's edges, the messages per directed edge."""
    n = len(tree["parent"])
    sent = [[int(i), int(j), int(messages[i, j])] for i, j in zip(*np.nonzero(messages))]
    return {"pivot": tree["pivot"], "parent": tree["parent"], "topology": f"MPI dist graph of {n} workers",
            "messages": sent}


class Router:
    """A worker's side of the tree for one session: forward what passes through, deliver what is its own."""

    def __init__(self, topo, comm, worker, tree, sends):
        self.topo, self.comm, self.worker, self.sends = topo, comm, worker, sends
        self.parent = np.asarray(tree["parent"], dtype=np.int64)
        self.pivot = int(tree["pivot"])
        self.sent = np.zeros(self.parent.size)  # messages sent to each worker on the topology (float64: DONE)
        self.received = 0
        self.status = MPI.Status()
        self.neighbours = {rank - 1 for rank in topo.Get_dist_neighbors()[1]}

    def _toward(self, destination):
        """The child of this worker on the tree's path down to ``destination``."""
        node = destination
        while self.parent[node] != self.worker:
            node = int(self.parent[node])
            if node < 0:
                raise RuntimeError(f"worker {destination} is not below worker {self.worker} on the pivot's tree")
        return node

    def _send(self, buffer, worker):
        if worker not in self.neighbours:
            raise RuntimeError(f"worker {self.worker} has no edge to worker {worker} on the topology")
        self.sends.send(self.topo, buffer, worker + 1, ASGD_ROUTE)
        self.sent[worker] += 1

    def route(self, buffer):
        """``buffer`` = [destination, message]: the message when it is this worker's, else None (forwarded)."""
        destination = int(buffer[0])
        if destination == self.worker:
            return buffer[1:]
        if destination != UP:
            self._send(buffer, self._toward(destination))
        elif self.worker == self.pivot:
            self.sends.send(self.comm, buffer[1:], 0, ASGD_GRAD)  # [origin, the GRAD]
        else:
            self._send(buffer, int(self.parent[self.worker]))
        return None

    def pump(self):
        """Forward what has arrived on the topology; the first JOB of this worker's own, or None."""
        while True:
            message = self.topo.Improbe(MPI.ANY_SOURCE, ASGD_ROUTE, self.status)
            if message is None:
                return None
            buffer = np.empty(self.status.Get_count(MPI.DOUBLE))
            message.Recv(buffer)
            self.received += 1
            own = self.route(buffer)
            if own is not None:
                return own

    def up(self, result):
        """Send this worker's GRAD ``result`` toward the server, tagged with its origin."""
        self.route(np.concatenate(([UP, self.worker], result)))

    def finish(self, idle_timeout):
        """After STOP: DONE with the counts sent, then drop what still arrives until FLUSH's count is in."""
        self.comm.Send(self.sent, 0, ASGD_DONE)
        expected, started, status = None, clock.monotonic(), self.status
        while expected is None or self.received < expected:
            message = self.topo.Improbe(MPI.ANY_SOURCE, ASGD_ROUTE, status)
            if message is not None:
                message.Recv(np.empty(status.Get_count(MPI.DOUBLE)))
                self.received += 1
                continue
            message = self.comm.Improbe(0, ASGD_FLUSH, status)
            if message is not None:
                count = np.empty(1)
                message.Recv(count)
                expected = int(count[0])
                continue
            if clock.monotonic() - started > idle_timeout:
                return  # the server has stopped waiting and reports the stuck workers
            clock.sleep(POLL)


def flush(comm, sends, counts):
    """The server's part of the shutdown: ``counts[i, j]`` (every DONE) sent from worker i to worker j; tell each
    worker how many it must receive before it stops."""
    for worker, expected in enumerate(np.asarray(counts).sum(axis=0)):
        sends.send(comm, np.array([expected], dtype=np.float64), worker + 1, ASGD_FLUSH)
