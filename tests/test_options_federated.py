"""Federated learning's and the data's named pieces declare their options once (issue 20).

Strategies, partitions, hooks and data sets each declare theirs
(``registry.options(kind, name)``); ``run_federated``'s ``strategy_options``
and hooks given by name, ``partition``'s options and ``load_dataset``'s
``dataset_options`` are checked against the declaration, with one line on
every rank; a user's strategy with its own declared option runs by name and
matches an independent numpy reference.  ``python tests/test_options_federated.py``
prints the options table of docs/federated.md.
"""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core import registry
from mpiopt.core.comm import CollectiveError
from mpiopt.core.options import Option, Options
from mpiopt.data import load_dataset
from mpiopt.federated import DPHook, FedAvg, FedProx, SecureAggregationHook, Strategy, partition, run_federated
from mpiopt.models import get_model

KINDS = ("strategy", "partition", "hook", "attack", "dataset")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "federated.md"


def builtin_pieces(kind):
    return [name for name in registry.names(kind)
            if getattr(registry.lookup(kind, name), "__module__", "").startswith("mpiopt.")]


def options_table(kinds=KINDS):
    """The Markdown table of docs/federated.md: one row per declared option, naming mpiopt's pieces that take it."""
    rows = ["| kind | names | option | constraint | default | help |", "|---|---|---|---|---|---|"]
    for kind in kinds:
        takers = {}  # an Option (None: takes no options) -> the pieces that declare it
        for name in builtin_pieces(kind):
            for option in registry.options(kind, name).values() or [None]:
                takers.setdefault(option, []).append(f"`{name}`")
        for option, names in takers.items():
            if option is None:
                rows.append(f"| {kind} | {', '.join(names)} | (none) | | | |")
                continue
            default = "required" if option.required else f"`{option.default!r}`"
            rows.append(f"| {kind} | {', '.join(names)} | `{option.name}` | {option.constraint()} | {default} | "
                        f"{option.help} |")
    return "\n".join(rows)


