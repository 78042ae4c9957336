"""Read one rank's rows of arrays stored in an ``.npz`` file, without loading the rest.

An ``.npz`` is a zip of ``.npy`` members.  For each member we parse the ``.npy``
header, seek to the first wanted row and read only rows [start, stop): one
contiguous read for C order, one per column for Fortran order.  Uncompressed
members (``numpy.savez``) seek directly; compressed ones (``savez_compressed``)
are decompressed up to the wanted rows but never held whole in memory.
Object arrays are refused: nothing here unpickles.
"""
import zipfile

import numpy as np
from numpy.lib import format as npy_format

from ..core.comm import check_collectively, resolve_comm
from .partition import row_range


def _open_member(archive, key):
    name = f"{key}.npy"
    if name not in archive.namelist():
        keys = sorted(n[:-4] for n in archive.namelist() if n.endswith(".npy"))
        raise ValueError(f"no array {key!r} in the file (it holds {', '.join(keys) or 'none'})")
    stream = archive.open(name)
    version = npy_format.read_magic(stream)
    read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
    shape, fortran_order, dtype = read_header(stream)
    if dtype.hasobject:
        raise ValueError(f"array {key!r} has object dtype; only numeric arrays can be read (no pickle)")
    return stream, shape, fortran_order, dtype


def npz_shapes(path, keys):
    """Shapes of the named arrays in ``path``, read from the headers only."""
    with zipfile.ZipFile(path) as archive:
        shapes = {}
        for key in keys:
            stream, shape, _, _ = _open_member(archive, key)
            stream.close()
            shapes[key] = shape
        return shapes


def _read_rows(archive, key, start, stop):
    stream, shape, fortran_order, dtype = _open_member(archive, key)
    with stream:
        data_offset = stream.tell()
        rows = stop - start
        inner = shape[1:]
        row_items = int(np.prod(inner, dtype=np.int64))
        if not fortran_order or len(shape) == 1:
            stream.seek(data_offset + start * row_items * dtype.itemsize)
            raw = stream.read(rows * row_items * dtype.itemsize)
            return np.frombuffer(raw, dtype=dtype).reshape((rows,) + inner).copy()
        if len(shape) != 2:
            raise ValueError(f"array {key!r}: Fortran-ordered arrays of more than 2 dimensions are not supported")
        out = np.empty((rows, shape[1]), dtype=dtype)
        for column in range(shape[1]):
            stream.seek(data_offset + (column * shape[0] + start) * dtype.itemsize)
            out[:, column] = np.frombuffer(stream.read(rows * dtype.itemsize), dtype=dtype)
        return out


def read_npz_rows(path, keys=("A", "b"), comm=None):
    """Each rank reads its own even share of the rows of the arrays ``keys``.

    Returns a tuple of arrays in the order of ``keys``.  All arrays must have
    the same number of rows; any problem (missing file or key, object dtype,
    row counts that disagree) raises the same error on every rank.
    """
    comm = resolve_comm(comm)
    problem, shapes = None, None
    try:
        shapes = npz_shapes(path, keys)
        row_counts = {key: shape[0] if shape else None for key, shape in shapes.items()}
        if None in row_counts.values() or len(set(row_counts.values())) != 1:
            problem = f"{path}: arrays {', '.join(keys)} must have the same number of rows, got {row_counts}"
    except zipfile.BadZipFile as error:
        problem = f"cannot read {path}: it is not an .npz archive of numpy arrays ({error})"
    except (OSError, ValueError) as error:
        problem = f"cannot read {path}: {error}"
    check_collectively(comm, problem)

    start, stop = row_range(shapes[keys[0]][0], comm.rank, comm.size)
    return read_npz_range(path, keys, start, stop)


def read_npz_range(path, keys, start, stop):
    """Rows [start, stop) of each array ``keys`` in ``path`` (one process, no communication)."""
    with zipfile.ZipFile(path) as archive:
        return tuple(_read_rows(archive, key, start, stop) for key in keys)
