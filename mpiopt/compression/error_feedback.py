"""Error feedback: whatever a compressor drops is added back to the next call for the same buffer.

Seide et al. 2014 ("1-bit SGD"); Stich, Cordonnier and Jaggi 2018; Karimireddy
et al. 2019 (EF-signSGD); the "memory" of GRACE.  For each buffer name:

    e += x;   payload = C(e);   e -= decompress(payload)

so ``e`` keeps exactly what the payload does not carry, and over T calls the
decoded payloads add up to the inputs' sum minus the last residual.  Cost: one
residual array per buffer name (the input's dtype and size) and one decode per
call (a scatter for the sparse compressors).

**Fused steps.** A compressor with an ``encode_feedback(flat, residual, ctx)``
method (fp16, bf16, sign, Top-K, Random-K) does the three steps itself on numpy
arrays, in fewer passes over memory (compiled kernels,
:mod:`mpiopt.kernels.compress_fast`): one pass for fp16 and bf16, e += x inside
Top-K's collecting pass, one for QSGD (in the quantizer's pass), e += x and a
gather of k for Random-K, and one for sign: its ``e -= decoded`` needs the
scale of the whole e, so it is left pending (a compressor with
``deferred_feedback``) and done in the next call's pass, or when the residual
is read (:meth:`ErrorFeedback.residual`, ``state_dict``).  The payload and the
residual are those of the three steps, bit for bit; CuPy arrays and the other
compressors take the three steps.

``ErrorFeedback(compressor)`` has the compressor's interface (``compress``,
``decompress``, ``context``, ``accumulate``, flags, and for PowerSGD the two
rounds: the residual is updated in round 2 with the rank's own P^ Q_i^T) and
``state_dict`` / ``load_state_dict`` (the residuals, and the compressor's own
state if it has one) for checkpoints.  The residuals are per buffer name: give
every buffer its own.
"""
import numpy as np

from ..core.backend import get_array_module, to_module
from .base import buffer_name


