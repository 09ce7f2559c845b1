"""`polyquant convert` / `polyquant.convert`: QONNX models to standard ONNX (and standard Q/DQ to QONNX,
`--to qonnx`: convert_qonnx.py), exactly.

`--to onnx` replaces each QONNX quantizer by standard ONNX ops that compute qonnx's result bit for
bit, in qonnx's own operation order and float32 precision, so the model runs in any onnxruntime
without polyquant's custom-op library:

  IntQuant / Quant   y = x / scale + zeropt; clamped (qonnx clamps before it rounds; NaN passes:
                     Where(y > max, max, y), then Where(y < min, min, y)); rounded by the node's
                     rounding mode; (y - zeropt) * scale. 1-bit signed: Where(y >= 0, 1, -1).
  BipolarQuant       Where(x >= 0, 1, -1) * scale (x >= 0 as Or(x > 0, x == 0): false for NaN)
  Trunc v1           round(x / scale + zeropt) / 2^(in_bw - out_bw), rounded by the mode, (y - zeropt) * scale
  Trunc v2           round(x / scale + zeropt) / t with t = 2^round(log2(out_scale / scale)), clamped to
                     out_bitwidth's grid, rounded by the mode, (y - zeropt / t) * out_scale
  FloatQuant         float8 e4m3fn / e5m2 formats at opset 19+: float8 Q/DQ plus fix-ups; any other
                     format, mode or opset: qonnx's algorithm in elementwise ops, the exponent from Log
                     and threshold tables (_float_quant_decomposed)

Rounding modes: ROUND / HALF_EVEN -> Round (half to even); CEIL -> Ceil; FLOOR -> Floor;
UP -> Sign(y) * Ceil(Abs(y)); DOWN -> Where(y > 0, Floor(y), Ceil(y)) (numpy's fix); HALF_UP ->
Sign(y) * Floor(Abs(y) + 0.5); HALF_DOWN -> Sign(y) * Ceil(Abs(y) - 0.5), as qonnx computes them (the
three with a sign pass a NaN y through unchanged: the NaN numpy's product returns).
The clamp bounds are qonnx's min_int / max_int evaluated in the bit width's float32 arithmetic
(2^bitwidth - 1 rounds to float32 above 24 bits, as in qonnx).

QuantizeLinear / DequantizeLinear are not used by default: on every float32 grid they differ from
IntQuant (NaN becomes an integer, -0.0 becomes +0.0: `polyquant diff` counts 1,015,021,566 inputs for
an 8-bit grid), so they are never an exact replacement. allow_inexact=True writes them where they can
hold the node's grid, reporting the node INEXACT with the differing inputs counted by kind.

Every converted node whose parameters are initializers is checked: the standard subgraph, run in
onnxruntime alone, against polyquant.qonnx (bit-exact with qonnx) on NaN, infinities, zeros,
subnormals, every rounding tie of the grid and its float32 neighbours, and random values
(`check="sample"`), or on all 2^32 float32 inputs for per-tensor parameters (`check="exhaustive"`).
A node is refused, with the reason, where the decomposition would not be exact (a bit width, Trunc's
scales or FloatQuant's format that are not initializers; tensors that are not float32; a FloatQuant
format outside E 1..8, m 0..23); a model with a refused node is not written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .common import CommandError

QONNX_DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
ROUNDING_MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")
MIN_OPSET = 11  # Round


@dataclass
class NodeReport:
    name: str
    op: str
    form: str             # what it became
    status: str           # "exact", "inexact" (emitted under allow_inexact) or "refused"
    reason: str = ""
    checked: int | None = None   # inputs compared with the reference (None: by construction only)
    differing: int = 0           # of those, the inputs where the emitted form differs (an inexact node)
    kinds: dict = field(default_factory=dict)   # differing inputs by polyquant diff's kind
    example: str = ""            # one differing input: x, what the form gives, what the reference gives


@dataclass
class ConvertResult:
    model: Any
    nodes: list = field(default_factory=list)

    source: str = "QONNX"   # what the converted nodes were: "QONNX", "Q/DQ", "Quark"

    @property
    def refused(self) -> list:
        return [n for n in self.nodes if n.status == "refused"]

    @property
    def inexact(self) -> list:
        """Nodes emitted under allow_inexact although they differ from the original on some inputs."""
        return [n for n in self.nodes if n.status == "inexact"]

    def __str__(self) -> str:
        if not self.nodes:
            return f"no {self.source} node: nothing to convert"
        rows = [("node", "op", "becomes", "result")]
        for n in self.nodes:
            if n.status == "exact":
                result = f"exact, checked on {n.checked} inputs" if n.checked else "exact (by construction)"
            elif n.status == "inexact":
                result = f"INEXACT: {_differing_text(n.differing, n.checked, n.kinds, n.example)}"
            else:
                result = n.status
            rows.append((n.name, n.op, n.form, result + (f": {n.reason}" if n.reason else "")))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        done = sum(n.status == "exact" for n in self.nodes)
        lines.append(f"{done} of {len(self.nodes)} {self.source} nodes converted exactly"
                     + (f"; {len(self.inexact)} INEXACT" if self.inexact else "")
                     + (f"; {len(self.refused)} refused" if self.refused else ""))
        if self.inexact:
            lines.append(f"WARNING: {len(self.inexact)} node(s) emitted INEXACT (allow_inexact): the converted model "
                         f"differs from the original on the inputs counted above")
        return "\n".join(lines)


def _differing_text(differing: int, checked: int | None, kinds: dict, example: str) -> str:
    counts = ", ".join(f"{k} {c}" for k, c in kinds.items())
    return f"differs on {differing} of {checked} checked inputs ({counts})" + (f", e.g. {example}" if example else "")


class _Refused(Exception):
    pass


class _Builder:
    """Appends standard nodes and float32 constants for one converted node, named after it."""

    def __init__(self, graph, prefix: str, used: set):
        self.graph, self.prefix, self.used, self.nodes, self.inits = graph, prefix, used, [], []

    def name(self, what: str) -> str:
        base = f"{self.prefix}__pq_{what}"
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def const(self, value, what: str) -> str:
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def typed_const(self, value: np.ndarray, what: str) -> str:
        """A constant of value's own dtype (a zero point: int8, uint16, float8, ...)."""
        name = self.name(what)
        self.inits.append(_tensor(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list, what: str, output: str | None = None, **attrs) -> str:
        out = output or self.name(what)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(what + "_node"), **attrs))
        return out


def _tensor(value: np.ndarray, name: str):
    """An initializer of any numpy / ml_dtypes dtype (onnx's from_array takes the 4-bit and float8 types
    through onnx's own ml_dtypes names)."""
    return numpy_helper.from_array(value, name)


