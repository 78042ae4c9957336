"""A shim for command-line tests that need a run's setup, checkpoints or optional dependencies under control.

:func:`shim_environment` writes a ``sitecustomize.py`` into a folder and returns the environment that puts it
first on every rank's path (hydra passes the environment on).  Through an audit hook it can

* write ``pid.RANK`` (the rank's process id) as soon as Python starts, so a test can signal each rank itself;
* pause each rank (or those of ``pause_ranks``) at its first import of a module (``pause_at``: mpi4py, before
  MPI starts; numpy, the start of every command's setup) until the rank has received a signal (mpiopt's
  pending signal flags) or a minute has passed: it writes ``ready.RANK`` first, so a test signals while the
  run is provably still starting;
* keep a copy ``NAME.1``, ``NAME.2``, ... of every version of a file written atomically (``copy``: the
  checkpoint's name), so a test reads each checkpoint a run wrote, not just the last;
* make modules unimportable (``block``), as on a machine where they are not installed.

Nothing here depends on timing: tests wait for these files and for the process, with limits that hold on a
machine five times slower.
"""
import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

SITECUSTOMIZE = r'''
import os
import shutil
import sys
import time

_folder = os.environ["MPIOPT_SHIM"]
_rank = os.environ.get("PMI_RANK", "0")
_pause = os.environ.get("MPIOPT_SHIM_PAUSE")
if os.environ.get("MPIOPT_SHIM_PAUSE_RANKS") and _rank not in os.environ["MPIOPT_SHIM_PAUSE_RANKS"].split(","):
    _pause = None
_copy = os.environ.get("MPIOPT_SHIM_COPY")
_block = set(filter(None, os.environ.get("MPIOPT_SHIM_BLOCK", "").split(",")))
_state = {"paused": False, "copies": 0}


def _hook(event, args):
    if event == "import" and _pause and args[0] == _pause and not _state["paused"]:
        _state["paused"] = True
        with open(os.path.join(_folder, "ready." + _rank), "w") as stream:
            stream.write(str(os.getpid()))
        signals = sys.modules.get("mpiopt.core.signals")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (signals and hasattr(signals, "pending")
                                                   and any(signals.pending())):
            time.sleep(0.01)
    elif event == "os.rename" and _copy and os.path.basename(os.fspath(args[1])) == _copy:
        _state["copies"] += 1
        shutil.copyfile(args[0], os.path.join(_folder, "%s.%d" % (_copy, _state["copies"])))


class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _block:
            raise ModuleNotFoundError("No module named %r (hidden by the test's shim)" % name, name=name)
        return None


sys.addaudithook(_hook)
sys.meta_path.insert(0, _Blocked())
with open(os.path.join(_folder, "pid." + _rank + ".part"), "w") as _stream:
    _stream.write(str(os.getpid()))
os.rename(os.path.join(_folder, "pid." + _rank + ".part"), os.path.join(_folder, "pid." + _rank))
'''


def shim_environment(folder, pause_at=None, copy=None, block=(), pause_ranks=None):
    """The variables that put a run under the shim (see the module docstring); ``folder`` holds its files."""
    folder = os.fspath(folder)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as stream:
        stream.write(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))
    return dict(PYTHONPATH=path, MPIOPT_SHIM=folder, MPIOPT_SHIM_PAUSE=pause_at or "", MPIOPT_SHIM_COPY=copy or "",
                MPIOPT_SHIM_BLOCK=",".join(block),
                MPIOPT_SHIM_PAUSE_RANKS=",".join(map(str, pause_ranks)) if pause_ranks is not None else "")


class Run:
    """``mpiexec -n ranks python arguments...`` in the background, under the shim, in ``folder`` (its working
    folder, which also holds the shim's files and the run's stdout and stderr)."""

    def __init__(self, ranks, arguments, folder, **shim):
        from conftest import MPIEXEC
        if not MPIEXEC.exists():
            pytest.skip(f"no mpiexec beside {sys.executable}")
        self.ranks, self.folder = ranks, os.fspath(folder)
        environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                           **shim_environment(folder, **shim))
        with open(self.path("stdout"), "w") as out, open(self.path("stderr"), "w") as err:
            self.process = subprocess.Popen([str(MPIEXEC), "-n", str(ranks), sys.executable, *arguments],
                                            env=environment, stdout=out, stderr=err, cwd=self.folder)

    def path(self, name):
        return os.path.join(self.folder, name)

    def output(self):
        """(stdout, stderr) so far."""
        return tuple(open(self.path(name)).read() for name in ("stdout", "stderr"))

    def wait_for(self, condition, what, timeout=120):
        """Wait until ``condition()`` holds; fail (and stop the run) if the run ends first or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                ended = self.process.poll() is not None
                self.stop()
                pytest.fail(f"{what}: the run {'ended' if ended else 'went on'}; stderr:\n{self.output()[1]}")
            time.sleep(0.02)

    def signal_in_setup(self, number, ranks=None):
        """Wait for every rank (or those of ``ranks``) to pause in its setup, then send ``number`` to mpiexec
        (which forwards it to every rank), or with ``ranks`` to those ranks' processes only."""
        waited = range(self.ranks) if ranks is None else ranks
        self.wait_for(lambda: all(os.path.exists(self.path(f"ready.{rank}")) for rank in waited),
                      "the ranks never paused in their setup")
        if ranks is None:
            self.process.send_signal(number)
        else:
            self.signal_ranks(number, ranks)

    def pids(self, ranks=None):
        """The process ids of ``ranks`` (default: all), once each has started."""
        ranks = range(self.ranks) if ranks is None else ranks
        self.wait_for(lambda: all(os.path.exists(self.path(f"pid.{rank}")) for rank in ranks),
                      "the ranks never started")
        return [int(open(self.path(f"pid.{rank}")).read()) for rank in ranks]

    def signal_ranks(self, number, ranks=None):
        """Send ``number`` to each rank's process (not through mpiexec); the ranks that were still running."""
        sent = []
        for rank, pid in zip(range(self.ranks) if ranks is None else ranks, self.pids(ranks)):
            try:
                if b"mpiopt" in open(f"/proc/{pid}/cmdline", "rb").read():  # not a process that took its id
                    os.kill(pid, number)
                    sent.append(rank)
            except (ProcessLookupError, FileNotFoundError):  # that rank has ended
                pass
        return sent

    def finish(self, timeout=300):
        """Wait for the run to end (it is stopped after ``timeout`` s); its exit status."""
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.stop()

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=60)


@contextlib.contextmanager
def busy_machine(loops=2):
    """``loops`` busy loops beside the block, each a process of its own (that ends by itself after 15 minutes
    at most, should the block's end never come)."""
    spin = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end:\n    pass\n"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(loops)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=60)


def checkpoint_meta(path):
    """The JSON metadata of a checkpoint file."""
    with np.load(path, allow_pickle=False) as archive:
        return json.loads(str(archive["meta"]))
