#!/usr/bin/env bash
# Runs the fuzz harnesses over the public C++ API (tests/fuzz/fuzz_qonnx.cc: the QONNX ops;
# tests/fuzz/fuzz_qkeras.cc: the QKeras quantizers; tests/fuzz/fuzz_onnx.cc: the ONNX and Quark
# linear quantize / dequantize ops; tests/fuzz/fuzz_aimet.cc: AIMET's affine ops and gradients) under AddressSanitizer + UndefinedBehaviorSanitizer for a
# bounded time, comparing every kernel set the CPU has with the scalar reference and every layout
# with contiguous copies. The seconds are split between the five harnesses (a fifth each, the
# remainder to the last). CI runs it for 60 s; run it longer by hand:
#
#   scripts/fuzz.sh [SECONDS] [SEED]        # defaults: 60 s (whole seconds), seed = the current time
#
# A failure prints the case and the line that replays it:
#   build/asan/tests/fuzz/polyquant_fuzz_qonnx --seed N --start I --iterations 1
#   build/asan/tests/fuzz/polyquant_fuzz_qkeras --seed N --start I --iterations 1
#   build/asan/tests/fuzz/polyquant_fuzz_onnx --seed N --start I --iterations 1
#   build/asan/tests/fuzz/polyquant_fuzz_aimet --seed N --start I --iterations 1
#   build/asan/tests/fuzz/polyquant_fuzz_aimet_analyzers --seed N --start I --iterations 1
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
seed=${2:-$(date +%s)}
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOLYQUANT_BUILD_TESTS=ON -DPOLYQUANT_SANITIZE=ON \
  -DPOLYQUANT_BUILD_FUZZ=ON >/dev/null
cmake --build build/asan -j "$jobs" --target polyquant_fuzz_qonnx polyquant_fuzz_qkeras polyquant_fuzz_onnx polyquant_fuzz_aimet \
  polyquant_fuzz_aimet_analyzers
qonnx_seconds=$((seconds / 5))
qkeras_seconds=$((seconds / 5))
onnx_seconds=$((seconds / 5))
aimet_seconds=$((seconds / 5))
analyzer_seconds=$((seconds - qonnx_seconds - qkeras_seconds - onnx_seconds - aimet_seconds))
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
build/asan/tests/fuzz/polyquant_fuzz_qonnx --seed "$seed" --seconds "$qonnx_seconds"
build/asan/tests/fuzz/polyquant_fuzz_qkeras --seed "$seed" --seconds "$qkeras_seconds"
build/asan/tests/fuzz/polyquant_fuzz_onnx --seed "$seed" --seconds "$onnx_seconds"
build/asan/tests/fuzz/polyquant_fuzz_aimet --seed "$seed" --seconds "$aimet_seconds"
build/asan/tests/fuzz/polyquant_fuzz_aimet_analyzers --seed "$seed" --seconds "$analyzer_seconds"
