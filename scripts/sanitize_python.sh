#!/usr/bin/env bash
# Builds the Python extension and the ONNX Runtime custom-op library with AddressSanitizer +
# UndefinedBehaviorSanitizer (POLYQUANT_SANITIZE=ON) into ./.venv-asan, and runs a subset of the
# pytest suite against them: the Python API, the QONNX ops, the ONNX Runtime custom ops, the QKeras
# quantizers and the property-based differential tests (a reduced example count). Any ASan report or UBSan finding
# aborts the interpreter, which fails the run.
#
#   scripts/sanitize_python.sh [extra pytest args]
#
# Environment: PYTHON (interpreter for the venv, default python3); POLYQUANT_SANITIZE_TESTS
# (pytest selection, default below); POLYQUANT_HYPOTHESIS_EXAMPLES as for the test itself.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv-asan
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# Build requirements first: the sanitized build runs without build isolation (it must not use a
# cached unsanitized wheel, and reuses the sanitized build tree); then the package with its test
# extras (pytest, qonnx, hypothesis, ...) but not torch (the test-torch extra): none of the tests
# below needs it, and a second copy of its CUDA libraries costs ~5 GB of disk.
if [ -n "${CI:-}" ]; then export PIP_NO_CACHE_DIR=1; fi
"$VENV/bin/python" -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.2"

echo "== sanitized build (ASan + UBSan) of the extension and the ORT library"
# The build tree is the C++ sanitized build's (scripts/test.sh builds and tests it first), configured
# with the same options, generator and build type, so the core library's objects are reused and only
# the extension and the ORT library compile here (compiling the core under ASan a second time cost
# CI about ten minutes). Run alone, it builds the tree from scratch.
ASAN_BUILD=${POLYQUANT_ASAN_BUILD_DIR:-build/asan}
CMAKE_GENERATOR="Unix Makefiles" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
  "$VENV/bin/python" -m pip install -q --no-build-isolation \
  -Cbuild-dir="$ASAN_BUILD" \
  -Ccmake.build-type=RelWithDebInfo \
  -Ccmake.define.POLYQUANT_SANITIZE=ON \
  -Ccmake.define.POLYQUANT_BUILD_TESTS=ON \
  -Ccmake.define.POLYQUANT_BUILD_FUZZ=ON \
  -Ccmake.define.POLYQUANT_DEVICE_FORMULAS_CHECK=OFF \
  ".[test]"

# (Found without importing polyquant: the sanitized extension only loads with the runtime preloaded.)
pkg=$("$VENV/bin/python" -c 'import importlib.util as u; print(u.find_spec("polyquant").submodule_search_locations[0])')
# ldd's output is captured before it is searched: with pipefail, `ldd | grep -q` fails whenever grep
# exits at the first match while the loader is still writing (ldd dies of SIGPIPE), which made this
# check fail at random on a correctly sanitized build.
for lib in "$pkg"/_polyquant_ext*.so "$pkg"/libpolyquant_ort.so; do
  deps=$(ldd "$lib")
  if ! grep -q libasan <<<"$deps"; then
    echo "sanitize_python: $lib is not linked against libasan" >&2
    exit 1
  fi
done

# The interpreter is not instrumented, so the ASan runtime must be loaded first; libstdc++ right
# after it, or ASan's __cxa_throw interceptor finds no real __cxa_throw (the interpreter does not
# link libstdc++) and the first C++ exception aborts. Python and its libraries leak by design: no
# leak checking. Everything else is fatal.
LIBASAN=$(g++ -print-file-name=libasan.so)
LIBSTDCXX=$(g++ -print-file-name=libstdc++.so)
export LD_PRELOAD="$LIBASAN $LIBSTDCXX"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
# Fewer hypothesis examples under the sanitizers (the unsanitized run does the full count).
export POLYQUANT_HYPOTHESIS_SCALE=${POLYQUANT_HYPOTHESIS_SCALE:-0.25}

# test_cli/test_example start subprocesses through the console script; the exhaustive and
# benchmark-like tests only repeat what the unsanitized run covers. -p no:cacheprovider: the
# sanitized run must not reorder the main run's tests.
tests=${POLYQUANT_SANITIZE_TESTS:-"tests/python/qonnx/test_api.py tests/python/qonnx/test_reference.py tests/python/qonnx/test_ort.py tests/python/qonnx/test_ort_models.py tests/python/qonnx/test_properties.py tests/python/qkeras/test_golden.py tests/python/qkeras/test_upstream_vectors.py tests/python/qkeras/test_training.py tests/python/qkeras/test_api.py tests/python/qkeras/test_properties.py tests/python/onnx/test_reference.py tests/python/quark/test_golden.py tests/python/onnx/test_ort.py tests/python/onnx/test_properties.py tests/python/aimet/test_golden.py tests/python/aimet/test_golden_analyzers.py tests/python/aimet/test_upstream_vectors.py tests/python/aimet/test_properties.py tests/python/qkeras/test_specials.py tests/python/onnx/test_robustness.py tests/python/qonnx/test_robustness.py tests/python/qonnx/test_specials.py tests/python/aimet/test_robustness.py tests/python/aimet/test_robustness_analyzers.py tests/python/test_device_calls.py"}
echo "== pytest under ASan + UBSan: $tests"
# shellcheck disable=SC2086
# One pytest worker per core (pytest-xdist; the workers inherit the preloaded runtime).
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${POLYQUANT_PYTEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}" $tests "$@"