def clients(n_clients=5, n_features=3, seed=4):
    """Linear-regression clients of 6 to 14 rows each, seeded."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_clients):
        X = rng.standard_normal((6 + 2 * k, n_features))
        parts.append((X, X @ np.arange(1.0, n_features + 1) + 0.5 + 0.1 * rng.standard_normal(X.shape[0])))
    return parts


# -- the declarations ---------------------------------------------------------------------------------------

def test_every_builtin_piece_declares_its_options_with_help_and_a_valid_default():
    expected = {"strategy": {"fedavg", "fedsgd", "fedprox", "fednova", "scaffold", "feddyn", "fedadagrad", "fedadam",
                             "fedyogi", "median", "trimmed_mean", "krum", "multikrum", "bulyan", "fedadmm", "fedbuff",
                             "fedasync"},
                "partition": {"iid", "pathological", "dirichlet", "quantity"},
                "hook": {"dp", "secure_aggregation"}, "attack": {"sign_flip", "gaussian", "constant", "alie"},
                "dataset": {"digits", "breast_cancer"}}
    for kind in KINDS:
        assert set(builtin_pieces(kind)) == expected[kind]
        for name in builtin_pieces(kind):
            declared = registry.options(kind, name)
            assert isinstance(declared, Options), (kind, name)
            for option in declared.values():
                assert option.help, (kind, name, option.name)
                assert option.required or option.problem(option.default) is None, (kind, name, option)
    assert list(registry.options("strategy", "fedprox")) == ["server_lr", "server_momentum", "mu"]
    assert list(registry.options("hook", "dp")) == ["clip_norm", "noise_multiplier", "delta", "seed", "accountant"]
    assert registry.options("hook", "dp") is DPHook.options
    assert registry.options("hook", "secure_aggregation") is SecureAggregationHook.options
    assert registry.options("partition", "dirichlet").defaults() == {"alpha": 0.5, "min_size": 1}
    assert len(registry.options("dataset", "digits")) == 0


def test_the_docs_table_is_the_declarations():
    assert options_table() in DOCS.read_text(), "regenerate it: python tests/test_options_federated.py"


def test_strategy_values_info_and_repr_read_the_declaration_as_before():
    fedprox = FedProx(mu=0.1, server_momentum=0.5)
    assert fedprox.option_values() == {"server_lr": 1.0, "server_momentum": 0.5, "mu": 0.1}
    assert repr(fedprox) == "FedProx(server_lr=1.0, server_momentum=0.5, mu=0.1)"
    assert repr(FedAvg()) == "FedAvg(server_lr=1.0, server_momentum=0.0)"
    result = run_federated(get_model("linear", n_features=3), clients(), "fedprox", MPI.COMM_SELF,
                           strategy_options={"mu": 0.1}, rounds=1, fraction=1.0, batch_size=None)
    assert result.info["strategy_options"] == {"server_lr": 1.0, "server_momentum": 0.0, "mu": 0.1}


REQUIRED = {("hook", "dp"): {"clip_norm": 1.0, "noise_multiplier": 1.1}, ("hook", "secure_aggregation"):
            {"session_seed": 3}}


def built_with_defaults(kind, name):
    """The piece ``kind`` ``name`` built by name with no options but the required ones."""
    from mpiopt.federated.attacks import get_attack
    from mpiopt.federated.strategies import get_strategy
    given = REQUIRED.get((kind, name), {})
    return {"strategy": get_strategy, "attack": get_attack,
            "hook": lambda name, **values: registry.lookup("hook", name)(**values)}[kind](name, **given), given


def test_every_piece_built_without_options_uses_the_declared_defaults():
    for kind in ("strategy", "attack", "hook"):
        for name in builtin_pieces(kind):
            declared = registry.options(kind, name)
            piece, given = built_with_defaults(kind, name)
            used = {option: getattr(piece, "method" if (kind, option) == ("hook", "accountant") else option)
                    for option in declared}
            expected = {**declared.defaults(), **given}
            assert used == expected and list(used) == list(declared), (kind, name, used, expected)
            assert all(type(used[option]) is type(expected[option]) for option in used), (kind, name, used)
            if kind != "hook":
                assert piece.option_values() == expected, (kind, name)
    labels = np.repeat(np.arange(4), 25)
    for name in builtin_pieces("partition"):
        explicit = partition(name, labels, 10, 3, registry.options("partition", name).defaults())
        assert all(np.array_equal(a, b) for a, b in zip(partition(name, labels, 10, 3), explicit)), name


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fednova", "scaffold", "feddyn", "fedadagrad", "fedadam",
                                  "fedyogi", "median", "trimmed_mean", "krum", "multikrum", "bulyan", "fedadmm"])
def test_a_run_records_the_declared_defaults_of_its_strategy(name):
    result = run_federated(get_model("linear", n_features=3), clients(), name, MPI.COMM_SELF, rounds=1,
                           fraction=1.0, batch_size=None)
    assert result.info["strategy_options"] == registry.options("strategy", name).defaults()


def test_a_strategy_built_directly_refuses_what_the_declaration_refuses():
    from mpiopt.federated.strategies import get_strategy
    for name in builtin_pieces("strategy"):
        for option in registry.options("strategy", name).values():
            for value in (option.low - 1 if option.low is not None else None, "text"):
                if value is None or option.problem(value) is None:
                    continue
                with pytest.raises(ValueError, match=f"^{name}: {option.name} must be"):
                    get_strategy(name, **{option.name: value})


# -- bad options: one line on every rank ------------------------------------------------------------------

def raised_everywhere(comm, message, call):
    with pytest.raises(CollectiveError) as caught:
        call()
    ranks = "rank 0" if comm.size == 1 else f"ranks 0-{comm.size - 1}"
    assert str(caught.value) == f"{ranks}: {message}", str(caught.value)
    assert all(text == str(caught.value) for text in comm.allgather(str(caught.value)))


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_bad_option_is_one_line_naming_the_piece_on_every_rank(comm):
    model, parts = get_model("linear", n_features=3), clients()
    for strategy, options, message in (
            ("fedprox", {"mu": -1}, "strategy 'fedprox': mu must be a float >= 0, got -1"),
            ("fedavg", {"mu": 0.1}, "strategy 'fedavg' takes server_lr, server_momentum; got mu"),
            ("fedavg", {"server_momentum": 1.0}, "strategy 'fedavg': server_momentum must be a float in [0, 1), "
                                                 "got 1.0")):
        raised_everywhere(comm, message, lambda: run_federated(model, parts, strategy, comm, rounds=1,
                                                               strategy_options=options))
    for hooks, message in (
            ([("dp", {"clip_norm": 1.0})], "hook 'dp': noise_multiplier must be given"),
            ([("dp", {"clip_norm": 1.0, "noise_multiplier": 1.0, "accountant": "moments"})],
             "hook 'dp': accountant must be one of rdp, pld, got 'moments'"),
            ([("secure_aggregation", {"session_seed": 1, "bits": 8})],
             "hook 'secure_aggregation' takes session_seed, fraction_bits, drop_after_masking; got bits"),
            (["nohook"], "hook must be one of dp, secure_aggregation, got 'nohook'")):
        raised_everywhere(comm, message, lambda: run_federated(model, parts, "fedavg", comm, rounds=1, hooks=hooks))
    raised_everywhere(comm, "dataset 'digits' takes no options; got rows",
                      lambda: load_dataset("digits", comm, dataset_options={"rows": 10}))


def test_partition_options_go_through_the_declaration():
    labels = np.repeat(np.arange(4), 25)
    assert all(np.array_equal(a, b) for a, b in zip(partition("dirichlet", labels, 10, 3, alpha=0.3),
                                                    partition("dirichlet", labels, 10, 3, {"alpha": 0.3})))
    with pytest.raises(ValueError, match=r"^partition 'dirichlet': alpha must be a float > 0, got 0.0$"):
        partition("dirichlet", labels, 10, partition_options={"alpha": 0.0})
    with pytest.raises(ValueError, match="^partition 'iid' takes no options; got alpha$"):
        partition("iid", labels, 10, alpha=0.5)
    with pytest.raises(ValueError, match="^partition 'pathological': shards_per_client must be an int >= 1, got 0$"):
        partition("pathological", labels, 10, shards_per_client=0)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_hooks_by_name_are_the_hooks_built_from_their_options(comm):
    model, parts = get_model("linear", n_features=3), clients()
    common = {"rounds": 2, "fraction": 1.0, "batch_size": None, "lr": 0.05}
    by_name = run_federated(model, parts, "fedavg", comm, hooks=[("secure_aggregation", {"session_seed": 3})],
                            **common)
    built = run_federated(model, parts, "fedavg", comm, hooks=[SecureAggregationHook(3)], **common)
    np.testing.assert_array_equal(by_name.params, built.params)
    if importlib.util.find_spec("dp_accounting") is not None:
        dp = {"clip_norm": 1.0, "noise_multiplier": 0.5, "seed": 2}
        by_name = run_federated(model, parts, "fedavg", comm, hooks=[("dp", dp)], **common)
        built = run_federated(model, parts, "fedavg", comm, hooks=[DPHook(**dp)], **common)
        np.testing.assert_array_equal(by_name.params, built.params)
        assert by_name.history["epsilon"] == built.history["epsilon"]


# -- a user's own strategy, by name ---------------------------------------------------------------------------

class FedAvgEta(Strategy):
    """FedAvg with a server learning rate eta on the weighted mean of the client updates (a user's strategy)."""

    name = "fedavg_eta"
    options = Strategy.options + Options(
        Option("eta", float, 1.0, "the server's learning rate on the weighted mean update", low=0, low_open=True))

    def __init__(self, eta=1.0, **server):
        super().__init__(**server)
        self.eta = float(eta)

    def server_update(self, params, delta):
        return super().server_update(params, self.eta * delta)


@pytest.fixture
def user_strategy():
    registry.register("strategy", "fedavg_eta", FedAvgEta)
    yield "fedavg_eta"
    registry.unregister("strategy", "fedavg_eta")


def reference_fedavg_eta(parts, rounds, lr, eta):
    """Plain numpy: each client one full-batch gradient step of the halved mean squared error from w, the
    server w + eta sum_k (n_k / n) (w_k - w) (Flower's ``aggregate``, then the server's step)."""
    w = np.zeros(parts[0][0].shape[1] + 1)
    for _ in range(rounds):
        updates = []
        for X, y in parts:
            residual = X @ w[:-1] + w[-1] - y
            gradient = np.concatenate([X.T @ residual, [residual.sum()]]) / y.size
            updates.append((y.size, -lr * gradient))
        total = sum(n for n, _ in updates)
        w = w + eta * sum(n / total * delta for n, delta in updates)
    return w


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_users_strategy_with_its_own_option_runs_by_name_and_matches_a_numpy_reference(comm, user_strategy):
    model, parts = get_model("linear", n_features=3), clients()
    result = run_federated(model, parts, user_strategy, comm, strategy_options={"eta": 0.5}, rounds=6,
                           fraction=1.0, local_epochs=1, batch_size=None, lr=0.1)
    np.testing.assert_allclose(result.params, reference_fedavg_eta(parts, 6, 0.1, 0.5), rtol=1e-12, atol=1e-14)
    assert result.info["strategy"] == "fedavg_eta"
    assert result.info["strategy_options"] == {"server_lr": 1.0, "server_momentum": 0.0, "eta": 0.5}
    assert registry.options("strategy", user_strategy)["eta"].default == 1.0
    raised_everywhere(comm, "strategy 'fedavg_eta': eta must be a float > 0, got 0",
                      lambda: run_federated(model, parts, user_strategy, comm, strategy_options={"eta": 0}))
    raised_everywhere(comm, "strategy 'fedavg_eta' takes server_lr, server_momentum, eta; got mu",
                      lambda: run_federated(model, parts, user_strategy, comm, strategy_options={"mu": 0.1}))


if __name__ == "__main__":
    print(options_table())
