"""Penalties g(z) of consensus ADMM and their proximal operators (the z-step).

Each penalty provides ``prox(v, step) = argmin_z g(z) + ||z - v||^2 / (2 step)``
and ``value(z)``; the engine never needs anything else, so adding a penalty does
not touch it (Parikh and Boyd, Proximal Algorithms, 2014, section 6).

A penalty registers itself by name (``register("penalty", name)``) and owns
what the solver needs to know of it, as skglm's penalties do:

* ``options``: the keyword options its constructor takes, declared once
  (``Options(Option(...))``, :mod:`mpiopt.core.options`: type, default,
  constraint, help); a penalty taking ``lam`` is weighted, and its weight may
  be given as ``lam_ratio`` times lambda_max when it has one;
* ``check(options, n_features)``: a message when its options (every declared
  one, with its default) do not suit the data or each other, which a
  declaration cannot say (``groups``' length, ``lower <= upper``);
* ``lambda_max(gradient, options)``: the smallest weight for which every
  coefficient is 0, from the gradient of the loss at the best null model (None:
  the penalty has no such weight);
* ``leaving_free(count)``: the penalty on all but the last ``count``
  coordinates (``Unpenalized``), which is how an intercept is kept out of it;
* ``capabilities``: what it provides beyond ``prox`` and ``value`` (below).

What a penalty provides beyond its prox is declared, not guessed: its class
lists it in ``capabilities`` (a frozenset of the names below, as skglm's
penalties and datafits declare theirs), and the solver, the gap, screening,
working sets, proximal Newton and the engine read the declaration.  The
declaration is the class's own: a subclass that does not declare
``capabilities`` has none (it may change the function; it says again what it
provides, ``capabilities = L1.capabilities``), so an undeclared capability is
never used.  With v = A^T theta over its columns (a host array):

* ``DUAL``: duality gaps (mpiopt.admm.gap) with any loss that has a dual
  (``dual_concavity``, losses/base.py).  It provides ``dual_scale(v)``, the s
  in (0, 1] that puts s v in the domain of its conjugate g* (L1: min(1, lam /
  ||v||_inf); the group lasso: min(1, lam / max_g ||v_g|| / w_g); the elastic
  net: 1, its g* is finite everywhere), and ``conjugate(v)``, g*(v) there (0,
  the default, for a norm, whose g* is an indicator);
* ``SCREENING``: with ``DUAL``, gap-safe screening and working sets
  (workingset.py).  It provides ``dual_levels(v, norms)``: per column (level,
  bound, spread) such that a coefficient (or its group) is zero at the optimum
  when the dual optimum's level is below the bound: |v_k|, lam, ||a_k|| for L1;
  ||v_g||, lam w_g, ||A_g||_F for a group.  The sphere test keeps a column when
  level + r spread >= bound, and working sets rank columns by (bound - level) /
  spread (celer's rule); a penalty with groups also gives ``whole(columns)`` and
  ``on_columns(columns)``, the columns completed to whole groups and the
  penalty restricted to them (a working set's problem);
* ``PROX_NEWTON``: ``coordinate_parts()``, (l1, l2) such that the penalty is
  sum_k l1 |z_k| + l2 z_k^2 / 2: proximal Newton's coordinate descent on
  working sets (proxnewton.py);
* ``SOFT_THRESHOLD``: ``threshold(step)``, ``(kappa, free)`` such that
  ``prox(v, step)`` is soft-thresholding at kappa of all but the last ``free``
  coordinates: the engine fuses the z- and u-steps into one kernel
  (:func:`mpiopt.kernels.admm.z_u_update`).

``certifiable()`` may refuse a declared ``DUAL`` for one instance (a group
lasso with unpenalized columns).

A user registers a penalty of their own the same way, declaring its options
(``LAM``, :mod:`mpiopt.admm.pieces`' weight, shared by the weighted penalties),
and uses it by name, its options as keywords or in ``penalty_options``::

    @register("penalty", "l1_capped")
    class CappedL1(Penalty):
        options = Options(LAM, Option("cap", float, 1.0, "|z| beyond which the penalty is flat", low=0,
                                      low_open=True))
        ...
    solve(A_local, b_local, penalty="l1_capped", lam=0.5, penalty_options={"cap": 2.0}, comm=comm)
"""
import hashlib
import math

