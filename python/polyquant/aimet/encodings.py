"""AIMET's encoding objects and their JSON forms (aimet_torch.quantization.affine.encoding,
aimet-torch 2.42.0): ``AffineEncoding`` and ``GroupedBlockEncoding`` as a quantizer's
``get_encodings()`` returns them, with AIMET's exporters

    get_legacy_encodings() / _to_legacy_format()     "0.6.1": one dict per parameter element
    to_qnn_encoding_dict(version, input_shape=None)  "0.6.1", "1.0.0", "2.0.0", "2.1.0"

and a reader for the same dicts (``encoding_from_qnn_dict``). The numbers (scale, offset, the
recalibrated min/max, the LPBQ integer scales) come from the C++ core; this module only lays them
out as AIMET does, including its casts (``int(float)`` of the legacy offset, truncating int32 casts
of the 1.0.0 / 2.x offsets) and its errors (export versions, the input-shape hint).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _polyquant_ext as _ext
from .._common.args import strict_int, strict_int_tuple

__all__ = ["AffineEncoding", "GroupedBlockEncoding", "VALID_ENCODING_VERSIONS", "encoding_from_qnn_dict",
           "EncodingVersionError", "MAX_ENCODING_BITWIDTH"]

VALID_ENCODING_VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")


def _f32(a) -> np.ndarray:
    return np.array(a, dtype=np.float32, order="C")  # keeps 0-d arrays 0-d


def _to_int32(a: np.ndarray) -> np.ndarray:
    """torch's float -> int32 cast on x86: truncation, and INT32_MIN for NaN / out of range."""
    a = np.asarray(a, dtype=np.float64)
    out = np.full(a.shape, np.iinfo(np.int32).min, dtype=np.int32)
    ok = np.isfinite(a) & (a > -2147483649.0) & (a < 2147483648.0)
    out[ok] = np.trunc(a[ok]).astype(np.int32)
    return out


