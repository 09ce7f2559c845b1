"""`polyquant bench` cases of AIMET's quantize_dequantize (polyquant.aimet): each timed against a
numpy copy of the same float32 array (x.copy() for the allocating call) in the same run, and
against aimet-torch's recorded medians (tools/golden/speed/aimet_peer_timings.json, measured on this
kind of machine by the golden-data generator; aimet-torch is not installed where polyquant runs).
For a same-run comparison with aimet-torch itself, run tools/golden/speed/compare_aimet.py in the
generator's environment."""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ... import aimet

DEFAULT_AIMET_TIMINGS = "tools/golden/speed/aimet_peer_timings.json"  # from a checkout, as for QKeras


@dataclass
class AimetCase:
    name: str
    description: str
    shape: tuple
    params: object      # shape -> (scale, offset, kwargs)
    peer_key: str       # its entry in aimet-torch's recorded timings


def make_aimet_cases(size):
    rows = size // 16384
    wide, last = (rows, 16384), (size // 64, 64)

    def per_tensor(shape):
        return np.float32(0.05), np.float32(-3.0), {}

    def first_axis(shape):
        return np.full((shape[0], 1), 0.05, np.float32), np.full((shape[0], 1), -3.0, np.float32), {}

    def last_axis(shape):
        return np.full((shape[1],), 0.05, np.float32), np.full((shape[1],), -3.0, np.float32), {}

    def blocks(shape):
        n = (shape[0], shape[1] // 32)
        return np.full(n, 0.05, np.float32), np.full(n, -3.0, np.float32), {"block_size": (1, 32)}

    return [
        AimetCase("aimet_qdq", "quantize_dequantize 8-bit per-tensor (no-grad shortcut)", wide, per_tensor,
                  "quantize_dequantize 8-bit, per-tensor, no grad"),
        AimetCase("aimet_qdq_axis0", "quantize_dequantize 8-bit per-channel, scale (rows, 1)", wide, first_axis,
                  "quantize_dequantize 8-bit, per-channel axis 0, scale (4096, 1), no grad"),
        AimetCase("aimet_qdq_axis_last", "quantize_dequantize 8-bit per-channel, scale (64,)", last, last_axis,
                  "quantize_dequantize 8-bit, per-channel last axis, x (1048576, 64), scale (64,), no grad"),
        AimetCase("aimet_qdq_blocked", "quantize_dequantize 8-bit blockwise, block_size (1, 32)", wide, blocks,
                  "quantize_dequantize 8-bit, blockwise, scale (4096, 512), block_size (1, 32), no grad"),
    ]


@dataclass
class AnalyzerCase:
    name: str
    description: str
    make: object        # params shape -> polyquant analyzer
    params: tuple       # the analyzer's shape on (rows, 16384)
    peer_keys: tuple    # aimet-torch's recorded update_stats (+ compute_encodings) entries
    read_only: bool     # compare with a read-only pass (x.sum()) instead of a copy


def make_analyzer_cases(size):
    rows = size // 16384
    pt, pc = (1,), (rows, 1)
    minmax = lambda shape: aimet.MinMaxEncodingAnalyzer(shape)  # noqa: E731
    pct = lambda shape: aimet.PercentileEncodingAnalyzer(shape, percentile=99.9)  # noqa: E731
    sqnr = lambda shape: aimet.SqnrEncodingAnalyzer(shape)  # noqa: E731
    u, c = "update_stats", "compute_encodings(255, is_symmetric=False)"
    return [
        AnalyzerCase("aimet_minmax", "MinMaxEncodingAnalyzer update_stats, per-tensor", minmax, pt,
                     (f"MinMaxEncodingAnalyzer {u}, per-tensor (1,)",), True),
        AnalyzerCase("aimet_minmax_channel", "MinMaxEncodingAnalyzer update_stats, per-channel (rows, 1)", minmax, pc,
                     (f"MinMaxEncodingAnalyzer {u}, per-channel (4096, 1)",), True),
        AnalyzerCase("aimet_percentile", "PercentileEncodingAnalyzer(99.9) update + compute, per-tensor", pct, pt,
                     (f"PercentileEncodingAnalyzer(percentile=99.9) {u}, per-tensor (1,)",
                      f"PercentileEncodingAnalyzer(percentile=99.9) {c}, per-tensor (1,)"), False),
        AnalyzerCase("aimet_percentile_channel", "PercentileEncodingAnalyzer(99.9) update + compute, per-channel", pct, pc,
                     (f"PercentileEncodingAnalyzer(percentile=99.9) {u}, per-channel (4096, 1)",
                      f"PercentileEncodingAnalyzer(percentile=99.9) {c}, per-channel (4096, 1)"), False),
        AnalyzerCase("aimet_sqnr", "SqnrEncodingAnalyzer update + compute, per-tensor", sqnr, pt,
                     (f"SqnrEncodingAnalyzer {u}, per-tensor (1,)", f"SqnrEncodingAnalyzer {c}, per-tensor (1,)"), False),
        AnalyzerCase("aimet_sqnr_channel", "SqnrEncodingAnalyzer update + compute, per-channel", sqnr, pc,
                     (f"SqnrEncodingAnalyzer {u}, per-channel (4096, 1)",
                      f"SqnrEncodingAnalyzer {c}, per-channel (4096, 1)"), False),
    ]


def bench_analyzer_case(case, x_flat, repeat, recorded, bar):
    x = x_flat.reshape(-1, 16384)
    base, ours = [], []
    for _ in range(repeat):
        bar.set_postfix_str(case.name, refresh=False)
        t = time.perf_counter()
        if case.read_only:
            x.sum()
        else:
            y = x.copy()
            del y
        base.append(time.perf_counter() - t)
        a = case.make(case.params)
        t = time.perf_counter()
        a.update_stats(x)
        if not case.read_only:
            a.compute_encodings(255, False)
        ours.append(time.perf_counter() - t)
        bar.update(1)
    ms, base_ms = statistics.median(ours) * 1e3, statistics.median(base) * 1e3
    r = AimetResult(case.name, case.description, [*x.shape], ms, base_ms, base_ms / ms,
                    samples_ms={"polyquant": [round(v * 1e3, 3) for v in ours],
                                "x.sum()" if case.read_only else "copy": [round(v * 1e3, 3) for v in base]})
    entries = [((recorded or {}).get("results") or {}).get(k) for k in case.peer_keys]
    if all(entries) and (recorded or {}).get("elements") == x_flat.size:
        r.aimet_ms = sum(e["median_s"] for e in entries) * 1e3
        r.speedup_vs_aimet = r.aimet_ms / ms
    out = asdict(r)
    out["baseline"] = "x.sum()" if case.read_only else "x.copy()"
    return out


AIMET_CASE_NAMES = ["aimet_qdq", "aimet_qdq_axis0", "aimet_qdq_axis_last", "aimet_qdq_blocked", "aimet_minmax",
                    "aimet_minmax_channel", "aimet_percentile", "aimet_percentile_channel", "aimet_sqnr",
                    "aimet_sqnr_channel"]


@dataclass
class AimetResult:
    name: str
    description: str
    shape: list
    polyquant_ms: float
    copy_ms: float
    of_copy: float
    aimet_ms: float | None = None
    speedup_vs_aimet: float | None = None
    samples_ms: dict = field(default_factory=dict)


def load_aimet_timings(path=None):
    path = path or DEFAULT_AIMET_TIMINGS
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def bench_aimet_case(case, x_flat, repeat, recorded, bar):
    x = x_flat.reshape(case.shape)
    scale, offset, kwargs = case.params(case.shape)
    run = lambda: aimet.quantize_dequantize(x, scale, offset, 8, **kwargs)  # noqa: E731
    run()  # warm-up
    copies, ours = [], []
    for _ in range(repeat):
        bar.set_postfix_str(case.name, refresh=False)
        t = time.perf_counter()
        c = x.copy()
        copies.append(time.perf_counter() - t)
        del c
        t = time.perf_counter()
        y = run()
        ours.append(time.perf_counter() - t)
        del y
        bar.update(1)
    ms, copy_ms = statistics.median(ours) * 1e3, statistics.median(copies) * 1e3
    r = AimetResult(case.name, case.description, list(case.shape), ms, copy_ms, copy_ms / ms,
                    samples_ms={"polyquant": [round(s * 1e3, 3) for s in ours],
                                "copy": [round(s * 1e3, 3) for s in copies]})
    entry = ((recorded or {}).get("results") or {}).get(case.peer_key)
    if entry and (recorded or {}).get("elements") == x_flat.size:
        r.aimet_ms = entry["median_s"] * 1e3
        r.speedup_vs_aimet = r.aimet_ms / ms
    return asdict(r)


def format_aimet_report(rows, recorded):
    if not rows:
        return ""
    versions = (recorded or {}).get("versions") or {}
    lines = [
        "",
        "AIMET quantize_dequantize and encoding analyzers (polyquant.aimet, numpy in/out); base = x.copy() (or x.sum()",
        "for the MinMax update, a read-only pass) of the float32 array, same run; analyzers: update_stats + compute_encodings;",
        "aimet-torch: recorded medians (aimet-torch " + str(versions.get("aimet-torch", "-")) + ", torch "
        + str(versions.get("torch", "-")) + ", CPU), tools/golden/speed/aimet_peer_timings.json.",
        "",
    ]
    header = f"{'op':<25} {'shape':<13} {'polyquant':>10} {'of base':>8} {'base':>9} {'aimet-torch':>11} {'speedup':>8}"
    lines += [header, "-" * len(header)]
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        peer = "-" if r["aimet_ms"] is None else f"{r['aimet_ms']:.0f} ms"
        sp = "-" if r["speedup_vs_aimet"] is None else f"{r['speedup_vs_aimet']:.1f}x"
        lines.append(f"{r['name']:<25} {shape:<13} {r['polyquant_ms']:>7.1f} ms {100 * r['of_copy']:>7.0f}% "
                     f"{r.get('baseline', 'x.copy()'):>9} {peer:>11} {sp:>8}")
    return "\n".join(lines)
