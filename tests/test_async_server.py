"""AsyncParameterServer: workers that end without close(), the idle timeout, and the cost of waiting."""
import json
import math
import re
import time

import numpy as np
import pytest
from mpi4py import MPI

from conftest import run_mpi
from mpiopt.collectives import AsyncParameterServer
from mpiopt.collectives.async_server import TAG_DONE, ParameterServerTimeout

pytestmark = pytest.mark.many_ranks  # the servers' bookkeeping grows with the number of workers

# Rank 0 serves twice.  First every worker leaves a `with` block without calling close(); then rank 1
# returns through sys.exit(0) and rank 2 drops its object and keeps running until the server is done, so
# its DONE can only come from the collected object.  A rank stuck for 20 s dumps its stack and exits.
WORKERS_WITHOUT_CLOSE = """
import faulthandler, gc, json, sys
import numpy as np
from mpi4py import MPI
from mpiopt.collectives import AsyncParameterServer

faulthandler.dump_traceback_later(20, exit=True)
world = MPI.COMM_WORLD

with AsyncParameterServer(4, comm=world) as ps:
    if ps.is_server:
        model = np.zeros(4)
        stats = ps.serve(model)
        print(json.dumps({"with": {"pushes": stats["pushes"], "model": model.tolist()}}), flush=True)
    else:
        for _ in range(world.rank):
            model, version = ps.pull()
            ps.push(np.ones(4), version)
ps.free()

ps = AsyncParameterServer(4, comm=world)
if world.rank == 0:
    model = np.zeros(4)
    stats = ps.serve(model)
    print(json.dumps({"exit and collect": {"pushes": stats["pushes"], "model": model.tolist()}}), flush=True)
    world.send("served", dest=2)
elif world.rank == 1:
    for _ in range(3):
        model, version = ps.pull()
        ps.push(np.ones(4), version)
    sys.exit(0)
else:
    model, version = ps.pull()
    ps.push(np.full(4, 2.0), version)
    del ps
    gc.collect()
    assert world.recv(source=0) == "served"
"""


@pytest.mark.timeout(60)
def test_workers_that_leave_a_with_block_exit_or_drop_the_object_without_close_release_the_server(tmp_path):
    script = tmp_path / "workers_without_close.py"
    script.write_text(WORKERS_WITHOUT_CLOSE)
    completed = run_mpi(3, str(script), timeout=45)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    runs = {}
    for line in completed.stdout.splitlines():
        runs.update(json.loads(line))
    assert runs == {"with": {"pushes": {"1": 1, "2": 2}, "model": [3.0] * 4},
                    "exit and collect": {"pushes": {"1": 3, "2": 1}, "model": [5.0] * 4}}


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_worker_sends_done_exactly_once_whatever_closes_it(comm):
    server = comm.size - 1
    with AsyncParameterServer(3, comm=comm, server=server) as ps:
        if ps.is_server:
            model = np.zeros(3)
            stats = ps.serve(model, idle_timeout=20)
        else:
            model, version = ps.pull()
            ps.push(np.ones(3), version)
            ps.close()
            ps.close()
    if ps.is_server:
        assert stats["pushes"] == {worker: 1 for worker in range(comm.size - 1)}
        assert np.array_equal(model, np.full(3, comm.size - 1.0))
    else:
        assert ps.closed
        with pytest.raises(RuntimeError, match=f"rank {comm.rank}: this worker has closed"):
            ps.push(np.ones(3))
        ps.free()
        del ps
    comm.Barrier()  # every worker has closed, left the block, freed and dropped its object
    if comm.rank == server:
        stray = False
        deadline = time.monotonic() + 0.2
        while not stray and time.monotonic() < deadline:
            stray = ps.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
        assert not stray, "a worker sent a second DONE"
        ps.free()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_idle_timeout_names_the_worker_that_never_closed_and_keeps_the_statistics(comm):
    silent = comm.size - 1
    ps = AsyncParameterServer(2, comm=comm, server=0)
    if ps.is_server:
        started = time.monotonic()
        with pytest.raises(ParameterServerTimeout) as caught:
            ps.serve(np.zeros(2), idle_timeout=0.5)
        assert 0.5 <= time.monotonic() - started < 10
        error = caught.value
        assert isinstance(error, TimeoutError)
        assert str(error) == f"parameter server on rank 0: no message for 0.5 s; worker {silent} never closed"
        assert error.silent_workers == [silent]
        assert error.stats["pushes"] == {worker: 1 for worker in range(1, comm.size)}
        assert error.stats["version"] == comm.size - 1
    else:
        ps.push(np.ones(2))
        if comm.rank != silent:
            ps.close()
    comm.Barrier()  # the silent worker stays alive, without closing, until the server has given up
    if comm.rank == silent:
        ps.close()
    if ps.is_server:
        ps.comm.Recv([np.empty(0, np.uint8), MPI.BYTE], silent, TAG_DONE)  # leave no message behind
    ps.free()


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_serve_waits_without_burning_a_core_while_the_workers_are_quiet(comm):
    ps = AsyncParameterServer(2, comm=comm)
    comm.Barrier()
    if ps.is_server:
        wall, cpu = time.perf_counter(), time.process_time()
        stats = ps.serve(np.zeros(2))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert stats["version"] == comm.size - 1
        assert wall >= 1.4
        assert cpu < 0.4 * wall, f"serve used {cpu:.2f} s of CPU in {wall:.2f} s while waiting"
    else:
        time.sleep(1.5)
        ps.push(np.ones(2))
        ps.close()
    ps.free()


@pytest.mark.parametrize("idle_timeout", [0, -1.0, math.nan, math.inf, "1", True])
def test_serve_rejects_an_idle_timeout_that_is_not_a_positive_finite_number(idle_timeout):
    ps = AsyncParameterServer(2, comm=MPI.COMM_SELF)
    expected = f"idle_timeout must be None or a positive, finite number of seconds, got {idle_timeout!r}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        ps.serve(np.zeros(2), idle_timeout=idle_timeout)
    ps.free()
