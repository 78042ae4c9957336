"""The scaling model of consensus ADMM (mpiopt.admm.scaling) and its benchmark's quick mode."""
import dataclasses
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
    # noise that makes the larger sizes relatively faster (a busy machine): never a rate of 0
    small = np.array([1e6, 2e6, 4e6])
    rate, fixed = scaling.fit_rate(small, [3e-3, 2.5e-3, 2e-3])
    assert rate > 0 and fixed == 0.0


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


# -- proximal Newton's working sets (L1-logistic) --------------------------------------------------------------
ONLY = dict(gamma_flop=0.0, gamma_chol=0.0, gamma_mem=0.0, gamma_trsv=0.0, gamma_vec=0.0, delta=0.0)


def only(**rates):
    """A Compute with every rate and overhead 0 but ``rates``: each phase's time is then a hand count."""
    return scaling.Compute(**dict(ONLY, **rates))


def test_newton_iteration_counts_by_hand():
    mi, k = 5000, 30
    it = scaling.newton_iteration(mi, k)
    assert it.gemm_flops == 2 * mi * k * k and it.gram_flops == 0  # the Hessian A^T (D A): a gemm
    # A^T phi', the weighted copy D A (read and written), A d: 8 + 16 + 8 bytes per entry; margin + step: 24 per row
    assert it.mem_bytes == 32 * mi * k + 24 * mi
    assert it.exp_rows == mi and it.newtons == 1.0
    # the gradient's, the Hessian's, the direction's; the estimate's and the stop's words, the trial, the step
    assert sorted(count for count, _ in it.allreduces) == sorted([k + 2, k * k, k + 1, 1, 1, 1, 1])
    assert all(reducer == "mpi" for _, reducer in it.allreduces)
    # closed form at p = 4 with latency only: recursive doubling (2 rounds) below 2 KiB, Rabenseifner
    # (2 log2 p = 4 messages) for the 900-double Hessian: 6 x 2 + 4 = 16 alpha
    c = only(gamma_gemm=1e-11, gamma_mem=2e-11, gamma_exp=5e-8, delta_newton=1e-4)
    net = scaling.Network(alpha=1e-6, beta=0.0)
    expected = 1e-11 * 2 * mi * k * k + 2e-11 * (32 * mi * k + 24 * mi) + 5e-8 * mi + 1e-4 + 16e-6
    assert it.time(4, c, net) == pytest.approx(expected)
    # without gamma_gemm the Hessian runs at gamma_flop
    assert only(gamma_flop=3e-11).gemm == 3e-11 and it.time(1, only(gamma_flop=3e-11), net) == pytest.approx(
        3e-11 * 2 * mi * k * k)
    # one epoch of rank 0's coordinate descent: its fixed cost, k updates and 24 k^2 bytes
    epoch = scaling.coordinate_epoch(k)
    assert epoch.epochs == 1 and epoch.coordinates == k and epoch.vec_bytes == 24 * k * k
    assert epoch.time(1, only(delta_coord=1e-8, delta_epoch=2e-5), net) == pytest.approx(2e-5 + k * 1e-8)


def test_refined_point_counts_by_hand():
    """proxnewton's _refine with REFINE_STEPS = 2: two directions on one Hessian, a gradient between them."""
    mi, k = 5000, 30
    last = scaling.refined_point(mi, k, 2)  # after a Newton iteration: its last Hessian and gradient
    assert last.gemm_flops == 0 and last.exp_rows == mi  # no Hessian; the terms at x + d1
    assert last.mem_bytes == 2 * (8 * mi * k + 24 * mi) + 8 * mi * k  # A d1, A d2 and their sums; A^T phi'
    assert sorted(count for count, _ in last.allreduces) == sorted([k + 1, k + 2, k + 1])
    assert last.newtons == 0 and last.newton_solves == 0  # its fixed cost is the restricted solve's
    # a solve that stopped at its first iteration: a Hessian of its own
    first = scaling.refined_point(mi, k, 2, hessian=True)
    assert first.gemm_flops == 2 * mi * k * k and first.mem_bytes == last.mem_bytes + 16 * mi * k
    # a warm start's first certificate: the gradient at x as well
    fresh = scaling.refined_point(mi, k, 2, hessian=True, gradient=True)
    assert fresh.exp_rows == 2 * mi and fresh.mem_bytes == first.mem_bytes + 8 * mi * k
    assert sorted(count for count, _ in fresh.allreduces) == sorted([k + 2, k * k, k + 1, k + 2, k + 1])
    one = scaling.refined_point(mi, k, 1)
    assert one.mem_bytes == 8 * mi * k + 24 * mi and one.exp_rows == 0 and scaling.refined_point(mi, k, 0) == \
        scaling.Work()


