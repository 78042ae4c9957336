"""Training checkpoints on the core checkpointer (mpiopt.core.checkpoint).

Shared arrays (rank 0's): the parameters (stages 0-2, where every rank holds
them all) and, at stage 0, the optimizer state.  Per rank: the parameter shard
(stage 3), the optimizer state of the rank's shard (stages 1-3, prefixed
``optimizer_``) and the error-feedback residuals of a compressed reducer
(their paths in the reducer's nested state dict, prefixed ``reducer.``: one
residual per bucket, ``reducer.compressor.residuals.bucket3``).  Metadata: the sampler's next step, the optimizer's
step count and hyperparameters, the reducer's counters (its state with the
arrays left out), the histories, the training seconds so far.

The fingerprint pins down what the iterates depend on: the model, the data
(a SHA-256 of X and y), the global batch, the seed and the order, the ZeRO
stage and the bucket size (they fix the shards), the optimizer and every one
of its hyperparameters (``lr``, ``momentum``, ``beta1``, ``eps``, ...: a
resume that changes one is refused, the error naming it with its old and new
value, rather than silently keeping the checkpoint's), the compressor and its
error feedback.  ``epochs``, ``max_steps`` and ``time_limit`` are not in it, so a
run can be resumed to go further.  A resumed run takes exactly the steps an
uninterrupted one would have taken from there, bit for bit.

A GPU run writes the same file: its CuPy arrays are copied to the host
(``to_host``) before writing, and the digest is taken of the host bytes, so a
checkpoint written on a GPU resumes on the CPU and the other way round.
"""
import hashlib

import numpy as np

from ..core.backend import to_host
from ..core.checkpoint import Checkpointer

FORMAT = "mpiopt-train-checkpoint-1"
META = ("sampler", "optimizer", "reducer", "history", "epoch_history", "elapsed")


def train_checkpointer(path, comm, fingerprint):
    return Checkpointer(path, comm, fingerprint, FORMAT, "training")


def data_digest(X, y):
    """SHA-256 of the features and the targets (their bytes, shapes and dtypes)."""
    digest = hashlib.sha256()
    for array in (np.ascontiguousarray(to_host(X)), np.ascontiguousarray(to_host(y))):
        digest.update(f"{array.shape}{array.dtype}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def split_optimizer(state_dict):
    """(plain values, arrays) of an optimizer's state dict."""
    values = {key: value for key, value in state_dict.items() if not isinstance(value, np.ndarray)}
    arrays = {key: value for key, value in state_dict.items() if isinstance(value, np.ndarray)}
    return values, arrays


def split_tree(tree, prefix=""):
    """(the nested dict ``tree`` with its arrays left out, its arrays by dotted path)."""
    plain, arrays = {}, {}
    for key, value in tree.items():
        if isinstance(value, dict):
            plain[key], inner = split_tree(value, f"{prefix}{key}.")
            arrays.update(inner)
        elif isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
            arrays[f"{prefix}{key}"] = to_host(value)
        else:
            plain[key] = value
    return plain, arrays


def join_tree(plain, arrays):
    """The inverse of :func:`split_tree`."""
    tree = {key: join_tree(value, {}) if isinstance(value, dict) else value for key, value in plain.items()}
    for path, value in arrays.items():
        *folders, name = path.split(".")
        node = tree
        for folder in folders:
            node = node.setdefault(folder, {})
        node[name] = value
    return tree


def validate(shared, parts, meta):
    """Rank 0's check that the file holds what a training checkpoint holds."""
    missing = [key for key in META if key not in meta]
    if missing:
        raise ValueError(f"entries {', '.join(missing)} are missing")
    if "params" not in shared and any("params" not in part for part in parts):
        raise ValueError("the parameters are missing")
