"""Plugins: a user's package registers a penalty, a compressor, a federated strategy and an asynchronous method,
each with a declared option, and the command line uses them by name with no change to mpiopt
(mpiopt.core.plugins, mpiopt.cli).

The package is installed the way pip leaves one: its module and a ``.dist-info`` folder whose
``entry_points.txt`` names it in the ``mpiopt.plugins`` group, in a folder on the interpreter's path
(PYTHONPATH here, so the test's virtual environment is left as it was for the other tests).
"""
import json
import os
import sys
import textwrap

import numpy as np
import pytest

from conftest import run_mpi

PLUGIN = textwrap.dedent('''
    """A user's plugin for mpiopt: a penalty, a compressor, a strategy and an asynchronous method, each with an option."""
    import numpy as np

    from mpiopt.admm.penalties import Penalty
    from mpiopt.admm.pieces import LAM
    from mpiopt.asyncsgd import Method
    from mpiopt.compression import Compressor
    from mpiopt.core.options import Option, Options
    from mpiopt.core.registry import register
    from mpiopt.federated import Strategy


    @register("penalty", "plugin_scaled_l1")
    class ScaledL1(Penalty):
        """lam * scale * ||z||_1."""

        name = "plugin_scaled_l1"
        options = Options(LAM, Option("scale", float, 1.0, "the factor on lam", low=0, low_open=True))

        def __init__(self, lam, scale=1.0):
            self.lam, self.scale = float(lam), float(scale)

        def prox(self, v, step):
            kappa = step * (self.lam * self.scale)
            return np.sign(v) * np.maximum(np.abs(v) - kappa, 0.0)

        def value(self, z):
            return self.lam * self.scale * float(np.abs(z).sum())

        def settings(self):
            return {"lam": self.lam, "scale": self.scale}


    @register("compressor", "plugin-grid")
    class Grid(Compressor):
        """Every entry rounded to the nearest multiple of quantum."""

        name = "plugin-grid"
        linear = True
        options = Options(Option("quantum", float, 0.01, "the grid step", low=0, low_open=True))

        def __init__(self, quantum=0.01):
            super().__init__()
            self.quantum = quantum

        def context(self, shape, dtype, name=None, step=0):
            return self.make_context(shape, dtype, name, step, [(dtype, int(np.prod(shape, dtype=np.int64)))])

        def encode(self, flat, ctx):
            return (np.rint(flat / self.quantum),)

        def decode(self, payload, ctx, flat_out):
            np.multiply(payload[0], self.quantum, out=flat_out)


    @register("strategy", "plugin_fedavg_eta")
    class FedAvgEta(Strategy):
        """FedAvg whose server takes the step eta on the averaged update."""

        name = "plugin_fedavg_eta"
        options = Strategy.options + Options(Option("eta", float, 1.0, "the server's step", low=0, low_open=True))

        def __init__(self, eta=1.0, **server):
            super().__init__(**server)
            self.eta = float(eta)

        def server_update(self, params, delta):
            return super().server_update(params, self.eta * delta)


    @register("asyncsgd-method", "plugin-bounded-delay")
    class BoundedDelay(Method):
        """Asynchronous SGD that applies a gradient only when its delay is at most max_delay."""

        name = "plugin-bounded-delay"
        options = Options(Option("max_delay", int, 2, "the largest delay of a gradient that is applied", low=0))

        def __init__(self, x0, n_workers, step_size, max_delay):
            super().__init__(x0, n_workers, step_size)
            self.max_delay = max_delay

        def parameters(self):
            return {"step_size": self.step_size, "max_delay": self.max_delay}

        def arrive(self, worker, grad, k_at):
            if self.k - k_at <= self.max_delay:
                self.accepted[worker] += 1
                self._step(grad, self.step_size)
            else:
                self.discarded[worker] += 1
            return [worker]
''')