def test_prox_newton_working_set_counts_by_hand():
    m, n, p = 10000, 2000, 2
    mi = 5000
    w = scaling.working_set_phases(m, n, p, [10, 30], "prox_newton")
    assert w["certified"] == [0, 10, 30] and w["factor"].chol_flops == 0 and w["gather"].gram_flops == 0
    assert w["fresh"] is None
    # three certificates: the margins from the set's columns, A^T theta over all n; dual residual and the
    # entropy twice (3 m_i rows each)
    assert w["gap"].mem_bytes == 8 * mi * (3 * n + 0 + 10 + 30)
    assert w["gap"].exp_rows == 3 * 3 * mi and w["gap"].certificates == 3 and w["gap"].delta_gaps == 0
    # gather: 10 new (a cache line an entry, then 16 bytes), then 20 new into a 16-column storage that grows
    assert w["gather"].mem_bytes == (mi * 64 * 10 + 16 * mi * 10) + (mi * 64 * 20 + 16 * mi * 20 + 16 * mi * 10)
    # setup: the column squares and A^T phi'(0), two passes; the terms at 0; the end: the KKT residual's pass
    assert w["setup"].mem_bytes == 2 * 8 * mi * n and w["setup"].exp_rows == mi
    assert w["end"].mem_bytes == 8 * mi * n and w["end"].exp_rows == mi
    once = w["solve_once"](30)
    assert once.mem_bytes == 3 * 8 * mi * 30 and once.exp_rows == 4 * mi and once.newton_solves == 1
    # refined certificates (proxnewton.REFINE_STEPS = 2): each restricted solve makes the refined point on its
    # last Hessian; the certificates after the two solves take theta at its margins (a dual residual more)
    r = scaling.working_set_phases(m, n, p, [10, 30], "prox_newton", refined=2)
    assert r["gap"].mem_bytes == w["gap"].mem_bytes and r["gap"].gemm_flops == 0 and r["gap"].newtons == 0
    assert r["gap"].exp_rows == w["gap"].exp_rows + 2 * mi
    refined = r["solve_once"](30, 3)
    assert refined == once + scaling.refined_point(mi, 30, 2) and refined.gemm_flops == 0
    assert refined.mem_bytes == once.mem_bytes + 24 * mi * 30 + 48 * mi and refined.exp_rows == 5 * mi
    # a solve that stopped at its first iteration (no Hessian yet) forms one for the refined point
    assert r["solve_once"](30, 0).gemm_flops == 2 * mi * 30 * 30
    # the intercept adds a column to every restricted problem; the null model's certificate is not refined
    i = scaling.working_set_phases(m, n, p, [10, 30], "prox_newton", intercept=True, refined=2)
    assert i["inner"](30).gemm_flops == 2 * mi * 31 * 31 and i["gap"].exp_rows == r["gap"].exp_rows
    assert i["solve_once"](30, 2) == scaling.newton_solve_once(mi, 31) + scaling.refined_point(mi, 31, 2)
    # a warm start off a path on 10 columns: gathered first, and its first certificate refines its own point
    # (the gradient and the Hessian at x, a restricted problem and solver of its own)
    ws = scaling.working_set_phases(m, n, p, [10, 30], "prox_newton", refined=2, warm_start=10)
    assert ws["certified"] == [10, 10, 30] and ws["fresh"] == 0
    assert ws["gather"].mem_bytes == w["gather"].mem_bytes  # the first set adds nothing to the warm start's
    fresh = scaling.refined_point(mi, 10, 2, hessian=True, gradient=True)
    assert ws["gap"].mem_bytes == 8 * mi * (3 * n + 10 + 10 + 30) + fresh.mem_bytes
    assert ws["gap"].exp_rows == 3 * 4 * mi + 2 * mi and ws["gap"].gemm_flops == 2 * mi * 100
    assert ws["gap"].newton_solves == 1
    # ADMM's working sets know no warm start here, nor a refined point
    assert scaling.working_set_phases(m, n, p, [10, 30], warm_start=10)["certified"] == [0, 10, 30]
    with pytest.raises(ValueError):
        scaling.working_set_phases(m, n, p, [10], "lbfgs")


