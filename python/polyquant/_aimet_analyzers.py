"""AIMET's encoding analyzers (aimet_torch.quantization.encoding_analyzer, aimet-torch 2.42.0),
bit-exact, in polyquant's C++ core.

Each analyzer gathers statistics over calibration batches (``update_stats``) and computes encoding
ranges from them (``compute_encodings(num_steps, is_symmetric) -> (min, max)``), numpy arrays of
the analyzer's ``shape`` in the dtype AIMET returns. Statistics merge (``merge``) and serialise
(``state_dict`` / ``from_state``) so calibration can be split across processes. The numerics live
in the core (``polyquant/aimet_analyzers.h``); this module converts arrays and names errors.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _polyquant_ext as _ext

__all__ = [
    "MinMaxEncodingAnalyzer",
    "PercentileEncodingAnalyzer",
    "SqnrEncodingAnalyzer",
    "TfEnhancedEncodingAnalyzer",
    "StatisticsNotFoundError",
]

# AIMET's error when compute_encodings() finds no statistics (a RuntimeError subclass).
StatisticsNotFoundError = _ext.StatisticsNotFoundError

try:  # bfloat16 arrays come from ml_dtypes
    import ml_dtypes as _ml_dtypes

    _BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _ml_dtypes = None
    _BFLOAT16 = None

_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _as_input(x: Any) -> Tuple[np.ndarray, str]:
    """The one conversion of an analyzer's input: a numpy array (any strides) and its dtype name.

    float16 / float32 / float64 arrays pass as they are, bfloat16 (ml_dtypes) as its uint16
    storage; anything else with ``__array__`` is converted by numpy first. Extend here for other
    array types (torch tensors).
    """
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    if _BFLOAT16 is not None and a.dtype == _BFLOAT16:
        return a.view(np.uint16), "bfloat16"
    name = a.dtype.name
    if name not in _DTYPES:
        raise TypeError(f"x: dtype {a.dtype} is not supported (float16, bfloat16, float32, float64)")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a, name


def _np_dtype(name: str):
    return _BFLOAT16 if name == "bfloat16" else np.dtype(name)


def _shape(shape) -> Tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _block(block_size) -> Optional[list]:
    return None if block_size is None else [int(b) for b in block_size]


def _range(result, shape):
    mn, mx, dtype = result
    dt = _np_dtype(dtype)
    lo = np.frombuffer(mn, dtype=np.float64).astype(dt).reshape(shape)
    hi = np.frombuffer(mx, dtype=np.float64).astype(dt).reshape(shape)
    return lo, hi


class _Analyzer:
    _impl: Any

    def __init__(self, shape, block_size):
        self.shape = _shape(shape)
        self.block_size = None if block_size is None else tuple(int(b) for b in block_size)

    def update_stats(self, x) -> None:
        """Folds a batch into the statistics."""
        a, dtype = _as_input(x)
        self._impl.update_stats(a, dtype)

    def reset_stats(self) -> None:
        self._impl.reset_stats()

    def has_stats(self) -> bool:
        return self._impl.has_stats()

    def compute_encodings(self, num_steps, is_symmetric: bool) -> Tuple[np.ndarray, np.ndarray]:
        """(min, max) of the encodings from the gathered statistics."""
        return _range(self._impl.compute_encodings(float(num_steps), bool(is_symmetric)), self.shape)

    def compute_dynamic_encodings(self, x, num_steps, is_symmetric: bool) -> Tuple[np.ndarray, np.ndarray]:
        """(min, max) from the statistics of `x` alone (the running statistics are untouched)."""
        a, dtype = _as_input(x)
        return _range(self._impl.compute_dynamic_encodings(a, dtype, float(num_steps), bool(is_symmetric)), self.shape)

    def merge(self, other: "_Analyzer") -> None:
        """Folds another analyzer's statistics in (see polyquant/aimet_analyzers.h for guarantees)."""
        if type(other) is not type(self):
            raise TypeError(f"merge: expected a {type(self).__name__}, got {type(other).__name__}")
        self._impl.merge(other._impl)


