"""polyquant.quark against amd-quark 0.13's CPU custom op, case by case, bit for bit.

The golden data (tests/data/quark, made by tools/golden/quark.py, which builds and runs
Quark's own op in onnxruntime) is replayed on every kernel set with one thread and all. CI never
installs amd-quark or torch. Cases where Quark's op raised must raise here too (same parameter
problem), except the documented departures below, each checked for what polyquant does instead.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyquant
import polyquant.quark as pq_quark
from ..golden import as_stored_dtype, golden
from ..golden_device import golden_device
from ..helpers import kernel_set

GOLDEN = golden("quark")
INDEX = GOLDEN.index
ARRAYS = GOLDEN.arrays
CASES = GOLDEN.cases


def _array(spec: dict) -> np.ndarray:
    return as_stored_dtype(ARRAYS[spec["key"]], spec["dtype"]).reshape(spec["shape"])


def _axis(case: dict) -> int:
    # Quark's kernel reads an absent (or non-integer) axis attribute as 0.
    return int(case["attrs"]["axis"]) if case["axis_attribute"] == "int" else 0


def _run(case: dict, device=None) -> np.ndarray:
    """The case's call; with `device` (golden_device.py), on device arrays, the result back on the host."""
    ins = {i["name"]: _array(i) for i in case["inputs"] if i["name"]}
    if device is not None:
        ins = {k: device.to_device(v) for k, v in ins.items()}
    names = [i["name"] for i in case["inputs"]]
    fn = pq_quark.extended_quantize_linear if case["op"].endswith("QuantizeLinear") and "Dequantize" not in case["op"] \
        else pq_quark.extended_dequantize_linear
    x, scale = ins[names[0]], ins[names[1]]
    zp = ins[names[2]] if len(names) > 2 and names[2] else None
    out = fn(x, scale, zp, axis=_axis(case))
    return out if device is None else device.to_host(out)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _check(case: dict, got: np.ndarray) -> None:
    want = _array(case["output"])
    assert got.dtype == want.dtype, f"{case['id']}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{case['id']}: shape {got.shape} != {want.shape}"
    g, w = _bits(got), _bits(want)
    if case["op"].endswith("DequantizeLinear") and case["inputs"][0]["dtype"] == "float16":
        # ORT's Cast quiets a signalling NaN only in whole 16-element vector blocks (see docs/quark.md):
        # polyquant keeps NaN-ness, sign and payload and sets the quiet bit everywhere.
        w = np.where(np.isnan(want), w | np.uint32(0x00400000), w)
        g = np.where(np.isnan(got), g | np.uint32(0x00400000), g)
    if case["op"].endswith("DequantizeLinear") and case["inputs"][0]["dtype"] == "bfloat16":
        # With a NaN scale and NaN x and zero point, Quark's build returns the scale's NaN (its
        # compiled operand order), polyquant x's canonical NaN: NaN-ness equal (README).
        both = np.isnan(got) & np.isnan(want)
        g = np.where(both, np.uint32(0x7FC00000), g)
        w = np.where(both, np.uint32(0x7FC00000), w)
    bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
    assert bad.size == 0, (f"{case['id']} ({case.get('note', '')}): {bad.size} of {g.size} differ, first at "
                           f"{bad[:5].tolist()}: got {g.reshape(-1)[bad[:5]]} want {w.reshape(-1)[bad[:5]]}")


def _departure(case: dict) -> str | None:
    """Why polyquant does not raise where Quark's op did (None: it must raise too)."""
    names = [i["name"] for i in case["inputs"]]
    if len(names) < 3 or not names[2]:
        return "zero point optional (uint8, zero) as the ONNX spec and Quark's documentation say"
    if case["id"].endswith(("four_inputs", "output_type_mismatch")):
        return "graph"
    return None


OK = [c for c in CASES if c["outcome"] == "ok"]
ERRORS = [c for c in CASES if c["outcome"] == "error"]


def test_the_data_is_complete():
    assert len(CASES) == 958 and len(OK) == 851
    ops = {c["op"] for c in CASES}
    assert {"ExtendedQuantizeLinear", "ExtendedDequantizeLinear"} <= ops
    types = {c["inputs"][2]["dtype"] for c in OK if len(c["inputs"]) > 2}
    assert types >= {"int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16"}
    assert {c["axis_attribute"] for c in CASES} >= {"int", "absent"}


def _mixed_types(case: dict) -> bool:
    ins = case["inputs"]
    return len(ins) > 2 and bool(ins[2]["name"]) and ins[0]["dtype"] != ins[2]["dtype"] and "Dequantize" in case["op"]


def _replay_all(device=None) -> int:
    replayed = 0
    for case in OK:
        if case["domain"] != "com.amd.quark" or _mixed_types(case):
            continue  # the com.vai.quantize aliases run the same kernels; mixed types: below
        _check(case, _run(case, device))
        replayed += 1
    return replayed


def test_a_zero_point_of_another_type_than_x_is_an_error():
    # Quark's DQ kernel reads x's bytes as the zero point's type (uint8 200 as int8 -56); polyquant
    # rejects the mismatch (ONNX requires one type), naming the parameter.
    mixed = [c for c in OK if _mixed_types(c)]
    assert mixed
    for case in mixed:
        with pytest.raises(TypeError, match="x_zero_point has dtype"):
            _run(case)


def test_every_case_equals_quark():
    _replay_all()


@pytest.mark.parametrize("isa", polyquant.runtime_info()["supported"])
@pytest.mark.parametrize("threads", [1, None])
def test_every_kernel_set_and_thread_count_equals_quark(isa, threads):
    with kernel_set(isa, threads):
        _replay_all()


def test_every_case_equals_quark_on_a_device():
    """Every case with x, scale and zero point on the device (POLYQUANT_GOLDEN_DEVICE: the host stand-in
    in CI, the GPU in scripts/gpu_check.sh), the result read back: Quark's bits."""
    assert _replay_all(golden_device()) > 400


@pytest.mark.parametrize("case", ERRORS, ids=[c["id"] for c in ERRORS])
def test_errors_raise_or_are_documented_departures(case):
    why = _departure(case)
    if why == "graph":
        pytest.skip("an ONNX graph matter (input count, declared output type): ONNX Runtime checks it")
    if why is not None:
        out = _run(case)  # computes: check it equals the explicit uint8 zero point
        names = [i["name"] for i in case["inputs"]]
        if "Dequantize" in case["op"]:
            pytest.skip(f"departure: {why}")
        x, scale = _array(case["inputs"][0]), _array(case["inputs"][1])
        want = pq_quark.extended_quantize_linear(x, scale, np.zeros(scale.shape, np.uint8), axis=_axis(case))
        np.testing.assert_array_equal(out, want)
        assert out.dtype == np.uint8, names
        return
    if case["axis_attribute"] == "float":
        pytest.skip("a float axis attribute is an ONNX graph matter (polyquant's ORT op reads it as absent too)")
    with pytest.raises((ValueError, TypeError)):
        _run(case)
