"""polyquant.aimet against aimet-torch 2.42.0 (CPU), case by case, bit for bit.

The golden data (tests/data/aimet, made by tools/golden/aimet.py, which runs aimet-torch
itself; see docs/golden-data.md) is replayed through polyquant.aimet with numpy inputs. CI never installs
aimet-torch or torch.

Groups (each a test function, parametrized by case id, so ``-k functional`` etc. selects one):
  functional  quantize / quantize_dequantize / dequantize, every overload form; quantize_dequantize
              without gradients, which AIMET computes through torch.fake_quantize_* where eligible
              (the case's "path" field says which way AIMET went)
  grad        the training path: quantize_grad / quantize_dequantize_grad / dequantize_grad return
              (output, grad_tensor, grad_scale, grad_offset) for a given grad_output; for
              quantize_dequantize also the no-grad output of the same inputs
  module      Quantize / QuantizeDequantize: min/max set directly, get_scale/get_offset/get_min/get_max,
              forward; compute_encodings() over several batches
  lpbq        GroupedBlockQuantizeDequantize
  analyzer    MinMax / Percentile / Sqnr / TfEnhanced encoding analyzers
  encodings   get_legacy_encodings() and get_encodings().to_qnn_encoding_dict(version, input_shape)
  errors      bad input: the exception class (AIMET's, or a documented equivalent) and a message that
              names the parameter

Comparison: dtype, shape and the bit pattern of every element (NaN payload and sign, and the sign of
zero, included).
"""

from __future__ import annotations

import builtins
import json
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import polyquant.aimet as pa
from ..golden import golden
from ..golden_device import golden_device, replay_all

GOLDEN = golden("aimet")
INDEX = GOLDEN.index
POOLS = {k[len("pool_"):]: GOLDEN.arrays[k] for k in GOLDEN.arrays.files}
CASES = GOLDEN.cases


def _cases(group, pred=lambda c: True):
    sel = [c for c in CASES if c["group"] == group and pred(c)]
    return pytest.mark.parametrize("case", [pytest.param(c, id=c["id"]) for c in sel])


# ------------------------------------------------------------------------------------------------
# arrays and comparison


