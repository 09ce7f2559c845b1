#!/usr/bin/env bash
# Installs everything and runs every test: the C++ suite (optimized build, then an
# AddressSanitizer + UndefinedBehaviorSanitizer build) under CTest, the fuzz harness under the
# sanitizers for a bounded time, the Python suite (against qonnx, onnx and onnxruntime from the
# package registry, with the property-based differential tests) under pytest, and a subset of it
# against a sanitized build of the Python extension and the ONNX Runtime library.
#
# Environment: POLYQUANT_FUZZ_SECONDS (default 60), POLYQUANT_FUZZ_SEED (default 1: CI replays the
# same cases; scripts/fuzz.sh draws a new seed by default).
set -euo pipefail
cd "$(dirname "$0")/.."
df -h . | sed 's/^/disk: /'
# Each stage's header gives the minutes since the start, so a CI log shows where its time goes.
phase() { echo "== [$(date -u +%H:%M:%S), $((SECONDS / 60))m$((SECONDS % 60))s] $*"; }
scripts/setup.sh --test

jobs=$(nproc 2>/dev/null || echo 2)

phase "C++ tests (Release)"
# setup.sh --test built the wheel in this tree (tests included), so this compiles only what changed
# since; POLYQUANT_INSTALL for the package-consumer check below (the wheel's configure turns it off).
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DPOLYQUANT_BUILD_TESTS=ON -DPOLYQUANT_BUILD_BENCHMARKS=ON \
  -DPOLYQUANT_INSTALL=ON >/dev/null
cmake --build build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs"

phase "C++ tests (ASan + UBSan)"
# The nvcc check of the device formulas already ran in the Release build.
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOLYQUANT_BUILD_TESTS=ON -DPOLYQUANT_SANITIZE=ON \
  -DPOLYQUANT_BUILD_FUZZ=ON -DPOLYQUANT_DEVICE_FORMULAS_CHECK=OFF >/dev/null
cmake --build build/asan -j "$jobs"
# The exhaustive 2^31-value scan already ran in the Release build.
POLYQUANT_SKIP_EXHAUSTIVE=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$jobs"

phase "fuzz harness (ASan + UBSan, every kernel set against scalar)"
scripts/fuzz.sh "${POLYQUANT_FUZZ_SECONDS:-60}" "${POLYQUANT_FUZZ_SEED:-1}"

phase "C++ package consumer (find_package(polyquant))"
cmake --install build/release --prefix build/install >/dev/null
cmake -S examples/cpp -B build/consumer -DCMAKE_PREFIX_PATH="$(pwd)/build/install" >/dev/null
cmake --build build/consumer -j "$jobs"
build/consumer/polyquant_example

phase "Python tests"
# The kernel-set tests and the property-based tests run on every set listed here.
.venv/bin/python -c 'import polyquant; i = polyquant.runtime_info(); print("kernel sets on this CPU:", i["supported"])'
# The torch-interop tests skip without torch; where the test-torch extra installs it (x86_64, Python
# >= 3.10) it must have arrived, or CI would pass without running them.
.venv/bin/python - <<'PY'
import platform, sys
if platform.machine() == "x86_64" and sys.version_info >= (3, 10):
    import torch
    print("torch", torch.__version__)
PY
# The host stand-in for the CUDA library, built with the C++ tests: the device-call tests must run.
export POLYQUANT_FAKE_CUDA_LIBRARY="$(pwd)/build/release/tests/cpp/libpolyquant_fake_cuda.so"
# One pytest worker per core (pytest-xdist): the suite is mostly single-threaded Python.
.venv/bin/python -m pytest -q -n "$jobs"

phase "Python extension and ORT library under ASan + UBSan"
scripts/sanitize_python.sh
phase "all tests passed"
