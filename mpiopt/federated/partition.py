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

Each partitioner declares its options (``register(..., options=Options(...))``;
``registry.options("partition", name)``), and ``partition`` checks the values
given against the declaration and completes them with its defaults before it
splits (the functions have no defaults of their own): an unknown option, or
one outside its range, is one ``ValueError`` naming the partitioner and the
options it takes.  A user's partitioner is a function
``(labels, n_clients, seed, **options)`` registered the same way; it is called
with every option it declares.

``split_clients(X, y, parts)`` turns the indices into the (X_k, y_k) pairs
:func:`~mpiopt.federated.run_federated` takes.  Cost: O(n log n).
"""
import numpy as np

from ..core.partition import row_range
from ..core.random import random_stream
from ..core.options import Option, Options
from ..core.registry import lookup, options, register

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


def _alpha(skew):
    return Option("alpha", float, 0.5, f"the Dirichlet concentration: small alpha, strong {skew} skew",
                  low=0, low_open=True)


@register("partition", "iid", options=Options())
def iid(labels, n_clients, seed):
    labels = _check(labels, n_clients)
    order = random_stream(seed, "partition", "iid").permutation(labels.size)
    return [np.sort(order[slice(*row_range(labels.size, k, n_clients))]) for k in range(n_clients)]


@register("partition", "pathological", options=Options(
    Option("shards_per_client", int, 2, "label-sorted shards each client gets (most see this many labels)", low=1)))
def pathological(labels, n_clients, seed, shards_per_client):
    labels = _check(labels, n_clients)
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


@register("partition", "dirichlet", options=Options(
    _alpha("label"), Option("min_size", int, 1, "the fewest rows a client may get (drawn again until it has)",
                            low=1)))
def dirichlet(labels, n_clients, seed, alpha, min_size):
    labels = _check(labels, n_clients)
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


@register("partition", "quantity", options=Options(_alpha("size")))
def quantity(labels, n_clients, seed, alpha):
    labels = _check(labels, n_clients)
    stream = random_stream(seed, "partition", "quantity")
    shares = stream.dirichlet(np.full(n_clients, float(alpha)))
    sizes = 1 + stream.multinomial(labels.size - n_clients, shares)
    order = stream.permutation(labels.size)
    return [np.sort(part) for part in np.split(order, np.cumsum(sizes)[:-1])]


def partition(name, labels, n_clients, seed=0, partition_options=None, **given):
    """Row indices of each of ``n_clients`` clients under the registered partitioner ``name``.

    Its options come as ``partition_options`` (a dict) or as keywords (``alpha=0.5``), checked against the
    partitioner's declaration first and completed with its defaults (ValueError with the one-line problem;
    RegistryError for an unknown name).
    """
    split = lookup("partition", name)
    values = options("partition", name).resolve({**(partition_options or {}), **given}, f"partition {name!r}")
    return split(labels, n_clients, seed, **values)


def split_clients(X, y, parts):
    """[(X[rows], y[rows]) for rows in parts]."""
    return [(X[rows], y[rows]) for rows in parts]
