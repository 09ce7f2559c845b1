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
import numbers
from collections.abc import Mapping
from typing import Any, Dict, Optional, Sequence, Tuple

import ml_dtypes
import numpy as np

from .. import _polyquant_ext as _ext
from .._common.args import strict_int, strict_int_tuple, strict_real
from .._common.device import as_device_operand, device_path

__all__ = [
    "MinMaxEncodingAnalyzer",
    "PercentileEncodingAnalyzer",
    "SqnrEncodingAnalyzer",
    "TfEnhancedEncodingAnalyzer",
    "StatisticsNotFoundError",
]

# AIMET's error when compute_encodings() finds no statistics (a RuntimeError subclass).
StatisticsNotFoundError = _ext.aimet.StatisticsNotFoundError

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # bfloat16 arrays come from ml_dtypes

_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _as_input(x: Any) -> Tuple[np.ndarray, str]:
    """The one conversion of an analyzer's input: a numpy array (any strides) and its dtype name.

    float16 / float32 / float64 arrays pass as they are, bfloat16 (ml_dtypes) as its uint16
    storage; anything else with ``__array__`` is converted by numpy first. Extend here for other
    array types (torch tensors).
    """
    if not isinstance(x, np.ndarray):
        # A CUDA tensor in a device call (the MinMax statistics are gathered on its device; the
        # histogram analyzers refuse it by name); outside one, a TypeError naming x.
        device_tensor = as_device_operand(x, "x")
        if device_tensor is not None:
            name = device_tensor.dtype.name
            if name not in _DTYPES and name != "bfloat16":
                raise TypeError(f"x: dtype {device_tensor.dtype} is not supported (float16, bfloat16, float32, float64)")
            return (device_tensor.view("uint16", "x") if name == "bfloat16" else device_tensor), name
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    if a.dtype == _BFLOAT16:
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
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        return (strict_int(shape, "shape"),)
    return strict_int_tuple(shape, "shape")


def _block(block_size) -> Optional[Tuple[int, ...]]:
    return None if block_size is None else strict_int_tuple(block_size, "block_size")


_LANES = (8, 16)


def _lanes(value) -> int:
    v = strict_int(value, "torch_sum_lanes", allowed="8 or 16")
    if v not in _LANES:
        raise ValueError(f"torch_sum_lanes: {v} is not supported; allowed: 8 (AVX2) or 16 (AVX-512)")
    return v


# ---- state dicts: every key checked, errors name it ------------------------------------------------
def _key(state, key: str):
    if key not in state:
        raise ValueError(f"state: missing key {key!r}")
    return state[key]


def _check_mapping(state, kinds: Tuple[str, ...]) -> None:
    if not isinstance(state, Mapping):
        raise TypeError(f"state: expected a dict (from state_dict()), got {type(state).__name__}")
    kind = _key(state, "kind")
    if kind not in kinds:
        raise ValueError(f"state: 'kind' is {kind!r}, expected {' or '.join(map(repr, kinds))}")


def _state_dtype(state) -> Optional[str]:
    dtype = state.get("dtype")
    if dtype is None:
        return None
    if not isinstance(dtype, str) or dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ValueError(f"state: 'dtype' is {dtype!r}; allowed: None (no statistics), 'float16', 'bfloat16', 'float32', 'float64'")
    return dtype


def _state_array(state, key: str, dtype, shape: Tuple[int, ...]) -> np.ndarray:
    """state[key] as a C-contiguous array of `dtype` and exactly `shape` (any real dtype converts)."""
    value = _key(state, key)
    try:
        a = np.asarray(value)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"state: {key!r} is not an array of numbers ({e})") from None
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)
                                 or (a.dtype == _BFLOAT16)):
        raise TypeError(f"state: {key!r} has dtype {a.dtype}; expected real numbers")
    if a.shape != tuple(shape):
        raise ValueError(f"state: {key!r} has shape {a.shape}, expected {tuple(shape)} (the analyzer's shape and num_bins)")
    return np.ascontiguousarray(a.astype(dtype))


def _fixed_range(state) -> bool:
    value = state.get("fixed_range", False)  # state dicts written before start_with_range have no key
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"state: 'fixed_range' is {value!r}; expected True or False")
    return bool(value)


