"""Bad and absurd input to polyquant.qonnx, in the classes issue 17's probe used for the other
families: absurd values, malformed shapes, dtypes, layouts, unknown keywords, concurrency and
interpreter exit. Where qonnx 1.0.0 defines a result, polyquant must give it (same type, dtype and
bits); where qonnx hangs, crashes or raises something unrelated, polyquant raises a ValueError /
TypeError naming the parameter (README: "Where polyquant departs from qonnx")."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import polyquant.qonnx as pq
from ..helpers import run_threads

qonnx_general = pytest.importorskip("qonnx.custom_op.general")
from qonnx.custom_op.general import bipolar_quant as ref_bipolar  # noqa: E402
from qonnx.custom_op.general import floatquant as ref_float  # noqa: E402
from qonnx.custom_op.general import intquant as ref_int  # noqa: E402
from qonnx.custom_op.general import trunc as ref_trunc  # noqa: E402

f32 = np.float32
X = np.linspace(-3, 3, 7, dtype=f32)


def same(actual, expected) -> None:
    """Same Python type, dtype, shape and bits (NaN payloads aside)."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
    nan = np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    assert np.array_equal(nan, np.isnan(e) if e.dtype.kind == "f" else nan)
    assert a[~nan].tobytes() == e[~nan].tobytes(), (a, e)


# ------------------------------------------------------------------------------------------------
# Python scalars as the data tensor are weak, as in qonnx's numpy arithmetic. Before: a Python
# float input was made a float64 array (int_quant(0.7, np.float32(0.3), ...) computed in float64
# and returned float64 where qonnx returns float32), and a Python int input was a TypeError.

_SCALAR_CASES = [
    ("int_quant", (0.7, f32(0.3), f32(0), f32(4), 1, 0, "HALF_UP")),
    ("int_quant", (2, f32(0.5), f32(0), f32(4), 1, 0, "ROUND")),
    ("int_quant", (True, f32(0.3), f32(0), f32(4), 1, 0, "ROUND")),
    ("int_quant", (0.7, 0.3, f32(0), f32(4), 1, 0, "HALF_UP")),
    ("int_quant", (0.7, 0.3, np.float16(1), f32(4), 1, 0, "HALF_UP")),
    ("int_quant", (0.7, np.float16(0.3), f32(0), f32(4), 1, 0, "ROUND")),
    ("int_quant", (0.7, np.array(3, np.int32), 0.5, f32(4), 1, 0, "ROUND")),
    ("int_quant", (-3.5, np.array([0.3, 0.7], f32), f32(0), f32(4), 1, 0, "DOWN")),
    ("trunc_v1", (0.7, f32(0.3), f32(0), f32(8), f32(3), "CEIL")),
    ("trunc_v1", (1e30, 0.3, np.float16(1), f32(8), f32(3), "CEIL")),
    ("trunc_v2", (0.7, f32(0.3), f32(0), f32(8), 0, 1, f32(1.7), f32(4), "FLOOR")),
    ("trunc_v2", (0.7, 0.3, np.float16(1), f32(8), 0, 1, 1.7, f32(4), "FLOOR")),
    ("float_quant", (0.7, f32(0.3), f32(4), f32(3))),
    ("float_quant", (-1e-40, f32(0.3), f32(4), f32(3))),
]

_REFS = {
    "int_quant": ref_int.int_quant,
    "trunc_v1": ref_trunc.trunc_v1,
    "trunc_v2": ref_trunc.trunc_v2,
    "float_quant": ref_float.float_quant,
}


@pytest.mark.parametrize("name, args", _SCALAR_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(_SCALAR_CASES)])
def test_python_scalar_input_is_weak_as_in_qonnx(name, args):
    with np.errstate(all="ignore"):
        expected = _REFS[name](*args)
    same(getattr(pq, name)(*args), expected)


def test_python_scalar_input_result_type():
    assert type(pq.int_quant(0.7, f32(0.3), f32(0), f32(1), 1, 0, "ROUND")) is np.float32
    assert pq.int_quant(0.7, f32(0.3), f32(0), f32(1), 1, 0, "ROUND") == f32(0.3)


def test_python_int_input_too_large_for_a_float_names_the_parameter():
    with pytest.raises(OverflowError, match=r"^inp_tensor: the Python int is too large to convert to a float"):
        pq.int_quant(10**400, f32(0.5), f32(0), f32(4), 1, 0, "ROUND")