def _round(b: _Builder, y: str, mode: str) -> str:
    if mode in ("ROUND", "HALF_EVEN"):
        return b.op("Round", [y], "round")
    if mode == "CEIL":
        return b.op("Ceil", [y], "ceil")
    if mode == "FLOOR":
        return b.op("Floor", [y], "floor")
    if mode == "DOWN":
        # numpy's fix (toward zero) as Where(y > 0, Floor(y), Ceil(y)): Ceil is fix for y <= 0 and NaN, and
        # a -0.0 result (from -1 < y <= -0) then comes from Where's second input. onnxruntime 1.32's
        # Where returns +0.0 for a -0.0 taken from its first input, so Where(y < 0, Ceil, Floor) loses it.
        pos = b.op("Greater", [y, b.const(0.0, "zero")], "positive")
        return b.op("Where", [pos, b.op("Floor", [y], "floor"), b.op("Ceil", [y], "ceil")], "fix")
    sign, mag = b.op("Sign", [y], "sign"), b.op("Abs", [y], "abs")
    if mode == "UP":
        r = b.op("Mul", [sign, b.op("Ceil", [mag], "ceil")], "up")
    elif mode == "HALF_UP":
        r = b.op("Mul", [sign, b.op("Floor", [b.op("Add", [mag, b.const(0.5, "half")], "plus_half")], "floor")],
                 "half_up")
    else:
        r = b.op("Mul", [sign, b.op("Ceil", [b.op("Sub", [mag, b.const(0.5, "half")], "minus_half")], "ceil")],
                 "half_down")
    # A NaN y: numpy's sign(y) * f(|y|) multiplies two NaNs and x86 returns the first, sign(y), which is
    # y (already quiet: it came out of Div and Add); onnxruntime's Mul may take its operands the other
    # way round (|y|: the positive NaN). So a NaN y is passed through explicitly.
    return b.op("Where", [b.op("IsNaN", [y], "is_nan"), y, r], "rounded")


def _bipolar(b: _Builder, y: str) -> str:
    # y >= 0 as (y > 0) or (y == 0) (opset 11; GreaterOrEqual is 12): false for NaN, so NaN -> -1 as in
    # qonnx's np.where(y >= 0, 1, -1). (Not(y < 0) would send NaN to 1.)
    zero = b.const(0.0, "zero")
    ge = b.op("Or", [b.op("Greater", [y, zero], "positive"), b.op("Equal", [y, zero], "is_zero")], "nonnegative")
    return b.op("Where", [ge, b.const(1.0, "one"), b.const(-1.0, "minus_one")], "bipolar")


def int_bounds(bitwidth: np.ndarray, signed: bool, narrow: bool) -> tuple[np.ndarray, np.ndarray]:
    """qonnx's min_int / max_int in the bit width's own arithmetic (float32: 2^bw - 1 rounds above 24 bits)."""
    bw = np.asarray(bitwidth)
    two = bw.dtype.type(2)
    if signed:
        lo = -(two ** (bw - 1)) + (1 if narrow else 0)
        hi = two ** (bw - 1) - 1
    else:
        lo = bw * 0
        hi = two ** bw - (2 if narrow else 1)
    return np.asarray(lo, np.float32), np.asarray(hi, np.float32)


def _initializer(graph, name: str):
    for t in graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    return None


def _elem_type(graph, name: str, inferred: dict) -> int | None:
    for t in graph.initializer:
        if t.name == name:
            return t.data_type
    return inferred.get(name)


def _mode(attrs: dict, default: str) -> str:
    mode = attrs.get("rounding_mode", default)
    mode = (mode.decode() if isinstance(mode, bytes) else str(mode)).upper()
    if mode not in ROUNDING_MODES:
        raise _Refused(f"rounding_mode {mode!r} is not one of qonnx's {', '.join(ROUNDING_MODES)}")
    return mode


def _static(graph, node, i: int, what: str) -> np.ndarray:
    value = _initializer(graph, node.input[i]) if i < len(node.input) and node.input[i] else None
    if value is None:
        raise _Refused(f"{what} {node.input[i] if i < len(node.input) else '(absent)'!r} is not an initializer: it is "
                       f"needed at conversion time")
    return value


def _convert_trunc(graph, node, b: _Builder, attrs: dict, version: int) -> tuple[str, dict]:
    """qonnx's Trunc: v1 (the domain imported at version 1: x, scale, zeropt, in_bitwidth, out_bitwidth)
    y = round(x / scale + zeropt) / 2^(in_bw - out_bw), rounded by the mode, (y - zeropt) * scale;
    v2 (version 2: x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth; narrow, signed)
    t = 2^round(log2(out_scale / scale)), y = round(x / scale + zeropt) / t, clamped to out_bitwidth's
    grid, rounded by the mode, (y - zeropt / t) * out_scale. The power of two t is computed at
    conversion time by numpy, in the parameters' float32 arithmetic, as qonnx computes it."""
    mode = _mode(attrs, "FLOOR")
    x, s, z = node.input[0], node.input[1], node.input[2]
    y = b.op("Round", [b.op("Add", [b.op("Div", [x, s], "scaled"), z], "shifted")], "integer")
    if version < 2:
        in_bw, out_bw = _static(graph, node, 3, "in_bitwidth"), _static(graph, node, 4, "out_bitwidth")
        with np.errstate(over="ignore"):
            t = np.asarray(2.0 ** (in_bw - out_bw))
        y = _round(b, b.op("Div", [y, b.const(t, "trunc_scale")], "truncated"), mode)
        b.op("Mul", [b.op("Sub", [y, z], "unshifted"), s], "out", output=node.output[0])
        static = {"kind": "trunc_v1", "scale": _initializer(graph, s), "zeropt": _initializer(graph, z),
                  "in_bitwidth": in_bw, "out_bitwidth": out_bw, "rounding_mode": mode, "trunc_scale": t}
        form = f"Div, Add, Round, Div by 2^(in - out bits), {mode} rounding, Sub, Mul"
    else:
        if len(node.input) < 6:
            raise _Refused(f"the model imports {node.domain} at version {version} (Trunc v2), but the node has "
                           f"{len(node.input)} inputs instead of 6")
        scale, out_scale = _static(graph, node, 1, "scale"), _static(graph, node, 4, "out_scale")
        out_bw = _static(graph, node, 5, "out_bitwidth")
        if out_bw.size != 1:
            raise _Refused(f"out_bitwidth has {out_bw.size} elements; qonnx takes one")
        signed, narrow = bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
        with np.errstate(all="ignore"):
            t = np.asarray(2 ** np.round(np.log2(out_scale / scale)))
        t_c = b.const(t, "trunc_scale")
        y = b.op("Div", [y, t_c], "truncated")
        lo, hi = int_bounds(out_bw.reshape(()), signed, narrow)
        hi_c, lo_c = b.const(hi, "max_int"), b.const(lo, "min_int")
        y = b.op("Where", [b.op("Greater", [y, hi_c], "above"), hi_c, y], "clamped_high")
        y = b.op("Where", [b.op("Less", [y, lo_c], "below"), lo_c, y], "clamped")
        y = _round(b, y, mode)
        y = b.op("Sub", [y, b.op("Div", [z, t_c], "out_zeropt")], "unshifted")
        b.op("Mul", [y, node.input[4]], "out", output=node.output[0])
        static = {"kind": "trunc_v2", "scale": scale, "zeropt": _initializer(graph, z),
                  "in_bitwidth": _initializer(graph, node.input[3]), "out_scale": out_scale, "out_bitwidth": out_bw,
                  "signed": int(signed), "narrow": int(narrow), "rounding_mode": mode, "trunc_scale": t}
        form = f"Div, Add, Round, Div by 2^round(log2(out_scale / scale)), Where (clamp), {mode} rounding, Sub, Mul"
    if any(v is None for v in static.values()):
        static = {}
    return form, static


# FloatQuant formats that are a standard float8 type: (exponent bits, mantissa bits, bias, max, has_inf) ->
# the type. Both have NaN, subnormals and -0.0; saturating QuantizeLinear clamps to +-max as FloatQuant's
# saturation = 1 does.
_FLOAT8_OF_FORMAT = {(4, 3, 7, 448.0, 0): TensorProto.FLOAT8E4M3FN, (5, 2, 15, 57344.0, 1): TensorProto.FLOAT8E5M2}
# FloatQuant's output where x / scale is +-inf (x infinite or the division overflowing): qonnx's float
# arithmetic gives x86's default NaN, 0xFFC00000.
_DEFAULT_NAN = np.array([0xFFC00000], np.uint32).view(np.float32).reshape(())


