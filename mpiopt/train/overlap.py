"""Communication that overlaps computation: collectives run in order on one background thread.

PyTorch DDP starts the all-reduce of a gradient bucket as soon as the
backward pass has filled it and waits for all of them only before the
optimizer step (Li et al. 2020, section 3.2.3).  Here a bucket's collective
(any reducer's ``allreduce``, ``reduce_scatter`` or ``allgather``, compressed
or not) is handed to a single worker thread, which runs the collectives one by
one in the order they were submitted; every rank submits the same collectives
in the same order, so they match across ranks.  Meanwhile the main thread goes
on with the backward pass (numpy releases the interpreter lock in its
kernels, mpi4py in its MPI calls).  MPI must then be initialized with
MPI_THREAD_MULTIPLE (mpi4py's default); when it is not, the collectives run
at once, in the main thread, and the result says so.

What the overlap saved is measured, not assumed: ``communication`` is the
seconds the collectives took (on the worker), ``exposed`` the part of them
that ran while the main thread was waiting, and ``hidden = communication -
exposed`` the part that ran while the main thread computed; so
0 <= exposed <= communication, per collective, per step and in all.  Every
collective's run and every wait of the main thread is kept as an interval of
the one clock (``perf_counter``), and when the queue has drained each run is
intersected with the waits.  ``waited`` is all the main thread's waiting: on a
busy machine it also holds seconds when no collective ran (the worker not yet
scheduled, the hand-back of a result), which are neither communication nor
hidden; counting them as exposed made exposed exceed communication and the
hidden part read 0.  Without overlap every second of communication is exposed.

On a GPU (``device``: the CUDA device id of the run) the worker thread makes
that device current before each collective: CuPy's current device is per
thread, and the reducer allocates its results on the current device.
"""
import concurrent.futures
import time

from mpi4py import MPI


def threads_allowed():
    """Whether MPI allows collectives on a second thread (MPI_THREAD_MULTIPLE)."""
    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


class Pending:
    """One submitted collective: its future (or its result, when it ran at once) and its label."""

    def __init__(self, label, future=None, value=None):
        self.label, self.future, self.value = label, future, value


class CommunicationQueue:
    """Runs collectives in submission order, on a background thread when ``overlap`` (and MPI) allow it.

    ``labels`` count the seconds per label (a bucket's index), both of the
    collectives and of the waits for them.
    """

    def __init__(self, overlap, device=None):
        self.threaded = bool(overlap) and threads_allowed()
        self.device = device
        self.note = None
        if overlap and not self.threaded:
            self.note = (f"no overlap: MPI runs at thread level {MPI.Query_thread()}, not MPI_THREAD_MULTIPLE "
                         f"({MPI.THREAD_MULTIPLE}); the collectives run in the main thread")
        self.executor = (concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mpiopt-communication")
                         if self.threaded else None)
        self.pending = []
        self.communication = self.exposed = self.waited = 0.0
        self.by_label = {}  # label: [communication seconds, exposed seconds]
        self.runs = []      # (label, start, end) of the collectives run since the queue last drained (the worker's)
        self.waits = []     # (start, end) of the main thread's waits since then

    def _timed(self, label, task, args):
        tick = time.perf_counter()
        if self.device is None:
            value = task(*args)
        else:
            import cupy
            with cupy.cuda.Device(self.device):
                value = task(*args)
        tock = time.perf_counter()
        self.communication += tock - tick  # written by the one worker only; read after the waits
        self.by_label.setdefault(label, [0.0, 0.0])[0] += tock - tick
        self.runs.append((label, tick, tock))
        return value

    def submit(self, label, task, *args):
        """Start ``task(*args)`` (a collective); returns a handle for :meth:`wait`."""
        if self.threaded:
            handle = Pending(label, future=self.executor.submit(self._timed, label, task, args))
        else:  # the main thread runs it: it waits for all of it
            tick = time.perf_counter()
            handle = Pending(label, value=self._timed(label, task, args))
            self._waited(tick)
        self.pending.append(handle)
        return handle

    def _waited(self, tick):
        tock = time.perf_counter()
        self.waited += tock - tick
        self.waits.append((tick, tock))

    def wait(self, handle):
        """The task's return value, once it has run (the part of the collectives that ran during the wait
        counts as exposed, once the queue has drained)."""
        if handle.future is not None:
            tick = time.perf_counter()
            handle.value = handle.future.result()
            self._waited(tick)
            handle.future = None
        if handle in self.pending:
            self.pending.remove(handle)
        if not self.pending:
            self._settle()
        return handle.value

    def _settle(self):
        """Every collective run since the queue last drained is now over: its exposed seconds are its
        intersection with the main thread's waits (both lists in time order, so one sweep)."""
        waits, first = self.waits, 0
        for label, start, end in self.runs:
            while first < len(waits) and waits[first][1] <= start:
                first += 1
            exposed, index = 0.0, first
            while index < len(waits) and waits[index][0] < end:
                exposed += max(0.0, min(end, waits[index][1]) - max(start, waits[index][0]))
                index += 1
            self.exposed += exposed
            self.by_label[label][1] += exposed
        self.runs, self.waits = [], []

    def wait_all(self):
        """Wait for everything submitted, in order."""
        while self.pending:
            self.wait(self.pending[0])

    def close(self):
        if self.executor is not None:
            self.executor.shutdown(wait=True)
            self.executor = None
