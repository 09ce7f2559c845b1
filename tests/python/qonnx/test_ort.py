"""The ONNX Runtime custom-op library (polyquant.ort): every op in every domain, run in
onnxruntime and compared bit for bit with polyquant.qonnx and with qonnx's own numpy functions;
Trunc version selection; output types and shapes from shape inference; errors."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("qonnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from qonnx.custom_op.general.bipolar_quant import binary_quant as qonnx_bipolar_quant  # noqa: E402
from qonnx.custom_op.general.floatquant import float_quant as qonnx_float_quant  # noqa: E402
from qonnx.custom_op.general.intquant import int_quant as qonnx_int_quant  # noqa: E402
from qonnx.custom_op.general.trunc import trunc_v1 as qonnx_trunc_v1  # noqa: E402
from qonnx.custom_op.general.trunc import trunc_v2 as qonnx_trunc_v2  # noqa: E402

import polyquant.ort  # noqa: E402
import polyquant.qonnx as pq  # noqa: E402
from ..golden import golden  # noqa: E402

try:
    LIBRARY = polyquant.ort.library_path()
except FileNotFoundError as e:  # a build with POLYQUANT_BUILD_ORT=OFF
    pytest.skip(str(e), allow_module_level=True)

DOMAINS = polyquant.ort.DOMAINS
MODES = ["ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"]
ORT_TYPE = {np.dtype(np.float16): "tensor(float16)", np.dtype(np.float32): "tensor(float)",
            np.dtype(np.float64): "tensor(double)"}


# ---- building and running one-node models -------------------------------------------------------
def make_model(op_type: str, domain: str, inputs: dict[str, np.ndarray], attrs: dict[str, Any], *,
               opset: int | None = 1, initializers: tuple[str, ...] = (),
               x_shape: list[Any] | None = None) -> onnx.ModelProto:
    """One `op_type` node reading `inputs` (graph inputs, or initializers for the names listed in
    `initializers`) and writing "y", whose type and shape are left to ONNX Runtime's inference.
    `opset` is the model's opset import of `domain` (None: no import at all)."""
    names = list(inputs)
    node = helper.make_node(op_type, names, ["y"], domain=domain, name=f"{op_type}_node", **attrs)
    graph_inputs, inits = [], []
    for name, value in inputs.items():
        if name in initializers:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            shape = x_shape if (name == names[0] and x_shape is not None) else list(np.shape(value))
            elem = helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, elem, shape))
    out = onnx.ValueInfoProto()
    out.name = "y"
    graph = helper.make_graph([node], "g", graph_inputs, [out], inits)
    imports = [helper.make_opsetid("", 17)]
    if opset is not None:
        imports.append(helper.make_opsetid(domain, opset))
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def session(model: onnx.ModelProto) -> Any:
    options = polyquant.ort.session_options()
    options.log_severity_level = 4  # the errors tested here would also be logged to stderr
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """Runs the model; checks that the output type and shape ONNX Runtime inferred (from the
    library's shape inference) are the ones the run produced."""
    sess = session(model)
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs()}
    (y,) = sess.run(None, feeds)
    meta = sess.get_outputs()[0]
    assert meta.type == ORT_TYPE[y.dtype], f"inferred {meta.type}, produced {y.dtype}"
    if meta.shape is not None:
        assert len(meta.shape) == y.ndim, f"inferred shape {meta.shape}, produced {y.shape}"
        for inferred, actual in zip(meta.shape, y.shape):
            assert not isinstance(inferred, int) or inferred == actual, f"{meta.shape} vs {y.shape}"
    return y


def raises(fn: Callable[[], Any], *fragments: str) -> str:
    """Calls fn, which must fail (at session creation or run) with all `fragments` in the message."""
    with pytest.raises(Exception) as info:
        fn()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in: {message}"
    return message


def reference(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> np.ndarray:
    """qonnx's numpy function on copies of the arguments, warnings (NaN, inf) silenced."""
    args = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
    with np.errstate(all="ignore"):
        return np.asarray(fn(*args, **kwargs))


def node_int_quant(x: Any, scale: Any, zeropt: Any, bitwidth: Any, signed: int, narrow: int,
                   rounding_mode: str = "ROUND") -> np.ndarray:
    """An IntQuant node's output (rounding_mode defaults to ROUND in the node, not in qonnx's
    function): polyquant's int_quant cast to float32, as qonnx's execute_node casts it."""
    return np.asarray(pq.int_quant(x, scale, zeropt, bitwidth, signed, narrow, rounding_mode)).astype(np.float32)


# ---- test data --------------------------------------------------------------------------------
def specials(dtype: Any) -> np.ndarray:
    f = np.finfo(dtype)
    return np.array([0.0, -0.0, np.nan, np.inf, -np.inf, f.tiny, -f.tiny, f.smallest_subnormal,
                     -f.smallest_subnormal, 3 * f.smallest_subnormal, f.max, -f.max, 0.5, -0.5, 1.5,
                     -2.5, 3.5, 1e-30, -1e-30], dtype=dtype)


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, scale: Any = 1.0,
         spread: float = 6.0) -> np.ndarray:
    """Random values on the scale's grid: about a third exact ties (k + 0.5) * scale, a sixth one
    ulp either side of a tie, the rest normal(0, spread) * scale; the first elements are NaN, +-inf,
    +-0, denormals, +-max and small ties."""
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), shape)
    x = rng.standard_normal(shape) * spread * s
    ties = (rng.integers(-3 * int(spread), 3 * int(spread), shape) + 0.5) * s
    pick = rng.random(shape)
    x = np.where(pick < 0.35, ties, x).astype(dtype)
    near = pick >= 0.83
    direction = np.where(rng.random(shape) < 0.5, np.inf, -np.inf).astype(dtype)
    x[near] = np.nextafter(ties.astype(dtype), direction)[near]
    flat = x.reshape(-1)
    sp = specials(dtype)
    flat[: min(flat.size, sp.size)] = sp[: flat.size]
    return x


