"""mpiopt.federated.aggregate against independent references: brute-force loops written here, numpy's
np.average and np.median, scipy's trim_mean; the loops in the same order must agree bit for bit."""
import itertools
import math

import numpy as np
import pytest

from mpiopt.federated import aggregate

RNG = np.random.default_rng(12)
VALUES = RNG.standard_normal((7, 5))
WEIGHTS = RNG.integers(3, 40, size=7).astype(float)


def loop_weighted_mean(values, weights):
    """sum_k (n_k / n) x_k, coordinate by coordinate, in client order."""
    total = 0.0
    for weight in weights:
        total += weight
    out = []
    for j in range(values.shape[1]):
        entry = 0.0
        for value, weight in zip(values, weights):
            entry += (weight / total) * value[j]
        out.append(entry)
    return np.array(out)


def test_weighted_mean_is_the_share_scaled_sum_in_client_order_and_numpys_average():
    mean = aggregate.weighted_mean(list(VALUES), list(WEIGHTS))
    np.testing.assert_array_equal(mean, loop_weighted_mean(VALUES, WEIGHTS))
    np.testing.assert_allclose(mean, np.average(VALUES, axis=0, weights=WEIGHTS), rtol=1e-14, atol=1e-15)


def test_weighted_mean_of_scalars_is_the_weighted_loss_as_a_python_float():
    losses, weights = [float(v) for v in VALUES[:, 0]], [float(w) for w in WEIGHTS]
    mean = aggregate.weighted_mean(losses, weights)
    total = sum(weights)
    assert type(mean) is float and mean == sum(w / total * loss for w, loss in zip(weights, losses))
    assert mean == pytest.approx(np.average(losses, weights=WEIGHTS), rel=1e-14)


def test_weighted_mean_with_divisors_is_fednovas_normalized_mean():
    divisors = [3.0, 1.5, 7.0, 2.0, 4.0, 1.0, 9.5]
    total = sum(WEIGHTS)
    expected = np.zeros(VALUES.shape[1])
    for value, weight, divisor in zip(VALUES, WEIGHTS, divisors):
        expected += (weight / total / divisor) * value
    np.testing.assert_array_equal(aggregate.weighted_mean(list(VALUES), list(WEIGHTS), divisors), expected)
    np.testing.assert_allclose(expected, np.average(VALUES / np.array(divisors)[:, None], axis=0, weights=WEIGHTS),
                               rtol=1e-13, atol=1e-15)


def test_weighted_mean_sum_first_is_flowers_aggregate():
    expected = np.zeros(VALUES.shape[1])
    for value, weight in zip(VALUES, WEIGHTS):
        expected = expected + value * weight
    expected = expected / WEIGHTS.sum()
    np.testing.assert_array_equal(aggregate.weighted_mean_sum_first(VALUES, WEIGHTS), expected)
    np.testing.assert_allclose(expected, np.average(VALUES, axis=0, weights=WEIGHTS), rtol=1e-14, atol=1e-15)


def test_ordered_and_weighted_sums_add_in_order_from_zero():
    coefficients = RNG.random(len(VALUES))
    plain, weighted = np.zeros(VALUES.shape[1]), np.zeros(VALUES.shape[1])
    for value, coefficient in zip(VALUES, coefficients):
        plain += value
        weighted += coefficient * value
    np.testing.assert_array_equal(aggregate.ordered_sum(list(VALUES)), plain)
    np.testing.assert_array_equal(aggregate.weighted_sum(list(VALUES), list(coefficients)), weighted)
    np.testing.assert_allclose(plain, VALUES.sum(axis=0), rtol=1e-14, atol=1e-15)


