"""`polyquant convert MODEL.onnx --encodings ENC.json --to onnx`: a float ONNX model plus an AIMET
encodings file -> a QDQ model, with a report of where ONNX's Q/DQ differs from AIMET's.

The Q/DQ pairs are written by polyquant calibrate's `_qdq_model` (docs/calibrate.md): each encoded
tensor gets QuantizeLinear / DequantizeLinear with the encoding's own y_scale, y_zero_point, axis
and output dtype (a weight is stored as QuantizeLinear's integers plus a DequantizeLinear), so the
parameters are the file's, bit for bit.

The arithmetic is not always the same. AIMET's quantize_dequantize without gradients (its inference
path, torch's fake quantization) computes round(x * (1 / scale)), multiplying by the float32
reciprocal; ONNX's QuantizeLinear computes round(x / scale). The two products differ by at most a few
ulps of x / scale, so the rounded results can differ only for x within a few ulps of a rounding tie
(k + 1/2) * scale: the report's sample is every tie of each channel's grid and its 8 float32
neighbours on each side (plus NaN, infinities and zeros), which holds every input where they can
differ; `check="exhaustive"` sweeps all 2^32 float32 inputs per distinct (scale, zero point) with
polyquant diff's sweep. Each tensor's row gives the two `polyquant diff` specs compared.

Encodings 2.0.0 / 2.1.0 (AIMET's ONNX-aligned layout: a list of {name, output_dtype, y_scale,
y_zero_point, axis, block_size}) and 1.0.0 / 0.6.1 files (activation_encodings and param_encodings
with AIMET's scale and offset, read by polyquant.aimet's reader of AIMET's export; see
_legacy_entries) are converted per tensor, per channel, blockwise and LPBQ.

A model below the standard opset 21 is raised to 21 by onnx's version converter where an encoding
needs it (blocked Q/DQ, and the int4 / uint4 / int16 / uint16 Q/DQ types), and the report says so;
where the converter cannot raise it, those encodings are refused by name.

Blockwise and LPBQ weights (2.x block_size; 1.0.0 enc_type PER_BLOCK / LPBQ) become ONNX's blocked
DequantizeLinear (axis, block_size; opset 21, to which the model's standard opset is raised by onnx's
version converter where it is lower, or the encodings are refused by name where it cannot be):
- the y_scale is the encoding's scale repeated over the axes AIMET's quantizer shares (a Conv
  weight's (C_out, C_in / B, 1, 1) over the kernel), as ONNX's blocked y_scale has the weight's shape
  but along the block axis; the same float32 values;
- LPBQ's block scale is AIMET's: float32(per_block_int_scale * per_channel_float_scale), one float32
  multiplication, which is AIMET's GroupedBlockQuantizeDequantize's (q + 0) * pc in its working
  precision (_blocked_parameters); the integers it exports are that q (up to 2^24: beyond, its
  float32 array rounds them, and such entries are refused), so the product is bit for bit the scale
  AIMET quantized with;
- the report compares against AIMET's blockwise quantize_dequantize, which never takes the reciprocal
  shortcut (its eligibility excludes block_size) and divides as QuantizeLinear does: ties agree, and
  NaN is the difference (AIMET keeps it; QuantizeLinear gives an integer). One comparison per distinct
  block (scale, zero point), the per-channel machinery's.
Refused by name (then nothing is written): blockwise activations (AIMET quantizes weights blockwise;
ONNX's blocked y_scale must match a shape a model need not fix), non-float32 weights, a block_size
that does not divide its axis, scales of the wrong shape, LPBQ integer scales that are not positive
integers, per-channel scales that do not group the blocks, zero points on LPBQ, and names that are no
tensor of the model.

Back (`--to aimet`, to_encodings): a QDQ model's Q/DQ parameters as AIMET 2.1.0 encodings, bit for bit;
a blocked pair as a blockwise entry (nested y_scale in AIMET's quantizer shape, _aimet_block_shape;
an LPBQ pair comes back as the blockwise entry of its block scales: a Q/DQ pair does not hold the
integer / per-channel split), in 1.0.0 as AIMET's PER_BLOCK export; 0.6.1 holds no blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np

from .common import CommandError

SUPPORTED_VERSIONS = ("2.0.0", "2.1.0")
LEGACY_VERSIONS = ("1.0.0", "0.6.1")
INTEGER_DTYPES = {"int8": (8, True), "uint8": (8, False), "int16": (16, True), "uint16": (16, False),
                  "int4": (4, True), "uint4": (4, False)}
INTEGER_NUMPY = {(8, True): np.int8, (8, False): np.uint8, (16, True): np.int16, (16, False): np.uint16,
                 (4, True): ml_dtypes.int4, (4, False): ml_dtypes.uint4}
NEIGHBOURS = 8   # float32 neighbours of each tie checked on each side


@dataclass
class TensorReport:
    name: str
    kind: str                 # "activation" or "param"
    params: str               # the Q/DQ parameters written
    status: str               # "identical", "differs" (the Q/DQ pair is written either way) or "refused"
    reason: str = ""
    checked: int = 0
    differing: int = 0
    kinds: dict = field(default_factory=dict)
    example: str = ""
    specs: tuple = ()         # (aimet spec, onnx spec) of one differing (or the first) parameter tuple
    blockwise: bool = False   # compared against AIMET's blockwise path (its formula, x / scale)


@dataclass
class AimetResult:
    model: Any
    tensors: list = field(default_factory=list)
    check: str = "sample"
    notes: list = field(default_factory=list)   # what was changed beyond the Q/DQ pairs (the opset)

    @property
    def refused(self) -> list:
        return [t for t in self.tensors if t.status == "refused"]

    @property
    def differing(self) -> list:
        return [t for t in self.tensors if t.status == "differs"]

    def __str__(self) -> str:
        if not self.tensors:
            return "no encodings: nothing to convert"
        blockwise = any(t.blockwise for t in self.tensors)
        rows = [("tensor", "kind", "Q/DQ", "ONNX's Q/DQ vs AIMET's no-grad quantize_dequantize" if blockwise
                 else "ONNX's division vs AIMET's reciprocal (no-grad path)")]
        for t in self.tensors:
            if t.status == "refused":
                result = f"refused: {t.reason}"
            elif t.status == "unchecked":
                result = "not compared (check=none)"
            elif t.status == "identical":
                result = f"identical on {t.checked} checked inputs"
            else:
                counts = ", ".join(f"{k} {c}" for k, c in t.kinds.items())
                result = f"DIFFER on {t.differing} of {t.checked} checked inputs ({counts}), e.g. {t.example}"
            if t.reason and t.status != "refused":
                result += f"; {t.reason}"
            rows.append((t.name, t.kind, t.params, result))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        done = len(self.tensors) - len(self.refused)
        lines.append(f"{done} of {len(self.tensors)} encodings written as Q/DQ pairs with the file's parameters"
                     + (f"; {len(self.refused)} refused" if self.refused else ""))
        lines += [f"note: {n}" for n in self.notes]
        sample = "every rounding tie and its float32 neighbours" if self.check == "sample" else "every float32 input"
        if self.differing:
            if not any(t.blockwise for t in self.differing):
                what = ("ONNX's QuantizeLinear (x / scale) rounds some inputs differently from AIMET's no-grad "
                        "quantize_dequantize (x * (1 / scale))")
            else:  # blockwise AIMET divides as QuantizeLinear does (_compare_parameters): NaN is what differs
                what = ("ONNX's Q/DQ gives some inputs differently from AIMET's no-grad quantize_dequantize (per "
                        "tensor / per channel: AIMET's x * (1 / scale) against QuantizeLinear's x / scale, which round "
                        "ties apart; blockwise / LPBQ: AIMET's formula, x / scale too, keeps NaN where QuantizeLinear "
                        "gives an integer)")
            lines.append(f"NOTE: on {len(self.differing)} tensor(s) {what}; checked on {sample}. "
                         f"Reproduce: polyquant diff '<aimet spec>' '<onnx spec>' (docs/convert.md)")
            for t in self.differing:
                lines.append(f"  {t.name}: {t.specs[0]}  vs  {t.specs[1]}")
        return "\n".join(lines)


def _load_encodings(encodings) -> dict:
    if isinstance(encodings, dict):
        return encodings
    try:
        with open(encodings) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise CommandError(f"encodings: cannot read {str(encodings)!r}: {exc}") from None


def _tie_sample(scale: float, zp: int, qmin: int, qmax: int) -> np.ndarray:
    """Every tie (k + 1/2) * scale of the grid (q = round(x / scale) + zp in [qmin, qmax]; one step past
    each end too) and NEIGHBOURS float32 neighbours on each side, NaN, infinities and zeros."""
    k = np.arange(qmin - zp - 2, qmax - zp + 2, dtype=np.float64)
    ties = ((k + 0.5) * np.float64(scale)).astype(np.float32)
    parts, up, down = [ties], ties, ties
    for _ in range(NEIGHBOURS):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        parts += [up, down]
    parts.append(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32))
    return np.concatenate(parts)


def _compare(aimet_spec: str, onnx_spec: str, scale: float, zp: int, qmin: int, qmax: int, check: str):
    from .diff import _classify, _differs, _instances, parse_spec, sweep
    fa, fo = _instances(parse_spec(aimet_spec))[0][1], _instances(parse_spec(onnx_spec))[0][1]
    if check == "exhaustive":
        r = sweep(aimet_spec, onnx_spec, [(({"scale": scale}, fa), ({"scale": scale}, fo))], desc="aimet vs onnx")
        example = ""
        if r.differing:
            kind, e = next(iter(r.examples.items()))
            example = f"x = {e.x!r} ({kind}): AIMET {e.a!r}, ONNX {e.b!r}"
        return r.inputs, r.differing, dict(r.kinds), example
    x = _tie_sample(scale, zp, qmin, qmax)
    a, o = np.asarray(fa(x)), np.asarray(fo(x))
    mask = _differs(a, o)
    if not mask.any():
        return x.size, 0, {}, ""
    fmax = np.float32(np.finfo(np.float32).max)
    sat_a = np.asarray(fa(np.array([-fmax, fmax], np.float32)), np.float64)
    sat_o = np.asarray(fo(np.array([-fmax, fmax], np.float32)), np.float64)
    masks = _classify(x, a, o, mask, sat_a, sat_o, [scale])
    i = int(np.flatnonzero(mask)[np.argmin(np.abs(x[mask]))])
    return x.size, int(mask.sum()), {k: int(m.sum()) for k, m in masks.items() if m.any()}, \
        f"x = {float(x[i])!r}: AIMET {float(a[i])!r}, ONNX {float(o[i])!r}"


def _on_weight(tensor, scale: np.ndarray, zps: np.ndarray, axis, bits: int, signed: bool, block_size: int = 0) -> str:
    """How many elements of the weight tensor itself AIMET's no-grad quantize_dequantize and ONNX's Q/DQ
    (what the written model stores and computes) give differently. Blocked (block_size > 0): `scale` and
    `zps` are the Q/DQ's (the weight's shape, W_a / block_size along the axis), and AIMET's side is its
    blockwise quantize_dequantize with block size block_size along the axis and 1 elsewhere."""
    from onnx import numpy_helper
    from .. import onnx as pqo
    from ..aimet import functional
    from .diff import _differs
    w = numpy_helper.to_array(tensor)
    if w.dtype != np.float32:
        return ""
    zp = zps.astype(INTEGER_NUMPY[(bits, signed)])
    if block_size:
        ax = int(axis) % w.ndim
        onnx_w = pqo.dequantize_linear(pqo.quantize_linear(w, scale, zp, axis=ax, block_size=block_size),
                                       scale, zp, axis=ax, block_size=block_size)
        blocks = tuple(block_size if d == ax else 1 for d in range(w.ndim))
        aimet_w = functional.quantize_dequantize(w, scale, (-zps).astype(np.float32), bits, signed, block_size=blocks)
    else:
        if scale.size > 1:
            ax = int(axis) % w.ndim
            shape = [scale.size if i == ax else 1 for i in range(w.ndim)]
            s, o = scale.reshape(shape), (-zps).astype(np.float32).reshape(shape)
            onnx_w = pqo.dequantize_linear(pqo.quantize_linear(w, scale, zp, axis=ax), scale, zp, axis=ax)
        else:
            s, o = scale.reshape(()), np.float32(-zps[0])
            zp = zp.reshape(())
            onnx_w = pqo.dequantize_linear(pqo.quantize_linear(w, s, zp), s, zp)
        aimet_w = functional._qdq_forward(w, s, o, (bits, signed), {}, training=False)
    differing = int(_differs(np.asarray(aimet_w, np.float32), np.asarray(onnx_w, np.float32)).sum())
    return f"its weight tensor: {differing} of {w.size} elements differ"


def convert_aimet(model: Any, encodings: Any, *, check: str = "sample") -> AimetResult:
    """The QDQ model of the float `model` (a ModelProto, path or bytes) with the Q/DQ parameters of the
    AIMET `encodings` (a path to the JSON file, or its dict), and the per-tensor report (module doc)."""
    from onnx import TensorProto
    from ..onnx.models import _load_model
    from .calibrate import _qdq_model
    m = _load_model(model, copy=True)
    enc = _load_encodings(encodings)
    version = str(enc.get("version", "")) if isinstance(enc, dict) else ""
    if version in LEGACY_VERSIONS:
        entries = _legacy_entries(enc, version, m.graph)
    elif version in SUPPORTED_VERSIONS:
        entries = enc.get("encodings")
        if not isinstance(entries, list):
            raise CommandError("encodings: a 2.x file holds a list 'encodings' of {name, output_dtype, y_scale, ...}")
    else:
        raise CommandError(f"encodings: version {version or '(none)'!r} is not converted; expected one of "
                           f"{', '.join(SUPPORTED_VERSIONS + LEGACY_VERSIONS)} (AIMET's encodings file)")
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    params = set(inits)
    tensors = params | {v.name for v in g.input} | {o for n in g.node for o in n.output}
    result = AimetResult(m, check=check)
    accepted, blocked_weights = [], []
    needs_opset_21 = []   # (report, what needs it): blocked pairs, and 4- / 16-bit Q/DQ types
    for e in entries:
        name = e.get("name") if isinstance(e, dict) else None
        kind = "param" if name in params else "activation"
        report = TensorReport(str(name), kind, "-", "refused")
        result.tensors.append(report)
        if name not in tensors:
            report.reason = f"no tensor named {name!r} in the model"
            continue
        if "refused" in e:  # a 1.0.0 / 0.6.1 encoding that has no Q/DQ form (_legacy_entries)
            report.reason = e["refused"]
            continue
        dtype = e.get("output_dtype")
        if dtype not in INTEGER_DTYPES:
            report.reason = f"output_dtype {dtype!r}: expected one of {', '.join(INTEGER_DTYPES)}"
            continue
        bits, signed = INTEGER_DTYPES[dtype]
        qmin, qmax = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        blocked = None
        if _is_blocked(e):
            if kind != "param":
                report.reason = ("blockwise / LPBQ encoding of an activation: only weights are converted blockwise "
                                 "(AIMET quantizes weights blockwise; ONNX's blocked y_scale must match the tensor's "
                                 "shape, which a model need not fix for an activation)")
                continue
            weight = inits[name]
            if weight.data_type != TensorProto.FLOAT:
                report.reason = (f"blockwise / LPBQ encoding of a weight of ONNX type {weight.data_type}: "
                                 "only float32 weights are converted blockwise")
                continue
            blocked = _blocked_parameters(e, list(weight.dims))
            if isinstance(blocked, str):
                report.reason = blocked
                continue
            scale, zps, axis = blocked.scale, blocked.zero_point, blocked.axis
        else:
            scale = np.asarray(e.get("y_scale"), np.float32).reshape(-1)
            zps = np.asarray(e.get("y_zero_point", 0), np.int64).reshape(-1)
            axis = e.get("axis")
        if scale.size == 0 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
            report.reason = f"y_scale {e.get('y_scale')!r:.60}: expected positive finite numbers"
            continue
        if blocked is None:
            zps = np.broadcast_to(zps, scale.shape)
        if np.any(zps < qmin) or np.any(zps > qmax):
            report.reason = f"y_zero_point outside {dtype}'s range {qmin}..{qmax}"
            continue
        if blocked is not None:
            report.params = (f"{dtype}, axis {axis}, block_size {blocked.block_size}, "
                             f"{int(np.prod(blocked.blocks, dtype=np.int64))} blocks" + (", LPBQ" if blocked.lpbq else ""))
        else:
            report.params = (f"{dtype}, scale {scale[0]:.9g}, zero point {zps[0]}" if scale.size == 1 else
                             f"{dtype}, axis {axis}, {scale.size} channels")
        report.status = "identical" if check != "none" else "unchecked"
        report.blockwise = blocked is not None
        if check != "none":
            _compare_parameters(report, scale, zps, dtype, check, blockwise=blocked is not None)
        notes = []
        if blocked is not None and blocked.lpbq:
            notes.append("LPBQ: y_scale = float32(per_block_int_scale * per_channel_float_scale), AIMET's block scale")
        if kind == "param" and check != "none":
            notes.append(_on_weight(inits[name], scale, zps, axis, bits, signed,
                                    0 if blocked is None else blocked.block_size))
        report.reason = "; ".join(n for n in notes if n)
        if blocked is not None:
            blocked_weights.append((name, blocked, dtype, report))
        else:
            accepted.append((SimpleNamespace(name=name, kind=kind), e))
        if blocked is not None:
            needs_opset_21.append((report, "blocked Q/DQ"))
        elif bits in (4, 16):
            needs_opset_21.append((report, f"{dtype} Q/DQ"))
    if needs_opset_21:
        m = _with_opset_21(m, needs_opset_21, result)
    if not result.refused:
        result.model = _insert_blocked_weights(_qdq_model(m, accepted), blocked_weights)
    return result


def _compare_parameters(report: TensorReport, scale: np.ndarray, zps: np.ndarray, dtype: str, check: str,
                        blockwise: bool) -> None:
    """The report's comparison: one per distinct (scale, zero point) of the tensor (a per-channel tensor's
    channels and a blockwise tensor's blocks often repeat one), each through polyquant diff's specs.
    AIMET's side is its no-grad quantize_dequantize: per tensor and per channel its shortcut (torch's
    fake quantization, x * (1 / scale)); with a block_size AIMET never takes that shortcut (aimet.md
    section 10: its eligibility excludes block_size) and runs its formula
    (clamp(round(x / scale) - offset, qmin, qmax) + offset) * scale, which polyquant diff's spec names
    path=formula (an alias of path=training)."""
    bits, signed = INTEGER_DTYPES[dtype]
    qmin, qmax = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    path = ", path=formula" if blockwise else ""
    for s, z in sorted(set(zip(scale.reshape(-1).tolist(), zps.reshape(-1).tolist()))):
        a_spec = (f"aimet:quantize_dequantize(scale={float(np.float32(s))!r}, offset={-int(z)}, bitwidth={bits}, "
                  f"signed={signed}{path})")
        o_spec = f"onnx:QDQ(scale={float(np.float32(s))!r}, zero_point={int(z)}, dtype={dtype})"
        n, differing, kinds, example = _compare(a_spec, o_spec, float(np.float32(s)), int(z), qmin, qmax, check)
        report.checked += n
        if differing:
            report.status = "differs"
            report.differing += differing
            for k, c in kinds.items():
                report.kinds[k] = report.kinds.get(k, 0) + c
            if not report.example:
                report.example, report.specs = example, (a_spec, o_spec)
        if not report.specs:
            report.specs = (a_spec, o_spec)


# ---- blockwise and LPBQ weights ----------------------------------------------------------------------------
# ONNX's blocked Q/DQ (opset 21): y_scale has the rank of x and x's shape but along `axis`, where it has
# x.shape[axis] / block_size entries; element j uses y_scale[j with j_axis // block_size]. AIMET's blockwise
# quantizer (aimet.md section 2) holds its scale in its own shape S, right-aligned to the weight: along the
# block axis S_a = W_a / B, along every other axis S_d = W_d (one scale per channel) or 1 (shared). So the
# encoding's scale, broadcast to the weight's shape but the block axis, is the Q/DQ's y_scale: the same
# float32 values, copied.

BLOCKED_OPSET = 21   # the first standard opset whose QuantizeLinear / DequantizeLinear take block_size
BLOCKED_IR_VERSION = 10  # the IR version of opset 21 (int4 / uint4 tensors)
LPBQ_MAX_INT_SCALE = 1 << 24  # float32 holds every integer up to 2^24 exactly (AIMET keeps its integer scales in float32)


@dataclass
class _Blocked:
    scale: np.ndarray       # float32: the Q/DQ's y_scale (the weight's shape, W_a / block_size along the axis)
    zero_point: np.ndarray  # int64, the same shape
    axis: int               # the block axis as the encoding gives it (negative counts from the back, as in ONNX)
    block_size: int
    blocks: tuple           # the encoding's own scale shape (AIMET's quantizer shape, left-padded with 1s)
    lpbq: bool


def _is_blocked(e: dict) -> bool:
    return "block_size" in e or "per_block_int_scale" in e or isinstance(e.get("y_scale"), dict)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _numbers(value, field_name: str):
    """A number or (nested) list of numbers as a float64 array, or the reason it is not."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        a = None
    if a is None or a.dtype.kind not in "iuf" or a.size == 0:
        return f"{field_name} {value!r:.60}: expected a number or a (nested) list of numbers"
    return a.astype(np.float64)


