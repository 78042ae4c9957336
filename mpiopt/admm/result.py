"""The result of an ADMM solve: a plain object a user can print, save as JSON and compare."""
import dataclasses

from ..core.backend import to_host
from ..core.io import write_json


@dataclasses.dataclass
class ADMMResult:
    x: object                 # the consensus solution z (numpy or CuPy), the same on every rank
    objective: float          # global objective at x, summed over all ranks
    iterations: int
    status: str               # "converged", "max_iter" or "time_limit"
    history: dict             # per-iteration columns: iter, r_norm, eps_pri, s_norm, eps_dual, rho, time
    objective_history: dict   # {"iter": [...], "objective": [...]} at the logged iterations
    timings: dict             # seconds: setup, solve, per_iteration, x_step, communication, total
    info: dict                # problem description: rows, n, ranks, lam, lambda_max, settings, ...
    u: object = None          # this rank's scaled dual variable (for warm starts; not saved in JSON)

    @property
    def converged(self):
        return self.status == "converged"

    def to_dict(self, include_x=True):
        payload = {
            "status": self.status,
            "objective": self.objective,
            "iterations": self.iterations,
            "timings": self.timings,
            "info": self.info,
            "history": self.history,
            "objective_history": self.objective_history,
        }
        if include_x:
            payload["x"] = to_host(self.x).tolist()
        return payload

    def save_json(self, path, include_x=True):
        """Write the result as JSON, atomically (call it on one rank)."""
        write_json(path, self.to_dict(include_x=include_x))

    def __str__(self):
        t = self.timings
        return (f"ADMMResult(status={self.status}, objective={self.objective:.12g}, "
                f"iterations={self.iterations}, setup={t['setup']:.3g}s, solve={t['solve']:.3g}s)")
