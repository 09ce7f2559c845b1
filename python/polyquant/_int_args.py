"""Strict integer arguments shared by polyquant's Python layers: a value is an integer when
``operator.index`` takes it (Python and numpy integers, 0-d integer arrays), never a bool, a float
(1.5, 2.0), a string ("1") or None; int() would silently truncate or parse those. Errors name the
parameter and the allowed values: TypeError for a non-integer, ValueError for one out of range."""

from __future__ import annotations

import operator
from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["strict_int", "strict_int_tuple"]


def _allowed(minimum: Optional[int], maximum: Optional[int]) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"an integer >= {minimum}"
    if maximum is not None:
        return f"an integer <= {maximum}"
    return "an integer"


def strict_int(value: Any, name: str, *, minimum: Optional[int] = None, maximum: Optional[int] = None) -> int:
    """``value`` as a Python int (operator.index semantics, bool rejected), within
    [minimum, maximum] where given."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected {_allowed(minimum, maximum)}, got the bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected {_allowed(minimum, maximum)}, got {type(value).__name__} {value!r}") from None
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise ValueError(f"{name}: {v} is out of range; expected {_allowed(minimum, maximum)}")
    return v


def strict_int_tuple(value: Any, name: str, *, minimum: Optional[int] = None,
                     maximum: Optional[int] = None) -> Tuple[int, ...]:
    """A sequence of integers (each as strict_int takes it; a bare integer is rejected)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name}: expected a tuple of integers, got {type(value).__name__} {value!r}")
    items = tuple(value)
    return tuple(strict_int(v, f"{name}[{i}]", minimum=minimum, maximum=maximum) for i, v in enumerate(items))
