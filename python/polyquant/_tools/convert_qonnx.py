"""`polyquant convert --to qonnx`: standard ONNX QuantizeLinear / DequantizeLinear pairs to QONNX, exactly.

Each pair x -> QuantizeLinear(scale, zp) -> DequantizeLinear(scale, zp) -> y (the same parameters on
both; per tensor or per axis) becomes one QONNX node computing the same grid:

  integer types (int2 .. int16, uint2 .. uint16, int32 / uint32)
      Quant(x, scale, zeropt, bitwidth = the type's bits, signed, narrow = 0, rounding_mode = ROUND)
      QuantizeLinear rounds x / scale half to even (ROUND); its saturation to the type is the grid
      [min_int, max_int]. A zero point that only shifts the grid into the other signedness (uint8
      with 128, int8 with -128: [-128, 127] and [0, 255] in x / scale) is zeropt = 0 with that
      signedness. Any other zero point is qonnx's zeropt, but qonnx adds it *before* rounding
      (round(x / scale + zeropt)) where QuantizeLinear adds it after (round(x / scale) + zp), and the
      float32 sum x / scale + zeropt makes ties that x / scale is not on: the check finds them and the
      pair is refused (--allow-inexact emits it, with the counts).
  float8 e4m3fn / e5m2 / e4m3fnuz / e5m2fnuz (saturate = 1)
      FloatQuant(x, scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val; has_inf,
      has_nan, has_subnormal, saturation = 1, rounding_mode = ROUND): the minifloat's own grid (the
      fnuz types: bias 8 / 16, max 240 / 57344, no infinities; their lack of a negative zero is the
      -0.0 fix-up below).

Where the two still differ on a whole class of inputs, standard ops after the QONNX node give
DequantizeLinear's value there (exact fix-ups, computed at conversion time per channel):
  NaN / +inf / -inf inputs  Where(IsNaN(x) / IsInf(x), DQ(Q(that input)), y), only where DQ(Q(.))
                            differs from the QONNX node's output for it (integer Q turns NaN into an
                            integer; FloatQuant turns +-inf into NaN where saturating Q gives +-max)
  zeros                     Where(y == 0, +0.0, y) for integer and fnuz types: DequantizeLinear's value is
                            +0.0 where qonnx keeps the sign of a negative input rounding to zero.
--allow-inexact leaves the fix-ups out (a bare QONNX node, as FINN-style flows expect): INEXACT, with
the differing inputs counted.

A DequantizeLinear of an integer weight initializer (how QDQ models store weights) becomes the float
weight DQ(w_q), computed at conversion time, feeding Quant on the same grid, checked over the tensor;
a blocked one gets the blocks' parameters expanded to the weight's shape (QONNX has no blocks).

Refused, with the reason: a QuantizeLinear whose output reaches anything but DequantizeLinears (QONNX has
no integer-output op), a DequantizeLinear of a computed integer tensor, parameters that are not
initializers or differ between Q and DQ, a blocked pair, a per-axis pair whose input rank is unknown,
saturate = 0, a nonzero float8 zero point, types without a QONNX grid (float4, int4 with output_dtype
...), non-float32 inputs.

Every converted pair whose parameters are initializers is checked: the emitted nodes run in onnxruntime with
polyquant's custom-op library (bit-exact with qonnx) against the original pair in plain onnxruntime, on
NaN, infinities, zeros, subnormals, every rounding tie of the grid (every minifloat value and midpoint)
and its float32 neighbours and random values, or on every float32 input (check="exhaustive", per
tensor), and a weight's pair on the weight tensor itself.
"""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .convert import (CheckOutcome, ConvertResult, NodeReport, _Builder, _compare, _initializer, _node_model,
                      _record_check, _sample_inputs, _Refused, exact_session_options)

QONNX_DOMAIN = "qonnx.custom_op.general"
# The float8 types whose grid FloatQuant holds: (exponent bits, mantissa bits, bias, max, has_inf).
# FloatQuant's formats have NaN, subnormals and a negative zero; the fnuz types have no negative zero
# (their code 0x80 is the NaN), so their pairs get the -0.0 fix-up of the integer types (FNUZ_TYPES).
FLOAT8_FORMATS = {TensorProto.FLOAT8E4M3FN: (4, 3, 7, 448.0, 0), TensorProto.FLOAT8E5M2: (5, 2, 15, 57344.0, 1),
                  TensorProto.FLOAT8E4M3FNUZ: (4, 3, 8, 240.0, 0), TensorProto.FLOAT8E5M2FNUZ: (5, 2, 16, 57344.0, 0)}
