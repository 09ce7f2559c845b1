"""The committed QKeras golden data (tests/data/qkeras, made by tools/golden/qkeras.py
from real QKeras on TensorFlow CPU) is complete, self-consistent and loadable.

These tests need only numpy: CI does not install TensorFlow. The comparisons of polyquant against
this data live with the implementation of the QKeras quantizers.
"""

from __future__ import annotations

import numpy as np
import pytest

from ..golden import golden

GOLDEN = golden("qkeras")
DATA = GOLDEN.dir
PINNED_COMMIT = "78ea90fc381fef23faa4db0e1d88bd1173c1c644"
QUANTIZERS = ("quantized_bits", "quantized_relu", "quantized_linear")
MAX_TOTAL_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def index():
    return GOLDEN.index


@pytest.fixture(scope="module")
def buffers(index):
    return {name: GOLDEN.npz(fname) for name, fname in index["files"].items()}


def _size(shape):
    return int(np.prod(shape)) if shape else 1


def _refs(case):
    """(file, buf, offset, size, dtype-or-None) for every array the case references."""
    q = case["quantizer"]
    yield ("inputs", case["input"]["buf"], case["input"]["offset"], _size(case["input"]["shape"]), "float32")
    if case["outcome"] == "ok":
        o = case["output"]
        yield (q, o["buf"], o["offset"], _size(o["shape"]), case["output_dtype"])
    for phase in ("before_call", "after_call"):
        for v in case.get(phase, {}).values():
            for a in v if isinstance(v, list) else [v]:
                if not isinstance(a, dict):
                    continue
                if "ref" in a:
                    yield (q, a["ref"]["buf"], a["ref"]["offset"], _size(a["shape"]), a["dtype"])
                for part in ("head", "tail"):
                    if part in a:
                        yield (q, a[part]["buf"], a[part]["offset"], _size(a[part]["shape"]), a["dtype"])


def _array(buffers, file, ref, shape=None):
    shape = ref.get("shape", shape)
    buf = buffers[file][ref["buf"]]
    return buf[ref["offset"]: ref["offset"] + _size(shape)].reshape(shape)


def test_files_present_and_small(index):
    assert set(index["files"]) == {"inputs", *QUANTIZERS}
    names = list(index["files"].values()) + ["index.json", "qkeras_own_tests.json"]
    total = 0
    for n in names:
        p = DATA / n
        assert p.is_file(), p
        total += p.stat().st_size
    assert total < MAX_TOTAL_BYTES, total
    extra = {p.name for p in DATA.iterdir()} - set(names)
    assert not extra, "files not described by index.json: %s" % sorted(extra)


def test_versions_and_settings(index):
    v = index["versions"]
    assert v["qkeras_commit"] == PINNED_COMMIT
    assert v["tensorflow"].startswith("2.15"), v["tensorflow"]
    assert int(v["numpy"].split(".")[0]) < 2, v["numpy"]
    assert len(v["qkeras_quantizers_py_sha256"]) == 64
    s = index["settings"]
    assert s["image_data_format"] == "channels_last"
    assert np.float32(s["epsilon"]) == np.float32(1e-7)
    assert s["floatx"] == "float32"
    assert s["learning_phase"] == 0


def test_buffers_are_native_numeric(buffers):
    for file, bufs in buffers.items():
        assert bufs, file
        for name, a in bufs.items():
            assert a.ndim == 1, (file, name)
            assert str(a.dtype) == name, (file, name, a.dtype)
            assert a.dtype.kind in "fiub" and a.dtype.isnative, (file, name)
    assert set(buffers["inputs"]) == {"float32"}


def test_every_reference_in_bounds_and_every_element_used(index, buffers):
    used = {f: {b: np.zeros(a.size, bool) for b, a in bufs.items()} for f, bufs in buffers.items()}
    for c in index["cases"]:
        for file, buf, off, n, dtype in _refs(c):
            assert buf in buffers[file], (c["id"], file, buf)
            assert dtype is None or buf == dtype, (c["id"], buf, dtype)
            assert 0 <= off and off + n <= buffers[file][buf].size, (c["id"], file, buf, off, n)
            used[file][buf][off: off + n] = True
    for file, bufs in used.items():
        for buf, u in bufs.items():
            assert u.all(), "%s/%s: %d elements not referenced by any case" % (file, buf, (~u).sum())


