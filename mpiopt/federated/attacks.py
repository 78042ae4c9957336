"""Byzantine clients: a seeded share of the K clients whose uploads are forged, by a named attack.

``run_federated(..., byzantine=b, attack=name, attack_options={...})``: the
Byzantine clients are round(b K) of the K, drawn once from
``random_stream(seed, "byzantine")`` (the same at any rank count).  A
Byzantine client trains as the others do; after the round's all-gather, on
every rank alike, its delta is replaced by the attack's forgery (its other
uploads, SCAFFOLD's control-variate change say, are left as they are).  The
forgeries are computed in the clear, so a hook that masks the updates (secure
aggregation) is refused with them.  Attacks, registered as kind ``"attack"``:

* ``sign_flip`` (scale s): -s delta_k (the honest update, reversed and scaled);
* ``gaussian`` (scale s): N(0, s^2 I), from ``random_stream(seed, "attack",
  round, k)``;
* ``constant`` (scale s): s 1, the same vector from every attacker;
* ``alie``, "a little is enough" (Baruch, Baruch, Goldberg, NeurIPS 2019): every
  attacker sends mu - z sigma, mu and sigma the coordinate-wise mean and
  standard deviation of the round's honest deltas; z defaults to the paper's
  z_max = Phi^-1((n - s) / n) with s = floor(n / 2 + 1) - f (n reporting, f of
  them Byzantine), the largest shift that still leaves the attackers inside the
  honest majority's spread (so that median- and Krum-like rules keep them).

Cost: O(f d) per round for the forgeries, O(n d) for ALIE's moments.
"""
import math

import numpy as np

from ..core.options import Option, Options
from ..core.random import random_stream
from ..core.registry import lookup, register
from .declared import DeclaredPiece
from .strategy import round_half_up


def byzantine_clients(n_clients, share, seed):
    """The sorted ids of the round(share K) Byzantine clients (none when share is 0)."""
    count = min(n_clients, int(round_half_up(share * n_clients)))
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(random_stream(seed, "byzantine").choice(n_clients, size=count, replace=False))


class Attack(DeclaredPiece):
    """Base of the attacks: ``forge(delta, honest, round, client, seed, reporting, byzantine)`` is the forged
    delta of one Byzantine client; ``honest`` the (n_honest, d) array of the round's honest deltas."""

    name = "attack"
    options = Options(Option("scale", float, 1.0, "s: the attack's size", low=0))

    def __init__(self, *args, **options):
        self.take_options(args, options)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.option_values().items())})"

    def forge(self, delta, honest, round, client, seed, reporting, byzantine):
        raise NotImplementedError


@register("attack", "sign_flip")
class SignFlip(Attack):
    name = "sign_flip"

    def forge(self, delta, honest, round, client, seed, reporting, byzantine):
        return -self.scale * delta


@register("attack", "gaussian")
class Gaussian(Attack):
    name = "gaussian"

    def forge(self, delta, honest, round, client, seed, reporting, byzantine):
        return random_stream(seed, "attack", round, client).normal(0.0, self.scale, delta.shape)


@register("attack", "constant")
class Constant(Attack):
    name = "constant"

    def forge(self, delta, honest, round, client, seed, reporting, byzantine):
        return np.full_like(delta, self.scale)


@register("attack", "alie")
class LittleIsEnough(Attack):
    name = "alie"
    options = Options(Option("z", float, None, "the shift in standard deviations (None: the paper's z_max)"))

    def shift(self, reporting, byzantine):
        """z: the option, or z_max = Phi^-1((n - s) / n) with s = floor(n / 2 + 1) - f."""
        if self.z is not None:
            return self.z
        from scipy.stats import norm
        s = math.floor(reporting / 2 + 1) - byzantine
        return float(norm.ppf((reporting - s) / reporting)) if 0 < reporting - s < reporting else 0.0

    def forge(self, delta, honest, round, client, seed, reporting, byzantine):
        if len(honest) == 0:
            return delta
        return honest.mean(axis=0) - self.shift(reporting, byzantine) * honest.std(axis=0)


def get_attack(name, **options):
    return lookup("attack", name)(**options)


def forge_updates(updates, attack, byzantine, round, seed):
    """The updates with the Byzantine clients' deltas forged (in client order); the ids forged."""
    chosen = [index for index, update in enumerate(updates) if update.client in byzantine]
    if not chosen:
        return updates, []
    honest = np.array([update.delta for update in updates if update.client not in byzantine]).reshape(
        -1, updates[0].delta.size)
    forged = list(updates)
    for index in chosen:
        update = updates[index]
        forged[index] = type(update)(**{**update.__dict__, "delta": attack.forge(
            update.delta, honest, round, update.client, seed, len(updates), len(chosen))})
    return forged, [updates[index].client for index in chosen]