def channel_scale(rng: np.random.Generator, channels: int, dtype: Any, pow2: bool) -> np.ndarray:
    if pow2:
        s = 2.0 ** rng.integers(-6, 3, channels)
    else:
        s = rng.uniform(0.01, 2.0, channels)
    return s.reshape(1, channels, 1, 1).astype(dtype)


def cases(rows: list[tuple]) -> list[Any]:
    """pytest parameters, one per table row, named by the row's first entry."""
    return [pytest.param(row, id=row[0]) for row in rows]


# ---- IntQuant / Quant ----------------------------------------------------------------------------
INT_QUANT_CASES = [
    # id, x dtype, param dtype, per-channel, pow2 scale, zeropt, bitwidth, signed, narrow, modes
    ("f32-4b-signed", np.float32, np.float32, False, True, 0.0, 4.0, 1, 0, MODES),
    ("f32-8b-signed-narrow-perchannel", np.float32, np.float32, True, False, 0.0, 8.0, 1, 1, MODES),
    ("f32-3b-unsigned-zp", np.float32, np.float32, True, True, 2.0, 3.0, 0, 0, ["ROUND", "FLOOR", "HALF_UP"]),
    ("f32-2b-unsigned-narrow", np.float32, np.float32, False, False, 0.0, 2.0, 0, 1, ["ROUND", "CEIL"]),
    ("f32-1b-signed-bipolar", np.float32, np.float32, True, False, 0.0, 1.0, 1, 0, ["ROUND", "HALF_DOWN"]),
    ("f32-1b-unsigned", np.float32, np.float32, False, True, 0.0, 1.0, 0, 0, ["ROUND"]),
    ("f32-2.5b-fraczp", np.float32, np.float32, False, True, 0.25, 2.5, 1, 0, ["ROUND", "DOWN"]),
    ("f32-24b-bias", np.float32, np.float32, True, False, 0.0, 24.0, 1, 0, ["HALF_UP", "HALF_DOWN"]),
    ("f16", np.float16, np.float16, True, True, 0.0, 4.0, 1, 0, ["ROUND", "HALF_UP", "FLOOR"]),
    ("f64", np.float64, np.float64, True, False, 1.0, 6.0, 1, 1, ["ROUND", "UP"]),
    ("f32-int64-zp-bw", np.float32, np.int64, False, True, 0, 6, 1, 0, ["ROUND", "FLOOR"]),
    # x / scale in float32, then + int64 zeropt in float64 (numpy's step-by-step promotion)
    ("f32-int64-zp-bw-scale0.37", np.float32, np.int64, False, False, 0, 8, 1, 0, ["ROUND", "HALF_UP"]),
    ("f32-f64-scale", np.float32, np.float64, True, False, 0.0, 8.0, 1, 0, ["ROUND", "HALF_DOWN"]),
    ("f16-int8-zp-bw", np.float16, np.int8, False, True, 1, 4, 0, 0, ["ROUND"]),
]


def int_quant_params(rng, case):
    _, xdt, pdt, per_channel, pow2, zp, bw, signed, narrow, _ = case
    sdt = pdt if np.dtype(pdt).kind == "f" else xdt
    scale = channel_scale(rng, 3, sdt, pow2) if per_channel else np.asarray(0.125 if pow2 else 0.37, sdt)
    x = data(rng, (2, 3, 5, 4), xdt, scale.astype(np.float64))
    zeropt = np.asarray(zp, dtype=pdt)
    if per_channel and np.dtype(pdt).kind == "f":
        zeropt = np.full((3, 1, 1), zp, dtype=pdt)  # lower rank than X: right-aligned broadcasting
    return x, scale, zeropt, np.asarray(bw, dtype=pdt), signed, narrow


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("op_type", ["IntQuant", "Quant"])
@pytest.mark.parametrize("case", cases(INT_QUANT_CASES))
def test_int_quant(domain, op_type, case, rng, same):
    x, scale, zeropt, bitwidth, signed, narrow = int_quant_params(rng, case)
    for mode in case[-1]:
        model = make_model(op_type, domain, {"x": x, "scale": scale, "zeropt": zeropt, "bitwidth": bitwidth},
                           {"signed": signed, "narrow": narrow, "rounding_mode": mode})
        y = run(model, {"x": x, "scale": scale, "zeropt": zeropt, "bitwidth": bitwidth})
        same(y, node_int_quant(x, scale, zeropt, bitwidth, signed, narrow, mode), x, scale)
        expected = reference(qonnx_int_quant, x, scale, zeropt, bitwidth, signed, narrow, mode)
        same(y, expected.astype(np.float32), x, scale)


