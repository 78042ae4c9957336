"""mpiopt.torch.TorchModel: a torch module with the layout of mpiopt's numpy MLP and softmax models against
those models (same initial parameters, same batches): the loss and gradient, train(), every federated
strategy with client state, privacy, secure aggregation, compressed uploads and Byzantine clients, a resumed
checkpoint bit for bit, the command line's --model torch:..., and bad modules and losses refused."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from mpi4py import MPI

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'mpiopt[torch]')")

from mpiopt.core import CollectiveError  # noqa: E402
from mpiopt.data import load_dataset  # noqa: E402
from mpiopt.federated import partition, run_federated, split_clients  # noqa: E402
from mpiopt.models import get_model  # noqa: E402
from mpiopt.optim import get_optimizer  # noqa: E402
from mpiopt.torch import TorchModel  # noqa: E402
from mpiopt.train import train  # noqa: E402

DATA = load_dataset("digits", MPI.COMM_SELF)
X, Y = DATA.X_train[:480], DATA.y_train[:480]
HIDDEN = 8


class NumpyLayoutMLP(torch.nn.Module):
    """mpiopt's MLP (one ReLU layer, softmax output) written in torch, with its parameters in mpiopt's layout:
    W1 (fan_in x fan_out), b1, W2, b2, so that the flat vectors are the same."""

    def __init__(self, n_features=64, hidden=HIDDEN, classes=10, dtype=torch.float64):
        super().__init__()
        shapes = [(n_features, hidden), (hidden,), (hidden, classes), (classes,)]
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
                                               for shape in shapes])

    def forward(self, x):
        w1, b1, w2, b2 = self.weights
        return torch.relu(x @ w1 + b1) @ w2 + b2


def pair(alpha=0.0, dtype=torch.float64, seed=0):
    """(numpy MLP, the torch twin started where the numpy one starts)."""
    reference = get_model("mlp", n_features=64, n_classes=10, hidden=(HIDDEN,), alpha=alpha)
    model = TorchModel(NumpyLayoutMLP(dtype=dtype), torch.nn.functional.cross_entropy, n_features=64, n_classes=10,
                       alpha=alpha)
    model.load(reference.init_params(seed))
    model._initial = model.flat_parameters()  # its own initialization is now the numpy model's
    return reference, model


def test_loss_and_gradient_are_the_numpy_models():
    reference, model = pair(alpha=1e-3)
    params = reference.init_params(3) + 0.01
    for rows in (slice(0, 50), slice(0, 1), slice(0, 0)):
        expected = reference.loss_and_grad(params, X[rows], Y[rows])
        got = model.loss_and_grad(params, X[rows], Y[rows])
        assert got[0] == pytest.approx(expected[0], rel=1e-13, abs=1e-15)
        np.testing.assert_allclose(got[1], expected[1], rtol=1e-11, atol=1e-14)
    np.testing.assert_array_equal(model.predict(params, X[:40]), reference.predict(params, X[:40]))
    np.testing.assert_allclose(model.predict_proba(params, X[:40]), reference.predict_proba(params, X[:40]),
                               rtol=1e-12)
    plain, single = pair(dtype=torch.float32)  # computed in float32
    loss, grad = single.loss_and_grad(params, X[:50], Y[:50])
    expected = plain.loss_and_grad(params, X[:50], Y[:50])
    assert loss == pytest.approx(expected[0], rel=1e-6) and loss != expected[0]
    np.testing.assert_allclose(grad, expected[1], rtol=0, atol=1e-6 * np.abs(expected[1]).max())


def test_the_solution_is_the_parameters_in_module_order_and_loads_back():
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    model = TorchModel(module, torch.nn.functional.cross_entropy, n_classes=2)
    assert model.n_features == 3 and model.n_params == 3 * 4 + 4 + 4 * 2 + 2
    expected = np.concatenate([p.detach().double().reshape(-1).numpy() for p in module.parameters()])
    np.testing.assert_array_equal(model.init_params(7), expected.astype(np.float32).astype(np.float64))
    solution = np.arange(model.n_params, dtype=float) / 100
    model.load(solution)
    assert torch.equal(module[0].weight.detach(), torch.tensor(solution[:12].reshape(4, 3), dtype=torch.float32))
    assert torch.equal(module[2].bias.detach(), torch.tensor(solution[-2:], dtype=torch.float32))


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_train_gives_the_numpy_models_parameters(comm, optimizer):
    reference, model = pair(alpha=1e-4)
    options = dict(epochs=2, batch_size=64, seed=0)  # the seed of init_params too: pair() starts at seed 0
    expected = train(reference, X, Y, get_optimizer(optimizer, lr=0.05), comm, **options)
    got = train(model, X, Y, get_optimizer(optimizer, lr=0.05), comm, **options)
    np.testing.assert_allclose(got.params, expected.params, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.history["loss"], expected.history["loss"], rtol=1e-10)


def clients(n_clients=8):
    return split_clients(X, Y, partition("dirichlet", Y, n_clients, 3, alpha=0.5))


STRATEGIES = [("fedavg", None), ("fedsgd", None), ("fedprox", {"mu": 0.1}), ("fednova", None), ("scaffold", None),
              ("feddyn", None), ("fedadagrad", None), ("fedadam", None), ("fedyogi", None), ("median", None),
              ("trimmed_mean", {"beta": 0.25}), ("krum", {"num_malicious": 1}),
              ("multikrum", {"num_malicious": 1, "to_keep": 3}), ("bulyan", {"num_malicious": 1}),
              ("fedadmm", None), ("fedbuff", {"buffer_size": 2}), ("fedasync", None)]
# also at 4 ranks: the strategies whose clients keep state on the ranks that hold them, and secure
# aggregation's masks between clients on four ranks
FOUR_RANKS = {"scaffold", "feddyn", "secure"}


def params(cases):
    return [pytest.param(*case, id=case[0], marks=[pytest.mark.every_rank_count] if case[0] in FOUR_RANKS else [])
            for case in cases]


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy,options", params(STRATEGIES))
def test_every_strategy_trains_the_torch_model_as_the_numpy_model(comm, strategy, options):
    asynchronous = strategy in ("fedbuff", "fedasync")
    if asynchronous and comm.size != 2:
        pytest.skip("an asynchronous strategy serves on rank 0 and trains on the others; with two or more "
                    "workers the order of arrivals depends on timing (docs/federated.md), so one worker")
    reference, model = pair(alpha=1e-4)
    settings = dict(rounds=3, fraction=1.0 if strategy == "bulyan" else 0.5, local_epochs=1, batch_size=16, lr=0.1,
                    seed=0, strategy_options=options)
    expected = run_federated(reference, clients(), strategy, comm, **settings)
    got = run_federated(model, clients(), strategy, comm, **settings)
    np.testing.assert_allclose(got.params, expected.params, rtol=1e-9, atol=1e-11)


FEATURES = [("dp", dict(hooks=[("dp", {"clip_norm": 1.0, "noise_multiplier": 0.5})])),
            ("secure", dict(hooks=[("secure_aggregation", {"session_seed": 7})])),
            ("topk-ef21", dict(compressor="topk", compressor_options={"ratio": 0.1}, uplink_feedback="ef21")),
            ("byzantine", dict(byzantine=0.25, attack="sign_flip"))]


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,extra", params(FEATURES))
def test_privacy_secure_aggregation_compression_and_attacks_with_the_torch_model(comm, name, extra):
    pytest.importorskip("dp_accounting") if name == "dp" else None
    reference, model = pair()
    strategy = "median" if name == "byzantine" else "fedavg"
    settings = dict(rounds=3, fraction=0.5, local_epochs=1, batch_size=16, lr=0.1, seed=0, **extra)
    expected = run_federated(reference, clients(), strategy, comm, **settings)
    got = run_federated(model, clients(), strategy, comm, **settings)
    np.testing.assert_allclose(got.params, expected.params, rtol=1e-9, atol=1e-11)


def test_a_float32_module_follows_the_float64_curve_to_float32_rounding():
    reference, _ = pair()
    _, single = pair(dtype=torch.float32)
    settings = dict(rounds=4, fraction=0.5, local_epochs=1, batch_size=16, lr=0.1, seed=0)
    expected = run_federated(reference, clients(), "fedavg", MPI.COMM_SELF, **settings)
    got = run_federated(single, clients(), "fedavg", MPI.COMM_SELF, **settings)
    np.testing.assert_allclose(got.params, expected.params, rtol=0, atol=1e-4)
    assert not np.array_equal(got.params, expected.params)  # float32 arithmetic indeed


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_a_federated_run_with_a_torch_model_resumes_bit_for_bit(comm, tmp_path):
    from test_train import shared_folder
    path = f"{shared_folder(comm, tmp_path)}/torch-fed.npz"
    settings = dict(fraction=0.5, local_epochs=1, batch_size=16, lr=0.1, seed=0)
    straight = run_federated(pair()[1], clients(), "scaffold", comm, rounds=4, **settings)
    first = run_federated(pair()[1], clients(), "scaffold", comm, rounds=2, checkpoint=path, **settings)
    resumed = run_federated(pair()[1], clients(), "scaffold", comm, rounds=4, checkpoint=path, **settings)
    assert first.rounds == 2 and resumed.rounds == 4 and resumed.info["resumed_at"] == 2
    np.testing.assert_array_equal(resumed.params, straight.params)
    assert resumed.history["loss"] == straight.history["loss"]


class Scores(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.layer(x)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("loss_fn,match", [
    (lambda out, y: torch.nn.functional.cross_entropy(out, y, reduction="none"), "scalar tensor, got \\(4,\\)"),
    (lambda out, y: torch.nn.functional.cross_entropy(out, y) * float("nan"), "NaN or inf")])
def test_a_bad_loss_is_refused_on_every_rank_before_training(comm, loss_fn, match):
    model = TorchModel(Scores(), loss_fn, n_classes=10)
    with pytest.raises(CollectiveError, match=match):
        train(model, X, Y, get_optimizer("sgd", lr=0.1), comm, epochs=1)
    with pytest.raises(CollectiveError, match=match):
        run_federated(model, clients(), "fedavg", comm, rounds=1)


def test_a_module_without_parameters_is_refused_in_one_line():
    with pytest.raises(ValueError, match="has no parameters to train"):
        TorchModel(torch.nn.ReLU(), torch.nn.functional.mse_loss, n_features=3)
    with pytest.raises(ValueError, match="n_features"):
        TorchModel(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Conv1d(1, 1, 3)), torch.nn.functional.mse_loss)


def test_the_command_line_trains_a_users_torch_model(tmp_path):
    (tmp_path / "my_models.py").write_text(textwrap.dedent("""
        import torch
        from mpiopt.torch import TorchModel

        def digits_mlp():
            torch.manual_seed(0)
            module = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
            return TorchModel(module, torch.nn.functional.cross_entropy, n_classes=10)
    """))
    from test_readme import ENVIRONMENT, MPIEXEC
    environment = dict(ENVIRONMENT, PYTHONPATH=str(tmp_path))
    # train at 2 ranks (the model's repr agreed between them), federated at one
    for launch, command in (([str(MPIEXEC), "-n", "2"], ["train", "--epochs", "1", "--optimizer", "sgd"]),
                            ([], ["federated", "--rounds", "2", "--clients", "10"])):
        completed = subprocess.run([*launch, sys.executable, "-m", "mpiopt", *command, "--model",
                                    "torch:my_models:digits_mlp", "--output", str(tmp_path / "out.json")],
                                   cwd=tmp_path, capture_output=True, text=True, timeout=300, env=environment)
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert "TorchModel(Sequential" in (tmp_path / "out.json").read_text() or command[0] == "federated"
    bad = subprocess.run([sys.executable, "-m", "mpiopt", "train", "--model", "torch:my_models:nothing", "--output",
                          str(tmp_path / "bad.json")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=environment)
    assert bad.returncode == 2 and "nothing" in bad.stderr + bad.stdout


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method,options", [("asgd", {}), ("rennala", {"batch": 4}), ("ringmaster", {})])
def test_async_sgd_trains_the_torch_model_as_the_numpy_model(comm, method, options):
    from mpiopt.asyncsgd import ModelProblem, async_sgd
    reference, model = pair(alpha=1e-3)
    settings = dict(method=method, runtime="simulator", n_workers=6, tau="sqrt", max_gradients=120, seed=0,
                    stop_at_epsilon=False, verbose=False, method_options=options)
    expected = async_sgd(ModelProblem(reference, X, Y, batch_size=8), comm, **settings)
    got = async_sgd(ModelProblem(model, X, Y, batch_size=8), comm, **settings)
    assert got.history["gradients"] == expected.history["gradients"]
    assert not np.array_equal(expected.solution, reference.init_params(0))  # it moved
    np.testing.assert_allclose(got.solution, expected.solution, rtol=1e-9, atol=1e-11)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_async_sgd_on_mpi_ranks_trains_the_torch_model(comm):
    from mpiopt.asyncsgd import ModelProblem, async_sgd
    if comm.size < 2:
        pytest.skip("the MPI runtime needs a server and a worker")
    _, model = pair(alpha=1e-3)
    problem = ModelProblem(model, X, Y, batch_size=8)
    result = async_sgd(problem, comm, method="asgd", runtime="mpi", tau="constant", max_gradients=60, seed=0,
                       stop_at_epsilon=False, verbose=False)
    assert result.solution.shape == (model.n_params,) and np.isfinite(result.solution).all()
    assert problem.loss(result.solution) < problem.loss(problem.x0())