FNUZ_TYPES = (TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ)
INTEGER_TYPES = {TensorProto.INT8: (8, True), TensorProto.UINT8: (8, False), TensorProto.INT16: (16, True),
                 TensorProto.UINT16: (16, False), TensorProto.INT4: (4, True), TensorProto.UINT4: (4, False),
                 TensorProto.INT32: (32, True), TensorProto.UINT32: (32, False)}
if hasattr(TensorProto, "INT2"):
    INTEGER_TYPES.update({TensorProto.INT2: (2, True), TensorProto.UINT2: (2, False)})


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _pair_parameters(graph, q, dq, rank: int | None) -> dict:
    """The pair's parameters, checked to agree between Q and DQ: scale, zero point (its ONNX type),
    axis, the QONNX-shaped (broadcasting against x from the right) scale / zero point."""
    scale = _initializer(graph, q.input[1])
    if scale is None:
        raise _Refused(f"y_scale {q.input[1]!r} is not an initializer: the grid is fixed at conversion time")
    zp_name = q.input[2] if len(q.input) > 2 and q.input[2] else None
    zp_tensor = next((t for t in graph.initializer if t.name == zp_name), None) if zp_name else None
    if zp_name and zp_tensor is None:
        raise _Refused(f"y_zero_point {zp_name!r} is not an initializer")
    if zp_tensor is not None:
        ztype = zp_tensor.data_type
        zp = numpy_helper.to_array(zp_tensor)
    else:
        ztype = _attr(q, "output_dtype", 0) or TensorProto.UINT8
        zp = np.zeros(scale.shape, helper.tensor_dtype_to_np_dtype(ztype))
    dq_scale = _initializer(graph, dq.input[1])
    dq_zp = _initializer(graph, dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros_like(zp)
    same = dq_scale is not None and dq_zp is not None and dq_scale.shape == scale.shape \
        and np.array_equal(dq_scale.view(np.uint32), scale.astype(np.float32).view(np.uint32)) \
        and np.array_equal(np.asarray(dq_zp, np.float64), np.asarray(zp, np.float64), equal_nan=True)
    if not same:
        raise _Refused(f"QuantizeLinear {q.name!r} and DequantizeLinear {dq.name!r} do not hold the same scale and zero "
                       f"point initializers: not one quantizer")
    if scale.dtype != np.float32:
        raise _Refused(f"y_scale is {scale.dtype}; the conversion is built for float32 scales")
    if _attr(q, "block_size", 0) or _attr(dq, "block_size", 0):
        raise _Refused("a blocked pair (block_size > 0): not converted yet (QONNX would need the scale expanded to "
                       "the tensor's shape)")
    if not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        raise _Refused("a scale that is not positive and finite: QONNX's grid is not defined for it")
    axis_q, axis_dq = _attr(q, "axis", 1), _attr(dq, "axis", 1)
    per_axis = scale.ndim == 1 and scale.size > 1
    shape = ()
    if per_axis:
        if axis_q != axis_dq:
            raise _Refused(f"QuantizeLinear's axis {axis_q} and DequantizeLinear's {axis_dq} differ")
        if rank is None:
            raise _Refused("a per-axis pair whose input rank is unknown: QONNX's scale broadcasts from the right, so "
                           "its shape needs the rank")
        axis = axis_q + rank if axis_q < 0 else axis_q
        shape = (scale.size,) + (1,) * (rank - 1 - axis)
    elif scale.size != 1:
        raise _Refused(f"y_scale has shape {scale.shape}: neither per tensor nor per axis")
    return {"scale": scale, "zp": zp, "ztype": ztype, "axis": axis_q if per_axis else None, "qshape": shape,
            "saturate": _attr(q, "saturate", 1)}


_NAN_INPUTS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFC00001, 0x7FC12345], np.uint32).view(np.float32)


