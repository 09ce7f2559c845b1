"""Array plumbing shared by polyquant.onnx and polyquant.quark: ml_dtypes arrays travel to the
core as uint8 / uint16 views of the same memory with polyquant's dtype code beside them, and
outputs of those types come back viewed as the ml_dtypes type. No numerics here."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from . import _polyquant_ext as _ext

# ml_dtypes names polyquant's core knows (the numpy-native dtypes pass through unchanged).
_ML_DTYPES = ("bfloat16", "int4", "uint4", "int2", "uint2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
              "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
_CODES = {name: _ext.dtype_code(name) for name in _ML_DTYPES}


def operand(value: Any, name: str) -> tuple[np.ndarray, int]:
    """(array the extension can read, dtype code or -1)."""
    a = np.asarray(value)
    if a.dtype.name in _CODES:
        storage = np.uint16 if a.dtype.itemsize == 2 else np.uint8
        return a.view(storage), _CODES[a.dtype.name]
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: unsupported dtype {a.dtype}")
    return a, -1


def result(pair: tuple[np.ndarray, str]) -> np.ndarray:
    array, name = pair
    if name in _CODES:
        return array.view(getattr(ml_dtypes, name))
    return array


def out_operand(out: np.ndarray | None) -> np.ndarray | None:
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise TypeError("out: expected a numpy array")
    if out.dtype.name in _CODES:
        return out.view(np.uint16 if out.dtype.itemsize == 2 else np.uint8)
    return out


def finish(pair: tuple[np.ndarray, str], out: np.ndarray | None) -> np.ndarray:
    return out if out is not None else result(pair)
