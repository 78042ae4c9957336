"""Checkpoints of any method's state: one npz file, written atomically, read without pickle.

A state has three parts: arrays shared by every rank (written from rank 0),
arrays of each rank (gathered to rank 0 and stored as ``rank{r}_{name}``), and
JSON metadata (iteration counters, histories).  The file also holds the
method's fingerprint of its problem (the rank count and whatever pins the
problem down exactly); a file of another problem, rank count or format is
refused.

Every operation is collective and no failure leaves a rank waiting: the file
is tested for writing when the checkpointer is made (before the first
iteration), and any failure to write or read (a full disk, a truncated or
corrupt file, a missing array, a method's own check) raises the same
CollectiveError on every rank, "cannot write checkpoint PATH: ..." or "cannot
read checkpoint PATH: ...".  A file that cannot be read is left untouched.
Writes go through :func:`mpiopt.core.io.write_atomic` (through symlinks,
never over a device).  Reads use ``numpy.load(allow_pickle=False)``.
"""
import io
import json
import os

import numpy as np

from .backend import to_host
from .comm import check_collectively
from .io import check_writable, write_atomic


class Checkpointer:
    """Writes and reads one problem's checkpoints at ``path``; every method is collective over ``comm``.

    ``format`` names the layout and version (e.g. "mpiopt-admm-checkpoint-2"),
    ``label`` the method in messages ("ADMM"); ``fingerprint`` is this rank's
    JSON description of its part of the problem.
    """

    def __init__(self, path, comm, fingerprint, format, label):
        self.path, self.comm, self.format, self.label = os.fspath(path), comm, format, label
        self.fingerprint = {"format": format, "ranks": comm.size, "shards": comm.allgather(fingerprint)}
        self.writes = 0
        check_writable(self.path, comm, what="checkpoint")

    def write(self, shared, mine, meta):
        """Write ``shared`` arrays (rank 0's), every rank's ``mine`` arrays and the JSON ``meta``."""
        parts = self.comm.gather({key: to_host(value) for key, value in mine.items()}, root=0)
        problem = None
        if self.comm.rank == 0:
            arrays = {key: to_host(value) for key, value in shared.items()}
            arrays["meta"] = np.array(json.dumps(dict(meta, fingerprint=self.fingerprint)))
            for rank, part in enumerate(parts):
                for key, value in part.items():
                    arrays[f"rank{rank}_{key}"] = value
            try:
                buffer = io.BytesIO()
                np.savez(buffer, **arrays)
                write_atomic(self.path, buffer.getvalue(), mode="wb")
            except Exception as error:  # a full disk, a folder gone or made read-only since the start
                problem = f"cannot write checkpoint {self.path}: {reason(error)}"
        check_collectively(self.comm, problem)
        self.writes += 1

    def discard(self, path=None):
        """Remove a finished checkpoint on rank 0: this one's file, or a companion ``path`` beside it (a nested
        solve's).  Only a regular file is removed (a symlink itself, never its target or a device); one that
        is not there or cannot be removed is left, as a leftover is only read by a resume that needs it."""
        if self.comm.rank != 0:
            return
        target = self.path if path is None else os.fspath(path)
        try:
            if os.path.islink(target) or os.path.isfile(target):
                os.remove(target)
        except OSError:
            pass

    def load(self, validate=None):
        """(shared arrays, this rank's arrays, meta), or None when there is no file.

        ``validate(shared, parts, meta)`` runs on rank 0 and raises (ValueError)
        when the arrays do not fit the method's problem.  Raises the same
        CollectiveError on every rank when the file belongs to another problem,
        rank count or format, or cannot be read; the file is not modified.
        """
        exists = self.comm.bcast(os.path.exists(self.path) if self.comm.rank == 0 else None, root=0)
        if not exists:
            return None
        problem, parts, shared = None, None, None
        if self.comm.rank == 0:
            try:
                problem, parts, shared = self._read(validate)
            except Exception as error:  # BadZipFile, a bad CRC, zlib or JSON errors, a missing array, ...
                problem = f"cannot read checkpoint {self.path}: {reason(error)}"
        check_collectively(self.comm, problem)
        mine = self.comm.scatter(parts, root=0)
        shared, meta = self.comm.bcast(shared, root=0)
        return shared, mine, meta

    def restore(self, apply, validate=None):
        """Load the file and call ``apply(shared, mine, meta)`` on every rank; returns whether there was one.

        An exception in ``apply`` on any rank (an array that does not fit)
        becomes the same CollectiveError on every rank.
        """
        state = self.load(validate)
        if state is None:
            return False
        problem = None
        try:
            apply(*state)
        except Exception as error:
            problem = f"cannot read checkpoint {self.path}: {reason(error)}"
        check_collectively(self.comm, problem)
        return True

    def _read(self, validate):
        """(mismatch message or None, per-rank parts, (shared, meta)), read and checked on rank 0."""
        with np.load(self.path, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}  # reads every array: a bad CRC shows here
        if "meta" not in arrays:
            return f"{self.path} is not an mpiopt {self.label} checkpoint (it has no 'meta' entry)", None, None
        meta = json.loads(str(arrays.pop("meta")))
        problem = self._mismatch(meta.get("fingerprint") if isinstance(meta, dict) else None)
        if problem:
            return problem, None, None
        prefixes = [f"rank{rank}_" for rank in range(self.comm.size)]
        parts = [{key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}
                 for prefix in prefixes]
        shared = {key: value for key, value in arrays.items() if not key.startswith("rank")}
        if validate is not None:
            validate(shared, parts, meta)
        return None, parts, (shared, meta)

    def _mismatch(self, stored):
        expected, path = self.fingerprint, self.path
        family = self.format.rsplit("-", 1)[0]
        if not isinstance(stored, dict) or not str(stored.get("format", "")).startswith(family + "-"):
            return f"{path} is not an mpiopt {self.label} checkpoint"
        if stored["format"] != self.format:
            return (f"checkpoint {path} has format {stored['format']}; this mpiopt reads {self.format} "
                    f"(remove the file to start afresh)")
        if stored.get("ranks") != expected["ranks"]:
            return (f"checkpoint {path} was written by {stored.get('ranks')} ranks; this run has "
                    f"{expected['ranks']} (resume with the same rank count)")
        for rank, (old, new) in enumerate(zip(stored["shards"], expected["shards"])):
            for key in new:
                if old.get(key) != new[key]:
                    return (f"checkpoint {path} belongs to another problem: rank {rank}'s {key} was "
                            f"{old.get(key)!r}, now {new[key]!r}")
        return None


def reason(error):
    """An exception as a short clause: its message, or its type when it has none (a bare KeyError)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return text or type(error).__name__
