"""`polyquant bench` cases of ONNX's QuantizeLinear / DequantizeLinear (polyquant.onnx), and the Q/DQ
harness the Quark cases (bench/quark.py) share: each op is timed allocating and writing into a
reused array (``out=``), against numpy copies of the same float32 array and against onnxruntime's
own op (opset 21) on the same operands, whose output is also compared bit for bit."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from ... import onnx as pqo
from ... import ort as polyquant_ort
from ... import quark as pqq
from ..runner import CommandError, compare
from .common import CHANNELS, pct, timed


@dataclass
class QdqCase:
    name: str
    description: str
    shape: tuple                  # of x (N elements in all)
    op: str                       # "q" (float32 -> integers) or "dq" (integers -> float32)
    params: object                # (shape) -> dict(scale=..., zero_point=..., axis=..., block_size=...)
    quark: bool = False           # polyquant.quark's Extended op instead of polyquant.onnx
    through_ort: bool = False     # time the op as a node of an onnxruntime session (custom-op library)


QDQ_BLOCK = 32


def shapes(size):
    """(wide, last): (4096, 16384) at the default size, and channels last (64 channels of one
    element per slice)."""
    rows = size // 16384 if size % 16384 == 0 else size // CHANNELS
    return (rows, size // rows), (size // CHANNELS, CHANNELS)


def per_tensor(dtype):
    return lambda shape: dict(scale=np.float32(0.05), zero_point=np.array(3, dtype), axis=1, block_size=0)


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
    ]


CASE_NAMES = ["q_uint8", "q_int8", "q_int8_axis0", "q_int8_axis_last", "q_int8_blocked", "dq_int8",
              "dq_uint8_axis_last", "dq_int8_blocked"]


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
    samples_ms: dict = field(default_factory=dict)


def _ort_qdq_session(case, x, p, quark_node=False):
    """onnxruntime's QuantizeLinear / DequantizeLinear (opset 21) on the same operands, or with
    `quark_node` Quark's Extended op run by polyquant's custom-op library; None if it cannot run the
    case (a Quark case has no onnxruntime peer unless timed through onnxruntime)."""
    if case.quark and not case.through_ort:
        return None
    op = "QuantizeLinear" if case.op == "q" else "DequantizeLinear"
    domain = ""
    if quark_node:
        op, domain = "Extended" + op, "com.amd.quark"
    attrs = {"axis": p["axis"]}
    if p["block_size"]:
        attrs["block_size"] = p["block_size"]
    inits = [numpy_helper.from_array(np.asarray(p["scale"]), "s"), numpy_helper.from_array(np.asarray(p["zero_point"]), "z")]
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    out_elem = helper.np_dtype_to_tensor_dtype(np.asarray(p["zero_point"]).dtype) if case.op == "q" else TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node(op, ["x", "s", "z"], ["y"], domain=domain, **attrs)], "qdq",
                              [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info("y", out_elem, list(x.shape))], inits)
    imports = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if quark_node:
        options.register_custom_ops_library(str(polyquant_ort.library_path()))
    try:
        return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:
        return None


def bench_qdq_case(case, x_flat, repeat, bar, peers=True):
    xf = x_flat.reshape(case.shape)
    p = case.params(case.shape)
    zp = p["zero_point"]
    if case.op == "q":
        x = xf
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
            raise CommandError(f"{case.name}: polyquant's custom-op library does not load in onnxruntime")
        ours_binding = ours.io_binding()
        ours_binding.bind_cpu_input("x", x)
        ours_binding.bind_output("y", "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
        fn = lambda out=None: ours.run_with_iobinding(ours_binding)
    copy_dst = np.empty_like(xf)
    copy_dst.fill(0)
    session = _ort_qdq_session(case, x, p) if peers else None
    binding = None
    if session is not None:
        ort_out = np.empty_like(out)
        binding = session.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_output("y", "cpu", 0, ort_out.dtype, list(ort_out.shape), ort_out.ctypes.data)
        session.run_with_iobinding(binding)  # warm-up
    samples = {"copy": [], "copyto": [], "polyquant": [], "polyquant_out": [], "onnxruntime": []}
    for _ in range(repeat):
        bar.set_postfix_str(case.name, refresh=False)
        fresh_s, fresh = timed(lambda: xf.copy())
        samples["copy"].append(fresh_s)
        del fresh
        samples["copyto"].append(timed(lambda: np.copyto(copy_dst, xf))[0])
        op_s, result = timed(fn)
        samples["polyquant"].append(op_s)
        del result
        samples["polyquant_out"].append(timed(lambda: fn(out=out))[0])
        if binding is not None:
            samples["onnxruntime"].append(timed(lambda: session.run_with_iobinding(binding))[0])
        bar.update(1)
    med = {k: statistics.median(v) for k, v in samples.items() if v}
    r = QdqResult(case.name, case.description, list(case.shape), med["polyquant"] * 1e3, med["polyquant_out"] * 1e3,
                  med["copy"] * 1e3, med["copyto"] * 1e3, med["copy"] / med["polyquant"],
                  med["copyto"] / med["polyquant_out"],
                  samples_ms={k: [round(t * 1e3, 3) for t in v] for k, v in samples.items() if v})
    if binding is not None:
        r.onnxruntime_ms = med["onnxruntime"] * 1e3
        r.speedup_vs_onnxruntime = med["onnxruntime"] / med["polyquant_out"]
        r.bit_exact_vs_onnxruntime = bool(compare(out, ort_out).exact)
    return r


def ort_version():
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
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        ort = "-" if r["onnxruntime_ms"] is None else f"{r['onnxruntime_ms']:.1f} ms"
        sp = "-" if r["speedup_vs_onnxruntime"] is None else f"{r['speedup_vs_onnxruntime']:.1f}x"
        ex = "-" if r["bit_exact_vs_onnxruntime"] is None else ("yes" if r["bit_exact_vs_onnxruntime"] else "NO")
        lines.append(f"{r['name']:<21} {shape:<12} {r['polyquant_ms']:>6.1f} ms {pct(r['of_copy']):>8} "
                     f"{r['polyquant_out_ms']:>6.1f} ms {pct(r['out_of_copyto']):>9} {ort:>11} {sp:>8}  {ex}")
    return "\n".join(lines)
