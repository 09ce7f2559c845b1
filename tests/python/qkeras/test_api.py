"""polyquant.qkeras' API: bad input, rank-0 and empty tensors, input kinds and layouts, out=,
get_config()/from_config()/str()/get_quantizer(), the scale attributes' kept-dimension shapes and
values after auto calls, and the explicit Keras settings (epsilon, image_data_format).

Expected values are derived here from QKeras' formulas (reference notes §2.4, §2.5, §4.4) or taken
from real QKeras (the golden data's recorded str() values), never from polyquant itself.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import polyquant
from polyquant.qkeras import get_quantizer, quantized_bits, quantized_linear, quantized_relu
from ..golden import golden
from ..helpers import kernel_set

F = np.float32
QUANTIZERS = (quantized_bits, quantized_relu, quantized_linear)


def _bits(a):
    return np.ascontiguousarray(a, dtype=F).view(np.uint32)


def assert_same_bits(got, want, what=""):
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == F and want.dtype == F, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    bad = (_bits(got) != _bits(want)) & ~(np.isnan(got) & np.isnan(want))
    assert not bad.any(), f"{what}: {bad.sum()} differ: {got[bad][:5]} vs {want[bad][:5]}"


# ------------------------------------------------------------------------------------------------
# bad input: ValueError / TypeError naming the parameter

X = np.linspace(-2, 2, 24, dtype=F).reshape(4, 6)


def _raises(exc, match, fn):
    with pytest.raises(exc, match=match):
        fn()


@pytest.mark.parametrize("bits", [0, -1, -8, 0.0])
def test_linear_bits_not_positive(bits):
    _raises(ValueError, "bits", lambda: quantized_linear(bits))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("alpha", ["po2", "Auto", "auto_po2 ", "max", ""])
def test_unknown_alpha_string(cls, alpha):
    # DEPARTURE alpha_other_string: QKeras treats any string containing "po2" as auto_po2 (bits)
    _raises(ValueError, "alpha", lambda: cls(4, 0, alpha=alpha))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("alpha", [object(), {"a": 1}, "x".encode(), [1.0, "a"]])
def test_alpha_not_a_number(cls, alpha):
    _raises((TypeError, ValueError), "alpha", lambda: cls(4, 0, alpha=alpha))


@pytest.mark.parametrize("slope", [0.1, 0.3, 3.0, -0.5, -0.25, -1.0, 2.0**-1000, 2.0**200])
def test_negative_slope_not_a_power_of_two_or_negative(slope):
    # powers of two outside float32 would make every output NaN
    _raises(ValueError, "negative_slope", lambda: quantized_relu(4, 0, negative_slope=slope))


@pytest.mark.parametrize("slope", [0.0, 0.0625, 0.125, 0.5, 1.0, 2.0])
def test_negative_slope_accepted(slope):
    quantized_relu(4, 0, negative_slope=slope)(X)  # QKeras accepts every power of two (>= 1 too)


@pytest.mark.parametrize("alpha", [None, 1.0, [1.0, 2.0]])
def test_post_training_scale_without_string_alpha(alpha):
    _raises(ValueError, "post_training_scale", lambda: quantized_bits(4, 0, alpha=alpha, post_training_scale=[1.0]))


@pytest.mark.parametrize("name,value", [("elements_per_scale", 2), ("min_po2_exponent", -4), ("max_po2_exponent", 3)])
@pytest.mark.parametrize("alpha", [None, "auto", 1.0])
def test_po2_options_without_auto_po2(name, value, alpha):
    # DEPARTURE po2_options_at_init: QKeras asserts at call time
    _raises(ValueError, name, lambda: quantized_bits(4, 0, alpha=alpha, **{name: value}))


@pytest.mark.parametrize("eps,axis", [(4, 1), (5, 1), ([4], [1]), ([2, 5], [0, 1])])
def test_elements_per_scale_not_dividing(eps, axis):
    q = quantized_bits(4, 0, alpha="auto_po2", elements_per_scale=eps, scale_axis=axis)
    _raises(ValueError, "elements_per_scale", lambda: q(X))


def test_elements_per_scale_dividing_works():
    y = quantized_bits(4, 0, alpha="auto_po2", elements_per_scale=3, scale_axis=1)(X)
    assert y.shape == X.shape
    _raises(ValueError, "elements_per_scale", lambda: quantized_bits(4, 0, alpha="auto_po2", elements_per_scale=0))
    _raises(ValueError, "elements_per_scale", lambda: quantized_bits(4, 0, alpha="auto_po2", elements_per_scale=1.5))
    # a list needs a list scale_axis
    _raises(ValueError, "elements_per_scale",
            lambda: quantized_bits(4, 0, alpha="auto_po2", elements_per_scale=[3], scale_axis=1)(X))


@pytest.mark.parametrize("cls", QUANTIZERS)
@pytest.mark.parametrize("name", ["bits", "integer"])
@pytest.mark.parametrize("value", ["8", None, [8], True, 1 + 2j])
def test_non_numeric_bits_integer(cls, name, value):
    kw = {"bits": 8, "integer": 0, name: value}
    _raises(TypeError, name, lambda: cls(**kw))


@pytest.mark.parametrize("cls", QUANTIZERS)
@pytest.mark.parametrize("name", ["bits", "integer"])
def test_non_finite_bits_integer(cls, name):
    for value in (float("nan"), float("inf")):
        kw = {"bits": 8, "integer": 0, name: value}
        _raises(ValueError, name, lambda: cls(**kw))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("axis", [1.5, "1", [1.0], [0, "1"], True, {1: 1}, [True]])
def test_bad_scale_axis_type(cls, axis):
    _raises(TypeError, "scale_axis", lambda: cls(4, 0, alpha="auto", scale_axis=axis))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("alpha", ["auto", "auto_po2"])
@pytest.mark.parametrize("axis", [2, 5, -3, -100])
def test_scale_axis_out_of_range(cls, alpha, axis):
    q = cls(4, 0, alpha=alpha, scale_axis=axis)
    _raises(ValueError, "scale_axis", lambda: q(X))


@pytest.mark.parametrize("cls", QUANTIZERS)
def test_bad_settings(cls):
    for eps in (-1e-7, float("nan"), float("inf")):
        _raises(ValueError, "epsilon", lambda: cls(epsilon=eps))
    for eps in ("1e-7", None, [1e-7]):
        _raises(TypeError, "epsilon", lambda: cls(epsilon=eps))
    for fmt in ("NCHW", "channels-first", None, "", "Channels_Last"):
        _raises(ValueError, "image_data_format", lambda: cls(image_data_format=fmt))
    for seed in (1.5, "1", None, True, [1]):
        _raises(TypeError, "seed", lambda: cls(seed=seed))
    for seed in (1.5, "1", True, [1]):  # (seed=None in a call: the constructor's seed)
        _raises(TypeError, "seed", lambda: cls()(X, training=True, seed=seed))
    for qn in ("1", None, [1.0]):
        _raises(TypeError, "qnoise_factor", lambda: cls(qnoise_factor=qn))
    _raises(ValueError, "qnoise_factor", lambda: cls(qnoise_factor=float("nan")))
    q = cls()
    _raises(TypeError, "qnoise_factor", lambda: q.update_qnoise_factor("0.5"))
    _raises(TypeError, "training", lambda: cls()(X, training="yes"))
    _raises(TypeError, "training", lambda: cls()(X, training=None))


def test_bad_relu_upper_bound():
    _raises(TypeError, "relu_upper_bound", lambda: quantized_relu(relu_upper_bound="1.5"))
    _raises(ValueError, "relu_upper_bound", lambda: quantized_relu(relu_upper_bound=float("nan")))


@pytest.mark.parametrize("cls", QUANTIZERS)
def test_bad_out(cls):
    q = cls()
    _raises(ValueError, "out", lambda: q(X, out=np.empty((6, 4), F)))
    _raises(ValueError, "out", lambda: q(X, out=np.empty(24, F)))
    _raises(ValueError, "out", lambda: q(X, out=np.empty((4, 6), np.int32)))
    _raises(ValueError, "out", lambda: q(X, out=np.empty((4, 6), np.bool_)))
    _raises(TypeError, "out", lambda: q(X, out=[[0.0] * 6] * 4))
    _raises(ValueError, "out", lambda: q(X, out=np.broadcast_to(F(0), (4, 6))))  # read-only


@pytest.mark.parametrize("bits", [1, 0, -1])
@pytest.mark.parametrize("alpha", ["auto", "auto_po2"])
def test_bits_one_with_auto_alpha(bits, alpha):
    """DEPARTURE bits_one_auto: QKeras returns NaN (auto) or 0 (auto_po2); polyquant raises."""
    q = quantized_bits(bits, 0, alpha=alpha)
    _raises(ValueError, "bits", lambda: q(X))
    quantized_bits(2, 0, alpha=alpha)(X)  # two bits are fine


@pytest.mark.parametrize("x", ["abc", object(), np.array(["a"]), np.array([1 + 1j], np.complex64),
                               np.zeros((1,) * 9, F)])
def test_bad_x(x):
    for cls in QUANTIZERS:
        with pytest.raises((TypeError, ValueError), match="^x: "):
            cls()(x)


# ------------------------------------------------------------------------------------------------
# rank 0 and empty input, every quantizer and every alpha kind

ALPHAS = [None, 2.0, [0.5], np.array(1.5), "auto", "auto_po2"]
SHAPES = [(), (0,), (1,), (3, 0), (0, 4), (2, 0, 3), (0, 0, 0, 0), (1, 1, 1, 1)]


def _every_quantizer():
    for alpha in ALPHAS:
        yield f"bits-{alpha!r}", lambda alpha=alpha: quantized_bits(6, 1, alpha=alpha)
        yield f"bits_pts-{alpha!r}", lambda alpha=alpha: (
            quantized_bits(6, 1, alpha=alpha, post_training_scale=4.0) if isinstance(alpha, str) else quantized_bits(6, 1))
        yield f"linear-{alpha!r}", lambda alpha=alpha: quantized_linear(6, 1, alpha=alpha)
    yield "linear-sign", lambda: quantized_linear(1, 0, alpha="auto_po2")
    yield "relu", lambda: quantized_relu(6, 1)
    yield "relu-leaky-sigmoid-ub", lambda: quantized_relu(6, 1, use_sigmoid=1, negative_slope=0.25, relu_upper_bound=1.0,
                                                          is_quantized_clip=False)
    yield "relu-fast", lambda: quantized_relu(6, 1, enable_fast_inference=True)
    yield "bits-po2-options", lambda: quantized_bits(6, 1, alpha="auto_po2", min_po2_exponent=-3, max_po2_exponent=2,
                                                     scale_axis=[0])


EVERY = list(_every_quantizer())


@pytest.mark.parametrize("name,make", EVERY, ids=[n for n, _ in EVERY])
def test_rank0_and_empty(name, make):
    for shape in SHAPES:
        for training in (False, True):
            q = make()
            x = np.full(shape, F(0.3))
            y = q(x, training=training)
            alpha = getattr(q, "alpha", None)
            value_alpha = alpha is not None and not isinstance(alpha, str)
            want_shape = np.broadcast_shapes(shape, np.shape(alpha)) if value_alpha else shape
            assert isinstance(y, np.ndarray) and y.dtype == F and y.shape == want_shape, (shape, y.shape)
            if y.size:
                assert np.isfinite(y).all(), (shape, y)
            g = q.gradient(x)
            assert g.dtype == F and g.shape == want_shape


def test_rank0_values():
    """A 0-d input gives the value of the same number in a 1-element tensor (DEPARTURE
    rank0_auto: QKeras cannot reduce a scalar in quantized_bits' auto paths)."""
    for _, make in EVERY:
        for v in (F(0.3), F(-1.7), F(0.0), F(-0.0), F(5.0)):
            a, b = make(), make()
            y0 = a(np.array(v))
            y1 = b(np.array([v]))
            assert_same_bits(y0.reshape(-1)[:1] if y0.ndim else y0.reshape(1), y1.reshape(-1)[:1], f"{a} at {v}")


# ------------------------------------------------------------------------------------------------
# input kinds, dtypes and layouts; out=


class ArrayOnly:
    """An object exposing only __array__ (numpy's protocol)."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class DLPackOnly:
    """An object exposing only the DLPack protocol (like a CPU torch tensor)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _inputs(rng):
    base = (rng.standard_normal((9, 14)) * 2).astype(F)
    base[0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40]
    yield "float32", base
    yield "float16", base.astype(np.float16)
    yield "float64", (rng.standard_normal((9, 14)) * 2)
    yield "float64-rounding", np.array([1 + 2.0**-25, 1 + 3 * 2.0**-25, 0.1, 1e-39, 1e39, -1e300, 2.0**-150], np.float64)
    yield "int8", rng.integers(-128, 128, (5, 7)).astype(np.int8)
    yield "int32", rng.integers(-5, 5, (5, 7)).astype(np.int32)
    yield "int64-large", np.array([2**24 + 1, -(2**40) - 3, 7, 0], np.int64)
    yield "uint8", rng.integers(0, 255, (4, 3)).astype(np.uint8)
    yield "bool", np.array([[True, False], [False, True]])
    yield "list", [[0.3, -1.2, 2.5], [0.0, 1e-3, -7.0]]
    yield "python-float", 0.7
    yield "numpy-scalar", F(-0.45)
    yield "0-d", np.array(1.3, F)
    yield "strided", base[1::2, ::3]
    yield "negative-stride", base[::-1, ::-2]
    yield "broadcast", np.broadcast_to(base[2], (5, 14))
    yield "broadcast-column", np.broadcast_to(base[:, :1], (9, 14))
    yield "fortran", np.asfortranarray(base)
    yield "big-endian", base.astype(">f4")
    yield "misaligned", np.frombuffer(b"\0" + base.tobytes(), dtype=F, offset=1).reshape(base.shape)
    yield "array-only", ArrayOnly(base[::2])
    yield "dlpack-only", DLPackOnly(base[1:5])


def _f32_copy(x):
    a = np.asarray(x.__array__() if isinstance(x, ArrayOnly) else x._a if isinstance(x, DLPackOnly) else x)
    with np.errstate(over="ignore"):  # 1e39 rounds to inf, as K.cast_to_floatx does
        return a.astype(F, order="C")  # (not ascontiguousarray: it makes 0-d arrays 1-d)


QS = [
    lambda: quantized_bits(5, 1),
    lambda: quantized_bits(5, 1, alpha="auto_po2"),
    lambda: quantized_bits(4, 0, alpha="auto", scale_axis=0),
    lambda: quantized_relu(5, 2, negative_slope=0.5),
    lambda: quantized_linear(5, 1),
    lambda: quantized_linear(5, 1, alpha="auto_po2"),
    lambda: quantized_linear(5, 1, alpha="auto", use_stochastic_rounding=True),
]


def test_input_kinds_and_layouts_equal_the_float32_copy(rng):
    for label, x in _inputs(rng):
        ref_in = _f32_copy(x)
        for make in QS:
            for training in (False, True):
                q, r = make(), make()
                y = q(x, training=training, seed=3)
                want = r(ref_in, training=training, seed=3)
                assert isinstance(y, np.ndarray) and y.dtype == F and y.shape == ref_in.shape, label
                assert_same_bits(y, want, f"{label}: {q}")
                for attr in ("scale", "quantization_scale"):
                    if isinstance(getattr(q, "alpha", None), str) and hasattr(q, attr):
                        assert_same_bits(np.asarray(getattr(q, attr), F), np.asarray(getattr(r, attr), F), attr)
                g = q.gradient(x)
                assert_same_bits(g, make().gradient(ref_in), f"{label}: gradient of {q}")


def test_scales_equal_for_views(rng):
    base = (rng.standard_normal((12, 10)) * 3).astype(F)
    for view in (base[::-2, 1::2], np.asfortranarray(base), np.broadcast_to(base[3], (7, 10))):
        for make in (lambda: quantized_bits(4, 1, alpha="auto_po2"), lambda: quantized_linear(4, 1, alpha="auto")):
            a, b = make(), make()
            a(view)
            b(np.ascontiguousarray(view))
            sa = np.asarray(a.scale, F)
            assert_same_bits(sa, np.asarray(b.scale, F), str(a))
            assert sa.shape == (1, view.shape[1])


@pytest.mark.parametrize("make", QS)
def test_out_writes_in_place(rng, make):
    x = (rng.standard_normal((6, 33)) * 2).astype(F)
    want = make()(x)
    for out in (np.empty((6, 33), F), np.empty((33, 6), F).T, np.empty((6, 66), F)[:, ::2]):
        out[...] = np.nan
        r = make()(x, out=out)
        assert r is out
        assert_same_bits(np.ascontiguousarray(out), want, "out=")
    for dt in (np.float64, np.float16):
        out = np.empty((6, 33), dt)
        r = make()(x, out=out)
        assert r is out
        np.testing.assert_array_equal(out, want.astype(dt))
    # in place on the input itself
    y = x.copy()
    r = make()(y, out=y)
    assert r is y
    assert_same_bits(y, want, "out=x")


# ------------------------------------------------------------------------------------------------
# get_config / from_config / str / get_quantizer

CONFIG_KEYS = {
    quantized_bits: {"bits", "integer", "symmetric", "alpha", "keep_negative", "use_stochastic_rounding", "qnoise_factor",
                     "post_training_scale"},
    quantized_relu: {"bits", "integer", "use_sigmoid", "negative_slope", "use_stochastic_rounding", "relu_upper_bound",
                     "qnoise_factor"},
    quantized_linear: {"bits", "integer", "symmetric", "alpha", "keep_negative", "use_stochastic_rounding",
                       "qnoise_factor"},
}

CONFIGS = [
    (quantized_bits, {}),
    (quantized_bits, dict(bits=4, integer=2, symmetric=1, keep_negative=False)),
    (quantized_bits, dict(bits=6, integer=-1, alpha=2.0, qnoise_factor=0.5)),
    (quantized_bits, dict(bits=6, integer=1, alpha=[0.5, 1.0, 2.0, 4.0])),
    (quantized_bits, dict(bits=6, integer=1, alpha=np.array([0.5, 1.0, 2.0, 4.0]))),
    (quantized_bits, dict(bits=8, integer=0, alpha="auto")),
    (quantized_bits, dict(bits=8, integer=3, alpha="auto_po2", use_stochastic_rounding=True)),
    (quantized_bits, dict(bits=8, integer=3, alpha="auto_po2", post_training_scale=[[2.0, 4.0, 0.5, 1.0]])),
    (quantized_bits, dict(bits=1, integer=2)),
    (quantized_bits, dict(bits=4, integer=0.5)),
    (quantized_relu, {}),
    (quantized_relu, dict(bits=4, integer=1, use_sigmoid=1)),
    (quantized_relu, dict(bits=6, integer=2, negative_slope=0.25, use_stochastic_rounding=True)),
    (quantized_relu, dict(bits=6, integer=2, relu_upper_bound=1.5, qnoise_factor=0.25)),
    (quantized_relu, dict(bits=6, integer=-1)),
    (quantized_linear, {}),
    (quantized_linear, dict(bits=1, integer=0)),
    (quantized_linear, dict(bits=4, integer=1, symmetric=0, keep_negative=False)),
    (quantized_linear, dict(bits=6, integer=2, alpha=3.0)),
    (quantized_linear, dict(bits=6, integer=2, alpha=[1.0, 2.0, 0.5, 0.25])),
    (quantized_linear, dict(bits=6, integer=-2, alpha="auto", qnoise_factor=0.75)),
    (quantized_linear, dict(bits=6, integer=2, alpha="auto_po2", use_stochastic_rounding=True)),
]


@pytest.mark.parametrize("cls,kw", CONFIGS, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(CONFIGS)])
def test_config_round_trip(rng, cls, kw):
    x = (rng.standard_normal((5, 4)) * 3).astype(F)
    q = cls(**kw)
    y = q(x)
    cfg = q.get_config()
    assert set(cfg) == CONFIG_KEYS[cls]
    text = json.dumps(cfg)  # JSON-serialisable as is
    q2 = cls.from_config(json.loads(text))
    # the config holds an array alpha as a list (JSON); str() prints what it holds
    want_str = str(cls(**{**kw, "alpha": kw["alpha"].tolist()})) if isinstance(kw.get("alpha"), np.ndarray) else str(q)
    assert str(q2) == want_str
    assert_same_bits(q2(x), y, "from_config(get_config()) output")
    for attr in ("scale", "quantization_scale"):
        if hasattr(q, attr) and getattr(q, attr) is not None:
            np.testing.assert_array_equal(np.asarray(getattr(q2, attr), F), np.asarray(getattr(q, attr), F))
    assert q2.get_config() == json.loads(text)
    q3 = get_quantizer({"class_name": cls.__name__, "config": json.loads(text)})
    assert type(q3) is cls and str(q3) == want_str
    assert_same_bits(q3(x), y, "get_quantizer(dict)")
    # QKeras' str() is lossy (no qnoise_factor, relu_upper_bound, post_training_scale) and not
    # always a call (an array alpha); where it is a faithful call, get_quantizer() rebuilds q
    if not ({"qnoise_factor", "relu_upper_bound", "post_training_scale"} & set(kw)) and "alpha=[" not in str(q):
        q4 = get_quantizer(str(q))
        assert type(q4) is cls and str(q4) == str(q)
        assert_same_bits(q4(x), y, "get_quantizer(str(q))")