@pytest.mark.parametrize("domain", DOMAINS)
def test_int_quant_defaults_and_spelling(domain, rng, same):
    """rounding_mode is optional (ROUND) and case-insensitive ("round" as Brevitas writes it);
    signed/narrow take any non-zero value as true, as qonnx does."""
    x = data(rng, (4, 7), np.float32, 0.25)
    p = {"x": x, "scale": np.float32(0.25), "zeropt": np.float32(0), "bitwidth": np.float32(5)}
    p = {k: np.asarray(v) for k, v in p.items()}
    expected = node_int_quant(x, p["scale"], p["zeropt"], p["bitwidth"], 1, 0)
    for attrs in ({"signed": 1, "narrow": 0}, {"signed": 1, "narrow": 0, "rounding_mode": "round"},
                  {"signed": 7, "narrow": 0, "rounding_mode": "Half_Even"}):
        same(run(make_model("IntQuant", domain, p, attrs), p), expected, x)
    narrow = node_int_quant(x, p["scale"], p["zeropt"], p["bitwidth"], 0, 1)
    same(run(make_model("IntQuant", domain, p, {"signed": 0, "narrow": -3}), p), narrow, x)


def test_int_quant_constant_weights(rng, same):
    """Everything constant (a weight quantizer): ONNX Runtime may fold the node at session
    creation; the result is the same."""
    w = data(rng, (8, 3, 3, 3), np.float32, 0.05)
    scale = channel_scale(rng, 8, np.float32, False).reshape(8, 1, 1, 1)
    params = {"w": w, "scale": scale, "zeropt": np.asarray(0, np.float32), "bitwidth": np.asarray(4, np.float32)}
    quant = helper.make_node("Quant", list(params), ["wq"], domain="onnx.brevitas", signed=1, narrow=1)
    ident = helper.make_node("Identity", ["wq"], ["y"])
    out = onnx.ValueInfoProto()
    out.name = "y"
    graph = helper.make_graph([quant, ident], "g", [], [out],
                              [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("onnx.brevitas", 1)], ir_version=8)
    (y,) = session(model).run(None, {})
    same(y, node_int_quant(w, scale, params["zeropt"], params["bitwidth"], 1, 1), w)
    same(y, reference(qonnx_int_quant, w, scale, params["zeropt"], params["bitwidth"], 1, 1, "ROUND"), w)


def test_int_quant_initializer_params_symbolic_batch(rng, same):
    """Parameters as initializers, X with a symbolic batch dimension, which the inferred output
    shape keeps; the same session serves two batch sizes."""
    scale = channel_scale(rng, 4, np.float32, False)
    params = {"scale": scale, "zeropt": np.zeros((1, 4, 1, 1), np.float32), "bitwidth": np.asarray(8, np.float32)}
    x0 = data(rng, (1, 4, 3, 3), np.float32, scale)
    model = make_model("IntQuant", "qonnx.custom_op.general", {"x": x0, **params},
                       {"signed": 0, "narrow": 0, "rounding_mode": "HALF_UP"},
                       initializers=tuple(params), x_shape=["batch", 4, 3, 3])
    sess = session(model)
    assert sess.get_outputs()[0].shape == ["batch", 4, 3, 3]
    assert sess.get_outputs()[0].type == "tensor(float)"
    for n in (1, 5):
        x = data(rng, (n, 4, 3, 3), np.float32, scale)
        (y,) = sess.run(None, {"x": x})
        same(y, node_int_quant(x, scale, params["zeropt"], params["bitwidth"], 0, 0, "HALF_UP"), x)


def test_int_quant_output_broadcasts_beyond_x(rng, same):
    """A parameter larger than X makes the output larger than X, as numpy broadcasting does."""
    x = data(rng, (3,), np.float32)
    scale = np.asarray([[0.5], [0.25]], np.float32)
    p = {"x": x, "scale": scale, "zeropt": np.asarray(0, np.float32), "bitwidth": np.asarray(4, np.float32)}
    y = run(make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0}), p)
    assert y.shape == (2, 3)
    same(y, node_int_quant(x, scale, p["zeropt"], p["bitwidth"], 1, 0), x)
    same(y, reference(qonnx_int_quant, x, scale, p["zeropt"], p["bitwidth"], 1, 0, "ROUND").astype(np.float32), x)


def test_empty_tensor(same):
    x = np.zeros((0, 3), np.float32)
    p = {"x": x, "scale": np.asarray(0.5, np.float32), "zeropt": np.asarray(0, np.float32),
         "bitwidth": np.asarray(4, np.float32)}
    y = run(make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0}), p)
    same(y, node_int_quant(x, p["scale"], p["zeropt"], p["bitwidth"], 1, 0))


# ---- BipolarQuant --------------------------------------------------------------------------------
BIPOLAR_CASES = [
    ("f32-scalar", np.float32, np.float32, False),
    ("f32-perchannel", np.float32, np.float32, True),
    ("f16", np.float16, np.float16, True),
    ("f64", np.float64, np.float64, False),
    ("f32-f64-scale", np.float32, np.float64, True),   # output float64 (numpy promotion)
    ("f64-f32-scale", np.float64, np.float32, False),  # output float64
    ("f16-f32-scale", np.float16, np.float32, True),   # output float32
]


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("case", cases(BIPOLAR_CASES))
def test_bipolar_quant(domain, case, rng, same):
    _, xdt, sdt, per_channel = case
    scale = channel_scale(rng, 3, sdt, False) if per_channel else np.asarray(0.75, sdt)
    scale = np.where(rng.random(scale.shape) < 0.3, -scale, scale).astype(sdt)  # negative scales flip
    x = data(rng, (2, 3, 4, 5), xdt)
    p = {"x": x, "scale": scale}
    y = run(make_model("BipolarQuant", domain, p, {}), p)
    same(y, pq.bipolar_quant(x, scale), x, scale)
    same(y, reference(qonnx_bipolar_quant, x, scale), x, scale)