# ------------------------------------------------------------------------------------------------
# Absurd values


@pytest.mark.parametrize(
    "name, args",
    [
        # Python ints beyond int64 (before: OverflowError "Python int too large to convert to C long")
        ("int_quant", (X, f32(0.5), 2**70, f32(4), 1, 0, "ROUND")),
        ("int_quant", (X, 2**70, 0, f32(4), 1, 0, "ROUND")),
        ("int_quant", (X, -(2**63), 0, f32(4), 1, 0, "ROUND")),
        ("trunc_v2", (X, f32(0.5), 2**70, f32(8), 0, 1, f32(2), f32(4), "FLOOR")),
        ("trunc_v2", (X, f32(0.5), f32(0), f32(8), 0, 1, 2**70, f32(4), "FLOOR")),
        ("trunc_v2", (X, 2**70, f32(0), f32(8), 0, 1, 2**71, f32(4), "FLOOR")),
        ("float_quant", (X, f32(1), 4, 3, 2**70)),
        ("float_quant", (X, f32(1), 4, 3, 7, True, 2**70)),
        # numpy integer widths at their limits (wrapping as numpy does) and huge float widths
        ("int_quant", (X, f32(0.5), f32(0), np.int64(2**62), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.int64(2**63 - 1), 0, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.uint64(2**64 - 1), 0, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.int8(-128), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.float32(2**40), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.float64(1e300), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.float64(-5), 1, 1, "ROUND")),
        ("int_quant", (X, f32(1e-45), f32(0), f32(8), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0), f32(0), f32(8), 1, 0, "ROUND")),
        ("int_quant", (X, f32(np.inf), f32(np.inf), f32(8), 1, 0, "ROUND")),
        ("trunc_v1", (X, f32(0.5), f32(0), np.int64(2**62), np.int64(-(2**62)), "FLOOR")),
        ("trunc_v1", (X, f32(0.5), f32(0), np.int64(2**63 - 1), np.int64(-(2**63)), "FLOOR")),
        ("trunc_v1", (X, f32(0.5), f32(0), np.uint64(2**64 - 1), np.uint64(0), "FLOOR")),
        ("trunc_v1", (X, f32(0.5), f32(0), f32(2**40), f32(4), "FLOOR")),
        ("trunc_v1", (X, f32(0.5), f32(0), np.float64(1e300), np.float64(-1e300), "FLOOR")),
        ("trunc_v2", (X, f32(0.5), f32(0), f32(8), 0, 1, f32(2**40), f32(4), "FLOOR")),
        ("trunc_v2", (X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), f32(2**40), "FLOOR")),
        ("trunc_v2", (X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), np.int64(2**40), "FLOOR")),
        ("trunc_v2", (X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), np.int64(-(2**63)), "FLOOR")),
        ("trunc_v2", (X, f32(0.5), f32(0), f32(8), 0, 0, f32(2), np.uint64(2**64 - 1), "FLOOR")),
        ("trunc_v2", (X, f32(1e-45), f32(0), f32(8), 0, 1, f32(3e38), f32(4), "FLOOR")),
        ("float_quant", (X, f32(1), f32(4), f32(3), f32(2**40))),
        ("float_quant", (X, f32(1), f32(4), f32(3), f32(-(2**40)))),
        ("float_quant", (X, f32(1), np.int8(4), np.int8(3), np.int8(-128))),
        ("float_quant", (X, f32(1), 4, 3, 7, True, -1)),
        ("float_quant", (X, f32(1), 4, 3, 7, True, f32(-np.inf))),
        ("float_quant", (np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45], f32), f32(1), f32(4), f32(3))),
    ],
)
def test_absurd_values_match_qonnx(name, args):
    with np.errstate(all="ignore"):
        expected = _REFS[name](*args)
    with np.errstate(all="ignore"):
        same(getattr(pq, name)(*args), expected)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: pq.int_quant(X, f32(0.5), 10**400, f32(4), 1, 0, "ROUND"), OverflowError, "zeropt: "),
        (lambda: pq.float_quant(X, f32(1), 4, 3, 10**400), OverflowError, "exponent_bias: the Python int of 1329 bits"),
        (lambda: pq.int_quant(X, f32(0.5), f32(0), f32(np.nan), 1, 0, "ROUND"), ValueError, "bitwidth: must be finite, got nan"),
        (lambda: pq.int_quant(X, f32(0.5), f32(0), f32(np.inf), 1, 0, "ROUND"), ValueError, "bitwidth: must be finite, got inf"),
        (lambda: pq.trunc_v2(X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), f32(np.nan), "FLOOR"), ValueError,
         "out_bitwidth: must be finite, got nan"),
        (lambda: pq.float_quant(X, f32(1), f32(4), f32(-1)), ValueError, "mantissa_bitwidth: must be a finite value >= 0"),
        (lambda: pq.float_quant(X, f32(1), f32(np.nan), f32(3), f32(7)), ValueError, "exponent_bitwidth: must be finite"),
        (lambda: pq.float_quant(X, f32(1), f32(4), f32(3), f32(np.inf)), ValueError, "exponent_bias: must be finite"),
        (lambda: pq.float_quant(X, f32(1), f32(4), f32(3), saturation=False), ValueError,
         "saturation: 0 (non-saturating) requires has_inf=1 or has_nan=1"),
        # compute_max_val: before, inf gave OverflowError "cannot convert float infinity to integer"
        (lambda: pq.compute_max_val(4, float("inf")), ValueError, "mantissa_bitwidth: must be finite, got inf"),
        (lambda: pq.compute_max_val(4, float("nan")), ValueError, "mantissa_bitwidth: must be finite, got nan"),
        (lambda: pq.compute_max_val(4, np.array([3, 2])), ValueError, "mantissa_bitwidth: must have exactly one element"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_absurd_values_are_named_errors(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(message), str(info.value)


def test_float_quant_default_bias_overflow_names_exponent_bitwidth():
    """E = 2**40 in float32: the default bias 2**(E-1) - 1 overflows. qonnx returns NaN everywhere;
    polyquant named exponent_bias, which the caller never passed."""
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError) as info:
        pq.float_quant(X, f32(1), f32(2**40), f32(3))
    assert str(info.value).startswith(
        "exponent_bitwidth: the default exponent_bias 2.0 ** (exponent_bitwidth - 1) - 1 is not finite"
    ), str(info.value)


_HUGE_WIDTH = r"""
import sys, polyquant.qonnx as pq
for f, args in [(pq.min_int, (True, False, 2**40)), (pq.max_int, (True, False, 2**40)),
                (pq.max_int, (False, True, 2**40)), (pq.min_int, (True, True, 2**25))]:
    try:
        f(*args)
    except ValueError as e:
        assert str(e).startswith("bit_width: a Python int bit width must be at most 16777216"), e
    else:
        sys.exit(f"{f.__name__}{args} returned")
assert pq.max_int(False, False, 2**24) == 2 ** (2**24) - 1 and pq.min_int(True, False, -5) == -(2 ** -6)
"""


def test_min_int_max_int_huge_python_bit_width_is_a_value_error():
    """qonnx's min_int/max_int(…, 2**40) compute 2 ** (2**40) as a Python int: 128 GiB, never
    returns (polyquant did the same). Run in a child with a timeout, as the old code hangs."""
    result = subprocess.run([sys.executable, "-c", _HUGE_WIDTH], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_huge_python_int_bit_width_in_the_ops_is_exact():
    """int_quant / trunc_v2 take a Python-int width into the core (qonnx hangs in min_int): the
    bounds are beyond float32, so nothing is clamped."""
    y = pq.int_quant(X, f32(0.5), f32(0), 2**40, 1, 0, "ROUND")
    same(y, np.round(X / f32(0.5)) * f32(0.5))
    t = pq.trunc_v2(X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), 2**70, "FLOOR")
    with np.errstate(over="ignore"):
        expected = ref_trunc.trunc_v2(X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), np.float64(2.0**70), "FLOOR")
    same(t, expected)


