"""The result of an ADMM solve, on the core's Result: x, the objective, the iterations and their history."""
import dataclasses

from ..core.backend import to_host
from ..core.io import write_json
from ..core.result import Result, not_in_json


@dataclasses.dataclass
class ADMMResult(Result):
    # status: "converged", "max_iter", "time_limit" or "interrupted" (SIGTERM; a checkpoint was written)
    # history: per-iteration columns iter, r_norm, eps_pri, s_norm, eps_dual, rho, time (and gap, NaN where
    #          not evaluated, with the gap_tol setting)
    # timings: seconds setup, solve, per_iteration, x_step, communication, gap (duality-gap evaluations), total
    # info: the problem (rows, n, ranks, lam, lambda_max, ...), the settings, rho_final, kkt_residual, nonzeros
    x: object                 # the consensus solution z (numpy or CuPy), the same on every rank
    objective: float          # global objective at x, summed over all ranks
    iterations: int
    objective_history: dict   # {"iter": [...], "objective": [...]} at the logged iterations
    u: object = not_in_json()  # this rank's scaled dual variable (for warm starts)
    gap: float = None           # duality gap P(x) - D(theta) >= 0 at x, a bound on P(x) - P* (None: unavailable)
    relative_gap: float = None  # gap / max(|P(x)|, tiny)

    @property
    def converged(self):
        return self.status == "converged"

    def to_dict(self, include_x=True):
        payload = super().to_dict()
        if include_x:
            payload["x"] = to_host(self.x).tolist()
        else:
            payload.pop("x")
        return payload

    def save_json(self, path, include_x=True):
        """Write the result as JSON, atomically (call it on one rank)."""
        write_json(path, self.to_dict(include_x=include_x))

    def __str__(self):
        t = self.timings
        return (f"ADMMResult(status={self.status}, objective={self.objective:.12g}, "
                f"iterations={self.iterations}, setup={t['setup']:.3g}s, solve={t['solve']:.3g}s)")