# float32 counts are exact integers below 2**24: sums of counts under it do not depend on their order.
COUNT_EXACT_LIMIT = 2 ** 24


def _list(values) -> Optional[list]:
    return None if values is None else list(values)


def _range(result, shape):
    mn, mx, dtype = result
    dt = _np_dtype(dtype)
    # mn, mx: float64 arrays (the core's values), rounded to the encoding's dtype
    lo = mn.astype(dt).reshape(shape)
    hi = mx.astype(dt).reshape(shape)
    return lo, hi


class _Analyzer:
    _impl: Any

    def __init__(self, shape, block_size):
        self.shape = _shape(shape)
        self.block_size = _block(block_size)

    @device_path
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
        return _range(self._impl.compute_encodings(strict_real(num_steps, "num_steps"), bool(is_symmetric)), self.shape)

    @device_path
    def compute_dynamic_encodings(self, x, num_steps, is_symmetric: bool) -> Tuple[np.ndarray, np.ndarray]:
        """(min, max) from the statistics of `x` alone (the running statistics are untouched)."""
        a, dtype = _as_input(x)
        return _range(self._impl.compute_dynamic_encodings(a, dtype, strict_real(num_steps, "num_steps"), bool(is_symmetric)), self.shape)

    def merge(self, other: "_Analyzer") -> None:
        """Folds another analyzer's statistics in (see polyquant/aimet_analyzers.h for guarantees)."""
        if type(other) is not type(self):
            raise TypeError(f"merge: expected a {type(self).__name__}, got {type(other).__name__}")
        self._impl.merge(other._impl)

    def __reduce__(self):
        # Pickled as its state dict (the extension's objects do not pickle), so analyzers travel
        # between processes (the calibration engines) with their statistics bit for bit.
        return type(self).from_state, (self.state_dict(),)


