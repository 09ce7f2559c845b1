"""insert_quantizers: a float model with AIMET 2.1.0 encodings written as QONNX IntQuant nodes or as
standard QuantizeLinear / DequantizeLinear pairs. The IntQuant form is checked against qonnx's own
execution (qonnx's execute_onnx, node by node with its numpy IntQuant), the QDQ form against it where
the two forms are the same function (zero point 0), and the one place they are not is shown."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import polyquant
from polyquant._tools import runner
from polyquant._tools.quantized_model import QONNX_DOMAIN, insert_quantizers
from polyquant._tools.runner import CommandError

from .test_calibrate import batches, small_model

pytestmark = pytest.mark.skipif(runner.reference_unavailable() is not None, reason="needs qonnx")


def entries_of(result):
    return [(t.name, t.kind, t.encoding("2.1.0")) for t in result.tensors]


def run(model, inputs, tmp_path, name):
    path = tmp_path / name
    onnx.save(model, path)
    return runner.make_session(str(path)).run(None, inputs)[0], path


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("bits", [4, 8, 16])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
def test_intquant_form_equals_qonnx_execution(bits, per_channel, symmetric, tmp_path):
    data = batches()
    r = polyquant.calibrate(small_model(), data, "minmax", bits=bits, per_channel=per_channel,
                            symmetric=symmetric, show_progress=False)
    m = insert_quantizers(r.model, entries_of(r), "qonnx")
    custom = {(n.domain, n.op_type) for n in m.graph.node if n.domain not in ("", "ai.onnx")}
    assert custom == {(QONNX_DOMAIN, "IntQuant")}
    assert sum(n.op_type == "IntQuant" for n in m.graph.node) == len(r.tensors)
    # Random inputs beyond the calibrated range (clipped), ties of the input's grid, and specials.
    rng = np.random.default_rng(bits)
    x = (rng.standard_normal((3, 3, 8, 8)) * 4).astype(np.float32)
    x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30]
    enc_x = next(e for n, _, e in entries_of(r) if n == "x")
    x.reshape(-1)[6:20] = (np.arange(14, dtype=np.float32) - 7 + np.float32(0.5)) * np.float32(enc_x["y_scale"])
    got, path = run(m, {"x": x}, tmp_path, "q.onnx")
    want, _ = runner.run_reference(str(path), {"x": x}, show_progress=False)
    assert same_bits(got, want["y"])


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_two_forms_agree_where_the_zero_point_is_zero_up_to_the_sign_of_zero(per_channel, tmp_path):
    """Equal values; only a zero's sign may differ: IntQuant's (q - z) * s keeps the sign of a
    negative input that rounds to 0 (-0 * s), DequantizeLinear's integer q - z gives +0."""
    r = polyquant.calibrate(small_model(), batches(), "minmax", symmetric=True, per_channel=per_channel,
                            show_progress=False)
    entries = entries_of(r)
    assert all(np.all(np.asarray(e.get("y_zero_point", 0)) == 0) for _, _, e in entries)
    x = batches(1, seed=7)[0]
    q, _ = run(insert_quantizers(r.model, entries, "qonnx"), x, tmp_path, "q.onnx")
    d, _ = run(insert_quantizers(r.model, entries, "qdq"), x, tmp_path, "d.onnx")
    assert same_bits(q + np.float32(0), d)  # -0 + 0 = +0; every other value unchanged
    differ = q.view(np.uint32) != d.view(np.uint32)
    assert np.all(q[differ] == 0) and np.all(np.signbit(q[differ]))


def relu_model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_an_odd_zero_point_makes_the_forms_round_ties_differently(tmp_path):
    """QuantizeLinear rounds x / s, then adds z; IntQuant rounds x / s + z. With z = 3: the tie
    1.5 goes to 2 in QuantizeLinear but 4.5 goes to 4 in IntQuant (1 after - z); 2.5: 2 against
    5.5 -> 6 (3); and the float32 addition makes a tie of 0.49999997 (the float32 below 0.5):
    0.49999997 + 3 = 3.5 -> 4 (1), where QuantizeLinear rounds 0.49999997 to 0."""
    enc = {"y_scale": 1.0, "y_zero_point": 3, "output_dtype": "uint8"}
    x = {"x": np.array([np.nextafter(np.float32(0.5), np.float32(0)), 0.25, 1.5, 2.5], np.float32)}
    q, path = run(insert_quantizers(relu_model(), [("y", "activation", enc)], "qonnx"), x, tmp_path, "q.onnx")
    d, _ = run(insert_quantizers(relu_model(), [("y", "activation", enc)], "qdq"), x, tmp_path, "d.onnx")
    want, _ = runner.run_reference(str(path), x, show_progress=False)
    assert same_bits(q, want["y"])
    assert q.tolist() == [1.0, 0.0, 1.0, 3.0] and d.tolist() == [0.0, 0.0, 2.0, 2.0]


