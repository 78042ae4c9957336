"""Declared options of the communication and training pieces (compressors, reducers, models, optimizers):
every built-in declares its options against its constructor, bad values are one line on every rank, and a
user's compressor with its own option works by name in the compressed reducer and in training, against
references computed here by hand.  Every MPI test runs at any rank count."""
import inspect
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.collectives import compressor_options_problem, get_reducer
from mpiopt.compression import Compressor, get_compressor
from mpiopt.core import registry
from mpiopt.core.comm import CollectiveError
from mpiopt.core.options import Option, Options
from mpiopt.core.partition import row_range
from mpiopt.core.random import random_stream
from mpiopt.models import MLP, get_model
from mpiopt.optim import Adam, get_optimizer
from mpiopt.train import train

KINDS = ("compressor", "reducer", "model", "optimizer")
QUANTUM = 2.0 ** -6  # a power of two: rounding to its multiples and summing them is exact


class Grid(Compressor):
    """A user's compressor: every entry rounded to the nearest multiple of ``quantum`` (None: sent as it is).
    The payload is the multiples' integers (as floats), so payloads add up as they travel."""

    name = "test-grid"
    linear = True
    options = Options(Option("quantum", float, QUANTUM, "the grid step; None: no rounding", low=0, low_open=True,
                             nullable=True))

    def __init__(self, quantum=QUANTUM):
        super().__init__()
        self.quantum = quantum

    def context(self, shape, dtype, name=None, step=0):
        return self.make_context(shape, dtype, name, step, [(dtype, int(np.prod(shape, dtype=np.int64)))])

    def encode(self, flat, ctx):
        return (flat.copy() if self.quantum is None else np.rint(flat / self.quantum),)

    def decode(self, payload, ctx, flat_out):
        np.multiply(payload[0], 1.0 if self.quantum is None else self.quantum, out=flat_out)


def on_grid(x, quantum):
    """The rounding by hand."""
    return x.copy() if quantum is None else np.rint(x / quantum) * quantum


@pytest.fixture
def grid():
    registry.register("compressor", "test-grid", Grid)
    yield "test-grid"
    registry.unregister("compressor", "test-grid")


def constructor_defaults(item):
    """name -> default (inspect's empty for a required one) of the constructor's keyword options."""
    parameters = inspect.signature(item).parameters
    return {name: parameter.default for name, parameter in parameters.items() if name not in ("comm", "check")}


@pytest.mark.parametrize("kind", KINDS)
def test_every_builtin_piece_declares_the_options_of_its_constructor_with_help_and_valid_defaults(kind):
    for name in registry.names(kind):
        declared = registry.options(kind, name)
        assert isinstance(declared, Options), (kind, name)
        expected = constructor_defaults(registry.lookup(kind, name))
        assert set(declared) == set(expected), (kind, name, list(declared), list(expected))
        for option in declared.values():
            assert option.help, (kind, name, option.name)
            if option.required:
                assert expected[option.name] is inspect.Parameter.empty, (kind, name, option.name)
            else:
                assert option.problem(option.default) is None, (kind, name, option.name)
                assert option.default == expected[option.name], (kind, name, option.name)


def test_the_declarations_keep_the_names_and_order_the_command_line_reads():
    assert list(registry.options("compressor", "powersgd")) == ["rank", "min_compression_rate", "warm_start", "seed"]
    assert list(registry.options("compressor", "qsgd")) == ["bits", "bucket_size", "norm", "seed", "worker"]
    assert list(registry.options("compressor", "qsgd8")) == ["bucket_size", "norm", "seed", "worker"]
    assert list(registry.options("compressor", "topk")) == ["ratio", "k"]
    assert list(get_compressor("randomk").options) == ["ratio", "k", "seed", "unbiased"]
    assert list(registry.options("compressor", "fp16")) == []
    assert registry.options("model", "mlp")["hidden"].default == (64,)
    assert registry.options("optimizer", "sgd")["lr"].required


