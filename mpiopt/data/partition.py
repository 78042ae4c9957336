"""Splitting rows over ranks."""


def row_range(total_rows, rank, size):
    """Rows [start, stop) of ``rank`` when ``total_rows`` are split as evenly as possible.

    The first ``total_rows % size`` ranks hold one row more, as numpy.array_split does.
    """
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a communicator of size {size}")
    if total_rows < 0:
        raise ValueError(f"total_rows must be >= 0, got {total_rows}")
    base, extra = divmod(total_rows, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)
