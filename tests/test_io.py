"""Result files: atomic for regular files, through symlinks, never replacing a device or a FIFO."""
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
from mpi4py import MPI

from conftest import gather_messages
from mpiopt.core import CollectiveError
from mpiopt.core.io import check_writable, write_atomic, write_json


def test_write_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    (tmp_path / "real.json").write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    write_json(link, {"answer": 42})
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert json.loads((tmp_path / "real.json").read_text()) == {"answer": 42}


def test_write_through_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "sub" / "new.json")
    write_atomic(link, "text")
    assert link.is_symlink() and (tmp_path / "sub" / "new.json").read_text() == "text"


def test_write_into_a_character_device_keeps_the_device(tmp_path):
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of our own
    except PermissionError:
        pytest.skip("making a device node needs root")
    write_json(device, {"x": 1})
    link = tmp_path / "link"
    link.symlink_to(device)
    write_atomic(link, "through a link")
    assert stat.S_ISCHR(os.stat(device).st_mode), "the device was replaced by a regular file"
    assert link.is_symlink()
    check_writable([str(device), str(link)], MPI.COMM_SELF)  # a writable device is a fine output


def test_write_into_a_fifo_writes_the_reader_and_keeps_the_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo).read()))
    reader.start()
    write_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_write_keeps_an_existing_file_permissions(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("{}")
    os.chmod(path, 0o640)
    write_json(path, {"a": 1})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_write_into_a_folder_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path, "x")


def test_a_temporary_left_by_a_killed_writer_is_removed_at_the_next_write(tmp_path):
    target = tmp_path / "result.json"
    script = (
        "import os, sys, time\n"
        "import mpiopt.core.io as io\n"
        "def stall(*args):\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(60)\n"
        "io.os.replace = stall\n"
        f"io.write_atomic({str(target)!r}, 'x' * 100000)\n")
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        os.kill(writer.pid, signal.SIGKILL)  # killed mid-write, between the temporary and the rename
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    strays = [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]
    assert len(strays) == 1, strays
    old_style = tmp_path / ".tmp-abcd1234result.json"  # an older mpiopt's temporary, a day old
    old_style.write_text("stale")
    os.utime(old_style, (time.time() - 86400, time.time() - 86400))
    live = tmp_path / f".tmp-{os.getpid()}@{os.uname().nodename}-abcd1234-result.json"  # a writer still running
    live.write_text("in progress")
    other = tmp_path / f".tmp-{writer.pid}@{os.uname().nodename}-abcd1234-other.json"  # another file's temporary
    other.write_text("not ours")
    write_json(target, {"ok": True})
    left = sorted(name for name in os.listdir(tmp_path) if name.startswith(".tmp-"))
    assert left == sorted([live.name, other.name])
    assert json.loads(target.read_text()) == {"ok": True}


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_check_writable_raises_the_same_error_on_every_rank(comm, tmp_path_factory):
    folder = comm.bcast(str(tmp_path_factory.mktemp("writable")) if comm.rank == 0 else None)
    if comm.rank == 0:
        with open(os.path.join(folder, "file"), "w") as stream:
            stream.write("x")
    comm.Barrier()
    check_writable([os.path.join(folder, "new", "deeper", "out.json"), None], comm)
    assert not os.path.exists(os.path.join(folder, "new")), "the check must not create anything"
    for path, reason in [(os.path.join(folder, "file", "out.json"), "is not a folder"),
                         (folder, "is a folder")]:
        error = None
        try:
            check_writable(path, comm)
        except CollectiveError as caught:
            error = caught
        messages = gather_messages(comm, error)
        assert error is not None and len(set(messages)) == 1, messages
        assert f"cannot write output {path}" in str(error) and reason in str(error)
