"""Recursive doubling (all-reduce, all-gather) and recursive halving (reduce-scatter).

All-reduce.  With p a power of two, at step k = 0 .. log2(p) - 1 rank r
exchanges its whole buffer with rank r XOR 2^k and reduces; after log2(p) steps
every rank holds the full reduction.

    p = 4:  step 0: 0<->1, 2<->3     step 1: 0<->2, 1<->3

For other p, the standard fold (Thakur, Rabenseifner and Gropp 2005): with
p' the largest power of two <= p and rem = p - p', each of the first rem even
ranks sends its buffer to the odd rank above it and sits out; the p' ranks left
run recursive doubling as virtual ranks 0 .. p'-1; then each folded rank
receives the result back.

    T_rd = log2(p') (alpha + n beta + n gamma)  [+ 2 (alpha + n beta) + n gamma when p is not a power of two]

Few messages (latency-bound sizes win), but every step moves the whole buffer.
The lower rank of each pair always puts its own partial first, so the
reduction order is the same on both sides and every rank ends bitwise equal.

Reduce-scatter by recursive halving.  Virtual rank v owns the ``offsets``
chunks of the real ranks it stands for (chunks 2v and 2v+1 for a rank that
folded, chunk v + rem otherwise), one contiguous block.  Starting with the
whole buffer, at step k = 1 .. log2(p') rank v exchanges half of its current
range with v XOR p'/2^k: it sends the half holding the partner's blocks,
receives its own half and reduces it, so the range halves each step; at the
end v holds block v fully reduced, and a rank that folded gets its chunk back.

    p = 4, blocks b0..b3:  step 1: 0<->2 (0 keeps b0 b1), 1<->3     step 2: 0<->1 (0 keeps b0), 2<->3

    T_reduce_scatter = log2(p') alpha + (p'-1)/p' n (beta + gamma)  [+ fold: alpha + n (beta + gamma),
                       unfold: alpha + n/p beta]  [+ n c: a working copy]

All-gather by recursive doubling, the inverse: at step k = 0 .. log2(p') - 1
virtual rank v exchanges everything gathered so far (2^k blocks) with
v XOR 2^k; folded ranks first hand their block to the odd rank above them and
get the whole vector back at the end.  Blocks may have any sizes, so this is
also ``allgatherv``:

    T_allgather = log2(p') alpha + (p'-1)/p' n beta  [+ 2 alpha + (n/p + n) beta when p is not a power of two]
"""
import math

import numpy as np
from mpi4py import MPI

from ..core.registry import register
from . import tags
from .base import Reducer, as_bytes, combiner


def wire(array):
    return [as_bytes(array), MPI.BYTE]