def test_compute_max_val_huge_mantissa_is_the_limit():
    """qonnx materialises np.arange(0, -m - 1, -1): MemoryError / ValueError for m = 2**40 or 1e300;
    polyquant sums the same series without the array (the float64 limit of 2 - 2**-m)."""
    assert pq.compute_max_val(4, 2**40) == 512.0
    assert pq.compute_max_val(4, 1e300) == 512.0


# ------------------------------------------------------------------------------------------------
# rounding_mode, flags and keywords


@pytest.mark.parametrize(
    "mode, error, message",
    [
        (None, TypeError, "rounding_mode: expected a str such as 'ROUND' or 'FLOOR', got NoneType"),
        (3, TypeError, "rounding_mode: expected a str such as 'ROUND' or 'FLOOR', got int"),
        (b"ROUND", TypeError, "rounding_mode: expected a str such as 'ROUND' or 'FLOOR', got bytes"),
        ("garbage", ValueError, "rounding_mode"),
        (" ROUND", ValueError, "rounding_mode"),
        # before: the message ended at the NUL ("unknown rounding mode 'ROUND"), no allowed modes
        ("round\x00", ValueError, "rounding_mode: unknown rounding mode 'ROUND\\x00'; allowed (case-insensitive): "),
        ("ROUND_TO_ZERO", ValueError, "rounding_mode"),
    ],
)
def test_bad_rounding_mode(mode, error, message):
    for call in (
        lambda: pq.int_quant(X, f32(0.5), f32(0), f32(4), 1, 0, mode),
        lambda: pq.trunc_v1(X, f32(0.5), f32(0), f32(8), f32(4), mode),
        lambda: pq.trunc_v2(X, f32(0.5), f32(0), f32(8), 0, 1, f32(2), f32(4), mode),
        lambda: pq.float_quant(X, f32(1), f32(4), f32(3), rounding_mode=mode),
    ):
        with pytest.raises(error) as info:
            call()
        assert str(info.value).startswith(message), str(info.value)
        if error is ValueError:
            assert "HALF_DOWN" in str(info.value)  # the allowed modes are listed


