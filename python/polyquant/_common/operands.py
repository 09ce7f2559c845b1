"""Array plumbing shared by polyquant.onnx and polyquant.quark: ml_dtypes arrays travel to the
core as uint8 / uint16 views of the same memory with polyquant's dtype code beside them, and
outputs of those types come back viewed as the ml_dtypes type. Also the checks of the integer
attributes (axis, block_size, ...) and of ``out=``. No numerics here."""

from __future__ import annotations

import operator
from typing import Any

import ml_dtypes
import numpy as np

from .. import _polyquant_ext as _ext
from .args import checked_out
from .device import DeviceTensor, as_device_operand

# ml_dtypes names polyquant's core knows (the numpy-native dtypes pass through unchanged).
_ML_DTYPES = ("bfloat16", "int4", "uint4", "int2", "uint2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
              "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
_CODES = {name: _ext.dtype_code(name) for name in _ML_DTYPES}
_NAMES_BY_CODE = {code: name for name, code in _CODES.items()}




def operand(value: Any, name: str) -> tuple[np.ndarray, int]:
    """(array the extension can read, dtype code or -1). Big-endian (non-native) arrays are read
    through a native copy, as are unaligned ones and those whose strides are not whole elements (the
    core reads elements through typed pointers). Inside a device call (device.py) a CUDA tensor
    stays on its device (its ml_dtypes types as their storage too)."""
    device_tensor = as_device_operand(value, name)
    if device_tensor is not None:
        return _device_storage(device_tensor, name)
    a = np.asarray(value)
    if a.dtype.name in _CODES:
        if not a.flags.aligned or any(s % a.itemsize for s in a.strides):
            a = np.array(a, copy=True, order="C")
        storage = np.uint16 if a.dtype.itemsize == 2 else np.uint8
        return a.view(storage), _CODES[a.dtype.name]
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: unsupported dtype {a.dtype}")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.aligned or any(s % a.itemsize for s in a.strides):
        a = np.array(a, copy=True, order="C")
    return a, -1


def _device_storage(t: DeviceTensor, name: str) -> tuple[DeviceTensor, int]:
    """(tensor, dtype code) of a device tensor: ml_dtypes types travel as a uint8 / uint16 view."""
    if t.dtype.name in _CODES:
        return t.view("uint16" if t.dtype.itemsize == 2 else "uint8", name), _CODES[t.dtype.name]
    if t.dtype.kind not in "biuf":
        raise TypeError(f"{name}: unsupported dtype {t.dtype}")
    return t, -1


def is_weak(value: Any) -> bool:
    """A Python int or float (not bool): "weak" as in numpy 2 (NEP 50), it takes the dtype its
    partner operand gives it instead of becoming int64 / float64."""
    return isinstance(value, (int, float)) and not isinstance(value, (bool, np.generic))


def weak_operand(value: Any, name: str, dtype: Any) -> tuple[np.ndarray, int]:
    """A Python int / float parameter converted to `dtype` (a numpy or ml_dtypes dtype), the type its
    partner gives it; a value the dtype cannot hold exactly as an integer (a zero point of 300 for
    uint8) raises ValueError naming the parameter instead of wrapping."""
    dt = np.dtype(dtype)
    if isinstance(value, int) and dt.kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= value <= info.max:
            raise ValueError(f"{name}: {value} does not fit {dt} (range {info.min}..{info.max}), the type a Python "
                             f"int takes here; pass a numpy scalar or array of the intended type, e.g. np.int16({value})")
    elif isinstance(value, int) and dt.name in ("int4", "uint4", "int2", "uint2"):
        info = ml_dtypes.iinfo(dt)
        if not int(info.min) <= value <= int(info.max):
            raise ValueError(f"{name}: {value} does not fit {dt} (range {int(info.min)}..{int(info.max)}), the type "
                             f"a Python int takes here; pass an array of the intended type")
    try:
        return operand(np.asarray(value, dtype=dt), name)
    except OverflowError as e:
        raise ValueError(f"{name}: {value!r} does not fit {dt}: {e}") from e


def flag_attr(value: Any, name: str) -> bool:
    """A 0/1 attribute (saturate): a bool or the ints 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected 0, 1 or a bool, got {type(value).__name__} {value!r}") from None
    if number not in (0, 1):
        raise ValueError(f"{name}: must be 0 or 1, got {number}")
    return bool(number)


def dtype_name(array: np.ndarray, code: int) -> str:
    """The dtype name of an operand (array, code) as operand() returned it."""
    return _NAMES_BY_CODE.get(code, array.dtype.name) if code >= 0 else array.dtype.name


def numpy_dtype(name: str) -> Any:
    """The numpy or ml_dtypes dtype called `name`."""
    return np.dtype(getattr(ml_dtypes, name)) if name in _CODES else np.dtype(name)


# ONNX TensorProto.DataType numbers of the types the Q/DQ ops may output or be given.
_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 10: "float16",
               16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2",
               20: "float8_e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu",
               25: "uint2", 26: "int2", 27: "float6_e2m3fn", 28: "float6_e3m2fn"}


def numpy_dtype_of_onnx(number: int) -> Any:
    """The numpy / ml_dtypes dtype of an ONNX data type number; None for numbers not listed."""
    name = _ONNX_TYPES.get(number)
    return None if name is None else numpy_dtype(name)


def result(pair: tuple[np.ndarray, str]) -> np.ndarray:
    array, name = pair
    if isinstance(array, DeviceTensor):  # allocated on the device as its storage dtype
        return array.view(name, "out").to_user() if name in _CODES else array.to_user()
    if name in _CODES:
        return array.view(getattr(ml_dtypes, name))
    return array


def out_operand(out: np.ndarray | None) -> np.ndarray | None:
    """The optional ``out=`` array checked as in every family (_args.checked_out), as the extension
    takes it (ml_dtypes arrays as their uint8 / uint16 storage)."""
    out = checked_out(out)
    if isinstance(out, DeviceTensor):
        return _device_storage(out, "out")[0]
    if out is not None and out.dtype.name in _CODES:
        return out.view(np.uint16 if out.dtype.itemsize == 2 else np.uint8)
    return out


def finish(pair: tuple[np.ndarray, str], out: np.ndarray | None) -> np.ndarray:
    return out if out is not None else result(pair)
