"""Partitioners: the rows of one data set split among K virtual clients; ``partition(name, labels, K, seed)``.

Each returns K arrays of row indices, every row in exactly one of them, each
non-empty, drawn from ``random_stream(seed, "partition", name)`` alone (the
same at any rank count).  Registered as kind ``"partition"``:

=================  ==================================================================================
``iid``            a seeded permutation cut into K near-equal parts (``row_range``)
``pathological``   McMahan et al. 2017: rows sorted by label (ties in a seeded order), cut into
                   ``shards_per_client`` K equal shards, each client given ``shards_per_client`` (2)
                   of them at random: most clients see two labels
``dirichlet``      label skew (Hsu et al. 2019): for every class c, q_c ~ Dir(alpha 1_K) and class
                   c's rows (in a seeded order) are cut in proportions q_c; drawn again (up to 100
                   times) until every client has ``min_size`` rows.  Small alpha: few labels each
``quantity``       quantity skew (Li et al., NIID-Bench 2022): sizes 1 + Multinomial(n - K, q),
                   q ~ Dir(alpha 1_K), rows otherwise IID
=================  ==================================================================================

``split_clients(X, y, parts)`` turns the indices into the (X_k, y_k) pairs
:func:`~mpiopt.federated.run_federated` takes.  Cost: O(n log n).
"""
import numpy as np

from ..core.partition import row_range
from ..core.random import random_stream
from ..core.registry import lookup, register

RETRIES = 100


def _check(labels, n_clients):
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D array, got shape {labels.shape}")
    if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)) or n_clients < 1:
        raise ValueError(f"n_clients must be an integer >= 1, got {n_clients!r}")
    if labels.size < n_clients:
        raise ValueError(f"{labels.size} rows cannot give each of {n_clients} clients a row")
    return labels


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


@register("partition", "iid")
def iid(labels, n_clients, seed=0):
    labels = _check(labels, n_clients)
    order = random_stream(seed, "partition", "iid").permutation(labels.size)
    return [np.sort(order[slice(*row_range(labels.size, k, n_clients))]) for k in range(n_clients)]


@register("partition", "pathological")
def pathological(labels, n_clients, seed=0, shards_per_client=2):
    labels = _check(labels, n_clients)
    if isinstance(shards_per_client, bool) or not isinstance(shards_per_client, int) or shards_per_client < 1:
        raise ValueError(f"shards_per_client must be an integer >= 1, got {shards_per_client!r}")
    n_shards = n_clients * shards_per_client
    if labels.size < n_shards:
        raise ValueError(f"{labels.size} rows cannot make {n_shards} shards")
    stream = random_stream(seed, "partition", "pathological")
    shuffled = stream.permutation(labels.size)
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = [by_label[slice(*row_range(labels.size, s, n_shards))] for s in range(n_shards)]
    owner = stream.permutation(n_shards)
    return [np.sort(np.concatenate([shards[s] for s in owner[k * shards_per_client:(k + 1) * shards_per_client]]))
            for k in range(n_clients)]


@register("partition", "dirichlet")
def dirichlet(labels, n_clients, seed=0, alpha=0.5, min_size=1):
    labels = _check(labels, n_clients)
    _positive("alpha", alpha)
    stream = random_stream(seed, "partition", "dirichlet")
    for _ in range(RETRIES):
        parts = [[] for _ in range(n_clients)]
        for label in np.unique(labels):
            rows = stream.permutation(np.flatnonzero(labels == label))
            shares = stream.dirichlet(np.full(n_clients, float(alpha)))
            cuts = np.floor(np.cumsum(shares)[:-1] * rows.size + 0.5).astype(int)
            for k, piece in enumerate(np.split(rows, cuts)):
                parts[k].append(piece)
        parts = [np.sort(np.concatenate(pieces)) for pieces in parts]
        if min(part.size for part in parts) >= min_size:
            return parts
    raise ValueError(f"dirichlet(alpha={alpha}) left a client with fewer than {min_size} rows in {RETRIES} "
                     f"draws; use fewer clients or a larger alpha")


@register("partition", "quantity")
def quantity(labels, n_clients, seed=0, alpha=0.5):
    labels = _check(labels, n_clients)
    _positive("alpha", alpha)
    stream = random_stream(seed, "partition", "quantity")
    shares = stream.dirichlet(np.full(n_clients, float(alpha)))
    sizes = 1 + stream.multinomial(labels.size - n_clients, shares)
    order = stream.permutation(labels.size)
    return [np.sort(part) for part in np.split(order, np.cumsum(sizes)[:-1])]


def partition(name, labels, n_clients, seed=0, **options):
    """Row indices of each of ``n_clients`` clients under the registered partitioner ``name``."""
    return lookup("partition", name)(labels, n_clients, seed, **options)


def split_clients(X, y, parts):
    """[(X[rows], y[rows]) for rows in parts]."""
    return [(X[rows], y[rows]) for rows in parts]
