"""A point (x, u, rho) of a solve that runs on restricted problems: screening (solver.py) and working sets
(workingset.py) solve on some of the columns, warm-started from the point restricted to them, and embed the
answer back into the full vector (the other coefficients exactly 0)."""
import types

import numpy


class Point:
    """The point (x, u, rho) of a solve over restricted problems: each solve on some columns starts from the
    point restricted to them, and its answer is embedded back (the other coefficients 0)."""

    def __init__(self, x, u, rho):
        self.x, self.u, self.rho = x, u, rho

    @classmethod
    def of(cls, warm_start, xp, n):
        """The warm start's point (a previous ADMMResult), else 0."""
        if warm_start is None:
            return cls(xp.zeros(n), None, None)
        return cls(xp.array(warm_start.x, dtype=float),
                   None if warm_start.u is None else xp.array(warm_start.u, dtype=float),
                   warm_start.info.get("rho_final"))

    def solve_on(self, problem, columns, intercept, penalty, settings):
        """``problem`` (on ``columns`` of this point's, the intercept kept) solved from this point with
        ``settings``; the answer becomes the point.  Returns the ADMMResult."""
        xp = problem.xp
        features = self.x.shape[0] - int(intercept)
        index = xp.asarray(numpy.concatenate([columns, [features]]) if intercept else columns)
        start_from = types.SimpleNamespace(x=self.x[index], u=None if self.u is None else self.u[index],
                                           info={"rho_final": self.rho})
        result = problem.solve(penalty.on_columns(columns), warm_start=start_from, **settings)
        self.x = xp.zeros(self.x.shape[0])
        self.x[index] = xp.asarray(result.x)
        if result.u is not None:
            self.u = xp.zeros(self.x.shape[0])
            self.u[index] = xp.asarray(result.u)
        self.rho = result.info["rho_final"]
        return result
