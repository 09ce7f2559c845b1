"""Property-based differential tests of polyquant.qkeras: every kernel set, thread count, memory
layout and input dtype gives bit for bit what the scalar kernel set gives on the contiguous
float32 copy of the input with one thread -- outputs, reported scales and gradients, in inference
and in training with stochastic rounding (same seed).

Hypothesis draws the quantizer (quantized_bits / quantized_relu / quantized_linear with bits
1..16, integer -4..8, symmetric, keep_negative, alpha None / number / per-channel list / "auto" /
"auto_po2", scale_axis None / int / list, qnoise_factor, use_ste, use_variables, negative_slope,
use_sigmoid, relu_upper_bound, is_quantized_clip, enable_fast_inference, elements_per_scale where
valid, min/max po2 exponents, post_training_scale), the shape (rank 0..4, empty, rows up to ~70
elements so the SIMD bodies and tails both run), the layout (non-contiguous, negative strides,
zero-stride broadcast views, Fortran order, transposed, misaligned, big-endian), the input dtype
(float16/32/64) and the values (+-0, +-inf, NaN, subnormals, huge, exact half-grid ties and their
float32 neighbours).

Where the reference call raises ValueError/TypeError, every variant must raise the same type.

Budget: a fixed, derandomized example set in CI ("polyquant-ci" profile). POLYQUANT_HYPOTHESIS_SCALE
scales the CI count; POLYQUANT_HYPOTHESIS_EXAMPLES=N runs N random examples instead (new
examples every run; a failure prints the blob to reproduce it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, event, given, note  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import polyquant  # noqa: E402
from polyquant import _polyquant_ext as _ext  # noqa: E402
from polyquant import qkeras  # noqa: E402

from ..helpers import hypothesis_budget, kernel_set  # noqa: E402

F = np.float32

examples = hypothesis_budget()[0]


SUPPORTED = list(polyquant.runtime_info()["supported"])
HAVE_HOOKS = hasattr(_ext, "_set_kernel_set") and hasattr(_ext, "_set_num_threads")
REFERENCE_SET = "scalar" if "scalar" in SUPPORTED else SUPPORTED[-1]
VARIANTS = [(isa, t) for isa in SUPPORTED for t in (1, 2)] if HAVE_HOOKS else [(None, None)]


def test_hooks_present():
    """The comparison needs the kernel-set and thread-count hooks (and a scalar set)."""
    assert HAVE_HOOKS, "polyquant._polyquant_ext lacks _set_kernel_set/_set_num_threads"
    assert "scalar" in SUPPORTED, SUPPORTED


# ------------------------------------------------------------------------------------------------
# strategies

MAX_ELEMS = 600
QNOISE = [1.0, 1.0, 0.5, 0.0, 0.3, 0.75, 1.25]
SLOPES = [0.0, 0.0, 0.0625, 0.125, 0.25, 0.5, 1.0, 2.0]


@st.composite
def shapes(draw) -> tuple[int, ...]:
    rank = draw(st.integers(0, 4))
    dims = [draw(st.sampled_from([1, 2, 3, 5, 0, 4] if rank > 2 else [1, 2, 3, 5, 7, 0, 16])) for _ in range(rank)]
    if rank and draw(st.integers(0, 3)) == 0:
        dims[-1] = draw(st.integers(8, 70))  # a long row: vector body + tail
    assume(math.prod(dims) <= MAX_ELEMS)
    return tuple(dims)


@st.composite
def scale_axes(draw, rank: int) -> Any:
    kind = draw(st.sampled_from(["none", "none", "int", "list"]))
    if kind == "none" or rank == 0:
        return None
    if kind == "int":
        return draw(st.integers(-rank, rank - 1))
    return sorted(draw(st.sets(st.integers(0, rank - 1), max_size=rank)))


@st.composite
def alphas(draw, shape: tuple[int, ...], allow_strings: bool = True) -> Any:
    kinds = ["none", "number", "list"] + (["auto", "auto_po2"] if allow_strings else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    value = st.sampled_from([1.0, 2.0, 0.5, 0.001, 3.0, 0.75, 1000.0, 1])
    if kind == "number":
        return draw(value)
    if kind == "list":
        n = shape[-1] if shape and shape[-1] > 0 else 1
        n = draw(st.sampled_from([n, 1])) if n > 1 else n
        return [float(draw(value)) for _ in range(n)]
    return kind


@st.composite
def bits_kwargs(draw, shape) -> dict[str, Any]:
    kw: dict[str, Any] = dict(bits=draw(st.integers(1, 16)), integer=draw(st.integers(-4, 8)),
                              symmetric=draw(st.booleans()), keep_negative=draw(st.booleans()),
                              alpha=draw(alphas(shape)), use_stochastic_rounding=draw(st.booleans()),
                              qnoise_factor=draw(st.sampled_from(QNOISE)), use_ste=draw(st.booleans()),
                              use_variables=draw(st.booleans()))
    if isinstance(kw["alpha"], str):
        kw["bits"] = max(kw["bits"], 2)  # DEPARTURE bits_one_auto: tested in test_qkeras_api
        kw["scale_axis"] = draw(scale_axes(len(shape)))
        if kw["alpha"] == "auto_po2":
            axis = kw["scale_axis"]
            if isinstance(axis, int) and shape and draw(st.booleans()):
                n = shape[axis]
                divisors = [d for d in range(1, n + 1) if n % d == 0] or [1]
                kw["elements_per_scale"] = draw(st.sampled_from(divisors))
            if draw(st.booleans()):
                kw["min_po2_exponent"] = draw(st.integers(-12, 0))
            if draw(st.booleans()):
                kw["max_po2_exponent"] = draw(st.integers(-2, 6))
        if draw(st.integers(0, 4)) == 0:
            kw["post_training_scale"] = draw(st.sampled_from([0.5, 4.0, 64.0]))
    return kw


@st.composite
def relu_kwargs(draw, shape) -> dict[str, Any]:
    kw: dict[str, Any] = dict(bits=draw(st.integers(1, 16)), integer=draw(st.integers(-4, 8)),
                              use_sigmoid=draw(st.sampled_from([0, 0, 1])), negative_slope=draw(st.sampled_from(SLOPES)),
                              use_stochastic_rounding=draw(st.booleans()),
                              relu_upper_bound=draw(st.sampled_from([None, None, 0.0, 1.5, 3.0, 0.3])),
                              is_quantized_clip=draw(st.booleans()), qnoise_factor=draw(st.sampled_from(QNOISE)),
                              use_ste=draw(st.booleans()), use_variables=draw(st.booleans()))
    if draw(st.integers(0, 5)) == 0:
        kw["enable_fast_inference"] = True
    return kw


@st.composite
def linear_kwargs(draw, shape) -> dict[str, Any]:
    kw: dict[str, Any] = dict(bits=draw(st.integers(1, 16)), integer=draw(st.integers(-4, 8)),
                              symmetric=draw(st.booleans()), keep_negative=draw(st.booleans()),
                              alpha=draw(alphas(shape)), use_stochastic_rounding=draw(st.booleans()),
                              qnoise_factor=draw(st.sampled_from(QNOISE)), use_variables=draw(st.booleans()))
    if isinstance(kw["alpha"], str):
        kw["scale_axis"] = draw(scale_axes(len(shape)))
    return kw


KWARGS = {"quantized_bits": bits_kwargs, "quantized_relu": relu_kwargs, "quantized_linear": linear_kwargs}

SPECIALS = [0.0, -0.0, math.nan, math.inf, -math.inf, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754942e-38, 2.0**-126,
            3.4028235e38, -3.4028235e38, 3e38, 1e30, -3e7, 2e5, 65504.0, 0.49999997, 0.5000001, 0.5, -0.5, 1.5, 2.5,
            -2.5, 7.0, 1e-8]


def step_of(name: str, kw: dict[str, Any]) -> float:
    """The fixed-point step of the quantizer's grid (for drawing ties), 2^(integer - bits + kn)."""
    if name == "quantized_relu":
        return 2.0 ** (kw["integer"] - (kw["bits"] - (kw["negative_slope"] != 0)))
    return 2.0 ** (kw["integer"] - kw["bits"] + bool(kw["keep_negative"]))