def test_prox_newton_prediction_by_hand():
    """Each fixed cost set to a power of ten, all rates 0: the phases are integer hand counts."""
    m, n, sizes, per = 10000, 2000, [10, 30], [3, 5]
    c = only(delta_newton=1.0, delta_newton_solve=10.0, delta_certify=100.0, delta_coord=1000.0, delta_solve=1e4,
             delta_epoch=1e6)
    net = scaling.Network(0.0, 0.0)
    pred = scaling.predict_working_set(m, n, 2, sizes, per, c, net, "prox_newton", coordinate_epochs=16)
    assert pred["iterations"] == pytest.approx(3 + 5)
    assert pred["overhead"] == pytest.approx(2 * 10)
    # 16 epochs spread as the directions (no refined point: the iterations), 6 and 10, on sets of 10 and 30
    coordinate = 1000 * (6 * 10 + 10 * 30) + 1e6 * 16
    assert pred["coordinate"] == pytest.approx(coordinate)
    assert pred["solve"] == pytest.approx(8 + 20 + coordinate)
    assert pred["gap"] == pytest.approx(3 * 100) and pred["gather"] == 0
    assert pred["other"] == pytest.approx(1e4) and pred["total"] == pytest.approx(1e4 + 300 + 8 + 20 + coordinate)
    # refined (2 steps): the epochs spread over 3 + 2 and 5 + 2 directions; the refined points' fixed cost is the
    # solves' (no more delta_newton), the certificates' the same
    ref = scaling.predict_working_set(m, n, 2, sizes, per, c, net, "prox_newton", 16, refined=2)
    assert ref["coordinate"] == pytest.approx(1000 * (16 * 5 / 12 * 10 + 16 * 7 / 12 * 30) + 1e6 * 16)
    assert ref["iterations"] == pred["iterations"] and ref["overhead"] == pred["overhead"]
    assert ref["gap"] == pytest.approx(pred["gap"])
    # a warm start's first certificate makes its refined point (a restricted solve's fixed cost) with 8 epochs
    warm = scaling.predict_working_set(m, n, 2, sizes, per, c, net, "prox_newton", 16, refined=2,
                                       certificate_epochs=8, warm_start=10)
    assert warm["gap"] == pytest.approx(300 + 10 + 8 * (1000 * 10 + 1e6)) and warm["solve"] == pytest.approx(
        ref["solve"])
    with pytest.raises(ValueError):  # epochs outside the restricted solves without a certificate to make them
        scaling.predict_working_set(m, n, 2, sizes, per, c, net, "prox_newton", 16, refined=2, certificate_epochs=8)
    # a total of iterations is spread evenly over the outer iterations
    even = scaling.predict_working_set(m, n, 2, sizes, 8, c, net, "prox_newton", [6, 10])
    assert even["iterations"] == pytest.approx(8) and even["coordinate"] == pytest.approx(pred["coordinate"])
    # the transcendentals alone: per row, iterations x 1 + solves x 4 + certificates x 3, on m / p rows; the
    # setup's terms at 0 and the end's at x
    e = scaling.predict_working_set(m, n, 2, sizes, per, only(gamma_exp=1.0), net, "prox_newton")
    assert e["solve"] == pytest.approx(5000 * (8 + 2 * 4)) and e["gap"] == pytest.approx(5000 * 3 * 3)
    assert e["other"] == pytest.approx(2 * 5000)
    # refined: a gradient's terms in each solve's refined point, theta at its margins in the two certificates
    e2 = scaling.predict_working_set(m, n, 2, sizes, per, only(gamma_exp=1.0), net, "prox_newton", refined=2)
    assert e2["solve"] == pytest.approx(e["solve"] + 2 * 5000) and e2["gap"] == pytest.approx(e["gap"] + 2 * 5000)
    # the Hessians alone: the iterations', and one more for a solve that made no iteration
    g = scaling.predict_working_set(m, n, 2, sizes, [3, 0], only(gamma_gemm=1.0), net, "prox_newton", refined=2)
    assert g["solve"] == pytest.approx(3 * 2 * 5000 * 100 + 2 * 5000 * 900) and g["gap"] == 0


def test_prox_newton_projection_is_sane():
    c = dataclasses.replace(COMPUTE, gamma_exp=5e-8, delta_newton=3e-4, delta_newton_solve=5e-4, delta_coord=4e-8,
                            delta_epoch=2e-5, delta_certify=2e-4)
    rows = scaling.working_set_table(100000, 1000, [10, 20], [4, 3], c, NET, inner_solver="prox_newton",
                                     coordinate_epochs=68, refined=2)
    totals = [row["total"] for row in rows]
    assert [row["ranks"] for row in rows] == list(scaling.RANKS) and rows[0]["efficiency"] == pytest.approx(1.0)
    assert all(a > b for a, b in zip(totals[:8], totals[1:8]))  # the passes divide while m / p is large
    # the fixed costs and rank 0's coordinate descent do not divide: they bound the time from below
    epochs = [68 * 6 / 11, 68 * 5 / 11]  # spread over 4 + 2 and 3 + 2 directions
    floor = 7 * 3e-4 + 2 * 5e-4 + 3 * 2e-4 + 4e-8 * (epochs[0] * 10 + epochs[1] * 20) + 2e-5 * 68
    assert all(total > floor for total in totals) and rows[-1]["efficiency"] < 0.1
    assert rows[-1]["memory_per_rank"] == scaling.memory_per_rank(100000, 1000, 1024, [10, 20], "prox_newton")
    assert scaling.memory_per_rank(1000, 100, 2, [10, 20], "prox_newton") == 8 * 500 * 101 + 2 * 8 * 500 * 20 \
        + 8 * 400 + 6 * 8 * 500


