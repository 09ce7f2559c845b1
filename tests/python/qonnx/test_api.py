"""The Python surface of polyquant: accepted inputs, dtypes, layouts, errors, the GIL, the
package metadata and the extension's type stub. Numerics are qonnx/test_reference.py's job; here a
result is only compared with polyquant's own result on a plain contiguous copy."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import polyquant
import polyquant.qonnx as pq
from polyquant import _polyquant_ext

from ..helpers import kernel_set

f32 = np.float32
REPO = Path(__file__).resolve().parents[3]


def tv2(x, scale, zeropt, in_bw, out_scale, out_bw, mode, signed=1, narrow=0, *, out=None):
    """trunc_v2 with the arguments in this file's fixed order, called in qonnx's order."""
    return pq.trunc_v2(x, scale, zeropt, in_bw, narrow, signed, out_scale, out_bw, mode, out=out)


def fq(x, scale, e_bw, m_bw, bias, max_val, has_inf, has_nan, has_subnormal, saturation, mode="ROUND", *, out=None):
    """float_quant with the arguments in this file's fixed order, called in qonnx's order."""
    return pq.float_quant(x, scale, e_bw, m_bw, bias, True, max_val, has_inf, has_nan, has_subnormal, mode,
                          saturation, out=out)


def iq(x, **kw):
    """int_quant with typical parameters (4-bit signed, scale 0.25)."""
    args = dict(scale=0.25, zeropt=0.0, bitwidth=4, signed=1, narrow=0, rounding_mode="ROUND")
    args.update(kw)
    return pq.int_quant(x, **args)


class ArrayLikeObject:
    """Exposes only __array__."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class DLPackObject:
    """Exposes only the DLPack protocol (as a CPU tensor of another framework would)."""

    def __init__(self, a, device=(1, 0)):
        self._a = a
        self._device = device

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


# ------------------------------------------------------------------------------------------------
# package surface


def test_package_metadata():
    assert set(polyquant.__all__) >= {"__version__", "qonnx", "runtime_info"}
    assert set(pq.__all__) == {
        "int_quant", "quant", "binary_quant", "bipolar_quant", "trunc_v1", "trunc", "trunc_v2", "float_quant",
        "min_int", "max_int", "compute_max_val", "compute_default_exponent_bias", "resolve_rounding_mode",
        "execute_onnx", "UnknownInputWarning",
    }
    assert pq.quant is pq.int_quant and pq.bipolar_quant is pq.binary_quant and pq.trunc is pq.trunc_v1
    version_file = REPO / "VERSION"
    if version_file.exists():
        assert polyquant.__version__ == version_file.read_text().strip()
    info = polyquant.runtime_info()
    assert set(info) == {"version", "isa", "supported", "num_threads", "backends"}
    assert info["version"] == polyquant.__version__
    assert info["isa"] in info["supported"]
    assert all(isinstance(s, str) for s in info["supported"])
    assert isinstance(info["num_threads"], int) and info["num_threads"] >= 1


def test_ort_submodule_is_importable_lazily():
    if importlib.util.find_spec("polyquant.ort") is None:
        pytest.skip("polyquant/ort.py is not part of this build")
    assert "ort" in dir(polyquant)
    assert polyquant.ort.__name__ == "polyquant.ort"


EXTENSION_SUBMODULES = ("aimet", "onnx", "qkeras", "qonnx", "quark")


def test_extension_stub_matches_the_module(tmp_path):
    """The committed stub package polyquant/_polyquant_ext/ (__init__.pyi and one <submodule>.pyi per
    family, which type checkers resolve for polyquant._polyquant_ext.<family>) is what nanobind's
    stubgen makes of the built module and its submodules, private members included (each file's
    header comment names the nanobind version; other versions format stubs differently)."""
    nanobind = pytest.importorskip("nanobind")
    committed_dir = Path(polyquant.__file__).with_name("_polyquant_ext")
    expected_files = {"__init__.pyi"} | {f"{name}.pyi" for name in EXTENSION_SUBMODULES}
    committed_files = {p.name for p in committed_dir.glob("*.pyi")}
    assert committed_files == expected_files, f"the wheel must ship polyquant/_polyquant_ext/ {', '.join(sorted(expected_files))}"
    assert set(EXTENSION_SUBMODULES) <= set(dir(_polyquant_ext)), "a family submodule is missing from the extension"
    committed = {}
    for name in sorted(committed_files):
        lines = (committed_dir / name).read_text().splitlines(keepends=True)
        header = list(itertools.takewhile(lambda ln: ln.startswith("#"), lines))
        recorded = next((ln.split()[-1] for ln in header if "nanobind" in ln), None)
        if recorded != nanobind.__version__:
            pytest.skip(f"{name}: stub made with nanobind {recorded}, this is nanobind {nanobind.__version__}")
        committed[name] = "".join(lines[len(header):])
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-P", "-r", "-m", "polyquant._polyquant_ext", "-O", str(tmp_path)],
        check=True,
    )
    generated = {p.name: p.read_text() for p in (tmp_path / "_polyquant_ext").glob("*.pyi")}
    assert set(generated) == expected_files, f"stubgen made {sorted(generated)}; update the committed stub package and this test"
    stale = [name for name in sorted(expected_files) if generated[name] != committed[name]]
    if stale:
        pytest.fail(
            f"stale stub: python/polyquant/_polyquant_ext/ {', '.join(stale)}; regenerate it (see the header comment)\n"
            + "".join(f"generated {name}:\n{generated[name]}\n" for name in stale)
        )


