"""polyquant.qkeras in training use: stochastic rounding (q(x, training=True)) and the
straight-through gradients (q.gradient(x)).

Stochastic rounding follows QKeras' rule (reference notes §5): with y the value to round (p-space;
times 2 for quantized_relu, whose precision is 0.5, §3.6) and f = y - floor(y), the result is
floor(y) if f < U else ceil(y), U uniform on the 2^-23 lattice of [0, 1) -- so P(up) =
(floor(f * 2^23) + 1) * 2^-23. polyquant draws U by Philox keyed by the quantizer's seed, the call's
step and the element's flat index (C order), so results are reproducible and independent of the
kernel set, the thread count and the memory layout.

The expected values here come from independent float32 numpy models of QKeras' formulas (the
notes' op order: p = x*m/m_i, p + ((-p) + r), clip, (m_i*c)/m, the x + q*((-x) + xq) blend), never
from polyquant itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyquant
from polyquant import qkeras
from ..helpers import kernel_set

F = np.float32
ISAS = list(polyquant.runtime_info()["supported"])
SETS_AND_THREADS = [(isa, t) for isa in ISAS for t in (1, 2)]
TINY = np.finfo(np.float32).tiny


# ------------------------------------------------------------------------------------------------
# independent numpy float32 models (notes §2.2, §3.3, §4.3)


def _pow2(e):
    return F(2.0 ** e)


def _round_through(p, r):
    return p + ((-p) + r)


def _blend(x, xq, q=1.0):
    return x + F(q) * ((-x) + xq)


def bits_fixed_candidates(x, bits, integer, alpha=1.0, symmetric=False, keep_negative=True):
    """quantized_bits fixed-point path with r = floor(p) and r = ceil(p): the two neighbours."""
    m, m_i = _pow2(bits - keep_negative), _pow2(integer)
    lo, hi = F(keep_negative) * (-m + F(symmetric)), m - F(1)
    outs = []
    with np.errstate(all="ignore"):
        p = (x * m) / m_i
        for rnd in (np.floor, np.ceil, np.rint):
            c = np.maximum(np.minimum(_round_through(p, rnd(p)), hi), lo)
            xq = F(alpha) * ((m_i * c) / m)
            outs.append(_blend(x, xq))
    return outs  # floor, ceil, half-even (deterministic)


def linear_candidates(x, s, clip_min, clip_max):
    """quantized_linear (not the sign function) with scale s: floor, ceil and half-even levels."""
    outs = []
    with np.errstate(all="ignore"):
        c = np.maximum(np.minimum(x / s, F(clip_max)), F(clip_min))
        for rnd in (np.floor, np.ceil, np.rint):
            xq = (_round_through(c, rnd(c)) + F(0)) * s
            outs.append(x + F(1) * (xq - x))
    return outs


def relu_candidates(x, bits, integer, precision=0.5):
    """quantized_relu(bits, integer) (no sigmoid, no slope, quantized clip, q = 1): the values of
    rounding p to a multiple of `precision` down, up, and tf.round (precision 1)."""
    m, m_i = _pow2(bits), _pow2(integer)
    clip_value = m_i - _pow2(integer - bits)
    k = F(1.0 / precision)
    outs = []
    with np.errstate(all="ignore"):
        xu = np.where(x <= clip_value, np.maximum(x, F(0)), clip_value).astype(F)
        p = (x * m) / m_i
        for r in (np.floor(p * k) / k, np.ceil(p * k) / k, np.rint(p)):
            xq = m_i * np.maximum(np.minimum(_round_through(p, r) / m, F(1) - F(1) / m), F(0))
            outs.append(_blend(xu, xq))
    return outs


def _bits(a):
    return np.ascontiguousarray(a, dtype=F).view(np.uint32)


def assert_same_bits(got, want, what=""):
    assert got.dtype == F and want.dtype == F, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    bad = (_bits(got) != _bits(want)) & ~(np.isnan(got) & np.isnan(want))
    assert not bad.any(), f"{what}: {bad.sum()} differ, first at {np.argwhere(bad)[:3].tolist()}: {got[bad][:5]} vs {want[bad][:5]}"


def assert_one_of(got, lo, hi, what=""):
    ok = (_bits(got) == _bits(lo)) | (_bits(got) == _bits(hi))
    assert ok.all(), f"{what}: {(~ok).sum()} outside the two neighbours: {got[~ok][:5]} not in {lo[~ok][:5]} / {hi[~ok][:5]}"


# ------------------------------------------------------------------------------------------------
# the stochastic configurations under test


def _bits_q(seed=0):
    return qkeras.quantized_bits(8, 2, alpha=1, use_stochastic_rounding=True, seed=seed)


def _relu_q(seed=0):
    return qkeras.quantized_relu(6, 2, use_stochastic_rounding=True, seed=seed)


def _linear_q(seed=0, alpha=None):
    return qkeras.quantized_linear(8, 2, alpha=alpha, use_stochastic_rounding=True, seed=seed)


FACTORIES = {
    "bits_fixed": _bits_q,
    "bits_alpha_list": lambda seed=0: qkeras.quantized_bits(6, 1, alpha=[0.5, 1.0, 2.0], use_stochastic_rounding=True,
                                                            seed=seed),
    "bits_unsigned_sym": lambda seed=0: qkeras.quantized_bits(5, 0, symmetric=1, keep_negative=False,
                                                              use_stochastic_rounding=True, seed=seed),
    "relu": _relu_q,
    "relu_leaky_sigmoid": lambda seed=0: qkeras.quantized_relu(6, 2, use_sigmoid=1, negative_slope=0.25,
                                                               use_stochastic_rounding=True, seed=seed),
    "linear_fixed": _linear_q,
    "linear_alpha": lambda seed=0: _linear_q(seed, alpha=[0.75, 1.5, 3.0]),
    "linear_auto": lambda seed=0: _linear_q(seed, alpha="auto"),
    "linear_auto_po2": lambda seed=0: _linear_q(seed, alpha="auto_po2"),
    "linear_sign": lambda seed=0: qkeras.quantized_linear(1, 0, use_stochastic_rounding=True, seed=seed),
}


def _data(rng, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(F)


# ------------------------------------------------------------------------------------------------
# stochastic rounding: the two neighbours, grid points, inference mode


def test_bits_fixed_stochastic_is_a_neighbour(rng):
    x = np.concatenate([_data(rng, 50_000, 2.0), np.array([-10, -4.0, 3.99, 10, 0, -0.0], F)])
    fl, ce, det = bits_fixed_candidates(x, 8, 2)
    y = _bits_q(1)(x, training=True)
    assert_one_of(y, fl, ce, "quantized_bits(8,2,alpha=1)")
    # both neighbours occur (the rounding is really stochastic) ...
    moved_up = (_bits(y) == _bits(ce)) & (_bits(fl) != _bits(ce))
    moved_down = (_bits(y) == _bits(fl)) & (_bits(fl) != _bits(ce))
    assert moved_up.sum() > 1000 and moved_down.sum() > 1000
    # ... and it is not the deterministic rounding
    assert (_bits(y) != _bits(det)).sum() > 1000
    # inference mode: tf.round (half to even) whatever use_stochastic_rounding says
    assert_same_bits(_bits_q(1)(x), det, "training=False")
    assert_same_bits(qkeras.quantized_bits(8, 2, alpha=1)(x, training=True), det, "use_stochastic_rounding=False")


def test_relu_stochastic_rounds_to_half_steps(rng):
    """quantized_relu rounds stochastically to multiples of 0.5 in p-space (notes §3.6): results
    include odd half-steps the inference grid never produces."""
    x = np.concatenate([_data(rng, 50_000, 2.0), np.array([-1.0, 0.0, -0.0, 3.9375, 3.96, 5.0], F)])
    fl, ce, det = relu_candidates(x, 6, 2, precision=0.5)
    y = _relu_q(3)(x, training=True)
    assert_one_of(y, fl, ce, "quantized_relu(6,2)")
    step = F(4) / F(64)
    half_steps = np.abs(np.remainder(y / step, F(1)) - F(0.5)) == 0
    assert half_steps.sum() > 1000  # one extra bit of resolution in training
    assert not (np.abs(np.remainder(det / step, F(1)) - F(0.5)) == 0).any()
    assert_same_bits(_relu_q(3)(x), det, "training=False")
    assert_same_bits(qkeras.quantized_relu(6, 2)(x, training=True), det, "use_stochastic_rounding=False")


@pytest.mark.parametrize("alpha", [None, 2.0, "auto", "auto_po2"])
def test_linear_stochastic_is_a_neighbour(rng, alpha):
    x = _data(rng, (400, 7), 1.5)
    x[0] = [-10, 10, 0, -0.0, 1e-3, -1e-3, 0.5]
    q = _linear_q(5, alpha=alpha)
    y = q(x, training=True)
    s = np.asarray(q.quantization_scale, dtype=F)  # the scale this call used (data-dependent for auto)
    if alpha is None:
        assert s == _pow2(2 - 8 + 1)
    elif not isinstance(alpha, str):
        assert s == F(alpha) * _pow2(2 - 8 + 1)
    else:
        assert s.shape == (1, 7)
    fl, ce, det = linear_candidates(x, s, -127, 127)
    assert_one_of(y, fl, ce, f"quantized_linear(8,2,alpha={alpha})")
    assert (_bits(y) != _bits(det)).sum() > 100
    if alpha == "auto":
        # the max-based scale does not depend on the rounding: the inference call's scale
        q2 = qkeras.quantized_linear(8, 2, alpha="auto")
        assert_same_bits(q2(x), det)
        assert_same_bits(np.asarray(q2.quantization_scale, dtype=F), s)
    if alpha in (None, 2.0, "auto"):  # (a fixed or max-based scale: the model's det applies)
        assert_same_bits(_linear_q(5, alpha=alpha)(x), det, "training=False")
        assert_same_bits(qkeras.quantized_linear(8, 2, alpha=alpha)(x, training=True), det, "no stochastic rounding")
    plain = qkeras.quantized_linear(8, 2, alpha=alpha)(x)
    assert_same_bits(_linear_q(5, alpha=alpha)(x), plain, "training=False, any alpha")
    assert_same_bits(qkeras.quantized_linear(8, 2, alpha=alpha)(x, training=True, seed=5), plain, "no stochastic rounding")


def test_bits_auto_ignores_stochastic_rounding(rng):
    """QKeras' auto/auto_po2 path of quantized_bits always rounds floor(|v| + 0.5) (notes §2.4)."""
    x = _data(rng, (64, 5))
    for alpha in ("auto", "auto_po2"):
        q = qkeras.quantized_bits(6, 1, alpha=alpha, use_stochastic_rounding=True, seed=9)
        det = qkeras.quantized_bits(6, 1, alpha=alpha)
        assert_same_bits(q(x, training=True), det(x), alpha)
        assert_same_bits(np.asarray(q.scale, F), np.asarray(det.scale, F), alpha)


