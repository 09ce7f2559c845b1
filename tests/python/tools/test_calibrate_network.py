"""Calibration of a small real network exported from torch (two convolutions and a linear layer):
the quantized models that calibrate writes run, and their quantizers compute what the references
compute. The Q/DQ form is checked pair by pair against onnx's reference evaluator on onnxruntime's
own intermediate tensors (whole-model outputs differ in the last bit between the two runtimes'
convolutions, which is not the quantizers' doing); the QONNX form against qonnx's execute_onnx on the
whole model (it runs the standard nodes in onnxruntime, so every bit is comparable)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import polyquant
from polyquant._tools import calibrate as cal
from polyquant._tools import runner
from polyquant._tools.quantized_model import insert_quantizers

torch = pytest.importorskip("torch")


def exported_network():
    """x (n, 3, 16, 16) -> Conv 3x3 (8) -> Relu -> Conv 3x3 stride 2 (8) -> Relu -> Flatten -> Gemm (10)."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2)
            self.fc = torch.nn.Linear(8 * 7 * 7, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.c2(torch.relu(self.c1(x)))).flatten(1))

    torch.manual_seed(0)
    f = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), torch.randn(2, 3, 16, 16), f, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}}, dynamo=False, opset_version=17)
    return onnx.load_from_string(f.getvalue())


