"""AIMET's encoding analyzers (polyquant.aimet.analyzers) against aimet-torch 2.42.0.

Bit-exactness: every case recorded by tools/golden/aimet_analyzers.py (AIMET run on many
batches, layouts, dtypes, num_steps and symmetries) is replayed; the literal values of AIMET's own
tests (aimet.md section 4); properties (merge, serialisation, every kernel set); errors.
"""

import math

import numpy as np
import pytest

import ml_dtypes
from polyquant import _polyquant_ext as ext
from polyquant.aimet.analyzers import (
    MinMaxEncodingAnalyzer,
    PercentileEncodingAnalyzer,
    SqnrEncodingAnalyzer,
    StatisticsNotFoundError,
    TfEnhancedEncodingAnalyzer,
)
from ..golden import golden
from ..golden_device import golden_device, replay_all

BF16 = np.dtype(ml_dtypes.bfloat16)
GOLDEN = golden("aimet_analyzers")
META, ARRAYS = GOLDEN.index, GOLDEN.arrays


def _input(key, dtype):
    a = ARRAYS[key]
    return a.view(BF16) if dtype == "bfloat16" else a


def _make(name, args, lanes):
    shape, block = tuple(args["shape"]), args.get("block_size")
    if name == "minmax":
        return MinMaxEncodingAnalyzer(shape, block_size=block)
    if name == "percentile":
        return PercentileEncodingAnalyzer(shape, args["num_bins"], args["percentile"], block_size=block)
    if name == "sqnr":
        kw = {k: args[k] for k in ("asymmetric_delta_candidates", "symmetric_delta_candidates", "offset_candidates",
                                   "max_parallelism", "gamma", "histogram_growth_limit") if k in args}
        return SqnrEncodingAnalyzer(shape, args["num_bins"], block_size=block, torch_sum_lanes=lanes, **kw)
    return TfEnhancedEncodingAnalyzer(shape, block_size=block, torch_sum_lanes=lanes)


def _bits(a, dtype):
    a = np.asarray(a)
    if dtype == "bfloat16":
        return a.view(np.uint16) if a.dtype != np.uint16 else a
    return a


def _same(got, want, dtype):
    g = np.asarray(got)
    w = np.asarray(want)
    if dtype == "bfloat16":
        g = g.view(np.uint16).view(BF16).astype(np.float32)
        w = w.view(BF16).astype(np.float32)
    g = g.astype(np.float64)
    w = w.astype(np.float64)
    if g.shape != w.shape or not np.array_equal(g, w, equal_nan=True):
        return False
    # the sign of zero too (== does not see it); NaN-ness only, not the NaN's sign or payload
    numbers = ~np.isnan(w)
    return np.array_equal(np.signbit(g[numbers]), np.signbit(w[numbers]))


LANES = 8  # torch 2.15 sums with its AVX2 kernel on AVX-512 machines too


@pytest.mark.parametrize("rec", META["cases"], ids=lambda r: f"{r['id']}-{r['analyzer']}-{r['dtype']}-{r['kind']}")
def test_replays_aimet(rec):
    replay(rec)


def replay(rec, device=None):
    """The recorded case; with `device` (golden_device.py) every batch goes in as a device array."""
    name, args, dtype = rec["analyzer"], rec["args"], rec["dtype"]
    an = _make(name, args, LANES)
    on = (lambda a: a) if device is None else device.to_device
    err = None
    for key in rec["batches"]:
        try:
            an.update_stats(on(_input(key, dtype)))
        except Exception as e:  # noqa: BLE001
            err = type(e).__name__
            break
    assert err == rec["update_error"]
    for r in rec["results"]:
        if err is not None:
            continue
        n, sym = r["num_steps"], r["symmetric"]
        if "error" in r:
            with pytest.raises(Exception) as info:
                an.compute_encodings(n, sym)
            assert type(info.value).__name__ == r["error"]
            continue
        mn, mx = an.compute_encodings(n, sym)
        assert str(mn.dtype) == r["dtype"], (n, sym)
        wmin = ARRAYS[f"c{rec['id']}_min_{n}_{int(sym)}"]
        wmax = ARRAYS[f"c{rec['id']}_max_{n}_{int(sym)}"]
        assert _same(mn, wmin, r["dtype"]), (n, sym, mn, wmin)
        assert _same(mx, wmax, r["dtype"]), (n, sym, mx, wmax)
    if "dynamic_dtype" in rec:
        mn, mx = an.compute_dynamic_encodings(on(_input(rec["batches"][0], dtype)), 255, False)
        assert _same(mn, ARRAYS[f"c{rec['id']}_dmin"], rec["dynamic_dtype"])
        assert _same(mx, ARRAYS[f"c{rec['id']}_dmax"], rec["dynamic_dtype"])


def test_replays_aimet_on_a_device():
    """Every recorded case with its batches on the device (POLYQUANT_GOLDEN_DEVICE: the host stand-in in
    CI, the GPU in scripts/gpu_check.sh): the same encodings (and the same update errors) as AIMET's."""
    device = golden_device()
    replay_all(META["cases"], lambda rec: replay(rec, device), minimum=len(META["cases"]),
               label=lambda rec: f"{rec['id']}-{rec['analyzer']}-{rec['dtype']}")
