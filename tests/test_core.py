"""The shared core every method stands on: registry, settings, result, checkpointer, signals, iteration log."""
import dataclasses
import io
import os
import signal

import numpy as np
import pytest
import mpiopt.slurm  # noqa: F401 (registers the Slurm workloads)
from conftest import gather_messages
from mpiopt.admm import penalties, solve
from mpiopt.admm.losses.glm import GLMLossShard
from mpiopt.admm.path import regularization_path
from mpiopt.core import CollectiveError
from mpiopt.core.checkpoint import Checkpointer
from mpiopt.core.comm import mpi_vendor
from mpiopt.core.log import IterationLog
from mpiopt.core.registry import RegistryError, lookup, names, register, unknown, unregister
from mpiopt.core.result import Result, not_in_json
from mpiopt.core.settings import Settings, is_number
from mpiopt.core.signals import SignalFlags


# -- registry -------------------------------------------------------------------------------------------------
def test_registry_lists_looks_up_and_names_the_valid_choices():
    assert names("loss")[:3] == ["squared", "logistic", "huber"]
    assert {"l1", "l2", "elastic_net", "group_lasso", "nonnegative", "box", "none"} <= set(names("penalty"))
    assert {"lbfgs", "newton"} <= set(names("x_solver"))
    assert {"solve", "lasso", "admm-benchmark", "allreduce-benchmark"} <= set(names("workload"))
    assert lookup("penalty", "l1") is penalties.L1
    with pytest.raises(RegistryError, match="penalty must be one of l1, l2, .*, got 'l0'"):
        lookup("penalty", "l0")
    assert unknown("penalty", "l1") is None and "got 7" in unknown("penalty", 7)


