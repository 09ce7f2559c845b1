"""`polyquant run` on Quark models and opset-28 Q/DQ models, `--reference` against onnx's reference
evaluator, polyquant.onnx.upgrade_model, and the Q/DQ cases of `polyquant bench`."""

from __future__ import annotations

import io
import json

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import polyquant.onnx as pqo
import polyquant.quark as pqq
from polyquant._tools import cli, runner


def polyquant_cli(*argv):
    out = io.StringIO()
    status = cli.main([str(a) for a in argv], out=out)
    return status, out.getvalue()


def opset28_model(path, out_type=T.INT4, block=16):
    s = nh.from_array(np.linspace(0.01, 0.05, 16, dtype=np.float32).reshape(4, 4), "s")
    nodes = [h.make_node("QuantizeLinear", ["x", "s"], ["q"], axis=1, block_size=block, output_dtype=out_type),
             h.make_node("DequantizeLinear", ["q", "s"], ["dq"], axis=1, block_size=block),
             h.make_node("Relu", ["dq"], ["y"])]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, [4, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4, 64])], [s])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 28)])
    m.ir_version = 11
    onnx.save(m, str(path))
    return path


def quark_model(path, zp_dtype=np.int16, with_axis=True):
    s = nh.from_array(np.array([0.02, 0.05, 0.1], np.float32), "s")
    z = nh.from_array(np.array([3, -2, 0]).astype(zp_dtype), "z")
    attrs = {"axis": 1} if with_axis else {}
    nodes = [h.make_node("ExtendedQuantizeLinear", ["x", "s", "z"], ["q"], domain="com.amd.quark", **attrs),
             h.make_node("ExtendedDequantizeLinear", ["q", "s", "z"], ["y"], domain="com.amd.quark", **attrs)]
    g = h.make_graph(nodes, "quark", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 5] if with_axis else [3, 5])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3, 5] if with_axis else [3, 5])], [s, z])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.amd.quark", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_upgrade_model_moves_qdq_nodes_and_keeps_everything_else(tmp_path):
    model = onnx.load(str(opset28_model(tmp_path / "m.onnx")))
    up = pqo.upgrade_model(model)
    assert [n.domain for n in up.graph.node] == [pqo.POLYQUANT_DOMAIN, pqo.POLYQUANT_DOMAIN, ""]
    assert any(o.domain == pqo.POLYQUANT_DOMAIN and o.version == 1 for o in up.opset_import)
    assert [n.domain for n in model.graph.node] == ["", "", ""]  # the input is not modified
    assert [list(n.attribute) for n in up.graph.node] == [list(n.attribute) for n in model.graph.node]
    assert pqo.needs_upgrade(model) and not pqo.needs_upgrade(up)
    lowered = pqo.upgrade_model(model, opset=21)
    assert [o.version for o in lowered.opset_import if o.domain == ""] == [21]


def test_run_opset28_model_with_reference_is_bit_exact(tmp_path):
    model = opset28_model(tmp_path / "m.onnx")
    status, text = polyquant_cli("run", model, "--reference", "-o", tmp_path / "out")
    assert status == 0, text
    assert "upgrade_model" in text and "onnx's reference evaluator" in text and "result     bit-exact" in text
    x = np.load(tmp_path / "out" / "inputs" / "x.npy")
    s = np.linspace(0.01, 0.05, 16, dtype=np.float32).reshape(4, 4)
    want = np.maximum(pqo.dequantize_linear(pqo.quantize_linear(x, s, axis=1, block_size=16, output_dtype=T.INT4),
                                            s, axis=1, block_size=16), 0)
    assert np.array_equal(np.load(tmp_path / "out" / "y.npy"), want)


def test_run_opset28_dq_matmul_add_q_loads_and_is_bit_exact(tmp_path):
    # DQ -> MatMul -> Add -> Q, as every Q/DQ exporter writes a biased layer: onnxruntime 1.32's
    # MatMulAddFusion gave the fused bias a default-domain DequantizeLinear at opset 28, which it has
    # no kernel for, so `polyquant run` could not load the model.
    w = nh.from_array(np.arange(-32, 32, dtype=np.int8).reshape(16, 4), "w")
    w_scale = nh.from_array(np.array([2.0**-6, 2.0**-7, 2.0**-6, 2.0**-8], np.float32), "w_scale")
    b = nh.from_array((np.arange(4) * 2.0**-9).astype(np.float32), "b")
    x_scale = nh.from_array(np.array(2.0**-5, np.float32), "x_scale")
    y_scale = nh.from_array(np.array(2.0**-3, np.float32), "y_scale")
    nodes = [h.make_node("QuantizeLinear", ["x", "x_scale"], ["x_q"], output_dtype=T.INT8),
             h.make_node("DequantizeLinear", ["x_q", "x_scale"], ["x_dq"]),
             h.make_node("DequantizeLinear", ["w", "w_scale"], ["w_dq"], axis=1),
             h.make_node("MatMul", ["x_dq", "w_dq"], ["mm"]),
             h.make_node("Add", ["mm", "b"], ["z"]),
             h.make_node("QuantizeLinear", ["z", "y_scale"], ["q"], output_dtype=T.INT8),
             h.make_node("DequantizeLinear", ["q", "y_scale"], ["y"])]
    g = h.make_graph(nodes, "biased", [h.make_tensor_value_info("x", T.FLOAT, [8, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [8, 4])], [w, w_scale, b, x_scale, y_scale])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 28)])
    m.ir_version = 11
    onnx.save(m, str(tmp_path / "m.onnx"))
    status, text = polyquant_cli("run", tmp_path / "m.onnx", "--reference", "-o", tmp_path / "out")
    assert status == 0, text
    assert "result     bit-exact" in text