def _specials_fixups(b: _Builder, x: str, y: str, p: dict, qonnx_at) -> tuple[str, list]:
    """Where(mask(x), DQ(Q(s)), y) for the special inputs s (NaN, +inf, -inf) at which the pair's value
    (per channel, from polyquant.onnx: bit-exact with onnxruntime) differs from the QONNX node's. A NaN
    whose pair value depends on the NaN (float8 keeps its sign, as the canonical NaN of the input's sign)
    is fixed by Cast(Cast(x, float8), float32), which is that conversion alone."""
    from .. import onnx as pqo
    n = max(p["scale"].size, 1)
    kw = {"axis": 0} if p["axis"] is not None else {}
    zp = p["zp_typed"]
    sc = p["scale"].reshape(-1) if p["axis"] is not None else p["scale"].reshape(())

    def both(v):  # (pair, QONNX node) on the inputs v, shape (len(v), channels), as bits
        xs = np.ascontiguousarray(np.broadcast_to(np.asarray(v, np.float32).reshape(-1, 1), (len(v), n)))
        def pair_at(r):
            q = np.asarray(pqo.quantize_linear(r, sc, zp, saturate=p["saturate"], **kw))
            if p.get("clip") is not None:  # the Clip of a QCDQ triple, on the integers
                q = np.clip(q, *p["clip"]).astype(q.dtype)
            return np.asarray(pqo.dequantize_linear(q, sc, zp, **kw), np.float32).reshape(-1)
        pair = np.stack([pair_at(r) for r in xs])
        mine = np.stack([np.asarray(qonnx_at(r), np.float32).reshape(-1) for r in xs])
        return pair.view(np.uint32), mine.view(np.uint32)

    def value(bits_row):
        v = bits_row.view(np.float32)
        return v.reshape(p["qshape"]) if p["axis"] is not None else v.reshape(())

    fixed = []
    pair, mine = both([np.inf, -np.inf])
    if p["ztype"] in FLOAT8_FORMATS and not np.array_equal(pair, mine):
        # FloatQuant returns NaN where x / scale is +-inf (x infinite, or |x| so large that the division
        # overflows); saturating Q/DQ returns +-max * scale there. y is NaN for no other non-NaN x.
        overflow = b.op("And", [b.op("IsNaN", [y], "y_is_nan"), b.op("Not", [b.op("IsNaN", [x], "x_is_nan_")], "x_not_nan")],
                        "overflowed")
        signed_max = b.op("Where", [b.op("Greater", [x, b.const(0.0, "zero")], "positive"),
                                    b.const(value(pair[0]), "max_value"), b.const(value(pair[1]), "min_value")], "saturated")
        y = b.op("Where", [overflow, signed_max, y], "fix_overflow")
        fixed.insert(0, "x / scale overflowing to +-inf")
    else:
        for label, s, detect, row in (("+inf", np.inf, {"detect_negative": 0}, 0), ("-inf", -np.inf, {"detect_positive": 0}, 1)):
            if not np.array_equal(pair[row], mine[row]):
                mask = b.op("IsInf", [x], "is_" + ("pos" if s > 0 else "neg") + "_inf", **detect)
                y = b.op("Where", [mask, b.const(value(pair[row]), "inf_value"), y], "fix_inf")
                fixed.append(label)
    pair, mine = both(_NAN_INPUTS)
    if not np.array_equal(pair, mine):
        is_nan = b.op("IsNaN", [x], "is_nan")
        if np.all(pair == pair[:1]):   # one value per channel for every NaN: a constant
            y = b.op("Where", [is_nan, b.const(value(pair[0]), "nan_value"), y], "fix_nan")
        elif p["ztype"] in FLOAT8_FORMATS:
            narrow = b.op("Cast", [x], "nan_as_float8", to=p["ztype"])
            y = b.op("Where", [is_nan, b.op("Cast", [narrow], "nan_from_float8", to=TensorProto.FLOAT), y], "fix_nan")
        else:
            raise _Refused("the pair's value for a NaN input depends on the NaN's bits: no fix-up is built for it")
        fixed.append("NaN")
    return y, fixed


