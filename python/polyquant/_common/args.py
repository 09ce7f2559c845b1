"""Argument checks shared by every family's Python layer (no numerics): strict integers and real
numbers, and the ``out=`` array.

A value is an integer when ``operator.index`` takes it (Python and numpy integers, 0-d integer
arrays), never a bool, a float (1.5, 2.0), a string ("1") or None: int() would silently truncate or
parse those. Every integer must also fit int64, the core's type. Errors name the parameter and the
allowed values: TypeError for a value of the wrong kind, ValueError for one out of range."""

from __future__ import annotations

import numbers
import operator
from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["strict_int", "strict_int_tuple", "strict_real", "checked_out", "INT64_MIN", "INT64_MAX", "MAX_RANK"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The most dimensions a tensor may have (the core's kMaxRank).
MAX_RANK = 8


def _allowed(minimum: Optional[int], maximum: Optional[int]) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"an integer >= {minimum}"
    if maximum is not None:
        return f"an integer <= {maximum}"
    return "an integer"


def strict_int(value: Any, name: str, *, minimum: Optional[int] = None, maximum: Optional[int] = None,
               allowed: Optional[str] = None) -> int:
    """``value`` as a Python int (operator.index semantics, bool rejected), within
    [minimum, maximum] where given and always within int64. `allowed` replaces the generated
    description of the allowed values in messages."""
    allowed = allowed or _allowed(minimum, maximum)
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected {allowed}, got the bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected {allowed}, got {type(value).__name__} {value!r}") from None
    if not INT64_MIN <= v <= INT64_MAX:
        raise ValueError(f"{name}: {v} is outside the int64 range; expected {allowed}")
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise ValueError(f"{name}: {v} is out of range; expected {allowed}")
    return v


def strict_int_tuple(value: Any, name: str, *, minimum: Optional[int] = None,
                     maximum: Optional[int] = None) -> Tuple[int, ...]:
    """A sequence of integers (each as strict_int takes it; a bare integer is rejected)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name}: expected a tuple of integers, got {type(value).__name__} {value!r}")
    items = tuple(value)
    return tuple(strict_int(v, f"{name}[{i}]", minimum=minimum, maximum=maximum) for i, v in enumerate(items))


def strict_real(value: Any, name: str) -> float:
    """A real-number parameter as a float: Python / numpy ints and floats, not bool, None or a string."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    return float(value)


def checked_out(out: Any) -> Optional[np.ndarray]:
    """The optional ``out=`` array of every family: None, or a writable numpy array in native byte
    order, aligned, with whole-element strides and at most MAX_RANK dimensions (its dtype and shape
    are checked against the op's output by the core). Results are written in native order: a
    big-endian ``out`` is refused with a message saying what to pass instead, in every family alike."""
    if out is None:
        return None
    from .device import as_device_operand  # (device.py imports the extension; args.py stays light)

    device_out = as_device_operand(out, "out")
    if device_out is not None:
        return device_out  # type: ignore[return-value]  (the core checks its shape, dtype and device)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out: expected a numpy array or None, got {type(out).__name__}")
    if not out.flags.writeable:
        raise ValueError("out: the array is read-only; pass a writable array")
    if not out.dtype.isnative:
        raise ValueError(
            f"out: the array's byte order is not the machine's (dtype {out.dtype.str}); results are written in "
            f"native order, so pass e.g. np.empty(shape, {out.dtype.newbyteorder('=').str!r}) and convert afterwards")
    if out.ndim > MAX_RANK:
        raise ValueError(f"out: rank {out.ndim} exceeds the maximum of {MAX_RANK} dimensions")
    if not out.flags.aligned or any(s % out.itemsize for s in out.strides):
        raise ValueError("out: the array must be aligned with whole-element strides")
    return out
