"""The one rule for splitting n items over p parts: rows over ranks, vector chunks over reducers."""


def row_range(total_rows, rank, size):
    """Items [start, stop) of part ``rank`` when ``total_rows`` are split as evenly as possible.

    The first ``total_rows % size`` parts hold one item more, as numpy.array_split does.
    """
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a communicator of size {size}")
    if total_rows < 0:
        raise ValueError(f"total_rows must be >= 0, got {total_rows}")
    base, extra = divmod(total_rows, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def offsets(total, parts):
    """[0, ..., total]: the boundaries of all ``parts`` ranges of :func:`row_range`."""
    return [row_range(total, part, parts)[0] for part in range(parts)] + [total]
