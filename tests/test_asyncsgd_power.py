"""computation power that changes in time (the universal computation model, Tyurin ICLR 2025).

References: a piecewise integration written here (walking the pieces one at a time, period after period), the
outage model's definition written out, and Rennala's and Malenia's step times under the model computed by an
event loop of this test's own, against the simulator's history.
"""
import math

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import PowerTrace, async_sgd, get_power_model
from mpiopt.asyncsgd.power import universal_time
from mpiopt.core.comm import CollectiveError

SELF = MPI.COMM_SELF


def reference_finish(times, values, period, start, amount):
    """Walk the pieces from ``start`` until ``amount`` of work is done (the test's own integration)."""
    times, values = list(times), list(values)
    t, left = start, amount
    if left <= 0:
        return start
    for _ in range(100000):
        base = 0.0 if period is None else math.floor(t / period) * period
        within = t - base
        j = max(k for k in range(len(times)) if times[k] <= within + 1e-300)
        end = (times[j + 1] if j + 1 < len(times) else (period if period is not None else math.inf)) + base
        if values[j] > 0 and values[j] * (end - t) >= left:
            return t + left / values[j]
        if end == math.inf:
            return math.inf
        left -= values[j] * (end - t)
        t = end
    return math.inf


TRACES = [([0.0], [2.0], None), ([0.0, 1.5, 4.0], [1.0, 0.0, 0.5], None), ([0.0, 1.0, 3.0], [0.0, 1.0, 2.0], 5.0),
          ([0.0, 2.0], [1.0, 0.0], 3.0), ([0.0, 0.5], [0.25, 3.0], 2.0)]


@pytest.mark.parametrize("times, values, period", TRACES)
def test_a_traces_finishing_times_are_its_integral(times, values, period):
    trace = PowerTrace(times, values, period)
    for start in (0.0, 0.3, 1.5, 2.0, 4.7, 11.1):
        for amount in (0.0, 0.2, 1.0, 2.5, 7.0):
            expected = reference_finish(times, values, period, start, amount)
            assert trace.finish(start, amount) == pytest.approx(expected, rel=1e-12, abs=1e-12)
            if expected < math.inf:
                assert trace.work(expected) - trace.work(start) == pytest.approx(amount, rel=1e-12, abs=1e-12)
    with pytest.raises(ValueError):
        PowerTrace([0.0, 1.0], [1.0, -1.0])
    assert PowerTrace([0.0, 1.0], [1.0, 0.0]).finish(0.5, 1.0) == math.inf


def test_the_outage_model_is_its_definition():
    period, fraction, n = 10.0, 0.4, 5
    traces = get_power_model("outages", period=period, fraction=fraction).traces(n)
    for i, trace in enumerate(traces, 1):
        off_from = (i - 1) * period / n
        for t in np.linspace(0, 3 * period, 301)[:-1] + 0.013:
            offline = (t - off_from) % period < fraction * period
            assert trace.work(t + 1e-3) - trace.work(t) == pytest.approx(0 if offline else 1e-3, abs=1e-12)
    kept = get_power_model("outages", period=period, fraction=fraction, workers=0.4).traces(n)
    assert [t.times.size for t in kept][2:] == [1, 1, 1]  # only the first 40% go off


def step_times(h, traces, batch, steps, rule):
    """The test's own loop: workers restart at every step and finish gradients at their power."""
    n, t, ends = len(h), 0.0, []
    for _ in range(steps):
        counts, nexts = [0] * n, [traces[i].finish(t, h[i]) for i in range(n)]
        while True:
            when = min(nexts)
            i = nexts.index(when)
            counts[i] += 1
            if rule == "rennala":
                done = sum(counts) >= batch
            elif rule == "minibatch":
                done = min(counts) >= 1
            else:
                done = min(counts) >= 1 and n / sum(1 / c for c in counts) >= batch / n
            if done:
                break
            nexts[i] = traces[i].finish(when, h[i])
        t = when
        ends.append(t)
    return ends


@pytest.mark.parametrize("method, rule", [("rennala", "rennala"), ("malenia", "malenia")])
def test_rennala_and_malenia_steps_end_where_the_universal_model_says(method, rule):
    h, n, batch = [1.0, 1.5, 2.0, 3.0], 4, 6
    power = {"period": 7.0, "fraction": 0.5}
    traces = get_power_model("outages", **power).traces(n)
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.1}, method=method, batch=batch,
                       tau=h, n_workers=n, power="outages", power_options=power, max_steps=12, stop_at_epsilon=False)
    expected = step_times(h, traces, batch, 12, rule)
    assert result.history["time"][1:] == pytest.approx(expected, rel=1e-12)
    assert universal_time(traces, h, batch, 12, rule) == pytest.approx(expected[-1], rel=1e-12)
    # against the same workers at full power: the outages cost time
    steady = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.1}, method=method, batch=batch,
                       tau=h, n_workers=n, max_steps=12, stop_at_epsilon=False)
    assert steady.time < result.time
    assert "power outages(period=7, fraction=0.5)" in result.info["timing"]


