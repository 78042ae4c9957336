"""The shared result vocabulary, plotting helper and reducer context of the core (issue 20)."""
import dataclasses

import pytest

from mpiopt.collectives import Reducer, get_reducer, reducer_for
from mpiopt.core.result import STATUSES, Result, plot_panels


def test_the_status_words_are_one_documented_set():
    assert list(STATUSES) == ["converged", "finished", "max_iterations", "time_limit", "interrupted", "diverged"]
    assert all(STATUSES.values())


def test_a_result_names_its_solution_field():
    @dataclasses.dataclass
    class Mine(Result):
        x: list = None
        iterations: int = 0
        SOLUTION = "x"

    mine = Mine(status="converged", history={}, timings={}, info={}, x=[1.0], iterations=3)
    assert mine.solution == [1.0] and mine.iterations == 3
    with pytest.raises(NotImplementedError, match="Mine has no plot"):
        mine.plot("never.png")


def test_reducer_for_closes_what_it_built_and_leaves_the_callers_own(monkeypatch):
    closed = []
    monkeypatch.setattr(Reducer, "close", lambda self: closed.append(self))
    with reducer_for("mpi") as built:
        assert isinstance(built, Reducer) and built.name == "mpi"
    assert closed == [built]
    own = get_reducer("mpi")
    with reducer_for(own) as used:
        assert used is own
    assert closed == [built]
    with pytest.raises(RuntimeError), reducer_for("mpi") as failing:
        raise RuntimeError("inside the block")
    assert closed == [built, failing]


def test_plot_panels_writes_one_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "curves.png"
    plot_panels(str(path), [{"title": "a", "xlabel": "t", "curves": [([0, 1], [1, 2], "one")], "yscale": "log",
                             "hlines": [(1.5, "target")]},
                            {"title": "b", "xlabel": "t", "curves": [([0, 1], [3, 1], None)]}], title="both")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