import numpy as np

from ..core.backend import to_host
from ..core.options import NO_OPTIONS, Option, Options
from ..core.registry import lookup, names, register
from .pieces import LAM
from .prox import soft_threshold


def _exact(value):
    """A JSON value that pins ``value`` down exactly: a float (JSON keeps every bit) or an array's digest."""
    if np.ndim(value) == 0:
        return value if isinstance(value, (bool, int, str)) else float(value)
    array = np.ascontiguousarray(to_host(value))
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "sha256": hashlib.sha256(array.tobytes()).hexdigest()}


def _scale_into(largest, bound):
    """min(1, bound / largest): the factor that brings a dual norm ``largest`` within ``bound``."""
    return 1.0 if largest <= bound else bound / largest


def _largest(v):
    return float(np.abs(v).max()) if v.shape[0] else 0.0


DUAL = "dual"                      # dual_scale, conjugate: duality gaps
SCREENING = "screening"            # dual_levels (whole, on_columns): gap-safe screening and working sets
PROX_NEWTON = "prox_newton"        # coordinate_parts: proximal Newton on working sets
SOFT_THRESHOLD = "soft_threshold"  # threshold: the engine's fused z- and u-step
CAPABILITIES = frozenset({DUAL, SCREENING, PROX_NEWTON, SOFT_THRESHOLD})


def capabilities_of(penalty):
    """The capabilities ``penalty`` declares (none for a duck-typed penalty that declares nothing)."""
    return getattr(penalty, "capabilities", frozenset())


def penalties_declaring(capability):
    """The registered penalties' names that declare ``capability`` (for messages and help texts)."""
    return [name for name in names("penalty") if capability in capabilities_of(lookup("penalty", name))]


class Penalty:
    """Base class, and the penalty "none" (g = 0).  ``xp`` is the array module (numpy or CuPy)."""

    name = "none"
    xp = np
    options = NO_OPTIONS
    capabilities = frozenset()  # what it provides beyond prox and value (module docstring); the class's own

    def __init_subclass__(cls, **keywords):
        """A subclass that does not declare its capabilities has none: it may be another function."""
        super().__init_subclass__(**keywords)
        if "capabilities" not in cls.__dict__:
            cls.capabilities = frozenset()
        elif isinstance(cls.__dict__["capabilities"], frozenset) and not cls.capabilities <= CAPABILITIES:
            raise TypeError(f"{cls.__name__} declares unknown capabilities "
                            f"{', '.join(sorted(cls.capabilities - CAPABILITIES))}; "
                            f"they are {', '.join(sorted(CAPABILITIES))}")

    @classmethod
    def weighted(cls):
        return "lam" in cls.options

    @classmethod
    def has_lambda_max(cls):
        return cls.lambda_max.__func__ is not Penalty.lambda_max.__func__

    @classmethod
    def check(cls, options, n_features):
        """A message when ``options`` (a dict with every declared option) do not suit the ``n_features``
        columns or each other, else None; the declaration has already checked each value."""
        return None

    @classmethod
    def from_options(cls, options):
        """The penalty built from the options it takes."""
        return cls(**{name: options[name] for name in cls.options})

    @classmethod
    def lambda_max(cls, gradient, options):
        """The smallest weight for which every coefficient is 0 (None: no such weight)."""
        return None

    def leaving_free(self, count):
        """This penalty on all but the last ``count`` coordinates (an unpenalized intercept)."""
        return Unpenalized(self, count)

    def prox(self, v, step):
        return v

    def threshold(self, step):
        """``(kappa, free)`` when ``prox(., step)`` is soft-thresholding at kappa of all but the last ``free``
        coordinates (declared by ``SOFT_THRESHOLD``; the engine then fuses the z- and u-steps), else None."""
        return None

    def value(self, z):
        return 0.0

    def certifiable(self):
        """Whether this penalty bounds its dual (module docstring): its class declares ``DUAL``."""
        return DUAL in self.capabilities

    def dual_scale(self, v):
        """The s in (0, 1] that puts s v in the domain of the conjugate (``DUAL``)."""
        raise NotImplementedError(f"the {self.name} penalty has no dual")

    def conjugate(self, v):
        """g*(v) at a v in the conjugate's domain."""
        return 0.0

    def dual_levels(self, v, norms):
        """(level, bound, spread) per column for the sphere test and the working sets (module docstring)."""
        raise NotImplementedError(f"the {self.name} penalty has no dual levels")

    def coordinate_parts(self):
        """(l1, l2) when the penalty is sum_k l1 |z_k| + l2 z_k^2 / 2 (``PROX_NEWTON``: proximal Newton's
        coordinate descent, proxnewton.py), else None."""
        return None

    def whole(self, columns):
        """``columns`` (sorted host indices) completed to whole groups: themselves without groups."""
        return columns

    def on_columns(self, columns):
        """This penalty on the columns ``columns`` (whole groups) of its own: itself without groups."""
        return self

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