def _grid_inputs(name):
    """Inputs with nothing to round (f = 0 in the rounding's own space), in range, per channel
    where the quantizer has per-channel alphas."""
    def g(lo, hi, step):
        return (np.arange(lo, hi + 1, dtype=np.float64) * step).astype(F)

    if name == "bits_fixed":
        return g(-128, 127, 2.0**-5)  # quantized_bits(8, 2): step 2^(2-7)
    if name == "bits_alpha_list":
        return np.repeat(g(-32, 31, 2.0**-4)[:, None], 3, axis=1)  # alpha multiplies after rounding
    if name == "bits_unsigned_sym":
        return g(0, 31, 2.0**-5)
    if name == "relu":
        return g(0, 126, 2.0**-5)  # p = 16 x on multiples of 0.5 (stochastic precision 0.5), p <= 63
    if name in ("linear_fixed", "linear_auto", "linear_auto_po2"):
        return g(-127, 127, 2.0**-5)  # auto: s = max|x| / 127 = 2^-5; auto_po2: a po2 scale
    if name == "linear_alpha":
        return (g(-127, 127, 2.0**-5)[:, None] * np.array([0.75, 1.5, 3.0], F)).astype(F)
    if name == "linear_sign":
        return np.array([-3.0, -1.0, -0.5, 0.5, 1.0, 3.0], F)  # c - 0.5 in {-1, 0} (not x = 0: a tie)
    return None