def test_rounding_mode_any_letter_case_matches_qonnx():
    for mode in ("round", "Half_Up", "half_down", "down", "up", "ceil", "floor", "half_even"):
        same(pq.int_quant(X * f32(0.37), f32(0.25), f32(0), f32(4), 1, 0, mode),
             ref_int.int_quant(X * f32(0.37), f32(0.25), f32(0), f32(4), 1, 0, mode))
    with pytest.raises(ValueError, match="Could not resolve rounding mode called: b'ROUND'"):
        pq.resolve_rounding_mode(b"round")


def test_rounding_mode_is_upper_cased_as_python_does():
    """qonnx matches mode_string.upper(); Python upper-cases the ligature 'ﬂ' to 'FL', so 'ﬂoor' is
    FLOOR there. The core's ASCII upper-casing rejected it."""
    x = X * f32(0.37)
    same(pq.int_quant(x, f32(0.25), f32(0), f32(4), 1, 0, "\ufb02oor"),
         ref_int.int_quant(x, f32(0.25), f32(0), f32(4), 1, 0, "\ufb02oor"))
    same(pq.float_quant(x, f32(0.25), f32(4), f32(3), rounding_mode="\ufb02oor"),
         ref_float.float_quant(x, f32(0.25), f32(4), f32(3), rounding_mode="\ufb02oor"))


@pytest.mark.parametrize("flag", [1.5, None, "yes", np.array([1, 0])])
def test_non_integer_flags_are_type_errors(flag):
    with pytest.raises(TypeError, match=r"^signed: expected a bool or an int, got "):
        pq.int_quant(X, f32(0.5), f32(0), f32(4), flag, 0, "ROUND")


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="bitwdith"):
        pq.int_quant(X, f32(0.5), f32(0), f32(4), signed=1, narrow=0, rounding_mode="ROUND", bitwdith=3)
    with pytest.raises(TypeError, match="foo"):
        pq.float_quant(X, f32(1), f32(4), f32(3), foo=1)


@pytest.mark.parametrize("ibw", [None, "x", np.array(8, np.complex64), object()])
def test_trunc_v2_ignores_input_bit_width_as_qonnx(ibw):
    """qonnx never reads trunc_v2's input_bit_width; polyquant rejected None or a string for it."""
    args = (X, f32(0.5), f32(0), ibw, 0, 1, f32(2), f32(4), "FLOOR")
    same(pq.trunc_v2(*args), ref_trunc.trunc_v2(*args))


# ------------------------------------------------------------------------------------------------
# Shapes


