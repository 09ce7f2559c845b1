"""QONNX quantization operators, bit-exact with qonnx 1.0.0's numpy functions: a drop-in.

The public functions have qonnx's own names, parameter names, order and defaults
(``qonnx.custom_op.general.{intquant,quant,bipolar_quant,trunc,floatquant}``), so code switches by
changing the import::

    int_quant(inp_tensor, scale, zeropt, bitwidth, signed, narrow, rounding_mode)
    quant                                  # qonnx's alias of int_quant
    binary_quant(inp_tensor, scale)        # BipolarQuant
    trunc_v1(inp_tensor, scale, zeropt, input_bit_width, output_bit_width, rounding_mode)
    trunc_v2(inp_tensor, scale, zeropt, input_bit_width, narrow, signed, output_scale,
             output_bit_width, rounding_mode)
    float_quant(X, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias=None, signed=True,
                max_val=None, has_inf=False, has_nan=False, has_subnormal=False,
                rounding_mode="ROUND", saturation=True)
    min_int(signed, narrow_range, bit_width), max_int(signed, narrow_range, bit_width)
    compute_max_val(exponent_bitwidth, mantissa_bitwidth, exponent_bias=None)
    compute_default_exponent_bias(exponent_bitwidth)
    resolve_rounding_mode(mode_string)
    execute_onnx(model, input_dict, return_full_exec_context=False, start_node=None, end_node=None)

Every op also takes a keyword-only ``out=`` (see below). ``bipolar_quant`` and ``trunc`` remain as
aliases of ``binary_quant`` and ``trunc_v1`` (same positional order). Changed in this release:
``trunc_v2`` and ``float_quant`` used to take their parameters in another order
(``trunc_v2(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth, rounding_mode, signed, narrow)``,
``float_quant(x, scale, E, m, bias, max_val, has_inf, has_nan, has_subnormal, saturation,
rounding_mode)``); they now take qonnx's, and keyword names are qonnx's throughout.

Results have exactly the type qonnx's function returns for the same inputs: the numpy-promoted
dtype for int_quant, binary_quant and the Truncs (qonnx's ONNX nodes cast IntQuant to float32,
its functions do not), float64 for float_quant (its clip against the float64 limit promotes; this
is the exact double the float32 node output is rounded from), and a numpy scalar instead of a 0-d
array, as numpy arithmetic returns. ``float_quant(..., signed=False)`` is an unsigned minifloat:
clipped to [0, M], and with ``saturation=False`` negative values become -inf (has_inf) or NaN
(has_nan), exactly as qonnx does.

Tensors may be numpy arrays, numpy or Python scalars, nested sequences, or any object exposing
``__dlpack__`` (a CPU tensor, read without copying) or ``__array__``, with any strides (zero,
negative, broadcast views), at most 8 dimensions. Parameters broadcast with the input like numpy
operands do, so the output may be larger than the input. Each step is computed in the dtype numpy 2
(NEP 50) computes it in, as the reference does: ``x / scale`` in the dtype of x and scale,
``+ zeropt`` in that and zeropt's, and so on; Python scalars are "weak" and take the input's dtype.

Integer attributes (``signed``, ``narrow``, ``has_inf``, ...) accept bools and ints; any non-zero
value is true. ``rounding_mode`` is one of ROUND, HALF_EVEN, CEIL, FLOOR, UP, DOWN, HALF_UP,
HALF_DOWN, in any letter case. Bad input raises ValueError or TypeError naming the parameter.

The computation runs in compiled code with the GIL released. ``out=`` is a writable numpy array of
exactly the output's shape (any strides, native byte order) to write into instead of allocating;
it is returned. Its dtype is the function's, or any other float dtype to round the result into
(float32 gives the ONNX node's output). ``out`` may share memory with the input in any layout
(``out=x`` in place; ``out=x[::-1]`` or ``out=x.T`` are buffered, as numpy ufuncs do).
"""

from __future__ import annotations

import importlib
from typing import Any

from .ops import (
    SupportsDLPack,
    TensorLike,
    binary_quant,
    bipolar_quant,
    compute_default_exponent_bias,
    compute_max_val,
    float_quant,
    int_quant,
    max_int,
    min_int,
    quant,
    resolve_rounding_mode,
    trunc,
    trunc_v1,
    trunc_v2,
)

__all__ = [
    "UnknownInputWarning",
    "binary_quant",
    "bipolar_quant",
    "compute_default_exponent_bias",
    "compute_max_val",
    "execute_onnx",
    "float_quant",
    "int_quant",
    "max_int",
    "min_int",
    "quant",
    "resolve_rounding_mode",
    "trunc",
    "trunc_v1",
    "trunc_v2",
]

# The model executor needs onnx and onnxruntime; the array ops do not, so it is imported on first use.
_EXECUTOR_NAMES = ("execute_onnx", "UnknownInputWarning")


def __getattr__(name: str) -> Any:
    if name in _EXECUTOR_NAMES:
        return getattr(importlib.import_module(".execute", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXECUTOR_NAMES))
