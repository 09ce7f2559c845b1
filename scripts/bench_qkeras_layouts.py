"""QKeras scale-search layouts: time of quantized_bits(8, 0, alpha=...) per layout, 16 Mi float32.

Each layout holds the same number of elements; the figure that matters is the ratio to the square
channels-last array (4096, 4096), the fast path. Medians of `--repeat` calls with `out=` reused.

    PYTHONPATH=python .venv/bin/python scripts/bench_qkeras_layouts.py [--repeat 10] [--numel 16777216]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from polyquant.qkeras import quantized_bits


def layouts(n: int) -> list[tuple[str, tuple[int, ...], object]]:
    side = int(round(n ** 0.5))
    return [
        ("square channels-last", (side, side), None),
        ("rank 1", (n,), None),
        ("tall narrow, scale_axis=0", (n // 16, 16), 0),
        ("channels-first (16, n/16)", (16, n // 16), 0),
        ("channels-first (4, n/4)", (4, n // 4), 0),
        ("one row (1, n)", (1, n), 0),
        ("tall narrow (n/4, 4), channels-last", (n // 4, 4), None),
        ("(64, 64, n/4096) scale_axis=0", (64, 64, n // 4096), 0),
        ("(n/4096, 64, 64) scale_axis=1", (n // 4096, 64, 64), 1),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--numel", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--alpha", nargs="*", default=["auto", "auto_po2"])
    ap.add_argument("--only", nargs="*", default=None, help="layout names (substring match)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    flat = rng.standard_normal(args.numel, dtype=np.float32)
    for alpha in args.alpha:
        base = None
        for name, shape, axis in layouts(args.numel):
            if args.only and base is not None and not any(o in name for o in args.only):
                continue
            x = flat.reshape(shape)
            q = quantized_bits(8, 0, alpha=alpha, scale_axis=axis)
            out = np.empty_like(x)
            q(x, out=out)
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                q(x, out=out)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times) * 1e3
            if base is None:
                base = med
            print(f"{alpha:9s} {name:40s} {str(shape):22s} {med:9.2f} ms  {med / base:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