def _emit(graph, q, dq, b: _Builder, p: dict, fixups: bool) -> tuple[str, dict, list]:
    """The QONNX node (and fix-ups) for the pair into b; returns (form, reference parameters, fix-ups)."""
    from .. import qonnx
    x, out = q.input[0], dq.output[0]
    qshape = p["qshape"]
    scale = p["scale"].reshape(qshape) if p["axis"] is not None else p["scale"].reshape(())
    ztype = p["ztype"]
    if ztype in FLOAT8_FORMATS:
        if p["saturate"] != 1:
            raise _Refused("saturate = 0: QuantizeLinear then sends out-of-range values to NaN / inf, which FloatQuant "
                           "(saturation = 1 clamps; saturation = 0 differs on inf) does not reproduce")
        if np.any(np.asarray(p["zp"], np.float32) != 0):
            raise _Refused("a nonzero float8 zero point: FloatQuant has none")
        e, m, bias, mx, has_inf = FLOAT8_FORMATS[ztype]
        p["zp_typed"] = np.zeros(p["scale"].shape if p["axis"] is not None else (), _numpy_type(ztype))
        consts = [b.const(scale, "scale"), b.const(e, "exponent_bitwidth"), b.const(m, "mantissa_bitwidth"),
                  b.const(bias, "exponent_bias"), b.const(mx, "max_val")]
        y = b.name("floatquant")
        b.nodes.append(helper.make_node("FloatQuant", [x] + consts, [y], name=b.name("floatquant_node"),
                                        domain=QONNX_DOMAIN, has_inf=has_inf, has_nan=1, has_subnormal=1,
                                        saturation=1, rounding_mode="ROUND"))

        def qonnx_at(v):
            return qonnx.float_quant(v, p["scale"].reshape(-1), np.float32(e), np.float32(m), np.float32(bias), 1,
                                     np.float32(mx), has_inf, 1, 1, "ROUND", 1)
        form = f"FloatQuant (e{e}m{m}, bias {bias}, max {mx:g}, ROUND)"
        zero_fix = ztype in FNUZ_TYPES  # no negative zero: DequantizeLinear gives +0.0
    elif ztype in INTEGER_TYPES:
        g = p["grid"]
        bits, signed, narrow, z = g["bitwidth"], g["signed"], g["narrow"], g["zeropt"]
        p["zp_typed"] = np.asarray(p["zp"]).reshape(-1) if p["axis"] is not None else np.asarray(p["zp"]).reshape(())
        consts = [b.const(scale, "scale"), b.const(z, "zeropt"), b.const(np.float32(bits), "bitwidth")]
        y = b.name("quant")
        b.nodes.append(helper.make_node("Quant", [x] + consts, [y], name=b.name("quant_node"), domain=QONNX_DOMAIN,
                                        signed=int(signed), narrow=int(narrow), rounding_mode="ROUND"))

        def qonnx_at(v):
            return qonnx.quant(v, p["scale"].reshape(-1), z.reshape(-1) if z.ndim else z, np.float32(bits), int(signed),
                               int(narrow), "ROUND")
        form = f"Quant ({bits}-bit {'signed' if signed else 'unsigned'}{', narrow' if narrow else ''}, zeropt " \
               f"{'0' if not z.any() else '= zero point'}, ROUND)"
        zero_fix = True
    else:
        raise _Refused(f"QuantizeLinear to {TensorProto.DataType.Name(ztype).lower()}: QONNX has no grid for it "
                       f"(integer types and float8 e4m3fn / e5m2 / e4m3fnuz / e5m2fnuz are converted)")
    fixed = []
    if fixups:
        y, fixed = _specials_fixups(b, x, y, p, qonnx_at)
        if zero_fix:
            zero = b.const(0.0, "zero")
            y = b.op("Where", [b.op("Equal", [y, zero], "is_zero"), zero, y], "positive_zero")
            fixed.append("-0.0")
    b.nodes[-1].output[0] = out  # the last op writes the pair's output
    if fixed:
        form += ", Where fix-ups for " + ", ".join(fixed)
    return form, {"qshape": qshape}, fixed


def _grid_of(lo: int, hi: int) -> tuple[int, bool, bool] | None:
    """The QONNX grid [min_int, max_int] equal to the integers lo..hi: (bitwidth, signed, narrow), or None."""
    for bits in range(2, 33):
        half = 1 << (bits - 1)
        for signed, narrow, bounds in ((True, False, (-half, half - 1)), (True, True, (-half + 1, half - 1)),
                                       (False, False, (0, 2 * half - 1)), (False, True, (0, 2 * half - 2))):
            if (lo, hi) == bounds:
                return bits, signed, narrow
    return None


