"""The README's tour runs as written: every command and Python block of README.md, read from the file itself.

Each shell command of a fenced block runs as a user runs it (``mpiexec``, ``python`` and ``mpiopt`` are this
environment's), in a fresh folder, and must exit 0; the Python blocks run as one script under mpiexec, as the
first block says, with the inline snippets that the text offers ("In Python: ``...``").  Sizes are cut to a
smoke run by the replacements in ``SMOKE``, each of which must still match the README, so the front page
cannot drift from the code without this test failing.  What cannot run here is skipped with its reason:
the installs (this environment is the one they make), Slurm when none answers, the GPU without one.
"""
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MPIEXEC

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent

# README text -> its smoke-sized version (each must match the README: see test_every_smoke_cut_still_matches)
SMOKE = {
    "torch_ddp.py --compressor topk --ratio 0.01": "torch_ddp.py --compressor topk --ratio 0.01 --epochs 2",
    "mpiopt lasso\n": "mpiopt lasso --synthetic 2000x50\n",
    "--synthetic 100000x1000": "--synthetic 2000x100",
    "--clients 100 --fraction 0.1 --rounds 50": "--clients 100 --fraction 0.1 --rounds 2",
    "--compressor topk --uplink-feedback ef21": "--compressor topk --uplink-feedback ef21 --rounds 2",
    "--byzantine 0.2 --attack alie": "--byzantine 0.2 --attack alie --rounds 2",
    "--hidden 256,256 --data digits --optimizer adam \\\n    --epochs 5": "--hidden 16 --data digits --optimizer adam "
                                                                        "\\\n    --epochs 1",
    "three_hospitals.py ": "three_hospitals.py --rounds 2 ",
    "--noise 10 --max-steps 1000000": "--noise 10 --max-steps 2000",
    "--method rennala --time-unit 0.01": "--method rennala --time-unit 0.0005 --max-steps 50",
    "--loss logistic --lam-ratio 0.1 --output fit.json": "--synthetic 400x20 --loss logistic --lam-ratio 0.1 "
                                                         "--output fit.json",
    "make_lasso(20000, 500,": "make_lasso(2000, 50,",
    "epochs=5, batch_size=64, zero_stage=2": "epochs=1, batch_size=64, zero_stage=2",
    "lr=0.1), comm, epochs=5,": "lr=0.1), comm, epochs=1,",
    "rounds=50, fraction=0.1": "rounds=2, fraction=0.1",
    'n_workers=1000, tau="sqrt"': 'n_workers=50, tau="sqrt", max_steps=200',
}
OUTPUT_BLOCKS = ("method      status",)  # fenced blocks that show output, not commands (their first line)
TEST_COMMAND = re.compile(r"<!-- test-command:start -->.*?<!-- test-command:end -->", re.S)


def smoke(text, cuts=SMOKE):
    """The text with each of ``cuts``' originals replaced by its smoke-sized version."""
    for original, cut in cuts.items():
        text = text.replace(original, cut)
    return text


