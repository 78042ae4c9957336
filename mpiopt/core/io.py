"""Result files: written atomically, through symbolic links, never over a device.

:func:`write_atomic` writes a regular file by way of a temporary file in the
target's folder and a rename, so a reader sees the old file or the new one,
never half of one.  It first follows symbolic links to their target (the link
stays a link), and anything that exists and is not a regular file (a character
device such as ``/dev/null``, a FIFO) is written directly: renaming over it
would replace the device with a file.  A temporary left behind by a process
that was killed mid-write is removed at the next write to the same file.

:func:`check_writable` tells, before long work starts, whether a path can be
written this way, without touching the path; collectively, so that every rank
raises the same error.  Non-finite floats are written as JSON null so the
output stays standard JSON.
"""
import json
import math
import os
import re
import socket
import stat
import tempfile
import time

from .comm import check_collectively, resolve_comm

STALE_SECONDS = 3600  # a temporary this old is stale whoever wrote it (a writer on another node)


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


def _stat(path):
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # no such file (or a file where a folder should be)
        return None


def _temporary_prefix():
    return f".tmp-{os.getpid()}@{socket.gethostname()}-"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder, name):
    """Remove temporaries of ``folder/name`` left by writers that died (same host, process gone) or are old."""
    pattern = re.compile(r"\.tmp-(?:(\d+)@(.*)-[a-z0-9_]{8}-|[a-z0-9_]{8})" + re.escape(name))
    host, now = socket.gethostname(), time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if not match or not entry.is_file(follow_symlinks=False):
            continue
        pid, writer_host = match.group(1), match.group(2)
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > STALE_SECONDS
            dead = pid is not None and writer_host == host and not _pid_alive(int(pid))
            if old or dead:
                os.unlink(entry.path)
        except OSError:
            pass  # another writer removed it, or we may not: leave it


def write_atomic(path, data, mode="w"):
    """Write ``data`` (str, or bytes with mode "wb") to ``path``; see the module docstring."""
    target = os.path.realpath(os.fspath(path))
    existing = _stat(target)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise IsADirectoryError(f"{path} is a folder")
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with open(target, mode) as stream:  # a device or a FIFO: write into it, never replace it
            stream.write(data)
        return
    folder, name = os.path.split(target)
    os.makedirs(folder, exist_ok=True)
    remove_stale_temporaries(folder, name)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=_temporary_prefix(), suffix="-" + name)
    if existing is not None:
        permissions = stat.S_IMODE(existing.st_mode)  # replacing a file keeps its permissions
    else:
        umask = os.umask(0)
        os.umask(umask)
        permissions = 0o666 & ~umask  # mkstemp makes 0600; give a new file the usual permissions
    try:
        os.fchmod(handle, permissions)
        with os.fdopen(handle, mode) as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_json(path, payload):
    """Write ``payload`` as indented, standard JSON, atomically."""
    write_atomic(path, json.dumps(to_jsonable(payload), indent=2, allow_nan=False) + "\n")


def writable_problem(path):
    """Why :func:`write_atomic` could not write ``path`` (a message), or None; ``path`` is not touched.

    A new file needs a folder in which a file can be created (missing folders
    are created by the write, so the nearest existing one is tried); a device
    or FIFO needs write permission.  The test creates and removes a temporary
    file, which also catches read-only file systems and root-owned folders.
    """
    try:
        return _writable_problem(os.fspath(path))
    except OSError as error:  # a link loop, a path too long, ...
        return error.strerror or str(error)


def _writable_problem(path):
    target = os.path.realpath(path)
    existing = _stat(target)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        return f"{path} is a folder"
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        return None if os.access(target, os.W_OK) else f"{path}: permission denied"
    folder = os.path.dirname(target)
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=_temporary_prefix(), suffix="-write-test")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        return f"cannot create a file in {folder}: {error.strerror or error}"
    return None


def check_writable(paths, comm=None, what="output", root=0):
    """Collective: raise the same CollectiveError on every rank unless rank ``root`` can write each path.

    ``paths`` is a path or a list of them (None entries are skipped).  Call it
    before long work, so that a run does not compute for minutes and then lose
    its result.
    """
    comm = resolve_comm(comm)
    if paths is None or isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    problem = None
    if comm.rank == root:
        for path in paths:
            reason = writable_problem(path) if path is not None else None
            if reason:
                problem = f"cannot write {what} {os.fspath(path)}: {reason}"
                break
    check_collectively(comm, problem)
