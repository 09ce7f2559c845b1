"""polyquant.qonnx.execute_onnx against qonnx's own execute_onnx, bit for bit: the bundled example,
the models shipped in the qonnx wheel, the Brevitas exports in tests/data/brevitas; full execution
contexts, start/end nodes, input overrides, model kinds, Trunc version selection, caching."""

from __future__ import annotations

import importlib.resources
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("qonnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from qonnx.core.modelwrapper import ModelWrapper  # noqa: E402
from qonnx.core.onnx_exec import execute_onnx as qonnx_execute_onnx  # noqa: E402
from qonnx.transformation.infer_shapes import InferShapes  # noqa: E402

import polyquant.ort  # noqa: E402
import polyquant.qonnx as pq  # noqa: E402
from polyquant._tools import runner  # noqa: E402
from polyquant.qonnx import execute as _execute  # noqa: E402
from ..golden import golden  # noqa: E402

try:
    polyquant.ort.library_path()
except FileNotFoundError as e:  # a build with POLYQUANT_BUILD_ORT=OFF
    pytest.skip(str(e), allow_module_level=True)

ROOT = Path(__file__).resolve().parents[3]
BREVITAS = golden("brevitas")
BREVITAS_MODELS = ["mlp_perchannel", "conv_perchannel", "truncavgpool", "bipolar", "fp8"]
QONNX_DATA = importlib.resources.files("qonnx.data") / "onnx"
ESPCN_INPUT = "bsd300x3-espcn/test_data/input_0.pb"
QONNX_MODELS = {  # id: (model, input: a file, or None for random 0..255 integers)
    "espcn-nn_resize": ("bsd300x3-espcn/nn_resize/quant_model.onnx", ESPCN_INPUT),
    "espcn-subpixel": ("bsd300x3-espcn/subpixel/quant_model.onnx", ESPCN_INPUT),
    "floatquant-fp8": ("floatquant_exec/qonnx_act_weight_fp8.onnx", "floatquant_exec/test_data/input.npy"),
    "eltwise-chanlast": ("eltwise_chanlast_testcase.onnx", None),
}


def data_input_name(model: Any) -> str:
    initializers = {t.name for t in model.graph.initializer}
    (name,) = [i.name for i in model.graph.input if i.name not in initializers]
    return name


def load_case(case: str, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """(ModelProto, inputs) of a test model."""
    if case == "example":
        model = onnx.load(str(ROOT / "examples" / "qonnx_mlp.onnx"))
        return model, {"x": rng.standard_normal((256, 64)).astype(np.float32)}
    if case in BREVITAS_MODELS:
        model = onnx.load(str(BREVITAS.path(f"{case}.onnx")))
        return model, {data_input_name(model): BREVITAS.npy(f"{case}.input.npy")}
    path, source = QONNX_MODELS[case]
    model = onnx.load_from_string((QONNX_DATA / path).read_bytes())
    name = data_input_name(model)
    if source is None:  # eltwise_chanlast_testcase annotates its input as UINT8
        (graph_input,) = [i for i in model.graph.input if i.name == name]
        shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
        value = rng.integers(0, 256, shape).astype(np.float32)
    elif source.endswith(".npy"):
        value = np.load(QONNX_DATA / source)
    else:
        value = numpy_helper.to_array(onnx.load_tensor_from_string((QONNX_DATA / source).read_bytes()))
    return model, {name: value}


def wrapped(model: Any) -> Any:
    """A qonnx ModelWrapper of a copy of the model, with every shape inferred (qonnx needs them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ModelWrapper(onnx.ModelProto.FromString(model.SerializeToString())).transform(InferShapes())


def qonnx_run(model: Any, inputs: dict[str, np.ndarray], *args: Any) -> dict[str, Any]:
    import qonnx.core.onnx_exec as onnx_exec

    wrapper = model if isinstance(model, ModelWrapper) else wrapped(model)
    with runner._single_node_models_at_ir(onnx_exec, 10), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return qonnx_execute_onnx(wrapper, dict(inputs), *args)


def assert_same_context(got: dict[str, Any], expected: dict[str, Any], same: Any) -> None:
    assert set(expected) <= set(got), f"missing: {sorted(set(expected) - set(got))[:10]}"
    for name, value in expected.items():
        if value is None:
            assert got[name] is None, name
            continue
        value = np.asarray(value)
        assert isinstance(got[name], np.ndarray), name
        same(got[name], value)


CASES = ["example", *QONNX_MODELS, *BREVITAS_MODELS]


@pytest.mark.parametrize("case", CASES)
def test_outputs_and_full_context_match_qonnx(case, rng, same):
    model, inputs = load_case(case, rng)
    wrapper = wrapped(model)
    expected = qonnx_run(wrapper, inputs)
    got = pq.execute_onnx(wrapper, dict(inputs))
    assert list(got) == list(expected)
    assert_same_context(got, expected, same)
    full_expected = qonnx_run(wrapper, inputs, True)
    full = pq.execute_onnx(wrapper, dict(inputs), return_full_exec_context=True)
    assert_same_context(full, full_expected, same)
    if case in BREVITAS_MODELS:  # the output qonnx gave when the model was made
        (y,) = got.values()
        same(y, BREVITAS.npy(f"{case}.expected.npy"))


def test_the_fast_session_would_not_match(rng, same):
    """Why execute_onnx and `polyquant run --reference` use their own session settings: on the
    batch-1 MLP, onnxruntime's fully optimized session (FusedMatMul) differs from qonnx; the
    reference settings do not."""
    model, inputs = load_case("mlp_perchannel", rng)
    expected = BREVITAS.npy("mlp_perchannel.expected.npy")
    fast = ort.InferenceSession(model.SerializeToString(), polyquant.ort.session_options(),
                                providers=["CPUExecutionProvider"])
    (y_fast,) = fast.run(None, inputs)
    if runner.compare(y_fast, expected).exact:
        pytest.skip("this onnxruntime's fused kernels happen to agree here; nothing to show")
    reference = ort.InferenceSession(model.SerializeToString(), _execute.reference_session_options(),
                                     providers=["CPUExecutionProvider"])
    same(reference.run(None, inputs)[0], expected)
    same(next(iter(pq.execute_onnx(model, inputs).values())), expected)


def test_model_as_proto_path_or_wrapper(tmp_path, rng, same):
    model, inputs = load_case("truncavgpool", rng)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    expected = qonnx_run(model, inputs)
    for given in (model, str(path), path, wrapped(model)):
        got = pq.execute_onnx(given, dict(inputs))
        assert_same_context(got, expected, same)
    with pytest.raises(TypeError, match="ModelWrapper, an onnx.ModelProto or a path"):
        pq.execute_onnx(42, inputs)


@pytest.mark.parametrize("case", ["example", "conv_perchannel", "espcn-subpixel"])
def test_start_and_end_node(case, rng, same):
    """A slice of the graph: tensors it reads come from input_dict (here qonnx's own intermediates),
    initializers, or zeros; what it does not run stays as it was, as in qonnx."""
    model, inputs = load_case(case, rng)
    wrapper = wrapped(model)
    nodes = wrapper.graph.node
    full = qonnx_run(wrapper, inputs, True)
    start, end = nodes[len(nodes) // 3], nodes[2 * len(nodes) // 3]
    feeds = {name: full[name] for node in nodes for name in node.input if name in full and full[name] is not None}
    for args in ((start, end), (start, None), (None, end)):
        expected = qonnx_run(wrapper, feeds, True, *args)
        got = pq.execute_onnx(wrapper, dict(feeds), True, *args)
        assert_same_context(got, expected, same)
        same_outputs = qonnx_run(wrapper, feeds, False, *args)
        assert_same_context(pq.execute_onnx(wrapper, dict(feeds), False, *args), same_outputs, same)
    with pytest.raises(ValueError, match="Start/end"):
        pq.execute_onnx(wrapper, feeds, False, end, start)


def test_overridden_initializer_and_missing_input(rng, same):
    """input_dict may replace an initializer (qonnx's context takes it); an input not given is zeros."""
    model, inputs = load_case("conv_perchannel", rng)
    wrapper = wrapped(model)
    weight = next(t for t in model.graph.initializer if t.name.endswith("weight"))
    value = numpy_helper.to_array(weight) * np.float32(0.5)
    feeds = {**inputs, weight.name: value}
    assert_same_context(pq.execute_onnx(wrapper, dict(feeds), True), qonnx_run(wrapper, feeds, True), same)
    assert_same_context(pq.execute_onnx(wrapper, {}), qonnx_run(wrapper, {}), same)
    ignored = {**inputs, "no_such_tensor": np.ones(3, np.float32)}  # qonnx ignores unknown names too...
    with pytest.warns(pq.UnknownInputWarning, match="'no_such_tensor'"):  # ...polyquant says so
        got = pq.execute_onnx(wrapper, ignored)
    assert_same_context(got, qonnx_run(wrapper, inputs), same)
    (name,) = inputs
    declared = tuple(inputs[name].shape)
    with pytest.raises(Exception, match="Shape mismatch for provided input") as info:
        pq.execute_onnx(wrapper, {name: np.zeros((1, 1), np.float32)})
    # "found" is what was given, "expected" what the model declares (qonnx has them swapped).
    assert f"found (1, 1) expected {declared}" in str(info.value)


def test_misspelt_input_name_warns_naming_the_key_and_the_inputs(rng, same):
    """A key that is no tensor of the model runs the model on zeros, as in qonnx, but warns: the
    warning names the unknown key and the model's inputs. Known keys alone give no warning."""
    model, inputs = load_case("example", rng)
    (name,) = inputs
    with pytest.warns(pq.UnknownInputWarning) as record:
        got = pq.execute_onnx(model, {"input": inputs[name]})
    (warning,) = record
    assert "'input'" in str(warning.message) and f"'{name}'" in str(warning.message)
    assert warning.filename == __file__  # points at the caller
    assert_same_context(got, qonnx_run(wrapped(model), {"input": inputs[name]}), same)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pq.execute_onnx(model, inputs)  # no warning
    assert issubclass(pq.UnknownInputWarning, UserWarning)


def test_input_dict_must_be_a_mapping(rng):
    model, inputs = load_case("example", rng)
    with pytest.raises(TypeError, match="input_dict"):
        pq.execute_onnx(model, list(inputs.values()))


def test_session_is_cached(rng):
    _execute.clear_cache()
    model, inputs = load_case("bipolar", rng)
    first = pq.execute_onnx(model, dict(inputs))
    sessions = list(_execute._CACHE.values())
    assert len(sessions) == 1
    second = pq.execute_onnx(model, dict(inputs))
    assert list(_execute._CACHE.values()) == sessions  # the same session object, reused
    assert all(np.array_equal(first[k], second[k]) for k in first)
    pq.execute_onnx(model, dict(inputs), return_full_exec_context=True)  # another output set: a new one
    assert len(_execute._CACHE) == 2


def trunc_model(inputs: int, opset: int | None) -> Any:
    f = TensorProto.FLOAT
    names = ["x", "scale", "zeropt", "in_bw", "out_scale", "out_bw"] if inputs == 6 else \
        ["x", "scale", "zeropt", "in_bw", "out_bw"]
    values = {"scale": 1.0, "zeropt": 0.0, "in_bw": 8.0, "out_scale": 16.0, "out_bw": 4.0}
    node = helper.make_node("Trunc", names, ["y"], domain="qonnx.custom_op.general", rounding_mode="FLOOR",
                            name="trunc0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", f, [2, 8])],
                              [helper.make_tensor_value_info("y", f, [2, 8])],
                              [numpy_helper.from_array(np.asarray(values[n], np.float32), n) for n in names[1:]])
    imports = [helper.make_opsetid("", 17)]
    if opset is not None:
        imports.append(helper.make_opsetid("qonnx.custom_op.general", opset))
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def test_trunc_version_follows_the_opset_import_as_in_qonnx(rng, same):
    """qonnx picks Trunc v1/v2 by the model's opset import (v1 without one); polyquant's ORT kernel
    by the input count. execute_onnx makes them agree: a 6-input Trunc imported at version 1 runs
    v1 as in qonnx (which then reads out_scale as out_bitwidth)."""
    x = {"x": (rng.standard_normal((2, 8)) * 60).astype(np.float32)}
    for inputs, opset in ((5, None), (5, 1), (6, 2), (6, 3), (6, None), (6, 1)):
        model = trunc_model(inputs, opset)
        expected = qonnx_run(model, x)
        same(pq.execute_onnx(model, dict(x))["y"], np.asarray(expected["y"]))
    v1 = pq.execute_onnx(trunc_model(6, 1), dict(x))["y"]
    v2 = pq.execute_onnx(trunc_model(6, 2), dict(x))["y"]
    assert not np.array_equal(v1, v2)
    with pytest.raises(ValueError, match="trunc0.*version 2.*6 inputs.*has 5"):
        pq.execute_onnx(trunc_model(5, 2), dict(x))


def test_unsupported_custom_op_defers_to_qonnx(rng, same):
    """A qonnx custom op polyquant does not implement (MultiThreshold) runs through qonnx itself."""
    f = TensorProto.FLOAT
    node = helper.make_node("MultiThreshold", ["x", "thresholds"], ["y"], domain="qonnx.custom_op.general")
    thresholds = np.sort(rng.standard_normal((1, 3)).astype(np.float32), axis=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", f, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", f, [1, 1, 4, 4])],
                              [numpy_helper.from_array(thresholds, "thresholds")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = {"x": rng.standard_normal((1, 1, 4, 4)).astype(np.float32)}
    same(pq.execute_onnx(model, dict(x))["y"], np.asarray(qonnx_run(model, x)["y"]))


def test_exec_mode_metadata_is_refused_as_in_qonnx(rng):
    model, inputs = load_case("bipolar", rng)
    helper.set_model_props(model, {"exec_mode": "remote_pynq"})
    with pytest.raises(Exception, match="exec_mode"):
        pq.execute_onnx(model, inputs)


def test_is_exported_from_polyquant_qonnx():
    assert "execute_onnx" in pq.__all__
    import inspect

    ours = inspect.signature(pq.execute_onnx).parameters
    theirs = inspect.signature(qonnx_execute_onnx).parameters
    assert list(ours) == list(theirs)
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]


def test_integer_annotations_are_sanitized_as_in_qonnx(rng, same):
    """qonnx rounds tensors annotated with an integer datatype before each node reads them (a
    warning; an error beyond 1e-2): eltwise_chanlast annotates its input UINT8."""
    model, inputs = load_case("eltwise-chanlast", rng)
    (name,) = inputs
    nudged = {name: inputs[name] + np.float32(0.004)}
    wrapper = wrapped(model)
    with pytest.warns(UserWarning, match="rounded to match the datatype annotation"):
        got = pq.execute_onnx(wrapper, dict(nudged), True)
    assert_same_context(got, qonnx_run(wrapper, nudged, True), same)
    far = {name: inputs[name] + np.float32(0.25)}
    with pytest.raises(Exception, match="Rounding error is too high"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pq.execute_onnx(wrapper, far)


def test_annotated_intermediate_that_needs_rounding_defers_to_qonnx(rng):
    """An intermediate annotated as integer whose values are not integers: qonnx rounds (or, as
    here, refuses) between nodes, which one session cannot; execute_onnx hands the model to qonnx."""
    model, inputs = load_case("conv_perchannel", rng)
    wrapper = wrapped(model)
    quant_out = next(n.output[0] for n in wrapper.graph.node if n.op_type == "Quant")
    from qonnx.core.datatype import DataType

    wrapper.set_tensor_datatype(quant_out, DataType["INT8"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="Rounding error is too high"):
            qonnx_run(wrapper, inputs)
        with pytest.raises(Exception, match="Rounding error is too high"):
            pq.execute_onnx(wrapper, dict(inputs))
    assert _execute._sanitize_enabled()


def test_constant_weights_are_not_prepacked(rng, same):
    """A MatMul whose weight is a constant (an initializer, or folded from Transpose(initializer))
    is prepacked by onnxruntime at session creation, at every optimization level, and then sums in
    another order than the MatMul qonnx runs with the weight fed; the reference settings turn
    prepacking off."""
    f = TensorProto.FLOAT
    w = (rng.standard_normal((16, 288)) * 0.0371).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "wt"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [8, 288])],
                              [helper.make_tensor_value_info("y", f, [8, 16])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = {"x": rng.standard_normal((8, 288)).astype(np.float32)}
    expected = np.asarray(qonnx_run(model, x)["y"])
    same(pq.execute_onnx(model, dict(x))["y"], expected)
    options = polyquant.ort.session_options()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    (prepacked,) = ort.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"]).run(None, x)
    if runner.compare(prepacked, expected).exact:
        pytest.skip("this onnxruntime's prepacked MatMul happens to agree here")
    same(ort.InferenceSession(model.SerializeToString(), _execute.reference_session_options(),
                              providers=["CPUExecutionProvider"]).run(None, x)[0], expected)