def _convert_float_quant(graph, node, b: _Builder, attrs: dict, opset: int) -> tuple[str, dict]:
    """FloatQuant: float8 Q/DQ with fix-ups where that is exact (_float_quant_as_qdq), else qonnx's
    algorithm as standard elementwise ops (_float_quant_decomposed). Either way the format's
    parameters (exponent_bitwidth, mantissa_bitwidth, exponent_bias, max_val: one value each) and the
    scale must be initializers: the tables and bounds are computed at conversion time."""
    mode = _mode(attrs, "ROUND")
    values = [_initializer(graph, node.input[i]) if i < len(node.input) and node.input[i] else None for i in range(1, 6)]
    if any(v is None or (i > 0 and v.size != 1) for i, v in enumerate(values)):
        raise _Refused("FloatQuant's scale, exponent_bitwidth, mantissa_bitwidth, exponent_bias and max_val must be "
                       "initializers (one value each but the scale): the format is fixed at conversion time")
    scale, e, m, bias, mx = values
    fmt = (float(e), float(m), float(bias), float(mx), int(attrs.get("has_inf", 0)))
    flags = (int(attrs.get("has_nan", 0)), int(attrs.get("has_subnormal", 0)), int(attrs.get("saturation", 1)))
    static = {"kind": "float", "scale": scale, "format": fmt, "flags": flags, "rounding_mode": mode}
    ztype = _FLOAT8_OF_FORMAT.get(fmt) if flags == (1, 1, 1) and mode in ("ROUND", "HALF_EVEN") else None
    axes = [i for i, d in enumerate(scale.shape) if d != 1]
    if ztype is not None and opset >= 19 and len(axes) <= 1 and np.all(np.isfinite(scale)) and np.all(scale > 0):
        return _float_quant_as_qdq(node, b, scale, axes, ztype), {**static, "ztype": ztype}
    return _float_quant_decomposed(node, b, static), static


# numpy's temporary elision reuses a temporary of at least this many bytes (NPY_MIN_ELIDE_BYTES) for
# the next operation's result; FloatQuant's float32 R(x / 2^e) of this many elements or more is one.
_ELIDED_FLOAT32_ELEMENTS = 256 * 1024 // 4


def _float_quant_fixups(b: _Builder, xs: str, y: str, output: str) -> None:
    """FloatQuant's output where xs = x / scale is +-inf: x86's default NaN 0xFFC00000 (the reference's
    inf / inf), where the forms saturate or overflow. Where xs is NaN: the NaN of the reference's product
    2^e * R(xs / 2^e), quieted, which is 2^e's (|xs|: sign cleared) for a tensor under 256 KiB and
    R's (xs itself, sign kept) from 256 KiB on, where numpy's temporary elision swaps the operands
    (polyquant.qonnx: FloatQuantParams::nan_product_from_rounded). The tensor's size is known only
    at run time: Size(xs) decides. The additions quiet a signalling NaN and keep the payload (they
    need NoopElimination off, as exact_session_options() has it)."""
    y = b.op("Where", [b.op("IsInf", [xs], "xs_is_inf"), b.const(_DEFAULT_NAN, "default_nan"), y], "fix_overflow")
    zero = b.const(0.0, "zero")
    cleared = b.op("Add", [b.op("Abs", [xs], "abs_xs"), zero], "nan_sign_cleared")
    kept = b.op("Add", [xs, zero], "nan_sign_kept")
    limit = b.typed_const(np.asarray(_ELIDED_FLOAT32_ELEMENTS, np.int64), "elision_limit")
    elided = b.op("Not", [b.op("Less", [b.op("Size", [xs], "size"), limit], "under_elision_limit")], "elided")
    nan = b.op("Where", [elided, kept, cleared], "nan_output")
    b.op("Where", [b.op("IsNaN", [xs], "xs_is_nan"), nan, y], "out", output=output)


def _float_quant_as_qdq(node, b: _Builder, scale: np.ndarray, axes: list, ztype: int) -> str:
    """FloatQuant whose format is float8 e4m3fn / e5m2 (with NaN and subnormals, saturation = 1, ROUND),
    on a standard opset of 19 or later: y = DequantizeLinear(QuantizeLinear(x, scale, float8 zero)),
    which rounds x / scale to the float8 grid half to even and saturates to +-max as FloatQuant does,
    then two fix-ups for where the two differ (polyquant diff: NaN outputs only):
      x / scale = +-inf (x infinite or the division overflowing): FloatQuant's NaN 0xFFC00000, where Q
        saturates -> Where(IsInf(x / scale), 0xFFC00000, y);
      NaN x: FloatQuant returns x quieted, its sign cleared under 256 KiB and kept from there on, Q
        the canonical NaN of x's sign -> _float_quant_fixups."""
    per_axis = bool(axes)
    f8 = {TensorProto.FLOAT8E4M3FN: "float8_e4m3fn", TensorProto.FLOAT8E5M2: "float8_e5m2"}[ztype]
    import ml_dtypes
    zero = np.zeros(scale.size if per_axis else (), getattr(ml_dtypes, f8))
    s_c = b.const(scale.reshape(-1) if per_axis else scale.reshape(()), "scale")
    z_c = b.typed_const(zero, "zero_point")
    axis = {"axis": axes[0] - scale.ndim} if per_axis else {}
    x = node.input[0]
    y = b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, s_c, z_c], "quantized", **axis), s_c, z_c], "qdq", **axis)
    _float_quant_fixups(b, b.op("Div", [x, node.input[1]], "scaled"), y, node.output[0])
    return f"QuantizeLinear / DequantizeLinear ({f8}{', per axis' if per_axis else ''}), Where fix-ups for overflow, NaN"


def float_exponent_thresholds(first: int, last: int) -> np.ndarray:
    """T(k) for k = first..last: the smallest float32 a with floor(log2(a)) >= k, log2 in float32 as
    numpy computes it (qonnx's FloatQuant exponent; it rounds up to k for the top few dozen
    significands below 2^k, so T(k) is a little under 2^k there). 0 below float32's normal range (every
    a = |x / s| + FLT_MIN qualifies), +inf above it. Only the top 2^12 significands of each binade are
    searched: below them log2's float32 result is under k (floor_log2.h relies on the same bound)."""
    out = np.empty(last - first + 1, np.float32)
    window = np.arange((1 << 23) - (1 << 12), 1 << 23, dtype=np.uint32)
    for i, k in enumerate(range(first, last + 1)):
        if k - 1 < -126:
            out[i] = 0.0
        elif k - 1 > 127:
            out[i] = np.inf
        else:
            v = (np.float32(2.0 ** (k - 1)).view(np.uint32) + window).view(np.float32)
            with np.errstate(over="ignore"):
                up = np.flatnonzero(np.floor(np.log2(v)) >= k)
                out[i] = v[up[0]] if up.size else np.float32(2.0 ** k)
    return out


