"""Bad input and edge cases of polyquant.aimet's functional ops, quantizer modules and encodings
(issue 17): bounded bitwidths in encodings files, strict integer arguments, unknown keywords,
out=, big-endian arrays, the sign of zero of reduced gradients, and a fuzz test of the encodings
loader (every malformed dict is a ValueError or TypeError, fast)."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest

import polyquant.aimet as A
from ..helpers import hypothesis_budget, run_threads

VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])


# ---- encodings: absurd bitwidths are refused at parse time, fast ------------------------------------
def _absurd_encodings(bw_value, dtype_name):
    return [
        ("0.6.1", [{"bitwidth": bw_value, "is_symmetric": "False", "min": 0.0, "max": 1.0, "scale": 0.1, "offset": 0}]),
        ("1.0.0", {"dtype": "INT", "bw": bw_value, "is_sym": False, "scale": [0.1], "offset": [-128],
                   "enc_type": "PER_TENSOR"}),
        ("1.0.0", {"dtype": "INT", "enc_type": "LPBQ", "bw": bw_value, "compressed_bw": 4, "scale": [0.1],
                   "offset": [0], "per_block_int_scale": [1]}),
        ("2.0.0", {"output_dtype": dtype_name, "y_scale": [0.1]}),
        ("2.1.0", {"output_dtype": dtype_name, "y_scale": [0.1]}),
        ("2.0.0", {"output_dtype": dtype_name, "per_block_int_scale": [1], "per_channel_float_scale": [0.1]}),
        ("2.1.0", {"output_dtype": dtype_name, "y_scale": {"x": [1], "x_scale": [0.1], "axis": 0}}),
    ]


@pytest.mark.parametrize("bw", [2**40, 2**63, 64, 0, -3])
def test_encodings_with_absurd_bitwidths_raise_value_error_fast(bw):
    # issue 17 item 3: bw = 2**40 computed 2**bw (hang, unbounded memory); bw = 64 leaked a binding error
    name = f"int{bw}" if bw >= 0 else f"int{bw}"
    for version, enc in _absurd_encodings(bw, name):
        for cls in (A.QuantizeDequantize, A.Quantize):
            q = cls((1,), 8, False)
            start = time.perf_counter()
            with pytest.raises(ValueError, match=r"bitwidth|'bw'|output_dtype"):
                q.set_qnn_encoding_dict(enc, version) if version != "0.6.1" else q.set_legacy_encodings(enc)
            assert time.perf_counter() - start < 1.0, (version, enc)
        q = A.GroupedBlockQuantizeDequantize((1, 2), 4, True, 8, block_size=(1, 2), block_grouping=(1, 1))
        with pytest.raises((ValueError, TypeError)):
            q.set_qnn_encoding_dict(enc, version)


@pytest.mark.parametrize("version", ["2.0.0", "2.1.0"])
@pytest.mark.parametrize("name", ["int1099511627776", "uint64", "int²", "int 8", "float8", "INT8", "int", 8, None])
def test_encodings_output_dtype_is_checked(version, name):
    with pytest.raises(ValueError, match="output_dtype"):
        A.QuantizeDequantize((1,), 8, False).set_qnn_encoding_dict({"output_dtype": name, "y_scale": [0.1]}, version)


def test_encodings_bitwidth_63_is_the_widest_grid_and_round_trips():
    q = A.QuantizeDequantize((1,), 8, False)
    q.set_qnn_encoding_dict({"output_dtype": "int63", "y_scale": [0.5]}, "2.0.0")
    assert (q.qmin, q.qmax) == (-(2**62), 2**62 - 1)
    q.set_qnn_encoding_dict({"dtype": "INT", "bw": 63, "is_sym": False, "scale": [0.5], "offset": [0],
                             "enc_type": "PER_TENSOR"}, "1.0.0")
    assert (q.qmin, q.qmax) == (0, 2**63 - 1)


_GOOD = {
    "0.6.1": [{"bitwidth": 8, "is_symmetric": "False", "min": -1.0, "max": 1.0, "scale": 2 / 255, "offset": -128}],
    "1.0.0": {"dtype": "INT", "bw": 8, "is_sym": False, "scale": [0.1], "offset": [-128], "enc_type": "PER_TENSOR"},
    "2.0.0": {"output_dtype": "uint8", "y_scale": [0.1], "y_zero_point": [128]},
    "2.1.0": {"output_dtype": "int8", "y_scale": [0.1]},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_encodings_missing_or_garbage_fields_name_the_field(version):
    # garbage encodings dicts raised bare KeyError / AttributeError / IndexError / AssertionError
    good = _GOOD[version]
    A.QuantizeDequantize((1,), 8, False).set_qnn_encoding_dict(copy.deepcopy(good), version)  # the base loads
    entry = good[0] if version == "0.6.1" else good
    for key in entry:
        for bad in ("missing", None, "abc", {"a": 1}, [[1], [2, 3]], [None], True, []):
            enc = copy.deepcopy(good)
            target = enc[0] if version == "0.6.1" else enc
            if bad == "missing":
                del target[key]
            else:
                target[key] = bad
            try:
                A.QuantizeDequantize((1,), 8, False).set_qnn_encoding_dict(enc, version)
            except (ValueError, TypeError) as e:
                assert type(e) in (ValueError, TypeError) or isinstance(e, ValueError)
                assert key in str(e) or "encoding" in str(e), (key, bad, e)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("enc", [None, 3, "x", [], [1], {}, [[]], {"y_scale": 1}])
def test_encodings_of_the_wrong_type(version, enc):
    with pytest.raises((ValueError, TypeError)) as info:
        A.QuantizeDequantize((1,), 8, False).set_qnn_encoding_dict(enc, version)
    assert "encoding" in str(info.value)


@pytest.mark.parametrize("version", ["3.0.0", None, 1.0, ["1.0.0"]])
def test_unknown_encoding_version_is_a_value_error(version):
    with pytest.raises(ValueError, match="encoding_version"):
        A.QuantizeDequantize((1,), 8, False).set_qnn_encoding_dict(_GOOD["1.0.0"], version)
    with pytest.raises(AssertionError):  # AIMET's class, still caught
        A.QuantizeDequantize((1,), 8, False).set_qnn_encoding_dict(_GOOD["1.0.0"], version)


def test_lpbq_per_channel_scale_of_the_wrong_size_names_it():
    q = A.GroupedBlockQuantizeDequantize((2, 4), 4, True, 8, block_size=(1, 2), block_grouping=(1, 2))
    with pytest.raises(ValueError, match="per-channel scale"):
        q.set_qnn_encoding_dict({"output_dtype": "int4", "per_block_int_scale": [[1] * 4, [1] * 4],
                                 "per_channel_float_scale": [0.1, 0.2, 0.3]}, "2.0.0")


# ---- fuzz: random, mutated and garbage encodings of every version ---------------------------------------
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
examples, _ = hypothesis_budget()

_garbage = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() |
    st.text(max_size=12) | st.sampled_from(["int8", "uint4", "int64", "int99999999999", "INT", "LPBQ", "PER_BLOCK",
                                            "True", "False", "PER_CHANNEL", "uint0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)

_KEYS = ["bitwidth", "is_symmetric", "min", "max", "scale", "offset", "dtype", "bw", "is_sym", "enc_type",
         "compressed_bw", "per_block_int_scale", "block_size", "output_dtype", "y_scale", "y_zero_point", "axis",
         "per_channel_float_scale", "x", "x_scale"]


@st.composite
def _mutated_encodings(draw):
    version = draw(st.sampled_from(VERSIONS + ("3.0.0",)))
    base = copy.deepcopy(_GOOD[version if version in _GOOD else "1.0.0"])
    target = base[0] if isinstance(base, list) else base
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(_KEYS + list(target)))
        if draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = draw(_garbage)
    if draw(st.integers(0, 9)) == 0:
        base = draw(_garbage)
    return version, base


@examples(300)
@hypothesis.given(case=_mutated_encodings(), shape=st.sampled_from([(1,), (2,), (1, 2), ()]),
                  cls=st.sampled_from(["qdq", "q", "lpbq"]))
def test_fuzz_encodings_loader_raises_only_value_or_type_errors(case, shape, cls):
    version, enc = case
    if cls == "lpbq":
        q = A.GroupedBlockQuantizeDequantize((2, 2), 4, True, 8, block_size=(1, 1), block_grouping=(1, 2))
    else:
        q = (A.QuantizeDequantize if cls == "qdq" else A.Quantize)(shape, 8, False)
    start = time.perf_counter()
    try:
        if version == "0.6.1" and cls != "lpbq":
            q.set_legacy_encodings(enc)
        else:
            q.set_qnn_encoding_dict(enc, version)
    except (ValueError, TypeError):
        pass
    else:  # a loaded encoding exports again
        if q.is_initialized():
            q.get_encodings()
    assert time.perf_counter() - start < 1.0


# ---- strict integer arguments ------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, exc", [(1.5, TypeError), ("1", TypeError), (True, TypeError), (None, TypeError),
                                      (2.0, TypeError), (2**63, ValueError), (0, ValueError)])
def test_block_size_and_grouping_are_strict_integers(bad, exc):
    with pytest.raises(exc, match="block_size"):
        A.QuantizeDequantize((4,), 8, False, block_size=(bad,))
    with pytest.raises(exc, match="block_grouping"):
        A.GroupedBlockQuantizeDequantize((4, 4), 4, True, 8, block_size=(1, 1), block_grouping=(1, bad))
    x = np.zeros(4, np.float32)
    if bad != 0:  # a zero block size is the core's shape error in the functional ops
        with pytest.raises(exc, match="block_size"):
            A.quantize(x, np.ones(4, np.float32), np.zeros(4, np.float32), 8, True, block_size=(bad,))


def test_lpbq_block_grouping_zero_is_a_value_error_not_zero_division():
    with pytest.raises(ValueError, match="block_grouping"):
        A.GroupedBlockQuantizeDequantize((4, 4), 4, True, 8, block_size=(1, 1), block_grouping=(1, 0))


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(bitwidth=64), ValueError, "bitwidth"), (dict(bitwidth=2**40), ValueError, "bitwidth"),
    (dict(bitwidth=8.5), TypeError, "bitwidth"), (dict(bitwidth=True), TypeError, "bitwidth"),
    (dict(qmin=0.0, qmax=255.0), TypeError, "qmin"), (dict(qmin=0, qmax=255.5), TypeError, "qmax"),
    (dict(qmin=-(2**63), qmax=0), ValueError, "qmin"), (dict(qmin=0, qmax=2**64), ValueError, "qmax"),
    (dict(qmin=-1, qmax=2**63 - 1), ValueError, "steps"),
])
def test_quantizer_grid_arguments_are_checked(kwargs, exc, word):
    # bitwidth >= 64 or float qmin/qmax leaked nanobind's "incompatible function arguments"
    with pytest.raises(exc, match=word):
        A.QuantizeDequantize((1,), symmetric=False, **kwargs)


def test_quantizer_shape_and_decompressed_bw_are_strict():
    with pytest.raises(TypeError, match="shape"):
        A.QuantizeDequantize((1.5,), 8, False)
    with pytest.raises(TypeError, match="decompressed_bw"):
        A.GroupedBlockQuantizeDequantize((4, 4), 4, True, 8.5, block_size=(1, 1), block_grouping=(1, 4))
    with pytest.raises(ValueError, match="bitwidth"):
        q = A.QuantizeDequantize((1,), 8, False)
        q.bitwidth = 64


def test_functional_bitwidth_2_pow_40_fails_fast():
    start = time.perf_counter()
    with pytest.raises(ValueError, match="bitwidth"):
        A.quantize(np.zeros(2, np.float32), 0.1, 0, 2**40, True)
    assert time.perf_counter() - start < 1.0


def test_float_bitwidth_follows_aimet():
    # aimet-torch derives qmin = -ceil(n / 2), qmax = floor(n / 2) with n = 2**bitwidth - 1: both are
    # ints for a signed grid whatever the bitwidth (8.5 -> [-181, 180]); unsigned keeps a float qmax
    x = np.linspace(-30, 30, 61, dtype=np.float32)
    s, o = np.float32(0.1), np.float32(0)
    np.testing.assert_array_equal(A.quantize(x, s, o, 8.0, True), A.quantize(x, s, o, -128, 127))
    np.testing.assert_array_equal(A.quantize(x, s, o, 8.5, True), A.quantize(x, s, o, -181, 180))
    with pytest.raises(TypeError):
        A.quantize(x, s, o, 8.0, False)


# ---- unknown keywords and out= -------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", ["quantize", "quantize_dequantize"])
def test_unknown_keyword_is_a_type_error(fn):
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="bitwdith"):
        getattr(A, fn)(x, 0.1, 0, bitwdith=8, signed=True)
    with pytest.raises(TypeError, match="bitwdith"):
        getattr(A, fn + "_grad")(x, x, 0.1, 0, bitwdith=8, signed=True)
    with pytest.raises(TypeError, match="bogus"):
        A.dequantize(x, 0.1, 0, bogus=1)


_CASES = [
    ("quantize", (np.float32(0.1), np.float32(3)), dict(bitwidth=8, signed=True)),
    ("quantize_dequantize", (np.float32(0.1), np.float32(3)), dict(qmin=0, qmax=15)),
    ("quantize_dequantize", (np.full(4, 0.05, np.float32), np.zeros(4, np.float32)), dict(bitwidth=4, signed=True)),
    ("quantize_dequantize", (np.full((2, 2), 0.05, np.float32), np.zeros((2, 2), np.float32)),
     dict(bitwidth=4, signed=True, block_size=(3, 2))),
]


@pytest.mark.parametrize("fn, params, kw", _CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_out_receives_the_result(fn, params, kw, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 4)) * 0.3).astype(dtype)
    expected = getattr(A, fn)(x, *params, **kw)
    out = np.full(x.shape, 7, dtype)
    assert getattr(A, fn)(x, *params, **kw, out=out) is out
    np.testing.assert_array_equal(_bits(out), _bits(expected))
    # in place (out is x); a big-endian out is refused as in every family (results are written in
    # native order), naming out= and what to pass instead
    y = x.copy()
    getattr(A, fn)(y, *params, **kw, out=y)
    np.testing.assert_array_equal(_bits(y), _bits(expected))
    big = np.zeros(x.shape, np.dtype(dtype).newbyteorder(">"))
    with pytest.raises(ValueError, match="^out: the array's byte order is not the machine's"):
        getattr(A, fn)(x, *params, **kw, out=big)
    # wrong dtype / shape / read-only / not an array
    with pytest.raises(ValueError, match="out"):
        getattr(A, fn)(x, *params, **kw, out=np.empty(x.shape, np.float32 if dtype != np.float32 else np.float64))
    with pytest.raises(ValueError, match="out"):
        getattr(A, fn)(x, *params, **kw, out=np.empty((5, 4), dtype))
    ro = np.empty(x.shape, dtype)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        getattr(A, fn)(x, *params, **kw, out=ro)
    with pytest.raises(TypeError, match="out"):
        getattr(A, fn)(x, *params, **kw, out=[0.0] * 24)


def test_dequantize_out():
    q = np.arange(-4, 4, dtype=np.float32)
    expected = A.dequantize(q, np.float32(0.5), np.float32(1))
    out = np.empty(8, np.float32)
    assert A.dequantize(q, np.float32(0.5), np.float32(1), out=out) is out
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("fn, params, kw", _CASES)
def test_big_endian_inputs_are_read(fn, params, kw):
    # '>f4' inputs gave nanobind's "incompatible function arguments"
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((6, 4)) * 0.3).astype(np.float32)
    expected = getattr(A, fn)(x, *params, **kw)
    big = tuple(np.asarray(p).astype(np.asarray(p).dtype.newbyteorder(">")) for p in params)
    got = getattr(A, fn)(x.astype(">f4"), *big, **kw)
    np.testing.assert_array_equal(_bits(np.asarray(got, np.float32)), _bits(expected))
    g = np.ones_like(x)
    ref = A.quantize_dequantize_grad(g, x, *params, **kw) if fn == "quantize_dequantize" else \
        A.quantize_grad(g, x, *params, **kw)
    grad_fn = A.quantize_dequantize_grad if fn == "quantize_dequantize" else A.quantize_grad
    got = grad_fn(g.astype(">f4"), x.astype(">f4"), *big, **kw)
    for r, v in zip(ref, got):
        np.testing.assert_array_equal(_bits(np.asarray(v, r.dtype)), _bits(r))


# ---- item 7: the sign of zero of grad_scale / grad_offset ---------------------------------------
# Checked bit for bit against aimet-torch 2.42.0 itself: tests/python/aimet/test_golden.py::
# test_grad_reduced_zero_signs (the grad/zero_sign/ golden cases: one term, several, none, blocks of
# one). Here only the repro, whose answer is known without the reference.


def test_grad_per_element_keeps_negative_zero():
    # per-element scales: torch reduces nothing, so a -0.0 term stays -0.0 (the float64 sum that
    # started at +0.0 gave +0.0); x = 0.5 / -0.5 / 1.0 / 0.0 at scale 0.5 on the 1-bit grid [0, 1]
    # clamps or rounds such that d/ds is 0, times a negative upstream gradient
    x = np.array([0.5, -0.5, 1.0, 0.0], np.float32)
    g = np.full(4, -1.0, np.float32)
    s, o = np.full(4, 0.5, np.float32), np.zeros(4, np.float32)
    _, _, gs, _ = A.quantize_dequantize_grad(g, x, s, o, 1, False)
    assert np.signbit(gs[gs == 0]).any()
    # several -0.0 terms sum to +0.0, as torch's sum does
    _, _, gs, _ = A.quantize_dequantize_grad(np.full((3, 4), -1.0, np.float32), np.zeros((3, 4), np.float32), s, o,
                                             1, False)
    assert not np.signbit(gs).any()


def test_lpbq_with_an_empty_dimension_does_not_crash():
    # a zero dimension made the LPBQ group size 0 / 0 (SIGFPE), found by fuzz_aimet's quantizer_params
    q = A.GroupedBlockQuantizeDequantize((0, 4), 4, True, 8, block_size=(1, 1), block_grouping=(1, 4))
    q.set_range(-1.0, 1.0)
    enc = q.get_encodings()
    assert enc.scale.shape == (0, 4) and enc.per_channel_scale.shape == (0, 1)
    assert q(np.zeros((0, 4), np.float32)).shape == (0, 4)


def test_encoding_objects_take_strict_integers():
    with pytest.raises(TypeError, match="qmin"):
        A.AffineEncoding(np.ones(()), np.zeros(()), 0.5, 255)
    with pytest.raises(TypeError, match="block_size"):
        A.AffineEncoding(np.ones(4), np.zeros(4), 0, 255, block_size=(1.5,))
    enc = A.AffineEncoding(np.ones(4), np.zeros(4), 0, 255)
    with pytest.raises(TypeError, match="input_shape"):
        enc.to_qnn_encoding_dict("2.0.0", input_shape=(4.5,))
    with pytest.raises(TypeError, match="decompressed_bw"):
        A.GroupedBlockEncoding(np.ones((2, 2)), np.zeros((2, 2)), -8, 7, True, (1, 1), (1, 2), 8.5, np.ones((2, 1)),
                               np.ones((2, 2)))


# ---- concurrency: a quantizer module shared between threads ------------------------------------------


@pytest.mark.parametrize("cls", ["QuantizeDequantize", "Quantize"])
def test_quantizer_calibration_shared_between_threads_equals_serial(cls):
    # Inside compute_encodings every call feeds the analyzer (one lock per analyzer) and quantizes
    # its batch with that batch's own encoding, so each call's output and the final encodings must
    # equal a serial run's whatever the interleaving (min/max statistics are order-independent).
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((64, 32)) * (1 + i)).astype(np.float32) for i in range(16)]

    def make():
        return getattr(A, cls)((32,), 8, False)

    serial = make()
    with serial.compute_encodings():
        want = [serial(b) for b in batches]
    shared = make()
    got = [None] * len(batches)

    def worker(k):
        for i in range(k, len(batches), 8):
            got[i] = shared(batches[i])

    with shared.compute_encodings():
        run_threads(worker, [(k,) for k in range(8)])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))
    es, eg = serial.get_encodings(), shared.get_encodings()
    np.testing.assert_array_equal(_bits(np.asarray(eg.scale)), _bits(np.asarray(es.scale)))
    np.testing.assert_array_equal(_bits(np.asarray(eg.offset)), _bits(np.asarray(es.offset)))
    x = batches[3]
    np.testing.assert_array_equal(_bits(shared(x)), _bits(serial(x)))
