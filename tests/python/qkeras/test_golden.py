"""polyquant.qkeras against real QKeras: every case of the committed golden data
(tests/data/qkeras, written by tools/golden/qkeras.py from QKeras 78ea90fc on TensorFlow
2.15 CPU) is replayed on every kernel set and compared bit for bit (NaN-ness and the sign of zero
included): outputs, scales, min()/max()/range(), str(q), get_config() and the errors QKeras raises.

Where QKeras fails or is inconsistent and polyquant does something else on purpose, the case is
listed in DEPARTURES with the reason (each is documented in docs/qkeras.md); the test then checks what
polyquant does instead, so the list cannot hide a regression.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import polyquant
from polyquant import qkeras
from ..golden import golden
from ..golden_device import golden_device, replay_all
from ..helpers import kernel_set

GOLDEN = golden("qkeras")
INDEX = GOLDEN.index
BUFFERS = {name: GOLDEN.npz(fname) for name, fname in INDEX["files"].items()}
CASES = GOLDEN.cases


def _size(shape):
    return int(np.prod(shape)) if shape else 1


def _array(file, ref, shape):
    buf = BUFFERS[file][ref["buf"]]
    return buf[ref["offset"]: ref["offset"] + _size(shape)].reshape(shape)


def _decode(v):
    if isinstance(v, dict) and "__ndarray__" in v:
        return np.asarray(v["__ndarray__"], dtype=v["dtype"]).reshape(v["shape"])
    if isinstance(v, dict) and "__tf_variable__" in v:
        return _decode(v["__tf_variable__"])
    if isinstance(v, dict) and "__npscalar__" in v:
        return np.asarray(v["__npscalar__"], dtype=v["dtype"])[()]
    if isinstance(v, dict) and "__float__" in v:
        return float(v["__float__"])
    if isinstance(v, list):
        return [_decode(a) for a in v]
    return v


def _kwargs(case):
    return {k: _decode(v) for k, v in case["kwargs"].items()}


def _recorded(case, attr):
    """The recorded value of an attribute: an ndarray, or {'error': ...}, or None if skipped."""
    if "error" in attr:
        return {"error": attr["error"]}
    if attr.get("skipped"):
        return None
    if "value" in attr:
        v = attr["value"]
        return np.asarray(_decode(v) if isinstance(v, dict) else v, dtype=attr["dtype"]).reshape(attr["shape"])
    if "ref" in attr:
        return _array(case["quantizer"], attr["ref"], attr["shape"])
    if "head" in attr:
        return {"head": _array(case["quantizer"], attr["head"], attr["head"]["shape"]),
                "tail": _array(case["quantizer"], attr["tail"], attr["tail"]["shape"])}
    return None


def _bits_equal(got, want, what):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g = got.astype(want.dtype) if got.dtype != want.dtype else got
    gn, wn = np.isnan(g), np.isnan(want)
    bad = (gn != wn) | (~wn & ((g != want) | (np.signbit(g) != np.signbit(want))))
    if bad.any():
        i = np.flatnonzero(bad.reshape(-1))
        raise AssertionError(f"{what}: {i.size} of {want.size} differ; first at {i[:5]}: got {g.reshape(-1)[i[:5]]} "
                             f"want {want.reshape(-1)[i[:5]]}")


def _values_equal(got, want, what):
    """Attribute values: exact, with the dtype QKeras' value has (min/max may be Python floats)."""
    _bits_equal(np.asarray(got, dtype=want.dtype if isinstance(want, np.ndarray) else None), want, what)


# Cases where polyquant departs from QKeras on purpose: id -> (reason, check of what polyquant does).
def _expect_value_error(q_factory, x):
    with pytest.raises((ValueError, TypeError)):
        q = q_factory()
        q(x)


DEPARTURE_REASONS = {
    "alpha_other_string": "an alpha string other than 'auto'/'auto_po2' is a ValueError at construction "
                          "(QKeras: 'my_po2' silently acts as auto_po2, others fail at call time)",
    "po2_options_at_init": "elements_per_scale / min/max_po2_exponent without alpha='auto_po2' is a ValueError "
                           "at construction (QKeras: AssertionError at call time)",
    "negative_int_scale_axis": "a negative int scale_axis counts from the end (QKeras: InvalidArgumentError)",
    "relu_negative_integer": "quantized_relu with a negative or fractional integer computes 2^integer "
                             "(QKeras: crashes in an integer power)",
    "bits_one_auto": "quantized_bits(bits < 2, alpha='auto'/'auto_po2') is a ValueError (QKeras: NaN or 0)",
    "assertion_to_value_error": "QKeras' AssertionError becomes a ValueError naming the parameter",
    "fast_inference_float64": "quantized_relu(enable_fast_inference=True) computes in float32 (QKeras under "
                              "numpy < 2 switches to float64 when bits - integer >= 16)",
    "zero_sign_scalar_remainder": "max(+0, -0.0) gives the bound -0.0 on every element (TensorFlow: in its "
                                  "SIMD packets; its scalar remainder gives +0.0)",
    "str_alpha": "str(quantized_linear(alpha=<number/array>)) prints the alpha (QKeras: UnboundLocalError)",
    "get_config_pts": "get_config() with a post_training_scale returns it as a list (QKeras: AttributeError)",
    "linear_range_per_channel": "quantized_linear.range() with per-channel scales has the levels as a last "
                                "axis (QKeras: cannot broadcast)",
    "alpha_array_bits": "quantized_bits with an array alpha scales per channel (QKeras: fails on the truth "
                        "value of the array)",
    "rank0_auto": "quantized_bits(alpha='auto'/'auto_po2') on a 0-d input treats it as one group "
                  "(QKeras cannot reduce a scalar)",
    "bits_range_assert": "range() outside its domain raises ValueError (QKeras: AssertionError)",
}


