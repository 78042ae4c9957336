"""Finding, compiling and checking the CUDA sources.

``cuda_source(name)`` reads ``kernels/NAME.cu`` from the installed package
data; ``raw_module(name)`` compiles it once per process with CuPy's NVRTC
(``cupy.RawModule``) and caches it; ``nvcc_ptx(path, arch)`` compiles a
source with ``nvcc --ptx`` for one architecture, which the tests run for
sm_80 and sm_90 wherever nvcc is installed (no GPU needed).
"""
import functools
import importlib.resources
import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGE = "mpiopt.kernels.cuda"
NVRTC_OPTIONS = ("--std=c++17",)


def _folder():
    """Where the CUDA sources are: the installed package data, or ``kernels/`` of a source checkout
    (mpiopt imported from the repository itself, as the tests do, shadows the installed copy)."""
    try:
        return importlib.resources.files(PACKAGE)
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parents[2] / "kernels"
        if checkout.is_dir():
            return checkout
        raise


def cuda_sources():
    """Names (without .cu) of the installed CUDA sources, sorted."""
    return sorted(entry.name[:-3] for entry in _folder().iterdir() if entry.name.endswith(".cu"))


def cuda_source(name):
    """The text of ``kernels/NAME.cu``, with the shared header (``common.cuh``) included in place."""
    folder = _folder()
    text = (folder / f"{name}.cu").read_text(encoding="utf-8")
    header = folder / "common.cuh"
    if header.is_file():
        text = text.replace('#include "common.cuh"', header.read_text(encoding="utf-8"))
    return text


@functools.cache
def raw_module(name):
    """``kernels/NAME.cu`` compiled by CuPy (NVRTC) for the current device; cached per process."""
    import cupy
    return cupy.RawModule(code=cuda_source(name), options=NVRTC_OPTIONS)


def nvcc_ptx(source_text, arch, nvcc=None):
    """Compile CUDA source text with ``nvcc --ptx -arch=ARCH``; returns (ok, compiler output)."""
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cu"
        path.write_text(source_text, encoding="utf-8")
        done = subprocess.run([nvcc, "--ptx", f"-arch={arch}", "--std=c++17", "-o", str(path.with_suffix(".ptx")),
                               str(path)], capture_output=True, text=True, timeout=300)
    return done.returncode == 0, done.stdout + done.stderr
