"""Calibration statistics that merge in any order and any split to the same bits, and the engines
that rely on it (local, Ray, Dask).

The contract (docs/calibrate.md): MinMax merges by min / max; histograms start over the data's
finite range (a first pass) and their float32 counts add exactly below 2^24, so any split of the
batches over workers, merged in any tree, holds bit for bit the statistics of AIMET's analyzer fed
all the data as one batch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import polyquant
import polyquant.aimet as A
from polyquant._tools import calibrate as cal
from polyquant._tools import engines
from polyquant._tools.runner import CommandError

from .test_calibrate import batches, intermediate, small_model

ANALYZERS = ["minmax", "percentile", "sqnr", "tfenhanced"]
HISTOGRAMS = ["percentile", "sqnr", "tfenhanced"]


def state_bits(analyzer) -> dict:
    """An analyzer's statistics with every array as its bytes (bit for bit, -0.0 and NaN included)."""
    return {k: (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v
            for k, v in analyzer.state_dict().items()}


def result_bits(r) -> dict:
    """Every tensor's encoding and statistics, and the result's batch count."""
    return {"batches": r.batches,
            **{t.name: (t.shape, t.batches, t.encoding("2.1.0"), state_bits(t.analyzer)) for t in r.tensors}}


def write_batches(path, data):
    path.mkdir(parents=True, exist_ok=True)
    for i, b in enumerate(data):
        np.savez(path / f"batch{i:03d}.npz", **b)
    return path


# ---- the contract, on the analyzers ----------------------------------------------------------------
def two_pass_range(values):
    """Pass 1: the finite range of every batch, merged (calibrate's own helpers)."""
    lo, hi = np.float32(np.inf), np.float32(-np.inf)
    for v in values:
        a, b = cal._finite_range(v)
        lo, hi = np.minimum(lo, a), np.maximum(hi, b)
    return lo, hi


@pytest.mark.parametrize("analyzer", HISTOGRAMS)
def test_two_pass_equals_aimet_fed_all_the_data_as_one_batch(analyzer):
    """The calibrated statistics equal AIMET's analyzer (polyquant's bit-exact one) updated once with
    the concatenation of every batch's activation: the claim of the two-pass histograms."""
    model, data = small_model(), batches(7)
    r = polyquant.calibrate(model, data, analyzer)
    values = intermediate(model, data, ["x", "f", "y"])
    got = {t.name: t for t in r.tensors}
    for name in ("x", "f", "y"):
        one = cal._make_analyzer(analyzer, (), None, None)
        one.update_stats(np.concatenate([v[name].reshape(-1) for v in values]))
        mine, theirs = state_bits(got[name].analyzer), state_bits(one)
        for key in ("histogram", "bin_edges", "min", "max", "range_limit", "dtype"):
            assert mine[key] == theirs[key], (name, key)
        assert got[name].encoding("2.1.0") == cal.TensorCalibration(name, "activation", got[name].shape,
                                                                     _quantizer(one)).encoding("2.1.0")


def _quantizer(an):
    q = A.QuantizeDequantize((), 8, False)
    lo, hi = an.compute_encodings(255, False)
    q.set_range(np.asarray(lo).reshape(()), np.asarray(hi).reshape(()))
    return q


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ..helpers import hypothesis_budget  # noqa: E402

examples = hypothesis_budget()[0]

# Values without -0.0 (a zero extreme is +0.0 in the two-pass range, where torch's single batch may
# pick either sign), with infinities and NaN now and then (binned into the end bins / dropped).
_values = st.one_of(st.floats(-1e4, 1e4, width=32), st.sampled_from([np.inf, -np.inf, np.nan, 0.0, 1.0])).map(
    lambda v: np.float32(v) + np.float32(0))
_batch = st.lists(_values, min_size=1, max_size=40).map(lambda v: np.array(v, np.float32))


def _make(kind):
    return {"minmax": lambda: A.MinMaxEncodingAnalyzer(()),
            "percentile": lambda: A.PercentileEncodingAnalyzer((), 64, 95),
            "sqnr": lambda: A.SqnrEncodingAnalyzer((), 64),
            "tfenhanced": lambda: A.TfEnhancedEncodingAnalyzer(())}[kind]()


@examples(40)
@given(kind=st.sampled_from(ANALYZERS), data=st.lists(_batch, min_size=1, max_size=8), draw=st.data())
def test_any_split_and_merge_tree_gives_one_process_bits(kind, data, draw):
    """Random partitions of the same batches (each part in a random order), merged in a random tree,
    equal one process fed the batches in order, and (histograms) AIMET's analyzer fed all of them as
    one batch: bit for bit, statistics and encodings."""
    if all(not np.isfinite(b).any() for b in data):
        data = data + [np.array([1.5], np.float32)]  # a histogram needs one finite value somewhere
    histogram = kind != "minmax"
    lo, hi = two_pass_range(data)

    def fresh():
        a = _make(kind)
        if histogram:
            a.start_with_range(lo, hi)
        return a

    whole = fresh()
    for b in data:
        whole.update_stats(b)
    parts = draw.draw(st.integers(1, len(data)))
    owner = draw.draw(st.lists(st.integers(0, parts - 1), min_size=len(data), max_size=len(data)))
    analyzers = []
    for p in range(parts):
        mine = [b for b, o in zip(data, owner) if o == p]
        order = draw.draw(st.permutations(range(len(mine))))
        a = fresh()
        for i in order:
            a.update_stats(mine[i])
        analyzers.append(a)
    while len(analyzers) > 1:  # a random merge tree: any two partial results, either way round
        i = draw.draw(st.integers(0, len(analyzers) - 1))
        a = analyzers.pop(i)
        j = draw.draw(st.integers(0, len(analyzers) - 1))
        b = analyzers.pop(j)
        a.merge(b)
        analyzers.append(a)
    merged = analyzers[0]
    assert state_bits(merged) == state_bits(whole)
    for sym in (False, True):
        e1, e2 = merged.compute_encodings(255, sym), whole.compute_encodings(255, sym)
        assert all(x.tobytes() == y.tobytes() for x, y in zip(e1, e2))
    if histogram:
        one = _make(kind)
        one.update_stats(np.concatenate(data))
        mine, theirs = state_bits(merged), state_bits(one)
        assert all(mine[k] == theirs[k] for k in ("histogram", "bin_edges", "min", "max", "range_limit", "dtype"))
        e3 = one.compute_encodings(255, False)
        assert all(x.tobytes() == y.tobytes() for x, y in zip(merged.compute_encodings(255, False), e3))


# ---- 2^24 ---------------------------------------------------------------------------------------
def test_counts_at_2_to_the_24_are_reported():
    a = A.PercentileEncodingAnalyzer((), 16)
    a.start_with_range(np.float32(0), np.float32(1))
    state = a.state_dict()
    state["histogram"] = state["histogram"].copy()
    state["histogram"][0, 3] = 2 ** 24 - 1
    a.load_state_dict(state)
    assert a.counts_exact() and a.state_dict()["fixed_range"]
    a.update_stats(np.array([0.2], np.float32))  # bin 3 of 16 over [0, 1]
    assert not a.counts_exact()


def test_calibrate_warns_when_a_bin_reaches_2_to_the_24():
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["n", 1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n", 1])],
                          [numpy_helper.from_array(np.ones((1, 1), np.float32), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    with pytest.warns(cal.CountsInexactWarning, match="histogram holds 2\\^24 values or more") as caught:
        polyquant.calibrate(model, [{"x": np.zeros((2 ** 23, 1), np.float32)}] * 2, "percentile")
    assert sorted(str(w.message).split()[4] for w in caught) == ["x's", "y's"]
    polyquant.calibrate(model, [{"x": np.zeros((2 ** 23, 1), np.float32)}], "percentile")  # 2^23: exact, no warning


# ---- options and errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_aimet_streaming_histograms_are_refused_on_a_cluster(engine):
    with pytest.raises(CommandError, match=f"histograms: 'aimet' .* local engine only, got engine='{engine}'"):
        polyquant.calibrate(small_model(), batches(2), "percentile", engine=engine, histograms="aimet")


@pytest.mark.parametrize("kwargs,match", [
    ({"engine": "spark"}, "engine: expected one of local, ray, dask"),
    ({"workers": 0}, "workers: expected a positive integer"),
    ({"workers": 2}, "workers: the local engine runs one worker"),
    ({"address": "tcp://x:1"}, "address: an existing cluster is for engine='ray' or 'dask'"),
    ({"histograms": "streaming"}, "histograms: expected one of two-pass, aimet"),
])
def test_engine_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(CommandError, match=match):
        polyquant.calibrate(small_model(), batches(1), **kwargs)


def test_start_with_range_errors_name_the_parameter():
    a = A.SqnrEncodingAnalyzer((2,), 8)
    with pytest.raises(ValueError, match=r"min: shape \(\), expected the analyzer's shape \(2,\)"):
        a.start_with_range(0.0, [1, 2])
    with pytest.raises(ValueError, match=r"start_with_range: min\[1\] = inf is not finite"):
        a.start_with_range([0, np.inf], [1, 2])
    with pytest.raises(ValueError, match=r"start_with_range: min\[0\] = 3 is above max\[0\]"):
        a.start_with_range([3, 0], [1, 2])
    with pytest.raises(ValueError, match=r"start_with_range: max\[0\] = 0.10000000000000001 is not a float32 value"):
        a.start_with_range([0, 0], [0.1, 2])
    with pytest.raises(ValueError, match="dtype: 'int8' is not supported"):
        a.start_with_range([0, 0], [1, 2], dtype="int8")
    a.start_with_range([0, 0], [1, 2])
    with pytest.raises(ValueError, match="outside the range"):
        a.update_stats(np.array([[0.5, 3.0]], np.float32))
    with pytest.raises(ValueError, match="x: dtype float64 differs from float32"):
        a.update_stats(np.array([[0.5, 1.0]], np.float64))
    b = A.SqnrEncodingAnalyzer((2,), 8)
    b.update_stats(np.array([[0.5, 1.0]], np.float32))
    with pytest.raises(ValueError, match="merges only with another started over the same range"):
        a.merge(b)
    c = A.SqnrEncodingAnalyzer((2,), 8)
    c.start_with_range([0, 0], [1, 3])
    with pytest.raises(ValueError, match="started over different ranges"):
        a.merge(c)


def test_aimet_histograms_option_keeps_the_streaming_growth():
    """histograms="aimet": the analyzer fed the batches one by one, in order (the order matters)."""
    model, data = small_model(), batches(5)
    r = polyquant.calibrate(model, data, "percentile", histograms="aimet")
    values = intermediate(model, data, ["f"])
    an = cal._make_analyzer("percentile", (), None, None)
    for v in values:
        an.update_stats(v["f"])
    assert state_bits(next(t for t in r.tensors if t.name == "f").analyzer) == state_bits(an)
    assert r.settings["histograms"] == "aimet"


def test_local_engine_same_bits_for_files_lists_and_generators(tmp_path):
    model, data = small_model(), batches(6)
    path = write_batches(tmp_path / "d", data)
    for analyzer in ("minmax", "tfenhanced"):
        a = result_bits(polyquant.calibrate(model, data, analyzer))
        assert a == result_bits(polyquant.calibrate(model, path, analyzer))
        assert a == result_bits(polyquant.calibrate(model, (b for b in data), analyzer))
        assert a == result_bits(polyquant.calibrate(model, data[::-1], analyzer)) or analyzer == "minmax"


def test_map_reduce_local_and_errors():
    assert engines.map_reduce("local", range(5), lambda: (lambda t: t * t), lambda a, b: a + b) == 30
    assert engines.map_reduce(None, [], lambda: None, None) is None
    with pytest.raises(CommandError, match="engine: expected one of local, ray, dask"):
        engines.map_reduce("mpi", [], lambda: None, None)


# ---- clusters: 2 workers of Ray and of Dask equal the local engine bit for bit ---------------------
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_batches(tmp_path_factory.mktemp("calib"), batches(8))


@pytest.fixture(scope="module")
def local_results(data_dir):
    return {a: result_bits(polyquant.calibrate(small_model(), data_dir, a, per_channel=True)) for a in ANALYZERS}


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    with engines._quiet_ray():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.parametrize("analyzer", ["minmax", "percentile"])  # ~6 s each (two passes of actors); Dask runs all four
def test_ray_two_workers_equal_the_local_engine(ray_cluster, data_dir, local_results, analyzer):
    r = polyquant.calibrate(small_model(), data_dir, analyzer, per_channel=True, engine="ray", workers=2)
    assert result_bits(r) == local_results[analyzer]
    assert r.engine == {"engine": "ray", "workers": 2, "address": None}


@pytest.mark.parametrize("analyzer", ANALYZERS)
def test_dask_two_workers_equal_the_local_engine(dask_cluster, data_dir, local_results, analyzer):
    r = polyquant.calibrate(small_model(), data_dir, analyzer, per_channel=True, engine="dask", address=dask_cluster)
    assert result_bits(r) == local_results[analyzer]


def test_in_memory_batches_travel_to_the_cluster(dask_cluster, local_results):
    r = polyquant.calibrate(small_model(), batches(8), "percentile", per_channel=True, engine="dask", address=dask_cluster)
    assert result_bits(r) == local_results["percentile"]


def test_a_worker_error_reaches_the_caller(dask_cluster, ray_cluster):
    bad = batches(1) + [{"input": np.zeros((1, 3, 8, 8), np.float32)}]
    with pytest.raises(CommandError, match="batch 1 lacks input"):
        polyquant.calibrate(small_model(), bad, engine="dask", address=dask_cluster)
    with pytest.raises(CommandError, match="batch 1 lacks input"):
        polyquant.calibrate(small_model(), bad, engine="ray", workers=2)


@pytest.mark.parametrize("engine,module", [("ray", "ray"), ("dask", "distributed")])
def test_a_missing_engine_names_its_extra(monkeypatch, engine, module):
    monkeypatch.setitem(__import__("sys").modules, module, None)  # `import module` now fails
    with pytest.raises(CommandError, match=rf"engine: '{engine}' needs the optional dependency .* pip install \.\[{engine}\]"):
        polyquant.calibrate(small_model(), batches(2), engine=engine, workers=2)
