"""The example model: deterministic to regenerate, and bit-exact with qonnx's execute_onnx when run in
onnxruntime with the polyquant custom-op library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyquant._tools import runner

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "make_qonnx_mlp.py"
MODEL = ROOT / "examples" / "qonnx_mlp.onnx"


def require_qonnx():
    """Skip unless qonnx imports (qonnx 1.0.0 needs Python >= 3.10)."""
    reason = runner.reference_unavailable()
    if reason:
        pytest.skip(reason)


def test_regenerating_the_model_gives_identical_bytes(tmp_path):
    pytest.importorskip("onnx")
    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    for path in (first, second):
        subprocess.run([sys.executable, str(SCRIPT), "-o", str(path)], check=True, capture_output=True)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() == MODEL.read_bytes(), "examples/qonnx_mlp.onnx is stale: rerun the script"


def test_the_model_uses_every_qonnx_op_and_declares_every_shape():
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(MODEL))
    assert MODEL.stat().st_size < 1 << 20
    opsets = {o.domain: o.version for o in model.opset_import}
    assert opsets["qonnx.custom_op.general"] == 2
    custom = [n for n in model.graph.node if n.domain == "qonnx.custom_op.general"]
    assert {n.op_type for n in custom} == {"IntQuant", "Quant", "BipolarQuant", "Trunc", "FloatQuant"}
    assert all(len(n.input) == 6 for n in custom if n.op_type == "Trunc")  # Trunc v2
    fp8 = next(n for n in custom if n.op_type == "FloatQuant")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in fp8.attribute}
    assert attrs == {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1, "rounding_mode": b"ROUND"}
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert consts["fc3_weight_quant_exponent_bias"] == 7 and consts["fc3_weight_quant_max_val"] == 448
    assert consts["fc1_weight_quant_scale"].shape == (128, 1)  # per-channel weight scale

    require_qonnx()
    from qonnx.core.modelwrapper import ModelWrapper

    assert ModelWrapper(str(MODEL)).check_all_tensor_shapes_specified()


def _special_batch(rng):
    """Random rows, then rows of exact ties of the 8-bit input quantizer (k + 1/2) * 2^-5, values one ulp
    either side of them, signed zeros, +-inf, NaN and huge values."""
    x = rng.standard_normal((256, 64)).astype(np.float32)
    ties = ((rng.integers(-300, 300, (64, 64)) + 0.5) * 2.0**-5).astype(np.float32)
    x[:64] = ties
    x[64:128] = np.nextafter(ties, np.float32(np.inf))
    x[128:192] = np.nextafter(ties, np.float32(-np.inf))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 2.0**-149], np.float32)
    x[192:200] = specials[rng.integers(0, specials.size, (8, 64))]
    x[200, :] = np.nan
    x[201, :] = -0.0
    return x


@pytest.mark.parametrize("data", ["random", "ties_and_specials"])
def test_onnxruntime_with_polyquant_matches_qonnx_execute_onnx(data, rng, same):
    require_qonnx()
    session = runner.make_session(MODEL)
    inputs = runner.random_inputs(session, seed=int(rng.integers(1 << 31)))
    if data == "ties_and_specials":
        inputs["x"] = _special_batch(rng)
    outputs, _ = runner.run_session(session, inputs, show_progress=False)
    expected, _ = runner.run_reference(MODEL, inputs, show_progress=False)
    assert list(outputs) == ["y"] and outputs["y"].shape == (256, 10)
    same(outputs["y"], expected["y"])
    assert runner.compare(outputs["y"], expected["y"]).exact
    # The model is not degenerate: the output takes many distinct FP8 values.
    assert np.unique(outputs["y"][np.isfinite(outputs["y"])]).size > 20
