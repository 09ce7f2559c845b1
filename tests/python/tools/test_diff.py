"""`polyquant diff` / `polyquant.diff`: exhaustive comparison of two quantizer specs.

The sweeps here run over every float16 input (2^16, a fraction of a second); the float32 sweeps of the
docs take about a minute each and are not run in CI. Expected counts come from first principles or
from the ops run on the whole float16 domain as one array (not the tool's chunked loop)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import polyquant
import polyquant.onnx as pqo
import polyquant.qonnx as pqq
from polyquant._tools import cli
from polyquant._tools.diff import KINDS, SpecError, parse_spec

ONNX_QDQ = "onnx:QDQ(scale=0.0078125, zero_point=0, dtype=int8)"
INT_QUANT = "qonnx:IntQuant(scale=0.0078125, zeropt=0, bitwidth=8, signed=1, narrow=0, rounding_mode=ROUND)"
ALL_F16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def polyquant_cli(*argv):
    out = io.StringIO()
    return cli.main(list(argv), out=out), out.getvalue()


def test_identical_specs_are_identical_on_every_input():
    r = polyquant.diff(INT_QUANT, "qonnx:Quant(0.0078125, 0, 8, 1, 0, ROUND)", dtype="float16")
    assert r.identical and r.differing == 0 and r.inputs == 1 << 16 and r.kinds == {}
    assert "identical on all 65536 float16 inputs" in str(r)


def test_onnx_qdq_against_int_quant_from_first_principles():
    """Same grid, both round half to even; they differ only where ONNX makes NaN an integer (every
    float16 NaN: 2 * 1023 patterns) and where IntQuant keeps the sign of a negative input rounding to
    zero (x in [-2^-8, 0), ties to even included: patterns 0x8001..0x9C00; -0 itself gives +0 in both,
    IntQuant adding the zero point +0)."""
    r = polyquant.diff(ONNX_QDQ, INT_QUANT, dtype="float16")
    assert r.kinds == {"nan": 2046, "sign of zero": 0x9C00 - 0x8000}
    assert r.differing == 2046 + 0x1C00
    e = r.examples["sign of zero"]
    assert e.x_bits == "0x8001" and (e.a, e.b) == (0.0, -0.0) and np.signbit(e.b) and not np.signbit(e.a)


def test_counts_equal_the_ops_on_the_whole_domain():
    """The chunked sweep's mask, counted independently: both ops on all 2^16 inputs at once."""
    x = ALL_F16
    a = pqo.dequantize_linear(pqo.quantize_linear(x, np.float32(0.02), np.int8(3)), np.float32(0.02), np.int8(3))
    b = pqq.quant(x, np.float32(0.02), np.float32(3), np.float32(8), 1, 0, "HALF_UP")
    assert a.dtype == b.dtype == np.float32
    want = int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
    r = polyquant.diff("onnx:QDQ(0.02, 3, int8)",
                       "qonnx:IntQuant(scale=0.02, zeropt=3, bitwidth=8, signed=1, narrow=0, rounding_mode=HALF_UP)",
                       dtype="float16")
    assert r.differing == want > 0
    assert sum(r.kinds.values()) == r.differing and set(r.kinds) <= set(KINDS)


def test_rounding_modes_differ_only_at_ties():
    """ROUND (half to even) against qonnx's HALF_UP (half away from zero) on the same grid: they differ
    exactly on the ties x * 128 = +-(m + 1/2) with m even (half to even gives +-m, away +-(m + 1)),
    all classified as ties except 126.5 / 128, whose HALF_UP result 127 is the saturation value."""
    r = polyquant.diff(INT_QUANT, INT_QUANT.replace("ROUND", "HALF_UP"), dtype="float16")
    with np.errstate(invalid="ignore"):  # the signalling NaNs among the inputs
        t = np.abs(ALL_F16.astype(np.float64) * 128)
        ties = np.isfinite(t) & (t - np.floor(t) == 0.5) & (t < 128)
        even = np.floor(t) % 2 == 0
    assert r.differing == int(np.count_nonzero(ties & even)) == 128
    assert r.kinds == {"rounding tie": 127, "saturation edge": 1}
    assert r.examples["saturation edge"].x == 126.5 / 128
    e = r.examples["rounding tie"]
    assert e.x == 0.00390625 and (e.a, e.b) == (0.0, 0.0078125)


def test_per_channel_parameters_sweep_each_distinct_tuple():
    r = polyquant.diff("qonnx:IntQuant(scale=[0.0078125, 0.5, 0.0078125], bitwidth=8)", INT_QUANT, dtype="float16")
    assert r.sweeps == 2 and r.inputs == 2 << 16
    same_grid = polyquant.diff("qonnx:IntQuant(scale=[0.0078125, 0.0078125], bitwidth=8)", INT_QUANT, dtype="float16")
    assert same_grid.sweeps == 1 and same_grid.identical


def test_bfloat16_inputs():
    r = polyquant.diff("onnx:QDQ(0.02, 3, int8)", "aimet:quantize_dequantize(0.02, -3, 8, True)", dtype="bfloat16")
    assert r.inputs == 1 << 16 and sum(r.kinds.values()) == r.differing


