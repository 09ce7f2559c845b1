#!/usr/bin/env bash
# The CUDA backend's device checks (issue 20), as one script for a machine with an NVIDIA GPU:
# builds the CUDA library, its tests, its benchmark and the Python extension, runs the tests (every
# per-element op on the GPU against the CPU reference, bit for bit; the engine's device path through
# the public API), the Python package on torch CUDA tensors (scripts/gpu_check_python.py), the
# device benchmark (every op beside a device copy, 256 MiB of float32), the golden data on torch
# CUDA tensors, `polyquant bench --device cuda` (beside y.copy_(x) and torch's peers), then the
# tests again under compute-sanitizer (memcheck, racecheck). Logs and a summary go to $OUT (default
# build/gpu-check).
#
#   scripts/gpu_check.sh --prepare   here, before: copies GoogleTest's sources (Debian's libgtest-dev,
#                                    /usr/src/googletest) into .gtest-src/ and downloads pytest's wheels
#                                    into .gpu-wheels/ (both ignored by git), for a machine without
#                                    GoogleTest or pytest; carry .gtest-src and .gpu-wheels with the tree
#   scripts/gpu_check.sh             on the GPU machine
#   scripts/gpu_check.sh --prebuilt DIR
#                                    on the GPU machine, with the tests, the benchmark and the library
#                                    already built here in the build tree DIR (a Release tree with
#                                    POLYQUANT_CUDA on, e.g. build/release: carry its
#                                    tests/cuda/polyquant_cuda_tests, bench/cuda/polyquant_cuda_bench and
#                                    src/backends/cuda/libpolyquant_cuda.so); skips the build (about 3 of
#                                    the 5 minutes), for short device slots
#
# Environment: POLYQUANT_CUDA_ARCHITECTURES (default 90: H100 / H200 machine code only, the fastest
# build; CI and wheels build 80;90), OUT, JOBS (default: every core), GPU_CHECK_AB=1 (the device
# benchmark once more on the general kernels only, for the A/B of the per-tensor kernels and of
# the per-channel / blockwise ones resolved per thread, and torch's peers), GPU_CHECK_CPU_BENCH=1
# (issue 19's CPU training row on this machine's cores).
#
# Time: a device slot allows 600 s per command, so the script keeps to GPU_CHECK_BUDGET seconds
# (default 540) in all: every step runs under `timeout` with its own cap and what is left of the
# budget, most important first (the device tests, the package on torch, the device benchmark,
# the golden data, the CLI benchmark, compute-sanitizer), and a step that no longer fits is
# skipped and named at the end with the command that runs it on its own: GPU_CHECK_STEPS=a,b
# (default: all of tests,python,bench,golden,cli_bench,memcheck,racecheck) picks steps, e.g. a
# second call on the same warm machine: GPU_CHECK_STEPS=memcheck,racecheck scripts/gpu_check.sh --prebuilt build/gpu.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  src=/usr/src/googletest
  [ -f "$src/CMakeLists.txt" ] || { echo "gpu_check: no GoogleTest sources at $src (apt-get install libgtest-dev)" >&2; exit 2; }
  rm -rf .gtest-src && cp -r "$src" .gtest-src && echo "gpu_check: GoogleTest sources in .gtest-src ($(du -sh .gtest-src | cut -f1))"
  # pytest and its dependencies as wheels (pure Python) for the golden replays on the GPU machine,
  # which may lack pytest and has no network.
  rm -rf .gpu-wheels && python3 -m pip download -q -d .gpu-wheels pytest >/dev/null &&
    echo "gpu_check: pytest wheels in .gpu-wheels ($(ls .gpu-wheels | wc -l) files)" ||
    { echo "gpu_check: pip download pytest failed (the GPU machine then needs its own pytest)" >&2; exit 2; }
  exit 0
fi
prebuilt=""
if [ "${1:-}" = "--prebuilt" ]; then
  prebuilt=${2:?"gpu_check: --prebuilt needs the build tree (e.g. build/release)"}
  shift 2