def _blocked_parameters(e: dict, dims: list):
    """A 2.x blockwise or LPBQ entry on a weight of shape `dims` as the Q/DQ's parameters (_Blocked), or the
    reason it has none: the field at fault and what it may hold."""
    rank = len(dims)
    if 0 in dims:
        return f"a weight of shape {dims} has no elements: there are no blocks to quantize"
    block = e.get("block_size")
    if not _is_int(block) or block < 1:
        return f"block_size {block!r}: expected a positive integer (the weight's elements per block along 'axis')"
    block = int(block)
    axis = e.get("axis")
    if rank == 0 or not _is_int(axis) or not -rank <= axis < rank:
        return (f"axis {axis!r}: expected the block axis, an integer in {-rank}..{rank - 1} for the weight of "
                f"shape {dims}")
    axis = int(axis)
    a = axis % rank
    if dims[a] % block:
        return (f"block_size {block} does not divide the weight's axis {axis} (length {dims[a]}): AIMET's blocks "
                f"tile the axis exactly; allowed block sizes divide {dims[a]}")
    lpbq = "per_block_int_scale" in e or isinstance(e.get("y_scale"), dict)
    if lpbq:
        ys = e.get("y_scale")
        if isinstance(ys, dict):  # 2.1.0: y_scale = {x: integer scales, x_scale: per-channel scales, axis}
            ints_field, pc_field = "y_scale.x", "y_scale.x_scale"
            ints_value, pc_value = ys.get("x"), ys.get("x_scale")
            pc_axis = ys.get("axis")
            if pc_axis is not None and not _is_int(pc_axis):
                return f"y_scale.axis {pc_axis!r}: expected the channel axis, an integer"
        else:                     # 2.0.0: per_block_int_scale and per_channel_float_scale
            ints_field, pc_field = "per_block_int_scale", "per_channel_float_scale"
            ints_value, pc_value = e.get("per_block_int_scale"), e.get("per_channel_float_scale")
        zp = e.get("y_zero_point")
        if zp is not None and (isinstance(_numbers(zp, "y_zero_point"), str) or np.any(np.asarray(zp) != 0)):
            return f"y_zero_point {zp!r:.60}: LPBQ is symmetric; expected null (or zeros)"
        ints = _numbers(ints_value, ints_field)
        if isinstance(ints, str):
            return ints
        if not np.all(ints == np.round(ints)) or ints.min() < 1:
            return (f"{ints_field}: expected positive integers (AIMET's per-block scales, 1..2^(decompressed_bw - "
                    f"bitwidth)), got {ints_value!r:.60}")
        if ints.max() > LPBQ_MAX_INT_SCALE:
            return (f"{ints_field}: integers up to {LPBQ_MAX_INT_SCALE} (2^24) are converted, got {int(ints.max())}: "
                    "AIMET holds its per-block integer scales in float32, which rounds integers above 2^24, so the "
                    "file does not hold the integers its block scales were formed with "
                    "(decompressed_bw - bitwidth <= 24 always fits)")
        shape = _block_layout(ints.shape, dims, a, block, ints_field)
        if isinstance(shape, str):
            return shape
        ints = ints.reshape(shape)
        pc = _numbers(pc_value, pc_field)
        if isinstance(pc, str):
            return pc
        if not np.all(np.isfinite(pc)) or not np.all(pc > 0):
            return f"{pc_field} {pc_value!r:.60}: expected positive finite numbers"
        pc = _channel_scale_per_block(pc.astype(np.float32), shape, a, pc_field, ints_field)
        if isinstance(pc, str):
            return pc
        # AIMET's block scale (GroupedBlockQuantizeDequantize, aimet.md section 5): quantize_dequantize of the
        # raw block scale on the grid [1, 2^k] with scale pc and offset 0, i.e. (q + 0) * pc, q being the
        # integer it exports as per_block_int_scale. It multiplies in its working precision (float32 for
        # k < 22, float64 from there) and casts to float32. With q <= 2^24 and pc a float32 the exact
        # product has at most 48 significant bits, so the float64 product is exact and both round the exact
        # product once to float32: float32(q * pc), which one float32 multiplication computes (the factors
        # commute).
        with np.errstate(over="ignore"):
            scale_blocks = ints.astype(np.float32) * pc
        if not np.all(np.isfinite(scale_blocks)) or not np.all(scale_blocks > 0):
            return (f"{ints_field} * {pc_field}: the block scales overflow float32 (or underflow to 0); "
                    "expected positive finite products")
        zero_blocks = np.zeros(shape, np.int64)
    else:
        scale_blocks = _numbers(e.get("y_scale"), "y_scale")
        if isinstance(scale_blocks, str):
            return scale_blocks
        shape = _block_layout(scale_blocks.shape, dims, a, block, "y_scale")
        if isinstance(shape, str):
            return shape
        scale_blocks = scale_blocks.astype(np.float32).reshape(shape)
        zp = e.get("y_zero_point")
        zero_blocks = np.zeros(shape, np.float64) if zp is None else _numbers(zp, "y_zero_point")
        if isinstance(zero_blocks, str):
            return zero_blocks
        if zero_blocks.size != 1 and zero_blocks.size != scale_blocks.size:
            return (f"y_zero_point: {zero_blocks.size} values for the {scale_blocks.size} blocks of y_scale; "
                    "expected one per block (y_scale's shape) or one for all")
        if not np.all(zero_blocks == np.round(zero_blocks)):
            return f"y_zero_point {zp!r:.60}: expected integers"
        zero_blocks = np.broadcast_to(zero_blocks.reshape(shape if zero_blocks.size > 1 else ()), shape).astype(np.int64)
    q_shape = [n // block if d == a else n for d, n in enumerate(dims)]
    return _Blocked(np.ascontiguousarray(np.broadcast_to(scale_blocks, q_shape), np.float32),
                    np.ascontiguousarray(np.broadcast_to(zero_blocks, q_shape), np.int64), axis, block, shape, lpbq)


def _block_layout(shape: tuple, dims: list, a: int, block: int, field_name: str):
    """The encoding's scale shape, left-padded with 1s to the weight's rank (AIMET right-aligns it), checked
    against the weight: W_a / block_size blocks along the block axis a, along each other axis the weight's
    length or 1. The padded shape, or the reason."""
    rank = len(dims)
    expected = [n // block if d == a else n for d, n in enumerate(dims)]
    if len(shape) > rank:
        return f"{field_name} has shape {list(shape)}, more axes than the weight (shape {dims}); expected {expected}"
    padded = (1,) * (rank - len(shape)) + tuple(int(n) for n in shape)
    if padded[a] != dims[a] // block:
        return (f"{field_name} has {padded[a]} blocks along axis {a - rank} (shape {list(shape)}); the weight's "
                f"{dims[a]} elements in blocks of {block} make {dims[a] // block}: expected shape {expected}")
    for d, (n, w) in enumerate(zip(padded, dims)):
        if d != a and n not in (1, w):
            return (f"{field_name} has shape {list(shape)}: along axis {d - rank} it has {n} entries; expected the "
                    f"weight's {w} (per channel) or 1 (shared), e.g. shape {expected}")
    return padded


def _channel_scale_per_block(pc: np.ndarray, shape: tuple, a: int, pc_field: str, ints_field: str):
    """LPBQ's per-channel float scale repeated onto the blocks it scales (AIMET's block_grouping: each group
    of consecutive blocks shares one). Nested (2.0.0, the rank of the integer scales): each axis of the
    integer scales a multiple of its own. Flat (2.1.0's x_scale, 1.0.0's scale): groups along the block
    axis, which the count tells: n blocks, m scales -> groups of n / m blocks (all of a channel's blocks
    when m is the number of channels)."""
    n = int(np.prod(shape, dtype=np.int64))
    if pc.ndim > 1:
        if pc.ndim <= len(shape):  # right-aligned, as the integer scales are
            pc = pc.reshape((1,) * (len(shape) - pc.ndim) + pc.shape)
        if pc.ndim != len(shape) or any(s % c for s, c in zip(shape, pc.shape)):
            return (f"{pc_field} has shape {list(pc.shape)}: each of its axes must divide the blocks' "
                    f"{list(shape)} ({ints_field}), one scale per group of blocks")
        for d, (s, c) in enumerate(zip(shape, pc.shape)):
            pc = np.repeat(pc, s // c, axis=d)
        return pc
    m = pc.size
    group = n // m if m and n % m == 0 else 0
    if not group or shape[a] % group:
        return (f"{pc_field}: {m} per-channel scales for the {n} blocks of {ints_field} (shape {list(shape)}); "
                f"expected one per group of consecutive blocks along the block axis, e.g. "
                f"{n // shape[a]} (one per channel)")
    grouped = list(shape)
    grouped[a] = shape[a] // group
    return np.repeat(pc.reshape(grouped), group, axis=a)


def _with_opset_21(m, needing: list, result: AimetResult):
    """The model with a standard opset import of at least 21, which blocked Q/DQ and the 4- and 16-bit
    Q/DQ types need: raised by onnx's version converter, which rewrites the nodes whose operators
    changed on the way; where it cannot, the tensors that need it (`needing`: (report, what needs it))
    are refused by name (and nothing is written)."""
    from onnx import version_converter
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= BLOCKED_OPSET:
        return m
    try:
        raised = version_converter.convert_version(m, BLOCKED_OPSET)
    except Exception as exc:  # the converter raises RuntimeError / ValueError / its own errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        for r, what in needing:
            r.status = "refused"
            r.reason = (f"{what} needs the standard opset {BLOCKED_OPSET}; the model imports opset {opset} and "
                        f"onnx's version converter cannot raise it ({first:.160})")
        return m
    raised.ir_version = max(raised.ir_version, BLOCKED_IR_VERSION)
    whats = ", ".join(dict.fromkeys(what for _, what in needing))
    result.notes.append(f"the model's standard opset was raised from {opset} to {BLOCKED_OPSET} (onnx's version "
                        f"converter) for the {whats}")
    return raised


def _insert_blocked_weights(model, blocked_weights: list):
    """Each blocked weight stored as the integers of ONNX's blocked QuantizeLinear of the float weight with
    the encoding's parameters, and a DequantizeLinear (axis, block_size) its consumers read: the layout of
    calibrate's _qdq_model for weights (NAME__quantized, NAME__scale, NAME__zero_point, NAME__dequantized)."""
    if not blocked_weights:
        return model
    from onnx import helper, numpy_helper
    from .. import onnx as pqo
    from .quantized_model import _Names
    g = model.graph
    fresh = _Names(g)
    inits = {t.name: t for t in g.initializer}
    new_nodes, replaced = [], {}
    for name, b, dtype, _ in blocked_weights:
        w = numpy_helper.to_array(inits[name])
        zero = b.zero_point.astype(INTEGER_NUMPY[INTEGER_DTYPES[dtype]])
        q = pqo.quantize_linear(w, b.scale, zero, axis=b.axis, block_size=b.block_size)
        q_name, s_name, z_name = fresh(f"{name}__quantized"), fresh(f"{name}__scale"), fresh(f"{name}__zero_point")
        g.initializer.extend([numpy_helper.from_array(q, q_name), numpy_helper.from_array(b.scale, s_name),
                              numpy_helper.from_array(zero, z_name)])
        out = fresh(f"{name}__dequantized")
        new_nodes.append(helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [out],
                                          name=fresh(f"{name}__DequantizeLinear"), axis=b.axis,
                                          block_size=b.block_size))
        replaced[name] = out
    for node in g.node:
        for i, inp in enumerate(node.input):
            if inp in replaced:
                node.input[i] = replaced[inp]
    # the DequantizeLinears read only initializers: first in the graph keeps it topologically sorted
    nodes = new_nodes + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    still_used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    kept = [t for t in g.initializer if t.name not in replaced or t.name in still_used]
    del g.initializer[:]
    g.initializer.extend(kept)
    return model


# ---- 1.0.0 / 0.6.1 files ----------------------------------------------------------------------------------

def _legacy_entries(enc: dict, version: str, graph) -> list:
    """The encodings of a 1.0.0 or 0.6.1 file as the 2.x entries the converter reads: each encoding
    (1.0.0: {name, dtype, bw, is_sym, scale, offset, enc_type}; 0.6.1: one {bitwidth, is_symmetric,
    scale, offset, min, max} per channel) read by polyquant.aimet.encodings.encoding_from_qnn_dict,
    the reader of what AIMET exports, which gives the scale, AIMET's offset and the integer grid; the
    grid is the output dtype and -offset the zero point, the same parameters AIMET's 2.x export of
    that quantizer holds. 1.0.0 PER_BLOCK / LPBQ encodings become the 2.x blockwise / LPBQ entry of
    the same quantizer (_legacy_blocked_entry), and any other encoding without a Q/DQ form gets a
    `refused` reason."""
    from ..aimet.encodings import encoding_from_qnn_dict
    entries = []
    for key in ("activation_encodings", "param_encodings"):
        section = enc.get(key, [] if version == "1.0.0" else {})
        if version == "1.0.0":
            if not isinstance(section, list):
                raise CommandError(f"encodings: a 1.0.0 file's {key!r} is a list of {{name, bw, scale, offset, ...}}")
            items = [(e.get("name") if isinstance(e, dict) else None, e) for e in section]
        else:
            if not isinstance(section, dict):
                raise CommandError(f"encodings: a 0.6.1 file's {key!r} maps tensor names to lists of "
                                   "{bitwidth, scale, offset, ...}")
            items = list(section.items())
        for name, d in items:
            entries.append(_legacy_entry(name, d, version, graph, encoding_from_qnn_dict))
    return entries


def _legacy_entry(name, d, version: str, graph, read) -> dict:
    if version == "1.0.0" and isinstance(d, dict) and d.get("enc_type") in ("PER_BLOCK", "LPBQ"):
        return _legacy_blocked_entry(name, d, graph, read)
    if version == "0.6.1":
        count = len(d) if isinstance(d, list) else 1
    else:
        scale = d.get("scale") if isinstance(d, dict) else None
        count = len(scale) if isinstance(scale, list) else 1
    try:
        p = read(d, version, (count,))
    except (TypeError, ValueError) as exc:
        return {"name": name, "refused": f"{version} encoding: {exc}"}
    qmin, qmax = int(p["qmin"]), int(p["qmax"])
    bits = (qmax - qmin + 1).bit_length() - 1
    zps = -np.asarray(p["offset"], np.float64)
    if not np.all(zps == np.round(zps)):
        return {"name": name, "refused": f"{version} encoding: offset {(-zps).tolist()!r:.60} is not an integer"}
    entry = {"name": name, "output_dtype": f"{'int' if qmin < 0 else 'uint'}{bits}",
             "y_scale": np.asarray(p["scale"], np.float32).tolist(), "y_zero_point": zps.astype(np.int64).tolist()}
    if count > 1:
        axis = _channel_axis(graph, name, count, version)
        if isinstance(axis, str):
            return {"name": name, "refused": axis}
        entry["axis"] = axis
    return entry


def _legacy_blocked_entry(name, d: dict, graph, read) -> dict:
    """A 1.0.0 PER_BLOCK or LPBQ encoding as the 2.x entry of the same quantizer (2.0.0's layout for LPBQ).
    1.0.0 keeps the scales flat and the block size of the blocked axis only, not AIMET's quantizer shape:
    the shape and block axis come from the weight (_legacy_block_layout). LPBQ: 'bw' is the decompressed
    bitwidth, 'compressed_bw' the grid's, 'scale' the per-channel float scales; the integer scales are
    checked against 1..2^(bw - compressed_bw), the range AIMET rounds them into."""
    enc_type = d["enc_type"]
    block = d.get("block_size")
    if not _is_int(block) or block < 1:
        return {"name": name, "refused": f"1.0.0 {enc_type} encoding: block_size {block!r}: expected a positive integer"}
    key = "per_block_int_scale" if enc_type == "LPBQ" else "scale"
    values = d.get(key)
    count = len(values) if isinstance(values, list) else 1
    layout = _legacy_block_layout(graph, name, count, int(block), enc_type)
    if isinstance(layout, str):
        return {"name": name, "refused": layout}
    shape, axis = layout
    try:
        p = read(d, "1.0.0", shape)
    except (TypeError, ValueError) as exc:
        return {"name": name, "refused": f"1.0.0 encoding: {exc}"}
    qmin, qmax = int(p["qmin"]), int(p["qmax"])
    bits = (qmax - qmin + 1).bit_length() - 1
    entry = {"name": name, "axis": axis, "block_size": int(block)}
    if p.get("lpbq"):
        levels = 2 ** (p["decompressed_bw"] - bits)
        ints = np.asarray(p["per_block_int_scale"], np.float64)
        if not np.all(ints == np.round(ints)) or ints.min() < 1 or ints.max() > levels:
            return {"name": name, "refused": f"1.0.0 LPBQ encoding: per_block_int_scale must hold integers in "
                                             f"1..2^(bw - compressed_bw) = 1..{levels}, got {values!r:.60}"}
        entry.update({"output_dtype": f"int{bits}", "per_block_int_scale": ints.astype(np.int64).tolist(),
                      "per_channel_float_scale": np.asarray(p["per_channel_scale"], np.float32).reshape(-1).tolist()})
        return entry
    zps = -np.asarray(p["offset"], np.float64)
    if not np.all(zps == np.round(zps)):
        return {"name": name, "refused": f"1.0.0 encoding: offset {(-zps).tolist()!r:.60} is not an integer"}
    entry.update({"output_dtype": f"{'int' if qmin < 0 else 'uint'}{bits}",
                  "y_scale": np.asarray(p["scale"], np.float32).tolist(), "y_zero_point": zps.astype(np.int64).tolist()})
    return entry


def _legacy_block_layout(graph, name: str, count: int, block: int, enc_type: str):
    """(AIMET's quantizer shape, block axis) of a 1.0.0 blockwise encoding of `count` blocks of `block`
    elements on weight `name`, or the reason it cannot be told. A layout divides one axis a into blocks
    (W_a / block entries) and keeps each other axis per channel (W_d) or shared (1); those whose entries
    number `count` fit. Several fit (a square weight, say): the consumer's output channel axis must be
    per channel and not blocked, and AIMET's layout has its channel and block axes among the first two."""
    import itertools
    init = next((t for t in graph.initializer if t.name == name), None)
    if init is None:
        return (f"1.0.0 {enc_type} encoding of an activation: only weights are converted blockwise (AIMET quantizes "
                f"weights blockwise)")
    dims = [int(n) for n in init.dims]
    layouts = {}
    for a, n in enumerate(dims):
        if n % block:
            continue
        choices = [(n // block,) if d == a else tuple(sorted({1, w})) for d, w in enumerate(dims)]
        for shape in itertools.product(*choices):
            if int(np.prod(shape, dtype=np.int64)) == count:
                layouts.setdefault(shape, a)
    if not layouts:
        return (f"1.0.0 {enc_type} encoding of {count} blocks of {block} on a weight of shape {dims}: no layout fits "
                f"(one axis in blocks of {block}, each other axis per channel or shared)")
    if len(layouts) > 1:
        channel = _consumer_channel_axis(graph, name, len(dims))
        layouts = {s: a for s, a in layouts.items() if channel is not None and a != channel and s[channel] == dims[channel]}
        if len(layouts) > 1:
            layouts = {s: a for s, a in layouts.items() if all(n == 1 for n in s[2:])}
        if len(layouts) != 1:
            return (f"1.0.0 {enc_type} encoding of {count} blocks of {block} on a weight of shape {dims}: several "
                    f"layouts of the blocks fit and the weight's consumer does not tell which")
    shape, axis = next(iter(layouts.items()))
    return shape, axis


# The weight's channel axis by its consumer, where the weight's shape alone does not tell: AIMET's
# output channels (Conv: 0; ConvTranspose: 1; Gemm: 0 with transB, else 1; MatMul: the last).
def _consumer_channel_axis(graph, name: str, rank: int):
    for node in graph.node:
        if len(node.input) > 1 and node.input[1] == name:
            if node.op_type == "Conv":
                return 0
            if node.op_type == "ConvTranspose":
                return 1
            if node.op_type == "Gemm":
                trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
                return 0 if trans_b else 1
            if node.op_type == "MatMul":
                return rank - 1
    return None


def _channel_axis(graph, name: str, count: int, version: str):
    """The axis of a per-channel encoding with `count` channels on tensor `name`, which 1.0.0 / 0.6.1
    files do not record, or the reason it cannot be told."""
    init = next((t for t in graph.initializer if t.name == name), None)
    if init is None:
        return (f"{version} encoding with {count} channels on an activation: the file does not record the "
                f"axis (per-tensor activations and per-channel weights are converted)")
    dims = list(init.dims)
    axes = [i for i, n in enumerate(dims) if n == count]
    if len(axes) == 1:
        return axes[0]
    axis = _consumer_channel_axis(graph, name, len(dims))
    if axis in axes:
        return axis
    return (f"{version} encoding with {count} channels on a weight of shape {dims}: no axis of that length"
            if not axes else f"{version} encoding with {count} channels on a weight of shape {dims}: the axis is "
                             f"one of {axes} and its consumer does not tell which")


# ---- back: a QDQ model -> AIMET encodings (2.1.0) --------------------------------------------------------

_DTYPE_NAMES = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 21: "uint4", 22: "int4"}
# polyquant calibrate's / this converter's layout renames the quantized tensor NAME to NAME__float (an
# activation's producer output) or stores a weight as NAME__quantized; onnxruntime's quantizer stores it
# as NAME_quantized. The encoding names the float model's tensor, so these suffixes are taken off.
_LAYOUT_SUFFIXES = ("__float", "__quantized", "_quantized")


@dataclass
class EncodingsResult:
    encodings: dict
    tensors: list = field(default_factory=list)   # TensorReport rows (status "written" or "refused")
    model: Any = None

    @property
    def refused(self) -> list:
        return [t for t in self.tensors if t.status == "refused"]

    def __str__(self) -> str:
        if not self.tensors:
            return "no QuantizeLinear / DequantizeLinear: no encodings"
        rows = [("tensor", "from", "encoding")] + [(t.name, t.kind, t.params if t.status != "refused" else
                                                   f"refused: {t.reason}") for t in self.tensors]
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}" for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.append(f"{len(self.tensors) - len(self.refused)} of {len(self.tensors)} Q/DQ parameters written as AIMET "
                     f"2.1.0 encodings, bit for bit" + (f"; {len(self.refused)} refused" if self.refused else ""))
        return "\n".join(lines)


def _float_name(name: str) -> str:
    for suffix in _LAYOUT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _legacy_encoding(entry: dict, version: str, dims: list, axis) -> Any:
    """A 2.1.0 entry as a 1.0.0 (dict) or 0.6.1 (list of dicts) encoding, written by polyquant.aimet's
    AffineEncoding, AIMET's own export: the dtype's grid, offset -zero point, symmetric when every zero
    point is the grid's centroid (as AIMET's 2.x export writes a symmetric quantizer), the scale shaped
    as AIMET's quantizer (per channel: one axis of the weight's rank; blocked: the entry's nested scale,
    with block size W_d / S_d on each axis, given the weight's shape `dims` as AIMET's input-shape hint:
    its 1.0.0 PER_BLOCK export, which refuses what AIMET refuses)."""
    import math
    from ..aimet.encodings import AffineEncoding
    bits, signed = INTEGER_DTYPES[entry["output_dtype"]]
    qmin, qmax = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    scale = np.asarray(entry["y_scale"], np.float32)
    zp = np.broadcast_to(np.asarray(entry.get("y_zero_point", 0), np.int64), scale.shape)
    symmetric = bool(np.all(zp == math.ceil((qmin + qmax) / 2)))
    offset = (-zp).astype(np.float32)
    if "block_size" in entry:
        blocks = tuple(int(w) // int(n) for w, n in zip(dims, scale.shape))
        encoding = AffineEncoding(scale, offset, qmin, qmax, symmetric, blocks)
        return encoding.to_qnn_encoding_dict(version, input_shape=dims)
    scale, offset = scale.reshape(-1), offset.reshape(-1)
    shape = ()
    if scale.size > 1:
        shape = [1] * len(dims)
        shape[axis % len(dims)] = scale.size
    encoding = AffineEncoding(scale.reshape(shape), offset.reshape(shape), qmin, qmax, symmetric)
    return encoding.to_qnn_encoding_dict(version)


def _aimet_block_shape(scale: np.ndarray, zp: np.ndarray, axis: int):
    """A blocked Q/DQ's scale and zero point in AIMET's quantizer shape: ONNX repeats them along every
    axis but the block axis, where AIMET's blockwise weight quantizer keeps its channel and block axes
    among the first two and holds 1 on the others (a Conv weight's kernel axes: scale (C_out, C_in / B,
    1, 1)). So an axis beyond the first two on which neither changes is written as 1; the values each
    element uses are the same."""
    rank = scale.ndim
    block_axis = axis % rank if rank else 0
    for d in range(2, rank):
        if d == block_axis or scale.shape[d] == 1:
            continue
        first_s, first_z = np.take(scale, [0], axis=d), np.take(zp, [0], axis=d)
        if np.array_equal(scale.view(np.uint32), np.broadcast_to(first_s, scale.shape).view(np.uint32)) \
                and np.array_equal(zp, np.broadcast_to(first_z, zp.shape)):
            scale, zp = first_s, first_z
    return np.ascontiguousarray(scale), np.ascontiguousarray(zp)


def to_encodings(model: Any, version: str = "2.1.0") -> EncodingsResult:
    """AIMET encodings of a QDQ model's QuantizeLinear -> DequantizeLinear pairs and its
    DequantizeLinears of integer weight initializers, named after the float tensor each quantizes
    (module constants: the layouts' suffixes are removed). 2.1.0 (the default): y_scale, y_zero_point,
    axis, block_size and the output dtype, copied bit for bit (a float32 scale's shortest repr reads
    back as the same float32). 1.0.0 / 0.6.1: the same quantizers in AIMET's older layouts
    (_legacy_encoding), per tensor and per channel (a blocked pair is refused: those files hold no
    blocks); a symmetric unsigned pair (zero point 128 on uint8) reads back as int8 with zero point 0,
    the same values."""
    from onnx import helper, numpy_helper
    from ..onnx.models import _load_model
    from .. import __version__
    if version not in SUPPORTED_VERSIONS[1:] + LEGACY_VERSIONS:
        raise CommandError(f"encoding_version: expected 2.1.0, 1.0.0 or 0.6.1, got {version!r}")
    m = _load_model(model, copy=False)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    result = EncodingsResult({"producer": {"package": "polyquant", "version": __version__}, "version": "2.1.0",
                              "encodings": []})
    legacy = {"activation_encodings": [] if version == "1.0.0" else {},
              "param_encodings": [] if version == "1.0.0" else {}}
    seen = set()

    def attr(node, name, default):
        return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)

    for node in g.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        if node.op_type == "DequantizeLinear" and node.input[0] not in inits:
            continue  # the DQ of a pair: its Q speaks for it
        if node.op_type == "DequantizeLinear" and inits[node.input[0]].data_type not in _DTYPE_NAMES:
            continue
        kind = "activation" if node.op_type == "QuantizeLinear" else "param"
        name = _float_name(node.input[0])
        report = TensorReport(name, kind, "-", "refused")
        result.tensors.append(report)
        users = [n for n in g.node if node.output[0] in n.input]
        if kind == "activation" and (not users or any(u.op_type != "DequantizeLinear" for u in users)):
            report.reason = ("its integers reach " + (", ".join(sorted({u.op_type for u in users})) or "no node") +
                             ", not only DequantizeLinear: an encoding holds the output dtype's whole grid (a Clip "
                             "narrowing it, or integer consumers, have no encoding)")
            continue
        scale_t = inits.get(node.input[1])
        zp_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
        zp_t = inits.get(zp_name) if zp_name else None
        if scale_t is None or (zp_name and zp_t is None):
            report.reason = "scale or zero point is not an initializer"
            continue
        ztype = zp_t.data_type if zp_t is not None else (
            inits[node.input[0]].data_type if kind == "param" else (attr(node, "output_dtype", 0) or 2))
        if ztype not in _DTYPE_NAMES:
            report.reason = f"type {ztype} has no AIMET integer encoding"
            continue
        if name in seen:
            report.reason = f"a second quantizer of {name!r}: an encodings file holds one per tensor"
            continue
        seen.add(name)
        scale = numpy_helper.to_array(scale_t).astype(np.float32)
        zp = (numpy_helper.to_array(zp_t).astype(np.int64) if zp_t is not None
              else np.zeros(scale.shape, np.int64))
        block_size, axis = int(attr(node, "block_size", 0)), int(attr(node, "axis", 1))
        entry = {"name": name, "output_dtype": _DTYPE_NAMES[ztype]}
        if block_size:
            # nested, in AIMET's quantizer shape (_aimet_block_shape); y_zero_point likewise
            scale, zp = _aimet_block_shape(scale, np.broadcast_to(zp, scale.shape), axis)
            entry["y_scale"] = scale.tolist()
            if np.any(zp != 0):
                entry["y_zero_point"] = zp.tolist()
        else:
            entry["y_scale"] = [float(v) for v in scale.reshape(-1)]
            if np.any(zp != 0):
                entry["y_zero_point"] = [int(v) for v in zp.reshape(-1)]
        if scale.size > 1 or block_size:
            entry["axis"] = axis
        if block_size:
            entry["block_size"] = block_size
        if version in LEGACY_VERSIONS:
            if "block_size" in entry and (version == "0.6.1" or kind == "activation"):
                report.reason = (f"blocked: a 0.6.1 file holds no blockwise encodings (1.0.0 and 2.1.0 do)"
                                 if version == "0.6.1" else
                                 f"blocked activation: a {version} file does not record its shape (2.1.0 does)")
                continue
            dims = list(inits[node.input[0]].dims) if kind == "param" else [scale.size]
            if scale.size > 1 and kind == "activation":
                report.reason = f"per-channel activation: a {version} file does not record its axis (2.1.0 does)"
                continue
            try:
                d = _legacy_encoding(entry, version, dims, entry.get("axis", 0))
            except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
                report.reason = f"AIMET's {version} export of these parameters fails: {exc}"
                continue
            section = legacy["param_encodings" if kind == "param" else "activation_encodings"]
            if version == "1.0.0":
                section.append({"name": name, **d})
            else:
                section[name] = d
        else:
            result.encodings["encodings"].append(entry)
        report.status = "written"
        report.params = (f"{entry['output_dtype']}, " + (f"scale {scale.reshape(-1)[0]:.9g}" if scale.size == 1 else
                         f"axis {entry['axis']}, {scale.size} scales") +
                         (f", block_size {entry['block_size']}" if "block_size" in entry else ""))
    if version in LEGACY_VERSIONS:
        result.encodings = {"producer": result.encodings["producer"], "version": version, **legacy,
                            "excluded_layers": []}
    return result
