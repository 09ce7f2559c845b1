"""AIMET's affine quantizer modules (aimet_torch.quantization.affine, aimet-torch 2.42.0) on numpy
arrays: ``Quantize``, ``QuantizeDequantize``, ``Dequantize`` and ``GroupedBlockQuantizeDequantize``
(LPBQ).

A quantizer holds AIMET's learnable range ``min`` / ``max`` (float32 arrays of ``shape``, -1 and +1
until set, and "uninitialized" until both were assigned or calibrated, as AIMET tracks it) and the
integer grid [qmin, qmax]. Calling it runs AIMET's forward under ``torch.no_grad()``: the functional
``polyquant.aimet.quantize`` / ``quantize_dequantize`` with the quantizer's scale and offset (float32
arrays of ``shape``), grid and block size. ``compute_encodings()`` is AIMET's calibration context.

The parameter arithmetic (scale, offset, recalibrated range, a batch's dynamic encoding, LPBQ) runs
in the C++ core (``polyquant/aimet_quantizer.h``); this module holds state and maps AIMET's arguments.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from itertools import chain, repeat
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import ml_dtypes
import numpy as np

from .. import _polyquant_ext as _ext
from .._common import device as _device
from .._common.args import strict_int, strict_int_tuple
from .analyzers import MinMaxEncodingAnalyzer, StatisticsNotFoundError
from .encodings import (
    VALID_ENCODING_VERSIONS,
    AffineEncoding,
    GroupedBlockEncoding,
    encoding_from_qnn_dict,
)
from .functional import dequantize, quantize, quantize_dequantize

__all__ = ["Quantize", "QuantizeDequantize", "Dequantize", "GroupedBlockQuantizeDequantize"]

_SIGNATURES = (
    "(self, shape, qmin: int, qmax: int, symmetric: bool, encoding_analyzer: EncodingAnalyzer = None, "
    "block_size: Optional[Tuple[int, ...]] = None, zero_point_shift: Optional[float] = None)",
    "(self, shape, bitwidth: int, symmetric: bool, encoding_analyzer: EncodingAnalyzer = None, "
    "block_size: Optional[Tuple[int, ...]] = None, zero_point_shift: Optional[float] = None)",
)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# A quantizer's grid must have at most 2^63 - 1 steps (qmax - qmin fits int64): 63 bits.
_MAX_BITWIDTH = 63


def _bitwidth_arg(bitwidth, name: str = "bitwidth") -> int:
    return strict_int(bitwidth, name, minimum=1, maximum=_MAX_BITWIDTH)


def _grid_args(qmin, qmax) -> Tuple[int, int]:
    """Strict integer qmin < qmax whose number of steps qmax - qmin fits int64."""
    qmin = strict_int(qmin, "qmin", minimum=_INT64_MIN + 1, maximum=_INT64_MAX)
    qmax = strict_int(qmax, "qmax", minimum=_INT64_MIN, maximum=_INT64_MAX)
    if qmin < qmax and qmax - qmin > _INT64_MAX:
        raise ValueError(f"qmin/qmax: the grid [{qmin}, {qmax}] has {qmax - qmin} steps; at most 2**63 - 1 "
                         f"({_MAX_BITWIDTH} bits) are supported")
    return qmin, qmax


def _block_size_arg(block_size, name: str) -> Optional[Tuple[int, ...]]:
    """None, or a tuple of -1 (the whole dimension) or positive integers."""
    if block_size is None:
        return None
    values = strict_int_tuple(block_size, name, minimum=-1, maximum=_INT64_MAX)
    for i, b in enumerate(values):
        if b == 0:
            raise ValueError(f"{name}[{i}]: 0 is not allowed; expected -1 (the whole dimension) or a positive integer")
    return values


def _derive_qmin_qmax(bitwidth, signed: bool) -> Tuple[int, int]:
    num_steps = 2**bitwidth - 1
    if signed:
        return -math.ceil(num_steps / 2), math.floor(num_steps / 2)
    return 0, num_steps


def _is_expandable(src: Sequence[int], dst: Sequence[int]) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(tuple(src)[::-1], tuple(dst)[::-1]))


def _numel(x) -> int:
    n = getattr(x, "numel", None)
    return int(n()) if callable(n) else int(np.size(x))


def _flag_extreme_min_max(mn: np.ndarray, mx: np.ndarray) -> None:
    """AIMET's warnings on a calibrated range: non-finite, or within 5 % of the dtype's max."""
    if not (np.all(np.isfinite(mn.astype(np.float64))) and np.all(np.isfinite(mx.astype(np.float64)))):
        warnings.warn("Infinite or NaN values detected within input! This may skew the associated encodings")
    big = float(np.finfo(mn.dtype).max) if mn.dtype.kind == "f" else float(np.finfo(np.float32).max)
    if mn.dtype == ml_dtypes.bfloat16:
        big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)

    def close(v):
        a = np.abs(v.astype(np.float64))
        return np.any(np.abs(a - big) <= 1e-8 + 0.05 * big)

    if close(mn) or close(mx):
        warnings.warn("Extreme values detected within input! This may skew the associated encodings")


class _AffineQuantizerBase:
    """State and parameter arithmetic shared by the affine quantizers."""

    def __init__(self, shape, *args, **kwargs):
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
            shape = (shape,)
        self.shape = strict_int_tuple(shape, "shape", minimum=0, maximum=_INT64_MAX)
        full_args = (shape, *args)
        args = tuple(chain(args, repeat(None, 6 - len(args))))
        arg0 = kwargs.pop("qmin", kwargs.pop("bitwidth", args[0]))
        arg1 = kwargs.pop("qmax", args[1])
        if arg1 is not None and not isinstance(arg1, (bool, np.bool_)):
            qmin, qmax = arg0, arg1
            symmetric = kwargs.pop("symmetric", args[2])
            if qmin is None or qmax is None or symmetric is None:
                raise self._arg_parsing_error(full_args, kwargs)
            encoding_analyzer = kwargs.pop("encoding_analyzer", args[3])
            block_size = kwargs.pop("block_size", args[4])
            zero_point_shift = kwargs.pop("zero_point_shift", args[5])
        else:
            bitwidth = arg0
            symmetric = kwargs.pop("symmetric", args[1])
            if bitwidth is None or symmetric is None:
                raise self._arg_parsing_error(full_args, kwargs)
            # bitwidth form: signed := symmetric
            bitwidth = strict_int(bitwidth, "bitwidth", maximum=_MAX_BITWIDTH)
            if bitwidth < 1:  # AIMET's check, on the grid it derives
                raise ValueError(f"qmax should be strictly larger than qmin (bitwidth >= 1). Got bitwidth={bitwidth}")
            qmin, qmax = _derive_qmin_qmax(bitwidth, bool(symmetric))
            encoding_analyzer = kwargs.pop("encoding_analyzer", args[2])
            block_size = kwargs.pop("block_size", args[3])
            zero_point_shift = kwargs.pop("zero_point_shift", args[4])
        if kwargs:
            raise TypeError(f"{type(self).__qualname__}.__init__ got unexpected keyword argument: {', '.join(kwargs)}")
        qmin, qmax = _grid_args(qmin, qmax)
        if qmin >= qmax:
            raise ValueError(f"qmax should be strictly larger than qmin (bitwidth >= 1). Got qmax={qmax}, qmin={qmin}")
        self.qmin, self.qmax = qmin, qmax
        self._symmetric = bool(symmetric)
        self.block_size = _block_size_arg(block_size, "block_size")
        self.zero_point_shift = zero_point_shift or 0.0
        if self.zero_point_shift != 0.0:
            raise ValueError(f"zero_point_shift: only 0.0 is supported by polyquant.aimet, "
                             f"got {self.zero_point_shift}")
        self.encoding_analyzer = encoding_analyzer or MinMaxEncodingAnalyzer(self.shape, block_size=self.block_size)
        an_shape = tuple(self.encoding_analyzer.shape)
        if not _is_expandable(an_shape, self.shape):
            raise RuntimeError(f"Encoding analyzer of shape {an_shape} is incompatible with quantizer of shape "
                               f"{self.shape} (encoding_analyzer)")
        self._min = np.full(self.shape, -1.0, np.float32)
        self._max = np.full(self.shape, 1.0, np.float32)
        self._set = {"min": False, "max": False}
        self._is_overwrite_allowed = {"min": True, "max": True}
        self._calibrating = False

    @classmethod
    def _arg_parsing_error(cls, args, kwargs) -> TypeError:
        got = (*args, *(f"{k}={v}" for k, v in kwargs.items()))
        return TypeError("\n".join(("Unexpected arguments (shape, bitwidth or qmin/qmax, and symmetric are required). "
                                    "Expected one of:", *("  * " + s for s in _SIGNATURES), "", f"  But got: {got}")))

    # ---- the learnable range -------------------------------------------------------------------
    def _param(self, value, name: str) -> np.ndarray:
        a = np.asarray(value)
        try:
            a = np.broadcast_to(a.astype(np.float32), self.shape)
        except ValueError:
            raise ValueError(f"{name}: shape {a.shape} does not match the quantizer shape {self.shape}") from None
        return np.array(a, dtype=np.float32, order="C")

    @property
    def min(self) -> np.ndarray:
        v = self._min.view()
        v.flags.writeable = False
        return v

    @min.setter
    def min(self, value) -> None:
        self._min = self._param(value, "min")
        self._set["min"] = True

    @property
    def max(self) -> np.ndarray:
        v = self._max.view()
        v.flags.writeable = False
        return v

    @max.setter
    def max(self, value) -> None:
        self._max = self._param(value, "max")
        self._set["max"] = True

    def is_initialized(self) -> bool:
        return all(self._set.values())

    def set_range(self, min=None, max=None) -> None:  # noqa: A002
        """Sets min and/or max (broadcast to ``shape``, cast to float32)."""
        if min is not None:
            self.min = min
        if max is not None:
            self.max = max

    def allow_overwrite(self, *args, **kwargs) -> None:
        """Whether compute_encodings() may overwrite min and max: ``allow_overwrite(mode)`` for
        both, or ``allow_overwrite(min=..., max=...)`` per parameter (AIMET's two forms)."""
        mode = kwargs.get("mode", args[0] if args else None)
        flags = {k: mode for k in self._is_overwrite_allowed} if mode is not None else dict(kwargs)
        unexpected = sorted(set(flags) - set(self._is_overwrite_allowed))
        if unexpected:
            raise RuntimeError(f"'allow_overwrite' expected param names {sorted(self._is_overwrite_allowed)}; "
                               f"got unexpected parameter names {unexpected}")
        self._is_overwrite_allowed.update({k: bool(v) for k, v in flags.items()})

    def is_overwrite_allowed(self, name: Optional[str] = None) -> bool:
        if name is None:
            return any(self._is_overwrite_allowed.values())
        return self._is_overwrite_allowed[name]

    # ---- grid attributes -----------------------------------------------------------------------
    @property
    def symmetric(self) -> bool:
        return self._symmetric

    @symmetric.setter
    def symmetric(self, value: bool) -> None:
        self._symmetric = bool(value)

    def _grid_encoding(self) -> AffineEncoding:
        return AffineEncoding(np.ones(()), np.zeros(()), self.qmin, self.qmax, self._symmetric)

    @property
    def bitwidth(self) -> int:
        return self._grid_encoding().bitwidth

    @bitwidth.setter
    def bitwidth(self, bitwidth) -> None:
        if bitwidth == int(bitwidth):
            bitwidth = int(bitwidth)
        if not isinstance(bitwidth, int):
            raise TypeError(f"bitwidth: a non-integer value {bitwidth} is not supported; set qmin and qmax instead")
        if bitwidth < 1:
            raise ValueError(f"bitwidth can't be smaller than 1. Got {bitwidth}")
        if bitwidth > _MAX_BITWIDTH:
            raise ValueError(f"bitwidth: {bitwidth} is out of range; expected an integer in [1, {_MAX_BITWIDTH}]")
        if self.qmin + self.qmax == -1:
            self.qmin, self.qmax = -(2 ** (bitwidth - 1)), 2 ** (bitwidth - 1) - 1
        elif self.qmin == 0:
            self.qmax = 2**bitwidth - 1
        else:
            raise self._grid_encoding()._undefined("bitwidth")

    @property
    def signed(self) -> bool:
        return self._grid_encoding().signed

    @signed.setter
    def signed(self, signed: bool) -> None:
        was = self.signed
        if was and not signed:
            shift = self.qmin
        elif signed and not was:
            shift = math.ceil((self.qmin + self.qmax) / 2)
        else:
            shift = 0
        self.qmin -= shift
        self.qmax -= shift

    # ---- scale / offset / range ------------------------------------------------------------------
    def _raw_scale(self) -> np.ndarray:
        out = np.empty(self.shape, np.float32)
        _ext.aimet.quantizer_scale(self._min.reshape(-1), self._max.reshape(-1), self.qmin, self.qmax, out.reshape(-1))
        return out

    def _offset_for(self, scale: np.ndarray) -> np.ndarray:
        out = np.empty(self.shape, np.float32)
        _ext.aimet.quantizer_offset(self._min.reshape(-1), np.ascontiguousarray(scale, np.float32).reshape(-1),
                                    self.qmin, self.qmax, self._symmetric, out.reshape(-1))
        return out

    def _scale_offset(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        if not self.is_initialized():
            return None
        scale = self._effective_scale()
        return scale, self._offset_for(self._raw_scale())

    def _effective_scale(self) -> np.ndarray:
        return self._raw_scale()

    @staticmethod
    def _cast(a: Optional[np.ndarray], dtype) -> Optional[np.ndarray]:
        return a if a is None or dtype is None else a.astype(dtype)

    def get_scale(self, dtype=None) -> Optional[np.ndarray]:
        """|(max - min) / (qmax - qmin)|, at least the minimum scale; None until initialized."""
        so = self._scale_offset()
        return None if so is None else self._cast(so[0], dtype)

    def get_offset(self, dtype=None) -> Optional[np.ndarray]:
        """Symmetric: -round((qmin + qmax) / 2); else clamp(round(min / scale) - qmin, -qmax, -qmin)."""
        so = self._scale_offset()
        return None if so is None else self._cast(so[1], dtype)

    def _range(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        so = self._scale_offset()
        if so is None:
            return None
        mn = np.empty(self.shape, np.float32)
        mx = np.empty(self.shape, np.float32)
        _ext.aimet.quantizer_range(np.ascontiguousarray(so[0]).reshape(-1), np.ascontiguousarray(so[1]).reshape(-1),
                                   self.qmin, self.qmax, mn.reshape(-1), mx.reshape(-1))
        return mn, mx

    def get_min(self, dtype=None) -> Optional[np.ndarray]:
        """scale * (offset + qmin): the grid-snapped min (what is exported)."""
        r = self._range()
        return None if r is None else self._cast(r[0], dtype)

    def get_max(self, dtype=None) -> Optional[np.ndarray]:
        """scale * (offset + qmax)."""
        r = self._range()
        return None if r is None else self._cast(r[1], dtype)

    # ---- encodings -------------------------------------------------------------------------------
    def get_encodings(self) -> Optional[AffineEncoding]:
        so = self._scale_offset()
        if so is None:
            return None
        return AffineEncoding(so[0], so[1], self.qmin, self.qmax, self._symmetric, self.block_size)

    @classmethod
    def from_encodings(cls, encodings: AffineEncoding) -> "_AffineQuantizerBase":
        """A quantizer of the encoding's shape, grid, symmetry and block size whose range is the
        encoding's min / max (AIMET's from_encodings)."""
        if not isinstance(encodings, AffineEncoding) or isinstance(encodings, GroupedBlockEncoding):
            raise TypeError(f"encodings: expected an AffineEncoding, got {type(encodings).__name__}")
        q = cls(encodings.scale.shape, qmin=encodings.qmin, qmax=encodings.qmax, symmetric=encodings.symmetry,
                block_size=encodings.block_size)
        q.set_range(encodings.min, encodings.max)
        return q

    def get_legacy_encodings(self) -> Optional[List[Dict[str, Any]]]:
        """The 0.6.1 ("legacy") encodings: one dict per parameter element; None until initialized."""
        if not self.is_initialized():
            return None
        return self.get_encodings()._to_legacy_format()

    def set_legacy_encodings(self, encodings: List[Dict[str, Any]]) -> None:
        """AIMET's import of legacy encodings: bitwidth and symmetry from the first entry (the grid
        becomes signed iff symmetric), then the range from the min / max fields."""

        p = encoding_from_qnn_dict(encodings, "0.6.1", self.shape)  # every field checked first
        self.qmin, self.qmax = p["qmin"], p["qmax"]
        self.symmetric = p["symmetric"]
        self.set_range(p["min"], p["max"])

    def set_qnn_encoding_dict(self, encoding: Any, encoding_version: str) -> None:
        """Loads what ``get_encodings().to_qnn_encoding_dict(encoding_version)`` wrote: the grid,
        symmetry and a range that reproduces the stored scale and offset exactly (so the quantizer
        computes what the exporting one computed, and exports the same dict again)."""
        p = encoding_from_qnn_dict(encoding, encoding_version, self.shape)
        if p.get("lpbq"):
            raise TypeError(f"{type(self).__name__}: an LPBQ encoding needs a GroupedBlockQuantizeDequantize")
        self._load(p["scale"], p["offset"], p["qmin"], p["qmax"], p["symmetric"])

    def _load(self, scale, offset, qmin, qmax, symmetric) -> None:
        self.qmin, self.qmax, self.symmetric = qmin, qmax, symmetric
        mn = np.empty(self.shape, np.float32)
        mx = np.empty(self.shape, np.float32)
        _ext.aimet.range_for_scale_offset(np.ascontiguousarray(scale, np.float32).reshape(-1),
                                          np.ascontiguousarray(offset, np.float32).reshape(-1), qmin, qmax,
                                          bool(symmetric), mn.reshape(-1), mx.reshape(-1))
        self.set_range(mn, mx)

    # ---- forward -----------------------------------------------------------------------------------
    def _functional(self, x, scale, offset, block_size):
        raise NotImplementedError

    def __call__(self, x):
        if self._calibrating and _numel(x) != 0:
            return self._calibration_forward(x)
        enc = self.get_encodings()
        if enc is None:
            if _numel(x) != 0:
                raise RuntimeError(f"Failed to run {type(self).__name__} since quantization parameters are not "
                                   "initialized. Please initialize the quantization parameters using "
                                   "`compute_encodings()` (or set min and max).")
            return self._functional(x, np.ones((), np.float32), np.zeros((), np.float32), None)
        return self._functional(x, *self._parameters_for(x, enc.scale, enc.offset), enc.block_size)

    @staticmethod
    def _parameters_for(x, scale, offset):
        """scale and offset for a call on x: on x's device when x is a device tensor (as AIMET's
        module parameters live on the module's device), else as they are."""
        return (_device.on_device_of(scale, x, "scale (the quantizer's, for a device tensor)"),
                _device.on_device_of(offset, x, "offset (the quantizer's, for a device tensor)"))

    forward = __call__

    def _calibration_forward(self, x):
        an = self.encoding_analyzer
        an.update_stats(x)
        num_steps = self.qmax - self.qmin
        dmin, dmax = an.compute_dynamic_encodings(x, num_steps, self._symmetric)
        dmin = np.array(np.broadcast_to(np.asarray(dmin).astype(np.float32).reshape(
            np.shape(dmin) if self.block_size is None else self.shape), self.shape), order="C")
        dmax = np.array(np.broadcast_to(np.asarray(dmax).astype(np.float32).reshape(
            np.shape(dmax) if self.block_size is None else self.shape), self.shape), order="C")
        scale = np.empty(self.shape, np.float32)
        offset = np.empty(self.shape, np.float32)
        _ext.aimet.scale_offset_from_range(dmin.reshape(-1), dmax.reshape(-1), self.qmin, self.qmax, self._symmetric,
                                           scale.reshape(-1), offset.reshape(-1))
        return self._functional(x, *self._parameters_for(x, scale, offset), self.block_size)

    @contextlib.contextmanager
    def compute_encodings(self) -> Iterator[None]:
        """AIMET's calibration: statistics are reset on entry; each call inside feeds its input to
        the analyzer and quantizes it with that batch's own encoding; on a normal exit the
        analyzer's range becomes min / max (AIMET's warnings on non-finite or near-max ranges)."""
        if not any(self._is_overwrite_allowed.values()):
            yield
            return
        self.encoding_analyzer.reset_stats()
        self._calibrating = True
        try:
            yield
        finally:
            self._calibrating = False
        try:
            enc_min, enc_max = self.encoding_analyzer.compute_encodings(self.qmax - self.qmin, self._symmetric)
        except StatisticsNotFoundError:
            return
        enc_min, enc_max = np.asarray(enc_min), np.asarray(enc_max)
        if self.block_size is not None:
            enc_min, enc_max = enc_min.reshape(self.shape), enc_max.reshape(self.shape)
        _flag_extreme_min_max(enc_min, enc_max)
        self.set_range(enc_min if self._is_overwrite_allowed["min"] else None,
                       enc_max if self._is_overwrite_allowed["max"] else None)

    def __repr__(self) -> str:
        parts = [f"shape={self.shape}"]
        if self.block_size:
            parts.append(f"block_size={self.block_size}")
        parts += [f"qmin={self.qmin}", f"qmax={self.qmax}", f"symmetric={self.symmetric}"]
        return f"{type(self).__name__}({', '.join(parts)})"


class Quantize(_AffineQuantizerBase):
    """AIMET's Quantize: clamp(round(x / scale) - offset, qmin, qmax), in x's dtype."""

    def _functional(self, x, scale, offset, block_size):
        return quantize(x, scale, offset, self.qmin, self.qmax, block_size=block_size)


class QuantizeDequantize(_AffineQuantizerBase):
    """AIMET's QuantizeDequantize: (clamp(round(x / scale) - offset, qmin, qmax) + offset) * scale,
    through AIMET's no-grad path (torch's fake quantization where AIMET takes it)."""

    def _functional(self, x, scale, offset, block_size):
        return quantize_dequantize(x, scale, offset, self.qmin, self.qmax, block_size=block_size)


class Dequantize(_AffineQuantizerBase):
    """AIMET's Dequantize: (x + offset) * scale, in x's dtype (x holds integers on the grid)."""

    def _functional(self, x, scale, offset, block_size):
        return dequantize(x, scale, offset, block_size=block_size)


class GroupedBlockQuantizeDequantize(QuantizeDequantize):
    """AIMET's LPBQ quantizer: blockwise, symmetric; the block scales of each group of
    ``block_grouping`` blocks share a float per-channel scale (the group's max / 2^(dbw - bw)) times
    an integer in [1, 2^(decompressed_bw - bitwidth)]."""

    def __init__(self, shape, bitwidth: int, symmetric: bool, decompressed_bw: int, encoding_analyzer=None,
                 block_size: Optional[Tuple[int, ...]] = None, block_grouping: Optional[Tuple[int, ...]] = None):
        super().__init__(shape, bitwidth, symmetric, encoding_analyzer, block_size)
        self.decompressed_bw = _bitwidth_arg(decompressed_bw, "decompressed_bw")
        shape = self.shape
        if block_grouping is not None:
            block_grouping = _block_size_arg(block_grouping, "block_grouping")
        self.block_grouping = tuple(1 for _ in shape) if block_grouping is None else block_grouping
        if block_grouping is not None:
            if len(block_grouping) != len(shape):
                raise RuntimeError(f"Length of block grouping {tuple(block_grouping)} must equal length of shape "
                                   f"{shape} (block_grouping).")
            for dim, g in zip(shape, block_grouping):
                if g != -1 and dim % g != 0:
                    raise RuntimeError("Quantizer shape dimensions must divide evenly with corresponding block "
                                       f"grouping values for shapes {shape} and block grouping {tuple(block_grouping)} "
                                       "(block_grouping).")
        if self.decompressed_bw < self.bitwidth:
            raise RuntimeError(f"Decompressed bitwidth {decompressed_bw} cannot be smaller than bitwidth {bitwidth} "
                               "(decompressed_bw).")
        if not symmetric:
            raise RuntimeError("GroupedBlockQuantizeDequantize only supports symmetric quantization (symmetric=True).")

    def _lpbq(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        raw = self._raw_scale()
        pc_shape = tuple(_ext.aimet.lpbq_channel_shape(list(self.shape), list(self.block_grouping)))
        pc = np.empty(pc_shape, np.float32)
        scale = np.empty(self.shape, np.float32)
        ints = np.empty(self.shape, np.float32)
        _ext.aimet.lpbq_scales(raw.reshape(-1), list(self.shape), list(self.block_grouping), self.bitwidth,
                               self.decompressed_bw, pc.reshape(-1), scale.reshape(-1), ints.reshape(-1))
        return pc, scale, ints

    def _effective_scale(self) -> np.ndarray:
        return self._lpbq()[1]

    def get_per_channel_scale(self, dtype=None) -> Optional[np.ndarray]:
        """The per-channel float scale: scale = per_channel_scale * per_block_int_scale."""
        if not self.is_initialized():
            return None
        return self._cast(self._lpbq()[0], dtype)

    def get_encodings(self) -> Optional[AffineEncoding]:
        if not self.is_initialized():
            return None
        pc, scale, ints = self._lpbq()
        return GroupedBlockEncoding(scale, self._offset_for(self._raw_scale()), self.qmin, self.qmax, self._symmetric,
                                    self.block_size, self.block_grouping, self.decompressed_bw, pc, ints)

    @classmethod
    def from_encodings(cls, encodings: GroupedBlockEncoding) -> "GroupedBlockQuantizeDequantize":
        """An LPBQ quantizer with the encoding's parameters and its min / max as range."""
        if not isinstance(encodings, GroupedBlockEncoding):
            raise TypeError(f"encodings: expected a GroupedBlockEncoding, got {type(encodings).__name__}")
        q = cls(encodings.scale.shape, encodings.bitwidth, encodings.symmetry, encodings.decompressed_bw,
                block_size=encodings.block_size, block_grouping=encodings.block_grouping)
        q.set_range(encodings.min, encodings.max)
        return q

    def set_qnn_encoding_dict(self, encoding: Any, encoding_version: str) -> None:
        p = encoding_from_qnn_dict(encoding, encoding_version, self.shape)
        if p.get("lpbq"):
            # each group's largest block holds 2^k, so per-block raw scales int * pc give back pc exactly
            raw = (p["per_block_int_scale"] * self._expand_channel(p["per_channel_scale"])).astype(np.float32)
            offset = np.zeros(self.shape, np.float32)
            self._load(raw, offset, p["qmin"], p["qmax"], True)
            return
        self._load(p["scale"], p["offset"], p["qmin"], p["qmax"], p["symmetric"])

    def _expand_channel(self, pc) -> np.ndarray:
        pc_shape = tuple(_ext.aimet.lpbq_channel_shape(list(self.shape), list(self.block_grouping)))
        pc = np.asarray(pc, np.float32)
        if pc.size != int(np.prod(pc_shape, dtype=np.int64)):
            raise ValueError(f"encodings: the per-channel scale has {pc.size} values; this quantizer's shape {self.shape} "
                             f"and block grouping {self.block_grouping} need {pc_shape}")
        pc = pc.reshape(pc_shape)
        for axis, (n, c) in enumerate(zip(self.shape, pc_shape)):
            pc = np.repeat(pc, n // c, axis=axis)
        return pc
