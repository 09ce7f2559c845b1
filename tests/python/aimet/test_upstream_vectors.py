"""AIMET's own fixed test vectors (its backend, quantizer and encoding-analyzer tests), replayed
through polyquant.aimet.

Written here from the vectors' description in the project's AIMET reference notes (sections 4 and 7):
the inputs, parameters and expected integers are the test suite's; the expected floats follow from
them (every one is exact in float32). The golden data (aimet/test_golden.py) covers the same ground
bit for bit on many more inputs; these are the small, hand-checkable anchors.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import polyquant.aimet as pa

f32 = np.float32

# --------------------------------------------------------------------------------------------------
# backend: quantize / quantize_dequantize / dequantize (test_backend.py)

X = np.array([[-1005.8, -1000.1, -15.4, -11.24, -3.3, 0.2, 500.4],
              [-1.3, -0.76, -0.11, 0.0, 1.01, 3.0, 10.4]], f32)
X_BF16_EXACT = np.array([[-1004, -1000, -15.375, -11.25, -3.25, 0.25, 500],
                         [-1.375, -0.75, -0.125, 0, 1.125, 3, 10]], f32)

VECTORS = [
    # (id, x, scale, offset, qmin, qmax, q, qdq)
    ("per_tensor_4bit", X, f32(0.5), f32(-5), 0, 15,
     [[0, 0, 0, 0, 0, 5, 15], [2, 3, 5, 5, 7, 11, 15]],
     [[-2.5, -2.5, -2.5, -2.5, -2.5, 0, 5], [-1.5, -1, 0, 0, 1, 3, 5]]),
    ("per_tensor_8bit", X, f32(0.5), f32(-133), 0, 255,
     [[0, 0, 102, 111, 126, 133, 255], [130, 131, 133, 133, 135, 139, 154]],
     [[-66.5, -66.5, -15.5, -11, -3.5, 0, 61], [-1.5, -1, 0, 0, 1, 3, 10.5]]),
    ("per_channel_4bit", X, np.array([[0.5], [0.0625]], f32), np.array([[-13], [-7]], f32), 0, 15,
     [[0, 0, 0, 0, 6, 13, 15], [0, 0, 5, 7, 15, 15, 15]],
     [[-6.5, -6.5, -6.5, -6.5, -3.5, 0, 1], [-0.4375, -0.4375, -0.125, 0, 0.5, 0.5, 0.5]]),
    ("per_channel_8bit", X, np.array([[0.5], [0.0625]], f32), np.array([[-133], [-127]], f32), 0, 255,
     [[0, 0, 102, 111, 126, 133, 255], [106, 115, 125, 127, 143, 175, 255]],
     [[-66.5, -66.5, -15.5, -11, -3.5, 0, 61], [-1.3125, -0.75, -0.125, 0, 1, 3, 8]]),
    # every x exact in bfloat16; -22.5 -> -22 and -6.5 -> -6: round half to even
    ("bf16_exact_8bit", X_BF16_EXACT, f32(0.5), f32(-133), 0, 255,
     [[0, 0, 102, 111, 127, 133, 255], [130, 131, 133, 133, 135, 139, 153]],
     [[-66.5, -66.5, -15.5, -11, -3, 0, 61], [-1.5, -1, 0, 0, 1, 3, 10]]),
]
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


def _exact_in(dtype, *arrays) -> bool:
    return all(np.array_equal(np.asarray(a, f32).astype(dtype).astype(f32), np.asarray(a, f32)) for a in arrays)


@pytest.mark.parametrize("vid, x, scale, offset, qmin, qmax, q, qdq", VECTORS, ids=[v[0] for v in VECTORS])
@pytest.mark.parametrize("form", ["qmin_qmax", "qmin_qmax_keywords", "bitwidth", "num_steps"])
def test_backend_vectors(vid, x, scale, offset, qmin, qmax, q, qdq, form):
    bw = 4 if qmax == 15 else 8
    call = {"qmin_qmax": lambda f, *a: f(*a, qmin, qmax),
            "qmin_qmax_keywords": lambda f, *a: f(*a, qmin=qmin, qmax=qmax),
            "bitwidth": lambda f, *a: f(*a, bw),
            "num_steps": lambda f, *a: f(*a, num_steps=qmax, signed=False)}[form]
    np.testing.assert_array_equal(call(pa.quantize, x, scale, offset), np.array(q, f32))
    np.testing.assert_array_equal(call(pa.quantize_dequantize, x, scale, offset), np.array(qdq, f32))
    np.testing.assert_array_equal(pa.dequantize(np.array(q, f32), scale, offset), np.array(qdq, f32))


@pytest.mark.parametrize("dtype", DTYPES[1:], ids=["float16", "bfloat16"])
def test_backend_vectors_half_precision(dtype):
    # the bfloat16-exact set: the same integers in float16 and bfloat16 (the 8-bit grid is
    # representable in both; qdq works in float32 for bfloat16, in float16 for float16)
    _, x, scale, offset, qmin, qmax, q, qdq = VECTORS[4]
    xd = x.astype(dtype)
    for s, o in ((scale, offset), (np.asarray(scale).astype(dtype), np.asarray(offset).astype(dtype))):
        got = pa.quantize(xd, s, o, qmin, qmax)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.astype(f32), np.array(q, f32))
        got = pa.quantize_dequantize(xd, s, o, qmin, qmax)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.astype(f32), np.array(qdq, f32))


@pytest.mark.parametrize("vid, x, scale, offset, qmin, qmax, q, qdq", VECTORS, ids=[v[0] for v in VECTORS])
def test_backend_vector_gradients(vid, x, scale, offset, qmin, qmax, q, qdq):
    # mask = elements whose rounded, offset value lies in [qmin, qmax]: d(quantize)/dx = g/scale
    # there and 0 elsewhere; d(qdq)/dx = g there and 0 elsewhere; d(qdq)/d(offset) = g*scale
    # outside only; d(quantize)/d(offset) = -g inside.
    v = np.round(x / np.broadcast_to(scale, x.shape)) - np.broadcast_to(offset, x.shape)
    mask = (v >= qmin) & (v <= qmax)
    g = np.ones_like(x)
    sb = np.broadcast_to(scale, x.shape).astype(f32)
    out, gx, gs, go = pa.quantize_grad(g, x, scale, offset, qmin, qmax)
    np.testing.assert_array_equal(out, np.array(q, f32))
    np.testing.assert_array_equal(gx, np.where(mask, g / sb, f32(0)))
    out, gx, gs, go = pa.quantize_dequantize_grad(g, x, scale, offset, qmin, qmax)
    np.testing.assert_array_equal(out, np.array(qdq, f32))
    np.testing.assert_array_equal(gx, np.where(mask, g, f32(0)))
    want_go = np.where(mask, f32(0), g * sb).sum(axis=tuple(range(x.ndim)) if np.ndim(offset) == 0 else 1,
                                                keepdims=np.ndim(offset) > 0)
    np.testing.assert_array_equal(go, want_go.astype(f32).reshape(np.shape(offset)))


@pytest.mark.parametrize("bound", [-10.0, 10.0])
def test_clipped_scale_gradient(bound):
    # x = +-10, scale 1, offset -1, grid [0, 3], grad_output 5: the output is the clamped level,
    # d/dscale = 5 * (level + offset), d/dx = 0, d/doffset = 5 * scale
    x, s, o, g = np.array([bound], f32), f32(1), f32(-1), np.array([5.0], f32)
    level = 3.0 if bound > 0 else 0.0
    out, gx, gs, go = pa.quantize_dequantize_grad(g, x, s, o, 0, 3)
    np.testing.assert_array_equal(out, np.array([level - 1], f32))
    assert gs == f32(5 * (level - 1)) and go == f32(5)
    np.testing.assert_array_equal(gx, np.array([0.0], f32))


X_BLOCK = np.array([[-1.2, 2.4], [-0.6, -0.18]], f32)
BLOCK_VECTORS = [
    ("scale_1x2", np.array([[0.03, 0.02]], f32), [(2, 1), (-1, 1), None], [[-40, 120], [-20, -9]]),
    ("scale_2x1", np.array([[0.03], [0.02]], f32), [(1, 2), (1, -1), None], [[-40, 80], [-30, -9]]),
    ("scale_2x2", np.array([[0.03, 0.02], [0.01, 0.09]], f32), [(1, 1)], [[-40, 120], [-60, -2]]),
]


@pytest.mark.parametrize("vid, scale, block_sizes, q", BLOCK_VECTORS, ids=[v[0] for v in BLOCK_VECTORS])
def test_block_vectors(vid, scale, block_sizes, q):
    offset = np.zeros_like(scale)
    for bs in block_sizes:
        got = pa.quantize(X_BLOCK, scale, offset, 8, True, block_size=bs)
        np.testing.assert_array_equal(got, np.array(q, f32), err_msg=f"block_size={bs}")


def test_block_reshape_example():
    # input (8, 6, 8, 3), scale (4, 3, 8, 1), block (-1, 2, 1, 3): every element uses the scale of its
    # block, which is the same as the scale expanded to the input's shape element by element
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 6, 8, 3)).astype(f32)
    scale = rng.uniform(0.01, 0.05, (4, 3, 8, 1)).astype(f32)
    offset = np.round(rng.uniform(-20, 20, (4, 3, 8, 1))).astype(f32)
    full_s = np.repeat(np.repeat(np.repeat(scale, 2, 0), 2, 1), 3, 3)
    full_o = np.repeat(np.repeat(np.repeat(offset, 2, 0), 2, 1), 3, 3)
    for fn in (pa.quantize, pa.quantize_dequantize):
        got = fn(x, scale, offset, 8, True, block_size=(-1, 2, 1, 3))
        want = fn(x, full_s, full_o, 8, True, block_size=(1, 1, 1, 1))
        assert got.shape == x.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_docstring_example_keeps_negative_zero():
    # quantize's docstring: x = torch.arange(start=-0.3, end=1.3, step=0.05) (float32; these are its
    # 32 values, x[6] = -1.1921e-08), scale 1/15, offset 0, 4 bits: the seventh output is -0.
    x = np.array([-0.30000001192092896, -0.25, -0.20000001788139343, -0.15000000596046448,
                  -0.10000000894069672, -0.050000011920928955, -1.1920929132713809e-08, 0.049999989569187164,
                  0.10000000149011612, 0.15000000596046448, 0.20000000298023224, 0.25, 0.30000001192092896,
                  0.3499999940395355, 0.4000000059604645, 0.44999998807907104, 0.5, 0.550000011920929,
                  0.6000000238418579, 0.6499999761581421, 0.699999988079071, 0.75, 0.800000011920929,
                  0.8500000238418579, 0.8999999761581421, 0.949999988079071, 1.0, 1.0499999523162842,
                  1.100000023841858, 1.149999976158142, 1.1999999284744263, 1.25], f32)
    want = [0, 0, 0, 0, 0, 0, -0.0, 1, 2, 2, 3, 4, 4, 5, 6, 7, 7, 8, 9, 10, 10, 11, 12, 13, 13, 14, 15, 15,
            15, 15, 15, 15]
    for call in (lambda: pa.quantize(x, f32(1 / 15), f32(0), 4),
                 lambda: pa.quantize(x, f32(1 / 15), f32(0), num_steps=15, signed=False),
                 lambda: pa.quantize(x, f32(1 / 15), f32(0), qmin=0, qmax=15)):
        got = call()
        np.testing.assert_array_equal(got, np.array(want, f32))
        assert np.signbit(got[6]) and not np.signbit(got[5])


# --------------------------------------------------------------------------------------------------
# quantizer modules (test_affine_quantizer.py)


@pytest.mark.parametrize("signed_grid", [(-128, 127), (0, 255)])
@pytest.mark.parametrize("bitwidth_form", [True, False])
def test_argument_forms_give_unit_scale(signed_grid, bitwidth_form):
    # compute_encodings on x = arange(qmin, qmax + 1) gives scale 1 and offset 0 (signed symmetric
    # and unsigned asymmetric grids), whichever constructor form built the quantizer
    qmin, qmax = signed_grid
    symmetric = qmin < 0
    for cls in (pa.Quantize, pa.QuantizeDequantize):
        q = cls((1,), 8, symmetric) if bitwidth_form else cls((1,), qmin=qmin, qmax=qmax, symmetric=symmetric)
        x = np.arange(qmin, qmax + 1, dtype=f32)
        with q.compute_encodings():
            q(x)
        np.testing.assert_array_equal(q.get_scale(), np.array([1.0], f32))
        np.testing.assert_array_equal(q.get_offset(), np.array([0.0], f32))


def test_symmetric_invariants():
    # symmetric: min = -scale * ceil(N/2), max = scale * floor(N/2), offset = -round((qmin+qmax)/2)
    rng = np.random.default_rng(3)
    for (qmin, qmax), want_offset in (((-128, 127), 0.0), ((0, 255), -128.0), ((-8, 7), 0.0), ((-127, 127), 0.0)):
        q = pa.QuantizeDequantize((4,), qmin=qmin, qmax=qmax, symmetric=True)
        with q.compute_encodings():
            q(rng.standard_normal((16, 4)).astype(f32))
        s, o = q.get_scale(), q.get_offset()
        np.testing.assert_array_equal(o, np.full(4, want_offset, f32))
        np.testing.assert_array_equal(q.get_min(), s * (o + f32(qmin)))
        np.testing.assert_array_equal(q.get_max(), s * (o + f32(qmax)))


def test_signed_doesnt_affect_output():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 16)).astype(f32)
    for symmetric in (True, False):
        qs = [pa.Quantize((8, 1), qmin=lo, qmax=hi, symmetric=symmetric) for lo, hi in ((-128, 127), (0, 255))]
        qdqs = [pa.QuantizeDequantize((8, 1), qmin=lo, qmax=hi, symmetric=symmetric) for lo, hi in ((-128, 127), (0, 255))]
        for m in qs + qdqs:
            m.min = np.full((8, 1), -1.5, f32)
            m.max = np.full((8, 1), 2.0, f32) if not symmetric else np.full((8, 1), 1.5 * 127 / 128, f32)
        np.testing.assert_array_equal(qs[0](x), qs[1](x) - f32(128))
        np.testing.assert_array_equal(qdqs[0](x), qdqs[1](x))


def test_uninitialized_quantizer():
    for cls in (pa.Quantize, pa.QuantizeDequantize):
        q = cls((1,), 8, False)
        assert not q.is_initialized()
        assert q.get_scale() is None and q.get_offset() is None
        with pytest.raises(RuntimeError):
            q(np.zeros(4, f32))


def test_lpbq_with_unit_grouping_is_blockwise():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 32)).astype(f32)
    mn = -rng.uniform(0.1, 2, (4, 4)).astype(f32)
    mx = rng.uniform(0.1, 2, (4, 4)).astype(f32)
    lpbq = pa.GroupedBlockQuantizeDequantize((4, 4), 4, True, 8, block_size=(1, 8), block_grouping=(1, 1))
    bq = pa.QuantizeDequantize((4, 4), 4, True, block_size=(1, 8))
    for m in (lpbq, bq):
        m.min, m.max = mn, mx
    np.testing.assert_array_equal(lpbq.get_scale(), bq.get_scale())
    np.testing.assert_array_equal(lpbq(x), bq(x))


def test_lpbq_whole_row_grouping_at_equal_bitwidths_is_per_channel():
    # block_grouping -1 over the blocks and decompressed_bw == bitwidth: the integer scales are all 1,
    # every block uses the row's largest raw scale: a per-channel quantizer with that scale
    rng = np.random.default_rng(13)
    mn = -rng.uniform(0.1, 2, (4, 4)).astype(f32)
    mx = -mn * f32(127 / 128)
    lpbq = pa.GroupedBlockQuantizeDequantize((4, 4), 8, True, 8, block_size=(1, 8), block_grouping=(1, -1))
    lpbq.min, lpbq.max = mn, mx
    pcs = lpbq.get_per_channel_scale()
    assert pcs.shape == (4, 1)
    np.testing.assert_array_equal(lpbq.get_scale(), np.broadcast_to(pcs, (4, 4)))


# --------------------------------------------------------------------------------------------------
# encoding analyzers (test_encoding_analyzer.py)

EPS = f32(np.finfo(f32).eps)


@pytest.mark.parametrize("x, num_steps, symmetric, want", [
    (np.arange(0, 25.75, 0.5, dtype=f32), 255, False, (0.0, 25.5)),
    (np.arange(0, 25.75, 0.5, dtype=f32), 254, True, (-25.5, 25.5)),
    (np.arange(-2, 10, dtype=f32), 7, True, (-12.0, 9.0)),
    (np.array([3.0], f32), 255, False, (0.0, 3.0)),
    (np.array([3.0], f32), 254, True, (-3.0, 3.0)),
    (np.array([0.0], f32), 255, False, (0.0, 255 * EPS)),
    (np.array([0.0], f32), 255, True, (-128 * EPS, 127 * EPS)),
], ids=["0_25.5_asym", "0_25.5_sym254", "m2_9_sym7", "3_asym", "3_sym254", "0_asym", "0_sym255"])
def test_minmax_literals(x, num_steps, symmetric, want):
    an = pa.MinMaxEncodingAnalyzer((1,))
    an.update_stats(x)
    mn, mx = an.compute_encodings(num_steps, symmetric)
    np.testing.assert_array_equal(mn, np.array([want[0]], f32))
    np.testing.assert_array_equal(mx, np.array([want[1]], f32))


def test_percentile_literals():
    an = pa.PercentileEncodingAnalyzer((1,), num_bins=500, percentile=99)
    an.update_stats(np.arange(0, 1001, dtype=f32))
    for (n, sym), (lo, hi) in (((255, False), (0, 990)), ((254, True), (-990, 990))):
        mn, mx = an.compute_encodings(n, sym)
        np.testing.assert_array_equal(mn, np.array([lo], f32))
        np.testing.assert_array_equal(mx, np.array([hi], f32))
    an = pa.PercentileEncodingAnalyzer((1,), num_bins=1, percentile=100)
    an.update_stats(np.arange(-2, 10, dtype=f32))
    mn, mx = an.compute_encodings(7, True)
    np.testing.assert_array_equal(mn, np.array([-12.0], f32))
    np.testing.assert_array_equal(mx, np.array([9.0], f32))


def test_sqnr_literal():
    # x = arange(-100, 101) / 100, gamma 1, 8 bits asymmetric: the observed grid wins:
    # delta = fl32(2/255), min = round(-1/delta) * delta with -1/delta = -127.49999 in float32 (-> -127),
    # max = min + 255 * delta
    an = pa.SqnrEncodingAnalyzer((1,), gamma=1.0)
    an.update_stats((np.arange(-100, 101, dtype=f32) / f32(100)).astype(f32))
    mn, mx = an.compute_encodings(255, False)
    d = f32(2) / f32(255)
    want_min = f32(np.round(f32(-1) / d)) * d
    np.testing.assert_array_equal(mn, np.array([want_min], f32))
    np.testing.assert_array_equal(mx, np.array([want_min + f32(255) * d], f32))


HIST_LITERALS = [
    ("merge", 3, [[2, 3.5, 4.2, 5], [5.3, 6.4, 7, 8], [-4.2, 0, 2.3, 4.5]],
     [([1, 1, 2], [2, 3, 4, 5]), ([2, 3, 3], [2, 4, 6, 8]), ([1, 4, 7], [-4.2, -0.1333333, 3.9333333, 8])]),
    ("split", 3, [[1, 7, 5.3, 6, 5.7, 6.8, 6.2, 2.8, 3.9], [0, 9, 7.8, 2.5, 4.6, 6.2, 8.8]],
     [([2, 1, 6], [1, 3, 5, 7]), ([4, 5, 7], [0, 3, 6, 9])]),
    ("ten_bins", 10, [list(range(-50, 51)), [1.5 * v for v in range(-50, 51)]],
     [None, ([10, 15, 25, 25, 25, 25, 25, 26, 15, 11], list(range(-75, 76, 15)))]),
]


@pytest.mark.parametrize("vid, bins, batches, want", HIST_LITERALS, ids=[h[0] for h in HIST_LITERALS])
def test_histogram_literals(vid, bins, batches, want):
    an = pa.PercentileEncodingAnalyzer((1,), num_bins=bins)
    for b, w in zip(batches, want):
        an.update_stats(np.array(b, f32))
        if w is None:
            continue
        state = an.state_dict()
        np.testing.assert_array_equal(state["histogram"][0], np.array(w[0], f32))
        np.testing.assert_allclose(state["bin_edges"][0], np.array(w[1], f32), rtol=1e-6, atol=1e-6)
