"""`polyquant convert --to qonnx`: standard QuantizeLinear / DequantizeLinear pairs to QONNX, bit-exact.

The converted QONNX models run in onnxruntime with polyquant's custom-op library (bit-exact with qonnx)
and are compared with the original Q/DQ models run in plain onnxruntime, on random, tie and special
inputs; round trips QONNX -> ONNX -> QONNX and ONNX -> QONNX -> ONNX keep the semantics."""

from __future__ import annotations

import io
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from polyquant._tools import cli, convert as conv
from polyquant.qonnx.execute import reference_session_options

ROOT = Path(__file__).resolve().parents[3]
BREVITAS = ROOT / "tests" / "data" / "brevitas"


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def plain(model):
    return ort.InferenceSession(model.SerializeToString(), conv.exact_session_options(), providers=["CPUExecutionProvider"])


def with_library(model):
    return ort.InferenceSession(model.SerializeToString(), reference_session_options(), providers=["CPUExecutionProvider"])


def qdq_model(scale, zp, shape, axis=None, opset=21, clip=None, q_attrs=None, dq_attrs=None):
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s")]
    inputs = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(np.asarray(zp), "z"))
        inputs.append("z")
    kw = {"axis": axis} if axis is not None else {}
    nodes = [helper.make_node("QuantizeLinear", inputs, ["q"], name="Q", **kw, **(q_attrs or {}))]
    mid = "q"
    if clip is not None:
        dtype = np.asarray(zp).dtype
        inits += [numpy_helper.from_array(np.asarray(clip[0], dtype), "lo"),
                  numpy_helper.from_array(np.asarray(clip[1], dtype), "hi")]
        nodes.append(helper.make_node("Clip", ["q", "lo", "hi"], ["qc"], name="C"))
        mid = "qc"
    nodes.append(helper.make_node("DequantizeLinear", [mid] + inputs[1:], ["y"], name="DQ", **kw, **(dq_attrs or {})))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def inputs(scale, shape, rng, grid=300.0):
    """Random values over the grid, every half step (ties) and its float32 neighbours, and specials."""
    s = float(np.max(scale))
    k = (np.arange(-2 * grid - 4, 2 * grid + 4) / 2 * s).astype(np.float32)
    ties = np.concatenate([k, np.nextafter(k, np.float32(np.inf)), np.nextafter(k, np.float32(-np.inf))])
    n = int(np.prod(shape[1:]))
    rows = (ties.size + 512) // n + 1
    x = (rng.standard_normal(rows * n) * grid * s).astype(np.float32)
    x[:ties.size] = ties
    x[-9:] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38]
    return x.reshape((rows,) + tuple(shape[1:]))


