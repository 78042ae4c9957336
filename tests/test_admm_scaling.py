"""The scaling model of consensus ADMM (mpiopt.admm.scaling) and its benchmark's quick mode."""
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpiopt.admm import scaling

ROOT = Path(__file__).resolve().parent.parent
NET = scaling.Network(alpha=2e-6, beta=1e-10, gamma_red=3e-11, copy=2e-11)
COMPUTE = scaling.Compute(gamma_flop=2e-11, gamma_chol=2.5e-11, gamma_mem=3.5e-11, gamma_trsv=2e-11,
                          gamma_vec=5e-12, delta=2e-4, delta_gap=5e-5, x_call=3e-5, comm_call=1e-5,
                          delta_solve=2e-4)


def test_module_imports_no_mpi():
    """scaling.py itself imports only the standard library and numpy (loaded alone, outside the package)."""
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('scaling', r'{ROOT / 'mpiopt' / 'admm' / 'scaling.py'}')\n"
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported'\n"
            "print(module.allreduce_time(4, 1000, module.Network(1e-6, 1e-9)))\n")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr


def test_full_phase_counts_by_hand():
    m, n, p = 100000, 1000, 4
    w = scaling.full_phases(m, n, p)
    mi = 25000
    assert w["shard"] == "tall"
    assert w["setup"].gram_flops == mi * n * n
    assert w["setup"].chol_flops == pytest.approx(n ** 3 / 3)
    assert w["setup"].mem_bytes == 4 * 8 * mi * n
    assert w["setup"].square_bytes == 8 * mi * n
    it = w["iteration"]
    assert it.trsv_flops == 2 * n * n and it.trsv_bytes == 8 * n * n
    assert it.allreduces == ((n, "auto"), (5, "auto"))
    assert it.deltas == 1.0
    assert w["gap"].mem_bytes == 8 * n * n and w["gap"].allreduces == ((n + 3, "mpi"),)
    assert w["refactor"].chol_flops == pytest.approx(n ** 3 / 3)


def test_wide_shard_counts_by_hand():
    m, n, p = 1000, 500, 4  # 250 rows a rank < 500 columns
    w = scaling.full_phases(m, n, p)
    assert w["shard"] == "wide"
    assert w["setup"].gram_flops == 250 * 250 * 500
    assert w["setup"].chol_flops == pytest.approx(250 ** 3 / 3)
    assert w["iteration"].trsv_bytes == 8 * 250 * 250
    assert w["iteration"].mem_bytes == 2 * 8 * 250 * 500


def test_working_set_counts_by_hand():
    m, n, p = 10000, 2000, 2
    mi = 5000
    w = scaling.working_set_phases(m, n, p, [10, 30])
    # gap passes: before each outer iteration and at the end, each reading A and the working set's columns
    assert w["gap"].mem_bytes == 8 * mi * n * 3 + 8 * mi * (0 + 10 + 30)
    assert len(w["gap"].allreduces) == 3 and w["gap"].delta_gaps == 3
    # new columns: 10 then 20; Gram products 2 m_i |C| |N| + m_i |N|^2
    assert w["gather"].gram_flops == (mi * 10 * 10) + (2 * mi * 10 * 20 + mi * 20 * 20)
    assert w["gather"].mem_bytes == 2 * 8 * mi * 30
    assert w["factor"].chol_flops == pytest.approx((10 ** 3 + 30 ** 3) / 3)
    inner = w["inner"](30)
    assert inner.trsv_flops == 2 * 900 and inner.allreduces == ((30, "auto"), (5, "auto"))


