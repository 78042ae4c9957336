"""CuPy buffers in the collectives and data-parallel training on a GPU.

Three groups:

* the staging decisions (CPU): the ``cuda_aware`` setting, ``MPIOPT_CUDA_AWARE``,
  the detection fallback and the route a call takes;
* "emulated" (CPU, any rank count): a stand-in for CuPy whose arrays are numpy
  arrays of a subclass the backend takes for device arrays, with ``get``,
  ``set``, devices, streams and pinned memory as CuPy has them.  Every line of
  the device paths then runs (staging through "pinned" buffers, direct
  hand-off to MPI, the trainer with its data, parameters, gradients and
  optimizer state on the "device", the overlap thread's device context), and
  since the arithmetic is numpy's, the results must equal the numpy run's bit
  for bit;
* marked ``gpu`` (skipped without CuPy and a device): the same on a real GPU,
  where the answers must reach the CPU answers to tolerance: a compressed
  all-reduce of CuPy buffers for every compressor, staged and (where MPI is
  CUDA-aware) direct, and training runs of linear, logistic and MLP models with
  SGD and Adam at ZeRO stages 0 and 1.
"""
import sys
import types

import numpy as np
import pytest
import scipy.special
from mpi4py import MPI

from conftest import requires_gpu
from mpiopt.collectives import AutoReducer, get_reducer
from mpiopt.collectives import device
from mpiopt.compression import COMPRESSORS
from mpiopt.core import backend
from mpiopt.core.random import random_stream
from mpiopt.data import load_dataset
from mpiopt.models import get_model
from mpiopt.optim import get_optimizer
from mpiopt.train import train

DATA = load_dataset("digits", MPI.COMM_SELF)
REDUCER_NAMES = ("mpi", "ring", "ring-seg", "rd", "hier", "ps", "ps-sharded", "auto")


# -- the decisions (no GPU) --------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (None, None), (True, True), (False, False), (1, True), (0, False), ("1", True), ("0", False), ("true", True),
    ("FALSE", False), (" yes ", True), ("no", False), ("on", True), ("off", False), ("auto", None), ("", None)])
def test_settings_parse(value, expected):
    assert device.parse_setting(value) is expected


@pytest.mark.parametrize("value", ["2", "maybe", 2, 0.5, [1]])
def test_bad_settings_are_refused(value):
    with pytest.raises(ValueError, match="MPIOPT_CUDA_AWARE must be one of"):
        device.parse_setting(value)


def test_the_argument_wins_then_the_environment_then_detection():
    def yes():
        return True

    def no():
        return False

    assert device.cuda_aware(True, {"MPIOPT_CUDA_AWARE": "0"}, no) is True
    assert device.cuda_aware(False, {"MPIOPT_CUDA_AWARE": "1"}, yes) is False
    assert device.cuda_aware(None, {"MPIOPT_CUDA_AWARE": "1"}, no) is True
    assert device.cuda_aware(None, {"MPIOPT_CUDA_AWARE": "0"}, yes) is False
    assert device.cuda_aware("auto", {"MPIOPT_CUDA_AWARE": "auto"}, yes) is True
    assert device.cuda_aware(None, {}, yes) is True
    assert device.cuda_aware(None, {}, no) is False
    with pytest.raises(ValueError, match="MPIOPT_CUDA_AWARE"):
        device.cuda_aware(None, {"MPIOPT_CUDA_AWARE": "sometimes"}, yes)
    with pytest.raises(ValueError, match="cuda_aware must be one of"):
        device.cuda_aware("sometimes", {}, yes)


def test_detection_asks_mpi_and_falls_back_to_false(monkeypatch):
    assert device.detect_cuda_aware() in (True, False)
    monkeypatch.setattr(MPI, "Query_cuda_support", lambda: True, raising=False)
    assert device.detect_cuda_aware() is True
    monkeypatch.setattr(MPI, "Query_cuda_support", lambda: 0, raising=False)
    assert device.detect_cuda_aware() is False

    def unsupported():
        raise NotImplementedError("MPIX_Query_cuda_support")
    monkeypatch.setattr(MPI, "Query_cuda_support", unsupported, raising=False)
    assert device.detect_cuda_aware() is False
    monkeypatch.delattr(MPI, "Query_cuda_support", raising=False)
    assert device.detect_cuda_aware() is False


