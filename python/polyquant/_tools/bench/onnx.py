"""`polyquant bench` cases of ONNX's QuantizeLinear / DequantizeLinear (polyquant.onnx), and the Q/DQ
harness the Quark cases (bench/quark.py) share: each op is timed allocating and writing into a
reused array (``out=``), against numpy copies of the same float32 array and against onnxruntime's
own op (opset 21) on the same operands, whose output is also compared bit for bit. The narrow cases
cover float8 e4m3fn / e5m2, float4 e2m1, int4 and uint4 both ways and float16 / bfloat16 x.

``alloc_onnx_q_int8`` (``ALLOC_CASE_NAMES``) times quantize_linear int8 per-tensor allocating against
the same call with ``out=`` and against onnxruntime's ``session.run`` of a one-node QuantizeLinear
model (allocating too; its arena reuses buffers), in the harness of bench/common.py."""

from __future__ import annotations

import statistics
import ctypes
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from ... import onnx as pqo
from ... import ort as polyquant_ort
from ... import quark as pqq
from ..common import CommandError, compare
from .common import CHANNELS, AllocCase, interleaved_seconds, pct


@dataclass
class QdqCase:
    name: str
    description: str
    shape: tuple                  # of x (N elements in all)
    op: str                       # "q" (float32 -> integers) or "dq" (integers -> float32)
    params: object                # (shape) -> dict(scale=..., zero_point=..., axis=..., block_size=...)
    quark: bool = False           # polyquant.quark's Extended op instead of polyquant.onnx
    through_ort: bool = False     # time the op as a node of an onnxruntime session (custom-op library)
    x_dtype: object = None        # Q: x cast to this dtype first (float16, bfloat16 inputs)
    # Why onnxruntime's bits are not expected to match (polyquant follows onnx's reference there).
    ort_differs: str | None = None


QDQ_BLOCK = 32


