"""Checkpoints of the ADMM state: one npz file, written atomically, read without pickle.

Rank 0 gathers z, rho, the iteration, the residual history and every rank's u_i,
x_i and x-step warm start, and writes them to a temporary file beside the target
before renaming it, so a reader sees the old checkpoint or the new one, never
half of one.  The file also holds a fingerprint of the problem: the rank count,
and for each rank its rows, the columns, the loss and its parameters, the
intercept, the penalty and its parameters at full precision (floats as exact
JSON numbers, arrays such as group labels by their SHA-256) and a checksum of
the shard's data.  A checkpoint of a different problem or rank count is refused
with a clear error on every rank, as is one that cannot be read; the file is
then left untouched.  Loading uses ``numpy.load(allow_pickle=False)``; the
fingerprint and history are stored as JSON text.
"""
import io
import json
import os

import numpy as np

from ..core.backend import to_host
from ..core.comm import check_collectively
from ..core.io import check_writable, write_atomic

FORMAT = "mpiopt-admm-checkpoint-2"  # 2: exact problem parameters in the fingerprint


class Checkpointer:
    """Writes and reads one problem's checkpoint; every method is collective over ``comm``.

    Construction checks, on rank 0, that the file can be written, so that a run
    fails before its first iteration rather than at its first checkpoint.  Any
    failure to write or read reaches every rank as the same CollectiveError; a
    file that cannot be read is left as it is.
    """

    def __init__(self, path, comm, fingerprint):
        self.path, self.comm = os.fspath(path), comm
        gathered = comm.allgather(fingerprint)
        self.fingerprint = {"format": FORMAT, "ranks": comm.size, "shards": gathered}
        self.writes = 0
        check_writable(self.path, comm, what="checkpoint")

    def write(self, state):
        """Gather every rank's part and write the file atomically on rank 0."""
        mine = {"u": to_host(state["u"]), "x": to_host(state["x"]),
                **{f"loss_{key}": to_host(value) for key, value in state["loss"].items()},
                **{f"aa_{key}": to_host(value) for key, value in state["anderson"].items()}}
        parts = self.comm.gather(mine, root=0)
        problem = None
        if self.comm.rank == 0:
            arrays = {"z": to_host(state["z"]), "z_plain": to_host(state["z_plain"]),
                      "meta": np.array(json.dumps({
                          "fingerprint": self.fingerprint, "rho": state["rho"], "iteration": state["iteration"],
                          "status": state["status"],
                          "previous_residuals": list(state["previous_residuals"]),
                          "rho_changes": state["rho_changes"], "history": state["history"],
                          "objective_history": state["objective_history"]}))}
            for rank, part in enumerate(parts):
                for key, value in part.items():
                    arrays[f"rank{rank}_{key}"] = value
            try:
                buffer = io.BytesIO()
                np.savez(buffer, **arrays)
                write_atomic(self.path, buffer.getvalue(), mode="wb")
            except Exception as error:  # a full disk, a folder gone or made read-only since the start
                problem = f"cannot write checkpoint {self.path}: {_reason(error)}"
        check_collectively(self.comm, problem)
        self.writes += 1

    def load(self):
        """This rank's state from the file, or None when there is no file.

        Raises the same CollectiveError on every rank when the file belongs to
        another problem or rank count, or cannot be read (truncated, corrupt,
        an array missing); the file is not modified.
        """
        exists = self.comm.bcast(os.path.exists(self.path) if self.comm.rank == 0 else None, root=0)
        if not exists:
            return None
        problem, parts, shared = None, None, None
        if self.comm.rank == 0:
            try:
                problem, parts, shared = self._read()
            except Exception as error:  # BadZipFile, a bad CRC, zlib or JSON errors, a missing array, ...
                problem = f"cannot read checkpoint {self.path}: {_reason(error)}"
        check_collectively(self.comm, problem)
        part = self.comm.scatter(parts, root=0)
        shared = self.comm.bcast(shared, root=0)
        return {"z": shared["z"], "z_plain": shared["z_plain"], "u": part["u"], "x": part["x"], "rho": shared["rho"],
                "iteration": shared["iteration"], "status": shared.get("status"),
                "previous_residuals": shared["previous_residuals"],
                "rho_changes": shared["rho_changes"], "history": shared["history"],
                "objective_history": shared["objective_history"],
                "loss": {key[len("loss_"):]: value for key, value in part.items() if key.startswith("loss_")},
                "anderson": {key[len("aa_"):]: value for key, value in part.items() if key.startswith("aa_")}}

    def restore(self, engine):
        """Load the file into ``engine`` when there is one; returns whether it did."""
        state = self.load()
        if state is None:
            return False
        problem = None
        try:
            engine.restore(state)
        except Exception as error:  # arrays of the wrong shape or type for this problem
            problem = f"cannot read checkpoint {self.path}: {_reason(error)}"
        check_collectively(self.comm, problem)
        return True

    def _read(self):
        """(mismatch message or None, per-rank parts, shared part), read and checked on rank 0."""
        with np.load(self.path, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}  # reads every array: a bad CRC shows here
        if "meta" not in arrays:
            return f"{self.path} is not an mpiopt ADMM checkpoint (it has no 'meta' entry)", None, None
        meta = json.loads(str(arrays.pop("meta")))
        problem = _mismatch(meta.get("fingerprint") if isinstance(meta, dict) else None, self.fingerprint, self.path)
        if problem:
            return problem, None, None
        missing = [key for key in REQUIRED_META if key not in meta]
        n = self.fingerprint["shards"][0]["n"]
        expected = {"z": n, "z_plain": n, **{f"rank{rank}_{key}": n for rank in range(self.comm.size)
                                               for key in ("u", "x")}}
        missing += [key for key in expected if key not in arrays]
        if missing:
            raise ValueError(f"entries {', '.join(missing)} are missing")
        wrong = [key for key, length in expected.items() if arrays[key].shape != (length,)]
        if wrong:
            raise ValueError(f"arrays {', '.join(wrong)} do not have {n} entries")
        _check_anderson(arrays, self.comm.size, n)
        parts = [{key.split("_", 1)[1]: value for key, value in arrays.items() if key.startswith(f"rank{rank}_")}
                 for rank in range(self.comm.size)]
        return None, parts, dict(meta, z=arrays["z"], z_plain=arrays["z_plain"])


