"""The shared plumbing (issue 20, item 6): lazy subpackages, one scratch cache, every reducer's bytes on the wire,
and composite reducers that use only other reducers' public methods."""
import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpiopt.collectives import get_reducer
from mpiopt.collectives.traffic import ring_allgather_bytes, ring_allreduce_bytes, ring_reduce_scatter_bytes
from mpiopt.compression import get_compressor
from mpiopt.core.backend import Scratch
from mpiopt.core.partition import offsets

ROOT = Path(__file__).resolve().parent.parent
LAZY = ("train", "federated", "asyncsgd", "compression", "kernels", "admm", "collectives", "data", "models", "optim",
        "slurm")


def test_import_mpiopt_is_light_and_every_subpackage_loads_on_first_use():
    script = ("import sys, mpiopt\n"
              f"eager = [name for name in {LAZY!r} if 'mpiopt.' + name in sys.modules]\n"
              "assert not eager, eager\n"
              "assert 'numpy' not in sys.modules\n"
              f"for name in {LAZY!r}:\n"
              "    assert getattr(mpiopt, name).__name__ == 'mpiopt.' + name\n"
              f"assert set({LAZY!r}) <= set(dir(mpiopt))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_scratch_reuses_a_buffer_per_key_and_dtype_and_grows_it():
    scratch = Scratch()
    first = scratch("work", 10, np.float64)
    assert scratch("work", 8, np.float64).ctypes.data == first.ctypes.data, "a smaller request reuses the buffer"
    assert scratch("work", 10, np.float32).ctypes.data != first.ctypes.data, "each dtype has its own"
    grown = scratch("work", 100, np.float64)
    assert grown.size == 100 and scratch("work", 50, np.float64).ctypes.data == grown.ctypes.data
    assert len(scratch.items()) == 2
    scratch.clear()
    assert not scratch.items()


def test_pinned_scratch_keeps_one_block_of_bytes_per_key(monkeypatch):
    allocations = []

    def empty_pinned(shape, dtype=np.uint8):
        allocations.append(shape)
        return np.empty(shape, dtype=dtype)
    fake = type(sys)("cupyx")
    fake.empty_pinned = empty_pinned
    monkeypatch.setitem(sys.modules, "cupyx", fake)
    pinned = Scratch(pinned=True)
    a = pinned("out", 4, np.float64)
    b = pinned("out", 8, np.float32)  # 32 bytes as well: the same block, another dtype
    assert a.dtype == np.float64 and b.dtype == np.float32 and a.ctypes.data == b.ctypes.data
    assert allocations == [64], "at least 64 bytes, once"
    pinned("out", 100, np.float64)
    assert allocations == [64, 800]


def test_a_compressor_reuses_its_scratch_buffers():
    compressor = get_compressor("qsgd")
    x = np.random.default_rng(0).standard_normal(1000)
    out = np.zeros_like(x)
    payload, ctx = compressor.compress(x)
    compressor.accumulate(payload, ctx, out)
    held = {key: buffer.ctypes.data for key, buffer in compressor._scratch.items()}
    assert held, "the default accumulate decodes into a scratch buffer"
    compressor.accumulate(payload, ctx, out)
    assert {key: buffer.ctypes.data for key, buffer in compressor._scratch.items()} == held
    assert compressor.scratch("accumulate", 1000, np.float64).ctypes.data in held.values()


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7])
def test_ring_byte_formulas_follow_the_ring_steps(p):
    for count in (0, 1, 5, 17, 1000):
        bounds = offsets(count, p)

        def chunk(c):
            return bounds[c % p + 1] - bounds[c % p]
        for rank in range(p):
            steps = range(p - 1)
            sent = sum(chunk(rank - s - 1) for s in steps) + sum(chunk(rank - s) for s in steps)
            received = sum(chunk(rank - s - 2) for s in steps) + sum(chunk(rank - s - 1) for s in steps)
            assert ring_allreduce_bytes(count, 8, p, rank) == ((8 * sent, 8 * received) if count and p > 1
                                                               else (0, 0))
            half = sum(chunk(rank - s - 1) for s in steps), sum(chunk(rank - s - 2) for s in steps)
            assert ring_reduce_scatter_bytes(count, 4, p, rank) == ((4 * half[0], 4 * half[1]) if count and p > 1
                                                                    else (0, 0))
            blocks = [4 * chunk(r) for r in range(p)]
            gathered = sum(blocks[(rank - s) % p] for s in steps), sum(blocks[(rank - s - 1) % p] for s in steps)
            assert ring_allgather_bytes(blocks, rank) == (gathered if count and p > 1 else (0, 0))


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["mpi", "ring", "rd", "hier", "ps", "auto"])
def test_every_reducer_counts_its_bytes_and_takes_a_name_and_shapes(comm, name):
    p, rank = comm.size, comm.rank
    x = np.arange(11, dtype=np.float64) + rank
    with get_reducer(name, comm) as reducer:
        assert (reducer.bytes_sent, reducer.last_bytes_sent) == (0, 0)
        out = reducer.allreduce(x, name="bucket0", shapes=[(11,)])
        assert np.array_equal(out, comm.allreduce(x))
        assert (reducer.last_bytes_sent, reducer.last_bytes_received) == ring_allreduce_bytes(11, 8, p, rank)
        chunk = reducer.reduce_scatter(x)
        assert (reducer.last_bytes_sent, reducer.last_bytes_received) == ring_reduce_scatter_bytes(11, 8, p, rank)
        reducer.allgather(chunk, 11)
        bounds = offsets(11, p)
        assert (reducer.last_bytes_sent, reducer.last_bytes_received) == ring_allgather_bytes(
            [8 * (bounds[r + 1] - bounds[r]) for r in range(p)], rank)
        total = ring_allreduce_bytes(11, 8, p, rank)[0] + ring_reduce_scatter_bytes(11, 8, p, rank)[0] \
            + reducer.last_bytes_sent
        assert reducer.bytes_sent == total
        reducer.reset_counters()
        assert reducer.bytes_sent == reducer.bytes_received == reducer.last_bytes_sent == 0


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_compressed_reducer_reads_its_bytes_as_every_reducer_does(comm):
    x = np.random.default_rng(comm.rank).standard_normal(1000)
    with get_reducer("ring", comm, compressor="topk", ratio=0.1) as reducer:
        reducer.allreduce(x, name="g")
        payload = get_compressor("topk", ratio=0.1).payload_bytes(1000, np.float64)
        assert reducer.last_bytes_sent == (comm.size - 1) * payload
        reducer.reduce_scatter(x)  # uncompressed, through the inner reducer: its count
        assert reducer.last_bytes_sent == ring_reduce_scatter_bytes(1000, 8, comm.size, comm.rank)[0]


def test_no_reducer_calls_a_private_method_of_another_object():
    """An ast scan of mpiopt/collectives: a private method of its classes (``_on_wire``, ``_allreduce_into``,
    ``_gather``, ...) is called only on ``self``, ``cls`` or the class itself, never on another reducer."""
    trees = {path.name: ast.parse(path.read_text())
             for path in sorted((ROOT / "mpiopt" / "collectives").glob("*.py"))}
    classes = {node.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    private = {item.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
               for item in node.body if isinstance(item, ast.FunctionDef)
               and item.name.startswith("_") and not item.name.startswith("__")}
    assert {"_on_wire", "_allreduce_into", "_gather_payloads", "_allgather_into"} <= private
    calls = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in private:
                owner = node.func.value
                if not (isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in classes)):
                    calls.append(f"{name}:{node.lineno} {ast.unparse(node.func)}")
    assert not calls, calls
