"""FedBuff (mpiopt.federated.fedbuff): the staleness weights, the server's step count, the reduction to FedAvg,
convergence, a slow worker that does not hold the server back, and clean shutdown.

Arrivals from several workers depend on timing, so the MPI tests check properties, not an exact model,
except with one worker (two ranks), where the run is deterministic.  MPI tests run at any rank count
(``mpiexec -n K python -m pytest --only-mpi``); FedBuff itself needs two ranks and skips below.
"""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core.comm import CollectiveError
from mpiopt.data import load_dataset
from mpiopt.federated import (FedBuff, FederatedResult, Instructions, partition, run_fedbuff, run_federated,
                              split_clients, staleness_weight)
from mpiopt.models import get_model

DATA = load_dataset("digits", MPI.COMM_SELF)
X, Y = DATA.X_train[:600], DATA.y_train[:600]
TEST = (DATA.X_test[:200], DATA.y_test[:200])


def softmax():
    return get_model("softmax", n_features=64, n_classes=10, alpha=1e-3)


def iid_clients(n_clients):
    return split_clients(X, Y, partition("iid", Y, n_clients, 3))


def needs_two_ranks(comm):
    if comm.size < 2:
        pytest.skip("FedBuff needs a server and at least one worker")


def server_and_one_worker(comm):
    """Ranks 0 and 1 of ``comm`` as a communicator of their own (None on the other ranks): one worker, so
    the run is deterministic."""
    needs_two_ranks(comm)
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    return None if pair == MPI.COMM_NULL else pair


def same_on_every_rank(comm, array):
    return all(np.array_equal(other, array) for other in comm.allgather(array))


# -- the weighting -------------------------------------------------------------------------------------------
def test_staleness_weight_follows_the_formula():
    for tau in (0, 1, 2, 5, 100):
        assert staleness_weight(tau) == pytest.approx((1 + tau) ** -0.5, rel=1e-15)
        assert staleness_weight(tau, "polynomial", 2.0) == pytest.approx((1 + tau) ** -2.0, rel=1e-15)
        assert staleness_weight(tau, "constant") == 1.0
    assert staleness_weight(0) == 1.0 and staleness_weight(3) == 0.5
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        staleness_weight(-1)
    with pytest.raises(ValueError, match="polynomial, constant"):
        staleness_weight(1, "hinge")


def test_fedbuff_at_one_rank_raises_a_collective_error():
    with pytest.raises(CollectiveError, match="at least 2 ranks"):
        run_fedbuff(softmax(), iid_clients(4), MPI.COMM_SELF, server_steps=1)


# run_fedbuff's documented keywords: buffer_size, server_steps (or rounds), server_lr, staleness,
# staleness_exponent, concurrency, and any setting of run_federated
KEYWORDS = [{"rounds": 2}, {"server_steps": 2}, {"buffer_size": 2}, {"server_lr": 0.5}, {"staleness": "constant"},
            {"staleness_exponent": 1.0}, {"concurrency": 2}, {"lr": 0.05}]


@pytest.mark.parametrize("keyword", KEYWORDS, ids=lambda keyword: next(iter(keyword)))
def test_run_fedbuff_takes_each_documented_keyword(keyword):
    # at one rank every accepted call ends in the same refusal: FedBuff needs a server and a worker
    with pytest.raises(CollectiveError, match="fedbuff needs at least 2 ranks"):
        run_fedbuff(softmax(), iid_clients(4), MPI.COMM_SELF, **keyword)


