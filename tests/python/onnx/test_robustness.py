"""Bad and unusual input to polyquant.onnx and polyquant.quark (issue 17, "unclear errors"): big-endian
and unaligned operands, ``out=`` arrays the ops cannot write, Python scalars as scale / zero point
(weak, as elsewhere in polyquant), integer attributes of the wrong type or range, upgrade_model's
arguments, and the messages of polyquant's ONNX Runtime Q/DQ ops. Every error names the parameter
and never leaks nanobind's internal signature listing."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import polyquant.onnx as pqo
import polyquant.quark as pqq

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(17)
X = (RNG.standard_normal((3, 4)) * 4).astype(np.float32)
SCALE = np.array([0.5, 0.25, 0.125, 1.0], np.float32)


def _no_internal_names(excinfo) -> None:
    text = str(excinfo.value)
    assert "incompatible function arguments" not in text and "_polyquant_ext" not in text, text


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


# ---- layouts: big-endian and unaligned operands are read like native ones ---------------------------
def _big(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder(">"))


def _unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data starts one byte past an aligned address."""
    raw = np.zeros(a.nbytes + 1, np.uint8)
    view = raw[1:].view(a.dtype).reshape(a.shape)
    view[...] = a
    assert not view.flags.aligned or a.itemsize == 1
    return view


@pytest.mark.parametrize("layout", [_big, _unaligned], ids=["big-endian", "unaligned"])
def test_onnx_qdq_read_non_native_operands(layout):
    zp = np.array([3, -2, 0, 7], np.int16)
    expected = pqo.quantize_linear(X, SCALE, zp, axis=1)
    _same(pqo.quantize_linear(layout(X), layout(SCALE), layout(zp), axis=1), expected)
    back = pqo.dequantize_linear(expected, SCALE, zp, axis=1)
    _same(pqo.dequantize_linear(layout(expected), layout(SCALE), layout(zp), axis=1), back)
    # per-tensor with a big-endian 0-d scale and a blocked scale
    _same(pqo.quantize_linear(layout(X), layout(np.array(0.1, np.float32))), pqo.quantize_linear(X, np.float32(0.1)))
    blocked = np.abs(RNG.standard_normal((3, 2))).astype(np.float32) + 0.1
    _same(pqo.quantize_linear(layout(X), layout(blocked), axis=1, block_size=2),
          pqo.quantize_linear(X, blocked, axis=1, block_size=2))


@pytest.mark.parametrize("layout", [_big, _unaligned], ids=["big-endian", "unaligned"])
@pytest.mark.parametrize("semantics", ["quark", "onnx"])
def test_quark_reads_non_native_operands(layout, semantics):
    zp = np.array([3, -2, 0, 7], np.int16)
    expected = pqq.extended_quantize_linear(X, SCALE, zp, axis=1, semantics=semantics)
    _same(pqq.extended_quantize_linear(layout(X), layout(SCALE), layout(zp), axis=1, semantics=semantics), expected)
    back = pqq.extended_dequantize_linear(expected, SCALE, zp, axis=1, semantics=semantics)
    _same(pqq.extended_dequantize_linear(layout(expected), layout(SCALE), layout(zp), axis=1, semantics=semantics),
          back)


def test_non_whole_element_strides_are_read():
    """A field of a packed structured array: strides that are no multiple of the item size."""
    packed = np.zeros(12, dtype=[("tag", np.uint8), ("value", np.float32)])
    packed["value"] = X.reshape(-1)
    field = packed["value"].reshape(3, 4)
    assert field.strides[-1] % field.itemsize
    _same(pqo.quantize_linear(field, SCALE, axis=1), pqo.quantize_linear(X, SCALE, axis=1))
    _same(pqq.extended_quantize_linear(field, SCALE, axis=1), pqq.extended_quantize_linear(X, SCALE, axis=1))


# ---- out= ---------------------------------------------------------------------------------------------
OUT_CALLS = {
    "quantize_linear": lambda out: pqo.quantize_linear(X, SCALE, axis=1, out=out),
    "dequantize_linear": lambda out: pqo.dequantize_linear(np.ones((3, 4), np.uint8), SCALE, axis=1, out=out),
    "extended_quantize_linear": lambda out: pqq.extended_quantize_linear(X, SCALE, axis=1, out=out),
    "extended_dequantize_linear": lambda out: pqq.extended_dequantize_linear(np.ones((3, 4), np.uint8), SCALE,
                                                                             axis=1, out=out),
}
OUT_DTYPES = {"quantize_linear": np.uint8, "dequantize_linear": np.float32, "extended_quantize_linear": np.uint8,
              "extended_dequantize_linear": np.float32}