def test_bipolar_quant_ignores_third_input(rng, same):
    x = data(rng, (6,), np.float32)
    p = {"x": x, "scale": np.asarray(2.0, np.float32), "extra": np.asarray(1.0, np.float32)}
    y = run(make_model("BipolarQuant", "onnx.brevitas", p, {}), p)
    same(y, pq.bipolar_quant(x, p["scale"]), x)


# ---- Trunc ---------------------------------------------------------------------------------------
TRUNC_CASES = [
    # id, x dtype, param dtype, per-channel, zeropt, in bits, out bits
    ("f32-8to4", np.float32, np.float32, False, 0.0, 8.0, 4.0),
    ("f32-perchannel-zp", np.float32, np.float32, True, 3.0, 10.0, 6.0),
    ("f16", np.float16, np.float16, True, 0.0, 8.0, 5.0),
    ("f64", np.float64, np.float64, False, -2.0, 16.0, 8.0),
    ("f32-int64-bits", np.float32, np.int64, False, 0, 12, 8),  # float64 result
]


def trunc_params(rng, case):
    _, xdt, pdt, per_channel, zp, ib, ob = case
    sdt = pdt if np.dtype(pdt).kind == "f" else xdt
    scale = channel_scale(rng, 3, sdt, True) if per_channel else np.asarray(0.5, sdt)
    x = data(rng, (2, 3, 4, 4), xdt, scale.astype(np.float64) * 2.0 ** (ib - ob), spread=40)
    zeropt = np.asarray(zp, pdt)
    return x, scale, zeropt, np.asarray(ib, pdt), np.asarray(ob, pdt)


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("case", cases(TRUNC_CASES))
def test_trunc_v1(domain, case, rng, same):
    x, scale, zeropt, ib, ob = trunc_params(rng, case)
    p = {"x": x, "scale": scale, "zeropt": zeropt, "in_bitwidth": ib, "out_bitwidth": ob}
    for mode in MODES:
        y = run(make_model("Trunc", domain, p, {"rounding_mode": mode}), p)
        same(y, pq.trunc(x, scale, zeropt, ib, ob, mode), x, scale)
        same(y, reference(qonnx_trunc_v1, x, scale, zeropt, ib, ob, mode), x, scale)


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("case", cases(TRUNC_CASES))
def test_trunc_v2(domain, case, rng, same):
    x, scale, zeropt, ib, ob = trunc_params(rng, case)
    sdt = scale.dtype
    # out_scale a power-of-two multiple of scale, and one that is not (12x: rounded to 16x)
    for factor in (16.0, 12.0):
        out_scale = np.asarray(scale.astype(np.float64) * factor, dtype=sdt)
        p = {"x": x, "scale": scale, "zeropt": zeropt, "in_bitwidth": ib, "out_scale": out_scale,
             "out_bitwidth": ob}
        for mode, signed, narrow in (("FLOOR", 1, 0), ("ROUND", 0, 0), ("HALF_UP", 1, 1), ("CEIL", None, None)):
            attrs: dict[str, Any] = {"rounding_mode": mode}
            if signed is not None:
                attrs.update(signed=signed, narrow=narrow)
            else:
                signed, narrow = 1, 0  # the defaults
            y = run(make_model("Trunc", domain, p, attrs, opset=2), p)
            expected = reference(qonnx_trunc_v2, x, scale, zeropt, ib, narrow, signed, out_scale, ob, mode)
            same(y, expected, x, scale)


