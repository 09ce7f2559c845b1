"""Argument conversion for the Python front-ends: anything array-like -> a numpy array the
extension can view without copying, plus the flag and rounding-mode checks.

No numerics happen here. Dtype promotion is the C++ core's (numpy 2 / NEP 50 rules); the only
typing decision made in Python is NEP 50's for *Python* scalars, which are "weak": a bare
``0.5`` or ``8`` parameter takes the floating dtype of ``x``, exactly as numpy 2 would treat it in
``x / 0.5``.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .args import MAX_RANK as _MAX_RANK, checked_out
from .device import as_device_operand

# Element types the core accepts (numpy spelling). X must be one of the floating ones.
_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_PARAM_DTYPES = frozenset(
    _FLOAT_DTYPES
    + tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
    + tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
    + (np.dtype(np.bool_),)
)


def _as_array(obj: Any, name: str) -> np.ndarray:
    """Any array-like (ndarray, numpy scalar, __dlpack__ or __array__ object, nested sequence)
    as an ndarray with a dtype the core supports, native byte order and element-aligned strides;
    inside a device call (device.py) a CUDA tensor stays on its device, as a DeviceTensor."""
    device_tensor = as_device_operand(obj, name)
    if device_tensor is not None:
        if device_tensor.dtype not in _PARAM_DTYPES:
            raise TypeError(f"{name}: unsupported dtype {device_tensor.dtype}; expected float16/32/64, (u)int8/16/32/64 or bool")
        if device_tensor.ndim > _MAX_RANK:
            raise ValueError(f"{name}: rank {device_tensor.ndim} exceeds the maximum of {_MAX_RANK} dimensions")
        return device_tensor
    if isinstance(obj, np.ndarray):
        a = obj
    elif isinstance(obj, np.generic):
        a = np.asarray(obj)
    elif hasattr(type(obj), "__dlpack__"):
        try:
            a = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise TypeError(f"{name}: cannot read this object through __dlpack__ as a CPU array ({e})") from e
    else:
        try:
            a = np.asarray(obj)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{name}: cannot convert {type(obj).__name__} to an array ({e})") from e
    if a.dtype.kind in "biuf" and not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype not in _PARAM_DTYPES:
        raise TypeError(
            f"{name}: unsupported dtype {a.dtype}; expected float16/32/64, (u)int8/16/32/64 or bool"
        )
    if a.ndim > _MAX_RANK:
        raise ValueError(f"{name}: rank {a.ndim} exceeds the maximum of {_MAX_RANK} dimensions")
    # The core reads elements through typed pointers: strides must be whole elements and the data
    # aligned (numpy allows neither to fail, e.g. for views into packed structured arrays).
    if not a.flags.aligned or any(s % a.itemsize for s in a.strides):
        a = np.array(a, copy=True, order="C")
    return a


def as_data(x: Any, name: str = "x") -> np.ndarray:
    """The data tensor X: must be float16, float32 or float64 (TypeError otherwise). A Python
    float becomes a float64 0-d array, as numpy would make it."""
    a = _as_array(x, name)
    if a.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}: must be a floating-point array (float16, float32 or float64), got {a.dtype}")
    return a


def is_weak(value: Any) -> bool:
    """A Python bool/int/float: "weak" in numpy 2 (NEP 50), it takes its partner operand's dtype."""
    return isinstance(value, (bool, int, float)) and not isinstance(value, np.generic)


