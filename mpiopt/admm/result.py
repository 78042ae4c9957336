"""The result of an ADMM solve, on the core's Result: x, the objective, the iterations and their history."""
import dataclasses
import math

from ..core.backend import to_host
from ..core.io import write_json
from ..core.result import Result, not_in_json


@dataclasses.dataclass
class ADMMResult(Result):
    # status: "converged" (info["stop"] "tolerances": the residual rule, or "gap_tol": the relative duality
    #         gap), "max_iterations" (stop "max_iter", or "max_outer" for the working sets' outer loop),
    #         "time_limit" (stop "time_limit") or "interrupted" (stop "signal": SIGTERM, a checkpoint was written)
    # history: per-iteration columns iter, r_norm, eps_pri, s_norm, eps_dual, rho, time (and gap, NaN where
    #          not evaluated, with the gap_tol setting)
    # timings: seconds setup, solve, per_iteration, x_step, communication, gap (duality-gap evaluations), total
    # info: the problem (rows, n, ranks, lam, lambda_max, ...), the settings, rho_final, kkt_residual, nonzeros,
    #       stop
    x: object                 # the consensus solution z (numpy or CuPy), the same on every rank
    objective: float          # global objective at x, summed over all ranks
    iterations: int
    objective_history: dict   # {"iter": [...], "objective": [...]} at the logged iterations
    u: object = not_in_json()  # this rank's scaled dual variable (for warm starts)
    gap: float = None           # duality gap P(x) - D(theta) >= 0 at x, a bound on P(x) - P* (None: unavailable)
    relative_gap: float = None  # gap / max(|P(x)|, tiny)

    SOLUTION = "x"

    @property
    def converged(self):
        return self.status == "converged"

    def plot_panels(self):
        """The residuals r and s with their tolerances, the objective at the logged iterations and, with
        ``gap_tol``, the duality gap where it was evaluated, against the iterations."""
        history, panels = self.history, []
        if history.get("iter"):
            iterations = history["iter"]
            panels.append({"title": "residuals", "xlabel": "iteration", "yscale": "log", "curves": [
                (iterations, history["r_norm"], "primal r"), (iterations, history["eps_pri"], "eps_pri"),
                (iterations, history["s_norm"], "dual s"), (iterations, history["eps_dual"], "eps_dual")]})
        objective = self.objective_history
        if objective.get("iter"):
            panels.append({"title": "objective", "xlabel": "iteration",
                           "curves": [(objective["iter"], objective["objective"], None)]})
        evaluated = [(k, gap) for k, gap in zip(history.get("iter", ()), history.get("gap", ()))
                     if math.isfinite(gap)]
        if evaluated:
            panels.append({"title": "duality gap", "xlabel": "iteration", "yscale": "log",
                           "curves": [([k for k, _ in evaluated], [gap for _, gap in evaluated], None)]})
        return panels

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
