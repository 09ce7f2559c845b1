"""QONNX quantization operators, bit-exact with qonnx 1.0.0's numpy functions.

Names and parameter order are qonnx's own (``qonnx.custom_op.general``): ``int_quant`` (alias
``quant``), ``bipolar_quant``, ``trunc`` (Trunc v1), ``trunc_v2`` and ``float_quant``.

Tensors may be numpy arrays, numpy or Python scalars, nested sequences, or any object exposing
``__dlpack__`` (a CPU tensor, read without copying) or ``__array__``. Any strides are accepted.
Parameters broadcast with ``x`` like numpy operands do, so the output may be larger than ``x``.

Dtypes follow numpy 2 (NEP 50), as the reference does when run under numpy 2: each step is done
in the promoted dtype of its operands, as numpy evaluates it (``x / scale`` in the dtype of x and
scale, ``+ zeropt`` in that and zeropt's; float32 throughout for float32 inputs). Python scalars are "weak" and take ``x``'s
dtype. ``int_quant`` and ``float_quant`` return float32 (qonnx casts their output);
``bipolar_quant``, ``trunc`` and ``trunc_v2`` return the promoted dtype.

Integer attributes (``signed``, ``narrow``, ``has_inf``, ...) accept bools and ints; any non-zero
value is true. ``rounding_mode`` is one of ROUND, HALF_EVEN, CEIL, FLOOR, UP, DOWN, HALF_UP,
HALF_DOWN, in any letter case. Bad input raises ValueError or TypeError naming the parameter.

The computation runs in compiled code with the GIL released. Every function also takes a
keyword-only ``out=``: a writable numpy array of exactly the output's shape and dtype (any strides)
to write into instead of allocating one, as numpy ufuncs do; it is returned. ``out`` may be ``x``
itself (in place) but must not otherwise overlap an input.
"""

from __future__ import annotations

from typing import Any, Protocol, Union

import numpy as np
from numpy.typing import ArrayLike

from . import _polyquant_ext as _ext
from ._convert import as_data, as_flag, as_out, as_param, as_rounding_mode

__all__ = ["bipolar_quant", "execute_onnx", "float_quant", "int_quant", "quant", "trunc", "trunc_v2"]


class SupportsDLPack(Protocol):
    """An object numpy can import with ``np.from_dlpack`` (a CPU tensor of another framework)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


TensorLike = Union[ArrayLike, SupportsDLPack]


def int_quant(
    x: TensorLike,
    scale: TensorLike,
    zeropt: TensorLike,
    bitwidth: TensorLike,
    signed: int,
    narrow: int,
    rounding_mode: str = "ROUND",
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """IntQuant (legacy op_type ``Quant``): uniform integer fake-quantization.

    ``y = x / scale + zeropt``; for a 1-bit signed quantizer ``y = +1 if y >= 0 else -1`` (NaN gives
    -1; ``narrow`` and ``rounding_mode`` are ignored); otherwise ``y = R(clamp(y, lo, hi))`` with the
    integer range of ``bitwidth`` (narrow removes the lowest signed / the highest unsigned code),
    clamping *before* rounding and letting NaN through. Returns ``float32((y - zeropt) * scale)``.

    ``bitwidth`` must have exactly one element (it may be non-integer, e.g. 2.5).
    """
    xa = as_data(x)
    return _ext.int_quant(
        xa,
        as_param(scale, "scale", xa),
        as_param(zeropt, "zeropt", xa),
        as_param(bitwidth, "bitwidth", xa),
        as_flag(signed, "signed"),
        as_flag(narrow, "narrow"),
        as_rounding_mode(rounding_mode),
        out=as_out(out),
    )


quant = int_quant
"""Alias of :func:`int_quant` (qonnx exports ``quant`` for the legacy op_type ``Quant``)."""


def bipolar_quant(x: TensorLike, scale: TensorLike, *, out: np.ndarray | None = None) -> np.ndarray:
    """BipolarQuant: ``(+1 if x >= 0 else -1) * scale``. NaN gives ``-scale``, -0.0 gives ``+scale``.
    The output dtype is numpy's promotion of ``x`` and ``scale``."""
    xa = as_data(x)
    return _ext.bipolar_quant(xa, as_param(scale, "scale", xa), out=as_out(out))