# ------------------------------------------------------------------------------------------------
# accepted inputs


def test_inputs_lists_scalars_array_and_dlpack_objects():
    x = np.asarray([-1.3, -0.2, 0.0, 0.6, 1.2, 5.0], dtype=f32)
    expected = iq(x, scale=np.asarray(0.25, f32), zeropt=np.asarray(0, f32), bitwidth=np.asarray(4, f32))
    np.testing.assert_array_equal(iq(x), expected)
    np.testing.assert_array_equal(iq(ArrayLikeObject(x)), expected)
    np.testing.assert_array_equal(iq(DLPackObject(x)), expected)
    np.testing.assert_array_equal(iq(x, scale=ArrayLikeObject(np.asarray(0.25, f32))), expected)
    np.testing.assert_array_equal(iq(x, scale=DLPackObject(np.asarray([0.25], f32))), expected)
    np.testing.assert_array_equal(iq(x, scale=[0.25], zeropt=[0.0], bitwidth=[4.0]), iq(x.astype(np.float64)))
    # a list of Python floats becomes float64, as np.asarray makes it
    assert pq.bipolar_quant([1.0, -2.0], f32(1)).dtype == np.float64
    assert pq.bipolar_quant(x.tolist(), 1.0).dtype == np.float64


def test_dlpack_export_failure_is_a_type_error_naming_the_parameter():
    class Unexportable(DLPackObject):
        def __dlpack__(self, **kwargs):
            raise BufferError("cannot export a read-only, non-CPU or otherwise unexportable tensor")

    with pytest.raises(TypeError, match="x"):
        iq(Unexportable(np.ones(3, f32)))
    with pytest.raises(TypeError, match="scale"):
        iq(np.ones(3, f32), scale=Unexportable(np.ones(3, f32)))


def test_python_scalars_are_weak():
    """NEP 50: a Python scalar parameter takes x's dtype; numpy scalars and arrays keep theirs."""
    x16 = np.asarray([0.1, -0.7, 3.3, 1000.0], dtype=np.float16)
    assert pq.bipolar_quant(x16, 0.5).dtype == np.float16
    assert pq.bipolar_quant(x16, 2).dtype == np.float16
    assert pq.bipolar_quant(x16, True).dtype == np.float16
    assert pq.bipolar_quant(x16, np.float32(0.5)).dtype == np.float32
    x = np.asarray([0.1, -0.7, 3.3], dtype=f32)
    assert pq.bipolar_quant(x, 0.5).dtype == np.float32
    assert pq.bipolar_quant(x, np.float64(0.5)).dtype == np.float64
    assert pq.bipolar_quant(x, np.asarray(0.5)).dtype == np.float64  # a float64 0-d array is strong
    assert pq.trunc(x, 0.5, 0, 8, 4, "FLOOR").dtype == np.float32
    assert pq.trunc(x, np.float64(0.5), 0, 8, 4, "FLOOR").dtype == np.float64
    # output_scale / scale of two Python floats is a Python float, and np.log2 of it a (strong)
    # float64: qonnx's trunc_v2 returns float64 here; with one Python scale it stays float32.
    assert tv2(x, 0.5, 0, 8, 2.0, 4, "FLOOR").dtype == np.float64
    assert tv2(x, 0.5, 0, 8, f32(2.0), 4, "FLOOR").dtype == np.float32
    # A weak 0.1 is float32(0.1) here, not float64(0.1), and that shows: -0.55f / 0.1f is exactly
    # -5.5 (then -4.5, a tie, rounds to -4), while -0.55f / 0.1 is -5.50000012 (-4.5000001 -> -5).
    x = np.asarray([-0.55], f32)
    assert iq(x, scale=0.1, zeropt=1.0)[0] == f32(-0.5)
    got = iq(x, scale=np.float64(0.1), zeropt=1.0)  # float64 arithmetic, float64 result
    assert got.dtype == np.float64 and got[0] == np.float64(-6) * np.float64(0.1)