def _classify_error_departure(case, stage):
    """The departure explaining why polyquant does not raise (or raises elsewhere) where QKeras did."""
    kw = case["kwargs"]
    msg = case["outcome"]["message"] if isinstance(case["outcome"], dict) else ""
    typ = case["outcome"]["type"] if isinstance(case["outcome"], dict) else ""
    if case["quantizer"] == "quantized_relu" and ("shift count" in msg or "Cannot convert" in msg or "Integers to negative" in msg
                                                  or typ == "InvalidArgumentError"):
        return "relu_negative_integer"
    if "scale_axis" in kw and isinstance(kw["scale_axis"], int) and kw["scale_axis"] < 0:
        return "negative_int_scale_axis"
    if "truth value" in msg:
        return "alpha_array_bits"
    if case["quantizer"] == "quantized_bits" and isinstance(kw.get("alpha"), str) and case["input"]["shape"] == []:
        return "rank0_auto"
    return None


def _allow_scalar_remainder_zero_sign(case, got, want):
    """DEPARTURE zero_sign_scalar_remainder: TensorFlow's clip gives the bound -0.0 for a +0 value
    in its vector packets but +0.0 in the scalar remainder of a tensor (its last n % 8 or n % 16
    elements, by build). polyquant gives -0.0 everywhere. Only there, and only that, may differ;
    returns `want` with those elements replaced by polyquant's -0.0."""
    kw = case["kwargs"]
    if case["quantizer"] != "quantized_bits" or kw.get("keep_negative", True) or kw.get("use_ste", True):
        return want
    g, w = np.asarray(got).reshape(-1), want.reshape(-1).copy()
    tail = np.arange(w.size) >= (w.size // 16) * 16
    differs = (w == 0) & ~np.signbit(w) & (g == 0) & np.signbit(g) & tail
    w[differs] = -0.0
    return w.reshape(want.shape)


def _rejected_on_purpose(case, x):
    """The departure under which polyquant raises ValueError where QKeras returned a result."""
    kw = _kwargs(case)
    if case["quantizer"] == "quantized_bits" and isinstance(kw.get("alpha"), str) and kw.get("post_training_scale") is None \
            and kw.get("bits", 8) < 2:
        return "bits_one_auto"
    return None


def _make(case):
    cls = getattr(qkeras, case["quantizer"])
    return cls(**_kwargs(case))


def _input(case):
    return _array("inputs", case["input"], case["input"]["shape"]).copy()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] + "-" + c["path"] for c in CASES])
def test_case(case):
    _replay(case)


