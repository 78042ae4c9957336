"""The CUDA sources travel with the package: what setuptools installs (build_py, the step that lays out a
wheel or a non-editable install) holds every file of kernels/, and the loader finds them there."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_an_installed_layout_holds_every_cuda_source_and_the_loader_finds_them(tmp_path):
    lib = tmp_path / "lib"
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=ROOT,
                           capture_output=True, text=True, timeout=200)
    assert build.returncode == 0, build.stderr
    sources = sorted(p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh"))
    assert sources and "common.cuh" in sources
    for name in sources:
        assert (lib / "mpiopt" / "kernels" / "cuda" / name).is_file(), f"{name} is not installed"
    # from the installed copy alone (not the repository: another working folder, only lib on the path)
    found = subprocess.run([sys.executable, "-c", "import mpiopt.kernels as k, json; "
                            "print(json.dumps([k.__file__, k.cuda_sources(), len(k.cuda_source('admm'))]))"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHONPATH=str(lib), PYTHONNOUSERSITE="1"))
    assert found.returncode == 0, found.stderr
    import json
    where, names, length = json.loads(found.stdout)
    assert Path(where).is_relative_to(lib)
    assert names == sorted(p.stem for p in (ROOT / "kernels").glob("*.cu")) and length > 0
