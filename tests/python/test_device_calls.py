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


def stand_in_environment() -> dict[str, str]:
    """The environment of a child process on the stand-in: its library, and its own device list
    (NVML, which would list the machine's real GPUs instead, off)."""
    return {**os.environ, "POLYQUANT_CUDA_LIBRARY": str(fake_library()), "POLYQUANT_NVML_LIBRARY": "off"}


def test_device_calls_on_the_stand_in() -> None:
    env = stand_in_environment()
    run = subprocess.run([sys.executable, str(HERE / "device_calls_check.py")], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


def test_bench_on_a_device_says_why_it_cannot_run() -> None:
    """`polyquant bench --device`: a bad device name, a device the machine lacks, and a machine whose
    torch sees no GPU are errors (exit status 2) with the reason, never a traceback."""
    env = stand_in_environment()

    def bench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "polyquant", "bench", *args], env=env, capture_output=True, text=True,
                              timeout=300)

    run = bench("--device", "tpu")
    assert run.returncode == 2 and "--device: expected cpu, cuda or cuda:N, got 'tpu'" in run.stderr, run.stderr
    run = bench("--device", "cuda:3")
    assert run.returncode == 2 and "--device cuda:3: this machine has 2 CUDA device(s)" in run.stderr, run.stderr
    run = bench("--device", "cuda")
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = None
    if has_gpu is False:
        assert run.returncode == 2 and "torch sees no CUDA device" in run.stderr, run.stderr
    elif has_gpu is None:
        assert run.returncode == 2 and "install torch with CUDA" in run.stderr, run.stderr


EXIT_SCRIPT = """
import sys, threading, time
sys.path.insert(0, {here!r})
import numpy as np
import device_calls_check as d
import polyquant.aimet as pa, polyquant.qonnx as pq

x = np.linspace(-3, 3, 256, dtype=np.float32).reshape(8, 32)
dx, s, o = d.FakeCudaTensor(x), d.FakeCudaTensor(np.float32(0.1)), d.FakeCudaTensor(np.float32(0.0))
analyzer = pa.analyzers.MinMaxEncodingAnalyzer(shape=(32,))

def spin():
    while True:
        pq.int_quant(dx, 0.5, 0.0, 8, 1, 0, "ROUND")
        pa.quantize_dequantize_grad(dx, dx, s, o, 8, False)
        analyzer.update_stats(dx)

for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
time.sleep(0.3)
print("exiting")
"""


def test_interpreter_exit_with_daemon_threads_inside_device_calls() -> None:
    """Daemon threads looping over device calls (whose Python callbacks run inside the extension's
    functions) when the interpreter exits: the calls in flight finish, later ones park, and the
    process ends cleanly (before the fix, a run crashed in about one of three tries)."""
    env = stand_in_environment()
    script = EXIT_SCRIPT.format(here=str(HERE))
    for attempt in range(6):
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == "exiting", (attempt, run.returncode, run.stdout, run.stderr[-2000:])


NVML_SCRIPT = """
import ctypes, json, sys
nvml = ctypes.CDLL(sys.argv[1])  # the stand-in NVML the core will load (same file: same library)
nvml.polyquant_fake_nvml_reset(2, 13000, 0)  # two H100s, a CUDA 13.0 driver
cuda = ctypes.CDLL(sys.argv[2])
import polyquant
info = polyquant.runtime_info()["backends"]["cuda"]
print(json.dumps({"info": info, "device_queries": cuda.polyquant_fake_cuda_device_queries()}))
"""


def test_runtime_info_lists_the_devices_through_nvml_without_initialising_cuda() -> None:
    """runtime_info() (and so every `polyquant` command) takes the device list from NVML where it
    answers exactly (core/nvml_devices.h): the CUDA library's own query, cudaGetDeviceCount, which
    initialises CUDA and so spoils it for children forked later, is not called."""
    import json

    cuda = fake_library()
    nvml = cuda.parent / "libpolyquant_fake_nvml.so"
    assert nvml.is_file(), f"{nvml} is built with the C++ tests, beside {cuda.name}"
    env = {k: v for k, v in stand_in_environment().items() if k != "CUDA_VISIBLE_DEVICES"}
    env["POLYQUANT_NVML_LIBRARY"] = str(nvml)
    run = subprocess.run([sys.executable, "-c", NVML_SCRIPT, str(nvml), str(cuda)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["info"]["available"], report
    assert report["info"]["devices"] == ["NVIDIA H100 80GB HBM3 (sm_90)"] * 2, report
    assert report["device_queries"] == 0, "cudaGetDeviceCount was called"
    # One device visible: NVML follows CUDA_VISIBLE_DEVICES.
    env["CUDA_VISIBLE_DEVICES"] = "1"
    run = subprocess.run([sys.executable, "-c", NVML_SCRIPT, str(nvml), str(cuda)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["info"]["devices"] == ["NVIDIA H100 80GB HBM3 (sm_90)"] and report["device_queries"] == 0, report


# The golden replays with a device variant (selected by -k on_a_device; scripts/gpu_check.sh runs the same).
GOLDEN_FILES = ["quark/test_golden.py", "aimet/test_golden.py", "aimet/test_golden_analyzers.py", "qkeras/test_golden.py"]
GOLDEN_ON_A_DEVICE_TESTS = 6


def test_golden_data_replays_on_the_stand_in() -> None:
    """The golden data of AIMET (and its analyzers), QKeras and Quark replayed with every array on the device (the stand-in
    here; scripts/gpu_check.sh runs the same tests on the GPU): a child pytest, since the CUDA library
    is loaded once per process."""
    env = {**stand_in_environment(), "POLYQUANT_GOLDEN_DEVICE": "stand-in"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          *(str(HERE / t) for t in GOLDEN_FILES), "-k", "on_a_device"],
                         env=env, capture_output=True, text=True, timeout=600, cwd=HERE.parent.parent)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"{GOLDEN_ON_A_DEVICE_TESTS} passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