def test_allreduce_limits():
    net = scaling.Network(alpha=1e-6, beta=1e-9)
    for reducer in ("mpi", "rd", "ring", "hier", "auto"):
        assert scaling.allreduce_time(1, 10 ** 6, net, reducer) == 0.0
    # tiny messages: latency only, log2 p rounds for recursive doubling
    assert scaling.allreduce_time(8, 1, scaling.Network(1e-6, 0.0), "mpi") == pytest.approx(3e-6)
    # large messages, Rabenseifner: 2 log2 p alpha + 2 (p-1)/p n beta -> 2 n beta as p grows
    k = 10 ** 6
    big = scaling.allreduce_time(1024, k, scaling.Network(0.0, 1e-9), "mpi")
    assert big == pytest.approx(2 * 1023 / 1024 * 8 * k * 1e-9)
    assert scaling.allreduce_time(1024, k, scaling.Network(1e-6, 0.0), "mpi") == pytest.approx(20e-6)
    # ring: 2 (p-1) alpha
    assert scaling.allreduce_time(16, k, scaling.Network(1e-6, 0.0), "ring") == pytest.approx(30e-6)
    # the times grow with p and with the size
    times = [scaling.allreduce_time(p, 1000, net, "auto") for p in scaling.RANKS[1:]]
    assert all(a <= b for a, b in zip(times, times[1:]))
    sizes = [scaling.allreduce_time(64, k, net, "mpi") for k in (1, 100, 10 ** 4, 10 ** 6)]
    assert all(a < b for a, b in zip(sizes, sizes[1:]))


def test_auto_switches_like_the_reducer():
    net = scaling.Network(1e-6, 1e-10, 1e-11, 1e-11, ranks_per_node=0)
    small = 64 * 1024 // 8 - 1
    assert scaling.allreduce_time(4, small, net, "auto") == scaling.allreduce_time(4, small, net, "mpi")
    assert scaling.allreduce_time(4, small + 1, net, "auto") == scaling.allreduce_time(4, small + 1, net, "hier")
    spread = scaling.Network(1e-6, 1e-10, 1e-11, 1e-11, ranks_per_node=1)  # one rank a node: the ring
    assert scaling.allreduce_time(4, small + 1, spread, "auto") == scaling.allreduce_time(4, small + 1, spread, "ring")


def test_formulas_match_the_reducers_models():
    """The mirrored formulas equal mpiopt.collectives' own models (ring, rd, hier, auto's large path)."""
    from mpiopt.collectives.hierarchical import HierarchicalReducer
    from mpiopt.collectives.recursive_doubling import RecursiveDoublingReducer
    from mpiopt.collectives.ring import RingReducer
    from mpiopt.collectives.models import Fitted
    for p in (2, 3, 4, 6, 8, 64):
        for nbytes in (8, 8000, 800000):
            fitted = Fitted(2e-6, 1e-10, 3e-11, 2e-11, nodes=1)
            net = scaling.Network(2e-6, 1e-10, 3e-11, 2e-11, ranks_per_node=0)
            assert scaling.ring_time(p, nbytes, net) == pytest.approx(RingReducer.model(p, nbytes, fitted))
            assert scaling.recursive_doubling_time(p, nbytes, net) == pytest.approx(
                RecursiveDoublingReducer.model(p, nbytes, fitted))
            assert scaling.hier_time(p, nbytes, net) == pytest.approx(HierarchicalReducer.model(p, nbytes, fitted))


def test_fit_recovers_known_parameters():
    counts = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 10 ** 6]
    truth = scaling.Network(alpha=3e-6, beta=2e-10, gamma_red=1e-11)
    times = [scaling.allreduce_time(2, k, truth, "mpi") for k in counts]
    alpha, beta = scaling.fit_alpha_beta(2, counts, times, "mpi", truth.gamma_red)
    assert alpha == pytest.approx(3e-6, rel=1e-6) and beta == pytest.approx(2e-10, rel=1e-6)
    noisy = np.array(times) * np.random.default_rng(0).uniform(0.95, 1.05, len(times))
    alpha, beta = scaling.fit_alpha_beta(2, counts, noisy, "mpi", truth.gamma_red)
    assert alpha == pytest.approx(3e-6, rel=0.1) and beta == pytest.approx(2e-10, rel=0.1)
    # a kernel's rate and its fixed cost per call
    work = np.array([1e6, 1e7, 1e8, 1e9])
    rate, fixed = scaling.fit_rate(work, 2e-11 * work + 1e-5)
    assert rate == pytest.approx(2e-11, rel=1e-6) and fixed == pytest.approx(1e-5, rel=1e-4)