def qonnx_execute(model: onnx.ModelProto, inputs: dict[str, np.ndarray], like: np.ndarray) -> np.ndarray:
    """qonnx's own execution of the model (version selection by opset import included); `like`
    gives the output's type and shape, which qonnx wants declared."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output[0].CopyFrom(
        helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(like.dtype), list(like.shape)))
    with warnings.catch_warnings():
        # ModelWrapper announces that it renamed the finn.custom_op.general domain
        warnings.simplefilter("ignore", UserWarning)
        wrapped = ModelWrapper(model)
    with np.errstate(all="ignore"):
        return execute_onnx(wrapped, dict(inputs))["y"]


def trunc_version_inputs(rng):
    x = data(rng, (2, 8), np.float32, 1.0, spread=60)
    f = np.float32
    v1 = {"x": x, "scale": np.asarray(1, f), "zeropt": np.asarray(0, f), "in_bitwidth": np.asarray(8, f),
          "out_bitwidth": np.asarray(4, f)}
    v2 = {"x": x, "scale": np.asarray(1, f), "zeropt": np.asarray(0, f), "in_bitwidth": np.asarray(8, f),
          "out_scale": np.asarray(16, f), "out_bitwidth": np.asarray(4, f)}
    return v1, v2


@pytest.mark.parametrize("domain", DOMAINS)
def test_trunc_version_by_opset_import(domain, rng, same):
    """As in qonnx: without an opset import of the domain (or with version 1) a 5-input Trunc is
    version 1; a model importing version 2 (Brevitas >= 0.12) has 6-input version-2 Truncs."""
    v1, v2 = trunc_version_inputs(rng)
    x = v1["x"]
    expected_v1 = pq.trunc(x, v1["scale"], v1["zeropt"], v1["in_bitwidth"], v1["out_bitwidth"], "FLOOR")
    expected_v2 = reference(qonnx_trunc_v2, x, v2["scale"], v2["zeropt"], v2["in_bitwidth"], 0, 1, v2["out_scale"],
                            v2["out_bitwidth"], "FLOOR")
    assert not np.array_equal(expected_v1, expected_v2)
    for opset in (None, 1):
        model = make_model("Trunc", domain, v1, {"rounding_mode": "FLOOR"}, opset=opset)
        y = run(model, v1)
        same(y, expected_v1, x)
        if domain != "finn.custom_op.general" or opset is not None:
            # (qonnx's ModelWrapper renames the finn domain without carrying its import over)
            same(y, qonnx_execute(model, v1, y), x)
    for opset in (2, 3):
        model = make_model("Trunc", domain, v2, {"rounding_mode": "FLOOR"}, opset=opset)
        y = run(model, v2)
        same(y, expected_v2, x)
        if domain == "qonnx.custom_op.general":
            same(y, qonnx_execute(model, v2, y), x)


def test_trunc_version_follows_input_count(rng, same):
    """Documented limitation: ONNX Runtime does not tell a custom op the model's opset, so the
    version is taken from the node's input count. A 6-input Trunc in a model importing version 1
    (which qonnx would run as version 1, reading out_scale as out_bitwidth) runs version 2 here,
    and a 5-input Trunc in a model importing version 2 (on which qonnx fails) runs version 1."""
    v1, v2 = trunc_version_inputs(rng)
    x = v1["x"]
    y = run(make_model("Trunc", "qonnx.custom_op.general", v2, {"rounding_mode": "FLOOR"}, opset=1), v2)
    same(y, reference(qonnx_trunc_v2, x, v2["scale"], v2["zeropt"], v2["in_bitwidth"], 0, 1, v2["out_scale"],
                      v2["out_bitwidth"], "FLOOR"), x)
    y = run(make_model("Trunc", "qonnx.custom_op.general", v1, {"rounding_mode": "FLOOR"}, opset=2), v1)
    same(y, pq.trunc(x, v1["scale"], v1["zeropt"], v1["in_bitwidth"], v1["out_bitwidth"], "FLOOR"), x)


def test_other_ops_accept_any_opset_version(rng, same):
    x = data(rng, (3, 4), np.float32)
    p = {"x": x, "scale": np.asarray(0.5, np.float32)}
    for opset in (None, 1, 2, 5):
        same(run(make_model("BipolarQuant", "qonnx.custom_op.general", p, {}, opset=opset), p),
             pq.bipolar_quant(x, p["scale"]), x)


# ---- FloatQuant ----------------------------------------------------------------------------------
FP_FORMATS = {  # exponent bits, mantissa bits, bias, max_val
    "e4m3": (4, 3, 7, 448.0),
    "e5m2": (5, 2, 15, 57344.0),
    "e2m1": (2, 1, 1, 6.0),
    "e3m2": (3, 2, 3, 28.0),
}
FLOAT_QUANT_CASES = [
    # id, format, x dtype, per-channel scale, saturation, has_inf, has_nan, modes
    ("e4m3-sat", "e4m3", np.float32, False, 1, 0, 1, MODES),
    ("e4m3-nonsat-nan", "e4m3", np.float32, True, 0, 0, 1, ["ROUND", "FLOOR"]),
    ("e5m2-nonsat-inf", "e5m2", np.float32, True, 0, 1, 1, ["ROUND", "UP"]),
    ("e2m1-sat", "e2m1", np.float32, True, 1, 0, 0, ["ROUND", "HALF_DOWN", "CEIL"]),
    ("e3m2-f16", "e3m2", np.float16, False, 1, 0, 0, ["ROUND", "DOWN"]),
    ("e4m3-f64", "e4m3", np.float64, True, 1, 0, 1, ["ROUND", "HALF_UP"]),
]


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("case", cases(FLOAT_QUANT_CASES))
def test_float_quant(domain, case, rng, same):
    _, fmt, xdt, per_channel, saturation, has_inf, has_nan, modes = case
    e, m, bias, max_val = FP_FORMATS[fmt]
    scale = channel_scale(rng, 3, xdt, True) if per_channel else np.asarray(0.5, xdt)
    x = data(rng, (2, 3, 6, 5), xdt, scale.astype(np.float64) * max_val / 8, spread=8)
    p = {"x": x, "scale": scale, "exponent_bitwidth": np.asarray(e, xdt), "mantissa_bitwidth": np.asarray(m, xdt),
         "exponent_bias": np.asarray(bias, xdt), "max_val": np.asarray(max_val, xdt)}
    for mode in modes:
        attrs = {"has_inf": has_inf, "has_nan": has_nan, "has_subnormal": 1, "saturation": saturation,
                 "rounding_mode": mode}
        y = run(make_model("FloatQuant", domain, p, attrs), p)
        expected = reference(qonnx_float_quant, x, scale, p["exponent_bitwidth"], p["mantissa_bitwidth"],
                             p["exponent_bias"], True, p["max_val"], has_inf, has_nan, 1, mode, saturation)
        same(y, expected.astype(np.float32), x, scale)


def test_float_quant_default_rounding_mode(rng, same):
    x = data(rng, (5, 5), np.float32, 4.0)
    f = np.float32
    p = {"x": x, "scale": np.asarray(1, f), "exponent_bitwidth": np.asarray(4, f),
         "mantissa_bitwidth": np.asarray(3, f), "exponent_bias": np.asarray(7, f), "max_val": np.asarray(448, f)}
    attrs = {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1}
    y = run(make_model("FloatQuant", "onnx.brevitas", p, attrs), p)
    expected = reference(qonnx_float_quant, x, p["scale"], p["exponent_bitwidth"], p["mantissa_bitwidth"],
                         p["exponent_bias"], True, p["max_val"], 0, 1, 1, "ROUND", 1)
    same(y, expected.astype(np.float32), x)


# ---- errors --------------------------------------------------------------------------------------
def int_quant_feeds(bitwidth: Any = 4.0) -> dict[str, np.ndarray]:
    f = np.float32
    return {"x": np.linspace(-3, 3, 12, dtype=f).reshape(3, 4), "scale": np.asarray(0.5, f),
            "zeropt": np.asarray(0, f), "bitwidth": np.asarray(bitwidth, f)}


def test_error_unknown_rounding_mode():
    p = int_quant_feeds()
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0, "rounding_mode": "NEAREST"})
    raises(lambda: run(model, p), "IntQuant", "rounding_mode", "NEAREST", "HALF_EVEN")
    t = {"x": p["x"], "scale": p["scale"], "zeropt": p["zeropt"], "in_bitwidth": p["bitwidth"],
         "out_bitwidth": p["bitwidth"]}
    model = make_model("Trunc", "onnx.brevitas", t, {"rounding_mode": "ROUND_TO_ZERO"})
    raises(lambda: run(model, t), "Trunc", "rounding_mode", "ROUND_TO_ZERO")


@pytest.mark.parametrize("missing", ["signed", "narrow"])
def test_error_int_quant_missing_attribute(missing):
    p = int_quant_feeds()
    attrs = {"signed": 1, "narrow": 0}
    del attrs[missing]
    model = make_model("IntQuant", "qonnx.custom_op.general", p, attrs)
    raises(lambda: run(model, p), "IntQuant_node", missing, "required attribute", "missing")


def test_error_trunc_missing_rounding_mode():
    p = int_quant_feeds()
    t = {"x": p["x"], "scale": p["scale"], "zeropt": p["zeropt"], "in_bitwidth": np.asarray(8, np.float32),
         "out_bitwidth": p["bitwidth"]}
    raises(lambda: run(make_model("Trunc", "onnx.brevitas", t, {}), t), "Trunc", "rounding_mode", "required")


@pytest.mark.parametrize("missing", ["has_inf", "has_nan", "has_subnormal", "saturation"])
def test_error_float_quant_missing_attribute(missing):
    f = np.float32
    p = {"x": np.ones((2, 2), f), "scale": np.asarray(1, f), "exponent_bitwidth": np.asarray(4, f),
         "mantissa_bitwidth": np.asarray(3, f), "exponent_bias": np.asarray(7, f), "max_val": np.asarray(448, f)}
    attrs = {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1}
    del attrs[missing]
    raises(lambda: run(make_model("FloatQuant", "qonnx.custom_op.general", p, attrs), p), "FloatQuant", missing,
           "required")


def test_error_attribute_of_wrong_type():
    p = int_quant_feeds()
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1.0, "narrow": 0})
    raises(lambda: run(model, p), "signed", "must be an int")
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0, "rounding_mode": 3})
    raises(lambda: run(model, p), "rounding_mode", "must be a string")


NON_STRING_ATTRIBUTES = {  # rounding_mode given as every other attribute type ONNX has
    "int": 3, "float": 3.0, "ints": [1, 2], "floats": [1.0, 2.0], "strings": ["FLOOR"],
    "tensor": numpy_helper.from_array(np.asarray(1, np.int64)),
}


@pytest.mark.parametrize("kind", list(NON_STRING_ATTRIBUTES))
@pytest.mark.parametrize("op_type", ["IntQuant", "FloatQuant", "Trunc"])
def test_error_rounding_mode_of_another_type(op_type, kind):
    """A rounding_mode that is not a string fails session creation; it used to be ignored silently
    (IntQuant and FloatQuant then ran ROUND) for every type but int and float."""
    f = np.float32
    if op_type == "IntQuant":
        p, attrs = int_quant_feeds(), {"signed": 1, "narrow": 0}
    elif op_type == "FloatQuant":
        p = {"x": np.ones((2, 2), f), "scale": np.asarray(1, f), "exponent_bitwidth": np.asarray(4, f),
             "mantissa_bitwidth": np.asarray(3, f), "exponent_bias": np.asarray(7, f), "max_val": np.asarray(448, f)}
        attrs = {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1}
    else:
        p = {"x": np.ones(4, f), "scale": np.asarray(1, f), "zeropt": np.asarray(0, f),
             "in_bitwidth": np.asarray(8, f), "out_bitwidth": np.asarray(4, f)}
        attrs = {}
    model = make_model(op_type, "qonnx.custom_op.general", p, attrs)
    model.graph.node[0].attribute.append(helper.make_attribute("rounding_mode", NON_STRING_ATTRIBUTES[kind]))
    raises(lambda: run(model, p), op_type, "rounding_mode", "must be a string")


@pytest.mark.parametrize("value", [b"ROUND\0X", b"FLOOR\0", b"\0ROUND"])
def test_error_rounding_mode_with_nul(value):
    """ONNX strings are bytes and may hold NULs; reading them as C strings cut 'ROUND\\0X' to ROUND."""
    p = int_quant_feeds()
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0, "rounding_mode": value})
    raises(lambda: run(model, p), "IntQuant", "rounding_mode", "NUL")
    t = {"x": p["x"], "scale": p["scale"], "zeropt": p["zeropt"], "in_bitwidth": np.asarray(8, np.float32),
         "out_bitwidth": p["bitwidth"]}
    raises(lambda: run(make_model("Trunc", "onnx.brevitas", t, {"rounding_mode": value}), t), "Trunc", "NUL")


_UNLOAD_LOOP = """
import gc, sys, onnxruntime as ort
lib = sys.argv[1]
def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
def loaded():
    with open("/proc/self/maps") as f:
        return lib in f.read()