# (not relu_leaky_sigmoid: the hard sigmoid's rounding grid, sigmoid(x) * m, is not a grid of x)
@pytest.mark.parametrize("name", [n for n in sorted(FACTORIES) if _grid_inputs(n) is not None])
def test_grid_points_never_move(name):
    """Inputs exactly on the grid have f = 0: floor == ceil, nothing to draw; training gives the
    inference result, which for in-range grid points is the input itself."""
    x = _grid_inputs(name)
    q = FACTORIES[name](21)
    y1 = q(x, training=True)
    y2 = q(x, training=True)
    assert_same_bits(y1, y2, name)
    det = FACTORIES[name](21)(x)
    if name == "relu":
        # the half-steps (odd multiples of 0.5 in p) are ties for tf.round, exact for training
        fl, ce, rn = relu_candidates(x, 6, 2)
        assert_same_bits(fl, ce, "model: nothing to round")
        assert_same_bits(det, rn, "inference: tf.round")
        whole = (np.arange(x.size) % 2) == 0
        assert_same_bits(y1[whole], det[whole], "integer p")
        assert (_bits(y1[~whole]) != _bits(det[~whole])).all()
    else:
        assert_same_bits(y1, det, name)
    if name in ("bits_fixed", "bits_unsigned_sym", "relu", "linear_fixed", "linear_alpha", "linear_auto"):
        assert_same_bits(y1, x, "an in-range grid point maps to itself")