def test_cases_well_formed(index, buffers):
    ids = [c["id"] for c in index["cases"]]
    assert len(ids) == len(set(ids))
    for c in index["cases"]:
        assert c["quantizer"] in QUANTIZERS, c["id"]
        assert isinstance(c["kwargs"], dict), c["id"]
        assert c["input_kind"] in ("numpy", "tf"), c["id"]
        x = _array(buffers, "inputs", c["input"])
        assert x.dtype == np.float32 and list(x.shape) == c["shape"], c["id"]
        if c["outcome"] == "ok":
            y = _array(buffers, c["quantizer"], c["output"])
            # every quantizer is elementwise: same shape as its input
            assert list(y.shape) == c["shape"], c["id"]
            assert str(y.dtype) == c["output_dtype"], c["id"]
            if y.dtype != np.float32:
                # the only non-float32 results: quantized_relu's fast path, which computes in
                # numpy's promoted dtype (float64 once 2**(bits-integer) needs it, numpy < 2)
                assert c["path"] == "relu.fast_inference", c["id"]
                assert y.dtype == np.float64
                assert c["kwargs"]["bits"] - c["kwargs"]["integer"] >= 16, c["id"]
            for k in ("str", "get_config", "after_call", "before_call"):
                assert k in c, (c["id"], k)
            if isinstance(c["str"], dict):
                # QKeras' quantized_linear.__str__ fails (UnboundLocalError) for any numeric or
                # array alpha; that is the only str() failure in the data
                assert c["quantizer"] == "quantized_linear", c["id"]
                alpha = c["kwargs"].get("alpha")
                assert alpha is not None and not isinstance(alpha, str), c["id"]
                assert c["str"]["error"]["type"] == "UnboundLocalError", c["id"]
            else:
                assert c["str"].startswith(c["quantizer"] + "("), c["id"]
        else:
            o = c["outcome"]
            assert set(o) == {"stage", "type", "message"}, c["id"]
            assert o["stage"] in ("init", "call"), c["id"]
            assert o["type"], c["id"]
            assert "output" not in c, c["id"]


def test_coverage(index):
    """Every parameter path of issue 6 and every kind of input is in the data."""
    cases = index["cases"]
    paths = {(c["quantizer"], c["path"]) for c in cases}
    required = {
        "quantized_bits": ["fixed.grid", "fixed.bits_le_0", "fixed.rank", "fixed.qnoise", "fixed.var_name",
                           "fixed.stochastic_inference", "alpha.number", "alpha.list", "alpha.array",
                           "auto.grid", "auto_po2.grid", "auto.scale_axis", "auto_po2.scale_axis", "auto.rank",
                           "auto_po2.rank", "auto_po2.elements_per_scale", "auto_po2.po2_exponent",
                           "post_training_scale", "auto.qnoise", "auto_po2.qnoise", "auto_po2.integer_eps"],
        "quantized_relu": ["relu.grid", "relu.negative_slope", "relu.upper_bound", "relu.qnoise", "relu.var_name",
                           "relu.stochastic_inference", "relu.fast_inference", "relu.rank"],
        "quantized_linear": ["linear.grid", "linear.alpha_number", "linear.alpha_array", "linear.auto.grid",
                             "linear.auto_po2.grid", "linear.auto.scale_axis", "linear.auto_po2.scale_axis",
                             "linear.qnoise", "linear.var_name", "linear.stochastic_inference", "linear.rank",
                             "linear.bad_bits"],
    }
    for q, ps in required.items():
        for p in ps:
            ok = [c for c in cases if c["quantizer"] == q and c["path"] == p and c["outcome"] == "ok"]
            if p == "linear.bad_bits":
                ok = [c for c in cases if c["quantizer"] == q and c["path"] == p]
            assert ok, (q, p)
        for kind in ("random", "ties", "specials", "rank1", "rank3", "empty"):
            assert any(c["quantizer"] == q and c["inputs"] == kind and c["outcome"] == "ok" for c in cases), (q, kind)
        ranks = {len(c["shape"]) for c in cases if c["quantizer"] == q and c["outcome"] == "ok"}
        assert {0, 1, 2, 3, 4} <= ranks, (q, ranks)
    assert len(paths) > 40
    # QKeras' known failures are recorded as expected outcomes, not dropped
    errors = {(c["quantizer"], c["outcome"]["type"]) for c in cases if c["outcome"] != "ok"}
    assert ("quantized_bits", "ValueError") in errors
    assert ("quantized_relu", "AssertionError") in errors
    assert ("quantized_linear", "ValueError") in errors
    assert any(c["input_kind"] == "tf" for c in cases)