def _float_quant_decomposed(node, b: _Builder, p: dict) -> str:
    """qonnx's FloatQuant in standard ops, in its operation order and float32 precision:
      xs = x / s;  a = |xs| + FLT_MIN;  e = max(floor(log2(a)) - m, 1 - bias - m);  i = 2^e;
      q = i * R(xs / i);  clipped to [-M, M] (saturation) or overflow -> +-inf / NaN, judged on the
      rounded q;  y = q * s;  M = min((2 - 2^-m) * 2^(2^E - 1 - bias), max_val).
    Standard ONNX has no log2 and no bit casts, so g = floor(log2(a)), clamped to [1 - bias, 2^E - bias]
    (the clamp changes nothing: below, max() takes 1 - bias - m anyway; above, |xs| >= 2^(2^E - bias)
    rounds to a q beyond M on either exponent, and the result depends only on q's sign), is found by
    comparing a with the thresholds T(k) (float_exponent_thresholds) around a first guess
    c = clamp(Floor(Log(a) / ln 2)), which is within one of g: g = c - 1 + [a >= T(c)] + [a >= T(c + 1)]
    with T(1 - bias) = 0 and T(2^E - bias + 1) = +inf. The scale i = 2^(g - m) is gathered from a table
    of numpy's float32 exp2 (exact powers of two). The clip and the product run in float32: M is a float32
    value (qonnx computes 2^max_exponent in float32, so a format wider than float32 has M = +inf or
    max_val; a format whose M is no float32 value reaches below float32's subnormals and is refused),
    and then the reference's float64 comparisons and product give the same bits. The fix-ups for xs =
    +-inf and NaN are the Q/DQ form's (_float_quant_fixups)."""
    e, m, bias, mx, has_inf = p["format"]
    has_nan, _, saturation = p["flags"]
    mode = p["rounding_mode"]
    scale = p["scale"]
    if not np.all(np.isfinite(scale)):
        raise _Refused("FloatQuant's scale must be finite: the conversion's NaN fix-ups assume x / scale is NaN only "
                       "for a NaN x or 0 / 0")
    if e != int(e) or m != int(m) or bias != int(bias) or not 1 <= e <= 8 or not 0 <= m <= 23:
        raise _Refused(f"FloatQuant's format (exponent_bitwidth {e:g}, mantissa_bitwidth {m:g}, exponent_bias {bias:g}) "
                       f"is converted for integer widths E in 1..8 and m in 0..23 and an integer bias")
    if np.isnan(mx):
        raise _Refused("FloatQuant's max_val is NaN (every output is NaN in qonnx): not converted")
    if not saturation and not (has_inf or has_nan):
        raise _Refused("saturation = 0 with has_inf = has_nan = 0: qonnx raises (\"Clamping is not saturating, but "
                       "neither inf nor nan are supported\"), so there is nothing to convert to")
    from ..qonnx.ops import compute_max_val
    with np.errstate(over="ignore"):  # qonnx's 2^max_exponent in float32 overflows to inf for wide formats
        big_m = float(np.minimum(compute_max_val(np.float32(e), np.float32(m), np.float32(bias)), np.float64(mx)))
        big_m_is_float32 = float(np.float32(big_m)) == big_m
    if not big_m_is_float32:
        raise _Refused(f"FloatQuant's largest value M = {big_m!r} is no float32 value (the format's grid reaches "
                       f"below float32's subnormals, where its internal scales underflow): not converted")
    e, m, bias = int(e), int(m), int(bias)
    first, last = 1 - bias, 2 ** e - bias            # g's clamp: [1 - bias, max exponent + 1]
    thresholds = float_exponent_thresholds(first, last + 1)
    thresholds[0] = 0.0                              # T(first) = 0: c - 1 + [a >= T(c)] >= first
    thresholds[-1] = np.inf                          # T(last + 1) = +inf: the count stays <= last
    with np.errstate(over="ignore", under="ignore"):
        powers = np.exp2(np.arange(first, last + 1, dtype=np.float32) - np.float32(m))
    x, s = node.input[0], node.input[1]
    xs = b.op("Div", [x, s], "scaled")
    a = b.op("Add", [b.op("Abs", [xs], "abs"), b.const(np.finfo(np.float32).tiny, "tiny")], "magnitude")
    # A NaN or infinite a (xs NaN or +-inf, fixed up below) is replaced by 1 for the index: Cast has no
    # integer for a NaN guess, and a = +inf would reach T(last + 1) = +inf.
    a_safe = b.op("Where", [b.op("Less", [a, b.const(np.inf, "inf")], "a_is_finite"), a, b.const(1.0, "one")],
                  "magnitude_or_one")
    guess = b.op("Floor", [b.op("Mul", [b.op("Log", [a_safe], "ln"), b.const(1 / np.log(2), "inv_ln2")], "log2")],
                 "guess")
    c = b.op("Clip", [guess, b.const(first, "first_exponent"), b.const(last, "last_exponent")], "guess_clamped")
    c_index = b.op("Cast", [b.op("Sub", [c, b.const(first, "first_exponent")], "guess_offset")], "guess_index",
                   to=TensorProto.INT64)

    def at_least(table, what):  # [a >= table[c - first]] as 0.0 / 1.0
        t = b.op("Gather", [b.const(table, what), c_index], what + "_at_guess")
        return b.op("Cast", [b.op("Not", [b.op("Less", [a_safe, t], "below_" + what)], "reaches_" + what)],
                    "count_" + what, to=TensorProto.FLOAT)

    offset = b.op("Add", [at_least(thresholds[:-1], "threshold"), at_least(thresholds[1:], "next_threshold")], "counted")
    g_index = b.op("Cast", [b.op("Add", [b.op("Sub", [c, b.const(first + 1, "first_exponent_plus_one")], "below_guess"),
                                         offset], "exponent_offset")], "exponent_index", to=TensorProto.INT64)
    internal = b.op("Gather", [b.const(powers, "internal_scales"), g_index], "internal_scale")
    q = b.op("Mul", [internal, _round(b, b.op("Div", [xs, internal], "on_grid"), mode)], "quantized")
    hi, lo = b.const(big_m, "max_value"), b.const(-big_m, "min_value")
    above, below = b.op("Greater", [q, hi], "above"), b.op("Less", [q, lo], "below")
    if saturation:
        y = b.op("Where", [above, hi, b.op("Where", [below, lo, q], "clipped_low")], "clipped")
    elif has_inf:
        y = b.op("Where", [above, b.const(np.inf, "inf"), b.op("Where", [below, b.const(-np.inf, "minus_inf"), q],
                                                                    "overflow_low")], "overflowed")
    else:
        out_of_range = b.op("Or", [b.op("Or", [above, below], "out_of_range"), b.op("IsInf", [q], "is_inf")],
                            "overflow")
        y = b.op("Where", [out_of_range, b.const(np.nan, "nan"), q], "overflowed")
    y = b.op("Mul", [y, s], "scaled_back")
    _float_quant_fixups(b, xs, y, node.output[0])
    return (f"Div, exponent by Log and threshold tables (Gather), {mode} rounding on the 2^(e - m) grid, "
            f"{'clip' if saturation else 'overflow to inf' if has_inf else 'overflow to NaN'}, Mul, "
            f"Where fix-ups for inf, NaN")