def _integer_grid(p: dict, clip: tuple[int, int] | None) -> dict:
    """The QONNX Quant parameters of an integer pair. QuantizeLinear's integers q lie in the type's range
    (narrowed by a Clip between Q and DQ, as qonnx's QCDQ form writes it), and DQ returns (q - zp) * scale:
    in units of scale the grid is [lo - zp, hi - zp] with q rounded half to even from x / scale, which is
    Quant with zeropt 0 when that range is a QONNX grid (int8 zp 0, uint8 zp 128 -> signed 8 bits; int8
    zp -128 -> unsigned; a Clip to [-127, 127] -> narrow). Otherwise qonnx's zeropt = zp on the grid
    [lo, hi], which rounds x / scale + zeropt instead (the check decides)."""
    bits, signed_type = INTEGER_TYPES[p["ztype"]]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed_type else (0, (1 << bits) - 1)
    if clip is not None:
        lo, hi = max(lo, clip[0]), min(hi, clip[1])
    zp = np.unique(np.asarray(p["zp"]).astype(np.int64))
    shifted = _grid_of(lo - int(zp[0]), hi - int(zp[0])) if zp.size == 1 else None
    if shifted:
        g, zeropt = shifted, np.float32(0)
    else:
        g = _grid_of(lo, hi)
        if g is None:
            raise _Refused(f"the integers {lo}..{hi} are no QONNX grid (a bit width's signed, unsigned or narrow range)")
        z = np.asarray(p["zp"], np.float32)
        zeropt = z.reshape(p["qshape"]) if p["axis"] is not None else z.reshape(())
    return {"bitwidth": g[0], "signed": g[1], "narrow": g[2], "zeropt": np.asarray(zeropt, np.float32)}


def _numpy_type(ztype: int):
    return {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
            TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}[ztype]


def _grid_sample(p: dict, rng) -> np.ndarray:
    """The check's inputs, shaped (N,) + the QONNX scale's shape: the integer grid's ties and points (as
    polyquant convert --to onnx samples them) or, for float8, every value of the type times the scale,
    every midpoint of two neighbours and their float32 neighbours, plus specials and random values."""
    ztype = p["ztype"]
    scale = p["scale"].reshape(p["qshape"]) if p["axis"] is not None else p["scale"].reshape(())
    if ztype in INTEGER_TYPES:
        g = p["grid"]
        return _sample_inputs({"kind": "int", "scale": scale, "zeropt": g["zeropt"],
                               "bitwidth": np.float32(min(g["bitwidth"], 30)), "signed": int(g["signed"]),
                               "narrow": int(g["narrow"])}, rng)
    values = np.arange(256, dtype=np.uint8).view(_numpy_type(ztype)).astype(np.float64)
    values = np.unique(values[np.isfinite(values)])
    mids = (values[1:] + values[:-1]) / 2
    pts = np.concatenate([values, mids]).reshape((-1,) + (1,) * len(np.shape(scale))) * np.asarray(scale, np.float64)
    pts = pts.astype(np.float32)
    parts = [pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))]
    base = _sample_inputs({"kind": "bipolar", "scale": scale}, rng)  # specials and random values
    with np.errstate(over="ignore"):
        parts += [base, base * np.float32(values.max() / 4)]
    parts.append(np.broadcast_to(_NAN_INPUTS.reshape((-1,) + (1,) * len(np.shape(scale))),
                                 (_NAN_INPUTS.size,) + np.shape(scale)))  # signalling and payload NaNs
    return np.concatenate([np.broadcast_to(a, a.shape[:1] + np.shape(scale)) for a in parts]).astype(np.float32)