def cycle():
    options = ort.SessionOptions()
    options.register_custom_ops_library(lib)
    del options
for _ in range(300):  # warm up allocator pools
    cycle()
gc.collect()
print(int(loaded()))
before = rss_kb()
for _ in range(3000):
    cycle()
gc.collect()
print(rss_kb() - before)
"""


def test_library_unload_releases_its_domains():
    """ONNX Runtime unloads the library when the last session options holding it go; every load
    creates the three op domains, which leaked (about 350 bytes a cycle, 1 MB over this loop)
    until the library released them at unload."""
    import os
    import subprocess
    import sys

    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        # AddressSanitizer never returns a dlclose'd library's mappings and shadow (about 3.5 MB a
        # cycle), so RSS measures ASan here, not polyquant; the unsanitized run measures the library.
        pytest.skip("RSS is meaningless under AddressSanitizer (scripts/sanitize_python.sh)")
    done = subprocess.run([sys.executable, "-c", _UNLOAD_LOOP, LIBRARY], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    still_loaded, growth_kb = (int(v) for v in done.stdout.split())
    if still_loaded:
        pytest.skip("this onnxruntime keeps the custom-op library loaded: nothing is unloaded to leak")
    assert growth_kb < 256, f"RSS grew by {growth_kb} KB over 3000 load/unload cycles"


def test_session_options_are_quiet_on_raw_exports():
    """A raw Brevitas export lists its initializers as graph inputs; onnxruntime warns once per
    initializer at its default log level. polyquant.ort.session_options() logs errors only."""
    import subprocess
    import sys

    model = golden("brevitas").path("conv_perchannel.onnx")
    script = ("import sys, onnxruntime as ort, polyquant.ort\n"
              "options = polyquant.ort.session_options() if sys.argv[2] == 'quiet' else ort.SessionOptions()\n"
              "if sys.argv[2] == 'default': options.register_custom_ops_library(polyquant.ort.library_path())\n"
              "ort.InferenceSession(sys.argv[1], options, providers=['CPUExecutionProvider'])\n")
    loud = subprocess.run([sys.executable, "-c", script, str(model), "default"], capture_output=True, text=True)
    assert loud.returncode == 0, loud.stderr
    assert "appears in graph inputs" in loud.stderr  # the model does draw the warnings
    quiet = subprocess.run([sys.executable, "-c", script, str(model), "quiet"], capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "" and quiet.stdout == ""
    assert polyquant.ort.session_options().log_severity_level == polyquant.ort.QUIET_LOG_SEVERITY == 3
    mine = ort.SessionOptions()
    mine.log_severity_level = 1
    assert polyquant.ort.session_options(mine).log_severity_level == 1  # options of one's own: untouched


def test_float32_node_outputs_whatever_the_function_dtype(rng, same):
    """IntQuant and FloatQuant nodes output float32 (qonnx's execute_node casts), although
    qonnx's float_quant function returns float64 and int_quant of float64 input float64."""
    f = np.float32
    x = data(rng, (4, 6), np.float64, 0.3)
    p = {"x": x, "scale": np.asarray(0.3), "zeropt": np.asarray(0.0), "bitwidth": np.asarray(5.0)}
    sess = session(make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0}))
    (y,) = sess.run(None, p)
    assert sess.get_outputs()[0].type == "tensor(float)"
    same(y, reference(qonnx_int_quant, x, p["scale"], p["zeropt"], p["bitwidth"], 1, 0, "ROUND").astype(f), x)
    xf = data(rng, (4, 6), f, 2.0)
    q = {"x": xf, "scale": np.asarray(0.75, f), "exponent_bitwidth": np.asarray(4, f),
         "mantissa_bitwidth": np.asarray(3, f), "exponent_bias": np.asarray(7, f), "max_val": np.asarray(448, f)}
    attrs = {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1}
    (y,) = session(make_model("FloatQuant", "qonnx.custom_op.general", q, attrs)).run(None, q)
    expected = reference(qonnx_float_quant, xf, q["scale"], q["exponent_bitwidth"], q["mantissa_bitwidth"],
                         q["exponent_bias"], True, q["max_val"], 0, 1, 1, "ROUND", 1)
    assert expected.dtype == np.float64
    same(y, expected.astype(f), xf)


