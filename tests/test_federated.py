"""Federated learning (mpiopt.federated): the strategies against their closed forms, faults, partitioners,
Synthetic(alpha, beta), checkpoints, and the same model at any rank count.

MPI tests run at any rank count (the serial pass at one rank, ``mpiexec -n K python -m pytest --only-mpi``
at K); references are closed forms, full-batch gradient descent, or a single-process run (COMM_SELF).
"""
import importlib.util

import numpy as np
import pytest
from mpi4py import MPI
from scipy import stats

from mpiopt.core.comm import CollectiveError
from mpiopt.data import load_dataset
from mpiopt.models import get_model
from mpiopt.models.base import Model
from mpiopt.federated import (ClientUpdate, FederatedResult, FedAvg, Hook, FedNova, FedProx, get_strategy, partition,
                              run_federated, split_clients, synthetic_clients)

DATA = load_dataset("digits", MPI.COMM_SELF)
X, Y = DATA.X_train[:600], DATA.y_train[:600]
TEST = (DATA.X_test[:200], DATA.y_test[:200])


def softmax(alpha=1e-3):
    return get_model("softmax", n_features=64, n_classes=10, alpha=alpha)


def clients(name="quantity", n_clients=12, **options):
    return split_clients(X, Y, partition(name, Y, n_clients, 3, **options))


def same_on_every_rank(comm, array):
    return all(np.array_equal(other, array) for other in comm.allgather(array))


# -- the strategies against their definitions ------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fedsgd_with_every_client_is_full_batch_gradient_descent(comm):
    parts = clients("quantity")  # unequal n_k: the weights n_k / n matter
    assert len({y.size for _, y in parts}) > 3
    model, lr = softmax(), 0.5
    result = run_federated(model, parts, "fedsgd", comm, fraction=1.0, rounds=6, lr=lr)
    X_all = np.concatenate([Xk for Xk, _ in parts])
    y_all = np.concatenate([yk for _, yk in parts])
    w = model.init_params(0)
    for _ in range(6):
        w = w - lr * model.loss_and_grad(w, X_all, y_all)[1]
    assert np.linalg.norm(result.params - w) <= 1e-12 * np.linalg.norm(w)
    assert result.history["participants"] == [12] * 6 and result.status == "finished"
    assert same_on_every_rank(comm, result.params)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fedavg_with_one_full_batch_epoch_and_every_client_is_fedsgd(comm):
    parts = clients("dirichlet", alpha=0.5)
    fedavg = run_federated(softmax(), parts, "fedavg", comm, fraction=1.0, rounds=4, local_epochs=1,
                           batch_size=None, lr=0.3)
    fedsgd = run_federated(softmax(), parts, "fedsgd", comm, fraction=1.0, rounds=4, local_epochs=7,
                           batch_size=5, lr=0.3)
    assert np.array_equal(fedavg.params, fedsgd.params)


def test_aggregation_weights_clients_by_their_rows():
    updates = [ClientUpdate(0, np.array([1.0, 0.0]), 1.0, 4, 0.0), ClientUpdate(5, np.array([0.0, 1.0]), 3.0, 1, 0.0)]
    assert np.allclose(FedAvg().aggregate_fit(updates), [0.25, 0.75])
    # FedNova: tau_eff = 0.25 * 4 + 0.75 * 1 = 1.75, d = (1/4, 0), (0, 1)
    assert np.allclose(FedNova().aggregate_fit(updates), 1.75 * np.array([0.25 / 4, 0.75]))
    # two clients of 1 and 3 rows, one full-batch step each: the step of the 4 rows' mean gradient
    model = softmax(alpha=0.0)
    parts = [(X[:1], Y[:1]), (X[1:4], Y[1:4])]
    result = run_federated(model, parts, "fedsgd", MPI.COMM_SELF, fraction=1.0, rounds=1, lr=1.0)
    assert np.allclose(result.params, -model.loss_and_grad(model.init_params(0), X[:4], Y[:4])[1], atol=1e-15)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fedprox_with_mu_zero_is_fedavg_and_keeps_the_stragglers_fedavg_drops(comm):
    parts = clients("pathological", n_clients=20)
    common = dict(fraction=0.5, rounds=4, local_epochs=3, batch_size=16, lr=0.05)
    fedavg = run_federated(softmax(), parts, "fedavg", comm, **common)
    fedprox = run_federated(softmax(), parts, "fedprox", comm, strategy_options={"mu": 0.0}, **common)
    assert np.array_equal(fedavg.params, fedprox.params)
    proximal = run_federated(softmax(), parts, "fedprox", comm, strategy_options={"mu": 1.0}, **common)
    assert not np.array_equal(proximal.params, fedavg.params)
    straggling = dict(common, stragglers=0.5)
    dropped = run_federated(softmax(), parts, "fedavg", comm, **straggling)
    kept = run_federated(softmax(), parts, "fedprox", comm, strategy_options={"mu": 0.0}, **straggling)
    assert sum(dropped.history["stragglers"]) > 0 and sum(kept.history["stragglers"]) == 0
    assert (sum(kept.history["participants"])
            == sum(dropped.history["participants"]) + sum(dropped.history["stragglers"]))


