"""mpiopt's MPI ranks inside one benchopt solver process.

benchopt runs every solver inside one Python process (its own, or a joblib worker with -j) and times
``Solver.run`` there.  mpiopt needs its ranks, so that process becomes rank 0 and starts the others once,
with MPI_Comm_spawn (``MPI.COMM_SELF.Spawn`` from the singleton MPI process), then merges parent and
children into one intracommunicator of ``size`` ranks:

* ``Ranks.get(size)``: the process's ranks (started on first use, kept for the process's life, stopped at
  exit);
* ``ranks.scatter(X, y)``: each worker rank gets its block of rows (``mpiopt.core.partition.row_range``),
  sent once per data set, untimed (like the other solvers' CSC copies); rank 0 keeps its own block;
* ``ranks.prepare(call)`` then ``ranks.solve(call)``: the workers receive the call (function name and
  keywords) before the clock starts, and wait in a blocking broadcast until rank 0, inside the timed
  ``run``, releases them; every rank then calls the same ``mpiopt.admm`` function on its rows (a
  collective solve) and ends in a barrier, so the time is the slowest rank's whole solve.

Idle workers sleep between polls (up to 20 ms, 0.1 ms right after a call), so they take no measurable
CPU while the other solvers run on the same cores.  A worker that fails prints its traceback and aborts
the job: rank 0 would otherwise wait in a collective for ever.

Running this file is the worker's main program (MPICH's spawn starts it as a script).
"""
import atexit
import os
import sys
import time

COMMAND = 17  # the tag of rank 0's commands to the workers


class Ranks:
    _current = None

    @classmethod
    def get(cls, size):
        """The process's ``size`` ranks (this process is rank 0); a pool of another size is stopped."""
        if cls._current is not None and cls._current.comm.size != size:
            cls._current.stop()
        if cls._current is None:
            cls._current = cls(size)
        return cls._current

    def __init__(self, size):
        from mpi4py import MPI
        self.inter = None
        if size == 1:
            self.comm = MPI.COMM_SELF
        else:
            # A singleton MPI process spawns through an mpiexec on PATH: pip's MPICH puts one beside python.
            bin_dir = os.path.dirname(sys.executable)
            os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
            self.inter = MPI.COMM_SELF.Spawn(sys.executable, args=[os.path.abspath(__file__), str(os.getpid())],
                                             maxprocs=size - 1)
            self.comm = self.inter.Merge(high=False)
            atexit.register(self.stop)
        self.A_local = self.b_local = None
        self.prepared = None

    def _command(self, *message):
        for rank in range(1, self.comm.size):
            self.comm.send(message, dest=rank, tag=COMMAND)

    def scatter(self, X, y):
        """Every rank's block of the rows of the CSR (or dense) X and of y; rank 0 keeps its own."""
        from mpiopt.core.partition import row_range
        m = X.shape[0]
        for rank in range(1, self.comm.size):
            start, stop = row_range(m, rank, self.comm.size)
            self.comm.send(("data", X[start:stop], y[start:stop].copy()), dest=rank, tag=COMMAND)
        start, stop = row_range(m, 0, self.comm.size)
        self.A_local, self.b_local = X[start:stop], y[start:stop].copy()
        self.comm.Barrier()

    def prepare(self, function, keywords):
        """Untimed: the workers get the call and wait for :meth:`solve` in a blocking broadcast."""
        self._command("solve", function, keywords)
        self.prepared = (function, keywords)

    def solve(self, function, keywords):
        """Timed: release the workers (sending them the call first if :meth:`prepare` did not), solve on every
        rank, wait for the slowest."""
        if self.prepared != (function, keywords):
            self.prepare(function, keywords)
        self.prepared = None
        self.comm.bcast(True, root=0)
        result = call(function, self.A_local, self.b_local, self.comm, keywords)
        self.comm.Barrier()
        return result

    def stop(self):
        if self.inter is not None:
            self._command("stop")
            self.comm.Free()
            self.inter.Disconnect()
            self.inter = None
        if Ranks._current is self:
            Ranks._current = None


def call(function, A_local, b_local, comm, keywords):
    import mpiopt.admm
    return getattr(mpiopt.admm, function)(A_local, b_local, comm=comm, **keywords)


def wait_for_command(comm, parent_pid):
    """Rank 0's next message, polling: 0.1 ms apart at first, backing off to 20 ms while idle; None when
    rank 0's process has gone (killed benchopt: nothing left to wait for)."""
    nap, checked = 1e-4, time.monotonic()
    while not comm.Iprobe(source=0, tag=COMMAND):
        time.sleep(nap)
        nap = min(2e-2, nap * 1.05)
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                return None
    return comm.recv(source=0, tag=COMMAND)


def worker(parent_pid):
    from mpi4py import MPI
    parent = MPI.Comm.Get_parent()
    comm = parent.Merge(high=True)
    A_local = b_local = None
    try:
        while True:
            message = wait_for_command(comm, parent_pid)
            if message is None:
                os._exit(1)
            if message[0] == "stop":
                break
            if message[0] == "data":
                _, A_local, b_local = message
                comm.Barrier()
            else:
                _, function, keywords = message
                comm.bcast(None, root=0)  # released inside rank 0's timed run
                call(function, A_local, b_local, comm, keywords)
                comm.Barrier()
    except BaseException:  # noqa: BLE001 - rank 0 waits in a collective: say why and end the job
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
    comm.Free()
    parent.Disconnect()


if __name__ == "__main__":
    # One BLAS thread per rank, set before numpy loads: the ranks share the machine's cores.
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"
    worker(int(sys.argv[1]))