def _check_anderson(arrays, ranks, n):
    """Anderson's memory must have the same shape on every rank (its Gram matrix is all-reduced) and 2n columns."""
    keys = sorted({key.split("_", 1)[1] for key in arrays if key.startswith("rank") and "_aa_" in key})
    for key in keys:
        shapes = [arrays[f"rank{rank}_{key}"].shape if f"rank{rank}_{key}" in arrays else None
                  for rank in range(ranks)]
        if len(set(shapes)) != 1:
            raise ValueError(f"the ranks' {key} arrays have different shapes {shapes}")
        if key in ("aa_residuals", "aa_images", "aa_previous_residual", "aa_previous_image") and \
                shapes[0][-1] != 2 * n:
            raise ValueError(f"{key} has shape {shapes[0]}, expected {2 * n} columns")


REQUIRED_META = ("rho", "iteration", "previous_residuals", "rho_changes", "history", "objective_history")


def _reason(error):
    """An exception as a short clause: its message, or its type when it has none (a bare KeyError)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return text or type(error).__name__


def _mismatch(stored, expected, path):
    if not isinstance(stored, dict) or not str(stored.get("format", "")).startswith(FORMAT[:-1]):
        return f"{path} is not an mpiopt ADMM checkpoint"
    if stored["format"] != FORMAT:
        return (f"checkpoint {path} has format {stored['format']}; this mpiopt reads {FORMAT} "
                f"(remove the file to start afresh)")
    if stored.get("ranks") != expected["ranks"]:
        return (f"checkpoint {path} was written by {stored.get('ranks')} ranks; this run has {expected['ranks']} "
                f"(resume with the same rank count)")
    for rank, (old, new) in enumerate(zip(stored["shards"], expected["shards"])):
        for key in new:
            if old.get(key) != new[key]:
                return (f"checkpoint {path} belongs to another problem: rank {rank}'s {key} was {old.get(key)!r}, "
                        f"now {new[key]!r}")
    return None