def test_shared_node_bandwidth():
    """Passes over the rows at max(gamma_mem, ranks on the node / node bandwidth); 0: one core's rate always."""
    c = only(gamma_mem=5e-11)
    work = scaling.Work(mem_bytes=1e9)
    assert work.time(8, c, scaling.Network(0.0, 0.0)) == pytest.approx(0.05)
    shared = scaling.Network(0.0, 0.0, node_bandwidth=20e9)  # every rank on one node
    assert shared.pass_rate(1, 5e-11) == 5e-11 and work.time(1, c, shared) == pytest.approx(0.05)
    assert work.time(2, c, shared) == pytest.approx(0.1) and work.time(4, c, shared) == pytest.approx(0.2)
    nodes = scaling.Network(0.0, 0.0, ranks_per_node=32, node_bandwidth=200e9)  # 32 ranks share 200 GB/s
    assert nodes.pass_rate(1024, 5e-11) == pytest.approx(32 / 200e9) and nodes.pass_rate(2, 5e-11) == 5e-11
    # the full solver's x-step passes of a wide shard pay it too
    wide = scaling.predict_full(1000, 500, 4, 10, c, shared)["x_step"]
    assert wide == pytest.approx(10 * 2 * 8 * 250 * 500 * 4 / 20e9)


def test_newton_fits_recover_known_constants():
    truth = dataclasses.replace(COMPUTE, gamma_exp=5e-8, delta_newton=3e-4, delta_newton_solve=8e-4,
                                delta_certify=2e-4, delta_coord=4e-8, delta_epoch=2e-5)
    runs = []
    cases = [([10], [2], 6, 0, 0), ([10, 20], [3, 2], 14, 2, 0), ([10, 20, 40], [4, 3, 3], 30, 2, 0),
             ([10, 20, 40, 49], [2, 2, 2, 2], 24, 0, 0), ([10, 20], [6, 7], 40, 2, 0), ([10, 20], [1, 2], 20, 2, 8)]
    for sizes, per, epochs, refined, warm in cases:  # the last a warm start off a path on 8 columns
        run = {"m": 2000, "n": 50, "ranks": 1, "sizes": sizes, "iterations": per, "coordinate_epochs": epochs,
               "refined": refined, "warm_start": warm, "certificate_epochs": 5 if warm else 0}
        predicted = scaling.predict_working_set(2000, 50, 1, sizes, per, truth, NET, "prox_newton", epochs,
                                                refined=refined, certificate_epochs=run["certificate_epochs"],
                                                warm_start=warm)
        runs.append(dict(run, solve=predicted["solve"], gap=predicted["gap"]))
    base = dataclasses.replace(truth, delta_newton=0.0, delta_newton_solve=0.0, delta_certify=0.0)
    fitted = scaling.fit_newton_overheads(runs, base, NET)
    assert fitted == pytest.approx((3e-4, 8e-4, 2e-4), rel=1e-6)
    # rank 0's coordinate descent: delta_epoch an epoch, k updates at delta_coord, 24 k^2 bytes at gamma_vec
    k, epochs = np.array([10, 20, 50, 100, 200]), np.array([4, 5, 6, 11, 8])
    times = epochs * (2e-5 + k * 4e-8) + epochs * 24 * k ** 2 * COMPUTE.gamma_vec
    assert scaling.fit_coordinate_descent(k, epochs, times, COMPUTE.gamma_vec) == pytest.approx((4e-8, 2e-5),
                                                                                                  rel=1e-6)


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
    # proximal Newton's L1-logistic working sets: measured at one rank with their counts, checked, projected
    (run,) = payload["logistic_runs"]
    assert run["inner_solver"] == "prox_newton" and run["outer_iterations"] >= 1 and run["iterations"] >= 1
    assert len(run["newton_per_outer"]) == len(run["working_set_sizes"]) == run["outer_iterations"]
    newton = [check for check in payload["checks"] if check["solver"] == "ws_prox_newton"]
    assert {check["phase"] for check in newton} == {"gap", "gather", "solve", "other", "total"}
    assert all(1e-2 < check["ratio"] < 1e2 for check in newton if check["phase"] == "total")
    assert payload["compute"]["gamma_exp"] > 0
    assert payload["compute"]["delta_coord"] + payload["compute"]["delta_epoch"] > 0
    # a cold start: every coordinate epoch is a restricted solve's (the refined points' in them), none outside
    assert run["refined"] >= 1 and run["certificate_epochs"] == 0 and run["coordinate_epochs"] > 0
    assert len(payload["logistic_projections"]) == 4
