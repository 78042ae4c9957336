"""One entry point for per-rank data: pick the reader by file type, and split a file into shards.

``load_rows(path, comm)`` returns this rank's (A, b):

* ``.npz``: arrays A and b, each rank reading only its rows (``npz.py``);
* ``.h5`` / ``.hdf5``: datasets A and b (``hdf5.py``, needs h5py);
* ``.svm``, ``.svmlight``, ``.libsvm``, ``.txt``: svmlight text, CSR rows (``svmlight.py``);
* a folder made by ``split_file``: rank r loads ``shard-r-of-p.npz`` (the
  folder must have been split for this rank count).

``split_file(path, parts, folder)`` writes one ``.npz`` shard per rank (dense
A, or the CSR parts data/indices/indptr/shape for svmlight input), each
written atomically.
"""
import io
import os

import numpy as np

from ..core.comm import check_collectively, resolve_comm
from ..core.io import write_atomic
from .hdf5 import read_hdf5_rows
from .npz import read_npz_range, read_npz_rows
from .partition import row_range
from .svmlight import read_svmlight_rows

SVMLIGHT = (".svm", ".svmlight", ".libsvm", ".txt")
HDF5 = (".h5", ".hdf5")
FORMATS = ("an .npz file (arrays A and b), an .h5/.hdf5 file (datasets A and b), svmlight text "
           "(.svm, .svmlight, .libsvm, .txt) or a folder of shards made by mpiopt.data.split_file")


def shard_name(rank, parts):
    return f"shard-{rank}-of-{parts}.npz"


def load_rows(path, comm=None, keys=("A", "b")):
    """This rank's rows (A, b) of a file or of a folder of shards; collective."""
    comm = resolve_comm(comm)
    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    if os.path.isdir(path):
        shard = os.path.join(path, shard_name(comm.rank, comm.size))
        problem = None if os.path.exists(shard) else (
            f"{path} has no {shard_name(comm.rank, comm.size)}: it was not split for {comm.size} ranks")
        check_collectively(comm, problem)
        return _read_shard(shard)
    if extension in SVMLIGHT:
        return read_svmlight_rows(path, comm)
    if extension in HDF5:
        return read_hdf5_rows(path, keys, comm)
    if extension != ".npz":
        kind = f"files ending in {extension}" if extension else "files without an extension"
        check_collectively(comm, f"cannot read {path}: {kind} are not a data format of mpiopt; it reads {FORMATS}")
    return read_npz_rows(path, keys, comm)


def _read_shard(path):
    with np.load(path, allow_pickle=False) as stored:
        if "A" in stored.files:
            return stored["A"], stored["b"]
        import scipy.sparse  # here, not at the top: a quarter of a second that only sparse data needs
        matrix = scipy.sparse.csr_matrix((stored["data"], stored["indices"], stored["indptr"]),
                                         shape=tuple(stored["shape"]))
        return matrix, stored["b"]


def split_file(path, parts, folder, keys=("A", "b")):
    """Write ``parts`` per-rank shards of ``path`` into ``folder``; returns their paths (one process)."""
    import scipy.sparse  # here, not at the top: a quarter of a second that a run reading dense rows never needs
    from mpi4py import MPI
    path = os.fspath(path)
    extension = os.path.splitext(path)[1].lower()
    if extension in SVMLIGHT:
        A, b = read_svmlight_rows(path, MPI.COMM_SELF)
    elif extension in HDF5:
        A, b = read_hdf5_rows(path, keys, MPI.COMM_SELF)
    else:
        A, b = None, None
        from .npz import npz_shapes
        rows = npz_shapes(path, keys)[keys[0]][0]
    os.makedirs(folder, exist_ok=True)
    written = []
    total = A.shape[0] if A is not None else rows
    for rank in range(parts):
        start, stop = row_range(total, rank, parts)
        if A is None:
            part_A, part_b = read_npz_range(path, keys, start, stop)
        else:
            part_A, part_b = A[start:stop], b[start:stop]
        buffer = io.BytesIO()
        if scipy.sparse.issparse(part_A):
            part_A = part_A.tocsr()
            np.savez(buffer, data=part_A.data, indices=part_A.indices, indptr=part_A.indptr,
                     shape=np.array(part_A.shape), b=part_b)
        else:
            np.savez(buffer, A=part_A, b=part_b)
        target = os.path.join(folder, shard_name(rank, parts))
        write_atomic(target, buffer.getvalue(), mode="wb")
        written.append(target)
    return written
