"""Without the optional numba (the ``fast`` extra) everything runs on the numpy twins.

The compression and kernel tests run again in a fresh interpreter in which ``import numba`` fails (as on a
machine without it: ``sys.modules["numba"] = None``), so CI covers both installs in one run."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITES = ["tests/test_compression.py", "tests/test_kernels_compress.py", "tests/test_kernels_cd.py",
          "tests/test_kernels_halves.py", "tests/test_admm_proxnewton.py"]
BLOCK_AND_RUN = """
import sys
sys.modules["numba"] = None   # import numba now raises ImportError
import pytest
from mpiopt.kernels import compiled
assert not compiled.AVAILABLE and not compiled.enabled(), "numba was found"
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
"""


@pytest.mark.timeout(900)
def test_the_compression_and_kernel_suites_pass_without_numba():
    done = subprocess.run([sys.executable, "-c", BLOCK_AND_RUN, *SUITES], cwd=ROOT, capture_output=True, text=True,
                          timeout=840)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert " passed" in done.stdout, done.stdout[-2000:]