def test_weak_scalar_overflow_behaves_like_numpy():
    x16 = np.asarray([1.0, -2.0], dtype=np.float16)
    with pytest.warns(RuntimeWarning, match="overflow"):
        out = pq.bipolar_quant(x16, 2**70)  # numpy 2: float16(2**70) is inf, with a warning
    assert out.dtype == np.float16 and np.isinf(out).all()
    with pytest.raises(OverflowError, match="scale"):
        pq.bipolar_quant(x16, 10**400)


def test_x_as_python_scalar_is_float64():
    # As numpy arithmetic (and so qonnx) on 0-d operands: a numpy scalar, float64 from a Python float.
    out = pq.bipolar_quant(-0.5, 1)
    assert type(out) is np.float64 and out == -1
    out = pq.int_quant(2.6, 1.0, 0.0, 4, 1, 0, "ROUND")
    assert type(out) is np.float64 and out == 3


@pytest.mark.parametrize("x_dtype", [np.float16, np.float32, np.float64])
def test_output_dtypes(x_dtype):
    x = np.asarray([0.3, -1.7, 2.5], dtype=x_dtype)
    # qonnx's functions: int_quant keeps the promoted dtype (only its ONNX node casts to float32);
    # float_quant's clip against a float64 limit makes float64.
    assert pq.int_quant(x, 0.5, 0, 4, 1, 0, "ROUND").dtype == x_dtype
    assert pq.int_quant(x, np.float64(0.5), 0, 4, 1, 0, "ROUND").dtype == np.float64
    assert fq(x, 1.0, 4, 3, 7, 448.0, 0, 0, 0, 1).dtype == np.float64
    assert pq.bipolar_quant(x, 1.0).dtype == x_dtype
    assert pq.trunc(x, 0.5, 0, 8, 4, "FLOOR").dtype == x_dtype
    # two Python-number scales: output_scale / scale in Python, np.log2 of it float64 (as qonnx)
    assert tv2(x, 0.5, 0, 8, 2.0, 4, "FLOOR").dtype == np.float64
    assert tv2(x, 0.5, 0, 8, np.asarray(2.0, x_dtype), 4, "FLOOR").dtype == x_dtype
    assert pq.bipolar_quant(x, np.asarray([1.0])).dtype == np.float64
    assert pq.trunc(x, 0.5, np.asarray(0, np.int64), 8, 4, "FLOOR").dtype == np.float64


def test_zero_d_x_gives_a_numpy_scalar():
    """qonnx's functions return what numpy arithmetic on 0-d operands returns: a numpy scalar."""
    for out in (
        pq.int_quant(np.float32(1.3), 1.0, 0.0, 4, 1, 0, "ROUND"),
        pq.bipolar_quant(np.float32(-1), 1.0),
        pq.trunc(np.float32(17), 1.0, 0, 8, 4, "FLOOR"),
        tv2(np.float32(17), 1.0, 0, 8, 16.0, 4, "FLOOR"),
        fq(np.float32(1.1), 1.0, 4, 3, 7, 448.0, 0, 0, 0, 1),
    ):
        assert isinstance(out, np.generic) and not isinstance(out, np.ndarray)


def test_flags_accept_bools_and_ints():
    x = np.linspace(-10, 10, 41, dtype=f32)
    for on in (True, 1, 7, -1, np.int64(2), np.bool_(True)):
        np.testing.assert_array_equal(iq(x, signed=on, narrow=on), iq(x, signed=True, narrow=True))
    for off in (False, 0, np.int8(0), np.bool_(False)):
        np.testing.assert_array_equal(iq(x, signed=off, narrow=off), iq(x, signed=False, narrow=False))


@pytest.mark.parametrize("mode", ["round", "Round", "half_even", "floor", "Half_Down", np.str_("CEIL")])
def test_rounding_mode_is_case_insensitive(mode):
    x = np.linspace(-3, 3, 25, dtype=f32)
    np.testing.assert_array_equal(iq(x, rounding_mode=mode), iq(x, rounding_mode=str(mode).upper()))


# ------------------------------------------------------------------------------------------------
# layouts


