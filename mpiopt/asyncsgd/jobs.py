"""Jobs: what a worker is asked to do, and what it sends back, the same on both executors.

The classical methods give every worker the default job: one stochastic
gradient at the method's point, sent back densely.  A method that asks for
more (``Method.job(worker)``) gives a :class:`Job`:

* ``gradients`` b: b stochastic gradients at the point, summed, in the order
  the worker draws them from its noise stream;
* ``messages`` m with ``coordinates`` K: the sum is uploaded as m
  independent Random-K compressions (mpiopt.compression's ``randomk``,
  unbiased: K of d coordinates scaled by d/K), whose indices come from
  ``random_stream(seed, "randomk", f"asyncsgd-w{worker}-k{step}", j)`` for
  message j of the job computed at step ``step``: the server rebuilds them,
  so only the K values of each message travel;
* ``quantize`` 8 or 4 (with no messages): the sum is uploaded as one QSGD
  message (mpiopt.compression's ``qsgd``: l2 norm per bucket of 512, the
  rounding noise keyed by the run's seed, the worker and the step), its
  payload bytes travelling as they are; the timing model prices it as
  bytes / 8 coordinates;
* ``budget``: each gradient's attempt is abandoned when it would run longer
  than this and begun anew; only its time changes;
* ``trials`` with a budget: the b gradients are b attempts, and an attempt
  that runs over the budget is given up (MindFlayer SGD's worker): the job
  sends the sum of those that finished, and how many did;
* ``sample`` j >= 0 (a finite sum f = (1/m) sum_j f_j): the gradient of f_j
  alone, grad f_j(x), not a stochastic gradient; with ``difference`` the
  point the worker is given is two points [x, y] end to end and the job
  computes grad f_j(x) - grad f_j(y), priced as its b = 2 gradients
  (Freya PAGE's ComputeGradient and ComputeBatchDifference);
* ``before`` and ``after``: times the job waits before computing (the point
  travelling to the worker along a graph's tree) and after (its sum
  travelling back to the pivot), priced on top of the timing model's links
  (Fragile and Amelie SGD).

:func:`compute` is the worker's side (the values that travel) and
:func:`receive` the server's (the dense vector the method gets:
sum_j C_j(sum of the b gradients)).  The simulator calls both in turn, the MPI
runtime one on each side of a real message, so both give the method the
same bits.  How long a job takes is the timing model's (:mod:`.timing`).
"""
from dataclasses import dataclass

import numpy as np

from ..compression.base import pack, unpack
from ..compression.qsgd import QSGD
from ..compression.randomk import RandomK


@dataclass(frozen=True)
class Job:
    gradients: int = 1        # b: stochastic gradients at the point, summed
    messages: int = 0         # m: Random-K compressions of the sum uploaded (0: the sum, densely)
    coordinates: int = 0      # K, the coordinates of each message (with messages >= 1)
    budget: float = None      # an attempt longer than this is abandoned and begun anew (None: no budget)
    trials: bool = False      # with a budget: b attempts, those over it given up (not begun anew)
    quantize: int = 0         # 8 or 4: the sum uploaded as one QSGD message of that many bits a level
    sample: int = -1          # j >= 0: grad f_j of a finite sum (b = 1), not a stochastic gradient
    difference: bool = False  # with a sample: grad f_j(x) - grad f_j(y) at the point [x, y] (b = 2)
    before: float = 0.0       # time before computing: the point's travel to the worker (a graph's tree)
    after: float = 0.0        # time after computing: the result's travel to the pivot
    duration: float = None    # the job's whole time, planned by the method (a graph's link model), not priced

    HEADER_SIZE = 11  # the floats of :meth:`as_header`

    def __post_init__(self):
        if int(self.gradients) < 1 or int(self.messages) < 0:
            raise ValueError(f"a job needs gradients >= 1 and messages >= 0, got {self}")
        if self.messages and int(self.coordinates) < 1:
            raise ValueError(f"a job with messages needs coordinates >= 1, got {self}")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"a job's budget must be > 0, got {self.budget!r}")
        if self.trials and self.budget is None:
            raise ValueError("a job of trials needs a budget")
        if self.quantize not in (0, 4, 8) or (self.quantize and self.messages):
            raise ValueError(f"a job quantizes to 8 or 4 bits, without Random-K messages, got {self}")
        if self.sample >= 0 and (self.messages or self.quantize or self.budget is not None
                                 or self.gradients != (2 if self.difference else 1)):
            raise ValueError(f"a job of one sample's gradient (b = 1, or b = 2 for a difference) is sent densely "
                             f"without a budget, got {self}")
        if self.difference and self.sample < 0:
            raise ValueError(f"a difference job needs a sample j >= 0, got {self}")
        if not (0 <= self.before < np.inf and 0 <= self.after < np.inf):
            raise ValueError(f"a job's travel times must be finite and >= 0, got {self}")
        if self.duration is not None and not 0 <= self.duration < np.inf:
            raise ValueError(f"a job's planned duration must be finite and >= 0, got {self}")

    @property
    def plain(self):
        """One gradient, sent densely, no budget: the classical methods' job."""
        return self == PLAIN

    def as_header(self):
        """The job as eleven float64 (b, m, K, budget or NaN, trials, quantize, sample, difference, before,
        after, duration or NaN) for an MPI message or a checkpoint."""
        return [self.gradients, self.messages, self.coordinates, np.nan if self.budget is None else self.budget,
                float(self.trials), self.quantize, self.sample, float(self.difference), self.before, self.after,
                np.nan if self.duration is None else self.duration]

    @classmethod
    def from_header(cls, values):
        b, m, k, budget, trials, bits, sample, difference, before, after, duration = (float(v) for v in values)
        return cls(int(b), int(m), int(k), None if np.isnan(budget) else budget, bool(trials), int(bits),
                   int(sample), bool(difference), before, after, None if np.isnan(duration) else duration)

    def uploaded(self, dim):
        """What the upload costs, in coordinates (float64 values): m K, the QSGD payload's bytes / 8, or d."""
        if self.messages:
            return self.messages * self.coordinates
        if self.quantize:
            return _qsgd(self.quantize, 0).payload_bytes(dim, np.float64) / 8
        return dim

    def to_dict(self):
        return {"gradients": self.gradients, "messages": self.messages, "coordinates": self.coordinates,
                "budget": self.budget, "trials": self.trials, "quantize": self.quantize, "sample": self.sample,
                "difference": self.difference, "before": self.before, "after": self.after, "duration": self.duration}


