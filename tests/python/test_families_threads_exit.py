"""Concurrency and interpreter exit for every family's functional entry points (issue 17's probe
classes "concurrency" and "exit"): threads sharing inputs get the serial bits, and daemon threads
still inside a call when the interpreter exits do not abort the process. The QONNX ops and the
AIMET analyzers have their own tests (qonnx/test_api.py, qonnx/test_robustness.py,
aimet/test_robustness_analyzers.py)."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

import polyquant.aimet as A
import polyquant.onnx as pqo
import polyquant.quark as pqq
from .helpers import run_threads
from polyquant.qkeras import quantized_bits, quantized_linear, quantized_relu

_F8E4M3FN, _F4E2M1, _INT4 = TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT4E2M1, TensorProto.INT4

# Each entry: a function of a float32 x giving an array (or a tuple of arrays).
_OPS = {
    "qkeras.quantized_bits_auto_po2": lambda x: quantized_bits(4, 0, alpha="auto_po2")(x),
    "qkeras.quantized_relu": lambda x: quantized_relu(4, 1)(x),
    "qkeras.quantized_linear_auto": lambda x: quantized_linear(4, 0, alpha="auto")(x),
    "onnx.quantize_linear": lambda x: pqo.quantize_linear(x, np.float32(0.05), np.int8(3)),
    "onnx.dequantize_linear": lambda x: pqo.dequantize_linear(
        np.clip(np.nan_to_num(x) * 20, -128, 127).astype(np.int8), np.float32(0.05)),
    # Narrow types (issue 19's vector paths): float8 / float4 / int4 outputs and inputs, bfloat16 x, packing.
    "onnx.quantize_linear_float8": lambda x: pqo.quantize_linear(x, np.float32(0.05), output_dtype=_F8E4M3FN),
    "onnx.quantize_linear_float4": lambda x: pqo.quantize_linear(x, np.float32(0.05), output_dtype=_F4E2M1),
    "onnx.quantize_linear_int4_blocked": lambda x: pqo.quantize_linear(
        x, np.full((x.shape[0], x.shape[1] // 16), 0.5, np.float32), axis=1, block_size=16, output_dtype=_INT4),
    "onnx.quantize_linear_bfloat16_x": lambda x: pqo.quantize_linear(x.astype(ml_dtypes.bfloat16), np.float32(0.05),
                                                                     np.int8(3)),
    "onnx.dequantize_linear_float8": lambda x: pqo.dequantize_linear(x.astype(ml_dtypes.float8_e5m2), np.float32(0.5)),
    "onnx.pack_unpack_int4": lambda x: pqo.unpack(pqo.pack(np.nan_to_num(x).clip(-8, 7).astype(ml_dtypes.int4)),
                                                  "int4", x.shape),
    "quark.extended_quantize_linear": lambda x: pqq.extended_quantize_linear(x, np.float32(0.05), np.int16(-7)),
    "aimet.quantize_dequantize": lambda x: A.quantize_dequantize(x, np.float32(0.05), np.float32(-3), 8, False),
    "aimet.quantize_dequantize_grad": lambda x: A.quantize_dequantize_grad(
        x, x, np.full(x.shape[-1], 0.05, np.float32), np.zeros(x.shape[-1], np.float32), 8, True),
}


def _bits(a) -> list[np.ndarray]:
    arrays = a if isinstance(a, tuple) else (a,)
    return [np.ascontiguousarray(np.asarray(v)).view(np.uint8) for v in arrays]


@pytest.mark.parametrize("name", sorted(_OPS))
def test_threads_sharing_inputs_get_the_serial_bits(name):
    op = _OPS[name]
    rng = np.random.default_rng(11)
    xs = [(rng.standard_normal((257, 64)) * (i + 1)).astype(np.float32) for i in range(4)]
    xs[0][3, 5] = np.nan
    xs[1][7, 1] = -0.0
    want = [_bits(op(x)) for x in xs]
    results: dict[tuple[int, int], list[np.ndarray]] = {}

    def worker(k: int) -> None:
        for r in range(6):
            results[(k, r)] = _bits(op(xs[(k + r) % len(xs)]))

    run_threads(worker, [(k,) for k in range(8)])
    for (k, r), got in results.items():
        for g, w in zip(got, want[(k + r) % len(xs)]):
            np.testing.assert_array_equal(g, w, err_msg=f"{name}: thread {k} call {r}")


_EXIT_WHILE_BUSY = r'''
import threading, time, numpy as np
import polyquant.aimet as A, polyquant.onnx as pqo, polyquant.quark as pqq
import polyquant._polyquant_ext as E
from polyquant.qkeras import quantized_bits
import ml_dtypes
pqo_int4 = ml_dtypes.int4
calls = {
    "qkeras": lambda x: quantized_bits(4, 0, alpha="auto_po2")(x),
    "onnx": lambda x: pqo.quantize_linear(x, np.float32(0.05), np.int8(3)),
    "onnx_float8": lambda x: pqo.quantize_linear(x, np.float32(0.05), output_dtype=17),  # FLOAT8E4M3FN
    "onnx_dequantize_int4": lambda x: pqo.dequantize_linear(np.zeros(x.shape, "int8").astype(pqo_int4), np.float32(0.5)),
    "quark": lambda x: pqq.extended_quantize_linear(x, np.float32(0.05), np.int16(-7)),
    "aimet": lambda x: A.quantize_dequantize(x, np.float32(0.05), np.float32(-3), 8, False),
    # The benchmarks' in-process memcpy baseline (polyquant bench), GIL released like the ops.
    "copy": lambda x: E.copy(x, np.empty_like(x)),
}
op = calls[FAMILY]
def loop(n):
    x = np.random.default_rng(0).standard_normal((n, 64)).astype(np.float32)
    while True:
        op(x)
# Long calls (inside a kernel at exit) and short ones (often waiting for the GIL at exit).
for n in [1 << 16] * 2 + [1 << 10] * 4:
    threading.Thread(target=loop, args=(n,), daemon=True).start()
time.sleep(0.2)
'''


@pytest.mark.parametrize("family", ["qkeras", "onnx", "onnx_float8", "onnx_dequantize_int4", "quark", "aimet", "copy"])
def test_interpreter_exit_while_daemon_threads_are_inside_calls(family):
    script = _EXIT_WHILE_BUSY.replace("FAMILY", repr(family))
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "terminate" not in result.stderr, (result.returncode, result.stderr[-2000:])