@pytest.fixture
def site(tmp_path):
    """A folder holding the plugin module and its distribution's metadata with the entry point."""
    folder = tmp_path / "site"
    (folder / "mpiopt_demo_plugin-0.1.dist-info").mkdir(parents=True)
    (folder / "mpiopt_demo_plugin.py").write_text(PLUGIN)
    (folder / "mpiopt_demo_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mpiopt-demo-plugin\nVersion: 0.1\n")
    (folder / "mpiopt_demo_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[mpiopt.plugins]\ndemo = mpiopt_demo_plugin\n")
    (folder / "only_a_module").mkdir()
    (folder / "only_a_module" / "mpiopt_bare_plugin.py").write_text(PLUGIN.replace('"plugin', '"bare'))
    (folder / "only_a_module" / "mpiopt_broken_plugin.py").write_text("import a_module_nobody_has\n")
    return folder


def environment(*folders):
    return {"PYTHONPATH": os.pathsep.join([str(folder) for folder in folders]
                                          + [path for path in [os.environ.get("PYTHONPATH")] if path])}


def mpiopt(ranks, site_folders, *arguments, cwd, env=None):
    return run_mpi(ranks, "-m", "mpiopt", *arguments, cwd=cwd, env={**environment(*site_folders), **(env or {})},
                   timeout=300)


SOLVE = ["solve", "--synthetic", "400x20", "--working-set", "off", "--eps-abs", "1e-10", "--eps-rel", "1e-10",
         "--max-iter", "5000", "--quiet"]


