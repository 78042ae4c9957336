"""The ADMM kernels (kernels/admm.cu) and their numpy twins (mpiopt/kernels/admm.py), the backend-generic
x-steps, GPU selection, and the solvers on CuPy data.

Without a GPU the twins are checked against independent references, the numpy
ADMM path bit for bit against the engine's formulas as written before the
kernels, the array-only inner solvers (the GPU's) on numpy arrays, and the CUDA
source is compiled with nvcc for sm_80 and sm_90 (skipped without nvcc).  Tests
marked ``gpu`` need CuPy and a device and skip cleanly otherwise: each kernel
against its twin, and end to end the lasso and L1 logistic regression on CuPy
data against the numpy answers, tall and wide shards, at any rank count.
"""
import re
import shutil
import subprocess

import numpy as np
import pytest
from mpi4py import MPI

from conftest import shard_bounds
from mpiopt.admm import penalties, solve
from mpiopt.admm import solver as solver_module
from mpiopt.admm.engine import ConsensusADMM
from mpiopt.admm.losses.glm import array_lbfgs
from mpiopt.admm.solver import Problem
from mpiopt.core import backend
from mpiopt.kernels import admm as kernels
from mpiopt.kernels import cuda_source, cuda_sources, nvcc_ptx

TIGHT = dict(eps_abs=1e-10, eps_rel=1e-10, max_iter=50000)
KERNELS = ("soft_threshold", "relax", "z_u_update")

requires_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
requires_gpu = pytest.mark.skipif(backend.device_count() == 0, reason="needs CuPy and a CUDA device")


def gpu(test):
    """Mark a test ``gpu`` and skip it without CuPy or a device."""
    return pytest.mark.gpu(requires_gpu(test))


def vectors(seed=0, n=1000):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n) * 3
    v[:6] = [0.0, -0.0, 0.5, -0.5, 1e-300, -1e-300]  # exact thresholds and signed zeros
    return v


# -- the numpy twins against independent references ------------------------------------------------------

@pytest.mark.parametrize("kappa", [0.0, 0.5, 2.0, np.inf])
def test_soft_threshold_twin_is_sign_times_shrunk_magnitude(kappa):
    v = vectors()
    reference = np.sign(v) * np.maximum(np.abs(v) - kappa, 0.0)
    assert np.array_equal(kernels.soft_threshold(v, kappa), reference)
    out = np.empty_like(v)
    assert kernels.soft_threshold(v, kappa, out=out) is out and np.array_equal(out, reference)
    in_place = v.copy()
    kernels.soft_threshold(in_place, kappa, out=in_place)
    assert np.array_equal(in_place, reference)


def test_soft_threshold_twin_passes_nan_through():
    v = np.array([np.nan, 1.0, -3.0])
    assert np.array_equal(kernels.soft_threshold(v, 0.5), [np.nan, 0.5, -2.5], equal_nan=True)


