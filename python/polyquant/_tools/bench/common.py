"""What the family benchmark modules share: the per-channel layout of the QONNX and Q/DQ cases, the
byte count behind GB/s, a timer, the one interleaved median timer every bench (and the scripts under
scripts/) uses, the percent format of the tables, and two harnesses every family fills with its own
call: allocating vs ``out=`` (``AllocCase``) and float16 / bfloat16 inputs (``InputCase``)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

CHANNELS = 64
BYTES_PER_ELEMENT = 8  # float32 in, float32 out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def interleaved_seconds(fns, repeat, tick=None):
    """Seconds of each of `fns`, timed in turn within each of `repeat` rounds (interleaved, so load
    from other processes falls on all of them alike), after one warm-up call each (thread pool,
    kernel selection, the first allocation, which faults its pages in). Each result is dropped
    before the next call, as a user's loop drops it, so an allocating call can reuse its buffer.
    `tick()` is called after each round (a progress bar)."""
    for fn in fns:
        result = fn()
        del result
    samples = [[] for _ in fns]
    for _ in range(repeat):
        for fn, times in zip(fns, samples):
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
            del result
        if tick is not None:
            tick()
    return samples


def medians_ms(fns, repeat, tick=None):
    """Median milliseconds of each of `fns`, interleaved (``interleaved_seconds``)."""
    return [statistics.median(times) * 1e3 for times in interleaved_seconds(fns, repeat, tick)]


def median_ms(fn, repeat):
    """Median milliseconds of `fn` alone, after one warm-up call."""
    return medians_ms([fn], repeat)[0]


def rounded_ms(samples):
    """Raw samples (seconds) as milliseconds rounded for the JSON report."""
    return [round(t * 1e3, 3) for t in samples]


def pct(value):
    return "-" if value is None else f"{100 * value:.0f}%"


def ratio(value, digits=2):
    """A ratio as '1.23x', or '-' when not measured."""
    return "-" if value is None else f"{value:.{digits}f}x"


def ms(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f} ms"


def bench_shape(size):
    """The (rows, 64) channels-last shape of the allocating and 16-bit input cases (any size the
    driver accepts is a multiple of 64)."""
    return (size // CHANNELS, CHANNELS)


# --- Allocating calls vs out= --------------------------------------------------------------------


@dataclass
class AllocCase:
    """One family's call, allocating (``fn()``) and into a reused array (``fn(out=out)``)."""
    name: str
    family: str
    description: str
    make: object      # (x of bench_shape) -> (fn(out=None), out array, peer or None)
    peer_name: str | None = None   # what the peer (a no-argument allocating call) is, e.g. onnxruntime's session.run


@dataclass
class AllocResult:
    name: str
    family: str
    description: str
    shape: list
    alloc_ms: float               # fn(): a fresh result each call, dropped before the next
    out_ms: float                 # fn(out=out), out reused
    copyto_ms: float              # np.copyto of the float32 x into a reused array, same rounds
    alloc_over_out: float         # alloc_ms / out_ms (target <= 1.1)
    peer: str | None = None
    peer_ms: float | None = None              # e.g. onnxruntime session.run (its arena reuses buffers)
    alloc_vs_peer: float | None = None        # peer_ms / alloc_ms (target >= 1.0)
    samples_ms: dict = field(default_factory=dict)


def bench_alloc_case(case, x_flat, repeat, bar):
    """The allocating call, the out= call, the peer (if any) and np.copyto of x taking turns within
    each repeat (``interleaved_seconds``)."""
    x = x_flat.reshape(bench_shape(x_flat.size))
    fn, out, peer = case.make(x)
    copy_dst = np.empty_like(x)
    copy_dst.fill(0)
    fns = {"alloc": fn, "out": lambda: fn(out=out), "copyto": lambda: np.copyto(copy_dst, x)}
    if peer is not None:
        fns["peer"] = peer
    bar.set_postfix_str(case.name, refresh=False)
    samples = dict(zip(fns, interleaved_seconds(list(fns.values()), repeat, lambda: bar.update(1))))
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    r = AllocResult(case.name, case.family, case.description, list(x.shape), med["alloc"], med["out"], med["copyto"],
                    med["alloc"] / med["out"], samples_ms={k: rounded_ms(v) for k, v in samples.items()})
    if peer is not None:
        r.peer, r.peer_ms = case.peer_name, med["peer"]
        r.alloc_vs_peer = med["peer"] / med["alloc"]
    return r


