"""Proximal operators used in the z-step (Boyd et al. 2011, section 4.4)."""


def soft_threshold(v, kappa, xp=None):
    """Elementwise soft-thresholding S_kappa(v) = sign(v) max(|v| - kappa, 0).

    The proximal operator of ``kappa * ||.||_1``, computed as v - clip(v, -kappa, kappa):
    two passes instead of four, the same values.  ``xp`` is the array module
    (taken from ``v`` when omitted).
    """
    if xp is None:
        from ..core.backend import get_array_module
        xp = get_array_module(v)
    return v - xp.clip(v, -kappa, kappa)
