"""`polyquant convert --to onnx` for AMD Quark: ExtendedQuantizeLinear / ExtendedDequantizeLinear
(domains com.amd.quark and com.vai.quantize) onto standard ONNX: QuantizeLinear / DequantizeLinear where
those hold the type, elementwise standard ops computing Quark's kernel where they do not.

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
  ExtendedQuantizeLinear, int32 / uint32        Quark's kernel in standard ops (QuantizeLinear has no 32-bit
                                               output): Round(x / scale) cast to int64, plus the zero point,
                                               Clip to the type, Cast; Quark's edge value where |x / scale|
                                               >= 2^63 or NaN.

float16 and bfloat16 are no quantized type of ONNX's Q/DQ, so those nodes become Quark's kernel itself in
standard ops. onnxruntime's CPU kernels write NaNs differently in their vector blocks and in their scalar
tails (the last size mod 8 / 16 elements of a tensor or of a thread's share of it, see TAIL_SIZE); the
forms below give Quark's bits in both:

  ExtendedQuantizeLinear, float16 (opset 26)    BitCast(Where(IsNaN(x), nan_bits, bits of Cast(Clip(x,
      -65504, 65504), float16)), float16) with nan_bits = sign | 0x7E00 | (BitCast(x, uint32) >> 13) & 0x3FF.
      Quark ignores scale and zero point and casts x clamped to +-65504 with onnxruntime's own Cast, so
      values beyond +-65504 and +-inf give +-65504 where a bare Cast rounds to +-inf from 65520 on. A
      NaN keeps its sign and its payload's top bits at every position in polyquant.quark, the reference;
      onnxruntime's Cast (and so Quark's own build) writes them in its 8-wide blocks only, 0x7E00 / 0xFE00
      in its tails. BitCast (opset 26) reads x's bits and the NaN is computed from them; the selection
      runs on uint32 codes (Where on float16 canonicalises NaN in its tail too; there is no uint16 Where).
      Below opset 26, Cast(Where(IsNaN(x), x, Clip(x, -65504, 65504)), float16) (Clip-11): exact but
      for those tail NaNs, which the check finds; refused (naming BitCast) or INEXACT under allow_inexact.
  ExtendedDequantizeLinear, float16             Sum(Cast(x, float), -0.0): Quark ignores scale and zero
      point; its float32(x) quiets a signalling NaN (polyquant.quark), which onnxruntime's Cast does in
      its 16-wide blocks only. Adding -0.0 quiets it keeping the payload and is the identity elsewhere.
  ExtendedQuantizeLinear, bfloat16 (opset 13)   Cast(Sum(x / scale, zp), bfloat16), 0x7FC1 where NaN.
      Quark rounds v = x / scale + zp (float32) to nearest even, overflow to +-inf (no saturation), and
      writes every NaN as 0x7FC1. onnxruntime's Cast rounds the same way but writes 0x7FC0 / 0xFFC0 (the
      NaN's sign kept), and its CPU Where has no bfloat16 kernel: the fix-up gathers from the rounded
      values flattened with 0x7FC1 appended, at each element's own position or at -1 where v is NaN.
  ExtendedDequantizeLinear, bfloat16 (opset 13) Mul(Sum(Where(IsNaN(w), +NaN, w), -zp), scale), w = Cast(x,
      float). Quark computes (x - zp) * scale in float32 reading every NaN of x and the zero point as
      +0x7FC00000; onnxruntime's Cast widens by a shift (NaN sign and payload kept), hence the Where; the
      zero point's NaN is replaced at conversion time. x - zp is written x + (-zp) (the same in IEEE
      arithmetic, signed zeros included).
  The zero point is added with Sum, not Add / Sub: onnxruntime's NoopElimination (a basic-level
  optimization, on by default) drops Add(v, 0) and Sub(v, -0), leaving -0 where Quark's -0 + 0 gives
  +0; it does not touch Sum, so these forms are exact under onnxruntime's default session options too.

Each converted node is checked: the standard nodes in plain onnxruntime, at the model's own opset,
against the Quark node in onnxruntime with polyquant's custom-op library (bit-exact with Quark's CPU
kernel), bit for bit, on every value of an 8 / 16-bit input type (float16 and bfloat16 DQ included:
all 65,536 codes), and for Q on the grid's ties and their neighbours, values around +-2^63 * scale,
NaN, infinities, zeros, subnormals and random values; for float16 / bfloat16 Q on the x that put
Quark's value on every rounding boundary of the type and on its values (with 1 and 2 float32 ulps
either side), the overflow edges, NaNs of both signs with assorted payloads, +-inf, +-0, subnormals,
random bit patterns and values (`check="exhaustive"`: all 2^32 float32 inputs, per tensor, through
polyquant diff's sweep); then the sample's NaNs, infinities, zeros and subnormals and a spread of the
rest again in tensors of at most TAIL_SIZE elements, all scalar tail. A node whose check finds a
difference is refused with the counts.
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
FLOAT16_MAX = np.float32(65504.0)   # Quark clamps x to +-65504 before its float16 cast
BITCAST_OPSET = 26                  # BitCast: float16 Q's NaN payloads (see _convert_float)
QUARK_BFLOAT16_NAN = 0x7FC1         # Quark's bfloat16 Q output for every NaN (the NaN of onnxruntime's
                                    # header-only BFloat16(float), which Quark's kernel uses)
QUARK_DQ_NAN = 0x7FC00000           # Quark's bfloat16 DQ reads every NaN of x and the zero point as this


def _numpy(ztype: int):
    return INTEGER.get(ztype) or FLOAT16.get(ztype)


def _min_opset(ztype: int, per_axis: bool, target: str) -> tuple[int, str]:
    """The standard opset the node's form needs, and the op that needs it (for the refusal)."""
    # QuantizeLinear / DequantizeLinear: int8 / uint8 at 10, per axis at 13, 16-bit types and int32 Q at 21
    if ztype in (TensorProto.INT8, TensorProto.UINT8):
        return (13 if per_axis else 10), target
    if ztype == TensorProto.BFLOAT16:  # Cast to / from bfloat16 (Cast-13); Range (11) for the NaN fix-up
        return 13, "Cast to bfloat16" if target == "QuantizeLinear" else "Cast from bfloat16"
    if ztype == TensorProto.FLOAT16:  # Clip with its bounds as inputs (Clip-11; exact from BITCAST_OPSET);
        return (11, "Clip") if target == "QuantizeLinear" else (8, "Sum")  # Sum-8 broadcasts
    return 21, target


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
    # bfloat16 x (a DQ's input) is classified as the float32 it widens to exactly (numpy's float
    # functions such as spacing do not take it)
    kx = fx.astype(np.float32) if fx.dtype == ml_dtypes.bfloat16 else fx
    if kx.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # signalling NaNs widen with the invalid flag
            edge = np.abs(kx.astype(np.float64)) >= float(ml_dtypes.finfo(fx.dtype).max)
    else:
        edge = (fx == np.iinfo(fx.dtype).min) | (fx == np.iinfo(fx.dtype).max)
    masks = _classify(kx, fg, fw, fm, np.unique(fg[edge]).astype(np.float64), np.unique(fw[edge]).astype(np.float64),
                      steps)
    outcome.differing = int(fm.sum())
    outcome.kinds = {k: int(m.sum()) for k, m in masks.items() if m.any()}
    i = int(np.flatnonzero(fm)[0])
    outcome.example = f"x = {_shown(fx[i])}: {_shown(fg[i])} instead of {_shown(fw[i])}"
    return outcome


