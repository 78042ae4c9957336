"""The declared options of named pieces (mpiopt.core.options) and the registry's view of them."""
import math

import numpy as np
import pytest

from mpiopt.core import registry
from mpiopt.core.options import NO_OPTIONS, REQUIRED, Option, Options

MCP = Options(Option("lam", float, help="weight", low=0),
              Option("gamma", float, 3.0, "concavity", low=1, low_open=True),
              Option("mode", str, "mean", "how", choices=("mean", "max")),
              Option("rank", int, 1, "rank", low=1, high=64),
              Option("warm", bool, True, "warm start"),
              Option("seed", int, None, "seed"))


def test_an_options_declaration_is_a_mapping_of_names_in_order():
    assert list(MCP) == ["lam", "gamma", "mode", "rank", "warm", "seed"]
    assert "gamma" in MCP and "beta" not in MCP and len(MCP) == 6
    assert MCP["gamma"].default == 3.0 and MCP["lam"].required and MCP["lam"].default is REQUIRED
    assert MCP.defaults() == {"gamma": 3.0, "mode": "mean", "rank": 1, "warm": True, "seed": None}
    extended = MCP.without("mode") + Options(Option("gamma", float, 2.0, "again"), Option("tau", float, 0.1))
    assert list(extended) == ["lam", "gamma", "rank", "warm", "seed", "tau"] and extended["gamma"].default == 2.0


@pytest.mark.parametrize("values, message", [
    ({"gamma": 0.5}, "penalty 'mcp': gamma must be a float > 1, got 0.5"),
    ({"gamma": 1}, "penalty 'mcp': gamma must be a float > 1, got 1"),
    ({"gamma": math.inf}, "penalty 'mcp': gamma must be a finite float > 1, got inf"),
    ({"gamma": "3"}, "penalty 'mcp': gamma must be a float > 1, got '3'"),
    ({"gamma": True}, "penalty 'mcp': gamma must be a float > 1, got True"),
    ({"lam": -1.0}, "penalty 'mcp': lam must be a float >= 0, got -1.0"),
    ({"lam": None}, "penalty 'mcp': lam must be given (a float >= 0), got None"),
    ({"mode": "median"}, "penalty 'mcp': mode must be one of mean, max, got 'median'"),
    ({"rank": 65}, "penalty 'mcp': rank must be an int in [1, 64], got 65"),
    ({"rank": 2.0}, "penalty 'mcp': rank must be an int in [1, 64], got 2.0"),
    ({"warm": 1}, "penalty 'mcp': warm must be a bool, got 1"),
    ({"beta": 1}, "penalty 'mcp' takes lam, gamma, mode, rank, warm, seed; got beta"),
])
def test_a_bad_value_is_one_line_naming_the_piece_the_option_and_the_constraint(values, message):
    assert MCP.problem(values, "penalty 'mcp'") == message


def test_good_values_pass_and_resolve_fills_the_defaults():
    good = {"lam": 1, "gamma": 3, "mode": "max", "rank": np.int64(4), "warm": np.bool_(False), "seed": None}
    assert MCP.problem(good, "x") is None
    assert MCP.resolve({"lam": 0.5}, "x") == {"lam": 0.5, "gamma": 3.0, "mode": "mean", "rank": 1, "warm": True,
                                               "seed": None}
    with pytest.raises(ValueError, match="^x: lam must be given$"):
        MCP.resolve({}, "x")
    assert MCP.problem({}, "x") is None  # without complete, a partial set is fine


def test_command_line_pairs_parse_to_the_declared_types():
    assert MCP.parse(["gamma=4", "mode=max", "rank=8", "warm=false", "seed=none"], "x") == {
        "gamma": 4.0, "mode": "max", "rank": 8, "warm": False, "seed": None}
    assert MCP.parse("gamma=2.5,warm-start=1".replace("warm-start", "warm"), "x") == {"gamma": 2.5, "warm": True}
    for pairs, message in [(["gamma"], "x: an option is NAME=VALUE, got 'gamma'"),
                           (["rank=two"], "x: rank must be an int in [1, 64], got 'two'"),
                           (["warm=maybe"], "x: warm must be a bool, got 'maybe'"),
                           (["beta=1"], "x takes lam, gamma, mode, rank, warm, seed; got beta")]:
        with pytest.raises(ValueError) as error:
            MCP.parse(pairs, "x")
        assert str(error.value) == message


def test_help_lines_give_constraint_default_and_help():
    assert MCP.help_lines()[:3] == ["lam (float >= 0, required): weight", "gamma (float > 1, default 3.0): concavity",
                                    "mode (one of mean, max, default 'mean'): how"]
    assert MCP["seed"].describe() == "seed (int or None, default None): seed"


def test_the_registry_returns_a_classs_or_a_factorys_declaration_and_checks_values():
    class Piece:
        options = MCP

    def factory(width=2):
        return width

    declared = Options(Option("width", int, 2, "width", low=1))
    try:
        registry.register("test-kind", "piece", Piece)
        registry.register("test-kind", "factory", factory, options=declared)
        registry.register("test-kind", "bare", object())
        assert registry.options("test-kind", "piece") is MCP
        assert registry.options("test-kind", "factory") is declared
        assert registry.options("test-kind", "bare") is NO_OPTIONS
        assert registry.options_problem("test-kind", "factory", {"width": 0}) == (
            "test-kind 'factory': width must be an int >= 1, got 0")
        assert registry.options_problem("test-kind", "piece", {}, complete=True) == "test-kind 'piece': lam must be given"
        assert registry.options_problem("test-kind", "nope", {}) == (
            "test-kind must be one of piece, factory, bare, got 'nope'")
        with pytest.raises(registry.RegistryError, match="must be declared as Options"):
            registry.register("test-kind", "tuple", factory, options=("width",))
    finally:
        for name in ("piece", "factory", "bare"):
            registry.unregister("test-kind", name)
    assert registry.names("test-kind") == []