def test_rank_nine_is_a_value_error_naming_the_operand():
    with pytest.raises(ValueError, match=r"^inp_tensor: rank 9 exceeds the maximum of 8 dimensions"):
        pq.int_quant(np.zeros((1,) * 9, f32), f32(0.5), f32(0), f32(4), 1, 0, "ROUND")
    with pytest.raises(ValueError, match=r"^scale: rank 9 exceeds the maximum of 8 dimensions"):
        pq.float_quant(np.zeros((1,) * 8, f32), np.ones((2,) + (1,) * 8, f32), f32(4), f32(3))


def test_non_broadcastable_parameters_name_the_operands():
    with pytest.raises(ValueError, match="scale") as info:
        pq.int_quant(np.zeros((4, 3), f32), np.ones(2, f32), f32(0), f32(4), 1, 0, "ROUND")
    assert "(4, 3)" in str(info.value) and "(2,)" in str(info.value)
    with pytest.raises(ValueError, match="bitwidth: must have exactly one element"):
        pq.int_quant(X, f32(0.5), f32(0), np.array([8, 8], f32), 1, 0, "ROUND")


@pytest.mark.parametrize(
    "name, args",
    [
        ("int_quant", (np.zeros((0, 3), f32), f32(0.5), f32(0), f32(4), 1, 0, "ROUND")),
        ("int_quant", (np.zeros((0, 3), f32), np.ones((2, 1, 1), f32), f32(0), f32(4), 1, 0, "ROUND")),
        ("int_quant", (np.array(1.5, f32), f32(0.5), f32(0), f32(4), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.ones((1, 1), f32) * 4, 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.ones((1, 1), f32), 1, 0, "ROUND")),
        ("int_quant", (np.zeros((4, 3), f32), np.ones((4, 1), f32), np.ones((5, 1, 1), f32), f32(4), 1, 0, "ROUND")),
        ("trunc_v1", (X, f32(0.5), f32(0), np.array([8, 6, 4, 5, 6, 7, 8], f32), np.array([[4], [2]], f32), "FLOOR")),
        ("trunc_v2", (X, np.array([[0.5], [0.25]], f32), f32(0), f32(8), 0, 1, f32(2), f32(4), "FLOOR")),
        ("float_quant", (np.zeros((0,), f32), f32(1), f32(4), f32(3))),
        ("float_quant", (np.zeros((), f32), f32(1), f32(4), f32(3))),
        ("float_quant", (X, f32(1), np.array([[4], [5]], f32), f32(3))),
    ],
)
def test_empty_zero_d_and_broadcast_shapes_match_qonnx(name, args):
    same(getattr(pq, name)(*args), _REFS[name](*args))


