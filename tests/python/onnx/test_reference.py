"""polyquant.onnx against onnx 1.23's reference evaluator (the executable spec of QuantizeLinear /
DequantizeLinear, opset 28), bit for bit: every Q/DQ node test case shipped in the onnx package, and
generated cases over every output type, scale dtype, input dtype, saturate, axis (negative too),
block size (ragged last block too), precision and output_dtype, with random, near-tie (x / scale
exactly k + 0.5 and one ulp either side) and special inputs; on every kernel set.

Where the evaluator's result is undefined — its int32 cast of NaN, +-inf and quotients beyond int32,
and the int32 sum rint(q) + zero_point wrapping — polyquant saturates as ONNX Runtime does; those
elements are checked against that rule instead.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import polyquant
import polyquant.onnx as pqo
from ..helpers import kernel_set

ISAS = polyquant.runtime_info()["supported"]
# Test data casts overflow on purpose (3e38 to float16, NaN to integers in the evaluator).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

INT_TYPES = {TensorProto.UINT8: (np.uint8, 0, 255), TensorProto.INT8: (np.int8, -128, 127),
             TensorProto.UINT16: (np.uint16, 0, 65535), TensorProto.INT16: (np.int16, -32768, 32767),
             TensorProto.UINT4: (ml_dtypes.uint4, 0, 15), TensorProto.INT4: (ml_dtypes.int4, -8, 7),
             TensorProto.UINT2: (ml_dtypes.uint2, 0, 3), TensorProto.INT2: (ml_dtypes.int2, -2, 1)}
FLOAT8 = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}
FLOAT46 = {TensorProto.FLOAT4E2M1: ml_dtypes.float4_e2m1fn, TensorProto.FLOAT6E2M3: ml_dtypes.float6_e2m3fn,
           TensorProto.FLOAT6E3M2: ml_dtypes.float6_e3m2fn}
ALL_OUT = {**{k: v[0] for k, v in INT_TYPES.items()}, **FLOAT8, **FLOAT46}


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def same_bits(got: np.ndarray, want: np.ndarray, mask: np.ndarray | None = None, what: str = "") -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g, w = _bits(got), _bits(want)
    if want.dtype.kind == "f" or want.dtype.name in ("bfloat16",):
        nan_g, nan_w = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
        bad = (nan_g != nan_w) | (~nan_g & (g != w))
    else:
        bad = g != w
    if mask is not None:
        bad &= mask
    idx = np.flatnonzero(bad)
    assert idx.size == 0, f"{what}: {idx.size} differ, e.g. at {idx[:4]}: got {g.reshape(-1)[idx[:4]]} want {w.reshape(-1)[idx[:4]]}"


def evaluator(op: str, inputs: list, **attrs):
    import warnings

    names = ["x", "s", "z"][: len(inputs)]
    node = onnx.helper.make_node(op, names, ["y"], **{k: v for k, v in attrs.items() if v is not None})
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # overflow and NaN casts are the point
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(node).run(None, dict(zip(names, inputs)))[0]


# ---- the onnx package's own node test cases ----------------------------------------------------------
def _node_cases():
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    out = []
    with warnings.catch_warnings():  # other ops' generators (Cast) overflow on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    for case in cases:
        model = case.model
        if len(model.graph.node) != 1 or model.graph.node[0].op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        out.append(case)
    return out


NODE_CASES = _node_cases()


def test_the_onnx_package_ships_the_qdq_node_cases():
    assert len(NODE_CASES) >= 27


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_onnx_node_test_case(case):
    node = case.model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    from onnx import numpy_helper

    for inputs, outputs in case.data_sets:
        # Sub-byte inputs are stored as TensorProtos (packed): onnx's own to_array unpacks them.
        inputs = [numpy_helper.to_array(i) if isinstance(i, onnx.TensorProto) else np.asarray(i) for i in inputs]
        outputs = [numpy_helper.to_array(o) if isinstance(o, onnx.TensorProto) else np.asarray(o) for o in outputs]
        args = list(inputs) + [None] * (3 - len(inputs))
        if node.op_type == "QuantizeLinear":
            got = pqo.quantize_linear(args[0], args[1], args[2], axis=attrs.get("axis", 1),
                                      block_size=attrs.get("block_size", 0), output_dtype=attrs.get("output_dtype") or None,
                                      saturate=attrs.get("saturate", 1), precision=attrs.get("precision") or None)
        else:
            got = pqo.dequantize_linear(args[0], args[1], args[2], axis=attrs.get("axis", 1),
                                        block_size=attrs.get("block_size", 0), output_dtype=attrs.get("output_dtype") or None)
        want = outputs[0]
        same_bits(got, want, what=case.name)


# ---- generated cases ---------------------------------------------------------------------------------
def _x_values(rng, n: int, scale: float) -> np.ndarray:
    k = rng.integers(-300, 300, n).astype(np.float32)
    ties = ((k + np.float32(0.5)) * np.float32(scale)).astype(np.float32)
    up, down = np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))
    rand = (rng.standard_normal(n) * 40 * scale).astype(np.float32)
    specials = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-39, 3e38, -3e38, 1e30, -1e30, 448.0, 464.0, 465.0, 6.0, 7.75,
                         57344.0, 61440.0, 0.25, 0.75], np.float32)
    pool = np.concatenate([ties, up, down, rand, specials])
    return rng.choice(pool, n).astype(np.float32)


def _defined_for_integers(q_dtype, x, scale, zp, axis=1, block=0):
    """Elements where the evaluator's int32 arithmetic is defined: the quotient computed as the
    evaluator does (x / scale in their own dtypes; q_dtype None) or in q_dtype (precision)."""
    from onnx.reference.ops._quant_utils import reshape_input

    scale = reshape_input(np.asarray(scale), np.shape(x), axis, block or None)
    with np.errstate(all="ignore"):
        if q_dtype is None:
            q = (np.asarray(x) / np.asarray(scale)).astype(np.float64)
        else:
            q = (np.asarray(x).astype(q_dtype) / np.asarray(scale).astype(q_dtype)).astype(np.float64)
        r = np.rint(q)
    return np.isfinite(r) & (np.abs(r) < 2.0**31 - 2.0**17)


LAYOUTS = [  # (x shape, axis, block_size, scale shape)
    ((2, 3, 8), 1, 0, (3,)), ((2, 3, 8), -1, 0, (8,)), ((2, 3, 8), 0, 0, (2,)), ((2, 3, 8), 1, 0, ()),
    ((2, 3, 8), 2, 2, (2, 3, 4)), ((2, 3, 8), -1, 3, (2, 3, 3)), ((2, 3, 8), 1, 2, (2, 2, 8)), ((7,), 0, 4, (2,)),
    ((5, 9), 1, 9, (5, 1)), ((4, 6), -2, 1, (4, 6)),
]


def _scale_array(rng, shape, dtype):
    s = rng.choice(np.array([0.5, 0.1, 1 / 255, 0.0123, 2.0**-7, 3.0], np.float32), shape).astype(np.float32)
    return s.astype(dtype)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("out_type", list(ALL_OUT), ids=[TensorProto.DataType.Name(t) for t in ALL_OUT])
def test_quantize_matches_evaluator(isa, out_type, rng):
    dt = ALL_OUT[out_type]
    with kernel_set(isa):
        for (shape, axis, block, sshape), x_dtype, s_dtype in itertools.product(
                LAYOUTS, [np.float32, np.float16, ml_dtypes.bfloat16], [np.float32, np.float16, ml_dtypes.bfloat16]):
            scale = _scale_array(rng, sshape, s_dtype)
            x = _x_values(rng, int(np.prod(shape)), 0.1).reshape(shape).astype(x_dtype)
            if out_type in INT_TYPES:
                lo, hi = INT_TYPES[out_type][1:]
                zp = rng.integers(lo, hi + 1, sshape).astype(dt)
            elif out_type in FLOAT8:
                zp = np.zeros(sshape, dt)
            else:
                zp = rng.choice(np.array([0.0, 0.5, -1.0, 2.0], np.float32), sshape).astype(dt)
            for with_zp, saturate in itertools.product([True, False], [1, 0] if out_type in FLOAT8 else [1]):
                args = [x, scale] + ([zp] if with_zp else [])
                attrs = dict(axis=axis, block_size=block or None, saturate=saturate,
                             output_dtype=None if with_zp else out_type)
                want = evaluator("QuantizeLinear", args, **attrs)
                got = pqo.quantize_linear(*args, axis=axis, block_size=block, saturate=saturate,
                                          output_dtype=None if with_zp else out_type)
                mask = None
                if out_type in INT_TYPES:
                    mask = _defined_for_integers(None, x, scale, zp, axis, block)
                same_bits(got, want, mask, f"{shape} axis={axis} block={block} x={x.dtype} s={scale.dtype} zp={with_zp} sat={saturate}")


@pytest.mark.parametrize("out_type", list(INT_TYPES), ids=[TensorProto.DataType.Name(t) for t in INT_TYPES])
def test_integer_outputs_saturate_where_the_evaluator_is_undefined(out_type):
    dt, lo, hi = INT_TYPES[out_type]
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 3e38, -3e38, 2.0**31, -(2.0**31), 1e10], np.float32)
    for zp in (0, lo, hi):
        got = pqo.quantize_linear(x, np.float32(1.0), np.array(zp).astype(dt)).astype(np.int64)
        assert got.tolist() == [lo, lo, hi, lo, hi, lo, hi, lo, hi], (zp, got)


@pytest.mark.parametrize("precision", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_precision_attribute(precision, rng):
    x = _x_values(rng, 500, 0.1)
    scale = np.float32(0.1)
    for out_type in (TensorProto.INT8, TensorProto.FLOAT8E4M3FN, TensorProto.UINT4):
        want = evaluator("QuantizeLinear", [x, scale], output_dtype=out_type, precision=precision)
        got = pqo.quantize_linear(x, scale, output_dtype=out_type, precision=precision)
        p_dtype = onnx.helper.tensor_dtype_to_np_dtype(precision)
        mask = None
        if out_type != TensorProto.FLOAT8E4M3FN:
            mask = _defined_for_integers(p_dtype, x, scale, 0)
        same_bits(got, want, mask, f"precision {precision} out {out_type}")


def test_int32_input_divides_in_float64(rng):
    x = rng.integers(-2**31, 2**31 - 1, 1000, dtype=np.int64).astype(np.int32)
    for scale in (np.float32(1000.5), np.array([3.0], np.float32), np.int32(7)):
        want = evaluator("QuantizeLinear", [x, scale, np.int16(3)])
        got = pqo.quantize_linear(x, scale, np.int16(3))
        same_bits(got, want, _defined_for_integers(np.float64, x, scale, 3, 0), f"int32 x scale {scale!r}")


def test_e8m0_scales(rng):
    x = _x_values(rng, 400, 1.0)
    s = np.array([120, 127, 130], np.uint8).view(ml_dtypes.float8_e8m0fnu)
    for out_type in (TensorProto.INT8, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT4E2M1):
        for scale in (s[1], s):
            xx = x.reshape(-1)[:399].reshape(133, 3) if scale.ndim else x
            want = evaluator("QuantizeLinear", [xx, scale], output_dtype=out_type, axis=1)
            got = pqo.quantize_linear(xx, scale, output_dtype=out_type, axis=1)
            same_bits(got, want, None if out_type != TensorProto.INT8 else np.isfinite(xx) & (np.abs(xx) < 1e9), f"e8m0 {out_type}")


DQ_INPUTS = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8, TensorProto.UINT16: np.uint16,
             TensorProto.INT16: np.int16, TensorProto.INT32: np.int32, **{k: v[0] for k, v in INT_TYPES.items() if k in (21, 22, 25, 26)},
             **FLOAT8, **FLOAT46}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("x_type", list(DQ_INPUTS), ids=[TensorProto.DataType.Name(t) for t in DQ_INPUTS])
def test_dequantize_matches_evaluator(isa, x_type, rng):
    dt = DQ_INPUTS[x_type]
    with kernel_set(isa):
        for (shape, axis, block, sshape), s_dtype, out_dtype in itertools.product(
                LAYOUTS, [np.float32, np.float16, ml_dtypes.bfloat16], [None, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16]):
            n = int(np.prod(shape))
            itemsize = np.dtype(dt).itemsize
            raw = rng.integers(0, 256 ** itemsize, n, dtype=np.uint64).astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[itemsize])
            if dt in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn):
                raw &= 0x0F
            elif dt in (ml_dtypes.int2, ml_dtypes.uint2):
                raw &= 0x03
            elif dt in (ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn):
                raw &= 0x3F
            x = raw.view(dt).reshape(shape)
            scale = _scale_array(rng, sshape, s_dtype)
            zps = [None]
            if x_type not in FLOAT8 and x_type != TensorProto.FLOAT4E2M1:
                zps.append(x.reshape(-1)[: max(1, int(np.prod(sshape)))].copy().reshape(sshape))
            for zp in zps:
                args = [x, scale] + ([] if zp is None else [zp])
                want = evaluator("DequantizeLinear", args, axis=axis, block_size=block or None, output_dtype=out_dtype)
                got = pqo.dequantize_linear(*args, axis=axis, block_size=block, output_dtype=out_dtype)
                same_bits(got, want, None, f"{shape} axis={axis} block={block} s={scale.dtype} out={out_dtype} zp={zp is not None}")


def test_pack_matches_onnx_storage(rng):
    from onnx import numpy_helper

    for dt, t in ((ml_dtypes.int4, TensorProto.INT4), (ml_dtypes.uint4, TensorProto.UINT4),
                  (ml_dtypes.float4_e2m1fn, TensorProto.FLOAT4E2M1), (ml_dtypes.int2, TensorProto.INT2),
                  (ml_dtypes.uint2, TensorProto.UINT2)):
        for shape in [(7,), (3, 5), (2, 2, 2), (1,), (0,), (1000,), (1001,), (1002,), (1003,), (33, 31)]:
            mask = 0x0F if np.dtype(dt).itemsize and t in (TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1) else 0x03
            a = (rng.integers(0, 256, shape).astype(np.uint8) & mask).view(dt)
            tensor = numpy_helper.from_array(a)
            assert pqo.pack(a).tobytes() == tensor.raw_data, (dt, shape)
            back = pqo.unpack(pqo.pack(a), dt, shape)
            assert back.dtype == a.dtype and np.array_equal(back.view(np.uint8), a.view(np.uint8))
            same_bits(numpy_helper.to_array(tensor), pqo.unpack(tensor.raw_data, dt, shape), None, "to_array")
            # Only each code's low bits are stored: set bits above them change nothing.
            noisy = (a.view(np.uint8) | (rng.integers(0, 256, shape).astype(np.uint8) & ~np.uint8(mask))).view(dt)
            assert pqo.pack(noisy).tobytes() == tensor.raw_data, (dt, shape, "high bits")


def test_bad_input_is_a_clear_error():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        pqo.quantize_linear(x, np.ones(3, np.float32), axis=2)
    with pytest.raises(ValueError, match="does not match x.shape"):
        pqo.quantize_linear(x, np.ones(2, np.float32), axis=1)
    with pytest.raises(ValueError, match="block_size must be a positive"):
        pqo.quantize_linear(x, np.ones((2, 3), np.float32), block_size=-1)
    with pytest.raises(ValueError, match=r"must have shape \(2, 2\)"):
        pqo.quantize_linear(x, np.ones((2, 3), np.float32), axis=1, block_size=2)
    with pytest.raises(TypeError, match="y_zero_point has dtype int32"):
        pqo.quantize_linear(x, np.float32(1), np.int32(0))
    with pytest.raises(ValueError, match="does not match y_zero_point"):
        pqo.quantize_linear(x, np.float32(1), np.uint8(0), output_dtype=TensorProto.INT8)
    with pytest.raises(TypeError, match="x_zero_point has dtype uint8"):
        pqo.dequantize_linear(np.zeros(3, np.int8), np.float32(1), np.uint8(0))
    with pytest.raises(ValueError, match="must be zero for float8"):
        pqo.dequantize_linear(np.zeros(3, ml_dtypes.float8_e4m3fn), np.float32(1), np.ones((), ml_dtypes.float8_e4m3fn))
    with pytest.raises(ValueError, match="output_dtype: 99"):
        pqo.quantize_linear(x, np.float32(1), output_dtype=99)