def _views(rng):
    base = rng.standard_normal((6, 10, 4)).astype(f32) * 4
    yield "slice", base[:, ::2]
    yield "transpose", base.transpose(2, 0, 1)
    yield "reversed", base[::-1, :, ::-3]
    yield "broadcast", np.broadcast_to(base[:1, :1], (6, 10, 4))  # zero strides, read-only
    yield "fortran", np.asfortranarray(base)
    yield "big_endian", base.astype(">f4")
    packed = np.zeros(60, dtype=[("tag", "u1"), ("v", "<f4")])  # 5-byte stride, unaligned
    packed["v"] = base.reshape(-1)[:60]
    yield "unaligned", packed["v"]


@pytest.mark.parametrize("name", [n for n, _ in _views(np.random.default_rng(0))])
def test_non_contiguous_inputs(name, rng):
    x = dict(_views(rng))[name]
    xc = np.ascontiguousarray(x, dtype=f32)
    scales = [0.3, np.asarray(0.3, f32)]
    if x.shape[-1] == 4:
        scales.append(np.asarray([0.5, 0.25, 0.125, 1.0], f32).reshape(4, 1).T)  # (1, 4), transposed view
    for s in scales:
        np.testing.assert_array_equal(iq(x, scale=s), iq(xc, scale=s))
        np.testing.assert_array_equal(pq.bipolar_quant(x, s), pq.bipolar_quant(xc, s))
        np.testing.assert_array_equal(pq.trunc(x, s, 0, 8, 4, "FLOOR"), pq.trunc(xc, s, 0, 8, 4, "FLOOR"))
        np.testing.assert_array_equal(
            fq(x, s, 4, 3, 7, 448.0, 0, 0, 0, 1, "FLOOR"),
            fq(xc, s, 4, 3, 7, 448.0, 0, 0, 0, 1, "FLOOR"),
        )


def test_outputs_are_fresh_c_contiguous_arrays():
    x = np.ones((3, 4), f32)[:, ::2]
    out = iq(x)
    assert out.flags.c_contiguous and out.flags.writeable
    assert not np.shares_memory(out, x)
    out[...] = 7  # writable, owned by the caller


@pytest.mark.parametrize("shape,scale_shape", [((0,), ()), ((3, 0, 2), (3, 1, 1)), ((0, 4), (4,)), ((2, 3), (0, 1, 1))])
def test_zero_size(shape, scale_shape):
    x = np.ones(shape, f32)
    scale = np.ones(scale_shape, f32)
    expected_shape = np.broadcast_shapes(shape, scale_shape)
    for out in (
        iq(x, scale=scale),
        pq.bipolar_quant(x, scale),
        pq.trunc(x, scale, 0, 8, 4, "FLOOR"),
        tv2(x, scale, 0, 8, scale, 4, "FLOOR"),
        fq(x, scale, 4, 3, 7, 448.0, 0, 0, 0, 1),
    ):
        assert out.shape == expected_shape and out.size == 0


def test_output_larger_than_x():
    x = np.asarray([-1.0, 0.4, 2.0], f32)
    out = iq(x, scale=np.asarray([[1.0], [0.5]], f32))
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out[0], iq(x, scale=1.0))
    np.testing.assert_array_equal(out[1], iq(x, scale=0.5))


# ------------------------------------------------------------------------------------------------
# errors


@pytest.mark.parametrize("mode", ["ROUND_TO_ZERO", " ROUND", "NEAREST", "", "STOCHASTIC_ROUND"])
def test_unknown_rounding_mode(mode):
    x = np.ones(3, f32)
    for call in (
        lambda: iq(x, rounding_mode=mode),
        lambda: pq.trunc(x, 1.0, 0, 8, 4, mode),
        lambda: tv2(x, 1.0, 0, 8, 2.0, 4, mode),
        lambda: fq(x, 1.0, 4, 3, 7, 448.0, 0, 0, 0, 1, mode),
    ):
        with pytest.raises(ValueError, match="rounding_mode") as err:
            call()
        for allowed in ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN"):
            assert allowed in str(err.value)


@pytest.mark.parametrize("mode", [1, None, b"ROUND", ["ROUND"]])
def test_rounding_mode_must_be_a_str(mode):
    with pytest.raises(TypeError, match="rounding_mode"):
        iq(np.ones(3, f32), rounding_mode=mode)


def test_multi_element_bitwidths():
    x = np.ones(3, f32)
    with pytest.raises(ValueError, match="bitwidth"):
        iq(x, bitwidth=np.asarray([4.0, 4.0], f32))
    with pytest.raises(ValueError, match="mantissa_bitwidth"):
        fq(x, 1.0, 4, np.asarray([3, 3], f32), 7, 448.0, 0, 0, 0, 1)


