"""Property-based differential tests of polyquant.aimet: for drawn shapes (rank 0..4, empty, rows
long enough for vector bodies and tails), parameter layouts (per-tensor as 0-d / (1,) / (1, 1), one
axis, several axes, blockwise with -1 entries and leading broadcast dimensions), grids, offsets
(integers inside and outside the grid, non-integers), x dtypes (float16, bfloat16, float32,
float64) and values (+-0, +-inf, NaN, subnormals, huge, exact k + 0.5 ties of x / s and their
neighbours), and every memory layout of x (strided, reversed, Fortran, zero-stride), every kernel
set with one thread and all equals the scalar kernel set on contiguous copies with one thread; a
blockwise call equals the same call with the parameters expanded to one value per element; the
gradients agree across kernel sets, thread counts and layouts too, the exact sums included. The encoding analyzers (MinMax,
Percentile, SQNR) over per-tensor / per-channel / blockwise shapes, every dtype, signed-zero
extremes and specials: statistics and encodings on every layout and kernel set equal the scalar
set's on contiguous copies, errors alike.

Budget: a fixed, derandomized example set in CI. POLYQUANT_HYPOTHESIS_SCALE scales it;
POLYQUANT_HYPOTHESIS_EXAMPLES=N runs N random examples instead.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, note  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import polyquant  # noqa: E402
import polyquant.aimet as pa  # noqa: E402
from ..helpers import hypothesis_budget, kernel_set, layouts, values_around_ties  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

examples = hypothesis_budget()[0]


ISAS = polyquant.runtime_info()["supported"]
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-39, 3e38, -3e38, 1e10, -1e10, 2.0**31, 65504.0]
GRIDS = [(0, 255), (-128, 127), (0, 15), (-8, 7), (0, 1), (-1, 0), (0, 65535), (-32768, 32767), (-2**20, 2**20 - 1),
         (0, 2**22), (3, 3)]
X_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _same(got, want, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    assert np.array_equal(_bits(got), _bits(want)), f"{what}: {np.flatnonzero(_bits(got) != _bits(want))[:5]}"


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0] or [1]


@st.composite
def problems(draw):
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6) | st.sampled_from([16, 17, 33, 64]), min_size=rank, max_size=rank)))
    hypothesis.assume(int(np.prod(shape)) <= 3000)
    kinds = ["tensor"] + (["axis", "axes", "blocked"] if rank else [])
    kind = draw(st.sampled_from(kinds))
    block = None
    if kind == "tensor":
        sshape = draw(st.sampled_from([(), (1,), (1, 1)]))
        if len(sshape) > rank:
            sshape = ()
    elif kind in ("axis", "axes"):
        srank = draw(st.integers(1, rank))
        tail = shape[rank - srank:]
        picked = set(draw(st.lists(st.integers(0, srank - 1), min_size=1, max_size=1 if kind == "axis" else srank)))
        sshape = tuple(d if i in picked else 1 for i, d in enumerate(tail))
    else:
        srank = draw(st.integers(1, rank))
        tail = shape[rank - srank:]
        hypothesis.assume(all(d > 0 for d in tail))
        sizes = [draw(st.sampled_from(_divisors(d))) for d in tail]
        sshape = tuple(d // b for d, b in zip(tail, sizes))
        block = tuple(-1 if draw(st.booleans()) else b for b in sizes)
    n = int(np.prod(shape))
    grid = draw(st.sampled_from(GRIDS))
    scale = draw(st.sampled_from([0.5, 0.1, 1 / 255, 0.0123, 2.0**-7, 3.0, 1e-30, 1e30, 0.0, -0.25]))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    x = values_around_ties(rng, n, scale, SPECIALS).reshape(shape)
    m = int(np.prod(sshape))
    s = rng.choice(np.array([scale, scale * 2, scale / 3], np.float32), m).astype(np.float32).reshape(sshape)
    offset_kind = draw(st.sampled_from(["inside", "outside", "fraction", "zero"]))
    lo, hi = grid
    if offset_kind == "inside":
        o = -rng.integers(lo, hi + 1, m).astype(np.float32)
    elif offset_kind == "outside":
        o = rng.choice(np.array([-(hi + 5), -(lo - 5), 1e9], np.float32), m)
    elif offset_kind == "fraction":
        o = rng.choice(np.array([-0.5, 2.5, -3.25], np.float32), m)
    else:
        o = np.zeros(m, np.float32)
    return x, s, o.astype(np.float32).reshape(sshape), grid, block, seed


def _call(op: str, x, s, o, grid, block):
    kw = {"block_size": block} if block else {}
    if op == "quantize":
        return pa.quantize(x, s, o, *grid, **kw)
    if op == "quantize_dequantize":
        return pa.quantize_dequantize(x, s, o, *grid, **kw)
    if op == "training":
        # every output: the gradient sums are exact, so they too equal the scalar set's on any
        # layout, kernel set and thread count. Upstream gradients of many magnitudes and signs, a
        # function of x's value (so every layout of x gets the same ones).
        v = np.nan_to_num(x.astype(np.float64), nan=0.3, posinf=1.0, neginf=-1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            g = np.cos(v * 0.37 + 0.1) * 2.0 ** (np.floor(np.abs(v) * 7.0) % 23 - 11)
        return pa.quantize_dequantize_grad(g.astype(x.dtype), x, s, o, *grid, **kw)
    return pa.dequantize(x, s, o, **kw)


def _outcome(fn):
    try:
        return fn(), None
    except (RuntimeError, ValueError, TypeError) as e:
        return None, type(e)


def _compare(got, want, what):
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            _same(g, w, what)
    else:
        _same(got, want, what)


@examples(300)
@given(problems(), st.sampled_from(["quantize", "quantize_dequantize", "training", "dequantize"]),
       st.sampled_from(X_DTYPES), st.integers(0, 4))
def test_every_layout_and_kernel_set_equals_the_scalar_set(problem, op, x_dtype, variant):
    x, s, o, grid, block, _ = problem
    x = x.astype(x_dtype)
    note(f"{op} x {x.shape} {np.dtype(x_dtype).name} s {s.shape} o {o.ravel()[:3]} grid {grid} block {block}")
    with kernel_set("scalar", 1):
        want, err = _outcome(lambda: _call(op, np.array(x, order="C"), s, o, grid, block))
    xv = layouts(x, variant)
    if variant == 4 and x.size:
        with kernel_set("scalar", 1):
            want, err = _outcome(lambda: _call(op, np.array(xv, order="C"), s, o, grid, block))
    for isa in ISAS:
        for threads in (1, None):
            with kernel_set(isa, threads):
                got, got_err = _outcome(lambda: _call(op, xv, s, o, grid, block))
            assert got_err == err, (isa, threads, got_err, err)
            if err is None:
                _compare(got, want, f"{op} isa={isa} threads={threads}")


@examples(150)
@given(problems(), st.sampled_from(["quantize", "training", "dequantize"]), st.sampled_from(X_DTYPES))
def test_blockwise_equals_expanded_parameters(problem, op, x_dtype):
    """Blocked parameters are broadcasting over a split view: the same as one value per element."""
    x, s, o, grid, block, _ = problem
    hypothesis.assume(block is not None and x.size > 0)
    x = x.astype(x_dtype)
    sizes = [b if b != -1 else d // n for b, d, n in zip(block, x.shape[x.ndim - s.ndim:], s.shape)]
    s_full, o_full = s, o
    for axis, b in enumerate(sizes):
        s_full = np.repeat(s_full, b, axis=axis)
        o_full = np.repeat(o_full, b, axis=axis)
    blocked, err = _outcome(lambda: _call(op, x, s, o, grid, block))
    expanded, err2 = _outcome(lambda: _call(op, x, s_full, o_full, grid, None))
    assert err == err2
    if err is None:
        _compare(blocked if op != "training" else blocked[0], expanded if op != "training" else expanded[0], op)


@pytest.mark.parametrize("x_dtype", X_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["quantize", "quantize_dequantize", "training", "dequantize"])
def test_channels_last_equals_channels_first(op, x_dtype):
    """Per-channel parameters on the last axis (the engine fuses the short rows and hands the
    kernels one repeated row of parameters) equal the same parameters on the first axis (one value
    per row), element for element (the gradient sums too: exact, whatever walks them), on every kernel set and thread count: channel counts below, at
    and above the vector widths and the engine's short-row limit (256), row counts from one to
    enough for the threads to split rows."""
    rng = np.random.default_rng(7)
    grid = (-8, 7) if op == "dequantize" else (0, 255)
    for channels in (1, 3, 7, 16, 17, 64, 100, 255, 256):
        for rows in (1, 2, 37, 1500):
            s = rng.choice(np.array([0.5, 1 / 255, 0.0123, 3.0, 2.0**-7, 1e-30], np.float32), channels)
            o = -rng.integers(0, 256, channels).astype(np.float32)
            k = rng.integers(-300, 301, (rows, channels)).astype(np.float32)
            ties = ((k + np.float32(0.5)) * s).astype(np.float32)
            pick = rng.integers(0, 5, (rows, channels))
            specials = np.array(SPECIALS, np.float32)[np.abs(k.astype(np.int64)) % len(SPECIALS)]
            x = np.select([pick == 0, pick == 1, pick == 2, pick == 3],
                          [ties, np.nextafter(ties, np.float32(np.inf)), specials, k],
                          (k * s / np.float32(7.0)).astype(np.float32)).astype(x_dtype)
            x_first = np.ascontiguousarray(x.T)
            with kernel_set("scalar", 1):
                want = _call(op, x_first, s.reshape(channels, 1), o.reshape(channels, 1), grid, None)
            # training: output and grad_tensor transposed back; the exact sums per channel, where a
            # zero's sign and a NaN's bits may differ when rows == 1 (channels first, (C, 1) against
            # (C, 1), is no sum and keeps its term, -0.0 or a NaN; channels last, (C,) against (1, C),
            # sums, as torch's sum_to: +0.0, the quiet NaN)
            def sums(g):
                return tuple(np.where(np.isnan(t), t.dtype.type(np.nan), t + t.dtype.type(0)).reshape(-1) for t in g[2:])

            if op == "training":
                want = (want[0].T, want[1].T) + sums(want)
            else:
                want = want.T
            for isa in ISAS:
                for threads in (1, None):
                    with kernel_set(isa, threads):
                        got = _call(op, x, s, o, grid, None)
                    if op == "training":
                        got = got[:2] + sums(got)
                    _compare(got, want, f"{op} channels={channels} rows={rows} isa={isa} threads={threads}")


def test_shortcut_eligibility_follows_aimet():
    """AIMET's no-grad shortcut: no block size, one value, or one non-singleton axis with equal
    scale / offset shapes and zero points inside the grid."""
    from polyquant import _polyquant_ext as ext

    x = np.zeros((4, 6), np.float32)

    def takes(s, o, grid=(0, 255), block=None):
        args = ext.aimet.AffineArgs()
        args.grid, args.block_size = ext.aimet.Grid(*grid), block or []
        return ext.aimet.takes_shortcut(x, -1, np.asarray(s, np.float32), -1, np.asarray(o, np.float32), -1, args)

    assert takes(0.1, 0.0)
    assert takes(np.full((1, 1), 0.1), np.zeros((1,)))
    assert takes(np.full((4, 1), 0.1), np.zeros((4, 1)))
    assert takes(np.full((6,), 0.1), np.zeros((6,)))
    assert not takes(np.full((4, 6), 0.1), np.zeros((4, 6)))                 # two axes
    assert not takes(np.full((4, 1), 0.1), np.zeros(()))                     # shapes differ
    assert not takes(np.full((4, 1), 0.1), np.full((4, 1), -300.0))          # zero point 300 outside [0, 255]
    assert takes(0.1, -300.0)                                                # per-tensor accepts it
    assert not takes(np.full((4, 1), 0.1), np.zeros((4, 1)), block=[1, 6])   # blockwise


# ------------------------------------------------------------------------------------------------
# Encoding analyzers: statistics and encodings on every layout of x and every kernel set equal the
# scalar set's on a contiguous copy, bit for bit (state included), errors alike.

ANALYZERS = {
    "minmax": lambda shape, block: pa.MinMaxEncodingAnalyzer(shape, block_size=block),
    "percentile": lambda shape, block: pa.PercentileEncodingAnalyzer(shape, num_bins=32, percentile=99.0, block_size=block),
    "sqnr": lambda shape, block: pa.SqnrEncodingAnalyzer(shape, num_bins=32, asymmetric_delta_candidates=5,
                                                         symmetric_delta_candidates=11, offset_candidates=7, block_size=block),
}


@st.composite
def analyzer_problems(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6) | st.sampled_from([16, 17, 33]), min_size=rank, max_size=rank)))
    hypothesis.assume(int(np.prod(shape)) <= 3000)
    kind = draw(st.sampled_from(["tensor", "channel", "blocked"]))
    keep = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    block = None
    if kind == "tensor":
        ashape = (1,)
    elif kind == "channel":
        ashape = tuple(d if k else 1 for d, k in zip(shape, keep))
    else:
        b = draw(st.sampled_from(_divisors(shape[-1])))
        ashape = tuple(d if k else 1 for d, k in zip(shape[:-1], keep[:-1])) + (shape[-1] // b,)
        block = tuple(1 if k else d for d, k in zip(shape[:-1], keep[:-1])) + (b,)
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * draw(st.sampled_from([1.0, 1e-3, 100.0]))
    specials = [v for v in SPECIALS if not (isinstance(v, float) and np.isnan(v))]
    n_special = draw(st.integers(0, 3))
    for _ in range(n_special):
        x.flat[rng.integers(0, x.size)] = specials[rng.integers(0, len(specials))]
    if draw(st.booleans()):  # signed zeros as the extremes
        x = np.abs(x) * draw(st.sampled_from([1.0, -1.0]))
        x.flat[rng.integers(0, x.size, 1 + x.size // 4)] = 0.0
        x.flat[rng.integers(0, x.size, 1 + x.size // 4)] = -0.0
    batches = 1 + draw(st.integers(0, 2))
    xs = [x] + [x * (1.5 + i) for i in range(batches - 1)]
    return xs, ashape, block


def _analyzer_outcome(name, ashape, block, xs):
    def run():
        an = ANALYZERS[name](ashape, block)
        for x in xs:
            an.update_stats(x)
        state = an.state_dict()
        return [state[k] for k in ("min", "max", "histogram", "bin_edges") if k in state] + [
            e for n, sym in ((255, False), (254, True), (1, False)) for e in an.compute_encodings(n, sym)]
    try:
        return run(), None
    except (RuntimeError, ValueError, TypeError) as e:
        return None, type(e)


@examples(150)
@given(analyzer_problems(), st.sampled_from(sorted(ANALYZERS)), st.sampled_from(X_DTYPES), st.integers(0, 4))
def test_analyzers_every_layout_and_kernel_set_equal_the_scalar_set(problem, name, x_dtype, variant):
    xs, ashape, block = problem
    xs = [x.astype(x_dtype) for x in xs]
    views = [layouts(x, variant) for x in xs]
    note(f"{name} x {xs[0].shape} {np.dtype(x_dtype).name} shape {ashape} block {block} variant {variant}")
    with kernel_set("scalar", 1):
        want, err = _analyzer_outcome(name, ashape, block, [np.array(v, order="C") for v in views])
    for isa in ISAS:
        for threads in (1, None):
            with kernel_set(isa, threads):
                got, got_err = _analyzer_outcome(name, ashape, block, views)
            assert got_err == err, (isa, threads, got_err, err)
            if err is None:
                for i, (g, w) in enumerate(zip(got, want)):
                    _same(g, w, f"{name} isa={isa} threads={threads} output {i}")
