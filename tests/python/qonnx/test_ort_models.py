"""Whole QONNX models shipped inside the qonnx wheel (package qonnx.data), run in one
onnxruntime.InferenceSession with polyquant's custom-op library and compared bit for bit with
qonnx's own execution (execute_onnx: numpy for the QONNX ops, a one-node onnxruntime session per
standard op), output and every QONNX node's output alike; the FP8 model also against its stored
golden output (produced by Brevitas)."""

from __future__ import annotations

import importlib.resources
import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("qonnx")

from onnx import numpy_helper  # noqa: E402
from qonnx.core.modelwrapper import ModelWrapper  # noqa: E402
from qonnx.core.onnx_exec import execute_onnx  # noqa: E402
from qonnx.transformation.infer_shapes import InferShapes  # noqa: E402

import polyquant.ort  # noqa: E402

try:
    polyquant.ort.library_path()
except FileNotFoundError as e:  # a build with POLYQUANT_BUILD_ORT=OFF
    pytest.skip(str(e), allow_module_level=True)

DATA = importlib.resources.files("qonnx.data") / "onnx"
QONNX_OPS = set(polyquant.ort.OPS)
ESPCN_INPUT = "bsd300x3-espcn/test_data/input_0.pb"

MODELS = {  # id: (model, input (a file, or None for random data))
    "espcn-nn_resize": ("bsd300x3-espcn/nn_resize/quant_model.onnx", ESPCN_INPUT),
    "espcn-subpixel": ("bsd300x3-espcn/subpixel/quant_model.onnx", ESPCN_INPUT),
    "floatquant-fp8": ("floatquant_exec/qonnx_act_weight_fp8.onnx", "floatquant_exec/test_data/input.npy"),
    "eltwise-chanlast": ("eltwise_chanlast_testcase.onnx", None),
}


def load_input(model: onnx.ModelProto, source: str | None, rng: np.random.Generator) -> dict[str, np.ndarray]:
    initializers = {t.name for t in model.graph.initializer}
    (graph_input,) = [i for i in model.graph.input if i.name not in initializers]
    if source is None:  # eltwise_chanlast_testcase annotates its input as UINT8
        shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
        value = rng.integers(0, 256, shape).astype(np.float32)
    elif source.endswith(".npy"):
        value = np.load(DATA / source)
    else:
        value = numpy_helper.to_array(onnx.load_tensor_from_string((DATA / source).read_bytes()))
    return {graph_input.name: value}


def session(model: bytes) -> Any:
    options = polyquant.ort.session_options()
    options.log_severity_level = 3  # the exported models draw warnings (initializers listed as inputs)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def quant_outputs(model: onnx.ModelProto) -> list[str]:
    return [n.output[0] for n in model.graph.node if n.op_type in QONNX_OPS]


def run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray], extra_outputs: list[str]) -> dict[str, np.ndarray]:
    """The whole model in one session, with the QONNX nodes' outputs as additional graph outputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    existing = {o.name for o in model.graph.output}
    for name in extra_outputs:
        if name not in existing:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    sess = session(model.SerializeToString())
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def run_qonnx(model: onnx.ModelProto, inputs: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # execute_onnx runs each standard op in a one-node model made with onnx.helper.make_model, whose
    # default IR version (onnx >= 1.19) can be newer than onnxruntime accepts: cap it.
    import qonnx.core.onnx_exec as onnx_exec

    make_model = onnx_exec.qonnx_make_model

    def make_model_for_ort(graph: Any, **kwargs: Any) -> onnx.ModelProto:
        node_model = make_model(graph, **kwargs)
        node_model.ir_version = min(node_model.ir_version, 10)
        return node_model

    monkeypatch.setattr(onnx_exec, "qonnx_make_model", make_model_for_ort)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ModelWrapper's notes on renamed domains and the like
        wrapped = ModelWrapper(onnx.ModelProto.FromString(model.SerializeToString()))
        wrapped = wrapped.transform(InferShapes())
        with np.errstate(all="ignore"):
            return execute_onnx(wrapped, dict(inputs), return_full_exec_context=True)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_qonnx_execution(name, rng, same, monkeypatch):
    path, source = MODELS[name]
    model = onnx.load_from_string((DATA / path).read_bytes())
    inputs = load_input(model, source, rng)
    checked = quant_outputs(model)
    assert checked, "the model has no QONNX node"
    got = run_ort(model, inputs, checked)
    expected = run_qonnx(model, inputs, monkeypatch)
    (x,) = inputs.values()
    for tensor in checked + [o.name for o in model.graph.output]:
        same(got[tensor], np.asarray(expected[tensor]), x if got[tensor].shape == x.shape else got[tensor])


def test_fp8_model_matches_brevitas_golden(same):
    model = (DATA / "floatquant_exec/qonnx_act_weight_fp8.onnx").read_bytes()
    x = np.load(DATA / "floatquant_exec/test_data/input.npy")
    golden = np.load(DATA / "floatquant_exec/test_data/output.npy")
    sess = session(model)
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})
    same(y, golden, x)


def test_fp8_model_quantized_activations_match_brevitas(same):
    """The stored activation.npz holds Brevitas' quantized input and weight: the FloatQuant nodes
    of the ONNX model reproduce them exactly."""
    model = onnx.load_from_string((DATA / "floatquant_exec/qonnx_act_weight_fp8.onnx").read_bytes())
    x = np.load(DATA / "floatquant_exec/test_data/input.npy")
    activations = np.load(DATA / "floatquant_exec/test_data/activation.npz")
    nodes = [n for n in model.graph.node if n.op_type == "FloatQuant"]
    got = run_ort(model, {model.graph.input[0].name: x}, [n.output[0] for n in nodes])
    outputs = sorted((got[n.output[0]] for n in nodes), key=lambda a: a.size)
    same(outputs[0], activations["input_quant"].astype(np.float32))
    same(outputs[1], activations["weight_quant"].astype(np.float32))