def shapes(size):
    """(wide, last): (4096, 16384) at the default size, and channels last (64 channels of one
    element per slice)."""
    rows = size // 16384 if size % 16384 == 0 else size // CHANNELS
    return (rows, size // rows), (size // CHANNELS, CHANNELS)


def per_tensor(dtype, zero=False):
    return lambda shape: dict(scale=np.float32(0.05), zero_point=np.array(0 if zero else 3, dtype), axis=1, block_size=0)


def per_axis(dtype, a):
    def make(shape):
        c = shape[a]
        return dict(scale=np.linspace(0.02, 0.08, c, dtype=np.float32),
                    zero_point=(np.arange(c) % 7).astype(dtype), axis=a, block_size=0)
    return make


def blocked(dtype):
    def make(shape):
        s = (shape[0], -(-shape[1] // QDQ_BLOCK))
        return dict(scale=np.linspace(0.02, 0.08, s[0] * s[1], dtype=np.float32).reshape(s),
                    zero_point=(np.arange(s[0] * s[1]) % 5).astype(dtype).reshape(s), axis=1,
                    block_size=QDQ_BLOCK)
    return make


def make_cases(size):
    wide, last = shapes(size)
    return [
        QdqCase("q_uint8", "QuantizeLinear -> uint8, per-tensor", wide, "q", per_tensor(np.uint8)),
        QdqCase("q_int8", "QuantizeLinear -> int8, per-tensor", wide, "q", per_tensor(np.int8)),
        QdqCase("q_int8_axis0", f"QuantizeLinear -> int8, per-axis on axis 0 ({wide[0]} channels)", wide, "q",
                per_axis(np.int8, 0)),
        QdqCase("q_int8_axis_last", f"QuantizeLinear -> int8, per-axis on the last axis ({CHANNELS} channels)", last,
                "q", per_axis(np.int8, 1)),
        QdqCase("q_int8_blocked", f"QuantizeLinear -> int8, blocked on the last axis (block {QDQ_BLOCK})", wide, "q",
                blocked(np.int8)),
        QdqCase("dq_int8", "DequantizeLinear int8 -> float32, per-tensor", wide, "dq", per_tensor(np.int8)),
        QdqCase("dq_uint8_axis_last", f"DequantizeLinear uint8, per-axis on the last axis ({CHANNELS} channels)", last,
                "dq", per_axis(np.uint8, 1)),
        QdqCase("dq_int8_blocked", f"DequantizeLinear int8, blocked on the last axis (block {QDQ_BLOCK})", wide, "dq",
                blocked(np.int8)),
    ] + [
        # The narrow types, both ways, and 16-bit float x.
        QdqCase(f"q_{name}", f"QuantizeLinear -> {name}, per-tensor", wide, "q", per_tensor(dtype, zero=True))
        for name, dtype in NARROW_TYPES
    ] + [
        QdqCase(f"dq_{name}", f"DequantizeLinear {name} -> float32, per-tensor", wide, "dq", per_tensor(dtype, zero=True))
        for name, dtype in NARROW_TYPES
    ] + [
        QdqCase(f"q_int8_from_{name}", f"QuantizeLinear {name} x -> int8, per-tensor", wide, "q", per_tensor(np.int8),
                x_dtype=dtype, ort_differs=_QUOTIENT_NOTE)
        for name, dtype in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16))
    ]


_QUOTIENT_NOTE = ("onnx's reference divides 16-bit float x by the scale in x's type (the quotient rounded to it); "
                  "onnxruntime divides in float32, so ties of the rounded quotient differ")

# Output / input types of the narrow cases (zero point 0: ONNX requires it for float8).
NARROW_TYPES = [("float8_e4m3fn", ml_dtypes.float8_e4m3fn), ("float8_e5m2", ml_dtypes.float8_e5m2),
                ("float4_e2m1fn", ml_dtypes.float4_e2m1fn), ("int4", ml_dtypes.int4), ("uint4", ml_dtypes.uint4)]
# Types onnxruntime holds packed (two to a byte).
_PACKED = ("int4", "uint4", "float4_e2m1fn")

CASE_NAMES = (["q_uint8", "q_int8", "q_int8_axis0", "q_int8_axis_last", "q_int8_blocked", "dq_int8",
               "dq_uint8_axis_last", "dq_int8_blocked"] + [f"q_{n}" for n, _ in NARROW_TYPES] +
              [f"dq_{n}" for n, _ in NARROW_TYPES] + ["q_int8_from_bfloat16", "q_int8_from_float16"])


@dataclass
class QdqResult:
    name: str
    description: str
    shape: list
    polyquant_ms: float           # allocating call
    polyquant_out_ms: float       # out= a reused array
    copy_ms: float                # x.copy() of the float32 array of the same shape
    copyto_ms: float              # np.copyto(out, x) of it
    of_copy: float                # copy time / op time
    out_of_copyto: float          # copyto time / out= time
    onnxruntime_ms: float | None = None       # onnxruntime's own op (output bound to a reused array)
    speedup_vs_onnxruntime: float | None = None   # onnxruntime time / polyquant out= time
    bit_exact_vs_onnxruntime: bool | None = None
    onnxruntime_differs: str | None = None    # why a difference from onnxruntime is expected
    samples_ms: dict = field(default_factory=dict)


def _ort_qdq_session(case, x, p, quark_node=False):
    """onnxruntime's QuantizeLinear / DequantizeLinear (opset 21) on the same operands, or with
    `quark_node` Quark's Extended op run by polyquant's custom-op library; None if it cannot run the
    case (a Quark case has no onnxruntime peer unless timed through onnxruntime)."""
    if case.quark and not case.through_ort:
        return None
    try:  # the peers only: the cases themselves run without the ONNX packages
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    op = "QuantizeLinear" if case.op == "q" else "DequantizeLinear"
    domain = ""
    if quark_node:
        op, domain = "Extended" + op, "com.amd.quark"
    attrs = {"axis": p["axis"]}
    if p["block_size"]:
        attrs["block_size"] = p["block_size"]
    inits = [numpy_helper.from_array(np.asarray(p["scale"]), "s"), numpy_helper.from_array(np.asarray(p["zero_point"]), "z")]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(x.dtype))
    out_elem = helper.np_dtype_to_tensor_dtype(np.asarray(p["zero_point"]).dtype) if case.op == "q" else TensorProto.FLOAT
    if case.x_dtype is not None:  # 16-bit float x: the scale takes x's type in opset 21
        inits[0] = numpy_helper.from_array(np.asarray(p["scale"]).astype(case.x_dtype), "s")
    graph = helper.make_graph([helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain, **attrs)], "qdq",
                              [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info("y", out_elem, list(x.shape))], inits)
    imports = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    # Its idle pool threads would otherwise spin on both cores for a while after each run, taking
    # them from the copies and polyquant calls timed next.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if quark_node:
        options.register_custom_ops_library(str(polyquant_ort.library_path()))
    try:
        return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:
        return None