class Quadratic(Model):
    """F_k(x) = (1/2) ||x - e_k||^2: every row of client k's X is its target e_k."""
    name = "quadratic"

    def __init__(self, n):
        super().__init__(n, [(n,)])

    def init_params(self, seed):
        return np.zeros(self.n_params)

    def loss_and_grad(self, params, X, y):
        difference = params - X.mean(axis=0)
        return 0.5 * float(difference @ difference), difference

    def predict(self, params, X):
        return np.zeros(X.shape[0])


def test_fednova_fixed_point_is_the_optimum_where_fedavg_is_biased_toward_more_local_steps():
    # client k has rows[k] copies of e_k and B = 1: tau_k = rows[k] local GD steps of rate lr on F_k
    rows, lr = np.array([1, 2, 8]), 0.01
    parts = [(np.tile(np.eye(3)[k], (rows[k], 1)), np.zeros(rows[k])) for k in range(3)]
    p = rows / rows.sum()
    optimum = p  # argmin sum_k p_k F_k = sum_k p_k e_k
    contraction = 1 - (1 - lr) ** rows  # delta_k = contraction_k (e_k - x)
    expected = {"fedavg": p * contraction / (p * contraction).sum(),
                "fednova": p * contraction / rows / (p * contraction / rows).sum()}
    small_lr_limit = {"fedavg": p * rows / (p * rows).sum(), "fednova": optimum}
    # both fixed-point iterations contract every coordinate by 1 - sum_k p_k c_k = 0.939 a round (FedNova's by
    # tau_eff sum_k p_k c_k / tau_k, also 0.939 here): 600 rounds leave 5e-17 of the start
    for name in ("fedavg", "fednova"):
        result = run_federated(Quadratic(3), parts, name, MPI.COMM_SELF, fraction=1.0, rounds=600, batch_size=1,
                               lr=lr)
        assert np.allclose(result.params, expected[name], rtol=0, atol=1e-9), name
        assert np.linalg.norm(result.params - small_lr_limit[name]) < 0.02, name
    fedavg = expected["fedavg"]
    assert np.linalg.norm(fedavg - optimum) > 0.2 and fedavg[2] > optimum[2], "FedAvg leans to the 8-step client"
    assert np.linalg.norm(expected["fednova"] - optimum) < 0.02


def heavy_ball_contraction(lr, momentum, steps):
    """c with x_tau - e = (1 - c)(x_0 - e) after ``steps`` of PyTorch's momentum SGD on (1/2)||x - e||^2 (brute
    force on the scalar displacement; b_1 = g_1)."""
    displacement, buffer = 1.0, 0.0
    for step in range(steps):
        buffer = displacement if step == 0 else momentum * buffer + displacement
        displacement -= lr * buffer
    return 1.0 - displacement