def test_a_message_words_a_refused_value_in_the_pieces_own_words_while_the_declaration_decides():
    rank = Option("rank", int, 1, "rank", low=1, message="rank must be an integer >= 1, got {value!r}")
    ratio = Option("ratio", float, 0.5, "share", low=0, low_open=True, high=1,
                   message="{name} must be in (0, 1], got {value!r}")
    assert rank.problem(0) == "rank must be an integer >= 1, got 0"
    assert rank.problem(2.0) == "rank must be an integer >= 1, got 2.0"
    assert rank.problem(None) == "rank must be an integer >= 1, got None"
    assert rank.problem(3) is None and ratio.problem(1) is None  # what the declaration allows passes
    assert ratio.problem(0) == "ratio must be in (0, 1], got 0"
    assert ratio.problem("a") == "ratio must be in (0, 1], got 'a'"
    assert Options(rank).problem({"rank": -1}, "compressor 'x'") == (
        "compressor 'x': rank must be an integer >= 1, got -1")
    assert rank.describe() == "rank (int >= 1, default 1): rank" and rank.message != Option("rank", int, 1).message
    assert Option("rank", int, 1, "rank", low=1).problem(0) == "rank must be an int >= 1, got 0"  # no message


def test_a_declared_piece_checks_its_values_and_the_registry_builds_it_by_name():
    from mpiopt.core.options import Declared, seed_option

    class Piece(Declared):
        name = "piece"
        options = Options(Option("width", int, help="width", low=1), seed_option("seed"))

        @classmethod
        def options_problem(cls, values, options=None):
            return super().options_problem(values, options) or (
                "piece: width must be even" if values.get("width", 2) % 2 else None)

        def __init__(self, width, seed=0):
            self.check_options({"width": width, "seed": seed})
            self.width, self.seed = width, seed

    try:
        registry.register("test-kind", "piece", Piece)
        assert registry.piece_problem("test-kind", "piece", {"width": 0}) == "piece: width must be an int >= 1, got 0"
        assert registry.piece_problem("test-kind", "piece", {"width": 2, "seed": -1}) == (
            "piece: seed must be an integer >= 0, got -1")
        assert registry.piece_problem("test-kind", "piece", {"width": 3}) == "piece: width must be even"
        assert registry.piece_problem("test-kind", "piece", {}, complete=True) == "test-kind 'piece' needs width"
        assert registry.piece_problem("test-kind", "nope", {}) == "test-kind must be one of piece, got 'nope'"
        built = registry.build("test-kind", "piece", {"width": 4})
        assert isinstance(built, Piece) and (built.width, built.seed) == (4, 0)
        with pytest.raises(TypeError, match=r"^test-kind 'piece' takes width, seed; got depth$"):
            registry.build("test-kind", "piece", {"width": 4, "depth": 1})
        with pytest.raises(TypeError, match=r"^test-kind 'piece' needs width$"):
            registry.build("test-kind", "piece", {})
        with pytest.raises(ValueError, match=r"^piece: width must be even$"):
            registry.build("test-kind", "piece", {"width": 5})
        with pytest.raises(ValueError, match=r"^piece: width must be even$"):
            Piece(5)
        with pytest.raises(registry.RegistryError):
            registry.build("test-kind", "nope", {})
    finally:
        registry.unregister("test-kind", "piece")


def test_an_older_tuple_of_option_names_is_read_by_the_registry_for_every_kind():
    # review of issue 20: the older ``options = ("lam",)`` tuple was read only by the ADMM front ends, so the
    # command line and the other kinds saw no options for such a piece
    class OldPenalty:
        options = ("lam", "tilt")

    class OldStrategy:
        options = ("server_lr",)

    registry.register("penalty", "old_tuple_penalty", OldPenalty)
    registry.register("strategy", "old_tuple_strategy", OldStrategy)
    try:
        declared = registry.options("penalty", "old_tuple_penalty")
        assert list(declared) == ["lam", "tilt"]
        assert declared["lam"] is registry.options("penalty", "l1")["lam"], "lam as the penalties declare it"
        assert declared["tilt"].type is object and declared["tilt"].default is None
        assert registry.options_problem("penalty", "old_tuple_penalty", {"lam": -1.0}).endswith(
            "lam must be a finite number >= 0, got -1.0")
        assert registry.options_problem("penalty", "old_tuple_penalty", {"gamma": 3}) == \
            "penalty 'old_tuple_penalty' takes lam, tilt; got gamma"
        server_lr = registry.options("strategy", "old_tuple_strategy")["server_lr"]
        assert server_lr == registry.options("strategy", "fedavg")["server_lr"]
    finally:
        registry.unregister("penalty", "old_tuple_penalty")
        registry.unregister("strategy", "old_tuple_strategy")
