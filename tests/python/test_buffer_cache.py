"""The output buffer cache (python/src/buffer_cache.h, docs/performance.md "Reused output
buffers"): allocating calls take results of 1 MiB or more from buffers whose arrays were freed.
Results stay ordinary numpy arrays that own their memory; a buffer is reused only after its array
is freed; the cache is capped (POLYQUANT_BUFFER_CACHE), can be emptied, and is thread- and
fork-safe."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import ml_dtypes
import numpy as np
import pytest

import polyquant
import polyquant.aimet as pqa
import polyquant.onnx as pqo
from polyquant import _polyquant_ext as ext

MIB = 1 << 20


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def q_int8(x: np.ndarray, scale: float = 0.05, out: np.ndarray | None = None) -> np.ndarray:
    return pqo.quantize_linear(x, np.float32(scale), np.int8(0), out=out)


def q_int8_reference(x: np.ndarray, scale: float = 0.05) -> np.ndarray:
    """ONNX QuantizeLinear to int8, zero point 0: saturate(round_half_even(x / scale))."""
    return np.clip(np.rint(x / np.float32(scale)), -128, 127).astype(np.int8)


@pytest.fixture
def x(rng) -> np.ndarray:
    """2 Mi float32 values: an int8 result of 2 MiB and a float32 one of 8 MiB, both cached."""
    return (rng.standard_normal(2 * MIB) * 3).astype(np.float32)


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test starts with an empty cache at its configured limit and leaves it so."""
    limit = polyquant.buffer_cache_info()["limit_bytes"]
    if limit == 0:
        pytest.skip("the buffer cache is off (POLYQUANT_BUFFER_CACHE=0)")
    gc.collect()
    polyquant.empty_cache()
    yield
    ext._set_buffer_cache_limit(limit)
    polyquant.empty_cache()


def test_info_names_and_the_public_api():
    info = polyquant.buffer_cache_info()
    assert set(info) == {"cached_bytes", "cached_buffers", "limit_bytes", "min_buffer_bytes", "hits", "misses"}
    assert info["cached_bytes"] == 0 and info["cached_buffers"] == 0
    assert info["min_buffer_bytes"] == MIB
    assert 0 < info["limit_bytes"] <= 2 << 30
    assert {"empty_cache", "buffer_cache_info"} <= set(polyquant.__all__)


def test_a_freed_buffer_is_reused(x):
    before = polyquant.buffer_cache_info()
    y = q_int8(x)
    first = address(y)
    after_first = polyquant.buffer_cache_info()
    assert after_first["misses"] == before["misses"] + 1
    del y
    held = polyquant.buffer_cache_info()
    assert held["cached_buffers"] == 1 and held["cached_bytes"] >= x.size
    y = q_int8(x)
    assert address(y) == first
    info = polyquant.buffer_cache_info()
    assert info["hits"] == before["hits"] + 1
    assert info["cached_buffers"] == 0
    np.testing.assert_array_equal(y, q_int8_reference(x))


def test_results_are_plain_writable_numpy_arrays(x):
    y = q_int8(x.reshape(2, 1024, 1024))
    assert type(y) is np.ndarray
    assert y.dtype == np.int8 and y.shape == (2, 1024, 1024)
    assert y.flags.c_contiguous and y.flags.writeable and y.flags.aligned
    assert address(y) % 64 == 0
    np.testing.assert_array_equal(y, q_int8_reference(x).reshape(y.shape))
    y[0, 0, 0] = 7
    assert y[0, 0, 0] == 7
    # A view keeps the buffer alive after its array is gone.
    view = y[1]
    expected = view.copy()
    del y
    gc.collect()
    assert polyquant.buffer_cache_info()["cached_buffers"] == 0
    other = q_int8(x * 2)
    np.testing.assert_array_equal(view, expected)
    assert not np.shares_memory(view, other)


