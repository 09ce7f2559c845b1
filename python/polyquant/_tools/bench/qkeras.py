"""`polyquant bench` cases of the QKeras quantizers (polyquant.qkeras).

QKeras quantizers (``qk_*`` cases) run on a (N / 16384, 16384) float32 array, channels last (per-channel
scales for the auto alphas), as QKeras' own timings were taken. Their baselines are numpy's: the allocating
call against ``x.copy()``, the ``out=`` call against ``np.copyto(out, x)``. A data-dependent scale needs
passes over x before the quantizing pass: one for the max-based scale ("auto"), plus the least-squares
rounds of "auto_po2" until the scale is a fixed point (QKeras runs five in quantized_bits; polyquant stops
at the fixed point, whose round must still be run to be known). So the least time such a call can take is
``reads * t(x.sum()) + t(copy)``, the reads counted by the call itself (``min_passes_ratio`` = op time /
that). QKeras itself cannot run here (TensorFlow): its medians, measured once by
``tools/golden/qkeras.py --timings-only`` on this project's machine, are read from
``--qkeras-timings`` (default: that script's ``peer_timings.json`` when run from a checkout) and give
``speedup_vs_qkeras`` for the allocating call; they were taken at 64 Mi elements.

The layout cases (``qk_layouts_auto``, ``qk_layouts_auto_po2``; ``LAYOUT_CASE_NAMES``) time
``quantized_bits(8, 0, alpha=...)``'s scale search on the other layouts of the same N elements (rank 1,
tall narrow with ``scale_axis=0``, channels first, one row, ...), ``out=`` reused, all layouts of a case
taking turns within each repeat; each is reported as milliseconds and as a multiple of the same search on
the square channels-last array (issue 19's target: within 1.5x). ``alloc_qkeras_bits`` (allocating vs
``out=``) and ``qk_bits_from_{float16,bfloat16}`` (16-bit x) run in the harnesses of bench/common.py.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field

import numpy as np

from ... import _polyquant_ext as ext
from ... import qkeras as qk
from ..common import CommandError
from .common import AllocCase, InputCase, interleaved_seconds, pct, ratio, rounded_ms


@dataclass
class QkCase:
    name: str
    description: str
    make: object           # () -> polyquant.qkeras quantizer
    peer_key: str          # its entry in QKeras' recorded timings
    search: bool           # alpha "auto"/"auto_po2": passes over x before the quantizing pass


def make_qkeras_cases():
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

QKERAS_CHANNELS = 16384
DEFAULT_QKERAS_TIMINGS = "tools/golden/speed/qkeras_peer_timings.json"


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
    info = {}
    fn = ext.qkeras.quantized_bits if type(q).__name__ == "quantized_bits" else ext.qkeras.quantized_linear
    fn(x, q._operand(), *q._config(False, None), False, None, info)
    return info.get("max_passes", 0) + info.get("least_squares_rounds", 0), info.get("least_squares_rounds", 0)


def bench_qkeras_case(case, x, out, repeat, peer_timings, bar):
    q = case.make()
    fns = {"copy": lambda: x.copy(), "copyto": lambda: np.copyto(out, x), "read": lambda: x.sum(),
           "polyquant": lambda: q(x), "polyquant_out": lambda: q(x, out=out)}
    bar.set_postfix_str(case.name, refresh=False)
    samples = dict(zip(fns, interleaved_seconds(list(fns.values()), repeat, lambda: bar.update(1))))
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


def _load_qkeras_timings(path):
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
        lines.append(f"{r['name']:<19} {shape:<11} {r['polyquant_ms']:>6.1f} ms {pct(r['of_copy']):>8} "
                     f"{r['polyquant_out_ms']:>6.1f} ms {pct(r['out_of_copyto']):>9} {r['reads']:>5} {mins:>6} "
                     f"{mins_out:>9} {qk:>9} {sp:>8}")
    lines.append(f"(x.copy() {rows[0]['copy_ms']:.1f} ms, np.copyto {rows[0]['copyto_ms']:.1f} ms, "
                 f"x.sum() {rows[0]['read_ms']:.1f} ms in the first case's run)")
    return "\n".join(lines)


# --- Scale-search layouts ------------------------------------------------------------------------

LAYOUT_CASE_NAMES = ["qk_layouts_auto", "qk_layouts_auto_po2"]
LAYOUT_ALPHAS = {"qk_layouts_auto": "auto", "qk_layouts_auto_po2": "auto_po2"}
LAYOUT_MULTIPLE = 4096  # (64, 64, N/4096) and (N/4096, 64, 64) need it
LAYOUT_TARGET = 1.5


def square_shape(n):
    """The channels-last reference of n elements: (rows, n / rows) with rows the largest power of two
    whose square is at most n (square when n is an even power of two: (8192, 8192) at 64 Mi)."""
    rows = 1
    while n % (2 * rows) == 0 and (2 * rows) ** 2 <= n:
        rows *= 2
    return (rows, n // rows)


def layouts(n):
    """(label, shape, scale_axis) of each layout of n elements; the first is the reference."""
    return [
        ("square channels last (reference)", square_shape(n), None),
        ("rank 1", (n,), None),
        ("tall narrow, scale_axis=0", (n // 16, 16), 0),
        ("channels first (16, n/16)", (16, n // 16), 0),
        ("channels first (4, n/4)", (4, n // 4), 0),
        ("one row (1, n), scale_axis=0", (1, n), 0),
        ("tall narrow (n/4, 4) channels last", (n // 4, 4), None),
        ("(64, 64, n/4096), scale_axis=0", (64, 64, n // 4096), 0),
        ("(n/4096, 64, 64), scale_axis=1", (n // 4096, 64, 64), 1),
    ]


def bench_layout_case(name, x_flat, out_flat, repeat, bar):
    """Every layout of one alpha, out= reused (one output buffer reshaped per layout), the layouts
    taking turns within each repeat; returns a JSON-ready dict."""
    alpha = LAYOUT_ALPHAS[name]
    calls = []
    for label, shape, axis in layouts(x_flat.size):
        x, out = x_flat.reshape(shape), out_flat.reshape(shape)
        q = qk.quantized_bits(8, 0, alpha=alpha, scale_axis=axis)
        calls.append(lambda q=q, x=x, out=out: q(x, out=out))
    bar.set_postfix_str(name, refresh=False)
    samples = interleaved_seconds(calls, repeat, lambda: bar.update(1))
    medians = [statistics.median(v) * 1e3 for v in samples]
    rows = [{"layout": label, "shape": list(shape), "scale_axis": axis, "ms": med, "of_square": med / medians[0],
             "samples_ms": rounded_ms(v)}
            for (label, shape, axis), med, v in zip(layouts(x_flat.size), medians, samples)]
    return {"name": name, "description": f"quantized_bits(8, 0, alpha={alpha!r}), out= reused", "alpha": alpha,
            "elements": x_flat.size, "target_of_square": LAYOUT_TARGET, "layouts": rows}


def format_layout_report(cases):
    if not cases:
        return ""
    lines = [
        "",
        "QKeras scale-search layouts: quantized_bits(8, 0, alpha=...) with out= reused, every layout of the same N elements",
        f"taking turns within each repeat; of square = its time / the square channels-last array's (target <= {LAYOUT_TARGET}x).",
        "",
    ]
    header = f"{'case':<20} {'layout':<36} {'shape':<16} {'time':>10} {'of square':>9}"
    lines += [header, "-" * len(header)]
    for case in cases:
        for r in case["layouts"]:
            shape = "x".join(map(str, r["shape"]))
            lines.append(f"{case['name']:<20} {r['layout']:<36} {shape:<16} {r['ms']:>7.2f} ms {ratio(r['of_square']):>9}")
    return "\n".join(lines)


# --- Allocating vs out=, 16-bit x ----------------------------------------------------------------


def make_alloc_cases():
    def make(x):
        q = qk.quantized_bits(8, 0, alpha=1)
        return (lambda out=None: q(x, out=out)), np.zeros(x.shape, np.float32), None

    return [AllocCase("alloc_qkeras_bits", "qkeras", "quantized_bits(8, 0, alpha=1)", make)]


def make_input_cases():
    import ml_dtypes

    def make(x):
        q = qk.quantized_bits(8, 0, alpha=1)
        return (lambda out: q(x, out=out)), np.zeros(x.shape, np.float32)

    return [InputCase(f"qk_bits_from_{name}", "qkeras", f"quantized_bits(8, 0, alpha=1), {name} x -> float32",
                      dtype, make)
            for name, dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16))]


ALLOC_CASE_NAMES = ["alloc_qkeras_bits"]
INPUT_CASE_NAMES = ["qk_bits_from_float16", "qk_bits_from_bfloat16"]