def arr(spec: list | None) -> np.ndarray | None:
    """An array spec is [dtype, shape, start] into the flat pool of that dtype."""
    if spec is None:
        return None
    dtype, shape, start = spec
    n = int(np.prod(shape, dtype=np.int64))
    a = POOLS[dtype][start:start + n]
    if dtype == "bfloat16":
        a = a.view(ml_dtypes.bfloat16)
    return a.reshape(shape).copy()


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def check(cid: str, what: str, got, spec: list) -> None:
    want = arr(spec)
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{cid} {what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{cid} {what}: shape {got.shape} != {want.shape}"
    g, w = _bits(got).reshape(-1).copy(), _bits(want).reshape(-1).copy()
    if got.dtype.kind == "f" or got.dtype == ml_dtypes.bfloat16:
        # NaN-ness is compared, not NaN payloads: torch's payload depends on which of its SIMD or
        # scalar loops ran (bfloat16 NaNs come out as 0x7fc0 or 0xffff, float32 NaNs keep either
        # operand's payload), which is not part of AIMET's arithmetic (README, AIMET departures).
        gn = np.isnan(got.astype(np.float32) if got.dtype == ml_dtypes.bfloat16 else got).reshape(-1)
        wn = np.isnan(want.astype(np.float32) if want.dtype == ml_dtypes.bfloat16 else want).reshape(-1)
        g[gn] = 0
        w[wn] = 0
        g[gn & ~wn] = 1  # a NaN where AIMET has a number (or the reverse) still differs
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (
        f"{cid} {what}: {bad.size} of {g.size} differ, first at {bad[:6].tolist()}: "
        f"got {got.reshape(-1)[bad[:6]].tolist()} ({[hex(int(v)) for v in g[bad[:6]]]}) "
        f"want {want.reshape(-1)[bad[:6]].tolist()} ({[hex(int(v)) for v in w[bad[:6]]]})")


# ------------------------------------------------------------------------------------------------
# errors: AIMET's class, or a documented equivalent

# AIMET raises these by accident of its implementation; polyquant raises the listed class instead.
ERROR_EQUIVALENTS = {
    # a float bitwidth reaches int.bit_length() inside AIMET's grid check (in a fresh process; a
    # cached int grid of equal value makes the same call succeed, see the generator's README)
    "AttributeError": (TypeError,),
    # bitwidth 64 through torch.fake_quantize_per_tensor_affine: pybind's int64 overflow
    "ValueError:Overflow when unpacking long long": (ValueError, RuntimeError),
    # AIMET's own RuntimeError subclass for "no statistics"
    "StatisticsNotFoundError": (RuntimeError,),
}


def expected_exception(err: dict) -> tuple[type, ...]:
    key = f"{err['class']}:{err['message']}"
    for k, v in ERROR_EQUIVALENTS.items():
        if key.startswith(k):
            return v
    cls = getattr(builtins, err["class"], None)
    assert isinstance(cls, type) and issubclass(cls, BaseException), f"unmapped AIMET exception {err}"
    return (cls,)


def names_param(message: str, param) -> bool:
    params = param if isinstance(param, list) else [param]
    return any(re.search(p.replace("_", "[ _]"), message, re.IGNORECASE) for p in params)


# ------------------------------------------------------------------------------------------------
# functional calls


def _args(case) -> tuple[list, dict]:
    args = [tuple(a) if isinstance(a, list) else a for a in case["call"]["args"]]
    kwargs = dict(case["call"]["kwargs"])
    if isinstance(kwargs.get("block_size"), list):
        kwargs["block_size"] = tuple(kwargs["block_size"])
    return args, kwargs


def _inputs(case):
    i = case["inputs"]
    return arr(i["tensor"]), arr(i["scale"]), arr(i["offset"])


def _on(device, *arrays):
    """The arrays on `device` (golden_device.py; None: as they are)."""
    if device is None:
        return arrays
    return tuple(None if a is None else device.to_device(a) for a in arrays)


def call_functional(case, device=None):
    """The case's call; with `device`, on device arrays, the results read back to the host."""
    args, kwargs = _args(case)
    x, s, o = _on(device, *_inputs(case))
    out = getattr(pa, case["op"])(x, s, o, *args, **kwargs)
    return out if device is None else device.outputs_to_host(out)


def call_grad(case, device=None):
    args, kwargs = _args(case)
    g, x, s, o = _on(device, arr(case["grad_output"]), *_inputs(case))
    out = getattr(pa, case["op"] + "_grad")(g, x, s, o, *args, **kwargs)
    return out if device is None else device.outputs_to_host(out)


@_cases("functional")
def test_functional(case):
    if case["outcome"] == "error":
        with pytest.raises(expected_exception(case["error"])):
            call_functional(case)
        return
    check(case["id"], f"output ({case['path']})", call_functional(case), case["output"])


@_cases("grad")
def test_grad(case):
    if case["outcome"] == "error":
        with pytest.raises(expected_exception(case["error"])):
            call_grad(case)
        return
    check_grad(case, call_grad(case))


def check_grad(case, out):
    assert isinstance(out, tuple) and len(out) == 4
    check(case["id"], "output", out[0], case["output"])
    check(case["id"], "grad_tensor", out[1], case["grad_tensor"])
    for i, nm in ((2, "grad_scale"), (3, "grad_offset")):
        check_sum(case["id"], nm, out[i], case[nm], case["inputs"]["tensor"][0])


def test_functional_and_grad_cases_on_a_device():
    """Every functional and training-path case that computes, with its arrays on the device
    (POLYQUANT_GOLDEN_DEVICE: the host stand-in in CI, the GPU in scripts/gpu_check.sh), the results
    read back: AIMET's bits (the reduced gradients as on the host: exact sums, within the same
    tolerance of torch's own order), and the host's bits for the gradient sums."""
    device = golden_device()

    def replay(case):
        if case["group"] == "functional":
            check(case["id"], f"output ({case['path']})", call_functional(case, device), case["output"])
            return
        on_device = call_grad(case, device)
        check_grad(case, on_device)
        for i, nm in ((2, "grad_scale"), (3, "grad_offset")):  # exact sums: the host's bits
            host = call_grad(case)[i]
            assert np.asarray(on_device[i]).tobytes() == np.asarray(host).tobytes(), f"{case['id']} {nm}: not the host's"

    replay_all([c for c in CASES if c["group"] in ("functional", "grad") and c["outcome"] == "ok"], replay, minimum=2501)


def test_analyzer_cases_on_a_device():
    """Every encoding-analyzer case (MinMax, Percentile, Sqnr, TfEnhanced) with its batches on the device
    (POLYQUANT_GOLDEN_DEVICE), the encodings against AIMET's, as on the host."""
    device = golden_device()
    replay_all([c for c in CASES if c["group"] == "analyzer" and c["outcome"] == "ok"],
               lambda case: replay_analyzer(case, device), minimum=151)


@_cases("grad", lambda c: c["id"].startswith("grad/zero_sign/"))
def test_grad_reduced_zero_signs(case):
    # Every term and sum of these cases is exact, so the reduced gradients must equal aimet-torch's
    # bit for bit, the sign of every zero included: -0.0 where a scale element gets one -0.0 term
    # (torch reduces nothing there), +0.0 where several or none are summed.
    out = call_grad(case)
    for i, nm in ((2, "grad_scale"), (3, "grad_offset")):
        check(case["id"], nm, out[i], case[nm])


# Relative error allowed for a reduced gradient: torch sums the per-element terms in the working
# precision in its own order, polyquant in float64 rounded once (README, AIMET departures).
SUM_RTOL = {"float16": 1e-2, "bfloat16": 6e-2, "float32": 2e-5, "float64": 1e-12}


def check_sum(cid: str, what: str, got, spec: list, x_dtype: str) -> None:
    want = arr(spec)
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, f"{cid} {what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = np.maximum(np.abs(w), 1e-30)
    with np.errstate(invalid="ignore"):
        ok = (np.isnan(g) == np.isnan(w)) & ((g == w) | np.isnan(w) | (np.abs(g - w) <= SUM_RTOL[x_dtype] * scale + 1e-6))
    assert ok.all(), f"{cid} {what}: got {g[~ok][:6].tolist()} want {w[~ok][:6].tolist()}"


@_cases("grad", lambda c: c["op"] == "quantize_dequantize" and c["outcome"] == "ok")
def test_grad_inputs_without_grad(case):
    # the same inputs through quantize_dequantize (AIMET's no-grad path, see path_no_grad)
    if "output_no_grad_error" in case:
        with pytest.raises(expected_exception(case["output_no_grad_error"])):
            call_functional(case)
        return
    check(case["id"], f"output ({case['path_no_grad']})", call_functional(case), case["output_no_grad"])


# ------------------------------------------------------------------------------------------------
# objects (quantizers and analyzers) rebuilt from their JSON description


def build(spec: dict):
    def conv(k, v):
        if isinstance(v, dict) and "class" in v:
            return build(v)
        if k in ("block_size", "block_grouping", "shape") and isinstance(v, list):
            return tuple(v)
        return v

    args = [tuple(a) if isinstance(a, list) else conv("", a) for a in spec.get("args", [])]
    kwargs = {k: conv(k, v) for k, v in spec.get("kwargs", {}).items()}
    return getattr(pa, spec["class"])(*args, **kwargs)


def run_steps(case):
    obj = None
    for stp in case["steps"]:
        do = stp["do"]
        if do == "construct":
            obj = build(stp["spec"])
        elif do == "set":
            setattr(obj, stp["attr"], arr(stp["value"]))
        elif do == "call":
            obj(arr(stp["x"]))
        elif do == "update_stats":
            obj.update_stats(arr(stp["x"]))
        elif do == "compute_encodings":
            obj.compute_encodings(stp["num_steps"], stp["is_symmetric"])
        elif do == "calibrate":
            with obj.compute_encodings():
                obj(arr(stp["x"]))
        elif do == "get_encodings":
            shape = stp.get("input_shape")
            obj.get_encodings().to_qnn_encoding_dict(stp["encoding_version"],
                                                     input_shape=tuple(shape) if shape is not None else None)
        else:
            raise AssertionError(do)
    return obj


@_cases("errors")
def test_errors(case):
    if case.get("kind") == "functional":
        run = lambda: call_functional(case)  # noqa: E731
    else:
        run = lambda: run_steps(case)  # noqa: E731
    if case["outcome"] == "ok":
        run()  # AIMET accepted it: so must polyquant
        return
    with pytest.raises(expected_exception(case["error"])) as ei:
        run()
    assert names_param(str(ei.value), case["param"]), (
        f"{case['id']}: the message should name {case['param']!r}: {ei.value}")


# ------------------------------------------------------------------------------------------------
# quantizer modules and LPBQ


def _apply(q, x, device):
    """q(x); with `device` (golden_device.py), x on the device and the result read back."""
    return q(x) if device is None else device.to_host(q(device.to_device(x)))


def prepare(case, device=None):
    """Build the quantizer, set min/max or calibrate as AIMET did; check what was observed on the way
    (with `device`: every batch on the device)."""
    cid = case["id"]
    q = build(case["spec"])
    assert bool(q.is_initialized()) == case["initialized_at_start"], cid
    if "set_min" in case:
        q.min = arr(case["set_min"])
        assert bool(q.is_initialized()) == case["initialized_after_min"], f"{cid}: is_initialized after min only"
        q.max = arr(case["set_max"])
    if "calibration" in case:
        # one compute_encodings() context over the batches; AIMET's forward inside it uses each
        # batch's own (dynamic) encodings; the analyzer's result is set on leaving the context.
        fail_at = case.get("calibration_error_at")

        def calibrate():
            with q.compute_encodings():
                for i, b in enumerate(case["calibration"]):
                    y = _apply(q, arr(b["x"]), device)
                    if i == fail_at:
                        raise AssertionError(f"{cid}: AIMET raised on calibration batch {i}: {case['calibration_error']}")
                    check(cid, f"calibration batch {i} ({b['path']})", y, b["output"])

        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always")
            if fail_at is not None:
                with pytest.raises(expected_exception(case["calibration_error"])):
                    calibrate()
            else:
                calibrate()
        # AIMET warns ("Infinite or NaN values detected within input!", "Extreme values detected
        # within input!") when the calibrated range is non-finite or within 5% of the dtype's max
        want = {w["category"] for w in case["calibration_warnings"]}
        got = {type(w.message).__name__ for w in wlist if issubclass(w.category, UserWarning)}
        assert bool(got) == bool(want), (
            f"{cid}: AIMET warned {case['calibration_warnings']}, polyquant {[str(w.message) for w in wlist]}")
    return q


def check_state(case, q):
    cid, stt = case["id"], case["state"]
    assert bool(q.is_initialized()) == stt["is_initialized"], cid
    for nm in ("get_scale", "get_offset", "get_min", "get_max", "get_per_channel_scale"):
        if nm + "_error" in stt:
            with pytest.raises(expected_exception(stt[nm + "_error"])):
                getattr(q, nm)()
        elif nm in stt:
            got = getattr(q, nm)()
            if stt[nm] is None:
                assert got is None, f"{cid}: {nm}() should be None (uninitialized)"
            else:
                check(cid, nm + "()", got, stt[nm])
    check(cid, "min", q.min, stt["min"])
    check(cid, "max", q.max, stt["max"])


def check_forward(case, q, device=None):
    cid = case["id"]
    for f in case["forward"]:
        x = arr(f["x"])
        if "output_no_grad_error" in f:
            with pytest.raises(expected_exception(f["output_no_grad_error"])):
                _apply(q, x, device)
        else:
            check(cid, f"forward {x.dtype} ({f['path_no_grad']})", _apply(q, x, device), f["output_no_grad"])


def check_forward_training(case, q):
    # AIMET's forward with grad enabled (min/max are parameters) computes the reference formula; it
    # equals the functional training path with the quantizer's own scale and offset.
    cid = case["id"]
    scale, offset = q.get_scale(), q.get_offset()
    for f in case["forward"]:
        x = arr(f["x"])
        fn = pa.quantize_grad if case["spec"]["class"] == "Quantize" else pa.quantize_dequantize_grad
        run = lambda: fn(np.zeros_like(x), x, scale, offset, q.qmin, q.qmax, block_size=q.block_size)  # noqa: E731
        if "output_train_error" in f:
            with pytest.raises(expected_exception(f["output_train_error"])):
                run()
        else:
            check(cid, f"training forward {x.dtype}", run()[0], f["output_train"])


def _module_case(case, device=None):
    if case["outcome"] == "error":
        with pytest.raises(expected_exception(case["error"])):
            build(case["spec"])
        return None
    q = prepare(case, device)
    check_state(case, q)
    return q


def test_module_and_lpbq_cases_on_a_device():
    """The quantizer modules (Quantize, QuantizeDequantize, LPBQ) called on device tensors
    (POLYQUANT_GOLDEN_DEVICE): calibration batches, the state it leaves and the forward outputs
    against AIMET's (the module's scale and offset go to the tensor's device for each call, as AIMET's
    parameters live on the module's device)."""
    device = golden_device()
    replay_all([c for c in CASES if c["group"] in ("module", "lpbq") and c["outcome"] == "ok"],
               lambda case: check_forward(case, _module_case(case, device), device), minimum=901)


@_cases("module")
def test_module(case):
    q = _module_case(case)
    if q is not None:
        check_forward(case, q)


@_cases("module", lambda c: c["outcome"] == "ok")
def test_module_training_forward(case):
    check_forward_training(case, _module_case(case))


@_cases("lpbq")
def test_lpbq(case):
    q = _module_case(case)
    if q is not None:
        check_forward(case, q)


@_cases("lpbq", lambda c: c["outcome"] == "ok")
def test_lpbq_training_forward(case):
    check_forward_training(case, _module_case(case))


# ------------------------------------------------------------------------------------------------
# encodings (JSON-like dicts compared through a canonical JSON text: types, key sets and every float)


def canonical(v):
    if isinstance(v, dict):
        return {str(k): canonical(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [canonical(x) for x in v]
    if isinstance(v, np.ndarray):
        return canonical(v.tolist())
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if v != v:
            return {"float": "nan"}
        if v in (float("inf"), float("-inf")):
            return {"float": "inf" if v > 0 else "-inf"}
        return v
    return v


def same_json(got, want) -> bool:
    return json.dumps(canonical(got), sort_keys=True) == json.dumps(want, sort_keys=True)


ENC_CASES = [c for c in CASES if c["group"] in ("module", "lpbq") and "encodings" in c]


@pytest.mark.parametrize("case", [pytest.param(c, id="encodings/" + c["id"]) for c in ENC_CASES])
def test_encodings(case):
    q = prepare(case)
    enc = case["encodings"]
    if "legacy_error" in enc:
        with pytest.raises(expected_exception(enc["legacy_error"])):
            q.get_legacy_encodings()
    else:
        got = q.get_legacy_encodings()
        assert same_json(got, enc["legacy"]), f"{case['id']} legacy: {canonical(got)} != {enc['legacy']}"
    shape = tuple(enc["input_shape"])
    for key, r in enc["qnn"].items():
        version, hint = key.split("/")
        if "same_as" in r:
            r = enc["qnn"][r["same_as"]]
        run = lambda: q.get_encodings().to_qnn_encoding_dict(  # noqa: E731
            version, input_shape=shape if hint == "input_shape" else None)
        if "error" in r:
            with pytest.raises(expected_exception(r["error"])):
                run()
        else:
            got = run()
            assert same_json(got, r["result"]), f"{case['id']} {key}: {canonical(got)} != {r['result']}"


# ------------------------------------------------------------------------------------------------
# encoding analyzers


def _analyzer_updates(case, an, check_stats=None, device=None):
    for i, u in enumerate(case["updates"]):
        (x,) = _on(device, arr(u["x"]))
        if "error" in u:
            with pytest.raises(expected_exception(u["error"])):
                an.update_stats(x)
            return False
        an.update_stats(x)
        if check_stats is not None and "stats" in u:
            check_stats(i, u["stats"])
    return True


@_cases("analyzer")
def test_analyzer(case):
    replay_analyzer(case)


def replay_analyzer(case, device=None):
    """The analyzer case; with `device`, every batch goes to update_stats as a device array (the
    statistics are gathered on the device, the encodings computed from them on the host)."""
    cid = case["id"]
    if case["outcome"] == "error":
        with pytest.raises(expected_exception(case["error"])):
            build(case["spec"])
        return
    an = build(case["spec"])
    if not _analyzer_updates(case, an, device=device):
        return
    for e in case["encodings"]:
        what = f"compute_encodings({e['num_steps']}, {e['is_symmetric']})"
        if "error" in e:
            with pytest.raises(expected_exception(e["error"])):
                an.compute_encodings(e["num_steps"], e["is_symmetric"])
            continue
        mn, mx = an.compute_encodings(e["num_steps"], e["is_symmetric"])
        check(cid, what + " min", mn, e["min"])
        check(cid, what + " max", mx, e["max"])
    r = case["after_reset"]
    an.reset_stats()
    an.update_stats(*_on(device, arr(case["updates"][0]["x"])))
    if "error" in r:
        with pytest.raises(expected_exception(r["error"])):
            an.compute_encodings(255, False)
    else:
        mn, mx = an.compute_encodings(255, False)
        check(cid, "after reset_stats min", mn, r["min"])
        check(cid, "after reset_stats max", mx, r["max"])


STATS_CASES = [c for c in CASES if c["group"] == "analyzer" and any("stats" in u for u in c.get("updates", []))]


@pytest.mark.parametrize("case", STATS_CASES, ids=["analyzer_stats/" + c["id"] for c in STATS_CASES])
def test_analyzer_statistics(case):
    # The running statistics after each batch, as AIMET exposes them (analyzer.observer.get_stats():
    # .min/.max for MinMax, a list of per-encoding histograms with .histogram, .bin_edges, .min,
    # .max) against polyquant's state_dict() (the same statistics, flattened over the encodings).
    an = build(case["spec"])
    cid = case["id"]

    def check_stats(i, want):
        got = an.state_dict()
        if want["kind"] == "minmax":
            for nm in ("min", "max"):
                w = arr(want[nm])
                check(cid, f"batch {i} stats.{nm}", np.asarray(got[nm]).astype(w.dtype).reshape(w.shape), want[nm])
            return
        assert got["histogram"].shape[0] == len(want["histograms"]), cid
        for j, w in enumerate(want["histograms"]):
            for nm in ("histogram", "bin_edges", "min", "max"):
                wa = arr(w[nm])
                check(cid, f"batch {i} histogram {j} {nm}", np.asarray(got[nm][j]).astype(wa.dtype).reshape(wa.shape), w[nm])

    _analyzer_updates(case, an, check_stats)


def test_the_data_is_complete():
    groups = {c["group"] for c in CASES}
    assert groups == {"functional", "grad", "module", "lpbq", "analyzer", "errors"}
    assert ENC_CASES and STATS_CASES
    classes = {c["spec"]["class"] for c in CASES if "spec" in c}
    assert classes >= {"Quantize", "QuantizeDequantize", "GroupedBlockQuantizeDequantize", "MinMaxEncodingAnalyzer",
                       "PercentileEncodingAnalyzer", "SqnrEncodingAnalyzer", "TfEnhancedEncodingAnalyzer"}
    ops = {c["op"] for c in CASES if c["group"] == "functional"}
    assert ops == {"quantize", "quantize_dequantize", "dequantize"}
    paths = {c["path"] for c in CASES if c["group"] == "functional"}
    assert {"fake_quantize_per_tensor", "fake_quantize_per_channel", "reference"} <= paths
