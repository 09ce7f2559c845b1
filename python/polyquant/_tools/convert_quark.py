"""`polyquant convert --to onnx` for AMD Quark: ExtendedQuantizeLinear / ExtendedDequantizeLinear
(domains com.amd.quark and com.vai.quantize) onto standard opset-21 QuantizeLinear / DequantizeLinear.

Quark's CPU kernel (docs/quark.md) and ONNX agree on most of their inputs; each node is converted
where they agree, and its check finds where they do not:

  ExtendedDequantizeLinear, integer types      DequantizeLinear(x, scale, zp, axis): (x - zp) * scale in
                                               both; checked on every value of the type (8 / 16 bits).
  ExtendedQuantizeLinear, integer types        QuantizeLinear(Where(outside, sentinel, x), scale, zp, axis).
      Quark's kernel casts round(x / scale) to int64 before adding the zero point and saturating, so
      NaN, +-inf and |x / scale| >= 2^63 (the cast's range) give the int64 cast's INT64_MIN plus the
      zero point: the type's lowest value, or its highest when the zero point is negative (the sum
      wraps). ONNX saturates them instead (+inf and large x to the highest value). `outside` is
      Or(IsNaN(x), Not(Abs(x / scale) < 2^63)) (true for NaN and infinities too) and the sentinel is
      -inf (QuantizeLinear's lowest) or +inf (its highest) for a negative zero point: the standard ops
      compute Quark's value there, and QuantizeLinear's own everywhere else.
  ExtendedDequantizeLinear, int32 / uint32      Mul(Cast(Cast(x, float64) - zp, float32), scale): Quark's
                                               float32(x - zp) * scale with the difference exact (onnxruntime's
                                               DequantizeLinear subtracts in int32 and wraps).
  float16 / bfloat16 zero points               refused: ONNX's Q/DQ have no such quantized type (and
                                               Quark's float16 Q is a cast that ignores scale and zero
                                               point).
  ExtendedQuantizeLinear, int32 / uint32        Quark's kernel in standard ops (QuantizeLinear has no 32-bit
                                               output): Round(x / scale) cast to int64, plus the zero point,
                                               Clip to the type, Cast; Quark's edge value where |x / scale|
                                               >= 2^63 or NaN.

Each converted node is checked: the standard nodes in plain onnxruntime against the Quark node in
onnxruntime with polyquant's custom-op library (bit-exact with Quark's CPU kernel), bit for bit, on
every value of a 8 / 16-bit input type, and for Q on the grid's ties and their neighbours, values around
+-2^63 * scale, NaN, infinities, zeros, subnormals and random values (`check="exhaustive"`: all 2^32
float32 inputs, per tensor, through polyquant diff's sweep).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .convert import CheckOutcome, NodeReport, _Builder, _initializer, _record_check, _sample_inputs, _Refused, \
    exact_session_options

QUARK_DOMAINS = ("com.amd.quark", "com.vai.quantize")
QUARK_OPS = {"ExtendedQuantizeLinear": "QuantizeLinear", "VitisQuantizeLinear": "QuantizeLinear",
             "ExtendedDequantizeLinear": "DequantizeLinear", "VitisDequantizeLinear": "DequantizeLinear"}
INTEGER = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT16: np.int16,
           TensorProto.UINT16: np.uint16, TensorProto.INT32: np.int32, TensorProto.UINT32: np.uint32}
FLOAT16 = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}
CAST_RANGE = np.float32(2.0 ** 63)  # int64's range: Quark casts round(x / scale) to int64


def _numpy(ztype: int):
    return INTEGER.get(ztype) or FLOAT16.get(ztype)


def _min_opset(ztype: int, per_axis: bool) -> int:
    # QuantizeLinear / DequantizeLinear: int8 / uint8 at 10, per axis at 13, 16-bit types and int32 Q at 21
    if ztype in (TensorProto.INT8, TensorProto.UINT8):
        return 13 if per_axis else 10
    return 21


def _model(nodes, inits, x_name, x_type, out_name, out_type, opset, rank, quark: bool):
    x_info = helper.make_tensor_value_info(x_name, x_type, [f"d{i}" for i in range(rank)])
    graph = helper.make_graph(nodes, "check", [x_info], [helper.make_tensor_value_info(out_name, out_type, None)], inits)
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(d, 1) for d in QUARK_DOMAINS] if quark else [])
    m = helper.make_model(graph, opset_imports=imports)
    m.ir_version = 10
    return m


def _q_sample(scale: np.ndarray, zp: np.ndarray, ztype: int, shape: tuple, rng) -> np.ndarray:
    """Q's check inputs, shaped (N,) + shape: the integer grid's ties (k + 1/2) * scale over the type's
    range shifted by the zero point, their float32 neighbours, grid points, NaN, infinities, zeros,
    subnormals, random values (convert's sample), and values around +-2^63 * scale (the int64 cast's
    edge) with their neighbours."""
    info = np.iinfo(INTEGER[ztype])
    bits = info.bits
    sc = np.asarray(scale, np.float32).reshape(shape)
    z = np.asarray(zp, np.float32).reshape(shape)
    base = _sample_inputs({"kind": "int", "scale": sc, "zeropt": z, "bitwidth": np.float32(min(bits, 30)),
                           "signed": int(info.min < 0), "narrow": 0}, rng)
    edge = (np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5]).reshape((-1,) + (1,) * len(shape)) * 2.0 ** 63
            * np.asarray(sc, np.float64)).astype(np.float32)
    if bits > 30:  # the type's own ends, beyond the sample's 30-bit grid
        ends = np.array([info.min, info.max, info.min - 1.0, info.max + 1.0, info.max - 255.0, info.max + 257.0],
                        np.float64) - np.asarray(z, np.float64).reshape(-1)[0]
        edge = np.concatenate([edge, (ends.reshape((-1,) + (1,) * len(shape)) * np.asarray(sc, np.float64)).astype(np.float32)])
    parts = [base, edge, np.nextafter(edge, np.float32(np.inf)), np.nextafter(edge, np.float32(-np.inf))]
    return np.concatenate([np.broadcast_to(a, a.shape[:1] + shape) for a in parts]).astype(np.float32)


def _dq_sample(ztype: int, shape: tuple, rng) -> tuple[np.ndarray, bool]:
    """DQ's check inputs: every value of a 8 / 16-bit type (so the check is exhaustive), else the type's
    extremes, small values and random ones. Returns (x, exhaustive)."""
    dtype = _numpy(ztype)
    if np.dtype(dtype).itemsize <= 2:
        codes = np.arange(1 << (8 * np.dtype(dtype).itemsize), dtype={1: np.uint8, 2: np.uint16}[np.dtype(dtype).itemsize])
        x = codes.view(dtype)
        exhaustive = True
    else:
        info = np.iinfo(dtype)
        x = np.concatenate([np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], np.int64),
                            np.arange(-1000, 1000) if info.min < 0 else np.arange(2000),
                            rng.integers(info.min, info.max, 8192, dtype=np.int64, endpoint=True)]).astype(dtype)
        exhaustive = False
    x = np.broadcast_to(x.reshape((-1,) + (1,) * len(shape)), (x.size,) + shape)
    return np.ascontiguousarray(x), exhaustive


def _outcome(x: np.ndarray, got: np.ndarray, want: np.ndarray, steps) -> CheckOutcome:
    from .diff import _classify, _differs
    got, want = np.broadcast_arrays(got, want)
    mask = _differs(np.ascontiguousarray(got), np.ascontiguousarray(want))
    outcome = CheckOutcome(int(x.size))
    if not mask.any():
        return outcome
    flat = [np.ascontiguousarray(np.broadcast_to(v, got.shape)).reshape(-1) for v in (x, got, want, mask)]
    fx, fg, fw, fm = flat
    if fx.dtype.kind == "f":
        edge = np.abs(fx.astype(np.float64)) >= float(ml_dtypes.finfo(fx.dtype).max)
    else:
        edge = (fx == np.iinfo(fx.dtype).min) | (fx == np.iinfo(fx.dtype).max)
    masks = _classify(fx, fg, fw, fm, np.unique(fg[edge]).astype(np.float64), np.unique(fw[edge]).astype(np.float64),
                      steps)
    outcome.differing = int(fm.sum())
    outcome.kinds = {k: int(m.sum()) for k, m in masks.items() if m.any()}
    i = int(np.flatnonzero(fm)[0])
    outcome.example = f"x = {fx[i].item()!r}: {fg[i].item()!r} instead of {fw[i].item()!r}"
    return outcome


def _with_axis(nodes, axis: int | None) -> list:
    """Copies of nodes with their axis attribute set to `axis` (None: unchanged): the check's x has the
    rank of the per-axis parameters' shape + 1, so the channel axis is counted from the end there."""
    copies = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        if axis is not None and c.op_type in ("QuantizeLinear", "DequantizeLinear", *QUARK_OPS):
            kept = [a for a in c.attribute if a.name != "axis"]
            del c.attribute[:]
            c.attribute.extend(kept + [helper.make_attribute("axis", axis)])
        copies.append(c)
    return copies


