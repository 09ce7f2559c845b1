"""`polyquant bench`: the driver. One module of cases per family (qonnx, qkeras, onnx, quark, aimet)
under polyquant._tools.bench; this one draws the input, runs the selected cases and reports.

Method (see shared/reference/performance.md, sections 1 and 8): every op runs on the same N float32
elements. Each repeat times, back to back, a memcpy of the input into a preallocated array
(``_polyquant_ext.copy``: one memcpy call with the GIL released), a memcpy into a freshly allocated
``np.empty`` array, and the polyquant op, which allocates its output on every call. Reported figures are
medians over the repeats. GB/s counts 8 bytes per element (4 read + 4 written, STREAM convention).

Two ratios to memcpy are given, because a fresh 256 MiB output costs page faults on first touch:
``steady`` divides by the memcpy into a reused array, ``alloc`` by the memcpy into a fresh array (the
like-for-like comparison while the Python API returns new arrays). If the ops accept ``out=``, they are
also timed writing into a reused array and compared with the steady memcpy.

The QONNX, QKeras and Q/DQ specifics are described in their modules. Issue 19's groups:

- ``qk_layouts_*`` (bench/qkeras.py): QKeras' scale searches on every layout of the N elements, as a
  multiple of the square channels-last array's time in the same run;
- ``alloc_*`` (one per family): the allocating call against the same call with ``out=``, interleaved,
  and onnxruntime's ``session.run`` for ONNX's QuantizeLinear (harness in bench/common.py);
- ``*_from_float16`` / ``*_from_bfloat16`` (QONNX, QKeras, AIMET; ONNX's are Q/DQ cases): 16-bit float
  x against np.copyto of float32 of the same element count;
- ``aimet_train_*`` (bench/aimet.py, opt-in: named, or the group ``aimet_train``): AIMET's forward,
  gradients and torch autograd against the torch-composed training path.

Group names (``GROUPS``) stand for all their cases in ``--ops``.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict
from importlib.metadata import PackageNotFoundError, version

import numpy as np

import polyquant

from ..common import CommandError, progress
from . import aimet, onnx, qkeras, qonnx, quark
from .common import (BYTES_PER_ELEMENT, CHANNELS, bench_alloc_case, bench_input_case, format_alloc_report,
                     format_input_report)

DEFAULT_SIZE = 64 * 1024 * 1024

# Every case name, in the order they run.
CASE_NAMES = qonnx.CASE_NAMES
QKERAS_CASE_NAMES = qkeras.QKERAS_CASE_NAMES
QDQ_CASE_NAMES = onnx.CASE_NAMES + quark.CASE_NAMES
AIMET_CASE_NAMES = aimet.AIMET_CASE_NAMES
LAYOUT_CASE_NAMES = qkeras.LAYOUT_CASE_NAMES
ALLOC_CASE_NAMES = (onnx.ALLOC_CASE_NAMES + qonnx.ALLOC_CASE_NAMES + qkeras.ALLOC_CASE_NAMES + aimet.ALLOC_CASE_NAMES
                    + quark.ALLOC_CASE_NAMES)
INPUT_CASE_NAMES = qonnx.INPUT_CASE_NAMES + qkeras.INPUT_CASE_NAMES + aimet.INPUT_CASE_NAMES
TRAINING_CASE_NAMES = aimet.TRAINING_CASE_NAMES
ALL_CASE_NAMES = (CASE_NAMES + QKERAS_CASE_NAMES + QDQ_CASE_NAMES + AIMET_CASE_NAMES + LAYOUT_CASE_NAMES
                  + ALLOC_CASE_NAMES + INPUT_CASE_NAMES + TRAINING_CASE_NAMES)
# Run only when named (or their group is): the torch-composed training path takes seconds per call.
OPT_IN_CASE_NAMES = TRAINING_CASE_NAMES
# --ops names that stand for several cases.
GROUPS = {
    "qk_layouts": LAYOUT_CASE_NAMES,
    "alloc": ALLOC_CASE_NAMES,
    "from_16bit": [n for n in QDQ_CASE_NAMES if n.startswith("q_int8_from_")] + INPUT_CASE_NAMES,
    "aimet_train": TRAINING_CASE_NAMES,
}
OPS_CHOICES = ALL_CASE_NAMES + list(GROUPS)
# Sizes the layout and training cases need: (64, 64, N/4096) and (N/4096, 4096).
SIZE_MULTIPLE_4096 = LAYOUT_CASE_NAMES + TRAINING_CASE_NAMES


def expand_ops(ops):
    """--ops as case names (groups expanded, order kept, no repeats); None stays None (the default run)."""
    if ops is None:
        return None
    names = []
    for op in ops:
        for name in GROUPS.get(op, [op]):
            if name not in names:
                names.append(name)
    return names


def _selected(name, ops):
    return name not in OPT_IN_CASE_NAMES if ops is None else name in ops


def make_qdq_cases(size):
    """The linear quantize / dequantize cases: ONNX's, then Quark's."""
    return onnx.make_cases(size) + quark.make_cases(size)


def run_bench(size=DEFAULT_SIZE, repeat=5, ops=None, peers=True, peer_repeat=3, seed=0, qkeras_timings=None):
    """Benchmark the selected ops; returns a JSON-ready dict."""
    if size <= 0 or size % CHANNELS:
        raise CommandError(f"--size must be a positive multiple of {CHANNELS} (per-channel shape ({CHANNELS}, N/{CHANNELS}))")
    if repeat < 1 or peer_repeat < 0:
        raise CommandError("--repeat must be at least 1 and --peer-repeat at least 0")
    ops = expand_ops(ops)
    if ops is not None and size % 4096 and any(n in ops for n in SIZE_MULTIPLE_4096):
        raise CommandError("--size must be a multiple of 4096 for " + ", ".join(n for n in ops if n in SIZE_MULTIPLE_4096))
    fits_4096 = size % 4096 == 0
    layout_names = [n for n in LAYOUT_CASE_NAMES if fits_4096 and _selected(n, ops)]
    alloc_cases = [c for fam in (onnx, qonnx, qkeras, aimet, quark) for c in fam.make_alloc_cases() if _selected(c.name, ops)]
    input_cases = [c for fam in (qonnx, qkeras, aimet) for c in fam.make_input_cases() if _selected(c.name, ops)]
    torch = aimet._torch() if any(_selected(n, ops) for n in TRAINING_CASE_NAMES) else None
    training_names = [n for n in TRAINING_CASE_NAMES if fits_4096 and _selected(n, ops)]
    training_skipped = [n for n in training_names if torch is None and n.endswith("_bfloat16")]
    training_names = [n for n in training_names if n not in training_skipped]
    cases = [c for c in qonnx.make_cases(peers) if ops is None or c.name in ops]
    qk_cases = [c for c in qkeras.make_qkeras_cases() if ops is None or c.name in ops]
    qdq_cases = [c for c in make_qdq_cases(size) if ops is None or c.name in ops]
    aimet_cases = [c for c in aimet.make_aimet_cases(size) if ops is None or c.name in ops] if size % 16384 == 0 else []
    analyzer_cases = [c for c in aimet.make_analyzer_cases(size) if ops is None or c.name in ops] if size % 16384 == 0 else []
    aimet_recorded = aimet.load_aimet_timings() if (aimet_cases or analyzer_cases) else None
    peers_available = any(c.peer is not None for c in cases)
    qk_peer, qk_peer_path = qkeras._load_qkeras_timings(qkeras_timings) if (peers and qk_cases) else (None, None)

    rng = np.random.default_rng(seed)
    x = rng.standard_normal(size, dtype=np.float32)
    x *= 4.0  # spread over the 8-bit range at scale 0.05 and over many FP8 binades
    dst = np.empty_like(x)
    dst.fill(0)  # touch every page once: steady-state memcpy must not pay first-touch faults

    steps = (len(cases) * (repeat + (peer_repeat if peers_available else 0))
             + (len(qk_cases) + len(qdq_cases) + len(aimet_cases) + len(analyzer_cases) + len(layout_names)
                + len(alloc_cases) + len(input_cases) + len(training_names)) * repeat)
    results, qk_results, qdq_results, aimet_results = [], [], [], []
    with progress(None, "bench", total=steps, unit="step") as bar:
        for case in cases:
            results.append(qonnx.bench_case(case, x, dst, repeat, peer_repeat if peers else 0, bar))
        if qk_cases:
            channels = qkeras.QKERAS_CHANNELS if size % qkeras.QKERAS_CHANNELS == 0 else CHANNELS
            xq, outq = x.reshape(-1, channels), dst.reshape(-1, channels)
            # QKeras' medians are for its recorded size only.
            recorded = (qk_peer or {}).get("results") if (qk_peer or {}).get("elements") == size else None
            for case in qk_cases:
                qk_results.append(qkeras.bench_qkeras_case(case, xq, outq, repeat, recorded, bar))
        for case in qdq_cases:
            qdq_results.append(onnx.bench_qdq_case(case, x, repeat, bar, peers))
        for case in aimet_cases:
            aimet_results.append(aimet.bench_aimet_case(case, x, repeat, aimet_recorded if peers else None, bar))
        for case in analyzer_cases:
            aimet_results.append(aimet.bench_analyzer_case(case, x, repeat, aimet_recorded if peers else None, bar))
        layout_results = [qkeras.bench_layout_case(name, x, dst, repeat, bar) for name in layout_names]
        alloc_results = [bench_alloc_case(case, x, repeat, bar) for case in alloc_cases]
        input_results = [bench_input_case(case, x, repeat, bar) for case in input_cases]
        training_results = [aimet.bench_training_case(name, x, repeat, bar, torch) for name in training_names]

    info = polyquant.runtime_info()
    qonnx_version = None
    if peers_available:
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
        "onnxruntime": onnx.ort_version() if qdq_results else None,
        "qkeras_layouts": layout_results,
        "allocating": [asdict(r) for r in alloc_results],
        "buffer_cache": polyquant.buffer_cache_info() if alloc_results else None,
        "input_dtypes": [asdict(r) for r in input_results],
        "aimet_training": training_results,
        "aimet_training_skipped": training_skipped,
        "torch": (torch.__version__ if torch is not None else None) if (training_names or training_skipped) else None,
        "qkeras_peer": None if qk_peer is None else {
            "file": qk_peer_path, "elements": qk_peer.get("elements"), "versions": qk_peer.get("versions"),
            "machine": qk_peer.get("machine"), "statistic": qk_peer.get("statistic")},
    }


def bench_command(args, out=sys.stdout):
    """`polyquant bench`: returns the exit status (1 if an op differs from qonnx)."""
    if getattr(args, "device", "cpu") != "cpu":
        from .cuda import device_bench_command

        return device_bench_command(args, out)
    report = run_bench(args.size, args.repeat, args.ops, peers=not args.no_peers, peer_repeat=args.peer_repeat,
                       seed=args.seed, qkeras_timings=getattr(args, "qkeras_timings", None))
    if args.json:
        print(json.dumps(report, indent=2), file=out)
    else:
        print(qonnx.format_report(report), file=out)
        if report["qkeras"]:
            print(qkeras.format_qkeras_report(report), file=out)
        if report["qdq"]:
            print(onnx.format_qdq_report(report), file=out)
        if report.get("aimet"):
            print(aimet.format_aimet_report(report["aimet"], aimet.load_aimet_timings()), file=out)
        for table in (qkeras.format_layout_report(report["qkeras_layouts"]),
                      format_alloc_report(report["allocating"], report["buffer_cache"]),
                      format_input_report(report["input_dtypes"]),
                      aimet.format_training_report(report["aimet_training"], report["torch"],
                                                   report["aimet_training_skipped"])):
            if table:
                print(table, file=out)
    mismatch = any(op["bit_exact_vs_qonnx"] is False for op in report["ops"])
    mismatch = mismatch or any(r["bit_exact_vs_onnxruntime"] is False and not r.get("onnxruntime_differs") for r in report["qdq"])
    return 1 if mismatch else 0