@register("penalty", "l1")
class L1(Penalty):
    """lam ||z||_1: soft-thresholding."""

    name = "l1"
    options = Options(LAM)
    capabilities = frozenset({DUAL, SCREENING, PROX_NEWTON, SOFT_THRESHOLD})

    @classmethod
    def lambda_max(cls, gradient, options):
        return float(np.abs(gradient).max())

    def __init__(self, lam):
        self.lam = float(lam)

    def prox(self, v, step):
        return soft_threshold(v, self.lam * step, self.xp)

    def threshold(self, step):
        return (self.lam * step, 0) if SOFT_THRESHOLD in self.capabilities else None

    def value(self, z):
        return self.lam * float(self.xp.abs(z).sum())

    def dual_scale(self, v):
        return _scale_into(_largest(v), self.lam)

    def dual_levels(self, v, norms):
        return np.abs(v), self.lam, norms

    def coordinate_parts(self):
        return (self.lam, 0.0) if PROX_NEWTON in self.capabilities else None

    def settings(self):
        return {"lam": self.lam}


@register("penalty", "l2")
class L2(Penalty):
    """(lam / 2) ||z||^2 (ridge): a shrinkage by 1 / (1 + lam step)."""

    name = "l2"
    options = Options(LAM)

    def __init__(self, lam):
        self.lam = float(lam)

    def prox(self, v, step):
        return v / (1.0 + self.lam * step)

    def value(self, z):
        return 0.5 * self.lam * float(z @ z)

    def settings(self):
        return {"lam": self.lam}


@register("penalty", "elastic_net")
class ElasticNet(Penalty):
    """lam (l1_ratio ||z||_1 + (1 - l1_ratio) / 2 ||z||^2), scikit-learn's convention."""

    name = "elastic_net"
    options = Options(LAM, Option("l1_ratio", float, 0.5, "the share of the L1 part (1: the lasso)", low=0,
                                  low_open=True, high=1, message="{name} must be in (0, 1], got {value!r}"))
    capabilities = frozenset({DUAL, SCREENING, PROX_NEWTON})

    @classmethod
    def lambda_max(cls, gradient, options):
        return float(np.abs(gradient).max()) / options["l1_ratio"]

    def __init__(self, lam, l1_ratio):
        self.lam, self.l1_ratio = float(lam), float(l1_ratio)

    def prox(self, v, step):
        shrunk = soft_threshold(v, self.lam * self.l1_ratio * step, self.xp)
        return shrunk / (1.0 + self.lam * (1.0 - self.l1_ratio) * step)

    def value(self, z):
        return self.lam * (self.l1_ratio * float(self.xp.abs(z).sum())
                           + 0.5 * (1.0 - self.l1_ratio) * float(z @ z))

    def dual_scale(self, v):
        """1 with an L2 part (g*(v) = sum_k max(|v_k| - l1, 0)^2 / (2 l2) is finite everywhere); at l1_ratio = 1,
        the lasso's scaling into ||v||_inf <= l1."""
        l1, l2 = self.lam * self.l1_ratio, self.lam * (1.0 - self.l1_ratio)
        return 1.0 if l2 > 0 else _scale_into(_largest(v), l1)

    def conjugate(self, v):
        l1, l2 = self.lam * self.l1_ratio, self.lam * (1.0 - self.l1_ratio)
        if l2 <= 0:  # the indicator of ||v||_inf <= l1, where dual_scale has put v
            return 0.0
        excess = np.maximum(np.abs(v) - l1, 0.0)
        return float(excess @ excess) / (2.0 * l2)

    def dual_levels(self, v, norms):
        return np.abs(v), self.lam * self.l1_ratio, norms

    def coordinate_parts(self):
        if PROX_NEWTON not in self.capabilities:
            return None
        return self.lam * self.l1_ratio, self.lam * (1.0 - self.l1_ratio)

    def settings(self):
        return {"lam": self.lam, "l1_ratio": self.l1_ratio}