def _check(node, b: _Builder, graph, x: np.ndarray, x_type: int, out_type: int, opset: int, how: str,
           steps, axis: int | None = None) -> CheckOutcome:
    """The emitted standard nodes (plain onnxruntime) against the Quark node (onnxruntime with polyquant's
    library: bit-exact with Quark's CPU kernel) on x."""
    import onnxruntime as ort
    from ..qonnx.execute import reference_session_options
    x_name, out = node.input[0], node.output[0]
    quark_node, emitted_nodes = _with_axis([node], axis)[0], _with_axis(b.nodes, axis)
    names = {i for i in node.input[1:] if i}
    quark_inits = [t for t in graph.initializer if t.name in names]
    rank = x.ndim if x is not None else 1

    def sessions(r):
        original = _model([quark_node], quark_inits, x_name, x_type, out, out_type, max(opset, 21), r, quark=True)
        emitted = _model(emitted_nodes, list(b.inits) + quark_inits, x_name, x_type, out, out_type, max(opset, 21), r,
                         quark=False)
        return (ort.InferenceSession(emitted.SerializeToString(), exact_session_options(),
                                     providers=["CPUExecutionProvider"]),
                ort.InferenceSession(original.SerializeToString(), reference_session_options(),
                                     providers=["CPUExecutionProvider"]))

    if x is None:  # exhaustive float32 Q, per tensor: polyquant diff's sweep
        from .diff import sweep
        emitted, original = sessions(1)
        r = sweep("the standard nodes", "Quark's kernel", [(({}, lambda v: emitted.run(None, {x_name: v})[0]),
                                                           ({}, lambda v: original.run(None, {x_name: v})[0]))],
                  desc=f"check {node.name or out}")
        outcome = CheckOutcome(r.inputs, r.differing, dict(r.kinds))
        if r.differing:
            kind, e = next(iter(r.examples.items()))
            outcome.example = f"x = {e.x!r} ({e.x_bits}, {kind}): {e.a!r} instead of {e.b!r}"
        return outcome
    emitted, original = sessions(rank)
    return _outcome(x, emitted.run(None, {x_name: x})[0], original.run(None, {x_name: x})[0], steps)


