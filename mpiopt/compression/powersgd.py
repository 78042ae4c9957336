"""``powersgd``: rank-r PowerSGD, one warm-started step of subspace iteration per call.

Vogels, Karimireddy and Jaggi 2019, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization"; the same choices as PyTorch DDP's
``powerSGD_hook``.

**The matrix.**  An array of two or more dimensions is viewed as
(shape[0], prod(shape[1:])), as PyTorch does.  PowerSGD works per tensor
(``per_tensor``): a training bucket reaches it tensor by tensor, each as
``(shape[0], -1)`` (:func:`~mpiopt.compression.base.tensor_matrix_shape`), so
a weight matrix keeps its own shape and a bias of n entries is an n x 1
matrix, which the rule below leaves uncompressed, as in PyTorch's
``powerSGD_hook``.  A flat vector of n elements given alone is viewed as
rows = ceil(sqrt(n)) by cols = ceil(n / rows), padded with fewer than ``rows``
zeros.  The rank used is r = min(rank, rows, cols).  When rows cols <
min_compression_rate (rows + cols) r (PyTorch's rule; small buffers, biases)
the buffer travels uncompressed: one round, linear and exact.

**Two rounds, each linear** (the compressed reducer sums each over the ranks in
compressed form, ``compress_p`` then ``compress_q``):

    round 1:  P_i = M_i Q              Q: the warm start, the same on every rank
              P = sum_i P_i;   P^ = an orthonormal basis of P (reduced QR)
    round 2:  Q_i = M_i^T P^
              Q = sum_i Q_i
    decoded:  P^ Q^T = P^ P^^T sum_i M_i       (the sum projected onto span P^)

The next call for the same buffer name starts from this call's summed Q (warm
start; ``warm_start=False`` draws a new Q each step); the first Q is drawn
from ``random_stream(seed, "powersgd", name)``, so every rank with the same
seed starts from the same one.  All ranks orthogonalize the same summed P
(bit for bit, from the ring) and so agree on P^.

Payload: P (rows r) then Q (cols r) in the input's dtype,
(rows + cols) r itemsize bytes in all, about 2 sqrt(n) r itemsize for a
vector; uncompressed, n itemsize.  Compute: two matrix products of 2 n r flops
and a QR of rows x r.

For one worker, ``compress`` runs both rounds and returns (P^, Q): decoded
P^ Q^T, the approximation ``ErrorFeedback`` subtracts.  Biased, so error
feedback is on by default (as in PyTorch's hook); with it each rank keeps
M_i - P^ Q_i^T, its own part of the error (Vogels et al., Algorithm 2).
"""
import math

import numpy as np

from ..core.backend import get_array_module, to_module
from ..core.options import Option, Options, seed_option
from ..core.random import random_stream
from ..core.registry import register
from .base import Compressor, buffer_name, element_count


class PowerSGDRound:
    """One call in flight: its context, the matrix, and P^ once round 1 is summed."""

    def __init__(self, ctx, matrix):
        self.ctx, self.matrix, self.p_hat = ctx, matrix, None

    @property
    def rounds(self):
        return 2 if self.ctx.info["compressed"] else 1


