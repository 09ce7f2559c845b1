"""polyquant.qonnx has qonnx 1.0.0's public functions with the same names, parameter names, order,
kinds and defaults (so code switches by changing an import), and each, called positionally in
qonnx's order, returns what qonnx's returns: same type, dtype, shape and bits."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import polyquant.qonnx as pq

try:
    from qonnx.custom_op.general import bipolar_quant as q_bipolar
    from qonnx.custom_op.general import floatquant as q_float
    from qonnx.custom_op.general import intquant as q_int
    from qonnx.custom_op.general import quant as q_quant
    from qonnx.custom_op.general import trunc as q_trunc
except Exception as e:  # not installed, or not importable (qonnx 1.0.0 needs Python >= 3.10)
    pytest.skip(f"the reference, qonnx 1.0.0, cannot be imported: {e!r}", allow_module_level=True)

REFERENCE = {
    "int_quant": q_int.int_quant,
    "quant": q_quant.quant,
    "binary_quant": q_bipolar.binary_quant,
    "trunc_v1": q_trunc.trunc_v1,
    "trunc_v2": q_trunc.trunc_v2,
    "float_quant": q_float.float_quant,
    "min_int": q_int.min_int,
    "max_int": q_int.max_int,
    "compute_max_val": q_float.compute_max_val,
    "compute_default_exponent_bias": q_float.compute_default_exponent_bias,
    "resolve_rounding_mode": q_int.resolve_rounding_mode,
}
OPS = {"int_quant", "quant", "binary_quant", "trunc_v1", "trunc_v2", "float_quant"}


def _shape(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_signature_is_qonnx(name):
    ours = inspect.signature(getattr(pq, name))
    theirs = inspect.signature(REFERENCE[name])
    params = _shape(ours)
    if name in OPS:
        # The only addition: a keyword-only `out`, last.
        assert params[-1] == ("out", inspect.Parameter.KEYWORD_ONLY, None)
        params = params[:-1]
    assert params == _shape(theirs), f"{name}{ours} differs from qonnx's {name}{theirs}"


def test_every_public_qonnx_function_is_here():
    for name in REFERENCE:
        assert name in pq.__all__
    assert pq.execute_onnx is not None


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    got_a, want_a = np.asarray(got), np.asarray(want)
    assert got_a.dtype == want_a.dtype and got_a.shape == want_a.shape
    nan_g, nan_w = np.isnan(got_a), np.isnan(want_a)
    assert np.array_equal(nan_g, nan_w)
    assert np.array_equal(_bits(got_a)[~nan_g], _bits(want_a)[~nan_w])


X = np.array([-300.0, -3.7, -1.2, -0.5, -0.3, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 2.6, 7.49, 100.0, 1e-40,
              np.inf, -np.inf, np.nan], dtype=np.float32)
f32 = np.float32


# Positional calls in qonnx's order, over dtypes and parameter forms (0-d arrays, numpy scalars,
# per-channel arrays, a 0-d input that gives a numpy scalar).
CASES = {
    "int_quant": [
        (X, f32(0.5), f32(0), f32(4), 1, 0, "ROUND"),
        (X, np.array([0.25], np.float64), f32(1), np.array(8.0, f32), 0, 1, "HALF_UP"),
        (X.astype(np.float16), np.float16(0.1), np.float16(0), f32(3), 1, 1, "half_down"),
        (X[:, None] * f32(3), np.array([0.5, 2.0], f32), f32(0), f32(1), 1, 0, "FLOOR"),
        (np.array(2.6, f32), f32(1), f32(0), f32(4), 1, 0, "ROUND"),
    ],
    "binary_quant": [
        (X, f32(0.5)),
        (X.astype(np.float64), np.array([[2.0], [-1.0]], f32)),
        (np.array(-0.0, f32), f32(3)),
    ],
    "trunc_v1": [
        (X * f32(16), f32(1), f32(0), f32(8), f32(4), "FLOOR"),
        (X * f32(16), f32(0.5), f32(2), np.int64(8), np.int64(3), "ROUND"),
    ],
    "trunc_v2": [
        (X * f32(16), f32(1), f32(0), f32(8), 0, 1, f32(16), f32(4), "FLOOR"),
        (X * f32(16), f32(1), f32(4), f32(8), 1, 0, f32(12), f32(4), "CEIL"),
        (X * f32(16), f32(0.5), f32(0), f32(8), 1, 1, np.array([8.0, 2.0], f32)[:, None], f32(3), "UP"),
    ],
    "float_quant": [
        (X, f32(1), f32(4), f32(3)),
        (X, f32(1), f32(4), f32(3), f32(7), True, f32(448), False, True, True, "ROUND", False),
        (X, f32(0.5), f32(4), f32(3), f32(7), False, f32(448), True, False, False, "FLOOR", False),
        (X, f32(1), f32(5), f32(2), None, False, None, False, False, False, "HALF_UP", True),
        (X.astype(np.float64), 0.75, 4, 3, 7, True, -2.5),
        (X, f32(1), f32(4), f32(3), f32(7), True, np.float32(np.nan)),
        (X.astype(np.float16), np.float16(1), np.float16(4), np.float32(3)),
        (np.array(1.1, f32), f32(1), f32(4), f32(3)),
    ],
}
CASES["quant"] = CASES["int_quant"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_positional_calls_match_qonnx(name):
    for args in CASES[name]:
        with np.errstate(all="ignore"):
            want = REFERENCE[name](*args)
        got = getattr(pq, name)(*args)
        _same(got, want)


@pytest.mark.parametrize(
    "args",
    [(True, True, 8), (True, False, 8), (False, True, 8), (False, False, 8), (True, False, np.float32(4)),
     (False, True, np.int64(40)), (True, True, np.array([2.5])), (False, False, 1)],
)
def test_integer_range_helpers(args):
    for name in ("min_int", "max_int"):
        got, want = getattr(pq, name)(*args), REFERENCE[name](*args)
        assert type(got) is type(want) and np.array_equal(got, want) and np.asarray(got).dtype == np.asarray(want).dtype


@pytest.mark.parametrize(
    "args",
    [(4, 3), (4, 3, 7), (np.float32(5), np.float32(2)), (2, 1, None), (8, 23, 127.0), (np.float64(3), 2.5, 1.0),
     (4, 0), (np.float32(4), 100, np.float32(7)), (11, 52, 1023), (8, 3000, 127)],
)
def test_format_helpers(args):
    try:
        want = REFERENCE["compute_max_val"](*args)
    except OverflowError:  # 2 ** 1024.0 in Python floats
        with pytest.raises(OverflowError):
            pq.compute_max_val(*args)
        return
    got = pq.compute_max_val(*args)
    assert type(got) is type(want) and np.asarray(got).dtype == np.asarray(want).dtype
    assert _bits(got) == _bits(want)
    got, want = pq.compute_default_exponent_bias(args[0]), REFERENCE["compute_default_exponent_bias"](args[0])
    assert type(got) is type(want) and got == want


def test_compute_max_val_of_a_huge_mantissa_is_immediate():
    """qonnx would build a 2^40-element series here. numpy's pairwise sum of 2^40 + 1 terms adds the
    sum of its first 4096 terms (halving 2^40 + 1 down: 2^39, ..., 4096) to halves that are all 0.0
    in float64 (2^-k for k > 1074), so it equals the 4096-term sum qonnx computes for m = 4095."""
    assert pq.compute_max_val(4, 2**40, 7) == REFERENCE["compute_max_val"](4, 4095, 7)


@pytest.mark.parametrize("mode", ["ROUND", "half_even", "Ceil", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"])
def test_resolve_rounding_mode(mode):
    x = np.array([5.5, 2.5, 1.6, 1.1, 1.0, -1.0, -1.1, -1.6, -2.5, -5.5, 0.49999997, -0.0, np.nan], f32)
    _same(pq.resolve_rounding_mode(mode)(x), REFERENCE["resolve_rounding_mode"](mode)(x))


def test_resolve_rounding_mode_rejects_unknown_names_like_qonnx():
    with pytest.raises(ValueError) as theirs:
        REFERENCE["resolve_rounding_mode"]("round_to_zero")
    with pytest.raises(ValueError) as ours:
        pq.resolve_rounding_mode("round_to_zero")
    assert str(ours.value) == str(theirs.value)
