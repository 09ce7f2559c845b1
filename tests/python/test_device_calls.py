"""The Python package's device calls (docs/cuda.md#python) end to end on the host stand-in for the
CUDA library: device_calls_check.py runs in a fresh interpreter with POLYQUANT_CUDA_LIBRARY naming
libpolyquant_fake_cuda.so (built with the C++ tests: scripts/test.sh sets
POLYQUANT_FAKE_CUDA_LIBRARY to it, and this test fails if that file is missing; without the
variable it looks in build/release and skips when the C++ tests were not built)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "build" / "release" / "tests" / "cpp" / "libpolyquant_fake_cuda.so"


def fake_library() -> pathlib.Path:
    named = os.environ.get("POLYQUANT_FAKE_CUDA_LIBRARY")
    if named:
        path = pathlib.Path(named)
        assert path.is_file(), f"POLYQUANT_FAKE_CUDA_LIBRARY={named} does not exist"
        return path
    if not DEFAULT.is_file():
        pytest.skip("libpolyquant_fake_cuda.so not built (cmake --build build/release --target polyquant_fake_cuda)")
    return DEFAULT


def test_device_calls_on_the_stand_in() -> None:
    env = {**os.environ, "POLYQUANT_CUDA_LIBRARY": str(fake_library())}
    run = subprocess.run([sys.executable, str(HERE / "device_calls_check.py")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