def test_numpy_calls_never_leave_the_host_route():
    host = np.zeros(3)
    for aware in (True, False):
        for capable in (True, False):
            assert device.route((host, host), aware, capable) == "host"
            assert device.route((None, host), aware, capable) == "host"


@pytest.mark.mpi
def test_reducers_take_the_setting_from_the_argument_or_the_environment(comm, monkeypatch):
    monkeypatch.setenv("MPIOPT_CUDA_AWARE", "1")
    with get_reducer("ring", comm) as reducer:
        assert reducer.cuda_aware is True
    with get_reducer("ring", comm, cuda_aware=False) as reducer:
        assert reducer.cuda_aware is False
        reducer.cuda_aware = None  # back to the environment
        assert reducer.cuda_aware is True
    monkeypatch.setenv("MPIOPT_CUDA_AWARE", "0")
    with get_reducer("mpi", comm) as reducer:
        assert reducer.cuda_aware is False and reducer.direct_capable
    with get_reducer("mpi", comm, compressor="none", cuda_aware=True) as reducer:
        assert reducer.cuda_aware is True and reducer.inner.cuda_aware is True
        reducer.cuda_aware = False
        assert reducer.inner.cuda_aware is False
    monkeypatch.delenv("MPIOPT_CUDA_AWARE")
    with get_reducer("ring", comm) as reducer:
        assert reducer.cuda_aware is device.detect_cuda_aware()
    with pytest.raises(ValueError, match="cuda_aware must be one of"):
        get_reducer("ring", comm, cuda_aware="perhaps")
    with pytest.raises(ValueError, match="cuda_aware must be one of"):
        get_reducer("ring", comm, compressor="none", cuda_aware="perhaps")


@pytest.mark.mpi
def test_only_mpis_own_algorithms_take_device_buffers_directly(comm):
    for name in REDUCER_NAMES:
        with get_reducer(name, comm) as reducer:
            if name != "auto":
                assert reducer._direct_capable(8) is (name == "mpi")
    with AutoReducer(comm, small_bytes=1024) as reducer:
        assert reducer._direct_capable(8) and not reducer._direct_capable(4096)
    with AutoReducer(comm, small_bytes=1024, small="rd") as reducer:
        assert not reducer._direct_capable(8)


# -- an emulated CuPy: numpy arrays the backend takes for device arrays -------------------------------------------
class FakeDevice:
    def __init__(self, number=0):
        self.id = number

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def use(self):
        pass

    def synchronize(self):
        pass


class DeviceArray(np.ndarray):
    """A numpy array that the code under test takes for a CuPy array (results of numpy functions stay
    DeviceArrays, reductions stay 0-d arrays, as in CuPy)."""

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return np.asarray(array).view(DeviceArray)

    @property
    def device(self):
        return FakeDevice(0)

    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is None:
            return np.array(self)
        assert type(out) is np.ndarray and out.shape == self.shape and out.dtype == self.dtype, "CuPy's get checks"
        np.copyto(out, self)
        return out

    def set(self, array, stream=None):
        assert type(array) is np.ndarray and array.shape == self.shape and array.dtype == self.dtype, "CuPy's set"
        assert self.flags.c_contiguous
        np.copyto(self, array)


def on_device(value):
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return np.asarray(value).view(DeviceArray)
    if isinstance(value, tuple):
        return tuple(on_device(item) for item in value)
    return value


class Emulated(types.ModuleType):
    """numpy's (or a module's) functions returning DeviceArrays."""

    def __init__(self, name, source, **extra):
        super().__init__(name)
        self._source = source
        self.__dict__.update(extra)

    def __getattr__(self, name):
        value = getattr(self._source, name)
        if callable(value) and not isinstance(value, type):
            return lambda *args, **kwargs: on_device(value(*args, **kwargs))
        return value


class Streams:
    @staticmethod
    def get_current_stream():
        return FakeDevice()

    Device = FakeDevice
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)