def test_evaluation_means_pool_the_rows_with_and_without_a_correctly_rounded_sum():
    rows = [(k, float(loss) * n, int(n // 2), int(n)) for k, (loss, n) in enumerate(zip(VALUES[:, 1] ** 2, WEIGHTS))]
    n = sum(row[3] for row in rows)
    loss, accuracy = aggregate.evaluation_mean(rows, accuracy=True)
    assert loss == sum(row[1] for row in rows) / n and accuracy == sum(row[2] for row in rows) / n
    assert loss == pytest.approx(np.average(VALUES[:, 1] ** 2, weights=WEIGHTS), rel=1e-14)
    exact, none = aggregate.evaluation_mean_exact(rows, accuracy=False)
    assert none is None and type(exact) is float and exact == math.fsum(row[1] for row in rows) / n
    assert aggregate.evaluation_mean(rows, accuracy=False)[1] is None


def test_median_and_trimmed_mean_match_sorted_columns_and_scipy():
    for values in (VALUES, VALUES[:6]):
        columns = [sorted(values[:, j]) for j in range(values.shape[1])]
        n = len(values)
        middle = [(c[(n - 1) // 2] + c[n // 2]) / 2 for c in columns]
        np.testing.assert_allclose(aggregate.median(values), middle, rtol=1e-15, atol=0)
        np.testing.assert_array_equal(aggregate.median(values), np.median(values, axis=0))
        for beta in (0.0, 0.15, 0.3, 0.49):
            cut = int(beta * n)
            expected = [np.mean(c[cut:n - cut]) for c in columns]
            np.testing.assert_allclose(aggregate.trimmed_mean(values, beta), expected, rtol=1e-14, atol=1e-15)
    stats = pytest.importorskip("scipy.stats")
    np.testing.assert_allclose(aggregate.trimmed_mean(VALUES, 0.2), stats.trim_mean(VALUES, 0.2, axis=0),
                               rtol=1e-14, atol=1e-15)


def brute_krum_scores(values, f):
    n = len(values)
    closest = max(1, n - f - 2)
    scores = []
    for i in range(n):
        distances = sorted(sum((a - b) ** 2 for a, b in zip(values[i], values[j])) for j in range(n) if j != i)
        scores.append(sum(distances[:closest]))
    return scores


@pytest.mark.parametrize("f", [0, 1, 2, 5])
def test_krum_scores_and_choices_match_a_brute_force_search(f):
    scores = aggregate.krum_scores(VALUES, f)
    np.testing.assert_allclose(scores, brute_krum_scores(VALUES, f), rtol=1e-12)
    best = int(np.argmin(brute_krum_scores(VALUES, f)))
    np.testing.assert_array_equal(aggregate.krum(VALUES, f), VALUES[best])
    for to_keep in (1, 3, 7, 9):
        kept = np.argsort(brute_krum_scores(VALUES, f))[:min(to_keep, len(VALUES))]
        np.testing.assert_allclose(aggregate.multi_krum(VALUES, WEIGHTS, f, to_keep),
                                   np.average(VALUES[kept], axis=0, weights=WEIGHTS[kept]), rtol=1e-13, atol=1e-15)


def brute_bulyan(values, f):
    remaining, selected = [list(v) for v in values], []
    for _ in range(len(values) - 2 * f):
        scores = brute_krum_scores(remaining, f)
        selected.append(remaining.pop(scores.index(min(scores))))
    beta = len(selected) - 2 * f
    out = []
    for j in range(len(values[0])):
        column = [row[j] for row in selected]
        middle = float(np.median(column))
        out.append(np.mean(sorted(column, key=lambda x: abs(x - middle))[:beta]))
    return np.array(out)


def test_bulyan_matches_a_brute_force_selection_and_refuses_too_few_reports():
    values = np.random.default_rng(3).standard_normal((11, 4))
    for f in (0, 1, 2):
        np.testing.assert_allclose(aggregate.bulyan(values, f), brute_bulyan(values, f), rtol=1e-13, atol=1e-15)
    with pytest.raises(ValueError, match=r"^bulyan needs n >= 4 f \+ 3 reporting clients: 11 reported, f = 3$"):
        aggregate.bulyan(values, 3)


def test_the_strategies_aggregate_through_these_functions():
    """FedAvg's Delta and FedNova's are the weighted means above, bit for bit (client order, any subset)."""
    from mpiopt.federated import ClientUpdate, get_strategy
    for subset in itertools.combinations(range(len(VALUES)), 4):
        updates = [ClientUpdate(client=k, delta=VALUES[k].copy(), weight=WEIGHTS[k], steps=k + 1, loss=0.0)
                   for k in subset]
        np.testing.assert_array_equal(get_strategy("fedavg").aggregate_fit(updates),
                                      loop_weighted_mean(VALUES[list(subset)], WEIGHTS[list(subset)]))
        total = sum(WEIGHTS[list(subset)])
        steps = sum(WEIGHTS[k] / total * (k + 1) for k in subset)
        nova = np.zeros(VALUES.shape[1])
        for k in subset:
            nova += (WEIGHTS[k] / total / (k + 1)) * VALUES[k]
        np.testing.assert_array_equal(get_strategy("fednova").aggregate_fit(updates), steps * nova)
