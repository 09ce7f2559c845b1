"""polyquant.qkeras on NaN and signed-zero inputs, on every kernel set (issue 17, items 5 and 6).

NaN bits: which NaN an op chain returns depends on operand order where two NaNs meet, and neither
C++ nor the intrinsics fix that order, so the kernels state it (qkeras_kernels.h, qk_nan_result):
a NaN input comes back quieted with its own sign and payload (what TensorFlow 2.15 returns for a
NaN input to every quantizer, checked against the pinned QKeras), any other NaN result is
0xFFC00000. The avx2 kernel set once gave 0xFFC00000 for a +NaN input to quantized_linear(alpha="auto").

Signed zero: tf.sign gives +0 for -0, so QKeras' alpha="auto"/"auto_po2" path (z = sign(x / m_i) *
level) returns +0 for -0 and for negative subnormals (flushed to -0 by TensorFlow) with use_ste=False
as well: (1 - q) * -0 + q * (+0) = +0.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyquant
from polyquant.qkeras import quantized_bits, quantized_linear, quantized_relu
from ..helpers import kernel_set

ISAS = polyquant.runtime_info()["supported"]

NAN_BITS = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321]


def _bits(a):
    return np.ascontiguousarray(np.asarray(a, np.float32)).view(np.uint32)


def _with_nan(n, pos, bits):
    x = np.ones(n, np.float32)
    x[1::3] = 0.3
    x[pos] = np.array([bits], np.uint32).view(np.float32)[0]
    return x


MAKERS = [
    ("linear_auto", lambda: quantized_linear(2, 0, alpha="auto")),
    ("linear_auto_po2", lambda: quantized_linear(2, 0, alpha="auto_po2")),
    ("linear_auto_q", lambda: quantized_linear(4, 1, alpha="auto", qnoise_factor=0.3)),
    ("linear_fixed", lambda: quantized_linear(4, 0)),
    ("linear_sign", lambda: quantized_linear(1, 0, alpha="auto")),
    ("bits_auto", lambda: quantized_bits(4, 0, alpha="auto")),
    ("bits_auto_po2", lambda: quantized_bits(4, 0, alpha="auto_po2")),
    ("bits_auto_no_ste", lambda: quantized_bits(4, 0, alpha="auto", use_ste=False, qnoise_factor=0.5)),
    ("bits_fixed", lambda: quantized_bits(4, 0)),
    ("bits_alpha", lambda: quantized_bits(4, 0, alpha=0.5)),
    ("bits_binary", lambda: quantized_bits(1, 0)),
    ("relu", lambda: quantized_relu(4, 0)),
    ("relu_leaky", lambda: quantized_relu(4, 0, negative_slope=0.25)),
    ("relu_sigmoid", lambda: quantized_relu(4, 0, use_sigmoid=1, negative_slope=0.25)),
]


def test_issue_repro_linear_auto_nan_is_positive_on_every_kernel_set():
    x = np.ones(8, np.float32)
    x[3] = np.nan
    for isa in ISAS:
        with kernel_set(isa):
            got = _bits(quantized_linear(2, 0, alpha="auto")(x))
        assert got[3] == 0x7FC00000, f"{isa}: {got[3]:#010x}"


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
@pytest.mark.parametrize("n,pos", [(8, 3), (40, 37), (17, 16), (64, 5)])
@pytest.mark.parametrize("nan", NAN_BITS, ids=[f"{b:#010x}" for b in NAN_BITS])
def test_nan_input_bits_on_every_kernel_set(name, make, n, pos, nan):
    """A NaN input comes back as itself (quieted) on every kernel set and thread count; every other
    element is the same on every set too (NaN bits included)."""
    x = _with_nan(n, pos, nan)
    ref = None
    for isa in ISAS:
        for threads in (1, 2):
            with kernel_set(isa, threads):
                got = _bits(make()(x))
            if name != "relu_sigmoid":  # the hard sigmoid clips NaN to a number (as TensorFlow does)
                assert got[pos] == nan, f"{isa}/{threads}: {got[pos]:#010x} for input {nan:#010x}"
            if ref is None:
                ref = got
            else:
                bad = np.flatnonzero(got != ref)
                assert bad.size == 0, f"{isa}/{threads}: elements {bad[:5]} {got[bad[:5]]} != {ref[bad[:5]]}"


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
def test_nan_results_from_infinities_and_rank2_on_every_kernel_set(name, make):
    """NaN results that do not come from a NaN input (+-inf; a channel whose scale is NaN) are the same
    bits on every kernel set: 0xFFC00000."""
    x = np.array([[1, -np.nan, 0.3, -2], [np.inf, 1, 0.5, 0.25], [1, np.nan, -np.inf, 2],
                  [0.1, 0.2, 0.3, -0.0]] * 5, np.float32)
    ref = ref_scale = None
    for isa in ISAS:
        with kernel_set(isa):
            q = make()
            got = _bits(q(x))
        scale = getattr(q, "quantization_scale", getattr(q, "scale", None))
        scale = None if scale is None or isinstance(scale, float) else _bits(scale)
        derived = np.isnan(np.asarray(got.view(np.float32))) & ~np.isnan(x)
        assert (got[derived] == 0xFFC00000).all(), f"{isa}: {np.unique(got[derived])}"
        if scale is not None:  # a NaN scale (a channel holding a NaN) is +NaN
            nan_scale = np.isnan(scale.view(np.float32))
            assert (scale[nan_scale] == 0x7FC00000).all(), f"{isa}: {np.unique(scale[nan_scale])}"
        if ref is None:
            ref, ref_scale = got, scale
        else:
            assert (got == ref).all(), isa
            assert (scale is None) == (ref_scale is None) and (scale is None or (scale == ref_scale).all()), isa


ZERO_CASES = [
    dict(bits=5, integer=2, alpha="auto", symmetric=1, use_ste=False),
    dict(bits=4, integer=0, alpha="auto", qnoise_factor=0.125, use_ste=False),
    dict(bits=4, integer=0, alpha="auto_po2", use_ste=False),
    dict(bits=8, integer=3, alpha="auto_po2", qnoise_factor=0.5, use_ste=False),
    dict(bits=4, integer=0, alpha="auto"),
    dict(bits=4, integer=0, alpha="auto", keep_negative=False, use_ste=False),
]


@pytest.mark.parametrize("kw", ZERO_CASES, ids=[str(k) for k in ZERO_CASES])
@pytest.mark.parametrize("shape", [(6,), (40,), (5, 8)])
def test_bits_auto_negative_zero_and_subnormal_give_positive_zero(kw, shape):
    """QKeras (TF 2.15, pinned commit): -0.0 and negative subnormals give +0.0 in the auto path,
    with use_ste=False too (z is built from tf.sign(x), +0 for both zeros)."""
    n = int(np.prod(shape))
    x = np.linspace(-1, 1, n, dtype=np.float32)
    x[0::4] = -0.0
    x[1::4] = -1e-39
    x[2::8] = -np.float32(2.0**-149)
    x = x.reshape(shape)
    zeros = (x.reshape(-1) == 0)  # the zeros and the subnormals (flushed)
    zeros |= np.abs(x.reshape(-1)) < np.finfo(np.float32).tiny
    for isa in ISAS:
        with kernel_set(isa):
            got = _bits(quantized_bits(**kw)(x)).reshape(-1)
        assert (got[zeros] == 0).all(), f"{isa}: {[hex(v) for v in np.unique(got[zeros])]}"


# ------------------------------------------------------------------------------------------------
# Bad and unusual input (the probe's classes: absurd values, dtypes, layouts)

def _raises(exc, fragment, fn):
    with pytest.raises(exc) as e:
        fn()
    assert fragment in str(e.value), str(e.value)
    for leak in ("std::", "nanobind", "incompatible function arguments", "bad_cast"):
        assert leak not in str(e.value), str(e.value)


X = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("axis", [2**40, -(2**40), 2**63, 2**64 + 1, -(2**63) - 1, np.int64(2**40), [1, 2**40],
                                  [np.uint64(2**63)]])
def test_huge_scale_axis_is_a_value_error(cls, axis):
    """Issue 17: scale_axis=2**40 gave RuntimeError('std::bad_cast')."""
    _raises(ValueError, "scale_axis", lambda: cls(4, 0, alpha="auto", scale_axis=axis)(X))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
def test_list_scale_axis_entries_naming_no_dimension_keep_nothing(cls):
    """A list entry that names no dimension keeps nothing (QKeras: `i not in scale_axis`), however
    large, as long as it is a C int."""
    a = cls(4, 0, alpha="auto", scale_axis=[2**31 - 1])(X)
    b = cls(4, 0, alpha="auto", scale_axis=[7])(X)
    assert (_bits(a) == _bits(b)).all()


@pytest.mark.parametrize("eps", [2**63, 2**64, [2**63]])
def test_huge_elements_per_scale_is_a_value_error(eps):
    axis = [1] if isinstance(eps, list) else 1
    _raises(ValueError, "elements_per_scale",
            lambda: quantized_bits(4, 0, alpha="auto_po2", scale_axis=axis, elements_per_scale=eps)(X))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_relu, quantized_linear])
@pytest.mark.parametrize("name", ["bits", "integer"])
@pytest.mark.parametrize("value", [True, None, "4", np.bool_(True)])
def test_bits_integer_not_truncated_from_non_numbers(cls, name, value):
    kw = {"bits": 4, "integer": 0, name: value}
    _raises(TypeError, name, lambda: cls(**kw))


def test_fractional_bits_are_kept_not_truncated():
    """QKeras takes any float bits/integer (m = 2 ** (bits - keep_negative)); 1.5 is not int(1.5)."""
    a = quantized_bits(4.5, 0.5)
    assert a.bits == 4.5 and a.integer == 0.5
    assert (_bits(a(X)) != _bits(quantized_bits(4, 0)(X))).any()


def _bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return ml_dtypes.bfloat16


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
def test_bfloat16_input_is_its_float32_widening(name, make):
    """QKeras casts the input to float32 first (K.cast_to_floatx; checked on TF 2.15: a bfloat16
    numpy array or tf.Tensor gives float32 results equal to the widened input's)."""
    bf16 = _bfloat16()
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 8)) * 2).astype(bf16)
    x[1, 1] = bf16(np.nan)
    x[2, 2] = bf16(-0.0)
    x[3, 3] = bf16(np.inf)
    want = make()(x.astype(np.float32))
    got = make()(x)
    assert got.dtype == np.float32 and (_bits(got) == _bits(want)).all()
    # a bfloat16 scalar and a strided view too
    assert (_bits(make()(x[::2, ::-3])) == _bits(make()(x.astype(np.float32)[::2, ::-3]))).all()
    assert (_bits(make()(x[0, 0])) == _bits(make()(np.float32(x[0, 0])))).all()