def _convert_node(graph, node, b: _Builder, inferred: dict, version: int = 1, opset: int = 0) -> tuple[str, dict]:
    """Emits the standard subgraph of `node` into `b`; returns (form, static parameters or {})."""
    op = node.op_type
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for name in node.input:
        t = _elem_type(graph, name, inferred)
        if t not in (None, TensorProto.FLOAT):
            raise _Refused(f"input {name!r} is {TensorProto.DataType.Name(t).lower()}; the decomposition is built for "
                           f"float32 tensors (qonnx computes other types in numpy's promoted precision)")
    x, out = node.input[0], node.output[0]
    if op == "BipolarQuant":
        scale = _initializer(graph, node.input[1])
        b.op("Mul", [_bipolar(b, x), node.input[1]], "out", output=out)
        return "Where(x >= 0, 1, -1) * scale", ({"kind": "bipolar", "scale": scale} if scale is not None else {})
    if op == "Trunc":
        return _convert_trunc(graph, node, b, attrs, version)
    if op == "FloatQuant":
        return _convert_float_quant(graph, node, b, attrs, opset)
    if op not in ("Quant", "IntQuant"):
        raise _Refused(f"{op} is not converted yet (IntQuant / Quant, BipolarQuant, Trunc and FloatQuant are)")
    mode = _mode(attrs, "ROUND")
    signed, narrow = bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
    bitwidth = _initializer(graph, node.input[3])
    if bitwidth is None:
        raise _Refused(f"bitwidth {node.input[3]!r} is not an initializer: the clamp bounds 2^bitwidth are "
                       f"computed at conversion time")
    if bitwidth.size != 1:
        raise _Refused(f"bitwidth {node.input[3]!r} has {bitwidth.size} elements; qonnx takes one")
    s, z = node.input[1], node.input[2]
    y = b.op("Add", [b.op("Div", [x, s], "scaled"), z], "shifted")
    bw = bitwidth.reshape(())
    if float(bw) == 1 and signed:
        y = _bipolar(b, y)
        form = "Div, Add, Where(>= 0, 1, -1), Sub, Mul"
    else:
        lo, hi = int_bounds(bw, signed, narrow)
        hi_c, lo_c = b.const(hi, "max_int"), b.const(lo, "min_int")
        y = b.op("Where", [b.op("Greater", [y, hi_c], "above"), hi_c, y], "clamped_high")
        y = b.op("Where", [b.op("Less", [y, lo_c], "below"), lo_c, y], "clamped")
        y = _round(b, y, mode)
        form = f"Div, Add, Where (clamp), {mode} rounding, Sub, Mul"
    b.op("Mul", [b.op("Sub", [y, z], "unshifted"), s], "out", output=out)
    scale, zeropt = _initializer(graph, s), _initializer(graph, z)
    static = {} if scale is None or zeropt is None else {
        "kind": "int", "scale": scale, "zeropt": zeropt, "bitwidth": bitwidth, "signed": int(signed),
        "narrow": int(narrow), "rounding_mode": mode}
    return form, static


# QuantizeLinear's integer output types for a QONNX grid, by (signed, bit width): the grid's bounds
# must lie in the type, and a grid narrower than the type is clamped on the integers by Clip (onnxruntime's
# Clip takes int8 / uint8, not int16). The minimum standard opset of each.
_QDQ_TYPES = {(True, 8): (np.int8, 13), (False, 8): (np.uint8, 13), (True, 16): (np.int16, 21),
              (False, 16): (np.uint16, 21)}


def _qdq_form(graph, node, b: _Builder, attrs: dict, opset: int) -> tuple[str, dict] | None:
    """IntQuant / Quant as DequantizeLinear(Clip(QuantizeLinear(x))) (allow_inexact only: not exact, see
    docs/convert.md), or None where Q/DQ cannot hold the node's grid at all: a rounding mode other than
    ROUND / HALF_EVEN (QuantizeLinear rounds half to even), parameters that are not initializers, a zero
    point that is not an integer of the type, a non-positive scale, parameters varying along more than
    one axis, a bit width other than 2-8 or 16, or an opset too old for the type.
    Q: q = saturate(round(x / scale) + zp); Clip(q, min_int, max_int); DQ: (q - zp) * scale, with
    zp = qonnx's zeropt. qonnx rounds x / scale + zeropt instead, clamped before rounding: the two
    differ on NaN, on -0.0 (DequantizeLinear returns +0.0) and, for zeropt != 0, on inputs where adding
    the zero point in float32 makes a tie; the check counts them."""
    if node.op_type not in ("Quant", "IntQuant") or _mode(attrs, "ROUND") not in ("ROUND", "HALF_EVEN"):
        return None
    scale, zeropt, bitwidth = (_initializer(graph, node.input[i]) for i in (1, 2, 3))
    if scale is None or zeropt is None or bitwidth is None or bitwidth.size != 1:
        return None
    signed, narrow = bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
    bw = float(bitwidth.reshape(()))
    if bw != int(bw) or not 2 <= bw <= 16 or 8 < bw < 16:
        return None
    dtype, min_opset = _QDQ_TYPES[(signed, 8 if bw <= 8 else 16)]
    lo, hi = (float(v) for v in int_bounds(bitwidth.reshape(()), signed, narrow))
    info = np.iinfo(dtype)
    clip = (lo, hi) != (info.min, info.max)
    if opset < min_opset or (clip and dtype not in (np.int8, np.uint8)):
        return None
    shape = np.broadcast_shapes(scale.shape, zeropt.shape)
    axes = [i for i, d in enumerate(shape) if d != 1]
    if len(axes) > 1 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        return None
    z = np.broadcast_to(zeropt.astype(np.float64), shape).reshape(-1)
    if not np.all((z == np.round(z)) & (z >= info.min) & (z <= info.max)):
        return None
    per_axis = bool(axes)
    s_c = b.const(np.broadcast_to(scale, shape).reshape(-1) if per_axis else scale.reshape(()), "scale")
    z_c = b.typed_const(z.astype(dtype) if per_axis else z.astype(dtype).reshape(()), "zero_point")
    # The channel axis counted from the end: QONNX's parameters broadcast against x from the right.
    axis = {"axis": axes[0] - len(shape)} if per_axis else {}
    q = b.op("QuantizeLinear", [node.input[0], s_c, z_c], "quantized", **axis)
    if clip:
        q = b.op("Clip", [q, b.typed_const(np.asarray(lo, dtype), "min_int"), b.typed_const(np.asarray(hi, dtype), "max_int")],
                 "clipped")
    b.op("DequantizeLinear", [q, s_c, z_c], "out", output=node.output[0], **axis)
    form = f"QuantizeLinear ({np.dtype(dtype).name}{', per axis' if per_axis else ''})" + (", Clip" if clip else "") \
        + ", DequantizeLinear"
    return form, {"kind": "int", "scale": scale, "zeropt": zeropt, "bitwidth": bitwidth, "signed": int(signed),
                  "narrow": int(narrow), "rounding_mode": _mode(attrs, "ROUND")}


# ---- checks ------------------------------------------------------------------------------------------

def _reference(p: dict, x: np.ndarray) -> np.ndarray:
    from .. import qonnx
    if p["kind"] == "float":
        e, m, bias, mx, has_inf = p["format"]
        has_nan, has_subnormal, saturation = p["flags"]
        return qonnx.float_quant(x, p["scale"], np.float32(e), np.float32(m), np.float32(bias), 1, np.float32(mx),
                                 has_inf, has_nan, has_subnormal, p.get("rounding_mode", "ROUND"), saturation)
    if p["kind"] == "bipolar":
        return qonnx.bipolar_quant(x, p["scale"])
    if p["kind"] == "trunc_v1":
        return qonnx.trunc(x, p["scale"], p["zeropt"], p["in_bitwidth"], p["out_bitwidth"], p["rounding_mode"])
    if p["kind"] == "trunc_v2":
        return qonnx.trunc_v2(x, p["scale"], p["zeropt"], p["in_bitwidth"], p["narrow"], p["signed"], p["out_scale"],
                              p["out_bitwidth"], p["rounding_mode"])
    return qonnx.quant(x, p["scale"], p["zeropt"], p["bitwidth"], p["signed"], p["narrow"], p["rounding_mode"])


