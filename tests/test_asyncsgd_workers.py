"""The worker count that the settings' own per-worker data give, and the messages of bad upload and download times.

References outside the code: the length of the lists given, the columns of the trace file written here, the
largest worker of the edge list written here.
"""
import math

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import async_sgd
from mpiopt.core.comm import CollectiveError

SELF = MPI.COMM_SELF


def test_explicit_compute_times_set_the_simulators_worker_count():
    result = async_sgd("quadratic", comm=SELF, runtime="simulator", tau=[1.0, 1.7], max_steps=3)
    assert result.info["n_workers"] == 2 and result.info["tau_means"] == [1.0, 1.7]


def test_upload_times_a_power_trace_and_an_edge_list_set_the_worker_count(tmp_path):
    uploads = async_sgd("quadratic", comm=SELF, method="minibatch", tau="constant", upload=[0.5, 1.0, 2.0],
                        max_steps=2)
    assert uploads.info["n_workers"] == 3 and uploads.info["upload"] == [0.5, 1.0, 2.0]
    trace = tmp_path / "power.csv"
    trace.write_text("time,p1,p2,p3,p4\n0,1,1,1,1\n5,0.5,1,1,2\n")
    traced = async_sgd("quadratic", comm=SELF, method="rennala", tau="constant", power="trace",
                       power_options={"path": str(trace)}, max_steps=2)
    assert traced.info["n_workers"] == 4
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1 0.5\n1 2\n2 4 1.5\n3 4\n")
    listed = async_sgd("quadratic", comm=SELF, method="fragile", tau="constant", graph="edges",
                       graph_options={"path": str(edges)}, max_steps=2)
    assert listed.info["n_workers"] == 5


def test_worker_counts_that_disagree_are_refused_and_n_workers_still_decides():
    with pytest.raises(CollectiveError, match="different worker counts: tau 2, upload 3"):
        async_sgd("quadratic", comm=SELF, method="minibatch", tau=[1.0, 2.0], upload=[1.0, 1.0, 1.0], max_steps=2)
    assert async_sgd("quadratic", comm=SELF, tau=[1.0, 2.0, 3.0], n_workers=2, max_steps=2).info["n_workers"] == 2


@pytest.mark.parametrize("setting", ["upload", "download"])
@pytest.mark.parametrize("bad, worker", [(-1.0, 1), (math.nan, 2), (0.0, 0)])
def test_a_bad_communication_time_names_its_setting_and_its_worker(setting, bad, worker):
    times = [1.0, 2.0, 3.0]
    times[worker] = bad
    with pytest.raises(CollectiveError) as raised:
        async_sgd("quadratic", comm=SELF, method="minibatch", tau="constant", max_steps=2, **{setting: times})
    message = str(raised.value)
    assert f"{setting} times per coordinate must be finite and > 0, got {bad!r} for worker {worker}" in message
    assert "compute times" not in message


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_one_call_with_explicit_times_runs_on_both_runtimes(comm):
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker")
    taus = [1.0 + 0.5 * i for i in range(comm.size - 1)]
    common = dict(problem_options={"dim": 3}, method="minibatch", tau=taus, max_steps=4, stop_at_epsilon=False,
                  step_size=0.1)
    simulated = async_sgd("quadratic", comm=comm, runtime="simulator", **common)
    run = async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.01, **common)
    assert simulated.info["n_workers"] == run.info["n_workers"] == len(taus)
    assert run.steps == simulated.steps == 4
    np.testing.assert_allclose(run.x, simulated.x, rtol=1e-12)
    with pytest.raises(CollectiveError, match=f"times given are for {len(taus) + 1} workers but there are"):
        async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.01, **{**common, "tau": taus + [9.0]})