def values(step: float) -> st.SearchStrategy:
    tie = st.integers(-300, 300).map(lambda k: (k + 0.5) * step)
    return st.one_of(
        st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
        st.floats(-10, 10, width=32),
        tie,
        st.integers(-300, 300).map(lambda k: k * step),
        st.tuples(tie, st.sampled_from([-1.0, 1.0])).map(
            lambda t: float(np.nextafter(F(t[0]), F(t[1] * math.inf)))),
        st.sampled_from(SPECIALS),
    )


LAYOUTS = ["c", "fortran", "negative", "odd", "odd_negative", "transposed", "misaligned", "big_endian", "broadcast"]


def apply_layout(a: np.ndarray, kind: str, draw) -> np.ndarray:
    """An array with a's values and shape in the memory layout `kind`."""
    if a.ndim == 0 or kind == "c":
        return np.array(a, order="C")
    if kind == "fortran":
        return np.asfortranarray(a)
    if kind == "negative":
        axes = tuple(i for i in range(a.ndim) if draw(st.booleans())) or (0,)
        return np.flip(np.ascontiguousarray(np.flip(a, axes)), axes)
    if kind in ("odd", "odd_negative"):
        step = draw(st.sampled_from([2, 3, 5])) * (-1 if kind == "odd_negative" else 1)
        axes = {i for i in range(a.ndim) if draw(st.booleans())} or {a.ndim - 1}
        base = np.full([s * abs(step) if i in axes else s for i, s in enumerate(a.shape)], np.nan, a.dtype)
        v = base[tuple(slice(None, None, step) if i in axes else slice(None) for i in range(a.ndim))]
        v[...] = a
        return v
    if kind == "transposed":
        perm = draw(st.permutations(range(a.ndim)))
        return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))
    if kind == "misaligned":
        item = a.dtype.itemsize
        offset = draw(st.sampled_from(sorted({1, max(1, item // 2)})))
        buf = np.zeros(a.size * item + item, np.uint8)
        v = buf[offset:offset + a.size * item].view(a.dtype).reshape(a.shape)
        v[...] = a
        return v
    if kind == "big_endian":
        return a.astype(a.dtype.newbyteorder(">"))
    assert kind == "broadcast"
    axes = [i for i, s in enumerate(a.shape) if s > 1 and draw(st.booleans())] or \
        [i for i, s in enumerate(a.shape) if s > 1][:1]
    if not axes:
        return np.array(a, order="C")
    small = a[tuple(slice(0, 1) if i in axes else slice(None) for i in range(a.ndim))]
    return np.broadcast_to(small, a.shape)


@st.composite
def cases(draw) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(KWARGS)))
    shape = draw(shapes())
    kw = draw(KWARGS[name](shape))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float16, np.float64]))
    n = math.prod(shape)
    step = step_of(name, kw) if draw(st.booleans()) else 2.0 ** draw(st.integers(-12, 6))
    vals = draw(st.lists(values(step), min_size=n, max_size=n))
    with np.errstate(all="ignore"):
        a = np.array(vals, dtype=np.float64).astype(dtype).reshape(shape)
    layout = draw(st.sampled_from(LAYOUTS))
    x = apply_layout(a, layout, draw)
    training = draw(st.booleans())
    seed = draw(st.integers(0, 2**64 - 1))
    return dict(name=name, kw=kw, x=x, layout=layout, training=training, seed=seed)


