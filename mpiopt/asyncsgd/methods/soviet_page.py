"""Soviet PAGE, the synchronous baseline of Freya PAGE (Tyurin, Gruntkowska and Richtarik, NeurIPS 2024):
PAGE (Li et al. 2021) with each phase's work split evenly over the workers, and the server waiting for all.

The estimator, the coin, S, p and gamma are Freya PAGE's (:mod:`.freya`);
only the collection differs:

* ComputeGradient(x_{k+1}): [m] is cut into n consecutive blocks B_i
  (``numpy.array_split``: the first m mod n blocks one longer); worker i
  computes grad f_j for the j of its own block one after another; the
  phase ends once all m are in: g_{k+1} = (sum of the m gradients) / m;
* ComputeBatchDifference(S, x_{k+1}, x_k): j_1, ..., j_S ~ U([m]) are drawn
  as the phase starts; worker i computes the differences l = i, i + n,
  i + 2n, ... (grad f_{j_l}(x_{k+1}) - grad f_{j_l}(x_k)), and the phase
  ends once all S are in: g_{k+1} = g_k + (sum of the S differences) / S.

A worker whose share is done waits idle for the others: nobody takes a slow
worker's share, which is what Freya PAGE changes.  With fixed times h_i (a
difference costs two gradients) a phase takes the slowest share,

    t_full = max_i h_i |B_i|,   t_diff = max_i 2 h_i |D_i|,   |D_i| = ceil((S - i) / n)  (0-based i)

    T_Soviet = t_full + K (p t_full + (1 - p) t_diff),   K = 2 Delta / (gamma eps)

which for m, S >= n is the paper's Theta(h_n m / n + (L_+- Delta / eps) h_n sqrt(m) / n) against Freya's
t(m) + (L_+- Delta / eps) t(sqrt(m)).  Per phase the server receives m gradients or S differences, and
sends x (with x_k for a difference) to each worker once a job.

Randomness, from the stream ``random_stream(seed, "asyncsgd-freya-page")``:
after each step the coin, then, for a difference phase, the S indices in one
``integers(m, size=S)`` draw.
"""
import numpy as np

from ...core.registry import register
from ..jobs import Job
from .freya import FreyaPAGE


def shares(count, n_workers):
    """How many of ``count`` items worker i gets when they are dealt out one each in worker order."""
    i = np.arange(n_workers)
    return np.maximum(0, -(-(count - i) // n_workers))


def soviet_time(times, m, batch, probability, steps):
    """T_Soviet = t_full + K (p t_full + (1 - p) t_diff) for ``steps`` K, with fixed ``times`` h_i."""
    h = np.asarray(times, dtype=np.float64)
    full = float(np.max(h * shares(m, h.size)))
    difference = float(np.max(2 * h * shares(batch, h.size)))
    return float(full + steps * (probability * full + (1 - probability) * difference))


@register("asyncsgd-method", "soviet-page")
class SovietPAGE(FreyaPAGE):
    name = "soviet-page"

    def _begin_full(self):
        self.left = self.samples
        blocks = shares(self.samples, self.n_workers)
        self.todo = np.arange(self.samples, dtype=np.int64)  # worker i's j are todo[start[i]:end[i]]
        self._deal(blocks)

    def _begin_difference(self):
        draws = self.rng.integers(self.samples, size=self.batch_size)
        self.todo = np.concatenate([draws[i::self.n_workers] for i in range(self.n_workers)]).astype(np.int64)
        self._deal(shares(self.batch_size, self.n_workers))

    def _deal(self, counts):
        self.end = np.cumsum(counts).astype(np.int64)
        self.next = self.end - counts   # the next of each worker's share to hand out

    def predicted(self, problem, timing, epsilon):
        times = timing.plain_model().mean(np.arange(1, self.n_workers + 1))
        steps = int(np.ceil(2 * problem.Delta / (self.step_size * epsilon)))
        return {"soviet-page": soviet_time(times, self.samples, self.batch_size, self.probability, steps)}

    def job(self, worker):
        if self.next[worker] >= self.end[worker]:
            return None  # its share is done: it waits for the others
        j = int(self.todo[self.next[worker]])
        self.next[worker] += 1
        self.assigned[worker] = j
        return Job(sample=j) if self.full else Job(gradients=2, sample=j, difference=True)

    def arrive(self, worker, grad, k_at):
        if k_at != self.k:  # a result of an older phase (the runtime had not cancelled it yet)
            self.discarded[worker] += 1
            return []
        self.total += grad
        self.accepted[worker] += 1
        if self.full:
            self.left -= 1
            if self.left:
                return [worker]
            self.estimate = self.total / self.samples
        else:
            self.count += 1
            if self.count < self.batch_size:
                return [worker]
            self.estimate = self.estimate + self.total / self.batch_size
        return self._end_phase()
