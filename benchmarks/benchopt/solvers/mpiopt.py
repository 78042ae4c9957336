import mpi4py  # noqa: F401 - benchopt's install check (mpiopt itself is this repository, installed)

from benchmark_utils.ranks import Ranks
from benchmark_utils.solvers import ToleranceSolver


class Solver(ToleranceSolver):
    """mpiopt's consensus ADMM with working sets, on ``n_ranks`` MPI ranks (benchmark_utils/ranks.py):
    this process is rank 0, the others are spawned once; rows split by mpiopt.core.partition.row_range;
    one BLAS thread per rank.  The tolerance is ``gap_tol``, mpiopt's relative duality-gap certificate."""
    name = "mpiopt"
    requirements = ["pip::mpi4py"]
    parameters = {"n_ranks": [2]}

    def set_objective(self, loss, X, y, lam):
        self.ranks = Ranks.get(self.n_ranks)
        self.ranks.scatter(X.tocsr() if hasattr(X, "tocsr") else X, y)  # untimed, once per problem
        self.function = "lasso" if loss == "lasso" else "logistic_regression"
        self.lam = lam
        self.run_once(1e-2)  # untimed: the first touch of the shards and this loss's imports, on every rank

    def keywords(self, tol):
        return dict(lam=self.lam, gap_tol=tol, working_set=True, max_iter=100000, blas_threads=1)

    def pre_run_hook(self, tol):
        # untimed: the worker ranks get the call now and wait for run() to release them
        self.ranks.prepare(self.function, self.keywords(tol))

    def run(self, tol):
        self.coef = self.ranks.solve(self.function, self.keywords(tol)).x