def as_weak_param(value: Any, name: str, x: Any | None) -> tuple[np.ndarray, bool]:
    """A parameter the core promotes step by step (TensorView::weak): a Python bool/int/float stays
    weak, passed 0-d with its exact value (bool, int64 or float64), and the core gives it, at each
    step of the reference's expression, the dtype numpy would (a Python float divides a float32 X
    as float32 and multiplies a float64 result as float64). Anything else is as_param's. `x`: the
    array (or dtype) the scalar first meets in the reference's numpy arithmetic, or None where it
    first meets only Python numbers."""
    if is_weak(value):
        # Where the reference first meets x's dtype numpy converts the scalar to it: its overflow
        # warning (1e300 against float32) or error (a Python int beyond an integer dtype) comes
        # from that conversion, replayed here; the core then rounds the exact value per step.
        if x is not None:
            as_param(value, name, x)
        dtype = np.bool_ if isinstance(value, bool) else np.int64 if isinstance(value, int) else np.float64
        if dtype is np.int64 and not _INT64_MIN <= value <= _INT64_MAX:
            # A Python int beyond int64 meets only floats in qonnx's expressions (x / scale,
            # y + zeropt, 2.0 ** E, ...), where numpy and Python convert it to a double first: the
            # same value as a weak float.
            try:
                value = float(value)
            except OverflowError:
                raise OverflowError(
                    f"{name}: the Python int {_int_text(value)} is too large to convert to a float (at most ~1.8e308)"
                ) from None
            dtype = np.float64
        return np.asarray(value, dtype=dtype), True
    return as_param(value, name, np.float64 if x is None else x), False


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int_text(value: int) -> str:
    """A Python int for a message: its digits, or its size when it has more than 30 of them."""
    if abs(value) < 10**30:
        return str(value)
    return f"of {value.bit_length()} bits"


def weak_mask(*flags: bool) -> int:
    """The extension's `weak` bitmask: bit k marks tensor argument k (x is argument 0)."""
    return sum(1 << k for k, flag in enumerate(flags) if flag)


def as_param(value: Any, name: str, x: Any) -> np.ndarray:
    """A tensor parameter (scale, zero point, bit width, ...). Python bool/int/float scalars are
    weak (NEP 50): they take the dtype numpy gives them against their partner in the reference's
    expression, `x` (an array or a dtype: the input for a scale, the promoted x / scale for a zero
    point, ...; np.result_type applies NEP 50, e.g. a Python float against an int8 array is
    float64). Everything else keeps its own dtype."""
    if is_weak(value):
        dtype = np.result_type(np.dtype(getattr(x, "dtype", x)), value)
        # As in numpy 2: 1e300 with a float32 x is +inf (with numpy's overflow RuntimeWarning).
        try:
            return np.asarray(value, dtype=dtype)
        except OverflowError as e:
            raise OverflowError(f"{name}: {e}") from e
    if isinstance(value, complex):
        raise TypeError(f"{name}: complex values are not supported")
    if value is None:
        raise TypeError(f"{name}: expected a number or an array, got None")
    return _as_array(value, name)


def as_flag(value: Any, name: str) -> bool:
    """An integer attribute read as a boolean (QONNX: any non-zero int is true)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        return operator.index(value) != 0
    except TypeError:
        raise TypeError(f"{name}: expected a bool or an int, got {type(value).__name__}") from None


def as_rounding_mode(value: Any, name: str = "rounding_mode") -> str:
    """The rounding_mode attribute: a str, upper-cased; the core's parser then maps it to a
    RoundingMode (_polyquant_ext.qonnx.rounding_mode: ValueError listing the allowed modes)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str such as 'ROUND' or 'FLOOR', got {type(value).__name__}")
    # qonnx matches mode_string.upper(): Python's full Unicode upper-casing ("ﬂoor" is "FLOOR"),
    # which the core's ASCII upper-casing would not give.
    return str(value).upper()


def as_out(out: Any) -> np.ndarray | None:
    """The optional ``out=`` array: None, or a writable numpy array of a float dtype a QONNX op
    can return (its shape and dtype are checked against the op's output by the core); the checks
    every family shares are _args.checked_out's. In a device call, a tensor on its device."""
    if isinstance(out, np.ndarray) and out.dtype not in _PARAM_DTYPES and not (
        out.dtype.kind in "biuf" and not out.dtype.isnative
    ):
        raise TypeError(
            f"out: unsupported dtype {out.dtype}; expected float16, float32 or float64 (or the op's own output dtype)"
        )
    return checked_out(out)