class ErrorFeedback:
    """Wraps any compressor (see the module docstring)."""

    def __init__(self, compressor):
        if isinstance(compressor, ErrorFeedback):
            raise ValueError("the compressor already has error feedback")
        self.compressor = compressor
        self._residuals = {}
        self._pending = {}  # buffer name -> what a deferred_feedback compressor left to subtract from it

    # The wrapped compressor's flags and payload format.
    name = property(lambda self: f"ef-{self.compressor.name}")
    linear = property(lambda self: self.compressor.linear)
    unbiased = property(lambda self: False)
    error_feedback = property(lambda self: True)
    per_tensor = property(lambda self: getattr(self.compressor, "per_tensor", False))
    rounds = property(lambda self: self.compressor.rounds)
    options = property(lambda self: self.compressor.options)

    def settings(self):
        return dict(self.compressor.settings(), error_feedback=True)

    def context(self, shape, dtype, name=None, step=0):
        return self.compressor.context(shape, dtype, name, step)

    def payload_bytes(self, shape, dtype=np.float32):
        return self.compressor.payload_bytes(shape, dtype)

    def decompress(self, payload, ctx, out=None):
        return self.compressor.decompress(payload, ctx, out)

    def accumulate(self, payload, ctx, out, subtract=False):
        return self.compressor.accumulate(payload, ctx, out, subtract)

    # -- compensation --------------------------------------------------------
    def residual(self, name=None):
        """The residual kept for buffer ``name`` (None before its first call); the live array."""
        key = buffer_name(name)
        self._settle(key)
        return self._residuals.get(key)

    def _settle(self, key):
        """Apply what the compressor left pending to the residual of ``key``, if anything."""
        pending = self._pending.pop(key, None)
        if pending is not None:
            self.compressor.settle_feedback(self._residuals[key].reshape(-1), pending)

    def compensate(self, x, name):
        """``e += x`` for buffer ``name`` (created as zeros on first use); returns ``e``."""
        residual = self._residual_for(x, name)
        residual += x
        return residual

    def _residual_for(self, x, name):
        """The residual of buffer ``name`` for ``x``: zeros on first use, moved to x's array module."""
        key = buffer_name(name)
        self._settle(key)
        residual = self._residuals.get(key)
        if residual is not None and get_array_module(residual) is not get_array_module(x):
            # restored from a checkpoint (host arrays) for a run on the GPU, or the other way round
            residual = self._residuals[key] = to_module(residual, get_array_module(x))
        if residual is None:
            residual = self._residuals[key] = get_array_module(x).zeros(x.shape, dtype=x.dtype)
        elif residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError(f"{self.name}: buffer {key!r} had shape {residual.shape} and dtype {residual.dtype}, "
                             f"now {x.shape} and {x.dtype}; use another name for another buffer")
        return residual

    def compress(self, x, name=None, step=None):
        x = self.compressor.check_input(x)
        fused = getattr(self.compressor, "encode_feedback", None)
        if fused is not None and get_array_module(x) is np:
            key = buffer_name(name)
            pending = self._pending.pop(key, None)  # applied by this call's pass, not by _residual_for
            try:
                residual = self._residual_for(x, name)
            except ValueError:
                if pending is not None:
                    self._pending[key] = pending
                raise
            ctx = self.compressor.context(x.shape, x.dtype, name, self.compressor.next_step(name, step))
            if not getattr(self.compressor, "deferred_feedback", False):
                return fused(x.reshape(-1), residual.reshape(-1), ctx), ctx
            payload, left = fused(x.reshape(-1), residual.reshape(-1), ctx, pending)
            if left is not None:
                self._pending[key] = left
            return payload, ctx
        residual = self.compensate(x, name)
        payload, ctx = self.compressor.compress(residual, name, step)
        self.compressor.accumulate(payload, ctx, residual, subtract=True)
        return payload, ctx

    # -- PowerSGD's two rounds -------------------------------------------------
    def compress_p(self, x, name=None, step=None):
        residual = self.compensate(self.compressor.check_input(x), name)
        payload, state = self.compressor.compress_p(residual, name, step)
        if state.rounds == 1:  # sent uncompressed: nothing left behind
            self.compressor.accumulate(payload, state.ctx, residual, subtract=True)
        return payload, state

    def compress_q(self, p_sum, state):
        payload = self.compressor.compress_q(p_sum, state)
        local = (state.p_hat.reshape(-1), payload[0])
        self.compressor.accumulate(local, state.ctx, self._residuals[state.ctx.name], subtract=True)
        return payload

    def decompress_q(self, q_sum, state, out=None):
        return self.compressor.decompress_q(q_sum, state, out)

    # -- checkpoints -------------------------------------------------------------
    def state_dict(self):
        """{"residuals": {name: copy}, "compressor": the compressor's own state_dict or {}}."""
        inner = getattr(self.compressor, "state_dict", None)
        for key in list(self._pending):
            self._settle(key)
        return {"residuals": {name: e.copy() for name, e in self._residuals.items()},
                "compressor": inner() if inner else {}}

    def load_state_dict(self, state):
        self._residuals = {buffer_name(name): np.array(e) for name, e in state["residuals"].items()}
        self._pending = {}
        if state.get("compressor") and hasattr(self.compressor, "load_state_dict"):
            self.compressor.load_state_dict(state["compressor"])

    def __repr__(self):
        return f"ErrorFeedback({self.compressor!r})"


class EF21(ErrorFeedback):
    """EF21 (Richtarik, Sokolov and Fatkhullin, NeurIPS 2021): each rank keeps an estimate g_i of its own
    input per buffer name (zeros at first), sends c_i = C(x - g_i) and keeps g_i <- g_i + c_i.

    The decoded payloads then sum to sum_i c_i, the change of sum_i g_i; the compressed reducer
    (``error_feedback="ef21"``) keeps that sum and returns it, the estimate of sum_i x_i.  Unlike error
    feedback, what travels is the change of the estimate, so with a contractive C the estimate follows a
    slowly changing input with a geometrically shrinking error.  ``residual(name)`` is g_i.  One-round
    compressors only (PowerSGD's two rounds are refused)."""

    name = property(lambda self: f"ef21-{self.compressor.name}")

    def settings(self):
        return dict(self.compressor.settings(), error_feedback="ef21")

    def compress(self, x, name=None, step=None):
        x = self.compressor.check_input(x)
        estimate = self._residual_for(x, name)
        payload, ctx = self.compressor.compress(x - estimate, name, step)
        self.compressor.accumulate(payload, ctx, estimate)  # g_i += c_i
        return payload, ctx

    def compress_p(self, x, name=None, step=None):
        raise ValueError(f"EF21 takes a one-round compressor; {self.compressor.name} has two rounds")

    def __repr__(self):
        return f"EF21({self.compressor!r})"