def test_fit_nonnegative_drops_negative_terms():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    coefficients = scaling.fit_nonnegative([x, np.ones(4)], 2.0 * x - 0.5, relative=False)
    assert coefficients[1] == 0.0 and coefficients[0] > 0


def test_predictions_are_sane():
    m, n = 100000, 1000
    rows = scaling.scaling_table(m, n, 10, COMPUTE, NET, gap_evaluations=1, memory_limit=4 << 30)
    assert [row["ranks"] for row in rows] == list(scaling.RANKS)
    assert rows[0]["speedup"] == pytest.approx(1.0)
    for row in rows:
        assert row["total"] == pytest.approx(row["setup"] + row["solve"])
        assert all(row[key] >= 0 for key in ("setup", "x_step", "communication", "overhead", "gap"))
    tall = [row for row in rows if row["shard"] == "tall"]
    assert all(a["setup"] > b["setup"] for a, b in zip(tall, tall[1:]))  # the Gram is split over the ranks
    assert all(a["communication"] <= b["communication"] for a, b in zip(rows[1:], rows[2:]))
    # the setup at p = 1 is the Gram's m n^2 flops, to within the passes over the data and the factor
    gram = COMPUTE.gamma_flop * m * n * n
    assert gram < rows[0]["setup"] < 2 * gram
    # more iterations cost more, per-iteration time is independent of m for tall shards
    a = scaling.predict_full(m, n, 4, 10, COMPUTE, NET)
    b = scaling.predict_full(m, n, 4, 20, COMPUTE, NET)
    c = scaling.predict_full(2 * m, n, 4, 10, COMPUTE, NET)
    assert b["solve"] > a["solve"] and b["setup"] == a["setup"]
    assert c["x_step"] == pytest.approx(a["x_step"]) and c["setup"] > a["setup"]
    # memory: the rows and two n x n matrices
    assert scaling.memory_per_rank(m, n, 1) == 8 * m * (n + 1) + 2 * 8 * n * n
    big = scaling.scaling_table(10 ** 7, 10 ** 4, 10, COMPUTE, NET, memory_limit=4 << 30)
    assert not big[0]["fits"] and big[-1]["fits"]


def test_working_set_prediction_is_cheaper_than_the_full_setup():
    m, n = 100000, 1000
    full = scaling.predict_full(m, n, 1, 10, COMPUTE, NET, gap_evaluations=1)
    ws = scaling.predict_working_set(m, n, 1, [10, 20, 40], 60, COMPUTE, NET)
    assert ws["total"] < full["total"]
    assert ws["total"] == pytest.approx(ws["other"] + ws["gap"] + ws["gather"] + ws["solve"])
    per_outer = scaling.predict_working_set(m, n, 1, [10, 20, 40], [20, 20, 20], COMPUTE, NET)
    assert per_outer["solve"] == pytest.approx(ws["solve"])


def test_formatting():
    assert scaling.seconds(2e-6) == "2 us" and scaling.seconds(0.9996) == "1 s"
    assert scaling.seconds(3600.0 * 3) == "3 h" and scaling.seconds(math.nan) == "-"
    assert scaling.human_bytes(4 << 30) == "4 GiB"
    table = scaling.format_table(["a", "b"], [(1, 0.123456)])
    assert table.splitlines()[2] == "| 1 | 0.123 |"


def test_quick_benchmark(tmp_path):
    """The benchmark's quick mode, serially: fits, measures at one rank, predicts, writes its JSON."""
    out = tmp_path / "scaling.json"
    completed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scaling_model.py"), "--quick",
                                "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert "Predicted against measured" in completed.stdout and "Projection" in completed.stdout
    payload = json.loads(out.read_text())
    assert payload["quick"] and payload["ranks"] == [1]
    assert all(value > 0 for key, value in payload["compute"].items() if key.startswith("gamma"))
    assert {check["phase"] for check in payload["checks"]} >= {"setup", "solve", "total"}
    for check in payload["checks"]:
        if check["phase"] == "total":  # a sanity bound only: tiny problems on a shared machine are noisy
            assert math.isfinite(check["ratio"]) and 1e-3 < check["ratio"] < 1e3
    assert len(payload["projections"]) == 4