def _check_pair(graph, q, dq, b: _Builder, p: dict, opset: int, how: str, rng) -> CheckOutcome:
    """The emitted nodes (onnxruntime with polyquant's custom-op library, qonnx's numerics) against the
    original pair (plain onnxruntime, the settings that keep its bits) on the check's inputs."""
    import onnxruntime as ort
    from ..qonnx.execute import reference_session_options
    x_name = q.input[0]
    per_tensor = p["axis"] is None
    exhaustive = how == "exhaustive" and per_tensor
    x = None if exhaustive else _grid_sample(p, rng)
    # The original pair, axis counted from the end (the check's x has the rank of the QONNX shape + 1).
    pair = []
    for original_node in [q] + ([p["clip_node"]] if p.get("clip_node") is not None else []) + [dq]:
        pair.append(onnx.NodeProto())
        pair[-1].CopyFrom(original_node)
    for n in pair:
        if n.op_type == "Clip":
            continue
        if p["axis"] is not None:
            for a in n.attribute:
                if a.name == "axis":
                    a.i = -1 - len(p["qshape"][1:])
            if not any(a.name == "axis" for a in n.attribute):
                n.attribute.append(helper.make_attribute("axis", -1 - len(p["qshape"][1:])))
    names = {i for n in pair for i in n.input}
    pair_inits = [t for t in graph.initializer if t.name in names and t.name != x_name]
    emitted_inits = list(b.inits)

    def sessions(rank: int):
        original = _node_model(pair, pair_inits, x_name, dq.output[0], max(opset, 21), rank)
        emitted = _node_model(b.nodes, emitted_inits, x_name, dq.output[0], max(opset, 21), rank)
        emitted.opset_import.append(helper.make_opsetid(QONNX_DOMAIN, 1))
        plain = ort.InferenceSession(original.SerializeToString(), exact_session_options(),
                                     providers=["CPUExecutionProvider"])
        with_library = ort.InferenceSession(emitted.SerializeToString(), reference_session_options(),
                                            providers=["CPUExecutionProvider"])
        return with_library, (lambda v: plain.run(None, {x_name: v})[0])

    node = SimpleNamespace(input=[x_name], name=dq.name)
    if exhaustive:
        from .diff import sweep
        emitted, original = sessions(1)
        r = sweep("the QONNX node", "the Q/DQ pair", [(({}, lambda v: emitted.run(None, {x_name: v})[0]),
                                                        ({}, original))], desc=f"check {dq.name or dq.output[0]}")
        outcome = CheckOutcome(r.inputs, r.differing, dict(r.kinds))
        if r.differing:
            kind, e = next(iter(r.examples.items()))
            outcome.example = f"x = {e.x!r} ({e.x_bits}, {kind}): {e.a!r} instead of {e.b!r}"
    else:
        emitted, original = sessions(x.ndim)
        outcome = _compare(emitted, node, x, original, p["scale"])
    weight = _initializer(graph, x_name)
    if weight is not None and weight.dtype == np.float32:
        emitted, original = sessions(weight.ndim)
        on_weight = _compare(emitted, node, weight, original, p["scale"])
        outcome.add(on_weight)
        outcome.on_weight = f"its weight tensor: {on_weight.differing} of {on_weight.checked} differ"
    return outcome


def _blocked_parameters(graph, dq, w_q: np.ndarray, wtype: int, block: int):
    """A blocked DequantizeLinear of an integer weight (block_size B along `axis`: element i of that axis
    takes the parameters of block i // B): QONNX has no blocks, so its scale and zero point are the
    blocks' expanded to the weight's own shape (each repeated B times along the axis), which is the
    same per-element parameters by ONNX's definition. Returns (p, the DQ's own scale, zero point and
    attributes for computing the float weight)."""
    scale = _initializer(graph, dq.input[1])
    zp_name = dq.input[2] if len(dq.input) > 2 and dq.input[2] else None
    zp = _initializer(graph, zp_name) if zp_name else np.zeros(scale.shape if scale is not None else (), w_q.dtype)
    if scale is None or zp is None:
        raise _Refused("a blocked DequantizeLinear whose scale or zero point is not an initializer")
    if scale.dtype != np.float32 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        raise _Refused("a scale that is not positive, finite float32: QONNX's grid is not defined for it")
    axis = _attr(dq, "axis", 1) % w_q.ndim
    size = w_q.shape[axis]

    def expand(v):
        return np.take(np.repeat(v, block, axis=axis), np.arange(size), axis=axis)
    full_scale, full_zp = expand(scale), expand(zp)
    if full_scale.shape != w_q.shape:
        raise _Refused(f"a blocked scale of shape {scale.shape} does not tile the weight {w_q.shape} with block_size "
                       f"{block} along axis {axis}")
    ztype = next(t.data_type for t in graph.initializer if t.name == zp_name) if zp_name else wtype
    p = {"scale": full_scale.astype(np.float32), "zp": full_zp, "ztype": ztype, "axis": "blocked",
         "qshape": w_q.shape, "saturate": 1}
    return p, scale, zp, {"axis": axis, "block_size": block}


