"""`polyquant diff A B` / `polyquant.diff(a, b)`: are two quantizers identical on every input?

A spec names a framework's op and its parameters, the framework's own way:

    qkeras:quantized_bits(8, 0, alpha=1)
    qonnx:IntQuant(scale=0.0078125, zeropt=0, bitwidth=8, signed=1, narrow=0, rounding_mode=ROUND)
    aimet:quantize_dequantize(scale=0.02, offset=-128, bitwidth=8, signed=False)        # no-grad path
    aimet:quantize_dequantize(scale=0.02, offset=-128, bitwidth=8, signed=False, path=training)
    onnx:QDQ(scale=0.02, zero_point=3, dtype=int8)         # DequantizeLinear(QuantizeLinear(x))
    quark:QDQ(scale=0.02, zero_point=3, dtype=int8, semantics=quark)

Both run on every input of the input type: all 2^32 float32 bit patterns (2^16 for float16 /
bfloat16), generated chunk by chunk (no input array of the whole domain), and their outputs are
compared bit for bit (NaN payloads and the sign of zero count; outputs of different dtypes compare
by value, NaN-ness and sign). A parameter given as a list (per channel) runs one sweep per distinct
tuple of parameters. The answer is "identical on all N inputs" or the differing inputs, counted by
kind, with the smallest-magnitude example of each:

  nan              the input or either output is a NaN
  sign of zero     both outputs are zeros of opposite signs
  saturation edge  an output is its op's saturation value (its output at -max or +max of the input type)
  rounding tie     the outputs are neighbours on a grid of step d (their difference, or a scale of the
                   specs) and the input lies within 4 ulps of a midpoint (k + 1/2) d of that grid
  other            anything else

The kinds are a diagnosis, tried in that order; the counts are exact.
"""

from __future__ import annotations

import ast
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import ml_dtypes
import numpy as np

from .common import CommandError, _NoBar, progress

KINDS = ("nan", "sign of zero", "saturation edge", "rounding tie", "other")
INPUT_DTYPES = {"float32": (np.float32, np.uint32, 32), "float16": (np.float16, np.uint16, 16),
                "bfloat16": (ml_dtypes.bfloat16, np.uint16, 16)}
CHUNK = 1 << 20


class SpecError(CommandError, ValueError):
    """A spec that cannot be parsed or names an unknown op or parameter."""


# ---- spec parsing ----------------------------------------------------------------------------------

@dataclass
class Spec:
    text: str
    family: str
    op: str
    args: list
    kwargs: dict


def _literal(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Name):  # bare words: ROUND, int8, training, True / False / None
        return {"True": True, "False": False, "None": None}.get(node.id, node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, text) for e in node.elts]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise SpecError(f"{text!r}: {ast.unparse(node)!r} is not a number, a word or a list") from None


def parse_spec(text: str) -> Spec:
    """'family:op(args)' into its parts; the arguments are Python literals or bare words."""
    if not isinstance(text, str) or ":" not in text:
        raise SpecError(f"{text!r}: a spec is FAMILY:OP(ARGS), FAMILY one of {', '.join(sorted(_FAMILIES))}")
    family, _, call = text.partition(":")
    family = family.strip().lower()
    if family not in _FAMILIES:
        raise SpecError(f"{text!r}: unknown family {family!r}; expected one of {', '.join(sorted(_FAMILIES))}")
    try:
        tree = ast.parse(call.strip() if "(" in call else call.strip() + "()", mode="eval").body
    except SyntaxError as exc:
        raise SpecError(f"{text!r}: cannot parse {call!r} as OP(ARGS) ({exc.msg})") from None
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name):
        raise SpecError(f"{text!r}: expected OP(ARGS) after '{family}:'")
    args = [_literal(a, text) for a in tree.args]
    kwargs = {k.arg: _literal(k.value, text) for k in tree.keywords if k.arg is not None}
    return Spec(text, family, tree.func.id, args, kwargs)