class MinMaxEncodingAnalyzer(_Analyzer):
    """Min-max calibration: per-element min and max over the reduced dimensions."""

    def __init__(self, shape, block_size: Optional[Sequence[int]] = None):
        super().__init__(shape, block_size)
        self._impl = _ext._AimetMinMaxAnalyzer(list(self.shape), _block(block_size))

    def state_dict(self) -> Dict[str, Any]:
        dtype, mn, mx = self._impl.get_state()
        if not self._impl.has_stats():
            return {"kind": "minmax", "shape": self.shape, "block_size": self.block_size, "dtype": None}
        dt = _np_dtype(dtype)
        return {
            "kind": "minmax",
            "shape": self.shape,
            "block_size": self.block_size,
            "dtype": dtype,
            "min": np.frombuffer(mn, np.float64).astype(dt).reshape(self.shape),
            "max": np.frombuffer(mx, np.float64).astype(dt).reshape(self.shape),
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("dtype") is None:
            self.reset_stats()
            return
        mn = np.asarray(state["min"]).astype(np.float64).tobytes()
        mx = np.asarray(state["max"]).astype(np.float64).tobytes()
        self._impl.set_state(str(state["dtype"]), mn, mx)

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "MinMaxEncodingAnalyzer":
        a = cls(state["shape"], state.get("block_size"))
        a.load_state_dict(state)
        return a


class _HistogramAnalyzer(_Analyzer):
    def _state_common(self) -> Dict[str, Any]:
        raise NotImplementedError

    def state_dict(self) -> Dict[str, Any]:
        dtype, bins, counts, edges, mn, mx, lo, hi = self._impl.get_state()
        state = self._state_common()
        if not self._impl.has_stats():
            state["dtype"] = None
            return state
        h = int(np.prod(self.shape))
        state.update(
            dtype=dtype,
            histogram=np.frombuffer(counts, np.float32).reshape(h, bins).copy(),
            bin_edges=np.frombuffer(edges, np.float32).reshape(h, bins + 1).copy(),
            min=np.frombuffer(mn, np.float64).copy(),
            max=np.frombuffer(mx, np.float64).copy(),
            range_limit=np.stack([np.frombuffer(lo, np.float32), np.frombuffer(hi, np.float32)], axis=1),
        )
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("dtype") is None:
            self.reset_stats()
            return
        hist = np.ascontiguousarray(state["histogram"], dtype=np.float32)
        limit = np.ascontiguousarray(state["range_limit"], dtype=np.float32)
        self._impl.set_state(
            (
                str(state["dtype"]),
                int(hist.shape[-1]),
                hist.tobytes(),
                np.ascontiguousarray(state["bin_edges"], dtype=np.float32).tobytes(),
                np.ascontiguousarray(state["min"], dtype=np.float64).tobytes(),
                np.ascontiguousarray(state["max"], dtype=np.float64).tobytes(),
                np.ascontiguousarray(limit[:, 0]).tobytes(),
                np.ascontiguousarray(limit[:, 1]).tobytes(),
            )
        )


class PercentileEncodingAnalyzer(_HistogramAnalyzer):
    """Percentile calibration: the range after clipping (100 - p)% at each end of a histogram."""

    def __init__(self, shape, num_bins: int = 2048, percentile: float = 100, block_size: Optional[Sequence[int]] = None):
        super().__init__(shape, block_size)
        self.num_bins = int(num_bins)
        self._impl = _ext._AimetPercentileAnalyzer(list(self.shape), _block(block_size), self.num_bins, float(percentile))

    @property
    def percentile(self) -> float:
        return self._impl.percentile()

    def set_percentile(self, percentile: float) -> None:
        self._impl.set_percentile(float(percentile))

    def _state_common(self):
        return {"kind": "percentile", "shape": self.shape, "block_size": self.block_size, "num_bins": self.num_bins,
                "percentile": self.percentile}

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "PercentileEncodingAnalyzer":
        a = cls(state["shape"], state["num_bins"], state["percentile"], state.get("block_size"))
        a.load_state_dict(state)
        return a


class SqnrEncodingAnalyzer(_HistogramAnalyzer):
    """SQNR calibration: the (delta, offset) minimising the histogram-estimated quantization noise.

    ``torch_sum_lanes`` (polyquant's): the float32 vector width of torch's CPU sum kernel, whose
    order the noise sums follow: 8 (AVX2; torch 2.15 runs it on AVX-512 machines too), or 16.
    """

    def __init__(self, shape, num_bins: int = 2048, *, asymmetric_delta_candidates=17, symmetric_delta_candidates=101,
                 offset_candidates=21, max_parallelism=64, gamma=3.0, histogram_growth_limit: Optional[float] = None,
                 block_size: Optional[Sequence[int]] = None, torch_sum_lanes: int = 8):
        super().__init__(shape, block_size)
        self.num_bins = int(num_bins)
        growth = math.inf if histogram_growth_limit is None else float(histogram_growth_limit)
        self._options = dict(asymmetric_delta_candidates=int(asymmetric_delta_candidates),
                             symmetric_delta_candidates=int(symmetric_delta_candidates),
                             offset_candidates=int(offset_candidates), max_parallelism=int(max_parallelism),
                             gamma=float(gamma), histogram_growth_limit=histogram_growth_limit,
                             torch_sum_lanes=int(torch_sum_lanes))
        self._impl = _ext._AimetSqnrAnalyzer(list(self.shape), _block(block_size), self.num_bins,
                                             self._options["asymmetric_delta_candidates"],
                                             self._options["symmetric_delta_candidates"],
                                             self._options["offset_candidates"], self._options["max_parallelism"],
                                             self._options["gamma"], growth, self._options["torch_sum_lanes"])

    def _state_common(self):
        return {"kind": "sqnr", "shape": self.shape, "block_size": self.block_size, "num_bins": self.num_bins,
                **self._options}

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "SqnrEncodingAnalyzer":
        keys = ("asymmetric_delta_candidates", "symmetric_delta_candidates", "offset_candidates", "max_parallelism",
                "gamma", "histogram_growth_limit", "torch_sum_lanes")
        a = cls(state["shape"], state["num_bins"], block_size=state.get("block_size"), **{k: state[k] for k in keys})
        a.load_state_dict(state)
        return a


class TfEnhancedEncodingAnalyzer(SqnrEncodingAnalyzer):
    """SQNR with AIMET 1.x tf-enhanced's settings: 512 bins, growth limit 3, gamma 3."""

    def __init__(self, shape, block_size: Optional[Sequence[int]] = None, *, torch_sum_lanes: int = 8):
        super().__init__(shape, 512, asymmetric_delta_candidates=17, symmetric_delta_candidates=101,
                         offset_candidates=21, gamma=3.0, histogram_growth_limit=3.0, block_size=block_size,
                         torch_sum_lanes=torch_sum_lanes)

    def _state_common(self):
        return {"kind": "tfe", "shape": self.shape, "block_size": self.block_size,
                "torch_sum_lanes": self._options["torch_sum_lanes"]}

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "TfEnhancedEncodingAnalyzer":
        a = cls(state["shape"], state.get("block_size"), torch_sum_lanes=state.get("torch_sum_lanes", 8))
        a.load_state_dict(state)
        return a