def test_a_lookup_in_a_fresh_interpreter_finds_the_built_ins_of_every_kind():
    # issue 19, item 14: lookup("penalty", "l1") before importing mpiopt.admm said "penalty must be one of , got 'l1'"
    import json
    import subprocess
    import sys
    from mpiopt import admm, asyncsgd, collectives, compression, data, federated, models, optim, slurm  # noqa: F401
    from mpiopt.core import registry
    ours = {kind for kind, entries in registry._REGISTRY.items()
            if any(getattr(item, "__module__", "").startswith("mpiopt.") for item in entries.values())}
    assert ours == set(registry.BUILTIN_KINDS), "every kind of mpiopt's own is in the table of built-in kinds"
    # one fresh interpreter; before each kind it forgets every mpiopt package but the core, and the registry
    script = """
import json, sys
from mpiopt.core import registry
found = {}
for kind in sys.argv[1:]:
    for module in [m for m in sys.modules if m.startswith("mpiopt.") and not m.startswith("mpiopt.core")]:
        del sys.modules[module]
    registry._REGISTRY.clear()
    registry._loaded.clear()
    names = registry.names(kind)
    item = registry.lookup(kind, names[0]) if names else None
    found[kind] = [names, names and getattr(item, "__name__", type(item).__name__)]
print(json.dumps(found))
"""
    completed = subprocess.run([sys.executable, "-c", script, *sorted(ours)], capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr
    for kind, (found, first) in json.loads(completed.stdout).items():
        expected = [name for name, item in registry._REGISTRY[kind].items()
                    if getattr(item, "__module__", "").startswith("mpiopt.")]
        assert sorted(found) == sorted(expected), kind
        item = registry._REGISTRY[kind][found[0]]
        assert first == getattr(item, "__name__", type(item).__name__), kind


def test_an_unknown_kind_or_name_never_lists_an_empty_choice():
    message = unknown("penalty", "l7")
    assert message.startswith("penalty must be one of l1, l2") and message.endswith("got 'l7'")
    message = unknown("no-such-kind", "x")
    assert message.startswith("no no-such-kind is registered (got 'x'); the kinds are ")
    assert "penalty" in message and "one of ," not in message
    with pytest.raises(RegistryError, match="no no-such-kind is registered"):
        lookup("no-such-kind", "x")


def test_registry_refuses_to_shadow_a_name_silently():
    class Other(penalties.Penalty):
        pass
    with pytest.raises(RegistryError, match="'l1' is already registered"):
        register("penalty", "l1", Other)
    assert lookup("penalty", "l1") is penalties.L1


class ScaledL1(penalties.Penalty):
    """scale * lam ||z||_1, registered by a user."""

    name = "scaled_l1"
    options = ("lam",)
    scale = 2.0

    def __init__(self, lam):
        self.lam = float(lam)

    def prox(self, v, step):
        return np.sign(v) * np.maximum(np.abs(v) - self.scale * self.lam * step, 0.0)

    def value(self, z):
        return self.scale * self.lam * float(np.abs(z).sum())

    def settings(self):
        return {"lam": self.lam}

    @classmethod
    def lambda_max(cls, gradient, options):
        return float(np.abs(gradient).max()) / cls.scale


class LeastSquaresGLM(GLMLossShard):
    """(a_j^T x - b_j)^2 / 2 as a GLM with an iterative x-step, registered by a user."""

    name = "least_squares_glm"

    def terms(self, margin):
        residual = margin - self.targets
        return 0.5 * float(residual @ residual), residual, self.xp.ones_like(residual)

    @classmethod
    def null_intercept(cls, targets, comm, options):
        return comm.allreduce(float(targets.sum())) / comm.allreduce(int(targets.shape[0]))


@pytest.fixture
def user_pieces():
    register("loss", "least_squares_glm", LeastSquaresGLM)
    register("penalty", "scaled_l1", ScaledL1)
    calls = []

    def counting_lbfgs(shard, v, x, tolerance):
        calls.append(tolerance)
        return lookup("x_solver", "lbfgs")(shard, v, x, tolerance)
    register("x_solver", "counting", counting_lbfgs)
    yield calls
    unregister("loss", "least_squares_glm")
    unregister("penalty", "scaled_l1")
    unregister("x_solver", "counting")


@pytest.mark.mpi
def test_a_user_registered_penalty_and_x_solver_are_used_by_name(comm, user_pieces):
    rng = np.random.default_rng(4)
    A = rng.standard_normal((120, 8))
    b = A @ rng.standard_normal(8) + 0.1 * rng.standard_normal(120)
    y = (b > 0).astype(float)
    A_local, b_local, y_local = A[comm.rank::comm.size], b[comm.rank::comm.size], y[comm.rank::comm.size]
    mine = solve(A_local, b_local, "squared", "scaled_l1", 0.5, comm, eps_abs=1e-10, eps_rel=1e-10)
    builtin = solve(A_local, b_local, "squared", "l1", 1.0, comm, eps_abs=1e-10, eps_rel=1e-10)
    assert mine.info["penalty"] == "scaled_l1"
    assert np.allclose(mine.x, builtin.x, atol=1e-8)
    ratio = solve(A_local, b_local, "squared", "scaled_l1", None, comm, lam_ratio=0.5)
    assert ratio.info["lambda_max"] == pytest.approx(np.abs(A.T @ b).max() / 2.0)
    fit = solve(A_local, y_local, "logistic", "l2", 1.0, comm, x_solver="counting", max_iter=20, eps_abs=0,
                eps_rel=0)
    assert fit.iterations == 20 and (len(user_pieces) > 0) == bool(len(A_local))
    glm = solve(A_local, b_local, "least_squares_glm", "l1", None, comm, lam_ratio=0.2, intercept=True,
                eps_abs=1e-10, eps_rel=1e-10)
    squared = solve(A_local, b_local, "squared", "l1", None, comm, lam_ratio=0.2, intercept=True,
                    eps_abs=1e-10, eps_rel=1e-10)
    assert glm.info["lambda_max"] == pytest.approx(squared.info["lambda_max"], rel=1e-12)
    assert np.allclose(glm.x, squared.x, atol=1e-6)


def test_a_penalty_owns_its_lambda_max_and_intercept_handling():
    gradient = np.array([0.5, -3.0, 1.0])
    assert penalties.L1.lambda_max(gradient, {}) == 3.0
    assert penalties.ElasticNet.lambda_max(gradient, {"l1_ratio": 0.5}) == 6.0
    assert penalties.L2.lambda_max(gradient, {}) is None and not penalties.L2.has_lambda_max()
    free = penalties.L1(1.0).leaving_free(1)
    assert isinstance(free, penalties.Unpenalized)
    assert np.array_equal(free.prox(np.array([3.0, -0.5, 7.0]), 1.0), [2.0, 0.0, 7.0])


# -- the MPI library -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version, vendor", [
    ("Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11, repo rev: v5.0.11rc1",
     "openmpi"),
    ("MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 20:45:26 UTC 2026\nMPICH ABI:          18:2:6",
     "mpich"),
    ("Intel(R) MPI Library 2021.12 for Linux* OS", "mpich"),
    ("MPI library of some vendor 1.0", "other"),
])
def test_mpi_vendor_is_read_from_the_library_version(version, vendor):
    assert mpi_vendor(version) == vendor


