"""Helpers the tests of every family share (import them as ``from ..helpers import ...``; the
fixtures built on them are in conftest.py): the bit-exact comparison, threads, kernel-set switching,
the hypothesis budget and input layouts."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable

import numpy as np
import pytest

# Override with POLYQUANT_TEST_SEED=<int> to reproduce or vary a run; the seed is in the header.
SEED = int(os.environ.get("POLYQUANT_TEST_SEED", "20260213"))


_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def assert_identical(actual: np.ndarray, expected: np.ndarray, *inputs: np.ndarray) -> None:
    """Same type, dtype, shape and bit pattern; any NaN equals any NaN, and the sign of zero
    matters. On failure, lists the first mismatches together with the broadcast inputs."""
    assert isinstance(actual, np.ndarray), f"expected an ndarray, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != reference {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != reference {expected.shape}"
    a = np.ascontiguousarray(actual)
    e = np.ascontiguousarray(expected)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    utype = _UINT[a.dtype.itemsize]
    bad = (a_nan != e_nan) | (~a_nan & ~e_nan & (a.view(utype) != e.view(utype)))
    if bad.any():
        idx = np.argwhere(bad)[:8]
        lines = []
        for i in idx:
            i = tuple(int(k) for k in i)
            ins = [np.broadcast_to(np.asarray(t), a.shape)[i] for t in inputs]
            lines.append(f"  at {i}: got {a[i]!r}, reference {e[i]!r}; inputs {ins!r}")
        pytest.fail(f"{int(bad.sum())} of {a.size} elements differ:\n" + "\n".join(lines))


def run_threads(target: Callable[..., object], args_list: list[tuple]) -> None:
    """Runs target(*args) in one thread per entry of args_list, all at once, and fails with every
    exception any of them raised (an exception in a thread would otherwise only be printed)."""
    errors: list[BaseException] = []

    def guarded(*args):
        try:
            target(*args)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=args) for args in args_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@contextlib.contextmanager
def kernel_set(name: str | None, threads: int | None = None):
    """Runs the body on kernel set `name` (None: whatever is active) with `threads` threads, and
    restores both afterwards. The switches are test hooks of the extension; without them only the
    active set runs."""
    from polyquant import _polyquant_ext as ext
    import polyquant

    info = polyquant.runtime_info()
    switch_threads = threads is not None and hasattr(ext, "_set_num_threads")
    try:
        if name is not None:
            ext._set_kernel_set(name)
        if switch_threads:
            ext._set_num_threads(threads)
        yield
    finally:
        if name is not None:
            ext._set_kernel_set(info["isa"])
        if switch_threads:
            ext._set_num_threads(info["num_threads"])


def hypothesis_budget() -> tuple[Callable[[int], Callable], str]:
    """The property tests' example budget, shared by every test_*_properties module: returns
    (examples, profile) where @examples(ci) runs `ci` derandomized examples (the same ones every
    run), scaled by POLYQUANT_HYPOTHESIS_SCALE (the sanitized run uses a quarter), or
    POLYQUANT_HYPOTHESIS_EXAMPLES random examples when that is set. hypothesis is imported here, not
    at the top: it is optional, and the modules skip without it."""
    from hypothesis import HealthCheck, settings

    common = dict(deadline=None, database=None, print_blob=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    long = os.environ.get("POLYQUANT_HYPOTHESIS_EXAMPLES")
    scale = float(os.environ.get("POLYQUANT_HYPOTHESIS_SCALE", "1"))
    profile = "polyquant-long" if long else "polyquant-ci"
    settings.register_profile(profile, max_examples=int(long) if long else 100, derandomize=not long, **common)

    def examples(ci: int) -> Callable:
        return settings(settings.get_profile(profile), max_examples=int(long) if long else max(1, round(ci * scale)))

    return examples, profile


def layouts(x: np.ndarray, variant: int) -> np.ndarray:
    """x in memory layout number `variant` (0-4): as given, strided (every other element of a
    wider array), reversed along every axis, Fortran order, or broadcast from one element (zero
    strides; that one changes the values)."""
    if x.ndim == 0 or x.size == 0 or variant == 0:
        return x
    if variant == 1:
        big = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
        big[..., ::2] = x
        return big[..., ::2]
    if variant == 2:
        return np.flip(np.flip(x).copy())
    if variant == 3:
        return np.asfortranarray(x)
    return np.broadcast_to(x.reshape(-1)[:1].reshape((1,) * x.ndim), x.shape)  # zero strides (new values)


def values_around_ties(rng: np.random.Generator, n: int, scale: float, specials: list[float]) -> np.ndarray:
    """n float32 values for a grid of step `scale`, k drawn from [-300, 300]: in six, one value is
    an exact tie (k + 0.5) * scale, one is 1 ulp above a tie, one 1 ulp below, one is taken from
    `specials`, and two are k * scale / 7 (off the grid)."""
    k = rng.integers(-300, 301, n).astype(np.float32)
    pick = rng.integers(0, 6, n)
    ties = ((k + np.float32(0.5)) * np.float32(scale)).astype(np.float32)
    chosen = np.array(specials, np.float32)[np.abs(k.astype(np.int64)) % len(specials)] if n else np.zeros(0, np.float32)
    return np.select([pick == 0, pick == 1, pick == 2, pick == 3],
                     [ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf)), chosen],
                     (k * np.float32(scale) / np.float32(7.0)).astype(np.float32)).astype(np.float32)
