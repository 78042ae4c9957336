"""Bytes per rank of what the trainer holds: parameters, gradients, optimizer state, buffers.

ZeRO's accounting (Rajbhandari et al. 2020, section 3): with n parameters, K
bytes of optimizer state per parameter (Adam in float64: 16; SGD with
momentum: 8) and p ranks, the model states of one rank take, in float64,

    stage 0 (DDP)           8n + 8n + Kn
    stage 1 (P_os)          8n + 8n + Kn/p
    stage 2 (P_os+g)        8n + 8n/p + Kn/p
    stage 3 (P_os+g+p)      8n/p + 8n/p + Kn/p

The account counts the numpy arrays the trainer keeps (``nbytes``): the
persistent ones by category, set whenever they change, and ``buffers`` for the
temporary ones (a layer's gradient on its way to a reduce-scatter, a layer's
parameters gathered for its forward or backward, a shard packed for the
optimizer), added when made and taken off when released.  Each category keeps
its peak, and so does the total.  ZeRO counts its buffers apart from the
model states in the same way; ours hold at most one packed shard and one
bucket (stages 1, 2: the optimizer's view and an all-gather's result), two
layers' gradients (stages 2, 3: the one being reduced, the one being computed)
and two layers' parameters (stage 3: the one in use, the one prefetched).

With ``trace_memory``, tracemalloc follows every allocation (numpy reports its
arrays to it) as a cross-check; its peak also holds the batch and the
activations, which are the same at any rank count.
"""
import threading
import tracemalloc

CATEGORIES = ("params", "gradients", "optimizer_state", "buffers")


class MemoryAccount:
    def __init__(self, trace=False):
        self.current = dict.fromkeys(CATEGORIES, 0)
        self.peak = dict.fromkeys(CATEGORIES, 0)
        self.peak_total = 0
        self.lock = threading.Lock()  # the communication thread adds and takes off its buffers too
        self.trace = trace and not tracemalloc.is_tracing()
        if self.trace:
            tracemalloc.start()
            self.baseline = tracemalloc.get_traced_memory()[0]

    def _update(self, category):
        self.peak[category] = max(self.peak[category], self.current[category])
        self.peak_total = max(self.peak_total, sum(self.current.values()))

    def set(self, category, *arrays):
        """The arrays of a persistent category, replacing what it held."""
        with self.lock:
            self.current[category] = sum(int(array.nbytes) for array in arrays)
            self._update(category)

    def add(self, nbytes, category="buffers"):
        """A temporary array of ``nbytes`` made (positive) or released (negative)."""
        with self.lock:
            self.current[category] += int(nbytes)
            self._update(category)

    def report(self):
        """Peak bytes per category and in all, and tracemalloc's peak above the start when tracing."""
        report = {f"{category}_bytes": self.peak[category] for category in CATEGORIES}
        report["model_states_bytes"] = sum(self.peak[category] for category in CATEGORIES[:3])
        report["peak_total_bytes"] = self.peak_total
        if self.trace:
            report["tracemalloc_peak_bytes"] = tracemalloc.get_traced_memory()[1] - self.baseline
        return report

    def close(self):
        if self.trace:
            tracemalloc.stop()
            self.trace = False
