"""Checkpoints of the ADMM state: one npz file, written atomically, read without pickle.

Rank 0 gathers z, rho, the iteration, the residual history and every rank's u_i,
x_i and x-step warm start, and writes them to a temporary file beside the target
before renaming it, so a reader sees the old checkpoint or the new one, never
half of one.  The file also holds a fingerprint of the problem (rank count, rows
per rank, columns, loss, penalty, a checksum of each shard): a checkpoint from a
different problem or rank count is refused with a clear error on every rank.
Loading uses ``numpy.load(allow_pickle=False)``; the fingerprint and history are
stored as JSON text.
"""
import io
import json
import os

import numpy as np

from ..core.backend import to_host
from ..core.comm import check_collectively
from ..core.io import write_atomic

FORMAT = "mpiopt-admm-checkpoint-1"


class Checkpointer:
    def __init__(self, path, comm, fingerprint):
        self.path, self.comm = os.fspath(path), comm
        gathered = comm.allgather(fingerprint)
        self.fingerprint = {"format": FORMAT, "ranks": comm.size, "shards": gathered}
        self.writes = 0

    def write(self, state):
        """Collective: gather every rank's part and write the file atomically on rank 0."""
        mine = {"u": to_host(state["u"]), "x": to_host(state["x"]),
                **{f"loss_{key}": to_host(value) for key, value in state["loss"].items()},
                **{f"aa_{key}": to_host(value) for key, value in state["anderson"].items()}}
        parts = self.comm.gather(mine, root=0)
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
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            write_atomic(self.path, buffer.getvalue(), mode="wb")
        self.writes += 1
        self.comm.Barrier()

    def load(self):
        """Collective: this rank's state from the file, or None when there is no file.

        Raises the same CollectiveError on every rank when the file belongs to
        another problem or rank count, or cannot be read.
        """
        exists = self.comm.bcast(os.path.exists(self.path) if self.comm.rank == 0 else None, root=0)
        if not exists:
            return None
        problem, meta, arrays = None, None, None
        if self.comm.rank == 0:
            try:
                with np.load(self.path, allow_pickle=False) as stored:
                    arrays = {key: stored[key] for key in stored.files}
                meta = json.loads(str(arrays.pop("meta")))
                problem = _mismatch(meta.get("fingerprint"), self.fingerprint, self.path)
            except (OSError, ValueError, KeyError) as error:
                problem = f"cannot read checkpoint {self.path}: {error}"
        check_collectively(self.comm, problem)
        if self.comm.rank == 0:
            parts = [{key.split("_", 1)[1]: value for key, value in arrays.items() if key.startswith(f"rank{rank}_")}
                     for rank in range(self.comm.size)]
            shared = dict(meta, z=arrays["z"], z_plain=arrays["z_plain"])
        else:
            parts, shared = None, None
        part = self.comm.scatter(parts, root=0)
        shared = self.comm.bcast(shared, root=0)
        return {"z": shared["z"], "z_plain": shared["z_plain"], "u": part["u"], "x": part["x"], "rho": shared["rho"],
                "iteration": shared["iteration"], "status": shared.get("status"),
                "previous_residuals": shared["previous_residuals"],
                "rho_changes": shared["rho_changes"], "history": shared["history"],
                "objective_history": shared["objective_history"],
                "loss": {key[len("loss_"):]: value for key, value in part.items() if key.startswith("loss_")},
                "anderson": {key[len("aa_"):]: value for key, value in part.items() if key.startswith("aa_")}}


def _mismatch(stored, expected, path):
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        return f"{path} is not an mpiopt ADMM checkpoint"
    if stored["ranks"] != expected["ranks"]:
        return (f"checkpoint {path} was written by {stored['ranks']} ranks; this run has {expected['ranks']} "
                f"(resume with the same rank count)")
    for rank, (old, new) in enumerate(zip(stored["shards"], expected["shards"])):
        for key in new:
            if old.get(key) != new[key]:
                return (f"checkpoint {path} belongs to another problem: rank {rank}'s {key} was {old.get(key)!r}, "
                        f"now {new[key]!r}")
    return None
