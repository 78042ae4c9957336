"""Every page of docs/ opens with an example a user can run, and it runs as written.

A page's opening example is the fenced block after its ``<!-- example -->`` marker, the first marker of the
page. A shell block's commands run as the README's do (``tests/test_readme.py``: this environment's
``mpiexec``, ``python`` and ``mpiopt``, in a folder like a checkout's root); a Python block runs as one script
under mpiexec at the ranks its ``# mpiexec -n N python -m mpi4py`` line says (1 without one). Sizes are cut to
a smoke run by ``SMOKE`` (each cut must still match its page), so the whole module takes well under a minute.
"""
import importlib.util
import re
from pathlib import Path

import pytest

from test_readme import ROOT, block_commands, run_command, run_script, smoke, tour_folder, why_not_run  # noqa: F401

DOCS = ROOT / "docs"
PAGES = sorted(path.name for path in DOCS.glob("*.md"))
EXAMPLE = re.compile(r"<!-- example -->\s*^```(\w*)\n(.*?)^```", re.S | re.M)
# pages whose owner is still writing their opening example (strict: a page that gets one must leave this set)
PENDING = {}

# page -> the optional package its example needs (skipped with a one-line reason where it is absent)
NEEDS = {"torch.md": "torch"}

# page -> (test file, test) that already runs the page's example command as written and checks its output:
# here the command is only matched against that test's (its script and every flag), not run a second time
RUN_BY = {"scaling.md": ("test_admm_scaling.py", "test_quick_benchmark")}

# page -> {its text: the smoke-sized version}; every original must be on its page
SMOKE = {
    "admm.md": {"make_lasso(20000, 500,": "make_lasso(2000, 50,"},
    "async_sgd.md": {"n_workers=1000,": "n_workers=50,"},
    "collectives.md": {"1 << 20": "1 << 12"},
    "compression.md": {"1 << 20": "1 << 12", "k=1000": "k=10"},
    "extending.md": {"make_lasso(2000, 100,": "make_lasso(400, 20,"},
    "federated.md": {"rounds=50, fraction=0.1": "rounds=2, fraction=0.1"},
    "federated_benchmark.md": {"--quick --output": "--quick --rounds 2 --clients 20 --hidden 8 --fedprox-rounds 1 "
                                                   "--fedprox-epochs 1 --loss-every 1 --output"},
    "kernels.md": {"1 << 24": "1 << 12"},
    "performance.md": {"--synthetic 20000x400": "--synthetic 2000x50"},
    "results.md": {"--rows 20000 --cols 500 --repeat 3": "--rows 2000 --cols 30 --repeat 1 --iterations 10"},
    "three_hospitals.md": {"--rounds 50": "--rounds 2"},
    "torch.md": {"for step in range(50):": "for step in range(3):"},
    "training.md": {"epochs=5,": "epochs=1,"},
}


def opening_example(page):
    """(language, body) of the page's opening example, or None."""
    match = EXAMPLE.search((DOCS / page).read_text(encoding="utf-8"))
    return match.groups() if match else None


def test_the_docs_pages_are_found():
    assert len(PAGES) >= 12 and "training.md" in PAGES and "train.md" not in PAGES


@pytest.mark.parametrize("page", PAGES)
def test_every_smoke_cut_still_matches_its_page(page):
    example = opening_example(page)
    missing = [original for original in SMOKE.get(page, {}) if example is None or original not in example[1]]
    assert not missing, f"docs/{page}'s example changed: update SMOKE in {Path(__file__).name} for {missing}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", PAGES)
def test_a_docs_page_opens_with_an_example_that_runs(tour_folder, page):
    example = opening_example(page)
    if page in PENDING:
        assert example is None, f"docs/{page} has its example now: remove it from PENDING"
        pytest.xfail(PENDING[page])
    assert example is not None, f"docs/{page}: no <!-- example --> block before its reference"
    text = (DOCS / page).read_text(encoding="utf-8")
    assert text.index("<!-- example -->") < text.index("\n## "), f"docs/{page}: the example is not at the top"
    if page in NEEDS and importlib.util.find_spec(NEEDS[page]) is None:
        pytest.skip(f"docs/{page}'s example needs {NEEDS[page]}, which is not installed")
    language, body = example
    body = smoke(body, SMOKE.get(page, {}))
    if language == "python":
        completed = run_script(body, tour_folder, timeout=100)
        assert completed.returncode == 0, f"docs/{page}\n{completed.stderr[-3000:]}"
        return
    assert not language, f"docs/{page}: the example is a {language} block, not a command or Python"
    commands = block_commands(body)
    assert commands, f"docs/{page}: the example has no command"
    if page in RUN_BY:
        check_run_by(page, commands)
        return
    for line, words in commands:
        reason = why_not_run(words)
        if reason:
            pytest.skip(f"{line}: {reason}")
        completed = run_command(words, tour_folder, timeout=100)
        assert completed.returncode == 0, f"docs/{page}: {line}\n{completed.stderr[-3000:]}"


def check_run_by(page, commands):
    """The page's one command is the one its RUN_BY test runs: that test names its script and the same flags."""
    import ast
    file, name = RUN_BY[page]
    tree = ast.parse((Path(__file__).parent / file).read_text(encoding="utf-8"))
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name]
    strings = {node.value for node in ast.walk(function) if isinstance(node, ast.Constant)}
    (line, words), = commands
    scripts = [Path(word).name for word in words if word.endswith(".py")]
    flags = {word for word in words if word.startswith("--")}
    assert scripts and set(scripts) <= strings, f"docs/{page}: {file}::{name} does not run {scripts}"
    assert flags == {text for text in strings if isinstance(text, str) and text.startswith("--")}, \
        f"docs/{page}: {file}::{name} does not run `{line}` with the same flags"
