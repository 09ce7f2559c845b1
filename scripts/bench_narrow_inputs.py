"""float16 / bfloat16 inputs through the engine's conversion kernel (kernels/convert): times
polyquant.onnx.quantize_linear (16-bit float x -> int8) and polyquant.aimet.quantize_dequantize
(4-bit, the tensor's own precision) on 16 Mi elements with `out=` reused, medians of 9, beside
np.copyto of a float32 array of the same element count (the issue's yardstick).

    PYTHONPATH=python .venv/bin/python scripts/bench_narrow_inputs.py
    POLYQUANT_ISA=scalar PYTHONPATH=python .venv/bin/python scripts/bench_narrow_inputs.py   # scalar kernels
"""
import time

import ml_dtypes
import numpy as np

import polyquant.aimet as aimet
import polyquant.onnx as onnx

N = 16 << 20


def median_seconds(f, reps=9):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def main():
    x32 = np.random.default_rng(0).standard_normal(N, dtype=np.float32) * 4
    dst = np.empty_like(x32)
    copy = median_seconds(lambda: np.copyto(dst, x32))
    print(f"np.copyto float32, {N} elements: {copy * 1e3:.2f} ms")
    for name, dtype in [("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)]:
        x = x32.astype(dtype)
        q = np.empty(N, np.int8)
        s, z = np.array(0.05, np.float32), np.array(0, np.int8)
        t = median_seconds(lambda: onnx.quantize_linear(x, s, z, out=q))
        print(f"quantize_linear {name} x -> int8: {t * 1e3:.2f} ms, {copy / t:.2f} of the copy")
        qdq = np.empty_like(x)
        scale, offset = np.full((1,), 0.05, np.float32), np.zeros((1,), np.float32)
        t = median_seconds(lambda: aimet.quantize_dequantize(x, scale, offset, 4, out=qdq))
        print(f"aimet quantize_dequantize {name}, 4-bit: {t * 1e3:.2f} ms, {copy / t:.2f} of the copy")


if __name__ == "__main__":
    main()
