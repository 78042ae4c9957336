"""The federated channel: instructions, named uploads, client state; SCAFFOLD, FedDyn and federated ADMM.

References outside the code under test: each paper's algorithm box
transcribed here with full-batch (deterministic) clients, fed the clients
the run itself sampled (``history["sampled_clients"]``); the pooled model's
normal equations; runs at one rank (COMM_SELF) against the same run on every
rank count and on the reversed-rank communicator (the ``comm`` fixture).
"""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core.comm import CollectiveError
from mpiopt.core.registry import register
from mpiopt.federated import Hook, Instructions, Strategy, run_federated
from mpiopt.federated.strategy import Layout
from mpiopt.models import get_model

N_CLIENTS, LR, EPOCHS = 8, 0.1, 4
pytestmark = pytest.mark.many_ranks  # the clients, their state and its checkpoint are spread over the ranks


def linear_clients(n_clients=N_CLIENTS, seed=4):
    """Linear-regression clients of 10 to 31 rows, each with its own shift (heterogeneous optima)."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_clients):
        X = rng.standard_normal((10 + 3 * k, 3)) + 0.3 * k
        parts.append((X, X @ np.array([1.0, -2.0, 0.5]) + 0.5 * k + 0.1 * rng.standard_normal(X.shape[0])))
    return parts


def model():
    return get_model("linear", n_features=3, alpha=0.01)


def grad(w, part):
    return model().loss_and_grad(w, *part)[1]


def full_batch(**options):
    """Deterministic clients: full-batch local steps, so the transcriptions are exact."""
    return dict(dict(rounds=6, fraction=0.4, lr=LR, local_epochs=EPOCHS, batch_size=None, seed=3), **options)


def reported(result, round):
    """The clients whose updates arrived in ``round`` (sampled, not dropped, straggling or failed)."""
    h = result.history
    gone = set(h["dropped_clients"][round]) | set(h["straggler_clients"][round]) | set(h["failed_clients"][round])
    return [k for k in h["sampled_clients"][round] if k not in gone]


# -- SCAFFOLD, Karimireddy et al. 2020, Algorithm 1, option II -----------------------------------------------
def scaffold_reference(parts, result, eta_g=1.0):
    x, c = model().init_params(3), np.zeros(4)
    own = {k: np.zeros(4) for k in range(len(parts))}
    for round in range(result.rounds):
        S = reported(result, round)
        if not S:
            continue
        dy, dc = [], []
        for i in S:
            y = x.copy()
            for _ in range(EPOCHS):
                y = y - LR * (grad(y, parts[i]) - own[i] + c)
            new = own[i] - c + (x - y) / (EPOCHS * LR)
            dy.append(y - x)
            dc.append(new - own[i])
            own[i] = new
        x = x + eta_g * np.mean(dy, axis=0)
        c = c + len(S) / len(parts) * np.mean(dc, axis=0)
    return x


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_scaffold_is_the_papers_algorithm_and_the_same_at_any_rank_count(comm):
    parts = linear_clients()
    options = full_batch(rounds=8, dropout=0.2, strategy_options={"server_lr": 0.7})
    result = run_federated(model(), parts, "scaffold", comm, **options)
    alone = run_federated(model(), parts, "scaffold", MPI.COMM_SELF, **options)
    np.testing.assert_allclose(result.params, scaffold_reference(parts, result, 0.7), rtol=1e-12, atol=1e-13)
    assert np.array_equal(result.params, alone.params)
    assert sum(result.history["dropped"]) > 0  # some clients kept their control variate through a dropout
    # the downlink carries x and c, the uplink Delta y and Delta c behind the five scalars
    assert result.history["bytes_received"][0] == 2 * 4 * 8 * (result.history["sampled"][0]
                                                               - result.history["dropped"][0])
    assert result.history["bytes_sent"][0] == result.history["participants"][0] * 8 * (5 + 2 * 4)


# -- FedDyn, Acar et al. 2021, Algorithm 1 ---------------------------------------------------------------------
def feddyn_reference(parts, result, alpha):
    theta, h = model().init_params(3), np.zeros(4)
    gradients = {k: np.zeros(4) for k in range(len(parts))}
    for round in range(result.rounds):
        P = reported(result, round)
        if not P:
            continue
        thetas = []
        for k in P:
            w = theta.copy()
            for _ in range(EPOCHS):
                w = w - LR * (grad(w, parts[k]) - gradients[k] + alpha * (w - theta))
            gradients[k] = gradients[k] - alpha * (w - theta)
            thetas.append(w)
        h = h - alpha / len(parts) * np.sum([w - theta for w in thetas], axis=0)
        theta = np.mean(thetas, axis=0) - h / alpha
    return theta


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_feddyn_is_the_papers_algorithm_and_the_same_at_any_rank_count(comm):
    parts = linear_clients()
    options = full_batch(rounds=8, stragglers=0.3, strategy_options={"alpha": 0.05})
    result = run_federated(model(), parts, "feddyn", comm, **options)
    alone = run_federated(model(), parts, "feddyn", MPI.COMM_SELF, **options)
    np.testing.assert_allclose(result.params, feddyn_reference(parts, result, 0.05), rtol=1e-12, atol=1e-13)
    assert np.array_equal(result.params, alone.params)
    assert sum(result.history["stragglers"]) > 0


# -- federated ADMM ------------------------------------------------------------------------------------------
def pooled_model(parts, alpha=0.01):
    """The minimizer of (1/N) sum over every row of (x.w + b - y)^2 / 2 + alpha ||w||^2 / 2: normal equations."""
    X = np.concatenate([X for X, _ in parts])
    y = np.concatenate([y for _, y in parts])
    A = np.hstack([X, np.ones((y.size, 1))])
    return np.linalg.solve(A.T @ A / y.size + np.diag([alpha] * 3 + [0.0]), A.T @ y / y.size)


def fedadmm_reference(parts, result, rho, epochs):
    """Consensus ADMM for sum_k p_k F_k in the incremental form, as the module's docstring states it."""
    rows = np.array([y.size for _, y in parts], dtype=float)
    p = rows / rows.sum()
    z = model().init_params(3)
    x = {k: z.copy() for k in range(len(parts))}
    u = {k: np.zeros(4) for k in range(len(parts))}
    started = set()
    for round in range(result.rounds):
        step = np.zeros(4)
        for k in reported(result, round):
            before = x[k] + u[k]
            if k in started:
                u[k] = u[k] + x[k] - z
            w = z.copy()
            for _ in range(epochs):
                w = w - LR * (grad(w, parts[k]) + rho * (w - z + u[k]))
            x[k] = w
            started.add(k)
            step += p[k] * (x[k] + u[k] - before)
        z = z + step
    return z


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_federated_admm_reaches_the_pooled_model_where_fedavg_drifts(comm):
    parts = linear_clients()
    options = dict(rounds=100, fraction=1.0, lr=LR, local_epochs=20, batch_size=None, seed=3)
    admm = run_federated(model(), parts, "fedadmm", comm, strategy_options={"rho": 1.0}, **options)
    fedavg = run_federated(model(), parts, "fedavg", comm, **options)
    target = pooled_model(parts)
    assert np.linalg.norm(admm.params - target) <= 1e-4 * np.linalg.norm(target)
    assert np.linalg.norm(fedavg.params - target) >= 0.1 * np.linalg.norm(target)  # client drift


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_federated_admm_with_partial_participation_and_failures_is_its_transcription(comm):
    parts = linear_clients()
    options = full_batch(rounds=10, fraction=0.5, dropout=0.3, strategy_options={"rho": 0.5})
    result = run_federated(model(), parts, "fedadmm", comm, **options)
    alone = run_federated(model(), parts, "fedadmm", MPI.COMM_SELF, **options)
    np.testing.assert_allclose(result.params, fedadmm_reference(parts, result, 0.5, EPOCHS), rtol=1e-12,
                               atol=1e-13)
    assert np.array_equal(result.params, alone.params) and sum(result.history["dropped"]) > 0


