"""The arithmetic of aggregation, written once: weighted means, sums, medians, trims, Krum, Bulyan.

Every strategy, the runners' reported losses and the evaluations call these,
as Flower's strategies call ``flwr/server/strategy/aggregate.py``.  Each
function fixes its floating-point order (the values are summed in the order
given, which is client order, and each division sits where its docstring
says), so a result is the same bit for bit at any rank count and wherever it
is called.  Two weighted means exist because two orders are in use:

* :func:`weighted_mean`, sum_k (n_k / n) x_k: each value scaled by its share,
  then summed (FedAvg's Delta, the round's reported loss, FedNova's tau_eff);
* :func:`weighted_mean_sum_first`, (sum_k n_k x_k) / n: one division after the
  weighted sum, Flower's ``aggregate`` (multi-Krum), bit for bit Flower's.

Cost: O(m d) for m values of d entries; the median and the trimmed mean a
partition per coordinate; Krum's scores O(m^2 d); Bulyan O(m^3 d).
"""
import math

import numpy as np


def _zero(value):
    """The start of a sum of values shaped like ``value``: a zero array, or 0.0 for a scalar."""
    return np.zeros_like(value) if np.ndim(value) else 0.0


def ordered_sum(values):
    """sum_k x_k, added in order from zero (the uniform means of SCAFFOLD and FedDyn divide it by the count)."""
    total = _zero(values[0])
    for value in values:
        total += value
    return total


def weighted_sum(values, coefficients):
    """sum_k c_k x_k, added in order from zero (federated ADMM's sum_k p_k delta_k with p_k over all clients)."""
    total = _zero(values[0])
    for value, coefficient in zip(values, coefficients):
        total += coefficient * value
    return total


def weighted_mean(values, weights, divisors=None):
    """sum_k (n_k / n) x_k with n = sum_k n_k: each share n_k / n computed first, then scaled and summed in
    order; with ``divisors`` s_k, sum_k (n_k / n / s_k) x_k (FedNova's step-normalized mean).  Arrays or
    scalars: FedAvg's Delta and the round's weighted loss alike."""
    total = sum(weights)
    if divisors is None:
        return weighted_sum(values, [weight / total for weight in weights])
    return weighted_sum(values, [weight / total / divisor for weight, divisor in zip(weights, divisors)])


def weighted_mean_sum_first(values, weights):
    """(sum_k n_k x_k) / sum_k n_k: the weighted sum first, then one division (Flower's ``aggregate``)."""
    total = np.zeros_like(values[0])
    for value, weight in zip(values, weights):
        total = total + value * weight
    return total / np.sum(weights)


def evaluation_mean(rows, accuracy):
    """(the pooled loss, the pooled accuracy or None) of evaluation rows ``(client, loss_k n_k, correct_k,
    n_k)`` in client order: sum_k loss_k n_k / sum_k n_k and sum_k correct_k / sum_k n_k, both added in
    order with Python's ``sum`` (the synchronous runner's evaluation of every client)."""
    total = sum(row[3] for row in rows)
    loss = sum(row[1] for row in rows) / total
    return loss, (sum(row[2] for row in rows) / total if accuracy else None)


def evaluation_mean_exact(rows, accuracy):
    """:func:`evaluation_mean` with the loss sum correctly rounded (``math.fsum``), as a float: the
    asynchronous runner's, whose rows come from workers in any order."""
    total = sum(row[3] for row in rows)
    loss = math.fsum(row[1] for row in rows) / total
    return float(loss), (sum(row[2] for row in rows) / total if accuracy else None)


def median(values):
    """The coordinate-wise median over the first axis (Flower's ``aggregate_median``)."""
    return np.median(values, axis=0)


def trimmed_mean(values, beta):
    """The mean along axis 0 without the floor(beta n) smallest and largest of each column (scipy's
    ``trim_mean``, Flower's ``aggregate_trimmed_avg``)."""
    n = values.shape[0]
    low = int(beta * n)
    high = n - low
    kept = np.partition(values, (low, high - 1), axis=0)[low:high]
    return np.mean(kept, axis=0)


def squared_distances(values):
    """The n x n matrix of ||x_i - x_j||^2 (Flower's ``_compute_distances``)."""
    n = len(values)
    distances = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            distances[i, j] = np.linalg.norm(values[i] - values[j]) ** 2
    return distances


def krum_scores(values, num_malicious):
    """Each value's Krum score: the sum of its squared distances to its n - f - 2 nearest others (>= 1)."""
    distances = squared_distances(values)
    closest = max(1, len(values) - num_malicious - 2)
    return [np.sum(distances[i, np.argsort(distances[i])[1:closest + 1]]) for i in range(len(values))]


def krum(values, num_malicious):
    """The value of least Krum score (a copy)."""
    return values[int(np.argmin(krum_scores(values, num_malicious)))].copy()


def multi_krum(values, weights, num_malicious, to_keep):
    """The n_k-weighted mean (:func:`weighted_mean_sum_first`) of the ``to_keep`` values of least Krum score
    (all of them when fewer), taken in Flower's order."""
    scores = krum_scores(values, num_malicious)
    best = np.argsort(scores)[::-1][len(scores) - min(to_keep, len(scores)):]
    return weighted_mean_sum_first(values[best], weights[best])


def bulyan(values, num_malicious):
    """Bulyan with Krum: theta = n - 2 f times set the Krum winner of the rest aside, then per coordinate the
    mean of the theta - 2 f selected values closest to their median (Flower's ``aggregate_bulyan``).  A
    ValueError when n < 4 f + 3, as Flower's."""
    f, n = num_malicious, len(values)
    if n < 4 * f + 3:
        raise ValueError(f"bulyan needs n >= 4 f + 3 reporting clients: {n} reported, f = {f}")
    remaining, selected = list(values), []
    theta = n - 2 * f
    for _ in range(theta):
        best = int(np.argmin(krum_scores(np.array(remaining), f)))
        selected.append(remaining.pop(best))
    selected = np.array(selected)
    middle = np.median(selected, axis=0)
    beta = theta - 2 * f
    order = np.argpartition(np.abs(middle - selected), kth=beta - 1, axis=0)
    return np.mean(np.take_along_axis(selected, order, axis=0)[:beta], axis=0)
