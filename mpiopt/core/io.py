"""Atomic result files: write to a temporary file in the target folder, then rename.

A reader never sees a half-written file: either the old one or the new one.
Non-finite floats are written as JSON null so the output stays standard JSON.
"""
import json
import math
import os
import tempfile


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    if hasattr(value, "item"):
        return _clean(value.item())
    return value


def to_jsonable(value):
    """Turn numpy scalars/arrays, tuples and non-finite floats into plain JSON values."""
    return _clean(value)


def write_atomic(path, data, mode="w"):
    """Write ``data`` (str or bytes) to ``path`` atomically."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(handle, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(handle, mode) as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_json(path, payload):
    """Write ``payload`` as indented, standard JSON, atomically."""
    write_atomic(path, json.dumps(to_jsonable(payload), indent=2, allow_nan=False) + "\n")