def test_minibatch_steps_and_the_predicted_times_under_power_follow_the_universal_model():
    """Minibatch waits for one gradient of every worker: its steps end where the test's loop says, and the
    predicted table is the recursion's (K (1 + S/n) such steps; Rennala's K steps of batch ceil(S)), with
    ASGD left without a prediction (the paper proves only the lower bound for it)."""
    h, n = [1.0, 1.5, 2.0, 3.0], 4
    power = {"period": 7.0, "fraction": 0.5}
    traces = get_power_model("outages", **power).traces(n)
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.1}, method="minibatch",
                       tau=h, n_workers=n, power="outages", power_options=power, max_steps=12, stop_at_epsilon=False)
    assert result.history["time"][1:] == pytest.approx(step_times(h, traces, 1, 12, "minibatch"), rel=1e-12)
    info, predicted = result.info["problem"], result.predicted
    K, S = info["L"] * info["Delta"] / result.info["epsilon"], info["sigma2"] / result.info["epsilon"]
    steps_mb, steps_r = math.ceil(K * (1 + S / n) * (1 - 1e-12)), math.ceil(K * (1 - 1e-12))
    assert predicted["minibatch"] == pytest.approx(step_times(h, traces, 1, steps_mb, "minibatch")[-1], rel=1e-12)
    batch = max(1, math.ceil(S * (1 - 1e-12)))
    assert predicted["rennala"] == pytest.approx(step_times(h, traces, batch, steps_r, "rennala")[-1], rel=1e-12)
    assert predicted["asgd"] is None and predicted["asgd/rennala"] is None
    assert predicted["minibatch/rennala"] == pytest.approx(predicted["minibatch"] / predicted["rennala"])
    # the fixed-power table stays beside them: each worker's mean time, the formulas of mpiopt.asyncsgd.theory
    harmonic = n / sum(1 / t for t in h)
    assert predicted["minibatch_fixed_power"] == pytest.approx(max(h) * K * (1 + S / n), rel=1e-12)
    assert predicted["asgd_fixed_power"] == pytest.approx(harmonic * K * (1 + S / n), rel=1e-12)
    assert predicted["minibatch"] > predicted["minibatch_fixed_power"]  # the outages cost time


def test_a_recorded_trace_drives_the_workers(tmp_path):
    path = tmp_path / "power.csv"
    path.write_text("time,p1,p2\n0,1,1\n3,0,2\n6,1,1\n")
    h = [1.0, 1.0]
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": 4}, method="rennala", batch=4, tau=h,
                       n_workers=2, power="trace", power_options={"path": str(path)}, max_steps=3, stop_at_epsilon=False)
    traces = get_power_model("trace", path=str(path)).traces(2)
    assert result.history["time"][1:] == pytest.approx(step_times(h, traces, 4, 3, "rennala"), rel=1e-12)
    with pytest.raises(CollectiveError, match="has the power of 2 workers, the run has 3"):
        async_sgd("quadratic", comm=SELF, method="rennala", n_workers=3, power="trace",
                  power_options={"path": str(path)}, max_steps=2)
    with pytest.raises(CollectiveError, match="power must be None or one of"):
        async_sgd("quadratic", comm=SELF, method="rennala", n_workers=3, power="sunny", max_steps=2)


def test_a_power_run_checkpoints_and_resumes_bit_for_bit(tmp_path):
    common = dict(problem_options={"dim": 6, "noise": 0.5}, method="rennala", batch=3, tau="lognormal", n_workers=5,
                  power="outages", power_options={"period": 9.0}, stop_at_epsilon=False, trace=True, seed=2)
    reference = async_sgd("quadratic", comm=SELF, max_steps=40, **common)
    path = str(tmp_path / "run.npz")
    first = async_sgd("quadratic", comm=SELF, max_steps=17, checkpoint=path, **common)
    assert first.steps == 17
    resumed = async_sgd("quadratic", comm=SELF, max_steps=40, checkpoint=path, **common)
    np.testing.assert_array_equal(resumed.x, reference.x)
    assert resumed.history == reference.history and resumed.info["trace"] == reference.info["trace"]


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
def test_an_outage_on_mpi_ranks_delays_the_worker_as_in_the_simulator(comm):
    """Worker 0 is off for the first 4 units, the others compute: a minibatch step ends at 4 + h = 6."""
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker")
    n = comm.size - 1
    common = dict(problem_options={"dim": 4, "noise": 0.1}, method="minibatch", tau=[2.0] * n, power="outages",
                  power_options={"period": 100.0, "fraction": 0.04}, max_steps=1, stop_at_epsilon=False)
    simulated = async_sgd("quadratic", comm=SELF, n_workers=n, **common)
    assert simulated.time == 6.0
    run = async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.05, **common)
    assert run.steps == 1 and 6.0 <= run.time < 7.0
    np.testing.assert_allclose(run.x, simulated.x, rtol=1e-12)  # the same gradients (added in arrival order)


def test_a_checkpoint_of_a_run_with_power_is_refused_with_another_power(tmp_path):
    path = str(tmp_path / "power.npz")
    common = dict(method="rennala", n_workers=4, tau="sqrt", power="outages", max_gradients=40, checkpoint=path)
    async_sgd("quadratic", comm=MPI.COMM_SELF, power_options={"period": 50.0, "fraction": 0.3}, **common)
    with pytest.raises(CollectiveError, match="belongs to another problem"):
        async_sgd("quadratic", comm=MPI.COMM_SELF, power_options={"period": 50.0, "fraction": 0.6}, **common)