class MinMaxEncodingAnalyzer(_Analyzer):
    """Min-max calibration: per-element min and max over the reduced dimensions."""

    def __init__(self, shape, block_size: Optional[Sequence[int]] = None):
        super().__init__(shape, block_size)
        self._impl = _ext.aimet._MinMaxEncodingAnalyzer(list(self.shape), _list(self.block_size))

    def state_dict(self) -> Dict[str, Any]:
        dtype, mn, mx = self._impl.get_state()  # one consistent copy (other threads may update)
        if len(mn) == 0:
            return {"kind": "minmax", "shape": self.shape, "block_size": self.block_size, "dtype": None}
        dt = _np_dtype(dtype)
        return {
            "kind": "minmax",
            "shape": self.shape,
            "block_size": self.block_size,
            "dtype": dtype,
            "min": mn.astype(dt).reshape(self.shape),
            "max": mx.astype(dt).reshape(self.shape),
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        _check_mapping(state, ("minmax",))
        dtype = _state_dtype(state)
        if dtype is None:
            self.reset_stats()
            return
        # 1-D C-contiguous float64 arrays, as get_state gives them (the core checks their sizes)
        mn = _state_array(state, "min", np.float64, self.shape).reshape(-1)
        mx = _state_array(state, "max", np.float64, self.shape).reshape(-1)
        self._impl.set_state(dtype, mn, mx)

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "MinMaxEncodingAnalyzer":
        _check_mapping(state, ("minmax",))
        a = cls(_key(state, "shape"), state.get("block_size"))
        a.load_state_dict(state)
        return a


class _HistogramAnalyzer(_Analyzer):
    def _state_common(self) -> Dict[str, Any]:
        raise NotImplementedError

    _kinds: Tuple[str, ...] = ()

    def state_dict(self) -> Dict[str, Any]:
        # One consistent copy, as fresh 1-D arrays (float32 counts, edges and limits; float64 min, max).
        dtype, bins, counts, edges, mn, mx, lo, hi, fixed_range = self._impl.get_state()
        state = self._state_common()
        if len(mn) == 0:
            state["dtype"] = None
            return state
        h = int(np.prod(self.shape))
        state.update(
            dtype=dtype,
            histogram=counts.reshape(h, bins),
            bin_edges=edges.reshape(h, bins + 1),
            min=mn,
            max=mx,
            range_limit=np.stack([lo, hi], axis=1),
            fixed_range=fixed_range,
        )
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        _check_mapping(state, self._kinds)
        dtype = _state_dtype(state)
        if dtype is None:
            self.reset_stats()
            return
        h, bins = int(np.prod(self.shape)), self.num_bins
        hist = _state_array(state, "histogram", np.float32, (h, bins))
        limit = _state_array(state, "range_limit", np.float32, (h, 2))
        # 1-D C-contiguous arrays of get_state's dtypes (the core checks their sizes)
        self._impl.set_state(
            dtype,
            bins,
            hist.reshape(-1),
            _state_array(state, "bin_edges", np.float32, (h, bins + 1)).reshape(-1),
            _state_array(state, "min", np.float64, (h,)),
            _state_array(state, "max", np.float64, (h,)),
            np.ascontiguousarray(limit[:, 0]),
            np.ascontiguousarray(limit[:, 1]),
            _fixed_range(state),
        )

    def start_with_range(self, min, max, dtype: str = "float32") -> None:
        """Starts the statistics with empty histograms over fixed ranges: element k's histogram spans
        [min[k], max[k]] with the edges, growth limits and range AIMET's analyzer gives a first batch
        whose finite values span exactly that range. Later ``update_stats`` batches (of `dtype`, the
        data's dtype, with values inside the range) are binned over those edges and their counts added;
        ``merge`` adds the counts of an analyzer started over the same range.

        This is the second pass of an order-free calibration: with [min, max] the finite range of all
        the data (a first pass), any split of the batches over analyzers, merged in any order, gives bit
        for bit the statistics of AIMET's analyzer fed all the data as one batch, as long as no bin
        holds 2**24 values or more (counts are float32, as AIMET's; see ``counts_exact``).

        `min`, `max`: arrays (or scalars for shape ()) of the analyzer's shape, finite, min <= max,
        each exactly a `dtype` value; `dtype`: "float16", "bfloat16", "float32" or "float64".
        """
        if dtype not in ("float16", "bfloat16", "float32", "float64"):
            raise ValueError(f"dtype: {dtype!r} is not supported; allowed: 'float16', 'bfloat16', 'float32', 'float64'")
        bounds = []
        for name, value in (("min", min), ("max", max)):
            try:
                a = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{name}: expected real numbers ({e})") from None
            if a.shape != self.shape:
                raise ValueError(f"{name}: shape {a.shape}, expected the analyzer's shape {self.shape}")
            bounds.append(np.ascontiguousarray(a.reshape(-1)))
        self._impl.start_with_range(dtype, bounds[0], bounds[1])

    def counts_exact(self) -> bool:
        """Whether every bin's count is below 2**24, where float32 counts are exact integers: then sums of
        counts (merges, batches over a fixed range) do not depend on their order. At 2**24 and beyond a sum
        may round, and the order-free guarantee of ``start_with_range`` no longer holds."""
        state = self._impl.get_state()
        return len(state[2]) == 0 or bool(np.max(state[2]) < COUNT_EXACT_LIMIT)


class PercentileEncodingAnalyzer(_HistogramAnalyzer):
    """Percentile calibration: the range after clipping (100 - p)% at each end of a histogram."""

    _kinds = ("percentile",)

    def __init__(self, shape, num_bins: int = 2048, percentile: float = 100, block_size: Optional[Sequence[int]] = None):
        super().__init__(shape, block_size)
        self.num_bins = strict_int(num_bins, "num_bins")
        self._impl = _ext.aimet._PercentileEncodingAnalyzer(list(self.shape), _list(self.block_size), self.num_bins,
                                                   strict_real(percentile, "percentile"))

    @property
    def percentile(self) -> float:
        return self._impl.percentile()

    def set_percentile(self, percentile: float) -> None:
        self._impl.set_percentile(strict_real(percentile, "percentile"))

    def _state_common(self):
        return {"kind": "percentile", "shape": self.shape, "block_size": self.block_size, "num_bins": self.num_bins,
                "percentile": self.percentile}

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "PercentileEncodingAnalyzer":
        _check_mapping(state, cls._kinds)
        a = cls(_key(state, "shape"), _key(state, "num_bins"), _key(state, "percentile"), state.get("block_size"))
        a.load_state_dict(state)
        return a


class SqnrEncodingAnalyzer(_HistogramAnalyzer):
    """SQNR calibration: the (delta, offset) minimising the histogram-estimated quantization noise.

    ``torch_sum_lanes`` (polyquant's): the float32 vector width of torch's CPU sum kernel, whose
    order the noise sums follow: 8 (AVX2; torch 2.15 runs it on AVX-512 machines too), or 16.
    ``asymmetric_delta_candidates`` / ``symmetric_delta_candidates``: 2 to 2**24;
    ``offset_candidates``: 1 (the observed offset only) or 3 to 2**24 (ValueError otherwise).
    """

    _kinds = ("sqnr",)

    def __init__(self, shape, num_bins: int = 2048, *, asymmetric_delta_candidates=17, symmetric_delta_candidates=101,
                 offset_candidates=21, max_parallelism=64, gamma=3.0, histogram_growth_limit: Optional[float] = None,
                 block_size: Optional[Sequence[int]] = None, torch_sum_lanes: int = 8):
        super().__init__(shape, block_size)
        self.num_bins = strict_int(num_bins, "num_bins")
        growth = math.inf if histogram_growth_limit is None else strict_real(histogram_growth_limit, "histogram_growth_limit")
        self._options = dict(asymmetric_delta_candidates=strict_int(asymmetric_delta_candidates, "asymmetric_delta_candidates"),
                             symmetric_delta_candidates=strict_int(symmetric_delta_candidates, "symmetric_delta_candidates"),
                             offset_candidates=strict_int(offset_candidates, "offset_candidates"),
                             max_parallelism=strict_int(max_parallelism, "max_parallelism"),
                             gamma=strict_real(gamma, "gamma"), histogram_growth_limit=histogram_growth_limit,
                             torch_sum_lanes=_lanes(torch_sum_lanes))
        self._impl = _ext.aimet._SqnrEncodingAnalyzer(list(self.shape), _list(self.block_size), self.num_bins,
                                             self._options["asymmetric_delta_candidates"],
                                             self._options["symmetric_delta_candidates"],
                                             self._options["offset_candidates"], self._options["max_parallelism"],
                                             self._options["gamma"], growth, self._options["torch_sum_lanes"])

    def _state_common(self):
        return {"kind": "sqnr", "shape": self.shape, "block_size": self.block_size, "num_bins": self.num_bins,
                **self._options}

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "SqnrEncodingAnalyzer":
        _check_mapping(state, cls._kinds)
        keys = ("asymmetric_delta_candidates", "symmetric_delta_candidates", "offset_candidates", "max_parallelism",
                "gamma", "histogram_growth_limit", "torch_sum_lanes")
        a = cls(_key(state, "shape"), _key(state, "num_bins"), block_size=state.get("block_size"),
                **{k: _key(state, k) for k in keys})
        a.load_state_dict(state)
        return a


class TfEnhancedEncodingAnalyzer(SqnrEncodingAnalyzer):
    """SQNR with AIMET 1.x tf-enhanced's settings: 512 bins, growth limit 3, gamma 3."""

    def __init__(self, shape, block_size: Optional[Sequence[int]] = None, *, torch_sum_lanes: int = 8):
        super().__init__(shape, 512, asymmetric_delta_candidates=17, symmetric_delta_candidates=101,
                         offset_candidates=21, gamma=3.0, histogram_growth_limit=3.0, block_size=block_size,
                         torch_sum_lanes=torch_sum_lanes)

    _kinds = ("tfe",)

    def _state_common(self):
        return {"kind": "tfe", "shape": self.shape, "block_size": self.block_size,
                "torch_sum_lanes": self._options["torch_sum_lanes"]}

    @classmethod
    def from_state(cls, state: Dict[str, Any]) -> "TfEnhancedEncodingAnalyzer":
        _check_mapping(state, cls._kinds)
        a = cls(_key(state, "shape"), state.get("block_size"), torch_sum_lanes=state.get("torch_sum_lanes", 8))
        a.load_state_dict(state)
        return a