def test_run_fedbuff_refuses_rounds_and_server_steps_together_in_one_line():
    with pytest.raises(CollectiveError) as caught:
        run_fedbuff(softmax(), iid_clients(4), MPI.COMM_SELF, rounds=2, server_steps=3)
    assert str(caught.value) == ("rank 0: run_fedbuff: give rounds or server_steps (both are the server's steps), "
                                 "not both: rounds=2, server_steps=3")


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_run_fedbuff_with_its_documented_keywords_is_run_federated(comm):
    """One worker (two ranks): deterministic, so the older name and the new call give the same model."""
    pair = server_and_one_worker(comm)
    if pair is None:
        return
    options = {"buffer_size": 2, "server_lr": 0.5, "staleness": "constant", "staleness_exponent": 1.0,
               "concurrency": 2}
    direct = run_federated(softmax(), iid_clients(6), "fedbuff", pair, strategy_options=options, rounds=3, lr=0.05)
    for steps in ({"rounds": 3}, {"server_steps": 3}):
        older = run_fedbuff(softmax(), iid_clients(6), pair, lr=0.05, **options, **steps)
        assert older.rounds == 3 and older.info["strategy_options"] == direct.info["strategy_options"], steps
        assert np.array_equal(older.params, direct.params), steps
    pair.Free()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_bad_settings_raise_the_same_error_on_every_rank(comm):
    with pytest.raises(CollectiveError) as caught:
        run_fedbuff(softmax(), iid_clients(4), comm, buffer_size=0, staleness="hinge")
    assert len(set(comm.allgather(str(caught.value)))) == 1
    if comm.size >= 2:
        assert "buffer_size must be an int >= 1" in str(caught.value)


@pytest.mark.mpi
@pytest.mark.many_ranks  # the client's rank changes with the rank count
@pytest.mark.timeout(60)
def test_nan_in_one_clients_features_is_refused_with_the_same_error_on_every_rank(comm):
    needs_two_ranks(comm)
    parts = [(Xk.copy(), yk) for Xk, yk in iid_clients(6)]
    parts[4][0][2, 7] = np.nan  # client 4 lives on worker 1 + 4 % (p - 1)
    with pytest.raises(CollectiveError) as caught:
        run_fedbuff(softmax(), parts, comm, buffer_size=2, server_steps=1)
    message = str(caught.value)
    assert f"rank {1 + 4 % (comm.size - 1)}: client 4: X contains NaN or inf" in message, message
    assert len(set(comm.allgather(message))) == 1


# -- the server -----------------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_server_takes_exactly_server_steps_steps_of_buffer_size_updates(comm, tmp_path):
    needs_two_ranks(comm)
    result = run_fedbuff(softmax(), iid_clients(12), comm, buffer_size=3, server_steps=5, concurrency=2,
                         lr=0.05, test_data=TEST)
    assert isinstance(result, FederatedResult) and result.status == "finished" and result.info["stop"] == "rounds"
    assert result.rounds == 5 and result.history["round"] == [1, 2, 3, 4, 5]
    assert result.history["participants"] == [3] * 5
    assert result.info["updates_applied"] == 15 and result.info["discarded"] >= 0
    assert all(tau >= 0 for taus in result.history["staleness"] for tau in taus)
    assert all(1 <= worker < comm.size for workers in result.history["workers"] for worker in workers)
    assert all(client % (comm.size - 1) == worker - 1
               for clients, workers in zip(result.history["clients"], result.history["workers"])
               for client, worker in zip(clients, workers))
    assert result.test_accuracy is not None and result.history["test_accuracy"][-1] == result.test_accuracy
    assert same_on_every_rank(comm, result.params)
    result.to_csv(tmp_path / "fedbuff.csv")
    assert len((tmp_path / "fedbuff.csv").read_text().splitlines()) == 6


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_one_worker_with_fresh_updates_and_constant_weights_is_fedavg(comm):
    """Two ranks, K = concurrency = every client: each pull trains every client from one model, all fresh."""
    pair = server_and_one_worker(comm)
    if pair is None:
        return
    parts = iid_clients(6)  # equal n_k: FedAvg's weights n_k / n are FedBuff's 1 / K
    options = dict(local_epochs=2, batch_size=10, lr=0.1)
    fedbuff = run_fedbuff(softmax(), parts, pair, buffer_size=6, concurrency=6, server_steps=4,
                          staleness="constant", **options)
    fedavg = run_federated(softmax(), parts, "fedavg", MPI.COMM_SELF, fraction=1.0, rounds=4, **options)
    pair.Free()
    assert fedbuff.history["staleness"] == [[0] * 6] * 4
    assert np.linalg.norm(fedbuff.params - fedavg.params) <= 1e-12 * np.linalg.norm(fedavg.params)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fedbuff_reaches_the_optimum_fedavg_reaches_on_a_convex_problem(comm):
    """Noiseless least squares with one shared optimum: both reach it, whatever the order of arrivals."""
    needs_two_ranks(comm)
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=5)
    parts = []
    for _ in range(8):
        features = rng.normal(size=(40, 5))
        parts.append((features, features @ w_true + 0.5))
    model = get_model("linear", n_features=5)
    options = dict(local_epochs=1, batch_size=None, lr=0.3)
    fedbuff = run_fedbuff(model, parts, comm, buffer_size=2, concurrency=2, server_steps=120, **options)
    fedavg = run_federated(model, parts, "fedavg", MPI.COMM_SELF, fraction=1.0, rounds=120, **options)
    optimum = np.concatenate([w_true, [0.5]])
    assert np.linalg.norm(fedavg.params - optimum) <= 1e-6
    assert np.linalg.norm(fedbuff.params - optimum) <= 1e-3 * np.linalg.norm(optimum)
    assert fedbuff.loss <= 1e-6 and same_on_every_rank(comm, fedbuff.params)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_slow_worker_does_not_block_the_server(comm):
    """Worker 1's clients sleep 1 s each; the others' updates fill the buffers meanwhile."""
    if comm.size < 3:
        pytest.skip("needs a slow worker and a fast one")
    n_clients, steps = 12, 10
    delays = [1.0 if client % (comm.size - 1) == 0 else 0.0 for client in range(n_clients)]
    result = run_fedbuff(softmax(), iid_clients(n_clients), comm, buffer_size=2, server_steps=steps, lr=0.05,
                         client_delays=delays)
    assert result.rounds == steps
    assert result.info["first_arrival"][1] >= steps // 2  # server steps done before the slow worker's first push
    assert sum(workers.count(1) for workers in result.history["workers"]) <= 2


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_idle_workers_and_an_exhausted_budget_shut_down_cleanly(comm):
    """One client for p - 1 workers (the others have none), and budgets of 0 and 3 steps."""
    needs_two_ranks(comm)
    for steps in (0, 3):
        result = run_fedbuff(softmax(), iid_clients(1), comm, buffer_size=1, server_steps=steps)
        assert result.rounds == steps and result.info["updates_applied"] == steps
        assert all(workers == [1] for workers in result.history["workers"])