def _sample_inputs(p: dict, rng) -> np.ndarray:
    """NaNs, infinities, zeros, subnormals, extremes; every tie (k + 1/2 - zeropt) * scale of the grid
    (of a grid wider than 2^13 steps: those at both ends and around zero) and its float32 neighbours;
    random values over the grid's range. Shape
    (N,) + the parameters' broadcast shape, so each channel sees every value."""
    if p["kind"] == "float":
        return _minifloat_sample(p, rng)
    pshape = np.broadcast_shapes(*(np.shape(p[k]) for k in ("scale", "zeropt", "out_scale") if p.get(k) is not None))
    scale = np.broadcast_to(np.asarray(p["scale"], np.float32), pshape)
    zero = np.broadcast_to(np.asarray(p.get("zeropt", 0), np.float32), pshape)
    fmax, tiny = np.finfo(np.float32).max, np.float32(1e-45)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 1.2e-38, -1.2e-38, fmax, -fmax],
                        np.float32)
    parts = [np.broadcast_to(specials.reshape((-1,) + (1,) * len(pshape)), (specials.size,) + pshape)]
    def grid(lo: float, hi: float) -> np.ndarray:
        first, last = lo - 2, hi + 2
        if last - first <= 1 << 13:
            k = np.arange(first, last, dtype=np.float64)
        else:  # a wide grid: the ties at both ends and around zero (random values fill the rest)
            mid = np.arange(-(1 << 11), 1 << 11, dtype=np.float64)
            k = np.unique(np.concatenate([first + np.arange(1 << 12), last - np.arange(1, (1 << 12) + 1),
                                          mid[(mid >= first) & (mid < last)]]))
        return k.reshape((-1,) + (1,) * len(pshape))

    def around(points: np.ndarray) -> list:
        points = points.astype(np.float32)
        return [points, np.nextafter(points, np.float32(np.inf)), np.nextafter(points, np.float32(-np.inf))]

    span = 4.0
    if p["kind"] == "int":
        lo, hi = int_bounds(np.asarray(p["bitwidth"]).reshape(()), p["signed"], p["narrow"])
        k = grid(float(lo), float(hi))
        parts += around((k + 0.5 - zero) * scale) + [((k - zero) * scale).astype(np.float32)]
        span = (float(hi) - float(lo) + 4) * np.abs(scale).max(initial=1.0)
    elif p["kind"].startswith("trunc"):
        # Ties of both roundings: x / scale + zeropt = k + 1/2 (the input grid) and
        # round(x / scale + zeropt) / t = k + 1/2 (the output grid, t the power of two).
        t = np.broadcast_to(np.asarray(p["trunc_scale"], np.float64), pshape)
        in_bw = float(np.asarray(p["in_bitwidth"]).reshape(-1)[0]) if p["in_bitwidth"] is not None else 8.0
        in_hi = 2.0 ** min(in_bw, 30)
        k = grid(-in_hi, in_hi)
        parts += around((k + 0.5 - zero) * scale)
        parts += around(((k + 0.5) * t - zero) * scale) + around((k * t - zero) * scale)
        span = 2 * in_hi * np.abs(scale).max(initial=1.0)
    parts.append((rng.standard_normal((4096,) + pshape) * span).astype(np.float32))
    return np.concatenate([np.broadcast_to(a, a.shape) for a in parts]).astype(np.float32)


def _minifloat_sample(p: dict, rng) -> np.ndarray:
    """FloatQuant's check inputs, shaped (N,) + the scale's shape: every value of the minifloat grid
    (per binade from the subnormals to two binades past the largest; 512 significands at each end of a
    binade and 512 random ones where m > 10) and every midpoint of two neighbours, times the scale, with
    their float32 neighbours; the exponent thresholds T(k) (float_exponent_thresholds) and 4 float32
    neighbours on each side, times the scale; NaNs with payloads of both signs, infinities, zeros,
    subnormals, the largest floats; random values on the grid's range and log-uniform over every
    float32 binade."""
    e, m, bias, mx, _ = p["format"]
    e, m, bias = int(e), int(m), int(bias)
    scale = np.asarray(p["scale"], np.float64)
    pshape = scale.shape
    column = (-1,) + (1,) * len(pshape)
    if m <= 10:
        significands = np.arange(1 << m, dtype=np.float64)
    else:
        top = float(1 << m)
        significands = np.unique(np.concatenate([np.arange(512.0), top - 1 - np.arange(512.0),
                                                 np.floor(rng.uniform(0, top, 512))]))
    first = 1 - bias
    binades = np.arange(first, min(2 ** e - bias + 2, 129), dtype=np.float64)
    normal = ((1 + significands / 2.0 ** m)[None, :] * np.exp2(binades)[:, None]).reshape(-1)
    subnormal = significands * 2.0 ** (first - m)
    values = np.unique(np.concatenate([subnormal, normal]))
    points = np.concatenate([values, (values[1:] + values[:-1]) / 2])
    with np.errstate(over="ignore"):
        grid = (points.reshape(column) * scale).astype(np.float32)
        low, high = max(first, -126), min(2 ** e - bias + 1, 128)   # the thresholds inside float32's normal range
        thresholds = (float_exponent_thresholds(low, high) if high >= low else np.empty(0, np.float32)).astype(np.float64)
        thresholds = thresholds[(thresholds > 0) & np.isfinite(thresholds)]
        near = (thresholds.reshape(column) * scale).astype(np.float32)
    parts = [grid, np.nextafter(grid, np.float32(np.inf)), np.nextafter(grid, np.float32(-np.inf))]
    for v in (near, -near):
        up = down = v
        parts.append(v)
        for _ in range(4):
            up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
            parts += [up, down]
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FC12345, 0xFFA00001, 0x7F800000,
                         0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000, 0, 0x80000000, 1, 0x80000001, 0x00800000,
                         0x807FFFFF], np.uint32).view(np.float32)
    parts.append(np.broadcast_to(specials.reshape(column), (specials.size,) + pshape))
    span = min(float(mx) if np.isfinite(mx) else 3e38, 3e38) * float(np.abs(scale).max(initial=1.0))
    with np.errstate(over="ignore"):
        parts.append((rng.standard_normal((4096,) + pshape) * span).astype(np.float32))
        parts.append((np.exp2(rng.uniform(-150, 128, (4096,) + pshape)) * rng.choice([-1.0, 1.0], (4096,) + pshape))
                     .astype(np.float32))
    return np.concatenate([np.broadcast_to(a, a.shape[:1] + pshape) for a in parts]).astype(np.float32)