@pytest.mark.parametrize("op", sorted(OUT_CALLS))
def test_out_big_endian_is_a_clear_error(op):
    dtype = np.dtype(OUT_DTYPES[op])
    if dtype.itemsize == 1:
        dtype = np.dtype(np.float32)  # a byte has no order: use a wrong-order float (shape/dtype checked after)
    out = np.zeros((3, 4), dtype.newbyteorder(">"))
    with pytest.raises(ValueError, match="out: .*byte order") as info:
        OUT_CALLS[op](out)
    _no_internal_names(info)


@pytest.mark.parametrize("op", sorted(OUT_CALLS))
def test_out_read_only_unaligned_or_not_an_array(op):
    out = np.zeros((3, 4), OUT_DTYPES[op])
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: .*read-only"):
        OUT_CALLS[op](out)
    with pytest.raises(TypeError, match="out: expected a numpy array"):
        OUT_CALLS[op]([[0] * 4] * 3)
    if np.dtype(OUT_DTYPES[op]).itemsize > 1:
        with pytest.raises(ValueError, match="out: .*aligned"):
            OUT_CALLS[op](_unaligned(np.zeros((3, 4), OUT_DTYPES[op])))
    good = np.zeros((3, 4), OUT_DTYPES[op])
    assert OUT_CALLS[op](good) is good


