"""State round trips and threading invariance of polyquant's AIMET analyzers (no aimet-torch needed)."""

import numpy as np
import pytest

from polyquant import _polyquant_ext as _ext
from polyquant.aimet.analyzers import (
    MinMaxEncodingAnalyzer,
    PercentileEncodingAnalyzer,
    SqnrEncodingAnalyzer,
    TfEnhancedEncodingAnalyzer,
)

MAKERS = {
    "minmax": lambda shape: MinMaxEncodingAnalyzer(shape),
    "percentile": lambda shape: PercentileEncodingAnalyzer(shape, 64, 99.0),
    "sqnr": lambda shape: SqnrEncodingAnalyzer(shape, 64),
    "tfe": lambda shape: TfEnhancedEncodingAnalyzer(shape),
}


def _data(seed, shape=(8, 300)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("shape", [(1,), (8, 1)])
def test_from_state_round_trip(kind, shape):
    a = MAKERS[kind](shape)
    a.update_stats(_data(0))
    a.update_stats(_data(1) * 2)
    b = type(a).from_state(a.state_dict())
    for sym in (False, True):
        for x, y in zip(a.compute_encodings(255, sym), b.compute_encodings(255, sym)):
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32))
    empty = type(a).from_state(MAKERS[kind](shape).state_dict())
    assert not empty.has_stats()


def test_minmax_merge_is_exact():
    x = _data(2, (6, 5000))
    whole = MinMaxEncodingAnalyzer((6, 1))
    whole.update_stats(x)
    left, right = MinMaxEncodingAnalyzer((6, 1)), MinMaxEncodingAnalyzer((6, 1))
    left.update_stats(x[:, :2500])
    right.update_stats(x[:, 2500:])
    left.merge(right)
    for p, q in zip(whole.compute_encodings(255, False), left.compute_encodings(255, False)):
        assert np.array_equal(p, q)


@pytest.mark.parametrize("kind", ["percentile", "sqnr"])
@pytest.mark.parametrize("shape", [(1,), (64, 1), (1, 4096)])
def test_threads_do_not_change_results(kind, shape):
    # Large enough for the per-slice split (2 * 2^16 elements) and the per-histogram split.
    x1, x2 = _data(3, (64, 4096)), _data(4, (64, 4096)) * 1.5
    x1[0, 0], x1[1, 1], x1[2, :] = np.inf, np.nan, 0.0
    import polyquant

    restore = polyquant.runtime_info()["num_threads"]
    results = []
    for threads in (1, 2):
        _ext._set_num_threads(threads)
        try:
            a = MAKERS[kind](shape)
            a.update_stats(x1)
            first = a.compute_encodings(255, False)
            a.update_stats(x2)
            results.append((first, a.compute_encodings(255, False), a.compute_encodings(254, True), a.state_dict()["histogram"]))
        finally:
            _ext._set_num_threads(restore)
    (f1, e1, s1, h1), (f2, e2, s2, h2) = results
    assert np.array_equal(h1, h2)
    for p, q in zip(f1 + e1 + s1, f2 + e2 + s2):
        assert np.array_equal(p.view(np.uint32), q.view(np.uint32))


def _bits_equal(p, q):
    p, q = np.asarray(p), np.asarray(q)
    return p.dtype == q.dtype and p.shape == q.shape and np.array_equal(p.view(np.uint8), q.view(np.uint8))


@pytest.mark.parametrize("kind", ["percentile", "sqnr", "tfe"])
@pytest.mark.parametrize("shape, x_shape", [((1,), (4, 600)), ((4, 1), (4, 600)), ((3, 1, 1), (3, 20, 30))])
def test_histogram_merge_with_equal_edges_is_one_analyzer(kind, shape, x_shape):
    # The guarantee (aimet_analyzers.h, README): when both analyzers' histograms have the same edges
    # (here: every part of the split data reaches each histogram's min and max), merging them is
    # exactly one analyzer fed all the batches, counts, edges, range and encodings alike, where each
    # histogram's slice is a contiguous chunk of x (AIMET's per-channel-on-the-last-axis quirk aside).
    rng = np.random.default_rng(5)
    parts = [rng.uniform(-3, 5, x_shape).astype(np.float32) for _ in range(4)]
    lo = np.min([p.min() for p in parts])
    hi = np.max([p.max() for p in parts])
    for p in parts:  # each part spans [lo, hi] in every histogram's slice (a leading channel)
        p.reshape(p.shape[0] if shape != (1,) else 1, -1)[:, :2] = (lo, hi)
    whole = MAKERS[kind](shape)
    for p in parts:
        whole.update_stats(p)
    left, right = MAKERS[kind](shape), MAKERS[kind](shape)
    for p in parts[:2]:
        left.update_stats(p)
    for p in parts[2:]:
        right.update_stats(p)
    assert np.array_equal(left.state_dict()["bin_edges"], right.state_dict()["bin_edges"])
    left.merge(right)
    sw, sl = whole.state_dict(), left.state_dict()
    for key in ("histogram", "bin_edges", "min", "max"):
        assert _bits_equal(sw[key], sl[key]), key
    for n, sym in ((255, False), (254, True), (15, False)):
        for p, q in zip(whole.compute_encodings(n, sym), left.compute_encodings(n, sym)):
            assert _bits_equal(p, q), (n, sym)


