"""ONNX QuantizeLinear / DequantizeLinear (opset 28) on numpy arrays, and ``pack`` / ``unpack`` of
sub-byte types (see ``polyquant.onnx``)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .. import _polyquant_ext as _ext
from .._common import operands
from .._common.args import strict_int
from .._common.device import device_path

__all__ = ["quantize_linear", "dequantize_linear", "pack", "unpack"]


def _dtype_attr(value: Any, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an ONNX TensorProto data type number (int) or None, got {value!r}")
    # The extension takes a C int: anything beyond is no data type either (the core names the
    # supported ones for values in range).
    if not 0 <= int(value) < 2**31:
        raise ValueError(f"{name}: {int(value)} is not an ONNX TensorProto data type number polyquant supports "
                         f"(e.g. onnx.TensorProto.INT8 = 3, UINT8 = 2, INT4 = 22, FLOAT8E4M3FN = 17)")
    return int(value)


# Python scalars are weak (NEP 50), as everywhere in polyquant: a Python float / int scale takes x's
# type where that is a scale type, a Python int zero point the type of the output (Q) or of x (DQ).
_SCALE_TYPES = ("float32", "float16", "bfloat16")


def _weak_scale_dtype(x: np.ndarray, code: int, value: Any) -> Any:
    """Q: x's dtype (float32, float16, bfloat16; int32 for an int scale with int32 x), else float32."""
    name = operands.dtype_name(x, code)
    if name in _SCALE_TYPES or (name == "int32" and isinstance(value, int)):
        return operands.numpy_dtype(name)
    return np.float32


def _output_type(output_dtype: int) -> Any:
    """The numpy / ml_dtypes type of an output_dtype attribute (0: uint8, Q's default); None when the
    number is no type polyquant knows (the core then names output_dtype)."""
    if output_dtype == 0:
        return np.uint8
    return operands.numpy_dtype_of_onnx(output_dtype)


def _zero_point(value: Any, name: str, dtype: Any) -> tuple[Any, int]:
    if value is None:
        return None, -1
    if operands.is_weak(value) and dtype is not None:
        return operands.weak_operand(value, name, dtype)
    return operands.operand(value, name)


@device_path
def quantize_linear(x: Any, y_scale: Any, y_zero_point: Any = None, axis: int = 1, block_size: int = 0,
                    output_dtype: int | None = None, saturate: int = 1, precision: int | None = None, *,
                    out: np.ndarray | None = None) -> np.ndarray:
    """ONNX QuantizeLinear (opset 28). Output dtype: y_zero_point's, else output_dtype, else uint8.
    A Python float / int y_scale takes x's type (float32 when x has none a scale may have); a Python
    int y_zero_point takes the output type (output_dtype's, else uint8)."""
    xa, xc = operands.operand(x, "x")
    axis_value, block = strict_int(axis, "axis"), strict_int(block_size, "block_size")
    out_code = _dtype_attr(output_dtype, "output_dtype")
    if operands.is_weak(y_scale):
        sa, sc = operands.weak_operand(y_scale, "y_scale", _weak_scale_dtype(xa, xc, y_scale))
    else:
        sa, sc = operands.operand(y_scale, "y_scale")
    za, zc = _zero_point(y_zero_point, "y_zero_point", _output_type(out_code))
    saturate_flag, precision_code = operands.flag_attr(saturate, "saturate"), _dtype_attr(precision, "precision")
    out_array = operands.out_operand(out)
    attrs = _ext.onnx.QuantizeLinearAttrs()
    attrs.axis, attrs.block_size, attrs.saturate = axis_value, block, saturate_flag
    # The core names an ONNX number it does not support (output_dtype first, then precision).
    attrs.output_dtype, attrs.precision = out_code, precision_code
    pair = _ext.onnx.quantize_linear(xa, xc, sa, sc, za, zc, attrs, out_array)
    return operands.finish(pair, out)