def format_alloc_report(rows, cache_info):
    if not rows:
        return ""
    limit = (cache_info or {}).get("limit_bytes")
    lines = [
        "",
        "Allocating calls vs out=: each result dropped before the next call (a user's loop), the calls of a row taking",
        f"turns within each repeat; alloc/out target <= 1.1. Buffer cache limit: {limit} bytes "
        "(POLYQUANT_BUFFER_CACHE; 0 = off).",
        "peer: onnxruntime's session.run of the same one-node model (its arena reuses buffers); vs peer = its time /",
        "polyquant's allocating time (target >= 1.0). copyto = np.copyto of x (float32) in the same rounds.",
        "",
    ]
    header = (f"{'case':<20} {'shape':<12} {'alloc':>9} {'out=':>9} {'alloc/out':>9} {'copyto':>9} "
              f"{'peer':>9} {'vs peer':>8}")
    lines += [header, "-" * len(header)]
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        lines.append(f"{r['name']:<20} {shape:<12} {ms(r['alloc_ms']):>9} {ms(r['out_ms']):>9} "
                     f"{ratio(r['alloc_over_out']):>9} {ms(r['copyto_ms']):>9} {ms(r['peer_ms']):>9} "
                     f"{ratio(r['alloc_vs_peer']):>8}")
    return "\n".join(lines)


# --- float16 / bfloat16 inputs -------------------------------------------------------------------


@dataclass
class InputCase:
    """One family's call on a 16-bit float x, into a reused array."""
    name: str
    family: str
    description: str
    x_dtype: object   # numpy float16 or ml_dtypes.bfloat16
    make: object      # (x of x_dtype, bench_shape) -> (fn(out), out array)


@dataclass
class InputResult:
    name: str
    family: str
    description: str
    shape: list
    x_dtype: str
    out_dtype: str
    polyquant_out_ms: float       # fn(out=out), out reused
    copyto_f32_ms: float          # np.copyto of a float32 array of the same element count (issue 19's yardstick)
    copyto_x_ms: float            # np.copyto of x itself (the same bytes as the input)
    of_copyto_f32: float          # copyto_f32_ms / polyquant_out_ms (target >= 0.9; a 16-bit x can pass 1.0)
    of_copyto_x: float            # copyto_x_ms / polyquant_out_ms
    samples_ms: dict = field(default_factory=dict)


def bench_input_case(case, x_flat, repeat, bar):
    xf = x_flat.reshape(bench_shape(x_flat.size))
    x = xf.astype(case.x_dtype)
    fn, out = case.make(x)
    dst_f32, dst_x = np.zeros_like(xf), np.zeros_like(x)
    bar.set_postfix_str(case.name, refresh=False)
    fns = {"polyquant_out": lambda: fn(out), "copyto_f32": lambda: np.copyto(dst_f32, xf),
           "copyto_x": lambda: np.copyto(dst_x, x)}
    samples = dict(zip(fns, interleaved_seconds(list(fns.values()), repeat, lambda: bar.update(1))))
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    return InputResult(case.name, case.family, case.description, list(x.shape), x.dtype.name, out.dtype.name,
                       med["polyquant_out"], med["copyto_f32"], med["copyto_x"],
                       med["copyto_f32"] / med["polyquant_out"], med["copyto_x"] / med["polyquant_out"],
                       samples_ms={k: rounded_ms(v) for k, v in samples.items()})


def format_input_report(rows):
    if not rows:
        return ""
    lines = [
        "",
        "float16 / bfloat16 x, out= reused; of f32 copy = np.copyto of a float32 array of the same element count / the",
        "call's time (issue 19's yardstick, target >= 0.9); of x copy = np.copyto of x itself (the same bytes) / the call.",
        "(ONNX's 16-bit x cases are q_int8_from_* in the Q/DQ table.)",
        "",
    ]
    width = max([24] + [len(r["name"]) for r in rows])  # the case column fits the longest name
    header = f"{'case':<{width}} {'shape':<12} {'x':<9} {'out':<9} {'out=':>9} {'of f32 copy':>11} {'of x copy':>9}"
    lines += [header, "-" * len(header)]
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        lines.append(f"{r['name']:<{width}} {shape:<12} {r['x_dtype']:<9} {r['out_dtype']:<9} {ms(r['polyquant_out_ms']):>9} "
                     f"{r['of_copyto_f32']:>11.2f} {r['of_copyto_x']:>9.2f}")
    return "\n".join(lines)
