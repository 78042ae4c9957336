#!/usr/bin/env bash
# One call on a borrowed GPU machine: install, run the GPU tests and the kernels benchmark, keep everything.
#
#     benchmarks/gpu_check.sh [--no-install] [--quick] [OUT]
#
# OUT is the first non-option argument, else $OUT, else ./gpu-check.  Written there:
#
#   summary.txt              what ran, each step's exit status and time, the tests' counts, the targets
#   env.txt                  date, host, nvidia-smi, nvcc, python, numpy/cupy/mpi4py versions, pip freeze
#   install.log              what pip did (or why it was skipped); torch with CUDA too, where it is missing
#   gpu-probe.txt            whether CuPy sees a device, and whether NVRTC, cuBLAS and cuSOLVER work
#   pytest-gpu.log/.xml      python -m pytest -m gpu --with-mpi (one process; the log and JUnit XML)
#   pytest-gpu-mpi.log       mpiexec -n 2 python -m pytest -m "gpu and mpi" --only-mpi, and per rank
#   pytest-gpu-mpi.rankR.xml   its JUnit XML
#   kernels.json/.log/.md    benchmarks/kernels.py --allow-no-gpu: the JSON, its output, its tables (report.py)
#
# Every step has a timeout, and the steps share a budget (GPU_CHECK_BUDGET seconds, 470 by default) so the
# whole run ends in under about 8 minutes.  Without a GPU (nvidia-smi lists none and CuPy sees none) the
# tests and the benchmark's measurements are skipped, the benchmark writes {"gpu": null, "reason": ...}, the
# summary says "no GPU", and the script exits 0.  It exits 1 when a step failed on a machine with a GPU,
# including a GPU that CuPy cannot use (no CuPy installed: pip could not reach an index, say).  Without an
# index, point pip at wheels with PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels.
#
# Options and variables:
#   --no-install     do not run pip (use the environment as it is)
#   --quick          the benchmark's tiny sizes (checks the plumbing, not the GPU)
#   PYTHON           the interpreter (default: ./.venv/bin/python if present, else a new ./.venv from python3)
#   KERNELS_ARGS     more arguments for benchmarks/kernels.py
#   GPU_CHECK_BUDGET the total seconds the steps may take (470)
#   MPIEXEC          the mpiexec for the 2-rank tests (default: the one beside PYTHON, else on PATH)

set -u

INSTALL=1
QUICK=0
TARGET=""
for argument in "$@"; do
    case "$argument" in
        --no-install) INSTALL=0 ;;
        --quick) QUICK=1 ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        -*) echo "gpu_check.sh: unknown option $argument" >&2; exit 2 ;;
        *) TARGET="$argument" ;;
    esac
done
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${TARGET:-${OUT:-$ROOT/gpu-check}}"
mkdir -p "$OUTDIR" || { echo "gpu_check.sh: cannot create $OUTDIR" >&2; exit 2; }
OUTDIR="$(cd "$OUTDIR" && pwd)"
cd "$ROOT" || exit 2

BUDGET="${GPU_CHECK_BUDGET:-470}"
START=$SECONDS
SUMMARY="$OUTDIR/summary.txt"
FAILED=0
# what an earlier run left here goes (the logs are appended to)
rm -f "$OUTDIR"/summary.txt "$OUTDIR"/env.txt "$OUTDIR"/install.log "$OUTDIR"/venv.log "$OUTDIR"/gpu-probe.txt \
    "$OUTDIR"/pytest-gpu*.log "$OUTDIR"/pytest-gpu*.xml "$OUTDIR"/kernels.json "$OUTDIR"/kernels.log \
    "$OUTDIR"/kernels.md "$OUTDIR"/report.err
: > "$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }

# seconds for a step: at most $1, and what is left of the budget less $RESERVE (kept for the steps after it;
# at least 5)
allow() {
    local left=$((BUDGET - (SECONDS - START) - ${RESERVE:-0}))
    local wanted=$1
    [ "$left" -lt "$wanted" ] && wanted=$left
    [ "$wanted" -lt 5 ] && wanted=5
    echo "$wanted"
}

