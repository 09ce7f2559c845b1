"""Issue 19's cases of `polyquant bench`: the QKeras layouts, allocating vs out= per family, float16 /
bfloat16 x per family and AIMET's training path (with and without torch), their JSON fields, their
tables, the group names of --ops, and the one interleaved timer they share. Small sizes: these
check the harness, not the speed."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

import polyquant
from polyquant._tools import cli
from polyquant._tools.bench import aimet as bench_aimet
from polyquant._tools.bench import common, driver, qkeras

SIZE = 65536  # a multiple of 4096 (the layout and training cases need it)


def polyquant_cli(*argv):
    out = io.StringIO()
    status = cli.main([str(a) for a in argv], out=out)
    return status, out.getvalue()


def bench_json(*argv):
    status, text = polyquant_cli("bench", *argv, "--json")
    assert status == 0, text
    return json.loads(text)


def positive(value):
    return isinstance(value, float) and math.isfinite(value) and value > 0


# --- the shared timer ----------------------------------------------------------------------------


def test_interleaved_timer_takes_turns_after_one_warm_up_each():
    calls, ticks = [], []
    fns = [lambda: calls.append("a"), lambda: calls.append("b"), lambda: calls.append("c")]
    samples = common.interleaved_seconds(fns, 3, tick=lambda: ticks.append(len(calls)))
    assert calls == ["a", "b", "c"] * 4  # one warm-up round, then 3 timed rounds in turn
    assert ticks == [6, 9, 12]
    assert [len(s) for s in samples] == [3, 3, 3] and all(t >= 0 for s in samples for t in s)
    assert len(common.medians_ms(fns, 2)) == 3 and common.median_ms(fns[0], 1) >= 0


# --- QKeras layouts ------------------------------------------------------------------------------


def test_qkeras_layout_cases_json_and_table():
    report = bench_json("--size", SIZE, "--repeat", 2, "--ops", "qk_layouts")
    cases = report["qkeras_layouts"]
    assert [c["name"] for c in cases] == ["qk_layouts_auto", "qk_layouts_auto_po2"]
    assert [c["alpha"] for c in cases] == ["auto", "auto_po2"]
    assert report["ops"] == [] and report["allocating"] == [] and report["aimet_training"] == []
    for case in cases:
        rows = case["layouts"]
        assert len(rows) == len(qkeras.layouts(SIZE)) == 9
        assert rows[0]["shape"] == [256, 256] and rows[0]["of_square"] == 1.0
        assert [r["shape"] for r in rows[1:4]] == [[SIZE], [SIZE // 16, 16], [16, SIZE // 16]]
        assert [r["scale_axis"] for r in rows[:3]] == [None, None, 0]
        for r in rows:
            assert math.prod(r["shape"]) == SIZE and positive(r["ms"]) and positive(r["of_square"])
            assert r["of_square"] == pytest.approx(r["ms"] / rows[0]["ms"])
            assert len(r["samples_ms"]) == 2
    status, text = polyquant_cli("bench", "--size", SIZE, "--repeat", 1, "--ops", "qk_layouts_auto_po2")
    assert status == 0
    assert "QKeras scale-search layouts" in text and "of square" in text
    rows = [line for line in text.splitlines() if line.startswith("qk_layouts_auto_po2")]
    assert len(rows) == 9 and "rank 1" in rows[1] and rows[0].endswith("1.00x"), text


def test_square_reference_shape():
    assert qkeras.square_shape(64 << 20) == (8192, 8192)
    assert qkeras.square_shape(16 << 20) == (4096, 4096)
    assert qkeras.square_shape(32768) == (128, 256)
    assert qkeras.square_shape(3 * 4096) == (64, 192)


# --- allocating vs out= --------------------------------------------------------------------------


def test_allocating_cases_json_and_table():
    report = bench_json("--size", SIZE, "--repeat", 2, "--ops", "alloc")
    rows = {r["name"]: r for r in report["allocating"]}
    assert list(rows) == ["alloc_onnx_q_int8", "alloc_qonnx_quant", "alloc_qkeras_bits", "alloc_aimet_qdq",
                          "alloc_quark_q_int8"]
    assert {r["family"] for r in rows.values()} == {"onnx", "qonnx", "qkeras", "aimet", "quark"}
    for r in rows.values():
        assert r["shape"] == [SIZE // 64, 64]
        assert positive(r["alloc_ms"]) and positive(r["out_ms"]) and positive(r["copyto_ms"])
        assert positive(r["alloc_over_out"]) and r["alloc_over_out"] == pytest.approx(r["alloc_ms"] / r["out_ms"])
        assert [len(r["samples_ms"][k]) for k in ("alloc", "out", "copyto")] == [2, 2, 2]
    onnx_row = rows["alloc_onnx_q_int8"]
    assert onnx_row["peer"].startswith("onnxruntime") and positive(onnx_row["peer_ms"])
    assert onnx_row["alloc_vs_peer"] == pytest.approx(onnx_row["peer_ms"] / onnx_row["alloc_ms"])
    assert all(r["peer_ms"] is None and r["alloc_vs_peer"] is None for n, r in rows.items() if n != "alloc_onnx_q_int8")
    assert report["buffer_cache"]["limit_bytes"] == polyquant.buffer_cache_info()["limit_bytes"]
    status, text = polyquant_cli("bench", "--size", SIZE, "--repeat", 1, "--ops", "alloc_qkeras_bits")
    assert status == 0 and "Allocating calls vs out=" in text and "alloc/out" in text
    assert f"Buffer cache limit: {polyquant.buffer_cache_info()['limit_bytes']} bytes" in text
    assert [line.split()[0] for line in text.splitlines() if line.startswith("alloc_")] == ["alloc_qkeras_bits"]


# --- float16 / bfloat16 x ------------------------------------------------------------------------


def test_16bit_input_cases_json_and_table():
    report = bench_json("--size", SIZE, "--repeat", 2, "--ops", "from_16bit")
    rows = {r["name"]: r for r in report["input_dtypes"]}
    assert list(rows) == ["qonnx_quant_from_float16", "qonnx_quant_float16_work", "qonnx_float_quant_float16_work",
                          "qk_bits_from_float16", "qk_bits_from_bfloat16", "aimet_qdq_from_float16", "aimet_qdq_from_bfloat16"]
    assert [r["name"] for r in report["qdq"]] == ["q_int8_from_bfloat16", "q_int8_from_float16"]
    assert [rows[n]["x_dtype"] for n in rows] == ["float16", "float16", "float16", "float16", "bfloat16", "float16",
                                                  "bfloat16"]
    assert [rows[n]["out_dtype"] for n in rows] == ["float32", "float16", "float64", "float32", "float32", "float16",
                                                    "bfloat16"]
    for r in rows.values():
        assert positive(r["polyquant_out_ms"]) and positive(r["copyto_f32_ms"]) and positive(r["copyto_x_ms"])
        assert r["of_copyto_f32"] == pytest.approx(r["copyto_f32_ms"] / r["polyquant_out_ms"])
        assert r["of_copyto_x"] == pytest.approx(r["copyto_x_ms"] / r["polyquant_out_ms"])
        assert positive(r["of_copyto_f32"]) and positive(r["of_copyto_x"])
    status, text = polyquant_cli("bench", "--size", SIZE, "--repeat", 1, "--ops", "aimet_qdq_from_bfloat16")
    assert status == 0 and "float16 / bfloat16 x, out= reused" in text
    assert [line.split()[:4] for line in text.splitlines() if line.startswith("aimet_qdq_from")] == [
        ["aimet_qdq_from_bfloat16", f"{SIZE // 64}x64", "bfloat16", "bfloat16"]]


# --- AIMET training path -------------------------------------------------------------------------

TRAINING = ["aimet_train_axis1", "aimet_train_blocked_bfloat16"]


def _check_numpy_columns(r, shape):
    assert r["shape"] == shape
    assert positive(r["forward_ms"]) and positive(r["grad_ms"]) and positive(r["grad_over_forward"])
    assert r["grad_over_forward"] == pytest.approx(r["grad_ms"] / r["forward_ms"])
    assert r["target_over_forward"] == 2.5
    # numpy moving the same bytes, timed in the same repeats
    for k in ("copy_ms", "copy_2in2out_ms", "add_2in1out_ms"):
        assert positive(r[k])
    assert r["forward_over_copy"] == pytest.approx(r["forward_ms"] / r["copy_ms"])
    assert r["grad_copies_ms"] == r["copy_2in2out_ms"]
    assert r["grad_over_copies"] == pytest.approx(r["grad_ms"] / r["copy_2in2out_ms"])
    assert r["grad_copies_over_forward"] == pytest.approx(r["copy_2in2out_ms"] / r["forward_ms"])
    assert r["autograd_copies_ms"] == pytest.approx(r["copy_ms"] + r["add_2in1out_ms"])
    assert r["autograd_copies_over_forward"] == pytest.approx(r["autograd_copies_ms"] / r["forward_ms"])


def test_aimet_training_cases_with_torch():
    torch = pytest.importorskip("torch")
    report = bench_json("--size", 4 * 4096, "--repeat", 1, "--ops", *TRAINING)
    rows = {r["name"]: r for r in report["aimet_training"]}
    assert list(rows) == TRAINING and report["torch"] == torch.__version__ and report["aimet_training_skipped"] == []
    assert rows["aimet_train_axis1"]["parameter_shape"] == [1, 4096] and rows["aimet_train_axis1"]["x_dtype"] == "float32"
    blocked = rows["aimet_train_blocked_bfloat16"]
    assert blocked["parameter_shape"] == [4, 32] and blocked["block_size"] == [1, 128] and blocked["x_dtype"] == "bfloat16"
    for r in rows.values():
        _check_numpy_columns(r, [4, 4096])
        assert positive(r["autograd_ms"]) and positive(r["torch_ms"])
        assert r["autograd_over_forward"] == pytest.approx(r["autograd_ms"] / r["forward_ms"])
        assert r["torch_over_autograd"] == pytest.approx(r["torch_ms"] / r["autograd_ms"])
        assert r["autograd_over_copies"] == pytest.approx(r["autograd_ms"] / r["autograd_copies_ms"])
        assert sorted(r["samples_ms"]) == ["add_2in1out", "autograd", "copy", "copy_2in2out", "forward", "grad", "torch"]


def test_aimet_training_cases_without_torch(monkeypatch):
    """Without torch: the numpy rows, the torch columns None / '-', the bfloat16 cases skipped and said so."""
    monkeypatch.setattr(bench_aimet, "_torch", lambda: None)
    report = bench_json("--size", 4 * 4096, "--repeat", 1, "--ops", *TRAINING)
    assert [r["name"] for r in report["aimet_training"]] == ["aimet_train_axis1"]
    assert report["aimet_training_skipped"] == ["aimet_train_blocked_bfloat16"] and report["torch"] is None
    r = report["aimet_training"][0]
    _check_numpy_columns(r, [4, 4096])
    assert r["autograd_ms"] is None and r["torch_ms"] is None and r["autograd_over_forward"] is None
    assert r["torch_over_autograd"] is None and r["autograd_over_copies"] is None
    assert sorted(r["samples_ms"]) == ["add_2in1out", "copy", "copy_2in2out", "forward", "grad"]
    status, text = polyquant_cli("bench", "--size", 4 * 4096, "--repeat", 1, "--ops", *TRAINING)
    assert status == 0 and "AIMET training path" in text and "torch not installed" in text
    row = [line for line in text.splitlines() if line.startswith("aimet_train_axis1")]
    assert len(row) == 1 and row[0].split()[7:9] == ["-", "-"], text
    assert row[0].split()[-1] == "-" and "grad/copies" in text, text  # auto/copies: not measured
    assert "skipped (bfloat16 needs torch): aimet_train_blocked_bfloat16" in text


# --- --ops: groups, opt-in, errors ---------------------------------------------------------------


def test_group_names_expand_and_training_is_opt_in():
    assert driver.expand_ops(["alloc_qonnx_quant", "alloc"]) == driver.ALLOC_CASE_NAMES[1:2] + [
        n for n in driver.ALLOC_CASE_NAMES if n != "alloc_qonnx_quant"]
    assert driver.expand_ops(None) is None
    assert set(driver.OPT_IN_CASE_NAMES) == set(driver.GROUPS["aimet_train"])
    assert all(driver._selected(n, None) for n in driver.ALLOC_CASE_NAMES + driver.LAYOUT_CASE_NAMES
               + driver.INPUT_CASE_NAMES)
    assert not any(driver._selected(n, None) for n in driver.TRAINING_CASE_NAMES)
    every = driver.ALL_CASE_NAMES
    assert len(set(every)) == len(every) and not set(driver.GROUPS) & set(every)
    for names in driver.GROUPS.values():
        assert set(names) <= set(every)


@pytest.mark.parametrize("typo", ["alloc_onnx", "qk_layout", "aimet_train_axis2", "from16bit"])
def test_a_case_name_typo_is_a_usage_error(typo, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--ops", typo])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"invalid choice: '{typo}'" in err and "Traceback" not in err


@pytest.mark.parametrize("op", ["qk_layouts_auto", "aimet_train_per_tensor", "qk_layouts"])
def test_layout_and_training_cases_need_a_multiple_of_4096(op):
    status, _ = polyquant_cli("bench", "--size", 4096 + 64, "--repeat", 1, "--ops", op)
    assert status == 2


def test_default_run_has_the_new_groups_but_not_training(monkeypatch):
    monkeypatch.setattr(bench_aimet, "_torch", lambda: pytest.fail("the default run must not import torch"))
    report = driver.run_bench(size=4096, repeat=1, peers=False)
    assert [c["name"] for c in report["qkeras_layouts"]] == driver.LAYOUT_CASE_NAMES
    assert [r["name"] for r in report["allocating"]] == driver.ALLOC_CASE_NAMES
    assert [r["name"] for r in report["input_dtypes"]] == driver.INPUT_CASE_NAMES
    assert report["aimet_training"] == [] and report["torch"] is None
    assert np.isfinite([r["alloc_over_out"] for r in report["allocating"]]).all()