def matrix_shape(shape):
    """(rows, cols) of the matrix an array of ``shape`` is viewed as (see the module docstring)."""
    size = element_count(shape)
    if len(shape) >= 2:
        return int(shape[0]), size // int(shape[0]) if shape[0] else 0
    rows = math.isqrt(size)
    rows += rows * rows < size
    return rows, (-(-size // rows) if rows else 0)


BROADCAST_COLUMNS = 128  # at r = 1, from this many columns a broadcast multiply beats a padded matmul


def outer_product(p_hat, q, out):
    """``out = P^ Q^T`` (rows x cols) from P^ (rows x r) and Q (cols x r).

    At r = 1 numpy's matmul (an inner dimension of 1) is slower than rank 4's, which does four times the
    work.  So at r = 1 the product is a broadcast multiply when rows are long (cols >= ``BROADCAST_COLUMNS``),
    and a matmul with P^ and Q padded by a zero column when they are short (numpy's broadcast then pays per
    row); docs/compression.md ("On the CPU: compiled kernels") has the times.  Both
    give the products p_i q_j bit for bit, except that a product of -0 may come out as +0 from the padded
    matmul (p_i q_j + 0 0)."""
    xp = get_array_module(out)
    if p_hat.shape[1] != 1:
        return xp.matmul(p_hat, q.T, out=out)
    if q.shape[0] >= BROADCAST_COLUMNS:
        return xp.multiply(p_hat, q.T, out=out)
    padded_p = xp.zeros((p_hat.shape[0], 2), dtype=p_hat.dtype)
    padded_q = xp.zeros((q.shape[0], 2), dtype=q.dtype)
    padded_p[:, :1] = p_hat
    padded_q[:, :1] = q
    return xp.matmul(padded_p, padded_q.T, out=out)


def orthonormal(p):
    """An orthonormal basis of the columns of ``p`` (reduced QR; deterministic for the same ``p``)."""
    return get_array_module(p).linalg.qr(p, mode="reduced")[0]


@register("compressor", "powersgd")
class PowerSGD(Compressor):
    name = "powersgd"
    linear = True
    error_feedback = True
    per_tensor = True
    rounds = 2
    options = Options(
        Option("rank", int, 1, "rank r of the approximation P^ Q^T", low=1,
               message="rank must be an integer >= 1, got {value!r}"),
        Option("min_compression_rate", float, 2.0, "a matrix whose rows cols < this (rows + cols) r travels "
                                                   "uncompressed (PyTorch's rule)", low=0),
        Option("warm_start", bool, True, "start each step from the last summed Q; False: a new draw each step"),
        seed_option("seed of the first Q (every rank must use the same)"))

    def __init__(self, **options):
        super().__init__(**options)
        self._q = {}

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        rows, cols = matrix_shape(shape)
        r = min(self.rank, rows, cols)
        compressed = r > 0 and rows * cols >= self.min_compression_rate * (rows + cols) * r
        parts = [(dtype, rows * r), (dtype, cols * r)] if compressed else [(dtype, size)]
        return self.make_context(shape, dtype, name, step, parts, rows=rows, cols=cols, rank=r,
                                 compressed=compressed)

    # -- the two rounds (driven by the compressed reducer) -------------------
    def compress_p(self, x, name=None, step=None):
        """Round 1: (payload (P_i,), the round in flight); an uncompressed buffer has one round only."""
        x = self.check_input(x)
        ctx = self.context(x.shape, x.dtype, name, self.next_step(name, step))
        flat = x.reshape(-1)
        if not ctx.info["compressed"]:
            return (flat.copy(),), PowerSGDRound(ctx, None)
        return self._round_one(flat, ctx)

    def compress_q(self, p_sum, state):
        """Round 2: orthogonalize the summed P into ``state.p_hat``; the payload (Q_i,) = (M_i^T P^,)."""
        info = state.ctx.info
        state.p_hat = orthonormal(p_sum.reshape(info["rows"], info["rank"]))
        return ((state.matrix.T @ state.p_hat).reshape(-1),)

    def decompress_q(self, q_sum, state, out=None):
        """P^ Q^T from the summed Q (into ``out``); Q becomes the buffer's next warm start."""
        info = state.ctx.info
        q = q_sum.reshape(info["cols"], info["rank"])
        self._q[state.ctx.name] = q.copy()
        return self.decompress((state.p_hat.reshape(-1), q.reshape(-1)), state.ctx, out)

    # -- one worker: both rounds at once -------------------------------------
    def encode(self, flat, ctx):
        if not ctx.info["compressed"]:
            return (flat.copy(),)
        (p,), state = self._round_one(flat, ctx)
        (q,) = self.compress_q(p, state)
        self._q[ctx.name] = q.reshape(ctx.info["cols"], ctx.info["rank"]).copy()
        return state.p_hat.reshape(-1).copy(), q

    def _round_one(self, flat, ctx):
        matrix = self.matrix(flat, ctx)
        return ((matrix @ self.start_q(ctx, get_array_module(flat))).reshape(-1),), PowerSGDRound(ctx, matrix)

    def decode(self, payload, ctx, flat_out):
        xp = get_array_module(flat_out)
        if not ctx.info["compressed"]:
            xp.copyto(flat_out, payload[0])
            return
        rows, cols, r = ctx.info["rows"], ctx.info["cols"], ctx.info["rank"]
        p_hat, q = payload[0].reshape(rows, r), payload[1].reshape(cols, r)
        if rows * cols == flat_out.size:
            outer_product(p_hat, q, flat_out.reshape(rows, cols))
        else:
            padded = self.scratch("padded", rows * cols, flat_out.dtype, xp).reshape(rows, cols)
            xp.copyto(flat_out, outer_product(p_hat, q, padded).reshape(-1)[:flat_out.size])

    # -- state ---------------------------------------------------------------
    def matrix(self, flat, ctx):
        """The buffer as a rows x cols matrix: a view, or a zero-padded copy for a vector."""
        rows, cols = ctx.info["rows"], ctx.info["cols"]
        if rows * cols == flat.size:
            return flat.reshape(rows, cols)
        padded = get_array_module(flat).zeros(rows * cols, dtype=flat.dtype)
        padded[:flat.size] = flat
        return padded.reshape(rows, cols)

    def start_q(self, ctx, xp=np):
        """This step's Q: the warm start of ``ctx.name``, or a new draw (the same on every rank), in module
        ``xp`` (drawn on the host, then copied to the device: the same Q on either)."""
        shape = (ctx.info["cols"], ctx.info["rank"])
        q = self._q.get(ctx.name) if self.warm_start else None
        if q is None or q.shape != shape:  # first call, or the buffer changed shape: start again
            purpose = ("powersgd", ctx.name) if self.warm_start else ("powersgd", ctx.name, ctx.step)
            q = random_stream(self.seed, *purpose).standard_normal(shape)
        return to_module(q, xp).astype(ctx.dtype, copy=False)

    def state_dict(self):
        """The warm-start Q of every buffer name (copies), for checkpoints."""
        return {name: q.copy() for name, q in self._q.items()}

    def load_state_dict(self, state):
        self._q = {buffer_name(name): np.array(q) for name, q in state.items()}