fi
[ $# -eq 0 ] || { echo "gpu_check: unknown argument '$1' (usage: scripts/gpu_check.sh [--prepare | --prebuilt DIR])" >&2; exit 2; }

OUT=${OUT:-build/gpu-check}
# $OUT keeps few files (the device tool returns only a handful): summary.txt, the benchmark's JSON
# files and logs.tar.gz, made on exit from the logs written to $LOG.
LOG="$OUT/logs"
mkdir -p "$OUT" "$LOG"
trap 'tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"' EXIT
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
arch=${POLYQUANT_CUDA_ARCHITECTURES:-90}
budget=${GPU_CHECK_BUDGET:-540}
steps=",${GPU_CHECK_STEPS:-tests,python,bench,golden,cli_bench,memcheck,racecheck},"
status=0
skipped=()
step() { echo "== [${SECONDS}s] $*" | tee -a "$OUT/summary.txt"; }
result() { echo "   $*" | tee -a "$OUT/summary.txt"; }
wanted() { [[ "$steps" == *",$1,"* ]]; }
exited() { [ "$1" -eq 124 ] && echo "timed out" || echo "exit status $1"; }
# limit NAME CAP: sets $limit to the seconds step NAME may run (its cap, or what the budget has
# left less 15 s for the summary), or records NAME as skipped and fails when under 20 s are left.
limit() {
  limit=$(( budget - SECONDS - 15 ))
  (( limit > $2 )) && limit=$2
  if (( limit < 20 )); then
    skipped+=("$1")
    result "$1: skipped, ${limit}s of the ${budget}s budget left"
    return 1
  fi
}
: >"$OUT/summary.txt"

step "machine"
{ nvidia-smi -L; nvcc --version | tail -2; ${CXX:-c++} --version | head -1; cmake --version | head -1; } 2>&1 | tee "$LOG/machine.txt"

build_tree=build/gpu
if [ -n "$prebuilt" ]; then
  build_tree=$prebuilt
  step "prebuilt: $build_tree"
  for f in tests/cuda/polyquant_cuda_tests bench/cuda/polyquant_cuda_bench src/backends/cuda/libpolyquant_cuda.so; do
    [ -f "$build_tree/$f" ] || { result "missing $build_tree/$f"; exit 1; }
  done
else
  prefix=()
  if [ -f .gtest-src/CMakeLists.txt ]; then
    step "GoogleTest from .gtest-src"
    if cmake -S .gtest-src -B build/gtest -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF >"$LOG/gtest.log" 2>&1 &&
       cmake --build build/gtest -j "$jobs" >>"$LOG/gtest.log" 2>&1 &&
       cmake --install build/gtest --prefix "$PWD/build/gtest-install" >>"$LOG/gtest.log" 2>&1; then
      prefix=(-DCMAKE_PREFIX_PATH="$PWD/build/gtest-install")
    else
      result "GoogleTest build FAILED (see $LOG/gtest.log)"; exit 1
    fi
  fi

  step "configure and build (POLYQUANT_CUDA=ON, architectures $arch, $jobs jobs)"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  # The Python extension too, when nanobind is there: the torch check below runs the package.
  python_ext=()
  targets=(polyquant_cuda_tests polyquant_cuda_bench polyquant_formulas_on_device)
  if python3 -m nanobind --cmake_dir >/dev/null 2>&1; then
    python_ext=(-DSKBUILD=ON -DPython_EXECUTABLE="$(command -v python3)")
    targets+=(_polyquant_ext)
  fi
  if ! cmake -S . -B build/gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPOLYQUANT_BUILD_TESTS=ON \
         -DPOLYQUANT_CUDA=ON -DPOLYQUANT_CUDA_ARCHITECTURES="$arch" "${prefix[@]}" "${python_ext[@]}" >"$LOG/build.log" 2>&1 ||
     ! timeout $(( budget - SECONDS - 60 )) cmake --build build/gpu -j "$jobs" --target "${targets[@]}" >>"$LOG/build.log" 2>&1; then
    tail -40 "$LOG/build.log"
    result "build FAILED (see $LOG/build.log)"; exit 1
  fi
  result "built: $(ls -la $build_tree/src/backends/cuda/libpolyquant_cuda.so | awk '{print $5}') bytes of libpolyquant_cuda.so"
fi
tests=$build_tree/tests/cuda/polyquant_cuda_tests
# The library the tests and the benchmark load: this tree's (its built-in path names the tree where
# it was built, which a copied tree does not have).
POLYQUANT_CUDA_LIBRARY="$(cd "$build_tree/src/backends/cuda" && pwd)/libpolyquant_cuda.so"
export POLYQUANT_CUDA_LIBRARY

if wanted tests && limit tests 150; then
step "polyquant_cuda_tests (every per-element op on the GPU against the CPU reference; at most ${limit}s)"
timeout "$limit" "$tests" --gtest_filter='-*DeviceReset*' --gtest_output="xml:$LOG/cuda_tests.xml" >"$LOG/cuda_tests.log" 2>&1
rc=$?
[ $rc -eq 124 ] && result "polyquant_cuda_tests: timed out after ${limit}s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\] .* ran|rows, .* elements compared|differs from x86|^NVML " "$LOG/cuda_tests.log" |
  tee -a "$OUT/summary.txt"
if [ $rc -ne 0 ]; then
  status=1
  result "failed checks per op (first lines of each failure below; all in logs/cuda_tests.log):"
  grep -A4 "Failure" "$LOG/cuda_tests.log" | grep -E "^[a-z_0-9]+ |^[a-z_0-9]+$" | awk '{print $1}' | sort | uniq -c | tee -a "$OUT/summary.txt"
  grep -A4 "Failure" "$LOG/cuda_tests.log" | head -60 | tee -a "$OUT/summary.txt"
fi
if grep -q "SKIPPED" "$LOG/cuda_tests.log"; then
  result "some tests SKIPPED: on a GPU machine that means no usable device (see $LOG/cuda_tests.log)"; status=1
fi
# FloatQuant after cudaDeviceReset, alone (it resets the device under the rest of the suite).
POLYQUANT_CUDA_DEVICE_RESET_TEST=1 timeout 60 "$tests" --gtest_filter='*DeviceReset*' >"$LOG/cuda_reset_test.log" 2>&1
rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$LOG/cuda_reset_test.log" | sed 's/^/   device reset: /' | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || { result "FloatQuant after a device reset: $(exited $rc) (logs/cuda_reset_test.log)"; grep -A6 "Failure" "$LOG/cuda_reset_test.log" | head -20 >>"$OUT/summary.txt"; status=1; }
fi

# The package as the Python steps import it: the sources, the built extension and the CUDA library.
ext=$(ls "$build_tree"/python/_polyquant_ext*.so 2>/dev/null | head -1)
pkg="$build_tree/pypkg"
have_pkg=0
if [ -n "$ext" ] && python3 -c "import torch" 2>/dev/null; then
  rm -rf "$pkg" && mkdir -p "$pkg" && cp -r python/polyquant "$pkg/" &&
    cp "$ext" "$build_tree/src/backends/cuda/libpolyquant_cuda.so" "$pkg/polyquant/" && have_pkg=1
fi
if [ $have_pkg = 0 ] && { wanted python || wanted golden || wanted cli_bench; }; then
  result "Python steps skipped: no built extension in $build_tree/python or no torch"
fi

if [ $have_pkg = 1 ] && wanted python && limit python 150; then
  step "Python package on torch CUDA tensors (scripts/gpu_check_python.py; at most ${limit}s)"
  PYTHONPATH="$pkg" timeout "$limit" python3 scripts/gpu_check_python.py >"$LOG/python_torch.log" 2>&1
  rc=$?
  tail -1 "$LOG/python_torch.log" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || { result "python/torch: $(exited $rc) (see logs/python_torch.log)"; tail -15 "$LOG/python_torch.log" >>"$OUT/summary.txt"; status=1; }
fi

if wanted bench && limit bench 120; then
  step "device benchmark (polyquant_cuda_bench: every op beside cudaMemcpyAsync, 256 MiB of float32; at most ${limit}s)"
  timeout "$limit" "$build_tree/bench/cuda/polyquant_cuda_bench" --json "$OUT/bench_polyquant.json" >"$LOG/bench_polyquant.txt" 2>&1
  rc=$?
  cat "$LOG/bench_polyquant.txt" | tee -a "$OUT/summary.txt" >/dev/null
  [ $rc -eq 0 ] || { result "polyquant_cuda_bench: $(exited $rc)"; status=1; }
  if [ $rc -eq 0 ] && [ "${GPU_CHECK_AB:-0}" = 1 ] && limit bench_general 120; then
    # GPU_CHECK_AB=1: the same benchmark with every launch on the general kernel (row_layout.h) and
    # the exact sums flushed lane by lane (backend.cu), for the A/B of the per-tensor kernels whose
    # masks are constants, of the per-channel and blockwise kernels whose row operands are resolved
    # per thread, and of the warp flushes (about a minute more).
    step "device benchmark, general kernels and lane flushes (POLYQUANT_CUDA_GENERAL_ROWS=1 POLYQUANT_CUDA_LANE_FLUSHES=1)"
    POLYQUANT_CUDA_GENERAL_ROWS=1 POLYQUANT_CUDA_LANE_FLUSHES=1 timeout "$limit" "$build_tree/bench/cuda/polyquant_cuda_bench" \
      --json "$OUT/bench_polyquant_general.json" >"$LOG/bench_polyquant_general.txt" 2>&1 || result "polyquant_cuda_bench (general kernels): failed"
    grep -iE "per.tensor|int_quant|float_quant|quantize_linear|affine|exact sums|min / max" "$LOG/bench_polyquant_general.txt" | head -40 >>"$OUT/summary.txt"
    if limit torch_peers 120; then
      step "torch's peers (scripts/gpu_bench_torch.py)"
      timeout "$limit" python3 scripts/gpu_bench_torch.py --polyquant "$OUT/bench_polyquant.json" --json "$OUT/bench_torch.json" \
        >"$LOG/bench_torch.txt" 2>&1
      cat "$LOG/bench_torch.txt" >>"$OUT/summary.txt"
    fi
  fi
fi

# The golden data of AIMET, QKeras and Quark replayed on torch CUDA tensors (tests/python/golden_device.py):
# pytest, from the machine or from the wheels --prepare put in .gpu-wheels (carry it with the tree).
if [ $have_pkg = 1 ] && wanted golden && limit golden 240; then
  step "golden data on the GPU (AIMET and its analyzers, QKeras and Quark cases on torch CUDA tensors, pytest; at most ${limit}s)"
  pytest_path=""
  if ! python3 -c "import pytest" 2>/dev/null && [ -d .gpu-wheels ]; then
    python3 -m pip install -q --no-index --find-links .gpu-wheels --target "$build_tree/pytest-site" pytest \
      >"$LOG/pytest_install.log" 2>&1 && pytest_path=":$build_tree/pytest-site"
  fi
  if PYTHONPATH="$pkg$pytest_path" python3 -c "import pytest" 2>/dev/null; then
    PYTHONPATH="$pkg$pytest_path" POLYQUANT_GOLDEN_DEVICE=cuda timeout "$limit" python3 -m pytest -q -p no:cacheprovider \
      tests/python/quark/test_golden.py tests/python/aimet/test_golden.py tests/python/aimet/test_golden_analyzers.py \
      tests/python/qkeras/test_golden.py -k on_a_device >"$LOG/golden_on_gpu.log" 2>&1
    rc=$?
    tail -1 "$LOG/golden_on_gpu.log" | tee -a "$OUT/summary.txt"
    [ $rc -eq 0 ] || { result "golden data on the GPU: $(exited $rc)"; grep -E "^E  " "$LOG/golden_on_gpu.log" | head -30 >>"$OUT/summary.txt"; status=1; }
  else
    result "skipped: no pytest here and no .gpu-wheels (run scripts/gpu_check.sh --prepare on a machine with the network)"; status=1
  fi
fi

if [ $have_pkg = 1 ] && wanted cli_bench && limit cli_bench 120; then
  step "polyquant bench --device cuda (the package on torch tensors, CUDA events, beside y.copy_(x) and torch's peers; at most ${limit}s)"
  PYTHONPATH="$pkg" timeout "$limit" python3 -m polyquant bench --device cuda --repeat 10 >"$LOG/bench_device_cli.txt" 2>&1
  rc=$?
  cat "$LOG/bench_device_cli.txt" >>"$OUT/summary.txt"
  [ $rc -eq 0 ] || { result "polyquant bench --device cuda: $(exited $rc)"; status=1; }
fi

for tool in memcheck racecheck; do
  wanted "$tool" || continue
  if ! command -v compute-sanitizer >/dev/null; then
    result "compute-sanitizer not found: $tool skipped"
    continue
  fi
  limit "$tool" 180 || continue
  step "compute-sanitizer --tool $tool (the device tests; at most ${limit}s)"
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 "$tests" --gtest_filter='RowsOnDevice.*:X86NansOnDevice.*:DeviceEngine.*:-RowsOnDevice.EveryFloat16X*' \
    >"$LOG/sanitizer_$tool.log" 2>&1
  rc=$?
  tail -3 "$LOG/sanitizer_$tool.log" | tee -a "$OUT/summary.txt"
  [ $rc -eq 0 ] || { result "$tool: $(exited $rc) (9: errors found)"; status=1; }
done

if [ $have_pkg = 1 ] && [ "${GPU_CHECK_CPU_BENCH:-0}" = 1 ] && limit cpu_bench 150; then
  # Issue 19's AIMET training row on the CPU of a machine with cores to spare: on the 2-core build
  # VMs the gradient pass is bound by instructions, not bytes (docs/performance.md). Informational:
  # a slow or failed run does not fail the check (~30 s; 5 repeats, medians).
  step "CPU: polyquant bench --ops aimet_train (float32, 16 Mi, every core)"
  PYTHONPATH="$pkg" timeout "$limit" python3 -m polyquant bench --size 16777216 --repeat 5 \
    --ops aimet_train_per_tensor aimet_train_axis0 aimet_train_axis1 aimet_train_blocked >"$LOG/bench_cpu_aimet_train.txt" 2>&1 ||
    result "CPU aimet_train bench: exit status $? (informational)"
  grep -E "^case|^aimet_train|threads" "$LOG/bench_cpu_aimet_train.txt" >>"$OUT/summary.txt"
fi

if [ ${#skipped[@]} -gt 0 ]; then
  status=1
  list=$(IFS=,; echo "${skipped[*]}")
  result "not run for time: $list; on the same machine: GPU_CHECK_STEPS=$list scripts/gpu_check.sh --prebuilt $build_tree"
fi
step "done: $([ $status -eq 0 ] && echo 'every check passed' || echo 'FAILURES or skipped steps above')"
exit $status
