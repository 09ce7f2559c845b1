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
    (lambda e: e["encodings"][1].update(block_size=2), "blockwise / LPBQ"),
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
    assert "'dtype'" in reasons["h"] and "blockwise / LPBQ" in reasons["w"]
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