# -- FedAsync (Xie et al. 2019) and the asynchronous strategies on run_federated ------------------------------
def test_fedasync_staleness_weights_follow_the_paper():
    assert staleness_weight(3, "hinge", 0.5, hinge=4) == 1.0
    assert staleness_weight(10, "hinge", 0.5, hinge=4) == pytest.approx(1 / (0.5 * 6 + 1), rel=1e-15)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fedasync_with_one_worker_is_its_sequential_mixing(comm):
    # reference: with one worker every update is fresh (tau = 0) and applied before the next pull, so FedAsync is
    # w <- (1 - alpha) w + alpha w_k, w_k the chosen client's E full-batch proximal steps from w (Algorithm 1)
    needs_two_ranks(comm)
    if comm.size != 2:
        pytest.skip("one worker: the deterministic case")
    parts, alpha, rho, lr = iid_clients(5), 0.4, 0.1, 0.05
    result = run_federated(softmax(), parts, "fedasync", comm, rounds=6, local_epochs=2, batch_size=None, lr=lr,
                           seed=2, strategy_options={"alpha": alpha, "rho": rho})
    w = softmax().init_params(2)
    from mpiopt.core.random import random_stream
    for pull in range(6):
        client = int(random_stream(2, "fedbuff", 1, pull).choice(np.arange(5), 1, replace=False)[0])
        local = w.copy()
        for _ in range(2):
            local = local - lr * (softmax().loss_and_grad(local, *parts[client])[1] + rho * (local - w))
        w = (1 - alpha) * w + alpha * local
    np.testing.assert_allclose(result.params, w, rtol=1e-12, atol=1e-14)
    assert result.info["strategy"] == "fedasync" and result.history["staleness"] == [[0]] * 6


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_an_asynchronous_strategy_refuses_the_synchronous_faults_in_one_line(comm):
    needs_two_ranks(comm)
    with pytest.raises(CollectiveError) as caught:
        run_federated(softmax(), iid_clients(4), "fedbuff", comm, rounds=1, dropout=0.2, byzantine=0.25)
    assert ("fedbuff is asynchronous: dropout=0.2, byzantine=0.25 belong to the synchronous rounds"
            in str(caught.value))
    assert len(set(comm.allgather(str(caught.value)))) == 1