def _neg_int32(a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (-a.astype(np.int64)).astype(np.int32)  # INT32_MIN wraps to itself, as in torch


def concretize_block_size(input_shape: Sequence[int], scale_shape: Sequence[int], block_size: Sequence[int]):
    if len(input_shape) < len(scale_shape):
        raise ValueError(f"Input shape {tuple(input_shape)} must have at least as many dimensions as scale shape "
                         f"{tuple(scale_shape)}.")
    if len(scale_shape) < len(block_size):
        raise ValueError(f"Scale shape {tuple(scale_shape)} must have at least as many dimensions as block size "
                         f"{tuple(block_size)}.")
    input_shape = tuple(input_shape)[len(input_shape) - len(scale_shape):]
    k = len(scale_shape) - len(block_size)
    full = [*(1 if d > 1 else -1 for d in scale_shape[:k]), *block_size]
    return tuple(b if b != -1 else input_shape[i] // scale_shape[i] for i, b in enumerate(full))


class AffineEncoding:
    """Scale / offset (float32 arrays of the quantizer's shape), the integer grid [qmin, qmax],
    symmetry and block size of an affine quantizer (AIMET's AffineEncoding)."""

    def __init__(self, scale, offset, qmin: int, qmax: int, symmetry: bool = False,
                 block_size: Optional[Tuple[int, ...]] = None, zero_point_shift: float = 0.0):
        self.scale = _f32(scale)
        self.offset = _f32(offset)
        qmin = strict_int(qmin, "qmin", minimum=-(2**63) + 1, maximum=2**63 - 1)
        qmax = strict_int(qmax, "qmax", minimum=-(2**63) + 1, maximum=2**63 - 1)
        if qmin >= qmax:
            raise ValueError(f"qmax should be strictly larger than qmin. Got qmax={qmax}, qmin={qmin}")
        self.qmin, self.qmax = qmin, qmax
        self._symmetry = bool(symmetry)
        self.block_size = None if block_size is None else strict_int_tuple(block_size, "block_size",
                                                                             minimum=-1, maximum=2**63 - 1)
        self.zero_point_shift = zero_point_shift or 0.0
        self._input_shape_hint: Optional[Tuple[int, ...]] = None

    # ---- properties (AIMET's) ------------------------------------------------------------------
    @property
    def mapping(self) -> str:
        return "affine"

    @property
    def symmetry(self) -> bool:
        return self._symmetry

    @property
    def num_steps(self) -> int:
        return self.qmax - self.qmin

    def _range(self) -> Tuple[np.ndarray, np.ndarray]:
        mn = np.empty(self.scale.shape, np.float32)
        mx = np.empty(self.scale.shape, np.float32)
        _ext.aimet.quantizer_range(self.scale.reshape(-1), self.offset.reshape(-1), self.qmin, self.qmax,
                                   mn.reshape(-1), mx.reshape(-1))
        return mn, mx

    @property
    def min(self) -> np.ndarray:
        """(offset + qmin) * scale."""
        return self._range()[0]

    @property
    def max(self) -> np.ndarray:
        """(offset + qmax) * scale."""
        return self._range()[1]

    def _undefined(self, attr: str) -> RuntimeError:
        return RuntimeError(
            f"{type(self).__qualname__}.{attr} is undefined in the quantization grid [{self.qmin}, {self.qmax}]. "
            f"Attribute {attr} can be defined if and only if there exists a strictly positive integer `B` such that "
            "the quantization grid can be expressed in the form of [-2**(B-1), 2**(B-1) - 1] or [0, 2**B - 1].")

    @property
    def bitwidth(self) -> int:
        if self.qmin + self.qmax == -1 or self.qmin == 0:
            b = math.log2(self.qmax - self.qmin + 1)
            if b == int(b):
                return int(b)
        raise self._undefined("bitwidth")

    @property
    def signed(self) -> bool:
        if self.qmin + self.qmax == -1 or self.qmin == 0:
            return self.qmin < 0 <= self.qmax
        raise self._undefined("signed")

    @property
    def granularity(self) -> str:
        if self.scale.ndim == 0:
            return "pertensor"
        if self.block_size is not None:
            return "blockwise"
        return "perchannel" if sum(1 for d in self.scale.shape if d > 1) <= 1 else "unknown"

    def _export_dtype(self) -> str:
        nbits = math.ceil(math.log2(self.qmax - self.qmin + 1))
        return f"int{nbits}" if self.qmin < 0 <= self.qmax else f"uint{nbits}"

    def _hint_input_shape(self, input_shape) -> "AffineEncoding":
        self._input_shape_hint = (None if input_shape is None
                                  else strict_int_tuple(input_shape, "input_shape", minimum=0, maximum=2**63 - 1))
        return self

    def _channel_and_block_axis(self) -> Tuple[Optional[int], Optional[int]]:
        if self._input_shape_hint is None:
            raise RuntimeError(
                "Could not safely infer channel and block axes because input shape hint is not provided. "
                "Pass input_shape= (AIMET: call `_hint_input_shape`) before exporting.")
        blocks = concretize_block_size(self._input_shape_hint, self.scale.shape, self.block_size or ())
        channel, block = [], []
        for axis, (n, b) in enumerate(zip(self.scale.shape, blocks)):
            if n > 1:
                (block if b > 1 else channel).append(axis)
        if len(block) > 1:
            raise RuntimeError(f"Multiple non-trivial block axes found: {block}. Cannot determine a unique block axis.")
        if len(channel) > 1:
            raise RuntimeError(f"Multiple non-trivial channel axes found: {channel}. "
                               "Cannot determine a unique channel axis.")
        b_axis = block[0] if block else None
        c_axis = channel[0] if channel else None
        if c_axis is None and b_axis is not None:
            raise RuntimeError(f"Block axis {b_axis} found without a corresponding channel axis. "
                               "Cannot determine a unique channel axis.")
        nd = self.scale.ndim
        return (None if c_axis is None else c_axis - nd), (None if b_axis is None else b_axis - nd)

    def _block_at(self, axis):
        if axis is None:  # AIMET indexes block_size with None here
            raise TypeError("block_size: tuple indices must be integers or slices, not NoneType")
        return self.block_size[axis]

    # ---- export ----------------------------------------------------------------------------------
    def _to_legacy_format(self) -> List[Dict[str, Any]]:
        mn, mx = self._range()
        off = (self.offset.reshape(-1) + np.float32(self.qmin)).astype(np.float32)
        # AIMET's order: each entry's int(offset) (ValueError for NaN) before the bitwidth check
        out = [{"min": float(a), "max": float(b), "scale": float(s), "offset": int(float(o)), "bitwidth": self.bitwidth,
                "dtype": "int", "is_symmetric": str(self.symmetry)}
               for a, b, s, o in zip(mn.reshape(-1), mx.reshape(-1), self.scale.reshape(-1), off)]
        return out

    def to_qnn_encoding_dict(self, encoding_version=None, input_shape=None) -> Union[List, Dict]:
        """AIMET's QNN encoding of this encoding. `input_shape` is the shape of the tensor the
        quantizer sees (AIMET's ``_hint_input_shape``): 1.0.0 per-block and every 2.x encoding that
        is not per-tensor need it to find the channel and block axes."""
        if input_shape is not None:
            self._hint_input_shape(input_shape)
        v = encoding_version
        if v == "0.6.1":
            return self._to_legacy_format()
        if v == "1.0.0":
            d: Dict[str, Any] = {"dtype": "INT", "bw": self.bitwidth, "is_sym": self.symmetry,
                                 "scale": self.scale.reshape(-1).tolist()}
            off = self.offset
            if self.signed:
                off = (off - np.float32(2 ** (self.bitwidth - 1))).astype(np.float32)
            d["offset"] = _to_int32(off).reshape(-1).tolist()
            g = self.granularity
            if g == "unknown":
                raise AssertionError("granularity: the encoding is neither per-tensor, per-channel nor blockwise")
            if g == "pertensor":
                d["enc_type"] = "PER_TENSOR"
            elif g == "perchannel":
                d["enc_type"] = "PER_CHANNEL"
            else:
                _, block_axis = self._channel_and_block_axis()
                d["enc_type"] = "PER_BLOCK"
                d["block_size"] = self._block_at(block_axis)
                if d["block_size"] == -1:
                    raise NotImplementedError("block_size: exporting encodings to 1.0.0 format with block size -1 "
                                              "is not supported yet")
            return d
        if v in ("2.0.0", "2.1.0"):
            y_scale = self.scale
            if self.symmetry:
                zp = np.full(y_scale.shape, math.ceil((self.qmax + self.qmin) / 2), dtype=np.int32)
            else:
                zp = _neg_int32(_to_int32(self.offset))
            channel_axis = block_axis = block_size = None
            if self.granularity != "pertensor":
                channel_axis, block_axis = self._channel_and_block_axis()
            if block_axis is not None:
                axis = block_axis
                block_size = self.block_size[block_axis]
            elif channel_axis is not None:
                axis = channel_axis
                y_scale, zp = y_scale.reshape(-1), zp.reshape(-1)
            else:
                axis = None
                y_scale, zp = np.squeeze(y_scale), np.squeeze(zp)
            ret: Dict[str, Any] = {"output_dtype": self._export_dtype(), "y_scale": y_scale.tolist()}
            if not np.all(zp == 0):
                ret["y_zero_point"] = zp.tolist()
            if axis is not None:
                ret["axis"] = axis
            if block_size is not None:
                ret["block_size"] = block_size
            return ret
        raise _version_error(v)


class GroupedBlockEncoding(AffineEncoding):
    """LPBQ encoding: the effective block scale plus the per-channel float scale and the block
    grouping / decompressed bitwidth that produce it (AIMET's GroupedBlockEncoding)."""

    def __init__(self, scale, offset, qmin: int, qmax: int, symmetry: bool, block_size, block_grouping,
                 decompressed_bw: int, per_channel_scale, per_block_int_scale, zero_point_shift: float = 0.0):
        super().__init__(scale, offset, qmin, qmax, symmetry, block_size, zero_point_shift)
        self.block_grouping = strict_int_tuple(block_grouping, "block_grouping", minimum=-1, maximum=2**63 - 1)
        self.decompressed_bw = strict_int(decompressed_bw, "decompressed_bw", minimum=1, maximum=MAX_ENCODING_BITWIDTH)
        self.per_channel_scale = _f32(per_channel_scale)
        self._per_block_int_scale = _f32(per_block_int_scale)

    @property
    def per_block_int_scale(self) -> np.ndarray:
        """round(scale / per_channel_scale) clamped to [1, 2^(decompressed_bw - bitwidth)] (float32)."""
        return self._per_block_int_scale

    def to_qnn_encoding_dict(self, encoding_version=None, input_shape=None):
        d = super().to_qnn_encoding_dict(encoding_version, input_shape)
        if all(g == 1 for g in self.block_grouping) or encoding_version == "0.6.1":
            return d
        ints = _to_int32(self.per_block_int_scale)
        if encoding_version == "1.0.0":
            d["bw"] = self.decompressed_bw
            d["compressed_bw"] = self.bitwidth
            d["scale"] = self.per_channel_scale.reshape(-1).tolist()
            d["offset"] = [-(2 ** (self.decompressed_bw - 1)) for _ in d["scale"]]
            d["enc_type"] = "LPBQ"
            d["per_block_int_scale"] = ints.reshape(-1).tolist()
            return d
        zp = d.pop("y_zero_point", None)
        if zp is not None and np.any(np.asarray(zp) != 0):
            raise RuntimeError(f"LPBQ only supports symmetric quantization; got non-zero y_zero_point {zp}")
        out_dtype = f"int{self.bitwidth}" if self.signed else f"uint{self.bitwidth}"
        if encoding_version == "2.0.0":
            del d["y_scale"], d["output_dtype"]
            d.update({"per_block_int_scale": ints.tolist(), "per_channel_float_scale": self.per_channel_scale.tolist(),
                      "output_dtype": out_dtype})
        else:
            channel_axis, _ = self._channel_and_block_axis()
            d.update({"y_scale": {"x": ints.tolist(), "x_scale": self.per_channel_scale.reshape(-1).tolist(),
                                  "axis": channel_axis},
                      "output_dtype": out_dtype})
        return d


# ---- reading ---------------------------------------------------------------------------------------
# An encodings dict comes from a file: every field is checked before it is used, and a malformed
# one is a ValueError (a TypeError for a dict that is not a dict) naming the field, never a bare
# KeyError / IndexError, and never unbounded work (2**bw of an absurd bw).

# The widest grid a quantizer holds: qmax - qmin (the number of steps) must fit int64.
MAX_ENCODING_BITWIDTH = 63


class EncodingVersionError(ValueError, AssertionError):
    """An encoding version polyquant does not know: AIMET raises AssertionError here; the class is
    both, so either except clause catches it."""


def _version_error(version) -> EncodingVersionError:
    return EncodingVersionError(f"encoding_version: {version!r} not supported. Expected one of: {VALID_ENCODING_VERSIONS}")


def _field(d: Dict, key: str, where: str):
    if key not in d:
        raise ValueError(f"encodings: {where} has no {key!r} field")
    return d[key]


def _bitwidth_field(value, key: str) -> int:
    try:
        return strict_int(value, f"encodings: {key!r}", minimum=1, maximum=MAX_ENCODING_BITWIDTH)
    except TypeError as e:
        raise ValueError(str(e)) from None


def _bool_field(value, key: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"encodings: {key!r} must be true or false (or 'True' / 'False'), got {value!r}")


def _numbers(value, key: str) -> np.ndarray:
    """A number or a (nested) list of numbers as float32; anything else (None, strings, dicts,
    ragged lists) is a ValueError naming the field."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        a = None
    if a is None or a.dtype.kind not in "iuf":
        raise ValueError(f"encodings: {key!r} must be a number or a list of numbers, got {value!r:.80}")
    with np.errstate(over="ignore"):
        return a.astype(np.float32)


def _grid_of_dtype(name) -> Tuple[int, int]:
    if not isinstance(name, str):
        raise ValueError(f"encodings: 'output_dtype' must be a string int<N> or uint<N>, got {name!r:.80}")
    unsigned, _, bits = name.partition("int")
    if unsigned not in ("", "u") or not (bits.isascii() and bits.isdigit()):
        raise ValueError(f"encodings: 'output_dtype' must be int<N> or uint<N>, got {name!r:.80}")
    if len(bits) > 3 or not 1 <= int(bits) <= MAX_ENCODING_BITWIDTH:
        raise ValueError(f"encodings: 'output_dtype' {name!r:.80} is out of range; "
                         f"N must be in [1, {MAX_ENCODING_BITWIDTH}]")
    b = int(bits)
    return (0, 2**b - 1) if unsigned else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)


def _require_dict(d, version: str) -> Dict:
    if not isinstance(d, dict):
        raise TypeError(f"encoding: a {version} encoding is a dict, got {type(d).__name__}")
    return d


def encoding_from_qnn_dict(d: Union[Dict, List], version: str, shape: Sequence[int]) -> Dict[str, Any]:
    """The quantizer parameters an exported encoding describes: a dict with ``scale`` and
    ``offset`` (float32 arrays of `shape`), ``qmin``, ``qmax``, ``symmetric``, and for LPBQ
    ``per_channel_scale``, ``per_block_int_scale`` and ``decompressed_bw``. `d` is what
    ``to_qnn_encoding_dict(version)`` wrote (a list of dicts for "0.6.1")."""
    shape = tuple(int(s) for s in shape)
    if not isinstance(version, str) or version not in VALID_ENCODING_VERSIONS:
        raise _version_error(version)

    n = int(np.prod(shape, dtype=np.int64))

    def arr(v, key):
        a = _numbers(v, key)
        if a.size == n:
            return a.reshape(shape).copy()
        if a.size == 1:
            return np.full(shape, a.reshape(()), np.float32)
        raise ValueError(f"encodings: {key!r} has {a.size} values, which do not fit the quantizer shape {shape}")

    if version == "0.6.1":
        if not isinstance(d, list) or not d:
            raise TypeError(f"encoding: a 0.6.1 encoding is a non-empty list of dicts, got {d!r:.80}")
        for i, e in enumerate(d):
            if not isinstance(e, dict):
                raise TypeError(f"encoding: entry {i} of a 0.6.1 encoding is not a dict but {type(e).__name__}")

        def column(key):
            values = [_numbers(_field(e, key, f"entry {i}"), key) for i, e in enumerate(d)]
            if any(v.ndim != 0 for v in values):
                raise ValueError(f"encodings: {key!r} of a 0.6.1 entry must be one number")
            return arr(np.array(values, np.float32), key)

        bw = _bitwidth_field(_field(d[0], "bitwidth", "entry 0"), "bitwidth")
        sym = _bool_field(_field(d[0], "is_symmetric", "entry 0"), "is_symmetric")
        qmin, qmax = (-(2 ** (bw - 1)), 2 ** (bw - 1) - 1) if sym else (0, 2**bw - 1)
        return {"scale": column("scale"), "offset": column("offset") - np.float32(qmin),
                "qmin": qmin, "qmax": qmax, "symmetric": sym, "min": column("min"), "max": column("max")}
    d = _require_dict(d, version)
    if version == "1.0.0":
        dtype = d.get("dtype", "INT")
        if dtype != "INT":
            raise ValueError(f"encodings: 'dtype' {dtype!r:.80} is not supported; expected 'INT'")
        enc_type = d.get("enc_type", "PER_TENSOR")
        if enc_type not in ("PER_TENSOR", "PER_CHANNEL", "PER_BLOCK", "LPBQ"):
            raise ValueError(f"encodings: 'enc_type' {enc_type!r:.80} is not one of PER_TENSOR, PER_CHANNEL, "
                             "PER_BLOCK, LPBQ")
        if enc_type == "LPBQ":
            cbw = _bitwidth_field(_field(d, "compressed_bw", "an LPBQ encoding"), "compressed_bw")
            dbw = _bitwidth_field(_field(d, "bw", "an LPBQ encoding"), "bw")
            if dbw < cbw:
                raise ValueError(f"encodings: 'bw' ({dbw}) must be at least 'compressed_bw' ({cbw})")
            ints = arr(_field(d, "per_block_int_scale", "an LPBQ encoding"), "per_block_int_scale")
            pc = _numbers(_field(d, "scale", "an LPBQ encoding"), "scale")
            return {"lpbq": True, "per_block_int_scale": ints, "per_channel_scale": pc, "decompressed_bw": dbw,
                    "qmin": -(2 ** (cbw - 1)), "qmax": 2 ** (cbw - 1) - 1, "symmetric": True}
        bw = _bitwidth_field(_field(d, "bw", "the encoding"), "bw")
        sym = _bool_field(_field(d, "is_sym", "the encoding"), "is_sym")
        off = arr(_field(d, "offset", "the encoding"), "offset")
        qmin, qmax = (-(2 ** (bw - 1)), 2 ** (bw - 1) - 1) if sym else (0, 2**bw - 1)
        if sym:
            off = off + np.float32(2 ** (bw - 1))
        return {"scale": arr(_field(d, "scale", "the encoding"), "scale"), "offset": off, "qmin": qmin, "qmax": qmax,
                "symmetric": sym}
    # 2.0.0 / 2.1.0
    ys = _field(d, "y_scale", "the encoding") if "per_block_int_scale" not in d else d.get("y_scale")
    qmin, qmax = _grid_of_dtype(_field(d, "output_dtype", "the encoding"))
    if "per_block_int_scale" in d or isinstance(ys, dict):
        if "per_block_int_scale" in d:
            ints = arr(d["per_block_int_scale"], "per_block_int_scale")
            pc = _numbers(_field(d, "per_channel_float_scale", "an LPBQ encoding"), "per_channel_float_scale")
        else:
            ints = arr(_field(ys, "x", "'y_scale'"), "y_scale.x")
            pc = _numbers(_field(ys, "x_scale", "'y_scale'"), "y_scale.x_scale")
        return {"lpbq": True, "per_block_int_scale": ints, "per_channel_scale": pc, "qmin": qmin, "qmax": qmax,
                "symmetric": True}
    scale = arr(ys, "y_scale")
    zp = d.get("y_zero_point")
    zp_arr = np.zeros(shape, np.float32) if zp is None else arr(zp, "y_zero_point")
    centroid = math.ceil((qmin + qmax) / 2)
    sym = bool(np.all(zp_arr == centroid)) if zp is not None else qmin < 0
    # symmetric quantizers export the grid's centroid as zero point (0 on a signed grid)
    offset = np.full(shape, -round((qmin + qmax) / 2), np.float32) if sym else (-zp_arr).astype(np.float32)
    return {"scale": scale, "offset": offset, "qmin": qmin, "qmax": qmax, "symmetric": sym}
