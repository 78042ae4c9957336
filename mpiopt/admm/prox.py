"""Proximal operators used in the z-step (Boyd et al. 2011, section 4.4)."""
from ..kernels import admm as kernels


def soft_threshold(v, kappa, xp=None):
    """Elementwise soft-thresholding S_kappa(v) = sign(v) max(|v| - kappa, 0).

    The proximal operator of ``kappa * ||.||_1``, computed as v - clip(v, -kappa, kappa):
    two passes instead of four, the same values.  The backend follows ``v``
    (:func:`mpiopt.kernels.admm.soft_threshold`: numpy, or one CUDA kernel for a
    CuPy array); ``xp`` is accepted for compatibility and not needed.
    """
    return kernels.soft_threshold(v, kappa)