@register("penalty", "group_lasso")
class GroupLasso(Penalty):
    """lam sum_g w_g ||z_g||_2 over disjoint groups (w_g = sqrt(group size)): block soft-thresholding.

    ``groups`` is an integer label per coordinate; coordinates labelled -1 are
    not penalized.
    """

    name = "group_lasso"
    options = Options(LAM, Option("groups", object, None, "an integer group label per column (-1: not penalized)"))
    capabilities = frozenset({DUAL, SCREENING})

    @classmethod
    def check(cls, options, n_features):
        if options["groups"] is None or np.shape(options["groups"]) != (n_features,):
            return f"groups must give a group label for each of the {n_features} columns"
        return None

    def __init__(self, lam, groups):
        self.lam = float(lam)
        self.groups = np.asarray(groups, dtype=np.int64)  # the labels stay on the host (fingerprint, settings)
        labels = np.unique(self.groups[self.groups >= 0])
        self.members = [np.flatnonzero(self.groups == label) for label in labels]
        self.weights = [math.sqrt(len(index)) for index in self.members]
        self._indices = {}

    def _members(self):
        """The index arrays of the groups in the array module ``xp`` of the iterates (copied once)."""
        xp = self.xp
        if xp not in self._indices:
            self._indices[xp] = [xp.asarray(index) for index in self.members]
        return self._indices[xp]

    def prox(self, v, step):
        z = v.copy()
        for index, weight in zip(self._members(), self.weights):
            block = v[index]
            norm = float(self.xp.sqrt(block @ block))
            threshold = self.lam * weight * step
            z[index] = 0.0 if norm <= threshold else block * (1.0 - threshold / norm)
        return z

    def value(self, z):
        return self.lam * sum(weight * float(self.xp.sqrt(z[index] @ z[index]))
                              for index, weight in zip(self._members(), self.weights))

    def certifiable(self):
        """Only with every column in a group: an unpenalized column would need a_k^T theta = 0 exactly."""
        return super().certifiable() and bool((self.groups >= 0).all())

    def _group_levels(self, v):
        """||v_g|| / w_g per group (host)."""
        return np.array([math.sqrt(float(v[index] @ v[index])) / weight
                         for index, weight in zip(self.members, self.weights)])

    def dual_scale(self, v):
        return _scale_into(float(self._group_levels(v).max()) if self.members else 0.0, self.lam)

    def dual_levels(self, v, norms):
        level, bound, spread = np.zeros(v.shape[0]), np.zeros(v.shape[0]), np.zeros(v.shape[0])
        for index, weight in zip(self.members, self.weights):
            level[index] = math.sqrt(float(v[index] @ v[index]))
            bound[index] = self.lam * weight
            spread[index] = math.sqrt(float(norms[index] @ norms[index]))  # ||A_g||_F >= ||A_g||_2
        return level, bound, spread

    def whole(self, columns):
        labels = np.unique(self.groups[columns])
        return np.union1d(columns, np.flatnonzero(np.isin(self.groups, labels[labels >= 0])))

    def on_columns(self, columns):
        columns = np.asarray(columns)
        if columns.size == self.groups.size:
            return self
        if self.whole(columns).size != columns.size:
            raise ValueError("a group lasso restricted to some columns needs whole groups")
        restricted = GroupLasso(self.lam, self.groups[columns])
        restricted.xp = self.xp
        return restricted

    def settings(self):
        return {"lam": self.lam, "groups": len(self.members)}

    def parameters(self):
        return {"lam": self.lam, "groups": self.groups}