def test_the_graph_keeps_its_outputs_and_is_valid():
    r = polyquant.calibrate(small_model(), batches(), "minmax", show_progress=False)
    for form in ("qdq", "qonnx"):
        m = insert_quantizers(r.model, entries_of(r), form)
        assert [o.name for o in m.graph.output] == ["y"]
        produced = {o for n in m.graph.node for o in n.output}
        assert "y" in produced and "y__float" in produced
        if form == "qdq":
            onnx.checker.check_model(m)
            assert "conv.w" not in {t.name for t in m.graph.initializer}  # stored as integers
        else:
            assert "conv.w" in {t.name for t in m.graph.initializer}  # IntQuant reads the float weight


@pytest.mark.parametrize("entry, form, match", [
    (("y", "activation", {"y_scale": 1.0, "output_dtype": "float8"}), "qdq", "output dtype 'float8'"),
    (("y", "activation", {"y_scale": 1.0, "output_dtype": "int8", "block_size": 4}), "qonnx", "blockwise"),
    (("y", "activation", {"y_scale": 1.0, "output_dtype": "int16"}), "qdq", "opset 21"),
    (("y", "activation", {"y_scale": [1.0, 2.0], "axis": 0, "output_dtype": "int8"}), "qonnx", "per-channel activation"),
    (("w", "param", {"y_scale": 1.0, "output_dtype": "int8"}), "qonnx", "not an initializer"),
    (("y", "activation", {"y_scale": 1.0, "output_dtype": "int8"}), "qlinear", "form: expected one of qdq, qonnx"),
])
def test_refusals_name_the_tensor(entry, form, match):
    with pytest.raises(CommandError, match=match):
        insert_quantizers(relu_model(), [entry], form)


# ---- float_model: every quantizer out ------------------------------------------------------------

def test_float_model_undoes_the_intquant_form_bit_for_bit():
    """insert_quantizers(qonnx), then float_model: the original network's bits (an Identity per
    activation quantizer, the weights read directly again)."""
    from polyquant._tools.quantized_model import float_model
    import onnxruntime as ort
    r = polyquant.calibrate(small_model(), batches(), "minmax", per_channel=True, show_progress=False)
    fm, removed = float_model(insert_quantizers(r.model, entries_of(r), "qonnx"))
    assert len(removed) == len(r.tensors)
    assert {n.op_type for n in fm.graph.node} == {"Conv", "Relu", "Reshape", "MatMul", "Identity"}
    conv = next(n for n in fm.graph.node if n.op_type == "Conv")
    assert conv.input[1] == "conv.w"  # the weight itself, no Identity in between
    x = batches(1, seed=9)[0]
    want = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(fm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert same_bits(got, want)


def test_float_model_dequantizes_stored_weights_and_folds_transposes():
    """A QDQ model's integer weights come back as ONNX's dequantized floats; a Transpose of a weight
    (Brevitas' MatMul weights) becomes the transposed weight; graph inputs naming initializers go."""
    from polyquant._tools.quantized_model import float_model
    import polyquant.onnx as pqo
    r = polyquant.calibrate(small_model(), batches(), "minmax", per_channel=True, show_progress=False)
    qdq = insert_quantizers(r.model, entries_of(r), "qdq")
    fm, _ = float_model(qdq)
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    folded = {t.name: numpy_helper.to_array(t) for t in fm.graph.initializer}
    enc = dict((n, e) for n, _, e in entries_of(r))["conv.w"]
    want = pqo.dequantize_linear(inits["conv.w__quantized"], np.asarray(enc["y_scale"], np.float32),
                                 np.asarray(enc["y_zero_point"], np.uint8), axis=0)
    assert same_bits(folded["conv.w__dequantized"], want)
    assert not [n for n in fm.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    # A Transpose of a weight that is also listed as a graph input.
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = helper.make_graph([helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3]), helper.make_tensor_value_info("w", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 2])], [numpy_helper.from_array(w, "w")])
    fm, removed = float_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert removed == [] and [n.op_type for n in fm.graph.node] == ["MatMul"]
    assert [v.name for v in fm.graph.input] == ["x"]
    assert same_bits(numpy_helper.to_array(next(t for t in fm.graph.initializer if t.name == "wt")), w.T.copy())