def convert_quark_node(graph, node, b: _Builder, opset: int, ranks: dict, check: str, rng,
                       guard: bool = True) -> tuple[str, CheckOutcome | None]:
    """Emits the standard form of one Quark node into b; returns (form, what its check found)."""
    target = QUARK_OPS.get(node.op_type)
    if target is None:
        raise _Refused(f"{node.op_type} is not a Quark Q/DQ op ({', '.join(QUARK_OPS)} are converted)")
    scale = _initializer(graph, node.input[1]) if len(node.input) > 1 else None
    if scale is None:
        raise _Refused(f"scale {node.input[1] if len(node.input) > 1 else '(absent)'!r} is not an initializer: the "
                       f"check needs it at conversion time")
    zp_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
    zp_tensor = next((t for t in graph.initializer if t.name == zp_name), None) if zp_name else None
    if zp_name and zp_tensor is None:
        raise _Refused(f"zero point {zp_name!r} is not an initializer")
    ztype = zp_tensor.data_type if zp_tensor is not None else TensorProto.UINT8
    if _numpy(ztype) is None:
        raise _Refused(f"zero point type {TensorProto.DataType.Name(ztype).lower()}: Quark's ops take int8 / uint8 / "
                       f"int16 / uint16 / int32 / uint32 / float16 / bfloat16")
    if ztype in FLOAT16:
        raise _Refused(f"{TensorProto.DataType.Name(ztype).lower()} zero point: ONNX's QuantizeLinear / "
                       f"DequantizeLinear have no {TensorProto.DataType.Name(ztype).lower()} quantized type (and "
                       f"Quark's float16 Q is a cast that ignores scale and zero point)")
    zp = numpy_helper.to_array(zp_tensor) if zp_tensor is not None else np.zeros((), np.uint8)
    # Quark's kernel reads an absent axis as 0 (docs/quark.md); the standard node gets it explicitly.
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
    per_axis = scale.size > 1
    rank = ranks.get(node.input[0])
    if per_axis and rank is None:
        raise _Refused("a per-axis node whose input rank is unknown")
    need = _min_opset(ztype, per_axis)
    if opset < need:
        raise _Refused(f"the model imports the standard opset {opset}; {TensorProto.DataType.Name(ztype).lower()}"
                       f"{' per axis' if per_axis else ''} {target} needs opset {need} (re-export at opset 21)")
    shape = ((scale.size,) + (1,) * (rank - 1 - (axis % rank))) if per_axis else ()
    attrs = {"axis": axis} if per_axis else {}
    check_axis = -len(shape) if per_axis else None
    inputs = [node.input[1]] + ([zp_name] if zp_name else [])
    form = target
    if target == "QuantizeLinear" and ztype in (TensorProto.INT32, TensorProto.UINT32):
        # QuantizeLinear has no 32-bit output, so standard ops compute Quark's kernel itself: the quotient
        # x / scale in float32, rounded half to even (Round, Quark's rint), cast to int64, plus the zero
        # point in int64, saturated to the type (Clip on int64), cast to it. Where x / scale is NaN, +-inf
        # or |x / scale| >= 2^63 Quark's cast gives INT64_MIN, plus the zero point (wrapping): that constant,
        # saturated, is selected instead (the arithmetic runs on 0 there).
        info = np.iinfo(INTEGER[ztype])
        zp64 = np.asarray(zp, np.int64).reshape(shape) if per_axis else np.asarray(zp, np.int64).reshape(())
        with np.errstate(over="ignore"):
            edge = np.clip(np.int64(np.iinfo(np.int64).min) + zp64, info.min, info.max).astype(INTEGER[ztype])
        s_shaped = b.const(scale.reshape(shape) if per_axis else scale.reshape(()), "scale_shaped")
        ratio = b.op("Div", [node.input[0], s_shaped], "ratio")
        inside = b.op("Less", [b.op("Abs", [ratio], "abs_ratio"), b.const(CAST_RANGE, "int64_range")], "inside")
        safe = b.op("Where", [inside, ratio, b.const(0.0, "zero")], "safe_ratio")
        wide = b.op("Cast", [b.op("Round", [safe], "rounded")], "as_int64", to=TensorProto.INT64)
        summed = b.op("Add", [wide, b.typed_const(zp64, "zero_point_i64")], "with_zero_point")
        clipped = b.op("Clip", [summed, b.typed_const(np.int64(info.min), "type_min"),
                                b.typed_const(np.int64(info.max), "type_max")], "saturated")
        narrow = b.op("Cast", [clipped], "as_type", to=ztype)
        b.op("Where", [inside, narrow, b.typed_const(edge, "quark_edge")], "out", output=node.output[0])
        form = "Cast(Clip(int64(Round(x / scale)) + zp)), Quark's edge where |x / scale| >= 2^63 or NaN"
        form += f" ({TensorProto.DataType.Name(ztype).lower()}{', per axis' if per_axis else ''})"
        if check == "none":
            return form, None
        xs = _q_sample(scale, zp, ztype, shape, rng)
        steps = [float(v) for v in np.unique(scale) if v > 0]
        return form, _check(node, b, graph, xs, TensorProto.FLOAT, ztype, opset, check, steps, check_axis)
    if target == "QuantizeLinear":
        x = node.input[0]
        if ztype in INTEGER and guard:
            # outside = NaN, +-inf or |x / scale| >= 2^63: Quark's int64 cast gives INT64_MIN there, plus the
            # zero point: the lowest value (the highest for a negative zero point, the sum wrapping).
            s_shaped = b.const(scale.reshape(shape) if per_axis else scale.reshape(()), "scale_shaped")
            ratio = b.op("Abs", [b.op("Div", [x, s_shaped], "ratio")], "abs_ratio")
            inside = b.op("Less", [ratio, b.const(CAST_RANGE, "int64_range")], "inside")  # false for NaN
            negative_zp = np.asarray(zp, np.int64).reshape(-1) < 0
            sentinel = np.where(negative_zp, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
            sentinel_c = b.const(sentinel.reshape(shape) if per_axis else sentinel.reshape(()), "quark_edge")
            x = b.op("Where", [inside, x, sentinel_c], "guarded")
            form = "Where(|x / scale| < 2^63, x, -inf or +inf), QuantizeLinear"
        b.op("QuantizeLinear", [x] + inputs, "out", output=node.output[0], **attrs)
        form += f" ({TensorProto.DataType.Name(ztype).lower()}{', per axis' if per_axis else ''})"
        if check == "none":
            return form, None
        per_tensor = not per_axis
        if check == "exhaustive" and per_tensor:
            return form, _check(node, b, graph, None, TensorProto.FLOAT, ztype, opset, check, [])
        if ztype in INTEGER:
            xs = _q_sample(scale, zp, ztype, shape, rng)
        else:
            xs = _sample_inputs({"kind": "bipolar", "scale": scale.reshape(shape) if per_axis else scale.reshape(())},
                                rng)
        steps = [float(v) for v in np.unique(scale) if v > 0]
        outcome = _check(node, b, graph, xs, TensorProto.FLOAT, ztype, opset, check, steps, check_axis)
        weight = _initializer(graph, node.input[0])
        if weight is not None and weight.dtype == np.float32:
            on_weight = _check(node, b, graph, weight, TensorProto.FLOAT, ztype, opset, check, steps)
            outcome.add(on_weight)
            outcome.on_weight = f"its weight tensor: {on_weight.differing} of {on_weight.checked} differ"
        return form, outcome
    if ztype in (TensorProto.INT32, TensorProto.UINT32):
        # Quark's kernel: float32(x - zp) * scale, the difference exact in int64 and rounded once to
        # float32. onnxruntime's DequantizeLinear subtracts in int32 and wraps near the type's ends, so
        # the difference is taken in float64 instead (exact: |x - zp| < 2^33), then rounded to float32.
        zp_wide = np.asarray(zp, np.float64)
        zp_c = b.typed_const(zp_wide.reshape(shape) if per_axis else zp_wide.reshape(()), "zero_point_f64")
        s_c = b.const(scale.reshape(shape) if per_axis else scale.reshape(()), "scale_shaped")
        wide = b.op("Cast", [node.input[0]], "x_f64", to=TensorProto.DOUBLE)
        diff = b.op("Cast", [b.op("Sub", [wide, zp_c], "difference")], "difference_f32", to=TensorProto.FLOAT)
        b.op("Mul", [diff, s_c], "out", output=node.output[0])
        form = "Mul(Cast(Cast(x, float64) - zp, float32), scale)"
    else:
        b.op("DequantizeLinear", [node.input[0]] + inputs, "out", output=node.output[0], **attrs)
    form += f" ({TensorProto.DataType.Name(ztype).lower()}{', per axis' if per_axis else ''})"
    if check == "none":
        return form, None
    xs, exhaustive = _dq_sample(ztype, shape, rng)
    outcome = _check(node, b, graph, xs, ztype, TensorProto.FLOAT, opset, check, [float(v) for v in np.unique(scale)],
                     check_axis)
    if exhaustive:
        form += f", every {TensorProto.DataType.Name(ztype).lower()} input"
    return form, outcome


def convert_quark(m, result, *, check: str, rng, allow_inexact: bool) -> None:
    """Converts the Quark Q/DQ nodes of model m (a copy, modified in place), appending a NodeReport per node
    to result.nodes. A model with a refused node keeps the Quark domains' imports."""
    graph = m.graph
    if not any(n.domain in QUARK_DOMAINS for n in graph.node):
        return
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None) or 1
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
        infos = list(inferred.graph.value_info) + list(graph.input) + list(graph.output)
    except Exception:  # noqa: BLE001 - custom domains may stop inference
        infos = list(graph.input)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in infos if v.type.tensor_type.HasField("shape")}
    for t in graph.initializer:
        ranks[t.name] = len(t.dims)
    used = {n for node in graph.node for n in list(node.input) + list(node.output) + [node.name]}
    used |= {t.name for t in graph.initializer} | {v.name for v in graph.input}
    new_nodes, new_inits, refused = [], [], False
    for node in graph.node:
        if node.domain not in QUARK_DOMAINS:
            new_nodes.append(node)
            continue
        name = node.name or node.output[0]
        b = _Builder(graph, name, used)
        try:
            form, outcome = convert_quark_node(graph, node, b, opset, ranks, check, rng)
            report = NodeReport(name, node.op_type, form, "exact")
            if outcome is not None:
                _record_check(report, outcome, allow_inexact, "Quark's kernel")
            result.nodes.append(report)
            new_nodes += b.nodes
            new_inits += b.inits
        except _Refused as why:
            result.nodes.append(NodeReport(name, node.op_type, "-", "refused", str(why)))
            new_nodes.append(node)
            refused = True
        if node.input[0] in ranks:  # elementwise: the output has x's rank (inference stops at custom ops)
            ranks.setdefault(node.output[0], ranks[node.input[0]])
    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)
    if not refused:
        keep = [o for o in m.opset_import if o.domain not in QUARK_DOMAINS]
        del m.opset_import[:]
        m.opset_import.extend(keep)