@pytest.mark.parametrize("bitwidth", [np.nan, np.inf, -np.inf])
def test_non_finite_bitwidth(bitwidth):
    with pytest.raises(ValueError, match="bitwidth"):
        iq(np.ones(3, f32), bitwidth=np.asarray(bitwidth, f32))


def test_non_broadcastable_shapes():
    x = np.ones((4, 3), f32)
    with pytest.raises(ValueError):
        iq(x, scale=np.ones(4, f32))
    with pytest.raises(ValueError):
        iq(x, zeropt=np.ones((2, 3), f32))
    with pytest.raises(ValueError):
        pq.bipolar_quant(x, np.ones(2, f32))
    with pytest.raises(ValueError):
        tv2(x, 1.0, 0, 8, np.ones((5, 1), f32), 4, "FLOOR")
    with pytest.raises(ValueError):
        fq(x, 1.0, np.ones(2, f32), 3, 7, 448.0, 0, 0, 0, 1)


# Python int / bool scalars are weak, as in qonnx's numpy arithmetic (3 / np.float32(0.5) is
# float32): tests/python/qonnx/test_robustness.py::test_python_scalar_input_is_weak_as_in_qonnx.
@pytest.mark.parametrize("x", [np.arange(4), np.ones(3, np.int8), np.ones(3, bool), np.ones(3, np.uint16), [1, 2, 3]])
def test_non_float_x_is_a_type_error(x):
    for call in (
        lambda: iq(x),
        lambda: pq.bipolar_quant(x, 1.0),
        lambda: pq.trunc(x, 1.0, 0, 8, 4, "FLOOR"),
        lambda: tv2(x, 1.0, 0, 8, 2.0, 4, "FLOOR"),
        lambda: fq(x, 1.0, 4, 3, 7, 448.0, 0, 0, 0, 1),
    ):
        with pytest.raises(TypeError, match="inp_tensor|X"):
            call()


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(inp_tensor=np.ones(3, np.complex64)), "inp_tensor"),
        (dict(inp_tensor="abc"), "inp_tensor"),
        (dict(inp_tensor=np.ones(3, np.longdouble)), "inp_tensor"),
        (dict(scale="abc"), "scale"),
        (dict(scale=None), "scale"),
        (dict(scale=1j), "scale"),
        (dict(zeropt=np.ones(3, np.complex128)), "zeropt"),
        (dict(bitwidth=object()), "bitwidth"),
        (dict(signed="yes"), "signed"),
        (dict(narrow=0.5), "narrow"),
        (dict(narrow=None), "narrow"),
    ],
)
def test_wrong_types_name_the_parameter(kw, name):
    if kw.get("inp_tensor") is not None and np.asarray(kw["inp_tensor"]).dtype == np.float64:
        pytest.skip("longdouble is float64 on this platform")
    args = dict(inp_tensor=np.ones(3, f32), scale=1.0, zeropt=0.0, bitwidth=4, signed=1, narrow=0,
                rounding_mode="ROUND")
    args.update(kw)
    with pytest.raises(TypeError, match=name):
        pq.int_quant(**args)


def test_ragged_input_is_a_value_error():
    with pytest.raises(ValueError, match="inp_tensor"):
        iq([[1.0, 2.0], [3.0]])


def test_float_quant_needs_a_policy_without_saturation():
    # qonnx raises RuntimeError("Clamping is not saturating, but neither ...") here
    with pytest.raises(ValueError):
        fq(np.ones(3, f32), 1.0, 4, 3, 7, 448.0, 0, 0, 0, 0)


def test_rank_limit():
    x = np.ones((1,) * 9, f32)
    with pytest.raises(ValueError, match="inp_tensor: rank 9 exceeds the maximum of 8"):
        iq(x)


# ------------------------------------------------------------------------------------------------
# concurrency and kernel sets


def _main_thread_runs_during(call) -> bool:
    """Whether the main thread gets to run Python code while a worker thread is inside `call`.
    With a huge switch interval a thread only gives up the GIL voluntarily, so the main thread
    (waiting for the GIL) runs during the call exactly when the call releases the GIL."""
    state = {"in_call": False}

    def worker():
        state["in_call"] = True
        for _ in range(20):  # gives a slow-to-wake main thread many chances
            call()
        state["in_call"] = False

    old = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        thread = threading.Thread(target=worker)
        thread.start()  # returns once this thread holds the GIL again
        seen = state["in_call"]
        thread.join()
    finally:
        sys.setswitchinterval(old)
    return seen