def exact_session_options() -> Any:
    """onnxruntime session options under which a converted model computes qonnx's bits: the basic
    optimization level (constant folding runs the same kernels) without the optimizers that change
    numerics (polyquant.qonnx.execute.NUMERICS_CHANGING_OPTIMIZERS: fusions that reorder sums or fold a
    scale, and NoopElimination, which drops x + 0 and so turns IEEE's -0.0 + 0.0 = +0.0 into -0.0),
    weight prepacking off. No custom-op library: the model needs none."""
    import onnxruntime as ort
    from ..qonnx.execute import NUMERICS_CHANGING_OPTIMIZERS
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("optimization.disable_specified_optimizers", ";".join(NUMERICS_CHANGING_OPTIMIZERS))
    options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def _node_model(node_nodes, inits, x_name, out_name, opset, rank):
    # x of known rank (symbolic dimensions), as in a real model: some onnxruntime rewrites apply only
    # where shapes are known, so the check runs the subgraph as the model will.
    x_info = helper.make_tensor_value_info(x_name, TensorProto.FLOAT, [f"d{i}" for i in range(rank)])
    graph = helper.make_graph(node_nodes, "check", [x_info],
                              [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)
    return m


@dataclass
class CheckOutcome:
    """What a node's check found: inputs compared, and of those the differing ones by polyquant diff's kind."""
    checked: int = 0
    differing: int = 0
    kinds: dict = field(default_factory=dict)
    example: str = ""
    on_weight: str = ""   # for a weight quantizer: the differing elements of the weight tensor itself

    def add(self, other: "CheckOutcome") -> None:
        self.checked += other.checked
        self.differing += other.differing
        for k, c in other.kinds.items():
            self.kinds[k] = self.kinds.get(k, 0) + c
        self.example = self.example or other.example


def _check_node(b: _Builder, node, p: dict, graph, opset: int, how: str, rng, reference=None,
                what: str = "qonnx") -> CheckOutcome:
    """Runs the emitted subgraph in onnxruntime on the check's inputs (the sample, or every float32 input
    for per-tensor parameters, then a weight's own tensor) and compares it with `reference(x)` (default:
    polyquant.qonnx on `p`) bit for bit; returns what it found (the caller refuses or reports)."""
    import onnxruntime as ort
    def qonnx_reference(v):
        with np.errstate(over="ignore"):  # the float64 result rounds to +-inf in float32, as the node's cast does
            return np.asarray(_reference(p, v), np.float32)

    reference = reference or qonnx_reference
    needed = {i for n in b.nodes for i in n.input} - {t.name for t in b.inits} - {o for n in b.nodes for o in n.output}
    needed.discard(node.input[0])  # x is fed: the sample, then a weight's own tensor
    inits = list(b.inits) + [t for t in graph.initializer if t.name in needed]
    per_tensor = all(np.size(p[k]) == 1 for k in ("scale", "zeropt", "out_scale") if p.get(k) is not None)
    exhaustive = how == "exhaustive" and per_tensor
    x = None if exhaustive else _sample_inputs(p, rng)

    def session_of_rank(rank: int):
        model = _node_model(b.nodes, inits, node.input[0], node.output[0], opset, rank)
        return ort.InferenceSession(model.SerializeToString(), exact_session_options(), providers=["CPUExecutionProvider"])

    session = session_of_rank(1 if exhaustive else x.ndim)
    if exhaustive:  # polyquant diff's sweep: every float32 input, chunk by chunk
        from .diff import sweep
        r = sweep("the standard subgraph", what, [(({}, lambda v: session.run(None, {node.input[0]: v})[0]),
                                                   ({}, reference))],
                  desc=f"check {node.name or node.output[0]}")
        outcome = CheckOutcome(r.inputs, r.differing, dict(r.kinds))
        if r.differing:
            kind, e = next(iter(r.examples.items()))
            outcome.example = f"x = {e.x!r} ({e.x_bits}, {kind}): {e.a!r} instead of {e.b!r}"
    else:
        outcome = _compare(session, node, x, reference, p["scale"])
    weight = _initializer(graph, node.input[0])
    if weight is not None and weight.dtype == np.float32:  # a weight quantizer: its own tensor too
        on_weight = _compare(session_of_rank(weight.ndim), node, weight, reference, p["scale"])
        outcome.add(on_weight)
        outcome.on_weight = f"its weight tensor: {on_weight.differing} of {on_weight.checked} differ"
    return outcome


def _compare(session, node, x, reference, scale) -> CheckOutcome:
    """The subgraph on x against reference(x), bit for bit; the differing inputs classified by polyquant
    diff's kinds (saturation values: the outputs at the largest float32 inputs; tie grids: the scales)."""
    from .diff import _classify
    got = session.run(None, {node.input[0]: x})[0]
    want = np.broadcast_to(np.asarray(reference(x), np.float32), got.shape)
    mask = got.view(np.uint32) != want.view(np.uint32)
    outcome = CheckOutcome(int(x.size))
    if not mask.any():
        return outcome
    xb = np.broadcast_to(x, got.shape)
    flat_x, flat_got, flat_want, flat_mask = (np.ascontiguousarray(v).reshape(-1) for v in (xb, got, want, mask))
    fmax = np.finfo(np.float32).max
    edge = np.abs(flat_x) == fmax
    sat_got, sat_want = np.unique(flat_got[edge]), np.unique(flat_want[edge])
    steps = [float(v) for v in np.unique(np.abs(np.asarray(scale, np.float64))) if 0 < v < np.inf]
    masks = _classify(flat_x, flat_got, flat_want, flat_mask, sat_got, sat_want, steps)
    outcome.differing = int(flat_mask.sum())
    outcome.kinds = {k: int(m.sum()) for k, m in masks.items() if m.any()}
    i = int(np.flatnonzero(flat_mask)[0])
    outcome.example = f"x = {float(flat_x[i])!r}: {float(flat_got[i])!r} instead of {float(flat_want[i])!r}"
    return outcome


def _refusal(outcome: CheckOutcome, what: str = "qonnx") -> str:
    return f"the emitted subgraph differs from {what}: {_differing_text(outcome.differing, outcome.checked, outcome.kinds, outcome.example)}"


def _record_check(report: "NodeReport", outcome: CheckOutcome, allow_inexact: bool, what: str = "qonnx") -> None:
    """A node's check into its report: the inputs checked and, where some differ from `what`, the
    refusal (a _Refused naming the counts) or, with allow_inexact, the INEXACT status with the counts,
    the kinds and an example."""
    report.checked = outcome.checked
    if outcome.differing:
        if not allow_inexact:
            raise _Refused(_refusal(outcome, what))
        report.status, report.differing = "inexact", outcome.differing
        report.kinds, report.example, report.reason = outcome.kinds, outcome.example, outcome.on_weight


# ---- the conversion ------------------------------------------------------------------------------------

def convert(model: Any, to: str = "onnx", *, check: str = "sample", seed: int = 0,
            allow_inexact: bool = False, encodings: Any = None, encoding_version: str = "2.1.0") -> ConvertResult:
    """Converts `model` (an onnx.ModelProto, a path or serialized bytes; not modified) to `to`:
    returns a ConvertResult with the converted ``model`` and a report per QONNX node (``nodes``;
    ``refused`` lists those not converted, with the reason). `allow_inexact=True` writes IntQuant /
    Quant nodes that Q/DQ can hold as QuantizeLinear / DequantizeLinear, and emits a node whose check
    finds differences instead of refusing it; each such node is ``inexact`` with the differing inputs
    counted by kind (``inexact`` lists them). `encodings` (an AIMET encodings file's path or dict, with a
    float `model`) writes a QDQ model with the encodings' parameters instead and returns
    convert_aimet's AimetResult, which reports per tensor where ONNX's division differs from AIMET's
    reciprocal multiplication. `encoding_version` ("2.1.0", "1.0.0" or "0.6.1") is the layout of the
    encodings `to="aimet"` writes. See the module documentation."""
    from ..onnx.models import _load_model
    if to not in ("onnx", "qonnx", "aimet"):
        raise CommandError(f"to: expected 'onnx' (QONNX -> standard ONNX) or 'qonnx' (standard Q/DQ -> QONNX) or "
                           f"'aimet' (a QDQ model's Q/DQ parameters -> AIMET 2.1.0 encodings), got {to!r}")
    if check not in ("sample", "exhaustive", "none"):
        raise CommandError(f"check: expected sample, exhaustive or none, got {check!r}")
    if encodings is not None:
        if to != "onnx":
            raise CommandError(f"encodings: an AIMET encodings file converts a float model to ONNX Q/DQ (to='onnx'), "
                               f"got to={to!r}")
        from .convert_aimet import convert_aimet
        return convert_aimet(model, encodings, check=check)
    if to == "aimet":
        from .convert_aimet import to_encodings
        return to_encodings(model, encoding_version)
    m = _load_model(model, copy=True)
    if to == "qonnx":
        from .convert_qonnx import to_qonnx
        return to_qonnx(m, check=check, rng=np.random.default_rng(seed), allow_inexact=allow_inexact)
    graph = m.graph
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    try:
        inferred_model = onnx.shape_inference.infer_shapes(m)
        inferred = {v.name: v.type.tensor_type.elem_type for v in
                    list(inferred_model.graph.value_info) + list(graph.input) + list(graph.output)
                    if v.type.tensor_type.elem_type}
    except Exception:  # noqa: BLE001 - custom domains may stop inference; types then come from initializers only
        inferred = {v.name: v.type.tensor_type.elem_type for v in list(graph.input) if v.type.tensor_type.elem_type}
    used = {n for node in graph.node for n in list(node.input) + list(node.output) + [node.name]}
    used |= {t.name for t in graph.initializer} | {v.name for v in graph.input}
    rng = np.random.default_rng(seed)
    result = ConvertResult(m)
    new_nodes, new_inits = [], []
    for node in graph.node:
        if node.domain not in QONNX_DOMAINS:
            new_nodes.append(node)
            continue
        name = node.name or node.output[0]
        b = _Builder(graph, name, used)
        try:
            if opset is None or opset < MIN_OPSET:
                raise _Refused(f"the model imports the standard opset {opset}; the decomposition needs Round "
                               f"(opset {MIN_OPSET} or later)")
            version = next((o.version for o in m.opset_import if o.domain == node.domain), 1)
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            qdq = _qdq_form(graph, node, b, attrs, opset) if allow_inexact else None
            form, static = qdq or _convert_node(graph, node, b, inferred, version, opset)
            report = NodeReport(name, node.op_type, form, "exact")
            if static and check != "none":
                outcome = _check_node(b, node, static, graph, opset, check, rng)
                _record_check(report, outcome, allow_inexact)
            elif qdq:  # Q/DQ is never exact (NaN, -0.0); unchecked, the counts are unknown
                report.status, report.reason = "inexact", "not checked (check=none): differs at least on NaN and -0.0"
            result.nodes.append(report)
            new_nodes += b.nodes
            new_inits += b.inits
        except _Refused as why:
            result.nodes.append(NodeReport(name, node.op_type, "-", "refused", str(why)))
            new_nodes.append(node)
    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)
    if not result.refused:
        keep = [o for o in m.opset_import if o.domain not in QONNX_DOMAINS]
        del m.opset_import[:]
        m.opset_import.extend(keep)
    from .convert_quark import QUARK_DOMAINS, convert_quark
    if any(n.domain in QUARK_DOMAINS for n in graph.node):  # Quark's Extended Q/DQ: convert_quark.py
        qonnx_nodes = len(result.nodes)
        convert_quark(m, result, check=check, rng=rng, allow_inexact=allow_inexact)
        result.source = "Quark" if not qonnx_nodes else "QONNX / Quark"
    return result


