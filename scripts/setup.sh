#!/usr/bin/env bash
# Installs what polyquant needs on a fresh Debian/Ubuntu machine and the Python package (with its
# test extras) into ./.venv. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need_apt+=(libbenchmark-dev)
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then need_apt+=(python3-venv); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing system packages: ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# A fresh CI machine downloads everything once: keeping the wheels in pip's cache as well would
# double torch's ~5 GB (its CUDA libraries) on a disk whose free space varies.
if [ -n "${CI:-}" ]; then export PIP_NO_CACHE_DIR=1; fi
.venv/bin/python -m pip install -q --upgrade pip
# Builds the C++ core, the nanobind extension and the ONNX Runtime custom-op library; the test
# extras, torch included (tests/python/test_aimet_torch.py).
.venv/bin/python -m pip install -q ".[test,test-torch]"
echo "setup: polyquant installed in $(pwd)/.venv"
