"""The example models in examples/, one per family `polyquant run` runs (QONNX, ONNX Q/DQ at opset 28,
Quark): each generator writes the committed bytes again, and `polyquant run MODEL --reference` checks
each bit for bit against its reference (qonnx's execute_onnx, onnx's reference evaluator, amd-quark's
own CPU op). The CLI runs as a user runs it, in a child process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
# model -> (its generator, what --reference runs it against)
MODELS = {
    "qonnx_mlp.onnx": ("make_qonnx_mlp.py", "qonnx execute_onnx"),
    "onnx_qdq_mlp.onnx": ("make_onnx_qdq_mlp.py", "onnx's reference evaluator"),
    "quark_mlp.onnx": ("make_quark_mlp.py", "amd-quark's CPU op in onnxruntime"),
}


def polyquant(*argv):
    """`python -m polyquant ARGV...` in a child process: (exit status, stdout + stderr)."""
    done = subprocess.run([sys.executable, "-m", "polyquant", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    return done.returncode, done.stdout + done.stderr


def require_reference(model):
    """Skip unless the reference of `model` is installed: qonnx (Python >= 3.10), or amd-quark with torch."""
    if model == "qonnx_mlp.onnx":
        try:
            import qonnx.core.onnx_exec  # noqa: F401
        except Exception as exc:  # not installed, or not importable (qonnx 1.0.0 needs Python >= 3.10)
            pytest.skip(f"qonnx cannot be imported ({type(exc).__name__}: {exc})")
    elif model == "quark_mlp.onnx":
        for name in ("torch", "quark"):
            if importlib.util.find_spec(name) is None:
                pytest.skip(f"{name} is not installed: --reference on a Quark model needs amd-quark and torch "
                            f"(docs/golden-data.md#quark); test_quark_model_equals_the_quark_formulas "
                            f"checks the model without them")


@pytest.mark.parametrize("model", MODELS)
def test_generator_writes_the_committed_bytes(model, tmp_path):
    generator, _ = MODELS[model]
    out = tmp_path / model
    subprocess.run([sys.executable, str(EXAMPLES / generator), "-o", str(out)], check=True, capture_output=True)
    committed = (EXAMPLES / model).read_bytes()
    assert len(committed) < 100_000
    assert out.read_bytes() == committed, f"examples/{model} is stale: rerun examples/{generator}"


@pytest.mark.parametrize("model", MODELS)
def test_run_reference_is_bit_exact(model, tmp_path):
    require_reference(model)
    status, text = polyquant("run", EXAMPLES / model, "--reference", "--repeat", 2, "-o", tmp_path)
    assert status == 0, text
    assert f"against {MODELS[model][1]}" in text
    assert "check      y: bit-exact" in text and "result     bit-exact" in text, text
    y = np.load(tmp_path / "y.npy")
    assert np.array_equal(y.view(np.uint32), np.load(tmp_path / "reference" / "y.npy").view(np.uint32))
    # Not a degenerate model: the output takes many values.
    assert np.unique(y[np.isfinite(y)]).size > 20


def test_onnx_qdq_model_runs_its_qdq_nodes_in_polyquant(tmp_path):
    status, text = polyquant("run", EXAMPLES / "onnx_qdq_mlp.onnx", "--repeat", 1, "-o", tmp_path)
    assert status == 0, text
    assert "run as polyquant.onnx ops" in text  # onnxruntime has no opset-28 Q/DQ kernels


# ---- the Quark model without amd-quark: the formulas of Quark's CPU kernel for the model's types,
# restated in numpy (docs/golden-data.md#quark; polyquant.quark is checked against amd-quark's
# own op by tests of the Quark golden data).


def _quark_quantize(x, scale, zero_point):
    if zero_point.dtype == ml_dtypes.bfloat16:  # x / scale + zero point, rounded once to bfloat16
        return (x / scale + zero_point.astype(np.float32)).astype(np.float32).astype(ml_dtypes.bfloat16)
    info = np.iinfo(zero_point.dtype)  # round half to even, then add the zero point and saturate
    return np.clip(np.rint(x / scale).astype(np.int64) + zero_point, info.min, info.max).astype(zero_point.dtype)


def _quark_dequantize(q, scale, zero_point):
    if q.dtype == ml_dtypes.bfloat16:
        return ((q.astype(np.float32) - zero_point.astype(np.float32)) * scale).astype(np.float32)
    return ((q.astype(np.int64) - zero_point.astype(np.int64)).astype(np.float32) * scale).astype(np.float32)


def _quark_graph(x, consts):
    """quark_mlp.onnx, node by node (examples/make_quark_mlp.py). Its MatMul and Add are exact in float32
    by construction (powers of two, small integers), so numpy's summation order gives the same bits."""
    def qdq(v, prefix):
        scale, zero_point = consts[f"{prefix}_scale"], consts[f"{prefix}_zero_point"]
        return _quark_dequantize(_quark_quantize(v, scale, zero_point), scale, zero_point)

    def weight(name):
        return _quark_dequantize(consts[f"{name}_quantized"], consts[f"{name}_scale"], consts[f"{name}_zero_point"])

    h = np.maximum(qdq(x, "x") @ weight("w1") + consts["b1"], np.float32(0))
    return qdq(qdq(h, "h") @ weight("w2") + consts["b2"], "y")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quark_model_equals_the_quark_formulas(seed, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    model = onnx.load(str(EXAMPLES / "quark_mlp.onnx"))
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert consts["y_zero_point"].dtype == ml_dtypes.bfloat16 and consts["h_zero_point"].dtype == np.uint16
    status, text = polyquant("run", EXAMPLES / "quark_mlp.onnx", "--seed", seed, "--repeat", 1, "-o", tmp_path)
    assert status == 0, text
    x = np.load(tmp_path / "inputs" / "x.npy")
    y = np.load(tmp_path / "y.npy")
    want = _quark_graph(x, consts)
    assert y.dtype == want.dtype == np.float32
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
    assert np.unique(y).size > 20
