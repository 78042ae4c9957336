"""Read one rank's rows of an svmlight / LIBSVM text file.

Format, one row per line: ``<label> [qid:<id>] <index>:<value> ...`` with
``#`` comments.  The file is cut into p byte ranges; each rank reads only its
range, starting at the first line that begins inside it and finishing the line
that straddles its end (the splits of Hadoop's text input), so rows per rank
are near-even for lines of similar length and no rank reads the whole file.
The number of columns is the largest index over all ranks (or ``n_features``);
indices are one-based unless some rank finds a 0 (``zero_based="auto"``, as
scikit-learn's load_svmlight_file).  Returns a CSR matrix and the labels.
"""
import os

import numpy as np
from mpi4py import MPI

from ..core.comm import check_collectively, resolve_comm


def _byte_range(size, rank, parts):
    return size * rank // parts, size * (rank + 1) // parts


def _read_lines(path, start, stop):
    """The complete lines that begin in [start, stop)."""
    with open(path, "rb") as stream:
        if start > 0:
            stream.seek(start - 1)
            if stream.read(1) != b"\n":
                stream.readline()  # the line straddling ``start`` belongs to the previous rank
        lines = []
        while stream.tell() < stop:
            line = stream.readline()
            if not line:
                break
            lines.append(line)
        return lines


def _parse(lines, path):
    labels, indptr, indices, values = [], [0], [], []
    for number, raw in enumerate(lines):
        text = raw.split(b"#", 1)[0].strip()
        if not text:
            continue
        tokens = text.split()
        try:
            labels.append(float(tokens[0]))
            for token in tokens[1:]:
                key, value = token.split(b":", 1)
                if key == b"qid":
                    continue
                indices.append(int(key))
                values.append(float(value))
        except ValueError as error:
            raise ValueError(f"{path}: cannot parse line {raw[:60]!r}: {error}") from None
        indptr.append(len(indices))
    return (np.asarray(labels, dtype=np.float64), np.asarray(indptr, dtype=np.int64),
            np.asarray(indices, dtype=np.int64), np.asarray(values, dtype=np.float64))


def read_svmlight_rows(path, comm=None, n_features=None, zero_based="auto"):
    """This rank's rows of ``path`` as (CSR matrix, labels); collective."""
    comm = resolve_comm(comm)
    problem, parsed = None, None
    try:
        size = os.path.getsize(path)
        parsed = _parse(_read_lines(path, *_byte_range(size, comm.rank, comm.size)), path)
    except (OSError, ValueError) as error:
        problem = str(error) if isinstance(error, ValueError) else f"cannot read {path}: {error}"
    check_collectively(comm, problem, {"n_features": n_features, "zero_based": zero_based})
    labels, indptr, indices, values = parsed
    smallest = comm.allreduce(int(indices.min()) if indices.size else 1 << 62, op=MPI.MIN)
    largest = comm.allreduce(int(indices.max()) if indices.size else -1, op=MPI.MAX)
    offset = 0 if (zero_based is True or (zero_based == "auto" and smallest == 0)) else 1
    columns = max(largest - offset + 1, 0)
    problem = None
    if smallest - offset < 0:
        problem = f"{path}: index 0 found but zero_based=False"
    elif n_features is not None and columns > n_features:
        problem = f"{path}: index {largest} needs {columns} columns, more than n_features={n_features}"
    check_collectively(comm, problem)
    import scipy.sparse  # here, not at the top: a quarter of a second that only reading these files needs
    matrix = scipy.sparse.csr_matrix((values, indices - offset, indptr),
                                     shape=(labels.size, n_features or columns))
    return matrix, labels