# ---- Python scalars are weak -----------------------------------------------------------------------
@pytest.mark.parametrize("x_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_python_float_scale_takes_x_type(x_dtype):
    x = X.astype(x_dtype)
    _same(pqo.quantize_linear(x, 0.1), pqo.quantize_linear(x, np.asarray(0.1, x_dtype)))
    _same(pqo.quantize_linear(x, 0.1, 3), pqo.quantize_linear(x, np.asarray(0.1, x_dtype), np.uint8(3)))
    _same(pqo.quantize_linear(x, 2), pqo.quantize_linear(x, np.asarray(2, x_dtype)))


def test_python_int_zero_point_takes_the_output_type():
    _same(pqo.quantize_linear(X, 0.1, 3, output_dtype=TensorProto.INT8),
          pqo.quantize_linear(X, np.float32(0.1), np.int8(3)))
    _same(pqo.quantize_linear(X, 0.1, -3, output_dtype=TensorProto.INT4),
          pqo.quantize_linear(X, np.float32(0.1), np.asarray(-3, ml_dtypes.int4)))
    _same(pqo.quantize_linear(X, 0.1, 0, output_dtype=TensorProto.FLOAT8E4M3FN),
          pqo.quantize_linear(X, np.float32(0.1), output_dtype=TensorProto.FLOAT8E4M3FN))
    with pytest.raises(ValueError, match="y_zero_point: -3 does not fit uint8"):
        pqo.quantize_linear(X, 0.1, -3)
    with pytest.raises(ValueError, match="y_zero_point: 9 does not fit int4"):
        pqo.quantize_linear(X, 0.1, 9, output_dtype=TensorProto.INT4)


def test_dequantize_python_scalars():
    q = pqo.quantize_linear(X, np.float32(0.1), np.int8(3))
    _same(pqo.dequantize_linear(q, 0.1, 3), pqo.dequantize_linear(q, np.float32(0.1), np.int8(3)))
    with pytest.raises(ValueError, match="x_zero_point: 300 does not fit int8"):
        pqo.dequantize_linear(q, 0.1, 300)


def test_quark_python_scalars():
    _same(pqq.extended_quantize_linear(X, 0.1), pqq.extended_quantize_linear(X, np.float32(0.1)))
    _same(pqq.extended_quantize_linear(X, 0.1, 7), pqq.extended_quantize_linear(X, np.float32(0.1), np.uint8(7)))
    with pytest.raises(ValueError, match="y_zero_point: -3 does not fit uint8.*np.int16"):
        pqq.extended_quantize_linear(X, 0.1, -3)
    q = pqq.extended_quantize_linear(X, np.float32(0.1), np.int16(-5))
    _same(pqq.extended_dequantize_linear(q, 0.1, -5),
          pqq.extended_dequantize_linear(q, np.float32(0.1), np.int16(-5)))


def test_non_weak_scalars_keep_their_type():
    """numpy scalars are not weak: a float64 scale stays an error naming y_scale, as documented."""
    with pytest.raises(TypeError, match="y_scale has dtype float64"):
        pqo.quantize_linear(X, np.float64(0.1))
    with pytest.raises(TypeError, match="y_scale"):
        pqo.quantize_linear(X, True)


# ---- integer attributes ----------------------------------------------------------------------------
BAD_INTS = [(1.5, TypeError), ("1", TypeError), (True, TypeError), (None, TypeError), (np.float32(1), TypeError),
            (2**63, ValueError), (-(2**63) - 1, ValueError), (2**80, ValueError)]
ATTR_CALLS = {
    "quantize_linear/axis": lambda v: pqo.quantize_linear(X, SCALE, axis=v),
    "quantize_linear/block_size": lambda v: pqo.quantize_linear(X, SCALE, axis=1, block_size=v),
    "dequantize_linear/axis": lambda v: pqo.dequantize_linear(np.ones((3, 4), np.uint8), SCALE, axis=v),
    "dequantize_linear/block_size": lambda v: pqo.dequantize_linear(np.ones((3, 4), np.uint8), SCALE, block_size=v),
    "extended_quantize_linear/axis": lambda v: pqq.extended_quantize_linear(X, SCALE, axis=v),
    "extended_dequantize_linear/axis": lambda v: pqq.extended_dequantize_linear(np.ones((3, 4), np.uint8), SCALE,
                                                                                axis=v),
}


@pytest.mark.parametrize("value,error", BAD_INTS, ids=[repr(v) for v, _ in BAD_INTS])
@pytest.mark.parametrize("call", sorted(ATTR_CALLS))
def test_bad_integer_attribute_is_named(call, value, error):
    name = call.split("/")[1]
    with pytest.raises(error, match=f"^{name}: ") as info:
        ATTR_CALLS[call](value)
    _no_internal_names(info)


@pytest.mark.parametrize("call", sorted(ATTR_CALLS))
def test_numpy_integer_attributes_work(call):
    ATTR_CALLS[call](np.int64(1) if "axis" in call else np.int32(0) if "quantize_linear/" in call else 0)


@pytest.mark.parametrize("name", ["output_dtype", "precision"])
@pytest.mark.parametrize("value,error", [(2**40, ValueError), (-1, ValueError), (1.0, TypeError),
                                         ("INT8", TypeError), (True, TypeError)])
def test_dtype_attributes(name, value, error):
    with pytest.raises(error, match=f"^{name}: ") as info:
        pqo.quantize_linear(X, SCALE, axis=1, **{name: value})
    _no_internal_names(info)


@pytest.mark.parametrize("value,error", [(2, ValueError), (-1, ValueError), (0.5, TypeError), ("1", TypeError),
                                         (None, TypeError)])
def test_saturate(value, error):
    with pytest.raises(error, match="^saturate: "):
        pqo.quantize_linear(X, SCALE, axis=1, output_dtype=TensorProto.FLOAT8E4M3FN, saturate=value)
    for ok in (0, 1, True, False, np.int8(1)):
        pqo.quantize_linear(X, SCALE, axis=1, output_dtype=TensorProto.FLOAT8E4M3FN, saturate=ok)


@pytest.mark.parametrize("value", [None, 1, b"quark"])
def test_quark_semantics_type(value):
    with pytest.raises(TypeError, match="^semantics: "):
        pqq.extended_quantize_linear(X, SCALE, axis=1, semantics=value)


# ---- malformed shapes, dtypes, absurd values -----------------------------------------------------------
def test_shapes_dtypes_and_values_are_named():
    with pytest.raises(ValueError, match="x: rank 9"):
        pqo.quantize_linear(np.zeros((1,) * 9, np.float32), np.float32(1))
    with pytest.raises(TypeError, match="x: unsupported dtype"):
        pqo.quantize_linear(np.array(["a"]), np.float32(1))
    with pytest.raises(TypeError, match="y_scale: unsupported dtype"):
        pqo.quantize_linear(X, np.complex64(1))
    with pytest.raises(ValueError, match="axis"):
        pqo.quantize_linear(X, SCALE, axis=2**62)
    with pytest.raises(ValueError, match="block_size"):
        pqo.quantize_linear(X, SCALE.reshape(1, 4), axis=0, block_size=-(2**62))
    with pytest.raises(ValueError, match="axis"):
        pqq.extended_quantize_linear(X, SCALE, axis=-(2**63))


# ---- upgrade_model ------------------------------------------------------------------------------------
def _qdq_model() -> onnx.ModelProto:
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [2])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])