@pytest.mark.timeout(600)
def test_an_installed_plugins_pieces_are_listed_in_help_and_used_by_name_with_their_options(site, tmp_path):
    for subcommand, listed in [("solve", "plugin_scaled_l1\n      lam"), ("train", "plugin-grid\n      quantum"),
                               ("federated", "plugin_fedavg_eta\n      server_lr"),
                               ("async-sgd", "plugin-bounded-delay\n      max_delay")]:
        shown = mpiopt(1, [site], subcommand, "--help", cwd=tmp_path)
        assert shown.returncode == 0 and listed in shown.stdout, shown.stdout + shown.stderr
    # the penalty: lam * scale ||x||_1 is the lasso with lam * scale, solved by the built-in l1
    plugin = mpiopt(2, [site], *SOLVE, "--penalty", "plugin_scaled_l1", "--lam", "0.005", "--penalty-opt", "scale=2",
                    "--output", "plugin.json", cwd=tmp_path)
    assert plugin.returncode == 0, plugin.stderr
    builtin = mpiopt(2, [], *SOLVE, "--penalty", "l1", "--lam", "0.01", "--output", "l1.json", cwd=tmp_path)
    assert builtin.returncode == 0, builtin.stderr
    x, x_l1 = (np.array(json.loads((tmp_path / name).read_text())["x"]) for name in ("plugin.json", "l1.json"))
    assert np.count_nonzero(x_l1) and np.allclose(x, x_l1, rtol=0, atol=1e-9), (x, x_l1)
    # the compressor: its option as the generated flag and through --compressor-opt, the same run
    runs = []
    for option in (["--quantum", "0.001"], ["--compressor-opt", "quantum=0.001"]):
        output = f"train{len(runs)}.json"
        run = mpiopt(2, [site], "train", "--compressor", "plugin-grid", *option, "--max-steps", "20", "--quiet",
                     "--output", output, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        runs.append(json.loads((tmp_path / output).read_text()))
    assert runs[0]["history"]["loss"] == runs[1]["history"]["loss"] and runs[0]["info"]["compressor"] == runs[1]["info"]["compressor"]
    # the strategy: eta on FedAvg's averaged update is FedAvg with the server step eta
    federated = ["federated", "--clients", "10", "--fraction", "0.5", "--rounds", "3", "--quiet"]
    plugin = mpiopt(2, [site], *federated, "--strategy", "plugin_fedavg_eta", "--strategy-opt", "eta=0.5",
                    "--output", "eta.json", cwd=tmp_path)
    assert plugin.returncode == 0, plugin.stderr
    builtin = mpiopt(2, [], *federated, "--strategy", "fedavg", "--server-lr", "0.5", "--output", "server.json",
                     cwd=tmp_path)
    assert builtin.returncode == 0, builtin.stderr
    eta, server = (json.loads((tmp_path / name).read_text()) for name in ("eta.json", "server.json"))
    assert eta["info"]["strategy_options"]["eta"] == 0.5, eta["info"]
    assert np.allclose(eta["params"], server["params"], rtol=1e-13, atol=0)
    # the method: with max_delay 0 only fresh gradients are applied; of three workers, some arrive stale
    method = mpiopt(1, [site], "async-sgd", "--method", "plugin-bounded-delay", "--method-opt", "max_delay=0",
                    "--taus", "1,2,3", "--step-size", "0.1", "--max-gradients", "300", "--quiet",
                    "--output", "method.json", cwd=tmp_path)
    assert method.returncode == 0, method.stderr
    result = json.loads((tmp_path / "method.json").read_text())
    workers = result["info"]["workers"]
    assert sum(workers["discarded"]) > 0 and result["info"]["parameters"]["max_delay"] == 0, result["info"]
    bad = mpiopt(2, [site], "train", "--compressor", "plugin-grid", "--quantum", "-1", "--max-steps", "1",
                 "--output", "bad.json", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("quantum must be") == 1, bad.stderr


@pytest.mark.timeout(300)
def test_plugins_named_by_flag_or_variable_load_on_every_rank_and_a_broken_one_is_one_error(site, tmp_path):
    bare = site / "only_a_module"
    arguments = [*SOLVE, "--penalty", "bare_scaled_l1", "--lam", "0.005", "--penalty-opt", "scale=2"]
    by_flag = mpiopt(2, [bare], "--plugin", "mpiopt_bare_plugin", *arguments, "--output", "flag.json", cwd=tmp_path)
    assert by_flag.returncode == 0, by_flag.stderr
    by_variable = mpiopt(2, [bare], *arguments, "--output", "variable.json", cwd=tmp_path,
                         env={"MPIOPT_PLUGINS": "mpiopt_bare_plugin"})
    assert by_variable.returncode == 0, by_variable.stderr
    assert (json.loads((tmp_path / "flag.json").read_text())["x"]
            == json.loads((tmp_path / "variable.json").read_text())["x"])
    without = mpiopt(1, [bare], *arguments, "--output", "without.json", cwd=tmp_path)
    assert without.returncode == 2 and "bare_scaled_l1" in without.stderr, without.stderr
    broken = mpiopt(2, [bare], "solve", "--plugin=mpiopt_broken_plugin", "--synthetic", "50x5", cwd=tmp_path)
    assert broken.returncode == 2, broken.stderr
    lines = [line for line in broken.stderr.splitlines() if "mpiopt_broken_plugin" in line]
    assert lines == ["error: ranks 0-1: plugin 'mpiopt_broken_plugin' failed to load: ModuleNotFoundError: "
                     "No module named 'a_module_nobody_has'"], broken.stderr


def test_load_plugins_in_python_imports_each_once(site, monkeypatch):
    from mpiopt.core import registry
    from mpiopt.core.plugins import load_plugins
    monkeypatch.syspath_prepend(str(site / "only_a_module"))
    try:
        assert load_plugins(["mpiopt_bare_plugin"], entry_points=False) == ["mpiopt_bare_plugin"]
        assert "bare_scaled_l1" in registry.names("penalty") and "bare-grid" in registry.names("compressor")
        load_plugins(["mpiopt_bare_plugin"], entry_points=False)  # a second call imports nothing again
        assert registry.options("penalty", "bare_scaled_l1")["scale"].default == 1.0
    finally:
        for kind, name in [("penalty", "bare_scaled_l1"), ("compressor", "bare-grid"), ("strategy", "bare_fedavg_eta"),
                           ("asyncsgd-method", "bare-bounded-delay")]:
            registry.unregister(kind, name)
        sys.modules.pop("mpiopt_bare_plugin", None)