# str(q) of real QKeras (each string is in the golden data, recorded from QKeras at the pinned commit)
QKERAS_STR = [
    (quantized_bits, dict(bits=4, integer=1, use_stochastic_rounding=True), "quantized_bits(4,1,0,use_stochastic_rounding=1)"),
    (quantized_bits, dict(bits=16, integer=-1, keep_negative=False, alpha="auto_po2"),
     "quantized_bits(16,-1,1,keep_negative=False,alpha='auto_po2')"),
    (quantized_bits, dict(bits=8, integer=0, alpha=0.001), "quantized_bits(8,0,0,alpha=0.001)"),
    (quantized_bits, dict(bits=4, integer=0.5), "quantized_bits(4,0.5,0)"),
    (quantized_relu, dict(bits=4, integer=1, use_sigmoid=1, negative_slope=0.125, use_stochastic_rounding=True),
     "quantized_relu(4,1,1,0.125,1)"),
    (quantized_relu, dict(bits=8, integer=2, use_sigmoid=0, negative_slope=1.0), "quantized_relu(8,2,1.0)"),
    (quantized_relu, dict(bits=4, integer=1.5, negative_slope=0.5), "quantized_relu(4,1.5,0.5)"),
    (quantized_linear, dict(bits=1, integer=-2, symmetric=1, keep_negative=False), "quantized_linear(1,-2,1,keep_negative=False)"),
    (quantized_linear, dict(bits=2, integer=0, symmetric=0, keep_negative=False, alpha="auto"),
     "quantized_linear(2,0,0,keep_negative=False,alpha='auto')"),
]