def test_mpi_vendor_names_the_library_that_mpi4py_loaded():
    from mpi4py import MPI
    assert mpi_vendor() == mpi_vendor(MPI.Get_library_version()) and mpi_vendor() in ("openmpi", "mpich")


# -- settings and result --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ToySettings(Settings):
    label = "toy"
    steps: int = 10
    rate: float = 0.1

    def checks(self):
        return [(is_number(self.rate) and self.rate > 0, f"rate must be > 0, got {self.rate!r}")]


@pytest.mark.mpi
def test_settings_refuse_unknown_names_and_validate_collectively(comm):
    assert ToySettings.collective(comm, steps=5).as_dict() == {"steps": 5, "rate": 0.1}
    with pytest.raises(TypeError, match="unknown toy setting.s. 'stepz'; valid settings are rate, steps"):
        ToySettings.from_kwargs(stepz=1)
    errors = []
    for kwargs in ({"rate": -1.0}, {"rate": 0.1 if comm.rank == 0 else 0.2}):
        try:
            ToySettings.collective(comm, **kwargs)
        except CollectiveError as error:
            errors.append(str(error))
    messages = gather_messages(comm, errors[0])
    assert len(set(messages)) == 1 and "rate must be > 0, got -1.0" in messages[0]
    if comm.size > 1:
        assert len(errors) == 2 and "differs from rank 0's" in errors[1]


def test_result_saves_its_fields_as_json(tmp_path):
    @dataclasses.dataclass
    class ToyResult(Result):
        params: object
        private: object = not_in_json()

    result = ToyResult(status="converged", history={"loss": [2.0, 1.0]}, timings={"total": 0.5}, info={"n": 2},
                       params=np.array([1.0, float("nan")]), private=np.ones(3))
    result.save_json(tmp_path / "result.json")
    import json
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved == {"status": "converged", "history": {"loss": [2.0, 1.0]}, "timings": {"total": 0.5},
                     "info": {"n": 2}, "params": [1.0, None]}