@pytest.mark.parametrize("what", ["int_quant", "float_quant", "trunc_v2", "copy"])
def test_gil_is_released_during_the_kernel(what):
    x = np.random.default_rng(1).standard_normal(1 << 22).astype(f32)
    dst = np.empty_like(x)
    call = {
        "int_quant": lambda: pq.int_quant(x, 0.1, 0.0, 8, 1, 0, "HALF_UP"),
        "float_quant": lambda: fq(x, 0.1, 4, 3, 7, 448.0, 0, 0, 0, 1),
        "trunc_v2": lambda: tv2(x, 0.1, 0, 8, 0.4, 4, "FLOOR"),
        "copy": lambda: _polyquant_ext.copy(x, dst),
    }[what]
    call()  # warm up: kernel selection, thread pool
    assert _main_thread_runs_during(call), f"{what} held the GIL for the whole call"


def test_concurrent_calls_agree():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(1 << 18).astype(f32) * 10 for _ in range(4)]
    expected = [fq(x, 0.5, 4, 3, 7, 448.0, 0, 0, 0, 1, "HALF_UP") for x in xs]
    results = [None] * len(xs)

    def work(i):
        results[i] = fq(xs[i], 0.5, 4, 3, 7, 448.0, 0, 0, 0, 1, "HALF_UP")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, e in zip(results, expected):
        np.testing.assert_array_equal(r, e)