def test_relax_twin_is_the_engine_formula():
    x, z, alpha = vectors(1), vectors(2), 1.6
    expected = z + alpha * (x - z)
    assert np.array_equal(kernels.relax(x, z, alpha), expected)
    np.testing.assert_allclose(kernels.relax(x, z, alpha), alpha * x + (1 - alpha) * z, rtol=1e-12, atol=1e-12)
    for alias in ("x", "z"):
        a, b = x.copy(), z.copy()
        out = a if alias == "x" else b
        assert kernels.relax(a, b, alpha, out=out) is out and np.array_equal(out, expected)
    np.testing.assert_allclose(kernels.relax(x, z, 1.0), x, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("free", [0, 1, 3])
def test_z_u_update_twin_is_the_l1_prox_then_the_u_step(free):
    sums, u, x_relaxed = vectors(3), vectors(4), vectors(5)
    lam, count, rho = 0.7, 3, 1.9
    step = 1.0 / (count * rho)
    penalty = penalties.L1(lam)
    penalty = penalty.leaving_free(free) if free else penalty
    assert penalty.threshold(step) == (lam * step, free)
    kappa, free = penalty.threshold(step)
    z, u_next = kernels.z_u_update(sums.copy(), count, kappa, u, x_relaxed, free)
    z_reference = penalty.prox(sums / count, step)
    assert np.array_equal(z, z_reference)
    assert np.array_equal(u_next, u + x_relaxed - z_reference)
    mean = sums / count  # independent: sign(v) max(|v| - kappa, 0) on the penalized entries
    penalized = mean.size - free
    assert np.array_equal(z[:penalized], np.sign(mean[:penalized]) * np.maximum(np.abs(mean[:penalized])
                                                                               - lam * step, 0.0))
    assert np.array_equal(z[penalized:], mean[penalized:])


def test_only_soft_thresholding_penalties_offer_the_fused_step():
    class Shifted(penalties.L1):
        def prox(self, v, step):
            return super().prox(v, step) + 1.0

    assert penalties.L1(0.5).threshold(0.1) == (0.5 * 0.1, 0)
    assert penalties.L1(0.5).leaving_free(1).threshold(0.1) == (0.5 * 0.1, 1)
    for penalty in (penalties.ElasticNet(0.5, 0.5), penalties.L2(1.0), penalties.Penalty(), Shifted(0.5),
                    Shifted(0.5).leaving_free(1), penalties.L2(1.0).leaving_free(1)):
        assert penalty.threshold(0.1) is None


def test_to_host_and_device_helpers_on_the_cpu():
    array = np.arange(3.0)
    assert backend.to_host(array) is array
    assert np.array_equal(backend.to_host([1.0, 2.0]), [1.0, 2.0])
    with backend.device_of(array):
        pass


# -- the numpy ADMM path is what it was, bit for bit ----------------------------------------------------

class FormulaEngine(ConsensusADMM):
    """The vector steps written out as the engine had them before the kernels (L1 penalties only):
    xh = z + alpha (x - z); z = v - clip(v, -kappa, kappa) of v = sums / N; u = u + xh; u -= z."""

    def relax(self, x, z):
        return z + self.settings.alpha * (x - z)

    def z_u_step(self, sums, rho, u, x_relaxed):
        self.reducer.allreduce(sums, sums)
        count = self.active_ranks
        penalty, free = self.penalty, 0
        if isinstance(penalty, penalties.Unpenalized):
            penalty, free = penalty.penalty, penalty.count
        kappa = penalty.lam * (1.0 / (count * rho))
        v = sums / count
        z = v.copy()
        end = v.size - free
        z[:end] = v[:end] - np.clip(v[:end], -kappa, kappa)
        u = u + x_relaxed
        u -= z
        return z, u


@pytest.mark.mpi
@pytest.mark.parametrize("loss, intercept, layout", [("squared", False, "uneven"), ("squared", True, "empty"),
                                                     ("logistic", True, "uneven")])
def test_numpy_path_is_bit_for_bit_the_engine_formulas(comm, monkeypatch, loss, intercept, layout):
    rng = np.random.default_rng(7)
    A = rng.standard_normal((240, 15))
    b = A @ (rng.standard_normal(15) * (rng.random(15) < 0.4)) + 0.1 * rng.standard_normal(240)
    if loss == "logistic":
        b = (b > 0).astype(float)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    settings = dict(lam_ratio=0.1, intercept=intercept, eps_abs=1e-9, eps_rel=1e-9, max_iter=400)
    result = solve(A[start:stop], b[start:stop], loss, "l1", comm=comm, **settings)
    monkeypatch.setattr(solver_module, "ConsensusADMM", FormulaEngine)
    reference = solve(A[start:stop], b[start:stop], loss, "l1", comm=comm, **settings)
    assert result.iterations == reference.iterations
    assert np.array_equal(result.x, reference.x)
    assert np.array_equal(result.u, reference.u)
    assert all(result.history[key] == reference.history[key] for key in result.history if key != "time")


# -- the array-only x-steps (the GPU's), run on numpy arrays ---------------------------------------------

def classification(seed, m, n):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    w = rng.standard_normal(n) * (rng.random(n) < 0.5)
    y = np.where(A @ w + 0.3 + 0.5 * rng.standard_normal(m) > 0, 1.0, 0.0)
    return A, y


def regression(seed, m, n):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    b = A @ (rng.standard_normal(n) * (rng.random(n) < 0.3)) + 0.2 + 0.1 * rng.standard_normal(m)
    return A, b


@pytest.mark.parametrize("rows", [30, 200])  # wide and tall shards
def test_newton_direction_solves_the_hessian_system(rows):
    A, y = classification(1, rows, 50)
    problem = Problem(A, y, "logistic", MPI.COMM_SELF, intercept=True, x_solver="newton")
    shard = problem.shard
    shard.factorize(0.7)
    rng = np.random.default_rng(2)
    x, gradient = 0.1 * rng.standard_normal(shard.n), rng.standard_normal(shard.n)
    design = np.hstack([A, np.ones((rows, 1))])
    _, _, second = shard.terms(design @ x)
    hessian = design.T @ (second[:, None] * design) + 0.7 * np.eye(shard.n)
    np.testing.assert_allclose(shard.newton_direction(x, gradient), np.linalg.solve(hessian, gradient),
                               rtol=1e-9, atol=1e-11)


@pytest.mark.mpi
@pytest.mark.parametrize("loss, rows", [("logistic", 400), ("logistic", 40), ("huber", 300)])
def test_array_lbfgs_reaches_the_scipy_answer(comm, loss, rows):
    A, b = classification(3, rows, 60) if loss == "logistic" else regression(3, rows, 20)
    start, stop = shard_bounds(rows, comm, "even")
    problem = Problem(A[start:stop], b[start:stop], loss, comm, intercept=True)
    reference = problem.solve("l1", lam_ratio=0.1, **TIGHT)
    problem.shard.solve_x_step = array_lbfgs
    result = problem.solve("l1", lam_ratio=0.1, **TIGHT)
    assert result.status == reference.status == "converged"
    np.testing.assert_allclose(result.x, reference.x, rtol=1e-6, atol=1e-7)
    assert abs(result.objective - reference.objective) <= 1e-9 * abs(reference.objective)


@pytest.mark.mpi
def test_newton_on_wide_shards_matches_lbfgs(comm):
    A, y = classification(4, 40, 60)  # 40 rows over the ranks, 61 columns with the intercept: wide shards
    start, stop = shard_bounds(40, comm, "even")
    problem = Problem(A[start:stop], y[start:stop], "logistic", comm, intercept=True, x_solver="newton")
    assert problem.shard.kind == "wide"
    newton = problem.solve("l1", lam_ratio=0.1, **TIGHT)
    reference = solve(A[start:stop], y[start:stop], "logistic", "l1", comm=comm, lam_ratio=0.1, intercept=True,
                      **TIGHT)
    np.testing.assert_allclose(newton.x, reference.x, rtol=1e-6, atol=1e-7)


# -- device selection -------------------------------------------------------------------------------------

@pytest.mark.mpi
def test_select_device_is_collective_and_round_robin(comm):
    local = backend.local_rank(comm)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    assert 0 <= local < node.size
    assert sorted(node.allgather(local)) == list(range(node.size))
    node.Free()
    device = backend.select_device(comm)
    count = backend.device_count()
    if count == 0:
        assert device is None
    else:
        import cupy
        assert device == local % count == cupy.cuda.Device().id


# -- the CUDA source ----------------------------------------------------------------------------------------

def test_admm_source_is_installed():
    assert "admm" in cuda_sources()
    source = cuda_source("admm")
    for name in KERNELS:
        assert re.search(rf'extern "C" __global__ void {name}\(', source)


@requires_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_admm_kernels_compile_with_nvcc(arch):
    ok, output = nvcc_ptx(cuda_source("admm"), arch)
    assert ok, output


@requires_nvcc
def test_admm_kernels_round_like_numpy(tmp_path):
    """Every floating-point operation in the PTX rounds to nearest on its own (no fused multiply-add), so the
    kernels give the numpy twins' values bit for bit; and each kernel the Python side launches is there."""
    path = tmp_path / "admm.cu"
    path.write_text(cuda_source("admm"), encoding="utf-8")
    done = subprocess.run(["nvcc", "--ptx", "-arch=sm_80", "--std=c++17", "-o", str(tmp_path / "admm.ptx"),
                           str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    ptx = (tmp_path / "admm.ptx").read_text()
    assert "fma" not in ptx
    arithmetic = re.findall(r"\b(?:add|sub|mul|div)[.a-z0-9]*\.f64\b", ptx)
    assert arithmetic and all(".rn." in op for op in arithmetic), arithmetic  # ptxas may contract only plain ops
    for name in KERNELS:
        assert re.search(rf"\.entry {name}\(", ptx), name


# -- on a GPU -----------------------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("kappa", [0.0, 0.5, np.inf])
def test_gpu_soft_threshold_matches_twin(kappa):
    import cupy
    v = vectors(8, 100003)
    expected = kernels.soft_threshold(v, kappa)
    device = cupy.asarray(v)
    result = kernels.soft_threshold(device, kappa)
    assert isinstance(result, cupy.ndarray)
    np.testing.assert_allclose(result.get(), expected, rtol=1e-15, atol=0)
    kernels.soft_threshold(device, kappa, out=device)  # in place
    np.testing.assert_allclose(device.get(), expected, rtol=1e-15, atol=0)
    strided = cupy.asarray(np.repeat(v, 2))[::2]  # not contiguous: copied first
    np.testing.assert_allclose(kernels.soft_threshold(strided, kappa).get(), expected, rtol=1e-15, atol=0)
    assert kernels.soft_threshold(cupy.zeros(0), kappa).size == 0


@gpu
def test_gpu_relax_matches_twin():
    import cupy
    x, z = vectors(9, 4097), vectors(10, 4097)
    expected = kernels.relax(x, z, 1.6)
    np.testing.assert_allclose(kernels.relax(cupy.asarray(x), cupy.asarray(z), 1.6).get(), expected,
                               rtol=1e-15, atol=1e-15)
    device_z = cupy.asarray(z)
    kernels.relax(cupy.asarray(x), device_z, 1.6, out=device_z)
    np.testing.assert_allclose(device_z.get(), expected, rtol=1e-15, atol=1e-15)


@gpu
@pytest.mark.parametrize("free", [0, 1])
def test_gpu_z_u_update_matches_twin(free):
    import cupy
    sums, u, x_relaxed = vectors(11, 5000), vectors(12, 5000), vectors(13, 5000)
    z, u_next = kernels.z_u_update(sums, 3, 0.2, u, x_relaxed, free)
    device = kernels.z_u_update(cupy.asarray(sums), 3, 0.2, cupy.asarray(u), cupy.asarray(x_relaxed), free)
    np.testing.assert_allclose(device[0].get(), z, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(device[1].get(), u_next, rtol=1e-15, atol=1e-15)


@gpu
def test_gpu_penalties_and_cholesky_match_numpy():
    import cupy
    v = vectors(14, 300)
    for penalty in (penalties.L1(0.3), penalties.L1(0.3).leaving_free(1), penalties.ElasticNet(0.3, 0.5),
                    penalties.Box(-0.2 * np.ones(300), 0.5)):
        expected = penalty.prox(v, 0.7)
        inner = getattr(penalty, "penalty", penalty)  # Unpenalized takes its penalty's module
        inner.xp = cupy
        result = penalty.prox(cupy.asarray(v), 0.7)
        inner.xp = np
        np.testing.assert_allclose(result.get(), expected, rtol=1e-14, atol=1e-15)
    rng = np.random.default_rng(15)
    A = rng.standard_normal((80, 40))
    matrix, rhs = A.T @ A + np.eye(40), rng.standard_normal(40)
    factor = backend.cholesky(cupy, cupy.asarray(matrix))
    np.testing.assert_allclose(backend.cholesky_solve(cupy, factor, cupy.asarray(rhs)).get(),
                               np.linalg.solve(matrix, rhs), rtol=1e-10, atol=1e-12)


@gpu
@pytest.mark.parametrize("rows", [30, 200])
def test_gpu_newton_direction_matches_cpu(rows):
    import cupy
    A, y = classification(16, rows, 50)
    directions = []
    for data in ((A, y), (cupy.asarray(A), cupy.asarray(y))):
        shard = Problem(*data, "logistic", MPI.COMM_SELF, intercept=True, x_solver="newton").shard
        shard.factorize(0.7)
        xp = shard.xp
        x = xp.asarray(0.1 * np.random.default_rng(2).standard_normal(shard.n))
        directions.append(backend.to_host(shard.newton_direction(x, xp.asarray(np.linspace(-1, 1, shard.n)))))
    np.testing.assert_allclose(directions[1], directions[0], rtol=1e-9, atol=1e-11)


GPU_CASES = [("squared", 400, 20, "lbfgs"), ("squared", 60, 100, "lbfgs"), ("logistic", 400, 20, "lbfgs"),
             ("logistic", 60, 100, "lbfgs"), ("logistic", 400, 20, "newton"), ("logistic", 60, 100, "newton")]


@gpu
@pytest.mark.mpi
@pytest.mark.parametrize("loss, rows, columns, x_solver", GPU_CASES)
@pytest.mark.parametrize("intercept", [False, True])
def test_gpu_solve_reaches_the_cpu_answer(comm, loss, rows, columns, x_solver, intercept):
    """The lasso and L1 logistic regression with each rank's shard on its GPU: tall and wide shards."""
    import cupy
    device = backend.select_device(comm)
    A, b = (classification if loss == "logistic" else regression)(17, rows, columns)
    start, stop = shard_bounds(rows, comm, "even")
    options = dict(lam_ratio=0.1, intercept=intercept, x_solver=x_solver, **TIGHT)
    cpu = solve(A[start:stop], b[start:stop], loss, "l1", comm=comm, **options)
    A_gpu, b_gpu = cupy.asarray(A[start:stop]), cupy.asarray(b[start:stop])
    assert A_gpu.device.id == device
    gpu_result = solve(A_gpu, b_gpu, loss, "l1", comm=comm, **options)
    assert gpu_result.info["backend"] == "cupy" and isinstance(gpu_result.x, cupy.ndarray)
    assert gpu_result.status == cpu.status == "converged"
    # the GPU's L-BFGS is not scipy's: both answers are within the stopping rule of the minimizer
    np.testing.assert_allclose(gpu_result.x.get(), cpu.x, rtol=1e-6, atol=1e-6 * np.abs(cpu.x).max())
    assert abs(gpu_result.objective - cpu.objective) <= 1e-8 * abs(cpu.objective)