def _golden_strings():
    return {c["str"] for c in golden("qkeras").cases if isinstance(c.get("str"), str)}


@pytest.mark.parametrize("cls,kw,want", QKERAS_STR, ids=[w for _, _, w in QKERAS_STR])
def test_str_like_qkeras(cls, kw, want):
    assert want in _golden_strings()  # the expected string is what real QKeras printed
    q = cls(**kw)
    assert str(q) == want and repr(q) == want
    q(X)
    assert str(q) == want  # a call does not change it
    if cls is not quantized_relu or kw.get("use_sigmoid") or kw.get("use_stochastic_rounding") or not kw.get("negative_slope"):
        # (QKeras prints quantized_relu's slope third when use_sigmoid is 0: read back as a call,
        # that is use_sigmoid, in QKeras' get_quantizer too)
        q2 = get_quantizer(want)
        assert type(q2) is cls and str(q2) == want


def test_str_list_alpha():
    """DEPARTURE str_list_alpha: a list alpha prints as the list (QKeras: ListWrapper([...]))."""
    assert "quantized_bits(8,0,0,alpha=ListWrapper([2.0]))" in _golden_strings()
    assert str(quantized_bits(8, 0, alpha=[2.0])) == "quantized_bits(8,0,0,alpha=[2.0])"