def _bind(spec: Spec, names: list[str], defaults: dict) -> dict:
    """The spec's arguments by name (positional ones in `names`' order), with `defaults` for the rest."""
    if len(spec.args) > len(names):
        raise SpecError(f"{spec.text!r}: {spec.op} takes at most {len(names)} arguments ({', '.join(names)})")
    bound = dict(zip(names, spec.args))
    for k, v in spec.kwargs.items():
        if k not in names:
            raise SpecError(f"{spec.text!r}: {spec.op} has no parameter {k!r}; expected {', '.join(names)}")
        if k in bound:
            raise SpecError(f"{spec.text!r}: {k!r} given twice")
        bound[k] = v
    missing = [n for n in names if n not in bound and n not in defaults]
    if missing:
        raise SpecError(f"{spec.text!r}: {spec.op} needs {', '.join(missing)}")
    return {**defaults, **bound}


# ---- the ops of each family, as functions of x ----------------------------------------------------
# Each maker takes the bound parameters (scalars: one tuple of a per-channel sweep) and returns
# f(x) -> array. Float parameters are float32, as the frameworks hold them.

def _f32(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"expected a number, got {v!r}")
    return np.float32(v)


def _qonnx(spec: Spec, p: dict | None = None):
    from .. import qonnx
    op = spec.op.lower()
    if op in ("intquant", "quant"):
        names, defaults = ["scale", "zeropt", "bitwidth", "signed", "narrow", "rounding_mode"], {
            "zeropt": 0.0, "signed": 1, "narrow": 0, "rounding_mode": "ROUND"}
        if p is None:
            return names, defaults
        return lambda x: qonnx.quant(x, _f32(p["scale"]), _f32(p["zeropt"]), _f32(p["bitwidth"]), int(p["signed"]),
                                     int(p["narrow"]), str(p["rounding_mode"]))
    if op == "bipolarquant":
        if p is None:
            return ["scale"], {}
        return lambda x: qonnx.bipolar_quant(x, _f32(p["scale"]))
    if op == "trunc":
        names, defaults = ["scale", "zeropt", "input_bit_width", "output_bit_width", "rounding_mode"], {
            "zeropt": 0.0, "rounding_mode": "FLOOR"}
        if p is None:
            return names, defaults
        return lambda x: qonnx.trunc(x, _f32(p["scale"]), _f32(p["zeropt"]), _f32(p["input_bit_width"]),
                                     _f32(p["output_bit_width"]), str(p["rounding_mode"]))
    if op == "floatquant":
        names = ["scale", "exponent_bitwidth", "mantissa_bitwidth", "exponent_bias", "signed", "max_val", "has_inf",
                 "has_nan", "has_subnormal", "rounding_mode", "saturation"]
        defaults = {"exponent_bias": None, "signed": 1, "max_val": None, "has_inf": 0, "has_nan": 0, "has_subnormal": 0,
                    "rounding_mode": "ROUND", "saturation": 1}
        if p is None:
            return names, defaults
        opt = lambda v: None if v is None else _f32(v)  # noqa: E731
        return lambda x: qonnx.float_quant(x, _f32(p["scale"]), _f32(p["exponent_bitwidth"]), _f32(p["mantissa_bitwidth"]),
                                           opt(p["exponent_bias"]), int(p["signed"]), opt(p["max_val"]),
                                           int(p["has_inf"]), int(p["has_nan"]), int(p["has_subnormal"]),
                                           str(p["rounding_mode"]), int(p["saturation"]))
    raise SpecError(f"{spec.text!r}: unknown qonnx op {spec.op!r}; expected IntQuant (Quant), BipolarQuant, Trunc or FloatQuant")


