"""`polyquant convert --to onnx`: QONNX quantizers to standard ONNX ops, bit-exact.

The converted models run in plain onnxruntime (no custom-op library) and are compared with the
original model run with polyquant's ops, with Brevitas' recorded outputs, and, node by node, with
qonnx itself (the reference, installed in CI)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from polyquant._tools import cli, convert as conv
from polyquant._tools.runner import CommandError
from polyquant.qonnx.execute import reference_session_options

ROOT = Path(__file__).resolve().parents[3]
BREVITAS = ROOT / "tests" / "data" / "brevitas"
DOMAIN = "qonnx.custom_op.general"


def plain_session(model):
    """onnxruntime without polyquant, at the settings that keep standard ops' bits (docs/convert.md)."""
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, conv.exact_session_options(), providers=["CPUExecutionProvider"])


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("name", ["mlp_perchannel", "conv_perchannel", "bipolar", "truncavgpool", "fp8"])
def test_brevitas_models_convert_exactly(name):
    r = conv.convert(BREVITAS / f"{name}.onnx")
    assert r.nodes and not r.refused and all(n.checked for n in r.nodes)
    m = r.model
    assert {o.domain for o in m.opset_import} <= {"", "ai.onnx"}
    assert all(n.domain in ("", "ai.onnx") for n in m.graph.node)
    onnx.checker.check_model(m)
    x = np.load(BREVITAS / f"{name}.input.npy")
    plain = plain_session(m)
    got = plain.run(None, {plain.get_inputs()[0].name: x})[0]
    original = ort.InferenceSession(str(BREVITAS / f"{name}.onnx"), reference_session_options(),
                                    providers=["CPUExecutionProvider"])
    want = original.run(None, {original.get_inputs()[0].name: x})[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(got), bits(np.load(BREVITAS / f"{name}.expected.npy")))
    # Specials and scaled inputs through the whole model, against the original.
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1.0, 1e3):
        xs = (rng.standard_normal(x.shape) * scale).astype(np.float32)
        xs.reshape(-1)[:6] = [np.nan, -np.inf, np.inf, -0.0, 0.0, 1e-45]
        a = plain.run(None, {plain.get_inputs()[0].name: xs})[0]
        b = original.run(None, {original.get_inputs()[0].name: xs})[0]
        np.testing.assert_array_equal(bits(a), bits(b))


def test_a_model_with_a_refused_node_is_not_written(tmp_path):
    """A QONNX op the converter does not know is refused by name; the CLI then writes nothing."""
    m = single_node("Quant", {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}, (4,),
                    [np.float32(0.1), np.float32(0), np.float32(8)])
    m.graph.node[0].op_type = "MultiThreshold"
    r = conv.convert(m)
    assert [n.status for n in r.refused] == ["refused"] and "MultiThreshold is not converted yet" in r.refused[0].reason
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(m, src)
    status, text = run_cli("convert", str(src), "-o", str(out))
    assert status == 1 and "refused" in text and not out.exists()


def single_node(op, attrs, x_shape, params, x_dtype=TensorProto.FLOAT, domain_version=1):
    names = ["x"] + [f"p{i}" for i in range(len(params))]
    node = helper.make_node(op, names, ["y"], domain=DOMAIN, name="q", **attrs)
    inits = [numpy_helper.from_array(np.asarray(v), f"p{i}") for i, v in enumerate(params) if v is not None]
    inputs = [helper.make_tensor_value_info("x", x_dtype, list(x_shape))]
    inputs += [helper.make_tensor_value_info(f"p{i}", TensorProto.FLOAT, list(np.shape(v) if v is not None else []))
               for i, v in enumerate(params) if v is None]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(DOMAIN, domain_version)])
    m.ir_version = 9
    return m


def qonnx_inputs(scale, zeropt, lo, hi, rng, shape):
    """Every tie of the grid, its float32 neighbours, grid points, specials and random values."""
    if hi - lo < 4096:
        k = np.arange(lo - 2, hi + 2, dtype=np.float64)
    else:  # both ends of a wide grid
        k = np.concatenate([lo - 2 + np.arange(2048.0), hi + 2 - np.arange(1.0, 2049.0)])
    k = k.reshape((-1,) + (1,) * len(shape))
    ties = ((k + 0.5 - zeropt) * scale).astype(np.float32)
    parts = [ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)),
             ((k - zeropt) * scale).astype(np.float32),
             (rng.standard_normal((512,) + shape) * (hi - lo + 4) * np.max(np.abs(scale))).astype(np.float32)]
    x = np.concatenate([np.broadcast_to(p, p.shape[:1] + shape) for p in parts]).astype(np.float32)
    x.reshape(-1)[:8] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45]
    return x


