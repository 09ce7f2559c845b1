"""ONNX QuantizeLinear / DequantizeLinear (opset 28), bit-exact with onnx's reference evaluator.

``quantize_linear(x, y_scale, y_zero_point=None, axis=1, block_size=0, output_dtype=None,
saturate=1, precision=None)`` and ``dequantize_linear(x, x_scale, x_zero_point=None, axis=1,
block_size=0, output_dtype=None)`` take and return numpy arrays; the types numpy lacks are
``ml_dtypes`` arrays (bfloat16, int4/uint4, int2/uint2, float8_e4m3fn, float8_e4m3fnuz,
float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn), one
element per byte, as ``onnx.reference.ReferenceEvaluator`` returns them. ``output_dtype`` and
``precision`` are ONNX ``TensorProto`` data-type numbers (``onnx.TensorProto.INT4`` = 22, ...).

Semantics (see the README for every place where the evaluator departs from the spec text and the
one choice polyquant makes): the division ``x / y_scale`` in ``precision`` or in numpy's promoted
dtype; integer outputs ``clamp(rint(q) + zero_point)`` with NaN -> qmin, +inf -> qmax, -inf -> qmin
(ONNX Runtime's rule where the evaluator's int32 cast is undefined); float8 outputs a (saturating)
cast of q, the zero point ignored; float4/float6 a cast of q + zero_point. Dequantization:
``(x - zero_point) * scale`` in float32 (float64 for int32 with a zero point), rounded once to the
output dtype (``output_dtype``, else the scale's).

``pack`` / ``unpack`` convert sub-byte arrays to and from the packed bytes ONNX stores in tensors.
``upgrade_model`` rewrites an opset-28 model's Q/DQ nodes onto polyquant's ONNX Runtime domain
``polyquant.onnx`` so that today's onnxruntime runs it (``polyquant run`` does it by itself).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx

from . import _polyquant_ext as _ext
from . import _qdq
from ._args import strict_int

__all__ = ["quantize_linear", "dequantize_linear", "pack", "unpack", "upgrade_model", "needs_upgrade",
           "onnxruntime_max_opset", "POLYQUANT_DOMAIN"]


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
    name = _qdq.dtype_name(x, code)
    if name in _SCALE_TYPES or (name == "int32" and isinstance(value, int)):
        return _qdq.numpy_dtype(name)
    return np.float32


def _output_type(output_dtype: int) -> Any:
    """The numpy / ml_dtypes type of an output_dtype attribute (0: uint8, Q's default); None when the
    number is no type polyquant knows (the core then names output_dtype)."""
    if output_dtype == 0:
        return np.uint8
    return _qdq.numpy_dtype_of_onnx(output_dtype)


def _zero_point(value: Any, name: str, dtype: Any) -> tuple[Any, int]:
    if value is None:
        return None, -1
    if _qdq.is_weak(value) and dtype is not None:
        return _qdq.weak_operand(value, name, dtype)
    return _qdq.operand(value, name)


def quantize_linear(x: Any, y_scale: Any, y_zero_point: Any = None, axis: int = 1, block_size: int = 0,
                    output_dtype: int | None = None, saturate: int = 1, precision: int | None = None, *,
                    out: np.ndarray | None = None) -> np.ndarray:
    """ONNX QuantizeLinear (opset 28). Output dtype: y_zero_point's, else output_dtype, else uint8.
    A Python float / int y_scale takes x's type (float32 when x has none a scale may have); a Python
    int y_zero_point takes the output type (output_dtype's, else uint8)."""
    xa, xc = _qdq.operand(x, "x")
    axis_value, block = strict_int(axis, "axis"), strict_int(block_size, "block_size")
    out_code = _dtype_attr(output_dtype, "output_dtype")
    if _qdq.is_weak(y_scale):
        sa, sc = _qdq.weak_operand(y_scale, "y_scale", _weak_scale_dtype(xa, xc, y_scale))
    else:
        sa, sc = _qdq.operand(y_scale, "y_scale")
    za, zc = _zero_point(y_zero_point, "y_zero_point", _output_type(out_code))
    pair = _ext.quantize_linear(xa, xc, sa, sc, za, zc, axis_value, block, out_code,
                                _qdq.flag_attr(saturate, "saturate"), _dtype_attr(precision, "precision"),
                                _qdq.out_operand(out))
    return _qdq.finish(pair, out)


def dequantize_linear(x: Any, x_scale: Any, x_zero_point: Any = None, axis: int = 1, block_size: int = 0,
                      output_dtype: int | None = None, *, out: np.ndarray | None = None) -> np.ndarray:
    """ONNX DequantizeLinear (opset 28). Output dtype: output_dtype, else x_scale's. A Python float /
    int x_scale is float32; a Python int x_zero_point takes x's type."""
    xa, xc = _qdq.operand(x, "x")
    axis_value, block = strict_int(axis, "axis"), strict_int(block_size, "block_size")
    out_code = _dtype_attr(output_dtype, "output_dtype")
    if _qdq.is_weak(x_scale):
        sa, sc = _qdq.weak_operand(x_scale, "x_scale", np.float32)
    else:
        sa, sc = _qdq.operand(x_scale, "x_scale")
    za, zc = _zero_point(x_zero_point, "x_zero_point", _qdq.numpy_dtype(_qdq.dtype_name(xa, xc)))
    pair = _ext.dequantize_linear(xa, xc, sa, sc, za, zc, axis_value, block, out_code, _qdq.out_operand(out))
    return _qdq.finish(pair, out)


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
    per_byte = 8 // bits
    codes = np.ascontiguousarray(a).reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    padded = np.zeros(-(-codes.size // per_byte) * per_byte, np.uint8)
    padded[: codes.size] = codes
    groups = padded.reshape(-1, per_byte).astype(np.uint8)
    packed = np.zeros(groups.shape[0], np.uint8)
    for k in range(per_byte):
        packed |= groups[:, k] << np.uint8(bits * k)
    return packed


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
        p = np.asarray(packed, dtype=np.uint8).reshape(-1)
    per_byte = 8 // bits
    if p.size * per_byte < n:
        raise ValueError(f"packed: {p.size} bytes hold at most {p.size * per_byte} elements of {dt}, "
                         f"shape {shape} needs {n}")
    codes = np.stack([(p >> np.uint8(bits * k)) & np.uint8((1 << bits) - 1) for k in range(per_byte)], axis=1).reshape(-1)[:n]
    return codes.astype(np.uint8).view(dt).reshape(shape)


# ---- running opset-28 models in today's onnxruntime ------------------------------------------------
POLYQUANT_DOMAIN = "polyquant.onnx"
"""The custom-op domain (opset 1) of polyquant's ONNX Runtime library that implements QuantizeLinear /
DequantizeLinear with the semantics, attributes and types of ONNX opset 28."""

_ORT_MAX_OPSET: dict[str, int] = {}


def onnxruntime_max_opset(op: str = "QuantizeLinear") -> int:
    """The newest default-domain opset at which the installed onnxruntime runs a one-node model of
    `op` (probed once per op): for QuantizeLinear, onnxruntime 1.32 has kernels up to opset 25 while
    it loads other ops at 28."""
    if op not in _ORT_MAX_OPSET:
        import onnxruntime
        from onnx import TensorProto, helper

        found = 0
        for opset in range(onnx.defs.onnx_opset_version(), 0, -1):
            inputs = ["x", "s"] if op in ("QuantizeLinear", "DequantizeLinear") else ["x"]
            x_type = TensorProto.UINT8 if op == "DequantizeLinear" else TensorProto.FLOAT
            y_type = TensorProto.UINT8 if op == "QuantizeLinear" else TensorProto.FLOAT
            graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], "probe",
                                      [helper.make_tensor_value_info("x", x_type, [1])],
                                      [helper.make_tensor_value_info("y", y_type, [1])],
                                      [helper.make_tensor("s", TensorProto.FLOAT, [], [1.0])] if len(inputs) > 1 else [])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            model.ir_version = 8
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 4
            try:
                onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            except Exception:
                continue
            found = opset
            break
        _ORT_MAX_OPSET[op] = found
    return _ORT_MAX_OPSET[op]


def _load_model(model: Any, copy: bool, load_external_data: bool = True) -> Any:
    """The onnx.ModelProto of `model`: a ModelProto (copied when `copy`), a path (str or os.PathLike)
    or the serialized bytes onnx.load_model_from_string reads. Anything else is a TypeError; a path
    that is no file, or bytes / a file that do not parse as a model, a ValueError or OSError saying so."""
    import copy as copy_module
    import os

    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return copy_module.deepcopy(model) if copy else model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_model_from_string(bytes(model))
        except (DecodeError, ValueError, RuntimeError) as e:
            raise ValueError(f"model: the {len(model)} bytes given are not a serialized ONNX model ({e})") from None
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model: expected an onnx.ModelProto, a path (str or os.PathLike) or the bytes of a "
                        f"serialized model, got {type(model).__name__}")
    path = os.fspath(model)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"model: {path} is a directory, not an ONNX model file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"model: no such file: {path}")
    try:
        return onnx.load(path, load_external_data=load_external_data)
    except (DecodeError, RuntimeError) as e:
        raise ValueError(f"model: {path} is not an ONNX model file (it does not parse as one: {e})") from None


def upgrade_model(model: Any, *, opset: int | None = None) -> Any:
    """A copy of `model` (an onnx.ModelProto, a path or a serialized model's bytes) that today's
    onnxruntime runs with polyquant's custom-op library: every QuantizeLinear / DequantizeLinear node of the default domain moves to
    domain ``polyquant.onnx`` (same inputs, outputs and attributes; opset-28 semantics, every type
    and attribute) and the domain is imported. With `opset`, a newer default-domain opset import is
    lowered to it (only needed for an onnxruntime that does not load the model's opset at all; it is
    sound for models whose other ops are defined alike at both opsets, and onnxruntime checks every
    node when it loads the result). Types onnxruntime cannot hold at all (float6) cannot be carried
    between nodes. An `opset` outside 1 .. the installed onnx's newest opset is a ValueError."""
    if opset is not None:
        opset = strict_int(opset, "opset")
        newest = onnx.defs.onnx_opset_version()
        if not 1 <= opset <= newest:
            raise ValueError(f"opset: {opset} is not a default-domain opset version (1 .. {newest})")
    proto = _load_model(model, copy=True)
    if opset is not None:
        for imp in proto.opset_import:
            if imp.domain in ("", "ai.onnx") and imp.version > opset:
                imp.version = opset

    def move(graph):
        moved = False
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                node.domain = POLYQUANT_DOMAIN
                moved = True
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    moved |= move(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    for g in attr.graphs:
                        moved |= move(g)
        return moved

    if move(proto.graph) and not any(o.domain == POLYQUANT_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(POLYQUANT_DOMAIN, 1))
    return proto


def needs_upgrade(model: Any) -> bool:
    """Whether `model` has default-domain Q/DQ nodes at an opset onnxruntime has no kernels for."""
    proto = _load_model(model, copy=False, load_external_data=False)
    version = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    has_qdq = any(n.domain in ("", "ai.onnx") and n.op_type in ("QuantizeLinear", "DequantizeLinear")
                  for n in proto.graph.node)
    return has_qdq and version > onnxruntime_max_opset()