def _ort_binding(session, x, out):
    """An IO binding of `session` reading x and writing a buffer of out's type; returns (binding,
    read_output), read_output() giving the output's bytes as ONNX stores them. onnxruntime's Python API
    has no numpy type for float8 / float4 / int4, so those tensors are handed over as OrtValues of the
    raw codes (packed two to a byte for the 4-bit types)."""
    import onnxruntime  # a session exists, so both import
    from onnx import helper
    binding = session.io_binding()
    if x.dtype.name in _PACKED:  # a tensor of x's shape, its packed bytes copied in
        codes = pqo.pack(x)
        value = onnxruntime.OrtValue.ortvalue_from_shape_and_type(list(x.shape), helper.np_dtype_to_tensor_dtype(x.dtype), "cpu", 0)
        ctypes.memmove(value.data_ptr(), codes.ctypes.data, codes.nbytes)
        binding.bind_ortvalue_input("x", value)
    elif x.dtype.name.startswith("float8"):
        value = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint8), helper.np_dtype_to_tensor_dtype(x.dtype))
        binding.bind_ortvalue_input("x", value)
    else:
        binding.bind_cpu_input("x", x)
    if out.dtype.name in _PACKED or out.dtype.name.startswith(("float8", "bfloat16")):
        value = onnxruntime.OrtValue.ortvalue_from_shape_and_type(list(out.shape), helper.np_dtype_to_tensor_dtype(out.dtype), "cpu", 0)
        binding.bind_ortvalue_output("y", value)
        nbytes = (out.size + 1) // 2 if out.dtype.name in _PACKED else out.nbytes
        read = lambda: np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(value.data_ptr())).copy()
        return binding, read
    ort_out = np.empty_like(out)
    binding.bind_output("y", "cpu", 0, ort_out.dtype, list(ort_out.shape), ort_out.ctypes.data)
    return binding, lambda: ort_out


def _stored_bytes(out):
    """out's bytes as ONNX stores them (4-bit types packed), to compare with onnxruntime's."""
    if out.dtype.name in _PACKED:
        return pqo.pack(out)
    return out.reshape(-1).view(np.uint8) if out.dtype.itemsize == 1 and out.dtype.kind not in "iub" else out