def test_upgrade_model_arguments(tmp_path):
    model = _qdq_model()
    with pytest.raises(TypeError, match="model: expected an onnx.ModelProto, a path .* got NoneType"):
        pqo.upgrade_model(None)
    with pytest.raises(TypeError, match="model: .* got int"):
        pqo.needs_upgrade(3)
    # bytes are a serialized model, as onnx.load_model_from_string reads them
    from_bytes = pqo.upgrade_model(model.SerializeToString())
    assert from_bytes == pqo.upgrade_model(model)
    assert from_bytes.graph.node[0].domain == pqo.POLYQUANT_DOMAIN
    with pytest.raises(ValueError, match="model: the .* bytes given are not a serialized ONNX model"):
        pqo.upgrade_model(b"\xff" * 300)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        pqo.upgrade_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="model: no such file"):
        pqo.upgrade_model(tmp_path / "missing.onnx")
    text = tmp_path / "notes.txt"
    text.write_text("# not a model\n" * 20)
    with pytest.raises(ValueError, match="is not an ONNX model file"):
        pqo.upgrade_model(text)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert pqo.upgrade_model(path) == pqo.upgrade_model(model)


@pytest.mark.parametrize("opset,error", [(-1, ValueError), (0, ValueError), (10**6, ValueError),
                                         (2**70, ValueError), (21.0, TypeError), ("21", TypeError),
                                         (True, TypeError)])
def test_upgrade_model_opset_is_validated(opset, error):
    model = _qdq_model()
    with pytest.raises(error, match="^opset: "):
        pqo.upgrade_model(model, opset=opset)
    assert model.opset_import[0].version == 28  # untouched
    lowered = pqo.upgrade_model(model, opset=21)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [21]


# ---- ONNX Runtime: every Q/DQ op names itself once in its messages -----------------------------------
OPS = [("com.amd.quark", "ExtendedQuantizeLinear"), ("com.amd.quark", "ExtendedDequantizeLinear"),
       ("com.vai.quantize", "VitisQuantizeLinear"), ("com.vai.quantize", "VitisDequantizeLinear"),
       ("polyquant.onnx", "QuantizeLinear"), ("polyquant.onnx", "DequantizeLinear")]