def _shown(v) -> str:
    """A value for a report, with its bits where it is a float (NaNs differ by their bits alone)."""
    v = np.asarray(v)
    if v.dtype.kind != "f" and v.dtype != ml_dtypes.bfloat16:
        return repr(v.item())
    with np.errstate(invalid="ignore"):
        value = float(v.astype(np.float64))
    return f"{value!r} (0x{int(v.view({2: np.uint16, 4: np.uint32}[v.dtype.itemsize])):0{2 * v.dtype.itemsize}X})"


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


def _run(session, x_name: str, x: np.ndarray, out_type: int) -> np.ndarray:
    """session's output on x, read bit for bit from its bytes. onnxruntime's Python API has no numpy
    type for bfloat16, so tensors go in and out as OrtValues over their raw 16-bit codes."""
    import ctypes
    import onnxruntime as ort
    x = np.ascontiguousarray(x)
    if x.dtype == ml_dtypes.bfloat16:
        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), TensorProto.BFLOAT16)
    else:
        value = ort.OrtValue.ortvalue_from_numpy(x)
    (y,) = session.run_with_ort_values([session.get_outputs()[0].name], {x_name: value})
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(out_type))
    raw = ctypes.string_at(y.data_ptr(), y.tensor_size_in_bytes())
    return np.frombuffer(raw, dtype).reshape(y.shape()).copy()


