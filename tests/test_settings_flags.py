"""Issue 20, item 3: the command line's settings flags are generated from the settings dataclasses' fields and
their comments, so a new setting is on the command line with no edit to the CLI."""
import argparse
import dataclasses
import json

import pytest

from conftest import run_mpi
from mpiopt.admm.settings import ADMMSettings
from mpiopt.asyncsgd import AsyncSGDSettings
from mpiopt.cli import parse_arguments
from mpiopt.cli.common import add_settings_flags, settings_from
from mpiopt.core.settings import Settings, field_docs
from mpiopt.federated import FederatedSettings
from mpiopt.train import TrainSettings

SUBCOMMANDS = [("solve", ADMMSettings, "admm_settings"), ("lasso", ADMMSettings, "admm_settings"),
               ("train", TrainSettings, "train_settings"), ("federated", FederatedSettings, "federated_settings"),
               ("async-sgd", AsyncSGDSettings, "async_settings")]
SCALARS = (int, float, str, bool)


@pytest.mark.parametrize("settings_class", [ADMMSettings, TrainSettings, FederatedSettings,
                                            AsyncSGDSettings])
def test_every_settings_field_has_a_one_line_doc(settings_class):
    docs = field_docs(settings_class)
    undocumented = [field.name for field in dataclasses.fields(settings_class) if not docs.get(field.name)]
    assert undocumented == [], "the comment beside a field is its --help"
    assert all("\n" not in doc and not doc.startswith("#") for doc in docs.values())


def test_field_docs_read_the_comment_and_the_comment_lines_under_it():
    @dataclasses.dataclass(frozen=True)
    class Made(Settings):
        plain: int = 3            # the first line
                                  # and its continuation
        hashed: str = "a#b"       # a default holding a hash is not a comment
        bare: float = 1.0
        after: bool = True        # its own doc, not bare's
    assert field_docs(Made) == {"plain": "the first line and its continuation",
                                "hashed": "a default holding a hash is not a comment",
                                "after": "its own doc, not bare's"}


@pytest.mark.parametrize("subcommand, settings_class, names", SUBCOMMANDS)
def test_every_scalar_setting_of_a_subcommand_is_a_flag(subcommand, settings_class, names):
    args = parse_arguments([subcommand])
    flagged = set(getattr(args, names))
    scalar = {field.name for field in dataclasses.fields(settings_class) if field.type in SCALARS}
    assert scalar - flagged <= {"checkpoint", "checkpoint_every"}, "checkpoints: add_checkpoint_options's flags"
    if "checkpoint" in scalar:  # every subcommand whose run resumes (lasso too)
        assert hasattr(args, "checkpoint") and hasattr(args, "checkpoint_every"), subcommand
    helps = {action.dest: action.help for action in args.parser._actions}
    docs = field_docs(settings_class)
    generated = [name for name in flagged if docs[name].replace("%", "%%") in (helps[name] or "")]
    assert len(generated) >= len(flagged) - 6, "the help is the field's comment unless the CLI words it itself"


def test_with_no_flags_the_settings_are_the_defaults_but_the_log():
    for subcommand, settings_class, names in SUBCOMMANDS:
        args = parse_arguments([subcommand])
        assert settings_from(args, getattr(args, names), settings_class) == {"verbose": True}, subcommand


@pytest.mark.parametrize("argv, expected", [
    (["solve", "--anderson", "0", "--x-tol-min", "1e-10", "--adaptive-rho-interval", "7", "--working-set", "off",
      "--quiet"], {"anderson": 0, "x_tol_min": 1e-10, "adaptive_rho_interval": 7, "working_set": False}),
    (["train", "--drop-last", "--no-shuffle", "--trace-memory", "--zero-stage", "2"],
     {"drop_last": True, "shuffle": False, "trace_memory": True, "zero_stage": 2, "verbose": True}),
    (["federated", "--batch-size", "0", "--client-sampling", "poisson", "--tolerate-failures"],
     {"batch_size": None, "client_sampling": "poisson", "tolerate_failures": True, "verbose": True}),
    (["async-sgd", "--threshold", "inf", "--no-restart", "--workers", "3", "--quiet"],
     {"threshold": float("inf"), "restart": False, "n_workers": 3}),
])
def test_flags_set_their_fields(argv, expected):
    args = parse_arguments(argv)
    settings_class, names = next((cls, names) for sub, cls, names in SUBCOMMANDS if sub == argv[0])
    given = settings_from(args, getattr(args, names), settings_class)
    assert given == expected
    settings_class(**{name: value for name, value in given.items()})  # real settings, valid


def test_a_new_field_is_a_flag_typed_and_described_by_its_declaration():
    @dataclasses.dataclass(frozen=True)
    class Extended(ADMMSettings):
        choices = dict(ADMMSettings.choices, flavour=("plain", "spiced"))
        lookahead: int = 3          # iterations to look ahead
        damping: float = None       # a damping factor; None: none
        flavour: str = "plain"      # the taste of the iterates
        warm: bool = True           # start from the last point
        maybe: bool = None          # None: decide from the data
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    names = add_settings_flags(parser, Extended, skip=[field.name for field in dataclasses.fields(ADMMSettings)])
    assert names == ["lookahead", "damping", "flavour", "warm", "maybe"]
    text = " ".join(parser.format_help().split())
    assert "--lookahead LOOKAHEAD iterations to look ahead (default 3)" in text
    assert "--damping DAMPING a damping factor; None: none" in text and "{plain,spiced}" in text
    assert "--no-warm start from the last point (on by default" in text and "--maybe, --no-maybe" in text
    args = parser.parse_args(["--lookahead", "5", "--damping", "0.5", "--flavour", "spiced", "--no-warm",
                              "--no-maybe"])
    assert settings_from(args, names, Extended) == {"lookahead": 5, "damping": 0.5, "flavour": "spiced",
                                                   "warm": False, "maybe": False}
    assert settings_from(parser.parse_args([]), names, Extended) == {}
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--flavour", "bitter"])
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--lookahead", "many"])


@pytest.mark.timeout(120)
def test_a_generated_flag_reaches_the_run(tmp_path):
    output = tmp_path / "r.json"
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--synthetic", "400x12", "--anderson", "0",
                        "--adaptive-rho-tolerance", "3.5", "--quiet", "--output", str(output), cwd=tmp_path,
                        timeout=120)
    assert completed.returncode == 0, completed.stderr
    settings = json.loads(output.read_text())["info"]["settings"]
    assert settings["anderson"] == 0 and settings["adaptive_rho_tolerance"] == 3.5
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--synthetic", "400x12", "--anderson", "-1", "--quiet",
                        "--output", str(output), cwd=tmp_path, timeout=120)
    assert completed.returncode == 2 and completed.stderr.count("anderson must be an integer >= 0, got -1") == 1