# -- checkpointer ---------------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_checkpointer_round_trips_any_state_and_refuses_what_does_not_fit(comm, tmp_path_factory):
    folder = comm.bcast(str(tmp_path_factory.mktemp("core-checkpoint")) if comm.rank == 0 else None)
    path = os.path.join(folder, "toy.npz")
    fingerprint = {"rows": 10 + comm.rank, "seed": 3}
    checkpointer = Checkpointer(path, comm, fingerprint, "mpiopt-toy-checkpoint-1", "toy")
    assert checkpointer.load() is None
    checkpointer.write({"params": np.arange(4.0)}, {"momentum": np.full(2, float(comm.rank))},
                       {"step": 7, "losses": [3.0, 2.5]})
    shared, mine, meta = Checkpointer(path, comm, fingerprint, "mpiopt-toy-checkpoint-1", "toy").load()
    assert np.array_equal(shared["params"], np.arange(4.0)) and np.array_equal(mine["momentum"], [comm.rank] * 2)
    assert meta["step"] == 7 and meta["losses"] == [3.0, 2.5]

    def refused(make, match, apply=lambda *state: None, **kwargs):
        error = None
        try:
            make().restore(apply, **kwargs)
        except CollectiveError as caught:
            error = caught
        messages = gather_messages(comm, error)
        assert error is not None and len(set(messages)) == 1 and match in messages[0], messages

    refused(lambda: Checkpointer(path, comm, dict(fingerprint, seed=4), "mpiopt-toy-checkpoint-1", "toy"),
            "belongs to another problem: rank 0's seed was 3, now 4")
    refused(lambda: Checkpointer(path, comm, fingerprint, "mpiopt-toy-checkpoint-2", "toy"),
            "has format mpiopt-toy-checkpoint-1; this mpiopt reads mpiopt-toy-checkpoint-2")
    refused(lambda: Checkpointer(path, comm, fingerprint, "mpiopt-other-checkpoint-1", "other"),
            "is not an mpiopt other checkpoint")

    def too_short(shared, parts, meta):
        if shared["params"].size != 5:
            raise ValueError(f"params has {shared['params'].size} entries, expected 5")
    refused(lambda: Checkpointer(path, comm, fingerprint, "mpiopt-toy-checkpoint-1", "toy"),
            "cannot read checkpoint", validate=too_short)

    def fails_on_last_rank(shared, mine, meta):
        if comm.rank == comm.size - 1:
            raise ValueError("momentum does not fit")
    refused(lambda: Checkpointer(path, comm, fingerprint, "mpiopt-toy-checkpoint-1", "toy"), "momentum does not fit",
            apply=fails_on_last_rank)
    if comm.rank == 0:
        assert os.path.getsize(path) > 0


# -- signals and the iteration log ----------------------------------------------------------------------------
def test_signal_flags_are_taken_once_and_the_handlers_restored():
    before = signal.getsignal(signal.SIGUSR1)
    with SignalFlags() as flags:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flags.take() == (1.0, 0.0)
        assert flags.take() == (0.0, 0.0), "a checkpoint request is taken once"
        os.kill(os.getpid(), signal.SIGTERM)
        assert flags.take() == (0.0, 1.0) and flags.take() == (0.0, 1.0), "a stop request stays"
    assert signal.getsignal(signal.SIGUSR1) is before


def test_a_signal_caught_before_any_method_waits_for_the_first_take_and_nested_flags_share_it():
    from mpiopt.core import signals
    before = {number: signal.getsignal(number) for number in signals.SIGNALS}
    assert signals.catch() and not signals.catch(), "installed once"
    try:
        os.kill(os.getpid(), signal.SIGUSR1)  # during a run's setup: no method is reading the flags yet
        assert signals.pending() == (True, False)
        with SignalFlags(False) as disabled:
            assert disabled.take() == (0.0, 0.0) and signals.pending() == (True, False), "a run without checkpoints"
        with SignalFlags() as outer:
            with SignalFlags() as inner:  # e.g. working sets' inner solve
                assert inner.take() == (1.0, 0.0), "the signal of the setup, at the first iteration"
            assert signals.caught(), "an inner solve leaves the handlers of the process alone"
            os.kill(os.getpid(), signal.SIGUSR1)  # between two inner solves
            with SignalFlags() as inner:
                assert inner.take() == (1.0, 0.0)
            assert outer.take() == (0.0, 0.0)
        assert signals.caught(), "the flags made after catch() do not release the handlers"
    finally:
        signals.release()
    assert {number: signal.getsignal(number) for number in signals.SIGNALS} == before
    assert signals.pending() == (False, False)


