"""`polyquant bench` cases of AIMET's quantize_dequantize (polyquant.aimet): each timed against a
numpy copy of the same float32 array (x.copy() for the allocating call) in the same run, and
against aimet-torch's recorded medians (tools/golden/speed/aimet_peer_timings.json, measured on this
kind of machine by the golden-data generator; aimet-torch is not installed where polyquant runs).
For a same-run comparison with aimet-torch itself, run tools/golden/speed/compare_aimet.py in the
generator's environment.

The training path (``aimet_train_*``, ``TRAINING_CASE_NAMES``; opt-in, by name or the group name
``aimet_train``): on x of shape (N / 4096, 4096), 8-bit unsigned grid, the four calls of a training step
taking turns within each repeat -- forward (``quantize_dequantize`` on numpy arrays, AIMET's no-grad
result), grad (``quantize_dequantize_grad``: the training forward and its three gradients), and when torch
is importable autograd (torch tensors, scale and offset requiring grad, forward + ``backward(g)``) and
torch (the same training path composed of plain torch ops, round with a straight-through gradient: the
peer). Ratios grad / forward and autograd / forward (issue 19's target: 2.5x) and torch / autograd. numpy
(torch for bfloat16) moving each call's bytes runs in the same repeats: a copy of x (the forward's bytes),
copies of x and grad_output (the gradient call's: 2 arrays in, 2 out), a copy of x plus an add of x and
grad_output (autograd's: the forward, then 2 in, 1 out); each call's time over its copies says how close to
memory speed it runs by the issue's yardstick (np.copyto).
bfloat16 x goes through torch tensors (numpy has no bfloat16 arithmetic in AIMET's torch API); without
torch those cases are skipped and the torch columns are None.

``alloc_aimet_qdq`` (allocating vs ``out=``) and ``aimet_qdq_from_{float16,bfloat16}`` (4-bit, the
tensor's own precision out) run in the harnesses of bench/common.py."""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ... import aimet
from .common import AllocCase, InputCase, interleaved_seconds, ratio, rounded_ms

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
    bar.set_postfix_str(case.name, refresh=False)
    copies, ours = interleaved_seconds([lambda: x.copy(), run], repeat, lambda: bar.update(1))
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


# --- Allocating vs out=, 16-bit x ----------------------------------------------------------------


def make_alloc_cases():
    def make(x):
        one, zero = np.float32(0.02), np.float32(0.0)
        fn = lambda out=None: aimet.quantize_dequantize(x, one, zero, -128, 127, out=out)  # noqa: E731
        return fn, np.zeros(x.shape, np.float32), None

    return [AllocCase("alloc_aimet_qdq", "aimet", "quantize_dequantize 8-bit, per-tensor", make)]


def make_input_cases():
    import ml_dtypes

    def make(x):
        scale, offset = np.full((1,), 0.05, np.float32), np.zeros((1,), np.float32)
        return (lambda out: aimet.quantize_dequantize(x, scale, offset, 4, out=out)), np.zeros(x.shape, x.dtype)

    return [InputCase(f"aimet_qdq_from_{name}", "aimet", f"quantize_dequantize 4-bit per-tensor, {name} x -> {name}",
                      dtype, make)
            for name, dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16))]


ALLOC_CASE_NAMES = ["alloc_aimet_qdq"]
INPUT_CASE_NAMES = ["aimet_qdq_from_float16", "aimet_qdq_from_bfloat16"]


# --- The training path ---------------------------------------------------------------------------

TRAIN_COLS = 4096
TRAIN_BLOCK = 128
TRAIN_QMIN, TRAIN_QMAX = 0, 255   # bitwidth 8, signed=False
TRAINING_TARGET = 2.5             # grad / forward and autograd / forward