def _integer_weight(graph, dq, b: _Builder, check: str):
    """DequantizeLinear of an integer weight initializer w_q (how QDQ models store weights) as QONNX's
    weight form: the float weight w = DQ(w_q), computed at conversion time by polyquant.onnx (bit-exact
    with onnxruntime), feeding Quant on the pair's grid. Exact when Quant(w) == DQ(w_q) on every
    element, which the check establishes over the tensor itself (w holds no NaN; a zero element is
    (q - zp) * scale = +0.0, which Quant keeps)."""
    import onnxruntime as ort
    from .. import onnx as pqo
    from ..qonnx.execute import reference_session_options
    w_tensor = next((t for t in graph.initializer if t.name == dq.input[0]), None)
    if w_tensor is None or w_tensor.data_type not in INTEGER_TYPES:
        raise _Refused(f"DequantizeLinear of {dq.input[0]!r} without a QuantizeLinear before it, and {dq.input[0]!r} is "
                       f"not an integer initializer: QONNX holds no integer tensor")
    w_q = numpy_helper.to_array(w_tensor)
    block = _attr(dq, "block_size", 0)
    if block:
        p, scale, zp, axis = _blocked_parameters(graph, dq, w_q, w_tensor.data_type, block)
    else:
        p = _pair_parameters(graph, dq, dq, w_q.ndim)
        if len(dq.input) < 3 or not dq.input[2]:
            p["ztype"] = w_tensor.data_type
            p["zp"] = np.zeros(p["scale"].shape, np.int64)
        axis = {"axis": _attr(dq, "axis", 1)} if p["axis"] is not None else {}
        scale = p["scale"].reshape(-1) if p["axis"] is not None else p["scale"].reshape(())
        zp = np.asarray(numpy_helper.to_array(next(t for t in graph.initializer if t.name == dq.input[2]))
                        if len(dq.input) > 2 and dq.input[2] else np.zeros(scale.shape, w_q.dtype))
    p["grid"] = _integer_grid(p, None)
    w = np.asarray(pqo.dequantize_linear(w_q, scale, zp, **axis), np.float32)
    w_name = b.name("float_weight")
    fake_q = SimpleNamespace(input=[w_name])
    form, _, _ = _emit(graph, fake_q, dq, b, p, fixups=False)
    report = NodeReport(dq.name or dq.output[0], "DequantizeLinear (integer weight)", "float weight, " + form, "exact")
    if check != "none":
        model = _node_model(b.nodes, list(b.inits), w_name, dq.output[0], 21, w.ndim)
        model.opset_import.append(helper.make_opsetid(QONNX_DOMAIN, 1))
        session = ort.InferenceSession(model.SerializeToString(), reference_session_options(),
                                       providers=["CPUExecutionProvider"])
        got = session.run(None, {w_name: w})[0]
        differ = int((np.ascontiguousarray(got).view(np.uint32) != w.view(np.uint32)).sum())
        report.checked = int(w.size)
        if differ:
            raise _Refused(f"Quant of the dequantized weight differs from DequantizeLinear on {differ} of {w.size} "
                           f"elements of the weight tensor")
    return report, numpy_helper.from_array(w, w_name)


