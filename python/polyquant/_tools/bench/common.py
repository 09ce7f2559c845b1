"""What the family benchmark modules share: the per-channel layout of the QONNX and Q/DQ cases, the
byte count behind GB/s, a timer and the percent format of the tables."""

from __future__ import annotations

import time

CHANNELS = 64
BYTES_PER_ELEMENT = 8  # float32 in, float32 out


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def pct(value):
    return "-" if value is None else f"{100 * value:.0f}%"
