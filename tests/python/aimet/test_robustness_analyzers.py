"""Bad input, threads and interpreter exit for polyquant's AIMET encoding analyzers (issue 17)."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from ..helpers import run_threads
from polyquant.aimet.analyzers import (
    MinMaxEncodingAnalyzer,
    PercentileEncodingAnalyzer,
    SqnrEncodingAnalyzer,
    TfEnhancedEncodingAnalyzer,
)

MAKERS = {
    "minmax": lambda shape=(1,): MinMaxEncodingAnalyzer(shape),
    "percentile": lambda shape=(1,): PercentileEncodingAnalyzer(shape, 64, 99.0),
    "sqnr": lambda shape=(1,): SqnrEncodingAnalyzer(shape, 64),
    "tfe": lambda shape=(1,): TfEnhancedEncodingAnalyzer(shape),
}
X = np.linspace(-1, 1, 100, dtype=np.float32)


# ---- SQNR candidate counts (item 1: segfault with 0, NaN with 1, vector overflow when negative) ----
@pytest.mark.parametrize("name", ["asymmetric_delta_candidates", "symmetric_delta_candidates"])
@pytest.mark.parametrize("value", [0, 1, -1, -5, 2**24 + 1])
def test_sqnr_delta_candidates_are_validated(name, value):
    with pytest.raises(ValueError, match=name + r".*2 to 16777216"):
        SqnrEncodingAnalyzer((1,), 64, **{name: value})


@pytest.mark.parametrize("value", [0, 2, -5, 2**24 + 1])
def test_sqnr_offset_candidates_are_validated(value):
    with pytest.raises(ValueError, match=r"offset_candidates.*1 or an integer from 3"):
        SqnrEncodingAnalyzer((1,), 64, offset_candidates=value)


@pytest.mark.parametrize("symmetric", [False, True])
def test_sqnr_smallest_valid_candidate_counts_give_finite_encodings(symmetric):
    # 2 delta candidates and offset_candidates = 1 (AIMET: only the observed offset) are defined.
    a = SqnrEncodingAnalyzer((1,), 64, asymmetric_delta_candidates=2, symmetric_delta_candidates=2, offset_candidates=1)
    a.update_stats(X)
    lo, hi = a.compute_encodings(255, symmetric)
    assert np.isfinite(lo).all() and np.isfinite(hi).all() and lo[0] <= 0 <= hi[0] and hi[0] > lo[0]


@pytest.mark.parametrize("key, value", [("asymmetric_delta_candidates", 0), ("symmetric_delta_candidates", 1),
                                        ("offset_candidates", 0), ("offset_candidates", -5)])
def test_sqnr_from_state_validates_candidates(key, value):
    a = SqnrEncodingAnalyzer((1,), 64)
    a.update_stats(X)
    state = a.state_dict()
    state[key] = value
    with pytest.raises(ValueError, match=key):
        SqnrEncodingAnalyzer.from_state(state)


# ---- integer / real parameters: no nanobind internals, no silent truncation ------------------------
@pytest.mark.parametrize("value", [2**40, 2**63, 4, 12])
def test_torch_sum_lanes_names_allowed_values(value):
    with pytest.raises(ValueError, match=r"torch_sum_lanes.*8.*16") as e:
        SqnrEncodingAnalyzer((1,), 64, torch_sum_lanes=value)
    assert "_Aimet" not in str(e.value) and "incompatible" not in str(e.value)
    with pytest.raises(ValueError, match="torch_sum_lanes"):
        TfEnhancedEncodingAnalyzer((1,), torch_sum_lanes=value)


BAD_INTS = [(1.5, TypeError), (True, TypeError), (None, TypeError), ("8", TypeError), (2**63, ValueError),
            (-(2**63) - 1, ValueError)]


@pytest.mark.parametrize("value, error", BAD_INTS)
@pytest.mark.parametrize("param", ["num_bins", "max_parallelism", "asymmetric_delta_candidates",
                                   "symmetric_delta_candidates", "offset_candidates", "torch_sum_lanes"])
def test_sqnr_int_parameters_name_themselves(param, value, error):
    kwargs = {param: value}
    with pytest.raises(error, match=param) as e:
        if param == "num_bins":
            SqnrEncodingAnalyzer((1,), value)
        else:
            SqnrEncodingAnalyzer((1,), 64, **kwargs)
    assert "_Aimet" not in str(e.value) and "incompatible function arguments" not in str(e.value)


@pytest.mark.parametrize("value, error", BAD_INTS)
def test_percentile_num_bins_names_itself(value, error):
    with pytest.raises(error, match="num_bins"):
        PercentileEncodingAnalyzer((1,), value, 99.0)


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("shape, name", [((1.5,), "shape"), ((True,), "shape"), ((None,), "shape"), (1.5, "shape"),
                                         (None, "shape"), ((2**63,), "shape"), ("ab", "shape")])
def test_shape_entries_name_themselves(kind, shape, name):
    with pytest.raises((TypeError, ValueError), match=name):
        MAKERS[kind](shape)


@pytest.mark.parametrize("block, error", [((1.5,), TypeError), ((True,), TypeError), ((None,), TypeError),
                                          ((2**63,), ValueError), (3, TypeError)])
def test_block_size_entries_name_themselves(block, error):
    for make in (lambda: MinMaxEncodingAnalyzer((4,), block_size=block),
                 lambda: PercentileEncodingAnalyzer((4,), 16, 99.0, block_size=block),
                 lambda: SqnrEncodingAnalyzer((4,), 16, block_size=block)):
        with pytest.raises(error, match="block_size"):
            make()


@pytest.mark.parametrize("value", [None, "99", True])
def test_real_parameters_name_themselves(value):
    with pytest.raises(TypeError, match="percentile"):
        PercentileEncodingAnalyzer((1,), 16, value)
    with pytest.raises(TypeError, match="gamma"):
        SqnrEncodingAnalyzer((1,), 16, gamma=value)
    a = MinMaxEncodingAnalyzer((1,))
    a.update_stats(X)
    with pytest.raises(TypeError, match="num_steps"):
        a.compute_encodings(value, False)


# ---- empty batches: a clear ValueError (AIMET refuses them too) -----------------------------------
@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("x_shape, shape, good_shape", [((0,), (1,), (3,)), ((0, 4), (1,), (2, 4)), ((4, 0), (4, 1), (4, 3))])
def test_empty_batch_says_so(kind, x_shape, shape, good_shape):
    a = MAKERS[kind](shape)
    x = np.zeros(x_shape, np.float32)
    with pytest.raises(ValueError, match="batch is empty"):
        a.update_stats(x)
    assert not a.has_stats()
    with pytest.raises(ValueError, match="batch is empty"):
        a.compute_dynamic_encodings(x, 255, False)
    a.update_stats(np.arange(np.prod(good_shape), dtype=np.float32).reshape(good_shape))  # and after statistics exist
    with pytest.raises(ValueError, match="batch is empty"):
        a.update_stats(x)


# ---- garbage state dicts: ValueError / TypeError naming the key --------------------------------
def _state(kind, shape=(2, 1)):
    a = MAKERS[kind](shape)
    a.update_stats(np.random.default_rng(0).standard_normal((2, 50)).astype(np.float32))
    return a, a.state_dict()


HIST_KEYS = ["histogram", "bin_edges", "min", "max", "range_limit"]
KEYS = {"minmax": ["min", "max"], "percentile": HIST_KEYS, "sqnr": HIST_KEYS, "tfe": HIST_KEYS}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_garbage_state_dicts_name_the_key(kind):
    a, good = _state(kind)
    cls = type(a)
    fresh = lambda: MAKERS[kind]((2, 1))  # noqa: E731
    for key in KEYS[kind] + ["dtype", "kind"]:
        bad = dict(good)
        del bad[key]
        if key == "dtype":  # no dtype means no statistics: a valid empty state
            fresh().load_state_dict(bad)
            continue
        with pytest.raises(ValueError, match=repr(key)):
            fresh().load_state_dict(bad)
        with pytest.raises(ValueError, match=repr(key)):
            cls.from_state(bad)
    for key in KEYS[kind]:
        arr = np.asarray(good[key])
        cases = [
            (arr.reshape(-1)[:-1], ValueError),  # wrong size
            (np.concatenate([arr.reshape(-1), arr.reshape(-1)]), ValueError),
            (arr.astype(np.complex64), TypeError),  # wrong dtype
            (np.array(["a"] * arr.size).reshape(arr.shape), TypeError),
            (None, TypeError),
            ("garbage", TypeError),
            (np.zeros(arr.shape + (1,)), ValueError),  # wrong rank
        ]
        for value, error in cases:
            bad = dict(good)
            bad[key] = value
            with pytest.raises(error, match=repr(key)):
                fresh().load_state_dict(bad)
    for value in ("float8", 3, "int32"):
        bad = dict(good, dtype=value)
        with pytest.raises(ValueError, match="'dtype'"):
            fresh().load_state_dict(bad)
    with pytest.raises(ValueError, match="'kind'"):
        fresh().load_state_dict(dict(good, kind="other"))
    with pytest.raises(TypeError, match="state"):
        fresh().load_state_dict([1, 2])
    with pytest.raises(TypeError, match="state"):
        cls.from_state(None)


@pytest.mark.parametrize("kind", ["percentile", "sqnr"])
def test_state_with_other_bin_count_names_the_key(kind):
    _, good = _state(kind)
    bad = dict(good, num_bins=good["num_bins"] * 2)  # from_state builds 128 bins, the arrays have 64
    with pytest.raises(ValueError, match="'histogram'"):
        type(MAKERS[kind]()).from_state(bad)


def _f32(n):
    return np.zeros(n, np.float32)


def _f64(n):
    return np.zeros(n, np.float64)


def test_core_set_state_checks_sizes():
    # The binding's own entry point (bypassing the Python checks) validates sizes in C++ too: the
    # error names the array and the expected count. Shape (2, 1) with 64 bins: 2 histograms.
    a, good = _state("sqnr")
    impl = a._impl
    with pytest.raises(ValueError, match="histogram has 2 values, expected 128"):
        impl.set_state("float32", 64, _f32(2), _f32(2 * 65), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(ValueError, match="num_bins"):
        impl.set_state("float32", 63, _f32(2), _f32(2), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(ValueError, match="bin_edges has 128 values, expected 130"):
        impl.set_state("float32", 64, _f32(128), _f32(128), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(ValueError, match="min"):
        MinMaxEncodingAnalyzer((2, 1))._impl.set_state("float32", _f64(1), _f64(2))
    # the right sizes are taken (the round trip of the getter's arrays)
    impl.set_state(*impl.get_state())
    assert all(np.array_equal(a.state_dict()[k], good[k]) for k in HIST_KEYS)


def test_core_set_state_rejects_other_dtypes_and_layouts():
    # set_state takes get_state's arrays as they are: 1-D, C-contiguous, float32 (histogram,
    # bin_edges, range limits) or float64 (min, max). Anything else is a TypeError whose text lists
    # each parameter's expected array; nothing is converted silently.
    a, _ = _state("sqnr")
    impl = a._impl
    with pytest.raises(TypeError, match=r"histogram: ndarray\[dtype=float32"):
        impl.set_state("float32", 64, _f64(128), _f32(130), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(TypeError, match=r"min: ndarray\[dtype=float64"):
        impl.set_state("float32", 64, _f32(128), _f32(130), _f32(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(TypeError, match="order='C'"):
        impl.set_state("float32", 64, _f32(256)[::2], _f32(130), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(TypeError, match=r"shape=\(\*\)"):
        impl.set_state("float32", 64, _f32((2, 64)), _f32(130), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        impl.set_state("float32", 64, b"\0" * 512, _f32(130), _f64(2), _f64(2), _f32(2), _f32(2))
    with pytest.raises(TypeError, match=r"max: ndarray\[dtype=float64"):
        MinMaxEncodingAnalyzer((2, 1))._impl.set_state("float32", _f64(2), _f32(2))
    assert a.has_stats()  # the rejected calls left the statistics alone


# ---- threads (item 4) ------------------------------------------------------------------------------
def _batches(n=16, size=65536):
    rng = np.random.default_rng(7)
    out = []
    for _ in range(n):
        b = np.clip(rng.standard_normal(size), -3.5, 3.5).astype(np.float32)
        b[0], b[1] = -4.0, 4.0  # every batch spans the same range: the order of batches cannot matter
        out.append(b)
    return out


@pytest.mark.parametrize("kind", ["percentile", "sqnr", "minmax"])
def test_concurrent_update_stats_equals_serial(kind):
    make = {"percentile": lambda: PercentileEncodingAnalyzer((1,), 256, 99),
            "sqnr": lambda: SqnrEncodingAnalyzer((1,), 256), "minmax": lambda: MinMaxEncodingAnalyzer((1,))}[kind]
    # The first batch fixes the histogram's range (and is binned over its own edges, later ones over
    # the range: AIMET's), so it goes first; the other 16 run on 8 threads in any order.
    batches = _batches(17)
    serial = make()
    for b in batches:
        serial.update_stats(b)
    for _ in range(3):
        shared = make()
        shared.update_stats(batches[0])
        run_threads(lambda part: [shared.update_stats(b) for b in part], [(batches[1 + i::8],) for i in range(8)])
        if kind != "minmax":
            assert shared.state_dict()["histogram"].sum() == 17 * 65536  # no lost counts
            assert np.array_equal(shared.state_dict()["histogram"], serial.state_dict()["histogram"])
        for sym in (False, True):
            for p, q in zip(shared.compute_encodings(255, sym), serial.compute_encodings(255, sym)):
                assert np.array_equal(p.view(np.uint32), q.view(np.uint32))


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_update_concurrent_with_readers_and_merges(kind):
    batches = _batches(8, 32768)
    a, other = MAKERS[kind](), MAKERS[kind]()
    a.update_stats(batches[0])
    other.update_stats(batches[1])
    stop = threading.Event()

    def writer():
        for b in batches:
            a.update_stats(b)
            other.update_stats(b)

    def reader():
        while not stop.is_set():
            a.compute_encodings(255, False)
            a.state_dict()
            a.has_stats()
            a.compute_dynamic_encodings(batches[2], 255, True)

    def merger():
        while not stop.is_set():
            a.merge(other)
            other.merge(a)  # both directions at once: must not deadlock
            a.merge(a)

    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        return run

    readers = [threading.Thread(target=guarded(r)) for r in (reader, reader, merger)]
    for t in readers:
        t.start()
    try:
        run_threads(writer, [(), ()])
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=120)
    assert not any(t.is_alive() for t in readers), "deadlock"
    assert not errors, errors
    a.compute_encodings(255, False)


@pytest.mark.parametrize("kind", ["percentile", "sqnr", "tfe"])
def test_self_merge_doubles_counts(kind):
    a = MAKERS[kind]()
    a.update_stats(X)
    before = a.state_dict()
    a.merge(a)
    after = a.state_dict()
    assert np.array_equal(after["histogram"], 2 * before["histogram"])
    assert np.array_equal(after["bin_edges"], before["bin_edges"])


def test_minmax_self_merge_keeps_statistics():
    a = MinMaxEncodingAnalyzer((1,))
    a.update_stats(X)
    before = a.state_dict()
    a.merge(a)
    assert np.array_equal(a.state_dict()["min"], before["min"]) and np.array_equal(a.state_dict()["max"], before["max"])


# ---- interpreter exit with daemon threads inside the analyzers (item 2) ------------------------------
EXIT_SCRIPT = textwrap.dedent(
    """
    import threading, time, numpy as np
    from polyquant.aimet.analyzers import MinMaxEncodingAnalyzer, PercentileEncodingAnalyzer, SqnrEncodingAnalyzer
    which = {which!r}
    x = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    def loop():
        if which == "minmax":
            a = MinMaxEncodingAnalyzer((4096, 1))
            while True:
                a.update_stats(x)
        elif which == "percentile":
            a = PercentileEncodingAnalyzer((1,), 2048, 99.0)
            while True:
                a.update_stats(x)
        elif which == "sqnr":
            a = SqnrEncodingAnalyzer((64, 1), 512)
            a.update_stats(x[:64])
            while True:
                a.compute_encodings(255, False)
        else:
            a = SqnrEncodingAnalyzer((64, 1), 512)
            while True:
                a.compute_dynamic_encodings(x[:512], 255, False)
    for _ in range(4):
        threading.Thread(target=loop, daemon=True).start()
    time.sleep(0.3)
    """
)


@pytest.mark.parametrize("which", ["minmax", "percentile", "sqnr", "dynamic"])
def test_daemon_threads_in_analyzers_at_exit(which):
    # The child imports polyquant as this interpreter does (the installed package; no PYTHONPATH
    # pointing at the source tree, which holds no compiled extension).
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", EXIT_SCRIPT.format(which=which)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and "terminate" not in r.stderr, (r.returncode, r.stderr[-2000:])