def test_get_quantizer_forms():
    q = quantized_relu(4, 1)
    assert get_quantizer(q) is q
    assert get_quantizer(None) is None
    assert str(get_quantizer("quantized_relu")) == "quantized_relu(8,0)"
    assert str(get_quantizer(" quantized_linear( 4, 1, alpha='auto_po2' ) ")) == "quantized_linear(4,1,1,alpha='auto_po2')"
    assert str(get_quantizer("quantized_bits(4,0,1,alpha='auto_po2')")) == "quantized_bits(4,0,1,alpha='auto_po2')"
    assert get_quantizer("quantized_bits(bits=6, integer=2, keep_negative=False)").keep_negative is False
    with pytest.raises(ValueError, match="identifier"):
        get_quantizer("quantized_tanh(4)")
    with pytest.raises(TypeError, match="identifier"):
        get_quantizer(4)


# ------------------------------------------------------------------------------------------------
# scale attributes after auto calls: kept-dimension shapes and values


def _reduced_axes(scale_axis, rank, channels_first=False):
    """QKeras' _get_scaling_axis (notes §2.5): the axes reduced over."""
    if scale_axis is None:
        return list(range(1, rank)) if channels_first else list(range(rank - 1))
    keep = [scale_axis] if isinstance(scale_axis, int) else list(scale_axis)
    keep = [a % rank for a in keep]
    return [a for a in range(rank) if a not in keep]