def test_fednova_with_client_momentum_normalizes_by_the_momentum_coefficients_so_the_bias_vanishes_as_lr_shrinks():
    # Wang et al. 2020, Sec. 5: momentum SGD's delta_k = -lr sum_j a_kj g_j, a_kj = (1 - rho^(tau - j + 1)) / (1 - rho)
    rows, momentum = np.array([1, 2, 8]), 0.9
    parts = [(np.tile(np.eye(3)[k], (rows[k], 1)), np.zeros(rows[k])) for k in range(3)]
    p = rows / rows.sum()  # the optimum of sum_k p_k F_k
    a_norm = np.array([sum((1 - momentum ** (tau - j + 1)) / (1 - momentum) for j in range(1, tau + 1))
                       for tau in rows])
    bias = {}
    for lr, start in ((1e-2, None), (1e-3, "fixed point")):
        contraction = np.array([heavy_ball_contraction(lr, momentum, tau) for tau in rows])  # delta_k = c_k (e_k - x)
        fixed_point = p * contraction / a_norm / (p * contraction / a_norm).sum()
        result = run_federated(Quadratic(3), parts, "fednova", MPI.COMM_SELF, fraction=1.0, batch_size=1, lr=lr,
                               momentum=momentum, rounds=150 if start is None else 3,
                               params=None if start is None else fixed_point)
        assert np.allclose(result.params, fixed_point, rtol=0, atol=1e-9), (lr, result.params, fixed_point)
        bias[lr] = np.linalg.norm(fixed_point - p)
        # dividing by tau_k instead leaves the model near p a / tau / sum(p a / tau) however small lr is
        by_steps = p * contraction / rows / (p * contraction / rows).sum()
        assert np.linalg.norm(by_steps - p) > 0.15
    assert bias[1e-3] < 0.01 and bias[1e-3] < bias[1e-2] / 5, bias


def test_server_momentum_is_fedavgm_and_defaults_to_plain_fedavg():
    parts = clients()
    plain = run_federated(softmax(), parts, "fedavg", MPI.COMM_SELF, fraction=0.5, rounds=3, lr=0.05)
    unit = run_federated(softmax(), parts, FedAvg(server_lr=1.0, server_momentum=0.0), MPI.COMM_SELF,
                         fraction=0.5, rounds=3, lr=0.05)
    momentum = run_federated(softmax(), parts, "fedavg", MPI.COMM_SELF, fraction=0.5, rounds=3, lr=0.05,
                             strategy_options={"server_momentum": 0.9})
    assert np.array_equal(plain.params, unit.params) and not np.array_equal(plain.params, momentum.params)


# -- rank counts, faults --------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.many_ranks  # the clients' ranks change with the rank count
@pytest.mark.timeout(90)
@pytest.mark.parametrize("strategy", ["fedavg", "fedprox", "fednova"])
def test_any_rank_count_gives_the_single_process_model_bit_for_bit(comm, strategy):
    parts = clients("dirichlet", n_clients=25, alpha=0.3)
    options = dict(fraction=0.4, rounds=5, local_epochs=2, batch_size=10, lr=0.05, dropout=0.2, stragglers=0.4,
                   seed=7)
    distributed = run_federated(softmax(), parts, strategy, comm, test_data=TEST, **options)
    single = run_federated(softmax(), parts, strategy, MPI.COMM_SELF, test_data=TEST, **options)
    assert np.array_equal(distributed.params, single.params)
    for column in ("participants", "dropped", "stragglers", "loss", "test_accuracy", "bytes_sent"):
        assert distributed.history[column] == single.history[column], column
    assert distributed.loss == single.loss and distributed.test_accuracy == single.test_accuracy
    assert same_on_every_rank(comm, distributed.params)
    assert distributed.info["ranks"] == comm.size and distributed.info["placement"] == "client k on rank k % ranks"


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_dropouts_are_counted_and_a_round_without_reports_keeps_the_model(comm):
    result = run_federated(softmax(), clients(), "fedavg", comm, fraction=0.5, rounds=6, dropout=0.5, lr=0.05)
    h = result.history
    assert sum(h["dropped"]) > 0
    assert all(s == p + d for s, p, d in zip(h["sampled"], h["participants"], h["dropped"]))
    parts = clients(n_clients=2)
    empty = run_federated(softmax(), parts, "fedavg", comm, fraction=1.0, rounds=2, dropout=0.95, seed=1)
    assert empty.history["participants"] == [0, 0] and empty.history["loss"] == [None] * 2
    assert all(note == "no client reported; the model is kept" for note in empty.history["note"])
    assert np.array_equal(empty.params, softmax().init_params(1)) and empty.history["bytes_sent"] == [0.0] * 2