_ISA_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
import polyquant, polyquant.qonnx as pq
rng = np.random.default_rng(5)
x = (rng.standard_normal((3, 1 << 16 | 7)) * 50).astype(np.float32)
x[:, :6] = [np.nan, np.inf, -np.inf, -0.0, 2.5, 1e-40]
s = np.asarray([[0.1], [0.37], [1.0]], np.float32)
outs = [
    pq.int_quant(x, s, 0.5, 5, 1, 0, "HALF_UP"),
    pq.int_quant(x[:, ::3], 0.1, 0, 8, 0, 1, "ROUND"),
    pq.bipolar_quant(x, s),
    pq.trunc(x, s, 0, 8, 4, "FLOOR"),
    pq.trunc_v2(x, s, 0, 8, 1, 1, s * 12, 4, "FLOOR"),
    pq.float_quant(x, s, 4, 3, 7, True, 448.0, 0, 1, 0, "FLOOR", 0),
    pq.float_quant(x, s, 4, 3, 7, False, 448.0, 1, 0, 0, "HALF_UP", 0),
    pq.float_quant(x.astype(np.float64), 0.5, 5, 2, 15, True, 57344.0, 0, 0, 0, "ROUND", 1),
    pq.float_quant(np.broadcast_to(x[:, :1], x.shape), s, 4, 3),
    pq.int_quant(x.astype(np.float16), np.float16(0.1), 0, 4, 1, 1, "HALF_DOWN"),
]
digests = [hashlib.sha256(o.tobytes()).hexdigest() for o in outs]
print(json.dumps({"isa": polyquant.runtime_info()["isa"], "digest": digests}))
"""


def test_every_kernel_set_gives_the_same_bits():
    """POLYQUANT_ISA forces each kernel set the CPU supports; results must not depend on it."""
    supported = polyquant.runtime_info()["supported"]
    runs = {}
    for isa in supported:
        env = dict(os.environ, POLYQUANT_ISA=isa)
        proc = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], env=env, capture_output=True, text=True, check=True)
        result = json.loads(proc.stdout)
        assert result["isa"] == isa
        runs[isa] = result["digest"]
    reference = runs[supported[-1]]
    for isa, digest in runs.items():
        assert digest == reference, f"kernel set {isa} differs from {supported[-1]}"


@pytest.mark.parametrize("isa", polyquant.runtime_info()["supported"])
def test_zero_stride_x_equals_the_op_on_its_one_value(isa):
    """Issue 5 regression: with every parameter broadcast, the SIMD kernels read a zero-stride x as
    contiguous memory (wrong values, and a heap over-read that segfaulted at 10^7 elements). x comes
    as np.broadcast_to, through DLPack (as torch's expand() arrives) and as a 0-d x against
    zero-stride parameters; each must equal the op on the one value, on every kernel set."""
    one = np.asarray([1.3], f32)
    n = 10**7
    views = {
        "broadcast_to": np.broadcast_to(one, (n,)),
        "dlpack": DLPackObject(np.broadcast_to(one, (n,))),
        "2-d": np.broadcast_to(one.reshape(1, 1), (1000, n // 1000)),
    }
    ops = {
        "int_quant": lambda x, s: pq.int_quant(x, s, f32(0), f32(4), 1, 0, "HALF_UP"),
        "bipolar_quant": lambda x, s: pq.bipolar_quant(x, s),
        "trunc_v1": lambda x, s: pq.trunc_v1(x, s, f32(0), f32(8), f32(4), "FLOOR"),
        "trunc_v2": lambda x, s: pq.trunc_v2(x, s, f32(0), f32(8), 0, 1, f32(16), f32(4), "ROUND"),
        "float_quant": lambda x, s: pq.float_quant(x, s, f32(4), f32(3), f32(7), True, f32(448)),
    }
    with kernel_set(isa):
        for op_name, op in ops.items():
            scale = np.asarray(0.3, f32)
            expected = op(one, scale)[0]
            for view_name, x in views.items():
                got = op(x, scale)
                assert got.shape == np.shape(np.asarray(x) if view_name != "dlpack" else x._a)
                assert np.all(got == expected), f"{op_name} on a {view_name} view ({isa})"
            # a 0-d x against a zero-stride scale: x is the broadcast operand, of zero stride too
            zero_stride_scale = np.broadcast_to(scale, (4096,))
            got = op(np.float32(1.3), zero_stride_scale)
            assert np.all(got == op(np.float32(1.3), scale)), f"{op_name}: 0-d x, zero-stride scale ({isa})"


def test_float_quant_with_a_huge_mantissa_width_is_immediate_and_equals_qonnx(monkeypatch):
    """Issue 5 regression: mantissa_bitwidth = 2^40 looped for hours, twice (qonnx's series for the
    largest value and the core's copy of it), partly holding the GIL. The series is 2 - 2^-m in
    closed form. qonnx's own float_quant, with its series replaced by that closed form (the test of
    compute_max_val shows the two agree), is the expected result."""
    qonnx_floatquant = pytest.importorskip("qonnx.custom_op.general.floatquant")
    monkeypatch.setattr(qonnx_floatquant, "compute_max_val", pq.compute_max_val)
    x = np.asarray([0.0, -0.0, 1.0, -1.7, 3.3e-3, 1e-6, 200.0, 1e4, np.inf, -np.inf, np.nan, 1e-40], f32)
    for signed in (True, False):
        args = (x, f32(0.5), f32(4), np.float64(2**40), None, signed, None, False, False, True, "ROUND", True)
        got = pq.float_quant(*args)
        with np.errstate(all="ignore"):  # x / 2^(e - 2^40) divides by zero, as qonnx does
            want = qonnx_floatquant.float_quant(*args)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


# ------------------------------------------------------------------------------------------------
# the benchmark's copy baseline


def test_copy():
    src = np.arange(1000, dtype=f32)
    dst = np.empty_like(src)
    _polyquant_ext.copy(src, dst)
    np.testing.assert_array_equal(dst, src)
    raw = np.empty(4000, np.uint8)
    _polyquant_ext.copy(src, raw)  # any dtypes, same byte size
    assert raw.tobytes() == src.tobytes()
    with pytest.raises(ValueError):
        _polyquant_ext.copy(src, np.empty(999, f32))
    with pytest.raises(TypeError):
        _polyquant_ext.copy(src[::2], np.empty(500, f32))  # not contiguous: no silent copy
    readonly = np.empty_like(src)
    readonly.flags.writeable = False
    with pytest.raises(TypeError):
        _polyquant_ext.copy(src, readonly)


# ------------------------------------------------------------------------------------------------
# out=


OUT_CALLS = {
    "int_quant": lambda x, out: pq.int_quant(x, np.float32(0.1), np.float32(0.5), np.float32(4), 1, 0, "HALF_UP", out=out),
    "bipolar_quant": lambda x, out: pq.bipolar_quant(x, np.float32(0.5), out=out),
    "trunc": lambda x, out: pq.trunc(x, np.float32(0.5), np.float32(0), np.float32(8), np.float32(4), "FLOOR", out=out),
    "trunc_v2": lambda x, out: tv2(
        x, np.float32(0.5), np.float32(0), np.float32(8), np.float32(8.0), np.float32(4), "FLOOR", out=out
    ),
    "float_quant": lambda x, out: fq(
        x, np.float32(1), np.float32(4), np.float32(3), np.float32(7), np.float32(448), 0, 1, 1, 1, out=out
    ),
}


@pytest.mark.parametrize("name", sorted(OUT_CALLS))
def test_out_writes_into_the_given_array(name, rng):
    call = OUT_CALLS[name]
    x = (rng.standard_normal((33, 17)) * 8).astype(np.float32)
    want = call(x, None)
    bits = np.dtype(f"u{want.dtype.itemsize}")
    out = np.full(x.shape, 7.0, dtype=want.dtype)
    got = call(x, out)
    assert got is out
    np.testing.assert_array_equal(out.view(bits), want.view(bits))
    # A strided (transposed) destination is filled element for element.
    backing = np.zeros((17, 33), dtype=want.dtype)
    got = call(x, backing.T)
    np.testing.assert_array_equal(backing.T.view(bits), want.view(bits))
    # Another float dtype: the result rounded once, as want.astype (float32: the ONNX node's output).
    for dtype in (np.float16, np.float32, np.float64):
        other = np.empty(x.shape, dtype)
        with np.errstate(over="ignore"):
            expected = want.astype(dtype)
        call(x, other)
        np.testing.assert_array_equal(other.view(f"u{other.itemsize}"), expected.view(f"u{other.itemsize}"))
    # In place: out is x itself (float32); and out overlapping x in another layout is buffered.
    y = x.copy()
    call(y, y)
    np.testing.assert_array_equal(y.view(np.uint32), want.astype(np.float32).view(np.uint32))
    y = x.copy()
    call(y, y[::-1, ::-1])
    np.testing.assert_array_equal(y[::-1, ::-1].view(np.uint32), want.astype(np.float32).view(np.uint32))
    square = (rng.standard_normal((64, 64)) * 8).astype(np.float32)
    want_t = call(square, None).astype(np.float32).T
    call(square, square.T)
    np.testing.assert_array_equal(square.view(np.uint32), want_t.view(np.uint32))


@pytest.mark.parametrize(
    "out, error, fragment",
    [
        (np.empty((3,), np.float32), ValueError, "out must have shape (33, 17)"),
        (np.empty((33, 17), np.int32), ValueError, "dtype float32 (or another float dtype"),
        (np.empty((33, 17), ">f4"), ValueError, "byte order is not the machine's"),
        ([0.0] * 3, TypeError, "out: expected a numpy array"),
    ],
    ids=["shape", "dtype", "big-endian", "not-an-array"],
)
def test_bad_out_is_rejected(out, error, fragment):
    x = np.zeros((33, 17), np.float32)
    with pytest.raises(error, match=re.escape(fragment)):
        pq.int_quant(x, 0.1, 0, 4, 1, 0, "ROUND", out=out)


def test_read_only_out_is_rejected():
    x = np.zeros((4,), np.float32)
    out = np.empty_like(x)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: the array is read-only"):
        pq.bipolar_quant(x, 1.0, out=out)


_EXIT_WHILE_BUSY = r'''
import threading, time, numpy as np, polyquant.qonnx as pq
def loop(n):
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    while True:
        pq.float_quant(x, np.float32(0.1), np.float32(4), np.float32(3), out=out)
# Long calls (inside a kernel at exit) and short ones (often waiting for the GIL at exit).
for n in [1 << 24] * 2 + [1 << 18] * 6:
    threading.Thread(target=loop, args=(n,), daemon=True).start()
time.sleep(0.1)
'''


def test_interpreter_exit_while_daemon_threads_are_inside_calls():
    """Daemon threads still inside polyquant calls when the interpreter exits must not abort the
    process (CPython ends a thread that takes the GIL back during finalization with pthread_exit;
    the forced unwind through C++ frames reached std::terminate: 'terminate called without an
    active exception', exit status 134). A check of the finalizing flag before taking the GIL left
    a window (the flag is set while the thread waits for the GIL): this script aborted in 14 of 40
    runs with that check alone. Several runs, as it depends on timing."""
    for _ in range(12):
        result = subprocess.run([sys.executable, "-c", _EXIT_WHILE_BUSY], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and "terminate" not in result.stderr, (result.returncode, result.stderr)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_ops_work_in_a_forked_child_after_use_in_the_parent():
    """A fork()ed child inherits the thread pool object but not its threads; it must rebuild the
    pool instead of waiting forever for workers that do not exist (multiprocessing's default on
    Linux)."""
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)  # big enough to use threads
    want = pq.int_quant(x, 0.1, 0, 8, 1, 0, "ROUND")
    code = (
        "import os, sys, numpy as np, polyquant.qonnx as pq\n"
        "x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)\n"
        "want = pq.int_quant(x, 0.1, 0, 8, 1, 0, 'ROUND')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    got = pq.int_quant(x, 0.1, 0, 8, 1, 0, 'ROUND')\n"
        "    os._exit(0 if np.array_equal(got.view(np.uint32), want.view(np.uint32)) else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert want.dtype == np.float32