# onnxruntime's CPU kernels convert whole vector blocks, then the last (size mod 8 or 16) elements of a
# tensor, or of each thread's share of a large one, one by one, and some treat NaN there differently:
# Cast float32 -> float16 keeps the NaN's top payload bits in its 8-wide blocks but writes the canonical
# 0x7E00 / 0xFE00 in its tail, and so does Where on float16; Cast float16 -> float32 quiets a signalling
# NaN in its 16-wide blocks and leaves it signalling in its tail. A check on one large tensor sees the
# blocks only, so part of it also runs in tensors this small, every element a tail element.
TAIL_SIZE = 7


def _tail_rows(x: np.ndarray, per_kind: int = 512) -> np.ndarray:
    """The rows of a check sample x (shape (N,) + parameter shape) to run again as tails: up to `per_kind`
    rows with a NaN, with an infinity, with a zero or subnormal (float samples: of float32, and of x's own
    type), and `per_kind` spread over all rows; each kind's rows spread over the sample."""
    flat = x.reshape(x.shape[0], -1)
    kinds = [np.ones(x.shape[0], bool)]
    if flat.dtype.kind == "f" or flat.dtype == ml_dtypes.bfloat16:
        with np.errstate(invalid="ignore", over="ignore"):
            v = flat.astype(np.float32)
            smallest_normal = max(float(np.finfo(np.float32).tiny), float(ml_dtypes.finfo(flat.dtype).smallest_normal))
            kinds += [np.isnan(v).any(axis=1), np.isinf(v).any(axis=1), (np.abs(v) < smallest_normal).any(axis=1)]
    chosen = []
    for rows in (np.flatnonzero(k) for k in kinds):
        chosen.append(rows[np.linspace(0, rows.size - 1, min(per_kind, rows.size)).astype(np.int64)] if rows.size
                      else rows)
    return x[np.unique(np.concatenate(chosen))]


