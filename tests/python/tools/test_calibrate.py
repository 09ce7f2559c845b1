"""`polyquant calibrate`: AIMET encodings of a float ONNX model from batches of data (single process).

The analyzers and quantizers themselves are checked against aimet-torch's golden data in
tests/python/aimet; here the plumbing: which tensors, which statistics (recomputed independently from
onnxruntime's intermediate outputs with numpy), the encodings file, the data sources, the CLI."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import polyquant
import polyquant.aimet as A
from polyquant._tools import calibrate as cal
from polyquant._tools import cli
from polyquant._tools.runner import CommandError


def small_model():
    """x (n, 3, 8, 8) -> Conv (4 channels, 3x3) -> Relu -> Reshape -> MatMul (144 x 10) -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "conv.w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "conv.b"),
             numpy_helper.from_array(rng.standard_normal((144, 10)).astype(np.float32), "fc.w"),
             numpy_helper.from_array(np.array([-1, 144], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "fc.w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def batches(n=6, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((2, 3, 8, 8)) * (k + 1)).astype(np.float32)} for k in range(n)]


def intermediate(model, data, names):
    """Every batch's values of `names`, by onnxruntime with those tensors as extra outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in names:
        if n not in {o.name for o in m.graph.output}:
            m.graph.output.append(helper.make_tensor_value_info(n, T.FLOAT, None))
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return [dict(zip(names, s.run(names, b))) for b in data]


def encoding_from_range(lo, hi, shape, input_shape, symmetric=False, bits=8, version="2.1.0"):
    q = A.QuantizeDequantize(shape, bits, symmetric)
    q.set_range(np.asarray(lo, np.float32).reshape(shape), np.asarray(hi, np.float32).reshape(shape))
    return q.get_encodings().to_qnn_encoding_dict(version, input_shape=input_shape)


def test_tensors_are_the_inputs_of_matmul_gemm_conv_and_the_outputs():
    acts, weights = cal.quantizable_tensors(small_model())
    assert acts == ["x", "f", "y"]
    assert [(w[0], w[1], w[2]) for w in weights] == [("conv.w", "Conv", 1), ("fc.w", "MatMul", 1)]


@pytest.mark.parametrize("symmetric", [False, True])
def test_minmax_equals_the_global_range_of_every_batch(symmetric):
    """MinMax over the batches is the min / max over all of them: computed here with numpy from
    onnxruntime's intermediate outputs, turned into AIMET's encoding by polyquant.aimet's quantizer."""
    model, data = small_model(), batches()
    r = polyquant.calibrate(model, data, "minmax", symmetric=symmetric)
    got = {e["name"]: e for e in r.encodings["encodings"]}
    assert r.encodings["version"] == "2.1.0" and r.batches == len(data)
    values = intermediate(model, data, ["x", "f", "y"])

    def expected(every, shape):
        if not symmetric:  # the asymmetric range is the data's min and max
            return encoding_from_range(every.min(), every.max(), (), shape)
        # symmetric: AIMET's analyzer derives the range from max |x|; fed all the data at once here
        an = A.MinMaxEncodingAnalyzer(())
        an.update_stats(every)
        return encoding_from_range(*an.compute_encodings(255, True), (), shape, True)

    for name in ("x", "f", "y"):
        every = np.concatenate([v[name].reshape(-1) for v in values])
        assert got[name] == {"name": name, **expected(every, values[0][name].shape)}, name
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for name in ("conv.w", "fc.w"):
        w = inits[name]
        assert got[name] == {"name": name, **expected(w.reshape(-1), w.shape)}


def test_minmax_does_not_depend_on_the_order_of_batches():
    model, data = small_model(), batches()
    a = polyquant.calibrate(model, data).encodings
    b = polyquant.calibrate(model, data[::-1]).encodings
    assert a == b


@pytest.mark.parametrize("analyzer", ["percentile", "sqnr", "tfenhanced"])
def test_histogram_analyzers_equal_the_analyzer_fed_directly(analyzer):
    model, data = small_model(), batches()
    # AIMET's streaming growth, batch after batch (the default two-pass histograms equal the analyzer fed
    # all the data as one batch instead: test_calibrate_engines.py)
    r = polyquant.calibrate(model, data, analyzer, histograms="aimet")
    got = {e["name"]: e for e in r.encodings["encodings"]}
    values = intermediate(model, data, ["x", "f", "y"])
    for name in ("x", "f", "y"):
        an = cal._make_analyzer(analyzer, (), None, None)
        for v in values:
            an.update_stats(v[name])
        lo, hi = an.compute_encodings(255, False)
        assert got[name] == {"name": name, **encoding_from_range(lo, hi, (), values[0][name].shape)}, name


def test_per_channel_weights_take_the_output_channel():
    r = polyquant.calibrate(small_model(), batches(2), per_channel=True)
    got = {e["name"]: e for e in r.encodings["encodings"]}
    assert len(got["conv.w"]["y_scale"]) == 4 and got["conv.w"]["axis"] == -4   # Conv: (C_out, C_in, kh, kw)
    assert len(got["fc.w"]["y_scale"]) == 10 and got["fc.w"]["axis"] == -1      # MatMul's B: (K, N)
    w = numpy_helper.to_array(next(t for t in small_model().graph.initializer if t.name == "conv.w"))
    lo = w.reshape(4, -1).min(axis=1).reshape(4, 1, 1, 1)
    hi = w.reshape(4, -1).max(axis=1).reshape(4, 1, 1, 1)
    assert got["conv.w"] == {"name": "conv.w", **encoding_from_range(lo, hi, (4, 1, 1, 1), w.shape)}


@pytest.mark.parametrize("version", ["0.6.1", "1.0.0", "2.0.0"])
def test_other_encoding_versions(version):
    e = polyquant.calibrate(small_model(), batches(2), encoding_version=version).encodings
    assert e["version"] == version
    if version == "1.0.0":
        assert [a["name"] for a in e["activation_encodings"]] == ["x", "f", "y"]
        assert [p["name"] for p in e["param_encodings"]] == ["conv.w", "fc.w"]
        assert all(a["enc_type"] == "PER_TENSOR" for a in e["activation_encodings"])
    elif version == "0.6.1":
        assert set(e["activation_encodings"]) == {"x", "f", "y"} and set(e["param_encodings"]) == {"conv.w", "fc.w"}
    else:
        assert [x["name"] for x in e["encodings"]] == ["conv.w", "fc.w", "x", "f", "y"]


def test_data_from_files_and_directories(tmp_path):
    model, data = small_model(), batches(3)
    want = polyquant.calibrate(model, data).encodings
    for k, b in enumerate(data):
        np.savez(tmp_path / f"batch{k}.npz", **b)
    assert polyquant.calibrate(model, tmp_path).encodings == want
    one = tmp_path / "one"
    one.mkdir()
    for k, b in enumerate(data):
        np.save(one / f"b{k}.npy", b["x"])
    assert polyquant.calibrate(model, one).encodings == want
    assert polyquant.calibrate(model, tmp_path / "batch0.npz").batches == 1


def run_cli(*argv):
    out = io.StringIO()
    return cli.main(list(argv), out=out), out.getvalue()


def test_cli_writes_the_encodings(tmp_path):
    model_path = tmp_path / "m.onnx"
    onnx.save(small_model(), model_path)
    for k, b in enumerate(batches(3)):
        np.savez(tmp_path / f"b{k}.npz", **b)
    out = tmp_path / "enc.json"
    status, text = run_cli("calibrate", str(model_path), "--data", str(tmp_path), "--analyzer", "percentile",
                           "--per-channel", "-o", str(out))
    assert status == 0 and "5 tensors calibrated over 3 batches (percentile, 8 bits)" in text
    enc = json.loads(out.read_text())
    assert enc == polyquant.calibrate(small_model(), batches(3), "percentile", per_channel=True).encodings
    status, _ = run_cli("calibrate", str(model_path), "--data", str(tmp_path / "missing"))
    assert status == 2


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_model_carries_the_encodings(per_channel, tmp_path):
    """The Q/DQ model: a pair on every calibrated tensor with the 2.1.0 encodings' parameters, weights
    stored as QuantizeLinear's integers; it runs in onnxruntime, and its quantized input equals
    polyquant.onnx's DequantizeLinear(QuantizeLinear(x)) with those parameters."""
    import polyquant.onnx as pqo
    model, data = small_model(), batches(3)
    r = polyquant.calibrate(model, data, per_channel=per_channel)
    q = r.qdq_model()
    onnx.checker.check_model(q)
    enc = {e["name"]: e for e in r.encodings["encodings"]}
    nodes = {n.name: n for n in q.graph.node}
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) == 3  # x, f, y
    assert sum(n.op_type == "DequantizeLinear" for n in q.graph.node) == 5  # and the two weights
    assert "conv.w" not in inits and "fc.w" not in inits
    for name, e in enc.items():
        dq = nodes[f"{name}__DequantizeLinear"]
        np.testing.assert_array_equal(inits[dq.input[1]], np.asarray(e["y_scale"], np.float32))
        np.testing.assert_array_equal(inits[dq.input[2]].astype(np.int64), np.asarray(e.get("y_zero_point", 0)))
        assert inits[dq.input[2]].dtype == np.dtype(e["output_dtype"])
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "conv.w"))
    e = enc["conv.w"]
    want_q = pqo.quantize_linear(w, np.asarray(e["y_scale"], np.float32), np.asarray(e.get("y_zero_point", 0)).astype(np.uint8),
                                 axis=e.get("axis", 1))
    np.testing.assert_array_equal(inits[nodes["conv.w__DequantizeLinear"].input[0]], want_q)
    # The quantized input through onnxruntime, against polyquant.onnx
    m = onnx.ModelProto()
    m.CopyFrom(q)
    m.graph.output.append(helper.make_tensor_value_info(nodes["x__DequantizeLinear"].output[0], T.FLOAT, None))
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = data[0]["x"]
    y, xq = s.run(None, {"x": x})
    e = enc["x"]
    zp = np.asarray(e.get("y_zero_point", 0)).astype(np.uint8)
    want = pqo.dequantize_linear(pqo.quantize_linear(x, np.float32(e["y_scale"]), zp), np.float32(e["y_scale"]), zp)
    np.testing.assert_array_equal(xq.view(np.uint32), want.view(np.uint32))
    assert y.shape == (2, 10) and np.isfinite(y).all()
    path = tmp_path / "q.onnx"
    r.save(path)
    assert onnx.load(path).graph.node[0].op_type in ("QuantizeLinear", "DequantizeLinear")