# ------------------------------------------------------------------------------------------------
# unbiased in expectation


def _p_up(f):
    """P(round up) for a float32 fraction f: U <= f with U on the 2^-23 lattice."""
    return (np.floor(np.float64(f) * 2.0**23) + 1) * 2.0**-23


N_STAT = 1 << 20


@pytest.mark.parametrize("kind", ["bits", "linear", "relu"])
@pytest.mark.parametrize("k,frac", [(3, 0.25), (3, 0.5), (-4, 0.7), (11, 0.125), (-2, 0.9)])
def test_unbiased_in_expectation(kind, k, frac):
    """2^20 copies of one value with fraction f of a step: the share rounded up is P(up) within
    5 standard errors (fixed seed, so the test is deterministic)."""
    if kind == "bits":
        q, step = _bits_q(11), 2.0 ** (2 - 7)
    elif kind == "linear":
        q, step = _linear_q(11), 2.0 ** (2 - 7)
    else:
        if k < 0:
            k = -k  # relu: positive side
        q, step = _relu_q(11), 2.0 ** (2 - 6) / 2  # stochastic precision 0.5 in p-space
    v = F((k + frac) * step)
    x = np.full(N_STAT, v, dtype=F)
    y = q(x, training=True)
    if kind == "bits":
        fl, ce, _ = bits_fixed_candidates(x[:1], 8, 2)
    elif kind == "linear":
        fl, ce, _ = linear_candidates(x[:1], _pow2(2 - 8 + 1), -127, 127)
    else:
        fl, ce, _ = relu_candidates(x[:1], 6, 2)
    assert fl[0] != ce[0]
    up = _bits(y) == _bits(ce)[0]
    assert (up | (_bits(y) == _bits(fl)[0])).all()
    f = F(v / F(step)) - np.floor(F(v / F(step)))  # exact in float32
    p = _p_up(f)
    se = np.sqrt(p * (1 - p) / N_STAT)
    share = up.mean()
    assert abs(share - p) < 5 * se, (share, p, se)