@pytest.fixture
def emulated(monkeypatch):
    """mpiopt's backend pointed at the emulated CuPy (cupy, cupyx and cupyx.scipy.special in sys.modules)."""
    cupy = Emulated("cupy", np, ndarray=DeviceArray, cuda=Streams, asnumpy=lambda a: np.array(a))
    special = Emulated("cupyx.scipy.special", scipy.special)
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = lambda shape, dtype=np.float64: np.empty(shape, dtype=dtype)
    cupyx.scipy = types.ModuleType("cupyx.scipy")
    cupyx.scipy.special = special
    for name, module in [("cupy", cupy), ("cupyx", cupyx), ("cupyx.scipy", cupyx.scipy),
                         ("cupyx.scipy.special", special)]:
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(backend, "_cupy", lambda: cupy)
    host = backend.to_host

    def to_host(array):  # CuPy's arrays are no numpy arrays: to_host copies them with get()
        return array.get() if isinstance(array, DeviceArray) else host(array)
    for module in ("mpiopt.core.backend", "mpiopt.core.result", "mpiopt.optim.base", "mpiopt.train.trainer",
                   "mpiopt.train.checkpoint"):
        monkeypatch.setattr(f"{module}.to_host", to_host)
    return cupy


def test_the_emulation_is_taken_for_a_device(emulated):
    array = on_device(np.arange(3.0))
    assert backend.get_array_module(array) is emulated and device.is_device_array(array)
    assert not device.is_device_array(np.arange(3.0))
    assert type(array + 1) is DeviceArray and type(emulated.empty(3)) is DeviceArray


def reduce_all(reducer, x, chunk_count):
    """allreduce (new and in place, sum and mean), reduce_scatter, allgather, allgatherv of ``x``."""
    results = [reducer.allreduce(x), reducer.allreduce(x, op="mean" if x.dtype.kind == "f" else "min")]
    in_place = x.copy()
    reducer.allreduce(in_place, in_place, op="max")
    results.append(in_place)
    chunk = reducer.reduce_scatter(x)
    results += [chunk, reducer.allgather(chunk, chunk_count), reducer.allgather(chunk)]
    gathered, counts = reducer.allgatherv(x[:reducer.rank + 1])
    return results + [gathered, np.array(counts)]