# ------------------------------------------------------------------------------------------------
# the property


def _f32_bits(a: Any) -> np.ndarray:
    return np.array(a, dtype=F, order="C").view(np.uint32)


def _same(got: Any, want: Any) -> bool:
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or g.dtype != w.dtype:
        return False
    if g.dtype != F:
        return bool(np.array_equal(g, w, equal_nan=True))
    gn, wn = np.isnan(g), np.isnan(w)
    return bool(((gn == wn) & (gn | (_f32_bits(g) == _f32_bits(w)))).all())


def run(case: dict[str, Any], x: np.ndarray) -> Any:
    """Output, reported scale and gradient of a fresh quantizer on x; or the exception type."""
    cls = getattr(qkeras, case["name"])
    try:
        q = cls(**case["kw"])
        y = q(x, training=case["training"], seed=case["seed"])
        if case["name"] == "quantized_linear":
            scale = np.asarray(q.quantization_scale, dtype=F)
        elif case["name"] == "quantized_bits":
            scale = np.asarray(q.scale, dtype=F)
        else:
            scale = None
        g = cls(**case["kw"]).gradient(x)
    except (ValueError, TypeError) as e:
        return type(e)
    assert isinstance(y, np.ndarray) and y.dtype == F
    assert isinstance(g, np.ndarray) and g.dtype == F
    return y, scale, g