# -- Poisson client sampling ----------------------------------------------------------------------------
def test_poisson_sampling_includes_each_client_independently_with_probability_fraction():
    # reference: K independent Bernoulli(q) draws a round, so a round's size is Binomial(K, q) (scipy's pmf),
    # each client is in a share q of the rounds and each pair in a share q^2; fixed sampling has one size only
    n_clients, q, rounds = 40, 0.15, 3000
    chosen = np.zeros((rounds, n_clients), dtype=bool)
    for round in range(rounds):
        sampled = FedAvg().configure_fit(round, n_clients, q, 5, "poisson")
        assert np.all(np.diff(sampled) > 0) and sampled.dtype.kind == "i"
        chosen[round, sampled] = True
    trials = rounds * n_clients
    assert abs(chosen.mean() - q) < 4 * np.sqrt(q * (1 - q) / trials)
    per_client = chosen.mean(axis=0)
    assert np.max(np.abs(per_client - q)) < 5 * np.sqrt(q * (1 - q) / rounds)
    pairs = (chosen.T.astype(float) @ chosen.astype(float)) / rounds
    off_diagonal = pairs[~np.eye(n_clients, dtype=bool)]
    assert abs(off_diagonal.mean() - q * q) < 0.1 * q * q
    sizes = chosen.sum(axis=1)
    counts = np.bincount(sizes, minlength=n_clients + 1)
    pmf = stats.binom.pmf(np.arange(n_clients + 1), n_clients, q)
    lumped = [(counts[:2].sum(), pmf[:2].sum())] + [(counts[k], pmf[k]) for k in range(2, 12)] + [
        (counts[12:].sum(), pmf[12:].sum())]  # tails lumped so that every expected count is >= 5
    observed, expected = np.array(lumped).T
    assert stats.chisquare(observed, expected * rounds).pvalue > 1e-3
    fixed = {FedAvg().configure_fit(round, n_clients, q, 5).size for round in range(50)}
    assert fixed == {6}  # round(0.15 * 40): fixed sampling draws exactly m every round
    with pytest.raises(ValueError, match="sampling must be one of fixed, poisson"):
        FedAvg().configure_fit(0, n_clients, q, 5, "bernoulli")


class Participants(Hook):
    """A hook that keeps, on every rank, the clients that train in each round (``begin_round``)."""

    def __init__(self):
        self.rounds = []

    def begin_round(self, round, participants):
        self.rounds.append(list(participants))


@pytest.mark.mpi
@pytest.mark.many_ranks  # the sampled clients are spread over the ranks differently at each rank count
@pytest.mark.timeout(60)
def test_poisson_sampled_clients_are_the_same_at_any_rank_count(comm):
    parts = clients("dirichlet", n_clients=25, alpha=0.3)
    options = dict(fraction=0.3, client_sampling="poisson", rounds=5, lr=0.05, dropout=0.2, stragglers=0.3, seed=4)
    here, alone = Participants(), Participants()
    distributed = run_federated(softmax(), parts, "fedavg", comm, hooks=[here], **options)
    single = run_federated(softmax(), parts, "fedavg", MPI.COMM_SELF, hooks=[alone], **options)
    assert here.rounds == alone.rounds and comm.allgather(here.rounds) == [here.rounds] * comm.size
    assert distributed.history["sampled"] == single.history["sampled"]
    assert len(set(distributed.history["sampled"])) > 1  # the round's size varies: Poisson, not m of K
    assert np.array_equal(distributed.params, single.params) and same_on_every_rank(comm, distributed.params)
    assert distributed.info["sampling"] == "poisson: each client with probability 0.3, 7.5 expected"


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fedsgd_with_poisson_sampling_steps_on_the_sampled_clients_rows_and_keeps_the_model_in_an_empty_round(comm):
    # reference: FedSGD weights the sampled clients by n_k over the sampled ones, so a round is one gradient step
    # on the pooled rows of the clients that round sampled; a round that samples none keeps the model (also with
    # server momentum)
    parts, model, lr = clients("quantity"), softmax(), 0.5
    seen = Participants()
    options = dict(fraction=0.15, client_sampling="poisson", rounds=8, lr=lr, seed=9)
    result = run_federated(model, parts, "fedsgd", comm, hooks=[seen], **options)
    sizes = [len(chosen) for chosen in seen.rounds]
    assert sizes == result.history["sampled"] and 0 in sizes and max(sizes) >= 2, sizes
    w = model.init_params(9)
    for chosen in seen.rounds:
        if chosen:
            w = w - lr * model.loss_and_grad(w, np.concatenate([parts[k][0] for k in chosen]),
                                             np.concatenate([parts[k][1] for k in chosen]))[1]
    assert np.linalg.norm(result.params - w) <= 1e-12 * np.linalg.norm(w)
    empty = [round for round, size in enumerate(sizes) if size == 0]
    assert all(result.history["note"][round] == "no client was sampled; the model is kept" for round in empty)
    assert all(result.history["loss"][round] is None for round in empty)
    assert all(note is None for round, note in enumerate(result.history["note"]) if round not in empty)
    nobody = run_federated(model, parts, "fedavg", comm, strategy_options={"server_momentum": 0.9},
                           **dict(options, fraction=0.001, rounds=2))
    assert nobody.history["sampled"] == [0, 0] and np.array_equal(nobody.params, model.init_params(9))