def _qkeras(spec: Spec, p: dict | None = None):
    from .. import qkeras
    quantizer = getattr(qkeras, spec.op, None) if spec.op in ("quantized_bits", "quantized_relu", "quantized_linear") else None
    if quantizer is None:
        raise SpecError(f"{spec.text!r}: unknown qkeras quantizer {spec.op!r}; expected quantized_bits, "
                        f"quantized_relu or quantized_linear")
    if isinstance(spec.kwargs.get("alpha"), str):
        raise SpecError(f"{spec.text!r}: alpha={spec.kwargs['alpha']!r} derives the scale from the whole tensor, so "
                        f"the quantizer is not a function of each element; give a number")
    if p is None:
        return None, None  # QKeras' own constructor checks its arguments
    try:
        q = quantizer(*spec.args, **spec.kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{spec.text!r}: {exc}") from None
    return lambda x: q(x)


def _aimet(spec: Spec, p: dict | None = None):
    from .. import aimet
    from ..aimet import functional
    op = spec.op
    if op not in ("quantize_dequantize", "quantize", "dequantize"):
        raise SpecError(f"{spec.text!r}: unknown aimet op {op!r}; expected quantize_dequantize, quantize or dequantize")
    if op == "dequantize":
        if p is None:
            return ["scale", "offset"], {}
        return lambda x: aimet.dequantize(x, _f32(p["scale"]), _f32(p["offset"]))
    names = ["scale", "offset", "bitwidth", "signed"] + (["path"] if op == "quantize_dequantize" else [])
    defaults = {"signed": False, "path": "no_grad"}
    if p is None:
        return names, defaults
    s, o, bits, signed = _f32(p["scale"]), _f32(p["offset"]), p["bitwidth"], bool(p["signed"])
    if op == "quantize":
        return lambda x: aimet.quantize(x, s, o, bits, signed)
    if p["path"] not in ("no_grad", "training", "formula"):
        raise SpecError(f"{spec.text!r}: path must be no_grad (AIMET without grad: its fake-quantization shortcut "
                        f"where it takes it), training (scale / offset requiring grad) or formula (the same: AIMET's "
                        f"formula, which its no-grad path also runs where the shortcut does not apply, as with a "
                        f"block_size); got {p['path']!r}")
    training = p["path"] in ("training", "formula")
    return lambda x: functional._qdq_forward(x, s, o, (bits, signed), {}, training=training)


def _onnx_qdq(spec: Spec, p: dict | None, quark: bool):
    from .. import onnx as pqo
    from .. import quark as pqq
    op = spec.op.lower()
    kinds = ("qdq", "quantizelinear") if not quark else ("qdq", "extendedquantizelinear", "quantizelinear")
    if op not in kinds:
        raise SpecError(f"{spec.text!r}: unknown {spec.family} op {spec.op!r}; expected QDQ (DequantizeLinear of "
                        f"QuantizeLinear) or {'ExtendedQuantizeLinear' if quark else 'QuantizeLinear'}")
    names = ["scale", "zero_point", "dtype"] + (["semantics"] if quark else ["saturate"])
    defaults = {"zero_point": 0, "dtype": "uint8", "semantics": "quark", "saturate": 1}
    if p is None:
        return names, defaults
    try:
        zdt = np.dtype(getattr(ml_dtypes, p["dtype"], None) or p["dtype"])
    except TypeError:
        raise SpecError(f"{spec.text!r}: dtype {p['dtype']!r} is not a numpy or ml_dtypes type name") from None
    scale = _f32(p["scale"])
    z = p["zero_point"]
    if isinstance(z, bool) or not isinstance(z, (int, float)):
        raise SpecError(f"zero_point: expected a number, got {z!r}")
    zp = np.asarray(z).astype(zdt)
    if float(zp) != float(z):  # a value the dtype cannot hold would wrap or round silently
        raise SpecError(f"zero_point: {z!r} is not a value of {zdt.name} (it would become {zp.item()!r})")
    if quark:
        q = lambda x: pqq.extended_quantize_linear(x, scale, zp, semantics=str(p["semantics"]))  # noqa: E731
        dq = lambda y: pqq.extended_dequantize_linear(y, scale, zp, semantics=str(p["semantics"]))  # noqa: E731
    else:
        q = lambda x: pqo.quantize_linear(x, scale, zp, saturate=int(p["saturate"]))  # noqa: E731
        dq = lambda y: pqo.dequantize_linear(y, scale, zp)  # noqa: E731
    return (lambda x: dq(q(x))) if op == "qdq" else q


_FAMILIES: dict[str, Callable] = {
    "qonnx": _qonnx,
    "qkeras": _qkeras,
    "aimet": _aimet,
    "onnx": lambda spec, p=None: _onnx_qdq(spec, p, quark=False),
    "quark": lambda spec, p=None: _onnx_qdq(spec, p, quark=True),
}


def _instances(spec: Spec) -> list[tuple[dict, Callable]]:
    """(parameters, f(x)) for each distinct tuple of a per-channel spec (one for scalar parameters)."""
    maker = _FAMILIES[spec.family]
    names, defaults = maker(spec)
    if names is None:  # the quantizer object takes the arguments itself
        return [({}, maker(spec, {}))]
    bound = _bind(spec, names, defaults)
    lengths = {len(v) for v in bound.values() if isinstance(v, list)}
    for k, v in bound.items():
        if isinstance(v, list) and (not v or any(isinstance(e, list) for e in v)):
            raise SpecError(f"{spec.text!r}: {k} must be a number or a non-empty flat list of them (one per channel), "
                            f"got {v!r}")
    if len(lengths) > 1:
        raise SpecError(f"{spec.text!r}: per-channel parameters must have one length, got {sorted(lengths)}")
    n = lengths.pop() if lengths else None
    tuples = [bound] if n is None else [{k: (v[i] if isinstance(v, list) else v) for k, v in bound.items()} for i in range(n)]
    seen, out = set(), []
    for t in tuples:
        key = tuple(sorted((k, repr(v)) for k, v in t.items()))
        if key not in seen:
            seen.add(key)
            try:
                out.append((t, maker(spec, t)))
            except SpecError as exc:
                raise SpecError(f"{spec.text!r}: {exc}") from None
    return out


# ---- the sweep --------------------------------------------------------------------------------------

@dataclass
class Example:
    x: float
    x_bits: str
    a: float
    b: float


@dataclass
class DiffResult:
    a: str
    b: str
    dtype: str
    inputs: int                       # inputs compared (per sweep times sweeps)
    sweeps: int
    differing: int = 0
    kinds: dict = field(default_factory=dict)      # kind -> count
    examples: dict = field(default_factory=dict)   # kind -> Example (smallest |x|)
    seconds: float = 0.0

    @property
    def identical(self) -> bool:
        return self.differing == 0

    def __str__(self) -> str:
        head = f"A: {self.a}\nB: {self.b}\n"
        sweeps = f" ({self.sweeps} parameter tuples)" if self.sweeps > 1 else ""
        if self.identical:
            return head + f"identical on all {self.inputs} {self.dtype} inputs{sweeps} ({self.seconds:.1f} s)"
        lines = [head + f"differ on {self.differing} of {self.inputs} {self.dtype} inputs{sweeps} ({self.seconds:.1f} s)",
                 f"{'kind':<16} {'count':>12}  smallest |x|: x (bits) -> A, B"]
        for kind in KINDS:
            if self.kinds.get(kind):
                e = self.examples[kind]
                lines.append(f"{kind:<16} {self.kinds[kind]:>12}  {e.x!r} ({e.x_bits}) -> {e.a!r}, {e.b!r}")
        return "\n".join(lines)


def _bits_view(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mask of the elements whose outputs differ: bits where the dtypes agree, else value / NaN / sign."""
    if a.dtype == b.dtype:
        return _bits_view(a) != _bits_view(b)
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        return ~((fa == fb) & (np.signbit(fa) == np.signbit(fb)) | (np.isnan(fa) & np.isnan(fb)))


def _classify(x, a, b, differs, sat_a, sat_b, steps):
    """Masks of the differing elements of each kind (KINDS order), over the whole chunk. NaN, zero and
    saturation tests run on the native dtypes (cheap even where most of a chunk differs, as past a
    saturation edge); the tie test in float64 only on what is left."""
    masks = {}
    undecided = differs.copy()

    def mark(mask, name):
        mask &= undecided
        masks[name] = mask
        undecided[mask] = False

    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mark(np.isnan(x) | _isnan(a) | _isnan(b), "nan")
        mark((a == 0) & (b == 0), "sign of zero")
        sat = np.zeros(x.shape, bool)
        for y, values in ((a, sat_a), (b, sat_b)):
            for v in values:
                sat |= (y == y.dtype.type(v)) if y.dtype.kind == "f" else (y.astype(np.float64) == v)
        mark(sat, "saturation edge")
        tie = np.zeros(x.shape, bool)
        rest = np.flatnonzero(undecided)
        if rest.size:
            fx, fa, fb = (v[rest].astype(np.float64) for v in (x, a, b))
            ulp = np.spacing(np.abs(x[rest])).astype(np.float64)
            near = np.zeros(rest.size, bool)
            for d in [np.abs(fa - fb)] + [np.float64(s) for s in steps]:
                mid = (np.floor(fx / d) + 0.5) * d
                near |= np.isfinite(mid) & (d > 0) & (np.abs(fx - mid) <= 4 * ulp)
            tie[rest[near]] = True
        mark(tie, "rounding tie")
        masks["other"] = undecided
    return masks


def _isnan(y):
    return np.isnan(y) if y.dtype.kind == "f" or y.dtype.name in _ML_FLOATS else np.zeros(y.shape, bool)


_ML_FLOATS = {"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
              "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}


def _saturation_values(f, dtype) -> np.ndarray:
    info = ml_dtypes.finfo(dtype)
    y = np.asarray(f(np.array([-float(info.max), float(info.max)], dtype=dtype)))
    return y.astype(np.float64)


def diff(a: str, b: str, *, dtype: str = "float32", patterns: tuple[int, int] | None = None,
         show_progress: bool = True) -> DiffResult:
    """Runs the quantizers of specs `a` and `b` on every input of `dtype` (float32: all 2^32 bit
    patterns; float16 / bfloat16: all 2^16) and compares their outputs bit for bit (module doc).
    `patterns=(start, stop)` sweeps only the bit patterns start <= p < stop."""
    if dtype not in INPUT_DTYPES:
        raise SpecError(f"dtype: expected one of {', '.join(INPUT_DTYPES)}, got {dtype!r}")
    x_dtype, bits_dtype, nbits = INPUT_DTYPES[dtype]
    spec_a, spec_b = parse_spec(a), parse_spec(b)
    inst_a, inst_b = _instances(spec_a), _instances(spec_b)
    if len(inst_a) > 1 and len(inst_b) > 1 and len(inst_a) != len(inst_b):
        raise SpecError(f"per-channel specs of {len(inst_a)} and {len(inst_b)} distinct parameter tuples do not pair up")
    pairs = list(zip(inst_a * (len(inst_b) if len(inst_a) == 1 else 1), inst_b * (len(inst_a) if len(inst_b) == 1 else 1)))
    return sweep(a, b, pairs, dtype, patterns=patterns, show_progress=show_progress)


def sweep(a: str, b: str, pairs: list, dtype: str = "float32", *, patterns: tuple[int, int] | None = None,
          show_progress: bool = True, desc: str = "diff") -> DiffResult:
    """The sweep behind diff: for each ((params_a, f_a), (params_b, f_b)) of `pairs`, f_a and f_b (functions
    of an input array) run on every bit pattern of `dtype` in chunks and their outputs are compared and
    classified; `a` and `b` label them in the result. polyquant convert's exhaustive check uses it too."""
    x_dtype, bits_dtype, nbits = INPUT_DTYPES[dtype]
    first, stop = (0, 1 << nbits) if patterns is None else patterns
    if not (isinstance(first, int) and isinstance(stop, int) and 0 <= first < stop <= 1 << nbits):
        raise SpecError(f"patterns: expected (start, stop) with 0 <= start < stop <= 2^{nbits}, got {patterns!r}")
    total = stop - first
    chunk = min(CHUNK, total)
    result = DiffResult(a, b, dtype, total * len(pairs), len(pairs), kinds={k: 0 for k in KINDS})
    start = time.perf_counter()
    base = np.arange(chunk, dtype=bits_dtype)
    codes = np.empty(chunk, dtype=bits_dtype)
    best = {}
    show_progress = show_progress and sys.stderr.isatty()
    bar_cm = progress(None, desc, total=total * len(pairs), unit="input") if show_progress else _NoBar(())
    with bar_cm as bar:
        for (pa, fa), (pb, fb) in pairs:
            steps = [float(v) for p in (pa, pb) for k, v in p.items()
                     if k == "scale" and isinstance(v, (int, float)) and not isinstance(v, bool)]
            try:
                sat_a, sat_b = _saturation_values(fa, x_dtype), _saturation_values(fb, x_dtype)
            except (TypeError, ValueError) as exc:
                raise SpecError(f"cannot run the specs on {dtype} inputs: {exc}") from None
            for lo in range(first, stop, chunk):
                n = min(chunk, stop - lo)
                np.add(base[:n], bits_dtype(lo), out=codes[:n])
                x = codes[:n].view(x_dtype)
                try:
                    ya, yb = np.asarray(fa(x)), np.asarray(fb(x))
                except (TypeError, ValueError) as exc:
                    raise SpecError(f"cannot run the specs on {dtype} inputs: {exc}") from None
                if ya.shape != x.shape or yb.shape != x.shape:
                    raise SpecError(f"the ops must be elementwise (outputs {ya.shape} and {yb.shape} for {x.shape} inputs)")
                mask = _differs(ya, yb)
                if mask.any():
                    with np.errstate(invalid="ignore"):  # signalling NaNs of the 16-bit types
                        mags = np.abs(x.astype(np.float32))
                    for name, m in _classify(x, ya, yb, mask, sat_a, sat_b, steps).items():
                        count = int(np.count_nonzero(m))
                        if count == 0:
                            continue
                        result.kinds[name] += count
                        j = int(np.argmin(np.where(m & ~np.isnan(mags), mags, np.inf)))
                        if not m[j]:  # only NaN inputs of this kind
                            j = int(np.flatnonzero(m)[0])
                        mag = float(mags[j]) if not np.isnan(mags[j]) else np.inf
                        if name not in best or mag < best[name][0]:
                            best[name] = (mag, Example(float(x[j]), f"0x{int(codes[j]):0{nbits // 4}x}",
                                                       float(ya[j]), float(yb[j])))
                    result.differing += int(np.count_nonzero(mask))
                bar.update(n)
    result.examples = {k: v[1] for k, v in best.items()}
    result.kinds = {k: v for k, v in result.kinds.items() if v}
    result.seconds = time.perf_counter() - start
    return result


def diff_command(args, out=sys.stdout) -> int:
    """`polyquant diff A B`: exit status 0 identical, 1 they differ."""
    import json
    from dataclasses import asdict
    r = diff(args.a, args.b, dtype=args.dtype, patterns=args.patterns, show_progress=not args.json)
    if args.json:
        d = asdict(r)
        d["identical"] = r.identical
        print(json.dumps(d, indent=2, allow_nan=True), file=out)
    else:
        print(r, file=out)
    return 0 if r.identical else 1


def add_parser(sub, epilog: str) -> None:
    p = sub.add_parser(
        "diff", epilog=epilog, help="are two quantizers (of any framework) identical on every input?",
        description=__doc__.split("\n\n", 1)[1].split("\nThe kinds")[0].strip().replace("\n\n", "\n"),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="the first spec, e.g. 'qkeras:quantized_bits(8, 0, alpha=1)'")
    p.add_argument("b", metavar="B", help="the second spec, e.g. 'qonnx:IntQuant(scale=0.0078125, bitwidth=8)'")
    p.add_argument("--dtype", choices=list(INPUT_DTYPES), default="float32",
                   help="the input type swept exhaustively (default: %(default)s)")
    p.add_argument("--patterns", type=_pattern_range, default=None, metavar="START:STOP",
                   help="sweep only the input bit patterns START <= p < STOP (integers, 0x... allowed; default: all)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=diff_command)


def _pattern_range(text: str) -> tuple[int, int]:
    import argparse
    try:
        lo, hi = (int(v, 0) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:STOP (integers, 0x... allowed), got {text!r}") from None
    return lo, hi