def check(case: dict[str, Any]) -> None:
    x = case["x"]
    note(f"{case['name']}({case['kw']}) training={case['training']} seed={case['seed']} layout={case['layout']} "
         f"dtype={x.dtype} shape={x.shape} strides={x.strides}")
    with np.errstate(all="ignore"):
        contiguous = np.array(x, dtype=F, order="C")  # (np.ascontiguousarray makes 0-d arrays 1-d)
    with kernel_set(REFERENCE_SET if HAVE_HOOKS else None, 1 if HAVE_HOOKS else None):
        ref = run(case, contiguous)
    event(f"{case['name']}: " + (f"raises {ref.__name__}" if isinstance(ref, type) else "computes"))
    event(f"size {'0' if x.size == 0 else '1-15' if x.size < 16 else '16+'}")
    if isinstance(ref, type):
        note(f"reference raised {ref.__name__}")
    else:
        y, scale, g = ref
        expected_shape = x.shape
        alpha = case["kw"].get("alpha")
        if alpha is not None and not isinstance(alpha, str):
            expected_shape = np.broadcast_shapes(x.shape, np.shape(alpha))
        assert y.shape == expected_shape and g.shape == expected_shape
    for isa, threads in VARIANTS:
        for inp, label in ((x, case["layout"]), (contiguous, "contiguous")):
            with kernel_set(isa, threads):
                got = run(case, inp)
            what = f"{isa}/{threads} threads, {label} {inp.dtype}"
            if isinstance(ref, type) or isinstance(got, type):
                assert got is ref, f"{what}: {got} vs reference {ref}"
                continue
            for part, a, b in zip(("output", "scale", "gradient"), got, ref):
                if b is None:
                    assert a is None
                    continue
                assert _same(a, b), f"{what}: {part} differs:\n{a}\nvs reference\n{b}"


@examples(400)
@given(cases())
def test_every_kernel_set_layout_and_dtype_equal_scalar_contiguous(case):
    check(case)


@st.composite
def training_cases(draw) -> dict[str, Any]:
    c = draw(cases())
    c["training"] = True
    c["kw"]["use_stochastic_rounding"] = True
    return c


@examples(150)
@given(training_cases())
def test_stochastic_rounding_equal_everywhere(case):
    """Training with stochastic rounding: same seed, same bits on every variant."""
    check(case)


@st.composite
def big_cases(draw) -> dict[str, Any]:
    """Tensors above two parallel grains (2 * 2^16 elements), so two threads split the work."""
    name = draw(st.sampled_from(sorted(KWARGS)))
    rows = draw(st.sampled_from([1, 3, 5]))
    shape = (rows, (140_000 // rows) + draw(st.integers(0, 17)))
    kw = draw(KWARGS[name](shape))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = (rng.standard_normal(shape) * 2.0 ** draw(st.integers(-6, 6))).astype(F)
    a.reshape(-1)[rng.integers(0, a.size, 64)] = rng.choice(np.array(SPECIALS, dtype=F), 64)
    layout = draw(st.sampled_from(["c", "fortran", "negative", "broadcast"]))
    return dict(name=name, kw=kw, x=apply_layout(a, layout, draw), layout=layout, training=draw(st.booleans()),
                seed=draw(st.integers(0, 2**64 - 1)))


@examples(10)
@given(big_cases())
def test_threads_big_tensors(case):
    check(case)