def _train_layouts(rows, cols):
    """case suffix -> (label, parameter shape, block_size or None)."""
    return {
        "per_tensor": ("per tensor", (), None),
        "axis0": (f"per channel ({rows}, 1)", (rows, 1), None),
        "axis1": (f"per channel (1, {cols})", (1, cols), None),
        "blocked": (f"blocks (1, {TRAIN_BLOCK})", (rows, cols // TRAIN_BLOCK), (1, TRAIN_BLOCK)),
    }


TRAINING_CASE_NAMES = [f"aimet_train_{layout}{suffix}" for suffix in ("", "_bfloat16")
                       for layout in ("per_tensor", "axis0", "axis1", "blocked")]


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_composed(torch, x, s, o, block):
    """AIMET's quantize_dequantize formula in torch ops, with round's straight-through gradient:
    ((clamp(round(x / s) - o, qmin, qmax) + o) * s; blocks as a (rows, blocks, block) view with the
    parameters broadcast over the block."""
    if block is not None:
        xv = x.view(s.shape[0], s.shape[1], block[1])
        sv, ov = s.unsqueeze(-1), o.unsqueeze(-1)
    else:
        xv, sv, ov = x, s, o
    t = xv / sv
    r = t + (torch.round(t) - t).detach()
    q = torch.clamp(r - ov, TRAIN_QMIN, TRAIN_QMAX)
    return ((q + ov) * sv).view(x.shape)


def bench_training_case(name, x_flat, repeat, bar, torch):
    """One layout and x dtype of the training step; returns a JSON-ready dict."""
    layout, bf16 = name[len("aimet_train_"):].removesuffix("_bfloat16"), name.endswith("_bfloat16")
    rows = x_flat.size // TRAIN_COLS
    label, pshape, block = _train_layouts(rows, TRAIN_COLS)[layout]
    rng = np.random.default_rng(1)
    x = x_flat.reshape(rows, TRAIN_COLS)
    g = rng.standard_normal(x.shape, dtype=np.float32)
    scale = np.asarray(np.full(pshape, 0.05, np.float32) * (1 + rng.random(pshape, dtype=np.float32)), np.float32)
    offset = np.asarray(np.round(-128 + 8 * rng.standard_normal(pshape)), np.float32)
    kw = {} if block is None else {"block_size": block}
    q = dict(bitwidth=8, signed=False, **kw)
    calls = {}
    if bf16:  # numpy has no bfloat16 in AIMET's API: torch tensors for every call
        xt, gt = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(g).to(torch.bfloat16)
        st, ot = torch.from_numpy(scale), torch.from_numpy(offset)
        calls["forward"] = lambda: aimet.quantize_dequantize(xt, st, ot, **q)
        calls["grad"] = lambda: aimet.quantize_dequantize_grad(gt, xt, st, ot, **q)
        c1, c2 = torch.empty_like(xt), torch.empty_like(xt)
        copies = {"copy": lambda: c1.copy_(xt), "copy_2in2out": lambda: (c1.copy_(xt), c2.copy_(gt)),
                  "add_2in1out": lambda: torch.add(xt, gt, out=c1)}
    else:
        calls["forward"] = lambda: aimet.quantize_dequantize(x, scale, offset, **q)
        calls["grad"] = lambda: aimet.quantize_dequantize_grad(g, x, scale, offset, **q)
        c1, c2 = np.empty_like(x), np.empty_like(x)
        copies = {"copy": lambda: np.copyto(c1, x), "copy_2in2out": lambda: (np.copyto(c1, x), np.copyto(c2, g)),
                  "add_2in1out": lambda: np.add(x, g, out=c1)}
        if torch is not None:
            xt, gt = torch.from_numpy(x), torch.from_numpy(g)
    if torch is not None:
        sg = torch.from_numpy(scale.copy()).requires_grad_(True)
        og = torch.from_numpy(offset.copy()).requires_grad_(True)
        xg = xt.detach().clone().requires_grad_(True)

        # Each step frees its own gradients before it returns (a training loop's
        # zero_grad(set_to_none=True)), so no call pays for freeing the previous call's: torch's
        # 64 MiB gradients go back to the system (munmap) when freed, which took 5 ms inside the
        # next call's time when autograd cleared the composed path's gradients.
        def autograd():
            aimet.quantize_dequantize(xg, sg, og, **q).backward(gt)
            sg.grad = og.grad = xg.grad = None

        def composed():
            s_, o_ = (sg.to(xg.dtype), og.to(xg.dtype)) if bf16 else (sg, og)
            torch_composed(torch, xg, s_, o_, block).backward(gt)
            sg.grad = og.grad = xg.grad = None

        calls["autograd"], calls["torch"] = autograd, composed
    # numpy (torch for bfloat16) moving the same bytes, timed in the same repeats (the issue's
    # yardstick is np.copyto): a copy of x moves the forward's (1 array in, 1 out); copies of x and
    # grad_output the gradient call's (2 in, 2 out: its output and grad_x); a copy of x plus an add
    # of x and grad_output autograd's (its forward, then its backward's 2 in, 1 out).
    calls.update(copies)
    bar.set_postfix_str(name, refresh=False)
    samples = dict(zip(calls, interleaved_seconds(list(calls.values()), repeat, lambda: bar.update(1))))
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    autograd_ms, torch_ms = med.get("autograd"), med.get("torch")
    grad_copies_ms = med["copy_2in2out"]
    autograd_copies_ms = med["copy"] + med["add_2in1out"]
    return {
        "name": name, "layout": label, "x_dtype": "bfloat16" if bf16 else "float32", "shape": list(x.shape),
        "parameter_shape": list(pshape), "block_size": None if block is None else list(block),
        "forward_ms": med["forward"], "grad_ms": med["grad"], "autograd_ms": autograd_ms, "torch_ms": torch_ms,
        "grad_over_forward": med["grad"] / med["forward"],
        "autograd_over_forward": None if autograd_ms is None else autograd_ms / med["forward"],
        "torch_over_autograd": None if torch_ms is None else torch_ms / autograd_ms,
        "copy_ms": med["copy"], "copy_2in2out_ms": med["copy_2in2out"], "add_2in1out_ms": med["add_2in1out"],
        "forward_over_copy": med["forward"] / med["copy"],
        "grad_copies_ms": grad_copies_ms, "grad_over_copies": med["grad"] / grad_copies_ms,
        "grad_copies_over_forward": grad_copies_ms / med["forward"],
        "autograd_copies_ms": autograd_copies_ms,
        "autograd_over_copies": None if autograd_ms is None else autograd_ms / autograd_copies_ms,
        "autograd_copies_over_forward": autograd_copies_ms / med["forward"],
        "target_over_forward": TRAINING_TARGET,
        "samples_ms": {k: rounded_ms(v) for k, v in samples.items()},
    }


def format_training_report(rows, torch_version, skipped):
    if not rows and not skipped:
        return ""
    lines = [
        "",
        "AIMET training path, 8-bit unsigned grid, the calls of a row taking turns within each repeat: forward =",
        "quantize_dequantize (numpy; torch tensors for bfloat16), grad = quantize_dequantize_grad (output + 3 gradients),",
        "autograd = torch forward + backward through polyquant.aimet.quantize_dequantize, torch = the same step in plain",
        f"torch ops (torch {torch_version or 'not installed'}). Target: grad and autograd within {TRAINING_TARGET}x the forward.",
        "Each call against numpy (torch for bfloat16) moving its bytes in the same repeats: fwd/copy = forward / a copy",
        "of x; grad/copies = grad / copies of x and grad_output (2 arrays in, 2 out); auto/copies = autograd / a copy of",
        "x plus an add of x and grad_output (2 in, 1 out). Below 1.0: faster than numpy moves the same bytes.",
        "",
    ]
    header = (f"{'case':<31} {'shape':<11} {'x':<8} {'forward':>10} {'grad':>10} {'autograd':>10} {'torch':>10} "
              f"{'grad/fwd':>8} {'auto/fwd':>8} {'torch/auto':>10} {'fwd/copy':>8} {'grad/copies':>11} "
              f"{'auto/copies':>11}")
    lines += [header, "-" * len(header)]
    cell = lambda v: "-" if v is None else f"{v:.1f} ms"  # noqa: E731
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        lines.append(f"{r['name']:<31} {shape:<11} {r['x_dtype']:<8} {cell(r['forward_ms']):>10} {cell(r['grad_ms']):>10} "
                     f"{cell(r['autograd_ms']):>10} {cell(r['torch_ms']):>10} {ratio(r['grad_over_forward']):>8} "
                     f"{ratio(r['autograd_over_forward']):>8} {ratio(r['torch_over_autograd'], 1):>10} "
                     f"{ratio(r['forward_over_copy']):>8} {ratio(r['grad_over_copies']):>11} "
                     f"{ratio(r['autograd_over_copies']):>11}")
    if skipped:
        lines.append(f"skipped (bfloat16 needs torch): {', '.join(skipped)}")
    return "\n".join(lines)
