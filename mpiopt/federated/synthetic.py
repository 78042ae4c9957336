"""FedProx's Synthetic(alpha, beta): heterogeneous clients of a softmax model (Li et al., MLSys 2020, appendix).

Client k (all draws from ``random_stream(seed, "synthetic", k)``, so a
client's data do not depend on how many there are):

    u_k ~ N(0, alpha),  W_k ~ N(u_k, 1) (d x c),  b_k ~ N(u_k, 1) (c)          model heterogeneity
    B_k ~ N(0, beta),   v_k ~ N(B_k, 1) (d),      x ~ N(v_k, Sigma), Sigma_jj = j^-1.2   data heterogeneity
    y = argmax softmax(x W_k + b_k)

(N(m, s) here has variance s.)  Sample counts follow the paper's code, a
power law: n_k = floor(lognormal(4, 2)) + 50, drawn from
``random_stream(seed, "synthetic-sizes")`` and capped at ``max_samples``.
The paper uses d = 60, c = 10, K = 30.  Cost: O(sum_k n_k d c).
"""
import numpy as np

from ..core.random import random_stream


def synthetic_clients(n_clients=30, alpha=1.0, beta=1.0, n_features=60, n_classes=10, seed=0, max_samples=None):
    """[(X_k, y_k)] of ``n_clients`` clients of Synthetic(alpha, beta); see the module docstring."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    for name, value, least in (("n_clients", n_clients, 1), ("n_features", n_features, 1),
                               ("n_classes", n_classes, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    sizes = random_stream(seed, "synthetic-sizes").lognormal(4, 2, n_clients).astype(np.int64) + 50
    if max_samples is not None:
        sizes = np.minimum(sizes, max_samples)
    scale = np.sqrt(np.arange(1, n_features + 1, dtype=np.float64) ** -1.2)
    clients = []
    for k in range(n_clients):
        stream = random_stream(seed, "synthetic", k)
        u = stream.normal(0.0, np.sqrt(alpha))
        B = stream.normal(0.0, np.sqrt(beta))
        W = stream.normal(u, 1.0, (n_features, n_classes))
        b = stream.normal(u, 1.0, n_classes)
        v = stream.normal(B, 1.0, n_features)
        X = v + stream.standard_normal((int(sizes[k]), n_features)) * scale
        y = np.argmax(X @ W + b, axis=1).astype(np.int64)
        clients.append((X, y))
    return clients
