"""`polyquant convert --to onnx` of AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear: onto
standard QuantizeLinear / DequantizeLinear where the semantics agree, bit-exact.

The converted models run in plain onnxruntime (no custom-op library) and are compared with the
original Quark model run with polyquant's library (bit-exact with Quark's CPU kernel) and with
polyquant.quark, on random, tie, special and out-of-range inputs."""

from __future__ import annotations

import ctypes
import functools
import io

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyquant.quark as pqq
from polyquant._tools import cli, convert as conv, convert_quark as cq
from polyquant.qonnx.execute import reference_session_options


def quark_model(scale, zp, shape, axis=None, opset=21, domain="com.amd.quark", ops=("ExtendedQuantizeLinear",
                                                                                    "ExtendedDequantizeLinear")):
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s"), numpy_helper.from_array(np.asarray(zp), "z")]
    kw = {"axis": axis} if axis is not None else {}
    nodes = [helper.make_node(ops[0], ["x", "s", "z"], ["q"], name="Q", domain=domain, **kw),
             helper.make_node(ops[1], ["q", "s", "z"], ["y"], name="DQ", domain=domain, **kw)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(domain, 1)])
    m.ir_version = 10
    return m


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def inputs(scale, zp, shape, rng):
    """Ties of round(x / scale) and their neighbours, values around +-2^63 * scale (Quark's int64 cast),
    specials and random values."""
    s = float(np.max(scale))
    k = (np.arange(-70000, 70000) + 0.5) * s
    ties = k.astype(np.float32)
    edge = (np.array([1.0, -1.0, 1.5, -1.5]) * 2.0 ** 63 * s).astype(np.float32)
    parts = [ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)), edge,
             np.nextafter(edge, np.float32(np.inf)), np.nextafter(edge, np.float32(-np.inf)),
             np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38], np.float32),
             (rng.standard_normal(4096) * 300 * s).astype(np.float32)]
    x = np.concatenate(parts)
    n = int(np.prod([d for d in shape if d != "n"]))
    x = np.resize(x, (x.size // n + 1) * n)
    return x.reshape([-1 if d == "n" else d for d in shape])


CASES = {
    "int8 zp 3": (np.float32(0.02), np.int8(3), ["n"], None),
    "int8 zp -3 (wraps to the highest)": (np.float32(0.02), np.int8(-3), ["n"], None),
    "uint8 zp 128": (np.float32(0.02), np.uint8(128), ["n"], None),
    "int16": (np.float32(1e-4), np.int16(-7), ["n"], None),
    "uint16": (np.float32(1e-4), np.uint16(9), ["n"], None),
    "int8 per axis": (np.float32([0.1, 0.2, 3.0]), np.int8([0, -5, 3]), ["n", 3, 2], 1),
    "int8 per axis, absent axis = 0": (np.float32([0.1, 0.2, 3.0]), np.int8([0, -5, 3]), [3, "n"], None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_quark_nodes_become_standard_q_dq_equal_to_quark(case):
    scale, zp, shape, axis = CASES[case]
    m = quark_model(scale, zp, shape, axis)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact", "exact"], [n.reason for n in r.nodes]
    assert {o.domain for o in r.model.opset_import} <= {"", "ai.onnx"}
    assert {n.op_type for n in r.model.graph.node} >= {"QuantizeLinear", "DequantizeLinear"}
    x = inputs(scale, zp, shape, np.random.default_rng(3))
    plain = ort.InferenceSession(r.model.SerializeToString(), conv.exact_session_options(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    got, want = plain.run(None, {"x": x})[0], original.run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=case)
    ax = 0 if axis is None else axis
    if np.size(scale) == 1:
        ax = 1
    q = pqq.extended_quantize_linear(x, scale, zp, axis=ax)
    np.testing.assert_array_equal(bits(got), bits(pqq.extended_dequantize_linear(q, scale, zp, axis=ax)))


def test_vitis_aliases_convert_too():
    m = quark_model(np.float32(0.02), np.int8(3), ["n"], domain="com.vai.quantize",
                    ops=("VitisQuantizeLinear", "VitisDequantizeLinear"))
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact", "exact"]


def test_without_the_guard_the_check_finds_quarks_edges(monkeypatch):
    """A bare QuantizeLinear differs from Quark's kernel on NaN / +-inf / |x / scale| >= 2^63: the check
    finds them and the node is refused with the counts."""
    monkeypatch.setattr(cq, "convert_quark_node", functools.partial(cq.convert_quark_node, guard=False))
    r = conv.convert(quark_model(np.float32(0.02), np.int8(-3), ["n"]))
    (q,) = r.refused
    assert q.op == "ExtendedQuantizeLinear" and "differs from Quark's kernel" in q.reason and "nan" in q.reason
    r = conv.convert(quark_model(np.float32(0.02), np.int8(-3), ["n"]), allow_inexact=True)
    assert r.nodes[0].status == "inexact" and r.nodes[0].kinds.get("nan", 0) > 0


@pytest.mark.parametrize("case,reason", [
    ("opset 17 int16", "needs opset 21"),
    ("scale input", "is not an initializer"),
    ("opset 12 bfloat16", "becomes Cast to bfloat16, which needs opset 13"),
    ("opset 10 float16", "becomes Clip, which needs opset 11"),
    ("float64 scale", "float32 scale only"),
    ("float16 x", "quantizes float32 x only"),
    ("DQ x not of the zero point's type", "needs x of the zero point's type, bfloat16"),
])
def test_refusals_name_the_reason(case, reason):
    if case == "opset 17 int16":
        m = quark_model(np.float32(1e-4), np.int16(0), ["n"], opset=17)
    elif case == "opset 12 bfloat16":
        m = quark_model(np.float32(1.0), np.zeros((), ml_dtypes.bfloat16), ["n"], opset=12)
    elif case == "opset 10 float16":
        m = quark_model(np.float32(1.0), np.float16(0), ["n"], opset=10)
    elif case == "float64 scale":
        m = quark_model(np.float32(0.5), np.zeros((), ml_dtypes.bfloat16), ["n"])
        m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.float64(0.5), "s"))
    elif case == "float16 x":
        m = quark_model(np.float32(0.5), np.float16(0), ["n"])
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    elif case == "DQ x not of the zero point's type":
        m = dq_model(np.float32(0.5), np.zeros((), ml_dtypes.bfloat16), ["n"])
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    else:
        m = quark_model(np.float32(0.02), np.int8(0), ["n"])
        del m.graph.initializer[0]
        m.graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, []))
    r = conv.convert(m)
    assert r.refused and reason in r.refused[0].reason, [n.reason for n in r.nodes]
    assert any(n.domain == "com.amd.quark" for n in r.model.graph.node)


@pytest.mark.parametrize("scale,zp,shape,axis", [
    (np.float32(0.02), np.int32(7), ["n"], None),
    (np.float32(1e-6), np.int32(-5), ["n"], None),
    (np.float32(0.5), np.uint32(100), ["n"], None),
    (np.float32([0.1, 0.2, 3.0]), np.int32([0, -5, 3]), ["n", 3, 2], 1),
])
def test_int32_quantize_becomes_quarks_kernel_in_standard_ops(scale, zp, shape, axis):
    """QuantizeLinear has no 32-bit output: Round / Cast to int64 / Add / Clip / Cast, with Quark's edge
    value where |x / scale| >= 2^63 or NaN. The integers themselves (the Q node's output) and the
    dequantized values equal Quark's on ties, neighbours, the type's and the int64 cast's edges, specials."""
    m = quark_model(scale, zp, shape, axis)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact", "exact"], [n.reason for n in r.nodes]
    ops = {n.op_type for n in r.model.graph.node}
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops and "Round" in ops
    x = inputs(scale, zp, shape, np.random.default_rng(4))
    ztype = helper.np_dtype_to_tensor_dtype(np.asarray(zp).dtype)
    for model in (m, r.model):
        model.graph.output.append(helper.make_tensor_value_info("q", ztype, None))
    plain = ort.InferenceSession(r.model.SerializeToString(), conv.exact_session_options(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    (got_y, got_q), (want_y, want_q) = plain.run(None, {"x": x}), original.run(None, {"x": x})
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(bits(got_y), bits(want_y))
    info = np.iinfo(np.asarray(zp).dtype)
    assert {info.min, info.max} <= set(np.unique(want_q).tolist())  # the edges are reached


def dq_model(scale, zp, shape, axis=None):
    """x (zp's integer type) -> ExtendedDequantizeLinear -> y."""
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s"), numpy_helper.from_array(np.asarray(zp), "z")]
    kw = {"axis": axis} if axis is not None else {}
    x_type = helper.np_dtype_to_tensor_dtype(np.asarray(zp).dtype)
    g = helper.make_graph([helper.make_node("ExtendedDequantizeLinear", ["x", "s", "z"], ["y"], name="DQ",
                                            domain="com.amd.quark", **kw)], "g",
                          [helper.make_tensor_value_info("x", x_type, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.amd.quark", 1)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("scale,zp,shape,axis", [
    (np.float32(0.02), np.int32(7), ["n"], None),
    (np.float32(3e-5), np.int32(-2147483000), ["n"], None),
    (np.float32(0.5), np.uint32(4000000000), ["n"], None),
    (np.float32([0.1, 0.2, 3.0]), np.int32([0, -5, 2147483647]), ["n", 3], 1),
])
def test_int32_dequantize_becomes_a_float64_difference_equal_to_quark(scale, zp, shape, axis):
    """ExtendedDequantizeLinear of int32 / uint32 computes float32(x - zp) * scale without wrapping;
    onnxruntime's DequantizeLinear wraps x - zp in int32, so the node becomes Cast / Sub in float64 / Cast
    / Mul, exact on every input: the type's ends and their neighbours, small and random values."""
    m = dq_model(scale, zp, shape, axis)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"], [n.reason for n in r.nodes]
    assert "DequantizeLinear" not in {n.op_type for n in r.model.graph.node}
    dtype = np.asarray(zp).dtype
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    x = np.concatenate([np.array([info.min, info.min + 1, info.max, info.max - 1, 0, 1, 7], np.int64),
                        np.arange(-3000, 3000) if info.min < 0 else np.arange(6000),
                        rng.integers(info.min, info.max, 30000, dtype=np.int64, endpoint=True)]).astype(dtype)
    if len(shape) > 1:
        x = np.resize(x, (x.size // 3 + 1) * 3).reshape(-1, 3)
    plain = ort.InferenceSession(r.model.SerializeToString(), conv.exact_session_options(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    got, want = plain.run(None, {"x": x})[0], original.run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    # The standard DequantizeLinear would not be: it wraps x - zp in int32 near the type's ends.
    if dtype == np.int32 and np.size(zp) == 1:
        std = helper.make_model(helper.make_graph(
            [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.INT32, ["n"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.asarray(scale, np.float32), "s"), numpy_helper.from_array(np.asarray(zp), "z")]),
            opset_imports=[helper.make_opsetid("", 21)])
        std.ir_version = 10
        wrapped = ort.InferenceSession(std.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert (bits(wrapped) != bits(want)).any()


def test_cli_converts_a_quark_model(tmp_path):
    import onnx
    src, out = tmp_path / "quark.onnx", tmp_path / "standard.onnx"
    onnx.save(quark_model(np.float32(0.02), np.int8(3), ["n"]), src)
    o = io.StringIO()
    assert cli.main(["convert", str(src), "-o", str(out)], out=o) == 0
    assert "2 of 2 Quark nodes converted exactly" in o.getvalue() and out.exists()


# ---- float16 / bfloat16 --------------------------------------------------------------------------------
# Quark's kernel (polyquant.quark, docs/quark.md): float16 Q is a Cast of x clamped to +-65504 (scale and
# zero point ignored; a NaN keeps its sign and payload's top bits), float16 DQ a Cast quieting a
# signalling NaN; bfloat16 Q rounds x / scale + zp half to even with no saturation and writes every NaN as
# 0x7FC1, bfloat16 DQ computes (x - zp) * scale in float32 with every NaN read as +0x7FC00000. Neither type
# is a Q/DQ quantized type: the converter writes Cast / Clip / Sum / Gather / BitCast forms, and these
# tests compare their bits with Quark's, in large tensors and in tensors small enough to be all scalar
# tail (where onnxruntime's kernels write NaNs differently from their vector blocks).

def bf16(v):
    return np.asarray(v, np.float32).astype(ml_dtypes.bfloat16)


def bf16_code(code):
    return np.array(code, np.uint16).view(ml_dtypes.bfloat16).reshape(np.shape(code))


def float_inputs(scale, zp, ztype, shape, rng):
    """x for a float16 / bfloat16 Q, shaped by `shape` ("n" the sample's length): the x that put Quark's
    value (x for float16, x / scale + zp for bfloat16) on every rounding boundary of the type, on the
    overflow edge and on the values themselves, each with its float32 neighbours; NaNs of both signs with
    assorted payloads, +-inf, +-0, subnormals, float32's extremes; random bit patterns and values."""
    if ztype == TensorProto.BFLOAT16:
        high = np.arange(1 << 16, dtype=np.uint32) << 16
        with np.errstate(invalid="ignore", over="ignore"):  # NaN codes and overflow: dropped / kept as inf
            v = np.concatenate([high, high | 0x8000]).view(np.float32).astype(np.float64)  # values and ties
            s, z = float(np.max(scale)), float(np.asarray(zp, np.float32).reshape(-1)[0])
            on = ((v - z) * s).astype(np.float32)
    else:
        h = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
        h = h[np.isfinite(h)]
        on = np.concatenate([h, (h[:-1] + h[1:]) / 2, [65520.0, -65520.0, 65536.0, 1e5, -1e5]]).astype(np.float32)
    on = on[~np.isnan(on)]
    up, down = np.nextafter(on, np.float32(np.inf)), np.nextafter(on, np.float32(-np.inf))
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC10000, 0x7FA5A5A5,
                     0xFFD00001], np.uint32).view(np.float32)
    specials = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38, 3.4028235e38,
                         -3.4028235e38], np.float32)
    patterns = rng.integers(0, 1 << 32, 1 << 15, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([on, up, down, nans, specials, patterns, (rng.standard_normal(4096) * 1e3).astype(np.float32)])
    n = int(np.prod([d for d in shape if d != "n"]))
    x = np.resize(x, (x.size // n + 1) * n)
    return x.reshape([-1 if d == "n" else d for d in shape])


def run_bits(session, feeds: dict, output: str) -> np.ndarray:
    """One output of session, as its raw bits (uint16 / uint32): onnxruntime's Python API gives no numpy
    array for bfloat16, so tensors go in and out as OrtValues."""
    values = {}
    for name, x in feeds.items():
        x = np.ascontiguousarray(x)
        values[name] = (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), TensorProto.BFLOAT16)
                        if x.dtype == ml_dtypes.bfloat16 else ort.OrtValue.ortvalue_from_numpy(x))
    (y,) = session.run_with_ort_values([output], values)
    code = {"tensor(float)": np.uint32, "tensor(float16)": np.uint16, "tensor(bfloat16)": np.uint16}[y.data_type()]
    return np.frombuffer(ctypes.string_at(y.data_ptr(), y.tensor_size_in_bytes()), code).reshape(y.shape()).copy()


def special_rows(x, most: int = 300):
    """The rows of x holding a NaN, an infinity, a zero or a subnormal (x float32 / float16 / bfloat16), at
    most `most` of each kind, spread over x."""
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):
        v = x.reshape(len(x), -1).astype(np.float32)
    tiny = float(ml_dtypes.finfo(x.dtype).smallest_normal)
    picked = []
    for kind in (np.isnan(v), np.isinf(v), np.abs(v) < tiny):
        rows = np.flatnonzero(kind.any(axis=1))
        picked.append(rows[np.linspace(0, rows.size - 1, min(most, rows.size)).astype(np.int64)] if rows.size else rows)
    return x[np.unique(np.concatenate(picked))]


def assert_equal_in_small_tensors(a, b, x, outputs, rows: int = 1, axis: int = 0):
    """a and b agree on x's slices along `axis` run `rows` at a time: tensors of at most 7 elements lie
    wholly in the scalar tail of onnxruntime's vector kernels, which treat NaN differently from their
    blocks."""
    x = np.moveaxis(x, axis, 0)
    for first in range(0, len(x), rows):
        part = np.ascontiguousarray(np.moveaxis(x[first:first + rows], 0, axis))
        for out in outputs:
            np.testing.assert_array_equal(run_bits(a, {"x": part}, out), run_bits(b, {"x": part}, out),
                                          err_msg=f"{out} on rows {first}..")


def plain_session(m, options=None):
    return ort.InferenceSession(m.SerializeToString(), options or conv.exact_session_options(),
                                providers=["CPUExecutionProvider"])


def standard_only(m) -> bool:
    return ({o.domain for o in m.opset_import} <= {"", "ai.onnx"}
            and {n.domain for n in m.graph.node} <= {"", "ai.onnx"})


FLOAT_CASES = {  # scale, zero point, x's shape, axis, the model's standard opset
    "bfloat16 zp 3": (np.float32(0.02), bf16(3.0), ["n"], None, 21),
    "bfloat16 zp 0, scale 0.5 (ties exact)": (np.float32(0.5), bf16(0.0), ["n"], None, 21),
    "bfloat16 zp -0.0, tiny scale": (np.float32(1e-30), bf16(-0.0), ["n"], None, 21),
    "bfloat16 per axis": (np.float32([0.1, 0.2, 3.0]), bf16([0, -5, 0.375]), ["n", 3, 2], 1, 21),
    "bfloat16 per axis, absent axis = 0": (np.float32([0.1, 0.2, 3.0]), bf16([0, -5, 3]), [3, "n"], None, 21),
    # float16 Q is exact from opset 26 (BitCast for Quark's NaN payloads; test_float16_q_below_opset_26)
    "float16 zp 3": (np.float32(0.02), np.float16(3), ["n"], None, 26),
    "float16 per axis": (np.float32([0.1, 0.2, 3.0]), np.float16([0, -5, 3]), ["n", 3, 2], 1, 26),
}


@pytest.mark.parametrize("case", list(FLOAT_CASES))
def test_float_q_dq_round_trip_is_quarks_bits_in_plain_onnxruntime(case):
    """A Quark Q -> DQ model of a float16 / bfloat16 zero point: both nodes converted exactly, the result
    only standard ops; the quantized values (q) and the round trip (y) equal the Quark model run with
    polyquant's library and polyquant.quark bit for bit, under the conversion's session options and
    onnxruntime's defaults alike, on every rounding boundary of the type and its neighbours, overflow,
    NaNs, infinities, zeros and random values; the specials also in tensors small enough to be all
    scalar tail."""
    scale, zp, shape, axis, opset = FLOAT_CASES[case]
    ztype = TensorProto.BFLOAT16 if np.asarray(zp).dtype == ml_dtypes.bfloat16 else TensorProto.FLOAT16
    m = quark_model(scale, zp, shape, axis, opset=opset)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact", "exact"], [n.reason for n in r.nodes]
    assert all(n.checked for n in r.nodes)
    assert standard_only(r.model)
    assert not {"QuantizeLinear", "DequantizeLinear"} & {n.op_type for n in r.model.graph.node}
    for model in (m, r.model):
        model.graph.output.append(helper.make_tensor_value_info("q", ztype, None))
    x = float_inputs(scale, zp, ztype, shape, np.random.default_rng(6))
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    want_q, want_y = run_bits(original, {"x": x}, "q"), run_bits(original, {"x": x}, "y")
    ax = 0 if axis is None else axis
    if np.size(scale) == 1:
        ax = 1
    q = pqq.extended_quantize_linear(x, scale, zp, axis=ax)
    np.testing.assert_array_equal(want_q, bits(q))
    np.testing.assert_array_equal(want_y, bits(pqq.extended_dequantize_linear(q, scale, zp, axis=ax)))
    for options in (conv.exact_session_options(), ort.SessionOptions()):
        plain = plain_session(r.model, options)
        np.testing.assert_array_equal(run_bits(plain, {"x": x}, "q"), want_q, err_msg=case)
        np.testing.assert_array_equal(run_bits(plain, {"x": x}, "y"), want_y, err_msg=case)
    along = shape.index("n")  # the sample's axis; the others are the channels'
    specials = np.moveaxis(special_rows(np.moveaxis(x, along, 0)), 0, along)
    assert np.isnan(specials).sum() >= 9
    per_slice = x.size // x.shape[along]
    assert_equal_in_small_tensors(plain, original, specials, ["q", "y"], rows=max(1, 7 // per_slice), axis=along)
    # The inputs reach what the fix-ups are for, and what plain rounding does.
    codes = set(np.unique(want_q).tolist())
    if ztype == TensorProto.BFLOAT16:
        assert {0x7FC1, 0x7F80, 0xFF80} <= codes  # Quark's NaN, overflow to +-inf (no saturation)
        assert not {0x7FC0, 0xFFC0} & codes       # onnxruntime's own Cast NaNs
        assert 0x7FC00000 in set(np.unique(want_y).tolist())
    else:
        assert {0x7BFF, 0xFBFF} <= codes and not {0x7C00, 0xFC00} & codes  # +-65504, never +-inf
        beyond = np.abs(x) >= 65520  # where float16 rounding overflows: Quark's clamp gives +-65504
        assert beyond.any() and (want_q[beyond] == np.where(x[beyond] > 0, 0x7BFF, 0xFBFF)).all()


@pytest.mark.parametrize("zp,shape,axis", [
    (np.float16(7), ["n"], None),
    (np.float16([1, -2, 0.5]), ["n", 3], 1),
    (bf16(3.0), ["n"], None),
    (bf16_code(0xFFC5), ["n"], None),  # a NaN zero point: Quark reads it as +0x7FC00000
    (bf16(np.inf), ["n"], None),
    (bf16([1, -2.5, 0]), ["n", 3], 1),
])
def test_float_dequantize_equals_quark_on_every_input_code(zp, shape, axis):
    """ExtendedDequantizeLinear of float16 (Cast, Sum with -0.0 to quiet a signalling NaN) and bfloat16
    (Cast, NaN canonicalised, Sum with -zp, Mul), on every one of the 65,536 input codes (per channel), bit
    for bit against the Quark node and polyquant.quark, and the NaN, infinite, zero and subnormal codes
    again in tensors of at most 7 elements. For bfloat16 with NaN inputs, onnxruntime's bare Cast - Sub -
    Mul would differ."""
    scale = np.float32([0.1, 0.2, 3.0]) if np.size(zp) > 1 else np.float32(0.02)
    m = dq_model(scale, zp, shape, axis)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"], [n.reason for n in r.nodes]
    assert r.nodes[0].checked >= 1 << 16 and "every" in r.nodes[0].form and standard_only(r.model)
    codes = np.arange(1 << 16, dtype=np.uint16).view(np.asarray(zp).dtype)
    x = np.repeat(codes, 3).reshape(-1, 3) if len(shape) > 1 else codes
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    want = run_bits(original, {"x": x}, "y")
    np.testing.assert_array_equal(want, bits(pqq.extended_dequantize_linear(x, scale, zp, axis=1 if axis is None else axis)))
    got = run_bits(plain_session(r.model), {"x": x}, "y")
    np.testing.assert_array_equal(got, want)
    assert_equal_in_small_tensors(plain_session(r.model), original, special_rows(x), ["y"], rows=7 // x[0].size)
    if np.asarray(zp).dtype == ml_dtypes.bfloat16 and np.size(zp) == 1 and np.isfinite(np.float32(zp)):
        bare = helper.make_model(helper.make_graph(
            [helper.make_node("Cast", ["x"], ["w"], to=TensorProto.FLOAT), helper.make_node("Sub", ["w", "z"], ["d"]),
             helper.make_node("Mul", ["d", "s"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["n"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.float32(zp), "z"), numpy_helper.from_array(scale, "s")]),
            opset_imports=[helper.make_opsetid("", 21)])
        bare.ir_version = 10
        # every NaN code but 0x7FC0 (253 of them) keeps its sign or payload there
        assert (run_bits(plain_session(bare), {"x": x}, "y") != want).sum() >= 250


@pytest.mark.parametrize("scale,zp", [
    (np.float32(0.0), bf16(1.0)),            # x / 0: +-inf, NaN for 0 / 0
    (np.float32(-3.0), bf16(1.5)),
    (np.float32(1e30), bf16(0.0)),
    (np.float32(1e-40), bf16(0.0)),          # a subnormal scale: quotients overflow
    (np.float32(np.nan), bf16(7.0)),
    (np.float32(0.02), bf16_code(0x7F81)),   # a signalling-NaN zero point: every output Quark's NaN
    (np.float32(0.02), bf16(-np.inf)),
    (np.float32(2.0), np.float16(np.nan)),   # float16 ignores scale and zero point
])
def test_float_nodes_with_odd_parameters_equal_quark(scale, zp):
    m = quark_model(scale, zp, ["n"], opset=26 if np.asarray(zp).dtype == np.float16 else 21)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact", "exact"], [n.reason for n in r.nodes]
    ztype = TensorProto.BFLOAT16 if np.asarray(zp).dtype == ml_dtypes.bfloat16 else TensorProto.FLOAT16
    x = float_inputs(scale, zp, ztype, ["n"], np.random.default_rng(7))
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(run_bits(plain_session(r.model), {"x": x}, "y"), run_bits(original, {"x": x}, "y"))


@pytest.mark.parametrize("zp,node,kind", [
    (bf16(3.0), "ExtendedQuantizeLinear", "nan"),          # onnxruntime's Cast writes NaN as 0x7FC0 / 0xFFC0
    (bf16(3.0), "ExtendedDequantizeLinear", "nan"),        # onnxruntime's Cast keeps NaN payloads and signs
    (np.float16(3), "ExtendedQuantizeLinear", "saturation edge"),  # no clamp: 65520 and beyond round to inf
    (np.float16(3), "ExtendedQuantizeLinear", "nan"),      # the Cast's NaN in its scalar tail: 0x7E00
    (np.float16(3), "ExtendedDequantizeLinear", "nan"),    # the Cast leaves a signalling NaN so in its tail
])
def test_without_the_fix_ups_the_check_finds_where_onnxruntime_differs(monkeypatch, zp, node, kind):
    """The bare standard forms (Cast(x / scale + zp, bfloat16); Cast - Sum - Mul; Cast(x, float16); Cast(x,
    float)) differ from Quark's kernel: the node's check finds it and refuses the node with the counts, or
    reports it INEXACT under allow_inexact."""
    monkeypatch.setattr(cq, "convert_quark_node", functools.partial(cq.convert_quark_node, guard=False))
    r = conv.convert(quark_model(np.float32(0.02), zp, ["n"], opset=26))
    refused = [n for n in r.refused if n.op == node]
    assert refused and "differs from Quark's kernel" in refused[0].reason and kind in refused[0].reason
    r = conv.convert(quark_model(np.float32(0.02), zp, ["n"], opset=26), allow_inexact=True)
    report = next(n for n in r.nodes if n.op == node)
    assert report.status == "inexact" and report.kinds.get(kind, 0) > 0 and report.example


def test_the_check_lands_on_bfloat16_rounding_ties(monkeypatch):
    """The bfloat16 Q check's sample puts x / scale + zp on the type's rounding boundaries: a form that
    multiplies by the reciprocal of the scale (one float32 rounding away from Quark's division) is
    refused, with differences on rounding ties among them."""
    class ReciprocalBuilder(conv._Builder):
        def op(self, op_type, inputs, what, output=None, **attrs):
            if op_type == "Div":
                divisor = numpy_helper.to_array(next(t for t in self.inits if t.name == inputs[1]))
                inputs = [inputs[0], self.const(np.float32(1) / divisor, "reciprocal")]
                op_type = "Mul"
            return super().op(op_type, inputs, what, output, **attrs)

    monkeypatch.setattr(cq, "_Builder", ReciprocalBuilder)
    r = conv.convert(quark_model(np.float32(0.02), bf16(3.0), ["n"]))
    (q,) = r.refused
    assert q.op == "ExtendedQuantizeLinear" and "rounding tie" in q.reason


@pytest.mark.parametrize("zp,opset,dq_only", [(bf16(0.25), 13, False), (np.float16(1), 26, False),
                                              (np.float16(1), 8, True), (np.int8(3), 10, False)])
def test_nodes_convert_at_the_lowest_opset_their_form_needs(zp, opset, dq_only):
    """bfloat16 at opset 13 (Cast to / from bfloat16), float16 Q at 26 (BitCast), float16 DQ at 8 (Sum with
    broadcasting), int8 at 10: converted, checked at the model's own opset, and run in plain onnxruntime."""
    if dq_only:
        m = dq_model(np.float32(0.02), zp, ["n"])
        m.opset_import[0].version = opset
    else:
        m = quark_model(np.float32(0.02), zp, ["n"], opset=opset)
    r = conv.convert(m)
    assert {n.status for n in r.nodes} == {"exact"}, [n.reason for n in r.nodes]
    assert [o.version for o in r.model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    x = inputs(np.float32(0.02), zp, ["n"], np.random.default_rng(8))
    if dq_only:
        with np.errstate(over="ignore"):
            x = x.astype(np.float16)
    original = ort.InferenceSession(m.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(run_bits(plain_session(r.model), {"x": x}, "y"), run_bits(original, {"x": x}, "y"))


def test_float16_q_below_opset_26_is_refused_with_the_reason():
    """Below opset 26 (no BitCast) float16 Q is Cast(Where(IsNaN(x), x, Clip(x))): onnxruntime's Cast keeps
    a NaN's payload bits, as Quark's NaN does, only inside its whole 8-element blocks, and writes 0x7E00 /
    0xFE00 in the scalar tail; the check runs specials as tails, finds those NaNs and refuses the node
    naming BitCast and opset 26, or emits it INEXACT (NaN payloads only) under allow_inexact."""
    m = quark_model(np.float32(0.02), np.float16(3), ["n"], opset=21)
    r = conv.convert(m)
    (q,) = r.refused
    assert q.op == "ExtendedQuantizeLinear" and "nan" in q.reason and "exact from opset 26 (BitCast" in q.reason
    r = conv.convert(m, allow_inexact=True)
    assert r.nodes[0].status == "inexact" and set(r.nodes[0].kinds) == {"nan"} and r.nodes[1].status == "exact"


@pytest.mark.parametrize("zp,opset", [(bf16(3.0), 21), (np.float16(3), 26)])
def test_float_nodes_on_a_tensor_split_across_threads(zp, opset):
    """onnxruntime splits a large tensor among its threads at offsets that are no multiple of 8, so a Cast's
    scalar tails also fall inside the tensor. With NaNs of assorted payloads at every position of a
    2^18 + 13-element tensor and 4 threads, the converted models still equal polyquant.quark bit for bit,
    where a bare Cast(Clip(x), float16) does not."""
    rng = np.random.default_rng(9)
    n = (1 << 18) + 13
    codes = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    codes[::3] |= np.uint32(0x7F800001)  # every third a NaN (payloads and signs kept random)
    x = codes.view(np.float32)
    m = quark_model(np.float32(0.02), zp, ["n"], opset=opset)
    r = conv.convert(m)
    assert [n_.status for n_ in r.nodes] == ["exact", "exact"], [n_.reason for n_ in r.nodes]
    r.model.graph.output.append(helper.make_tensor_value_info("q", helper.np_dtype_to_tensor_dtype(
        np.asarray(zp).dtype), None))
    options = conv.exact_session_options()
    options.intra_op_num_threads = 4
    plain = plain_session(r.model, options)
    q = pqq.extended_quantize_linear(x, np.float32(0.02), zp)
    np.testing.assert_array_equal(run_bits(plain, {"x": x}, "q"), bits(q))
    np.testing.assert_array_equal(run_bits(plain, {"x": x}, "y"),
                                  bits(pqq.extended_dequantize_linear(q, np.float32(0.02), zp)))
    if np.asarray(zp).dtype == np.float16:
        bare = helper.make_model(helper.make_graph(
            [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("Cast", ["c"], ["q"], to=TensorProto.FLOAT16)],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
            [helper.make_tensor_value_info("q", TensorProto.FLOAT16, None)],
            [numpy_helper.from_array(np.float32(-65504), "lo"), numpy_helper.from_array(np.float32(65504), "hi")]),
            opset_imports=[helper.make_opsetid("", 21)])
        bare.ir_version = 10
        differ = np.flatnonzero(run_bits(plain_session(bare, options), {"x": x}, "q") != bits(q))
        assert differ.size and differ.min() < n - 8  # tails inside the tensor, not only at its end