# ------------------------------------------------------------------------------------------------
# dtypes


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: pq.int_quant(X.astype(ml_dtypes.bfloat16), f32(0.5), f32(0), f32(4), 1, 0, "ROUND"), TypeError,
         "inp_tensor: unsupported dtype bfloat16; expected float16/32/64, (u)int8/16/32/64 or bool"),
        (lambda: pq.int_quant(X, f32(0.5), f32(0), np.array(8, ml_dtypes.bfloat16), 1, 0, "ROUND"), TypeError,
         "bitwidth: unsupported dtype bfloat16"),
        (lambda: pq.int_quant(X.astype(np.complex64), f32(0.5), f32(0), f32(4), 1, 0, "ROUND"), TypeError,
         "inp_tensor: unsupported dtype complex64"),
        (lambda: pq.int_quant(X.astype(object), f32(0.5), f32(0), f32(4), 1, 0, "ROUND"), TypeError,
         "inp_tensor: unsupported dtype object"),
        (lambda: pq.int_quant(X, f32(0.5), np.array(0, "U1"), f32(4), 1, 0, "ROUND"), TypeError,
         "zeropt: unsupported dtype <U1"),
        (lambda: pq.int_quant(X.astype(np.longdouble), f32(0.5), f32(0), f32(4), 1, 0, "ROUND"), TypeError,
         "inp_tensor: unsupported dtype float128"),
        (lambda: pq.int_quant(X.astype(np.int32), f32(0.5), f32(0), f32(4), 1, 0, "ROUND"), TypeError,
         "inp_tensor: must be a floating-point array (float16, float32 or float64), got int32"),
        (lambda: pq.int_quant(X, f32(0.5), f32(0), 8 + 0j, 1, 0, "ROUND"), TypeError,
         "bitwidth: complex values are not supported"),
        (lambda: pq.float_quant(X, f32(1), np.array(4, ml_dtypes.bfloat16), f32(3)), TypeError,
         "exponent_bitwidth: unsupported dtype bfloat16"),
        (lambda: pq.binary_quant(X.astype(np.float16).astype(ml_dtypes.float8_e4m3fn), f32(1)), TypeError,
         "inp_tensor: unsupported dtype float8_e4m3fn"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unsupported_dtypes_are_type_errors(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize(
    "name, args",
    [
        ("int_quant", (X.astype(">f4"), f32(0.5), f32(0), f32(4), 1, 0, "ROUND")),
        ("int_quant", (X.astype(">f8"), np.array(0.5, ">f4"), np.array(0, ">f4"), np.array(4, ">i8"), 1, 0, "ROUND")),
        ("int_quant", (X.astype(np.float16), np.float16(0.5), np.float16(0), np.float16(4), 1, 0, "ROUND")),
        ("int_quant", (X, f32(0.5), f32(0), np.bool_(True), 0, 0, "ROUND")),
        ("trunc_v1", (X.astype(">f4"), np.array(0.5, ">f8"), f32(0), np.array(8, ">i2"), np.int8(4), "FLOOR")),
        ("trunc_v1", (X, f32(0.5), f32(0), np.array(8.5, np.float16), np.float16(4), "FLOOR")),
        ("trunc_v2", (X.astype(">f2"), f32(0.5), f32(0), f32(8), 0, 1, np.array(2, ">f4"), np.array(4, ">u4"), "FLOOR")),
        ("float_quant", (X.astype(">f4"), np.array(1, ">f4"), np.array(4, ">f4"), np.array(3, ">f4"))),
        ("float_quant", (X.astype(np.float16), np.float16(1), np.float16(4), np.float16(3))),
    ],
)
def test_big_endian_and_narrow_dtypes_match_qonnx(name, args):
    with np.errstate(all="ignore"):
        expected = _REFS[name](*args)
    same(getattr(pq, name)(*args), expected)


def test_binary_quant_big_endian_matches_qonnx():
    same(pq.binary_quant(X.astype(">f4"), np.array(0.5, ">f8")), ref_bipolar.binary_quant(X.astype(">f4"), np.array(0.5, ">f8")))


@pytest.mark.parametrize(
    "out, error, message",
    [
        (np.empty(7, ">f4"), ValueError, "out: the array's byte order is not the machine's (dtype >f4)"),
        (np.broadcast_to(np.empty(1, f32), (7,)), ValueError, "out: the array is read-only"),
        ([0.0] * 7, TypeError, "out: expected a numpy array or None, got list"),
        (np.frombuffer(bytearray(29), f32, 7, 1), ValueError, "out: the array must be aligned with whole-element strides"),
        (np.empty(8, f32), ValueError, "IntQuant: out must have shape (7,) and dtype float32"),
        (np.empty(7, np.int32), ValueError, "IntQuant: out must have shape (7,) and dtype float32"),
        # before: "out: expected a writable numpy array on the CPU" / "(DLPack code 5, 64 bits)"
        (np.empty(7, np.complex64), TypeError, "out: unsupported dtype complex64; expected float16, float32 or float64"),
        (np.empty(7, ml_dtypes.bfloat16), TypeError, "out: unsupported dtype bfloat16; expected float16, float32"),
    ],
    ids=["big-endian", "read-only", "list", "unaligned", "shape", "int", "complex", "bfloat16"],
)
def test_bad_out_is_named(out, error, message):
    with pytest.raises(error) as info:
        pq.int_quant(X, f32(0.5), f32(0), f32(4), 1, 0, "ROUND", out=out)
    assert str(info.value).startswith(message), str(info.value)


# ------------------------------------------------------------------------------------------------
# Layouts


def _layouts():
    base = np.random.default_rng(7).standard_normal((6, 10)).astype(f32) * f32(4)
    unaligned = np.frombuffer(b"\0" + base.tobytes(), f32, base.size, 1).reshape(6, 10)
    return {
        "negative": base[::-1, ::-2],
        "fortran": np.asfortranarray(base),
        "zero-stride": np.broadcast_to(base[:1], (6, 10)),
        "unaligned": unaligned,
        "transposed": base.T,
    }


@pytest.mark.parametrize("layout", sorted(_layouts()))
def test_layouts_match_qonnx(layout):
    x = _layouts()[layout]
    scale = np.linspace(0.1, 1, x.shape[-1], dtype=f32)[::-1]  # a negative-stride per-channel scale
    for name, args in (
        ("int_quant", (x, scale, f32(0), f32(4), 1, 0, "HALF_UP")),
        ("trunc_v1", (x, scale, f32(0), f32(8), f32(3), "FLOOR")),
        ("trunc_v2", (x, scale, f32(0), f32(8), 0, 1, f32(1), f32(4), "FLOOR")),
        ("float_quant", (x, scale, f32(4), f32(3))),
    ):
        same(getattr(pq, name)(*args), _REFS[name](*args))
        out = np.zeros((x.shape[0], 2 * x.shape[1]), np.float64 if name == "float_quant" else f32)[:, ::-2]
        got = getattr(pq, name)(*args, out=out)
        assert got is out
        same(np.ascontiguousarray(out), _REFS[name](*args))


# ------------------------------------------------------------------------------------------------
# Concurrency and interpreter exit


def test_threads_sharing_arrays_equal_serial():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 257)).astype(f32) * f32(8)
    scale = np.abs(rng.standard_normal(257)).astype(f32) + f32(0.01)
    calls = [
        lambda: pq.int_quant(x, scale, f32(0), f32(4), 1, 0, "HALF_DOWN"),
        lambda: pq.binary_quant(x, scale),
        lambda: pq.trunc_v1(x, scale, f32(0), f32(8), f32(3), "CEIL"),
        lambda: pq.trunc_v2(x, scale, f32(0), f32(8), 0, 1, f32(0.5), f32(4), "FLOOR"),
        lambda: pq.float_quant(x, scale, f32(4), f32(3), has_nan=True, saturation=False, max_val=f32(100)),
    ]
    serial = [c() for c in calls]

    def worker(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(len(calls) * 20) % len(calls)
        for k in order:
            got = calls[k]()
            if got.tobytes() != serial[k].tobytes():
                raise AssertionError(f"call {k} differs from the serial result")

    run_threads(worker, [(s,) for s in range(8)])


def test_threads_sharing_one_out_with_the_same_result():
    x = np.random.default_rng(3).standard_normal(1 << 16).astype(f32)
    want = pq.int_quant(x, f32(0.1), f32(0), f32(4), 1, 0, "ROUND")
    out = np.empty_like(x)
    run_threads(lambda: pq.int_quant(x, f32(0.1), f32(0), f32(4), 1, 0, "ROUND", out=out), [()] * 8)
    assert out.tobytes() == want.tobytes()


_EXIT_WHILE_BUSY = r"""
import threading, time, numpy as np, polyquant.qonnx as pq
f32 = np.float32
def loop(n, k):
    x = np.random.default_rng(k).standard_normal(n).astype(np.float32)
    calls = [
        lambda: pq.int_quant(x, f32(0.1), f32(0), f32(4), 1, 0, "ROUND"),
        lambda: pq.binary_quant(x, f32(0.5)),
        lambda: pq.trunc_v1(x, f32(0.1), f32(0), f32(8), f32(3), "FLOOR"),
        lambda: pq.trunc_v2(x, f32(0.1), f32(0), f32(8), 0, 1, f32(1), f32(4), "FLOOR"),
        lambda: pq.float_quant(x, f32(0.1), f32(4), f32(3)),
    ]
    while True:
        calls[k % len(calls)]()
        try:  # an error thrown from inside the core: the unwinding path parks too
            pq.int_quant(x, f32(0.1), f32(0), f32(4), 1, 0, "ROUND", out=np.empty(3, np.float32))
        except ValueError:
            pass
for k in range(10):
    threading.Thread(target=loop, args=(1 << (20 if k < 5 else 14), k), daemon=True).start()
time.sleep(0.2)
"""


def test_interpreter_exit_with_daemon_threads_in_every_qonnx_op():
    """Daemon threads inside each QONNX op (and one raising) when the interpreter exits: the
    process must exit cleanly (the bindings park such threads; python/src/gil_release.h)."""
    for _ in range(4):
        result = subprocess.run([sys.executable, "-c", _EXIT_WHILE_BUSY], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "terminate" not in result.stderr, (result.returncode, result.stderr)