@pytest.mark.parametrize("kwargs,match", [
    ({"analyzer": "entropy"}, "analyzer: expected one of minmax"),
    ({"bits": 1}, "bits: expected an integer from 2 to 16"),
    ({"bits": True}, "bits: expected an integer"),
    ({"engine": "spark"}, "engine: expected one of local, ray, dask"),
    ({"workers": 2}, "workers: the local engine runs one worker"),
    ({"encoding_version": "3.0.0"}, "encoding_version: expected one of"),
])
def test_bad_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(CommandError, match=match):
        polyquant.calibrate(small_model(), batches(1), **kwargs)


def test_a_quantized_model_is_refused_by_name():
    with pytest.raises(CommandError, match="has nodes of qonnx.custom_op.general"):
        polyquant.calibrate("tests/data/brevitas/mlp_perchannel.onnx", batches(1))


def test_bad_data():
    with pytest.raises(CommandError, match="lacks input"):
        polyquant.calibrate(small_model(), [{"input": np.zeros((1, 3, 8, 8), np.float32)}])
    with pytest.raises(CommandError, match="no batch was given"):
        polyquant.calibrate(small_model(), [])
    with pytest.raises(CommandError, match="each batch must be a dict"):
        polyquant.calibrate(small_model(), [np.zeros(3)])
    with pytest.raises(CommandError, match="data: expected a path"):
        polyquant.calibrate(small_model(), 42)
