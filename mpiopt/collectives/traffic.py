"""Bytes on the wire: what one rank sends and receives in the ring's collectives.

Every reducer counts the bytes of its operations by these formulas
(:attr:`~mpiopt.collectives.base.Reducer.last_bytes_sent`): exact for the ring
reducers (``ring``, ``ring-seg``), whose steps they follow, and a model for the
others (MPI's own algorithms do not say what they send).  The chunks are those
of :func:`mpiopt.core.partition.offsets`: rank r's chunk of n elements over p
ranks has n // p elements, one more for the first n % p ranks.

All-reduce (reduce-scatter, then all-gather): at step s rank r sends chunk
r - s - 1 and then chunk r - s, so over the p - 1 steps of each half it sends
every chunk but its own and every chunk but its right neighbour's, and
receives every chunk but its left neighbour's and every chunk but its own:

    sent = 2 n - c(r) - c(r + 1)        received = 2 n - c(r - 1) - c(r)     (elements; indices mod p)
"""


def _chunk(count, p, index):
    """Elements in chunk ``index`` (mod p) of ``count`` split over ``p`` ranks (``offsets``)."""
    base, extra = divmod(count, p)
    return base + (index % p < extra)


def ring_allreduce_bytes(count, itemsize, p, rank):
    """(sent, received) bytes of rank ``rank`` in the ring all-reduce of ``count`` elements."""
    if p == 1 or count == 0:
        return 0, 0
    sent = 2 * count - _chunk(count, p, rank) - _chunk(count, p, rank + 1)
    received = 2 * count - _chunk(count, p, rank - 1) - _chunk(count, p, rank)
    return sent * itemsize, received * itemsize


def ring_allgather_bytes(block_bytes, rank):
    """(sent, received) bytes of rank ``rank`` in the ring all-gather of blocks of ``block_bytes``: every
    block but its right neighbour's goes out, every block but its own comes in."""
    p = len(block_bytes)
    if p == 1 or sum(block_bytes) == 0:
        return 0, 0
    total = sum(block_bytes)
    return total - block_bytes[(rank + 1) % p], total - block_bytes[rank]


def ring_reduce_scatter_bytes(count, itemsize, p, rank):
    """(sent, received) bytes of rank ``rank`` in the ring reduce-scatter of ``count`` elements: the
    all-reduce's first half, every chunk but its own out, every chunk but its left neighbour's in."""
    if p == 1 or count == 0:
        return 0, 0
    return (count - _chunk(count, p, rank)) * itemsize, (count - _chunk(count, p, rank - 1)) * itemsize
