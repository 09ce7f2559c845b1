"""Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear on numpy arrays (see ``polyquant.quark``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _polyquant_ext as _ext
from .._common import operands
from .._common.args import strict_int
from .._common.device import device_path

__all__ = ["extended_quantize_linear", "extended_dequantize_linear"]


def _common(x: Any, scale: Any, scale_name: str, axis: Any, semantics: Any) -> tuple:
    xa, xc = operands.operand(x, "x")
    axis_value = strict_int(axis, "axis")
    if not isinstance(semantics, str):
        raise TypeError(f"semantics: expected 'quark' or 'onnx', got {type(semantics).__name__} {semantics!r}")
    # A Python float / int scale is weak (NEP 50): it takes the float32 the ops' scales have.
    sa, sc = operands.weak_operand(scale, scale_name, np.float32) if operands.is_weak(scale) else operands.operand(scale, scale_name)
    return xa, xc, sa, sc, axis_value


def _zero_point(value: Any, name: str, weak_dtype: Any) -> tuple[Any, int]:
    if value is None:
        return None, -1
    return operands.weak_operand(value, name, weak_dtype) if operands.is_weak(value) else operands.operand(value, name)


_SEMANTICS = {"quark": _ext.quark.Semantics.quark, "onnx": _ext.quark.Semantics.onnx}


def _attrs(axis: int, semantics: str) -> Any:
    """The core's ExtendedAttrs; semantics "quark" follows Quark's CPU kernels, "onnx" the ONNX spec."""
    attrs = _ext.quark.ExtendedAttrs()
    attrs.axis = axis
    if semantics not in _SEMANTICS:
        raise ValueError(f"semantics: '{semantics}' is not one of 'quark', 'onnx'")
    attrs.semantics = _SEMANTICS[semantics]
    return attrs


@device_path
def extended_quantize_linear(x: Any, y_scale: Any, y_zero_point: Any = None, axis: int = 1, *,
                             semantics: str = "quark", out: np.ndarray | None = None) -> np.ndarray:
    """Quark ExtendedQuantizeLinear: output dtype = y_zero_point's (uint8 when absent). A Python float /
    int y_scale is float32; a Python int y_zero_point is uint8, the type without a zero point (pass a
    numpy scalar, e.g. np.int8(-3), for another output type)."""
    xa, xc, sa, sc, axis_value = _common(x, y_scale, "y_scale", axis, semantics)
    za, zc = _zero_point(y_zero_point, "y_zero_point", np.uint8)
    out_array = operands.out_operand(out)
    pair = _ext.quark.extended_quantize_linear(xa, xc, sa, sc, za, zc, _attrs(axis_value, semantics), out_array)
    return operands.finish(pair, out)


@device_path
def extended_dequantize_linear(x: Any, x_scale: Any, x_zero_point: Any = None, axis: int = 1, *,
                               semantics: str = "quark", out: np.ndarray | None = None) -> np.ndarray:
    """Quark ExtendedDequantizeLinear: float32 output. A Python float / int x_scale is float32; a
    Python int x_zero_point takes x's type."""
    xa, xc, sa, sc, axis_value = _common(x, x_scale, "x_scale", axis, semantics)
    za, zc = _zero_point(x_zero_point, "x_zero_point", operands.numpy_dtype(operands.dtype_name(xa, xc)))
    out_array = operands.out_operand(out)
    pair = _ext.quark.extended_dequantize_linear(xa, xc, sa, sc, za, zc, _attrs(axis_value, semantics), out_array)
    return operands.finish(pair, out)