def _malformed(domain: str, op: str, named: bool, kind: str) -> onnx.ModelProto:
    """A one-node model the op refuses: at run time (a scale of the wrong length) or at session
    creation (an axis attribute that is a string)."""
    quantize = "Dequantize" not in op
    x_type = TensorProto.FLOAT if quantize else TensorProto.UINT8
    y_type = TensorProto.UINT8 if quantize else TensorProto.FLOAT
    attrs = {"axis": "one"} if kind == "attribute" else {"axis": 1}
    node = helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain, name="n" if named else "", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, [2, 3])],
                              [helper.make_tensor_value_info("y", y_type, [2, 3])],
                              [helper.make_tensor("s", TensorProto.FLOAT, [2], [0.5, 0.25]),  # axis 1 has 3
                               helper.make_tensor("z", TensorProto.UINT8, [2], [0, 0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(domain, 1)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kind", ["input", "attribute"])
@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
@pytest.mark.parametrize("domain,op", OPS, ids=[op for _, op in OPS])
def test_ort_messages_name_the_op_once(domain, op, named, kind):
    ort = pytest.importorskip("onnxruntime")
    import polyquant.ort

    try:
        options = polyquant.ort.session_options()
    except FileNotFoundError as e:  # a build without the ORT library
        pytest.skip(str(e))
    model = _malformed(domain, op, named, kind)
    x = np.zeros((2, 3), np.float32 if "Dequantize" not in op else np.uint8)
    with pytest.raises(Exception) as info:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, {"x": x})
    message = str(info.value)
    assert ("x_scale" if "Dequantize" in op else "y_scale") in message or "axis" in message, message
    # the op's own name once (ORT's own framing names the op type once more, before "Status Message")
    ours = message.split("Status Message:", 1)[-1]
    assert ours.count(op) == 1, message
    assert f"{op}: {op}" not in message and "Extended" not in ours.replace(op, ""), message
    if named:
        assert f"{op} node 'n': " in ours, message


# ---- pack / unpack ------------------------------------------------------------------------------------
def test_unpack_arguments():
    packed = pqo.pack(np.zeros(6, ml_dtypes.int4))
    assert pqo.unpack(packed, "int4", np.array([2, 3])).shape == (2, 3)
    assert pqo.unpack(packed, ml_dtypes.int4, np.int64(6)).shape == (6,)
    for shape in (2.5, (2, 1.5), ("2", 3), (True, 6), None):
        with pytest.raises(TypeError, match="^shape: "):
            pqo.unpack(packed, "int4", shape)
    with pytest.raises(ValueError, match="^shape: "):
        pqo.unpack(packed, "int4", (-2, 3))
    for dtype in ("int3", "no_such_type", 3.5):
        with pytest.raises(TypeError, match="^dtype: unpack takes"):
            pqo.unpack(packed, dtype, 6)
    with pytest.raises(ValueError, match="packed: 3 bytes hold at most 6"):
        pqo.unpack(packed, "int4", 7)


def test_unpack_takes_only_byte_values():
    """A wider integer array of bytes is taken as bytes; a value outside [0, 255] or a non-integer
    array is an error (a uint8 cast would wrap 1000 to 232 and -1 to 255 silently)."""
    packed = pqo.pack(np.arange(-8, 8, dtype=np.int8).astype(ml_dtypes.int4))
    same = pqo.unpack(packed.astype(np.int64), "int4", 16)
    assert np.array_equal(same.view(np.uint8), pqo.unpack(packed, "int4", 16).view(np.uint8))
    for bad in (np.array([1000, 0]), np.array([-1, 0]), np.array([256], np.uint16)):
        with pytest.raises(ValueError, match=r"^packed: byte values must lie in \[0, 255\]"):
            pqo.unpack(bad, "int4", 2)
    for bad in (np.array([1.0, 2.0]), np.array(["a"])):
        with pytest.raises(TypeError, match="^packed: "):
            pqo.unpack(bad, "int4", 2)


QONNX_OPS = {  # op: (initializers after x, attributes); the scale of length 4 cannot broadcast with x (2, 3)
    "IntQuant": (["s", "z", "b"], {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}),
    "Trunc": (["s", "z", "b", "o"], {"rounding_mode": "FLOOR"}),
    "BipolarQuant": (["s"], {}),
    "FloatQuant": (["s", "e", "m", "bias", "mx"], {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1,
                                                   "rounding_mode": "ROUND"}),
}


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
@pytest.mark.parametrize("op,kind", [(op, kind) for op in sorted(QONNX_OPS) for kind in ("input", "attribute")
                                     if (op, kind) != ("BipolarQuant", "attribute")])  # it reads no attributes
def test_ort_qonnx_messages_name_the_op_once(op, kind, named):
    """The same class in the QONNX ops of the library: the core's "IntQuant: ..." label and the
    attribute reader's "(IntQuant reads it as one)" came on top of the kernel's prefix."""
    ort = pytest.importorskip("onnxruntime")
    import polyquant.ort

    try:
        options = polyquant.ort.session_options()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    names, attrs = QONNX_OPS[op]
    attrs = dict(attrs)
    if kind == "attribute":
        attrs["rounding_mode"] = 7  # an int where a string is read
    values = {"s": [1.0] * 4, "z": 0.0, "b": 8.0, "o": 4.0, "e": 4.0, "m": 3.0, "bias": 7.0, "mx": 240.0}
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [4] if n == "s" else [], np.atleast_1d(values[n]).tolist())
             for n in names]
    node = helper.make_node(op, ["x"] + names, ["y"], domain="qonnx.custom_op.general", name="n" if named else "",
                            **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("qonnx.custom_op.general", 1)])
    model.ir_version = 8
    with pytest.raises(Exception) as info:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, {"x": np.zeros((2, 3), np.float32)})
    message = str(info.value)
    ours = message.split("Status Message:", 1)[-1]
    assert ("broadcast" if kind == "input" else "rounding_mode") in ours, message
    assert ours.count(op) == 1, message
    if named:
        assert f"{op} node 'n': " in ours, message


def test_the_ops_import_without_the_onnx_package() -> None:
    """polyquant.onnx's quantize / dequantize need only numpy: the onnx package is imported when a
    model tool (upgrade_model, needs_upgrade, onnxruntime_max_opset, POLYQUANT_DOMAIN) is first used."""
    import subprocess
    import sys

    script = ("import sys, numpy as np, polyquant.onnx as po\n"
              "po.quantize_linear(np.ones(4, np.float32), np.float32(0.5))\n"
              "assert 'onnx' not in sys.modules, 'onnx imported by the ops'\n"
              "assert po.POLYQUANT_DOMAIN == 'polyquant.onnx' and 'onnx' in sys.modules\n"
              "assert 'upgrade_model' in dir(po)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
