"""The CUDA backend as Python sees it (docs/cuda.md): runtime_info()["backends"] lists the CPU and
CUDA backends; the CUDA library is looked for lazily, so a machine without it, without a driver or
without a GPU reports the reason instead of failing, and a POLYQUANT_CUDA_LIBRARY naming a missing
file is a reason that names the file. `polyquant info` prints one line per backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import polyquant
import polyquant.qonnx as pq


def runtime_info_in_subprocess(env_update: dict[str, str]) -> dict:
    # The backend is loaded once per process: a fresh interpreter sees the environment given here.
    code = textwrap.dedent(
        """
        import json, numpy as np, polyquant, polyquant.qonnx as pq
        info = polyquant.runtime_info()
        y = pq.int_quant(np.array([0.3, -1.7], np.float32), 0.5, 0.0, 8.0, True, False, "ROUND")
        print(json.dumps({"backends": info["backends"], "y": y.tolist()}))
        """
    )
    env = {**os.environ, **env_update}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def test_runtime_info_lists_the_cpu_and_cuda_backends():
    backends = polyquant.runtime_info()["backends"]
    assert list(backends) == ["cpu", "cuda"]
    assert backends["cpu"] == {"available": True, "library": None, "devices": [], "reason": None}
    cuda = backends["cuda"]
    assert set(cuda) == {"available", "library", "devices", "reason"}
    assert isinstance(cuda["available"], bool) and isinstance(cuda["devices"], list)
    if cuda["available"]:
        assert cuda["devices"] and cuda["reason"] is None and cuda["library"]
    else:
        assert cuda["devices"] == [] and isinstance(cuda["reason"], str) and cuda["reason"]


def test_a_missing_cuda_library_is_a_reason_naming_it_and_cpu_ops_still_run():
    missing = "/nonexistent/dir/libpolyquant_cuda.so"
    report = runtime_info_in_subprocess({"POLYQUANT_CUDA_LIBRARY": missing})
    cuda = report["backends"]["cuda"]
    assert cuda["available"] is False and cuda["library"] == missing and cuda["devices"] == []
    assert f"POLYQUANT_CUDA_LIBRARY={missing} cannot be loaded" in cuda["reason"]
    assert report["backends"]["cpu"]["available"] is True
    expected = pq.int_quant(np.array([0.3, -1.7], np.float32), 0.5, 0.0, 8.0, True, False, "ROUND")
    assert report["y"] == expected.tolist()


def test_a_library_that_is_not_the_backend_is_refused_with_a_reason():
    report = runtime_info_in_subprocess({"POLYQUANT_CUDA_LIBRARY": "libc.so.6"})
    cuda = report["backends"]["cuda"]
    assert cuda["available"] is False
    assert "has no polyquant_cuda_backend_v1" in cuda["reason"]


def test_info_prints_a_line_per_backend():
    done = subprocess.run([sys.executable, "-m", "polyquant", "info"], capture_output=True, text=True)
    lines = done.stdout.splitlines()
    assert any(line.startswith("backend cpu") and "available" in line for line in lines), done.stdout
    cuda = [line for line in lines if line.startswith("backend cuda")]
    assert len(cuda) == 1
    info = polyquant.runtime_info()["backends"]["cuda"]
    assert ("unavailable: " in cuda[0]) == (not info["available"])