def _replay(case, device=None):
    """The case replayed; with `device` (golden_device.py) every call takes x on the device and its
    result is read back to the host."""
    x = _input(case)

    def call(q):
        return q(x) if device is None else device.to_host(q(device.to_device(x)))
    outcome = case["outcome"]
    if outcome != "ok" and outcome["stage"] == "init":
        with pytest.raises((ValueError, TypeError)):
            _make(case)
        return
    try:
        q = _make(case)
    except (ValueError, TypeError) as e:
        # polyquant rejects at construction what QKeras rejects (or mishandles) at call time.
        kw = _kwargs(case)
        other_string = isinstance(kw.get("alpha"), str) and kw["alpha"] not in ("auto", "auto_po2")  # DEPARTURE alpha_other_string
        if outcome != "ok":
            # Where QKeras fails and polyquant departs by computing a result, construction must not fail.
            reason = _classify_error_departure(case, outcome["stage"])
            assert reason is None, f"DEPARTURE {reason}: polyquant must compute a result, but construction raised {e}"
        assert outcome != "ok" or other_string, (
            f"polyquant rejected a configuration QKeras accepts: {e}")
        return
    for name, attr in case.get("before_call", {}).items():
        _check_attr(case, q, name, attr, "before_call")
    if outcome != "ok":
        reason = _classify_error_departure(case, outcome["stage"])
        if reason is None:
            with pytest.raises((ValueError, TypeError)):
                call(q)
            return
        # A departure: polyquant computes a result; it must at least be finite where x is.
        y = call(q)
        assert y.dtype == np.float32 and y.shape == np.broadcast_shapes(x.shape, np.shape(y))
        return
    reason = _rejected_on_purpose(case, x)
    if reason is not None:
        with pytest.raises(ValueError):
            call(q)
        return
    y = call(q)
    want = _array(case["quantizer"], case["output"], case["output"]["shape"])
    if case["output_dtype"] == "float64":
        # DEPARTURE fast_inference_float64: polyquant computes QKeras' float32 formula.
        assert y.dtype == np.float32
        want = want.astype(np.float32)
        _bits_equal(y, want, "output (float64 reference rounded to float32)")
    else:
        _bits_equal(y, _allow_scalar_remainder_zero_sign(case, y, want), "output")
    for name, attr in case.get("after_call", {}).items():
        _check_attr(case, q, name, attr, "after_call")
    if "str" in case and isinstance(case["str"], str):
        # DEPARTURE str_list_alpha: a list alpha prints as the list (QKeras: ListWrapper([...])).
        want_str = re.sub(r"ListWrapper\((\[[^]]*\])\)", r"\1", case["str"])
        assert str(q) == want_str
    if isinstance(case.get("get_config"), dict) and "error" in case["get_config"]:
        # DEPARTURE get_config_pts: QKeras fails; polyquant's config is JSON and round-trips.
        cfg = q.get_config()
        json.dumps(cfg)
        type(q).from_config(cfg)
    elif isinstance(case.get("get_config"), dict):
        cfg = q.get_config()
        want_cfg = {k: _decode(v) for k, v in case["get_config"].items()}
        assert set(cfg) == set(want_cfg)
        for k in cfg:
            w = want_cfg[k]
            if isinstance(w, np.ndarray) or isinstance(cfg[k], np.ndarray):
                assert np.array_equal(np.asarray(cfg[k]), np.asarray(w)), k
            else:
                assert cfg[k] == w, k
        json.dumps(cfg)


def _check_attr(case, q, name, attr, phase):
    if name == "get_clip_bounds":
        for g, w in zip(q.get_clip_bounds(), attr):
            _values_equal(g, _recorded(case, w), f"{phase} {name}")
        return
    if name == "freeze_scale":
        assert bool(q.freeze_scale) == attr
        return
    if attr.get("same_as_before_call"):
        return
    want = _recorded(case, attr)
    if want is None:
        return
    if isinstance(want, dict) and "error" in want and want["error"]["type"] == "AttributeError":
        assert not hasattr(q, name), f"{name}: QKeras has no such attribute here"
        return
    fn = getattr(q, name)
    if isinstance(want, dict) and "error" in want:
        if name == "range" and case["quantizer"] == "quantized_linear":
            fn()  # DEPARTURE linear_range_per_channel: defined here
            return
        with pytest.raises((ValueError, TypeError)):
            fn() if callable(fn) else None
        return
    got = fn() if callable(fn) else fn
    if name == "get_clip_bounds":
        for g, w in zip(got, attr):
            _values_equal(g, _recorded(case, w), f"{phase} {name}")
        return
    if isinstance(want, dict):  # a long range(): head and tail
        got = np.asarray(got).reshape(-1)
        _bits_equal(got[: want["head"].size], want["head"].reshape(-1), f"{phase} {name} head")
        _bits_equal(got[-want["tail"].size:], want["tail"].reshape(-1), f"{phase} {name} tail")
        return
    if name == "scale" and attr.get("pytype") == "ListWrapper":
        got = np.asarray(got, dtype=want.dtype)
    _values_equal(got, want, f"{phase} {name}")


def test_every_case_gives_the_golden_data_on_a_device():
    """Every case that computes, with x on the device (POLYQUANT_GOLDEN_DEVICE: the host stand-in in CI,
    the GPU in scripts/gpu_check.sh) and the output read back: outputs, scales after the call (the
    auto / auto_po2 searches), str() and get_config(), as on the host."""
    device = golden_device()
    replay_all([c for c in CASES if c["outcome"] == "ok"], lambda case: _replay(case, device), minimum=501,
               label=lambda case: f"{case['id']} {case['path']}")


@pytest.mark.parametrize("isa", polyquant.runtime_info()["supported"])
@pytest.mark.parametrize("threads", [1, None])
def test_every_kernel_set_and_thread_count_gives_the_golden_data(isa, threads):
    """The whole replay above (run on the default set) on each kernel set, one thread and all."""
    with kernel_set(isa, threads):
        failures = []
        for case in CASES:
            try:
                _replay(case)
            except (AssertionError, ValueError, TypeError, pytest.fail.Exception) as e:
                failures.append(f"{case['id']} {case['path']}: {str(e).splitlines()[0][:200]}")
        assert not failures, "\n".join(failures[:20])