@pytest.mark.mpi
@pytest.mark.parametrize("aware", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("name", REDUCER_NAMES)
def test_emulated_device_buffers_reduce_as_numpy_buffers(comm, emulated, name, aware):
    stream = random_stream(5, "gpu-collectives", comm.rank)
    for count, dtype in [(1000, np.float64), (37, np.float32), (5, np.int32), (20000, np.float64)]:
        x = (stream.standard_normal(count) * 10).astype(dtype)
        with get_reducer(name, comm, cuda_aware=aware) as reducer:
            expected = reduce_all(reducer, x, count)
            assert reducer._pinned is None, "numpy calls never stage"
            got = reduce_all(reducer, on_device(x), count)
            if comm.size > 1:  # one rank does not communicate
                direct = aware and (name == "mpi" or name == "auto" and x.nbytes < reducer.small_bytes)
                assert (reducer._pinned is None) is direct, "staged exactly when not direct"
        for want, have in zip(expected[:-1], got[:-1]):
            assert type(have) is DeviceArray, "results stay on the device"
            assert have.dtype == want.dtype and np.array_equal(np.asarray(have), want)
        assert np.array_equal(expected[-1], got[-1])


@pytest.mark.mpi
def test_emulated_device_recvbuf_must_be_on_the_device_too(comm, emulated):
    from mpiopt.core.comm import CollectiveError
    with get_reducer("ring", comm) as reducer:
        with pytest.raises(CollectiveError, match="on the device, as sendbuf"):
            reducer.allreduce(on_device(np.zeros(4)), np.zeros(4))


@pytest.mark.mpi
@pytest.mark.parametrize("aware", [False, True], ids=["staged", "direct"])
@pytest.mark.parametrize("mode", ["allreduce", "allgather", "two-pass"])
@pytest.mark.parametrize("name", ["mpi", "ring"])
def test_emulated_compressed_allreduce_of_device_buffers(comm, emulated, name, mode, aware):
    x = random_stream(6, "gpu-compressed", comm.rank).standard_normal(999)
    with get_reducer(name, comm, compressor="none", mode=mode, cuda_aware=aware) as reducer:
        expected = reducer.allreduce(x, name="g")
        got = reducer.allreduce(on_device(x), name="g")
        assert type(got) is DeviceArray and np.array_equal(np.asarray(got), expected)
        assert reducer.last_bytes_sent > 0 or comm.size == 1


def train_case(comm, model_name, optimizer_name, zero_stage, X, y, **settings):
    model = {"linear": get_model("linear", n_features=DATA.n_features, alpha=1e-3),
             "logistic": get_model("logistic", n_features=DATA.n_features, alpha=1e-3),
             "mlp": get_model("mlp", n_features=DATA.n_features, n_classes=DATA.n_classes, hidden=(16, 8),
                              alpha=1e-3)}[model_name]
    options = {"lr": 1e-2} if optimizer_name == "adam" else {"lr": 0.01, "momentum": 0.9}
    settings = {"epochs": 1, "batch_size": 64, "max_steps": 6, "zero_stage": zero_stage, **settings}
    return train(model, X, y, get_optimizer(optimizer_name, **options), comm, **settings)


def targets(model_name, y):
    """Labels for the model: digits' classes (mlp), whether a digit is odd (logistic), its value (linear)."""
    if model_name == "logistic":
        return (y % 2).astype(np.int64)
    if model_name == "linear":
        return y.astype(np.float64)
    return y


CASES = [(model, optimizer, stage) for model in ("linear", "logistic", "mlp") for optimizer in ("sgd", "adam")
         for stage in (0, 1)]


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("model_name, optimizer_name, zero_stage", CASES + [("mlp", "adam", 2), ("mlp", "sgd", 3)])
def test_emulated_training_on_the_device_is_the_numpy_run(comm, emulated, model_name, optimizer_name, zero_stage):
    y = targets(model_name, DATA.y_train)
    expected = train_case(comm, model_name, optimizer_name, zero_stage, DATA.X_train, y)
    got = train_case(comm, model_name, optimizer_name, zero_stage, on_device(DATA.X_train), on_device(y))
    assert type(got.params) is DeviceArray
    assert np.array_equal(np.asarray(got.params), expected.params)
    assert got.loss == expected.loss and got.history["loss"] == expected.history["loss"]
    assert got.info["device"] == "gpu 0" and expected.info["device"] == "cpu"


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_emulated_device_setting_moves_the_data(comm, emulated, monkeypatch):
    moved = []
    monkeypatch.setattr(emulated, "asarray", lambda a, *args, **kwargs:
                        moved.append(1) or on_device(np.asarray(a, *args, **kwargs)), raising=False)
    expected = train_case(comm, "mlp", "adam", 0, DATA.X_train, DATA.y_train, compressor="none")
    got = train_case(comm, "mlp", "adam", 0, DATA.X_train, DATA.y_train, compressor="none", device="gpu")
    assert moved and type(got.params) is DeviceArray
    assert np.array_equal(np.asarray(got.params), expected.params)
    back = train_case(comm, "mlp", "adam", 0, on_device(DATA.X_train), on_device(DATA.y_train), device="cpu")
    assert type(back.params) is np.ndarray and back.info["device"] == "cpu"
    assert np.array_equal(back.params, expected.params)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_emulated_checkpoints_move_between_device_and_host(comm, emulated, tmp_path):
    path = comm.bcast(str(tmp_path / "gpu.npz"), root=0)
    whole = train_case(comm, "mlp", "adam", 1, DATA.X_train, DATA.y_train)
    train_case(comm, "mlp", "adam", 1, on_device(DATA.X_train), on_device(DATA.y_train), checkpoint=path,
               max_steps=3)
    resumed = train_case(comm, "mlp", "adam", 1, DATA.X_train, DATA.y_train, checkpoint=path)
    assert np.array_equal(resumed.params, whole.params)
    comm.Barrier()
    if comm.rank == 0:
        (tmp_path / "gpu.npz").unlink()
    comm.Barrier()
    train_case(comm, "mlp", "adam", 1, DATA.X_train, DATA.y_train, checkpoint=path, max_steps=3)
    resumed = train_case(comm, "mlp", "adam", 1, on_device(DATA.X_train), on_device(DATA.y_train), checkpoint=path)
    assert type(resumed.params) is DeviceArray and np.array_equal(np.asarray(resumed.params), whole.params)


def test_device_gpu_without_a_gpu_is_refused(monkeypatch):
    from mpiopt.core.comm import CollectiveError
    monkeypatch.setattr("mpiopt.train.settings.device_count", lambda: 0)
    with pytest.raises(CollectiveError, match="device 'gpu' needs CuPy and a CUDA GPU"):
        train_case(MPI.COMM_SELF, "linear", "sgd", 0, DATA.X_train, DATA.y_train.astype(float), device="gpu")
    with pytest.raises(CollectiveError, match="device must be None, 'cpu' or 'gpu'"):
        train_case(MPI.COMM_SELF, "linear", "sgd", 0, DATA.X_train, DATA.y_train.astype(float), device="tpu")


# -- on a GPU -----------------------------------------------------------------------------------------------------
def gpu_routes():
    """staged always; direct only where MPI is CUDA-aware (forcing it elsewhere would crash MPI)."""
    return ["staged", pytest.param("direct", marks=pytest.mark.skipif(
        not device.cuda_aware(), reason="MPI is not CUDA-aware (MPIOPT_CUDA_AWARE=1 forces it where it is)"))]


@pytest.fixture
def cupy(comm):
    import cupy
    backend.select_device(comm)
    return cupy


TOLERANCE = {"powersgd": 1e-4}


@pytest.mark.gpu
@requires_gpu
@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("route", gpu_routes())
@pytest.mark.parametrize("name", ["mpi", "ring"])
@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype, n", [(np.float32, 4096), (np.float64, 1266)], ids=["float32-4096", "float64-1266"])
def test_gpu_compressed_allreduce_equals_numpy(comm, cupy, compressor, name, route, dtype, n):
    # 1266 float64: every payload but the first lies at a misaligned offset of the gathered bytes (Top-K's
    # 12 k with k = 127, sign's 4 + 159, QSGD's 4 buckets + 1266), which must not reach a kernel as such
    stream = random_stream(7, "gpu-compressed", comm.rank)
    options = {"ratio": 0.1} if compressor in ("topk", "randomk") else {}
    with get_reducer(name, comm, compressor=compressor, compressor_options=options,
                     cuda_aware=route == "direct") as on_host, \
            get_reducer(name, comm, compressor=compressor, compressor_options=options,
                        cuda_aware=route == "direct") as on_gpu:
        for step in range(3):  # error feedback and warm starts carry over the steps
            x = stream.standard_normal(n).astype(dtype)
            expected = on_host.allreduce(x, name="g", op="mean")
            got = on_gpu.allreduce(cupy.asarray(x), name="g", op="mean")
            assert isinstance(got, cupy.ndarray)
            tolerance = TOLERANCE.get(compressor, 1e-5)
            np.testing.assert_allclose(cupy.asnumpy(got), expected, rtol=tolerance, atol=tolerance)
            assert on_gpu.last_bytes_sent == on_host.last_bytes_sent


@pytest.mark.gpu
@requires_gpu
@pytest.mark.mpi
@pytest.mark.parametrize("route", gpu_routes())
@pytest.mark.parametrize("name", REDUCER_NAMES)
def test_gpu_reducers_equal_numpy(comm, cupy, name, route):
    x = random_stream(8, "gpu-collectives", comm.rank).standard_normal(70000)
    with get_reducer(name, comm, cuda_aware=route == "direct") as reducer:
        expected = reduce_all(reducer, x, x.size)
        got = reduce_all(reducer, cupy.asarray(x), x.size)
    for want, have in zip(expected[:-1], got[:-1]):
        assert isinstance(have, cupy.ndarray)
        np.testing.assert_allclose(cupy.asnumpy(have), want, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("model_name, optimizer_name, zero_stage", CASES)
def test_gpu_training_reaches_the_cpu_parameters(comm, cupy, model_name, optimizer_name, zero_stage):
    y = targets(model_name, DATA.y_train)
    expected = train_case(comm, model_name, optimizer_name, zero_stage, DATA.X_train, y)
    got = train_case(comm, model_name, optimizer_name, zero_stage, cupy.asarray(DATA.X_train), cupy.asarray(y))
    assert isinstance(got.params, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(got.params), expected.params, rtol=1e-6, atol=1e-8)
    assert got.loss == pytest.approx(expected.loss, rel=1e-9)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("compressor", ["none", "fp16", "topk"])
def test_gpu_compressed_training_with_device_setting(comm, cupy, compressor):
    options = {"compressor": compressor, "compressor_options": {"ratio": 0.1} if compressor == "topk" else None}
    expected = train_case(comm, "mlp", "adam", 0, DATA.X_train, DATA.y_train, **options)
    got = train_case(comm, "mlp", "adam", 0, DATA.X_train, DATA.y_train, device="gpu", **options)
    assert isinstance(got.params, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(got.params), expected.params, rtol=1e-5, atol=1e-6)

