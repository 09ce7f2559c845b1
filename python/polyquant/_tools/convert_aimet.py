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
y_zero_point, axis}) and 1.0.0 / 0.6.1 files (activation_encodings and param_encodings with AIMET's
scale and offset, read by polyquant.aimet's reader of AIMET's export; see _legacy_entries) are
converted, per tensor and per channel; blockwise (block_size) and LPBQ encodings and names that are
no tensor of the model are refused by name (then nothing is written).

Back (`--to aimet`, to_encodings): a QDQ model's Q/DQ parameters as AIMET 2.1.0 encodings, bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np

from .runner import CommandError

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


@dataclass
class AimetResult:
    model: Any
    tensors: list = field(default_factory=list)
    check: str = "sample"

    @property
    def refused(self) -> list:
        return [t for t in self.tensors if t.status == "refused"]

    @property
    def differing(self) -> list:
        return [t for t in self.tensors if t.status == "differs"]

    def __str__(self) -> str:
        if not self.tensors:
            return "no encodings: nothing to convert"
        rows = [("tensor", "kind", "Q/DQ", "ONNX's division vs AIMET's reciprocal (no-grad path)")]
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
        sample = "every rounding tie and its float32 neighbours" if self.check == "sample" else "every float32 input"
        if self.differing:
            lines.append(f"NOTE: on {len(self.differing)} tensor(s) ONNX's QuantizeLinear (x / scale) rounds some inputs "
                         f"differently from AIMET's no-grad quantize_dequantize (x * (1 / scale)); checked on {sample}. "
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


def _on_weight(tensor, scale: np.ndarray, zps: np.ndarray, axis, bits: int, signed: bool) -> str:
    """How many elements of the weight tensor itself AIMET's no-grad quantize_dequantize and ONNX's Q/DQ
    (what the written model stores and computes) give differently."""
    from onnx import numpy_helper
    from .. import onnx as pqo
    from ..aimet import functional
    from .diff import _differs
    w = numpy_helper.to_array(tensor)
    if w.dtype != np.float32:
        return ""
    if scale.size > 1:
        ax = int(axis) % w.ndim
        shape = [scale.size if i == ax else 1 for i in range(w.ndim)]
        s, o = scale.reshape(shape), (-zps).astype(np.float32).reshape(shape)
        zp = zps.astype(INTEGER_NUMPY[(bits, signed)])
        onnx_w = pqo.dequantize_linear(pqo.quantize_linear(w, scale, zp, axis=ax), scale, zp, axis=ax)
    else:
        s, o = scale.reshape(()), np.float32(-zps[0])
        zp = zps.astype(INTEGER_NUMPY[(bits, signed)]).reshape(())
        onnx_w = pqo.dequantize_linear(pqo.quantize_linear(w, s, zp), s, zp)
    aimet_w = functional._qdq_forward(w, s, o, (bits, signed), {}, training=False)
    differing = int(_differs(np.asarray(aimet_w, np.float32), np.asarray(onnx_w, np.float32)).sum())
    return f"its weight tensor: {differing} of {w.size} elements differ"


def convert_aimet(model: Any, encodings: Any, *, check: str = "sample") -> AimetResult:
    """The QDQ model of the float `model` (a ModelProto, path or bytes) with the Q/DQ parameters of the
    AIMET `encodings` (a path to the JSON file, or its dict), and the per-tensor report (module doc)."""
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
    params = {t.name for t in g.initializer}
    tensors = params | {v.name for v in g.input} | {o for n in g.node for o in n.output}
    result = AimetResult(m, check=check)
    accepted = []
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
        if "block_size" in e or "per_block_int_scale" in e or isinstance(e.get("y_scale"), dict):
            report.reason = "blockwise / LPBQ encoding: not converted yet (per-tensor and per-channel are)"
            continue
        dtype = e.get("output_dtype")
        if dtype not in INTEGER_DTYPES:
            report.reason = f"output_dtype {dtype!r}: expected one of {', '.join(INTEGER_DTYPES)}"
            continue
        bits, signed = INTEGER_DTYPES[dtype]
        qmin, qmax = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        scale = np.asarray(e.get("y_scale"), np.float32).reshape(-1)
        zps = np.asarray(e.get("y_zero_point", 0), np.int64).reshape(-1)
        if scale.size == 0 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
            report.reason = f"y_scale {e.get('y_scale')!r:.60}: expected positive finite numbers"
            continue
        zps = np.broadcast_to(zps, scale.shape)
        if np.any(zps < qmin) or np.any(zps > qmax):
            report.reason = f"y_zero_point outside {dtype}'s range {qmin}..{qmax}"
            continue
        axis = e.get("axis")
        report.params = (f"{dtype}, scale {scale[0]:.9g}, zero point {zps[0]}" if scale.size == 1 else
                         f"{dtype}, axis {axis}, {scale.size} channels")
        report.status = "identical" if check != "none" else "unchecked"
        # One comparison per distinct (scale, zero point): a per-channel tensor's channels often repeat.
        for s, z in sorted(set(zip(scale.tolist(), zps.tolist()))) if check != "none" else []:
            a_spec = (f"aimet:quantize_dequantize(scale={float(np.float32(s))!r}, offset={-int(z)}, bitwidth={bits}, "
                      f"signed={signed})")
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
        if kind == "param" and check != "none":
            report.reason = _on_weight(next(t for t in g.initializer if t.name == name), scale, zps, axis, bits, signed)
        accepted.append((SimpleNamespace(name=name, kind=kind), e))
    if not result.refused:
        result.model = _qdq_model(m, accepted)
    return result


# ---- 1.0.0 / 0.6.1 files ----------------------------------------------------------------------------------

def _legacy_entries(enc: dict, version: str, graph) -> list:
    """The encodings of a 1.0.0 or 0.6.1 file as the 2.x entries the converter reads: each encoding
    (1.0.0: {name, dtype, bw, is_sym, scale, offset, enc_type}; 0.6.1: one {bitwidth, is_symmetric,
    scale, offset, min, max} per channel) read by polyquant.aimet.encodings.encoding_from_qnn_dict,
    the reader of what AIMET exports, which gives the scale, AIMET's offset and the integer grid; the
    grid is the output dtype and -offset the zero point, the same parameters AIMET's 2.x export of
    that quantizer holds. Blockwise / LPBQ encodings keep their block_size (refused below), and any
    other encoding without a Q/DQ form gets a `refused` reason."""
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
        return {"name": name, "block_size": d.get("block_size")}
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


def _legacy_encoding(entry: dict, version: str, rank: int, axis) -> Any:
    """A 2.1.0 entry as a 1.0.0 (dict) or 0.6.1 (list of dicts) encoding, written by polyquant.aimet's
    AffineEncoding, AIMET's own export: the dtype's grid, offset -zero point, symmetric when every zero
    point is the grid's centroid (as AIMET's 2.x export writes a symmetric quantizer), the scale shaped
    as AIMET's quantizer (per channel: one axis of the tensor's rank)."""
    import math
    from ..aimet.encodings import AffineEncoding
    bits, signed = INTEGER_DTYPES[entry["output_dtype"]]
    qmin, qmax = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    scale = np.asarray(entry["y_scale"], np.float32).reshape(-1)
    zp = np.broadcast_to(np.asarray(entry.get("y_zero_point", 0), np.int64).reshape(-1), scale.shape)
    shape = ()
    if scale.size > 1:
        shape = [1] * rank
        shape[axis % rank] = scale.size
    symmetric = bool(np.all(zp == math.ceil((qmin + qmax) / 2)))
    encoding = AffineEncoding(scale.reshape(shape), (-zp).astype(np.float32).reshape(shape), qmin, qmax, symmetric)
    return encoding.to_qnn_encoding_dict(version)


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
        entry = {"name": name, "output_dtype": _DTYPE_NAMES[ztype],
                 "y_scale": [float(v) for v in scale.reshape(-1)]}
        if zp_t is not None:
            zp = numpy_helper.to_array(zp_t).astype(np.int64).reshape(-1)
            if np.any(zp != 0):
                entry["y_zero_point"] = [int(v) for v in zp]
        if scale.size > 1:
            entry["axis"] = int(attr(node, "axis", 1))
        if attr(node, "block_size", 0):
            entry["block_size"] = int(attr(node, "block_size", 0))
        if version in LEGACY_VERSIONS:
            if "block_size" in entry:
                report.reason = f"blocked: a {version} file holds no blockwise encodings (2.1.0 does)"
                continue
            rank = len(inits[node.input[0]].dims) if kind == "param" else 1
            if scale.size > 1 and kind == "activation":
                report.reason = f"per-channel activation: a {version} file does not record its axis (2.1.0 does)"
                continue
            d = _legacy_encoding(entry, version, rank, entry.get("axis", 0))
            section = legacy["param_encodings" if kind == "param" else "activation_encodings"]
            if version == "1.0.0":
                section.append({"name": name, **d})
            else:
                section[name] = d
        else:
            result.encodings["encodings"].append(entry)
        report.status = "written"
        report.params = (f"{entry['output_dtype']}, " + (f"scale {scale.reshape(-1)[0]:.9g}" if scale.size == 1 else
                         f"axis {entry['axis']}, {scale.size} scales") + (", blocked" if "block_size" in entry else ""))
    if version in LEGACY_VERSIONS:
        result.encodings = {"producer": result.encodings["producer"], "version": version, **legacy,
                            "excluded_layers": []}
    return result
