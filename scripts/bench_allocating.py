#!/usr/bin/env python3
"""Allocating calls (no ``out=``) against the same calls with ``out=``, in a steady loop, at 64 Mi
float32 elements; and onnxruntime's ``session.run`` of a one-node QuantizeLinear model in the same
run. Each row: median of --repeat calls, milliseconds, after one warm-up call; the calls of a row
(and onnxruntime's, on the quantize_linear row) take turns within each repeat.

    PYTHONPATH=python .venv/bin/python scripts/bench_allocating.py [--elements N] [--repeat R] [--threads T]

The allocating figure is what a user's loop sees: each result is dropped before the next call, so
with the output buffer cache (POLYQUANT_BUFFER_CACHE, docs/performance.md) its buffer is reused.
Run with POLYQUANT_BUFFER_CACHE=0 for the figures without the cache.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import polyquant
import polyquant.aimet as pqa
import polyquant.onnx as pqo
import polyquant.qkeras as pqk
import polyquant.qonnx as pqq


def medians_ms(fns, repeat):
    """Median milliseconds of each of `fns`, timed in turn within each repeat (interleaved, so load
    from other processes falls on all of them alike), after one warm-up call each (thread pool,
    kernel selection, the first allocation, which faults its pages in)."""
    for fn in fns:
        fn()
    samples = [[] for _ in fns]
    for _ in range(repeat):
        for fn, times in zip(fns, samples):
            t = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t)
            del result
    return [statistics.median(times) * 1e3 for times in samples]


def ort_session(x, scale, zero_point, threads):
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT8, list(x.shape))],
        [numpy_helper.from_array(np.asarray(scale), "s"), numpy_helper.from_array(np.asarray(zero_point), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    # Its worker threads would otherwise spin after each run, taking the cores from the polyquant
    # call timed next (on a 2-core machine that doubled polyquant's times); a call of 64 Mi
    # elements does not depend on spinning (ms-long runs, not us-long).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=64 << 20)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=0, help="threads of polyquant and onnxruntime (default: theirs)")
    args = parser.parse_args()
    if args.threads:
        polyquant._polyquant_ext._set_num_threads(args.threads)

    rng = np.random.default_rng(0)
    x = rng.standard_normal(args.elements, dtype=np.float32).reshape(-1, 1024)
    scale, zp = np.float32(0.02), np.int8(0)
    one, zero, bits = np.float32(0.02), np.float32(0.0), np.float32(8.0)
    qk_bits = pqk.quantized_bits(8, 0, alpha=1)
    out_i8, out_f32 = np.empty(x.shape, np.int8), np.empty(x.shape, np.float32)
    out_i8.fill(0)
    out_f32.fill(0)

    ops = [
        ("onnx.quantize_linear int8 per-tensor", lambda out=None: pqo.quantize_linear(x, scale, zp, out=out), out_i8),
        ("qonnx.quant (IntQuant 8-bit)", lambda out=None: pqq.quant(x, one, zero, bits, 1, 0, "ROUND", out=out), out_f32),
        ("aimet.quantize_dequantize 8-bit", lambda out=None: pqa.quantize_dequantize(x, one, zero, -128, 127, out=out),
         out_f32),
        ("qkeras quantized_bits(8, 0, alpha=1)", lambda out=None: qk_bits(x, out=out), out_f32),
    ]
    print(f"{args.elements} float32 elements, median of {args.repeat}; polyquant {polyquant.__version__}, "
          f"{polyquant.runtime_info()['isa']}, {args.threads or 'default'} threads, buffer cache limit {polyquant.buffer_cache_info()['limit_bytes']} bytes")
    session = ort_session(x, scale, zp, args.threads)
    copy_dst = np.empty_like(x)
    copyto, fresh_copy = medians_ms([lambda: np.copyto(copy_dst, x), lambda: x.copy()], args.repeat)
    print(f"this machine now: np.copyto of x {copyto:.2f}ms, x.copy() (a fresh array each time) {fresh_copy:.2f}ms")
    print(f"{'op':40s} {'allocating':>11s} {'out=':>9s} {'alloc/out':>10s}")
    for name, fn, out in ops:
        fns = [fn, lambda: fn(out=out)]
        if name.startswith("onnx."):
            fns.append(lambda: session.run(None, {"x": x})[0])
        alloc, with_out, *ort = medians_ms(fns, args.repeat)
        print(f"{name:40s} {alloc:9.2f}ms {with_out:7.2f}ms {alloc / with_out:9.2f}x")
        if ort:
            print(f"{'onnxruntime session.run QuantizeLinear':40s} {ort[0]:9.2f}ms  "
                  f"(quantize_linear allocating: {ort[0] / alloc:.2f}x onnxruntime)")
    print("cache:", polyquant.buffer_cache_info())


if __name__ == "__main__":
    main()