@pytest.mark.parametrize("build, error, message", [
    (lambda: get_compressor("powersgd", warm_start=1), ValueError, "powersgd: warm_start must be a bool, got 1"),
    (lambda: get_compressor("qsgd", norm="l3"), ValueError, "qsgd: norm must be one of l2, max, got 'l3'"),
    (lambda: get_compressor("topk", ratio=0), ValueError, "topk: ratio must be in (0, 1], got 0"),
    (lambda: get_compressor("qsgd4", bits=8), TypeError, "compressor 'qsgd4' takes bucket_size, norm, seed, worker"),
    (lambda: get_model("mlp", n_features=3, width=2), TypeError,
     "model 'mlp' takes n_features, alpha, n_classes, hidden; got width"),
    (lambda: get_model("softmax", n_features=3), TypeError, "model 'softmax' needs n_classes"),
    (lambda: get_model("mlp", n_features=3, hidden=(4, 0)), ValueError,
     "mlp: each hidden width must be an integer >= 1, got 0"),
    (lambda: get_optimizer("adam", eps=-1), ValueError, "adam: eps must be a number >= 0, got -1"),
    (lambda: get_optimizer("sgd"), TypeError, "optimizer 'sgd' needs lr"),
    (lambda: get_reducer("ring", MPI.COMM_SELF, segment_bytes=-1), ValueError,
     "reducer 'ring': segment_bytes must be an int >= 0, got -1"),
    (lambda: get_reducer("auto", MPI.COMM_SELF, small="tree"), ValueError,
     "reducer 'auto': small must be one of mpi, rd, got 'tree'"),
    (lambda: get_reducer("mpi", MPI.COMM_SELF, segment_bytes=4), TypeError, "reducer 'mpi' takes no options"),
])
def test_front_ends_check_the_declarations_before_building(build, error, message):
    with pytest.raises(error) as caught:
        build()
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_registrys_check_and_the_compressed_reducers_check_read_the_same_declaration():
    assert registry.options_problem("compressor", "topk", {"ratio": 2}) == \
        "compressor 'topk': ratio must be in (0, 1], got 2"
    assert compressor_options_problem("qsgd", {"norm": "l3"}, "ring") == "qsgd: norm must be one of l2, max, got 'l3'"
    assert compressor_options_problem("topk", {"ratio": 0.1}, "ring-seg", {"segment_bytes": -1}) == \
        "reducer 'ring-seg': segment_bytes must be an int >= 0, got -1"
    assert compressor_options_problem("topk", {"k": 3, "ratio": 0}, "ring") is None  # k given: ratio unused
    # each dict is its own piece's: a reducer's option among the compressor's is refused, naming the compressor
    assert compressor_options_problem("topk", {"ratio": 0.1, "segment_bytes": 16}, "ring-seg") == \
        "compressor 'topk' takes ratio, k; got segment_bytes"
    assert get_compressor("topk", k=3, ratio=0).k == 3


