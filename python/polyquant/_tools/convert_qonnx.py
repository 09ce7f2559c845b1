"""`polyquant convert --to qonnx`: standard ONNX QuantizeLinear / DequantizeLinear pairs to QONNX, exactly.

Each pair x -> QuantizeLinear(scale, zp) -> DequantizeLinear(scale, zp) -> y (the same parameters on
both; per tensor, per axis or blocked) becomes one QONNX node computing the same grid:

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

A blocked pair (opset 21+, block_size B along axis a; element i of a takes block i // B's scale and
zero point, and the final block may hold fewer than B elements) has a scale that does not broadcast
against x, and QONNX has no blocks. It becomes the per-axis node above, its channels being the blocks,
on x reshaped to one block per row:
      [Pad a to S B, S = ceil(D_a / B)] -> Reshape (M, B, P) -> Quant / FloatQuant (+ fix-ups) with the
      scale and zero point as (M, 1, P) -> Reshape -> [Slice a back to D_a]
M = the blocks times the axes before a, P = the axes after it (left out where 1). The moves keep every
bit and the QONNX node and fix-ups are elementwise, so each element meets its own block's parameters
and the padding is dropped unread: exact, for the integer and float8 types above. The Reshape's target
is static: x's length along a must be known (shape inference or value_info), the other dimensions are
the scale's.

A DequantizeLinear of an integer weight initializer (how QDQ models store weights) becomes the float
weight DQ(w_q), computed at conversion time, feeding Quant on the same grid, checked over the tensor;
a blocked one gets the blocks' parameters expanded to the weight's shape (QONNX has no blocks).

Refused, with the reason: a QuantizeLinear whose output reaches anything but DequantizeLinears (QONNX has
no integer-output op), a DequantizeLinear of a computed integer tensor, parameters that are not
initializers or differ between Q and DQ, a per-axis pair whose input rank is unknown, a blocked pair
whose input's length along the block axis is unknown (or whose scale does not tile the input),
saturate = 0, a nonzero float8 zero point, types without a QONNX grid (float4, int4 with output_dtype
...), non-float32 inputs.

Every converted pair whose parameters are initializers is checked: the emitted nodes run in onnxruntime with
polyquant's custom-op library (bit-exact with qonnx) against the original pair in plain onnxruntime, on
NaN, infinities, zeros, subnormals, every rounding tie of the grid (every minifloat value and midpoint)
and its float32 neighbours and random values, or on every float32 input (check="exhaustive", per
tensor), and a weight's pair on the weight tensor itself. A blocked pair takes x of its own shape
only: the sample (one value per block and row) is laid out as inputs of that shape, run one by one,
every row reaching every block.
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


def _pair_parameters(graph, q, dq, rank: int | None, shape: list | None = None) -> dict:
    """The pair's parameters, checked to agree between Q and DQ: scale, zero point (its ONNX type),
    axis, the QONNX-shaped (broadcasting against x from the right) scale / zero point. `shape` is x's
    static shape where known (None for a symbolic dimension): a blocked pair needs its block axis."""
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
    if not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        raise _Refused("a scale that is not positive and finite: QONNX's grid is not defined for it")
    if _attr(q, "block_size", 0) or _attr(dq, "block_size", 0):
        return _blocked_pair_parameters(q, dq, scale, zp, ztype, shape)
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


def _blocked_pair_parameters(q, dq, scale: np.ndarray, zp: np.ndarray, ztype: int, x_shape: list | None) -> dict:
    """A blocked pair (opset 21+: block_size B > 0 along `axis` a). ONNX's definition: x has shape
    (D_0, ..., D_a, ..., D_n-1), the scale (and zero point) (D_0, ..., S, ..., D_n-1) with S = ceil(D_a / B),
    and element i of axis a takes the parameters of block i // B; the final block holds D_a - (S - 1) B
    elements (fewer than B where B does not divide D_a). onnxruntime enforces both shapes.

    QONNX's parameters broadcast against x from the right, which a blocked scale does not (S against
    D_a). The conversion splits the block axis instead. In row-major order, x (padded to S B along a,
    see _emit_blocked) is the same elements as (M, B, P) with M = D_0 ... D_a-1 S (the blocks, one per
    row) and P = D_a+1 ... D_n-1 (the axes after a; left out where P = 1), and the scale is the same
    values as (M, 1, P): element (m, j, r) of the one is element j of block m at trailing position r,
    and (m, 0, r) of the other is that block's scale. So Quant on x reshaped to (M, B, P) with the
    scale reshaped to (M, 1, P) broadcasts exactly. The reshape's target is static: M and P are the
    scale's own dimensions, and D_a must be known (shape inference or value_info), else the pair is
    refused. Merging the leading axes (rather than splitting a in place) leaves the scale varying
    along one axis when a is the last axis (int4 / float8 activations in LLMs): a per-channel QONNX
    node whose channels are the blocks, the form QONNX tools and --to onnx's per-axis Q/DQ take.
    The parameters keep the blocks' size (not expanded B times to x's shape, as a weight's are): they
    are the per-channel parameters of the per-axis path, so its grid, fix-ups and sample are reused
    unchanged on the reshaped tensor."""
    block, block_dq = _attr(q, "block_size", 0), _attr(dq, "block_size", 0)
    axis_q, axis_dq = _attr(q, "axis", 1), _attr(dq, "axis", 1)
    if block != block_dq or axis_q != axis_dq:
        raise _Refused(f"QuantizeLinear's block_size {block} / axis {axis_q} and DequantizeLinear's {block_dq} / "
                       f"{axis_dq} differ: not one quantizer")
    if block < 0:
        raise _Refused(f"block_size {block}: not a block size")
    rank = scale.ndim
    if not -rank <= axis_q < rank:
        raise _Refused(f"axis {axis_q} is outside the blocked scale's rank {rank}")
    axis = axis_q % rank
    if x_shape is None or len(x_shape) != rank or x_shape[axis] is None:
        raise _Refused(f"a blocked pair whose input's shape is unknown along its block axis {axis} (no static "
                       f"dimension from shape inference or value_info): QONNX's scale broadcasts from the right, so "
                       f"the blocks are split off by a Reshape whose target needs that length")
    length, blocks = int(x_shape[axis]), scale.shape[axis]
    if -(-length // block) != blocks:
        raise _Refused(f"a blocked scale with {blocks} blocks along axis {axis}, where ceil({length} / {block}) "
                       f"blocks cover the input")
    mismatched = [i for i, d in enumerate(x_shape) if i != axis and d is not None and d != scale.shape[i]]
    if mismatched:
        raise _Refused(f"the input's shape {x_shape} and the blocked scale's {scale.shape} differ on axes {mismatched}")
    before, after = scale.shape[:axis], scale.shape[axis + 1:]
    rows, trailing = int(np.prod(before, dtype=np.int64)) * blocks, int(np.prod(after, dtype=np.int64))
    tail = (trailing,) if trailing > 1 else ()
    return {"scale": scale, "zp": zp, "ztype": ztype, "axis": "blocked", "qshape": (rows, 1) + tail,
            "saturate": _attr(q, "saturate", 1),
            "blocks": {"axis": axis, "block_size": block, "length": length, "count": blocks,
                       "shape": before + (length,) + after,                # x's own (static) shape
                       "padded_shape": before + (blocks * block,) + after,  # the whole final block
                       "split_shape": (rows, block) + tail}}                # (M, B, P): a block per row


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
        p["zp_typed"] = np.zeros((p["scale"].size,) if p["axis"] is not None else (), _numpy_type(ztype))
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


def _emit_blocked(graph, q, dq, b: _Builder, p: dict, fixups: bool) -> tuple[str, dict, list]:
    """A blocked pair (_blocked_pair_parameters) into b: the per-axis QONNX node and its fix-ups (_emit)
    on x reshaped to one block per row, between two Reshapes:

        x (D_0, .., D_a, .., D_n-1)
          -> Pad (only where B does not divide D_a: zeros after the end of axis a, up to S B)
          -> Reshape (M, B, P)            M = D_0 .. D_a-1 S blocks, P = D_a+1 .. D_n-1 (absent where 1)
          -> Quant / FloatQuant with scale, zeropt (M, 1, P), and the fix-ups
          -> Reshape (D_0, .., S B, .., D_n-1)
          -> Slice [0, D_a) along a (only after a Pad) -> y

    Exact: Pad, Reshape and Slice move float32 values without arithmetic (bits kept, NaN payloads
    included), and Quant, FloatQuant and the fix-ups are elementwise, so element i of axis a meets the
    parameters of block i // B, as in the pair, and the padded elements (whose values do not matter)
    are dropped before anything reads them. The partial final block is the full block's computation
    restricted to the elements it has."""
    blk = p["blocks"]
    axis, rank = blk["axis"], len(blk["shape"])
    padding = blk["padded_shape"][axis] - blk["length"]
    x = q.input[0]
    if padding:
        pads = np.zeros(2 * rank, np.int64)
        pads[rank + axis] = padding  # ONNX's pads: all the begins, then all the ends
        x = b.op("Pad", [x, b.typed_const(pads, "block_padding"), b.const(0.0, "padding_value")], "padded",
                 mode="constant")
    split = b.op("Reshape", [x, b.typed_const(np.asarray(blk["split_shape"], np.int64), "block_shape")], "blocks")
    quantized = b.name("quantized_blocks")
    form, reference, fixed = _emit(graph, SimpleNamespace(input=[split]), SimpleNamespace(output=[quantized]), b, p,
                                   fixups)
    unsplit = b.op("Reshape", [quantized, b.typed_const(np.asarray(blk["padded_shape"], np.int64), "padded_shape")],
                   "unblocked", output=None if padding else dq.output[0])
    if padding:
        b.op("Slice", [unsplit, b.typed_const(np.array([0], np.int64), "slice_start"),
                       b.typed_const(np.array([blk["length"]], np.int64), "slice_end"),
                       b.typed_const(np.array([axis], np.int64), "slice_axis")], "unpadded", output=dq.output[0])
    blocks = blk["count"]
    layout = f"{blocks} block{'s' if blocks > 1 else ''} of {blk['block_size']} along axis {axis}"
    if padding:
        layout += f", the last of {blk['length'] - (blocks - 1) * blk['block_size']}"
    form = f"Reshape to {blk['split_shape']} ({layout}), {form}, Reshape"
    return (f"Pad, {form}, Slice" if padding else form), reference, fixed


def _emit_pair(graph, q, dq, b: _Builder, p: dict, fixups: bool) -> tuple[str, dict, list]:
    """The pair's QONNX nodes into b: blocked (_emit_blocked) or per tensor / per axis (_emit)."""
    return (_emit_blocked if p.get("blocks") else _emit)(graph, q, dq, b, p, fixups)


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