def test_part_of_the_domain_and_quark_semantics():
    """Quark's ops take float32 only; a slice of the float32 patterns keeps the test short: the
    positive values from 0.5 to 4 (patterns 0x3F000000..0x40800000)."""
    spec = "quark:QDQ(0.02, 3, int8, semantics={})"
    r = polyquant.diff(spec.format("quark"), spec.format("onnx"), patterns=(0x3F000000, 0x40800000))
    assert r.inputs == 0x40800000 - 0x3F000000
    x = np.arange(0x3F000000, 0x40800000, dtype=np.uint32).view(np.float32)
    import polyquant.quark as pqk
    a, b = (pqk.extended_dequantize_linear(pqk.extended_quantize_linear(x, np.float32(0.02), np.int8(3), semantics=m),
                                           np.float32(0.02), np.int8(3), semantics=m) for m in ("quark", "onnx"))
    assert r.differing == int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))
    with pytest.raises(ValueError, match="patterns: expected"):
        polyquant.diff(spec.format("quark"), spec.format("onnx"), patterns=(5, 5))


def test_aimet_paths():
    no_grad = "aimet:quantize_dequantize(scale=0.02, offset=-128, bitwidth=8, signed=False)"
    r = polyquant.diff(no_grad, no_grad.replace(")", ", path=training)"), dtype="float16")
    assert r.differing > 0 and r.kinds["rounding tie"] > 0  # float16 x: the training path divides in float16
    assert sum(r.kinds.values()) == r.differing
    # path=formula names the same computation as path=training: identical on every input.
    same = polyquant.diff(no_grad.replace(")", ", path=formula)"), no_grad.replace(")", ", path=training)"),
                          dtype="float16")
    assert same.differing == 0 and same.inputs == 65536


@pytest.mark.parametrize("spec,match", [
    ("IntQuant(scale=0.1)", "FAMILY:OP"),
    ("tflite:quantize(0.1)", "unknown family 'tflite'"),
    ("qonnx:NoSuchOp(0.1)", "unknown qonnx op 'NoSuchOp'"),
    ("qonnx:IntQuant(scale=0.1, bitwdith=8)", "no parameter 'bitwdith'"),
    ("qonnx:IntQuant(scale=0.1)", "needs bitwidth"),
    ("qonnx:IntQuant(0.1, scale=0.1, bitwidth=8)", "'scale' given twice"),
    ("qonnx:IntQuant(scale=0.1 +)", "cannot parse"),
    ("qonnx:IntQuant(scale=x.y, bitwidth=8)", "not a number"),
    ("qkeras:quantized_bits(4, 0, alpha='auto')", "not a function of each element"),
    ("qkeras:quantized_bits(4, 0, nonsense=1)", "qkeras:quantized_bits"),
    ("aimet:quantize_dequantize(0.1, 0, 8, path=eval)", "path must be no_grad"),
    ("onnx:QDQ(0.1, 0, dtype=int3)", "dtype 'int3'"),
    ("qonnx:IntQuant(scale=[0.1, 0.2], zeropt=[0, 1, 2], bitwidth=8)", "one length"),
    ("qonnx:IntQuant(scale=[], bitwidth=8)", "non-empty flat list"),
    ("qonnx:IntQuant(scale=[[0.1]], bitwidth=8)", "non-empty flat list"),
    ("qonnx:IntQuant(scale='a', bitwidth=8)", "expected a number, got 'a'"),
    ("qkeras:quantized_bits(8, 0, alpha=[1, 2])", "cannot run the specs"),
    ("onnx:QDQ(0.1, 300, int8)", "zero_point: 300 is not a value of int8"),
    ("quark:QDQ(0.1, -1, uint8)", "zero_point: -1 is not a value of uint8"),
    ("onnx:QDQ(0.1, 1.5, int8)", "zero_point: 1.5 is not a value of int8"),
])
def test_bad_specs_are_clear_errors(spec, match):
    with pytest.raises(SpecError, match=match):
        polyquant.diff(spec, INT_QUANT, dtype="float16")


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype: expected one of float32, float16, bfloat16"):
        polyquant.diff(INT_QUANT, INT_QUANT, dtype="float64")


def test_parse_spec_words_and_lists():
    s = parse_spec("qonnx:IntQuant(scale=[0.5, 0.25], rounding_mode=ROUND, signed=True, bitwidth=8)")
    assert (s.family, s.op, s.args) == ("qonnx", "IntQuant", [])
    assert s.kwargs == {"scale": [0.5, 0.25], "rounding_mode": "ROUND", "signed": True, "bitwidth": 8}


def test_cli_exit_status_and_json():
    status, text = polyquant_cli("diff", INT_QUANT, INT_QUANT, "--dtype", "float16")
    assert status == 0 and "identical on all 65536 float16 inputs" in text
    status, text = polyquant_cli("diff", ONNX_QDQ, INT_QUANT, "--dtype", "float16", "--json")
    d = json.loads(text)
    assert status == 1 and d["identical"] is False and d["kinds"] == {"nan": 2046, "sign of zero": 7168}
    assert d["examples"]["sign of zero"]["x_bits"] == "0x8001"
    status, _ = polyquant_cli("diff", "qonnx:Nope(1)", INT_QUANT, "--dtype", "float16")
    assert status == 2