def _kept_shape(shape, axes):
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


AXIS_CASES = [((6, 5), None), ((6, 5), 0), ((6, 5), 1), ((6, 5), [0]), ((6, 5), []), ((6, 5), [0, 1]),
              ((3, 4, 5), None), ((3, 4, 5), 1), ((3, 4, 5), [0, 2]), ((2, 3, 4, 5), None), ((2, 3, 4, 5), [1, 3]),
              ((2, 3, 4, 5), -1), ((2, 3, 4, 5), -4)]


@pytest.mark.parametrize("shape,axis", AXIS_CASES, ids=[f"{s}-{a}" for s, a in AXIS_CASES])
def test_bits_auto_scale_shape_and_value(rng, shape, axis):
    x = (rng.standard_normal(shape) * 3).astype(F)
    axes = _reduced_axes(axis, len(shape))
    kept = _kept_shape(shape, axes)
    for bits, integer in ((4, 0), (6, 2), (8, -1)):
        q = quantized_bits(bits, integer, alpha="auto", scale_axis=axis)
        q(x)
        scale = np.asarray(q.scale)
        assert scale.shape == kept and scale.dtype == F
        # notes §2.4: s = max|x / m_i| * 2 / levels; reported scale = s * 2^(bits - 1)
        m_i = F(2.0**integer)
        levels = F(2 * (2 ** (bits - 1) - 1))
        s = (np.max(np.abs(x / m_i), axis=tuple(axes), keepdims=True) * F(2)) / levels
        assert_same_bits(scale, (s * F(2.0 ** (bits - 1))).astype(F), f"quantized_bits({bits},{integer}) auto scale")
        q2 = quantized_bits(bits, integer, alpha="auto_po2", scale_axis=axis)
        q2(x)
        s2 = np.asarray(q2.scale)
        assert s2.shape == kept
        # a power of two, as the po2 path promises
        mant, _ = np.frexp(s2)
        assert (mant == 0.5).all(), s2