def test_error_trunc_v2_flag_out_of_range():
    f = np.float32
    t = {"x": np.ones(4, f), "scale": np.asarray(1, f), "zeropt": np.asarray(0, f), "in_bitwidth": np.asarray(8, f),
         "out_scale": np.asarray(16, f), "out_bitwidth": np.asarray(4, f)}
    model = make_model("Trunc", "qonnx.custom_op.general", t, {"rounding_mode": "FLOOR", "signed": 2}, opset=2)
    raises(lambda: run(model, t), "signed", "0 or 1")


def test_error_multi_element_bitwidth():
    p = int_quant_feeds()
    p["bitwidth"] = np.asarray([4, 4], np.float32)
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0})
    raises(lambda: run(model, p), "IntQuant_node", "bitwidth", "exactly one element")
    f = np.float32
    q = {"x": np.ones((2, 2), f), "scale": np.asarray(1, f), "exponent_bitwidth": np.asarray(4, f),
         "mantissa_bitwidth": np.asarray([3, 3], f), "exponent_bias": np.asarray(7, f), "max_val": np.asarray(448, f)}
    attrs = {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1}
    raises(lambda: run(make_model("FloatQuant", "onnx.brevitas", q, attrs), q), "mantissa_bitwidth")


def test_error_shapes_do_not_broadcast():
    p = int_quant_feeds()
    p["scale"] = np.full((3,), 0.5, np.float32)  # X is (3, 4): trailing 4 vs 3
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0})
    raises(lambda: run(model, p), "IntQuant", "(3, 4)", "(3,)", "cannot be broadcast")
    b = {"x": np.ones((2, 5), np.float32), "scale": np.ones((2,), np.float32)}
    raises(lambda: run(make_model("BipolarQuant", "onnx.brevitas", b, {}), b), "BipolarQuant", "cannot be broadcast")