STOCHASTIC_MAKERS = [
    ("bits_stochastic", lambda: quantized_bits(4, 0, alpha=1, use_stochastic_rounding=True)),
    ("relu_stochastic", lambda: quantized_relu(4, 0, use_stochastic_rounding=True)),
    ("linear_stochastic", lambda: quantized_linear(4, 0, use_stochastic_rounding=True)),
]


@pytest.mark.parametrize("name,make", MAKERS + STOCHASTIC_MAKERS, ids=[m[0] for m in MAKERS + STOCHASTIC_MAKERS])
def test_bfloat16_widened_inside_the_pass_on_every_kernel_set(name, make):
    """The core widens a bfloat16 x inside its pass (it travels as its uint16 storage): every
    bfloat16 code (NaN payloads, +-0, +-inf, subnormals) and a typical tensor whose scale search
    sees no specials, in vector loops and their tails on every kernel set, give the float32
    widening's bits; so do training draws and gradients with a bfloat16 upstream gradient."""
    bf16 = _bfloat16()
    every_code = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(bf16).reshape(512, 128)
    typical = (np.random.default_rng(11).standard_normal((37, 131)) * 3).astype(bf16)
    for isa in ISAS:
        with kernel_set(isa):
            for x in (every_code, typical):
                wide = x.astype(np.float32)
                assert (_bits(make()(x)) == _bits(make()(wide))).all(), isa
                drawn, drawn_wide = make()(x, training=True, seed=5), make()(wide, training=True, seed=5)
                assert (_bits(drawn) == _bits(drawn_wide)).all(), isa
                for upstream in (None, np.ascontiguousarray(x[::-1])):
                    got = make().gradient(x, grad_output=upstream)
                    want = make().gradient(wide, grad_output=None if upstream is None else upstream.astype(np.float32))
                    assert (_bits(got) == _bits(want)).all(), isa


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
def test_layouts_and_byte_orders_equal_the_native_copy(name, make):
    """Big-endian, Fortran order, negative strides and zero strides give the native contiguous
    copy's bits, NaN bits included."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, 10)) * 2).astype(np.float32)
    x[1, 2] = np.nan
    x[2, 3] = -np.float32(np.nan)
    x[3, 4] = -0.0
    x[4, 5] = -np.inf
    variants = [x.astype(">f4"), np.asfortranarray(x), x[::-1, ::-1], np.broadcast_to(x[:1], (6, 10)),
                x.astype(">f8"), x.astype(np.float64)[:, ::2]]
    for v in variants:
        got = make()(v)
        want = make()(np.ascontiguousarray(v, dtype=np.float32))
        assert (_bits(got) == _bits(want)).all(), (v.dtype, v.strides)


@pytest.mark.parametrize("x", [np.array([1 + 1j]), np.array(["1.0"]), np.array([None], dtype=object),
                               np.array(["2020-01-01"], dtype="datetime64[D]"), np.zeros((1,) * 9, np.float32),
                               [[1.0, 2.0], [3.0]]])
def test_bad_dtypes_and_shapes_name_x(x):
    for _, make in MAKERS:
        with pytest.raises((TypeError, ValueError), match="^x: "):
            make()(x)


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("name", ["symmetric", "keep_negative"])
@pytest.mark.parametrize("value,exc", [(2, ValueError), (0.5, ValueError), (-1, ValueError), (float("nan"), ValueError),
                                       ("1", TypeError), (None, TypeError), ([1], TypeError)])
def test_arithmetic_flags_are_not_truncated_by_bool(cls, name, value, exc):
    """QKeras computes with symmetric / keep_negative (keep_negative * (-m + symmetric)); bool()
    turned 2 into True and None into False silently."""
    _raises(exc, name, lambda: cls(4, 0, **{name: value})(X))


@pytest.mark.parametrize("cls", [quantized_bits, quantized_linear])
@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, True, False, np.int8(1), np.float32(0.0), np.bool_(True)])
def test_arithmetic_flags_accept_zero_and_one(cls, value):
    a = cls(4, 0, symmetric=value, keep_negative=value)(X)
    b = cls(4, 0, symmetric=bool(value), keep_negative=bool(value))(X)
    assert (_bits(a) == _bits(b)).all()


@pytest.mark.parametrize("seed", [2**64, 2**64 + 1, -(2**63) - 1, 10**30])
def test_seed_wider_than_64_bits_is_a_value_error(seed):
    # it was masked to 64 bits: 2**64 + 1 silently drew what seed 1 draws
    with pytest.raises(ValueError, match=r"^seed: .*64 bits"):
        quantized_bits(4, 0, seed=seed)
    q = quantized_bits(4, 0)
    with pytest.raises(ValueError, match=r"^seed: .*64 bits"):
        q(np.ones(4, np.float32), training=True, seed=seed)


@pytest.mark.parametrize("seed", [-(2**63), -1, 0, 2**63, 2**64 - 1])
def test_seed_edges_of_64_bits_are_accepted(seed):
    quantized_bits(4, 0, seed=seed)(np.ones(4, np.float32), training=True)
