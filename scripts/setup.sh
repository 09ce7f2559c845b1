#!/usr/bin/env bash
# Installs polyquant into ./.venv on a Debian/Ubuntu machine, with the system packages it needs.
#
#   scripts/setup.sh          what the main job (scripts/run_example.sh) needs: the package (the C++
#                             core, the nanobind extension, the ONNX Runtime custom-op library) and
#                             the references of `polyquant run --reference` (qonnx), and matplotlib
#                             for `polyquant report`
#   scripts/setup.sh --test   what scripts/test.sh needs as well: GoogleTest, Google Benchmark and
#                             the test extras, torch included (~5 GB with its CUDA libraries), Ray,
#                             Dask, matplotlib and a headless chromium for the tools' tests
#
# Running it again takes seconds when nothing changed: the package is rebuilt only when a file it is
# built from (src include python ort cmake CMakeLists.txt pyproject.toml VERSION, committed or not)
# or the Python version differs from the last build, which .venv/.polyquant-setup/ records along
# with the built wheel and the extras installed from it.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=main
case "${1:-}" in
  "") ;;
  --test) mode=test ;;
  -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: unknown argument '$1' (usage: scripts/setup.sh [--test])" >&2; exit 2 ;;
esac

started=$SECONDS
step_started=$SECONDS
step() {
  step_started=$SECONDS
  echo "setup: $*"
}
done_step() {
  echo "setup:   done in $((SECONDS - step_started)) s"
}

# ---- system packages
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then need_apt+=(python3-venv); fi
if [ "$mode" = test ]; then
  [ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
  [ -f /usr/include/benchmark/benchmark.h ] || need_apt+=(libbenchmark-dev)
  # tests/python/tools/test_report.py opens the report page in a real headless browser.
  command -v chromium >/dev/null || need_apt+=(chromium)
  command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  step "installing system packages: ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
  done_step
fi

# ---- the virtual environment
# A fresh CI machine downloads everything once: keeping the wheels in pip's cache as well would
# double torch's ~5 GB (its CUDA libraries) on a disk whose free space varies.
if [ -n "${CI:-}" ]; then export PIP_NO_CACHE_DIR=1; fi
PY=${PYTHON:-python3}
pip=(.venv/bin/python -m pip --disable-pip-version-check)
if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
  "${pip[@]}" install --upgrade pip
  done_step
fi

# The extras: `reference` holds what `polyquant run --reference` needs, `report` the plots of
# `polyquant report`. Until pyproject.toml declares `reference`, the `test` extra (which holds qonnx,
# and no torch) stands in for it.
if [ "$mode" = test ]; then
  extras=(test test-torch test-tools)
elif grep -Eq '^reference *= *\[' pyproject.toml; then
  extras=(reference report)
else
  extras=(test)
fi

state=.venv/.polyquant-setup
mkdir -p "$state"

# A digest of everything the package is built from (the working tree's contents, not only what is
# committed, untracked files included, ignored ones not) and of the interpreter; empty outside a git
# checkout, which then always rebuilds.
build_inputs=(src include python ort cmake CMakeLists.txt pyproject.toml VERSION)
build_digest() {
  git rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
  local files=() f
  while IFS= read -r -d '' f; do
    [ -f "$f" ] && files+=("$f")  # a deleted file is still in the index
  done < <(git ls-files -z --cached --others --exclude-standard -- "${build_inputs[@]}")
  {
    .venv/bin/python -c 'import sys; print(sys.version)'
    paste -d' ' <(printf '%s\n' "${files[@]}" | git hash-object --stdin-paths) <(printf '%s\n' "${files[@]}")
  } | sha256sum | cut -d' ' -f1
}

step "checking whether the package is up to date"
digest=$(build_digest)
wheel=$(ls "$state"/wheel/polyquant-*.whl 2>/dev/null | head -n 1 || true)
up_to_date=no
if [ -n "$digest" ] && [ -n "$wheel" ] && [ "$(cat "$state/build" 2>/dev/null)" = "$digest" ] &&
   env -u PYTHONPATH .venv/bin/python -c 'import polyquant, polyquant.ort; polyquant.ort.library_path()' 2>/dev/null; then
  up_to_date=yes
fi
echo "setup:   $([ "$up_to_date" = yes ] && echo "unchanged since the last build" || echo "needs a build")"

installed_extras=()
[ -f "$state/extras" ] && mapfile -t installed_extras <"$state/extras"

if [ "$up_to_date" = no ]; then
  # Compiling the C++ core takes minutes on a few cores: pip -v shows CMake's progress ([n/N] lines).
  step "building polyquant's wheel (C++ core, Python extension, ONNX Runtime custom-op library)"
  rm -rf "$state/wheel" "$state/build"
  # The whole output goes to $state/build.log; the terminal gets pip's steps, scikit-build-core's
  # (*** lines), the compiler's [n/N] progress and its errors.
  # CMake's Makefile generator builds one file at a time unless told otherwise.
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
  wheel_options=()
  if [ "$mode" = test ]; then
    # scripts/test.sh builds and runs the C++ tests in build/release next, from the same sources with
    # the same flags: building the wheel in that tree, with the tests and benchmarks, compiles the core
    # once instead of twice (about six minutes less on a 2-core CI machine). The generator is the one
    # test.sh's plain `cmake` configure picks.
    export CMAKE_GENERATOR="Unix Makefiles"
    # The CUDA library (built when nvcc is found) for sm_90 only: the tests need it to build and load,
    # not to run on both architectures, and each one costs a minute of nvcc on two cores; wheels
    # keep the default (80;90).
    wheel_options=(-Cbuild-dir=build/release -Ccmake.define.POLYQUANT_BUILD_TESTS=ON
                   -Ccmake.define.POLYQUANT_BUILD_BENCHMARKS=ON -Ccmake.define.POLYQUANT_CUDA_ARCHITECTURES=90)
  fi
  "${pip[@]}" wheel -v --no-deps --wheel-dir "$state/wheel" "${wheel_options[@]}" . 2>&1 | tee "$state/build.log" |
    grep --line-buffered -E '^\s*\[ *[0-9]+(/[0-9]+|%)\]|^\*\*\*|error:|CMake Error|Successfully|Created wheel' || true
  wheel=$(ls "$state"/wheel/polyquant-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    tail -n 40 "$state/build.log" >&2
    echo "setup: the build failed; its whole output is in $state/build.log" >&2
    exit 1
  fi
  done_step
  step "installing $(basename "$wheel")"
  "${pip[@]}" install --force-reinstall --no-deps "$wheel"
  [ -z "$digest" ] || echo "$digest" >"$state/build"
  done_step
  # The extras installed before are installed again from the new wheel (pyproject.toml may have
  # changed their pins): until then none counts as installed.
  extras+=("${installed_extras[@]}")
  installed_extras=()
  rm -f "$state/extras"
fi

missing=()
for extra in "${extras[@]}"; do
  printf '%s\n' "${installed_extras[@]}" "${missing[@]}" | grep -qx -- "$extra" || missing+=("$extra")
done
if [ ${#missing[@]} -gt 0 ]; then
  joined=$(IFS=,; echo "${missing[*]}")
  step "installing polyquant's dependencies and the extras [$joined]"
  "${pip[@]}" install "$wheel[$joined]"
  printf '%s\n' "${installed_extras[@]}" "${missing[@]}" | grep -v '^$' | sort -u >"$state/extras"
  done_step
fi

echo "setup: polyquant ready in $(pwd)/.venv (extras: $(paste -sd, "$state/extras"); $((SECONDS - started)) s)"
