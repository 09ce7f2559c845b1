"""The literal gold vectors of QKeras' own tests, replayed through polyquant.qkeras.

tests/data/qkeras/qkeras_own_tests.json holds every literal vector of QKeras' tests for the three
quantizers (qactivation_test, leakyrelu_test, qnoise_test, min_max_test, range_test at the pinned
commit 78ea90fc; the deleted quantized_linear tests from d7b20af), each with the assertion the test
makes and what QKeras at the pinned commit actually returns (qkeras_* fields, float32 bit patterns
where given, recorded by tools/golden/qkeras.py on TensorFlow CPU).

Every vector becomes one test case below. polyquant must reproduce what QKeras returns bit for bit
(NaN-ness and the sign of zero included) and must also pass the test's own assertion (listed
expected values with the test's tolerance, exact where the test is exact). Where polyquant departs
on purpose (DEPARTURE_REASONS of qkeras/test_golden.py), the case checks what polyquant does
instead. `test_every_vector_has_a_branch` makes sure no vector is silently skipped.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest

import polyquant
from polyquant import qkeras
from ..golden import golden
from ..helpers import kernel_set
from .test_golden import DEPARTURE_REASONS

OWN = golden("qkeras").json("qkeras_own_tests.json")
VECTORS = OWN["vectors"]
N_VECTORS = 104


# ------------------------------------------------------------------------------------------------
# helpers


def _f32_from_hex(hexes, shape):
    return np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32).reshape(shape)


def _f32(values):
    """A recorded float32 value list (stored as float64, exactly) back to float32, -0.0 kept."""
    a = np.asarray(values, dtype=np.float64)
    b = a.astype(np.float32)
    assert np.array_equal(b.astype(np.float64), a, equal_nan=True), "recorded value is not a float32"
    return b


def _bits_equal(got, want, what):
    """Same shape, and the same float32 bits (any NaN equals any NaN; the sign of zero matters)."""
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g = got.astype(np.float32) if got.dtype != np.float32 else got
    w = want.astype(np.float32) if want.dtype != np.float32 else want
    gn, wn = np.isnan(g), np.isnan(w)
    bad = (gn != wn) | (~wn & (g.view(np.uint32) != w.view(np.uint32)))
    assert not bad.any(), f"{what}: got {g.reshape(-1)[bad.reshape(-1)]} want {w.reshape(-1)[bad.reshape(-1)]} (all: {g} vs {w})"


def _scalar_bits_equal(got, want, what):
    _bits_equal(np.asarray(got, dtype=np.float64).astype(np.float32), np.float32(want), what)


def _input(v):
    """The input as the QKeras test passed it: a Python list where the note says so, else a
    numpy array of the recorded dtype (QKeras casts it to float32)."""
    if "Python list" in v.get("note", ""):
        return v["input"]
    return np.asarray(v["input"], dtype=np.dtype(v.get("input_dtype", "float32")))


def _make(v, kwargs=None):
    return getattr(qkeras, v["quantizer"])(**(v["kwargs"] if kwargs is None else kwargs))


def _tolerance(assertion):
    """rtol of an 'assert_allclose rtol=R' assertion, else None (exact)."""
    if assertion.startswith("assert_allclose rtol="):
        return float(assertion.split("=", 1)[1])
    return None


# ------------------------------------------------------------------------------------------------
# which branch handles a vector (every vector must have exactly one)


def branch(v) -> str:
    a = v["assertion"]
    keys = set(v)
    if isinstance(v["kwargs"], list):
        assert a.startswith("assert_array_equal(q1(x), q2(x))")
        return "two_quantizers"
    if a == "expected == q.min(), q.max() (no call)":
        return "min_max"
    if a.startswith("assert_allclose(q.range()"):
        return "range"
    if a == "q.scale.shape == expected":
        return "scale_shape"
    if a == "assert_allclose(gradient, expected)":
        return "gradient_explicit"
    if a == "gradient == ((x >= q.min()) & (x <= q.max()))":
        return "gradient_formula"
    if a.startswith("q(-1000)==min"):
        return "linear_min_max_values"
    if "qkeras_output" in keys and "input" in keys and not {"expected_gradient", "qkeras_values"} & keys:
        if a.startswith(("assert_allclose rtol=", "assert_array_equal (output)", "assert_equal",
                         "tf.equal(res, q.max()", "tf.debugging.assert_equal(q.scale")):
            return "output"
    raise AssertionError(f"no branch for vector {v['test']} with assertion {a!r}")


EXPECTED_BRANCH_COUNTS = {
    "output": 37,
    "two_quantizers": 1,
    "min_max": 22,
    "range": 10,
    "scale_shape": 6,
    "gradient_explicit": 4,
    "gradient_formula": 12,
    "linear_min_max_values": 12,
}


def _id(i, v):
    test = v["test"].split("::", 1)[1].replace("TestQuantizedLinear::", "linear.")
    kw = v["kwargs"]
    if isinstance(kw, list):
        kws = "+".join(",".join(f"{k}={x}" for k, x in d.items()) for d in kw)
    else:
        kws = ",".join(f"{k}={x}" for k, x in kw.items() if k not in ("use_variables", "use_stochastic_rounding"))
    if "update_qnoise_factor" in v:
        kws += f",q={v['update_qnoise_factor']}"
    return f"{i:03d}-{test}-{kws}".replace(" ", "")


IDS = [_id(i, v) for i, v in enumerate(VECTORS)]


def test_every_vector_has_a_branch():
    """No vector is silently skipped: the file has all 104 vectors, each has exactly one branch
    below, and the branch counts are those of the QKeras tests (a new kind of vector fails here
    until it is handled)."""
    assert len(VECTORS) == N_VECTORS
    assert OWN["versions"]["qkeras_commit"] == "78ea90fc381fef23faa4db0e1d88bd1173c1c644"
    counts: dict[str, int] = {}
    for v in VECTORS:
        b = branch(v)
        counts[b] = counts.get(b, 0) + 1
    assert counts == EXPECTED_BRANCH_COUNTS
    assert len(set(IDS)) == len(IDS)
    assert set(BRANCHES) == set(EXPECTED_BRANCH_COUNTS)


# ------------------------------------------------------------------------------------------------
# the branches


def check_output(v):
    q = _make(v)
    if "update_qnoise_factor" in v:
        q.update_qnoise_factor(v["update_qnoise_factor"])
    y = q(_input(v))
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    assert v["qkeras_output_dtype"] == "float32"
    # 1. what QKeras returns, bit for bit
    want = _f32_from_hex(v["qkeras_output_f32_hex"], v["shape"])
    _bits_equal(y, want, "output vs QKeras")
    _bits_equal(want, _f32(v["qkeras_output"]), "recorded hex vs recorded values")  # data self-check
    if "qkeras_scale" in v:
        _bits_equal(np.asarray(q.scale), _f32(v["qkeras_scale"]), "scale vs QKeras")
    # 2. the test's own assertion
    a = v["assertion"]
    rtol = _tolerance(a)
    if rtol is not None:
        np.testing.assert_allclose(y, np.asarray(v["expected"], dtype=np.float64), rtol=rtol)
        if v["expected_equals_qkeras_exactly"]:
            np.testing.assert_array_equal(y, np.asarray(v["expected"], dtype=np.float32))
    elif a in ("assert_equal", "assert_array_equal (output)"):
        np.testing.assert_array_equal(y, np.asarray(v["expected"], dtype=np.float32))
        if "expected_scale" in v:
            np.testing.assert_array_equal(q.scale, np.asarray(v["expected_scale"], dtype=np.float32))
    elif a.startswith("tf.equal(res, q.max() * [-1, 1, 1, 1, 1])"):
        np.testing.assert_array_equal(y, np.float32(q.max()) * np.array([-1, 1, 1, 1, 1], np.float32))
        np.testing.assert_array_equal(y, np.asarray(v["expected"], dtype=np.float32))
    elif a.startswith("tf.debugging.assert_equal(q.scale, expected_scale)"):
        assert np.shape(q.scale) == np.shape(v["expected_scale"])
        np.testing.assert_array_equal(q.scale, np.asarray(v["expected_scale"], dtype=np.float32))
    else:  # pragma: no cover - branch() only admits the assertions above
        raise AssertionError(a)


def check_two_quantizers(v):
    """test_quantized_relu_fast_inference: q1(x) == q2(x) with and without the fast path.
    DEPARTURE fast_inference_float64: QKeras' fast path returns float64 for a float64 input;
    polyquant computes QKeras' float32 formula and returns float32 (its values equal QKeras')."""
    assert "fast_inference_float64" in DEPARTURE_REASONS
    x = _input(v)
    assert x.dtype == np.float64
    outs = [_make(v, kw)(x) for kw in v["kwargs"]]
    assert v["qkeras_output_dtype"] == ["float32", "float64"]
    for y, recorded in zip(outs, v["qkeras_output"]):
        assert y.dtype == np.float32  # the departure: float32 for the fast path too
        _bits_equal(y, _f32(recorded), "output vs QKeras")
    _bits_equal(outs[0], outs[1], "fast path vs normal path")  # the test's assertion


def check_min_max(v):
    q = _make(v)
    _scalar_bits_equal(q.min(), v["qkeras_min"], "min() vs QKeras")
    _scalar_bits_equal(q.max(), v["qkeras_max"], "max() vs QKeras")
    assert q.min() == v["expected_min"] and q.max() == v["expected_max"]


def check_range(v):
    q = _make(v)
    r = np.asarray(q.range())
    assert str(r.dtype) == v["qkeras_range_dtype"], r.dtype
    want = np.asarray(v["qkeras_range"], dtype=v["qkeras_range_dtype"])
    assert r.shape == want.shape
    assert np.array_equal(r, want) and np.array_equal(np.signbit(r), np.signbit(want))
    np.testing.assert_allclose(r, np.asarray(v["expected_range"], dtype=np.float64), rtol=1e-5)
    assert v["expected_equals_qkeras_exactly"]


def check_scale_shape(v):
    assert v["input"].startswith("tf.ones(") and v["input"].endswith(")"), v["input"]
    assert list(ast.literal_eval(v["input"][len("tf.ones("):-1])) == v["shape"], v["input"]
    q = _make(v)
    q(np.ones(v["shape"], dtype=np.float32))
    scale = np.asarray(q.scale)
    assert list(scale.shape) == v["expected_scale_shape"] == v["qkeras_scale_shape"]
    _bits_equal(scale, _f32(v["qkeras_scale"]), "scale vs QKeras")


def check_gradient_explicit(v):
    x = np.asarray(v["input"], dtype=np.float32)
    q = _make(v)
    _bits_equal(q(x), _f32(v["qkeras_output"]), "output vs QKeras")
    g = q.gradient(x)
    assert g.dtype == np.float32 and g.shape == x.shape
    _bits_equal(g, _f32(v["qkeras_gradient"]), "gradient vs QKeras")
    np.testing.assert_allclose(g, np.asarray(v["expected_gradient"], dtype=np.float64))


def check_gradient_formula(v):
    x = np.asarray(v["input"], dtype=np.float32)
    q = _make(v)
    _bits_equal(q(x), _f32(v["qkeras_output"]), "output vs QKeras")
    _scalar_bits_equal(q.min(), v["qkeras_min"], "min() vs QKeras")
    _scalar_bits_equal(q.max(), v["qkeras_max"], "max() vs QKeras")
    g = q.gradient(x)
    _bits_equal(g, _f32(v["qkeras_gradient"]), "gradient vs QKeras")
    formula = ((x >= q.min()) & (x <= q.max())).astype(np.float32)
    np.testing.assert_array_equal(g, formula)  # the test's assertion
    np.testing.assert_array_equal(g, np.asarray(v["expected_gradient"], dtype=np.float32))


def check_linear_min_max_values(v):
    q = _make(v)
    mn, mx = np.float32(q.min()), np.float32(q.max())
    _scalar_bits_equal(mn, v["qkeras_min"], "min() vs QKeras")
    _scalar_bits_equal(mx, v["qkeras_max"], "max() vs QKeras")
    rec = v["qkeras_values"]

    def at(value):
        return q(np.array([value], dtype=np.float32))[0]

    got = {"q(-1000)": at(-1000.0), "q(1000)": at(1000.0), "q(min)": at(mn), "q(max)": at(mx)}
    if v["kwargs"]["bits"] != 1:
        got["q(midpoint)"] = at((mn + mx) / np.float32(2))
    assert set(got) == set(rec)
    for k, val in got.items():
        _scalar_bits_equal(val, rec[k], f"{k} vs QKeras")
    # the test's assertions
    assert got["q(-1000)"] == mn and got["q(1000)"] == mx
    assert got["q(min)"] == mn and got["q(max)"] == mx
    if "q(midpoint)" in got:
        assert got["q(midpoint)"] != mn and got["q(midpoint)"] != mx


BRANCHES = {
    "output": check_output,
    "two_quantizers": check_two_quantizers,
    "min_max": check_min_max,
    "range": check_range,
    "scale_shape": check_scale_shape,
    "gradient_explicit": check_gradient_explicit,
    "gradient_formula": check_gradient_formula,
    "linear_min_max_values": check_linear_min_max_values,
}


@pytest.mark.parametrize("v", VECTORS, ids=IDS)
def test_vector(v):
    BRANCHES[branch(v)](v)


@pytest.mark.parametrize("isa", polyquant.runtime_info()["supported"])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_vector_on_every_kernel_set(isa, threads):
    """All vectors again on each kernel set, with one and two threads."""
    failures = []
    with kernel_set(isa, threads):
        for name, v in zip(IDS, VECTORS):
            try:
                BRANCHES[branch(v)](v)
            except AssertionError as e:
                failures.append(f"{name}: {str(e).splitlines()[0][:200]}")
    assert not failures, "\n".join(failures)
