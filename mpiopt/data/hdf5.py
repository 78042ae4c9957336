"""Read one rank's rows of datasets in an HDF5 file (h5py, the ``hdf5`` extra).

h5py reads a row slice of a dataset as a hyperslab, so each rank reads only
its own rows from disk.
"""
from ..core.comm import check_collectively, resolve_comm
from .partition import row_range


def read_hdf5_rows(path, keys=("A", "b"), comm=None):
    """Each rank reads its even share of the rows of the datasets ``keys``; collective."""
    comm = resolve_comm(comm)
    problem, rows = None, None
    try:
        import h5py
        with h5py.File(path, "r") as handle:
            missing = [key for key in keys if key not in handle]
            if missing:
                problem = f"{path}: no dataset {missing[0]!r} (it holds {', '.join(sorted(handle.keys()))})"
            else:
                counts = {key: handle[key].shape[0] if handle[key].shape else None for key in keys}
                if None in counts.values() or len(set(counts.values())) != 1:
                    problem = f"{path}: datasets {', '.join(keys)} must have the same number of rows, got {counts}"
                rows = counts[keys[0]]
    except ImportError:
        problem = "reading HDF5 needs h5py: pip install 'mpiopt[hdf5]'"
    except OSError as error:
        problem = f"cannot read {path}: {error}"
    check_collectively(comm, problem)
    import h5py
    start, stop = row_range(rows, comm.rank, comm.size)
    with h5py.File(path, "r") as handle:
        return tuple(handle[key][start:stop] for key in keys)
