"""The QONNX operators (IntQuant / Quant, BipolarQuant, Trunc v1 and v2, FloatQuant) and qonnx's
helper functions, with qonnx 1.0.0's names, parameters and results (see ``polyquant.qonnx``)."""

from __future__ import annotations

import math
from typing import Any, Callable, Protocol, Union

import numpy as np
from numpy.typing import ArrayLike

from .. import _polyquant_ext as _ext
from .._common.convert import as_data, as_flag, as_out, as_param, as_rounding_mode, as_weak_param, is_weak, weak_mask
from .._common.device import device_path

__all__ = [
    "binary_quant",
    "bipolar_quant",
    "compute_default_exponent_bias",
    "compute_max_val",
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


class SupportsDLPack(Protocol):
    """An object numpy can import with ``np.from_dlpack`` (a CPU tensor of another framework)."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


TensorLike = Union[ArrayLike, SupportsDLPack]


def _result(value: np.ndarray, out: np.ndarray | None) -> Any:
    """numpy arithmetic on 0-d operands gives a numpy scalar, and so do qonnx's functions."""
    if out is None and value.ndim == 0:
        return value[()]
    return value


# ------------------------------------------------------------------------------------------------
# Helpers (pure numpy, as qonnx defines them)


# The largest Python-int bit width min_int/max_int evaluate: 2 ** (2 ** 40) as a Python int needs
# 128 GiB and minutes (qonnx never returns); 2 ** (2 ** 24) takes 2 MiB and milliseconds.
_MAX_PYTHON_INT_BIT_WIDTH = 2**24


def _check_python_int_bit_width(bit_width: Any) -> None:
    if isinstance(bit_width, int) and not isinstance(bit_width, bool) and bit_width > _MAX_PYTHON_INT_BIT_WIDTH:
        raise ValueError(
            f"bit_width: a Python int bit width must be at most {_MAX_PYTHON_INT_BIT_WIDTH} (2 ** bit_width is an exact "
            f"Python int: a larger one takes gigabytes and minutes), got {bit_width}; numpy integer arrays wrap as "
            f"numpy does"
        )


def min_int(signed: bool, narrow_range: bool, bit_width: int) -> int:
    """Smallest integer of a ``bit_width``-bit quantizer: ``-2**(b-1)`` signed (``+1`` when
    narrow), 0 unsigned. Evaluated with the operand's own arithmetic (Python ints stay exact, numpy
    arrays keep their dtype), as qonnx does."""
    _check_python_int_bit_width(bit_width)
    if signed:
        return -(2 ** (bit_width - 1)) + (1 if narrow_range else 0)
    return 0 * bit_width


def max_int(signed: bool, narrow_range: bool, bit_width: int) -> int:
    """Largest integer of a ``bit_width``-bit quantizer: ``2**(b-1) - 1`` signed, ``2**b - 1``
    unsigned (``2**b - 2`` when narrow: narrow applies to unsigned ranges too)."""
    _check_python_int_bit_width(bit_width)
    if signed:
        return 2 ** (bit_width - 1) - 1
    return 2**bit_width - (2 if narrow_range else 1)


def compute_default_exponent_bias(exponent_bitwidth: Any) -> Any:
    """The IEEE-style bias of an ``E``-bit exponent: ``2.0**(E - 1) - 1``."""
    return (2.0 ** (exponent_bitwidth - 1)) - 1


def _max_mantissa(mantissa_bitwidth: Any) -> np.float64:
    """``sum(2.0 ** -k)`` over k = 0 .. ceil(m + 1) - 1 (the terms of ``arange(0, -m - 1, -1)``),
    summed as numpy's ``np.sum`` does (pairwise). Terms past k = 1074 are 0 in float64 and numpy's
    pairwise split puts them all in later halves, so a huge m is reduced to the first half-split
    below a few thousand terms before summing: the same grouping, the same bits, no huge array."""
    m = np.asarray(mantissa_bitwidth)
    if m.size != 1:
        raise ValueError(f"mantissa_bitwidth: must have exactly one element, got shape {m.shape}")
    value = m.reshape(-1)[0]
    if m.dtype.kind not in "biuf":
        raise TypeError(f"mantissa_bitwidth: expected a real number, got dtype {m.dtype}")
    if not np.isfinite(value):
        # qonnx's np.arange(0, -m - 1, -1) raises ValueError ("Maximum allowed size exceeded" for
        # inf, "arange: cannot compute length" for NaN).
        raise ValueError(f"mantissa_bitwidth: must be finite, got {value}")
    count = math.ceil(float(value) + 1.0)
    if count <= 0:
        return np.float64(0.0)
    while count > 4096:
        half = count // 2
        count = half - half % 8
    return np.sum(np.ldexp(1.0, -np.arange(count)))


def compute_max_val(exponent_bitwidth: Any, mantissa_bitwidth: Any, exponent_bias: Any = None) -> Any:
    """Largest finite value of the minifloat format: ``(2 - 2**-m) * 2**(2**E - 1 - bias)`` with
    every exponent code usable (a format's reserved codes are expressed through ``max_val``); the
    mantissa series is summed in float64 and the power in the dtype of E and bias, as in qonnx."""
    if exponent_bias is None:
        exponent_bias = compute_default_exponent_bias(exponent_bitwidth)
    max_exponent = (2.0**exponent_bitwidth) - 1.0 - exponent_bias
    return _max_mantissa(mantissa_bitwidth) * (2**max_exponent)


def _round_up(x: Any) -> Any:
    return np.sign(x) * np.ceil(np.abs(x))


def _round_half_up(x: Any) -> Any:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _round_half_down(x: Any) -> Any:
    return np.sign(x) * np.ceil(np.abs(x) - 0.5)


_ROUNDING_FUNCTIONS: dict[str, Callable[[Any], Any]] = {
    "ROUND": np.round,
    "HALF_EVEN": np.round,
    "CEIL": np.ceil,
    "FLOOR": np.floor,
    "UP": _round_up,
    "DOWN": np.fix,
    "HALF_UP": _round_half_up,
    "HALF_DOWN": _round_half_down,
}


def resolve_rounding_mode(mode_string: str) -> Callable[[Any], Any]:
    """The numpy function of a rounding mode name (upper-cased first, as qonnx does): ROUND and
    HALF_EVEN round half to even, CEIL, FLOOR, UP (away from zero), DOWN (toward zero), HALF_UP
    (``sign(x) * floor(|x| + 0.5)``), HALF_DOWN (``sign(x) * ceil(|x| - 0.5)``). Raises ValueError
    for any other name."""
    normalized = mode_string.upper()
    try:
        return _ROUNDING_FUNCTIONS[normalized]
    except KeyError:
        raise ValueError(f"Could not resolve rounding mode called: {normalized}") from None


def _as_input(value: Any, name: str) -> tuple[np.ndarray, bool, Any]:
    """The data tensor of int_quant, the Truncs and float_quant: (array, weak, partner). A Python
    bool/int/float is weak, as numpy 2 treats it in qonnx's ``inp_tensor / scale``: it takes the
    scale's dtype (``0.7 / np.float32(0.3)`` is float32). It is passed as a weak float64 0-d array
    (a Python int divides as its double, as numpy converts it); `partner` is what the next
    operand's dtype is resolved against (the scalar itself, or the array)."""
    if is_weak(value):
        try:
            number = float(value)
        except OverflowError:
            raise OverflowError(f"{name}: the Python int is too large to convert to a float (at most ~1.8e308)") from None
        return np.asarray(number, dtype=np.float64), True, number
    xa = as_data(value, name)
    return xa, False, xa


# ------------------------------------------------------------------------------------------------
# Operators


@device_path
def int_quant(
    inp_tensor: TensorLike,
    scale: TensorLike,
    zeropt: TensorLike,
    bitwidth: TensorLike,
    signed: int,
    narrow: int,
    rounding_mode: str,
    *,
    out: np.ndarray | None = None,
) -> Any:
    """IntQuant (legacy op_type ``Quant``): uniform integer fake-quantization.

    ``y = inp_tensor / scale + zeropt``; for a 1-bit signed quantizer ``y = +1 if y >= 0 else -1``
    (NaN gives -1; ``narrow`` and ``rounding_mode`` are ignored); otherwise
    ``y = R(clamp(y, min_int, max_int))``, clamping *before* rounding and letting NaN through.
    Returns ``(y - zeropt) * scale`` in the promoted dtype (the ONNX node casts it to float32).
    ``bitwidth`` must have exactly one element (it may be non-integer, e.g. 2.5).
    """
    xa, x_weak, xp = _as_input(inp_tensor, "inp_tensor")
    # Python scalars stay weak: x / scale in x's dtype, and (y - zeropt) * scale in the dtype an
    # integer zeropt array may have widened y to (float64 for int32), with the Python float itself.
    sa, scale_weak = as_weak_param(scale, "scale", None if x_weak else xa)
    za, zeropt_weak = as_weak_param(zeropt, "zeropt", np.result_type(xp, scale if scale_weak else sa))
    ba = as_param(bitwidth, "bitwidth", xa)
    attrs = _ext.qonnx.IntQuantAttrs()
    attrs.is_signed, attrs.narrow = as_flag(signed, "signed"), as_flag(narrow, "narrow")
    mode, out_array = as_rounding_mode(rounding_mode), as_out(out)
    attrs.rounding_mode = _ext.qonnx.rounding_mode(mode)
    result = _ext.qonnx.int_quant(xa, sa, za, ba, attrs, out=out_array, weak=weak_mask(x_weak, scale_weak, zeropt_weak))
    return _result(result, out)


quant = int_quant
"""qonnx's alias of :func:`int_quant` (the legacy op_type ``Quant``)."""


@device_path
def binary_quant(inp_tensor: TensorLike, scale: TensorLike, *, out: np.ndarray | None = None) -> Any:
    """BipolarQuant: ``(+1 if inp_tensor >= 0 else -1) * scale``. NaN gives ``-scale``, -0.0 gives
    ``+scale``. The output dtype is numpy's promotion of the input and ``scale``."""
    xa = as_data(inp_tensor, "inp_tensor")
    return _result(_ext.qonnx.bipolar_quant(xa, as_param(scale, "scale", xa), out=as_out(out)), out)


bipolar_quant = binary_quant
"""Alias of :func:`binary_quant` (polyquant's earlier name; same positional order)."""


@device_path
def trunc_v1(
    inp_tensor: TensorLike,
    scale: TensorLike,
    zeropt: TensorLike,
    input_bit_width: TensorLike,
    output_bit_width: TensorLike,
    rounding_mode: str,
    *,
    out: np.ndarray | None = None,
) -> Any:
    """Trunc v1 (Brevitas <= 0.11 exports): drop ``input_bit_width - output_bit_width`` low bits.

    ``y = round_half_even(inp_tensor / scale + zeropt)``,
    ``y = R(y / 2.0**(input_bit_width - output_bit_width))`` (no clamp); returns
    ``(y - zeropt) * scale`` in the promoted dtype.
    """
    xa, x_weak, xp = _as_input(inp_tensor, "inp_tensor")
    # scale and zeropt stay weak (as in int_quant); the bit widths resolve against each other.
    sa, scale_weak = as_weak_param(scale, "scale", None if x_weak else xa)
    za, zeropt_weak = as_weak_param(zeropt, "zeropt", np.result_type(xp, scale if scale_weak else sa))
    # input_bit_width - output_bit_width: a Python scalar takes the other width's dtype (a Python
    # float against an int8 width is float64); two Python scalars make a Python number that meets
    # the rounded y, whose dtype they then take.
    y_dtype = np.result_type(xp, scale if scale_weak else sa, zeropt if zeropt_weak else za)  # NEP 50
    ib_partner = y_dtype if is_weak(output_bit_width) else as_param(output_bit_width, "output_bit_width", y_dtype)
    iba = as_param(input_bit_width, "input_bit_width", ib_partner)
    oba = as_param(output_bit_width, "output_bit_width", y_dtype if is_weak(input_bit_width) else iba)
    mode, out_array = as_rounding_mode(rounding_mode), as_out(out)
    result = _ext.qonnx.trunc(xa, sa, za, iba, oba, _ext.qonnx.rounding_mode(mode), out=out_array,
                              weak=weak_mask(x_weak, scale_weak, zeropt_weak))
    return _result(result, out)


trunc = trunc_v1
"""Alias of :func:`trunc_v1` (polyquant's earlier name; same positional order)."""


_UNUSED_INPUT_BIT_WIDTH = np.zeros((), np.float32)


@device_path
def trunc_v2(
    inp_tensor: TensorLike,
    scale: TensorLike,
    zeropt: TensorLike,
    input_bit_width: TensorLike,
    narrow: int,
    signed: int,
    output_scale: TensorLike,
    output_bit_width: TensorLike,
    rounding_mode: str,
    *,
    out: np.ndarray | None = None,
) -> Any:
    """Trunc v2 (Brevitas >= 0.12 exports, QONNX opset 2).

    ``y = round_half_even(inp_tensor / scale + zeropt)``;
    ``t = 2 ** round_half_even(log2(output_scale / scale))`` (forced power of two);
    ``y = R(clamp(y / t, min_int, max_int))`` with the range of ``output_bit_width``; returns
    ``(y - zeropt / t) * output_scale`` in the promoted dtype. ``input_bit_width`` is accepted and
    unused, as in the reference (it is not even converted: any value, None included, is fine).
    """
    xa, x_weak, xp = _as_input(inp_tensor, "inp_tensor")
    # Python scalars stay weak: `output_scale / scale` of two Python floats is a Python division
    # (then float64), while x / scale and `* output_scale` take the arrays' dtypes.
    sa, scale_weak = as_weak_param(scale, "scale", None if x_weak else xa)
    za, zeropt_weak = as_weak_param(zeropt, "zeropt", np.result_type(xp, scale if scale_weak else sa))
    if scale_weak and is_weak(output_scale):
        # qonnx divides two Python numbers in Python, which raises ZeroDivisionError for a zero
        # scale (numpy would give inf); the core computes the same quotient, so only the error
        # needs replaying here.
        _ = output_scale / scale
    osa, out_scale_weak = as_weak_param(output_scale, "output_scale",
                                        None if scale_weak else np.result_type(xp, sa, zeropt if zeropt_weak else za))
    oba = as_param(output_bit_width, "output_bit_width", xa)
    attrs = _ext.qonnx.TruncV2Attrs()
    attrs.is_signed, attrs.narrow = as_flag(signed, "signed"), as_flag(narrow, "narrow")
    mode, out_array = as_rounding_mode(rounding_mode), as_out(out)
    attrs.rounding_mode = _ext.qonnx.rounding_mode(mode)
    result = _ext.qonnx.trunc_v2(
        xa,
        sa,
        za,
        # qonnx never reads input_bit_width (any value, None included, is accepted), nor does the core.
        _UNUSED_INPUT_BIT_WIDTH,
        osa,
        oba,
        attrs,
        out=out_array,
        weak=weak_mask(x_weak, scale_weak, zeropt_weak, False, out_scale_weak),
    )
    return _result(result, out)


@device_path
def float_quant(
    X: TensorLike,
    scale: TensorLike,
    exponent_bitwidth: TensorLike,
    mantissa_bitwidth: TensorLike,
    exponent_bias: TensorLike | None = None,
    signed: int = True,
    max_val: TensorLike | None = None,
    has_inf: int = False,
    has_nan: int = False,
    has_subnormal: int = False,
    rounding_mode: str = "ROUND",
    saturation: int = True,
    *,
    out: np.ndarray | None = None,
) -> Any:
    """FloatQuant: fake-quantization to a minifloat with ``exponent_bitwidth`` exponent and
    ``mantissa_bitwidth`` mantissa bits.

    ``xs = X / scale``; ``e = max(floor(log2(|xs| + tiny)) - m, 1 - bias - m)`` (log2 in the
    working dtype, so just below a power of two the exponent can be one too large, as in the
    reference); ``q = 2**e * R(xs / 2**e)``, clipped to ``[-M, M]`` (``[0, M]`` when not
    ``signed``) with ``M = min(compute_max_val(E, m, bias), max_val)``. Without saturation,
    overflow (judged after rounding) becomes +-inf if ``has_inf``, else NaN if ``has_nan``. +-inf
    inputs give NaN. ``exponent_bias=None`` is ``compute_default_exponent_bias(E)``; ``max_val=None``
    is the format's own maximum. ``has_subnormal`` is accepted and ignored (subnormals are always
    produced). Returns ``q * scale`` as float64, the value qonnx's function returns.
    ``mantissa_bitwidth`` must have one element.
    """
    xa, x_weak, xp = _as_input(X, "X")
    if exponent_bias is None:
        exponent_bias = compute_default_exponent_bias(exponent_bitwidth)
        finite = np.isfinite(exponent_bias) if np.asarray(exponent_bias).dtype.kind == "f" else True
        if not np.all(finite):
            # qonnx goes on with an infinite bias and returns NaN everywhere; the core refuses a
            # non-finite bias, and the caller gave none: name the parameter they did give.
            raise ValueError(
                f"exponent_bitwidth: the default exponent_bias 2.0 ** (exponent_bitwidth - 1) - 1 is not finite for "
                f"exponent_bitwidth={exponent_bitwidth!r}; pass a finite exponent_bias or a smaller exponent_bitwidth"
            )
    # Python scalars stay weak: qonnx divides X by a Python-float scale in X's dtype and multiplies
    # its float64 result by the same Python float; 2.0 ** E - 1.0 - bias of Python numbers is
    # Python (double) arithmetic.
    sa, scale_weak = as_weak_param(scale, "scale", None if x_weak else xa)
    ea, e_weak = as_weak_param(exponent_bitwidth, "exponent_bitwidth", None)
    ma, m_weak = as_weak_param(mantissa_bitwidth, "mantissa_bitwidth", np.result_type(xp, scale if scale_weak else sa))
    ba, bias_weak = as_weak_param(exponent_bias, "exponent_bias", None)
    if max_val is None:
        # min(format maximum, +inf) is the format maximum (the core computes it as qonnx does).
        max_val_array, max_weak = np.asarray(np.inf, dtype=np.float64), False
    else:
        max_val_array, max_weak = as_weak_param(max_val, "max_val", None)
    attrs = _ext.qonnx.FloatQuantAttrs()
    attrs.has_inf, attrs.has_nan = as_flag(has_inf, "has_inf"), as_flag(has_nan, "has_nan")
    attrs.has_subnormal, attrs.saturation = as_flag(has_subnormal, "has_subnormal"), as_flag(saturation, "saturation")
    mode = as_rounding_mode(rounding_mode)
    attrs.is_signed, out_array = as_flag(signed, "signed"), as_out(out)
    attrs.rounding_mode = _ext.qonnx.rounding_mode(mode)
    result = _ext.qonnx.float_quant(xa, sa, ea, ma, ba, max_val_array, attrs, out=out_array,
                                    weak=weak_mask(x_weak, scale_weak, e_weak, m_weak, bias_weak, max_weak))
    return _result(result, out)