class FailFor(Hook):
    """A hook that raises for one client: a client whose local work fails."""

    def __init__(self, client):
        self.client = client

    def transform_update(self, update, client, round):
        if client == self.client:
            raise RuntimeError(f"client {client} lost its data")
        return update


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_failing_client_is_reported_and_left_out_or_ends_the_run_on_every_rank(comm):
    parts = clients()
    tolerated = run_federated(softmax(), parts, "fedavg", comm, fraction=1.0, rounds=2, hooks=[FailFor(3)],
                              tolerate_failures=True)
    assert tolerated.history["failed"] == [1, 1] and tolerated.history["participants"] == [11, 11]
    assert tolerated.history["failures"][0] == [{"client": 3, "error": "RuntimeError: client 3 lost its data"}]
    with pytest.raises(CollectiveError) as raised:
        run_federated(softmax(), parts, "fedavg", comm, fraction=1.0, rounds=2, hooks=[FailFor(3)])
    message = "client 3 failed in round 0: RuntimeError: client 3 lost its data"
    assert f"rank {3 % comm.size}: {message}" in str(raised.value)


def test_hooks_see_every_update_and_the_aggregate_in_order():
    calls = []

    class Recorder(Hook):
        def transform_update(self, update, client, round):
            calls.append(("update", round, client))
            return update

        def transform_aggregate(self, delta, round, updates):
            calls.append(("aggregate", round, tuple(u.client for u in updates)))
            return delta

        reports_epsilon = True

        def epsilon(self):
            return 1.5

    result = run_federated(softmax(), clients(n_clients=3), "fedavg", MPI.COMM_SELF, fraction=1.0, rounds=1,
                           hooks=[Recorder()])
    assert calls == [("update", 0, 0), ("update", 0, 1), ("update", 0, 2), ("aggregate", 0, (0, 1, 2))]
    assert result.history["epsilon"] == [1.5]
    plain = run_federated(softmax(), clients(n_clients=3), "fedavg", MPI.COMM_SELF, fraction=1.0, rounds=1)
    assert plain.history["epsilon"] == [None]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_bad_settings_raise_the_same_error_on_every_rank(comm):
    for options, message in (({"fraction": 0.0}, "fraction must be in (0, 1]"),
                             ({"rounds": 1, "stepsize": 1}, "unknown federated setting(s) 'stepsize'"),
                             ({"client_sampling": "uniform"},
                              "client_sampling must be one of fixed, poisson, got 'uniform'"),
                             ({"strategy": "fedfoo"}, "strategy must be one of fedavg, fedsgd, fedprox, fednova")):
        options = dict(options)
        strategy = options.pop("strategy", "fedavg")
        with pytest.raises(CollectiveError, match=message.replace("(", r"\(").replace(")", r"\)")):
            run_federated(softmax(), clients(), strategy, comm, **options)


def with_non_finite(parts, client, where, value):
    """A copy of the clients with ``value`` (NaN or inf) in one entry of client ``client``'s X or y."""
    parts = [(Xk.copy(), yk.astype(np.float64)) for Xk, yk in parts]
    Xk, yk = parts[client]
    if where == "X":
        Xk[1, 3] = value
    else:
        yk[0] = value
    return parts


