"""Compressed uploads: any compressor of :mod:`mpiopt.compression` on what a client sends.

``run_federated(..., compressor=name, compressor_options={...},
uplink_feedback=mode)``: on the client's rank, after the strategy's
``end_client``, each uploaded array x (delta, and every array the strategy
declares: SCAFFOLD's control-variate change too) goes through the
compressor C under the name ``client{k}.{array}`` at step ``round`` (so a
seeded compressor draws the same at any rank count), with

* ``none``: the server receives C(x);
* ``ef`` (error feedback; Seide et al. 2014, Karimireddy et al. 2019): the
  client keeps e (client state, zero at first), sends C(x + e) and keeps
  e <- x + e - C(x + e);
* ``ef21`` (Richtarik, Sokolov, Fatkhullin, NeurIPS 2021): the client keeps
  g (zero at first), sends c = C(x - g) and keeps g <- g + c; the server,
  which keeps the same g for the client, uses g as the client's update;
* ``auto`` (the default): ``ef`` for the compressors that ask for error
  feedback (``compressor.error_feedback``: the biased ones), else ``none``.

A compressor's own per-buffer state (PowerSGD's warm-start Q) is kept with the
client's state, so every client warm-starts from its own last round and a
resumed run continues bit for bit.  The rows of the all-gather hold the
decoded arrays (for EF21 the server's g of the client): the simulation moves
them densely, and counts each upload's bytes exactly as a deployment would send
them: the scalars ahead of the arrays (8 bytes each) plus each array's payload
(``ctx.payload_bytes``).

Cost: one compress and one decompress of each uploaded array per client and
round (the compressor's own cost), O(d) for the feedback.
"""
import numpy as np

FEEDBACKS = ("auto", "none", "ef", "ef21")
STATE = "uplink_state."


class Uplink:
    """The client side of compressed uploads: ``encode(update, ctx)`` -> (the update as the server receives
    it, the bytes sent)."""

    def __init__(self, compressor, feedback, layout):
        self.compressor, self.layout = compressor, layout
        self.feedback = ("ef" if compressor.error_feedback else "none") if feedback == "auto" else feedback

    def encode(self, update, ctx):
        sent = 8 * self.layout.head
        for name, _ in self.layout.arrays:
            x = update.delta if name == "delta" else update.arrays[name]
            received, nbytes = self.array(x, f"client{update.client}.{name}", ctx, name)
            sent += nbytes
            if name == "delta":
                update.delta = received
            else:
                update.arrays[name] = received
        return update, sent

    def array(self, x, buffer, ctx, name):
        state = ctx.state
        if self.feedback == "ef":
            x = x + state.get(f"uplink_error.{name}", 0.0)
        elif self.feedback == "ef21":
            estimate = state.get(f"uplink_estimate.{name}", np.zeros_like(x))
            x = x - estimate
        decoded, nbytes = self.roundtrip(x, buffer, ctx)
        if self.feedback == "ef":
            state[f"uplink_error.{name}"] = x - decoded
        elif self.feedback == "ef21":
            decoded = estimate + decoded
            state[f"uplink_estimate.{name}"] = decoded
        return decoded, nbytes

    def roundtrip(self, x, buffer, ctx):
        """C(x) as decoded, and its payload's bytes; the compressor's state of ``buffer`` kept in ``ctx.state``."""
        compressor, keyed = self.compressor, hasattr(self.compressor, "state_dict")
        if keyed:
            compressor.load_state_dict({key[len(STATE):]: value for key, value in ctx.state.items()
                                        if key.startswith(STATE)})
        payload, context = compressor.compress(np.ascontiguousarray(x, dtype=np.float64), name=buffer,
                                               step=ctx.round)
        decoded = np.asarray(compressor.decompress(payload, context), dtype=np.float64).reshape(x.shape)
        if keyed:
            for key, value in compressor.state_dict().items():
                ctx.state[STATE + key] = np.array(value, dtype=np.float64)
        return decoded, context.payload_bytes