# -- the channel itself ----------------------------------------------------------------------------------------
@register("strategy", "test_counting", replace=True)
class Counting(Strategy):
    """A user's stateful strategy in one class: each client counts its rounds and remembers the last one; the
    server sends the round as a config value and an array, and reads both back from a metric and an upload."""

    name = "test_counting"
    client_state = ("count", "last")
    metrics = ("echo",)

    def uploads(self, n_params):
        return (("marker", 2),)

    def init_client_state(self, client, n_params):
        return {"count": np.zeros(1), "last": np.full(1, -1.0)}

    def configure_client(self, round, client):
        return Instructions(config={"round": round}, arrays={"stamp": np.array([round, client], dtype=float)})

    def end_client(self, update, ctx):
        ctx.state["count"] = ctx.state["count"] + 1
        ctx.state["last"] = np.array([ctx.round], dtype=float)
        update.metrics["echo"] = float(ctx.instructions.config["round"])
        update.arrays["marker"] = ctx.instructions.arrays["stamp"] + ctx.state["count"][0] * 1000
        return update

    def aggregate_fit(self, updates):
        self.seen = [(u.client, u.metrics["echo"], u.arrays["marker"].tolist()) for u in updates]
        return super().aggregate_fit(updates)


class Withhold(Hook):
    """The first participant's upload of round 2 never arrives: its state must stay as it was."""

    victim = None

    def begin_round(self, round, participants):
        if round == 2 and participants:
            self.victim = participants[0]

    def transform_update(self, update, client, round):
        return None if (client, round) == (self.victim, 2) else update


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_client_state_is_kept_only_for_delivered_updates_and_checkpointed_per_rank(comm, tmp_path):
    path = comm.bcast(str(tmp_path), root=0) + "/state.npz"
    strategy, withhold = Counting(), Withhold()
    result = run_federated(model(), linear_clients(), strategy, comm, hooks=[withhold], checkpoint=path,
                           **full_batch(rounds=7, fraction=0.5, dropout=0.2, stragglers=0.2, tolerate_failures=True))
    counts = {k: 0 for k in range(N_CLIENTS)}
    last = {k: -1 for k in range(N_CLIENTS)}
    for round in range(7):
        for k in reported(result, round):
            counts[k] += 1
            last[k] = round
    assert withhold.victim in result.history["dropped_clients"][2]
    comm.Barrier()
    stored = dict(np.load(path))
    for k in range(N_CLIENTS):
        key = f"rank{k % comm.size}_client{k}_count"
        assert (stored[key][0] if key in stored else 0) == counts[k], k
        if counts[k]:
            assert stored[f"rank{k % comm.size}_client{k}_last"][0] == last[k]
    # what the server read: the metric and the upload the client built from its instructions and state
    final = result.rounds - 1
    expected = [(k, float(final), [final + 1000 * counts[k], k + 1000 * counts[k]]) for k in reported(result, final)]
    assert strategy.seen == expected