@pytest.mark.mpi
@pytest.mark.many_ranks  # the client's rank changes with the rank count
@pytest.mark.timeout(60)
@pytest.mark.parametrize("where, value", [("X", np.nan), ("X", -np.inf), ("y", np.inf)])
def test_nan_or_inf_in_one_clients_data_is_refused_with_the_same_error_on_every_rank(comm, where, value):
    # one client of 12 (on rank 5 % p), possibly never sampled, failures tolerated: refused before any round
    model = softmax() if where == "X" else get_model("linear", n_features=64)
    parts = with_non_finite(clients(), 5, where, value)
    if where == "X":
        parts = [(Xk, yk.astype(np.int64)) for Xk, yk in parts]
    with pytest.raises(CollectiveError) as raised:
        run_federated(model, parts, "fedavg", comm, fraction=0.25, rounds=2, tolerate_failures=True)
    message = str(raised.value)
    assert f"client 5: {where} contains NaN or inf" in message and f"rank {5 % comm.size}:" in message, message
    assert len(set(comm.allgather(message))) == 1
    with pytest.raises(CollectiveError, match="test_data: X contains NaN or inf"):
        bad_test = (TEST[0].copy(), TEST[1])
        bad_test[0][0, 0] = np.nan
        run_federated(softmax(), clients(), "fedavg", comm, test_data=bad_test, rounds=1)
    with pytest.raises(CollectiveError, match="params contains NaN or inf"):
        run_federated(softmax(), clients(), "fedavg", comm, params=np.full(softmax().n_params, np.nan), rounds=1)


# -- checkpoints, output --------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_run_resumed_at_a_round_boundary_matches_an_uninterrupted_one_bit_for_bit(comm, tmp_path):
    folder = comm.bcast(str(tmp_path), root=0)
    parts = clients("dirichlet", n_clients=16, alpha=0.5)
    options = dict(fraction=0.5, local_epochs=2, lr=0.05, dropout=0.1, stragglers=0.3)
    momentum = {"server_momentum": 0.5}
    straight = run_federated(softmax(), parts, "fedprox", comm, strategy_options=momentum, rounds=6, **options)
    path = f"{folder}/fed.ckpt.npz"
    first = run_federated(softmax(), parts, "fedprox", comm, strategy_options=momentum, rounds=3, checkpoint=path,
                          **options)
    resumed = run_federated(softmax(), parts, "fedprox", comm, strategy_options=momentum, rounds=6,
                            checkpoint=path, **options)
    assert first.rounds == 3 and resumed.rounds == 6 and resumed.info["resumed_at"] == 3
    assert np.array_equal(resumed.params, straight.params)
    assert resumed.history["loss"] == straight.history["loss"]
    with pytest.raises(CollectiveError, match="belongs to another problem"):
        run_federated(softmax(), parts, "fedprox", comm, strategy_options=momentum, rounds=7, checkpoint=path,
                      **dict(options, lr=0.1))
    with pytest.raises(CollectiveError, match="client_sampling was 'fixed', now 'poisson'"):
        run_federated(softmax(), parts, "fedprox", comm, strategy_options=momentum, rounds=7, checkpoint=path,
                      **dict(options, client_sampling="poisson"))


def test_result_writes_json_and_csv(tmp_path):
    import csv
    import json
    result = run_federated(softmax(), clients(), "fedavg", MPI.COMM_SELF, test_data=TEST, rounds=3, eval_every=2)
    assert isinstance(result, FederatedResult)
    result.save_json(tmp_path / "fed.json")
    result.to_csv(tmp_path / "fed.csv")
    payload = json.loads((tmp_path / "fed.json").read_text())
    assert payload["rounds"] == 3 and len(payload["params"]) == 650
    assert payload["history"]["test_accuracy"][0] is None and payload["history"]["test_accuracy"][1] is not None
    rows = list(csv.DictReader(open(tmp_path / "fed.csv")))
    assert [row["round"] for row in rows] == ["1", "2", "3"] and float(rows[2]["bytes_sent"]) > 0
    assert [[int(k) for k in row["sampled_clients"].split()] for row in rows] == result.history["sampled_clients"]
    assert all(row["byzantine_clients"] == "" for row in rows)


def test_require_plotting_says_how_to_install_matplotlib_before_any_round(monkeypatch, tmp_path):
    import builtins
    from mpiopt.federated.result import require_plotting
    result = run_federated(softmax(), clients(), "fedavg", MPI.COMM_SELF, rounds=1)
    if importlib.util.find_spec("matplotlib") is not None:
        assert hasattr(require_plotting(), "subplots")
        result.plot(tmp_path / "fed.png")
        assert (tmp_path / "fed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r"plotting needs matplotlib: pip install 'mpiopt\[plots\]'"):
        require_plotting()
    with pytest.raises(ImportError, match=r"pip install 'mpiopt\[plots\]'"):
        result.plot(tmp_path / "other.png")


# -- data -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, options", [("iid", {}), ("pathological", {}), ("dirichlet", {"alpha": 0.3}),
                                           ("quantity", {"alpha": 0.5})])