# step NAME MAX_SECONDS LOG COMMAND...: run it with a timeout, output to LOG, a line in the summary
step() {
    local name=$1 limit log=$3
    limit=$(allow "$2")
    shift 3
    local began=$SECONDS
    echo "\$ $*" >> "$log"
    timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
    local status=$?
    local note=""
    [ "$status" -eq 124 ] || [ "$status" -eq 137 ] && note=" (timed out after ${limit} s)"
    say "$(printf '%-22s exit %3d in %4d s%s  -> %s' "$name" "$status" $((SECONDS - began)) "$note" "${log#"$OUTDIR"/}")"
    return "$status"
}

say "gpu_check.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), output in $OUTDIR (budget ${BUDGET} s)"

# -- the interpreter --------------------------------------------------------------------------------------------
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif [ -x "$ROOT/.venv/bin/python" ] && "$ROOT/.venv/bin/python" -c "import sys" 2>/dev/null; then
    PY="$ROOT/.venv/bin/python"
elif [ "$INSTALL" -eq 1 ] && python3 -m venv --system-site-packages "$ROOT/.venv" > "$OUTDIR/venv.log" 2>&1; then
    PY="$ROOT/.venv/bin/python"   # the system's packages stay visible, in case pip cannot reach an index
    say "created a virtual environment in $ROOT/.venv (with the system's site-packages)"
else
    PY="$(command -v python3 || command -v python)"
fi
say "python: $PY"

# -- installation ----------------------------------------------------------------------------------------------
INSTALL_LOG="$OUTDIR/install.log"
DEVICES="$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"   # GPUs the driver lists
DEVICES="${DEVICES:-0}"
# CuPy runs here with what mpiopt needs: a device, NVRTC (the kernels), cuBLAS and cuSOLVER (the lasso)
CUPY_CHECK='import cupy
assert cupy.arange(4).sum().item() == 6
kernel = cupy.RawKernel(r"""extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }""", "twice")
x = cupy.ones(32, dtype=cupy.float32); kernel((1,), (32,), (x,)); assert float(x.sum()) == 64
a = cupy.eye(8) * 4.0; assert float(cupy.linalg.cholesky(a @ a)[0, 0]) == 4.0'
cupy_works() { "$PY" -c "$CUPY_CHECK" > /dev/null 2>&1; }
cupy_runs() { "$PY" -c "import cupy; cupy.arange(4).sum().item()" > /dev/null 2>&1; }   # the device alone
torch_cuda() { "$PY" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" > /dev/null 2>&1; }
if [ "$INSTALL" -eq 0 ]; then
    echo "--no-install: pip was not run" > "$INSTALL_LOG"
    say "install: skipped (--no-install)"
else
    PIP=("$PY" -m pip install --disable-pip-version-check --retries 1 --timeout 20)
    if RESERVE=240 step "pip install .[mpich,test,gpu]" 180 "$INSTALL_LOG" "${PIP[@]}" -e ".[mpich,test,gpu]"; then
        say "install: pip install -e .[mpich,test,gpu] (cupy-cuda12x) done"
    else
        say "install: pip install -e .[mpich,test,gpu] failed; trying .[mpich,test], then CuPy alone"
        RESERVE=240 step "pip install .[mpich,test]" 120 "$INSTALL_LOG" "${PIP[@]}" -e ".[mpich,test]" || true
    fi
    if [ "$DEVICES" -gt 0 ] && ! cupy_works; then
        # CuPy's wheels need the CUDA libraries (NVRTC, cuBLAS, cuSOLVER): from the system's toolkit, or from
        # PyPI with the [ctk] extra; and a CUDA 13 driver without CUDA 12 support needs CuPy for CUDA 13
        if RESERVE=240 step "pip install cupy-cuda12x[ctk]" 120 "$INSTALL_LOG" "${PIP[@]}" "cupy-cuda12x[ctk]" && cupy_works; then
            say "install: cupy-cuda12x with the CUDA libraries from PyPI ([ctk]) works"
        elif cupy_runs; then   # CuPy for CUDA 12 uses the device: keep it (the probe names what it lacks)
            say "install: cupy-cuda12x runs on the device but lacks a CUDA library (gpu-probe.txt)"
        else
            echo "\$ pip uninstall -y cupy-cuda12x" >> "$INSTALL_LOG"
            "$PY" -m pip uninstall -y cupy-cuda12x >> "$INSTALL_LOG" 2>&1
            if RESERVE=240 step "pip install cupy-cuda13x[ctk]" 120 "$INSTALL_LOG" "${PIP[@]}" "cupy-cuda13x[ctk]" && cupy_works
            then
                say "install: cupy-cuda13x[ctk] works"
            else
                say "install: no CuPy that works here (install.log)"
            fi
        fi
    elif [ "$DEVICES" -eq 0 ]; then
        say "install: nvidia-smi lists no GPU; CuPy left as it is"
    fi
    # torch with CUDA for tests/test_torch_cuda.py (the hooks and DistributedOptimizer on CUDA tensors): a CUDA
    # build from the index, where one can be reached; without it those tests skip with their reason
    if [ "$DEVICES" -gt 0 ] && ! torch_cuda; then
        RESERVE=240 step "pip install torch" 150 "$INSTALL_LOG" "${PIP[@]}" "torch>=2.1" || true
    fi
    say "install: what pip did is in install.log"
fi

# -- the environment -------------------------------------------------------------------------------------------
{
    echo "date: $(date -u)"; echo "host: $(hostname)"; uname -a
    echo; echo "== nvidia-smi"; timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi not available)"
    echo; echo "== nvidia-smi --query-gpu"
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory,pcie.link.gen.max \
        --format=csv 2>&1 || echo "(nvidia-smi not available)"
    echo; echo "== nvcc"; timeout 30 nvcc --version 2>&1 || echo "(nvcc not on PATH)"
    echo; echo "== python"; "$PY" --version 2>&1
    timeout 60 "$PY" - <<'EOF' 2>&1
import importlib
for name in ("numpy", "scipy", "mpi4py", "cupy", "pytest", "mpiopt"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as error:
        print(f"{name}: not importable ({type(error).__name__}: {error})")
try:
    import cupy
    print("cupy config:")
    cupy.show_config()
except Exception as error:
    print(f"cupy config: unavailable ({type(error).__name__}: {error})")
EOF
    echo; echo "== pip freeze"; timeout 60 "$PY" -m pip freeze 2>&1
    echo; echo "== CPU"; grep -m1 "model name" /proc/cpuinfo 2>/dev/null; nproc 2>/dev/null
} > "$OUTDIR/env.txt" 2>&1
say "environment: env.txt"

# -- is there a GPU ----------------------------------------------------------------------------------------------
timeout 120 "$PY" - > "$OUTDIR/gpu-probe.txt" 2>&1 <<'EOF'
import sys
try:
    import cupy
except ImportError as error:
    print(f"no GPU: CuPy is not installed ({error})")
    sys.exit(1)
try:
    count = cupy.cuda.runtime.getDeviceCount()
    if count < 1:
        raise RuntimeError("getDeviceCount() = 0")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    total = int(cupy.arange(1000).sum())
    assert total == 499500, total
except Exception as error:
    print(f"no GPU: CuPy {cupy.__version__} cannot use a device ({type(error).__name__}: {error})")
    sys.exit(1)
for what, check in (("NVRTC", "kernel"), ("cuBLAS", "matmul"), ("cuSOLVER", "cholesky")):
    try:
        if check == "kernel":
            kernel = cupy.RawKernel(r'''extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2; }''', "twice")
            x = cupy.ones(32, dtype=cupy.float32)
            kernel((1,), (32,), (x,))
            assert float(x.sum()) == 64
        elif check == "matmul":
            assert float((cupy.eye(8) @ cupy.eye(8)).sum()) == 8
        else:
            assert float(cupy.linalg.cholesky(cupy.eye(8) * 4.0)[0, 0]) == 2
        print(f"  {what}: works", file=sys.stderr)
    except Exception as error:
        print(f"  {what}: FAILS ({type(error).__name__}: {error})", file=sys.stderr)
print(f"GPU: {count} device(s), device 0 {name.decode() if isinstance(name, bytes) else name}; CuPy {cupy.__version__}")
EOF
PROBE=$?
if [ "$PROBE" -eq 0 ]; then
    GPU=1
    say "$(tail -n 1 "$OUTDIR/gpu-probe.txt")"
    if grep -q "FAILS" "$OUTDIR/gpu-probe.txt"; then
        say "  but CuPy lacks a CUDA library: $(grep FAILS "$OUTDIR/gpu-probe.txt" | tr -s ' ' | tr '\n' ';')"
        FAILED=1
    fi
elif [ "$DEVICES" -gt 0 ]; then  # the machine has a GPU, but CuPy cannot use it: that is a failure
    GPU=0
    FAILED=1
    say "GPU present (nvidia-smi lists ${DEVICES}) but CuPy cannot use it: $(tail -n 1 "$OUTDIR/gpu-probe.txt")"
else
    GPU=0
    say "no GPU: $(tail -n 1 "$OUTDIR/gpu-probe.txt" | sed 's/^no GPU: //')"
fi

# -- the GPU tests ----------------------------------------------------------------------------------------------
counts() {  # the last line of pytest's output that has a count ("3 passed, 1 skipped in 2.0s")
    grep -E "[0-9]+ (passed|failed|error|skipped|deselected)" "$1" 2>/dev/null | tail -n 1 | sed 's/=//g; s/^ *//'
}
# the mpiexec beside the interpreter (the mpich wheel's), else the one on PATH
# (or $MPIEXEC when set: an MPI installed elsewhere, say with pip --prefix from carried wheels)
if [ -z "${MPIEXEC:-}" ]; then
    MPIEXEC="$("$PY" -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "mpiexec"))' 2>/dev/null)"
    [ -n "$MPIEXEC" ] && [ -x "$MPIEXEC" ] || MPIEXEC="$(command -v mpiexec || true)"
fi
if [ "$GPU" -eq 1 ]; then
    if torch_cuda; then
        say "torch: $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1)"
    else
        say "torch: no CUDA build here, so tests/test_torch_cuda.py skips (install.log)"
    fi
    RESERVE=180 step "pytest -m gpu" 150 "$OUTDIR/pytest-gpu.log" \
        "$PY" -m pytest -m gpu --with-mpi -q -rfEs -p no:cacheprovider --timeout=90 --junitxml="$OUTDIR/pytest-gpu.xml" \
        || FAILED=1
    say "    $(counts "$OUTDIR/pytest-gpu.log")"
    if [ -n "$MPIEXEC" ]; then
        RESERVE=130 step "mpiexec -n 2 gpu and mpi" 90 "$OUTDIR/pytest-gpu-mpi.log" \
            "$MPIEXEC" -n 2 bash -c 'exec "$0" -m pytest -m "gpu and mpi" --only-mpi -q -rfE -p no:cacheprovider --timeout=60 \
                --junitxml="$1/pytest-gpu-mpi.rank${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}.xml"' "$PY" "$OUTDIR" \
            || FAILED=1
        say "    $(counts "$OUTDIR/pytest-gpu-mpi.log")"
    else
        say "mpiexec not found: the 2-rank GPU tests did not run"
        FAILED=1
    fi
else
    say "pytest -m gpu: skipped (no GPU)"
    say "mpiexec -n 2 gpu and mpi: skipped (no GPU)"
fi

# -- the benchmark ----------------------------------------------------------------------------------------------
BENCH=(--allow-no-gpu --output "$OUTDIR/kernels.json")
[ "$QUICK" -eq 1 ] && BENCH+=(--quick)
# shellcheck disable=SC2206
[ -n "${KERNELS_ARGS:-}" ] && BENCH+=($KERNELS_ARGS)
step "benchmarks/kernels.py" 200 "$OUTDIR/kernels.log" "$PY" benchmarks/kernels.py "${BENCH[@]}"
status=$?
[ "$status" -ne 0 ] && [ "$GPU" -eq 1 ] && FAILED=1
if [ -f "$OUTDIR/kernels.json" ]; then
    if [ "$GPU" -eq 1 ] && ! "$PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["gpu"] is None)' \
            "$OUTDIR/kernels.json"; then
        say "benchmark: it found no GPU, although the probe did (kernels.json)"
        FAILED=1
    fi
    if "$PY" benchmarks/report.py "$OUTDIR/kernels.json" > "$OUTDIR/kernels.md" 2> "$OUTDIR/report.err"; then
        rm -f "$OUTDIR/report.err"
        say "report: kernels.md"
    else
        say "report: benchmarks/report.py failed (report.err)"
        FAILED=1
    fi
else
    say "benchmark: no kernels.json written"
    [ "$GPU" -eq 1 ] && FAILED=1
fi

# -- the summary -----------------------------------------------------------------------------------------------
if [ -f "$OUTDIR/kernels.md" ]; then
    { echo; echo "== targets (benchmarks/kernels.py)"; grep -E "^- |^Kernels" "$OUTDIR/kernels.md"; echo; } \
        | tee -a "$SUMMARY"
fi
if [ "$GPU" -eq 0 ] && [ "$FAILED" -eq 0 ]; then
    say "RESULT: no GPU here: the GPU tests and measurements did not run (the GPU numbers are pending)"
    say "total $((SECONDS - START)) s"
    exit 0
fi
if [ "$FAILED" -eq 0 ]; then
    say "RESULT: GPU checks passed"
else
    say "RESULT: some GPU checks failed (see the logs above)"
fi
say "total $((SECONDS - START)) s"
exit "$FAILED"