MODES = ["ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bitwidth,signed,narrow", [(1, 1, 0), (2, 1, 1), (4, 0, 0), (4, 0, 1), (8, 1, 0), (16, 1, 1),
                                                    (24, 0, 0), (30, 1, 0)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_int_quant_nodes_equal_qonnx(mode, bitwidth, signed, narrow, per_channel):
    """Converted IntQuant in plain onnxruntime == qonnx's int_quant itself, every rounding mode and grid."""
    from qonnx.custom_op.general.intquant import int_quant
    rng = np.random.default_rng(bitwidth * 16 + MODES.index(mode))
    shape = (3,) if per_channel else ()
    scale = np.array([0.02, 0.5, 3.0], np.float32) if per_channel else np.float32(0.0078125)
    zeropt = np.array([0.0, 3.0, -2.5], np.float32) if per_channel else np.float32(1.0)
    bw = np.float32(bitwidth)
    m = single_node("IntQuant", {"signed": signed, "narrow": narrow, "rounding_mode": mode}, (None,) + shape,
                    [scale, zeropt, bw])
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"] and r.nodes[0].checked > 0
    lo, hi = conv.int_bounds(bw, bool(signed), bool(narrow))
    x = qonnx_inputs(np.asarray(scale, np.float64), np.asarray(zeropt, np.float64), float(lo), float(hi), rng, shape)
    got = plain_session(r.model).run(None, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.asarray(int_quant(x, scale, zeropt, bw, signed, narrow, mode), np.float32)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{mode} bw={bitwidth} signed={signed} narrow={narrow}")


def trunc_inputs(scale, zeropt, t, rng, shape, in_bits):
    """Ties of Trunc's two roundings (the input grid and the truncated one), their neighbours, specials
    and random values, independently of the converter's own sample."""
    k = np.arange(-(2.0 ** in_bits) - 2, 2.0 ** in_bits + 2).reshape((-1,) + (1,) * len(shape))
    pts = [((k + 0.5 - zeropt) * scale), (((k + 0.5) * t - zeropt) * scale), ((k * t - zeropt) * scale)]
    parts = []
    for q in pts:
        q = q.astype(np.float32)
        parts += [q, np.nextafter(q, np.float32(np.inf)), np.nextafter(q, np.float32(-np.inf))]
    parts.append((rng.standard_normal((512,) + shape) * 2 ** in_bits * np.max(np.abs(scale))).astype(np.float32))
    x = np.concatenate([np.broadcast_to(v, v.shape[:1] + shape) for v in parts]).astype(np.float32)
    x.reshape(-1)[:8] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45]
    return x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_trunc_v1_nodes_equal_qonnx(mode, per_channel):
    from qonnx.custom_op.general.trunc import trunc_v1
    shape = (3,) if per_channel else ()
    scale = np.array([0.02, 0.5, 3.0], np.float32) if per_channel else np.float32(0.0078125)
    zeropt = np.array([0.0, 3.0, -2.0], np.float32) if per_channel else np.float32(0.0)
    in_bw, out_bw = np.float32(8), np.float32(5)
    m = single_node("Trunc", {"rounding_mode": mode}, (None,) + shape, [scale, zeropt, in_bw, out_bw])
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    x = trunc_inputs(np.asarray(scale, np.float64), np.asarray(zeropt, np.float64), 8.0, np.random.default_rng(1),
                     shape, 8)
    got = plain_session(r.model).run(None, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.asarray(trunc_v1(x, scale, zeropt, in_bw, out_bw, mode), np.float32)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("signed,narrow", [(0, 0), (1, 0), (1, 1)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_trunc_v2_nodes_equal_qonnx(mode, signed, narrow, per_channel):
    from qonnx.custom_op.general.trunc import trunc_v2
    shape = (3,) if per_channel else ()
    scale = np.array([0.02, 0.5, 3.0], np.float32) if per_channel else np.float32(0.00720179)
    zeropt = np.array([0.0, 3.0, -2.0], np.float32) if per_channel else np.float32(0.0)
    out_scale = np.array([0.08, 1.9, 24.5], np.float32) if per_channel else np.float32(0.02880715)
    in_bw, out_bw = np.float32(8), np.float32(6)
    m = single_node("Trunc", {"rounding_mode": mode, "signed": signed, "narrow": narrow}, (None,) + shape,
                    [scale, zeropt, in_bw, out_scale, out_bw], domain_version=2)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    with np.errstate(divide="ignore"):
        t = 2.0 ** np.round(np.log2(np.asarray(out_scale, np.float64) / np.asarray(scale, np.float64)))
    x = trunc_inputs(np.asarray(scale, np.float64), np.asarray(zeropt, np.float64), t, np.random.default_rng(2), shape, 8)
    got = plain_session(r.model).run(None, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.asarray(trunc_v2(x, scale, zeropt, in_bw, narrow, signed, out_scale, out_bw, mode), np.float32)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=mode)


def test_trunc_v2_with_five_inputs_is_refused():
    m = single_node("Trunc", {"rounding_mode": "FLOOR"}, (4,), [np.float32(0.1), np.float32(0), np.float32(8),
                                                                 np.float32(4)], domain_version=2)
    r = conv.convert(m)
    assert r.nodes[0].status == "refused" and "instead of 6" in r.nodes[0].reason


def test_bipolar_node_equals_qonnx():
    from qonnx.custom_op.general.bipolar_quant import binary_quant
    scale = np.array([0.5, -2.0, 1e-3], np.float32)
    m = single_node("BipolarQuant", {}, (7, 3), [scale])
    r = conv.convert(m)
    assert r.nodes[0].status == "exact"
    x = np.array([[np.nan, -np.nan, 0.0], [-0.0, 1e-45, -1e-45], [np.inf, -np.inf, 2.0], [-2.0, 0.5, -0.5],
                  [3e38, -3e38, 1.0], [-1.0, 0.25, -0.25], [7.0, -7.0, 0.0]], np.float32)
    got = plain_session(r.model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(binary_quant(x, scale)))


def test_non_static_scale_converts_by_construction():
    """A scale fed at run time: the subgraph is the same; nothing to check at conversion time."""
    m = single_node("Quant", {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}, (4,), [None, np.float32(0), np.float32(8)])
    r = conv.convert(m)
    assert r.nodes[0].status == "exact" and r.nodes[0].checked is None
    x = np.array([0.3, -0.3, 1000.0, np.nan], np.float32)
    got = plain_session(r.model).run(None, {"x": x, "p0": np.array(0.1, np.float32)})[0]
    import polyquant.qonnx as pq
    np.testing.assert_array_equal(bits(got), bits(pq.quant(x, np.float32(0.1), np.float32(0), np.float32(8), 1, 0, "ROUND")))


@pytest.mark.parametrize("case,reason", [
    ("bitwidth_input", "bitwidth 'p2' is not an initializer"),
    ("float16_x", "input 'x' is float16"),
    ("opset_10", "opset 10"),
])
def test_refusals_name_the_reason(case, reason):
    params = [np.float32(0.1), np.float32(0), None if case == "bitwidth_input" else np.float32(8)]
    m = single_node("Quant", {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}, (4,), params,
                    TensorProto.FLOAT16 if case == "float16_x" else TensorProto.FLOAT)
    if case == "opset_10":
        m.opset_import[0].version = 10
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["refused"] and reason in r.nodes[0].reason
    assert any(n.domain == DOMAIN for n in r.model.graph.node)  # left as it was


def test_the_check_catches_a_wrong_decomposition(monkeypatch):
    """The conversion-time check can fail: a decomposition rounding half up where qonnx rounds half
    to even is refused, with an input that shows it."""
    monkeypatch.setattr(conv, "_round", lambda b, y, mode: b.op("Floor", [b.op("Add", [y, b.const(0.5, "h")], "p")], "f"))
    m = single_node("Quant", {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}, (4,),
                    [np.float32(0.25), np.float32(0), np.float32(8)])
    r = conv.convert(m)
    assert r.nodes[0].status == "refused" and "differs from qonnx" in r.nodes[0].reason


def test_onnxruntime_where_drops_the_sign_of_a_negative_zero_from_its_first_input():
    """Why DOWN is Where(y > 0, Floor, Ceil): onnxruntime's Where returns +0.0 for a -0.0 selected from
    X (its second input), and keeps it from Y. If a future onnxruntime fixes this, the test says so
    (the decomposition stays right either way)."""
    nodes = [helper.make_node("Where", ["c", "a", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [2]),
                                       helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
                                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 9
    y = plain_session(m).run(None, {"c": np.array([True, False]), "a": np.float32([-0.0, 1]),
                                    "b": np.float32([1, -0.0])})[0]
    assert bits(y)[1] == 0x80000000  # from Y: kept
    if bits(y)[0] == 0x80000000:
        pytest.skip(f"onnxruntime {ort.__version__} keeps -0.0 from X too")
    assert bits(y)[0] == 0


def test_noop_elimination_is_disabled_for_the_bits():
    """onnxruntime's basic-level NoopElimination drops Add(y, 0), so -0.0 + 0.0 (+0.0 in IEEE, in qonnx)
    stays -0.0: a converted Trunc with zero point 0 then returns -0.0 for x = -0.0. The exact settings
    disable it; the plain basic level shows the difference."""
    from qonnx.custom_op.general.trunc import trunc_v2
    params = [np.float32(0.00720179), np.float32(0), np.float32(8), np.float32(0.02880715), np.float32(6)]
    m = single_node("Trunc", {"rounding_mode": "ROUND", "signed": 1, "narrow": 1}, (None,), params, domain_version=2)
    r = conv.convert(m)
    x = np.array([-0.0, 1.0], np.float32)
    want = np.asarray(trunc_v2(x, params[0], params[1], params[2], 1, 1, params[3], params[4], "ROUND"), np.float32)
    assert bits(want)[0] == 0
    np.testing.assert_array_equal(bits(plain_session(r.model).run(None, {"x": x})[0]), bits(want))
    basic = ort.SessionOptions()
    basic.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    got = ort.InferenceSession(r.model.SerializeToString(), basic, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    if bits(got)[0] == 0:
        pytest.skip(f"onnxruntime {ort.__version__}'s NoopElimination keeps -0.0 + 0.0 = +0.0")
    assert bits(got)[0] == 0x80000000


def test_bad_arguments():
    m = single_node("Quant", {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}, (4,),
                    [np.float32(0.25), np.float32(0), np.float32(8)])
    with pytest.raises(CommandError, match="to: expected 'onnx' .* or 'qonnx'"):
        conv.convert(m, to="tflite")  # 'qonnx' is a target now (tests/python/tools/test_convert_qonnx.py)
    with pytest.raises(CommandError, match="check: expected"):
        conv.convert(m, check="all")


def run_cli(*argv):
    out = io.StringIO()
    return cli.main(list(argv), out=out), out.getvalue()


def test_cli_writes_a_model_that_runs_without_polyquant(tmp_path):
    out = tmp_path / "standard.onnx"
    status, text = run_cli("convert", str(BREVITAS / "conv_perchannel.onnx"), "-o", str(out))
    assert status == 0 and "4 of 4 QONNX nodes converted exactly" in text and out.exists()
    assert "exact, checked on" in text
    x = np.load(BREVITAS / "conv_perchannel.input.npy")
    s = plain_session(out)
    np.testing.assert_array_equal(bits(s.run(None, {s.get_inputs()[0].name: x})[0]),
                                  bits(np.load(BREVITAS / "conv_perchannel.expected.npy")))
    status, text = run_cli("convert", str(tmp_path / "missing.onnx"), "-o", str(out))
    assert status == 2


# ---- polyquant run --reference-model: a converted model against its original ---------------------------

def test_run_reference_model_checks_a_converted_model_against_its_original(tmp_path):
    original = BREVITAS / "conv_perchannel.onnx"
    converted = tmp_path / "standard.onnx"
    assert run_cli("convert", str(original), "-o", str(converted))[0] == 0
    for given in ([], ["--input", str(BREVITAS / "conv_perchannel.input.npy")]):
        status, text = run_cli("run", str(converted), "--reference-model", str(original), "-n", "1",
                               "-o", str(tmp_path / "run"), *given)
        assert status == 0, text
        assert "result     bit-exact against" in text and "check      " in text
    assert (tmp_path / "run" / "reference").is_dir()


def test_run_reference_model_reports_a_mismatch(tmp_path):
    original = BREVITAS / "conv_perchannel.onnx"
    converted = tmp_path / "standard.onnx"
    assert run_cli("convert", str(original), "-o", str(converted))[0] == 0
    model = onnx.load(str(converted))
    # Nudge the first float initializer with more than one element (a weight or a per-channel scale).
    init = next(i for i in model.graph.initializer
                if i.data_type == TensorProto.FLOAT and np.prod(i.dims, dtype=np.int64) > 1)
    value = numpy_helper.to_array(init).copy()
    value.flat[0] = np.nextafter(value.flat[0], np.float32(np.inf)) * np.float32(1.5) + np.float32(1.0)
    init.CopyFrom(numpy_helper.from_array(value, init.name))
    wrong = tmp_path / "wrong.onnx"
    onnx.save(model, str(wrong))
    status, text = run_cli("run", str(wrong), "--reference-model", str(original), "-n", "1", "-o", str(tmp_path / "run"))
    assert status == 1 and "MISMATCH in 1 of 1 outputs" in text and "elements differ" in text


def test_run_reference_model_refuses_other_inputs_and_both_flags(tmp_path, capsys):
    original = BREVITAS / "conv_perchannel.onnx"
    model = onnx.load(str(original))
    old = model.graph.input[0].name
    model.graph.input[0].name = "renamed"
    for node in model.graph.node:
        node.input[:] = ["renamed" if n == old else n for n in node.input]
    other = tmp_path / "other.onnx"
    onnx.save(model, str(other))
    status, _ = run_cli("run", str(other), "--reference-model", str(original), "-n", "1", "-o", str(tmp_path / "run"))
    error = capsys.readouterr().err
    assert status == 2 and "must have the same inputs" in error and repr(old) in error
    status, _ = run_cli("run", str(original), "--reference", "--reference-model", str(original), "-o", str(tmp_path / "r"))
    assert status == 2 and "give one" in capsys.readouterr().err
    status, _ = run_cli("run", str(original), "--reference-model", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "r"))
    assert status == 2 and "missing.onnx" in capsys.readouterr().err


# ---- --allow-inexact ------------------------------------------------------------------------------------

@pytest.mark.parametrize("zeropt,per_channel", [(0.0, False), (0.0, True), (3.0, False), (-2.0, True)])
def test_allow_inexact_writes_qdq_and_counts_exactly_what_differs(zeropt, per_channel):
    """IntQuant as QuantizeLinear / DequantizeLinear: the node is INEXACT, and the differing inputs it
    reports are exactly those where plain onnxruntime's Q/DQ and qonnx's int_quant disagree on the
    check's inputs (recounted here independently), all of the kinds Q/DQ is known for."""
    from qonnx.custom_op.general.intquant import int_quant
    shape = (3,) if per_channel else ()
    scale = np.array([0.02, 0.5, 3.0], np.float32) if per_channel else np.float32(0.02)
    zp = np.full(shape, zeropt, np.float32) if per_channel else np.float32(zeropt)
    m = single_node("IntQuant", {"signed": 1, "narrow": 1, "rounding_mode": "ROUND"}, (None,) + shape,
                    [scale, zp, np.float32(8)])
    r = conv.convert(m, allow_inexact=True)
    (n,) = r.nodes
    assert n.status == "inexact" and r.inexact == [n] and not r.refused
    assert n.form.startswith("QuantizeLinear (int8") and "Clip" in n.form  # narrow: [-127, 127] on int8
    assert {o.domain for o in r.model.opset_import} <= {"", "ai.onnx"}
    assert [x.op_type for x in r.model.graph.node] == ["QuantizeLinear", "Clip", "DequantizeLinear"]
    x = conv._sample_inputs({"kind": "int", "scale": scale, "zeropt": zp, "bitwidth": np.float32(8), "signed": 1,
                             "narrow": 1}, np.random.default_rng(0))
    got = plain_session(r.model).run(None, {"x": x})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.asarray(int_quant(x, scale, zp, np.float32(8), 1, 1, "ROUND"), np.float32)
    differ = bits(got) != bits(np.broadcast_to(want, got.shape))
    assert n.differing == int(differ.sum()) == sum(n.kinds.values()) and n.checked == x.size
    assert set(n.kinds) <= {"nan", "sign of zero", "rounding tie", "saturation edge"}
    assert n.kinds["nan"] == int(np.isnan(x).sum())  # Q turns NaN into an integer
    if zeropt == 0:  # DQ returns +0.0 where qonnx keeps -0.0; no ties move
        assert "sign of zero" in n.kinds and "rounding tie" not in n.kinds
    else:  # x / scale + zeropt rounded in float32 creates ties Q/DQ does not see
        assert n.kinds.get("rounding tie", 0) > 0
    assert "INEXACT" in str(r) and "WARNING: 1 node(s) emitted INEXACT" in str(r)


def test_allow_inexact_keeps_the_exact_decomposition_where_qdq_cannot_hold_the_grid():
    """HALF_UP rounding, a 12-bit grid (int16 has no Clip in onnxruntime; opset 13 has no int16 Q/DQ), a
    fractional zero point, a negative scale: no Q/DQ form, so the exact decomposition, still exact."""
    cases = [({"rounding_mode": "HALF_UP"}, [np.float32(0.1), np.float32(0), np.float32(8)]),
             ({"rounding_mode": "ROUND"}, [np.float32(0.1), np.float32(0), np.float32(12)]),
             ({"rounding_mode": "ROUND"}, [np.float32(0.1), np.float32(0.5), np.float32(8)]),
             ({"rounding_mode": "ROUND"}, [np.float32(-0.1), np.float32(0), np.float32(8)])]
    for attrs, params in cases:
        r = conv.convert(single_node("Quant", {"signed": 1, "narrow": 0, **attrs}, (4,), params), allow_inexact=True)
        assert [n.status for n in r.nodes] == ["exact"] and "Div" in r.nodes[0].form, (attrs, params)


def test_allow_inexact_emits_a_node_whose_check_fails_with_its_counts(monkeypatch):
    """A decomposition rounding half up where qonnx rounds half to even (a fractional zero point: no Q/DQ
    form) is refused without allow_inexact and emitted with it, its differing inputs counted by kind."""
    monkeypatch.setattr(conv, "_round", lambda b, y, mode: b.op("Floor", [b.op("Add", [y, b.const(0.5, "h")], "p")], "f"))
    m = single_node("Quant", {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}, (4,),
                    [np.float32(0.25), np.float32(0.5), np.float32(8)])
    assert conv.convert(m).nodes[0].status == "refused"
    r = conv.convert(m, allow_inexact=True)
    (n,) = r.nodes
    assert n.status == "inexact" and n.differing > 0 and n.differing == sum(n.kinds.values())
    assert "Floor" in [x.op_type for x in r.model.graph.node]


def test_allow_inexact_weight_reports_its_own_tensor():
    r = conv.convert(BREVITAS / "conv_perchannel.onnx", allow_inexact=True)
    weights = [n for n in r.nodes if "weight" in n.name]
    assert weights and all(n.status == "inexact" and n.reason.startswith("its weight tensor: ") for n in weights)
    onnx.checker.check_model(r.model)
    assert {n.op_type for n in r.model.graph.node} >= {"QuantizeLinear", "DequantizeLinear"}


def test_cli_allow_inexact_exits_0_and_says_so(tmp_path):
    out = tmp_path / "qdq.onnx"
    status, text = run_cli("convert", str(BREVITAS / "mlp_perchannel.onnx"), "-o", str(out), "--allow-inexact")
    assert status == 0 and out.exists() and "INEXACT: differs on" in text and "WARNING: 6 node(s) emitted INEXACT" in text
    x = np.load(BREVITAS / "mlp_perchannel.input.npy")
    s = plain_session(out)
    assert s.run(None, {s.get_inputs()[0].name: x})[0].shape == np.load(BREVITAS / "mlp_perchannel.expected.npy").shape


# ---- FloatQuant -> float8 Q/DQ -----------------------------------------------------------------------------

FLOAT8_FORMATS = {"e4m3fn": (4, 3, 7, 448.0, 0), "e5m2": (5, 2, 15, 57344.0, 1)}


def float_quant_node(fmt, scale, opset=21, **attrs):
    e, m, bias, mx, has_inf = FLOAT8_FORMATS[fmt]
    a = {"has_inf": has_inf, "has_nan": 1, "has_subnormal": 1, "saturation": 1, "rounding_mode": "ROUND", **attrs}
    shape = (None,) + ((np.size(scale),) if np.size(scale) > 1 else ())
    model = single_node("FloatQuant", a, shape, [np.float32(scale), np.float32(e), np.float32(m), np.float32(bias),
                                                  np.float32(mx)])
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("fmt", list(FLOAT8_FORMATS))
@pytest.mark.parametrize("scale", [0.5, 2.0, 3e-3, [0.5, 1e-3, 7.0]], ids=["0.5", "2", "3e-3", "per channel"])
def test_float_quant_in_float8_formats_equals_qonnx(fmt, scale):
    """FloatQuant with float8 e4m3fn's / e5m2's format becomes Q/DQ plus the overflow and NaN fix-ups, in
    plain onnxruntime equal to qonnx's float_quant itself on every float8 value and midpoint times the
    scale, their neighbours, overflowing x / scale, signalling / payload NaNs, infinities and zeros."""
    from qonnx.custom_op.general.floatquant import float_quant
    m = float_quant_node(fmt, scale)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    assert {x.op_type for x in r.model.graph.node} >= {"QuantizeLinear", "DequantizeLinear"}
    e, mm, bias, mx, has_inf = FLOAT8_FORMATS[fmt]
    import ml_dtypes
    f8 = getattr(ml_dtypes, f"float8_{fmt}")
    values = np.arange(256, dtype=np.uint8).view(f8).astype(np.float64)
    values = np.unique(values[np.isfinite(values)])
    pts = np.concatenate([values, (values[1:] + values[:-1]) / 2])
    s = np.asarray(scale, np.float64)
    x = (pts.reshape(-1, *([1] * np.ndim(scale))) * s).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFC00001, 0x7FC12345, 0x7F800000, 0xFF800000,
                         0x7F000000, 0xFF000000, 0x7F7FFFFF, 0, 0x80000000, 1, 0x80000001], np.uint32).view(np.float32)
    x = np.concatenate([x, np.broadcast_to(specials.reshape(-1, *([1] * np.ndim(scale))), (specials.size,) + x.shape[1:])])
    got = plain_session(r.model).run(None, {"x": np.ascontiguousarray(x)})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.asarray(float_quant(x, np.float32(scale), np.float32(e), np.float32(mm), np.float32(bias), True,
                                      np.float32(mx), bool(has_inf), True, True, "ROUND", True), np.float32)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{fmt} {scale}")


# ---- FloatQuant in any other format, mode or opset -> the elementwise decomposition ------------------------

# (exponent bits, mantissa bits, bias, max_val, attributes): OCP's FP6 / FP4, float8 variants that are no
# ONNX type, a bfloat16-like format whose largest value is beyond float32 (the float64 tail), every
# rounding mode, the non-saturating overflow to inf and to NaN.
DECOMPOSED = {
    "e2m3 fp6": (2, 3, 1, 7.5, {}),
    "e3m2 fp6": (3, 2, 3, 28.0, {}),
    "e2m1 fp4": (2, 1, 1, 6.0, {}),
    "e4m3 bias 8 max 240": (4, 3, 8, 240.0, {}),
    "e4m3 FLOOR": (4, 3, 7, 448.0, {"rounding_mode": "FLOOR"}),
    "e4m3 CEIL": (4, 3, 7, 448.0, {"rounding_mode": "CEIL"}),
    "e4m3 UP": (4, 3, 7, 448.0, {"rounding_mode": "UP"}),
    "e4m3 DOWN": (4, 3, 7, 448.0, {"rounding_mode": "DOWN"}),
    "e4m3 HALF_UP": (4, 3, 7, 448.0, {"rounding_mode": "HALF_UP"}),
    "e4m3 HALF_DOWN": (4, 3, 7, 448.0, {"rounding_mode": "HALF_DOWN"}),
    "e4m3 overflow to NaN": (4, 3, 7, 448.0, {"saturation": 0}),
    "e5m2 overflow to inf": (5, 2, 15, 57344.0, {"saturation": 0, "has_inf": 1}),
    "e8m7 max beyond float32": (8, 7, 127, np.inf, {}),
    "e8m7 FLOOR max 3e38": (8, 7, 127, 3e38, {"rounding_mode": "FLOOR"}),
    "e6m9 bias 20": (6, 9, 20, 1e9, {"rounding_mode": "HALF_DOWN"}),
}


def minifloat_node(fmt, scale, opset=17):
    e, m, bias, mx, extra = DECOMPOSED[fmt]
    a = {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1, "rounding_mode": "ROUND", **extra}
    shape = (None,) + ((np.size(scale),) if np.size(scale) > 1 else ())
    model = single_node("FloatQuant", a, shape, [np.float32(scale), np.float32(e), np.float32(m), np.float32(bias),
                                                  np.float32(mx)])
    model.opset_import[0].version = opset
    return model, a


def minifloat_inputs(e, m, bias, scale):
    """Every value of the format and every midpoint (both ends of each binade where m > 8) times the
    scale, their float32 neighbours, x just below every power of two (where float32 log2 rounds up),
    and specials: NaN payloads of both signs, infinities, the largest floats, zeros, subnormals."""
    sig = np.arange(2.0 ** m) if m <= 8 else np.concatenate([np.arange(64.0), 2.0 ** m - 1 - np.arange(64.0)])
    exps = np.arange(1 - bias, min(2 ** e - bias + 2, 128))
    values = np.unique(np.concatenate([sig * 2.0 ** (1 - bias - m),
                                       ((1 + sig / 2 ** m)[None] * np.exp2(exps)[:, None]).ravel()]))
    pts = np.concatenate([values, (values[1:] + values[:-1]) / 2])
    powers = np.exp2(np.arange(-126.0, 128.0)).astype(np.float32)
    below = (powers.view(np.uint32)[:, None] - np.arange(1, 64, dtype=np.uint32)).view(np.float32).ravel()
    col = (-1,) + (1,) * np.ndim(scale)
    with np.errstate(over="ignore"):
        x = (pts.reshape(col) * np.asarray(scale, np.float64)).astype(np.float32)
        x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFC00001, 0x7FC12345, 0x7F800000, 0xFF800000,
                         0x7F000000, 0xFF000000, 0x7F7FFFFF, 0xFF7FFFFF, 0, 0x80000000, 1, 0x80000001, 0x00800000],
                        np.uint32).view(np.float32)
    extra = np.concatenate([specials, below, -below])
    x = np.concatenate([x, np.broadcast_to(extra.reshape(col), (extra.size,) + x.shape[1:])])
    # Whole vectors of numpy's loops: its product of two NaNs returns the first one in its vector body
    # but the second in the remainder (n mod 16 with AVX-512, 8 with AVX2), which qonnx's
    # sign(y) * magnitude and 2^e * R(...) meet for a NaN or infinite x / scale and polyquant does not
    # model (docs/qonnx.md); zeros pad x to a multiple of 16 rows.
    x = np.concatenate([x, np.zeros((-len(x) % 16,) + x.shape[1:], np.float32)])
    return np.ascontiguousarray(x)


@pytest.mark.parametrize("fmt", list(DECOMPOSED))
@pytest.mark.parametrize("scale", [1.0, 3e-3, [0.5, 1e-3, 7.0]], ids=["1", "3e-3", "per channel"])
def test_float_quant_decomposition_equals_qonnx(fmt, scale):
    """FloatQuant outside float8 Q/DQ's reach (other formats, rounding modes, no saturation, standard
    opset 17) becomes standard elementwise ops that, in plain onnxruntime, equal qonnx's float_quant
    itself bit for bit on every value and midpoint of the format, their neighbours, x just below
    every power of two and the specials."""
    from qonnx.custom_op.general.floatquant import float_quant
    m, a = minifloat_node(fmt, scale)
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["exact"], r.nodes[0].reason
    assert r.nodes[0].checked > 1000
    ops = {n.op_type for n in r.model.graph.node}
    assert "QuantizeLinear" not in ops and {"Log", "Gather"} <= ops
    assert all(n.domain in ("", "ai.onnx") for n in r.model.graph.node)
    e, mm, bias, mx, _ = DECOMPOSED[fmt]
    x = minifloat_inputs(e, mm, bias, scale)
    got = plain_session(r.model).run(None, {"x": x})[0]
    with np.errstate(all="ignore"):
        want = np.asarray(float_quant(x, np.float32(scale), np.float32(e), np.float32(mm), np.float32(bias), True,
                                      np.float32(mx), bool(a["has_inf"]), bool(a["has_nan"]), True, a["rounding_mode"],
                                      bool(a["saturation"])), np.float32)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{fmt} {scale}")


def test_float_quant_float8_format_below_opset_19_is_decomposed():
    """e4m3fn's format at opset 17 (float8 Q/DQ needs 19): the decomposition, not a refusal; at opset 21
    the same node becomes Q/DQ."""
    low, high = float_quant_node("e4m3fn", 0.5, opset=17), float_quant_node("e4m3fn", 0.5, opset=21)
    forms = [conv.convert(m).nodes[0] for m in (low, high)]
    assert [n.status for n in forms] == ["exact", "exact"]
    assert "Log" in forms[0].form and forms[1].form.startswith("QuantizeLinear")


def test_float_exponent_thresholds_are_numpys_log2_floor():
    """T(k) is the first float32 whose float32 log2 floors to k: everything below it floors lower."""
    t = conv.float_exponent_thresholds(-130, 129)
    assert t[0] == 0 and t[-1] == np.inf
    for k, v in zip(range(-125, 129), t[5:-1]):
        assert np.floor(np.log2(v)) == k and np.floor(np.log2(np.nextafter(v, np.float32(0)))) == k - 1, k
        assert v <= np.float32(2.0 ** k) if k < 128 else np.isfinite(v)
    assert any(v < np.float32(2.0 ** k) for k, v in zip(range(-125, 128), t[5:-2]))  # log2 rounds up somewhere


@pytest.mark.parametrize("case,reason", [
    ("saturation 0, no inf, no NaN", "qonnx raises"),
    ("NaN max_val", "max_val is NaN"),
    ("mantissa 2.5", "integer widths"),
    ("exponent 9", "integer widths"),
    ("infinite scale", "scale must be finite"),
    ("format input", "must be initializers"),
    ("M below float32's subnormals", "is no float32 value"),
])
def test_float_quant_refusals_name_the_reason(case, reason):
    m, _ = minifloat_node("e2m3 fp6", 0.5)
    inits = {t.name: t for t in m.graph.initializer}
    if case == "saturation 0, no inf, no NaN":
        for at in m.graph.node[0].attribute:
            if at.name in ("saturation", "has_nan"):
                at.i = 0
    elif case == "format input":
        m.graph.initializer.remove(inits["p2"])
        m.graph.input.append(helper.make_tensor_value_info("p2", TensorProto.FLOAT, []))
    else:
        changes = {"NaN max_val": [("p4", np.nan)], "mantissa 2.5": [("p2", 2.5)], "exponent 9": [("p1", 9.0)],
                   "infinite scale": [("p0", np.inf)],
                   "M below float32's subnormals": [("p2", 23.0), ("p3", 140.0), ("p4", np.inf)]}[case]
        for name, value in changes:
            inits[name].CopyFrom(numpy_helper.from_array(np.float32(value), name))
    r = conv.convert(m)
    assert [n.status for n in r.nodes] == ["refused"], r.nodes[0]
    assert reason in r.nodes[0].reason, r.nodes[0].reason


def test_float_quant_round_trips_through_qonnx():
    """float8 Q/DQ -> QONNX FloatQuant (+ fix-ups) -> standard ONNX: bit-identical to the original pair."""
    import ml_dtypes
    inits = [numpy_helper.from_array(np.float32(0.01), "s"), numpy_helper.from_array(np.zeros((), ml_dtypes.float8_e4m3fn), "z")]
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                           helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    pair = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    pair.ir_version = 10
    there = conv.convert(pair, to="qonnx")
    back = conv.convert(there.model)
    assert not there.refused and not back.refused
    x = (np.random.default_rng(0).standard_normal(4096) * 3).astype(np.float32)
    x[:8] = np.array([0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0, 0x80000000, 0x7F800001],
                     np.uint32).view(np.float32)
    np.testing.assert_array_equal(bits(plain_session(back.model).run(None, {"x": x})[0]),
                                  bits(plain_session(pair).run(None, {"x": x})[0]))
