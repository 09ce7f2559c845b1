"""AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (domain ``com.amd.quark``),
bit-exact with the CPU kernel of amd-quark 0.13.

``extended_quantize_linear(x, y_scale, y_zero_point=None, axis=1)`` and
``extended_dequantize_linear(x, x_scale, x_zero_point=None, axis=1)``: the quantized type is the
zero point's dtype — int8, uint8, int16, uint16, int32, uint32, float16 or ``ml_dtypes.bfloat16`` —
and uint8 (zero 0) when it is absent; x (Q) and the scale are float32; DQ returns float32. A scale
of one element is per-tensor, otherwise it is 1-D of length ``x.shape[axis]``.

``semantics="quark"`` (default) reproduces Quark's kernel, including its NaN / infinity / overflow
results (NaN and +-inf give the type's lowest value, or its highest when the zero point is
negative), float16 as a cast of x clamped to +-65504 (scale and zero point ignored) and bfloat16
NaN as 0x7FC1. ``semantics="onnx"`` gives the ONNX formulas for the same types instead
(saturation as ONNX Runtime, float16/bfloat16 as x / scale + zero point). Note that Quark's
ONNX Runtime kernel reads an absent ``axis`` attribute as 0; here ``axis`` defaults to 1, the
documented value (polyquant's ONNX Runtime op follows the kernel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _polyquant_ext as _ext
from . import _qdq
from ._args import strict_int

__all__ = ["extended_quantize_linear", "extended_dequantize_linear"]


def _common(x: Any, scale: Any, scale_name: str, axis: Any, semantics: Any) -> tuple:
    xa, xc = _qdq.operand(x, "x")
    axis_value = strict_int(axis, "axis")
    if not isinstance(semantics, str):
        raise TypeError(f"semantics: expected 'quark' or 'onnx', got {type(semantics).__name__} {semantics!r}")
    # A Python float / int scale is weak (NEP 50): it takes the float32 the ops' scales have.
    sa, sc = _qdq.weak_operand(scale, scale_name, np.float32) if _qdq.is_weak(scale) else _qdq.operand(scale, scale_name)
    return xa, xc, sa, sc, axis_value


def _zero_point(value: Any, name: str, weak_dtype: Any) -> tuple[Any, int]:
    if value is None:
        return None, -1
    return _qdq.weak_operand(value, name, weak_dtype) if _qdq.is_weak(value) else _qdq.operand(value, name)


def extended_quantize_linear(x: Any, y_scale: Any, y_zero_point: Any = None, axis: int = 1, *,
                             semantics: str = "quark", out: np.ndarray | None = None) -> np.ndarray:
    """Quark ExtendedQuantizeLinear: output dtype = y_zero_point's (uint8 when absent). A Python float /
    int y_scale is float32; a Python int y_zero_point is uint8, the type without a zero point (pass a
    numpy scalar, e.g. np.int8(-3), for another output type)."""
    xa, xc, sa, sc, axis_value = _common(x, y_scale, "y_scale", axis, semantics)
    za, zc = _zero_point(y_zero_point, "y_zero_point", np.uint8)
    pair = _ext.extended_quantize_linear(xa, xc, sa, sc, za, zc, axis_value, semantics, _qdq.out_operand(out))
    return _qdq.finish(pair, out)


def extended_dequantize_linear(x: Any, x_scale: Any, x_zero_point: Any = None, axis: int = 1, *,
                               semantics: str = "quark", out: np.ndarray | None = None) -> np.ndarray:
    """Quark ExtendedDequantizeLinear: float32 output. A Python float / int x_scale is float32; a
    Python int x_zero_point takes x's type."""
    xa, xc, sa, sc, axis_value = _common(x, x_scale, "x_scale", axis, semantics)
    za, zc = _zero_point(x_zero_point, "x_zero_point", _qdq.numpy_dtype(_qdq.dtype_name(xa, xc)))
    pair = _ext.extended_dequantize_linear(xa, xc, sa, sc, za, zc, axis_value, semantics, _qdq.out_operand(out))
    return _qdq.finish(pair, out)