@register("penalty", "box")
class Box(Penalty):
    """The indicator of lower <= z <= upper (scalars or arrays): a projection."""

    name = "box"
    options = Options(Option("lower", object, -np.inf, "the lower bound: a number, or an array of one per column"),
                      Option("upper", object, np.inf, "the upper bound: a number, or an array of one per column"))

    @classmethod
    def check(cls, options, n_features):
        bounds = []
        for name in ("lower", "upper"):
            bound = options[name]
            try:
                values = np.asarray(to_host(bound), dtype=float)
            except (TypeError, ValueError):
                return f"{name} must be a number or an array of numbers, got {bound!r}"
            if values.ndim and values.shape != (n_features,):
                return f"{name} must be a number or an array of {n_features} bounds, got shape {values.shape}"
            if np.isnan(values).any():
                return f"{name} must not be NaN"
            bounds.append(values)
        above = np.broadcast_to(bounds[0] > bounds[1], (n_features,))
        if above.any():
            return f"lower must be <= upper, but lower > upper at {int(above.sum())} of the {n_features} columns"
        return None

    def __init__(self, lower, upper):
        self.lower, self.upper = lower, upper

    def bounds(self):
        """(lower, upper) in the array module of the iterates (host array bounds are copied to a GPU's)."""
        return tuple(bound if np.ndim(bound) == 0 else self.xp.asarray(bound) for bound in (self.lower, self.upper))

    def prox(self, v, step):
        return self.xp.clip(v, *self.bounds())

    def value(self, z):
        lower, upper = self.bounds()
        inside = bool(self.xp.all(z >= lower - 1e-12)) and bool(self.xp.all(z <= upper + 1e-12))
        return 0.0 if inside else math.inf

    def settings(self):
        scalar = lambda bound: float(bound) if np.ndim(bound) == 0 else "array"  # noqa: E731
        return {"lower": scalar(self.lower), "upper": scalar(self.upper)}

    def parameters(self):
        return {"lower": self.lower, "upper": self.upper}


@register("penalty", "nonnegative")
class NonNegative(Box):
    """The indicator of z >= 0."""

    name = "nonnegative"
    options = NO_OPTIONS

    @classmethod
    def check(cls, options, n_features):
        return None

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
    def capabilities(self):
        """The penalty's: they hold on all but the free coordinates, where the gap and proximal Newton unwrap
        it (gap.certificate_of, proxnewton.penalty_parts) and ``threshold`` leaves them free."""
        return capabilities_of(self.penalty)

    @property
    def xp(self):
        return self.penalty.xp

    def prox(self, v, step):
        z = v.copy()
        z[:-self.count] = self.penalty.prox(v[:-self.count], step)
        return z

    def threshold(self, step):
        inner = self.penalty.threshold(step)
        if inner is None or inner[1] or self.count <= 0 or SOFT_THRESHOLD not in self.capabilities:
            return None
        return inner[0], self.count

    def value(self, z):
        return self.penalty.value(z[:-self.count])

    def whole(self, columns):
        return self.penalty.whole(columns)

    def on_columns(self, columns):
        return Unpenalized(self.penalty.on_columns(columns), self.count)

    def settings(self):
        return dict(self.penalty.settings(), unpenalized_last=self.count)

    def parameters(self):
        return dict(self.penalty.parameters(), unpenalized_last=self.count)


register("penalty", "none", Penalty)
