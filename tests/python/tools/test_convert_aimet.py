"""`polyquant convert MODEL.onnx --encodings ENC.json`: a float model plus AIMET encodings -> a QDQ model
with the encodings' parameters, and a per-tensor report of where ONNX's division differs from
AIMET's reciprocal multiplication (its no-grad quantize_dequantize)."""

from __future__ import annotations

import io
import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyquant.onnx as pqo
from polyquant._tools import cli, convert as conv
from polyquant._tools.convert_aimet import INTEGER_DTYPES, INTEGER_NUMPY
from polyquant._tools.runner import CommandError
from polyquant.aimet import functional

SCALE = float(np.float32(0.02))


def float_model():
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def encodings():
    return {"version": "2.1.0", "encodings": [
        {"name": "x", "output_dtype": "uint8", "y_scale": [SCALE], "y_zero_point": [128]},
        {"name": "w", "output_dtype": "int8", "y_scale": [0.01, 0.02, 0.03], "y_zero_point": [0, 0, 0], "axis": 1},
        {"name": "h", "output_dtype": "int16", "y_scale": [0.001]},
    ]}


def plain(model):
    return ort.InferenceSession(model.SerializeToString(), conv.exact_session_options(), providers=["CPUExecutionProvider"])


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_the_qdq_model_holds_the_encodings_parameters():
    r = conv.convert(float_model(), encodings=encodings())
    assert not r.refused and [t.name for t in r.tensors] == ["x", "w", "h"]
    g = r.model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    by_input = {}
    for n in g.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            by_input.setdefault(n.op_type, []).append((n, inits[n.input[1]], inits[n.input[2]]))
    scales = sorted(tuple(np.asarray(s).reshape(-1).tolist()) for _, s, _ in by_input["DequantizeLinear"])
    assert scales == sorted([(SCALE,), tuple(np.float32([0.01, 0.02, 0.03]).tolist()), (float(np.float32(0.001)),)])
    zps = {np.asarray(z).dtype.name for _, _, z in by_input["DequantizeLinear"]}
    assert zps == {"uint8", "int8", "int16"}
    # The model in plain onnxruntime: x's pair is polyquant.onnx's DQ(Q(x)), so y is Relu(DQ(Q(DQ(Q(x)) @ DQ(Wq)))).
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 4)) * 2).astype(np.float32)
    x[0] = [np.nan, -0.0, np.inf, -np.inf]
    x[1] = (np.arange(4) + 0.5) * np.float32(SCALE)
    xq = pqo.dequantize_linear(pqo.quantize_linear(x, np.float32(SCALE), np.uint8(128)), np.float32(SCALE), np.uint8(128))
    w = numpy_helper.to_array(float_model().graph.initializer[0])
    ws, wz = np.float32([0.01, 0.02, 0.03]), np.zeros(3, np.int8)
    wq = pqo.dequantize_linear(pqo.quantize_linear(w, ws, wz, axis=1), ws, wz, axis=1)
    got = plain(r.model).run(None, {"x": x})[0]
    # Rebuild the expected output with onnxruntime's MatMul on the dequantized operands, then h's pair.
    mm = plain(_matmul_model(np.asarray(wq, np.float32))).run(None, {"x": np.asarray(xq, np.float32)})[0]
    hq = pqo.dequantize_linear(pqo.quantize_linear(mm, np.float32(0.001), np.int16(0)), np.float32(0.001), np.int16(0))
    np.testing.assert_array_equal(bits(got), bits(np.maximum(hq, 0)))


