"""`polyquant convert --to onnx` of AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear: onto
standard QuantizeLinear / DequantizeLinear where the semantics agree, bit-exact.

The converted models run in plain onnxruntime (no custom-op library) and are compared with the
original Quark model run with polyquant's library (bit-exact with Quark's CPU kernel) and with
polyquant.quark, on random, tie, special and out-of-range inputs."""

from __future__ import annotations

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
    ("float16", "float16 zero point"),
    ("bfloat16", "bfloat16 zero point"),
    ("opset 17 int16", "needs opset 21"),
    ("scale input", "is not an initializer"),
])
def test_refusals_name_the_reason(case, reason):
    if case == "float16":
        m = quark_model(np.float32(1.0), np.float16(0), ["n"])
    elif case == "bfloat16":
        m = quark_model(np.float32(1.0), np.zeros((), ml_dtypes.bfloat16), ["n"])
    elif case == "opset 17 int16":
        m = quark_model(np.float32(1e-4), np.int16(0), ["n"], opset=17)
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
