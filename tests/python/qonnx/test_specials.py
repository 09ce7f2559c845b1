"""NaN results of the QONNX ops bit for bit (sign and payload), against qonnx 1.0.0's numpy
functions, on every kernel set.

numpy's rounding helpers for UP / HALF_UP / HALF_DOWN compute sign(x) * magnitude(x); np.sign
returns a NaN as it is and x86's product returns its first NaN operand, so a NaN input comes back
quieted with its own sign and payload. polyquant's scalar reference used to leave the operand order
of that product to the compiler and returned +NaN for a -NaN input."""

from __future__ import annotations

import numpy as np
import pytest

import polyquant
import polyquant.qonnx as pq
from ..helpers import kernel_set

qonnx_quant = pytest.importorskip("qonnx.custom_op.general.quant")
qonnx_trunc = pytest.importorskip("qonnx.custom_op.general.trunc")

MODES = ["ROUND", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"]
KERNEL_SETS = polyquant.runtime_info()["supported"]
f32 = np.float32

# Quiet and signalling NaNs of both signs, with and without payload, mixed with ordinary values;
# 70 elements so every kernel set runs whole vectors and a tail.
_NAN_BITS = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC12345, 0x7F812345, 0xFF812345, 0x7F800001, 0xFF800001]


def _x() -> np.ndarray:
    values = np.linspace(-9.0, 9.0, 70).astype(np.float32)
    bits = values.view(np.uint32)
    bits[::3][: len(_NAN_BITS)] = _NAN_BITS
    bits[40 : 40 + len(_NAN_BITS)] = _NAN_BITS
    return values


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.view(np.uint32), want.view(np.uint32)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, [(int(i), hex(int(g[i])), hex(int(w[i]))) for i in bad[:6]]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("isa", KERNEL_SETS)
@pytest.mark.parametrize("mode", MODES)
def test_int_quant_nan_bits_equal_qonnx(isa, mode):
    x = _x()
    want = qonnx_quant.quant(x, f32(0.5), f32(0), f32(4), 1, 0, mode)
    with kernel_set(isa):
        got = pq.int_quant(x, f32(0.5), f32(0), f32(4), 1, 0, mode)
    _same_bits(got, want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("isa", KERNEL_SETS)
@pytest.mark.parametrize("mode", MODES)
def test_trunc_nan_bits_equal_qonnx(isa, mode):
    x = _x()
    want_v1 = qonnx_trunc.trunc_v1(x, f32(0.5), f32(0), f32(8), f32(4), mode)
    want_v2 = qonnx_trunc.trunc_v2(x, f32(0.5), f32(0), f32(8), 0, 1, f32(2), f32(4), mode)
    with kernel_set(isa):
        got_v1 = pq.trunc_v1(x, f32(0.5), f32(0), f32(8), f32(4), mode)
        got_v2 = pq.trunc_v2(x, f32(0.5), f32(0), f32(8), 0, 1, f32(2), f32(4), mode)
    _same_bits(got_v1, want_v1)
    _same_bits(got_v2, want_v2)
