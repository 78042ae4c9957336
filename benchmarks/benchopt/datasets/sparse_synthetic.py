from benchopt import BaseDataset

from benchmark_utils import problems


class Dataset(BaseDataset):
    """benchmarks/sparse_solvers.py's ``sparse`` design: CSR with power-law column frequencies, N(0, 1)
    values, b = A x_true + noise (20 nonzeros, noise 0.3 std), labels sign(b); made by its make_design."""
    name = "sparse-synthetic"
    requirements = ["pip::scipy"]
    parameters = {"n_samples, n_features, density": [problems.SPARSE_SIZE], "seed": [0]}
    test_parameters = {"n_samples, n_features, density": [(2000, 300, 0.02)]}

    def get_data(self):
        X, y, labels = problems.design("sparse", sparse_rows=self.n_samples, sparse_cols=self.n_features,
                                       sparse_density=self.density, seed=self.seed)
        return dict(X=X, y=y, labels=labels)