CASES = {
    "int8": (np.float32(0.02), np.int8(0), ["n"], None, None),
    "uint8 zp 128": (np.float32(0.02), np.uint8(128), ["n"], None, None),
    "uint8 zp 0": (np.float32(0.05), np.uint8(0), ["n"], None, None),
    "int8 zp -128": (np.float32(0.02), np.int8(-128), ["n"], None, None),
    "no zero point (uint8)": (np.float32(0.05), None, ["n"], None, None),
    "int16": (np.float32(1e-4), np.int16(0), ["n"], None, None),
    "uint16": (np.float32(1e-4), np.uint16(0), ["n"], None, None),
    "int4": (np.float32(0.25), np.array(0, ml_dtypes.int4), ["n"], None, None),
    "uint4": (np.float32(0.25), np.array(0, ml_dtypes.uint4), ["n"], None, None),
    "int8 per axis": (np.float32([0.02, 0.5, 3.0]), np.int8([0, 0, 0]), ["n", 3, 2], 1, None),
    "int8 per axis, last": (np.float32([0.02, 0.5, 3.0]), np.int8([0, 0, 0]), ["n", 2, 3], -1, None),
    "int8 narrow (QCDQ)": (np.float32(0.02), np.int8(0), ["n"], None, (-127, 127)),
    "int8 4-bit (QCDQ)": (np.float32(0.1), np.int8(0), ["n"], None, (-8, 7)),
    "float8 e4m3fn": (np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fn), ["n"], None, None),
    "float8 e5m2": (np.float32(0.01), np.zeros((), ml_dtypes.float8_e5m2), ["n"], None, None),
    "float8 e4m3fn per axis": (np.float32([0.5, 1e-3, 7.0]), np.zeros(3, ml_dtypes.float8_e4m3fn), ["n", 3], 1, None),
    "float8 e4m3fnuz": (np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fnuz), ["n"], None, None),
    "float8 e5m2fnuz": (np.float32(0.01), np.zeros((), ml_dtypes.float8_e5m2fnuz), ["n"], None, None),
    "float8 e4m3fnuz per axis": (np.float32([0.5, 1e-3, 7.0]), np.zeros(3, ml_dtypes.float8_e4m3fnuz), ["n", 3], 1, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_pairs_become_qonnx_nodes_equal_to_the_pair(case):
    scale, zp, shape, axis, clip = CASES[case]
    m = qdq_model(scale, zp, shape, axis, clip=clip)
    r = conv.convert(m, to="qonnx")
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    ops = [n.op_type for n in r.model.graph.node]
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops and "Clip" not in ops
    assert ops[0] == ("FloatQuant" if "float8" in case else "Quant")
    x = inputs(scale, [1] + shape[1:], np.random.default_rng(len(case)))
    got = with_library(r.model).run(None, {"x": x})[0]
    want = plain(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=case)


def test_quant_parameters_are_the_grid():
    """uint8 with zero point 128 is the signed 8-bit grid with zeropt 0; a Clip to [-127, 127] is narrow;
    a Clip to [-8, 7] on int8 is 4 bits."""
    def quant_of(case):
        scale, zp, shape, axis, clip = CASES[case]
        n = next(n for n in conv.convert(qdq_model(scale, zp, shape, axis, clip=clip), to="qonnx").model.graph.node
                 if n.op_type == "Quant")
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        init = {t.name: numpy_helper.to_array(t) for t in conv.convert(qdq_model(scale, zp, shape, axis, clip=clip),
                                                                          to="qonnx").model.graph.initializer}
        return float(init[n.input[3]]), attrs["signed"], attrs["narrow"], float(np.max(np.abs(init[n.input[2]]))), \
            attrs["rounding_mode"]
    assert quant_of("uint8 zp 128") == (8, 1, 0, 0.0, b"ROUND")
    assert quant_of("int8 zp -128") == (8, 0, 0, 0.0, b"ROUND")
    assert quant_of("int8 narrow (QCDQ)") == (8, 1, 1, 0.0, b"ROUND")
    assert quant_of("int8 4-bit (QCDQ)") == (4, 1, 0, 0.0, b"ROUND")
    assert quant_of("int16") == (16, 1, 0, 0.0, b"ROUND")


@pytest.mark.parametrize("scale,zp", [(np.float32(0.02), np.uint8(128)),
                                      (np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fnuz))])
