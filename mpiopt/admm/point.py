"""A point (x, u, rho) of a solve that runs on restricted problems: screening (solver.py) and working sets
(workingset.py) solve on some of the columns, warm-started from the point restricted to them, and embed the
answer back into the full vector (the other coefficients exactly 0)."""
import numpy

from ..core import backend


class Point:
    """The point (x, u, rho) of a solve over restricted problems: each solve on some columns starts from the
    point restricted to them (:meth:`restricted`), and its answer is embedded back (:meth:`embed`, the other
    coefficients 0).  It is also the warm start the engine takes (``Problem.solve_with``)."""

    def __init__(self, x, u, rho):
        self.x, self.u, self.rho = x, u, rho

    @classmethod
    def of(cls, warm_start, xp, n):
        """The point of a warm start (a previous ADMMResult, or a Point), else 0."""
        if warm_start is None:
            return cls(xp.zeros(n), None, None)
        if isinstance(warm_start, Point):
            return cls(xp.array(warm_start.x, dtype=float),
                       None if warm_start.u is None else xp.array(warm_start.u, dtype=float), warm_start.rho)
        return cls(xp.array(warm_start.x, dtype=float),
                   None if warm_start.u is None else xp.array(warm_start.u, dtype=float),
                   warm_start.info.get("rho_final"))

    @staticmethod
    def index(columns, intercept):
        """The positions in x of ``columns`` and, with an ``intercept``, of the intercept (x's last entry)."""
        return numpy.concatenate([columns, [-1]]).astype(numpy.int64) if intercept else \
            numpy.asarray(columns, dtype=numpy.int64)

    def restricted(self, index):
        """This point on the coordinates ``index`` (x and u there, the same rho): a restricted solve's start."""
        xp_index = self._device(index)
        return Point(self.x[xp_index], None if self.u is None else self.u[xp_index], self.rho)

    def embed(self, index, x, u=None, rho=None):
        """A restricted solve's answer back into this point: x on ``index``, 0 elsewhere; u likewise, or None
        (a solve without ADMM state: proximal Newton); rho when given."""
        size = self.x.shape[0]
        xp_index = self._device(index)
        self.x = self._zeros(size)
        self.x[xp_index] = x
        if u is None:
            self.u = None
        else:
            self.u = self._zeros(size)
            self.u[xp_index] = u
        if rho is not None:
            self.rho = rho

    def solve_on(self, problem, columns, intercept, penalty, settings, threads):
        """``problem`` (on ``columns`` of this point's, the intercept kept) solved from this point with
        ``settings`` (an ADMMSettings) under the BLAS threads ``threads``; the answer becomes the point.
        Returns the ADMMResult."""
        index = self.index(columns, intercept)
        result = problem.solve_with(settings, penalty.on_columns(columns), self.restricted(index), threads)
        self.embed(index, problem.xp.asarray(result.x), None if result.u is None else problem.xp.asarray(result.u),
                   result.info["rho_final"])
        return result

    def _device(self, index):
        return backend.get_array_module(self.x).asarray(index)

    def _zeros(self, size):
        return backend.get_array_module(self.x).zeros(size)
