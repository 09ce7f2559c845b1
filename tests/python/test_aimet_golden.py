"""polyquant.aimet against aimet-torch 2.42.0 (CPU), case by case, bit for bit.

The golden data (tests/data/aimet, made by scripts/aimet_golden/generate.py, which runs aimet-torch
itself; see the README there) is replayed through polyquant.aimet with numpy inputs. CI never installs
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
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import polyquant.aimet as pa

DATA = Path(__file__).resolve().parents[1] / "data" / "aimet"
INDEX = json.loads((DATA / "index.json").read_text())
_NPZ = np.load(DATA / "arrays.npz")
POOLS = {k[len("pool_"):]: _NPZ[k] for k in _NPZ.files}
CASES = INDEX["cases"]


def _cases(group, pred=lambda c: True):
    sel = [c for c in CASES if c["group"] == group and pred(c)]
    return pytest.mark.parametrize("case", sel, ids=[c["id"] for c in sel])


# ------------------------------------------------------------------------------------------------
# arrays and comparison


def arr(spec: dict | None) -> np.ndarray | None:
    if spec is None:
        return None
    n = int(np.prod(spec["shape"], dtype=np.int64))
    a = POOLS[spec["pool"]][spec["start"]:spec["start"] + n]
    if spec["dtype"] == "bfloat16":
        a = a.view(ml_dtypes.bfloat16)
    return a.reshape(spec["shape"]).copy()


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def check(cid: str, what: str, got, spec: dict) -> None:
    want = arr(spec)
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{cid} {what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{cid} {what}: shape {got.shape} != {want.shape}"
    g, w = _bits(got).reshape(-1), _bits(want).reshape(-1)
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


def call_functional(case):
    args, kwargs = _args(case)
    x, s, o = _inputs(case)
    return getattr(pa, case["op"])(x, s, o, *args, **kwargs)


def call_grad(case):
    args, kwargs = _args(case)
    x, s, o = _inputs(case)
    return getattr(pa, case["op"] + "_grad")(arr(case["grad_output"]), x, s, o, *args, **kwargs)


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
    out = call_grad(case)
    assert isinstance(out, tuple) and len(out) == 4
    check(case["id"], "output", out[0], case["output"])
    for i, nm in enumerate(("grad_tensor", "grad_scale", "grad_offset"), start=1):
        check(case["id"], nm, out[i], case[nm])


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


def test_the_data_is_complete():
    groups = {c["group"] for c in CASES}
    assert {"functional", "grad", "errors"} <= groups
    ops = {c["op"] for c in CASES if c["group"] == "functional"}
    assert ops == {"quantize", "quantize_dequantize", "dequantize"}
    paths = {c["path"] for c in CASES if c["group"] == "functional"}
    assert {"fake_quantize_per_tensor", "fake_quantize_per_channel", "reference"} <= paths