@device_path
def dequantize_linear(x: Any, x_scale: Any, x_zero_point: Any = None, axis: int = 1, block_size: int = 0,
                      output_dtype: int | None = None, *, out: np.ndarray | None = None) -> np.ndarray:
    """ONNX DequantizeLinear (opset 28). Output dtype: output_dtype, else x_scale's. A Python float /
    int x_scale is float32; a Python int x_zero_point takes x's type."""
    xa, xc = operands.operand(x, "x")
    axis_value, block = strict_int(axis, "axis"), strict_int(block_size, "block_size")
    out_code = _dtype_attr(output_dtype, "output_dtype")
    if operands.is_weak(x_scale):
        sa, sc = operands.weak_operand(x_scale, "x_scale", np.float32)
    else:
        sa, sc = operands.operand(x_scale, "x_scale")
    za, zc = _zero_point(x_zero_point, "x_zero_point", operands.numpy_dtype(operands.dtype_name(xa, xc)))
    out_array = operands.out_operand(out)
    attrs = _ext.onnx.DequantizeLinearAttrs()
    attrs.axis, attrs.block_size, attrs.output_dtype = axis_value, block, out_code
    pair = _ext.onnx.dequantize_linear(xa, xc, sa, sc, za, zc, attrs, out_array)
    return operands.finish(pair, out)


# ---- sub-byte packing, as ONNX stores int4/uint4/float4e2m1 (two per byte) and int2/uint2 (four per
# byte) in tensors: element i in bits [w*(i % k), w*(i % k) + w) of byte i // k, low bits first,
# the last byte zero-padded.
_PACKED_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def pack(array: Any) -> np.ndarray:
    """The packed bytes (uint8, flat) of an int4/uint4/float4_e2m1fn or int2/uint2 array, in C order."""
    a = np.asarray(array)
    bits = _PACKED_BITS.get(a.dtype.name)
    if bits is None:
        raise TypeError(f"array: pack takes int4, uint4, float4_e2m1fn, int2 or uint2 arrays (got {a.dtype})")
    codes = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return _ext.onnx.pack_sub_byte(codes, bits)


def unpack(packed: Any, dtype: Any, shape: Any) -> np.ndarray:
    """The array of `dtype` (an ml_dtypes sub-byte type or its name) and `shape` stored in `packed`."""
    try:
        dt = np.dtype(getattr(ml_dtypes, dtype) if isinstance(dtype, str) else dtype)
    except (AttributeError, TypeError):
        dt = None
    bits = None if dt is None else _PACKED_BITS.get(dt.name)
    if bits is None:
        raise TypeError(f"dtype: unpack takes int4, uint4, float4_e2m1fn, int2 or uint2 (got {dtype!r})")
    if isinstance(shape, np.ndarray):
        shape = shape.tolist() if shape.ndim else shape.item()
    dims = list(shape) if isinstance(shape, (tuple, list)) else [shape]
    shape = tuple(strict_int(d, "shape", allowed="an int or a tuple of ints") for d in dims)
    if any(d < 0 for d in shape):
        raise ValueError(f"shape: dimensions must be >= 0, got {shape}")
    n = 1
    for d in shape:
        n *= d
    if isinstance(packed, (bytes, bytearray, memoryview)):
        p = np.frombuffer(packed, dtype=np.uint8)
    else:
        p = np.asarray(packed)
        if p.dtype != np.uint8:
            # Bytes held in a wider integer array are taken when every value is a byte; anything
            # else would wrap silently in a uint8 cast.
            if p.dtype.kind not in "iu":
                raise TypeError(f"packed: expected bytes or an array of uint8 (bytes), got dtype {p.dtype}")
            if p.size and (p.min() < 0 or p.max() > 255):
                raise ValueError(f"packed: byte values must lie in [0, 255], got [{p.min()}, {p.max()}]")
            p = p.astype(np.uint8)
        p = p.reshape(-1)
    per_byte = 8 // bits
    if p.size * per_byte < n:
        raise ValueError(f"packed: {p.size} bytes hold at most {p.size * per_byte} elements of {dt}, "
                         f"shape {shape} needs {n}")
    codes = _ext.onnx.unpack_sub_byte(np.ascontiguousarray(p), n, bits)
    return codes.view(dt).reshape(shape)
