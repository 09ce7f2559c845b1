"""polyquant.qonnx against qonnx 1.0.0's own numpy functions, bit for bit.

The reference is the function each qonnx op's execute_node calls (int_quant, binary_quant,
trunc_v1, trunc_v2, float_quant), with the dtype it returns (the nodes' float32 casts are the ORT
tests' concern). Comparison is on bit patterns: the sign of zero matters, any NaN equals any NaN, and
the dtype must match (numpy 2 promotion). The literal golden vectors of the reference notes
(shared/reference/qonnx.md, sections 1.3 and 7) are checked as well.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import polyquant
import polyquant.qonnx as pq

from ..helpers import kernel_set

try:
    from qonnx.custom_op.general import bipolar_quant as qbipolar
    from qonnx.custom_op.general import floatquant as qfloat
    from qonnx.custom_op.general import intquant
    from qonnx.custom_op.general import trunc as qtrunc
except Exception as e:  # not installed, or not importable (qonnx 1.0.0 needs Python >= 3.10)
    pytest.skip(f"the reference, qonnx 1.0.0, cannot be imported: {e!r}", allow_module_level=True)

if int(np.__version__.split(".")[0]) < 2:
    pytest.skip("the reference is numpy 2's promotion (NEP 50); numpy 1 computes differently", allow_module_level=True)

f32 = np.float32
MODES = ["ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"]
BITWIDTHS = [1, 2, 4, 8, 2.5, 16, 24, 25, 32]

SPECIALS = np.array(
    [
        np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0,
        1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38, 1.17549435e-38, -1.17549435e-38,  # denormals, FLT_MIN
        1e-30, 1e30, -1e30, 3e38, -3e38, 3.4028235e38, -3.4028235e38,  # huge, FLT_MAX
        0.49999997, -0.49999997, 0.5, -0.5, 1.5, 2.5, -2.5, 8388609.0, -8388609.0, 16777215.0,
    ],
    dtype=f32,
)
with np.errstate(over="ignore"):
    SPECIALS_F16 = SPECIALS.astype(np.float16)


# ------------------------------------------------------------------------------------------------
# references: qonnx's functions, with execute_node's output handling


def ref_int_quant(x, scale, zeropt, bitwidth, signed, narrow, mode):
    with np.errstate(all="ignore"):
        return np.asarray(intquant.int_quant(x, scale, zeropt, bitwidth, signed, narrow, mode))


def ref_bipolar_quant(x, scale):
    with np.errstate(all="ignore"):
        return np.asarray(qbipolar.binary_quant(x, scale))


def ref_trunc(x, scale, zeropt, in_bw, out_bw, mode):
    with np.errstate(all="ignore"):
        return np.asarray(qtrunc.trunc_v1(x, scale, zeropt, in_bw, out_bw, mode))


def ref_trunc_v2(x, scale, zeropt, in_bw, out_scale, out_bw, mode, signed=1, narrow=0):
    with np.errstate(all="ignore"):
        return np.asarray(qtrunc.trunc_v2(x, scale, zeropt, in_bw, narrow, signed, out_scale, out_bw, mode))


def ref_float_quant(x, scale, e_bw, m_bw, bias, max_val, has_inf, has_nan, has_subnormal, saturation, mode="ROUND"):
    with np.errstate(all="ignore"):
        out = qfloat.float_quant(
            x, scale, e_bw, m_bw, bias, True, max_val, has_inf, has_nan, has_subnormal, mode, saturation
        )
        return np.asarray(out)


# The tables below list Trunc v2 and FloatQuant arguments in one fixed order; these adapters call
# polyquant in qonnx's own positional order (qonnx/test_signatures.py checks that order itself).
def pq_trunc_v2(x, scale, zeropt, in_bw, out_scale, out_bw, mode, signed=1, narrow=0, *, out=None):
    return pq.trunc_v2(x, scale, zeropt, in_bw, narrow, signed, out_scale, out_bw, mode, out=out)


def pq_float_quant(x, scale, e_bw, m_bw, bias, max_val, has_inf, has_nan, has_subnormal, saturation, mode="ROUND",
                   *, out=None):
    return pq.float_quant(x, scale, e_bw, m_bw, bias, True, max_val, has_inf, has_nan, has_subnormal, mode,
                          saturation, out=out)


def a32(v):
    """A float32 array (0-d for a scalar): how ONNX initializers reach the reference."""
    return np.asarray(v, dtype=f32)


def int_range(bitwidth, signed, narrow):
    b = float(bitwidth)
    if signed:
        return -(2 ** (b - 1)) + narrow, 2 ** (b - 1) - 1
    return 0.0, 2**b - 1 - narrow


def near_ties(ks, scale, zeropt, dtype=f32):
    """x with x / scale + zeropt at k + 0.5 (as closely as the dtype allows), and 1 ulp either side."""
    ks = np.asarray(ks, dtype=np.float64)
    t = ((ks + 0.5 - zeropt) * scale).astype(dtype)
    return np.concatenate([t, np.nextafter(t, dtype(np.inf)), np.nextafter(t, dtype(-np.inf))])


def int_quant_inputs(rng, bitwidth, signed, narrow, scale=0.37, zeropt=0.0):
    lo, hi = int_range(bitwidth, signed, narrow)
    span = max(hi - lo, 1.0)
    ks = np.unique(
        np.concatenate(
            [
                np.arange(-4, 5),
                np.floor(lo) + np.arange(-3, 4),
                np.floor(hi) + np.arange(-3, 4),
                np.floor(rng.uniform(lo, hi, 64)),
            ]
        )
    )
    parts = [
        (rng.standard_normal(512) * span / 4 * scale).astype(f32),
        (rng.uniform(lo - span / 4, hi + span / 4, 512) * scale).astype(f32),
        near_ties(ks, scale, zeropt),
        SPECIALS,
    ]
    return np.concatenate(parts).astype(f32)


# ------------------------------------------------------------------------------------------------
# golden vectors (qonnx.md section 7) and the rounding table (section 1.3), as literal arrays

inf, nan = np.inf, np.nan
G_X = [-3.7, -1.2, -0.5, -0.3, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 2.6, 100, inf, -inf, nan]
G_T = [-100, -17, -16, -15.6, -1, 0, 1, 7.5, 8, 15.9, 16, 24, 100, 1000]
G_F = [0, -0.0, 1e-45, 2**-10, 1.5 * 2**-9, 0.1, 1.0625, 1.1875, 17, 447, 464, 465, 1e30, inf, -inf, nan, -1.0625]

# (name, function, arguments after x, x, expected)
GOLDEN = [
    ("int4_signed", pq.int_quant, (1, 0, 4, 1, 0, "ROUND"), G_X,
     [-4, -1, -0.0, -0.0, 0, 0, 0, 0, 2, 2, 3, 7, 7, -8, nan]),
    ("int4_signed_narrow", pq.int_quant, (1, 0, 4, 1, 1, "ROUND"), G_X,
     [-4, -1, -0.0, -0.0, 0, 0, 0, 0, 2, 2, 3, 7, 7, -7, nan]),
    ("int2_unsigned_narrow", pq.int_quant, (1, 0, 2, 0, 1, "ROUND"), G_X,
     [0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 0, nan]),
    ("int1_signed_bipolar_path", pq.int_quant, (1, 0, 1, 1, 0, "ROUND"), G_X,
     [-1, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1]),
    ("int1_unsigned", pq.int_quant, (1, 0, 1, 0, 0, "ROUND"), G_X,
     [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, nan]),
    ("int2.5_signed", pq.int_quant, (1, 0, 2.5, 1, 0, "ROUND"), G_X,
     [-3, -1, -0.0, -0.0, 0, 0, 0, 0, 2, 2, 2, 2, 2, -3, nan]),
    ("int4_negative_scale", pq.int_quant, (-1, 0, 4, 1, 0, "ROUND"), G_X,
     [-4, -1, -0.0, -0.0, -0.0, -0.0, 0, 0, 2, 2, 3, 8, 8, -7, nan]),
    ("int4_zero_scale", pq.int_quant, (0, 0, 4, 1, 0, "ROUND"), G_X,
     [-0.0, -0.0, -0.0, -0.0, nan, nan, 0, 0, 0, 0, 0, 0, 0, -0.0, nan]),
    ("int4_half_up_zeropt", pq.int_quant, (0.5, 0.5, 4, 1, 0, "HALF_UP"), G_X,
     [-3.75, -1.25, -0.75, -0.25, 0.25, 0.25, 0.25, 0.75, 1.75, 2.75, 2.75, 3.25, 3.25, -4.25, nan]),
    ("int4_half_down", pq.int_quant, (1, 0, 4, 1, 0, "HALF_DOWN"), G_X,
     [-4, -1, -0.0, 0, -0.0, -0.0, -0.0, 0, 1, 2, 3, 7, 7, -8, nan]),
    ("int4_up", pq.int_quant, (1, 0, 4, 1, 0, "UP"), G_X,
     [-4, -2, -1, -1, 0, 0, 1, 1, 2, 3, 3, 7, 7, -8, nan]),
    ("int4_down", pq.int_quant, (1, 0, 4, 1, 0, "DOWN"), G_X,
     [-3, -1, -0.0, -0.0, 0, 0, 0, 0, 1, 2, 2, 7, 7, -8, nan]),
    ("bipolar_0.5", pq.bipolar_quant, (0.5,), G_X,
     [-0.5] * 4 + [0.5] * 9 + [-0.5, -0.5]),
    ("bipolar_-2", pq.bipolar_quant, (-2,), G_X,
     [2] * 4 + [-2] * 9 + [2, 2]),
    ("trunc_v1_floor", pq.trunc, (1, 0, 8, 4, "FLOOR"), G_T,
     [-7, -2, -1, -1, -1, 0, 0, 0, 0, 1, 1, 1, 6, 62]),
    ("trunc_v1_round", pq.trunc, (1, 0, 8, 4, "ROUND"), G_T,
     [-6, -1, -1, -1, -0.0, 0, 0, 0, 0, 1, 1, 2, 6, 62]),
    ("trunc_v2_signed", pq_trunc_v2, (1, 0, 8, 16, 4, "FLOOR", 1, 0), G_T,
     [-112, -32, -16, -16, -16, 0, 0, 0, 0, 16, 16, 16, 96, 112]),
    ("trunc_v2_unsigned", pq_trunc_v2, (1, 0, 8, 16, 4, "FLOOR", 0, 0), G_T,
     [0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 96, 240]),
    ("trunc_v2_signed_narrow", pq_trunc_v2, (1, 0, 8, 16, 4, "FLOOR", 1, 1), G_T,
     [-112, -32, -16, -16, -16, 0, 0, 0, 0, 16, 16, 16, 96, 112]),
    ("trunc_v2_out_scale_12", pq_trunc_v2, (1, 0, 8, 12, 4, "FLOOR", 1, 0), G_T,
     [-84, -24, -12, -12, -12, 0, 0, 0, 0, 12, 12, 12, 72, 84]),
    ("trunc_v2_zeropt_4", pq_trunc_v2, (1, 4, 8, 16, 4, "FLOOR", 1, 0), G_T,
     [-100, -20, -20, -20, -4, -4, -4, -4, -4, 12, 12, 12, 92, 108]),
    ("e4m3_sat", pq_float_quant, (1, 4, 3, 7, 448, 0, 0, 0, 1, "ROUND"), G_F,
     [0, -0.0, 0, 0, 2**-8, 0.1015625, 1, 1.25, 16, 448, 448, 448, 448, nan, nan, nan, -1]),
    ("e4m3_nosat_nan", pq_float_quant, (1, 4, 3, 7, 448, 0, 1, 0, 0, "ROUND"), G_F,
     [0, -0.0, 0, 0, 2**-8, 0.1015625, 1, 1.25, 16, 448, 448, nan, nan, nan, nan, nan, -1]),
    ("e4m3_nosat_inf", pq_float_quant, (1, 4, 3, 7, 448, 1, 0, 0, 0, "ROUND"), G_F,
     [0, -0.0, 0, 0, 2**-8, 0.1015625, 1, 1.25, 16, 448, 448, inf, inf, nan, nan, nan, -1]),
    ("e4m3_floor", pq_float_quant, (1, 4, 3, 7, 448, 0, 0, 0, 1, "FLOOR"), G_F,
     [0, -0.0, 0, 0, 2**-9, 0.09375, 1, 1.125, 16, 416, 448, 448, 448, nan, nan, nan, -1.125]),
    ("e4m3_scale_0.5", pq_float_quant, (0.5, 4, 3, 7, 448, 0, 0, 0, 1, "ROUND"), G_F,
     [0, -0.0, 0, 2**-10, 1.5 * 2**-9, 0.1015625, 1, 1.25, 16, 224, 224, 224, 224, nan, nan, nan, -1]),
    ("e4m3_scale_0", pq_float_quant, (0, 4, 3, 7, 448, 0, 0, 0, 1, "ROUND"), G_F,
     [nan] * 17),
    ("e8m3_floor_below_2^20", pq_float_quant, (1, 8, 3, 127, 3e38, 0, 0, 0, 1, "FLOOR"), [1048575.9375],
     [917504]),
]


@pytest.mark.parametrize("name,fn,args,x,expected", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_vectors(name, fn, args, x, expected, same):
    x = np.asarray(x, dtype=f32)
    got = fn(x, *args)
    if fn is pq_float_quant or fn is pq_trunc_v2:
        # qonnx's float_quant returns float64, and so does its trunc_v2 when scale and output_scale
        # are Python numbers (output_scale / scale in Python, then np.log2: float64); the golden
        # vectors are the nodes' float32 outputs.
        assert got.dtype == np.float64
        got = got.astype(f32)
    same(got, np.asarray(expected, dtype=f32), x)


ROUNDING_TABLE_X = [5.5, 2.5, 1.6, 1.1, 1.0, -1.0, -1.1, -1.6, -2.5, -5.5]
ROUNDING_TABLE = {
    "ROUND": [6, 2, 2, 1, 1, -1, -1, -2, -2, -6],
    "CEIL": [6, 3, 2, 2, 1, -1, -1, -1, -2, -5],
    "FLOOR": [5, 2, 1, 1, 1, -1, -2, -2, -3, -6],
    "UP": [6, 3, 2, 2, 1, -1, -2, -2, -3, -6],
    "DOWN": [5, 2, 1, 1, 1, -1, -1, -1, -2, -5],
    "HALF_UP": [6, 3, 2, 1, 1, -1, -1, -2, -3, -6],
    "HALF_DOWN": [5, 2, 2, 1, 1, -1, -1, -2, -2, -5],
}


@pytest.mark.parametrize("mode", sorted(ROUNDING_TABLE))
def test_rounding_table(mode, same):
    x = np.asarray(ROUNDING_TABLE_X, dtype=f32)
    same(pq.int_quant(x, 1.0, 0.0, 8, 1, 0, mode), np.asarray(ROUNDING_TABLE[mode], dtype=f32), x)


@pytest.mark.parametrize(
    "mode,x,expected",
    [
        ("HALF_UP", 0.49999997, 1.0),  # 0.49999997f + 0.5f rounds to 1.0f
        ("HALF_DOWN", 0.49999997, -0.0),
        ("HALF_UP", 8388609.0, 8388610.0),  # the +0.5 is inexact above 2**23
        ("HALF_DOWN", 8388609.0, 8388608.0),
        ("HALF_DOWN", 0.0, -0.0),
        ("HALF_UP", -0.3, -0.0),
        ("UP", -0.0, 0.0),
    ],
)
def test_float32_rounding_quirks(mode, x, expected, same):
    x = np.asarray([x], dtype=f32)
    same(pq.int_quant(x, 1.0, 0.0, 32, 1, 0, mode), np.asarray([expected], dtype=f32), x)


# ------------------------------------------------------------------------------------------------
# IntQuant


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("narrow", [0, 1])
@pytest.mark.parametrize("signed", [1, 0])
@pytest.mark.parametrize("bitwidth", BITWIDTHS, ids=[f"b{b}" for b in BITWIDTHS])
def test_int_quant_sweep(bitwidth, signed, narrow, mode, rng, same):
    x = int_quant_inputs(rng, bitwidth, signed, narrow)
    args = (a32(0.37), a32(0.0), a32(bitwidth), signed, narrow, mode)
    same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


@pytest.mark.parametrize("mode", [m.lower() for m in MODES] + ["Half_Up", "fLoOr"])
def test_int_quant_lower_case_modes(mode, rng, same):
    x = int_quant_inputs(rng, 8, 1, 0, scale=0.25, zeropt=0.5)
    args = (a32(0.25), a32(0.5), a32(8), 1, 0, mode)
    same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


SCALES = [0.37, 1.0, 2.0**-10, 0.1, 1 / 3, 1e-30, 1e30, 0.0, -0.0, -1.0, -0.37, np.inf, np.nan]
ZEROPTS = [0.0, 3.0, -5.0, 0.5, -2.25, 0.3]


@pytest.mark.parametrize("mode", ["ROUND", "FLOOR", "HALF_UP", "HALF_DOWN", "UP"])
@pytest.mark.parametrize("zeropt", ZEROPTS)
@pytest.mark.parametrize("scale", SCALES)
def test_int_quant_scale_and_zeropt(scale, zeropt, mode, rng, same):
    s = scale if np.isfinite(scale) and scale != 0 else 1.0
    x = np.concatenate([int_quant_inputs(rng, 4, 1, 0, scale=s, zeropt=zeropt), near_ties(np.arange(-9, 9), s, zeropt)])
    for bitwidth, signed, narrow in [(4, 1, 0), (8, 0, 1), (1, 1, 0), (2.5, 1, 1)]:
        args = (a32(scale), a32(zeropt), a32(bitwidth), signed, narrow, mode)
        same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


@pytest.mark.parametrize("bitwidth", [0, 0.5, 1.5, 3.7, 31, 33, 40, 64, 100])
def test_int_quant_unusual_bitwidths(bitwidth, rng, same):
    x = np.concatenate([(rng.standard_normal(256) * 10).astype(f32), SPECIALS])
    for signed, narrow in itertools.product([1, 0], [0, 1]):
        args = (a32(0.5), a32(0.25), a32(bitwidth), signed, narrow, "HALF_UP")
        same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


PER_CHANNEL = [
    # (x shape, scale shape, zeropt shape)
    ((4, 3, 5, 5), (4, 1, 1, 1), ()),
    ((2, 4, 5, 5), (1, 4, 1, 1), (1, 4, 1, 1)),
    ((2, 4, 5, 5), (4, 1, 1), (1,)),
    ((8, 16), (8, 1), (8, 1)),
    ((8, 16), (16,), ()),
    ((3,), (2, 1), ()),  # the output (2, 3) is larger than x
    ((3,), (), (2, 1)),
    ((1, 7), (5, 1), (1, 7)),
    ((), (3,), ()),
]


@pytest.mark.parametrize("mode", ["ROUND", "HALF_DOWN", "CEIL"])
@pytest.mark.parametrize("x_shape,s_shape,z_shape", PER_CHANNEL, ids=[str(p) for p in PER_CHANNEL])
def test_int_quant_broadcasting(x_shape, s_shape, z_shape, mode, rng, same):
    x = (rng.standard_normal(x_shape) * 3).astype(f32)
    scale = rng.uniform(0.05, 0.5, s_shape).astype(f32)
    zeropt = rng.integers(-3, 4, z_shape).astype(f32)
    for bitwidth, signed, narrow in [(4, 1, 1), (3, 0, 0), (1, 1, 0)]:
        args = (scale, zeropt, a32(bitwidth), signed, narrow, mode)
        same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


def test_int_quant_bitwidth_shape_1x1(same):
    # bitwidth (1, 1) broadcasts the normal path's bounds: x (3,) -> (1, 3); the 1-bit path keeps (3,).
    x = np.asarray([-1.5, 0.2, 2.7], dtype=f32)
    for bw in (4, 1):
        args = (a32(1), a32(0), np.full((1, 1), bw, f32), 1, 0, "ROUND")
        same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


PARAM_DTYPES = [
    # (scale, zeropt, bitwidth) dtypes. numpy 2 promotes step by step: x / scale in
    # promote(x, scale), then "+ zeropt" and everything after in promote(that, zeropt); a float64
    # or 32/64-bit integer zeropt therefore widens *after* a float32 division.
    (np.float64, np.float32, np.float32),
    (np.float32, np.float64, np.float32),
    (np.float32, np.int64, np.int64),
    (np.float32, np.int32, np.int32),
    (np.float32, np.int8, np.float64),
    (np.float64, np.float64, np.float64),
    (np.float32, np.uint16, np.float32),
    (np.float32, np.bool_, np.int64),
]


@pytest.mark.parametrize("mode", ["ROUND", "HALF_UP", "FLOOR"])
@pytest.mark.parametrize("dtypes", PARAM_DTYPES, ids=["-".join(np.dtype(d).name for d in p) for p in PARAM_DTYPES])
@pytest.mark.parametrize("shape", [(), (4, 1)], ids=["0d", "per_channel"])
def test_int_quant_param_dtypes(dtypes, shape, mode, rng, same):
    s_dt, z_dt, b_dt = dtypes
    x = np.concatenate([(rng.standard_normal(200) * 4).astype(f32), near_ties(np.arange(-8, 8), 0.1, 1.0), SPECIALS])
    x = np.broadcast_to(x, (4, x.size)).copy()
    scale = np.full(shape, 0.1, dtype=s_dt)
    zeropt = np.full(shape, 1, dtype=z_dt)
    for bitwidth, signed in [(4, 1), (8, 0), (1, 1), (24, 1)]:
        args = (scale, zeropt, np.asarray(bitwidth, dtype=b_dt), signed, 0, mode)
        same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


def _skip_unsupported_f16(call):
    try:
        return call()
    except TypeError as e:
        pytest.skip(f"the core does not support float16 inputs: {e}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("params", ["f16", "f32"])
def test_int_quant_float16(params, mode, rng, same):
    x = np.concatenate([(rng.standard_normal(500) * 8).astype(np.float16), SPECIALS_F16])
    p = np.float16 if params == "f16" else f32
    for bitwidth, signed, narrow in [(4, 1, 0), (8, 0, 1), (1, 1, 0), (16, 1, 0), (2.5, 1, 0)]:
        args = (np.asarray(0.3, p), np.asarray(0.5, p), np.asarray(bitwidth, p), signed, narrow, mode)
        out = _skip_unsupported_f16(lambda: pq.int_quant(x, *args))
        same(out, ref_int_quant(x, *args), x)


def test_int_quant_float64_input(rng, same):
    x = np.concatenate([rng.standard_normal(500) * 8, near_ties(np.arange(-8, 8), 0.3, 0.0, np.float64)])
    for mode in MODES:
        args = (np.float64(0.3), np.float64(0.0), np.float64(6), 1, 1, mode)
        same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)


SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 129, 1000, 4097, 65537, (1 << 20) + 3]


@pytest.mark.parametrize("n", SIZES)
def test_sizes_tails_and_offsets(n, rng, same):
    """Lengths around every vector width and the threading threshold, misaligned starts (x[1:]),
    strided x and per-element parameters: the SIMD tails and the work split must not show."""
    base = (rng.standard_normal(2 * n + 1) * 6).astype(f32)
    base[rng.integers(0, base.size, min(base.size, 64))] = rng.choice(SPECIALS, min(base.size, 64))
    scale_e = rng.uniform(0.05, 1.0, n).astype(f32)
    for x in (base[:n], base[1 : n + 1], base[::2][:n]):
        for scale in (a32(0.3), scale_e):
            args = (scale, a32(0.5), a32(5), 1, 0, "HALF_UP")
            same(pq.int_quant(x, *args), ref_int_quant(x, *args), x)
            fargs = (scale, a32(4), a32(3), a32(7), a32(448), 0, 1, 1, 0, "FLOOR")
            same(pq_float_quant(x, *fargs), ref_float_quant(x, *fargs), x)
            same(pq.bipolar_quant(x, scale), ref_bipolar_quant(x, scale), x)
            targs = (scale, a32(0), a32(8), scale * f32(12), a32(4), "ROUND", 1, 1)
            same(pq_trunc_v2(x, *targs), ref_trunc_v2(x, *targs), x)


def test_quant_is_int_quant():
    assert pq.quant is pq.int_quant


# ------------------------------------------------------------------------------------------------
# BipolarQuant


@pytest.mark.parametrize(
    "scale",
    [0.5, 1.0, -2.0, 0.0, -0.0, np.inf, np.nan, 1e-45, 3e38],
)
def test_bipolar_quant_scalar_scale(scale, rng, same):
    x = np.concatenate([rng.standard_normal(300).astype(f32), SPECIALS])
    same(pq.bipolar_quant(x, a32(scale)), ref_bipolar_quant(x, a32(scale)), x)


@pytest.mark.parametrize(
    "x_dt,s_dt", [(f32, np.float64), (np.float64, f32), (np.float16, f32), (np.float16, np.float16), (f32, np.int64),
                  (f32, np.int8), (np.float16, np.uint8)]
)
@pytest.mark.parametrize("x_shape,s_shape", [((5, 4), (5, 1)), ((3,), (2, 1)), ((2, 3), ())])
def test_bipolar_quant_dtypes_and_shapes(x_dt, s_dt, x_shape, s_shape, rng, same):
    x = rng.standard_normal(x_shape).astype(x_dt)
    x.flat[0] = np.nan
    scale = rng.integers(-3, 4, s_shape).astype(s_dt)
    out = _skip_unsupported_f16(lambda: pq.bipolar_quant(x, scale))
    same(out, ref_bipolar_quant(x, scale), x)


# ------------------------------------------------------------------------------------------------
# Trunc v1 and v2


def trunc_inputs(rng, scale, zeropt, in_bw):
    q = rng.integers(-(2 ** (in_bw - 1)), 2 ** (in_bw - 1), 400)
    x = ((q - zeropt) * scale).astype(f32)  # already on the input grid, as Trunc sees it in a model
    noise = (rng.standard_normal(200) * 2 ** (in_bw - 2) * scale).astype(f32)
    ties = near_ties(rng.integers(-(2 ** (in_bw - 1)), 2 ** (in_bw - 1), 32), scale, zeropt)
    return np.concatenate([x, noise, ties, SPECIALS])


@pytest.mark.parametrize("mode", MODES + ["floor", "round"])
@pytest.mark.parametrize("in_bw,out_bw", [(8, 4), (16, 8), (8, 8), (4, 8), (32, 8), (9.5, 4)])
@pytest.mark.parametrize("scale,zeropt", [(1.0, 0.0), (0.37, 0.0), (0.25, 3.0), (0.1, -1.5), (-0.5, 0.0), (0.0, 0.0)])
def test_trunc_v1(scale, zeropt, in_bw, out_bw, mode, rng, same):
    x = trunc_inputs(rng, scale if scale else 1.0, zeropt, int(in_bw))
    args = (a32(scale), a32(zeropt), a32(in_bw), a32(out_bw), mode)
    same(pq.trunc(x, *args), ref_trunc(x, *args), x)


OUT_SCALE_RATIOS = [16.0, 12.0, 2**2.5, 3.0, 1.0, 0.5, 2**-3, 2**1.5, 1e-30]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ratio", OUT_SCALE_RATIOS, ids=[f"r{r:g}" for r in OUT_SCALE_RATIOS])
@pytest.mark.parametrize("signed,narrow", [(1, 0), (1, 1), (0, 0), (0, 1)])
def test_trunc_v2(signed, narrow, ratio, mode, rng, same):
    for scale, zeropt, out_bw in [(1.0, 0.0, 4), (0.37, 0.0, 8), (0.25, 4.0, 4), (0.1, 0.5, 2), (0.2, 0.0, 24)]:
        x = trunc_inputs(rng, scale, zeropt, 10)
        args = (a32(scale), a32(zeropt), a32(8), a32(scale * ratio), a32(out_bw), mode, signed, narrow)
        same(pq_trunc_v2(x, *args), ref_trunc_v2(x, *args), x)


def test_trunc_v2_per_channel_and_float64(rng, same):
    x = (rng.integers(-512, 512, (4, 3, 6)) * 0.125).astype(f32)
    scale = np.asarray([0.125, 0.25, 0.5, 1.0], f32).reshape(4, 1, 1)
    out_scale = (scale * np.asarray([16, 12, 3, 1], f32).reshape(4, 1, 1)).astype(np.float64)
    for mode in ["FLOOR", "ROUND", "HALF_DOWN"]:
        args = (scale, a32(0), a32(10), out_scale, a32(4), mode, 1, 0)
        same(pq_trunc_v2(x, *args), ref_trunc_v2(x, *args), x)
        args1 = (scale, a32(0), a32(10), a32(4), mode)
        same(pq.trunc(x, *args1), ref_trunc(x, *args1), x)


TRUNC_WIDE = ["zeropt_f64", "zeropt_i64", "bitwidths_i64", "scale_f64", "out_scale_f64", "out_bitwidth_i64", "x_f64"]


@pytest.mark.parametrize("mode", ["HALF_UP", "FLOOR"])
@pytest.mark.parametrize("wide", TRUNC_WIDE)
def test_trunc_mixed_param_dtypes(wide, mode, rng, same):
    """numpy promotes step by step: x / scale is float32 when both are, even if zeropt (added
    next) or the truncation scale is float64. in_bitwidth == out_bitwidth keeps every tie of the
    first rounding visible in the output."""
    x = np.concatenate([(rng.standard_normal(500) * 4).astype(f32), near_ties(np.arange(-8, 8), 0.1, 1.0)])
    p = dict(scale=a32(0.1), zeropt=a32(1.0), in_bw=a32(8), out_scale=a32(0.1), out_bw=a32(8))
    if wide == "zeropt_f64":
        p["zeropt"] = np.float64(1.0)
    elif wide == "zeropt_i64":
        p["zeropt"] = np.int64(1)
    elif wide == "bitwidths_i64":
        p["in_bw"], p["out_bw"] = np.int64(8), np.int64(8)
    elif wide == "scale_f64":
        p["scale"] = np.float64(0.1)
    elif wide == "out_scale_f64":
        p["out_scale"] = np.float64(0.1)
    elif wide == "out_bitwidth_i64":
        p["out_bw"] = np.int64(8)
    else:
        x = x.astype(np.float64)
    args1 = (p["scale"], p["zeropt"], p["in_bw"], p["out_bw"], mode)
    same(pq.trunc(x, *args1), ref_trunc(x, *args1), x)
    args2 = (p["scale"], p["zeropt"], p["in_bw"], p["out_scale"], p["out_bw"], mode)
    same(pq_trunc_v2(x, *args2), ref_trunc_v2(x, *args2), x)


def test_trunc_float64_and_float16(rng, same):
    q = rng.integers(-128, 128, 300)
    x64 = q * 0.3
    args = (np.float64(0.3), np.float64(0.0), np.float64(8), np.float64(5), "FLOOR")
    same(pq.trunc(x64, *args), ref_trunc(x64, *args), x64)
    x16 = (q * 0.25).astype(np.float16)
    args16 = tuple(np.float16(v) for v in (0.25, 0.0, 8, 5)) + ("HALF_UP",)
    same(_skip_unsupported_f16(lambda: pq.trunc(x16, *args16)), ref_trunc(x16, *args16), x16)
    args16v2 = tuple(np.float16(v) for v in (0.25, 0.0, 8, 4, 5)) + ("HALF_UP", 1, 0)
    same(_skip_unsupported_f16(lambda: pq_trunc_v2(x16, *args16v2)), ref_trunc_v2(x16, *args16v2), x16)


# ------------------------------------------------------------------------------------------------
# FloatQuant

FORMATS = {
    # name: (exponent bits, mantissa bits, bias, max_val)
    "e4m3": (4, 3, 7, 448.0),
    "e4m3_nomax": (4, 3, 7, 480.0),
    "e5m2": (5, 2, 15, 57344.0),
    "e2m1": (2, 1, 1, 6.0),
    "e2m3": (2, 3, 1, 7.5),
    "e3m2": (3, 2, 3, 28.0),
    "e8m3": (8, 3, 127, 3e38),  # the format's own maximum (6.4e38) is not a float32
    "e4m4_bias0": (4, 4, 0, float(qfloat.compute_max_val(4, 4, 0))),
    "e5m10": (5, 10, 15, 65504.0),
}


def float_inputs(rng, e_bw, m_bw, bias, max_val):
    lo = 2.0 ** (1 - bias - m_bw)  # the subnormal step
    top = min(np.log2(max_val) + 1, 127.9)
    mags = np.exp2(rng.uniform(max(np.log2(lo) - 2, -149), top, 1000))
    x = (mags * rng.choice([-1, 1], mags.size)).astype(f32)
    # values on and beside the ties of the format's grid
    grid = np.unique(np.abs(x[:200]).astype(np.float64))
    ulp = np.exp2(np.floor(np.log2(np.maximum(grid, lo))) - m_bw)
    ties = ((np.floor(grid / ulp) + 0.5) * ulp).astype(f32)
    with np.errstate(over="ignore"):
        extremes = np.asarray([max_val, -max_val, 1.5 * max_val, -1.5 * max_val], dtype=f32)
    beside = [np.nextafter(ties, f32(0)), np.nextafter(ties, f32(np.inf))]
    return np.concatenate([x, ties, *beside, -ties, SPECIALS, extremes])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_float_quant_formats(fmt, mode, rng, same):
    e_bw, m_bw, bias, max_val = FORMATS[fmt]
    x = float_inputs(rng, e_bw, m_bw, bias, max_val)
    for scale in (1.0, 0.375, 2.0**-4):
        args = (a32(scale), a32(e_bw), a32(m_bw), a32(bias), a32(max_val), 0, 0, 1, 1, mode)
        same(pq_float_quant(x, *args), ref_float_quant(x, *args), x)


@pytest.mark.parametrize("mode", ["ROUND", "FLOOR", "CEIL", "HALF_UP"])
@pytest.mark.parametrize("has_inf,has_nan", [(1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_float_quant_no_saturation(fmt, has_inf, has_nan, mode, rng, same):
    e_bw, m_bw, bias, max_val = FORMATS[fmt]
    x = float_inputs(rng, e_bw, m_bw, bias, max_val)
    args = (a32(1.0), a32(e_bw), a32(m_bw), a32(bias), a32(max_val), has_inf, has_nan, 1, 0, mode)
    same(pq_float_quant(x, *args), ref_float_quant(x, *args), x)


def below_powers_of_two(dtype=f32, ks=range(-40, 41), count=80):
    """The `count` values just below each 2**k: where float32 log2 rounds up to k."""
    out = []
    for k in ks:
        v = dtype(2.0**k)
        for _ in range(count):
            v = np.nextafter(v, dtype(0))
            out.append(v)
        out.append(dtype(2.0**k))
    x = np.asarray(out, dtype=dtype)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("mode", ["FLOOR", "DOWN", "CEIL", "UP", "ROUND", "HALF_UP"])
@pytest.mark.parametrize("fmt", ["e8m3", "e4m3", "e5m2", "e5m10"])
def test_float_quant_just_below_powers_of_two(fmt, mode, same):
    e_bw, m_bw, bias, max_val = FORMATS[fmt]
    x = below_powers_of_two()
    args = (a32(1.0), a32(e_bw), a32(m_bw), a32(bias), a32(max_val), 0, 0, 1, 1, mode)
    same(pq_float_quant(x, *args), ref_float_quant(x, *args), x)


@pytest.mark.parametrize("scale", [0.0, -0.0, -1.0, -0.375, np.inf, np.nan, 1e-30, 1e30])
def test_float_quant_special_scales(scale, rng, same):
    x = float_inputs(rng, 4, 3, 7, 448.0)
    args = (a32(scale), a32(4), a32(3), a32(7), a32(448), 0, 1, 1, 1, "ROUND")
    same(pq_float_quant(x, *args), ref_float_quant(x, *args), x)


def test_float_quant_per_channel_and_param_dtypes(rng, same):
    x = (rng.standard_normal((4, 3, 8)) * 50).astype(f32)
    scale = rng.uniform(0.1, 2, (4, 1, 1)).astype(f32)
    for dts in [(f32, f32, f32), (np.int64, np.int64, np.float64), (np.int32, np.int8, f32), (f32, f32, np.float64)]:
        e_dt, b_dt, m_dt = dts
        # exponent bits and bias may broadcast per channel; mantissa bits are one value
        e_bw = np.asarray([4, 5, 4, 3], dtype=e_dt).reshape(4, 1, 1)
        bias = np.asarray([7, 15, 6, 3], dtype=b_dt).reshape(4, 1, 1)
        max_val = np.asarray([448, 57344, 240, 28], dtype=m_dt).reshape(4, 1, 1)
        for mode in ["ROUND", "FLOOR"]:
            args = (scale, e_bw, a32(3).astype(m_dt), bias, max_val, 0, 0, 0, 1, mode)
            same(pq_float_quant(x, *args), ref_float_quant(x, *args), x)


@pytest.mark.parametrize("params", ["f16", "f32"])
@pytest.mark.parametrize("mode", ["ROUND", "FLOOR", "HALF_DOWN"])
def test_float_quant_float16(params, mode, rng, same):
    x = np.concatenate([(rng.standard_normal(500) * 100).astype(np.float16), SPECIALS_F16])
    p = np.float16 if params == "f16" else f32
    args = tuple(np.asarray(v, p) for v in (0.5, 4, 3, 7, 448)) + (0, 0, 1, 1, mode)
    out = _skip_unsupported_f16(lambda: pq_float_quant(x, *args))
    same(out, ref_float_quant(x, *args), x)


# float16 work (x and every parameter float16: numpy's float16 arithmetic, which the vector kernels
# run on float32 lanes rounded to float16 at every step) on every float16 value, on every kernel
# set, in every rounding mode: the float16 forms of |y| + 0.5, of the NaN sign and of float16's
# log2 near powers of two (FloatQuant's formats include floors whose 2^e leaves float16).
ALL_FLOAT16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


@pytest.mark.parametrize("isa", polyquant.runtime_info()["supported"])
@pytest.mark.parametrize("mode", MODES)
def test_float16_work_on_every_float16_value(isa, mode, same):
    h = np.float16
    x = ALL_FLOAT16
    for args in [(h(0.3), h(0.5), h(4), 1, 0, mode), (h(2.0), h(-1.0), h(8), 0, 1, mode), (h(1.0), h(0.0), h(16), 1, 0, mode)]:
        with kernel_set(isa):
            got = pq.int_quant(x, *args)
        same(got, ref_int_quant(x, *args), x)
    args = (h(0.25), h(0.5), h(8), h(5), mode)
    with kernel_set(isa):
        got = pq.trunc(x, *args)
    same(got, ref_trunc(x, *args), x)
    # (exponent bits, mantissa bits, bias, max_val, has_inf, has_nan, saturation, scale)
    for e_bw, m_bw, bias, max_val, has_inf, has_nan, sat, scale in [
        (4, 3, 7, 448, 0, 0, 1, 0.5),     # OCP E4M3
        (5, 2, 15, 57344, 1, 0, 0, 1.0),  # E5M2, overflow to inf
        (2, 1, 1, 6, 0, 1, 0, 0.1),       # E2M1, overflow to NaN, a scale float16 does not hold exactly
        (4, 3, 30, 448, 0, 0, 1, 3.0),    # floor 1 - bias - m = -32: 2^e below float16's subnormals
        (4, 0, -20, 448, 0, 0, 1, 1.0),   # floor 21: 2^e above float16's range; m = 0
    ]:
        args = (h(scale), h(e_bw), h(m_bw), h(bias), h(max_val), has_inf, has_nan, 1, sat, mode)
        with kernel_set(isa):
            got = pq_float_quant(x, *args)
        same(got, ref_float_quant(x, *args), x)


def test_float_quant_float64(rng, same):
    x = np.concatenate([rng.standard_normal(500) * 100, below_powers_of_two(np.float64, range(-5, 6), 8)])
    args = tuple(np.float64(v) for v in (0.5, 4, 3, 7, 448)) + (0, 0, 1, 1, "FLOOR")
    same(pq_float_quant(x, *args), ref_float_quant(x, *args), x)


# FloatQuant parameter edges that once differed between kernel sets (issue 5): an internal scale
# floor 1 - bias - m >= 127, where 2^(e - m) overflows float32 (the SIMD path returned garbage where
# qonnx gives NaN); a NaN max_val (np.clip with a NaN bound makes every output NaN); a negative
# max_val (np.clip(q, -M, M) with -M > M returns M everywhere; the SIMD paths disagreed). Each runs
# on every kernel set against qonnx, with inputs long enough to take the vector paths.
FLOAT_QUANT_EDGES = {  # name: (exponent bits, mantissa bits, bias, max_val, has_inf, has_nan, saturation)
    "floor_1-bias-m_is_127": (4, 3, -129, 448.0, 0, 0, 1),
    "floor_1-bias-m_far_beyond_127": (4, 3, -300, 448.0, 1, 0, 0),
    "max_val_nan": (4, 3, 7, np.nan, 0, 0, 1),
    "max_val_nan_non_saturating": (4, 3, 7, np.nan, 1, 0, 0),
    "negative_max_val": (4, 3, 7, -2.5, 0, 0, 1),
    "negative_max_val_non_saturating": (4, 3, 7, -2.5, 0, 1, 0),
    "max_val_zero": (4, 0, 7, 0.0, 0, 0, 1),
}


@pytest.mark.parametrize("isa", polyquant.runtime_info()["supported"])
@pytest.mark.parametrize("edge", list(FLOAT_QUANT_EDGES))
@pytest.mark.parametrize("mode", ["ROUND", "FLOOR", "HALF_UP"])
def test_float_quant_parameter_edges_on_every_kernel_set(edge, isa, mode, rng, same):
    e_bw, m_bw, bias, max_val, has_inf, has_nan, saturation = FLOAT_QUANT_EDGES[edge]
    x = np.concatenate([(rng.standard_normal(997) * 30).astype(f32), SPECIALS])
    for scale in (a32(1.0), a32(0.375)):
        args = (scale, a32(e_bw), a32(m_bw), a32(bias), a32(max_val), has_inf, has_nan, 1, saturation, mode)
        with kernel_set(isa):
            got = pq_float_quant(x, *args)
        same(got, ref_float_quant(x, *args), x)