def test_fraction_just_below_one_always_rounds_up():
    """f = 1 - 2^-24 is above every U of the 2^-23 lattice (the largest is 1 - 2^-23), so QKeras'
    rule `f < U -> floor` never takes the floor. A finer or differently compared U would."""
    q = qkeras.quantized_bits(4, 0, alpha=1, use_stochastic_rounding=True, seed=5)  # p = x * 2^3
    x = np.full(N_STAT // 4, F(1 - 2.0**-24) / F(8), dtype=F)
    assert (x * F(8) == F(1 - 2.0**-24)).all()
    fl, ce, _ = bits_fixed_candidates(x[:1], 4, 0)
    assert fl[0] == 0 and ce[0] == F(0.125)
    assert (q(x, training=True) == ce[0]).all()
    # and f = 2^-24 is below every U but 0: up only when U == 0 (probability 2^-23)
    y = q(np.full(N_STAT // 4, F(2.0**-24) / F(8), dtype=F), training=True)
    assert (y == 0).sum() >= N_STAT // 4 - 4


# ------------------------------------------------------------------------------------------------
# reproducibility: seeds, steps, kernel sets, threads, layouts


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_deterministic_for_a_seed(rng, name):
    x = _data(rng, (300, 3))
    make = FACTORIES[name]
    a, b = make(42), make(42)
    a1, a2 = a(x, training=True), a(x, training=True)
    assert_same_bits(a1, b(x, training=True), "same seed, first step")
    assert_same_bits(a2, b(x, training=True), "same seed, second step")
    assert (_bits(a1) != _bits(a2)).any(), "each training call draws fresh noise"
    c1 = make(43)(x, training=True)
    assert (_bits(c1) != _bits(a1)).any(), "another seed gives other results"
    # the call's seed= keyword takes the place of the constructor's
    assert_same_bits(make(0)(x, training=True, seed=42), a1, "call seed == constructor seed")
    # inference calls do not advance the step
    d = make(42)
    d(x)
    d(x, training=False)
    assert_same_bits(d(x, training=True), a1, "inference calls leave the training step alone")


def test_seed_types():
    x = np.linspace(-1, 1, 1001, dtype=F)
    y = _bits_q(np.int64(2**40 + 3))(x, training=True)
    assert_same_bits(_bits_q(2**40 + 3)(x, training=True), y, "numpy int seed == Python int seed")
    assert_same_bits(_bits_q(0)(x, training=True, seed=2**40 + 3), y, "call seed == constructor seed")
    for bad in (1.5, "1", True, [1]):
        with pytest.raises(TypeError, match="seed"):
            _bits_q(0)(x, training=True, seed=bad)
    for bad in (1.5, "1", None, False):
        with pytest.raises(TypeError, match="seed"):
            qkeras.quantized_bits(seed=bad)


BIG = (3, 66_671)  # > 2 * 2^16 elements: two threads really split the work, odd row tail


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_identical_on_every_kernel_set_and_thread_count(rng, name):
    x = _data(rng, BIG[::-1] if name.endswith("alpha_list") or name == "linear_alpha" else BIG)
    ref = None
    for isa, threads in SETS_AND_THREADS:
        with kernel_set(isa, threads):
            q = FACTORIES[name](77)
            y = (q(x, training=True), q(x, training=True))
            scale = np.asarray(getattr(q, "quantization_scale", getattr(q, "scale", 0)), dtype=F)
        if ref is None:
            ref = (y, scale)
            continue
        assert_same_bits(y[0], ref[0][0], f"{isa}/{threads} step 0")
        assert_same_bits(y[1], ref[0][1], f"{isa}/{threads} step 1")
        assert_same_bits(scale, ref[1], f"{isa}/{threads} scale")


def _layouts(rng, shape):
    n = max(shape)
    big = _data(rng, (n * 2 + 1, n * 3 + 2))
    yield "strided", big[1::2, 2::3][: shape[0], : shape[1]]
    yield "negative", big[::-2, ::-3][: shape[0], : shape[1]]
    yield "fortran", np.asfortranarray(big[: shape[0], : shape[1]])
    yield "broadcast", np.broadcast_to(big[0, : shape[1]], shape)
    yield "transposed", big[: shape[1], : shape[0]].T
    raw = np.zeros(shape[0] * shape[1] * 4 + 1, dtype=np.uint8)[1:].view(F).reshape(shape)
    raw[...] = big[: shape[0], : shape[1]]
    yield "misaligned", raw
    yield "float64", big[: shape[0], : shape[1]].astype(np.float64)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_layouts_give_the_contiguous_result(rng, name):
    """The random stream is keyed by the element's flat index in C order: a strided, reversed,
    Fortran, broadcast or transposed view gives what its contiguous copy gives."""
    shape = (37, 3) if name in ("bits_alpha_list", "linear_alpha") else (37, 45)
    for label, view in _layouts(rng, shape):
        assert view.shape == shape
        for threads in (1, 2):
            with kernel_set(None, threads):
                got = FACTORIES[name](8)(view, training=True)
                want = FACTORIES[name](8)(np.ascontiguousarray(view), training=True)
            assert_same_bits(got, want, f"{label}, {threads} threads")


# ------------------------------------------------------------------------------------------------
# gradients


def _daz(x):
    """TensorFlow's CPU kernels treat subnormals as zero (denormals-are-zero, flush-to-zero)."""
    x = np.asarray(x, dtype=F)
    return np.where(np.abs(x) < TINY, np.copysign(F(0), x), x).astype(F)


def _one_minus_q(q, use_variables):
    # a Python float: 1 - q in double, rounded once; a float32 variable: float32 arithmetic
    return F(1) - F(q) if use_variables else F(1.0 - q)


def edge_inputs(extra=()):
    f = [0.0, -0.0, TINY / 2, -TINY / 2, TINY, 1e-3, -1e-3, 0.1, -0.1, 0.5, -0.5, 1.0, -1.0, 1.1, -1.1,
         2.0, -2.0, 3.999, 4.0, -4.0, 7.5, 1e30, -1e30, np.inf, -np.inf, np.nan, -np.nan]
    vals = np.array(list(f) + list(extra), dtype=F)
    around = np.concatenate([np.nextafter(vals, F(np.inf)), np.nextafter(vals, F(-np.inf))])
    return np.concatenate([vals, around[np.isfinite(around)]]).astype(F)


def _assert_all_sets(fn, x, want, what):
    for isa, threads in SETS_AND_THREADS:
        with kernel_set(isa, threads):
            got = fn(x)
        assert_same_bits(got, want, f"{what} on {isa}/{threads}")


@pytest.mark.parametrize("use_ste,q,use_variables", [(True, 1.0, False), (True, 0.3, False), (False, 1.0, False),
                                                     (False, 0.3, False), (False, 0.3, True), (False, 0.7, False),
                                                     (False, 1.5, False)])
@pytest.mark.parametrize("alpha", [None, 2.0, "auto", "auto_po2"])
def test_bits_gradient(rng, use_ste, q, use_variables, alpha):
    """use_ste: d out/dx = 1 everywhere (also outside the clip range); else 1 - qnoise_factor."""
    x = np.concatenate([edge_inputs(), _data(rng, 200)]).reshape(-1, 1)
    qz = qkeras.quantized_bits(6, 1, alpha=alpha, use_ste=use_ste, qnoise_factor=q, use_variables=use_variables)
    want = np.full(x.shape, F(1) if use_ste else _one_minus_q(q, use_variables), dtype=F)
    _assert_all_sets(qz.gradient, x, want, "quantized_bits gradient")


def ref_linear_gradient(x, s, clip_min, clip_max, q=1.0, use_variables=False):
    """(1 - q) + q * [clip_min <= x / s <= clip_max] (tf.clip_by_value passes the gradient on its
    bounds; NaN is outside)."""
    x = _daz(x)
    with np.errstate(all="ignore"):
        xs = x / s
        # TensorFlow's CPU kernels flush subnormal results to zero, and the hardware calls a result
        # tiny by its value rounded to 24 bits with an unbounded exponent (x86), not by the
        # subnormal it would round to: e.g. -(2 - 2^-23) / 2^127 is flushed although its subnormal
        # rounding is -FLT_MIN. Model: the float64 quotient scaled into float32's normal range.
        tiny = np.abs((x.astype(np.float64) / np.asarray(s, np.float64) * 2.0**64).astype(F)) < F(TINY * 2.0**64)
    xs = np.where(tiny, np.copysign(F(0), xs), xs).astype(F)
    inside = ((xs >= F(clip_min)) & (xs <= F(clip_max))).astype(F)
    qf = F(np.float32(q)) if use_variables else F(q)
    return (_one_minus_q(q, use_variables) + qf * inside).astype(F)


def test_linear_gradient_deleted_qkeras_vector():
    """Notes §4.5 (QKeras' test_gradients_explicit, deleted from HEAD)."""
    x = np.array([-1.1, -0.1, 0.0, 0.1, 1.1], dtype=F)
    for bits in (1, 8):
        g = qkeras.quantized_linear(bits, 0, keep_negative=True).gradient(x)
        np.testing.assert_array_equal(g, [0, 1, 1, 1, 0])
        g = qkeras.quantized_linear(bits, 0, keep_negative=False).gradient(x)
        np.testing.assert_array_equal(g, [0, 0, 1, 1, 0])


@pytest.mark.parametrize("bits", [1, 8])
@pytest.mark.parametrize("symmetric,keep_negative", [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize("alpha", [None, 2.0])
def test_linear_gradient_formula(bits, symmetric, keep_negative, alpha):
    """QKeras' test_gradient_formula: gradient == 1[min() <= x <= max()] -- and, on more inputs
    than [-1, 0, 1, 2, 3], == 1[clip_min*s <= x <= clip_max*s] (a power-of-two scale: the same
    as clip_min <= x/s <= clip_max)."""
    q = qkeras.quantized_linear(bits, symmetric=symmetric, keep_negative=keep_negative, alpha=alpha)
    x = np.array([-1, 0, 1, 2, 3], dtype=F)
    q(x)
    np.testing.assert_array_equal(q.gradient(x), ((x >= q.min()) & (x <= q.max())).astype(F))
    xe = edge_inputs([q.min(), q.max(), 0.25, -0.25, 0.75, 1.5, 1.984375, -1.984375, 0.9921875, -0.9921875])
    g = q.gradient(xe)
    with np.errstate(invalid="ignore"):
        want = ((_daz(xe) >= F(q.min())) & (_daz(xe) <= F(q.max()))).astype(F)
    assert_same_bits(g, want, "1[min <= x <= max]")


@pytest.mark.parametrize("bits,integer,symmetric,keep_negative", [(1, 0, True, True), (1, 2, False, False), (4, 1, True, True),
                                                                  (4, 1, False, True), (8, 2, False, False), (3, -1, True, True)])
@pytest.mark.parametrize("alpha", [None, 3.0, [0.5, 1.25, 3.0], "auto", "auto_po2"])
@pytest.mark.parametrize("qn,use_variables", [(1.0, False), (0.3, False), (0.3, True), (0.0, False)])
def test_linear_gradient(rng, bits, integer, symmetric, keep_negative, alpha, qn, use_variables):
    q = qkeras.quantized_linear(bits, integer, symmetric=symmetric, keep_negative=keep_negative, alpha=alpha,
                                qnoise_factor=qn, use_variables=use_variables)
    x = np.concatenate([edge_inputs(), _data(rng, 300, 2.0 ** integer)])
    x = np.repeat(x[:, None], 3, axis=1)
    with np.errstate(over="ignore"):
        x[:, 1] *= F(0.5)
        x[:, 2] *= F(4)  # FLT_MAX (an edge input's neighbour) becomes inf
    if isinstance(alpha, str):
        x = np.where(np.isfinite(x), x, F(0.5)).astype(F)  # finite data: a finite scale
    q(x)
    s = np.asarray(q.quantization_scale, dtype=F)
    clip_min, clip_max = q.get_clip_bounds()
    if bits == 1 and keep_negative:
        assert (clip_min, clip_max) == (-0.5, 0.5)
    else:
        u = 2.0 ** (bits - keep_negative)
        assert clip_max == u - 1 and clip_min == (keep_negative * (-u + symmetric))
    want = ref_linear_gradient(x, s, clip_min, clip_max, qn, use_variables)
    _assert_all_sets(q.gradient, x, want, "quantized_linear gradient")


def ref_relu_gradient(x, bits, integer, negative_slope=0.0, relu_upper_bound=None, is_quantized_clip=True,
                      use_ste=True, q=1.0, use_variables=False):
    """d x_u / dx (notes §3.8): 1 above 0; at and below 0 negative_slope (leaky) or 0 (relu);
    0 where x_u is the constant ceiling (x above m_i - m_f with is_quantized_clip, else above
    relu_upper_bound when one is given -- 0.0 counts); times 1 - q without use_ste."""
    x = _daz(x)
    nsb = bits - (negative_slope != 0)
    clip_value = _pow2(integer) - _pow2(integer - nsb)
    with np.errstate(invalid="ignore"):
        if is_quantized_clip:
            below = x <= clip_value
        elif relu_upper_bound is not None:
            below = x <= F(relu_upper_bound)
        else:
            below = np.ones(x.shape, bool)
        d = np.where(x > 0, F(1), F(negative_slope)).astype(F)
    d = np.where(below, d, F(0)).astype(F)
    if not use_ste:
        d = (_one_minus_q(q, use_variables) * d).astype(F)
    return d


RELU_CONFIGS = [
    dict(bits=4, integer=1),
    dict(bits=6, integer=2, use_sigmoid=1),
    dict(bits=4, integer=0, negative_slope=0.25),
    dict(bits=8, integer=3, negative_slope=0.125, use_sigmoid=1),
    dict(bits=4, integer=1, is_quantized_clip=False),
    dict(bits=4, integer=1, negative_slope=0.5, is_quantized_clip=False),
    dict(bits=4, integer=1, relu_upper_bound=1.5, is_quantized_clip=False),
    dict(bits=4, integer=1, relu_upper_bound=1.5, is_quantized_clip=True),
    dict(bits=4, integer=1, relu_upper_bound=0.0, is_quantized_clip=False),
    dict(bits=4, integer=1, negative_slope=2.0, relu_upper_bound=3.0, is_quantized_clip=False),
    dict(bits=1, integer=0),
    dict(bits=5, integer=-2),
]


@pytest.mark.parametrize("cfg", RELU_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("use_ste,qn,use_variables", [(True, 1.0, False), (True, 0.5, False), (False, 0.3, False),
                                                      (False, 0.3, True), (False, 1.5, False)])
def test_relu_gradient(rng, cfg, use_ste, qn, use_variables):
    q = qkeras.quantized_relu(**cfg, use_ste=use_ste, qnoise_factor=qn, use_variables=use_variables)
    nsb = cfg["bits"] - (cfg.get("negative_slope", 0) != 0)
    clip_value = float(_pow2(cfg["integer"]) - _pow2(cfg["integer"] - nsb))
    extra = [clip_value, -clip_value]
    if cfg.get("relu_upper_bound") is not None:
        extra += [cfg["relu_upper_bound"]]
    x = np.concatenate([edge_inputs(extra), _data(rng, 300, 2.0)])
    want = ref_relu_gradient(x, cfg["bits"], cfg["integer"], cfg.get("negative_slope", 0.0), cfg.get("relu_upper_bound"),
                             cfg.get("is_quantized_clip", True), use_ste, qn, use_variables)
    _assert_all_sets(q.gradient, x, want, "quantized_relu gradient")


def test_nan_gradients():
    """What NaN gives (src/kernels/qkeras_kernels.h): quantized_bits 1 (or 1 - q); quantized_linear
    1 - q (NaN / s is outside the clip range); quantized_relu 0 with a ceiling (NaN <= ceiling is
    false) and, unbounded, what x <= 0 gives (NaN > 0 is false: negative_slope, or 0)."""
    x = np.array([np.nan, -np.nan], dtype=F)
    cases = [
        (qkeras.quantized_bits(4, 1), 1.0),
        (qkeras.quantized_bits(4, 1, use_ste=False, qnoise_factor=0.25), 0.75),
        (qkeras.quantized_linear(4, 1), 0.0),
        (qkeras.quantized_linear(4, 1, qnoise_factor=0.25), 0.75),
        (qkeras.quantized_relu(4, 1), 0.0),
        (qkeras.quantized_relu(4, 1, negative_slope=0.25), 0.0),
        (qkeras.quantized_relu(4, 1, negative_slope=0.25, relu_upper_bound=2.0, is_quantized_clip=False), 0.0),
        (qkeras.quantized_relu(4, 1, is_quantized_clip=False), 0.0),
        (qkeras.quantized_relu(4, 1, negative_slope=0.25, is_quantized_clip=False), 0.25),
    ]
    for q, want in cases:
        _assert_all_sets(q.gradient, x, np.full(2, F(want)), str(q))
        assert not np.signbit(q.gradient(x)).any()


def test_gradient_shapes_and_layouts(rng):
    base = _data(rng, (9, 14))
    for q in (qkeras.quantized_bits(4, 1, use_ste=False, qnoise_factor=0.5), qkeras.quantized_linear(4, 1, alpha="auto"),
              qkeras.quantized_relu(4, 1, negative_slope=0.5)):
        want = q.gradient(np.ascontiguousarray(base[::-2, 1::3]))
        for view in (base[::-2, 1::3], np.asfortranarray(base[::-2, 1::3]), base[::-2, 1::3].astype(np.float64)):
            assert_same_bits(q.gradient(view), want, str(q))
        assert q.gradient(np.float32(0.25)).shape == ()
        assert q.gradient(np.zeros((0, 3), F)).shape == (0, 3)
