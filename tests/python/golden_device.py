"""The device the golden replays run on, where one is asked for: POLYQUANT_GOLDEN_DEVICE=

- ``stand-in``: FakeCudaTensor arrays (device_calls_check.py) in the memory of the host stand-in for
  the CUDA library; the process must have loaded it (POLYQUANT_CUDA_LIBRARY naming
  libpolyquant_fake_cuda.so). test_device_calls.py runs the replays this way in a child pytest;
- ``cuda``: torch CUDA tensors on the machine's GPU (scripts/gpu_check.sh runs the replays so);
- unset: the device replays skip (the host replays beside them run on every kernel set).

Each family's golden test replays its cases with the inputs on the device (`to_device`), and
compares what comes back (`to_host`) with the recorded reference bit for bit, as on the host. The
device path's own outputs are allocated by the inputs' framework; no numerics here."""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np
import pytest

ENV = "POLYQUANT_GOLDEN_DEVICE"
_STORAGE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class GoldenDevice:
    name = ""

    def to_device(self, a: np.ndarray) -> Any:
        raise NotImplementedError

    def to_host(self, t: Any) -> np.ndarray:
        raise NotImplementedError

    def outputs_to_host(self, result: Any) -> Any:
        """A call's result (one array or a tuple of them) on the host."""
        if isinstance(result, tuple):
            return tuple(self.to_host(r) for r in result)
        return self.to_host(result)


def _is_ml_dtype(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and hasattr(ml_dtypes, dtype.name)


class StandIn(GoldenDevice):
    """FakeCudaTensor on the host stand-in (device 0)."""

    name = "stand-in"

    def __init__(self) -> None:
        from . import device_calls_check as fake  # opens POLYQUANT_CUDA_LIBRARY and registers the framework

        self.fake = fake

    def to_device(self, a: np.ndarray) -> Any:
        a = np.asarray(a)
        if _is_ml_dtype(a.dtype):  # its integer storage travels, viewed as the type on the device
            return self.fake.FakeCudaTensor(a.view(_STORAGE[a.dtype.itemsize])).view(a.dtype.name)
        return self.fake.FakeCudaTensor(a)

    def to_host(self, t: Any) -> np.ndarray:
        assert isinstance(t, self.fake.FakeCudaTensor), f"a device call returned {type(t).__name__}, not the device's array"
        return t.numpy()


class TorchCuda(GoldenDevice):
    """torch tensors on cuda:0; ml_dtypes types (bfloat16, float8) cross as their integer storage."""

    name = "cuda"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"{ENV}=cuda, but torch sees no CUDA device")
        self.torch = torch

    def to_device(self, a: np.ndarray) -> Any:
        torch = self.torch
        a = np.ascontiguousarray(a)
        if _is_ml_dtype(a.dtype):
            storage = a.view({1: np.uint8, 2: np.int16}[a.dtype.itemsize])
            return torch.from_numpy(storage.copy()).view(getattr(torch, a.dtype.name)).to("cuda")
        return torch.from_numpy(a.copy()).to("cuda")

    def to_host(self, t: Any) -> np.ndarray:
        torch = self.torch
        assert isinstance(t, torch.Tensor) and t.is_cuda, f"a device call returned {type(t).__name__}, not a CUDA tensor"
        t = t.detach().cpu()
        name = str(t.dtype).removeprefix("torch.")
        if hasattr(ml_dtypes, name) and not hasattr(np, name):
            storage = t.view({1: torch.uint8, 2: torch.int16}[t.element_size()]).numpy()
            return storage.view(getattr(ml_dtypes, name))
        return t.numpy()


def golden_device() -> GoldenDevice:
    """The device of POLYQUANT_GOLDEN_DEVICE; skips the calling test where it is unset."""
    which = os.environ.get(ENV, "")
    if not which:
        pytest.skip(f"no device asked for ({ENV}=stand-in|cuda; test_device_calls.py runs the stand-in)")
    if which == "stand-in":
        return StandIn()
    if which == "cuda":
        return TorchCuda()
    raise ValueError(f"{ENV}={which!r}: expected stand-in or cuda")


def replay_all(cases, replay, minimum: int, label=lambda case: case["id"]) -> None:
    """replay(case) for every case, the failures collected (so one run lists them all): asserts that
    none failed and that at least `minimum` cases ran."""
    failures, replayed = [], 0
    for case in cases:
        try:
            replay(case)
            replayed += 1
        except (AssertionError, ValueError, TypeError, RuntimeError, pytest.fail.Exception) as e:
            failures.append(f"{label(case)}: {str(e).splitlines()[0][:240] if str(e) else type(e).__name__}")
    assert not failures, f"{len(failures)} of {replayed + len(failures)} cases:\n" + "\n".join(failures[:25])
    assert replayed >= minimum, f"{replayed} cases replayed, expected at least {minimum}"
