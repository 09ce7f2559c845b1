"""`polyquant bench`: throughput of the QONNX ops against an in-process memcpy and qonnx's numpy functions,
and of the QKeras quantizers against numpy copies, the minimum passes their scale searches need, and QKeras.

Method (see shared/reference/performance.md, sections 1 and 8): every op runs on the same N float32
elements. Each repeat times, back to back, a memcpy of the input into a preallocated array
(``_polyquant_ext.copy``: one memcpy call with the GIL released), a memcpy into a freshly allocated
``np.empty`` array, and the polyquant op, which allocates its output on every call. Reported figures are
medians over the repeats. GB/s counts 8 bytes per element (4 read + 4 written, STREAM convention).

Two ratios to memcpy are given, because a fresh 256 MiB output costs page faults on first touch:
``steady`` divides by the memcpy into a reused array, ``alloc`` by the memcpy into a fresh array (the
like-for-like comparison while the Python API returns new arrays). If the ops accept ``out=``, they are
also timed writing into a reused array and compared with the steady memcpy.

qonnx's numpy functions (the peers) take seconds at the default size, so they are timed on fewer repeats
(``--peer-repeat``, default 3); their result is also compared bit for bit with polyquant's.

QKeras quantizers (``qk_*`` cases) run on a (N / 16384, 16384) float32 array, channels last (per-channel
scales for the auto alphas), as QKeras' own timings were taken. Their baselines are numpy's: the allocating
call against ``x.copy()``, the ``out=`` call against ``np.copyto(out, x)``. A data-dependent scale needs
passes over x before the quantizing pass: one for the max-based scale ("auto"), plus the least-squares
rounds of "auto_po2" until the scale is a fixed point (QKeras runs five in quantized_bits; polyquant stops
at the fixed point, whose round must still be run to be known). So the least time such a call can take is
``reads * t(x.sum()) + t(copy)``, the reads counted by the call itself (``min_passes_ratio`` = op time /
that). QKeras itself cannot run here (TensorFlow): its medians, measured once by
``scripts/qkeras_golden/generate.py --timings-only`` on this project's machine, are read from
``--qkeras-timings`` (default: that script's ``peer_timings.json`` when run from a checkout) and give
``speedup_vs_qkeras`` for the allocating call; they were taken at 64 Mi elements.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from polyquant.runner import CommandError, compare, progress

DEFAULT_SIZE = 64 * 1024 * 1024
CHANNELS = 64
BYTES_PER_ELEMENT = 8  # float32 in, float32 out


def _f32(value):
    return np.asarray(value, dtype=np.float32)


@dataclass
class Case:
    name: str
    description: str
    per_channel: bool
    polyquant: object          # fn(x, **kw) -> array
    peer: object               # fn(x) -> array, qonnx's numpy function (None if qonnx is missing)


def make_cases(peers=True):
    """The benchmarked ops, in order. Parameters are float32 0-d (or (64,1)) arrays, as in ONNX models."""
    from polyquant import qonnx as pq

    ref = None
    if peers:
        try:
            import qonnx.custom_op.general.bipolar_quant as ref_bipolar
            import qonnx.custom_op.general.floatquant as ref_float
            import qonnx.custom_op.general.intquant as ref_int
            import qonnx.custom_op.general.trunc as ref_trunc
            ref = True
        except Exception:  # not installed, or not importable (qonnx 1.0.0 needs Python >= 3.10)
            ref = None

    def as_f32(y):
        # qonnx's IntQuant/FloatQuant execute_node cast to float32 when numpy promoted the result.
        return y if y.dtype == np.float32 else y.astype(np.float32)

    zero, b8, b4 = _f32(0), _f32(8), _f32(4)
    s_tensor = _f32(0.05)
    s_channel = _f32(np.linspace(0.02, 0.08, CHANNELS).reshape(CHANNELS, 1))
    s_trunc, s_out = _f32(2.0**-4), _f32(1.0)
    # FloatQuant with a scale that is not a power of two: the kernel's slower, dividing path.
    s_bipolar, s_fp8 = _f32(0.5), _f32(0.0375)
    e4, m3, bias7, max448 = _f32(4), _f32(3), _f32(7), _f32(448)

    cases = [
        Case("intquant", "IntQuant ROUND, per-tensor scale, 8-bit signed", False,
             lambda x, **kw: pq.int_quant(x, s_tensor, zero, b8, 1, 0, "ROUND", **kw),
             ref and (lambda x: as_f32(ref_int.int_quant(x, s_tensor, zero, b8, 1, 0, "ROUND")))),
        Case("intquant_pc", f"IntQuant ROUND, per-channel scale ({CHANNELS},1), 4-bit signed narrow", True,
             lambda x, **kw: pq.int_quant(x, s_channel, zero, b4, 1, 1, "ROUND", **kw),
             ref and (lambda x: as_f32(ref_int.int_quant(x, s_channel, zero, b4, 1, 1, "ROUND")))),
        Case("intquant_half_up", "IntQuant HALF_UP, per-tensor scale, 8-bit signed narrow", False,
             lambda x, **kw: pq.int_quant(x, s_tensor, zero, b8, 1, 1, "HALF_UP", **kw),
             ref and (lambda x: as_f32(ref_int.int_quant(x, s_tensor, zero, b8, 1, 1, "HALF_UP")))),
        Case("bipolar", "BipolarQuant, per-tensor scale", False,
             lambda x, **kw: pq.bipolar_quant(x, s_bipolar, **kw),
             ref and (lambda x: ref_bipolar.binary_quant(x, s_bipolar))),
        Case("trunc", "Trunc v1, 8 -> 4 bits, FLOOR", False,
             lambda x, **kw: pq.trunc(x, s_trunc, zero, b8, b4, "FLOOR", **kw),
             ref and (lambda x: ref_trunc.trunc_v1(x, s_trunc, zero, b8, b4, "FLOOR"))),
        Case("trunc_v2", "Trunc v2, 8 -> 4 bits, out_scale 16*scale, signed, FLOOR", False,
             lambda x, **kw: pq.trunc_v2(x, s_trunc, zero, b8, 0, 1, s_out, b4, "FLOOR", **kw),
             ref and (lambda x: ref_trunc.trunc_v2(x, s_trunc, zero, b8, 0, 1, s_out, b4, "FLOOR"))),
        Case("floatquant", "FloatQuant FP8 E4M3 (bias 7, max 448, NaN, saturating), ROUND", False,
             # As the FloatQuant node computes it: float32 output (the function itself returns float64).
             lambda x, out=None: pq.float_quant(x, s_fp8, e4, m3, bias7, True, max448, 0, 1, 1, "ROUND", 1,
                                                out=np.empty(x.shape, np.float32) if out is None else out),
             ref and (lambda x: as_f32(ref_float.float_quant(x, s_fp8, e4, m3, bias7, True, max448,
                                                             0, 1, 1, "ROUND", 1)))),
    ]
    return cases


CASE_NAMES = ["intquant", "intquant_pc", "intquant_half_up", "bipolar", "trunc", "trunc_v2", "floatquant"]


@dataclass
class QkCase:
    name: str
    description: str
    make: object           # () -> polyquant.qkeras quantizer
    peer_key: str          # its entry in QKeras' recorded timings
    search: bool           # alpha "auto"/"auto_po2": passes over x before the quantizing pass


def make_qkeras_cases():
    from polyquant import qkeras as qk

    return [
        QkCase("qk_bits", "quantized_bits(8, 0, alpha=1)", lambda: qk.quantized_bits(8, 0, alpha=1),
               "quantized_bits(8,0,alpha=1)", False),
        QkCase("qk_relu", "quantized_relu(8, 0)", lambda: qk.quantized_relu(8, 0), "quantized_relu(8,0)", False),
        QkCase("qk_linear", "quantized_linear(8, 0, alpha=1)", lambda: qk.quantized_linear(8, 0, alpha=1),
               "quantized_linear(8,0,alpha=1)", False),
        QkCase("qk_bits_auto", "quantized_bits(8, 0, alpha='auto')", lambda: qk.quantized_bits(8, 0, alpha="auto"),
               "quantized_bits(8,0,alpha='auto')", True),
        QkCase("qk_bits_auto_po2", "quantized_bits(8, 0, alpha='auto_po2')",
               lambda: qk.quantized_bits(8, 0, alpha="auto_po2"), "quantized_bits(8,0,alpha='auto_po2')", True),
        QkCase("qk_linear_auto", "quantized_linear(8, 0, alpha='auto')", lambda: qk.quantized_linear(8, 0, alpha="auto"),
               "quantized_linear(8,0,alpha='auto')", True),
        QkCase("qk_linear_auto_po2", "quantized_linear(8, 0, alpha='auto_po2')",
               lambda: qk.quantized_linear(8, 0, alpha="auto_po2"), "quantized_linear(8,0,alpha='auto_po2')", True),
    ]


QKERAS_CASE_NAMES = ["qk_bits", "qk_relu", "qk_linear", "qk_bits_auto", "qk_bits_auto_po2", "qk_linear_auto",
                     "qk_linear_auto_po2"]


# ---- linear quantize / dequantize (polyquant.onnx, polyquant.quark) against onnxruntime's own ops ----
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


def make_qdq_cases(size):
    rows = size // 16384 if size % 16384 == 0 else size // CHANNELS
    wide = (rows, size // rows)               # (4096, 16384) at the default size
    last = (size // CHANNELS, CHANNELS)       # channels last: 64 channels of one element per slice

    def tensor(dtype):
        return lambda shape: dict(scale=np.float32(0.05), zero_point=np.array(3, dtype), axis=1, block_size=0)

    def axis(dtype, a):
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

    return [
        QdqCase("q_uint8", "QuantizeLinear -> uint8, per-tensor", wide, "q", tensor(np.uint8)),
        QdqCase("q_int8", "QuantizeLinear -> int8, per-tensor", wide, "q", tensor(np.int8)),
        QdqCase("q_int8_axis0", f"QuantizeLinear -> int8, per-axis on axis 0 ({wide[0]} channels)", wide, "q",
                axis(np.int8, 0)),
        QdqCase("q_int8_axis_last", f"QuantizeLinear -> int8, per-axis on the last axis ({CHANNELS} channels)", last,
                "q", axis(np.int8, 1)),
        QdqCase("q_int8_blocked", f"QuantizeLinear -> int8, blocked on the last axis (block {QDQ_BLOCK})", wide, "q",
                blocked(np.int8)),
        QdqCase("dq_int8", "DequantizeLinear int8 -> float32, per-tensor", wide, "dq", tensor(np.int8)),
        QdqCase("dq_uint8_axis_last", f"DequantizeLinear uint8, per-axis on the last axis ({CHANNELS} channels)", last,
                "dq", axis(np.uint8, 1)),
        QdqCase("dq_int8_blocked", f"DequantizeLinear int8, blocked on the last axis (block {QDQ_BLOCK})", wide, "dq",
                blocked(np.int8)),
        QdqCase("quark_q_int16_axis1", "Quark ExtendedQuantizeLinear -> int16, per-axis on axis 1", wide, "q",
                axis(np.int16, 1), quark=True),
        QdqCase("ort_quark_q_int8", "onnxruntime session: Quark ExtendedQuantizeLinear -> int8, per-tensor "
                "(polyquant's library) vs onnxruntime's QuantizeLinear", wide, "q", tensor(np.int8), quark=True,
                through_ort=True),
        QdqCase("ort_quark_dq_int8_axis1", "onnxruntime session: Quark ExtendedDequantizeLinear int8, per-axis on "
                "axis 1 (polyquant's library) vs onnxruntime's DequantizeLinear", wide, "dq", axis(np.int8, 0),
                quark=True, through_ort=True),
    ]


QDQ_CASE_NAMES = ["q_uint8", "q_int8", "q_int8_axis0", "q_int8_axis_last", "q_int8_blocked", "dq_int8",
                  "dq_uint8_axis_last", "dq_int8_blocked", "quark_q_int16_axis1", "ort_quark_q_int8",
                  "ort_quark_dq_int8_axis1"]
from ._bench_aimet import AIMET_CASE_NAMES  # noqa: E402

ALL_CASE_NAMES = CASE_NAMES + QKERAS_CASE_NAMES + QDQ_CASE_NAMES + AIMET_CASE_NAMES
QKERAS_CHANNELS = 16384
DEFAULT_QKERAS_TIMINGS = "scripts/qkeras_golden/peer_timings.json"


def _accepts_out(fn, x):
    """Whether the polyquant op takes an `out=` array (tried on a small slice)."""
    small = x[..., :8]
    try:
        fn(small, out=np.empty_like(small))
    except TypeError:
        return False
    return True


@dataclass
class OpResult:
    name: str
    description: str
    shape: list
    polyquant_ms: float
    memcpy_ms: float
    memcpy_alloc_ms: float
    gbps: float
    of_memcpy: float              # memcpy (reused dst) time / op time
    of_memcpy_alloc: float        # memcpy (fresh dst) time / op time
    polyquant_out_ms: float | None = None   # op writing into a reused array (only if `out=` exists)
    out_of_memcpy: float | None = None
    qonnx_ms: float | None = None
    speedup_vs_qonnx: float | None = None
    bit_exact_vs_qonnx: bool | None = None
    samples_ms: dict = field(default_factory=dict)


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_case(case, x, dst, repeat, peer_repeat, bar):
    from polyquant import _polyquant_ext as ext

    data = x.reshape(CHANNELS, -1) if case.per_channel else x
    out = dst.reshape(data.shape)
    has_out = _accepts_out(case.polyquant, data)
    case.polyquant(data)  # warm-up: thread pool, kernel selection
    samples = {"memcpy": [], "memcpy_alloc": [], "polyquant": [], "polyquant_out": []}
    result = None
    for _ in range(repeat):
        bar.set_postfix_str(case.name, refresh=False)
        samples["memcpy"].append(_timed(lambda: ext.copy(x, dst))[0])
        fresh_s, fresh = _timed(lambda: _copy_to_fresh(ext, x))
        samples["memcpy_alloc"].append(fresh_s)
        del fresh
        result = None  # free the previous output before the op allocates the next one
        op_s, result = _timed(lambda: case.polyquant(data))
        samples["polyquant"].append(op_s)
        if has_out:
            samples["polyquant_out"].append(_timed(lambda: case.polyquant(data, out=out))[0])
        bar.update(1)

    med = {k: statistics.median(v) for k, v in samples.items() if v}
    op = OpResult(
        case.name, case.description, list(data.shape), med["polyquant"] * 1e3, med["memcpy"] * 1e3,
        med["memcpy_alloc"] * 1e3, BYTES_PER_ELEMENT * x.size / med["polyquant"] / 1e9,
        med["memcpy"] / med["polyquant"], med["memcpy_alloc"] / med["polyquant"],
        samples_ms={k: [round(s * 1e3, 3) for s in v] for k, v in samples.items() if v})
    if has_out:
        op.polyquant_out_ms = med["polyquant_out"] * 1e3
        op.out_of_memcpy = med["memcpy"] / med["polyquant_out"]

    if case.peer is not None and peer_repeat > 0:
        peer_times, expected = [], None
        for _ in range(peer_repeat):
            bar.set_postfix_str(f"{case.name} (qonnx)", refresh=False)
            expected = None
            peer_s, expected = _timed(lambda: case.peer(data))
            peer_times.append(peer_s)
            bar.update(1)
        op.qonnx_ms = statistics.median(peer_times) * 1e3
        op.speedup_vs_qonnx = op.qonnx_ms / op.polyquant_ms
        # Both results: the one the op allocated and, if timed, the one it wrote into `out`.
        op.bit_exact_vs_qonnx = all(compare(r, expected).exact for r in ([result, out] if has_out else [result]))
        op.samples_ms["qonnx"] = [round(s * 1e3, 3) for s in peer_times]
    return op


def _copy_to_fresh(ext, x):
    out = np.empty_like(x)
    ext.copy(x, out)
    return out


@dataclass
class QkResult:
    name: str
    description: str
    shape: list
    polyquant_ms: float           # allocating call q(x)
    polyquant_out_ms: float       # q(x, out=out)
    copy_ms: float                # x.copy()
    copyto_ms: float              # np.copyto(out, x)
    read_ms: float                # x.sum(): one read-only pass
    of_copy: float                # copy time / op time (allocating)
    out_of_copyto: float          # copyto time / op time (out=)
    reads: int = 0                # passes over x before the quantizing pass (scale searches)
    least_squares_rounds: int = 0
    min_passes_ms: float | None = None       # reads * read + copy
    min_passes_ratio: float | None = None    # op time / min_passes_ms (allocating)
    min_passes_out_ms: float | None = None   # reads * read + copyto
    min_passes_out_ratio: float | None = None
    qkeras_ms: float | None = None           # recorded QKeras median (TensorFlow CPU)
    speedup_vs_qkeras: float | None = None
    samples_ms: dict = field(default_factory=dict)


def _search_passes(q, x):
    """(reads before the quantizing pass, least-squares rounds) of a call q(x), as the core counts them."""
    from polyquant import _polyquant_ext as ext

    info = {}
    fn = ext.qkeras_bits if type(q).__name__ == "quantized_bits" else ext.qkeras_linear
    fn(x, q._operand(), q._config(False, None), False, None, info)
    return info.get("max_passes", 0) + info.get("least_squares_rounds", 0), info.get("least_squares_rounds", 0)


def bench_qkeras_case(case, x, out, repeat, peer_timings, bar):
    q = case.make()
    q(x)  # warm-up: thread pool, kernel selection
    samples = {"copy": [], "copyto": [], "read": [], "polyquant": [], "polyquant_out": []}
    for _ in range(repeat):
        bar.set_postfix_str(case.name, refresh=False)
        fresh_s, fresh = _timed(lambda: x.copy())
        samples["copy"].append(fresh_s)
        del fresh
        samples["copyto"].append(_timed(lambda: np.copyto(out, x))[0])
        samples["read"].append(_timed(lambda: x.sum())[0])
        op_s, result = _timed(lambda: q(x))
        samples["polyquant"].append(op_s)
        del result
        samples["polyquant_out"].append(_timed(lambda: q(x, out=out))[0])
        bar.update(1)
    med = {k: statistics.median(v) for k, v in samples.items()}
    r = QkResult(case.name, case.description, list(x.shape), med["polyquant"] * 1e3, med["polyquant_out"] * 1e3,
                 med["copy"] * 1e3, med["copyto"] * 1e3, med["read"] * 1e3, med["copy"] / med["polyquant"],
                 med["copyto"] / med["polyquant_out"],
                 samples_ms={k: [round(t * 1e3, 3) for t in v] for k, v in samples.items()})
    if case.search:
        r.reads, r.least_squares_rounds = _search_passes(q, x)
        r.min_passes_ms = r.reads * r.read_ms + r.copy_ms
        r.min_passes_ratio = r.polyquant_ms / r.min_passes_ms
        r.min_passes_out_ms = r.reads * r.read_ms + r.copyto_ms
        r.min_passes_out_ratio = r.polyquant_out_ms / r.min_passes_out_ms
    peer = (peer_timings or {}).get(case.peer_key)
    if peer is not None:
        r.qkeras_ms = peer["median_s"] * 1e3
        r.speedup_vs_qkeras = r.qkeras_ms / r.polyquant_ms
    return r


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
    try:
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
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
        from polyquant import ort as polyquant_ort

        options.register_custom_ops_library(str(polyquant_ort.library_path()))
    try:
        return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:
        return None


def bench_qdq_case(case, x_flat, repeat, bar, peers=True):
    import polyquant.onnx as pqo
    import polyquant.quark as pqq

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
        import onnxruntime

        ort_out = np.empty_like(out)
        binding = session.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_output("y", "cpu", 0, ort_out.dtype, list(ort_out.shape), ort_out.ctypes.data)
        session.run_with_iobinding(binding)  # warm-up
    samples = {"copy": [], "copyto": [], "polyquant": [], "polyquant_out": [], "onnxruntime": []}
    for _ in range(repeat):
        bar.set_postfix_str(case.name, refresh=False)
        fresh_s, fresh = _timed(lambda: xf.copy())
        samples["copy"].append(fresh_s)
        del fresh
        samples["copyto"].append(_timed(lambda: np.copyto(copy_dst, xf))[0])
        op_s, result = _timed(fn)
        samples["polyquant"].append(op_s)
        del result
        samples["polyquant_out"].append(_timed(lambda: fn(out=out))[0])
        if binding is not None:
            samples["onnxruntime"].append(_timed(lambda: session.run_with_iobinding(binding))[0])
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


def _load_qkeras_timings(path):
    import os

    if path is None:
        path = DEFAULT_QKERAS_TIMINGS if os.path.exists(DEFAULT_QKERAS_TIMINGS) else None
        if path is None:
            return None, None
    try:
        with open(path) as f:
            data = json.load(f)
        return data, path
    except (OSError, ValueError) as e:
        raise CommandError(f"--qkeras-timings: cannot read {path}: {e}") from e


def run_bench(size=DEFAULT_SIZE, repeat=5, ops=None, peers=True, peer_repeat=3, seed=0, qkeras_timings=None):
    """Benchmark the selected ops; returns a JSON-ready dict."""
    import polyquant

    if size <= 0 or size % CHANNELS:
        raise CommandError(f"--size must be a positive multiple of {CHANNELS} (per-channel shape ({CHANNELS}, N/{CHANNELS}))")
    if repeat < 1 or peer_repeat < 0:
        raise CommandError("--repeat must be at least 1 and --peer-repeat at least 0")
    cases = [c for c in make_cases(peers) if ops is None or c.name in ops]
    qk_cases = [c for c in make_qkeras_cases() if ops is None or c.name in ops]
    qdq_cases = [c for c in make_qdq_cases(size) if ops is None or c.name in ops]
    from ._bench_aimet import bench_aimet_case, bench_analyzer_case, load_aimet_timings, make_aimet_cases, make_analyzer_cases
    aimet_cases = [c for c in make_aimet_cases(size) if ops is None or c.name in ops] if size % 16384 == 0 else []
    analyzer_cases = [c for c in make_analyzer_cases(size) if ops is None or c.name in ops] if size % 16384 == 0 else []
    aimet_recorded = load_aimet_timings() if (aimet_cases or analyzer_cases) else None
    peers_available = any(c.peer is not None for c in cases)
    qk_peer, qk_peer_path = _load_qkeras_timings(qkeras_timings) if (peers and qk_cases) else (None, None)

    rng = np.random.default_rng(seed)
    x = rng.standard_normal(size, dtype=np.float32)
    x *= 4.0  # spread over the 8-bit range at scale 0.05 and over many FP8 binades
    dst = np.empty_like(x)
    dst.fill(0)  # touch every page once: steady-state memcpy must not pay first-touch faults

    steps = (len(cases) * (repeat + (peer_repeat if peers_available else 0))
             + (len(qk_cases) + len(qdq_cases) + len(aimet_cases) + len(analyzer_cases)) * repeat)
    results, qk_results, qdq_results, aimet_results = [], [], [], []
    with progress(None, "bench", total=steps, unit="step") as bar:
        for case in cases:
            results.append(bench_case(case, x, dst, repeat, peer_repeat if peers else 0, bar))
        if qk_cases:
            channels = QKERAS_CHANNELS if size % QKERAS_CHANNELS == 0 else CHANNELS
            xq, outq = x.reshape(-1, channels), dst.reshape(-1, channels)
            # QKeras' medians are for its recorded size only.
            recorded = (qk_peer or {}).get("results") if (qk_peer or {}).get("elements") == size else None
            for case in qk_cases:
                qk_results.append(bench_qkeras_case(case, xq, outq, repeat, recorded, bar))
        for case in qdq_cases:
            qdq_results.append(bench_qdq_case(case, x, repeat, bar, peers))
        for case in aimet_cases:
            aimet_results.append(bench_aimet_case(case, x, repeat, aimet_recorded if peers else None, bar))
        for case in analyzer_cases:
            aimet_results.append(bench_analyzer_case(case, x, repeat, aimet_recorded if peers else None, bar))

    info = polyquant.runtime_info()
    qonnx_version = None
    if peers_available:
        from importlib.metadata import PackageNotFoundError, version
        try:
            qonnx_version = version("qonnx")
        except PackageNotFoundError:
            qonnx_version = "unknown"
    return {
        "size": size,
        "bytes_per_array": 4 * size,
        "repeat": repeat,
        "peer_repeat": peer_repeat if peers_available else 0,
        "bytes_per_element_counted": BYTES_PER_ELEMENT,
        "baseline": "polyquant._polyquant_ext.copy: one memcpy call on one thread, GIL released",
        "polyquant": dict(info),
        "qonnx": qonnx_version,
        "numpy": np.__version__,
        "machine": platform.machine(),
        "ops": [asdict(r) for r in results],
        "qkeras": [asdict(r) for r in qk_results],
        "qdq": [asdict(r) for r in qdq_results],
        "aimet": aimet_results,
        "aimet_peer": None if aimet_recorded is None else {
            "versions": aimet_recorded.get("versions"), "elements": aimet_recorded.get("elements"),
            "statistic": aimet_recorded.get("statistic"), "note": aimet_recorded.get("note")},
        "onnxruntime": _ort_version() if qdq_results else None,
        "qkeras_peer": None if qk_peer is None else {
            "file": qk_peer_path, "elements": qk_peer.get("elements"), "versions": qk_peer.get("versions"),
            "machine": qk_peer.get("machine"), "statistic": qk_peer.get("statistic")},
    }


def _ort_version():
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
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        ort = "-" if r["onnxruntime_ms"] is None else f"{r['onnxruntime_ms']:.1f} ms"
        sp = "-" if r["speedup_vs_onnxruntime"] is None else f"{r['speedup_vs_onnxruntime']:.1f}x"
        ex = "-" if r["bit_exact_vs_onnxruntime"] is None else ("yes" if r["bit_exact_vs_onnxruntime"] else "NO")
        lines.append(f"{r['name']:<21} {shape:<12} {r['polyquant_ms']:>6.1f} ms {_pct(r['of_copy']):>8} "
                     f"{r['polyquant_out_ms']:>6.1f} ms {_pct(r['out_of_copyto']):>9} {ort:>11} {sp:>8}  {ex}")
    return "\n".join(lines)


def _pct(value):
    return "-" if value is None else f"{100 * value:.0f}%"


def format_report(report):
    info = report["polyquant"]
    mib = report["bytes_per_array"] / 2**20
    lines = [
        f"polyquant {info.get('version')} ({info.get('isa')}, {info.get('num_threads')} threads), "
        f"numpy {report['numpy']}, qonnx {report['qonnx'] or 'not used'}",
        f"{report['size']} float32 elements ({mib:.0f} MiB per array); medians of {report['repeat']} interleaved "
        f"repeats" + (f", qonnx peers: medians of {report['peer_repeat']} repeats (slow)" if report["peer_repeat"] else ""),
        "GB/s counts 8 B/element (read + write). vs memcpy = memcpy time / op time, memcpy being one memcpy call",
        "(one thread): 'steady' copies into a reused array, 'alloc' into a fresh np.empty array (the op allocates",
        "its output on each call, like 'alloc'; 'out=' times the op writing into a reused array, if it can).",
        "",
    ]
    if not report["ops"]:
        return "\n".join(lines[:2])
    has_out = any(op["polyquant_out_ms"] is not None for op in report["ops"])
    header = (f"{'op':<17} {'shape':<16} {'polyquant':>10} {'GB/s':>6} {'memcpy':>9} {'steady':>7} {'alloc':>6}"
              + (f" {'out=':>9} {'steady':>7}" if has_out else "")
              + f" {'qonnx':>10} {'speedup':>8}  bit-exact")
    lines += [header, "-" * len(header)]
    for op in report["ops"]:
        shape = "x".join(map(str, op["shape"]))
        row = (f"{op['name']:<17} {shape:<16} {op['polyquant_ms']:>7.2f} ms {op['gbps']:>6.1f} "
               f"{op['memcpy_ms']:>6.2f} ms {_pct(op['of_memcpy']):>7} {_pct(op['of_memcpy_alloc']):>6}")
        if has_out:
            out_ms = "-" if op["polyquant_out_ms"] is None else f"{op['polyquant_out_ms']:.2f} ms"
            row += f" {out_ms:>9} {_pct(op['out_of_memcpy']):>7}"
        if op["qonnx_ms"] is None:
            row += f" {'-':>10} {'-':>8}  -"
        else:
            row += (f" {op['qonnx_ms']:>7.1f} ms {op['speedup_vs_qonnx']:>7.1f}x  "
                    f"{'yes' if op['bit_exact_vs_qonnx'] else 'NO'}")
        lines.append(row)
    return "\n".join(lines)


def format_qkeras_report(report):
    rows = report["qkeras"]
    if not rows:
        return ""
    peer = report.get("qkeras_peer")
    lines = [
        "",
        "QKeras quantizers on a channels-last array; copy = x.copy() (allocating call), copyto = np.copyto (out=);",
        "min passes = reads * x.sum() + copy, reads = the passes the scale search made (max, least-squares rounds).",
        ("QKeras: recorded medians from " + str(peer["file"]) + f" ({peer['elements']} elements, TensorFlow "
         + str((peer.get("versions") or {}).get("tensorflow")) + ")") if peer else "QKeras: no recorded timings",
        "",
    ]
    header = (f"{'op':<19} {'shape':<11} {'alloc':>9} {'of copy':>8} {'out=':>9} {'of copyto':>9} {'reads':>5} "
              f"{'x min':>6} {'x min out':>9} {'QKeras':>9} {'speedup':>8}")
    lines += [header, "-" * len(header)]
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        mins = "-" if r["min_passes_ratio"] is None else f"{r['min_passes_ratio']:.2f}"
        mins_out = "-" if r["min_passes_out_ratio"] is None else f"{r['min_passes_out_ratio']:.2f}"
        qk = "-" if r["qkeras_ms"] is None else f"{r['qkeras_ms']:.0f} ms"
        sp = "-" if r["speedup_vs_qkeras"] is None else f"{r['speedup_vs_qkeras']:.1f}x"
        lines.append(f"{r['name']:<19} {shape:<11} {r['polyquant_ms']:>6.1f} ms {_pct(r['of_copy']):>8} "
                     f"{r['polyquant_out_ms']:>6.1f} ms {_pct(r['out_of_copyto']):>9} {r['reads']:>5} {mins:>6} "
                     f"{mins_out:>9} {qk:>9} {sp:>8}")
    lines.append(f"(x.copy() {rows[0]['copy_ms']:.1f} ms, np.copyto {rows[0]['copyto_ms']:.1f} ms, "
                 f"x.sum() {rows[0]['read_ms']:.1f} ms in the first case's run)")
    return "\n".join(lines)


def bench_command(args, out=sys.stdout):
    """`polyquant bench`: returns the exit status (1 if an op differs from qonnx)."""
    report = run_bench(args.size, args.repeat, args.ops, peers=not args.no_peers, peer_repeat=args.peer_repeat,
                       seed=args.seed, qkeras_timings=getattr(args, "qkeras_timings", None))
    if args.json:
        print(json.dumps(report, indent=2), file=out)
    else:
        print(format_report(report), file=out)
        if report["qkeras"]:
            print(format_qkeras_report(report), file=out)
        if report["qdq"]:
            print(format_qdq_report(report), file=out)
        if report.get("aimet"):
            from ._bench_aimet import format_aimet_report, load_aimet_timings
            print(format_aimet_report(report["aimet"], load_aimet_timings()), file=out)
    mismatch = any(op["bit_exact_vs_qonnx"] is False for op in report["ops"])
    mismatch = mismatch or any(r["bit_exact_vs_onnxruntime"] is False for r in report["qdq"])
    return 1 if mismatch else 0
