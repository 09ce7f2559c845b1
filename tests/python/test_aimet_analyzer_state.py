"""State round trips and threading invariance of polyquant's AIMET analyzers (no aimet-torch needed)."""

import numpy as np
import pytest

from polyquant import _polyquant_ext as _ext
from polyquant._aimet_analyzers import (
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