def _blocked_inputs(sample: np.ndarray, blk: dict) -> np.ndarray:
    """The check's sample for a blocked pair, rows (N,) + the QONNX shape (M, 1, P), as T inputs of x's
    own shape: (T,) + (D_0, .., D_a, .., D_n-1). Each row is one value per block (per channel), and a
    block has B element slots per input (the final block: D_a - (S - 1) B, the fewest): input t puts
    row (t k + j) mod N in slot j of every block, k = the final block's slots, so over T = ceil(N / k)
    inputs every row reaches every block, the final one included, as every row reaches every channel
    in the per-axis check."""
    axis, block, length = blk["axis"], blk["block_size"], blk["length"]
    per_input = min(block, length - (blk["count"] - 1) * block)
    n = sample.shape[0]
    rows = (np.arange(-(-n // per_input))[:, None] * per_input + np.arange(block)) % n   # (T, B): each slot's row
    slotted = np.squeeze(sample[rows], axis=3)      # (T, B, M, P)
    slotted = np.moveaxis(slotted, 1, 2)            # (T, M, B, P): x reshaped, padded, for each input
    padded = slotted.reshape((len(rows),) + tuple(blk["padded_shape"]))
    return np.ascontiguousarray(np.take(padded, np.arange(length), axis=1 + axis), np.float32)


class _OneInputAtATime:
    """A session whose input has one static shape (a blocked pair's), fed a stack (T,) + that shape:
    T runs, their outputs stacked, so _compare takes it as it takes a batched session."""

    def __init__(self, session):
        self.session = session

    def run(self, outputs, feeds: dict) -> list:
        (name, stack), = feeds.items()
        return [np.stack([self.session.run(outputs, {name: x})[0] for x in stack])]


def _check_pair(graph, q, dq, b: _Builder, p: dict, opset: int, how: str, rng) -> CheckOutcome:
    """The emitted nodes (onnxruntime with polyquant's custom-op library, qonnx's numerics) against the
    original pair (plain onnxruntime, the settings that keep its bits) on the check's inputs."""
    import onnxruntime as ort
    from ..qonnx.execute import reference_session_options
    x_name = q.input[0]
    per_tensor = p["axis"] is None
    blocked = p.get("blocks")
    exhaustive = how == "exhaustive" and per_tensor
    x = None if exhaustive else _grid_sample(p, rng)
    if blocked:  # the sample laid out as inputs of x's own shape: the blocked pair takes no other
        x = _blocked_inputs(x, blocked)
    # The original pair, axis counted from the end (the check's x has the rank of the QONNX shape + 1);
    # a blocked pair as it is (its x has its own shape).
    pair = []
    for original_node in [q] + ([p["clip_node"]] if p.get("clip_node") is not None else []) + [dq]:
        pair.append(onnx.NodeProto())
        pair[-1].CopyFrom(original_node)
    for n in pair:
        if n.op_type == "Clip":
            continue
        if p["axis"] is not None and not blocked:
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
        if blocked:  # a stack of inputs of x's static shape, run one at a time
            return _OneInputAtATime(with_library), (lambda v: _OneInputAtATime(plain).run(None, {x_name: v})[0])
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
        emitted, original = sessions(x.ndim - 1 if blocked else x.ndim)
        outcome = _compare(emitted, node, x, original, p["scale"])
    weight = _initializer(graph, x_name)
    if weight is not None and weight.dtype == np.float32:
        emitted, original = sessions(weight.ndim)
        on_weight = _compare(emitted, node, weight[None] if blocked else weight, original, p["scale"])
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
    except Exception:  # noqa: BLE001 - an unknown domain may stop inference: shapes as the model declares them
        infos = list(graph.value_info) + list(graph.input)
    # Static dimensions (None where symbolic or unknown): the ranks, and a blocked pair's block axis.
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
              for v in infos if v.type.tensor_type.HasField("shape")}
    types = {v.name: v.type.tensor_type.elem_type for v in infos}
    for t in graph.initializer:
        shapes[t.name], types[t.name] = list(t.dims), t.data_type
    ranks = {name: len(dims) for name, dims in shapes.items()}
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
                p = _pair_parameters(graph, q, dq, ranks.get(q.input[0]), shapes.get(q.input[0]))
                p["clip_node"], p["clip"] = clip_node, clip
                if p["ztype"] in INTEGER_TYPES:
                    p["grid"] = _integer_grid(p, clip)
                elif clip_node is not None:
                    raise _Refused("a Clip between a float8 QuantizeLinear and its DequantizeLinear: not converted")
                form, _, _ = _emit_pair(graph, q, dq, b, p, fixups=True)
                report = NodeReport(label, "QuantizeLinear/DequantizeLinear", form, "exact")
                if check != "none":
                    outcome = _check_pair(graph, q, dq, b, p, opset, check, rng)
                    _record_check(report, outcome, allow_inexact, "the Q/DQ pair")
                    if not outcome.differing and allow_inexact:
                        # The bare QONNX node (no fix-ups): what FINN-style flows expect, INEXACT with its counts.
                        bare = _Builder(graph, (dq.name or dq.output[0]) + "_bare", used)
                        bare_form, _, _ = _emit_pair(graph, q, dq, bare, p, fixups=False)
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