def test_partitioners_assign_every_row_once_and_are_seeded(name, options):
    parts = partition(name, Y, 20, 5, **options)
    assert len(parts) == 20 and all(part.size > 0 for part in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(Y.size))
    again = partition(name, Y, 20, 5, **options)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, partition(name, Y, 20, 6, **options)))


def test_partitioners_skew_labels_and_sizes_as_their_schemes_say():
    schemes = {"iid": ("iid", {}), "pathological": ("pathological", {}), "dirichlet": ("dirichlet", {"alpha": 0.1}),
               "dirichlet_wide": ("dirichlet", {"alpha": 100.0})}
    labels_per_client = {key: [np.unique(Y[part]).size for part in partition(name, Y, 30, 0, **options)]
                         for key, (name, options) in schemes.items()}
    assert max(labels_per_client["pathological"]) <= 4 and np.median(labels_per_client["pathological"]) <= 2
    assert np.mean(labels_per_client["iid"]) > 8
    assert np.mean(labels_per_client["dirichlet"]) < np.mean(labels_per_client["dirichlet_wide"]) - 3
    iid_sizes = [part.size for part in partition("iid", Y, 30, 0)]
    assert max(iid_sizes) - min(iid_sizes) <= 1
    quantity_sizes = [part.size for part in partition("quantity", Y, 30, 0, alpha=0.5)]
    assert max(quantity_sizes) > 2 * np.median(quantity_sizes) and min(quantity_sizes) >= 1
    with pytest.raises(ValueError, match="cannot give each of 700 clients a row"):
        partition("iid", Y, 700)


def test_synthetic_clients_have_the_papers_shapes_and_are_seeded_per_client():
    clients_ = synthetic_clients(5, alpha=1.0, beta=1.0, seed=2, max_samples=300)
    assert len(clients_) == 5
    for X_k, y_k in clients_:
        assert X_k.shape[1] == 60 and X_k.shape[0] == y_k.size and 50 <= y_k.size <= 300
        assert y_k.dtype == np.int64 and 0 <= y_k.min() and y_k.max() < 10
    more = synthetic_clients(8, alpha=1.0, beta=1.0, seed=2, max_samples=300)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(clients_, more[:5]))
    other = synthetic_clients(5, alpha=1.0, beta=1.0, seed=3, max_samples=300)
    assert not np.array_equal(clients_[0][1][:50], other[0][1][:50])
    homogeneous = synthetic_clients(3, alpha=0.0, beta=0.0, seed=0, max_samples=200)
    heterogeneous = synthetic_clients(3, alpha=5.0, beta=5.0, seed=0, max_samples=200)
    spread = [np.std([X_k.mean() for X_k, _ in data]) for data in (homogeneous, heterogeneous)]
    assert spread[0] < spread[1]


def test_get_strategy_builds_registered_strategies_with_their_options():
    assert isinstance(get_strategy("fedprox", mu=0.1), FedProx) and get_strategy("fedprox", mu=0.1).mu == 0.1
    with pytest.raises(ValueError, match="mu must be a number >= 0"):
        get_strategy("fedprox", mu=-1)
    with pytest.raises(TypeError):
        get_strategy("fedavg", mu=0.1)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_sigterm_ends_the_run_at_the_round_boundary_with_a_checkpoint(comm, tmp_path):
    import os
    import signal

    class TermAt(Hook):
        def transform_update(self, update, client, round):
            if round == 1 and client == 0:
                os.kill(os.getpid(), signal.SIGTERM)
            return update

    path = comm.bcast(str(tmp_path), root=0) + "/term.ckpt.npz"
    parts = clients()
    options = dict(fraction=1.0, rounds=4, lr=0.05)
    stopped = run_federated(softmax(), parts, "fedavg", comm, hooks=[TermAt()], checkpoint=path, **options)
    assert stopped.status == "interrupted" and stopped.info["stop"] == "signal" and stopped.rounds == 2
    resumed = run_federated(softmax(), parts, "fedavg", comm, checkpoint=path, **options)
    straight = run_federated(softmax(), parts, "fedavg", comm, **options)
    assert resumed.status == "finished" and np.array_equal(resumed.params, straight.params)
