"""Secure aggregation by pairwise additive masks (Bonawitz et al. 2017, without key agreement).

Bonawitz, Ivanov, Kreuter, Marcedone, McMahan, Patel, Ramage, Segal, Seth,
"Practical secure aggregation for privacy-preserving machine learning", CCS
2017: every pair of participants (i, j) shares a seed s_ij; client i sends

    y_i = x_i + sum_{j in P, j != i} sign(i, j) PRG(s_ij),   sign = +1 if i < j else -1,

so each pair's masks cancel in sum_i y_i = sum_i x_i, while a single y_i is
uniformly distributed (one-time pad) and tells the aggregator nothing of x_i.

What this module keeps and what it leaves out (honest-but-curious simulation):

* Per-pair seeds come from a shared session seed: ``pair_seed`` draws s_ij
  from ``random_stream(session_seed, "secure-aggregation-pair", round, i, j)``
  with i < j.  In the protocol they come from a Diffie-Hellman key agreement,
  so that only i and j know s_ij; here anyone with the session seed can
  compute them.  Use it to build and test the aggregation path, not as a
  cryptographic protection.
* Dropout recovery (the protocol's unmasking round): when clients in D drop
  after masking, the survivors' masks with D do not cancel; each survivor i
  reveals s_ij for j in D (Shamir shares of them, in the protocol) and the
  server subtracts sign(i, j) PRG(s_ij): ``unmask_sum``.
* Left out: the self masks b_i (double masking) that protect a client whose
  masked update arrives after it was declared dropped, the secret sharing with
  a threshold, signatures and the consistency checks.

Arithmetic: the ring Z / 2^64 (numpy ``uint64`` with wraparound), so masks
cancel exactly.  A real value x is encoded as round(x 2^f) in two's complement
(``to_ring``), with ``fraction_bits`` f = 32 by default: the quantization step
is 2^-f (2.3e-10), one client's rounding error at most 2^-(f+1), and the sum
of n clients is off the float sum by at most n 2^-(f+1).  The decoded sum must
lie in (-2^(63-f), 2^(63-f)), about +-2.1e9 at f = 32: ``mask_update`` refuses
an update with |x| >= 2^(63-f) / |P| so that no sum of |P| of them wraps.
Summing the masked arrays (``ring_sum``, or an MPI all-reduce with
``MPI.UINT64_T`` and ``MPI.SUM``, which is also modulo 2^64) is exact in any
order.

Cost: each client expands |P| - 1 PRG streams of d words, O(|P| d) per
client; the server's recovery expands |S| |D| streams of d words.
"""
import numpy as np

from ..core.random import random_stream

FRACTION_BITS = 32
PAIR_PURPOSE = "secure-aggregation-pair"


def _check_fraction_bits(fraction_bits):
    if isinstance(fraction_bits, bool) or not isinstance(fraction_bits, int) or not 0 <= fraction_bits <= 62:
        raise ValueError(f"fraction_bits must be an integer in [0, 62], got {fraction_bits!r}")


def to_ring(values, fraction_bits=FRACTION_BITS):
    """``values`` as fixed-point numbers round(x 2^f) on the ring Z / 2^64 (uint64, two's complement)."""
    _check_fraction_bits(fraction_bits)
    values = np.asarray(values, dtype=np.float64)
    limit = 2.0 ** (63 - fraction_bits)
    if not np.all(np.abs(values) < limit):
        worst = np.max(np.abs(values)) if values.size else 0.0
        raise ValueError(f"a value of magnitude {worst!r} does not fit the ring with fraction_bits={fraction_bits} "
                         f"(|x| must be < 2^{63 - fraction_bits} = {limit:g})")
    return np.rint(np.ldexp(values, fraction_bits)).astype(np.int64).view(np.uint64)


def from_ring(ring_values, fraction_bits=FRACTION_BITS):
    """The real values of fixed-point ring elements (two's complement, scaled by 2^-f), as float64."""
    _check_fraction_bits(fraction_bits)
    ring_values = np.asarray(ring_values, dtype=np.uint64)
    return np.ldexp(ring_values.view(np.int64).astype(np.float64), -fraction_bits)


def ring_sum(ring_arrays):
    """The sum modulo 2^64 of a sequence of equal-shaped uint64 arrays (what the aggregator computes)."""
    arrays = [np.asarray(array, dtype=np.uint64) for array in ring_arrays]
    if not arrays:
        raise ValueError("ring_sum needs at least one array")
    total = np.zeros_like(arrays[0])
    for array in arrays:
        total += array  # uint64 addition wraps modulo 2^64
    return total


