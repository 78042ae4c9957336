"""CUDA sources of mpiopt's GPU kernels (installed as the package data of ``mpiopt.kernels.cuda``)."""