def bench_qdq_case(case, x_flat, repeat, bar, peers=True):
    xf = x_flat.reshape(case.shape)
    p = case.params(case.shape)
    zp = p["zero_point"]
    if case.op == "q":
        x = xf if case.x_dtype is None else xf.astype(case.x_dtype)
        if case.x_dtype is not None:  # a 16-bit float x has a scale of its type (opset 21), as in the onnxruntime model
            p["scale"] = np.asarray(p["scale"]).astype(case.x_dtype)
        if case.quark:
            fn = lambda out=None: pqq.extended_quantize_linear(x, p["scale"], zp, axis=p["axis"], out=out)
        else:
            fn = lambda out=None: pqo.quantize_linear(x, p["scale"], zp, axis=p["axis"], block_size=p["block_size"], out=out)
    else:
        x = pqo.quantize_linear(xf, p["scale"], zp, axis=p["axis"], block_size=p["block_size"])
        fn = lambda out=None: pqo.dequantize_linear(x, p["scale"], zp, axis=p["axis"], block_size=p["block_size"], out=out)
    out = fn()
    if case.through_ort:
        ours = _ort_qdq_session(case, x, p, quark_node=True)
        if ours is None:
            raise CommandError(f"{case.name}: polyquant's custom-op library does not load in onnxruntime (or "
                               f"onnxruntime / onnx do not import here)")
        ours_binding = ours.io_binding()
        ours_binding.bind_cpu_input("x", x)
        ours_binding.bind_output("y", "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
        fn = lambda out=None: ours.run_with_iobinding(ours_binding)
    copy_dst = np.empty_like(xf)
    copy_dst.fill(0)
    session = _ort_qdq_session(case, x, p) if peers else None
    binding = None
    if session is not None:
        try:
            binding, read_ort_output = _ort_binding(session, x, out)
            session.run_with_iobinding(binding)  # warm-up
        except Exception:  # an onnxruntime without a kernel for the type
            binding = None
    fns = {"copy": lambda: xf.copy(), "copyto": lambda: np.copyto(copy_dst, xf), "polyquant": fn,
           "polyquant_out": lambda: fn(out=out)}
    if binding is not None:
        fns["onnxruntime"] = lambda: session.run_with_iobinding(binding)
    bar.set_postfix_str(case.name, refresh=False)
    samples = dict(zip(fns, interleaved_seconds(list(fns.values()), repeat, lambda: bar.update(1))))
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    r = QdqResult(case.name, case.description, list(case.shape), med["polyquant"] * 1e3, med["polyquant_out"] * 1e3,
                  med["copy"] * 1e3, med["copyto"] * 1e3, med["copy"] / med["polyquant"],
                  med["copyto"] / med["polyquant_out"],
                  samples_ms={k: [round(t * 1e3, 3) for t in v] for k, v in samples.items() if v})
    if binding is not None:
        r.onnxruntime_ms = med["onnxruntime"] * 1e3
        r.speedup_vs_onnxruntime = med["onnxruntime"] / med["polyquant_out"]
        ort_out = read_ort_output()
        r.bit_exact_vs_onnxruntime = bool(compare(_stored_bytes(out), ort_out).exact)
        r.onnxruntime_differs = case.ort_differs
    return r


def ort_version():
    """onnxruntime's version, or None where it does not import (no peers then)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime.__version__


def format_qdq_report(report):
    rows = report.get("qdq") or []
    if not rows:
        return ""
    lines = [
        "",
        "Linear quantize / dequantize; copy = x.copy() and copyto = np.copyto of the float32 array of the same shape",
        f"(x for Q, the dequantized output for DQ); onnxruntime {report.get('onnxruntime') or '-'}: its own op (opset 21)",
        "on the same operands, output bound to a reused array; speedup = its time / polyquant's out= time.",
        "",
    ]
    header = (f"{'op':<21} {'shape':<12} {'alloc':>9} {'of copy':>8} {'out=':>9} {'of copyto':>9} "
              f"{'onnxruntime':>11} {'speedup':>8}  bit-exact")
    lines += [header, "-" * len(header)]
    notes = []
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        ort = "-" if r["onnxruntime_ms"] is None else f"{r['onnxruntime_ms']:.1f} ms"
        sp = "-" if r["speedup_vs_onnxruntime"] is None else f"{r['speedup_vs_onnxruntime']:.1f}x"
        ex = "-" if r["bit_exact_vs_onnxruntime"] is None else ("yes" if r["bit_exact_vs_onnxruntime"] else "NO")
        if r.get("onnxruntime_differs") and not r["bit_exact_vs_onnxruntime"]:
            ex = "no (expected*)"
            notes.append(f"* {r['name']}: {r['onnxruntime_differs']}")
        lines.append(f"{r['name']:<21} {shape:<12} {r['polyquant_ms']:>6.1f} ms {pct(r['of_copy']):>8} "
                     f"{r['polyquant_out_ms']:>6.1f} ms {pct(r['out_of_copyto']):>9} {ort:>11} {sp:>8}  {ex}")
    return "\n".join(lines + notes)


def make_alloc_cases():
    def make(x):
        p = per_tensor(np.int8)(x.shape)
        fn = lambda out=None: pqo.quantize_linear(x, p["scale"], p["zero_point"], out=out)  # noqa: E731
        session = _ort_qdq_session(QdqCase("alloc", "", x.shape, "q", per_tensor(np.int8)), x, p)
        peer = None if session is None else (lambda: session.run(None, {"x": x})[0])
        return fn, np.zeros(x.shape, np.int8), peer

    return [AllocCase("alloc_onnx_q_int8", "onnx", "polyquant.onnx.quantize_linear -> int8, per-tensor", make,
                      peer_name=f"onnxruntime {ort_version()} session.run QuantizeLinear")]


ALLOC_CASE_NAMES = ["alloc_onnx_q_int8"]