def to_qonnx(m, *, check: str, rng, allow_inexact: bool) -> ConvertResult:
    """Converts the Q/DQ pairs of model `m` (a copy, modified in place) to QONNX nodes (module doc)."""
    graph = m.graph
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None) or 1
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
        infos = list(inferred.graph.value_info) + list(graph.input) + list(graph.output)
    except Exception:  # noqa: BLE001 - an unknown domain may stop inference: ranks from the inputs only
        infos = list(graph.input)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in infos if v.type.tensor_type.HasField("shape")}
    types = {v.name: v.type.tensor_type.elem_type for v in infos}
    for t in graph.initializer:
        ranks[t.name], types[t.name] = len(t.dims), t.data_type
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.output}
    used = {n for node in graph.node for n in list(node.input) + list(node.output) + [node.name]}
    used |= {t.name for t in graph.initializer} | {v.name for v in graph.input}
    result = ConvertResult(m, source="Q/DQ")
    replaced: dict[int, list] = {}   # id(node) -> nodes in its place ([] removes it)
    seen_dqs: set = set()            # the DequantizeLinears of a QuantizeLinear (converted or refused)
    new_inits = []

    def is_standard(n):
        return n.domain in ("", "ai.onnx")

    for q in graph.node:
        if not (is_standard(q) and q.op_type == "QuantizeLinear"):
            continue
        name = q.name or q.output[0]
        users = consumers.get(q.output[0], [])
        clip_node, clip = None, None
        if len(users) == 1 and is_standard(users[0]) and users[0].op_type == "Clip" and q.output[0] not in outputs:
            # qonnx's QCDQ form: Q, Clip on the integers (a narrower grid), DQ
            bounds = [_initializer(graph, i) if i else None for i in list(users[0].input[1:3]) + [""] * 2][:2]
            if len(users[0].input) == 3 and all(v is not None and v.size == 1 for v in bounds):
                clip_node, clip = users[0], (int(bounds[0].reshape(())), int(bounds[1].reshape(())))
                users = consumers.get(clip_node.output[0], [])
        middle = clip_node.output[0] if clip_node is not None else q.output[0]
        dqs = [u for u in users if is_standard(u) and u.op_type == "DequantizeLinear" and u.input[0] == middle]
        if not dqs or len(dqs) != len(users) or middle in outputs:
            result.nodes.append(NodeReport(name, "QuantizeLinear", "-", "refused",
                                           "QuantizeLinear without its DequantizeLinear (its integers reach "
                                           f"{', '.join(sorted({u.op_type for u in users if u not in dqs})) or 'the graph output'}): "
                                           "QONNX has no op with an integer output"))
            continue
        converted_all = True
        seen_dqs.update(id(dq) for dq in dqs)
        for dq in dqs:
            label = f"{name} + {'Clip + ' if clip_node is not None else ''}{dq.name or dq.output[0]}"
            b = _Builder(graph, dq.name or dq.output[0], used)
            try:
                if types.get(q.input[0]) not in (None, TensorProto.FLOAT):
                    raise _Refused(f"input {q.input[0]!r} is {TensorProto.DataType.Name(types[q.input[0]]).lower()}; "
                                   f"the conversion is built for float32")
                p = _pair_parameters(graph, q, dq, ranks.get(q.input[0]))
                p["clip_node"], p["clip"] = clip_node, clip
                if p["ztype"] in INTEGER_TYPES:
                    p["grid"] = _integer_grid(p, clip)
                elif clip_node is not None:
                    raise _Refused("a Clip between a float8 QuantizeLinear and its DequantizeLinear: not converted")
                form, _, _ = _emit(graph, q, dq, b, p, fixups=True)
                report = NodeReport(label, "QuantizeLinear/DequantizeLinear", form, "exact")
                if check != "none":
                    outcome = _check_pair(graph, q, dq, b, p, opset, check, rng)
                    _record_check(report, outcome, allow_inexact, "the Q/DQ pair")
                    if not outcome.differing and allow_inexact:
                        # The bare QONNX node (no fix-ups): what FINN-style flows expect, INEXACT with its counts.
                        bare = _Builder(graph, (dq.name or dq.output[0]) + "_bare", used)
                        bare_form, _, _ = _emit(graph, q, dq, bare, p, fixups=False)
                        bare_outcome = _check_pair(graph, q, dq, bare, p, opset, check, rng)
                        if bare_outcome.differing:
                            b, report = bare, NodeReport(label, "QuantizeLinear/DequantizeLinear", bare_form, "inexact",
                                                         bare_outcome.on_weight, bare_outcome.checked,
                                                         bare_outcome.differing, bare_outcome.kinds, bare_outcome.example)
                result.nodes.append(report)
                replaced[id(dq)] = b.nodes
                new_inits += b.inits
            except _Refused as why:
                result.nodes.append(NodeReport(label, "QuantizeLinear/DequantizeLinear", "-", "refused", str(why)))
                converted_all = False
        if converted_all:
            replaced[id(q)] = []
            if clip_node is not None:
                replaced[id(clip_node)] = []
    for dq in graph.node:
        if is_standard(dq) and dq.op_type == "DequantizeLinear" and id(dq) not in seen_dqs:
            name = dq.name or dq.output[0]
            b = _Builder(graph, name, used)
            try:
                report, float_weight = _integer_weight(graph, dq, b, check)
                result.nodes.append(report)
                replaced[id(dq)] = b.nodes
                new_inits += b.inits + [float_weight]
            except _Refused as why:
                result.nodes.append(NodeReport(name, "DequantizeLinear", "-", "refused", str(why)))
    nodes, replaced_nodes = [], []
    for n in graph.node:
        nodes += replaced.get(id(n), [n])
        if id(n) in replaced:
            replaced_nodes.append(n)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    # The pairs' scale / zero point initializers that nothing reads any more go; nothing else is touched.
    orphaned = {i for n in replaced_nodes for i in n.input} - {i for n in graph.node for i in n.input}
    orphaned -= {v.name for v in graph.input}
    kept = [t for t in graph.initializer if t.name not in orphaned]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if any(n.domain == QONNX_DOMAIN for n in graph.node) and not any(o.domain == QONNX_DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(QONNX_DOMAIN, 1))
    return result
