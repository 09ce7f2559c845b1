"""The `polyquant` command line: info, run (with and without --reference), bench, argument errors."""

from __future__ import annotations

import inspect
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyquant
from polyquant._tools import cli, runner

ROOT = Path(__file__).resolve().parents[3]
MODEL = ROOT / "examples" / "qonnx_mlp.onnx"


def require_qonnx():
    """Skip unless qonnx imports (qonnx 1.0.0 needs Python >= 3.10)."""
    reason = runner.reference_unavailable()
    if reason:
        pytest.skip(reason)


def polyquant_cli(*argv):
    """Run `polyquant ARGV` in-process; returns (exit status, stdout)."""
    out = io.StringIO()
    status = cli.main([str(a) for a in argv], out=out)
    return status, out.getvalue()


# --- comparison helper used by --reference ---------------------------------------------------------


def test_compare_is_bitwise_with_nan_equal_to_nan():
    a = np.array([1.0, np.nan, -0.0, 2.0], np.float32)
    assert runner.compare(a, a.copy()).exact
    payload_nan = np.array([0x7FC00001], np.uint32).view(np.float32)
    b = a.copy()
    b[1] = payload_nan[0]
    assert runner.compare(a, b).exact  # any NaN equals any NaN

    zero_sign = runner.compare(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert not zero_sign.exact and zero_sign.zero_sign_only and "sign of zero" in zero_sign.describe()

    c = np.array([1.5, 3.0, -0.0, 1.0], np.float32)
    result = runner.compare(c, a)
    assert (result.mismatches, result.nan_mismatches, result.max_abs_diff) == (3, 1, 1.0)
    assert result.describe() == "3 of 4 elements differ, max abs diff 1, 1 NaN on one side only"

    assert "dtype" in runner.compare(a.astype(np.float64), a).describe()


# --- info ----------------------------------------------------------------------------------------


def test_info_reports_version_isa_and_a_loadable_library():
    status, text = polyquant_cli("info")
    assert status == 0
    info = polyquant.runtime_info()
    assert polyquant.__version__ in text and info["isa"] in text
    assert "registers in onnxruntime.SessionOptions: yes" in text

    status, text = polyquant_cli("info", "--json")
    report = json.loads(text)
    assert status == 0 and report["ort_library"]["loads"] and Path(report["ort_library"]["path"]).is_file()
    assert report["polyquant"]["version"] == polyquant.__version__
    assert report["polyquant"]["num_threads"] >= 1


def test_python_dash_m_polyquant_shows_help():
    done = subprocess.run([sys.executable, "-m", "polyquant", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    for command in ("run", "bench", "info"):
        assert command in done.stdout


# --- run -----------------------------------------------------------------------------------------


def test_run_with_reference_is_bit_exact_and_saves_outputs(tmp_path):
    require_qonnx()
    status, text = polyquant_cli("run", MODEL, "--reference", "--repeat", 2, "--output-dir", tmp_path)
    assert status == 0, text
    assert "check      y: bit-exact" in text
    assert "result     bit-exact; speedup" in text
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (256, 10) and y.dtype == np.float32
    x = np.load(tmp_path / "inputs" / "x.npy")
    assert np.array_equal(x, runner.random_inputs(runner.make_session(MODEL), seed=0)["x"])
    assert runner.compare(y, np.load(tmp_path / "reference" / "y.npy")).exact


def test_run_with_an_explicit_input(tmp_path):
    x = np.linspace(-4, 4, 256 * 64).reshape(256, 64)  # float64: converted to the model's float32
    np.save(tmp_path / "x.npy", x)
    status, text = polyquant_cli("run", MODEL, "--input", f"x={tmp_path / 'x.npy'}", "--repeat", 1,
                                 "--output-dir", tmp_path / "out")
    assert status == 0
    assert "x: float32[256, 64]  from file" in text and "converted float64 to float32" in text
    session = runner.make_session(MODEL)
    expected, _ = runner.run_session(session, {"x": x.astype(np.float32)}, show_progress=False)
    assert runner.compare(np.load(tmp_path / "out" / "y.npy"), expected["y"]).exact
    # FILE.npy alone names the only input; the seed does not matter then.
    status, _ = polyquant_cli("run", MODEL, "-i", tmp_path / "x.npy", "--seed", 5, "-o", tmp_path / "out2")
    assert status == 0
    assert np.array_equal(np.load(tmp_path / "out2" / "y.npy"), np.load(tmp_path / "out" / "y.npy"))


def test_run_seed_changes_random_inputs(tmp_path):
    for seed in (1, 2):
        assert polyquant_cli("run", MODEL, "--seed", seed, "--repeat", 1, "-o", tmp_path / str(seed))[0] == 0
    assert not np.array_equal(np.load(tmp_path / "1" / "y.npy"), np.load(tmp_path / "2" / "y.npy"))


def test_run_reference_mismatch_gives_exit_status_1(tmp_path, monkeypatch):
    def off_by_one_ulp(model_path, inputs, repeat=1, show_progress=True, full_context=False):
        session = runner.make_session(model_path)
        outputs, times = runner.run_session(session, inputs, repeat, show_progress=False)
        y = outputs["y"].copy()
        y[0, :3] = np.nextafter(y[0, :3], np.float32(np.inf))
        return {"y": y}, times

    monkeypatch.setattr(runner, "reference_unavailable", lambda: None)
    monkeypatch.setattr(runner, "run_reference", off_by_one_ulp)
    status, text = polyquant_cli("run", MODEL, "--reference", "--repeat", 1, "-o", tmp_path)
    assert status == 1
    assert "y: 3 of 2560 elements differ, max abs diff" in text and "MISMATCH in 1 of 1 outputs" in text
    # only y differs in this fake reference: its producer, the output FloatQuant, is named
    assert "where      first differing node: 'y', FloatQuant (domain qonnx.custom_op.general)" in text, text


BREVITAS = ROOT / "tests" / "data" / "brevitas"
BREVITAS_MODELS = ["mlp_perchannel", "conv_perchannel", "truncavgpool", "bipolar", "fp8"]


@pytest.mark.parametrize("name", BREVITAS_MODELS)
def test_run_reference_on_brevitas_exports(name, tmp_path):
    """Raw Brevitas QONNX exports (per-channel weights, unsigned activations, Trunc from
    TruncAvgPool2d, bipolar, FP8): bit-exact against qonnx, and against the output qonnx gave
    when the model was made. On mlp_perchannel the fully optimized session differs from qonnx
    (FusedMatMul's batch-1 path): compared from that session, this run failed."""
    require_qonnx()
    model = BREVITAS / f"{name}.onnx"
    status, text = polyquant_cli("run", model, "--input", BREVITAS / f"{name}.input.npy", "--reference",
                                 "--repeat", 2, "--reference-repeat", 1, "-o", tmp_path)
    assert status == 0, text
    assert "result     bit-exact" in text and "MISMATCH" not in text
    assert "in the session checked against qonnx" in text
    (output,) = [p for p in tmp_path.glob("*.npy")]
    expected = np.load(BREVITAS / f"{name}.expected.npy")
    assert runner.compare(np.load(tmp_path / "reference" / output.name), expected).exact
    fast = runner.compare(np.load(output), expected)  # DIR/NAME.npy comes from the fast session
    assert fast.exact == ("the fully optimized session differs" not in text)
    if name != "mlp_perchannel":
        assert fast.exact


def test_run_reference_mismatch_names_the_first_differing_node(tmp_path, monkeypatch):
    """A reference that differs at one QONNX node (qonnx's int_quant made one ulp off for the
    per-channel weight quantizer): the run fails and names that node, its op, domain, and that it is
    a polyquant op; nodes after it differ too but are not blamed."""
    require_qonnx()
    import qonnx.custom_op.general.intquant as intquant

    real = intquant.int_quant

    def off_for_weights(inp_tensor, scale, *args, **kwargs):
        out = real(inp_tensor, scale, *args, **kwargs)
        if np.ndim(scale) == 2:  # the weight quantizers' per-row scales
            out = np.nextafter(out, np.float32(np.inf)).astype(out.dtype)
        return out

    monkeypatch.setattr(intquant, "int_quant", off_for_weights)
    model = BREVITAS / "mlp_perchannel.onnx"
    status, text = polyquant_cli("run", model, "--reference", "--repeat", 1, "--reference-repeat", 1, "-o", tmp_path)
    assert status == 1, text
    assert "MISMATCH in 1 of 1 outputs" in text
    import onnx

    graph = onnx.load(str(model)).graph
    first_weight_quant = next(n for n in graph.node if n.op_type == "Quant" and
                              any(i.endswith("weight") for i in n.input))
    where = next(line for line in text.splitlines() if line.startswith("where"))
    assert f"'{first_weight_quant.name}', Quant (domain qonnx.custom_op.general)" in where, where
    assert "a polyquant op" in where


def test_first_divergence_in_a_standard_op(tmp_path, monkeypatch):
    """When the first differing node is a standard op, the report says onnxruntime, not polyquant."""
    require_qonnx()
    model = BREVITAS / "conv_perchannel.onnx"
    session = runner.make_session(model)
    inputs = runner.random_inputs(session, seed=3)
    assert runner.first_divergence(model, inputs) is None
    import qonnx.core.onnx_exec as onnx_exec

    real = onnx_exec.execute_node

    def relu_off(node, context, graph, *args, **kwargs):
        real(node, context, graph, *args, **kwargs)
        if node.op_type == "Relu":
            context[node.output[0]] = context[node.output[0]] + np.float32(1)

    monkeypatch.setattr(onnx_exec, "execute_node", relu_off)
    found = runner.first_divergence(model, inputs)
    assert found is not None and found.op_type == "Relu" and found.domain == "" and not found.polyquant_op
    assert "Relu (domain ai.onnx)" in found.describe() and "onnxruntime" in found.describe()


def _trunc_model(path, inputs, opset):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    names = ["x", "scale", "zeropt", "in_bw", "out_scale", "out_bw"][:inputs]
    if inputs == 5:
        names[4] = "out_bw"
    values = {"scale": 1.0, "zeropt": 0.0, "in_bw": 8.0, "out_scale": 16.0, "out_bw": 4.0}
    node = helper.make_node("Trunc", names, ["y"], domain="qonnx.custom_op.general", rounding_mode="FLOOR",
                            name="t0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(np.asarray(values[n], np.float32), n) for n in names[1:]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("qonnx.custom_op.general", opset)],
                              ir_version=8)
    onnx.save(model, str(path))
    return path


def test_run_reference_trunc_version_as_qonnx_picks_it(tmp_path, capsys):
    """A 6-input Trunc in a model importing its domain at version 1 runs v1 in qonnx (out_scale read
    as out_bitwidth); the runner makes the custom-op library run it so too. A 5-input Trunc imported
    at version 2 is refused with the node named (qonnx fails on it as well)."""
    require_qonnx()
    model = _trunc_model(tmp_path / "v1_six_inputs.onnx", 6, 1)
    status, text = polyquant_cli("run", model, "--reference", "--repeat", 1, "--seed", 4, "-o", tmp_path / "a")
    assert status == 0, text
    assert "result     bit-exact" in text
    model = _trunc_model(tmp_path / "v2_five_inputs.onnx", 5, 2)
    status, _ = polyquant_cli("run", model, "--repeat", 1, "-o", tmp_path / "b")
    assert status == 2
    assert "Trunc node 't0'" in capsys.readouterr().err


def test_run_prints_no_onnxruntime_warnings_on_a_raw_export(tmp_path):
    """A raw export lists its initializers as graph inputs; onnxruntime would warn about each."""
    done = subprocess.run([sys.executable, "-m", "polyquant", "run", str(BREVITAS / "conv_perchannel.onnx"),
                           "--repeat", "1", "-o", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr


def test_run_reference_without_qonnx_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "reference_unavailable", lambda: "qonnx is not importable (test)")
    status, _ = polyquant_cli("run", MODEL, "--reference", "-o", tmp_path)
    assert status == 2
    assert "qonnx is not importable (test)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "no_such_model.onnx"], "model file not found"),
        (["run", MODEL, "--input", "z=whatever.npy"], "the model has no input 'z'"),
        (["run", MODEL, "--input", "x=no_such_file.npy"], "cannot read no_such_file.npy"),
        (["run", MODEL, "--input", "x=WRONG_SHAPE"], "has shape (3, 64), the model expects (256, 64)"),
        (["run", MODEL, "--input", "x=COMPLEX_INPUT"], "has dtype complex64, the model expects float32"),
        (["bench", "--size", "100"], "--size must be a positive multiple of 64"),
    ],
)
def test_bad_inputs_are_clear_errors(argv, message, tmp_path, capsys):
    np.save(tmp_path / "wrong.npy", np.zeros((3, 64), np.float32))
    np.save(tmp_path / "complex.npy", np.zeros((256, 64), np.complex64))
    argv = [str(a).replace("WRONG_SHAPE", str(tmp_path / "wrong.npy")).replace("COMPLEX_INPUT", str(tmp_path / "complex.npy"))
            for a in argv]
    status, _ = polyquant_cli(*argv, "-o", tmp_path) if argv[0] == "run" else polyquant_cli(*argv)
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith(f"polyquant {argv[0]}: error:") and message in err


@pytest.mark.parametrize(
    "argv",
    [[], ["frobnicate"], ["run"], ["run", "m.onnx", "--repeat", "0"], ["bench", "--ops", "nope"],
     ["bench", "--size", "lots"]],
)
def test_bad_arguments_exit_2_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "usage: polyquant" in capsys.readouterr().err


# --- bench ---------------------------------------------------------------------------------------


def test_bench_json_on_a_small_size():
    require_qonnx()
    status, text = polyquant_cli("bench", "--size", 64 * 512, "--repeat", 2, "--peer-repeat", 1, "--json")
    assert status == 0
    report = json.loads(text)
    assert report["size"] == 64 * 512 and report["repeat"] == 2 and report["peer_repeat"] == 1
    names = [op["name"] for op in report["ops"]]
    assert names == ["intquant", "intquant_pc", "intquant_half_up", "bipolar", "trunc", "trunc_v2", "floatquant"]
    for op in report["ops"]:
        assert op["polyquant_ms"] > 0 and op["memcpy_ms"] > 0 and op["gbps"] > 0
        assert len(op["samples_ms"]["polyquant"]) == 2 and len(op["samples_ms"]["qonnx"]) == 1
        assert op["bit_exact_vs_qonnx"] is True, op["name"]
        assert op["speedup_vs_qonnx"] == pytest.approx(op["qonnx_ms"] / op["polyquant_ms"])
    assert report["ops"][1]["shape"] == [64, 512]
    if "out" in inspect.signature(polyquant.qonnx.int_quant).parameters:  # the steady-state path is timed too
        assert all(op["polyquant_out_ms"] > 0 and op["out_of_memcpy"] > 0 for op in report["ops"])


def test_bench_qkeras_cases_json():
    status, text = polyquant_cli("bench", "--size", 2 * 16384, "--repeat", 2, "--ops", "qk_bits", "qk_bits_auto",
                                 "qk_linear_auto_po2", "--json")
    assert status == 0
    report = json.loads(text)
    assert report["ops"] == []
    rows = {r["name"]: r for r in report["qkeras"]}
    assert list(rows) == ["qk_bits", "qk_bits_auto", "qk_linear_auto_po2"]
    for r in rows.values():
        assert r["shape"] == [2, 16384]
        assert r["polyquant_ms"] > 0 and r["polyquant_out_ms"] > 0 and r["copy_ms"] > 0 and r["read_ms"] > 0
        assert len(r["samples_ms"]["polyquant"]) == 2
        # QKeras' recorded timings are for 64 Mi elements only
        assert r["qkeras_ms"] is None and r["speedup_vs_qkeras"] is None
    assert rows["qk_bits"]["reads"] == 0 and rows["qk_bits"]["min_passes_ratio"] is None
    assert rows["qk_bits_auto"]["reads"] == 1 and rows["qk_bits_auto"]["least_squares_rounds"] == 0
    po2 = rows["qk_linear_auto_po2"]
    assert 1 <= po2["least_squares_rounds"] <= 5 and po2["reads"] == 1 + po2["least_squares_rounds"]
    assert po2["min_passes_ms"] == pytest.approx(po2["reads"] * po2["read_ms"] + po2["copy_ms"])


def test_bench_qkeras_table_with_recorded_peer(tmp_path):
    timings = tmp_path / "t.json"
    timings.write_text(json.dumps({"elements": 16384, "versions": {"tensorflow": "2.15.1"},
                                   "results": {"quantized_relu(8,0)": {"median_s": 2.0}}}))
    status, text = polyquant_cli("bench", "--size", 16384, "--repeat", 1, "--ops", "qk_relu", "--qkeras-timings", timings)
    assert status == 0
    row = [line for line in text.splitlines() if line.startswith("qk_relu")]
    assert len(row) == 1 and "2000 ms" in row[0], text


def test_bench_table_for_selected_ops_without_peers():
    status, text = polyquant_cli("bench", "--size", 4096, "--repeat", 1, "--ops", "bipolar", "floatquant", "--no-peers")
    assert status == 0
    rows = [line.split()[0] for line in text.splitlines() if line.startswith(("bipolar", "floatquant", "intquant"))]
    assert rows == ["bipolar", "floatquant"]
    assert "qonnx not used" in text


@pytest.mark.parametrize("variable,value", [("POLYQUANT_ISA", "bogus"), ("POLYQUANT_NUM_THREADS", "abc"),
                                            ("POLYQUANT_NUM_THREADS", "0")])
@pytest.mark.parametrize("command", [["info"], ["bench", "--size", "1024", "--ops", "bipolar"]])
def test_bad_environment_is_a_clear_error_not_a_traceback(variable, value, command):
    """Both variables are checked alike (a bad thread count used to be ignored silently), and the CLI
    names the variable and the allowed values instead of printing a traceback."""
    import os

    env = dict(os.environ, **{variable: value})
    proc = subprocess.run([sys.executable, "-m", "polyquant", *command], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert variable in proc.stderr and value in proc.stderr and "allowed" in proc.stderr


def test_bench_aimet_cases_json():
    names = ["aimet_qdq", "aimet_qdq_axis_last", "aimet_qdq_blocked", "aimet_minmax", "aimet_sqnr_channel"]
    status, text = polyquant_cli("bench", "--size", 4 * 16384, "--repeat", 2, "--ops", *names, "--json")
    assert status == 0
    report = json.loads(text)
    rows = {r["name"]: r for r in report["aimet"]}
    assert list(rows) == names
    for r in rows.values():
        assert r["polyquant_ms"] > 0 and r["copy_ms"] > 0 and len(r["samples_ms"]["polyquant"]) == 2
        # aimet-torch's recorded timings are for 64 Mi elements only
        assert r["aimet_ms"] is None and r["speedup_vs_aimet"] is None
    assert rows["aimet_minmax"]["baseline"] == "x.sum()" and rows["aimet_qdq"]["shape"] == [4, 16384]
    assert rows["aimet_qdq_axis_last"]["shape"] == [1024, 64]