def test_ties_inputs_sit_on_half_grid(index, buffers):
    """The near-tie inputs of the fixed-point paths hold exact half-grid points and their
    float32 neighbours (so a rounding-rule mistake cannot pass unnoticed)."""
    n = 0
    for c in index["cases"]:
        if c["path"] != "fixed.grid" or c["inputs"] != "ties" or c["outcome"] != "ok":
            continue
        kw = c["kwargs"]
        ub = kw["bits"] - int(kw.get("keep_negative", True))
        if ub <= 0:
            continue
        step = 2.0 ** (kw["integer"] - ub)
        x = _array(buffers, "inputs", c["input"]).astype(np.float64)
        k = x / step - 0.5
        halves = x[k == np.round(k)]
        assert halves.size >= 4, c["id"]
        up = np.nextafter(halves.astype(np.float32), np.float32(np.inf))
        assert np.isin(up, x.astype(np.float32)).all(), c["id"]
        n += 1
    assert n > 50


def test_quantized_linear_scale_relation(index, buffers):
    """scale == quantization_scale / data_type_scale (float32), as QKeras defines it."""
    n = 0
    for c in index["cases"]:
        if c["quantizer"] != "quantized_linear" or c["outcome"] != "ok":
            continue
        a = c["after_call"]
        if any("error" in a[k] for k in ("scale", "quantization_scale", "data_type_scale")):
            continue

        def get(name):
            r = a[name]
            if "value" in r:
                v = r["value"]
                return np.asarray(float(v["__float__"]) if isinstance(v, dict) else v, dtype=r["dtype"])
            return _array(buffers, "quantized_linear", r["ref"], r["shape"])

        s, qs, dts = get("scale"), get("quantization_scale"), get("data_type_scale")
        if qs.dtype != np.float32:
            continue
        with np.errstate(all="ignore"):
            expect = (qs / dts.astype(np.float32)).astype(np.float32)
        np.testing.assert_array_equal(s.astype(np.float32), expect, err_msg=c["id"])
        n += 1
    assert n > 100


def test_own_tests_file(index):
    own = GOLDEN.json("qkeras_own_tests.json")
    assert own["versions"]["qkeras_commit"] == PINNED_COMMIT
    vecs = own["vectors"]
    tests = {v["test"].split("::")[0] for v in vecs}
    assert {"tests/qactivation_test.py", "tests/leakyrelu_test.py", "tests/qnoise_test.py",
            "tests/min_max_test.py", "tests/range_test.py"} <= tests
    assert any("TestQuantizedLinear" in v["test"] for v in vecs)
    for v in vecs:
        assert v["commit"] in (PINNED_COMMIT, "d7b20af563498e248094e0e0481ce73e69ceaa39"), v["test"]
        assert v["quantizer"] in QUANTIZERS
        assert "assertion" in v
        # where the test asserts exact equality, QKeras at the pinned commit satisfies it
        if v.get("assertion", "").startswith(("assert_equal", "assert_array_equal")) and v.get("expected") is not None:
            assert v["expected_equals_qkeras_exactly"], v["test"]
        if "expected_scale_equals_qkeras_exactly" in v:
            assert v["expected_scale_equals_qkeras_exactly"], v["test"]
        if "qkeras_output_f32_hex" in v and v["qkeras_output_f32_hex"]:
            bits = np.array([int(h, 16) for h in v["qkeras_output_f32_hex"]], dtype=np.uint32)
            vals = np.asarray(v["qkeras_output"], dtype=np.float64).ravel()
            np.testing.assert_array_equal(bits.view(np.float32).astype(np.float64), vals, err_msg=v["test"])