def test_an_asynchronous_strategy_at_one_rank_raises_a_collective_error():
    with pytest.raises(CollectiveError, match="fedasync needs at least 2 ranks"):
        run_federated(softmax(), iid_clients(4), "fedasync", MPI.COMM_SELF, rounds=1)


# -- the client loop it shares with the synchronous rounds ------------------------------------------------------
class Halved(FedBuff):
    """FedBuff whose server tells every client, in its instructions, to halve its gradients."""

    def configure_client(self, round, client):
        return Instructions(config={"scale": 0.5})

    def local_gradient(self, grad, params, ctx):
        return ctx.instructions.config["scale"] * grad


class Fading(FedBuff):
    """FedBuff whose clients count their visits in their client state and halve their step at each visit."""
    client_state = ("visits",)

    def begin_client(self, ctx):
        ctx.state["visits"] += 1.0

    def local_gradient(self, grad, params, ctx):
        return 0.5 ** ctx.state["visits"][0] * grad


class Measured(FedBuff):
    metrics = ("grad_norm",)


class Failing(FedBuff):
    def local_gradient(self, grad, params, ctx):
        if ctx.client == 2:
            raise RuntimeError("client 2's device is gone")
        return grad


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_an_asynchronous_strategys_instructions_reach_its_clients(comm):
    pair = server_and_one_worker(comm)
    if pair is None:
        return
    options = dict(rounds=4, local_epochs=2, batch_size=16, seed=3)
    halved = run_federated(softmax(), iid_clients(5), Halved(buffer_size=2), pair, lr=0.1, **options)
    half_lr = run_federated(softmax(), iid_clients(5), FedBuff(buffer_size=2), pair, lr=0.05, **options)
    assert np.array_equal(halved.params, half_lr.params)  # 0.1 (0.5 g) is 0.05 g exactly
    pair.Free()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_an_asynchronous_strategys_client_state_lives_on_its_worker_and_is_checkpointed(comm, tmp_path):
    pair = server_and_one_worker(comm)
    if pair is None:
        return
    path = str(pair.bcast(tmp_path, root=0) / "fading.npz")
    options = dict(local_epochs=1, batch_size=32, lr=0.1, seed=3)
    first = run_federated(softmax(), iid_clients(5), Fading(buffer_size=2), pair, checkpoint=path, rounds=3,
                          **options)
    if pair.rank == 0:
        stored = np.load(path)
        trained = [k for step in first.history["clients"] for k in step]
        for client in range(5):
            visits = stored[f"rank1_client{client}_visits"][0] if f"rank1_client{client}_visits" in stored else 0
            assert visits == trained.count(client), client
    resumed = run_federated(softmax(), iid_clients(5), Fading(buffer_size=2), pair, checkpoint=path, rounds=6,
                            **options)
    whole = run_federated(softmax(), iid_clients(5), Fading(buffer_size=2), pair, rounds=6, **options)
    assert resumed.info["resumed_at"] == 3 and np.array_equal(resumed.params, whole.params)
    assert resumed.history["clients"] == whole.history["clients"]
    pair.Free()


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_an_asynchronous_strategy_declaring_metrics_is_refused_in_one_line(comm):
    needs_two_ranks(comm)
    with pytest.raises(CollectiveError) as caught:
        run_federated(softmax(), iid_clients(4), Measured(buffer_size=2), comm, rounds=1)
    assert "declared uploads and metrics grad_norm would never arrive" in str(caught.value)
    assert len(set(comm.allgather(str(caught.value)))) == 1


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_client_failing_on_a_worker_raises_the_same_error_on_every_rank(comm):
    needs_two_ranks(comm)
    with pytest.raises(CollectiveError) as caught:
        run_federated(softmax(), iid_clients(4), Failing(buffer_size=1, concurrency=2), comm, rounds=20)
    worker = 1 + 2 % (comm.size - 1)
    assert f"worker {worker}: RuntimeError: client 2's device is gone" in str(caught.value), str(caught.value)
    assert len(set(comm.allgather(str(caught.value)))) == 1
