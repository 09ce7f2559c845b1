"""Narrow output and input types of ONNX QuantizeLinear / DequantizeLinear: float32 -> float8
(e4m3fn, e5m2), float4 e2m1, int4, uint4 and back, on 16 Mi elements with `out=` reused, medians,
beside np.copyto of a float32 array of the same element count (the yardstick of issue 19), and in
the same run onnxruntime's session.run of the same one-node model (through an IO binding) and ml_dtypes' astype (the
conversion alone, scale 1).

    PYTHONPATH=python .venv/bin/python scripts/bench_narrow_types.py [--reps 9]
    POLYQUANT_ISA=scalar PYTHONPATH=python .venv/bin/python scripts/bench_narrow_types.py   # scalar kernels

Columns: milliseconds and the fraction of the copy's throughput (copy time / time) for polyquant,
onnxruntime and ml_dtypes.
"""
import argparse
import ctypes

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import polyquant.onnx as pq
from polyquant._tools.bench.common import median_ms

N = 16 << 20

TYPES = [  # name, ml_dtypes type, ONNX type, opset
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FN, 19),
    ("float8_e5m2", ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2, 19),
    ("float4_e2m1fn", ml_dtypes.float4_e2m1fn, TensorProto.FLOAT4E2M1, 23),
    ("int4", ml_dtypes.int4, TensorProto.INT4, 21),
    ("uint4", ml_dtypes.uint4, TensorProto.UINT4, 21),
]


def median_seconds(f, reps):
    """Median seconds of f after one warm-up call (the bench's shared timer)."""
    return median_ms(f, reps) / 1e3


def ort_session(op, in_type, out_type, zp_type, opset):
    """A one-node QuantizeLinear / DequantizeLinear model with scale and zero point as initializers."""
    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    zp = helper.make_tensor("z", zp_type, [], [0])
    node = helper.make_node(op, ["x", "s", "z"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", in_type, [N])],
                              [helper.make_tensor_value_info("y", out_type, [N])], [scale, zp])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def ort_runner(session, x, in_type):
    """session.run of x through an IO binding, the result left in onnxruntime's memory: its Python
    API has no numpy type for float8 / float4 / int4 tensors, and the conversion is not what is
    timed. Narrow x is handed over as its codes (one per byte; ORT's 4-bit types as packed bytes)."""
    io = session.io_binding()
    if x.dtype == np.float32:
        io.bind_cpu_input("x", x)
    elif in_type in (TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1):  # x's shape, packed bytes copied in
        codes = pq.pack(x)
        value = ort.OrtValue.ortvalue_from_shape_and_type(list(x.shape), in_type, "cpu", 0)
        ctypes.memmove(value.data_ptr(), codes.ctypes.data, codes.nbytes)
        io.bind_ortvalue_input("x", value)
    else:
        io.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint8), in_type))
    io.bind_output("y", "cpu")
    return lambda: session.run_with_iobinding(io)


def ort_time(op, x, in_type, out_type, zp_type, opset, reps):
    try:
        return median_seconds(ort_runner(ort_session(op, in_type, out_type, zp_type, opset), x, in_type), reps)
    except Exception as e:  # an onnxruntime without the type or its Python binding
        print(f"  (onnxruntime {op} {x.dtype}: {str(e).splitlines()[0][:100]})")
        return None


def row(label, copy, pairs):
    cells = []
    for name, t in pairs:
        cells.append(f"{name} {'n/a':>8}" if t is None else f"{name} {t * 1e3:7.2f} ms ({copy / t:4.2f})")
    print(f"{label:<36}" + "   ".join(cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=9)
    reps = parser.parse_args().reps
    x = np.random.default_rng(0).standard_normal(N, dtype=np.float32) * 4
    dst = np.empty_like(x)
    copy = median_seconds(lambda: np.copyto(dst, x), reps)
    print(f"np.copyto float32, {N} elements: {copy * 1e3:.2f} ms; (fraction of the copy's throughput)")
    s = np.float32(0.05)
    for name, dtype, onnx_type, opset in TYPES:
        z = np.zeros((), dtype)
        q = np.empty(N, dtype)
        t_pq = median_seconds(lambda: pq.quantize_linear(x, s, z, out=q), reps)
        t_ort = ort_time("QuantizeLinear", x, TensorProto.FLOAT, onnx_type, onnx_type, opset, reps)
        t_ml = median_seconds(lambda: x.astype(dtype), reps)
        row(f"quantize_linear f32 -> {name}", copy, [("polyquant", t_pq), ("onnxruntime", t_ort), ("ml_dtypes astype", t_ml)])
        xq = pq.quantize_linear(x, s, z)
        back = np.empty(N, np.float32)
        t_pq = median_seconds(lambda: pq.dequantize_linear(xq, s, z, out=back), reps)
        t_ort = ort_time("DequantizeLinear", xq, onnx_type, TensorProto.FLOAT, onnx_type, opset, reps)
        t_ml = median_seconds(lambda: xq.astype(np.float32), reps)
        row(f"dequantize_linear {name} -> f32", copy, [("polyquant", t_pq), ("onnxruntime", t_ort), ("ml_dtypes astype", t_ml)])


if __name__ == "__main__":
    main()