def test_the_row_layout_is_derived_from_the_declarations():
    plain, counting = Layout(Strategy(), 4), Layout(Counting(), 4)
    assert (plain.head, plain.width) == (5, 9)
    assert (counting.head, counting.width) == (6, 6 + 4 + 2)
    assert Layout(get_strategy_instance("scaffold"), 4).width == 5 + 8


def get_strategy_instance(name):
    from mpiopt.federated import get_strategy
    return get_strategy(name)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy, extra", [("scaffold", {}), ("feddyn", {}), ("fedadmm", {}),
                                             ("fedadam", {"compressor": "topk", "uplink_feedback": "ef",
                                                          "compressor_options": {"ratio": 0.3}}),
                                             ("scaffold", {"compressor": "powersgd"})])
def test_a_resumed_stateful_run_is_the_uninterrupted_one_bit_for_bit(comm, tmp_path, strategy, extra):
    path = comm.bcast(str(tmp_path), root=0) + "/resume.npz"
    options = dict(full_batch(rounds=8, dropout=0.2, batch_size=5), **extra)
    whole = run_federated(model(), linear_clients(), strategy, comm, **options)
    first = run_federated(model(), linear_clients(), strategy, comm, checkpoint=path, **dict(options, rounds=3))
    resumed = run_federated(model(), linear_clients(), strategy, comm, checkpoint=path, **options)
    assert first.rounds == 3 and resumed.info["resumed_at"] == 3 and resumed.rounds == 8
    assert np.array_equal(resumed.params, whole.params)
    assert resumed.history["bytes_sent"] == whole.history["bytes_sent"]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_hook_must_subclass_hook_and_the_refusal_reaches_every_rank(comm):
    class DuckTyped:
        def transform_update(self, update, client, round):
            return update

    with pytest.raises(CollectiveError, match="a hook must be a mpiopt.federated.Hook") as raised:
        run_federated(model(), linear_clients(), "fedavg", comm, hooks=[DuckTyped()], rounds=1)
    assert comm.allgather(str(raised.value)) == [str(raised.value)] * comm.size


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_strategy_whose_update_misses_a_declared_upload_is_a_failed_client(comm):
    class Forgetful(Counting):
        def end_client(self, update, ctx):
            return update

    result = run_federated(model(), linear_clients(), Forgetful(), comm, rounds=1, fraction=1.0,
                           tolerate_failures=True)
    assert result.history["failed"] == [N_CLIENTS]
    assert result.history["failures"][0][0]["error"] == (
        "ValueError: test_counting: the update of client 0 lacks the declared echo, marker")