def fenced_blocks(text):
    """[(language, body)] of the fenced blocks, the test command's block left out (it runs this test)."""
    text = TEST_COMMAND.sub("", text)
    return [(language, body) for language, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def block_commands(body):
    """The commands of one shell block: (its line as written, its words), ``&&`` chains split."""
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            end = words.index("&&") if "&&" in words else len(words)
            commands.append((line.split("#")[0].strip(), words[:end]))
            words = words[end + 1:]
    return commands


def shell_commands(text):
    """Every command of the shell blocks (``block_commands``), the output blocks left out."""
    return [command for language, body in fenced_blocks(text)
            if not language and not body.startswith(OUTPUT_BLOCKS) for command in block_commands(body)]


def python_script(text):
    """The Python blocks in order, then the inline snippets offered as ``In Python: `...```."""
    blocks = [body for language, body in fenced_blocks(text) if language == "python"]
    inline = re.findall(r"In Python: `([^`]+)`", text.replace("\n", " "))
    return "\n".join(blocks + inline) + "\n"


def slurm_answers():
    return shutil.which("sbatch") is not None and subprocess.run(
        ["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0


PROGRAMS = {"mpiexec": str(MPIEXEC), ".venv/bin/mpiexec": str(MPIEXEC), "python": sys.executable,
            "python3": sys.executable, ".venv/bin/python": sys.executable}


def programs(words):
    """The command with this environment's programs: mpiexec, python (anywhere on the line), mpiopt (first)."""
    first = str(BIN / "mpiopt") if words[0] == "mpiopt" else PROGRAMS.get(words[0], words[0])
    return [first] + [PROGRAMS.get(word, word) for word in words[1:]]


def why_not_run(words):
    """None when the command runs here, else why it is skipped."""
    if words[:3] == ["python3", "-m", "venv"] or Path(words[0]).name == "pip" or words[0] == ".":
        return "an install step: this test's environment is the one it makes"
    if words[:2] == ["bash", "slurm/local-slurm.sh"]:
        return "starts Slurm: .ci/run does it before the tests"
    if words[:2] == ["bash", "benchmarks/gpu_check.sh"]:
        return "needs a GPU"
    if any(Path(word).name.startswith("torch_") for word in words) and importlib.util.find_spec("torch") is None:
        return "needs PyTorch (the torch extra), which is not installed"
    if Path(words[0]).name == "mpiopt" and words[1:2] == ["slurm"] and not slurm_answers():
        return "no Slurm answers here (slurm/local-slurm.sh start)"
    return None


ENVIRONMENT = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def run_command(words, folder, timeout=540):
    """One command as a user types it, in ``folder``, with this environment's programs and one BLAS thread."""
    return subprocess.run(programs(words), cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env=ENVIRONMENT)


def run_script(code, folder, timeout=540):
    """Python code as a script under mpiexec, at the ranks its ``# mpiexec -n N python -m mpi4py`` line says
    (1 without one)."""
    script = folder / "script.py"
    script.write_text(code)
    ranks = re.search(r"# mpiexec -n (\d+) python -m mpi4py", code)
    return subprocess.run([str(MPIEXEC), "-n", ranks.group(1) if ranks else "1", sys.executable, "-m", "mpi4py",
                           str(script)], cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env=ENVIRONMENT)


COMMANDS = shell_commands(smoke(README))


def test_the_readme_has_its_tour():
    # the parsing itself: a README reorganised out of its blocks would otherwise make this module test nothing
    assert len(COMMANDS) >= 15 and python_script(README).count("from mpiopt") >= 6


def test_every_smoke_cut_still_matches_the_readme():
    missing = [original for original in SMOKE if original not in README]
    assert not missing, f"README.md changed: update SMOKE in {Path(__file__).name} for {missing}"


def test_every_extra_the_readme_installs_is_declared():
    declared = set(re.findall(r'^\s*"([\w-]+)": \[', (ROOT / "setup.py").read_text(), re.M))
    for _, words in COMMANDS:
        for word in words:
            match = re.fullmatch(r'\.\[([\w,-]+)\]', word)
            if match:
                assert set(match.group(1).split(",")) <= declared, word


@pytest.fixture
def tour_folder(tmp_path):
    """A folder like a checkout's root for the commands: examples/ and benchmarks/ beside them, a small train.svm."""
    for folder in ("examples", "benchmarks"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    from mpiopt.data import make_lasso
    A, b, _ = make_lasso(200, 20, density=0.3, noise=0.01, seed=0)
    with open(tmp_path / "train.svm", "w") as stream:
        for row, label in zip(A, b):
            features = " ".join(f"{j + 1}:{value:.17g}" for j, value in enumerate(row) if value != 0)
            stream.write(f"{1 if label > 0 else 0} {features}\n")
    return tmp_path


@pytest.mark.timeout(600)
@pytest.mark.parametrize("line, words", COMMANDS, ids=[line[:60] for line, _ in COMMANDS])
def test_a_readme_command_runs_as_written(tour_folder, line, words):
    reason = why_not_run(words)
    if reason:
        pytest.skip(reason)
    completed = run_command(words, tour_folder)
    assert completed.returncode == 0, f"{line}\n{completed.stderr[-3000:]}"


@pytest.mark.timeout(600)
def test_the_readme_python_blocks_run_as_one_script(tour_folder):
    completed = run_script(smoke(python_script(README)), tour_folder)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (tour_folder / "lasso.json").exists() and (tour_folder / "state.npz").exists()