def convert_command(args, out=sys.stdout) -> int:
    """`polyquant convert IN -o OUT --to onnx`: exit 0 when every node was converted (OUT written):
    exactly, or with --allow-inexact INEXACT as the table and its WARNING line say; 1 when one was
    refused (OUT not written)."""
    from ..onnx.models import _load_model
    try:
        model = _load_model(args.model, copy=False)
    except (OSError, ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    r = convert(model, args.to, check=args.check, allow_inexact=args.allow_inexact, encodings=args.encodings,
                encoding_version=args.encoding_version)
    print(r, file=out)
    if r.refused:
        print(f"not written: {len(r.refused)} node(s) refused", file=out)
        return 1
    if args.to == "aimet":  # encodings: a JSON file
        import json
        with open(args.output, "w") as f:
            json.dump(r.encodings, f, indent=2)
    else:
        onnx.save(r.model, args.output)
    print(f"written: {args.output}", file=out)
    return 0


def add_parser(sub, epilog: str) -> None:
    p = sub.add_parser(
        "convert", epilog=epilog, help="convert QONNX / Quark / AIMET encodings to standard ONNX, or Q/DQ to QONNX, exactly",
        description="--to onnx (default): replace each QONNX quantizer (IntQuant / Quant, BipolarQuant, Trunc, "
                    "FloatQuant) and each Quark Extended Q/DQ node by "
                    "standard ONNX ops that compute the original's result bit for bit, so the model runs in any onnxruntime "
                    "without polyquant. --to qonnx: replace each standard QuantizeLinear / DequantizeLinear pair "
                    "(Q, Clip, DQ too) by a QONNX Quant or FloatQuant node on the same grid, with standard fix-ups "
                    "where the two differ on NaN, infinities or -0.0. Each node is checked in onnxruntime against the "
                    "original; a node that cannot be converted exactly is refused with "
                    "the reason, and then nothing is written (exit status 1). docs/convert.md")
    p.add_argument("model", metavar="IN.onnx",
                   help="the model: QONNX or Quark (--to onnx), standard Q/DQ (--to qonnx), float (--encodings)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                   help="where to write the converted model (--to aimet: the encodings, JSON)")
    p.add_argument("--to", choices=["onnx", "qonnx", "aimet"], default="onnx",
                   help="target: standard ONNX from QONNX / Quark (onnx, default), QONNX from standard QuantizeLinear / "
                        "DequantizeLinear pairs (qonnx), or AIMET 2.1.0 encodings of a QDQ model's Q/DQ parameters "
                        "(aimet: OUT is the JSON file)")
    p.add_argument("--check", choices=["sample", "exhaustive", "none"], default="sample",
                   help="compare each converted node with polyquant.qonnx on NaN, infinities, zeros, subnormals, every "
                        "rounding tie and random values (sample, default) or on all 2^32 float32 inputs (exhaustive, "
                        "per-tensor parameters; about a minute per node)")
    p.add_argument("--encodings", metavar="ENC.json", default=None,
                   help="an AIMET encodings file (2.0.0 / 2.1.0 / 1.0.0 / 0.6.1) for the float model IN.onnx: write the QDQ model with "
                        "its parameters and report, per tensor, where ONNX's division differs from AIMET's reciprocal "
                        "multiplication (--check exhaustive: all 2^32 float32 inputs per parameter tuple)")
    p.add_argument("--encoding-version", choices=["2.1.0", "1.0.0", "0.6.1"], default="2.1.0",
                   help="--to aimet: the layout of the encodings written (default: %(default)s; 1.0.0 and 0.6.1 hold "
                        "per-tensor and per-channel encodings, not blocked ones)")
    p.add_argument("--allow-inexact", action="store_true",
                   help="write IntQuant / Quant nodes that QuantizeLinear / DequantizeLinear can hold as Q/DQ (the form "
                        "other runtimes recognize; it differs from qonnx on NaN, -0.0 and, with a zero point, some "
                        "ties), and emit a node whose check finds differences instead of refusing it; such nodes are "
                        "flagged INEXACT in the table with the differing inputs counted by kind (exit status 0)")
    p.set_defaults(func=convert_command)
