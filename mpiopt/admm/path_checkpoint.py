"""Checkpoints of a regularization path: the finished weights in one file, the weight in progress in its own.

``regularization_path(..., checkpoint="path.npz")`` writes ``path.npz`` after
every weight's solve: the grid, and for each finished weight its solution,
each rank's dual variable (the next weight's warm start), its seconds and its
ADMMResult's other fields.  The solve in progress checkpoints as any solve
does (``checkpoint_every`` iterations, SIGUSR1, SIGTERM), to
``path.npz.weight<k>.npz``, which is removed once the weight is finished and
recorded.  A path resumed from its files continues with the weight it was
on, from where that solve stopped, so a path interrupted any number of times
gives the coefficients, objectives, iteration counts and statuses of the path
that never was.  A SIGTERM ends the path after the interrupted weight's
checkpoint (status ``interrupted``, the weights so far in the result).  The
file holds the grid, the loss, the penalty and its options and each rank's
data checksum: a path of other data, weights or penalty is refused.
"""
import json
import os

import numpy as np

from ..core.backend import to_host
from ..core.checkpoint import Checkpointer
from ..core.comm import check_collectively
from .result import ADMMResult

FORMAT = "mpiopt-path-checkpoint-1"


def _plain(value):
    """``value`` as JSON-ready Python values (numpy numbers and arrays to lists), NaN and inf kept."""
    return json.loads(json.dumps(value, default=lambda item: item.tolist() if hasattr(item, "tolist") else str(item)))


class PathCheckpoint:
    """The checkpoints of one path at ``path`` over ``problem.comm``."""

    def __init__(self, path, problem, lams, penalty, penalty_options):
        self.path, self.comm = os.fspath(path), problem.comm
        fingerprint = {"lams": [float(lam) for lam in lams], "loss": problem.loss, "penalty": str(penalty),
                       "penalty_options": _plain(penalty_options or {}), "intercept": problem.intercept,
                       "rows": problem.shard.rows, "n": problem.shard.n,
                       "checksum": problem.data_checksum()}
        self.checkpointer = Checkpointer(self.path, self.comm, fingerprint, FORMAT, "regularization-path")

    def weight_file(self, k):
        """The checkpoint of weight ``k``'s solve while it runs."""
        return f"{self.path}.weight{k}.npz"

    def resume(self):
        """(the finished weights' ADMMResults, their seconds), empty when there is no file."""
        state = self.checkpointer.load()
        if state is None:
            return [], []
        shared, mine, meta = state
        results = []
        for k, fields in enumerate(meta["results"]):
            results.append(ADMMResult(**fields, x=np.array(shared[f"x{k}"]),
                                      u=np.array(mine[f"u{k}"]) if f"u{k}" in mine else None))
        self._remove(range(len(results)))  # a weight recorded just before the stop may have left its file
        return results, list(meta["seconds"])

    def record(self, results, seconds):
        """Write the finished weights, then remove the last one's own checkpoint."""
        shared = {f"x{k}": to_host(result.x) for k, result in enumerate(results)}
        mine = {f"u{k}": to_host(result.u) for k, result in enumerate(results) if result.u is not None}
        fields = [{key: value for key, value in result.to_dict().items() if key != "x"} for result in results]
        self.checkpointer.write(shared, mine, {"results": _plain(fields), "seconds": [float(s) for s in seconds]})
        self._remove([len(results) - 1])

    def _remove(self, weights):
        """Rank 0 removes the own checkpoints of ``weights``, recorded in the path's file."""
        problem = None
        if self.comm.rank == 0:
            for k in weights:
                try:
                    os.remove(self.weight_file(k))
                except FileNotFoundError:
                    pass
                except OSError as error:
                    problem = f"cannot remove the finished weight's checkpoint {self.weight_file(k)}: {error}"
        check_collectively(self.comm, problem)