def data(n=8, seed=3):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((4, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def network():
    return exported_network()


def session(model, extra_outputs=()):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    types = {v.name: v.type for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for name in extra_outputs:
        out = m.graph.output.add()
        out.name = name
        out.type.CopyFrom(types[name])
    options = ort.SessionOptions()
    # No Q/DQ fusion into QLinearConv (ORT_ENABLE_EXTENDED would change the arithmetic).
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_the_calibrated_tensors_of_the_network(network):
    acts, weights = cal.quantizable_tensors(network)
    assert len(acts) == 4 and len(weights) == 3  # x, two Conv inputs after Relu/Flatten, y; three weights


@pytest.mark.parametrize("analyzer", ["minmax", "percentile"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_pairs_equal_the_onnx_reference_on_onnxruntimes_tensors(network, analyzer, per_channel):
    r = polyquant.calibrate(network, data(), analyzer, per_channel=per_channel, show_progress=False)
    m = r.qdq_model()
    onnx.checker.check_model(m)
    pairs = [n for n in m.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    names = sorted({i for n in pairs for i in list(n.input[:1]) + list(n.output)} - {i.name for i in m.graph.initializer})
    s = session(m, [n for n in names if n not in {o.name for o in m.graph.output} and n != "x"])
    x = data(1, seed=11)[0]
    # Specials through the whole network, and values far beyond the calibrated range (saturated).
    # Not ±inf nor |x / s| >= 2^31: onnx's evaluator casts rint(x / s) to int32 with numpy before it
    # saturates (undefined there), where onnxruntime (and polyquant.onnx) saturate.
    x["x"].reshape(-1)[:5] = [np.nan, -0.0, 1e6, -1e6, 1e-40]
    values = dict(zip([o.name for o in s.get_outputs()], s.run(None, x)))
    values["x"] = x["x"]
    inits = {t.name: t for t in m.graph.initializer}
    for node in pairs:
        # The node alone, in onnx's reference evaluator, on the very tensor onnxruntime gave it.
        inputs = [node.input[0]] if node.input[0] not in inits else []
        g = helper.make_graph([node], "one", [helper.make_empty_tensor_value_info(i) for i in inputs],
                              [helper.make_empty_tensor_value_info(node.output[0])],
                              [inits[i] for i in node.input if i in inits])
        # onnx's evaluator starts its Q/DQ at opset 19; 13's and 21's are the same function for
        # 8-bit per-tensor and per-axis parameters.
        one = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = ReferenceEvaluator(one).run(None, {i: values[i] for i in inputs})[0]
        assert same_bits(values[node.output[0]], want), node.name


def sqnr_db(ref, got):
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    return 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_quantized_network_stays_close_to_the_float_one(network, per_channel):
    """8-bit MinMax on this network: the output's SQNR against the float model is well above 25 dB
    (a wrong scale, axis or zero point sinks it far below)."""
    r = polyquant.calibrate(network, data(), "minmax", per_channel=per_channel, show_progress=False)
    x = data(1, seed=12)[0]
    y_float = session(network).run(None, x)[0]
    y_qdq = session(r.qdq_model()).run(None, x)[0]
    assert sqnr_db(y_float, y_qdq) > 25


@pytest.mark.skipif(runner.reference_unavailable() is not None, reason="needs qonnx")
@pytest.mark.parametrize("symmetric", [False, True])
def test_qonnx_form_equals_qonnx_execution_on_the_whole_network(network, symmetric, tmp_path):
    r = polyquant.calibrate(network, data(), "minmax", symmetric=symmetric, per_channel=True, show_progress=False)
    m = insert_quantizers(r.model, [(t.name, t.kind, t.encoding("2.1.0")) for t in r.tensors], "qonnx")
    path = tmp_path / "net_qonnx.onnx"
    onnx.save(m, path)
    x = data(1, seed=13)[0]
    got = runner.make_session(str(path)).run(None, x)[0]
    want, _ = runner.run_reference(str(path), x, show_progress=False)
    assert same_bits(got, want["y"])


# ---- models exported already quantized: their float network, calibrated again ------------------

BREVITAS = ["conv_perchannel", "mlp_perchannel", "truncavgpool", "bipolar", "fp8"]


def brevitas_case(name):
    from pathlib import Path
    d = Path(__file__).resolve().parents[2] / "data" / "brevitas"
    return onnx.load(d / f"{name}.onnx"), np.load(d / f"{name}.input.npy")


@pytest.mark.parametrize("name", BREVITAS)
def test_brevitas_models_calibrate_through_their_float_network(name, tmp_path):
    """Every quantizer out (an Identity), the float network calibrates; its Q/DQ model runs and each
    calibrated activation's Q/DQ output equals polyquant.onnx's QuantizeLinear / DequantizeLinear of
    the float tensor onnxruntime gives; the QONNX form equals qonnx's own execution."""
    from polyquant._tools.quantized_model import float_model
    import polyquant.onnx as pqo
    model, x = brevitas_case(name)
    fm, removed = float_model(model)
    assert removed and not [n for n in fm.graph.node if n.domain not in ("", "ai.onnx")]
    inp = fm.graph.input[0].name
    rng = np.random.default_rng(5)
    batches_ = [{inp: (x * rng.uniform(0.5, 1.5)).astype(np.float32)} for _ in range(4)]
    r = polyquant.calibrate(fm, batches_, "minmax", per_channel=True, show_progress=False)
    acts = [t for t in r.tensors if t.kind == "activation"]
    assert acts
    m = r.qdq_model()
    onnx.checker.check_model(m)
    out_name = fm.graph.output[0].name
    # The output's Q/DQ pair, on the float tensor the quantized network feeds it (NAME__float).
    s = session(m, [f"{out_name}__float"])
    y, y_float = s.run(None, {inp: x})[:2]
    enc = next(t.encoding("2.1.0") for t in acts if t.name == out_name)
    scale, zero = np.float32(enc["y_scale"]), np.uint8(enc["y_zero_point"])
    assert same_bits(y, pqo.dequantize_linear(pqo.quantize_linear(y_float, scale, zero), scale, zero))
    if runner.reference_unavailable() is None:
        mq = insert_quantizers(r.model, [(t.name, t.kind, t.encoding("2.1.0")) for t in r.tensors], "qonnx")
        path = tmp_path / f"{name}_qonnx.onnx"
        onnx.save(mq, path)
        got = runner.make_session(str(path)).run(None, {inp: x})[0]
        want, _ = runner.run_reference(str(path), {inp: x}, show_progress=False)
        assert same_bits(got, want[out_name])


@pytest.mark.parametrize("example", ["qonnx_mlp", "onnx_qdq_mlp", "quark_mlp"])
def test_the_bundled_examples_calibrate_through_their_float_network(example, tmp_path):
    from pathlib import Path
    from polyquant._tools.quantized_model import float_model
    model = onnx.load(Path(__file__).resolve().parents[3] / "examples" / f"{example}.onnx")
    fm, removed = float_model(model)
    assert removed and not [n for n in fm.graph.node if n.domain not in ("", "ai.onnx")]
    inp = fm.graph.input[0]
    shape = [d.dim_value or 2 for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(6)
    data_ = [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(3)]
    r = polyquant.calibrate(fm, data_, "minmax", show_progress=False)
    # Stored integer weights (QDQ, Quark) came back as their dequantized floats and were calibrated.
    assert [t.name for t in r.tensors if t.kind == "param"] or example == "qonnx_mlp"
    y_float = session(fm).run(None, data_[0])[0]
    # polyquant's session: the QDQ example imports opset 28, whose Q/DQ it runs (onnxruntime 1.32 stops at 25).
    path = tmp_path / "qdq.onnx"
    onnx.save(r.qdq_model(), path)
    y_qdq = runner.make_session(str(path)).run(None, data_[0])[0]
    assert y_qdq.shape == y_float.shape and np.all(np.isfinite(y_qdq))


@pytest.mark.parametrize("analyzer", ["minmax", "sqnr"])
def test_a_two_worker_dask_cluster_equals_one_process(network, dask_cluster, analyzer):
    """The engines' contract on this network: a 2-worker Dask LocalCluster gives the single process's
    encodings and statistics bit for bit (test_calibrate_engines.py does Ray and Dask on a smaller model)."""
    def bits(r):
        return {t.name: (t.encoding("2.1.0"), {k: v.tobytes() if isinstance(v, np.ndarray) else v
                                               for k, v in t.analyzer.state_dict().items()}) for t in r.tensors}

    local = polyquant.calibrate(network, data(), analyzer, per_channel=True, show_progress=False)
    remote = polyquant.calibrate(network, data(), analyzer, per_channel=True, show_progress=False, engine="dask",
                                 address=dask_cluster)
    assert bits(remote) == bits(local) and remote.batches == local.batches


# ---- calibrate's options for these models ------------------------------------------------------

def test_cli_recalibrates_a_brevitas_model_into_qonnx(tmp_path):
    """polyquant calibrate MODEL --from-quantized -o OUT.onnx --model-format qonnx: the float network
    of a Brevitas export, calibrated, written with IntQuant nodes that qonnx executes to the same bits."""
    import io
    from pathlib import Path
    from polyquant._tools import cli
    d = Path(__file__).resolve().parents[2] / "data" / "brevitas"
    x = np.load(d / "conv_perchannel.input.npy")
    np.save(tmp_path / "batch.npy", x)
    out = tmp_path / "recalibrated.onnx"
    text = io.StringIO()
    status = cli.main(["calibrate", str(d / "conv_perchannel.onnx"), "--data", str(tmp_path / "batch.npy"),
                       "--from-quantized", "--per-channel", "-o", str(out), "--model-format", "qonnx"], out=text)
    assert status == 0 and "QONNX IntQuant" in text.getvalue()
    m = onnx.load(out)
    assert {n.op_type for n in m.graph.node if n.domain} == {"IntQuant"}
    if runner.reference_unavailable() is None:
        inp = m.graph.input[0].name
        got = runner.make_session(str(out)).run(None, {inp: x})[0]
        want, _ = runner.run_reference(str(out), {inp: x}, show_progress=False)
        assert same_bits(got, next(iter(want.values())))


def test_result_writes_both_forms(network, tmp_path):
    r = polyquant.calibrate(network, data(), "minmax", show_progress=False)
    r.save(tmp_path / "q.onnx", "qonnx")
    r.save(tmp_path / "d.onnx")
    assert sum(n.op_type == "IntQuant" for n in onnx.load(tmp_path / "q.onnx").graph.node) == len(r.tensors)
    assert sum(n.op_type == "QuantizeLinear" for n in onnx.load(tmp_path / "d.onnx").graph.node) == len(
        [t for t in r.tensors if t.kind == "activation"])
    assert r.qonnx_model().SerializeToString() == r.quantized_model("qonnx").SerializeToString()
    with pytest.raises(polyquant._tools.runner.CommandError, match="form: expected one of qdq, qonnx"):
        r.quantized_model("qlinear")


def test_which_tensors_ops_and_exclude(network):
    every = polyquant.calibrate(network, data(2), "minmax", show_progress=False)
    convs = polyquant.calibrate(network, data(2), "minmax", ops=["Conv"], show_progress=False)
    some = polyquant.calibrate(network, data(2), "minmax", exclude=["y", "x"], show_progress=False)
    names = [t.name for t in every.tensors]
    conv_inputs = {i for n in network.graph.node if n.op_type == "Conv" for i in n.input[:2]}
    assert {t.name for t in convs.tensors} == (conv_inputs | {"y"}) & set(names)
    assert [t.name for t in some.tensors] == [n for n in names if n not in ("x", "y")]
    # The tensors left have the encodings of the full calibration.
    full = {t.name: t.encoding("2.1.0") for t in every.tensors}
    assert all(t.encoding("2.1.0") == full[t.name] for t in convs.tensors + some.tensors)
    with pytest.raises(polyquant._tools.runner.CommandError, match="ops: expected op type names"):
        polyquant.calibrate(network, data(1), ops=["Conv", 3])


def test_quantized_models_are_refused_unless_asked():
    model, x = brevitas_case("conv_perchannel")
    with pytest.raises(polyquant._tools.runner.CommandError, match="--from-quantized"):
        polyquant.calibrate(model, [{"x.103": x}], show_progress=False)
    from pathlib import Path
    qdq = onnx.load(Path(__file__).resolve().parents[3] / "examples" / "onnx_qdq_mlp.onnx")
    with pytest.raises(polyquant._tools.runner.CommandError, match="QuantizeLinear nodes"):
        polyquant.calibrate(qdq, [{"x": np.zeros((32, 64), np.float32)}], show_progress=False)
    with pytest.raises(polyquant._tools.runner.CommandError, match="from_quantized: the model has no quantizer"):
        polyquant.calibrate(exported_network(), data(1), from_quantized=True, show_progress=False)
    r = polyquant.calibrate(model, [{"x.103": x}], from_quantized=True, show_progress=False)
    assert not [n for n in r.model.graph.node if n.domain] and r.settings["from_quantized"]
