"""polyquant.aimet's quantizer modules beyond the recorded golden cases (aimet/test_golden.py):
encodings written and read back in every version, AIMET's errors naming their parameter, the
uninitialized state, calibration against the analyzer used directly, and the LPBQ equivalences of
aimet.md section 5."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import polyquant.aimet as pa
from polyquant.aimet import Dequantize, GroupedBlockQuantizeDequantize, Quantize, QuantizeDequantize

VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")
RNG = np.random.default_rng(7)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


def _with_range(q, spread=3.0):
    q.min = (-RNG.random(q.shape) * spread).astype(np.float32)
    q.max = (RNG.random(q.shape) * spread + 0.01).astype(np.float32)
    return q


# (constructor, x shape); all have a defined bitwidth, so every version can be written
QUANTIZERS = [
    (lambda c: c((), 8, False), (4, 6)),
    (lambda c: c((1,), 8, True), (4, 6)),
    (lambda c: c((4, 1), 8, False), (4, 6)),
    (lambda c: c((6,), 4, True), (4, 6)),
    (lambda c: c((1,), qmin=-128, qmax=127, symmetric=False), (4, 6)),
    (lambda c: c((1,), qmin=0, qmax=255, symmetric=True), (4, 6)),
    (lambda c: c((4, 2), 8, True, block_size=(1, 3)), (4, 6)),
    (lambda c: c((4, 2), 16, False, block_size=(1, 3)), (4, 6)),
]


def _roundtrip_cases():
    for i, (make, xs) in enumerate(QUANTIZERS):
        for cls in (Quantize, QuantizeDequantize):
            for v in VERSIONS:
                yield pytest.param(make, cls, xs, v, id=f"{cls.__name__}-{i}-{v}")


@pytest.mark.parametrize("make,cls,x_shape,version", list(_roundtrip_cases()))
def test_encodings_round_trip(make, cls, x_shape, version):
    q = _with_range(make(cls))
    d = q.get_encodings().to_qnn_encoding_dict(version, input_shape=x_shape)
    r = make(cls)
    assert not r.is_initialized()
    r.set_qnn_encoding_dict(d, version)
    assert r.is_initialized()
    assert r.get_encodings().to_qnn_encoding_dict(version, input_shape=x_shape) == d
    assert same(r.get_scale(), q.get_scale())
    x = (RNG.standard_normal(x_shape) * 2).astype(np.float32)
    if cls is QuantizeDequantize or r.qmin == q.qmin:  # 0.6.1 / 1.0.0 do not record a signed asymmetric grid
        assert same(r(x), q(x))


LPBQ = [((4, 4), (1, 8), (1, 4), 4, 8, (4, 32)), ((8, 2, 1, 1), (1, 4, 3, 3), (1, -1, 1, 1), 4, 8, (8, 8, 3, 3)),
        ((4, 4), (1, 8), (2, 2), 2, 8, (4, 32))]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape,block,grouping,bw,dbw,x_shape", LPBQ)
def test_lpbq_encodings_round_trip(shape, block, grouping, bw, dbw, x_shape, version):
    def make():
        return GroupedBlockQuantizeDequantize(shape, bw, True, dbw, block_size=block, block_grouping=grouping)

    q = _with_range(make())
    d = q.get_encodings().to_qnn_encoding_dict(version, input_shape=x_shape)
    r = make()
    r.set_qnn_encoding_dict(d, version)
    assert r.get_encodings().to_qnn_encoding_dict(version, input_shape=x_shape) == d
    x = RNG.standard_normal(x_shape).astype(np.float32)
    assert same(r(x), q(x))
    assert same(r.get_per_channel_scale(), q.get_per_channel_scale())


def test_legacy_import_rebuilds_from_min_max():
    q = _with_range(QuantizeDequantize((4, 1), 8, False))
    legacy = q.get_legacy_encodings()
    r = QuantizeDequantize((4, 1), 4, True)
    r.set_legacy_encodings(legacy)
    assert (r.qmin, r.qmax, r.symmetric) == (0, 255, False)
    np.testing.assert_array_equal(r.min, np.array([e["min"] for e in legacy], np.float32).reshape(4, 1))
    np.testing.assert_allclose(r.get_scale(), q.get_scale(), rtol=1e-6)


def test_from_encodings():
    q = _with_range(QuantizeDequantize((4, 1), qmin=-100, qmax=37, symmetric=False))
    r = QuantizeDequantize.from_encodings(q.get_encodings())
    assert (r.shape, r.qmin, r.qmax, r.symmetric) == ((4, 1), -100, 37, False)
    assert same(r.min, q.get_min()) and same(r.max, q.get_max())
    np.testing.assert_allclose(r.get_scale(), q.get_scale(), rtol=1e-6)
    g = _with_range(GroupedBlockQuantizeDequantize((4, 4), 4, True, 8, block_size=(1, 8), block_grouping=(1, 4)))
    h = GroupedBlockQuantizeDequantize.from_encodings(g.get_encodings())
    assert (h.block_grouping, h.decompressed_bw, h.block_size) == ((1, 4), 8, (1, 8))
    with pytest.raises(TypeError, match="encodings"):
        QuantizeDequantize.from_encodings(g.get_encodings())


# ---- errors: AIMET's classes, messages naming the parameter ---------------------------------------

@pytest.mark.parametrize("cls", [Quantize, QuantizeDequantize])
@pytest.mark.parametrize("args,kwargs,exc,word", [
    (((1,), 8), {}, TypeError, "symmetric"),
    (((1,),), {"qmin": 0, "qmax": 255}, TypeError, "symmetric"),
    (((1,), 8, False), {"foo": 1}, TypeError, "foo"),
    (((1,), 0, False), {}, ValueError, "qmax"),
    (((1,), 10, 3, False), {}, ValueError, "qmin"),
    (((4, 1), 8, False), {"encoding_analyzer": lambda: pa.MinMaxEncodingAnalyzer((3, 1))}, RuntimeError,
     "encoding.analyzer"),
])
def test_constructor_errors(cls, args, kwargs, exc, word):
    # analyzers are made in the test, not at collection (no extension object outlives the session)
    kwargs = {k: v() if callable(v) else v for k, v in kwargs.items()}
    with pytest.raises(exc, match=f"(?i){word}"):
        cls(*args, **kwargs)


@pytest.mark.parametrize("args,kwargs,word", [
    (((4, 2), 4, False, 8), {"block_size": (1, 4), "block_grouping": (1, 2)}, "symmetric"),
    (((4, 2), 8, True, 4), {"block_size": (1, 4), "block_grouping": (1, 2)}, "decompressed_bw"),
    (((4, 2), 4, True, 8), {"block_size": (1, 4), "block_grouping": (2,)}, "block_grouping"),
    (((4, 3), 4, True, 8), {"block_size": (1, 4), "block_grouping": (1, 2)}, "block_grouping"),
])
def test_lpbq_constructor_errors(args, kwargs, word):
    with pytest.raises(RuntimeError, match=word):
        GroupedBlockQuantizeDequantize(*args, **kwargs)


def test_export_errors():
    q = _with_range(QuantizeDequantize((4, 1), 8, False))
    with pytest.raises(AssertionError, match="encoding_version"):
        q.get_encodings().to_qnn_encoding_dict("0.5.0")
    with pytest.raises(RuntimeError, match="input.shape"):
        q.get_encodings().to_qnn_encoding_dict("2.0.0")
    b = _with_range(QuantizeDequantize((2, 3), 8, True, block_size=(1, -1)))
    with pytest.raises(NotImplementedError, match="block_size"):
        b.get_encodings().to_qnn_encoding_dict("1.0.0", input_shape=(2, 6))
    odd = _with_range(QuantizeDequantize((1,), -100, 37, False))
    with pytest.raises(RuntimeError, match="bitwidth"):
        odd.get_legacy_encodings()


# ---- the uninitialized quantizer ---------------------------------------------------------------------

@pytest.mark.parametrize("cls", [Quantize, QuantizeDequantize])
def test_uninitialized(cls):
    q = cls((3, 1), 8, False)
    assert not q.is_initialized()
    for nm in ("get_scale", "get_offset", "get_min", "get_max", "get_encodings", "get_legacy_encodings"):
        assert getattr(q, nm)() is None, nm
    np.testing.assert_array_equal(q.min, -np.ones((3, 1), np.float32))
    np.testing.assert_array_equal(q.max, np.ones((3, 1), np.float32))
    with pytest.raises(RuntimeError, match="initialized"):
        q(np.ones((3, 4), np.float32))
    assert q(np.ones((0, 4), np.float32)).shape == (0, 4)  # empty input: AIMET's dummy encoding
    q.min = np.full((3, 1), -2.0)
    assert not q.is_initialized()  # AIMET: both parameters must have been written
    q.max = np.full((3, 1), 2.0)
    assert q.is_initialized()
    assert q.min.dtype == np.float32 and q.min.shape == (3, 1)


# ---- compute_encodings over several batches against the analyzer used directly ------------------------

@pytest.mark.parametrize("sym", [False, True])
@pytest.mark.parametrize("shape,block,x_shape", [((1,), None, (4, 6)), ((4, 1), None, (4, 6)), ((4, 2), (1, 3), (4, 6))])
def test_compute_encodings_matches_the_analyzer(sym, shape, block, x_shape):
    q = QuantizeDequantize(shape, 8, sym, block_size=block)
    an = pa.MinMaxEncodingAnalyzer(shape, block_size=block)
    batches = [(RNG.standard_normal(x_shape) * (i + 1)).astype(np.float32) for i in range(3)]
    with q.compute_encodings():
        for b in batches:
            y = q(b)
            an.update_stats(b)
            dmin, dmax = pa.MinMaxEncodingAnalyzer(shape, block_size=block).compute_dynamic_encodings(b, 255, sym)
            scale = (dmax - dmin) / np.float32(255)
            offset = np.zeros(shape, np.float32) if sym else np.round(dmin / scale)
            assert same(y, pa.quantize_dequantize(b, scale, offset.astype(np.float32), *((-128, 127) if sym else (0, 255)),
                                                  block_size=block))
    mn, mx = an.compute_encodings(255, sym)
    assert same(q.min, mn.astype(np.float32)) and same(q.max, mx.astype(np.float32))
    assert q.is_initialized()


def test_compute_encodings_overwrite_and_warnings():
    q = QuantizeDequantize((1,), 8, False)
    q.min, q.max = np.array([-1.0]), np.array([1.0])
    q.allow_overwrite(False)
    with q.compute_encodings():
        q(np.arange(10, dtype=np.float32))
    assert same(q.min, np.array([-1.0], np.float32))
    q.allow_overwrite(min=True)  # max stays
    with q.compute_encodings():
        q(np.arange(10, dtype=np.float32))
    assert same(q.min, np.array([0.0], np.float32)) and same(q.max, np.array([1.0], np.float32))
    assert q.is_overwrite_allowed() and not q.is_overwrite_allowed("max")
    with pytest.raises(RuntimeError, match="allow_overwrite"):
        q.allow_overwrite(scale=True)
    q.allow_overwrite(True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with q.compute_encodings():
            q(np.array([np.inf, 1.0], np.float32))
    assert any("Infinite" in str(m.message) or "Extreme" in str(m.message) for m in w)
    with pytest.raises(ValueError):
        with q.compute_encodings():
            raise ValueError("inside")
    assert same(q.max, np.array([np.finfo(np.float32).max], np.float32))  # the range set by the earlier context


# ---- LPBQ equivalences (aimet.md section 5) ----------------------------------------------------------

def test_lpbq_grouping_of_ones_is_blockwise():
    g = GroupedBlockQuantizeDequantize((4, 4), 4, True, 8, block_size=(1, 8), block_grouping=(1, 1))
    b = QuantizeDequantize((4, 4), 4, True, block_size=(1, 8))
    _with_range(g)
    b.min, b.max = g.min, g.max
    x = RNG.standard_normal((4, 32)).astype(np.float32)
    assert same(g(x), b(x))
    assert same(g.get_scale(), b.get_scale())


def test_lpbq_whole_row_group_at_equal_bitwidths_is_per_channel():
    g = _with_range(GroupedBlockQuantizeDequantize((4, 4), 4, True, 4, block_size=(1, 8), block_grouping=(1, -1)))
    pc = g.get_per_channel_scale()
    assert pc.shape == (4, 1)
    assert same(g.get_scale(), np.broadcast_to(pc, (4, 4)).astype(np.float32))
    x = RNG.standard_normal((4, 32)).astype(np.float32)
    assert same(g(x), pa.quantize_dequantize(x, pc, np.zeros((4, 1), np.float32), -8, 7))


def test_lpbq_scale_is_integer_times_channel_scale():
    g = _with_range(GroupedBlockQuantizeDequantize((4, 4), 4, True, 8, block_size=(1, 8), block_grouping=(1, 4)))
    enc = g.get_encodings()
    ints = enc.per_block_int_scale
    assert ints.min() >= 1 and ints.max() <= 16 and np.all(ints.max(axis=1) == 16)
    assert same(enc.scale, (ints * np.broadcast_to(g.get_per_channel_scale(), (4, 4))).astype(np.float32))


def test_torch_tensors_calibrate_and_quantize_like_numpy():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    a, b = QuantizeDequantize((4, 1), 8, False), QuantizeDequantize((4, 1), 8, False)
    with a.compute_encodings():
        ya = a(torch.from_numpy(x.copy()))
    with b.compute_encodings():
        yb = b(x)
    assert isinstance(ya, torch.Tensor) and same(ya.numpy(), yb)
    assert same(a.min, b.min) and same(a(torch.from_numpy(x)).numpy(), b(x))


def test_dequantize_inverts_quantize():
    q = Quantize((4, 1), 8, False)
    q.min, q.max = np.full((4, 1), -1.0), np.full((4, 1), 3.0)
    d = Dequantize((4, 1), 8, False)
    d.min, d.max = q.min, q.max
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    want = pa.dequantize(q(x), q.get_scale(), q.get_offset())
    assert same(d(q(x)), want)
    with pytest.raises(RuntimeError, match="initialized"):
        Dequantize((1,), 8, False)(x)