PLAIN = Job()
_COMPRESSORS = {}


def _randomk(coordinates, seed):
    key = (int(coordinates), int(seed))
    if key not in _COMPRESSORS:
        _COMPRESSORS[key] = RandomK(k=int(coordinates), seed=int(seed))
    return _COMPRESSORS[key]


def _qsgd(bits, seed):
    key = ("qsgd", int(bits), int(seed))
    if key not in _COMPRESSORS:
        _COMPRESSORS[key] = QSGD(bits=int(bits), seed=int(seed))
    return _COMPRESSORS[key]


def _qsgd_context(job, dim, worker, step, seed):
    compressor = _qsgd(job.quantize, seed)
    compressor.worker = int(worker)  # the worker's own rounding noise
    return compressor, compressor.context((dim,), np.float64, f"asyncsgd-k{int(step)}", 0)


_LAST_CONTEXTS = {}  # the last job's contexts: the simulator rebuilds them at once on the server's side


def _contexts(job, dim, worker, step, seed):
    compressor = _randomk(job.coordinates, seed)
    key = (job.coordinates, job.messages, int(dim), int(worker), int(step), int(seed))
    if key not in _LAST_CONTEXTS:
        name = f"asyncsgd-w{int(worker)}-k{int(step)}"
        _LAST_CONTEXTS.clear()
        _LAST_CONTEXTS[key] = [compressor.context((dim,), np.float64, name, j) for j in range(job.messages)]
    return compressor, _LAST_CONTEXTS[key]


def compute(problem, job, x, noise, worker, step, seed, done=None):
    """The worker's part: the sum of ``done`` (None: ``job.gradients``) stochastic gradients at ``x`` (drawn
    from ``noise``; zeros when none finished), then, with messages, the K values of each of its m
    compressions, concatenated."""
    if job.sample >= 0:  # one function of a finite sum, at x or (a difference) at [x, y]
        if not job.difference:
            return problem.sample_grad(job.sample, x)
        half = x.size // 2
        return problem.sample_grad(job.sample, x[:half]) - problem.sample_grad(job.sample, x[half:])
    done = job.gradients if done is None else int(done)
    if done == 0:
        total = np.zeros(problem.dim)
    else:
        total = problem.worker_grad(worker, x, noise)
    for _ in range(done - 1):
        total = total + problem.worker_grad(worker, x, noise)
    if job.quantize:
        compressor, ctx = _qsgd_context(job, total.size, worker, step, seed)
        packed = pack(compressor.encode(total, ctx))
        padded = np.zeros(-(-packed.size // 8) * 8, dtype=np.uint8)
        padded[:packed.size] = packed
        return padded.view(np.float64)  # the payload's bytes, carried as float64 words
    if not job.messages:
        return total
    compressor, contexts = _contexts(job, total.size, worker, step, seed)
    return np.concatenate([compressor.encode(total, ctx)[0] for ctx in contexts])


def receive(job, sent, dim, worker, step, seed):
    """The server's part: the dense vector of what :func:`compute` sent (sum_j C_j(sum of the gradients))."""
    if job.quantize:
        compressor, ctx = _qsgd_context(job, dim, worker, step, seed)
        payload = unpack(np.ascontiguousarray(sent).view(np.uint8)[:ctx.payload_bytes], ctx)
        return compressor.decompress(payload, ctx)
    if not job.messages:
        return sent
    compressor, contexts = _contexts(job, dim, worker, step, seed)
    total, k = np.zeros(dim), job.coordinates
    for j, ctx in enumerate(contexts):
        compressor.accumulate((sent[j * k:(j + 1) * k],), ctx, total)
    return total


def sent_size(job, dim):
    """The float64 values a job's result sends: m K, the QSGD payload's words, or d when dense."""
    if job.quantize:
        return -(-_qsgd(job.quantize, 0).payload_bytes(dim, np.float64) // 8)
    return job.messages * job.coordinates if job.messages else dim