# -- the user's stateful strategy of docs/extending.md, run as written ----------------------------------------
def extending_example():
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    section = text[text.index("## Adding a federated strategy"):]
    code = section[section.index("```python") + len("```python"):]
    code = code[:code.index("```")]
    namespace = {"__name__": "my_strategies"}
    from mpiopt.core import registry
    if "drift_corrected" in registry.names("strategy"):
        return registry.lookup("strategy", "drift_corrected")
    exec(compile(code, "docs/extending.md", "exec"), namespace)
    return namespace["DriftCorrected"]


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_the_documented_stateful_strategy_runs_resumes_and_is_the_same_at_any_rank_count(comm, tmp_path):
    strategy_class = extending_example()
    path = comm.bcast(str(tmp_path), root=0) + "/drift.npz"
    options = full_batch(rounds=6, dropout=0.2, strategy_options={"beta": 0.3})
    whole = run_federated(model(), linear_clients(), "drift_corrected", comm, **options)
    alone = run_federated(model(), linear_clients(), "drift_corrected", MPI.COMM_SELF, **options)
    run_federated(model(), linear_clients(), "drift_corrected", comm, checkpoint=path, **dict(options, rounds=2))
    resumed = run_federated(model(), linear_clients(), "drift_corrected", comm, checkpoint=path, **options)
    assert np.array_equal(whole.params, alone.params) and np.array_equal(resumed.params, whole.params)
    plain = run_federated(model(), linear_clients(), "fedavg", comm, **full_batch(rounds=6, dropout=0.2))
    assert not np.array_equal(whole.params, plain.params)
    assert strategy_class.uploads_state
    with pytest.raises(CollectiveError, match="uploads per-client state in the clear"):
        from mpiopt.federated import SecureAggregationHook
        run_federated(model(), linear_clients(), "drift_corrected", comm, hooks=[SecureAggregationHook(1)],
                      rounds=1)


def test_a_strategy_written_for_the_closed_channel_is_refused_with_the_new_signature():
    class OldStyle(Strategy):
        def local_gradient(self, grad, params, global_params):
            return grad

    with pytest.raises(CollectiveError, match=r"the third argument is now the client's ClientRound ctx"):
        run_federated(model(), linear_clients(), OldStyle(), MPI.COMM_SELF, rounds=1)


def test_the_round_log_counts_stragglers_byzantine_clients_and_both_directions():
    import io
    stream = io.StringIO()
    run_federated(model(), linear_clients(), "fedavg", MPI.COMM_SELF, verbose=True, log_stream=stream,
                  **full_batch(rounds=2, fraction=1.0, stragglers=0.5, byzantine=0.25))
    header = [line for line in stream.getvalue().splitlines() if "round" in line and "MB up" in line][0]
    assert header.split() == ["round", "clients", "dropped", "strag.", "failed", "byz.", "loss", "test", "acc",
                              "MB", "up", "MB", "down", "time(s)"]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_checkpoint_of_other_uploads_or_attackers_is_refused(comm, tmp_path):
    path = comm.bcast(str(tmp_path), root=0) + "/other.npz"
    options = full_batch(rounds=2, compressor="topk", compressor_options={"k": 2})
    run_federated(model(), linear_clients(), "fedavg", comm, checkpoint=path, **options)
    for changed in ({"compressor_options": {"k": 3}}, {"uplink_feedback": "ef21"}, {"byzantine": 0.25}):
        with pytest.raises(CollectiveError, match="belongs to another problem"):
            run_federated(model(), linear_clients(), "fedavg", comm, checkpoint=path, **dict(options, **changed))