def test_a_live_array_is_never_reused(rng):
    inputs = [(rng.standard_normal(2 * MIB) * (k + 1)).astype(np.float32) for k in range(6)]
    results = [q_int8(v) for v in inputs]
    assert len({address(r) for r in results}) == len(results)
    # Writing to each result must not change any other.
    for r in results:
        r.fill(99)
        del r
    results = [q_int8(v) for v in inputs]
    results[0].fill(-1)
    for v, r in zip(inputs[1:], results[1:]):
        np.testing.assert_array_equal(r, q_int8_reference(v))
    # Half freed, then new calls: they reuse the freed ones only.
    kept = results[::2]
    kept_expected = [q_int8_reference(v) for v in inputs[::2]]
    kept_expected[0][:] = -1
    del results
    new = [q_int8(v * 0.5) for v in inputs]
    assert not ({address(r) for r in new} & {address(k) for k in kept})
    for n in new:
        n.fill(55)
    for k, e in zip(kept, kept_expected):
        np.testing.assert_array_equal(k, e)


def test_small_results_are_numpys(rng):
    small = rng.standard_normal(MIB // 2).astype(np.float32)  # an int8 result of 512 KiB
    before = polyquant.buffer_cache_info()
    y = q_int8(small)
    del y
    after = polyquant.buffer_cache_info()
    assert (after["hits"], after["misses"], after["cached_buffers"]) == (before["hits"], before["misses"], 0)


def test_empty_cache_releases_the_idle_buffers(x):
    ys = [q_int8(x), pqa.quantize_dequantize(x, np.float32(0.1), np.float32(0), -128, 127)]
    del ys
    info = polyquant.buffer_cache_info()
    assert info["cached_buffers"] == 2 and info["cached_bytes"] >= 2 * MIB + 8 * MIB
    polyquant.empty_cache()
    info = polyquant.buffer_cache_info()
    assert info["cached_buffers"] == 0 and info["cached_bytes"] == 0
    misses = info["misses"]
    y = q_int8(x)
    assert polyquant.buffer_cache_info()["misses"] == misses + 1
    np.testing.assert_array_equal(y, q_int8_reference(x))


def test_the_limit_bounds_the_idle_bytes(rng):
    ext._set_buffer_cache_limit(5 * MIB)
    a = rng.standard_normal(2 * MIB).astype(np.float32)
    y0, y1, y2 = q_int8(a), q_int8(a), q_int8(a)
    addresses = [address(y0), address(y1), address(y2)]
    del y0, y1, y2  # in this order: three idle buffers of 2 MiB do not fit in 5 MiB
    info = polyquant.buffer_cache_info()
    assert info["cached_buffers"] == 2 and info["cached_bytes"] == 4 * MIB
    # The least recently cached one was evicted, the most recent is taken first.
    y = q_int8(a)
    assert address(y) == addresses[2]
    # A buffer larger than the limit is never kept.
    big = pqa.quantize_dequantize(a, np.float32(0.1), np.float32(0), -128, 127)  # 8 MiB
    del big
    info = polyquant.buffer_cache_info()
    assert info["cached_bytes"] <= 5 * MIB and info["cached_buffers"] == 1
    np.testing.assert_array_equal(y, q_int8_reference(a))


def test_limit_zero_turns_the_cache_off(x):
    ext._set_buffer_cache_limit(0)
    before = polyquant.buffer_cache_info()
    assert before["limit_bytes"] == 0
    y = q_int8(x)
    first = address(y)
    del y
    y = q_int8(x)
    info = polyquant.buffer_cache_info()
    assert (info["hits"], info["misses"], info["cached_buffers"]) == (before["hits"], before["misses"], 0)
    assert y.flags.owndata  # numpy's own allocation
    np.testing.assert_array_equal(y, q_int8_reference(x))
    assert first != 0


@pytest.mark.parametrize("dtype_name", ["int8", "uint8", "float8_e4m3fn", "float8_e5m2", "int4", "float4_e2m1fn"])
def test_every_quantize_linear_output_dtype_is_correct_and_independent(rng, dtype_name):
    dtype = getattr(ml_dtypes, dtype_name, None) or np.dtype(dtype_name)
    x = (rng.standard_normal(4 * MIB) * 4).astype(np.float32)
    zp = np.zeros((), dtype)
    reference = np.empty(x.shape, dtype)
    pqo.quantize_linear(x, np.float32(0.5), zp, out=reference)
    a = pqo.quantize_linear(x, np.float32(0.5), zp)
    b = pqo.quantize_linear(x, np.float32(0.5), zp)
    assert a.dtype == np.dtype(dtype) and a.shape == x.shape and a.flags.writeable
    assert not np.shares_memory(a, b)
    a.view(np.uint8)[:] = 0
    np.testing.assert_array_equal(b.view(np.uint8), reference.view(np.uint8))
    del a, b
    c = pqo.quantize_linear(x, np.float32(0.5), zp)  # a reused buffer, holding another call's bytes
    np.testing.assert_array_equal(c.view(np.uint8), reference.view(np.uint8))


@pytest.mark.parametrize("x_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_float_outputs_are_correct_and_independent(rng, x_dtype):
    """AIMET's quantize_dequantize returns x's dtype: float32, float16 and (ml_dtypes) bfloat16."""
    x = (rng.standard_normal(2 * MIB) * 4).astype(x_dtype)
    scale, offset = np.asarray(0.25, x_dtype), np.asarray(-3, x_dtype)
    reference = pqa.quantize_dequantize(x[: 1 << 10], scale, offset, -128, 127)  # below the cache's threshold
    a = pqa.quantize_dequantize(x, scale, offset, -128, 127)
    b = pqa.quantize_dequantize(x, scale, offset, -128, 127)
    assert a.dtype == np.dtype(x_dtype) and a.shape == x.shape and not np.shares_memory(a, b)
    a[:] = 0
    np.testing.assert_array_equal(b[: 1 << 10].view(np.uint16 if b.itemsize == 2 else np.uint32),
                                  reference.view(np.uint16 if b.itemsize == 2 else np.uint32))
    del a, b
    c = pqa.quantize_dequantize(x, scale, offset, -128, 127)
    assert polyquant.buffer_cache_info()["hits"] >= 1
    np.testing.assert_array_equal(c[: 1 << 10].view(np.uint16 if c.itemsize == 2 else np.uint32),
                                  reference.view(np.uint16 if c.itemsize == 2 else np.uint32))


def test_threads_hammering_the_cache_get_correct_results(rng):
    inputs = [(rng.standard_normal(MIB + 4096 * k) * (k + 1)).astype(np.float32) for k in range(8)]
    expected = [q_int8_reference(v, 0.03) for v in inputs]
    errors: list[str] = []

    def work(k: int) -> None:
        kept = []
        for i in range(25):
            y = q_int8(inputs[k], 0.03)
            if not np.array_equal(y, expected[k]):
                errors.append(f"thread {k} call {i}: wrong result")
            y.fill(k)  # must never show in another thread's result
            if i % 3 == 0:
                kept.append(y)
            if len(kept) > 2:
                kept.pop(0)
        for y in kept:
            if not (y == k).all():
                errors.append(f"thread {k}: a kept result changed")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert polyquant.buffer_cache_info()["hits"] > 0


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=120)


_SCRIPT_HEADER = """
import numpy as np, polyquant, polyquant.onnx as pqo
x = (np.random.default_rng(1).standard_normal(1 << 21) * 3).astype(np.float32)
ref = np.clip(np.rint(x / np.float32(0.05)), -128, 127).astype(np.int8)
def q():
    return pqo.quantize_linear(x, np.float32(0.05), np.int8(0))
"""


@pytest.mark.parametrize("value, limit", [("0", 0), ("3145728", 3 * MIB), ("64M", 64 * MIB), ("1g", 1 << 30),
                                          ("", None)])
def test_the_environment_variable_sets_the_limit(value, limit):
    proc = _run(_SCRIPT_HEADER + """
for _ in range(3):
    y = q()
    assert (y == ref).all()
    del y
info = polyquant.buffer_cache_info()
print(info["limit_bytes"], info["hits"], info["cached_buffers"])
""", POLYQUANT_BUFFER_CACHE=value)
    assert proc.returncode == 0, proc.stderr
    got_limit, hits, cached = map(int, proc.stdout.split())
    if limit is None:  # the default: min(2 GiB, physical memory / 8)
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
        assert got_limit == min(2 << 30, ram // 8)
    else:
        assert got_limit == limit
    assert (hits, cached) == ((0, 0) if limit == 0 else (2, 1))


@pytest.mark.parametrize("value", ["abc", "-1", "1.5G", "12GB", "99999999999999999999999"])
def test_a_bad_environment_value_is_a_clear_error(value):
    proc = _run(_SCRIPT_HEADER + """
small = pqo.quantize_linear(x[:100], np.float32(0.05), np.int8(0))  # below the threshold: numpy's
for fn in (q, polyquant.buffer_cache_info):
    try:
        fn()
    except ValueError as e:
        print(e)
    else:
        print("no error")
""", POLYQUANT_BUFFER_CACHE=value)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith(f"POLYQUANT_BUFFER_CACHE='{value}'"), line
        assert "K, M or G" in line and "0 to turn the cache off" in line


def test_a_forked_child_starts_with_its_own_empty_cache():
    proc = _run(_SCRIPT_HEADER + """
import os
kept = q()
y = q(); del y                      # one idle buffer in the parent
assert polyquant.buffer_cache_info()["cached_buffers"] == 1
pid = os.fork()
if pid == 0:
    status = 0
    try:
        if polyquant.buffer_cache_info()["cached_buffers"] != 0: status = 2
        for _ in range(3):
            y = q()
            if not (y == ref).all(): status = 3
            y.fill(1)
            del y
        if polyquant.buffer_cache_info()["hits"] < 2: status = 4
        kept.fill(7)                # the child's copy: the parent's stays as it was
        del kept
    except BaseException:
        status = 5
    os._exit(status)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
assert polyquant.buffer_cache_info()["cached_buffers"] == 1
assert (kept == ref).all()
y = q()
assert (y == ref).all()
print("ok")
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_arrays_alive_at_interpreter_exit_are_fine():
    """Results still alive (and idle buffers) at exit: the cache closes at atexit; later frees unmap."""
    proc = _run(_SCRIPT_HEADER + """
kept = [q() for _ in range(3)]
y = q(); del y
print("ok")                             # `kept` is freed during finalization, after the cache closed
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_the_garbage_collector_freeing_results_during_a_cache_call():
    """Results in reference cycles are freed by the garbage collector, which (up to Python 3.11)
    runs inside any allocation of a tracked Python object, buffer_cache_info's dict included: the
    cache must not hold its lock then (it would wait on itself forever; the subprocess times out)."""
    proc = _run(_SCRIPT_HEADER + """
import gc
gc.disable()
for round in range(10):
    for _ in range(4):
        cycle = [q()]
        cycle.append(cycle)          # freed only by the collector
    del cycle
    hold = [{} for _ in range(200)]  # empties the dict free list: the info's dict is a GC allocation
    gc.set_threshold(1, 1, 1)
    gc.enable()
    polyquant.buffer_cache_info()    # the collector frees the cycles inside this call
    after = polyquant.buffer_cache_info()["cached_buffers"]
    assert after == 4, after         # the 4 cycles are gone, their buffers back in the cache
    y = q()
    assert (y == ref).all()
    del y, hold
    gc.disable()
    gc.set_threshold(700, 10, 10)
    polyquant.empty_cache()
print("ok")
""")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