def test_release_passes_a_pending_sigterm_on_to_the_previous_handler_and_ignores_sigusr1():
    from mpiopt.core import signals
    received = []
    before = {number: signal.signal(number, lambda number, frame: received.append(number))
              for number in signals.SIGNALS}
    try:
        signals.catch()
        os.kill(os.getpid(), signal.SIGTERM)
        assert received == [] and signals.pending() == (False, True)
        signals.release(pass_on=True)  # the command line, once it knows there is no checkpoint to write
        assert received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_iteration_log_prints_the_callers_columns_once():
    stream = io.StringIO()
    log = IterationLog(True, [("step", "5d"), ("loss", "12.4e")], width=20, stream=stream)
    log.banner("toy", ["line one"])
    log.note("nothing yet")
    log.row(1, 0.5)
    log.row(2, 0.25)
    log.footer(["done"])
    lines = stream.getvalue().splitlines()
    assert lines == ["-" * 20, f"{'toy':^20}", "-" * 20, "line one", "-" * 20, "nothing yet",
                     " step         loss", "    1   5.0000e-01", "    2   2.5000e-01", "-" * 20, "done", "-" * 20]
    quiet = io.StringIO()
    IterationLog(False, [("step", "5d")], stream=quiet).row(1)
    assert quiet.getvalue() == ""


# -- reducers given as objects, built once per path -------------------------------------------------------------
@pytest.mark.mpi
def test_a_reducer_object_is_accepted_and_a_path_builds_one_reducer(comm, monkeypatch):
    from mpiopt.admm import path as path_module
    from mpiopt.collectives import get_reducer
    rng = np.random.default_rng(5)
    A = rng.standard_normal((90, 6))
    b = A @ rng.standard_normal(6)
    A_local, b_local = A[comm.rank::comm.size], b[comm.rank::comm.size]
    reducer = get_reducer("ring", comm, check=False)
    given = solve(A_local, b_local, "squared", "l1", 0.3, comm, reducer=reducer)
    named = solve(A_local, b_local, "squared", "l1", 0.3, comm, reducer="ring")
    assert np.array_equal(given.x, named.x) and given.info["settings"]["reducer"] == "ring"
    out = np.ones(3)
    reducer.allreduce(out, out)  # still open: the caller owns it
    assert np.array_equal(out, np.full(3, comm.size))
    reducer.close()
    built = []
    original = path_module.get_reducer
    monkeypatch.setattr(path_module, "get_reducer", lambda *a, **k: built.append(a) or original(*a, **k))
    path = regularization_path(A_local, b_local, "squared", "l1", comm, n_lams=5)
    assert len(path.results) == 5 and len(built) == 1


def test_the_docs_list_exactly_the_registered_losses_and_penalties():
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "admm.md").read_text()

    def table(heading):
        section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
        return [line.split("|")[1].strip().strip("`") for line in section.splitlines()
                if line.startswith("| `")]
    assert table("Losses and their x-steps") == names("loss")
    assert table("Penalties") == names("penalty")


def test_network_predictions_follow_the_alpha_beta_formulas():
    from mpiopt.collectives.models import Fitted, on_network, predict_compressed
    fitted = on_network(Fitted(alpha=2e-6, beta=1.0, gamma=1e-10), gbps=10)
    assert fitted.beta == pytest.approx(8e-10) and fitted.alpha == 2e-6
    B, p = 4e6, 1000
    ring = predict_compressed("allreduce", p, B, fitted)
    assert ring == pytest.approx(2 * 999 * 2e-6 + 2 * 0.999 * B * 8e-10 + 0.999 * B * 1e-10)
    assert predict_compressed("allreduce", p, B, fitted, rounds=2) == pytest.approx(2 * ring)
    # A 1% Top-K payload (8 bytes per kept element) gathered by 1,000 ranks costs more than the dense ring.
    topk = predict_compressed("allgather", p, 0.01 * B * 2, fitted)
    assert topk == pytest.approx(999 * 2e-6 + 999 * 0.02 * B * 8e-10) and topk > ring
    assert predict_compressed("two-pass", 2, B, fitted) == pytest.approx(2 * 2e-6 + B * 8e-10)
    assert predict_compressed("allgather", 1, B, fitted) == 0.0
    with pytest.raises(ValueError, match="path must be one of"):
        predict_compressed("tree", p, B, fitted)