@pytest.mark.parametrize("shape,axis", AXIS_CASES + [((7,), None), ((7,), 0), ((7,), [])],
                         ids=[f"{s}-{a}" for s, a in AXIS_CASES] + ["(7,)-None", "(7,)-0", "(7,)-[]"])
def test_linear_auto_scale_shape_and_value(rng, shape, axis):
    x = (rng.standard_normal(shape) * 3).astype(F)
    axes = [] if (len(shape) == 1 and axis is None) else _reduced_axes(axis, len(shape))
    kept = _kept_shape(shape, axes)
    # auto_po2's least-squares rounds do not average a rank-1 tensor: one scale per element
    kept_po2 = shape if len(shape) == 1 else kept
    for bits, integer, kn, sym in ((4, 0, True, True), (6, 2, True, False), (5, -1, False, False), (1, 0, True, True)):
        q = quantized_linear(bits, integer, symmetric=sym, keep_negative=kn, alpha="auto", scale_axis=axis)
        q(x)
        qs = np.asarray(q.quantization_scale)
        assert qs.shape == kept and qs.dtype == F
        dts = F(2.0 ** (integer - bits + kn))
        assert np.asarray(q.data_type_scale).shape == () and q.data_type_scale == dts
        assert_same_bits(np.asarray(q.scale, F), qs / dts, "scale = quantization_scale / data_type_scale")
        lo, hi = q.get_clip_bounds()
        assert np.shape(lo) == () and np.shape(hi) == ()
        # notes §4.4: s = max|x| * 2 / (hi - lo) with keep_negative, max(x) / (hi - lo) without; >= eps
        red = tuple(axes)
        if kn:
            s = (np.max(np.abs(x), axis=red, keepdims=True) * F(2)) / (F(hi) - F(lo))
        else:
            s = np.max(x, axis=red, keepdims=True) / (F(hi) - F(lo))
        s = np.maximum(s, F(1e-7)).astype(F)
        assert_same_bits(qs, s, f"quantized_linear({bits},{integer},{sym},{kn}) auto scale")
        q2 = quantized_linear(bits, integer, symmetric=sym, keep_negative=kn, alpha="auto_po2", scale_axis=axis)
        q2(x)
        assert np.asarray(q2.quantization_scale).shape == kept_po2
        assert np.asarray(q2.scale).shape == kept_po2
        assert (np.frexp(np.asarray(q2.quantization_scale))[0] == 0.5).all()