def test_qonnx_execute_onnx_agrees(scale, zp):
    """The converted model in qonnx's own execute_onnx (its Quant / FloatQuant and onnxruntime for the
    standard fix-ups)."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes
    m = qdq_model(scale, zp, [8])
    r = conv.convert(m, to="qonnx")
    x = np.array([np.nan, -0.0, -0.001, 0.01, 0.03, 2.55, -2.57, 1e30], np.float32) * np.float32(scale / 0.02)
    with np.errstate(invalid="ignore", over="ignore"):
        got = execute_onnx(ModelWrapper(r.model).transform(InferShapes()), {"x": x})["y"]
    np.testing.assert_array_equal(bits(got), bits(plain(m).run(None, {"x": x})[0]))


@pytest.mark.parametrize("case,reason", [
    ("zero point 3", "differs from the Q/DQ pair"),
    ("saturate 0", "saturate = 0"),
    ("blocked, unknown shape", "unknown along its block axis"),
    ("blocked, wrong block count", "blocks cover the input"),
    ("blocked, other axes differ", "differ on axes [0]"),
    ("blocked, block sizes differ", "differ: not one quantizer"),
    ("float8 zero point", "a nonzero float8 zero point"),
    ("Q alone", "QuantizeLinear without its DequantizeLinear"),
    ("DQ of a computed tensor", "is not an integer initializer"),
    ("scale input", "is not an initializer"),
    ("different scales", "do not hold the same scale"),
])
def test_refusals_name_the_reason(case, reason):
    if case == "zero point 3":  # qonnx adds the zero point before rounding: ties move
        m = qdq_model(np.float32(0.02), np.int8(3), ["n"])
    elif case == "saturate 0":
        m = qdq_model(np.float32(0.5), np.zeros((), ml_dtypes.float8_e4m3fn), ["n"], q_attrs={"saturate": 0})
    elif case == "blocked, unknown shape":  # the block axis's length is symbolic: no static Reshape target
        m = qdq_model(np.ones((2, 2), np.float32), np.zeros((2, 2), np.int8), ["n", "d"], axis=1,
                      q_attrs={"block_size": 2}, dq_attrs={"block_size": 2})
    elif case == "blocked, wrong block count":  # ceil(10 / 4) = 3 blocks, the scale has 2
        m = qdq_model(np.ones((2, 2), np.float32), np.zeros((2, 2), np.int8), [2, 10], axis=1,
                      q_attrs={"block_size": 4}, dq_attrs={"block_size": 4})
    elif case == "blocked, other axes differ":  # x has 3 rows, the scale 2
        m = qdq_model(np.ones((2, 2), np.float32), np.zeros((2, 2), np.int8), [3, 8], axis=1,
                      q_attrs={"block_size": 4}, dq_attrs={"block_size": 4})
    elif case == "blocked, block sizes differ":
        m = qdq_model(np.ones((2, 2), np.float32), np.zeros((2, 2), np.int8), [2, 8], axis=1,
                      q_attrs={"block_size": 4}, dq_attrs={"block_size": 3})
    elif case == "float8 zero point":
        m = qdq_model(np.float32(0.5), np.full((), 1.0, ml_dtypes.float8_e4m3fnuz), ["n"])
    elif case == "Q alone":
        m = qdq_model(np.float32(0.02), np.int8(0), ["n"])
        m.graph.output.append(helper.make_tensor_value_info("q", TensorProto.INT8, None))
    elif case == "DQ of a computed tensor":
        m = qdq_model(np.float32(0.02), np.int8(0), ["n"])
        m.graph.node[0].op_type = "Cast"  # the integers come from a Cast, not a QuantizeLinear
        del m.graph.node[0].input[1:]
        m.graph.node[0].attribute.append(helper.make_attribute("to", TensorProto.INT8))
    elif case == "scale input":
        m = qdq_model(np.float32(0.02), np.int8(0), ["n"])
        del m.graph.initializer[0]
        m.graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, []))
    else:
        m = qdq_model(np.float32(0.02), np.int8(0), ["n"])
        m.graph.initializer.append(numpy_helper.from_array(np.float32(0.03), "s2"))
        m.graph.node[1].input[1] = "s2"
    r = conv.convert(m, to="qonnx")
    assert r.refused and reason in r.refused[0].reason, r.refused[0].reason
    assert any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in r.model.graph.node)  # left as it was


def test_allow_inexact_emits_the_bare_qonnx_node_with_its_counts():
    """Without fix-ups the Quant node differs from the pair on NaN and -0.0 (counted); a zero point
    QONNX cannot hold exactly is emitted with its ties counted."""
    r = conv.convert(qdq_model(np.float32(0.02), np.int8(0), ["n"]), to="qonnx", allow_inexact=True)
    (n,) = r.nodes
    assert n.status == "inexact" and set(n.kinds) == {"nan", "sign of zero"} and "Where" not in n.form
    assert [x.op_type for x in r.model.graph.node] == ["Quant"]
    r = conv.convert(qdq_model(np.float32(0.02), np.int8(3), ["n"]), to="qonnx", allow_inexact=True)
    assert r.nodes[0].status == "inexact" and r.nodes[0].kinds.get("rounding tie", 0) > 0


@pytest.mark.parametrize("name", ["mlp_perchannel", "conv_perchannel"])
def test_round_trip_qonnx_onnx_qonnx(name):
    """QONNX -> Q/DQ (--allow-inexact) -> QONNX: every Quant node comes back with its own parameters
    (scale, zero point, bit width, signed, narrow, ROUND), and the final model equals the Q/DQ model bit
    for bit (the fix-ups keep Q/DQ's NaN and +0.0)."""
    original = onnx.load(BREVITAS / f"{name}.onnx")
    qdq = conv.convert(original, allow_inexact=True)
    back = conv.convert(qdq.model, to="qonnx")
    assert back.nodes and not back.refused and not back.inexact
    inits = {t.name: numpy_helper.to_array(t) for t in original.graph.initializer}
    back_inits = {t.name: numpy_helper.to_array(t) for t in back.model.graph.initializer}

    def quants(model, table):
        out = []
        for n in model.graph.node:
            if n.op_type == "Quant":
                a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
                out.append((table[n.input[1]].reshape(-1).tolist(), float(np.max(np.abs(table[n.input[2]])) if
                            table[n.input[2]].size else 0), float(table[n.input[3]]), a.get("signed", 1),
                            a.get("narrow", 0), a.get("rounding_mode", b"ROUND")))
        return out
    assert quants(back.model, back_inits) == quants(original, inits)
    x = np.load(BREVITAS / f"{name}.input.npy")
    rng = np.random.default_rng(0)
    a, b = with_library(back.model), plain(qdq.model)
    for s in (1e-3, 1.0, 1e3):
        xs = (rng.standard_normal(x.shape) * s).astype(np.float32)
        xs.reshape(-1)[:6] = [np.nan, -np.inf, np.inf, -0.0, 0.0, 1e-45]
        np.testing.assert_array_equal(bits(a.run(None, {a.get_inputs()[0].name: xs})[0]),
                                      bits(b.run(None, {b.get_inputs()[0].name: xs})[0]))


@pytest.mark.parametrize("case", ["int8", "uint8 zp 128", "int8 per axis", "int8 narrow (QCDQ)", "float8 e4m3fn"])
def test_round_trip_onnx_qonnx_onnx_is_exact(case):
    """Q/DQ -> QONNX -> standard ONNX (the exact decomposition; FloatQuant as float8 Q/DQ with its
    fix-ups): bit-identical to the original pair in plain onnxruntime, specials included."""
    scale, zp, shape, axis, clip = CASES[case]
    m = qdq_model(scale, zp, shape, axis, clip=clip)
    there = conv.convert(m, to="qonnx")
    back = conv.convert(there.model, to="onnx")
    assert not back.refused and {o.domain for o in back.model.opset_import} <= {"", "ai.onnx"}
    x = inputs(scale, [1] + shape[1:], np.random.default_rng(7))
    np.testing.assert_array_equal(bits(plain(back.model).run(None, {"x": x})[0]), bits(plain(m).run(None, {"x": x})[0]))


def test_a_qdq_model_with_integer_weights_becomes_qonnx():
    """polyquant calibrate's / AIMET's QDQ layout stores a weight as QuantizeLinear's integers plus a
    DequantizeLinear: it becomes the float weight DQ(w_q) feeding Quant, checked over the tensor; the
    whole QONNX model equals the QDQ model bit for bit, specials included."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from test_convert_aimet import encodings, float_model
    qdq = conv.convert(float_model(), encodings=encodings(), check="none").model
    r = conv.convert(qdq, to="qonnx")
    assert [n.status for n in r.nodes] == ["exact"] * 3 and any(n.op == "DequantizeLinear (integer weight)" for n in r.nodes)
    assert {n.op_type for n in r.model.graph.node} & {"QuantizeLinear", "DequantizeLinear"} == set()
    assert all(t.data_type == TensorProto.FLOAT for t in r.model.graph.initializer if t.dims)  # the int8 weight is gone
    x = (np.random.default_rng(0).standard_normal((64, 4)) * 2).astype(np.float32)
    x[0] = [np.nan, -0.0, np.inf, -np.inf]
    x[1] = [1e30, -1e-45, 0.09, -0.01]
    np.testing.assert_array_equal(bits(with_library(r.model).run(None, {"x": x})[0]), bits(plain(qdq).run(None, {"x": x})[0]))


@pytest.mark.parametrize("dtype,zp", [(ml_dtypes.int4, 0), (ml_dtypes.uint4, 8), (np.int8, 0), (np.uint8, 3)],
                         ids=["int4", "uint4 zp 8", "int8", "uint8 zp 3"])
def test_blocked_integer_weights_become_qonnx(dtype, zp):
    """A blocked DequantizeLinear of an integer weight (block_size 3 along axis 1, as int4 LLM weights are
    stored): QONNX's scale and zero point are the blocks' expanded to the weight's shape; the float
    weight feeds Quant, checked over the tensor; the model equals the original bit for bit."""
    import polyquant.onnx as pqo
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    scale = (np.abs(rng.standard_normal((8, 2))) * 0.1 + 0.01).astype(np.float32)
    z = np.full((8, 2), zp, dtype)
    wq = np.asarray(pqo.quantize_linear(w, scale, z, axis=1, block_size=3))
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(scale, "s"), numpy_helper.from_array(z, "z")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"], axis=1, block_size=3, name="dq"),
             helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    r = conv.convert(m, to="qonnx")
    assert [n.status for n in r.nodes] == ["exact"] and r.nodes[0].checked == w.size
    quant = next(n for n in r.model.graph.node if n.op_type == "Quant")
    assert numpy_helper.to_array(next(t for t in r.model.graph.initializer if t.name == quant.input[1])).shape == w.shape
    x = rng.standard_normal((32, 8)).astype(np.float32)
    np.testing.assert_array_equal(bits(with_library(r.model).run(None, {"x": x})[0]), bits(plain(m).run(None, {"x": x})[0]))


# Blocked pairs on activations: (x's shape, axis, block_size, zero point value, its dtype, Clip).
# The scale has x's shape with ceil(D_axis / block_size) along the axis (one value per block).
BLOCKED = {
    "int8, block 2, axis last": ((3, 8), -1, 2, 0, np.int8, None),
    "int4, block 4, axis first": ((8, 3, 2), 0, 4, 0, ml_dtypes.int4, None),
    "uint8 zp 128, block 32, axis middle": ((2, 64, 3), 1, 32, 128, np.uint8, None),
    "uint8 zp 0, block 4, axis middle": ((2, 12, 3), 1, 4, 0, np.uint8, None),
    "int8, block 4, partial final block, axis last": ((3, 10), 1, 4, 0, np.int8, None),
    "int4, block 32, partial final block, axis first": ((40, 2), 0, 32, 0, ml_dtypes.int4, None),
    "uint8 zp 128, block 2, final block of 1, axis middle": ((2, 5, 3), 1, 2, 128, np.uint8, None),
    "int8 narrow (QCDQ), block 4": ((2, 8), 1, 4, 0, np.int8, (-127, 127)),
    "float8 e4m3fn, block 4, partial final block": ((2, 7), -1, 4, 0, ml_dtypes.float8_e4m3fn, None),
    "float8 e5m2fnuz, block 2, axis first": ((4, 3), 0, 2, 0, ml_dtypes.float8_e5m2fnuz, None),
}


def blocked_case(case, declared_shape=None):
    """The case's model, its per-block scale and the scale expanded to x's shape (each block's value
    repeated block_size times along the axis, the final block cut to the axis's length: ONNX's
    definition, written independently of the converter)."""
    x_shape, axis, block, zp, dtype, clip = BLOCKED[case]
    axis %= len(x_shape)
    blocks = -(-x_shape[axis] // block)
    scale_shape = x_shape[:axis] + (blocks,) + x_shape[axis + 1:]
    rng = np.random.default_rng(len(case))
    scale = (np.exp(rng.uniform(np.log(0.002), np.log(2.0), scale_shape))).astype(np.float32)  # one per block, all different
    attrs = {"block_size": block}
    m = qdq_model(scale, np.full(scale_shape, zp, dtype), list(declared_shape or x_shape), axis, clip=clip,
                  q_attrs=attrs, dq_attrs=attrs)
    per_element = np.take(np.repeat(scale, block, axis=axis), np.arange(x_shape[axis]), axis=axis)
    return m, scale, per_element


def blocked_inputs(per_element, dtype, rng):
    """Inputs of x's own shape, stacked (T,) + shape: for each element, from its own block's scale s,
    every grid point k s and tie (k + 1/2) s of the type's range and their float32 neighbours (the
    float8 types: every value and midpoint times s), random values over the grid, and the specials
    (NaN with payloads, infinities, zeros, subnormals, the largest magnitudes)."""
    name = np.dtype(dtype).name
    if name.startswith("float8"):
        values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
        values = np.unique(values[np.isfinite(values)])
        points = np.concatenate([values, (values[1:] + values[:-1]) / 2])
        spread = values.max()
    else:  # a span covering the signed and the unsigned range of the type's bits
        top = 2.0 ** (4 if name in ("int4", "uint4") else 8 * np.dtype(dtype).itemsize)
        k = np.arange(-top - 2, top + 3)
        points = np.concatenate([k, k + 0.5])
        spread = top
    at = (points.reshape((-1,) + (1,) * per_element.ndim) * per_element).astype(np.float32)
    random = rng.standard_normal((512,) + per_element.shape) * spread * per_element
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38], np.float32)
    payload_nans = np.array([0x7F800001, 0xFFC12345], np.uint32).view(np.float32)
    specials = np.concatenate([specials, payload_nans]).reshape((-1,) + (1,) * per_element.ndim)
    parts = [at, np.nextafter(at, np.float32(np.inf)), np.nextafter(at, np.float32(-np.inf)), random,
             np.broadcast_to(specials, specials.shape[:1] + per_element.shape)]
    return np.concatenate([np.asarray(a, np.float32) for a in parts])


def run_each(session, xs):
    """The model on each input of the stack (the blocked pair takes x's own shape only), as bits."""
    return np.stack([bits(session.run(None, {"x": x})[0]) for x in xs])


@pytest.mark.parametrize("case", list(BLOCKED))
def test_blocked_activation_pairs_become_qonnx_nodes_equal_to_the_pair(case):
    """A blocked pair on an activation: x is reshaped to one block per row, (M, block_size, P) with M the
    blocks and the axes before the block axis, P the axes after it (absent where 1), after a Pad where
    the final block is partial; the QONNX node takes the blocks' own scale as (M, 1, P); a Reshape (and
    Slice) gives x's shape back. Equal to the pair in plain onnxruntime bit for bit on every element's
    ties, neighbours, random values and specials."""
    m, scale, per_element = blocked_case(case)
    x_shape, axis, block = BLOCKED[case][:3]
    axis %= len(x_shape)
    r = conv.convert(m, to="qonnx")
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    assert r.nodes[0].checked > 0
    ops = [n.op_type for n in r.model.graph.node]
    assert {"QuantizeLinear", "DequantizeLinear", "Clip"} & set(ops) == set()
    partial = x_shape[axis] % block != 0
    assert ops[0] == ("Pad" if partial else "Reshape") and ops[-1] == ("Slice" if partial else "Reshape")
    node = next(n for n in r.model.graph.node if n.op_type in ("Quant", "FloatQuant"))
    assert node.op_type == ("FloatQuant" if "float8" in case else "Quant")
    inits = {t.name: numpy_helper.to_array(t) for t in r.model.graph.initializer}
    # The blocks' own scale (not expanded to x's shape), a block per row, with a 1 for its elements.
    trailing = int(np.prod(scale.shape[axis + 1:]))
    expected_shape = (int(np.prod(scale.shape[:axis + 1])), 1) + ((trailing,) if trailing > 1 else ())
    np.testing.assert_array_equal(inits[node.input[1]], scale.reshape(expected_shape))
    xs = blocked_inputs(per_element, BLOCKED[case][4], np.random.default_rng(1))
    np.testing.assert_array_equal(run_each(with_library(r.model), xs), run_each(plain(m), xs), err_msg=case)


@pytest.mark.parametrize("case", ["int8, block 2, axis last", "int4, block 32, partial final block, axis first",
                                  "uint8 zp 128, block 2, final block of 1, axis middle",
                                  "float8 e4m3fn, block 4, partial final block"])
def test_blocked_round_trip_onnx_qonnx_onnx_is_exact(case):
    """Blocked Q/DQ -> QONNX -> standard ONNX (the Quant / FloatQuant decomposed, the Reshapes, Pad and
    Slice kept): bit-identical to the original pair in plain onnxruntime, specials included."""
    m, _, per_element = blocked_case(case)
    back = conv.convert(conv.convert(m, to="qonnx").model)
    assert back.nodes and not back.refused and {o.domain for o in back.model.opset_import} <= {"", "ai.onnx"}
    xs = blocked_inputs(per_element, BLOCKED[case][4], np.random.default_rng(2))
    np.testing.assert_array_equal(run_each(plain(back.model), xs), run_each(plain(m), xs), err_msg=case)


@pytest.mark.parametrize("case", ["int8, block 4, partial final block, axis last",
                                  "float8 e5m2fnuz, block 2, axis first"])
def test_blocked_qonnx_execute_onnx_agrees(case):
    """The converted blocked model in qonnx's own execute_onnx (its Quant / FloatQuant, onnxruntime for
    the Reshape, Pad, Slice and fix-ups), on every 37th input of the sample (ties, neighbours, random
    values in turn; execute_onnx takes some 30 ms an input) and on the specials."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes
    m, _, per_element = blocked_case(case)
    model = ModelWrapper(conv.convert(m, to="qonnx").model).transform(InferShapes())
    xs = blocked_inputs(per_element, BLOCKED[case][4], np.random.default_rng(3))
    xs = np.concatenate([xs[::37], xs[-12:]])
    with np.errstate(invalid="ignore", over="ignore"):
        got = np.stack([bits(execute_onnx(model, {"x": x})["y"]) for x in xs])
    np.testing.assert_array_equal(got, run_each(plain(m), xs))


def test_blocked_shape_from_value_info_else_refused_by_name():
    """The block axis's length from the model's value_info where shape inference finds none (x reshaped
    by a runtime shape): converted and equal to the pair. Without the value_info: refused by name."""
    case = "int8, block 4, partial final block, axis last"
    m, _, per_element = blocked_case(case, declared_shape=[3, 10])
    m.graph.node[0].input[0] = "h"   # QuantizeLinear reads h = Reshape(x, shape), shape a graph input
    m.graph.node.insert(0, helper.make_node("Reshape", ["x", "shape"], ["h"], name="R"))
    m.graph.input.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    r = conv.convert(m, to="qonnx")
    assert r.refused and "unknown along its block axis 1" in r.refused[0].reason, r.refused[0].reason
    m.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, ["n", 10]))
    r = conv.convert(m, to="qonnx")
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    xs = blocked_inputs(per_element, np.int8, np.random.default_rng(4))
    shape = np.array([3, 10], np.int64)
    a, b = with_library(r.model), plain(m)
    np.testing.assert_array_equal(np.stack([bits(a.run(None, {"x": x, "shape": shape})[0]) for x in xs]),
                                  np.stack([bits(b.run(None, {"x": x, "shape": shape})[0]) for x in xs]))


def test_blocked_check_finds_a_wrong_block_layout(monkeypatch):
    """The check runs the blocked pair against the emitted nodes on inputs of x's shape: a conversion
    whose blocks' scales are in the wrong order (the rows of the Quant's (blocks, 1) scale reversed) is
    refused."""
    from polyquant._tools import convert_qonnx as cq
    real = cq._emit_blocked

    def reversed_blocks(graph, q, dq, b, p, fixups):
        out = real(graph, q, dq, b, p, fixups)
        quant = next(n for n in b.nodes if n.op_type == "Quant")
        t = next(t for t in b.inits if t.name == quant.input[1])
        t.CopyFrom(numpy_helper.from_array(np.flip(numpy_helper.to_array(t), 0).copy(), t.name))
        return out
    monkeypatch.setattr(cq, "_emit_blocked", reversed_blocks)
    r = conv.convert(blocked_case("int8, block 4, partial final block, axis last")[0], to="qonnx")
    assert r.refused and "differs from the Q/DQ pair" in r.refused[0].reason, r.nodes[0]


@pytest.mark.parametrize("x_shape,axis,block", [((3, 10), 1, 4), ((7, 2), 0, 3), ((2, 5, 3), 1, 2), ((2, 8), 1, 4)])
def test_blocked_check_sample_reaches_every_element_of_every_block(x_shape, axis, block):
    """The check lays its sample (one value per block, N rows) out as inputs of x's own shape: every
    element takes its own block's values only, and every block, the partial final block included,
    meets every row of the sample (as every channel does in the per-axis check), spread over its
    elements."""
    from polyquant._tools import convert_qonnx as cq
    blocks = -(-x_shape[axis] // block)
    scale_shape = x_shape[:axis] + (blocks,) + x_shape[axis + 1:]
    m = qdq_model(np.ones(scale_shape, np.float32), np.zeros(scale_shape, np.int8), list(x_shape), axis,
                  q_attrs={"block_size": block}, dq_attrs={"block_size": block})
    p = cq._pair_parameters(m.graph, m.graph.node[0], m.graph.node[1], len(x_shape), list(x_shape))
    n = 23
    channel = np.arange(np.prod(scale_shape)).reshape(p["qshape"])
    sample = (np.arange(n).reshape((n,) + (1,) * channel.ndim) * 1000 + channel).astype(np.float32)
    xs = cq._blocked_inputs(sample, p["blocks"])
    assert xs.shape[1:] == x_shape
    block_of = np.take(np.repeat(np.arange(np.prod(scale_shape)).reshape(scale_shape), block, axis=axis),
                       np.arange(x_shape[axis]), axis=axis)
    rows_seen = {}
    for element in np.ndindex(x_shape):
        seen = xs[(slice(None),) + element]
        assert np.all(seen % 1000 == block_of[element])                     # its own block's values only
        rows_seen.setdefault(int(block_of[element]), set()).update((seen // 1000).astype(int).tolist())
    assert len(rows_seen) == np.prod(scale_shape)
    for b, rows in rows_seen.items():
        assert rows == set(range(n)), b                                      # every row of the sample


def test_blocked_allow_inexact_emits_the_bare_qonnx_node_with_its_counts():
    """--allow-inexact on a blocked pair: the bare Quant between the Reshapes (no fix-ups), INEXACT with
    the NaN and -0.0 inputs counted, as for a per-tensor pair."""
    r = conv.convert(blocked_case("int8, block 4, partial final block, axis last")[0], to="qonnx", allow_inexact=True)
    (n,) = r.nodes
    assert n.status == "inexact" and set(n.kinds) == {"nan", "sign of zero"} and "Where" not in n.form, n
    assert [x.op_type for x in r.model.graph.node] == ["Pad", "Reshape", "Quant", "Reshape", "Slice"]


def test_blocked_pair_on_a_float_weight():
    """A blocked pair on a float32 weight initializer (fake-quantized weights; block 32 along axis 0,
    a final block of 8): converted, checked on the sample and on the weight itself, and the model
    (the weight feeding a MatMul) equals the original bit for bit."""
    m, _, per_element = blocked_case("int4, block 32, partial final block, axis first")
    rng = np.random.default_rng(5)
    w = (rng.standard_normal(per_element.shape) * per_element * 4).astype(np.float32)
    w[0, 0], w[1, 1], w[39, 0] = np.nan, -0.0, -1e-30
    m.graph.initializer.append(numpy_helper.from_array(w, "x"))
    del m.graph.input[:]
    m.graph.input.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 40]))
    m.graph.node[-1].output[0] = "w_quantized"
    m.graph.node.append(helper.make_node("MatMul", ["a", "w_quantized"], ["y"], name="mm"))
    r = conv.convert(m, to="qonnx")
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    assert {n.op_type for n in r.model.graph.node} & {"QuantizeLinear", "DequantizeLinear"} == set()
    a = rng.standard_normal((3, 40)).astype(np.float32)
    np.testing.assert_array_equal(bits(with_library(r.model).run(None, {"a": a})[0]),
                                  bits(plain(m).run(None, {"a": a})[0]))


def test_cli_to_qonnx(tmp_path):
    src, out = tmp_path / "qdq.onnx", tmp_path / "qonnx.onnx"
    onnx.save(qdq_model(np.float32(0.02), np.int8(0), ["n"]), src)
    o = io.StringIO()
    assert cli.main(["convert", str(src), "-o", str(out), "--to", "qonnx"], out=o) == 0
    assert "1 of 1 Q/DQ nodes converted exactly" in o.getvalue() and out.exists()
    onnx.save(qdq_model(np.float32(0.02), np.int8(3), ["n"]), src)
    o = io.StringIO()
    assert cli.main(["convert", str(src), "-o", str(tmp_path / "no.onnx"), "--to", "qonnx"], out=o) == 1
    assert "refused" in o.getvalue() and not (tmp_path / "no.onnx").exists()
