"""Recursive-doubling all-reduce, for small messages.

With p a power of two, at step k = 0 .. log2(p) - 1 rank r exchanges its whole
buffer with rank r XOR 2^k and reduces; after log2(p) steps every rank holds
the full reduction.

    p = 4:  step 0: 0<->1, 2<->3     step 1: 0<->2, 1<->3

For other p, the standard fold (Thakur, Rabenseifner and Gropp 2005): with
p' the largest power of two <= p and rem = p - p', each of the first rem even
ranks sends its buffer to the odd rank above it and sits out; the p' ranks left
run recursive doubling; then each folded rank receives the result back.

    T_rd = log2(p') (alpha + n beta + n gamma)  [+ 2 (alpha + n beta) + n gamma when p is not a power of two]

Few messages (latency-bound sizes win), but every step moves the whole buffer.
The lower rank of each pair always puts its own partial first, so the
reduction order is the same on both sides and every rank ends bitwise equal.
"""
from mpi4py import MPI

from .base import Reducer, as_bytes


class RecursiveDoublingReducer(Reducer):
    name = "rd"

    def __init__(self, comm=None, check=True):
        super().__init__(comm, check)
        p = self.size
        self.power = 1 << (p.bit_length() - 1)
        self.remainder = p - self.power

    def _allreduce_inplace(self, buffer, ufunc):
        r, remainder = self.rank, self.remainder
        incoming = self.scratch("rd", buffer.size, buffer.dtype)
        wire_buffer, wire_incoming = [as_bytes(buffer), MPI.BYTE], [as_bytes(incoming), MPI.BYTE]
        # Fold: among ranks 0 .. 2 rem - 1, even ranks hand their data to the odd rank above.
        if r < 2 * remainder:
            if r % 2 == 0:
                self.comm.Send(wire_buffer, r + 1, 10)
                self.comm.Recv(wire_buffer, r + 1, 11)
                return
            self.comm.Recv(wire_incoming, r - 1, 10)
            ufunc(incoming, buffer, out=buffer)
            virtual = r // 2
        else:
            virtual = r - remainder
        mask = 1
        while mask < self.power:
            partner_virtual = virtual ^ mask
            partner = partner_virtual * 2 + 1 if partner_virtual < remainder else partner_virtual + remainder
            self.comm.Sendrecv(wire_buffer, partner, 12, wire_incoming, partner, 12)
            if partner_virtual < virtual:
                ufunc(incoming, buffer, out=buffer)
            else:
                ufunc(buffer, incoming, out=buffer)
            mask <<= 1
        if r < 2 * remainder:
            self.comm.Send(wire_buffer, r - 1, 11)
