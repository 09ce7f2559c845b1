"""QONNX's float16 work (a float16 x with float16 parameters: numpy's float16 arithmetic) in the
rounding modes and ops that ran the scalar float16 spec until 2026-12-07: FloatQuant, and IntQuant /
Trunc in UP, HALF_UP and HALF_DOWN (ROUND for comparison), 4 Mi elements with `out=` reused,
medians, beside np.copyto of a float32 array of the same element count.

    .venv/bin/python scripts/bench_float16_work.py [--size N] [--reps 9]
    POLYQUANT_ISA=scalar .venv/bin/python scripts/bench_float16_work.py --reps 3   # the scalar spec
"""
import argparse

import numpy as np

import polyquant
import polyquant.qonnx as pq
from polyquant._tools.bench.common import median_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4 << 20)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    n = args.size
    x = (np.random.default_rng(0).standard_normal(n) * 20).astype(np.float16)
    h = np.float16
    e4m3 = (h(4), h(3), h(7), True, h(448), 0, 0, 1)
    cases = [
        ("qonnx.float_quant E4M3, ROUND (float64 out)", np.float64,
         lambda out: pq.float_quant(x, h(0.05), *e4m3, "ROUND", 1, out=out)),
        ("qonnx.float_quant E4M3, HALF_UP", np.float64, lambda out: pq.float_quant(x, h(0.05), *e4m3, "HALF_UP", 1, out=out)),
        ("qonnx.quant 8-bit, HALF_UP", np.float16, lambda out: pq.quant(x, h(0.05), h(0), h(8), 1, 0, "HALF_UP", out=out)),
        ("qonnx.quant 8-bit, UP", np.float16, lambda out: pq.quant(x, h(0.05), h(0), h(8), 1, 0, "UP", out=out)),
        ("qonnx.trunc HALF_DOWN", np.float16, lambda out: pq.trunc(x, h(0.25), h(0), h(8), h(5), "HALF_DOWN", out=out)),
        ("qonnx.quant 8-bit, ROUND", np.float16, lambda out: pq.quant(x, h(0.05), h(0), h(8), 1, 0, "ROUND", out=out)),
    ]
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    copy_ms = median_ms(lambda: np.copyto(dst, src), args.reps)
    print(f"kernel set {polyquant.runtime_info()['isa']}, {n} elements; np.copyto float32 {copy_ms:.2f} ms")
    for name, dtype, call in cases:
        out = np.empty(n, dtype)
        ms = median_ms(lambda: call(out), args.reps)
        print(f"{name:48s} {ms:9.2f} ms  {copy_ms / ms:6.3f} of the copy")


if __name__ == "__main__":
    main()
