"""Penalties g(z) of consensus ADMM and their proximal operators (the z-step).

Each penalty provides ``prox(v, step) = argmin_z g(z) + ||z - v||^2 / (2 step)``
and ``value(z)``; the engine never needs anything else, so adding a penalty does
not touch it (Parikh and Boyd, Proximal Algorithms, 2014, section 6).

``Unpenalized(penalty, count)`` leaves the last ``count`` coordinates free, which
is how an intercept is kept out of the penalty.
"""
import hashlib
import math

import numpy as np

from .prox import soft_threshold


def _exact(value):
    """A JSON value that pins ``value`` down exactly: a float (JSON keeps every bit) or an array's digest."""
    if np.ndim(value) == 0:
        return value if isinstance(value, (bool, int, str)) else float(value)
    array = np.ascontiguousarray(np.asarray(value))
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "sha256": hashlib.sha256(array.tobytes()).hexdigest()}


class Penalty:
    """Base class.  ``xp`` is the array module (numpy or CuPy)."""

    name = "none"
    xp = np

    def prox(self, v, step):
        return v

    def value(self, z):
        return 0.0

    def settings(self):
        """The numbers that define the penalty (for JSON results and checkpoints)."""
        return {}

    def fingerprint(self):
        """The exact values that define the penalty (for checkpoints): floats at full precision,
        arrays by their SHA-256."""
        return {"name": self.name, **{key: _exact(value) for key, value in self.parameters().items()}}

    def parameters(self):
        """Every number or array that changes the penalty; ``settings()`` by default."""
        return self.settings()

    def describe(self):
        items = ", ".join(f"{key} = {value:.4g}" if isinstance(value, float) else f"{key} = {value}"
                          for key, value in self.settings().items())
        return f"{self.name}({items})"


class L1(Penalty):
    """lam ||z||_1: soft-thresholding."""

    name = "l1"

    def __init__(self, lam):
        self.lam = float(lam)

    def prox(self, v, step):
        return soft_threshold(v, self.lam * step, self.xp)

    def value(self, z):
        return self.lam * float(self.xp.abs(z).sum())

    def settings(self):
        return {"lam": self.lam}


class L2(Penalty):
    """(lam / 2) ||z||^2 (ridge): a shrinkage by 1 / (1 + lam step)."""

    name = "l2"

    def __init__(self, lam):
        self.lam = float(lam)

    def prox(self, v, step):
        return v / (1.0 + self.lam * step)

    def value(self, z):
        return 0.5 * self.lam * float(z @ z)

    def settings(self):
        return {"lam": self.lam}


class ElasticNet(Penalty):
    """lam (l1_ratio ||z||_1 + (1 - l1_ratio) / 2 ||z||^2), scikit-learn's convention."""

    name = "elastic_net"

    def __init__(self, lam, l1_ratio):
        self.lam, self.l1_ratio = float(lam), float(l1_ratio)

    def prox(self, v, step):
        shrunk = soft_threshold(v, self.lam * self.l1_ratio * step, self.xp)
        return shrunk / (1.0 + self.lam * (1.0 - self.l1_ratio) * step)

    def value(self, z):
        return self.lam * (self.l1_ratio * float(self.xp.abs(z).sum())
                           + 0.5 * (1.0 - self.l1_ratio) * float(z @ z))

    def settings(self):
        return {"lam": self.lam, "l1_ratio": self.l1_ratio}


class GroupLasso(Penalty):
    """lam sum_g w_g ||z_g||_2 over disjoint groups (w_g = sqrt(group size)): block soft-thresholding.

    ``groups`` is an integer label per coordinate; coordinates labelled -1 are
    not penalized.
    """

    name = "group_lasso"

    def __init__(self, lam, groups):
        self.lam = float(lam)
        self.groups = np.asarray(groups, dtype=np.int64)
        labels = np.unique(self.groups[self.groups >= 0])
        self.members = [np.flatnonzero(self.groups == label) for label in labels]
        self.weights = [math.sqrt(len(index)) for index in self.members]

    def prox(self, v, step):
        z = v.copy()
        for index, weight in zip(self.members, self.weights):
            block = v[index]
            norm = float(self.xp.sqrt(block @ block))
            threshold = self.lam * weight * step
            z[index] = 0.0 if norm <= threshold else block * (1.0 - threshold / norm)
        return z

    def value(self, z):
        return self.lam * sum(weight * float(self.xp.sqrt(z[index] @ z[index]))
                              for index, weight in zip(self.members, self.weights))

    def settings(self):
        return {"lam": self.lam, "groups": len(self.members)}

    def parameters(self):
        return {"lam": self.lam, "groups": self.groups}


class Box(Penalty):
    """The indicator of lower <= z <= upper (scalars or arrays): a projection."""

    name = "box"

    def __init__(self, lower=-np.inf, upper=np.inf):
        self.lower, self.upper = lower, upper

    def prox(self, v, step):
        return self.xp.clip(v, self.lower, self.upper)

    def value(self, z):
        inside = bool(self.xp.all(z >= self.lower - 1e-12)) and bool(self.xp.all(z <= self.upper + 1e-12))
        return 0.0 if inside else math.inf

    def settings(self):
        scalar = lambda bound: float(bound) if np.ndim(bound) == 0 else "array"  # noqa: E731
        return {"lower": scalar(self.lower), "upper": scalar(self.upper)}

    def parameters(self):
        return {"lower": self.lower, "upper": self.upper}


class NonNegative(Box):
    """The indicator of z >= 0."""

    name = "nonnegative"

    def __init__(self):
        super().__init__(0.0, np.inf)

    def settings(self):
        return {}


class Unpenalized(Penalty):
    """``penalty`` on all but the last ``count`` coordinates, which are left free (an intercept)."""

    def __init__(self, penalty, count=1):
        self.penalty, self.count = penalty, int(count)
        self.name = penalty.name

    @property
    def xp(self):
        return self.penalty.xp

    def prox(self, v, step):
        z = v.copy()
        z[:-self.count] = self.penalty.prox(v[:-self.count], step)
        return z

    def value(self, z):
        return self.penalty.value(z[:-self.count])

    def settings(self):
        return dict(self.penalty.settings(), unpenalized_last=self.count)

    def parameters(self):
        return dict(self.penalty.parameters(), unpenalized_last=self.count)
