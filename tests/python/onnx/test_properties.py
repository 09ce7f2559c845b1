"""Property-based differential tests of polyquant.onnx and polyquant.quark: for drawn shapes
(rank 0..4, empty, rows up to ~70 elements so vector bodies and tails both run), parameter layouts
(per-tensor, per-axis on any axis incl. negative, blocked incl. a ragged last block), output types,
input / scale dtypes and values (+-0, +-inf, NaN, subnormals, huge, exact k + 0.5 ties and their
float32 neighbours), every memory layout of x (non-contiguous, negative strides, zero-stride
broadcast views, Fortran order) and of the output, and every kernel set with one thread and all,
the result equals bit for bit the scalar kernel set on contiguous copies with one thread; and the
onnx ops equal onnx's reference evaluator where it is defined.

Budget: a fixed, derandomized example set in CI ("polyquant-ci" profile). POLYQUANT_HYPOTHESIS_SCALE
scales it; POLYQUANT_HYPOTHESIS_EXAMPLES=N runs N random examples instead.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import onnx.reference
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, note  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import polyquant  # noqa: E402
import polyquant.onnx as pqo  # noqa: E402
import polyquant.quark as pqq  # noqa: E402
from ..helpers import hypothesis_budget, kernel_set, layouts, values_around_ties  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

examples = hypothesis_budget()[0]


ISAS = polyquant.runtime_info()["supported"]
TP = onnx.TensorProto
Q_OUT = {TP.UINT8: np.uint8, TP.INT8: np.int8, TP.UINT16: np.uint16, TP.INT16: np.int16, TP.UINT4: ml_dtypes.uint4,
         TP.INT4: ml_dtypes.int4, TP.UINT2: ml_dtypes.uint2, TP.INT2: ml_dtypes.int2,
         TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TP.FLOAT8E5M2: ml_dtypes.float8_e5m2,
         TP.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz, TP.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
         TP.FLOAT6E3M2: ml_dtypes.float6_e3m2fn}
QUARK_TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.float16, ml_dtypes.bfloat16]

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-39, 3e38, -3e38, 1e10, -1e10, 2.0**31, 448.0, 464.0]


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype, got.shape, want.shape)
    assert np.array_equal(_bits(got), _bits(want)), f"{what}: {np.flatnonzero(_bits(got) != _bits(want))[:5]}"


@st.composite
def problems(draw, blocked_ok=True):
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6) | st.sampled_from([17, 33, 70]), min_size=rank, max_size=rank)))
    hypothesis.assume(int(np.prod(shape)) <= 3000)
    kind = draw(st.sampled_from(["tensor", "axis", "blocked"] if (rank and blocked_ok) else (["tensor", "axis"] if rank else ["tensor"])))
    axis, block, sshape = 1, 0, ()
    if kind != "tensor":
        axis = draw(st.integers(-rank, rank - 1))
        a = axis % rank
        if kind == "axis":
            sshape = (shape[a],)
        else:
            block = draw(st.integers(1, max(1, shape[a] + 1)))
            sshape = tuple(-(-d // block) if i == a else d for i, d in enumerate(shape))
    elif draw(st.booleans()):
        sshape = (1,)
    n = int(np.prod(shape))
    scale = draw(st.sampled_from([0.5, 0.1, 1 / 255, 0.0123, 2.0**-7, 3.0, 1e-30, 1e30]))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    x = values_around_ties(rng, n, scale, SPECIALS).reshape(shape)
    m = int(np.prod(sshape))
    s = rng.choice(np.array([scale, scale * 2, scale / 3], np.float32), m).astype(np.float32).reshape(sshape)
    return x, s, axis, block, seed


def _variants(fn, want, what):
    for isa in ISAS:
        for threads in (1, None):
            with kernel_set(isa, threads):
                _same(fn(), want, f"{what} isa={isa} threads={threads}")


@examples(300)
@given(problems(), st.sampled_from(list(Q_OUT)), st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]),
       st.integers(0, 4), st.booleans(), st.booleans())
def test_quantize_linear_every_layout_and_kernel_set(problem, out_type, x_dtype, variant, with_zp, saturate):
    x, s, axis, block, seed = problem
    x = x.astype(x_dtype)
    rng = np.random.default_rng(seed)
    dt = Q_OUT[out_type]
    if np.dtype(dt).kind in "iu" or dt in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2):
        info = ml_dtypes.iinfo(dt) if dt in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2) else np.iinfo(dt)
        zp = rng.integers(int(info.min), int(info.max) + 1, s.shape).astype(dt)
    else:
        zp = np.zeros(s.shape, dt)
    args = dict(axis=axis, block_size=block, saturate=int(saturate), output_dtype=None if with_zp else out_type)
    zpa = zp if with_zp else None
    note(f"x {x.shape} {x.dtype} s {s.shape} axis {axis} block {block} out {out_type} zp {with_zp}")
    x = layouts(x, variant)
    with kernel_set("scalar", 1):
        want = pqo.quantize_linear(np.array(x, order="C"), s, zpa, **args)
    _variants(lambda: pqo.quantize_linear(x, s, zpa, **args), want, "Q")
    # out= into a strided view
    if x.ndim and x.size:
        big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), want.dtype)
        pqo.quantize_linear(x, s, zpa, **args, out=big[..., ::2])
        _same(big[..., ::2].copy(), want, "Q out= strided")
    # the evaluator where it is defined (float outputs everywhere; integers for finite in-range q)
    node = onnx.helper.make_node("QuantizeLinear", ["x", "s"] + (["z"] if with_zp else []), ["y"],
                                 **{k: v for k, v in dict(axis=axis, block_size=block or None, saturate=int(saturate),
                                                          output_dtype=None if with_zp else out_type).items() if v is not None})
    feeds = {"x": x, "s": s} | ({"z": zp} if with_zp else {})
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ref = onnx.reference.ReferenceEvaluator(node).run(None, feeds)[0]
        from onnx.reference.ops._quant_utils import reshape_input
        q = (x / reshape_input(s, x.shape, axis, block or None)).astype(np.float64)
    g, w = _bits(want), _bits(ref.astype(want.dtype))
    if np.dtype(want.dtype).kind in "iu" or want.dtype in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2):
        ok = np.isfinite(q) & (np.abs(np.rint(q)) < 2.0**31 - 2.0**17)
        assert np.array_equal(g[ok], w[ok]), "evaluator"
    else:
        assert np.array_equal(g, w), "evaluator"


@examples(100)
@given(problems(), st.sampled_from([np.uint8, np.int8, np.uint16, np.int16, np.int32, ml_dtypes.int4,
                                    ml_dtypes.float8_e4m3fn, ml_dtypes.float6_e2m3fn]),
       st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]), st.integers(0, 4), st.booleans())
def test_dequantize_linear_every_layout_and_kernel_set(problem, x_dtype, s_dtype, variant, with_zp):
    xf, s, axis, block, seed = problem
    rng = np.random.default_rng(seed)
    size = np.dtype(x_dtype).itemsize
    raw = rng.integers(0, 256**size, xf.shape, dtype=np.uint64).astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[size])
    if x_dtype is ml_dtypes.int4:
        raw &= 0x0F
    if x_dtype is ml_dtypes.float6_e2m3fn:
        raw &= 0x3F
    x = raw.view(x_dtype)
    s = s.astype(s_dtype)
    zp = None
    if with_zp and x_dtype is not ml_dtypes.float8_e4m3fn:
        zp = np.full(s.shape, x.reshape(-1)[0] if x.size else 0, dtype=x_dtype)
    args = dict(axis=axis, block_size=block)
    x = layouts(x, variant)
    with kernel_set("scalar", 1):
        want = pqo.dequantize_linear(np.array(x, order="C"), s, zp, **args)
    _variants(lambda: pqo.dequantize_linear(x, s, zp, **args), want, "DQ")
    node = onnx.helper.make_node("DequantizeLinear", ["x", "s"] + (["z"] if zp is not None else []), ["y"], axis=axis,
                                 **({"block_size": block} if block else {}))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ref = onnx.reference.ReferenceEvaluator(node).run(None, {"x": x, "s": s} | ({"z": zp} if zp is not None else {}))[0]
    nan = np.isnan(want.astype(np.float32)) & np.isnan(ref.astype(np.float32))
    assert np.array_equal(_bits(want)[~nan], _bits(ref)[~nan]), "evaluator"


@examples(100)
@given(problems(blocked_ok=False), st.sampled_from(QUARK_TYPES), st.integers(0, 4), st.booleans(),
       st.sampled_from(["quark", "onnx"]))
def test_quark_ops_every_layout_and_kernel_set(problem, t, variant, with_zp, semantics):
    x, s, axis, _, seed = problem
    rng = np.random.default_rng(seed)
    if s.ndim == 1 and s.size == 1 and x.ndim == 0:
        s = s.reshape(())
    if np.dtype(t).kind in "iu":
        info = np.iinfo(t)
        zp = rng.integers(int(info.min), int(info.max) + 1, s.shape, dtype=np.int64).astype(t)
    else:
        zp = rng.choice(np.array([0.0, 1.5, -3.0, np.nan], np.float32), s.shape).astype(t)
    zpa = zp if with_zp else None
    x = layouts(x, variant)
    with kernel_set("scalar", 1):
        want = pqq.extended_quantize_linear(np.array(x, order="C"), s, zpa, axis=axis, semantics=semantics)
    _variants(lambda: pqq.extended_quantize_linear(x, s, zpa, axis=axis, semantics=semantics), want, "Quark Q")
    wv = layouts(want, variant)
    with kernel_set("scalar", 1):
        back = pqq.extended_dequantize_linear(np.array(wv, order="C"), s, zpa, axis=axis, semantics=semantics)
    _variants(lambda: pqq.extended_dequantize_linear(wv, s, zpa, axis=axis, semantics=semantics), back, "Quark DQ")
