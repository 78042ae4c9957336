"""A process imports what its subcommand needs and nothing more (mpiopt.cli builds the parser of the subcommand
named on the command line only), with the same help as the parser of every subcommand.

Every rank of every job pays the imports before it does anything, and the suite starts hundreds of such
processes: numba alone is a quarter of a second, another method's package up to half a second.  Each check
runs in a fresh interpreter, where nothing is imported yet."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
METHODS = {"mpiopt.admm", "mpiopt.train", "mpiopt.federated", "mpiopt.asyncsgd", "mpiopt.slurm"}
# subcommand -> the method packages its --help may import (the registries it lists are theirs)
OWN = {"lasso": {"mpiopt.admm"}, "solve": {"mpiopt.admm"}, "train": {"mpiopt.train"},
       "federated": {"mpiopt.federated"}, "async-sgd": {"mpiopt.asyncsgd"}, "slurm": {"mpiopt.slurm"}}
HELP_AND_MODULES = """
import contextlib, io, json, sys
from mpiopt.cli import main
with contextlib.redirect_stdout(io.StringIO()) as shown:
    try:
        main([sys.argv[1], "--help"])
    except SystemExit:
        pass
print(json.dumps({"help": shown.getvalue(), "modules": sorted(sys.modules)}))
"""


def _in_a_fresh_interpreter(script, *arguments):
    """The JSON that ``script`` prints last, run with ``arguments`` in a new interpreter from the checkout."""
    done = subprocess.run([sys.executable, "-c", script, *arguments], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


def _help_and_modules(subcommand):
    return _in_a_fresh_interpreter(HELP_AND_MODULES, subcommand)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("subcommand", sorted(OWN))
def test_a_subcommands_help_imports_neither_numba_nor_the_other_methods(subcommand):
    modules = set(_help_and_modules(subcommand)["modules"])
    assert "numba" not in modules, "numba is imported only where a compiled kernel runs"
    assert modules & METHODS <= OWN[subcommand], f"{subcommand} imports {sorted(modules & METHODS - OWN[subcommand])}"
    assert "matplotlib" not in modules and "scipy.sparse" not in modules


@pytest.mark.timeout(150)
@pytest.mark.parametrize("subcommand", ["solve", "async-sgd"])
def test_a_subcommands_help_is_the_full_parsers(subcommand, monkeypatch):
    from mpiopt.cli import build_parser
    monkeypatch.setenv("COLUMNS", "100")  # the same width here and in the child, whatever the terminal
    commands = next(action for action in build_parser()._actions if action.dest == "command")
    assert _help_and_modules(subcommand)["help"] == commands.choices[subcommand].format_help()


RUN_AND_MODULES = """
import contextlib, io, json, sys
from mpiopt.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


@pytest.mark.timeout(150)
@pytest.mark.parametrize("arguments", [["train", "--max-steps", "1"], ["federated", "--rounds", "1"]])
def test_a_run_on_the_default_digits_imports_neither_scikit_learn_nor_numba(arguments, tmp_path):
    shown = _in_a_fresh_interpreter(RUN_AND_MODULES, *arguments, "--quiet", "--output", str(tmp_path / "out.json"))
    assert shown["status"] in (0, None) and (tmp_path / "out.json").exists()
    modules = set(shown["modules"])
    assert "sklearn" not in modules, "digits is read from scikit-learn's file, without importing scikit-learn"
    assert "numba" not in modules, "no compressor: no compiled kernel"


def test_digits_are_scikit_learns_arrays_bit_for_bit():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    from mpiopt.data.datasets import digits
    X, y = digits()
    X_ref, y_ref = sklearn_datasets.load_digits(return_X_y=True)
    assert X.dtype == X_ref.dtype and y.dtype == y_ref.dtype and X.shape == X_ref.shape == (1797, 64)
    assert np.array_equal(X, X_ref) and np.array_equal(y, y_ref)