def trunc(
    x: TensorLike,
    scale: TensorLike,
    zeropt: TensorLike,
    in_bitwidth: TensorLike,
    out_bitwidth: TensorLike,
    rounding_mode: str,
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Trunc v1 (Brevitas <= 0.11 exports): drop ``in_bitwidth - out_bitwidth`` low bits.

    ``y = round_half_even(x / scale + zeropt)``, ``y = R(y / 2**(in_bitwidth - out_bitwidth))``
    (no clamp), output ``(y - zeropt) * scale`` in the promoted dtype. ``rounding_mode`` is required,
    as in qonnx (Brevitas exports FLOOR).
    """
    xa = as_data(x)
    return _ext.trunc(
        xa,
        as_param(scale, "scale", xa),
        as_param(zeropt, "zeropt", xa),
        as_param(in_bitwidth, "in_bitwidth", xa),
        as_param(out_bitwidth, "out_bitwidth", xa),
        as_rounding_mode(rounding_mode),
        out=as_out(out),
    )


def trunc_v2(
    x: TensorLike,
    scale: TensorLike,
    zeropt: TensorLike,
    in_bitwidth: TensorLike,
    out_scale: TensorLike,
    out_bitwidth: TensorLike,
    rounding_mode: str,
    signed: int = 1,
    narrow: int = 0,
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Trunc v2 (Brevitas >= 0.12 exports, QONNX opset 2).

    ``y = round_half_even(x / scale + zeropt)``; ``t = 2**round_half_even(log2(out_scale / scale))``
    (forced power of two); ``y = R(clamp(y / t, lo, hi))`` with the range of ``out_bitwidth``;
    output ``(y - zeropt / t) * out_scale`` in the promoted dtype. ``in_bitwidth`` is accepted and
    ignored, as in the reference.
    """
    xa = as_data(x)
    return _ext.trunc_v2(
        xa,
        as_param(scale, "scale", xa),
        as_param(zeropt, "zeropt", xa),
        as_param(in_bitwidth, "in_bitwidth", xa),
        as_param(out_scale, "out_scale", xa),
        as_param(out_bitwidth, "out_bitwidth", xa),
        as_flag(signed, "signed"),
        as_flag(narrow, "narrow"),
        as_rounding_mode(rounding_mode),
        out=as_out(out),
    )


def float_quant(
    x: TensorLike,
    scale: TensorLike,
    exponent_bitwidth: TensorLike,
    mantissa_bitwidth: TensorLike,
    exponent_bias: TensorLike,
    max_val: TensorLike,
    has_inf: int,
    has_nan: int,
    has_subnormal: int,
    saturation: int,
    rounding_mode: str = "ROUND",
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """FloatQuant: fake-quantization to a signed minifloat with ``exponent_bitwidth`` exponent and
    ``mantissa_bitwidth`` mantissa bits.

    ``xs = x / scale``; ``e = max(floor(log2(|xs| + tiny)) - m, 1 - bias - m)`` (log2 in the working
    dtype, so just below a power of two the exponent can be one too large, as in the reference);
    ``q = 2**e * R(xs / 2**e)``, clipped to ``+-min((2 - 2**-m) * 2**(2**E - 1 - bias), max_val)``.
    Without saturation, overflow (judged after rounding) becomes +-inf if ``has_inf``, else NaN if
    ``has_nan``. +-inf inputs give NaN. ``has_subnormal`` is accepted and ignored: subnormals are
    always produced. Returns ``float32(q * scale)``. ``mantissa_bitwidth`` must have one element.
    """
    xa = as_data(x)
    return _ext.float_quant(
        xa,
        as_param(scale, "scale", xa),
        as_param(exponent_bitwidth, "exponent_bitwidth", xa),
        as_param(mantissa_bitwidth, "mantissa_bitwidth", xa),
        as_param(exponent_bias, "exponent_bias", xa),
        as_param(max_val, "max_val", xa),
        as_flag(has_inf, "has_inf"),
        as_flag(has_nan, "has_nan"),
        as_flag(has_subnormal, "has_subnormal"),
        as_flag(saturation, "saturation"),
        as_rounding_mode(rounding_mode),
        out=as_out(out),
    )


from ._execute import execute_onnx  # noqa: E402