def digits_like(rows=120, features=8, classes=3):
    stream = random_stream(0, "test-options-train")
    X = stream.standard_normal((rows, features))
    return X, (X @ stream.standard_normal((features, classes))).argmax(axis=1)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_model_and_an_optimizer_by_name_train_as_the_objects_do(comm):
    X, y = digits_like()
    settings = dict(epochs=2, batch_size=32, reducer="ring")
    objects = train(MLP(X.shape[1], 3, hidden=(6,), alpha=1e-3), X, y, Adam(lr=0.01), comm, **settings)
    named = train("mlp", X, y, "adam", comm, model_options={"n_classes": 3, "hidden": (6,), "alpha": 1e-3},
                  optimizer_options={"lr": 0.01}, **settings)
    assert np.array_equal(named.params, objects.params) and named.steps == objects.steps


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("arguments, message", [
    (dict(model_options={"n_classes": 3, "hidden": (4, 0)}),
     "model_options: mlp: each hidden width must be an integer >= 1, got 0"),
    (dict(model_options={"n_classes": 3, "width": 4}),
     "model_options: model 'mlp' takes n_features, alpha, n_classes, hidden; got width"),
    (dict(optimizer_options={"lr": -1}), "optimizer_options: sgd: lr must be a number >= 0, got -1"),
    (dict(compressor="powersgd", compressor_options={"warm_start": 1}),
     "compressor_options: powersgd: warm_start must be a bool, got 1"),
    (dict(compressor="test-grid", compressor_options={"quantum": -1.0}),
     "compressor_options: test-grid: quantum must be a float > 0 or None, got -1.0"),
    (dict(reducer_options={"small": "rd"}), "reducer_options: reducer 'ring' takes segment_bytes; got small"),
    (dict(reducer_options={"segment_bytes": -1}),
     "reducer_options: reducer 'ring': segment_bytes must be an int >= 0, got -1"),
    (dict(compressor="topk", reducer_options={"segment_bytes": -1}),
     "reducer_options: reducer 'ring': segment_bytes must be an int >= 0, got -1"),
    (dict(compression_mode="two-pass"), "compression_mode 'two-pass' needs a compressor"),
])
def test_a_bad_option_is_one_line_on_every_rank(comm, grid, arguments, message):
    X, y = digits_like()
    arguments = dict({"model_options": {"n_classes": 3}, "optimizer_options": {"lr": 0.1}}, **arguments)
    with pytest.raises(CollectiveError) as error:
        train("mlp", X, y, "sgd", comm, reducer="ring", **arguments)
    assert message in str(error.value), str(error.value)
    assert "\n" not in message and len(set(comm.allgather(str(error.value)))) == 1


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_options_of_a_piece_given_as_an_object_are_refused_on_every_rank(comm):
    X, y = digits_like()
    with pytest.raises(CollectiveError) as error:
        train(MLP(X.shape[1], 3), X, y, "sgd", comm, model_options={"hidden": (4,)}, optimizer_options={"lr": 0.1})
    assert "model_options need the model by name" in str(error.value)
    assert len(set(comm.allgather(str(error.value)))) == 1


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["allreduce", "allgather"])
def test_a_users_compressor_with_its_own_option_works_by_name_in_the_compressed_reducer(comm, grid, mode):
    x = random_stream(comm.rank, "test-options-train-reducer").standard_normal(1001)
    expected = sum(on_grid(random_stream(r, "test-options-train-reducer").standard_normal(1001), QUANTUM * 4)
                   for r in range(comm.size))
    with get_reducer("ring", comm, compressor=grid, compressor_options={"quantum": QUANTUM * 4},
                     mode=mode) as reducer:
        assert reducer.compressor.quantum == QUANTUM * 4 and reducer.mode == mode
        assert np.array_equal(reducer.allreduce(x, name="x"), expected)
    with get_reducer("ring", comm, compressor=grid, quantum=QUANTUM * 4, mode=mode) as reducer:  # keywords
        assert reducer.compressor.quantum == QUANTUM * 4 and reducer.mode == mode
        assert np.array_equal(reducer.allreduce(x, name="x"), expected)


def grid_sgd_reference(model, X, y, lr, steps, batch_size, p, quantum):
    """SGD on the global batches in order: each of the p ranks' gradients over its rows, weighted by its row
    count, rounded to the grid; their sum over the batch's rows."""
    params = model.init_params(0)
    for step in range(steps):
        first = step * batch_size
        total = np.zeros_like(params)
        for rank in range(p):
            start, stop = row_range(batch_size, rank, p)
            rows = slice(first + start, first + stop)
            _, grad = model.loss_and_grad(params, X[rows], y[rows])
            total += on_grid(grad * float(stop - start), quantum)
        params -= lr * (total / batch_size)
    return params


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_users_compressor_by_name_in_training_matches_the_rounding_by_hand(comm, grid):
    X, y = digits_like()
    model = get_model("softmax", n_features=X.shape[1], n_classes=3)

    def run(**settings):
        return train(model, X, y, get_optimizer("sgd", lr=0.5), comm, epochs=1, batch_size=40, shuffle=False,
                     reducer="ring", **settings)
    rounded = run(compressor=grid, compressor_options={"quantum": QUANTUM})
    reference = grid_sgd_reference(model, X, y, 0.5, 3, 40, comm.size, QUANTUM)
    assert np.array_equal(rounded.params, reference)
    assert not np.allclose(rounded.params, run().params, rtol=0, atol=1e-6)  # the option arrived
    assert np.array_equal(run(compressor=grid, compressor_options={"quantum": None}).params, run().params)


@pytest.mark.parametrize("kind, page", [("compressor", "compression.md"), ("reducer", "collectives.md"),
                                        ("model", "training.md"), ("optimizer", "training.md")])
def test_the_docs_tables_are_the_declarations(kind, page):
    """Each declared option has its row in the docs page, as the declaration words it."""
    text = (Path(__file__).resolve().parents[1] / "docs" / page).read_text()
    for name in registry.names(kind):
        for option in registry.options(kind, name).values():
            default = "required" if option.required else f"`{option.default!r}`"
            row = f"| `{name}` | `{option.name}` | {option.constraint()} | {default} | {option.help} |"
            assert row in text, row