def _check(node, b: _Builder, graph, x: np.ndarray, x_type: int, out_type: int, opset: int, how: str,
           steps, axis: int | None = None, tails: np.ndarray | None = None) -> CheckOutcome:
    """The emitted standard nodes (plain onnxruntime, at the model's own standard opset) against the
    Quark node (onnxruntime with polyquant's library: bit-exact with Quark's CPU kernel) on x (None:
    every float32 x), then on `tails` (rows of a sample) in tensors of at most TAIL_SIZE elements."""
    import onnxruntime as ort
    from ..qonnx.execute import reference_session_options
    x_name, out = node.input[0], node.output[0]
    quark_node, emitted_nodes = _with_axis([node], axis)[0], _with_axis(b.nodes, axis)
    names = {i for i in node.input[1:] if i}
    quark_inits = [t for t in graph.initializer if t.name in names]
    rank = x.ndim if x is not None else 1

    def sessions(r):
        original = _model([quark_node], quark_inits, x_name, x_type, out, out_type, max(opset, 21), r, quark=True)
        emitted = _model(emitted_nodes, list(b.inits) + quark_inits, x_name, x_type, out, out_type, opset, r,
                         quark=False)
        return (ort.InferenceSession(emitted.SerializeToString(), exact_session_options(),
                                     providers=["CPUExecutionProvider"]),
                ort.InferenceSession(original.SerializeToString(), reference_session_options(),
                                     providers=["CPUExecutionProvider"]))

    if x is None:  # exhaustive float32 Q, per tensor: polyquant diff's sweep
        from .diff import sweep
        emitted, original = sessions(1)
        r = sweep("the standard nodes", "Quark's kernel", [(({}, lambda v: _run(emitted, x_name, v, out_type)),
                                                           ({}, lambda v: _run(original, x_name, v, out_type)))],
                  desc=f"check {node.name or out}")
        outcome = CheckOutcome(r.inputs, r.differing, dict(r.kinds))
        if r.differing:
            kind, e = next(iter(r.examples.items()))
            outcome.example = f"x = {e.x!r} ({e.x_bits}, {kind}): {e.a!r} instead of {e.b!r}"
    else:
        emitted, original = sessions(rank)
        outcome = _outcome(x, _run(emitted, x_name, x, out_type), _run(original, x_name, x, out_type), steps)
    if tails is not None:
        emitted, original = sessions(tails.ndim)
        rows = max(1, TAIL_SIZE // int(np.prod(tails.shape[1:], dtype=np.int64)))
        for first in range(0, tails.shape[0], rows):
            part = np.ascontiguousarray(tails[first:first + rows])
            outcome.add(_outcome(part, _run(emitted, x_name, part, out_type), _run(original, x_name, part, out_type),
                                 steps))
    return outcome


def _check_quantize(node, b: _Builder, graph, sample, ztype: int, opset: int, how: str, steps,
                    axis: int | None) -> CheckOutcome:
    """A Q node's check: every float32 x (how="exhaustive", per tensor), else the inputs sample() makes;
    the sample's specials and a spread of it as tails; a weight quantizer's own tensor."""
    xs = sample()
    if how == "exhaustive" and axis is None:
        return _check(node, b, graph, None, TensorProto.FLOAT, ztype, opset, how, steps, tails=_tail_rows(xs))
    outcome = _check(node, b, graph, xs, TensorProto.FLOAT, ztype, opset, how, steps, axis, _tail_rows(xs))
    weight = _initializer(graph, node.input[0])
    if weight is not None and weight.dtype == np.float32:
        on_weight = _check(node, b, graph, weight, TensorProto.FLOAT, ztype, opset, how, steps)
        outcome.add(on_weight)
        outcome.on_weight = f"its weight tensor: {on_weight.differing} of {on_weight.checked} differ"
    return outcome


def _as_float32(zp: np.ndarray) -> np.ndarray:
    """A float16 / bfloat16 zero point widened to float32 (exact; a signalling NaN raises numpy's invalid
    flag, which is no error here: Quark's NaN replaces every NaN zero point's result)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(zp).astype(np.float32)


def _float_ties(ztype: int) -> np.ndarray:
    """Every point where rounding float32 to `ztype` (float16, bfloat16) changes: the midpoint of each two
    neighbouring finite values (both signs; past the largest, the midpoint to the next power of two,
    where rounding overflows), and the values themselves, in float64 (all exact in float32)."""
    if ztype == TensorProto.BFLOAT16:
        codes = np.arange(0x7F80, dtype=np.uint32)  # the positive finite bfloat16 values, 0 to max
        values = (codes << 16).view(np.float32).astype(np.float64)
        mids = ((codes << 16) | 0x8000).view(np.float32).astype(np.float64)  # the discarded half-ulp bit set
    else:
        values = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)  # 0 to 65504
        mids = (values + np.append(values[1:], 65536.0)) / 2  # the last: 65520, float16's overflow edge
    points = np.concatenate([values, mids])
    return np.concatenate([points, -points])


def _float_q_sample(scale: np.ndarray, zp: np.ndarray, ztype: int, shape: tuple, rng) -> np.ndarray:
    """Check inputs for a float16 / bfloat16 Q, shaped (N,) + shape: the x whose Quark value v (x itself for
    float16; x / scale + zp for bfloat16) lies on each rounding tie of the type or on one of its values,
    with their float32 neighbours (1 and 2 ulp each way); NaNs of both signs (quiet, signalling, assorted
    payloads); +-inf, +-0, float32 subnormals and the extremes; random bit patterns (every exponent) and
    random values around the grid."""
    targets = _float_ties(ztype).reshape((-1,) + (1,) * len(shape))
    if ztype == TensorProto.BFLOAT16:  # x with x / scale + zp = v: (v - zp) * scale, nearest in float32
        sc = np.asarray(scale, np.float64).reshape(shape)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow, a NaN scale or zero point
            z = _as_float32(zp).astype(np.float64).reshape(shape)
            on = ((targets - z) * sc).astype(np.float32)
    else:  # Quark's float16 ignores scale and zero point: v = x
        on = targets.astype(np.float32)
    up, down = np.nextafter(on, np.float32(np.inf)), np.nextafter(on, np.float32(-np.inf))
    near = [on, up, down, np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))]
    special_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0xFFBFFFFF, 0x7FC00001,
                             0xFFC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC10000, 0xFFC10000, 0x7F808000, 0x7FE00000,
                             0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF,
                             0x807FFFFF, 0x00400000, 0x80400000, 0x00008000, 0x80008000, 0x00018000, 0x00010000,
                             0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0xFF7F8000], np.uint32)
    nan_payloads = rng.integers(1, 1 << 23, 64, dtype=np.uint32) | np.uint32(0x7F800000)
    nan_payloads[32:] |= np.uint32(0x80000000)
    patterns = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([special_bits, nan_payloads, patterns]).view(np.float32)
    span = float(np.max(np.abs(targets))) if ztype == TensorProto.FLOAT16 else 1e4
    randoms = (rng.standard_normal(4096) * span).astype(np.float32)
    flat = [a.reshape((-1,) + (1,) * len(shape)) for a in (bits, randoms)]
    parts = near + flat
    return np.ascontiguousarray(np.concatenate([np.broadcast_to(a, a.shape[:1] + shape) for a in parts]),
                                np.float32)


def _convert_float(node, b: _Builder, graph, target: str, ztype: int, scale: np.ndarray, zp: np.ndarray,
                   shape: tuple, check_axis: int | None, opset: int, check: str, rng,
                   guard: bool) -> tuple[str, CheckOutcome | None]:
    """A float16 / bfloat16 Quark node in standard ops (ONNX's Q/DQ have no such quantized type), each
    computing Quark's kernel (docs/quark.md) element for element. Returns (form, what its check found)."""
    type_name = TensorProto.DataType.Name(ztype).lower()
    per_axis = bool(shape)
    x = node.input[0]

    def shaped(value: np.ndarray, what: str) -> str:  # a float32 constant per channel, or a scalar
        value = np.asarray(value, np.float32)
        return b.const(value.reshape(shape) if per_axis else value.reshape(()), what)

    if ztype == TensorProto.FLOAT16 and target == "QuantizeLinear":
        # Quark: onnxruntime's Cast of x clamped to +-65504, scale and zero point ignored; values beyond
        # +-65504 (up to +-inf) become +-65504 instead of rounding to +-inf. A NaN keeps its sign and its
        # payload's top 10 bits, quiet bit set (polyquant.quark: sign | 0x7E00 | mantissa >> 13), which
        # onnxruntime's Cast writes only inside whole 8-element blocks of each thread's share of the
        # tensor, and 0x7E00 / 0xFE00 in the rest (TAIL_SIZE). From opset 26 BitCast reads x's bits and
        # that NaN is computed from them; below, the Cast's own NaN stays (the check counts the difference).
        clipped = b.op("Clip", [x, b.const(-FLOAT16_MAX, "float16_lowest"), b.const(FLOAT16_MAX, "float16_max")],
                       "clamped") if guard else x
        if guard and opset >= BITCAST_OPSET:
            halves = b.op("Cast", [clipped], "clamped_float16", to=TensorProto.FLOAT16)
            bits = b.op("BitCast", [x], "x_bits", to=TensorProto.UINT32)

            def field(shift: int, mask: int, what: str) -> str:  # (bits >> shift) & mask
                shifted = b.op("BitShift", [bits, b.typed_const(np.uint32(shift), f"shift_{shift}")], f"{what}_shifted",
                               direction="RIGHT")
                return b.op("BitwiseAnd", [shifted, b.typed_const(np.uint32(mask), f"{what}_mask")], what)

            nan_bits = b.op("BitwiseOr", [b.op("BitwiseOr", [field(16, 0x8000, "sign"), field(13, 0x3FF, "payload")],
                                               "sign_payload"), b.typed_const(np.uint32(0x7E00), "quiet_nan")],
                            "nan_bits")
            # The selection runs on the codes widened to uint32: onnxruntime's Where on float16 rewrites a
            # NaN in its tail as 0x7E00 too, and it has no uint16 kernel.
            halves_bits = b.op("Cast", [b.op("BitCast", [halves], "clamped_float16_bits", to=TensorProto.UINT16)],
                               "clamped_float16_u32", to=TensorProto.UINT32)
            out_bits = b.op("Where", [b.op("IsNaN", [x], "is_nan"), nan_bits, halves_bits], "out_bits")
            b.op("BitCast", [b.op("Cast", [out_bits], "out_u16", to=TensorProto.UINT16)], "out",
                 output=node.output[0], to=TensorProto.FLOAT16)
            form = "BitCast(Where(IsNaN(x), Quark's NaN from BitCast(x), BitCast(Cast(Clip(x, -65504, 65504), float16))))"
        else:
            # ONNX leaves Clip's result on NaN open: the NaN x is selected past it unchanged.
            kept = b.op("Where", [b.op("IsNaN", [x], "is_nan"), x, clipped], "clamped_nan_kept") if guard else x
            b.op("Cast", [kept], "out", output=node.output[0], to=TensorProto.FLOAT16)
            form = "Cast(Where(IsNaN(x), x, Clip(x, -65504, 65504)), float16)"
    elif ztype == TensorProto.FLOAT16:
        # Quark: float32(x), scale and zero point ignored, a signalling NaN quieted (polyquant.quark; Quark's
        # own build calls onnxruntime's Cast, which quiets it only in whole 16-element blocks, docs/quark.md).
        # onnxruntime's Cast widens exactly; Sum(w, -0.0) then quiets a signalling NaN keeping its payload,
        # and is the identity everywhere else (w + -0 = w, +0 + -0 = +0).
        wide = b.op("Cast", [x], "x_f32", to=TensorProto.FLOAT)
        if guard:
            b.op("Sum", [wide, b.const(np.float32(-0.0), "minus_zero")], "out", output=node.output[0])
        else:
            b.op("Identity", [wide], "out", output=node.output[0])
        form = "Sum(Cast(x, float), -0.0)"
    elif target == "QuantizeLinear":
        # Quark: v = x / scale + zp in float32, then bfloat16(v) rounded to nearest even, overflow to
        # +-inf, every NaN 0x7FC1. The zero point is added even when it is 0 (-0 + 0 = +0), by Sum rather
        # than Add: onnxruntime's NoopElimination (on in its default options) drops Add(q, 0), leaving -0;
        # it leaves Sum. onnxruntime's Cast rounds as Quark does but writes NaN as 0x7FC0 / 0xFFC0 (the
        # NaN's sign kept), and its CPU Where has no bfloat16 kernel, so the fix-up selects by Gather: the
        # rounded values flattened, 0x7FC1 appended as the last entry, gathered at each element's own
        # position, or at -1 (the appended NaN) where v is NaN.
        v = b.op("Sum", [b.op("Div", [x, shaped(scale, "scale_shaped")], "ratio"),
                         shaped(_as_float32(zp), "zero_point_f32")], "value")
        if not guard:
            b.op("Cast", [v], "out", output=node.output[0], to=TensorProto.BFLOAT16)
        else:
            rounded = b.op("Cast", [v], "rounded", to=TensorProto.BFLOAT16)
            nan = np.array([QUARK_BFLOAT16_NAN], np.uint16).view(ml_dtypes.bfloat16)
            flat = b.op("Reshape", [rounded, b.typed_const(np.array([-1], np.int64), "flat_shape")], "rounded_flat")
            table = b.op("Concat", [flat, b.typed_const(nan, "quark_nan")], "with_quark_nan", axis=0)
            count = b.op("Size", [v], "count")
            positions = b.op("Reshape", [b.op("Range", [b.typed_const(np.int64(0), "first"), count,
                                                        b.typed_const(np.int64(1), "step")], "positions_flat"),
                                         b.op("Shape", [v], "value_shape")], "positions")
            index = b.op("Where", [b.op("IsNaN", [v], "is_nan"), b.typed_const(np.int64(-1), "nan_index"),
                                   positions], "index")
            b.op("Gather", [table, index], "out", output=node.output[0], axis=0)
        form = "Cast(Sum(x / scale, zp), bfloat16), 0x7FC1 where NaN by Gather"
    else:
        # Quark: (float32(x) - float32(zp)) * scale in float32, every NaN of x or zp read as +0x7FC00000.
        # onnxruntime's Cast widens bfloat16 by a shift, keeping the NaN's sign and payload, so NaN x is
        # replaced by Quark's NaN (Where on float32); the zero point is a constant, replaced here.
        # The difference is x + (-zp) by Sum (IEEE defines x - zp so, signed zeros included): onnxruntime's
        # NoopElimination drops Sub(x, -0) and Add(x, 0), which keep -0 where Quark's arithmetic gives +0;
        # it leaves Sum. A NaN zero point stays Quark's +NaN (not negated: the sum returns its bits).
        quark_nan = np.array(QUARK_DQ_NAN, np.uint32).view(np.float32)
        z = _as_float32(zp)
        minus_z = np.where(np.isnan(z), quark_nan, -z).astype(np.float32)
        wide = b.op("Cast", [x], "x_f32", to=TensorProto.FLOAT)
        if guard:
            wide = b.op("Where", [b.op("IsNaN", [wide], "is_nan"), b.const(quark_nan, "quark_nan"), wide], "x_quark_nan")
        difference = b.op("Sum", [wide, shaped(minus_z, "minus_zero_point_f32")], "difference")
        b.op("Mul", [difference, shaped(scale, "scale_shaped")], "out", output=node.output[0])
        form = "Mul(Sum(Where(IsNaN(Cast(x, float)), +NaN, Cast(x, float)), -zp), scale)"
    form += f" ({type_name}{', per axis' if per_axis else ''})"
    if check == "none":
        return form, None
    if target == "QuantizeLinear":
        steps = [float(v) for v in np.unique(scale) if v > 0] if ztype == TensorProto.BFLOAT16 else []
        outcome = _check_quantize(node, b, graph, lambda: _float_q_sample(scale, zp, ztype, shape, rng), ztype, opset,
                                  check, steps, check_axis)
        if set(outcome.kinds) == {"nan"} and ztype == TensorProto.FLOAT16 and opset < BITCAST_OPSET:
            outcome.example += (f"; onnxruntime's Cast keeps a NaN's payload only inside whole 8-element blocks, so "
                                f"float16 Q is exact from opset {BITCAST_OPSET} (BitCast; the model imports {opset})")
        return form, outcome
    xs, _ = _dq_sample(ztype, shape, rng)  # every 16-bit code
    outcome = _check(node, b, graph, xs, ztype, TensorProto.FLOAT, opset, check, [float(v) for v in np.unique(scale)],
                     check_axis, _tail_rows(xs))
    return form + f", every {type_name} input", outcome


def convert_quark_node(graph, node, b: _Builder, opset: int, ranks: dict, check: str, rng,
                       guard: bool = True, types: dict | None = None) -> tuple[str, CheckOutcome | None]:
    """Emits the standard form of one Quark node into b; returns (form, what its check found). guard=False
    leaves out the fix-ups for where onnxruntime's standard ops differ from Quark's kernel (the int64
    cast's edges, float16's clamp, bfloat16's NaNs), so that tests can see the check find them. types:
    element types known by name (x's is checked against what Quark's kernel takes)."""
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
    if scale.dtype != np.float32:
        raise _Refused(f"scale {node.input[1]!r} is {scale.dtype}: Quark's kernel takes a float32 scale only")
    x_type = (types or {}).get(node.input[0])
    if target == "QuantizeLinear" and x_type not in (None, TensorProto.FLOAT):
        raise _Refused(f"x is {TensorProto.DataType.Name(x_type).lower()}: Quark's kernel quantizes float32 x only")
    if target == "DequantizeLinear" and x_type not in (None, ztype):
        raise _Refused(f"x is {TensorProto.DataType.Name(x_type).lower()}: Quark's kernel needs x of the zero point's "
                       f"type, {TensorProto.DataType.Name(ztype).lower()}")
    zp = numpy_helper.to_array(zp_tensor) if zp_tensor is not None else np.zeros((), np.uint8)
    # Quark's kernel reads an absent axis as 0 (docs/quark.md); the standard node gets it explicitly.
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
    per_axis = scale.size > 1
    rank = ranks.get(node.input[0])
    if per_axis and rank is None:
        raise _Refused("a per-axis node whose input rank is unknown")
    need, needing_op = _min_opset(ztype, per_axis, target)
    if opset < need:
        raise _Refused(f"the model imports the standard opset {opset}; {TensorProto.DataType.Name(ztype).lower()}"
                       f"{' per axis' if per_axis else ''} {node.op_type} becomes {needing_op}, which needs opset "
                       f"{need} (re-export at opset {need} or later)")
    shape = ((scale.size,) + (1,) * (rank - 1 - (axis % rank))) if per_axis else ()
    attrs = {"axis": axis} if per_axis else {}
    check_axis = -len(shape) if per_axis else None
    inputs = [node.input[1]] + ([zp_name] if zp_name else [])
    form = target
    if ztype in FLOAT16:
        return _convert_float(node, b, graph, target, ztype, scale, zp, shape, check_axis, opset, check, rng, guard)
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
        return form, _check(node, b, graph, xs, TensorProto.FLOAT, ztype, opset, check, steps, check_axis,
                            _tail_rows(xs))
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
        steps = [float(v) for v in np.unique(scale) if v > 0]
        return form, _check_quantize(node, b, graph, lambda: _q_sample(scale, zp, ztype, shape, rng), ztype, opset,
                                     check, steps, check_axis)
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
                     check_axis, _tail_rows(xs))
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
    types = {v.name: v.type.tensor_type.elem_type for v in infos if v.type.tensor_type.elem_type}
    for t in graph.initializer:
        ranks[t.name] = len(t.dims)
        types[t.name] = t.data_type
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
            form, outcome = convert_quark_node(graph, node, b, opset, ranks, check, rng, types=types)
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