def test_error_integer_x():
    p = int_quant_feeds()
    p["x"] = np.arange(6, dtype=np.int32)
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0})
    raises(lambda: run(model, p), "IntQuant", "x", "int32")


def test_error_unsupported_element_type():
    x = np.ones(4, np.float32)
    node = helper.make_node("BipolarQuant", ["x", "scale"], ["y"], domain="onnx.brevitas")
    out = onnx.ValueInfoProto()
    out.name = "y"
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [out],
                              [helper.make_tensor("scale", TensorProto.BFLOAT16, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("onnx.brevitas", 1)], ir_version=8)
    raises(lambda: session(model).run(None, {"x": x}), "scale", "bfloat16")


@pytest.mark.parametrize("op_type,count", [("IntQuant", 3), ("IntQuant", 5), ("Trunc", 4), ("Trunc", 7),
                                           ("FloatQuant", 5), ("BipolarQuant", 1)])
def test_error_wrong_number_of_inputs(op_type, count):
    f = np.float32
    inputs = {"x": np.ones((2, 2), f)}
    for i in range(1, count):
        inputs[f"p{i}"] = np.asarray(1, f)
    attrs = {"IntQuant": {"signed": 1, "narrow": 0}, "Trunc": {"rounding_mode": "FLOOR"},
             "FloatQuant": {"has_inf": 0, "has_nan": 1, "has_subnormal": 1, "saturation": 1},
             "BipolarQuant": {}}[op_type]
    model = make_model(op_type, "qonnx.custom_op.general", inputs, attrs)
    raises(lambda: run(model, inputs), op_type, "input")


def test_error_float_quant_non_saturating_without_inf_or_nan():
    f = np.float32
    p = {"x": np.ones((2, 2), f), "scale": np.asarray(1, f), "exponent_bitwidth": np.asarray(4, f),
         "mantissa_bitwidth": np.asarray(3, f), "exponent_bias": np.asarray(7, f), "max_val": np.asarray(448, f)}
    attrs = {"has_inf": 0, "has_nan": 0, "has_subnormal": 1, "saturation": 0}
    raises(lambda: run(make_model("FloatQuant", "qonnx.custom_op.general", p, attrs), p), "FloatQuant", "saturation")


def test_session_survives_a_failed_run(same):
    """An error in one run leaves the session usable (nothing crashed, nothing leaked state)."""
    p = int_quant_feeds()
    model = make_model("IntQuant", "qonnx.custom_op.general", p, {"signed": 1, "narrow": 0},
                       x_shape=["n", 4])
    sess = session(model)
    bad = dict(p, x=np.ones((3, 5), np.float32))
    with pytest.raises(Exception, match="broadcast|shape|dimension"):
        sess.run(None, bad)
    (y,) = sess.run(None, p)
    same(y, node_int_quant(p["x"], p["scale"], p["zeropt"], p["bitwidth"], 1, 0), p["x"])


def test_library_path_and_exports():
    import ctypes
    import os

    assert os.path.isabs(LIBRARY) and os.path.isfile(LIBRARY)
    lib = ctypes.CDLL(LIBRARY)
    assert hasattr(lib, "RegisterCustomOps")
    # The statically linked core stays hidden (polyquant::runtime_info(), polyquant::dtype_name).
    for internal in ("_ZN9polyquant12runtime_infoEv", "_ZN9polyquant10dtype_nameENS_5DTypeE"):
        assert not hasattr(lib, internal), internal
    opts = polyquant.ort.session_options()
    assert isinstance(opts, ort.SessionOptions)


def test_library_path_override(monkeypatch, tmp_path):
    monkeypatch.setenv("POLYQUANT_ORT_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match="POLYQUANT_ORT_LIBRARY"):
        polyquant.ort.library_path()
    monkeypatch.setenv("POLYQUANT_ORT_LIBRARY", LIBRARY)
    assert polyquant.ort.library_path() == LIBRARY
    options = ort.SessionOptions()
    assert polyquant.ort.session_options(options) is options


def test_concurrent_runs(rng, same):
    """One session run from several threads at once (ONNX Runtime releases the GIL): kernels keep
    no per-run state, so every result is right."""
    from concurrent.futures import ThreadPoolExecutor

    scale = channel_scale(rng, 8, np.float32, False)
    params = {"scale": scale, "zeropt": np.zeros((1, 8, 1, 1), np.float32), "bitwidth": np.asarray(6, np.float32)}
    x0 = data(rng, (1, 8, 16, 16), np.float32, scale)
    model = make_model("IntQuant", "qonnx.custom_op.general", {"x": x0, **params},
                       {"signed": 1, "narrow": 0, "rounding_mode": "HALF_DOWN"}, initializers=tuple(params),
                       x_shape=["n", 8, 16, 16])
    sess = session(model)
    inputs = [data(rng, (int(n), 8, 16, 16), np.float32, scale) for n in rng.integers(1, 9, 24)]

    def work(x: np.ndarray) -> np.ndarray:
        return sess.run(None, {"x": x})[0]

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(work, inputs))
    for x, y in zip(inputs, results):
        same(y, node_int_quant(x, scale, params["zeropt"], params["bitwidth"], 1, 0, "HALF_DOWN"), x)
