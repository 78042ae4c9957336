"""A shim for command-line tests that need a run's setup, checkpoints or optional dependencies under control.

:func:`shim_environment` writes a ``sitecustomize.py`` into a folder and returns the environment that puts it
first on every rank's path (hydra passes the environment on).  Through an audit hook it can

* pause each rank at its first import of a module (``pause_at``; numpy, the start of every command's setup)
  until the rank has received a signal (mpiopt's pending signal flags) or a minute has passed: it writes
  ``ready.RANK`` first, so a test signals while the run is provably still starting;
* keep a copy ``NAME.1``, ``NAME.2``, ... of every version of a file written atomically (``copy``: the
  checkpoint's name), so a test reads each checkpoint a run wrote, not just the last;
* make modules unimportable (``block``), as on a machine where they are not installed.

Nothing here depends on timing: tests wait for these files and for the process, with limits that hold on a
machine five times slower.
"""
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
'''


def shim_environment(folder, pause_at=None, copy=None, block=()):
    """The variables that put a run under the shim (see the module docstring); ``folder`` holds its files."""
    folder = os.fspath(folder)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as stream:
        stream.write(SITECUSTOMIZE)
    path = os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")]))
    return dict(PYTHONPATH=path, MPIOPT_SHIM=folder, MPIOPT_SHIM_PAUSE=pause_at or "", MPIOPT_SHIM_COPY=copy or "",
                MPIOPT_SHIM_BLOCK=",".join(block))


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

    def signal_in_setup(self, number):
        """Wait for every rank to pause in its setup, then send ``number`` to mpiexec (which forwards it)."""
        self.wait_for(lambda: all(os.path.exists(self.path(f"ready.{rank}")) for rank in range(self.ranks)),
                      "the ranks never paused in their setup")
        self.process.send_signal(number)

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


def checkpoint_meta(path):
    """The JSON metadata of a checkpoint file."""
    with np.load(path, allow_pickle=False) as archive:
        return json.loads(str(archive["meta"]))