def test_linear_value_alpha_scale_shapes():
    q = quantized_linear(4, 1)
    q(X)
    assert np.shape(q.quantization_scale) == () and q.scale == 1.0
    q = quantized_linear(4, 1, alpha=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    q(X)
    assert np.shape(q.quantization_scale) == (6,)
    np.testing.assert_array_equal(q.scale, np.array([1, 2, 3, 4, 5, 6], F))
    np.testing.assert_array_equal(q.max(), np.array([1, 2, 3, 4, 5, 6], F) * F(7) * F(0.25))


def test_bits_rank1_scale_shapes(rng):
    """quantized_bits on a rank-1 tensor: auto -> one scale (1,); auto_po2 -> one per element
    (notes §2.4: the least-squares rounds do not average a rank-1 tensor)."""
    x = (rng.standard_normal(9) * 2).astype(F)
    q = quantized_bits(4, 0, alpha="auto")
    q(x)
    assert np.shape(q.scale) == (1,)
    q = quantized_bits(4, 0, alpha="auto_po2")
    q(x)
    assert np.shape(q.scale) == (9,)
    # notes §2.4 derived example: bits=4, x=[0.3,-0.05,1.7,0.001]
    q = quantized_bits(4, alpha="auto_po2")
    y = q(np.array([0.3, -0.05, 1.7, 0.001], F))
    np.testing.assert_array_equal(y, np.array([0.25, -0.046875, 1.75, 0.0008544921875], F))
    np.testing.assert_array_equal(q.scale, np.array([2, 0.0625, 2, 0.0009765625], F))
    y = q(np.array([[0.3], [-0.05], [1.7], [0.001]], F))
    np.testing.assert_array_equal(y.ravel(), np.array([0.25, 0, 1.75, 0], F))
    np.testing.assert_array_equal(q.scale, np.array([[2]], F))


# ------------------------------------------------------------------------------------------------
# explicit Keras settings


def test_channels_first_reduces_over_all_but_axis_0(rng):
    x = (rng.standard_normal((3, 4, 5, 6)) * 2).astype(F)
    for make in (lambda fmt: quantized_bits(5, 1, alpha="auto", image_data_format=fmt),
                 lambda fmt: quantized_bits(5, 1, alpha="auto_po2", image_data_format=fmt),
                 lambda fmt: quantized_linear(5, 1, alpha="auto", image_data_format=fmt),
                 lambda fmt: quantized_linear(5, 1, alpha="auto_po2", image_data_format=fmt)):
        last, first = make("channels_last"), make("channels_first")
        y_last, y_first = last(x), first(x)
        assert np.shape(last.scale) == (1, 1, 1, 6)
        assert np.shape(first.scale) == (3, 1, 1, 1)
        # channels_first on x equals channels_last on x with axis 0 moved last
        moved = make("channels_last")
        y_moved = moved(np.moveaxis(x, 0, -1))
        assert_same_bits(np.moveaxis(y_moved, -1, 0), y_first, str(first))
        np.testing.assert_array_equal(np.moveaxis(np.asarray(moved.scale), -1, 0), first.scale)
        assert (_bits(y_last) != _bits(y_first)).any()
    # an explicit scale_axis wins over the data format
    q_first = quantized_bits(5, 1, alpha="auto", scale_axis=3, image_data_format="channels_first")
    q_last = quantized_bits(5, 1, alpha="auto", image_data_format="channels_last")
    assert_same_bits(q_first(x), q_last(x), "scale_axis=3 overrides channels_first")


def test_epsilon_changes_auto_po2(rng):
    # an all-zero channel: the least-squares scale is 0, its po2 rounding 2^round(log2(0 + eps))
    x = (rng.standard_normal((8, 3)) * 2).astype(F)
    x[:, 1] = 0
    for eps, e in ((1e-7, -23), (1e-3, -10), (0.25, -2)):
        q = quantized_bits(8, 0, alpha="auto_po2", epsilon=eps)
        q(x)
        assert np.asarray(q.scale)[0, 1] == F(2.0**e) * F(2.0**7), (eps, q.scale)
    # quantized_linear: the auto scale is at least eps
    small = np.full((4, 2), F(1e-6))
    small[:, 1] = [1e-6, -2e-6, 0, 0]
    for eps in (1e-7, 1e-9, 0.5):
        q = quantized_linear(8, 0, alpha="auto", epsilon=eps)
        y = q(small)
        want = np.maximum((np.max(np.abs(small), axis=0, keepdims=True) * F(2)) / F(254), F(eps)).astype(F)
        assert_same_bits(np.asarray(q.quantization_scale, F), want, f"eps={eps}")
        if eps == 0.5:
            assert (y == 0).all()
    y7 = quantized_linear(8, 0, alpha="auto")(small)
    y9 = quantized_linear(8, 0, alpha="auto", epsilon=1e-9)(small)
    assert (_bits(y7) != _bits(y9)).any()
    # notes §2.4: integer matters through eps for tiny data; a smaller eps removes the bias
    tiny = (rng.standard_normal((16, 4)) * 2.0**-12).astype(F)
    a = quantized_bits(8, 12, alpha="auto_po2")
    b = quantized_bits(8, 12, alpha="auto_po2", epsilon=1e-12)
    assert (_bits(a(tiny)) != _bits(b(tiny))).any()
    assert (np.asarray(a.scale) > np.asarray(b.scale)).all()


def test_defaults_are_qkeras():
    for cls in QUANTIZERS:
        q = cls()
        assert q.epsilon == 1e-7 and q.image_data_format == "channels_last" and q.seed == 0
    assert quantized_bits().symmetric == 0 and quantized_linear().symmetric == 1
    assert quantized_bits().bits == 8 and quantized_relu().bits == 8 and quantized_linear().bits == 8


def test_every_kernel_set_gives_the_same_api_results(rng):
    x = (rng.standard_normal((5, 37)) * 2).astype(F)
    ref = None
    for isa in polyquant.runtime_info()["supported"]:
        for threads in (1, 2):
            with kernel_set(isa, threads):
                res = []
                for make in QS:
                    q = make()
                    res.append(q(x[::-1, ::2]))
                    res.append(np.asarray(getattr(q, "scale", 0) if not isinstance(q, quantized_linear)
                                          else q.quantization_scale, F))
            if ref is None:
                ref = res
            else:
                for a, b in zip(res, ref):
                    assert_same_bits(a, b, f"{isa}/{threads}")


@pytest.mark.parametrize("alpha", [np.array([0.5, 1.0, 2.0, 3.0]), [0.5, 1.0, 2.0, 3.0], np.array([[0.5, 1.0, 2.0, 3.0]]),
                                   np.array([2.0]), np.array(0.75)])
def test_bits_array_alpha_scales_per_channel(rng, alpha):
    """DEPARTURE alpha_array_bits: QKeras fails on the truth value of a numpy alpha with more than
    one element; polyquant gives what the list alpha gives in QKeras: alpha * Q(x), per channel
    (notes §2.2: the fixed alpha multiplies after quantization)."""
    x = (rng.standard_normal((7, 4)) * 1.5).astype(F)
    q = quantized_bits(5, 1, alpha=alpha)
    y = q(x)
    m, m_i = F(2.0**4), F(2.0)
    p = (x * m) / m_i
    c = np.clip(p + ((-p) + np.rint(p)), F(-16), F(15))
    xq = np.asarray(alpha, dtype=F) * ((m_i * c) / m)
    want = (x + F(1) * ((-x) + xq)).astype(F)
    assert_same_bits(y, want, f"alpha={alpha!r}")
    np.testing.assert_array_equal(np.asarray(q.scale, F), np.asarray(alpha, F))
    assert_same_bits(quantized_bits(5, 1, alpha=np.asarray(alpha).tolist())(x), want, "list alpha")
    json.dumps(q.get_config())