def _check_client(client, what="client"):
    if isinstance(client, bool) or not isinstance(client, (int, np.integer)) or not 0 <= client < 1 << 32:
        raise ValueError(f"{what} ids must be integers in [0, 2^32), got {client!r}")
    return int(client)


def pair_seed(session_seed, round, i, j):
    """The seed s_ij = s_ji that clients i != j share in ``round`` (from the session seed; see the module docstring)."""
    i, j = _check_client(i), _check_client(j)
    if i == j:
        raise ValueError(f"a pair seed needs two different clients, got {i} twice")
    low, high = min(i, j), max(i, j)
    return int(random_stream(session_seed, PAIR_PURPOSE, round, low, high).integers(0, 1 << 63))


def pair_mask(seed, shape):
    """PRG(seed): uniform uint64 words of ``shape``, the mask a pair seed expands to."""
    return random_stream(seed, "secure-aggregation-mask").bit_generator.random_raw(shape).astype(np.uint64)


def _signed_pair_mask(client, other, session_seed, round, shape):
    """sign(client, other) PRG(s_client,other) on the ring: +mask if client < other, else -mask (mod 2^64)."""
    mask = pair_mask(pair_seed(session_seed, round, client, other), shape)
    return mask if client < other else np.negative(mask)


def _client_set(clients, what):
    ids = [_check_client(client, what) for client in clients]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what} ids must be distinct, got {sorted(ids)}")
    return sorted(ids)


def mask_update(update, client, participants, session_seed, round, fraction_bits=FRACTION_BITS):
    """Client ``client``'s masked update on the ring: to_ring(update) + sum_j sign(client, j) PRG(s_client,j).

    ``participants`` are all the clients masking in this round (including
    ``client``, at least two); the masks of the participants cancel in their
    sum.  Returns a uint64 array of the update's shape.
    """
    client = _check_client(client)
    participants = _client_set(participants, "participant")
    if client not in participants:
        raise ValueError(f"client {client} is not among the participants {participants}")
    if len(participants) < 2:
        raise ValueError(f"masking needs at least two participants, got {participants}")
    update = np.asarray(update, dtype=np.float64)
    bound = 2.0 ** (63 - fraction_bits) / len(participants)
    if update.size and not np.max(np.abs(update)) < bound:
        raise ValueError(f"client {client}'s update has a value of magnitude {np.max(np.abs(update))!r}; "
                         f"with {len(participants)} participants and fraction_bits={fraction_bits}, values must be "
                         f"< 2^{63 - fraction_bits} / {len(participants)} = {bound:g} so that their sum does not wrap")
    masked = to_ring(update, fraction_bits)
    for other in participants:
        if other != client:
            masked += _signed_pair_mask(client, other, session_seed, round, update.shape)
    return masked


def dropout_correction(survivors, dropped, session_seed, round, shape):
    """The masks that do not cancel when ``dropped`` clients' masked updates never arrive (ring, uint64).

    Survivor i's masked update carries sign(i, j) PRG(s_ij) for every dropped j;
    this is their sum over survivors and dropped clients: the server computes
    it from the pair seeds s_ij that the survivors reveal for the dropped.
    """
    correction = np.zeros(shape, dtype=np.uint64)
    for survivor in survivors:
        for gone in dropped:
            correction += _signed_pair_mask(survivor, gone, session_seed, round, shape)
    return correction


def unmask_sum(masked_sum, survivors, dropped, session_seed, round, fraction_bits=FRACTION_BITS):
    """The exact sum of the survivors' updates (float64), from the ring sum of their masked updates.

    ``masked_sum`` is ``ring_sum`` of the masked updates that arrived, from
    ``survivors``; ``dropped`` are the participants that masked in this round
    but whose masked update never arrived (empty when none dropped).  The
    uncancelled masks with the dropped are removed (``dropout_correction``) and
    the fixed-point sum decoded; it equals the ring sum of to_ring(x_i) over
    the survivors exactly, and the float sum within |survivors| 2^-(f+1).
    """
    survivors, dropped = _client_set(survivors, "survivor"), _client_set(dropped, "dropped client")
    if not survivors:
        raise ValueError("unmasking needs at least one survivor")
    both = sorted(set(survivors) & set(dropped))
    if both:
        raise ValueError(f"clients {both} are listed both as survivors and as dropped")
    masked_sum = np.asarray(masked_sum, dtype=np.uint64)
    correction = dropout_correction(survivors, dropped, session_seed, round, masked_sum.shape)
    return from_ring(masked_sum - correction, fraction_bits)