@pytest.mark.parametrize("kind", ["percentile", "sqnr"])
def test_histogram_merge_of_different_ranges(kind):
    # Ranges that differ: merge re-bins both histograms into the grown range with AIMET's
    # proportional split (its merge_stats), so the result depends on the order, but it keeps every
    # count, spans both ranges, equals AIMET's own update when the other analyzer saw one batch
    # inside this one's range, and its encodings are those of its state (round trip).
    rng = np.random.default_rng(6)
    a_batch = rng.standard_normal((4, 500)).astype(np.float32)
    b_batch = (rng.standard_normal((4, 500)) * 3 + 1).astype(np.float32)
    left, right = MAKERS[kind]((4, 1)), MAKERS[kind]((4, 1))
    left.update_stats(a_batch)
    right.update_stats(b_batch)
    total = left.state_dict()["histogram"].sum(axis=1) + right.state_dict()["histogram"].sum(axis=1)
    merged = MAKERS[kind]((4, 1))
    merged.load_state_dict(left.state_dict())
    merged.merge(right)
    s = merged.state_dict()
    np.testing.assert_allclose(s["histogram"].sum(axis=1), total, rtol=1e-6)  # float32 counts
    assert np.all(s["min"] <= np.minimum(a_batch.min(axis=1), b_batch.min(axis=1)))
    assert np.all(s["max"] >= np.maximum(a_batch.max(axis=1), b_batch.max(axis=1)))
    again = type(merged).from_state(s)
    for p, q in zip(merged.compute_encodings(255, False), again.compute_encodings(255, False)):
        assert _bits_equal(p, q)
    # merge is deterministic: the same inputs give the same histogram
    other = MAKERS[kind]((4, 1))
    other.load_state_dict(left.state_dict())
    other.merge(right)
    assert _bits_equal(other.state_dict()["histogram"], s["histogram"])
    # a right analyzer fed one batch inside left's range: merge == left.update_stats(that batch)
    inside = np.clip(rng.standard_normal((4, 500)).astype(np.float32) * 0.5, a_batch.min(axis=1, keepdims=True),
                     a_batch.max(axis=1, keepdims=True))
    inside[:, 0], inside[:, 1] = a_batch.min(axis=1), a_batch.max(axis=1)
    seq = MAKERS[kind]((4, 1))
    seq.update_stats(a_batch)
    seq.update_stats(inside)
    par, one = MAKERS[kind]((4, 1)), MAKERS[kind]((4, 1))
    par.update_stats(a_batch)
    one.update_stats(inside)
    par.merge(one)
    assert _bits_equal(seq.state_dict()["histogram"], par.state_dict()["histogram"])


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("fixed_range", [False, True])
def test_pickle_round_trip_keeps_the_statistics_and_the_fixed_range(kind, fixed_range):
    """Analyzers pickle through their state dicts (how the calibration engines move them between
    processes): the statistics bit for bit, and a fixed range keeps adding counts afterwards."""
    import pickle
    a = MAKERS[kind]((8, 1))
    if fixed_range and kind != "minmax":
        a.start_with_range(np.full((8, 1), -10, np.float32), np.full((8, 1), 10, np.float32))
    a.update_stats(_data(0))
    b = pickle.loads(pickle.dumps(a))
    assert type(b) is type(a)
    for key, value in a.state_dict().items():
        other = b.state_dict()[key]
        assert (value.tobytes() == other.tobytes()) if isinstance(value, np.ndarray) else value == other, key
    a.update_stats(_data(1))
    b.update_stats(_data(1))
    assert a.state_dict().keys() == b.state_dict().keys()
    for x, y in zip(a.compute_encodings(255, False), b.compute_encodings(255, False)):
        assert x.tobytes() == y.tobytes()
    if kind != "minmax":
        assert b.state_dict()["fixed_range"] == (fixed_range and kind != "minmax")