def _matmul_model(w):
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def test_the_report_finds_diffs_68_ties_at_scale_0_02():
    """uint8, scale 0.02, zero point 128: polyquant diff's exhaustive sweep finds 68 float32 inputs where
    AIMET's no-grad path and ONNX QDQ differ, all rounding ties (docs/diff.md); the tie sample finds
    the same 68, and they are exactly where the written model's pair and AIMET's no-grad path differ."""
    r = conv.convert(float_model(), encodings=encodings())
    x_row = next(t for t in r.tensors if t.name == "x")
    assert x_row.status == "differs" and x_row.differing == 68 and x_row.kinds == {"rounding tie": 68}
    assert "DIFFER on 68" in str(r) and "aimet:quantize_dequantize(scale=0.019999999552965164, offset=-128" in str(r)
    # Independent recount on the same inputs: the written pair (plain onnxruntime) against AIMET's no-grad path.
    from polyquant._tools.convert_aimet import _tie_sample
    x = _tie_sample(SCALE, 128, 0, 255)
    pair = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                              helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(np.float32(SCALE), "s"), numpy_helper.from_array(np.uint8(128), "z")])
    m = helper.make_model(pair, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx_y = plain(m).run(None, {"x": x})[0]
    aimet_y = functional._qdq_forward(x, np.float32(SCALE), np.float32(-128), (8, False), {}, training=False)
    differ = bits(onnx_y) != bits(aimet_y)
    assert int(differ.sum()) == 68


def test_the_weight_tensor_itself_is_counted():
    """A weight's row says how many of its own elements AIMET's no-grad path and the written Q/DQ give
    differently; recounted here with a weight holding x = 0.09, where at scale 0.02 x * (1 / 0.02) rounds
    to 4 and 0.09 / 0.02 to 5 (docs/diff.md's smallest example)."""
    m = float_model()
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[:, 1] = np.float32([0.09, -0.09, 0.09, 0.5])
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    r = conv.convert(m, encodings=encodings())
    row = next(t for t in r.tensors if t.name == "w")
    ws, wz = np.float32([0.01, 0.02, 0.03]), np.zeros(3, np.int8)
    onnx_w = pqo.dequantize_linear(pqo.quantize_linear(w, ws, wz, axis=1), ws, wz, axis=1)
    aimet_w = functional._qdq_forward(w, ws.reshape(1, 3), np.zeros((1, 3), np.float32), (8, True), {}, training=False)
    expected = int((bits(onnx_w) != bits(aimet_w)).sum())
    assert expected >= 3 and row.reason == f"its weight tensor: {expected} of 12 elements differ"


@pytest.mark.parametrize("change,reason", [
    (lambda e: e["encodings"].append({"name": "nope", "output_dtype": "int8", "y_scale": [0.1]}), "no tensor named"),
    (lambda e: e["encodings"][1].update(block_size=2), "block_size 2 does not divide the weight's axis 1 (length 3)"),
    (lambda e: e["encodings"][0].update(output_dtype="float8"), "output_dtype 'float8'"),
    (lambda e: e["encodings"][0].update(y_zero_point=[300]), "outside uint8's range"),
    (lambda e: e["encodings"][0].update(y_scale=[0.0]), "positive finite"),
])
def test_refusals_name_the_encoding(change, reason):
    e = encodings()
    change(e)
    r = conv.convert(float_model(), encodings=e)
    assert r.refused and reason in r.refused[0].reason


def test_bad_files():
    with pytest.raises(CommandError, match="version '3.0.0' is not converted"):
        conv.convert(float_model(), encodings={"version": "3.0.0", "encodings": []})
    with pytest.raises(CommandError, match="'param_encodings' is a list"):
        conv.convert(float_model(), encodings={"version": "1.0.0", "param_encodings": {}})
    with pytest.raises(CommandError, match="cannot read"):
        conv.convert(float_model(), encodings="/nonexistent/enc.json")
    with pytest.raises(CommandError, match="to='onnx'"):
        conv.convert(float_model(), to="qonnx", encodings=encodings())


def test_cli(tmp_path):
    import onnx
    model, enc, out = tmp_path / "float.onnx", tmp_path / "enc.json", tmp_path / "qdq.onnx"
    onnx.save(float_model(), model)
    enc.write_text(json.dumps(encodings()))
    o = io.StringIO()
    assert cli.main(["convert", str(model), "--encodings", str(enc), "-o", str(out)], out=o) == 0
    text = o.getvalue()
    assert out.exists() and "3 of 3 encodings written as Q/DQ pairs" in text and "NOTE: on 3 tensor(s)" in text
    e = encodings()
    e["encodings"][0]["name"] = "nope"
    enc.write_text(json.dumps(e))
    out.unlink()
    assert cli.main(["convert", str(model), "--encodings", str(enc), "-o", str(out)], out=io.StringIO()) == 1
    assert not out.exists()


def test_encodings_round_trip_through_the_qdq_model():
    """encodings -> QDQ model -> encodings: the same names, dtypes, scales (bit for bit), zero points
    and axes."""
    r = conv.convert(float_model(), encodings=encodings(), check="none")
    back = conv.convert(r.model, to="aimet")
    assert not back.refused and back.encodings["version"] == "2.1.0"
    got = {e["name"]: e for e in back.encodings["encodings"]}
    for e in encodings()["encodings"]:
        g = got[e["name"]]
        assert g["output_dtype"] == e["output_dtype"] and g.get("axis") == e.get("axis")
        np.testing.assert_array_equal(np.float32(g["y_scale"]).view(np.uint32), np.float32(e["y_scale"]).view(np.uint32))
        assert list(g.get("y_zero_point", [0] * len(g["y_scale"]))) == list(e.get("y_zero_point", [0] * len(e["y_scale"])))
    # and the encodings written back convert to the same QDQ model parameters again
    again = conv.convert(float_model(), encodings=back.encodings, check="none")
    assert not again.refused


def test_cli_to_aimet(tmp_path):
    import onnx
    qdq, enc = tmp_path / "qdq.onnx", tmp_path / "enc.json"
    onnx.save(conv.convert(float_model(), encodings=encodings(), check="none").model, qdq)
    o = io.StringIO()
    assert cli.main(["convert", str(qdq), "--to", "aimet", "-o", str(enc)], out=o) == 0
    assert "3 of 3 Q/DQ parameters written as AIMET 2.1.0 encodings" in o.getvalue()
    assert {e["name"] for e in json.loads(enc.read_text())["encodings"]} == {"x", "w", "h"}


def test_to_aimet_refuses_a_clip_it_cannot_hold():
    """Q -> Clip -> DQ (qonnx's QCDQ, a narrower grid): an encoding holds the dtype's whole grid, so the
    tensor is refused by name instead of written wider than it is."""
    from polyquant._tools.convert_aimet import to_encodings
    inits = [numpy_helper.from_array(np.float32(0.02), "s"), numpy_helper.from_array(np.int8(0), "z"),
             numpy_helper.from_array(np.int8(-127), "lo"), numpy_helper.from_array(np.int8(127), "hi")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), helper.make_node("Clip", ["q", "lo", "hi"], ["c"]),
             helper.make_node("DequantizeLinear", ["c", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    r = to_encodings(m)
    assert [t.status for t in r.tensors] == ["refused"] and "Clip" in r.tensors[0].reason


# ---- 1.0.0 / 0.6.1 files -------------------------------------------------------------------------------

def qdq_parameters(model):
    """Each DequantizeLinear's output -> its scale, zero point (values and dtype) and axis (of a
    per-channel weight, counted from the front: 2.x files may say -1 for the last)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            s, z = inits[n.input[1]], inits[n.input[2]]
            axis = None
            if np.asarray(s).size > 1:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 1) % inits[n.input[0]].ndim
            out[n.output[0]] = (np.asarray(s).reshape(-1).tolist(), str(z.dtype), np.asarray(z).reshape(-1).tolist(), axis)
    return out


@pytest.mark.parametrize("version", ["1.0.0", "0.6.1"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_legacy_files_convert_as_their_2_1_0_export(version, symmetric):
    import polyquant
    from .test_calibrate import batches, small_model
    model, data = small_model(), batches(2)
    modern = polyquant.calibrate(model, data, per_channel=True, symmetric=symmetric).encodings
    legacy = polyquant.calibrate(model, data, per_channel=True, symmetric=symmetric, encoding_version=version).encodings
    a, b = conv.convert(model, encodings=modern), conv.convert(model, encodings=legacy)
    assert not a.refused and not b.refused
    assert sorted(t.name for t in b.tensors) == ["conv.w", "f", "fc.w", "x", "y"]
    params = qdq_parameters(b.model)
    assert params == qdq_parameters(a.model) and len(params) == 5
    x = data[0]["x"]
    np.testing.assert_array_equal(bits(plain(b.model).run(None, {"x": x})[0]), bits(plain(a.model).run(None, {"x": x})[0]))


def test_legacy_encodings_without_a_qdq_form_are_refused_by_name():
    enc = {"version": "1.0.0", "activation_encodings": [
        {"name": "x", "dtype": "INT", "bw": 8, "is_sym": False, "scale": [0.1, 0.2, 0.3, 0.4], "offset": [0, 0, 0, 0],
         "enc_type": "PER_CHANNEL"},
        {"name": "h", "dtype": "FLOAT", "bw": 16, "is_sym": False, "scale": [0.1], "offset": [0], "enc_type": "PER_TENSOR"}],
        "param_encodings": [
        {"name": "w", "dtype": "INT", "bw": 4, "is_sym": True, "scale": [0.1, 0.2], "offset": [-8, -8],
         "enc_type": "PER_BLOCK", "block_size": 2}]}
    r = conv.convert(float_model(), encodings=enc)
    reasons = {t.name: t.reason for t in r.refused}
    assert "does not record the axis" in reasons["x"]
    assert "'dtype'" in reasons["h"] and "w" not in reasons  # 1.0.0 PER_BLOCK converts (blockwise section below)
    assert next(t for t in r.tensors if t.name == "w").params == "int4, axis 0, block_size 2, 2 blocks"
    # A square weight: the consumer (MatMul) tells the axis; 0.6.1 per-channel lists, one dict per channel.
    w = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    channel = [{"bitwidth": 8, "dtype": "int", "is_symmetric": "True", "min": -1.0, "max": 1.0, "offset": -128,
                "scale": s} for s in (0.01, 0.02, 0.03)]
    r = conv.convert(m, encodings={"version": "0.6.1", "activation_encodings": {}, "param_encodings": {"w": channel}})
    assert not r.refused and qdq_parameters(r.model)["w__dequantized"][3] == 1


@pytest.mark.parametrize("version", ["1.0.0", "0.6.1"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_to_aimet_writes_the_older_layouts_as_aimet_exports_them(version, symmetric):
    """A QDQ model's encodings in 1.0.0 / 0.6.1 equal polyquant calibrate's export of the same
    quantizers in that version (AIMET's own writer), and read back to the same Q/DQ model."""
    import polyquant
    from .test_calibrate import batches, small_model
    model, data = small_model(), batches(2)
    calibrated = polyquant.calibrate(model, data, per_channel=True, symmetric=symmetric, encoding_version=version)
    qdq = conv.convert(model, encodings=calibrated.encodings).model
    r = polyquant.convert(qdq, to="aimet", encoding_version=version)
    assert not r.refused and r.encodings["version"] == version
    want = calibrated.encodings
    for key in ("activation_encodings", "param_encodings"):
        got = r.encodings[key]
        if version == "1.0.0":
            assert sorted(got, key=lambda e: e["name"]) == sorted(want[key], key=lambda e: e["name"])
        else:
            assert got == want[key]
    again = conv.convert(model, encodings=r.encodings).model
    assert qdq_parameters(again) == qdq_parameters(qdq)


def test_to_aimet_older_layouts_from_the_cli_and_bad_versions(tmp_path):
    import onnx
    with pytest.raises(CommandError, match="encoding_version"):
        conv.convert(float_model(), to="aimet", encoding_version="2.0.0")
    qdq = conv.convert(float_model(), encodings=encodings()).model
    path, out = tmp_path / "qdq.onnx", tmp_path / "enc.json"
    onnx.save(qdq, path)
    o = io.StringIO()
    assert cli.main(["convert", str(path), "--to", "aimet", "--encoding-version", "0.6.1", "-o", str(out)], out=o) == 0
    written = json.loads(out.read_text())
    assert written["version"] == "0.6.1" and set(written["param_encodings"]) == {"w"}
    assert len(written["param_encodings"]["w"]) == 3 and set(written["activation_encodings"]) == {"x", "h"}


# ---- blockwise and LPBQ weights ----------------------------------------------------------------------------
# The expected values come from polyquant.aimet (bit-exact with AIMET on the committed golden data): its
# quantizers calibrated on the weight, their own exports (to_qnn_encoding_dict) as the encodings, and their own
# forward (q(w): AIMET's no-grad blockwise quantize_dequantize) as what the written model must compute.

from polyquant.aimet import GroupedBlockQuantizeDequantize, QuantizeDequantize  # noqa: E402
from polyquant._tools.convert_aimet import _tie_sample, to_encodings  # noqa: E402


def weight_model(w, op="Gemm", opset=21):
    """x -> op(x, w) -> y, and w itself as a second output (Identity): the written model's dequantized weight
    comes out of plain onnxruntime. Gemm: transB (w is (N, K), torch's Linear layout); MatMul: w is (K, N);
    Conv: w is (C_out, C_in, kH, kW); Identity: w's only consumer is the Identity."""
    nodes = [helper.make_node("Identity", ["w"], ["w_seen"])]
    if op == "Gemm":
        nodes.append(helper.make_node("Gemm", ["x", "w"], ["y"], transB=1))
        x_shape = ["n", w.shape[1]]
    elif op == "MatMul":
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y"]))
        x_shape = ["n", w.shape[0]]
    elif op == "Conv":
        nodes.append(helper.make_node("Conv", ["x", "w"], ["y"]))
        x_shape = [1, w.shape[1], w.shape[2], w.shape[3]]
    else:
        x_shape = ["n"]
        nodes.append(helper.make_node("Identity", ["x"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("w_seen", TensorProto.FLOAT, list(w.shape))],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 7
    return m


def seen_weight(model, w):
    """The weight as the written model computes it (its DequantizeLinear), run in plain onnxruntime."""
    inputs = model.graph.input[0].type.tensor_type.shape.dim
    x = np.zeros([d.dim_value or 1 for d in inputs], np.float32)
    return plain(model).run(["w_seen"], {"x": x})[0]


def file_of(entry, name="w", version="2.1.0"):
    if version == "1.0.0":
        return {"version": "1.0.0", "activation_encodings": [], "param_encodings": [{"name": name, **entry}]}
    return {"version": version, "encodings": [{"name": name, **entry}]}


def calibrated(quantizer, w):
    with quantizer.compute_encodings():
        quantizer(w)
    return quantizer


def blocked_dq(model):
    """The one DequantizeLinear of the written model: (its attributes, scale, zero point) as arrays."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    (n,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    return {a.name: a.i for a in n.attribute}, inits[n.input[1]], inits[n.input[2]], inits[n.input[0]]


RNG = np.random.default_rng(7)
W_GEMM = RNG.standard_normal((4, 32)).astype(np.float32)   # (N, K): blocks along K, axis -1


@pytest.mark.parametrize("bitwidth,symmetric,block", [(4, True, 8), (4, True, 16), (8, True, 8), (8, False, 16)])
def test_blockwise_weight_is_a_blocked_dequantize_equal_to_aimet(bitwidth, symmetric, block):
    """AIMET's 2.1.0 export of a blockwise weight quantizer (int4 / int8 symmetric, uint8 asymmetric) becomes
    the weight's integers and one DequantizeLinear with axis and block_size; its y_scale and y_zero_point
    are the file's bit for bit, and the weight the model computes equals AIMET's blockwise quantize_dequantize
    of it bit for bit (the report says its 64 elements do not differ)."""
    n, k = W_GEMM.shape
    q = calibrated(QuantizeDequantize((n, k // block), bitwidth, symmetric, block_size=(1, block)), W_GEMM)
    entry = q.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=(n, k))
    assert entry["block_size"] == block and entry["axis"] == -1
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(entry))
    assert not r.refused
    attrs, scale, zero, ints = blocked_dq(r.model)
    assert attrs == {"axis": -1, "block_size": block}
    np.testing.assert_array_equal(bits_of(scale), bits_of(np.float32(entry["y_scale"])))
    assert zero.dtype.name == entry["output_dtype"] and ints.dtype.name == entry["output_dtype"]
    want_zero = np.broadcast_to(np.asarray(entry.get("y_zero_point", 0)), scale.shape)
    np.testing.assert_array_equal(zero.astype(np.int64), want_zero)
    assert "w" not in {t.name for t in r.model.graph.initializer}  # stored as integers only
    row = r.tensors[0]
    assert row.params == f"{entry['output_dtype']}, axis -1, block_size {block}, {n * k // block} blocks"
    assert row.reason == f"its weight tensor: 0 of {W_GEMM.size} elements differ"
    np.testing.assert_array_equal(bits(seen_weight(r.model, W_GEMM)), bits(q(W_GEMM)))


def bits_of(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_blockwise_report_counts_are_brute_force_counts_and_ties_go_as_aimet_divides():
    """Each block of the weight holds the report's whole sample for that block's (scale, zero point): every
    rounding tie of its grid with 8 float32 neighbours each side, NaN, infinities and zeros. Run through the
    written model in plain onnxruntime and through AIMET's blockwise quantizer loaded from the same
    encodings, the elements that differ are exactly the report's count, of the kinds it names: only the
    NaNs (AIMET's formula keeps NaN, QuantizeLinear gives an integer). The ties do not differ: with a
    block_size AIMET never takes its reciprocal shortcut and divides as QuantizeLinear does; AIMET's
    per-channel shortcut on the same samples differs on ties (x = 0.09 at scale 0.02: 4 for x * (1 / 0.02),
    5 for 0.09 / 0.02), which the per-channel encoding's report counts."""
    scales = np.float32([[0.02, 0.03], [0.05, 0.07]])
    zero_points = np.array([[0, 3], [-2, 1]])
    samples = [[_tie_sample(float(s), int(z), -128, 127) for s, z in zip(rs, rz)] for rs, rz in zip(scales, zero_points)]
    block = max(x.size for row in samples for x in row)
    # pad each block's sample to one block size with zeros (already in every sample: counted once more)
    w = np.stack([np.concatenate([np.pad(x, (0, block - x.size)) for x in row]) for row in samples]).astype(np.float32)
    entry = {"output_dtype": "int8", "y_scale": scales.tolist(), "y_zero_point": zero_points.tolist(), "axis": 1,
             "block_size": block}
    r = conv.convert(weight_model(w, op="Identity"), encodings=file_of(entry))
    row = r.tensors[0]
    assert row.status == "differs" and row.kinds == {"nan": 4} and row.differing == 4
    assert row.checked == sum(x.size for rs in samples for x in rs)
    aimet_q = QuantizeDequantize((2, 2), 8, False, block_size=(1, block))
    aimet_q.set_qnn_encoding_dict({"name": "w", **entry, "axis": -1}, "2.1.0")
    got, want = seen_weight(r.model, w), aimet_q(w)
    differ = bits(got) != bits(want)
    assert int(differ.sum()) == 4 and np.all(np.isnan(w[differ])) and np.all(np.isnan(want[differ]))
    assert row.reason == f"its weight tensor: 4 of {w.size} elements differ"
    assert "path=formula" in row.specs[0]
    # The same weights per channel: AIMET's shortcut (reciprocal) rounds ties apart from ONNX's division.
    x = np.float32([[0.09], [0.09]])
    one = conv.convert(weight_model(x, op="Identity"),
                       encodings=file_of({"output_dtype": "int8", "y_scale": [0.02, 0.02], "axis": 0}))
    assert one.tensors[0].reason == "its weight tensor: 2 of 2 elements differ"
    blocked = conv.convert(weight_model(x, op="Identity"),
                           encodings=file_of({"output_dtype": "int8", "y_scale": [[0.02], [0.02]], "axis": 1,
                                              "block_size": 1}))
    assert blocked.tensors[0].reason == "its weight tensor: 0 of 2 elements differ"
    assert seen_weight(blocked.model, x).tolist() == [[np.float32(5) * np.float32(0.02)]] * 2
    per_block = functional.quantize_dequantize(x, np.float32([[0.02], [0.02]]), np.zeros((2, 1), np.float32), 8, True,
                                               block_size=(1, 1))
    np.testing.assert_array_equal(bits(seen_weight(blocked.model, x)), bits(per_block))


@pytest.mark.parametrize("version", ["2.1.0", "2.0.0", "1.0.0"])
@pytest.mark.parametrize("grouping", [(1, -1), (1, 2)])
def test_lpbq_scale_is_aimets_float32_product(version, grouping):
    """LPBQ (AIMET's GroupedBlockQuantizeDequantize: int4 blocks of 4, decompressed 8 bits) in each layout
    AIMET exports (2.1.0's y_scale {x, x_scale, axis}, 2.0.0's per_block_int_scale / per_channel_float_scale,
    1.0.0's enc_type LPBQ): the Q/DQ's y_scale is AIMET's own block scale (its encoding's scale, what its
    forward uses) bit for bit, which is the float32 product per_block_int_scale * per_channel_float_scale,
    and the model's weight is AIMET's LPBQ quantize_dequantize of it bit for bit."""
    n, k, block = 4, 32, 4
    g = calibrated(GroupedBlockQuantizeDequantize((n, k // block), 4, True, 8, block_size=(1, block),
                                                  block_grouping=grouping), W_GEMM)
    enc = g.get_encodings()
    assert np.all(enc.per_block_int_scale.max(axis=1) == 16) and enc.per_block_int_scale.min() < 16  # really LPBQ
    entry = enc.to_qnn_encoding_dict(version, input_shape=(n, k))
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(entry, version=version))
    assert not r.refused and r.tensors[0].params.endswith(", LPBQ")
    attrs, scale, zero, ints = blocked_dq(r.model)
    assert attrs["block_size"] == block and attrs["axis"] % 2 == 1 and zero.dtype.name == "int4" and not zero.any()
    np.testing.assert_array_equal(bits_of(scale), bits_of(enc.scale))
    pc = np.repeat(enc.per_channel_scale, (k // block) // enc.per_channel_scale.shape[1], axis=1)
    np.testing.assert_array_equal(bits_of(scale), bits_of(enc.per_block_int_scale.astype(np.float32) * pc))
    assert "LPBQ: y_scale = float32(per_block_int_scale * per_channel_float_scale)" in r.tensors[0].reason
    assert r.tensors[0].reason.endswith(f"its weight tensor: 0 of {W_GEMM.size} elements differ")
    np.testing.assert_array_equal(bits(seen_weight(r.model, W_GEMM)), bits(g(W_GEMM)))


def test_lpbq_at_aimets_float64_working_precision_and_beyond_float32_integers():
    """decompressed_bw - bitwidth = 22 (integer scales up to 2^22): AIMET forms the block scale in float64
    (its working-precision rule) and casts it to float32; the converter's float32 product is the same bits.
    At 26, AIMET's float32 array of integer scales rounds those above 2^24: the exported integers are not
    the ones it multiplied with, so the encoding is refused, saying so."""
    g = calibrated(GroupedBlockQuantizeDequantize((4, 8), 4, True, 26, block_size=(1, 4), block_grouping=(1, -1)),
                   W_GEMM)
    enc = g.get_encodings()
    assert enc.per_block_int_scale.max() == 2**22 and enc.per_block_int_scale.min() < 2**21
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(enc.to_qnn_encoding_dict("2.1.0", input_shape=(4, 32))))
    assert not r.refused
    np.testing.assert_array_equal(bits_of(blocked_dq(r.model)[1]), bits_of(enc.scale))
    np.testing.assert_array_equal(bits(seen_weight(r.model, W_GEMM)), bits(g(W_GEMM)))
    g = calibrated(GroupedBlockQuantizeDequantize((4, 8), 4, True, 30, block_size=(1, 4), block_grouping=(1, -1)),
                   W_GEMM)
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(g.get_encodings().to_qnn_encoding_dict("2.1.0",
                                                                                                  input_shape=(4, 32))))
    assert r.refused and "y_scale.x: integers up to 16777216 (2^24) are converted" in r.refused[0].reason


def test_conv_weight_blocks_and_the_round_trip_back_to_aimet():
    """A Conv weight (C_out, C_in, 3, 3) in blocks of 4 input channels: AIMET's scale (C_out, C_in / 4, 1, 1)
    is repeated over the kernel for ONNX (its blocked y_scale has the weight's shape but the block axis), the
    weight equals AIMET's, and --to aimet gives back the file's y_scale shape, values, axis and block_size
    bit for bit (and AIMET's own 1.0.0 PER_BLOCK export of the quantizer with --encoding-version 1.0.0)."""
    w = RNG.standard_normal((3, 8, 3, 3)).astype(np.float32)
    q = calibrated(QuantizeDequantize((3, 2, 1, 1), 8, False, block_size=(1, 4, 3, 3)), w)
    entry = q.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=w.shape)
    assert entry["axis"] == -3 and entry["block_size"] == 4 and "y_zero_point" in entry
    r = conv.convert(weight_model(w, op="Conv"), encodings=file_of(entry))
    assert not r.refused and r.tensors[0].params == "uint8, axis -3, block_size 4, 6 blocks"
    _, scale, zero, _ = blocked_dq(r.model)
    assert scale.shape == (3, 2, 3, 3) and zero.shape == (3, 2, 3, 3)
    np.testing.assert_array_equal(bits(seen_weight(r.model, w)), bits(q(w)))
    back = to_encodings(r.model)
    assert not back.refused
    (got,) = back.encodings["encodings"]
    assert {k: got[k] for k in ("name", "output_dtype", "axis", "block_size")} == {
        "name": "w", "output_dtype": "uint8", "axis": -3, "block_size": 4}
    np.testing.assert_array_equal(bits_of(got["y_scale"]), bits_of(entry["y_scale"]))
    assert np.asarray(got["y_scale"]).shape == (3, 2, 1, 1) and got["y_zero_point"] == entry["y_zero_point"]
    legacy = to_encodings(r.model, "1.0.0")
    assert not legacy.refused
    assert legacy.encodings["param_encodings"] == [
        {"name": "w", **q.get_encodings().to_qnn_encoding_dict("1.0.0", input_shape=w.shape)}]
    again = conv.convert(weight_model(w, op="Conv"), encodings=legacy.encodings)
    assert not again.refused
    np.testing.assert_array_equal(bits(seen_weight(again.model, w)), bits(q(w)))
    assert "0.6.1 file holds no blockwise" in to_encodings(r.model, "0.6.1").refused[0].reason
    # blocks of 1 on a (2, 1) weight: no block axis, which AIMET's 1.0.0 PER_BLOCK export needs (it fails there)
    x = np.float32([[0.5], [0.25]])
    ones = conv.convert(weight_model(x, op="Identity"), check="none",
                        encodings=file_of({"output_dtype": "int8", "y_scale": [[0.02], [0.03]], "axis": 1, "block_size": 1}))
    assert "AIMET's 1.0.0 export of these parameters fails" in to_encodings(ones.model, "1.0.0").refused[0].reason


def test_round_trip_encodings_qdq_encodings():
    """2.1.0 encodings -> QDQ model -> 2.1.0 encodings: blockwise entries come back with their block_size,
    axis, y_scale (nested, bit for bit) and y_zero_point; an LPBQ entry comes back as the blockwise entry of
    its block scales (a Q/DQ pair holds the products, not the integer / per-channel split), which converts
    to the same model again."""
    n, k = W_GEMM.shape
    w2 = RNG.standard_normal((4, 32)).astype(np.float32)
    q4 = calibrated(QuantizeDequantize((n, k // 8), 4, True, block_size=(1, 8)), W_GEMM)
    q8 = calibrated(QuantizeDequantize((n, k // 16), 8, False, block_size=(1, 16)), w2)
    g = calibrated(GroupedBlockQuantizeDequantize((n, k // 4), 4, True, 8, block_size=(1, 4), block_grouping=(1, -1)),
                   W_GEMM)
    entries = [{"name": "w", **q4.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=(n, k))},
               {"name": "w2", **q8.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=(n, k))},
               {"name": "w3", **g.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=(n, k))}]
    model = weight_model(W_GEMM)
    model.graph.initializer.extend([numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(W_GEMM, "w3")])
    model.graph.node.extend([helper.make_node("Gemm", ["x", "w2"], ["y2"], transB=1),
                             helper.make_node("Gemm", ["x", "w3"], ["y3"], transB=1)])
    model.graph.output.extend([helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y2", "y3")])
    r = conv.convert(model, encodings={"version": "2.1.0", "encodings": entries}, check="none")
    assert not r.refused
    back = to_encodings(r.model)
    got = {e["name"]: e for e in back.encodings["encodings"]}
    for e in entries[:2]:
        b = got[e["name"]]
        assert (b["axis"], b["block_size"], b["output_dtype"]) == (e["axis"], e["block_size"], e["output_dtype"])
        np.testing.assert_array_equal(bits_of(b["y_scale"]), bits_of(e["y_scale"]))
        assert b.get("y_zero_point") == e.get("y_zero_point")
    lpbq = got["w3"]
    assert "per_block_int_scale" not in lpbq and not isinstance(lpbq["y_scale"], dict)
    np.testing.assert_array_equal(bits_of(lpbq["y_scale"]), bits_of(g.get_encodings().scale))
    again = conv.convert(model, encodings=back.encodings, check="none")
    x = RNG.standard_normal((2, k)).astype(np.float32)
    for a, b in zip(plain(again.model).run(None, {"x": x}), plain(r.model).run(None, {"x": x})):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_1_0_0_per_block_reads_as_its_2_1_0_export():
    """AIMET's 1.0.0 PER_BLOCK export (flat scales, block_size only) converts to the Q/DQ of its 2.1.0 export
    of the same quantizer: the blocks' layout from the weight's shape; on a square MatMul weight both axes
    fit and the consumer's output channel axis (MatMul: the last) tells which; with no such consumer the
    encoding is refused by name."""
    w = RNG.standard_normal((16, 16)).astype(np.float32)   # MatMul (K, N): blocks along K, axis 0
    q = calibrated(QuantizeDequantize((2, 16), 4, True, block_size=(8, 1)), w)
    modern = conv.convert(weight_model(w, op="MatMul"),
                          encodings=file_of(q.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=w.shape)))
    legacy_entry = q.get_encodings().to_qnn_encoding_dict("1.0.0", input_shape=w.shape)
    assert legacy_entry["enc_type"] == "PER_BLOCK" and legacy_entry["block_size"] == 8
    legacy = conv.convert(weight_model(w, op="MatMul"), encodings=file_of(legacy_entry, version="1.0.0"))
    assert not modern.refused and not legacy.refused
    (ma, ms, mz, _), (la, ls, lz, _) = blocked_dq(modern.model), blocked_dq(legacy.model)
    assert (ma["axis"] % 2, ma["block_size"]) == (la["axis"], la["block_size"]) == (0, 8)
    np.testing.assert_array_equal(bits_of(ms), bits_of(ls))
    np.testing.assert_array_equal(mz, lz)
    np.testing.assert_array_equal(bits(seen_weight(legacy.model, w)), bits(q(w)))
    unclear = conv.convert(weight_model(w, op="Identity"), encodings=file_of(legacy_entry, version="1.0.0"))
    assert "several layouts of the blocks fit and the weight's consumer does not tell which" in unclear.refused[0].reason


def test_blocked_qdq_raises_the_opset_or_refuses_by_name():
    """Blocked Q/DQ needs the standard opset 21: an opset 13 model is raised by onnx's version converter
    (said in the report) and runs; a model the converter cannot raise (an operator it has no schema for)
    has its blockwise encodings refused, saying why."""
    n, k = W_GEMM.shape
    q = calibrated(QuantizeDequantize((n, k // 8), 4, True, block_size=(1, 8)), W_GEMM)
    enc = file_of(q.get_encodings().to_qnn_encoding_dict("2.1.0", input_shape=(n, k)))
    r = conv.convert(weight_model(W_GEMM, opset=13), encodings=enc)
    assert not r.refused
    assert [o.version for o in r.model.opset_import if o.domain == ""] == [21] and r.model.ir_version >= 10
    assert "standard opset was raised from 13 to 21" in str(r)
    np.testing.assert_array_equal(bits(seen_weight(r.model, W_GEMM)), bits(q(W_GEMM)))
    m = weight_model(W_GEMM, opset=13)
    m.graph.node.append(helper.make_node("NoSuchOp", ["y"], ["z"]))
    r = conv.convert(m, encodings=enc)
    assert r.refused and "the model imports opset 13 and onnx's version converter cannot raise it" in r.refused[0].reason


@pytest.mark.parametrize("dtype", ["int16", "uint16", "int4", "uint4"])
def test_4_and_16_bit_types_raise_the_opset_too(dtype):
    """int4 / uint4 / int16 / uint16 Q/DQ need the standard opset 21 as blocked Q/DQ does: an opset 13
    model is raised (said in the report) and equals polyquant.onnx's DQ(Q(x)) on h."""
    m = float_model()
    m.opset_import[0].version, m.ir_version = 13, 8
    enc = {"version": "2.1.0", "encodings": [{"name": "h", "output_dtype": dtype, "y_scale": [0.05]}]}
    r = conv.convert(m, encodings=enc)
    assert not r.refused, r.refused[0].reason if r.refused else ""
    assert [o.version for o in r.model.opset_import if o.domain == ""] == [21]
    assert f"standard opset was raised from 13 to 21 (onnx's version converter) for the {dtype} Q/DQ" in str(r)
    x = (np.random.default_rng(2).standard_normal((32, 4)) * 3).astype(np.float32)
    h = plain(_matmul_model(numpy_helper.to_array(m.graph.initializer[0]))).run(None, {"x": x})[0]
    zp = np.zeros((), INTEGER_NUMPY[INTEGER_DTYPES[dtype]])
    want = np.maximum(pqo.dequantize_linear(pqo.quantize_linear(h, np.float32(0.05), zp), np.float32(0.05), zp), 0)
    np.testing.assert_array_equal(bits(plain(r.model).run(None, {"x": x})[0]), bits(want))
    m.graph.node.append(helper.make_node("NoSuchOp", ["y"], ["z"]))
    refused = conv.convert(m, encodings=enc)
    assert refused.refused and f"{dtype} Q/DQ needs the standard opset 21" in refused.refused[0].reason


def _lpbq_entry():
    return {"output_dtype": "int4", "y_scale": {"x": [[16, 3], [8, 16], [16, 1], [2, 16]], "x_scale": [0.01, 0.02, 0.03, 0.04],
                                              "axis": -2}, "axis": -1, "block_size": 16}


@pytest.mark.parametrize("change,reason", [
    (lambda e: e.update(block_size=3), "block_size 3 does not divide the weight's axis -1 (length 32)"),
    (lambda e: e.update(block_size="8"), "block_size '8': expected a positive integer"),
    (lambda e: e.pop("axis"), "axis None: expected the block axis, an integer in -2..1"),
    (lambda e: e.update(y_scale=[[0.1] * 3] * 4), "y_scale has 3 blocks along axis -1 (shape [4, 3])"),
    (lambda e: e.update(y_scale=[[0.1] * 4] * 3), "y_scale has shape [3, 4]: along axis -2 it has 3 entries"),
    (lambda e: e.update(y_scale=[[[0.1] * 4] * 4]), "more axes than the weight"),
    (lambda e: e.update(y_zero_point=[[9] * 4] * 4), "y_zero_point outside int4's range -8..7"),
    (lambda e: e.update(y_zero_point=[1, 2]), "y_zero_point: 2 values for the 16 blocks"),
    (lambda e: e.update(y_scale=[[0.1, -0.1, 0.1, 0.1]] * 4), "expected positive finite numbers"),
])
def test_blockwise_refusals_name_the_field(change, reason):
    e = {"output_dtype": "int4", "y_scale": [[0.1] * 4] * 4, "axis": -1, "block_size": 8}
    change(e)
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(e))
    assert r.refused and reason in r.refused[0].reason, r.refused[0].reason


@pytest.mark.parametrize("change,reason", [
    (lambda e: e["y_scale"].update(x=[[16, 2.5]] * 4), "y_scale.x: expected positive integers"),
    (lambda e: e["y_scale"].update(x=[[16, 0]] * 4), "y_scale.x: expected positive integers"),
    (lambda e: e["y_scale"].update(x_scale=[0.01, 0.02, 0.03]), "y_scale.x_scale: 3 per-channel scales for the 8 blocks"),
    (lambda e: e["y_scale"].update(x_scale=[0.01, 0.02, float("inf"), 0.04]), "y_scale.x_scale"),
    (lambda e: e["y_scale"].update(x_scale=[3e38] * 4), "overflow float32"),
    (lambda e: e["y_scale"].update(axis="0"), "y_scale.axis '0': expected the channel axis"),
    (lambda e: e.update(y_zero_point=[[1, 1]] * 4), "LPBQ is symmetric"),
    (lambda e: e.update(per_block_int_scale=[[1, 1]] * 4, per_channel_float_scale=[[0.1]] * 3, y_scale=None),
     "per_channel_float_scale has shape [3, 1]"),
])
def test_lpbq_refusals_name_the_field(change, reason):
    e = _lpbq_entry()
    change(e)
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(e))
    assert r.refused and reason in r.refused[0].reason, r.refused[0].reason


def test_lpbq_literal_entry_and_1_0_0_refusals():
    """A hand-written 2.1.0 LPBQ entry converts to the float32 products; 1.0.0 blockwise entries with no Q/DQ
    form are refused by name (integer scales beyond 2^(bw - compressed_bw), no layout that fits, a missing
    block_size, an activation)."""
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(_lpbq_entry()))
    assert not r.refused
    _, scale, _, _ = blocked_dq(r.model)
    want = np.float32([[16, 3], [8, 16], [16, 1], [2, 16]]) * np.float32([[0.01], [0.02], [0.03], [0.04]])
    np.testing.assert_array_equal(bits_of(scale), bits_of(want))
    lpbq = {"dtype": "INT", "bw": 8, "compressed_bw": 4, "is_sym": True, "enc_type": "LPBQ", "block_size": 16,
            "scale": [0.01, 0.02, 0.03, 0.04], "offset": [-128] * 4, "per_block_int_scale": [16, 17, 1, 16, 16, 2, 3, 16]}
    blocks = {"dtype": "INT", "bw": 8, "is_sym": True, "enc_type": "PER_BLOCK", "block_size": 16, "scale": [0.1] * 5,
              "offset": [-128] * 5}
    cases = [(lpbq, "w", "per_block_int_scale must hold integers in 1..2^(bw - compressed_bw) = 1..16"),
             (blocks, "w", "1.0.0 PER_BLOCK encoding of 5 blocks of 16 on a weight of shape [4, 32]: no layout fits"),
             ({**blocks, "block_size": None}, "w", "block_size None: expected a positive integer"),
             ({**blocks, "scale": [0.1] * 8, "offset": [-128] * 8}, "x", "encoding of an activation")]
    for entry, name, reason in cases:
        r = conv.convert(weight_model(W_GEMM), encodings=file_of(entry, name=name, version="1.0.0"))
        assert r.refused and reason in r.refused[0].reason, r.refused[0].reason


def test_blockwise_activation_is_refused_by_name():
    e = {"output_dtype": "int8", "y_scale": [[0.1] * 4], "axis": 1, "block_size": 8}
    r = conv.convert(weight_model(W_GEMM), encodings=file_of(e, name="x"))
    assert r.refused and "blockwise / LPBQ encoding of an activation" in r.refused[0].reason