@register("reducer", "rd")
class RecursiveDoublingReducer(Reducer):
    name = "rd"

    def __init__(self, comm=None, check=True):
        super().__init__(comm, check)
        p = self.size
        self.power = 1 << (p.bit_length() - 1)
        self.remainder = p - self.power

    @classmethod
    def model(cls, p, nbytes, fitted):
        n = float(nbytes)
        power = 1 << (p.bit_length() - 1)
        steps = int(math.log2(power))
        fold = 0.0 if power == p else 2 * (fitted.alpha + n * fitted.beta) + n * fitted.gamma
        return steps * (fitted.alpha + n * fitted.beta + n * fitted.gamma) + fold

    # -- the fold ----------------------------------------------------------
    def _folded(self):
        """True on the even ranks of the first 2 rem, which sit out the power-of-two part."""
        return self.rank < 2 * self.remainder and self.rank % 2 == 0

    def _virtual(self):
        """This rank's virtual rank in the power-of-two part (the odd rank stands for a folded pair)."""
        return self.rank // 2 if self.rank < 2 * self.remainder else self.rank - self.remainder

    def _real(self, virtual):
        """The rank that runs the power-of-two part as ``virtual``."""
        return virtual * 2 + 1 if virtual < self.remainder else virtual + self.remainder

    def _virtual_bounds(self, bounds):
        """Block boundaries of the virtual ranks, from the boundaries of the real ranks' blocks."""
        first_real = [2 * v if v < self.remainder else v + self.remainder for v in range(self.power)]
        return [bounds[r] for r in first_real] + [bounds[-1]]

    # -- all-reduce --------------------------------------------------------
    def _allreduce_inplace(self, buffer, ufunc):
        r, remainder = self.rank, self.remainder
        ufunc = combiner(ufunc, buffer.dtype)
        incoming = self.scratch("rd", buffer.size, buffer.dtype)
        wire_buffer, wire_incoming = wire(buffer), wire(incoming)
        # Fold: among ranks 0 .. 2 rem - 1, even ranks hand their data to the odd rank above.
        if r < 2 * remainder:
            if r % 2 == 0:
                self.comm.Send(wire_buffer, r + 1, tags.RD_FOLD)
                self.comm.Recv(wire_buffer, r + 1, tags.RD_UNFOLD)
                return
            self.comm.Recv(wire_incoming, r - 1, tags.RD_FOLD)
            ufunc(incoming, buffer, out=buffer)
            virtual = r // 2
        else:
            virtual = r - remainder
        mask = 1
        while mask < self.power:
            partner_virtual = virtual ^ mask
            partner = partner_virtual * 2 + 1 if partner_virtual < remainder else partner_virtual + remainder
            self.comm.Sendrecv(wire_buffer, partner, tags.RD_EXCHANGE, wire_incoming, partner, tags.RD_EXCHANGE)
            if partner_virtual < virtual:
                ufunc(incoming, buffer, out=buffer)
            else:
                ufunc(buffer, incoming, out=buffer)
            mask <<= 1
        if r < 2 * remainder:
            self.comm.Send(wire_buffer, r - 1, tags.RD_UNFOLD)

    # -- reduce-scatter: recursive halving ---------------------------------
    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        r = self.rank
        ufunc = combiner(ufunc, source.dtype)
        mine = slice(bounds[r], bounds[r + 1])
        if self._folded():
            self.comm.Send(wire(source), r + 1, tags.RD_FOLD)
            self.comm.Recv(wire(out), r + 1, tags.RD_UNFOLD)
            return
        work = self.scratch("rd-work", source.size, source.dtype)
        np.copyto(work, source)
        if r < 2 * self.remainder:
            incoming = self.scratch("rd", source.size, source.dtype)
            self.comm.Recv(wire(incoming), r - 1, tags.RD_FOLD)
            ufunc(incoming, work, out=work)
        virtual = self._virtual()
        blocks = self._virtual_bounds(bounds)
        low, high = 0, self.power  # the virtual blocks this rank is still reducing
        mask = self.power >> 1
        while mask:
            partner = self._real(virtual ^ mask)
            middle = low + mask
            keep, give = ((low, middle), (middle, high)) if virtual < middle else ((middle, high), (low, middle))
            kept = work[blocks[keep[0]]:blocks[keep[1]]]
            incoming = self.scratch("rd", kept.size, source.dtype)
            self.comm.Sendrecv(wire(work[blocks[give[0]]:blocks[give[1]]]), partner, tags.RD_HALVING,
                               wire(incoming), partner, tags.RD_HALVING)
            ufunc(kept, incoming, out=kept)
            low, high = keep
            mask >>= 1
        if r < 2 * self.remainder:
            self.comm.Send(wire(work[bounds[r - 1]:bounds[r]]), r - 1, tags.RD_UNFOLD)
        np.copyto(out, work[mine])

    # -- all-gather: recursive doubling ------------------------------------
    def _allgather_into(self, out, bounds):
        r = self.rank
        if self._folded():
            self.comm.Send(wire(out[bounds[r]:bounds[r + 1]]), r + 1, tags.RD_FOLD)
            self.comm.Recv(wire(out), r + 1, tags.RD_UNFOLD)
            return
        if r < 2 * self.remainder:
            self.comm.Recv(wire(out[bounds[r - 1]:bounds[r]]), r - 1, tags.RD_FOLD)
        virtual = self._virtual()
        blocks = self._virtual_bounds(bounds)
        mask = 1
        while mask < self.power:
            partner = self._real(virtual ^ mask)
            low = virtual & ~(mask - 1)  # the aligned run of ``mask`` blocks gathered so far
            partner_low = low ^ mask
            self.comm.Sendrecv(wire(out[blocks[low]:blocks[low + mask]]), partner, tags.RD_GATHER,
                               wire(out[blocks[partner_low]:blocks[partner_low + mask]]), partner, tags.RD_GATHER)
            mask <<= 1
        if r < 2 * self.remainder:
            self.comm.Send(wire(out), r - 1, tags.RD_UNFOLD)
