"""`polyquant bench` cases of the QONNX ops (polyquant.qonnx).

qonnx's numpy functions (the peers) take seconds at the default size, so they are timed on fewer repeats
(``--peer-repeat``, default 3); their result is also compared bit for bit with polyquant's.

``alloc_qonnx_quant`` (``ALLOC_CASE_NAMES``) times Quant (IntQuant 8-bit) allocating against ``out=``, and
``qonnx_quant_from_float16`` (``INPUT_CASE_NAMES``) Quant on a float16 x (float32 out, what polyquant.qonnx.quant
returns for it), ``qonnx_quant_float16_work`` on a float16 x with float16 parameters (numpy's float16
arithmetic, a float16 result), and ``qonnx_float_quant_float16_work`` FloatQuant (OCP E4M3) the same way (a float64
result, as qonnx's function returns), in the harnesses of bench/common.py. There is no bfloat16 case: polyquant.qonnx takes
the input types qonnx's numpy functions take (float16/32/64, integers, bool), and raises TypeError on
bfloat16.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np

from ... import _polyquant_ext as ext
from ... import qonnx as pq
from ..common import compare
from .common import BYTES_PER_ELEMENT, CHANNELS, AllocCase, InputCase, interleaved_seconds, pct, timed


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


def _quant_8bit(x, out=None):
    """Quant (IntQuant) 8-bit signed, per-tensor scale 0.05, ROUND: the allocating and 16-bit x cases' call."""
    return pq.quant(x, _f32(0.05), _f32(0), _f32(8), 1, 0, "ROUND", out=out)


def make_alloc_cases():
    def make(x):
        return (lambda out=None: _quant_8bit(x, out=out)), np.zeros(x.shape, np.float32), None

    return [AllocCase("alloc_qonnx_quant", "qonnx", "polyquant.qonnx.quant (IntQuant 8-bit, per-tensor)", make)]


def make_input_cases():
    def make(x):
        return (lambda out: _quant_8bit(x, out=out)), np.zeros(x.shape, np.float32)

    def make_float16_work(x):
        # every operand float16: numpy's float16 arithmetic, a float16 result
        f16 = np.float16
        return (lambda out: pq.quant(x, f16(0.05), f16(0), f16(8), 1, 0, "ROUND", out=out)), np.zeros(x.shape, np.float16)

    def make_float_quant_float16_work(x):
        # OCP E4M3 with every operand float16: float16 work, the function's float64 result
        f16 = np.float16
        args = (f16(0.05), f16(4), f16(3), f16(7), True, f16(448), 0, 0, 1, "ROUND", 1)
        return (lambda out: pq.float_quant(x, *args, out=out)), np.zeros(x.shape, np.float64)

    return [InputCase("qonnx_quant_from_float16", "qonnx", "polyquant.qonnx.quant (IntQuant 8-bit) float16 x -> float32",
                      np.float16, make),
            InputCase("qonnx_quant_float16_work", "qonnx",
                      "polyquant.qonnx.quant (IntQuant 8-bit) float16 x, scale, zeropt -> float16 (float16 work)", np.float16,
                      make_float16_work),
            InputCase("qonnx_float_quant_float16_work", "qonnx",
                      "polyquant.qonnx.float_quant (E4M3) float16 x and parameters -> float64 (float16 work)", np.float16,
                      make_float_quant_float16_work)]


ALLOC_CASE_NAMES = ["alloc_qonnx_quant"]
INPUT_CASE_NAMES = ["qonnx_quant_from_float16", "qonnx_quant_float16_work", "qonnx_float_quant_float16_work"]


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


def bench_case(case, x, dst, repeat, peer_repeat, bar):
    data = x.reshape(CHANNELS, -1) if case.per_channel else x
    out = dst.reshape(data.shape)
    has_out = _accepts_out(case.polyquant, data)
    fns = {"memcpy": lambda: ext.copy(x, dst), "memcpy_alloc": lambda: _copy_to_fresh(ext, x),
           "polyquant": lambda: case.polyquant(data)}
    if has_out:
        fns["polyquant_out"] = lambda: case.polyquant(data, out=out)
    bar.set_postfix_str(case.name, refresh=False)
    # Each output is freed before the op allocates the next one (the timer drops every result).
    samples = dict(zip(fns, interleaved_seconds(list(fns.values()), repeat, lambda: bar.update(1))))
    result = case.polyquant(data)  # the allocating call's result, compared with qonnx's below

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
            peer_s, expected = timed(lambda: case.peer(data))
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
               f"{op['memcpy_ms']:>6.2f} ms {pct(op['of_memcpy']):>7} {pct(op['of_memcpy_alloc']):>6}")
        if has_out:
            out_ms = "-" if op["polyquant_out_ms"] is None else f"{op['polyquant_out_ms']:.2f} ms"
            row += f" {out_ms:>9} {pct(op['out_of_memcpy']):>7}"
        if op["qonnx_ms"] is None:
            row += f" {'-':>10} {'-':>8}  -"
        else:
            row += (f" {op['qonnx_ms']:>7.1f} ms {op['speedup_vs_qonnx']:>7.1f}x  "
                    f"{'yes' if op['bit_exact_vs_qonnx'] else 'NO'}")
        lines.append(row)
    return "\n".join(lines)
