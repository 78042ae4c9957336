"""Type-II Anderson acceleration of the ADMM fixed-point iteration (Walker and Ni 2011;
Zhang, O'Donoghue and Boyd 2020 use it to accelerate SCS and Douglas-Rachford).

One ADMM iteration is a map w -> T(w) on the state w = (z, u_1, ..., u_N).  With
the last ``memory`` states and images, Anderson proposes

    w_next = T(w) - dT gamma,   gamma = argmin ||g - dG gamma||,   g = T(w) - w

where dG and dT hold differences of consecutive residuals g and images T(w).
The state is spread over the ranks (z is the same on all, u_i is each rank's),
so the small least-squares problem is formed from one allreduce of an
(m + 1) x (m + 1) Gram matrix and solved identically everywhere.

Safeguards: the memory is cleared when rho changes (T changes with it), when
the fixed-point residual grows past ``growth`` times the smallest seen, and
when it has not shrunk for 2 m steps; after a safeguard reset the next 2 m
steps are plain ADMM steps, which always make progress, before extrapolation
resumes.
"""
import math

import numpy as np
from mpi4py import MPI


class AndersonAccelerator:
    """The vectors live in the engine's array module ``xp`` (numpy or CuPy); the small
    (m + 1) x (m + 1) Gram matrix and its solve are on the host."""

    def __init__(self, memory, comm, xp=np, regularization=1e-10, growth=2.0):
        self.memory, self.comm, self.xp = int(memory), comm, xp
        self.z_weight = 1.0 / math.sqrt(max(comm.size, 1))  # z is counted once over all ranks
        self.regularization, self.growth = regularization, growth
        self.reset()

    def reset(self, cooldown=0):
        self.residuals, self.images = [], []
        self.previous_residual = None
        self.previous_image = None
        self.best_norm = np.inf
        self.stalled = 0
        self.cooldown = cooldown

    def state(self):
        """Arrays for a checkpoint (this rank's share of the history)."""
        if self.previous_residual is None:
            return {"counters": np.array([self.stalled, self.cooldown])}
        width, xp = self.previous_residual.size, self.xp
        stack = lambda rows: xp.stack(rows) if rows else xp.zeros((0, width))  # noqa: E731
        return {"residuals": stack(self.residuals), "images": stack(self.images),
                "previous_residual": self.previous_residual, "previous_image": self.previous_image,
                "best_norm": np.array(self.best_norm), "counters": np.array([self.stalled, self.cooldown])}

    def restore(self, state):
        self.reset()
        if "counters" in state:
            self.stalled, self.cooldown = (int(v) for v in state["counters"])
        if "residuals" in state:
            xp = self.xp
            self.residuals = list(xp.asarray(state["residuals"]))
            self.images = list(xp.asarray(state["images"]))
            self.previous_residual = xp.asarray(state["previous_residual"])
            self.previous_image = xp.asarray(state["previous_image"])
            self.best_norm = float(state["best_norm"])

    def _pack(self, z, u):
        return self.xp.concatenate([self.z_weight * z, u])

    def step(self, z, u, z_mapped, u_mapped):
        """(z, u) -> T(z, u) = (z_mapped, u_mapped); returns the accelerated (z, u)."""
        if self.cooldown > 0:
            self.cooldown -= 1
            return z_mapped, u_mapped
        image = self._pack(z_mapped, u_mapped)
        residual = image - self._pack(z, u)
        if self.previous_residual is not None:
            self.residuals.append(residual - self.previous_residual)
            self.images.append(image - self.previous_image)
            if len(self.residuals) > self.memory:
                self.residuals.pop(0)
                self.images.pop(0)
        self.previous_residual, self.previous_image = residual, image
        columns = self.residuals + [residual]
        gram = np.array([[float(a @ b) for b in columns] for a in columns])
        self.comm.Allreduce(MPI.IN_PLACE, gram, op=MPI.SUM)
        norm = float(np.sqrt(gram[-1, -1]))
        if norm < (1.0 - 1e-3) * self.best_norm:
            self.best_norm, self.stalled = norm, 0
        else:
            self.stalled += 1
        if norm > self.growth * self.best_norm or self.stalled > 2 * self.memory:
            self.reset(cooldown=2 * self.memory)
            return z_mapped, u_mapped
        if not self.residuals:
            return z_mapped, u_mapped
        k = len(self.residuals)
        system = gram[:k, :k] + self.regularization * np.trace(gram[:k, :k]) * np.eye(k) / max(k, 1)
        try:
            gamma = np.linalg.solve(system, gram[:k, -1])
        except np.linalg.LinAlgError:
            self.reset()
            return z_mapped, u_mapped
        accelerated = image - sum(float(g) * d for g, d in zip(gamma, self.images))  # host scalars, xp vectors
        n = z.size
        return accelerated[:n] / self.z_weight, accelerated[n:]