def test_run_reference_mismatch_against_onnx_gives_exit_status_1(tmp_path, monkeypatch):
    model = opset28_model(tmp_path / "m.onnx")
    real = runner._run_onnx_reference

    def perturbed(*args, **kwargs):
        outputs, times = real(*args, **kwargs)
        outputs = {k: v + np.float32(1) for k, v in outputs.items()}
        return outputs, times

    monkeypatch.setattr(runner, "_run_onnx_reference", perturbed)
    status, text = polyquant_cli("run", model, "--reference", "-o", tmp_path / "out")
    assert status == 1 and "MISMATCH" in text


@pytest.mark.parametrize("zp_dtype", [np.int8, np.uint16, np.int32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("with_axis", [True, False])
def test_run_quark_model_equals_polyquant_quark(tmp_path, zp_dtype, with_axis):
    model = quark_model(tmp_path / "q.onnx", zp_dtype, with_axis)
    status, text = polyquant_cli("run", model, "-o", tmp_path / "out")
    assert status == 0, text
    x = np.load(tmp_path / "out" / "inputs" / "x.npy")
    s, z = np.array([0.02, 0.05, 0.1], np.float32), np.array([3, -2, 0]).astype(zp_dtype)
    axis = 1 if with_axis else 0  # an absent axis attribute is axis 0 in Quark's kernel
    want = pqq.extended_dequantize_linear(pqq.extended_quantize_linear(x, s, z, axis=axis), s, z, axis=axis)
    got = np.load(tmp_path / "out" / "y.npy")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_run_reference_on_a_quark_model_without_amd_quark_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "quark_reference_unavailable", lambda: "amd-quark cannot be imported (test)")
    status, _ = polyquant_cli("run", quark_model(tmp_path / "q.onnx"), "--reference", "-o", tmp_path / "out")
    assert status == 2
    assert "amd-quark cannot be imported" in capsys.readouterr().err


def test_reference_kind():
    assert runner.reference_kind(runner.Path(__file__).resolve().parents[3] / "examples" / "qonnx_mlp.onnx") == "qonnx"


def test_bench_qdq_cases_json():
    names = ["q_uint8", "q_int8_axis_last", "q_int8_blocked", "dq_int8", "dq_int8_blocked", "quark_q_int16_axis1",
             "ort_quark_q_int8", "ort_quark_dq_int8_axis1"]
    status, text = polyquant_cli("bench", "--size", 2 * 16384, "--repeat", 2, "--ops", *names, "--json")
    assert status == 0, text
    report = json.loads(text)
    rows = {r["name"]: r for r in report["qdq"]}
    assert list(rows) == names
    for name, r in rows.items():
        assert r["polyquant_ms"] > 0 and r["polyquant_out_ms"] > 0 and r["copy_ms"] > 0 and r["copyto_ms"] > 0
        if name.startswith("quark"):  # Quark's op has no onnxruntime peer outside a session
            assert r["onnxruntime_ms"] is None
        else:
            assert r["onnxruntime_ms"] > 0 and r["bit_exact_vs_onnxruntime"] is True, name
    assert rows["q_int8_axis_last"]["shape"] == [512, 64]


def test_bench_narrow_type_cases_json():
    """float8 / int4 both ways agree with onnxruntime bit for bit (its packed int4 included); float16 x
    is the one expected difference, named in the report and not an error."""
    names = ["q_float8_e4m3fn", "q_float8_e5m2", "q_int4", "q_uint4", "dq_float8_e4m3fn", "dq_int4", "q_float4_e2m1fn",
             "q_int8_from_float16", "q_int8_from_bfloat16"]
    status, text = polyquant_cli("bench", "--size", 2 * 16384, "--repeat", 1, "--ops", *names, "--json")
    assert status == 0, text
    rows = {r["name"]: r for r in json.loads(text)["qdq"]}
    assert sorted(rows) == sorted(names)
    for name in names[:6]:
        assert rows[name]["onnxruntime_ms"] > 0 and rows[name]["bit_exact_vs_onnxruntime"] is True, name
    assert rows["q_int8_from_float16"]["onnxruntime_differs"]
    for r in rows.values():
        assert r["polyquant_ms"] > 0 and r["polyquant_out_ms"] > 0
