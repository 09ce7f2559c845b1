"""Golden data for AMD Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (CPU).

Runs Quark's own CPU custom-op library (built by amd-quark's JIT path,
``quark.onnx.operators.custom_ops.get_library_path("CPU")``) inside onnxruntime, one
single-node model per case, and writes

    tests/data/quark/index.json   versions, library hash, one record per case
    tests/data/quark/arrays.npz   every input and output array (raw bit patterns)

Not run in CI (it needs torch + amd-quark); docs/golden-data.md#quark gives the environment
and the exact commands (``python -m tools.golden.quark`` from the repository root).  Deterministic: fixed seeds, fixed zip timestamps, so
a rerun with the same versions gives byte-identical files.

After generating, the script checks every recorded output against a small numpy model of
the kernel's behaviour (``model_*`` below) and prints how many cases it reproduces; this is
the basis of the "observed behaviour" list in docs/golden-data.md, not part of the data.
"""

from __future__ import annotations

if not __package__:  # run as a script, tools/golden would shadow the reference's own packages
    raise SystemExit("run from the repository root: python -m tools.golden.quark")

import argparse
import ctypes
import hashlib
import importlib.metadata as md
import json
import os
import platform
import subprocess
from pathlib import Path

# torch must be imported before Quark's library is loaded into onnxruntime (the .so links
# against libtorch / libc10).
import torch  # noqa: F401  (import order matters)
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper

from .common import cpu_model, data_dir, seed_of, write_index, write_npz

DEFAULT_OUT = data_dir("quark")

DOMAIN = "com.amd.quark"
DOMAIN_DEPRECATED = "com.vai.quantize"
Q = "ExtendedQuantizeLinear"
DQ = "ExtendedDequantizeLinear"
OPSET_DEFAULT = 17
OPSET_CUSTOM = 1

# ---------------------------------------------------------------------------------------
# types

# name -> (onnx enum, numpy dtype used for storage, lowest, highest)
INT_TYPES = {
    "int8": (TP.INT8, np.int8, -(2**7), 2**7 - 1),
    "uint8": (TP.UINT8, np.uint8, 0, 2**8 - 1),
    "int16": (TP.INT16, np.int16, -(2**15), 2**15 - 1),
    "uint16": (TP.UINT16, np.uint16, 0, 2**16 - 1),
    "int32": (TP.INT32, np.int32, -(2**31), 2**31 - 1),
    "uint32": (TP.UINT32, np.uint32, 0, 2**32 - 1),
}
FLOAT_TYPES = {
    "float16": (TP.FLOAT16, np.float16),
    "bfloat16": (TP.BFLOAT16, np.uint16),  # stored as its uint16 bit pattern
}
OTHER_TYPES = {
    "float32": (TP.FLOAT, np.float32),
    "float64": (TP.DOUBLE, np.float64),
    "int64": (TP.INT64, np.int64),
}
ALL_T = list(INT_TYPES) + list(FLOAT_TYPES)


def onnx_enum(name: str) -> int:
    for table in (INT_TYPES, FLOAT_TYPES, OTHER_TYPES):
        if name in table:
            return table[name][0]
    raise KeyError(name)


def storage_dtype(name: str):
    for table in (INT_TYPES, FLOAT_TYPES, OTHER_TYPES):
        if name in table:
            return np.dtype(table[name][1])
    raise KeyError(name)


ORT_TYPE_NAMES = {
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16",
    "tensor(uint16)": "uint16", "tensor(int32)": "int32", "tensor(uint32)": "uint32",
    "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16", "tensor(float)": "float32",
    "tensor(double)": "float64", "tensor(int64)": "int64",
}

# ---------------------------------------------------------------------------------------
# value helpers (everything built from bit patterns where it matters)


def f32(values) -> np.ndarray:
    """float32 array from Python numbers (rounded once from float64)."""
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype(np.float32)


def f32_bits(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def bf16_from_f32(values) -> np.ndarray:
    """bfloat16 bit patterns (uint16), round to nearest even, from float32 values (no NaNs)."""
    u = bits_of(f32(values)).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def nextup(a):
    return np.nextafter(a, np.float32(np.inf), dtype=np.float32)


def nextdown(a):
    return np.nextafter(a, np.float32(-np.inf), dtype=np.float32)


def cycle(values, n):
    return [values[i % len(values)] for i in range(n)]


# float32 specials and edge values for Q inputs (bit patterns, so NaN payloads are exact)
Q_SPECIAL_BITS = [
    0x00000000, 0x80000000,                      # +0, -0
    0x7F800000, 0xFF800000,                      # +inf, -inf
    0x7FC00000, 0xFFC00000,                      # quiet NaN, negative quiet NaN
    0x7FC00001, 0xFFC00001, 0x7FFFFFFF, 0xFFFFFFFF,  # NaN with payloads
    0x7F800001, 0xFF800001, 0x7FA00000,          # signalling NaNs
    0x00000001, 0x80000001, 0x00400000, 0x007FFFFF, 0x807FFFFF,  # subnormals
    0x00800000, 0x80800000,                      # smallest normals
    0x7F7FFFFF, 0xFF7FFFFF,                      # +-FLT_MAX
]
Q_SPECIAL_VALUES = [
    1e30, -1e30, 3.4e38, -3.4e38, 1e19, -1e19, 1e20,
    0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 0.1, -0.1,
    127.0, 127.5, 128.0, -128.5, -129.0, 255.5, 256.0, 32767.5, -32768.5, 65535.5, 65536.0,
]


def q_special_inputs() -> np.ndarray:
    edges = []
    for p in (31, 32, 63, 64):
        for sgn in (1.0, -1.0):
            v = np.float32(sgn * 2.0**p)
            edges += [nextdown(v), v, nextup(v)]
    return np.concatenate([f32_bits(Q_SPECIAL_BITS), f32(Q_SPECIAL_VALUES), np.array(edges, np.float32)])


# scales: ordinary, tiny, subnormal, huge, 1.0 and degenerate ones
SCALES_ORDINARY = [0.1, 1 / 255, 0.0123, 2.0**-7, 1.0]
SCALE_ROWS_BITS = (
    list(bits_of(f32([0.1, 1.0, 1 / 255, 0.0123, 2.0**-7, 3.0, 1e-30, 1e-40, 1e30, 3.4e38, 0.0, -0.5])))
    + [0x00000001, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC00001]
)
# (1e-40 and 0x00000001 are subnormal; 0x80000000 is -0; the last three are NaNs)

# zero points
ZP_SCALARS = {
    "int8": [0, 3, -5, -128, 127],
    "uint8": [0, 3, 128, 254, 255],
    "int16": [0, 3, -5, -(2**15), 2**15 - 1],
    "uint16": [0, 3, 2**15, 2**16 - 2, 2**16 - 1],
    "int32": [0, 3, -5, -(2**31), 2**31 - 1],
    "uint32": [0, 3, 2**31, 2**32 - 2, 2**32 - 1],
}
ZP_MIXED = {
    "int8": [0, 3, -5, -128, 127, 1, -1, 64],
    "uint8": [0, 3, 128, 255, 1, 254, 77],
    "int16": [0, 3, -5, -(2**15), 2**15 - 1, -1, 1000],
    "uint16": [0, 3, 2**15, 2**16 - 1, 1, 40000],
    "int32": [0, 3, -5, -(2**31), 2**31 - 1, -1, 2**24 + 1],
    "uint32": [0, 3, 2**31, 2**32 - 1, 1, 2**24 + 1],
}
# float zero points as bit patterns
FP16_ZP_ORDINARY = [0x0000, 0x3E00, 0xC200]  # 0, 1.5, -3
BF16_ZP_ORDINARY = [0x0000, 0x3FC0, 0xC040]  # 0, 1.5, -3
FP16_ZP_SPECIAL = [0x8000, 0x7E00, 0xFE00, 0x7C00, 0xFC00, 0x7BFF, 0x0001, 0x7E01]
BF16_ZP_SPECIAL = [0x8000, 0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x7F7F, 0x0001, 0x7F81]

# DQ x specials for the float types (bit patterns)
FP16_X_SPECIAL = [
    0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E01, 0xFE01, 0x7FFF, 0xFFFF,
    0x7C01, 0xFC01, 0x7D00,  # signalling NaNs
    0x0001, 0x8001, 0x0200, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x7BFF, 0xFBFF,
    0x3C00, 0xBC00, 0x3E00, 0xC200, 0x3555, 0x5640,
]
BF16_X_SPECIAL = [
    0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7FC1, 0xFFC1, 0x7FFF, 0xFFFF,
    0x7F81, 0xFF81, 0x7FA0,  # signalling NaNs
    0x0001, 0x8001, 0x0040, 0x007F, 0x807F, 0x0080, 0x8080, 0x7F7F, 0xFF7F,
    0x3F80, 0xBF80, 0x3FC0, 0xC040, 0x3DCD, 0x4F00, 0x5F00, 0xCF00,
]


def zp_array(T: str, values, shape=None) -> np.ndarray:
    dt = storage_dtype(T)
    if T in FLOAT_TYPES:
        a = np.asarray(values, dtype=np.uint16).view(dt) if T == "float16" else np.asarray(values, np.uint16)
    else:
        a = np.asarray(values, dtype=np.int64).astype(dt)
    return a.reshape(shape) if shape is not None else a


def random_of_type(T: str, rng, shape) -> np.ndarray:
    """Random values of T across its whole range (float types: random bit patterns)."""
    if T in INT_TYPES:
        _, dt, lo, hi = INT_TYPES[T]
        return rng.integers(lo, hi, size=shape, dtype=np.int64, endpoint=True).astype(dt)
    bits = rng.integers(0, 2**16, size=shape, dtype=np.int64).astype(np.uint16)
    return bits.view(np.float16) if T == "float16" else bits


def int_extremes(T: str) -> list[int]:
    _, _, lo, hi = INT_TYPES[T]
    vals = [lo, lo + 1, lo + 2, -2, -1, 0, 1, 2, hi - 2, hi - 1, hi]
    out = []
    for v in vals:
        if lo <= v <= hi and v not in out:
            out.append(v)
    return out


# ---------------------------------------------------------------------------------------
# cases

CASES: list[dict] = []


def add(cid, op, inputs, *, group, note, out_dtype=None, axis="absent", domain=DOMAIN, op_type=None):
    """inputs: list of (name, dtype name, array).  axis: int, 'absent', or ('float', value)."""
    assert not any(c["id"] == cid for c in CASES), cid
    if out_dtype is None:
        out_dtype = inputs[2][1] if op == Q else "float32"
    CASES.append(dict(id=cid, op=op, op_type=op_type or op, domain=domain, group=group, note=note,
                      axis=axis, inputs=inputs, out_dtype=out_dtype))


def q_inputs(x, s, zp, T):
    return [("x", "float32", x), ("y_scale", "float32", s), ("y_zero_point", T, zp)]


def dq_inputs(x, s, zp, T):
    return [("x", T, x), ("x_scale", "float32", s), ("x_zero_point", T, zp)]


RANDOM_SHAPES = [(), (17,), (4, 6), (2, 3, 5), (2, 3, 4, 5)]
PARAM_SHAPES = [(), (1,)]


def build_random_q():
    for T in ALL_T:
        if T in INT_TYPES:
            _, _, lo, hi = INT_TYPES[T]
            zps = ZP_SCALARS[T]
            mags = [1.0, 30.0, 0.6 * (hi - lo)]
        else:
            zps = FP16_ZP_ORDINARY if T == "float16" else BF16_ZP_ORDINARY
            mags = [1.0, 1e3, 1e5] if T == "float16" else [1.0, 1e3, 1e30]
        n = 0
        for zp in zps:
            for mag in mags:
                cid = f"q.{T}.random.{n:02d}"
                rng = np.random.default_rng(seed_of(cid))
                shape = RANDOM_SHAPES[n % len(RANDOM_SHAPES)]
                s = f32(SCALES_ORDINARY[n % len(SCALES_ORDINARY)]).reshape(PARAM_SHAPES[n % 2])
                x = f32(rng.standard_normal(shape) * float(s.reshape(-1)[0]) * mag)
                z = zp_array(T, [zp], PARAM_SHAPES[(n // 2) % 2])
                add(cid, Q, q_inputs(x, s, z, T), group="random",
                    note=f"normal * scale * {mag:g}, per-tensor, scale shape {s.shape}, zp shape {z.shape}",
                    axis=[1, "absent"][n % 2])
                n += 1


def build_random_dq():
    for T in ALL_T:
        zps = ZP_SCALARS[T] if T in INT_TYPES else (FP16_ZP_ORDINARY if T == "float16" else BF16_ZP_ORDINARY)
        n = 0
        for zp in zps:
            for k in range(3):
                cid = f"dq.{T}.random.{n:02d}"
                rng = np.random.default_rng(seed_of(cid))
                shape = RANDOM_SHAPES[n % len(RANDOM_SHAPES)]
                x = random_of_type(T, rng, shape)
                s = f32(SCALES_ORDINARY[n % len(SCALES_ORDINARY)]).reshape(PARAM_SHAPES[n % 2])
                z = zp_array(T, [zp], PARAM_SHAPES[(n // 2) % 2])
                add(cid, DQ, dq_inputs(x, s, z, T), group="random",
                    note=f"uniform over all values of {T}, per-tensor, scale shape {s.shape}, zp shape {z.shape}",
                    axis=[1, "absent"][n % 2])
                n += 1


def build_ties_q():
    # integer outputs: x = (k + 0.5) * s and its float32 neighbours
    for T in INT_TYPES:
        _, _, lo, hi = INT_TYPES[T]
        for n, (sv, zp) in enumerate([(2.0**-7, 0), (1.0, ZP_SCALARS[T][1]), (3.0, 0), (0.1, ZP_SCALARS[T][2]),
                                      (1 / 255, 0), (1.0, ZP_SCALARS[T][3]), (2.0**-7, ZP_SCALARS[T][4])]):
            ks = list(range(-6, 6))
            for edge in (lo, hi):
                ks += [edge - zp + d for d in (-2, -1, 0, 1)]
            ks += [2**22 - 1, -(2**22)]
            ks = sorted({k for k in ks if abs(k + 0.5) < 2**23})
            s = np.float32(sv)
            t = f32([(k + 0.5) * float(s) for k in ks])
            x = np.concatenate([t, nextdown(t), nextup(t)])
            add(f"q.{T}.ties.{n:02d}", Q, q_inputs(x, f32(sv), zp_array(T, [zp], ()), T), group="ties",
                note=f"x = fl((k + 0.5) * s) for k near 0 and near the clamp edges, then x-1ulp, x+1ulp; "
                     f"s = {float(s)!r}, zp = {zp}")
    # float16: midpoints between neighbouring float16 values (scale and zp should not matter)
    rng = np.random.default_rng(seed_of("q.float16.ties"))
    h = np.concatenate([np.array([0x0000, 0x0001, 0x03FE, 0x03FF, 0x0400, 0x3BFF, 0x3C00, 0x7BFE, 0x7BFF],
                                 np.uint16), rng.integers(0, 0x7BFF, 40).astype(np.uint16)])
    lo16 = h.view(np.float16).astype(np.float32)
    hi16 = (h + 1).view(np.float16).astype(np.float32)
    hi16 = np.where(h == 0x7BFF, np.float32(65536.0), hi16)
    mid = ((lo16.astype(np.float64) + hi16) / 2).astype(np.float32)
    mid = np.concatenate([mid, -mid])
    x16 = np.concatenate([mid, nextdown(mid), nextup(mid)])
    for n, (sv, zp) in enumerate([(1.0, 0x0000), (0.1, 0x3E00), (2.0**-7, 0xC200)]):
        add(f"q.float16.ties.{n:02d}", Q, q_inputs(x16, f32(sv), zp_array("float16", [zp], ()), "float16"),
            group="ties", note=f"midpoints between adjacent float16 values (65520 included) and +-1 ulp; "
                              f"s = {sv!r}, zp bits 0x{zp:04X}")
    # bfloat16: float32 with low half 0x8000 (exact tie), 0x7FFF and 0x8001
    rng = np.random.default_rng(seed_of("q.bfloat16.ties"))
    hi_bits = np.concatenate([np.array([0x0000, 0x0001, 0x007F, 0x0080, 0x3F80, 0x3F81, 0x7F7E, 0x7F7F,
                                        0x8000, 0x8001, 0xBF80, 0xFF7F], np.uint32),
                              rng.integers(0, 0x7F80, 30).astype(np.uint32)])
    xb = np.concatenate([f32_bits((hi_bits << 16) | low) for low in (0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF)])
    xb = xb[np.isfinite(xb)]
    for n, (sv, zp) in enumerate([(1.0, 0x0000), (2.0**-7, 0x0000), (1.0, 0x3FC0), (0.5, 0xC040), (0.1, 0x0000)]):
        add(f"q.bfloat16.ties.{n:02d}", Q, q_inputs(xb, f32(sv), zp_array("bfloat16", [zp], ()), "bfloat16"),
            group="ties", note=f"float32 whose low 16 bits are 0x8000/0x7FFF/0x8001/0x0000/0xFFFF; "
                              f"s = {sv!r}, zp bits 0x{zp:04X}")


def build_edges_q():
    """x/s just inside / outside the representable range after the zero point."""
    ds = [-2.0, -1.0, -0.51, -0.5, -0.49, 0.0, 0.49, 0.5, 0.51, 1.0, 1.5, 2.0]
    for T in INT_TYPES:
        _, _, lo, hi = INT_TYPES[T]
        n = 0
        for zp in (0, ZP_SCALARS[T][2], lo, hi):
            for sv in (1.0, 0.1):
                s = np.float32(sv)
                targets = [(b - zp) + d for b in (lo, hi) for d in ds]
                x = f32([t * float(s) for t in targets])
                x = np.concatenate([x, nextdown(x), nextup(x)])
                add(f"q.{T}.edges.{n:02d}", Q, q_inputs(x, f32(sv), zp_array(T, [zp], (1,)), T), group="edges",
                    note=f"x = (edge - zp + d) * s for edge in (lowest, highest), d in {ds}, and +-1 ulp; "
                         f"s = {sv!r}, zp = {zp}")
                n += 1
    # float16: around the +-65504 clamp and the float16 range
    x = f32([65504, 65505, 65519, 65519.996, 65520, 65536, 1e5, 1e30, 6.1e-5, 6e-8, 5.96e-8, 2.98e-8, 2.9e-8])
    x = np.concatenate([x, -x, nextdown(x), nextup(x)])
    for n, (sv, zp) in enumerate([(1.0, 0x0000), (2.0**-10, 0x3E00), (1e6, 0x7BFF)]):
        add(f"q.float16.edges.{n:02d}", Q, q_inputs(x, f32(sv), zp_array("float16", [zp], (1,)), "float16"),
            group="edges", note=f"around the +-65504 clamp and float16 subnormals; s = {sv!r}, zp bits 0x{zp:04X}")
    # bfloat16: around FLT_MAX / the bfloat16 maximum and overflow to inf through the scale
    x = np.concatenate([f32_bits([0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0x7F7E8000, 0x7F7EFFFF,
                                  0x00008000, 0x00018000, 0x0000FFFF, 0x00010000]),
                        f32([1e38, 3e38, 1.0, 3.0, 1e-38])])
    x = np.concatenate([x, -x])
    for n, (sv, zp) in enumerate([(1.0, 0x0000), (0.5, 0x0000), (1.0, 0x7F7F), (2.0, 0xFF7F), (1e-30, 0x3FC0)]):
        add(f"q.bfloat16.edges.{n:02d}", Q, q_inputs(x, f32(sv), zp_array("bfloat16", [zp], (1,)), "bfloat16"),
            group="edges", note=f"around the bfloat16 maximum / overflow; s = {sv!r}, zp bits 0x{zp:04X}")


def build_specials_q():
    xs = q_special_inputs()
    scales = f32_bits(SCALE_ROWS_BITS)
    S = scales.size
    X = np.tile(xs, (S, 1))
    for T in ALL_T:
        if T in INT_TYPES:
            _, _, lo, hi = INT_TYPES[T]
            zp_rows = {
                "zero": [0] * S,
                "mixed": cycle(ZP_MIXED[T], S),
                "lowest": [lo] * S,
                "highest": [hi] * S,
            }
            if T.startswith("int"):
                zp_rows["minus_one"] = [-1] * S
        else:
            ords = FP16_ZP_ORDINARY if T == "float16" else BF16_ZP_ORDINARY
            spec = FP16_ZP_SPECIAL if T == "float16" else BF16_ZP_SPECIAL
            zp_rows = {"zero": [0] * S, "mixed": cycle(ords[1:] + ords[:1], S), "special": cycle(spec, S)}
        for name, zps in zp_rows.items():
            add(f"q.{T}.specials.{name}", Q, q_inputs(X, scales, zp_array(T, zps), T), group="specials",
                axis=0, note="rows: one scale each (ordinary, tiny, subnormal, huge, 0, -0.5, -0, +-inf, NaNs); "
                             f"columns: float32 specials and power-of-two edges; per-axis (axis 0); zp {name}")
            add(f"q.{T}.specials.{name}.t", Q, q_inputs(np.require(X.T, requirements="C"), scales,
                                                        zp_array(T, zps), T), group="specials",
                axis=-1, note="transpose of the case without '.t': per-axis on the last axis, so every "
                              "(scale, zp) block is one element long (the kernel's scalar loop)")
        # the same specials per-tensor with a few scales
        for n, (sv, zi) in enumerate([(0.1, 0), (1.0, 1), (0.0, 0), (float("nan"), 0)]):
            if T in INT_TYPES:
                zp = [0, ZP_SCALARS[T][2]][zi]
            else:
                zp = (FP16_ZP_ORDINARY if T == "float16" else BF16_ZP_ORDINARY)[zi]
            add(f"q.{T}.specials.pt{n}", Q, q_inputs(xs, f32(sv), zp_array(T, [zp], ()), T), group="specials",
                note=f"float32 specials per-tensor; s = {sv!r}, zp {'bits 0x%04X' % zp if T in FLOAT_TYPES else zp}")


def build_specials_dq():
    scales = f32_bits(SCALE_ROWS_BITS)
    S = scales.size
    for T in ALL_T:
        rng = np.random.default_rng(seed_of(f"dq.{T}.specials"))
        if T in INT_TYPES:
            _, dt, lo, hi = INT_TYPES[T]
            xs = np.concatenate([np.array(int_extremes(T), np.int64).astype(dt), random_of_type(T, rng, 12)])
            zp_rows = {"zero": [0] * S, "mixed": cycle(ZP_MIXED[T], S), "lowest": [lo] * S, "highest": [hi] * S}
        else:
            spec = FP16_X_SPECIAL if T == "float16" else BF16_X_SPECIAL
            xs = np.concatenate([zp_array(T, spec), random_of_type(T, rng, 12)])
            ords = FP16_ZP_ORDINARY if T == "float16" else BF16_ZP_ORDINARY
            zspec = FP16_ZP_SPECIAL if T == "float16" else BF16_ZP_SPECIAL
            zp_rows = {"zero": [0] * S, "mixed": cycle(ords[1:] + ords[:1], S), "special": cycle(zspec, S)}
        X = np.tile(xs, (S, 1))
        for name, zps in zp_rows.items():
            add(f"dq.{T}.specials.{name}", DQ, dq_inputs(X, scales, zp_array(T, zps), T), group="specials",
                axis=0, note="rows: one scale each (ordinary, tiny, subnormal, huge, 0, -0.5, -0, +-inf, NaNs); "
                             f"columns: extremes/specials of {T} + random; per-axis (axis 0); zp {name}")
            add(f"dq.{T}.specials.{name}.t", DQ, dq_inputs(np.require(X.T, requirements="C"), scales,
                                                           zp_array(T, zps), T), group="specials",
                axis=-1, note="transpose of the case without '.t': per-axis on the last axis, so every "
                              "(scale, zp) block is one element long (the kernel's scalar loop)")
        for n, sv in enumerate([0.1, 1.0, float("inf"), float("nan")]):
            add(f"dq.{T}.specials.pt{n}", DQ, dq_inputs(xs, f32(sv), zp_array(T, [0], ()), T), group="specials",
                note=f"extremes/specials per-tensor; s = {sv!r}, zp 0")


def build_rounding_dq():
    """int32/uint32: x - zp beyond 2^24 is rounded when converted to float32."""
    for T in ("int32", "uint32", "int16"):
        _, dt, lo, hi = INT_TYPES[T]
        n = 0
        for zp in ([0, -(2**31), 2**31 - 1, 5] if T == "int32" else [0, 2**31, 2**32 - 1, 5] if T == "uint32"
                   else [0, -(2**15), 2**15 - 1]):
            base = [2**24, 2**25, 2**26, 2**30, 2**31, 2**32 - 2**8]
            diffs = sorted({d for b in base for d in (b - 1, b, b + 1, b + 2, b + 3, b + 5)} |
                           {-d for b in base for d in (b - 1, b + 1, b + 3)} | {hi - lo, lo - hi, 0, 1, -1})
            xv = [zp + d for d in diffs if lo <= zp + d <= hi]
            x = np.array(xv, np.int64).astype(dt)
            for sv in (1.0, 0.5, 0.1):
                add(f"dq.{T}.rounding.{n:02d}", DQ, dq_inputs(x, f32(sv), zp_array(T, [zp], ()), T),
                    group="rounding", note=f"x - zp near 2^24..2^32 (float32 rounding of the difference); "
                                           f"s = {sv!r}, zp = {zp}")
                n += 1


def build_exhaustive_dq():
    allbits = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    add("dq.float16.all_values.00", DQ, dq_inputs(allbits.view(np.float16), f32(1.0), zp_array("float16", [0], ()),
                                                  "float16"), group="all_values",
        note="all 65536 float16 bit patterns, s = 1, zp = 0")
    add("dq.float16.all_values.01", DQ, dq_inputs(allbits.view(np.float16), f32(0.1),
                                                  zp_array("float16", [0x3E00], ()), "float16"),
        group="all_values", note="all 65536 float16 bit patterns, s = 0.1, zp = 1.5 (both ignored?)")
    add("dq.bfloat16.all_values.00", DQ, dq_inputs(allbits, f32(1.0), zp_array("bfloat16", [0], ()), "bfloat16"),
        group="all_values", note="all 65536 bfloat16 bit patterns, s = 1, zp = 0")
    add("dq.bfloat16.all_values.01", DQ, dq_inputs(allbits, f32(0.1), zp_array("bfloat16", [0x3FC0], ()),
                                                   "bfloat16"),
        group="all_values", note="all 65536 bfloat16 bit patterns, s = 0.1, zp = 1.5")
    add("dq.uint8.all_values.00", DQ, dq_inputs(np.arange(256, dtype=np.uint8), f32(0.0123),
                                                zp_array("uint8", [128], ()), "uint8"),
        group="all_values", note="all 256 uint8 values, s = 0.0123, zp = 128")
    add("dq.int8.all_values.00", DQ, dq_inputs(np.arange(-128, 128, dtype=np.int64).astype(np.int8), f32(1 / 255),
                                               zp_array("int8", [-5], ()), "int8"),
        group="all_values", note="all 256 int8 values, s = 1/255, zp = -5")


def per_axis_params(T, C, seed_name):
    rng = np.random.default_rng(seed_of(seed_name))
    base = [0.1, 1 / 255, 0.0123, 2.0**-7, 1.0, 0.5, 3.0, 0.037]
    s = f32(cycle(base, C)) * f32(rng.uniform(0.5, 2.0, C))
    if T in INT_TYPES:
        zp = zp_array(T, cycle(ZP_MIXED[T], C))
    else:
        zp = zp_array(T, cycle((FP16_ZP_ORDINARY if T == "float16" else BF16_ZP_ORDINARY) + [0x3C00 if T == "float16"
                                                                                              else 0x3F80], C))
    return s.astype(np.float32), zp


def x_for(T, op, rng, shape, s_full):
    if op == Q:
        return f32(rng.standard_normal(shape) * s_full * 40.0)
    return random_of_type(T, rng, shape)


def add_per_axis(T, op, shape, axis, C, group, note_extra=""):
    axis_str = "absent" if axis == "absent" else str(axis)
    shape_str = "x".join(map(str, shape)) or "scalar"
    cid = f"{'q' if op == Q else 'dq'}.{T}.{group}.{shape_str}.axis_{axis_str}.c{C}"
    rng = np.random.default_rng(seed_of(cid))
    s, zp = per_axis_params(T, C, cid + ".params")
    # build x with the scale broadcast along the (intended) axis, when it fits
    eff = 0 if axis == "absent" else axis
    s_full = 0.05
    if len(shape) and -len(shape) <= eff < len(shape) and shape[eff] == C:
        bshape = [1] * len(shape)
        bshape[eff] = C
        s_full = s.reshape(bshape).astype(np.float64)
    x = x_for(T, op, rng, shape, s_full)
    inputs = q_inputs(x, s, zp, T) if op == Q else dq_inputs(x, s, zp, T)
    add(cid, op, inputs, group=group, axis=axis,
        note=f"per-axis: x shape {shape}, scale/zp length {C}, axis attribute {axis_str}{note_extra}")


def build_granularity():
    full = ("int8", "uint16", "float16", "bfloat16")
    for op in (Q, DQ):
        for T in ALL_T:
            if T in full:
                specs = [
                    ((7,), 0, 7), ((7,), -1, 7), ((7,), "absent", 7), ((7,), 1, 7), ((7,), -2, 7),
                    ((3, 4), 0, 3), ((3, 4), 1, 4), ((3, 4), -1, 4), ((3, 4), -2, 3),
                    ((3, 4), "absent", 3), ((3, 4), "absent", 4), ((4, 4), "absent", 4), ((3, 4), 2, 4),
                    ((3, 4), -3, 3), ((3, 4), 0, 4),
                    ((2, 3, 4), 0, 2), ((2, 3, 4), 1, 3), ((2, 3, 4), 2, 4), ((2, 3, 4), -1, 4),
                    ((2, 3, 4), -2, 3), ((2, 3, 4), "absent", 2),
                    ((2, 3, 4, 5), 0, 2), ((2, 3, 4, 5), 1, 3), ((2, 3, 4, 5), 2, 4), ((2, 3, 4, 5), 3, 5),
                    ((2, 3, 4, 5), -1, 5), ((2, 3, 4, 5), -2, 4), ((2, 3, 4, 5), "absent", 2),
                    ((), 0, 3), ((), "absent", 3),
                ]
            else:
                specs = [((7,), 0, 7), ((3, 4), 1, 4), ((2, 3, 4), -1, 4), ((2, 3, 4, 5), -2, 4),
                         ((4, 4), "absent", 4), ((3, 4), "absent", 4)]
            for shape, axis, C in specs:
                add_per_axis(T, op, shape, axis, C, "per_axis")


def build_large():
    shape = (3, 5, 7, 9)
    for op in (Q, DQ):
        for T in ALL_T:
            for axis in range(4):
                add_per_axis(T, op, shape, axis, shape[axis], "large")


def build_interface():
    """Interface questions: input count, dtypes, shapes, axis attribute, aliases.  Outcome recorded as is."""
    x = f32([1.0, 2.0, 3.0, -4.0, 0.26, -0.74])
    s = f32(0.5)
    z8 = zp_array("uint8", [3], ())

    def raw(cid, op, inputs, note, out_dtype=None, axis="absent", **kw):
        add(cid, op, inputs, group="interface", note=note, out_dtype=out_dtype, axis=axis, **kw)

    raw("q.interface.no_zero_point.uint8", Q, [("x", "float32", x), ("y_scale", "float32", s)],
        "2 inputs (zero point absent), output declared uint8", out_dtype="uint8")
    raw("q.interface.no_zero_point.int8", Q, [("x", "float32", x), ("y_scale", "float32", s)],
        "2 inputs (zero point absent), output declared int8", out_dtype="int8")
    raw("dq.interface.no_zero_point.uint8", DQ, [("x", "uint8", np.array([0, 7, 255], np.uint8)),
                                                 ("x_scale", "float32", s)], "2 inputs (zero point absent)")
    raw("q.interface.empty_name_zero_point", Q, [("x", "float32", x), ("y_scale", "float32", s),
                                                 ("", "uint8", None)],
        "zero point given as an empty input name (omitted optional input)", out_dtype="uint8")
    raw("q.interface.four_inputs", Q, q_inputs(x, s, z8, "uint8") + [("extra", "uint8", z8)], "4 inputs")
    raw("q.interface.scale_float16", Q, [("x", "float32", x), ("y_scale", "float16", np.array(0.5, np.float16)),
                                         ("y_zero_point", "uint8", z8)], "scale of dtype float16")
    raw("q.interface.scale_float64", Q, [("x", "float32", x), ("y_scale", "float64", np.array(0.5, np.float64)),
                                         ("y_zero_point", "uint8", z8)], "scale of dtype float64")
    raw("dq.interface.scale_float16", DQ, [("x", "uint8", np.array([0, 7, 255], np.uint8)),
                                           ("x_scale", "float16", np.array(0.5, np.float16)),
                                           ("x_zero_point", "uint8", z8)], "scale of dtype float16")
    raw("q.interface.x_float16", Q, [("x", "float16", x.astype(np.float16)), ("y_scale", "float32", s),
                                     ("y_zero_point", "uint8", z8)], "x of dtype float16")
    raw("q.interface.x_float64", Q, [("x", "float64", x.astype(np.float64)), ("y_scale", "float32", s),
                                     ("y_zero_point", "uint8", z8)], "x of dtype float64")
    for T in ("int64", "float32", "float64"):
        raw(f"q.interface.zero_point_{T}", Q, q_inputs(x, s, np.zeros((), storage_dtype(T)), T),
            f"zero point (and output) of unsupported dtype {T}")
        raw(f"dq.interface.zero_point_{T}", DQ, dq_inputs(np.array([1, -2, 3], storage_dtype(T)), s,
                                                          np.zeros((), storage_dtype(T)), T),
            f"x and zero point of unsupported dtype {T}")
    raw("q.interface.output_type_mismatch", Q, q_inputs(x, s, z8, "uint8"),
        "zero point uint8 but graph output declared int8", out_dtype="int8")
    raw("dq.interface.x_uint8_zp_int8", DQ, [("x", "uint8", np.array([0, 1, 127, 128, 200, 255], np.uint8)),
                                             ("x_scale", "float32", s), ("x_zero_point", "int8", zp_array("int8", [-1], ()))],
        "x uint8 with zero point int8 (types differ; both inputs are dynamically typed)")
    raw("dq.interface.x_int8_zp_uint8", DQ, [("x", "int8", np.array([0, 1, 127, -128, -56, -1], np.int8)),
                                             ("x_scale", "float32", s), ("x_zero_point", "uint8", zp_array("uint8", [3], ()))],
        "x int8 with zero point uint8 (types differ)")
    raw("dq.interface.x_float16_zp_bfloat16", DQ, [("x", "float16", f32([1, -2, 65504, np.nan]).astype(np.float16)),
                                                   ("x_scale", "float32", s),
                                                   ("x_zero_point", "bfloat16", zp_array("bfloat16", [0x3FC0], ()))],
        "x float16 with zero point bfloat16 (types differ, same width)")
    raw("dq.interface.x_bfloat16_zp_float16", DQ, [("x", "bfloat16", zp_array("bfloat16", [0x3F80, 0xC000, 0x7FC0])),
                                                   ("x_scale", "float32", s),
                                                   ("x_zero_point", "float16", zp_array("float16", [0x3E00], ()))],
        "x bfloat16 with zero point float16 (types differ, same width)")
    # shapes
    for op in (Q, DQ):
        p = "q" if op == Q else "dq"
        T = "int8"
        mk = (lambda xx, ss, zz: q_inputs(xx, ss, zz, T)) if op == Q else (lambda xx, ss, zz: dq_inputs(xx, ss, zz, T))
        xv = (lambda shp: f32(np.arange(int(np.prod(shp))).reshape(shp) * 0.3 - 1)) if op == Q else \
            (lambda shp: (np.arange(int(np.prod(shp))).reshape(shp) * 7 - 40).astype(np.int8))
        z1 = zp_array(T, [2], ())
        raw(f"{p}.interface.empty_x_1d", op, mk(xv((0,)), s, z1), "x of shape (0,), per-tensor")
        raw(f"{p}.interface.empty_x_3d", op, mk(xv((2, 0, 3)), s, z1), "x of shape (2, 0, 3), per-tensor")
        raw(f"{p}.interface.empty_x_per_axis", op, mk(xv((0, 3)), f32([0.1, 0.2, 0.3]), zp_array(T, [1, 2, 3])),
            "x of shape (0, 3), per-axis on axis 1", axis=1)
        raw(f"{p}.interface.empty_axis", op, mk(xv((3, 0)), f32([]), zp_array(T, [])),
            "x of shape (3, 0), scale and zp of shape (0,), axis 1", axis=1)
        raw(f"{p}.interface.empty_scale", op, mk(xv((4,)), f32([]), zp_array(T, [])),
            "scale and zp of shape (0,), x of shape (4,)", axis=0)
        raw(f"{p}.interface.scale_1x1", op, mk(xv((2, 3)), f32([[0.5]]), z1), "scale of shape (1, 1)", axis=1)
        raw(f"{p}.interface.scale_3x1", op, mk(xv((3, 2)), f32([[0.5], [0.25], [1.0]]), zp_array(T, [0, 1, 2])),
            "scale of shape (3, 1), zp (3,)", axis=0)
        raw(f"{p}.interface.zp_1x1", op, mk(xv((2, 3)), s, zp_array(T, [[2]])), "scalar scale, zp of shape (1, 1)")
        raw(f"{p}.interface.scalar_scale_per_axis_zp", op, mk(xv((2, 3)), s, zp_array(T, [1, 2, 3])),
            "scalar scale with zp of shape (3,)", axis=1)
        raw(f"{p}.interface.per_axis_scale_scalar_zp", op, mk(xv((2, 3)), f32([0.5, 0.25, 1.0]), z1),
            "scale of shape (3,) with scalar zp", axis=1)
        raw(f"{p}.interface.per_axis_scale_zp_len1", op, mk(xv((2, 3)), f32([0.5, 0.25, 1.0]), zp_array(T, [4])),
            "scale of shape (3,) with zp of shape (1,)", axis=1)
        raw(f"{p}.interface.per_axis_zp_wrong_length", op, mk(xv((2, 3)), f32([0.5, 0.25, 1.0]),
                                                             zp_array(T, [1, 2, 3, 4])),
            "scale of shape (3,) with zp of shape (4,)", axis=1)
        raw(f"{p}.interface.per_tensor_axis_out_of_range", op, mk(xv((2, 3)), s, z1),
            "per-tensor scale with axis = 7 (out of range)", axis=7)
        raw(f"{p}.interface.rank0_scale_len1", op, mk(xv(()), f32([0.5]), zp_array(T, [2])),
            "x of rank 0 with scale/zp of shape (1,), axis absent")
        raw(f"{p}.interface.axis_float_attribute", op, mk(xv((2, 3)), f32([0.5, 0.25]), zp_array(T, [1, -1])),
            "axis given as a FLOAT attribute 1.0 (scale/zp length 2 = dim 0)", axis=("float", 1.0))
        raw(f"{p}.interface.axis_float_attribute_dim1", op, mk(xv((2, 3)), f32([0.5, 0.25, 1.0]),
                                                              zp_array(T, [1, -1, 0])),
            "axis given as a FLOAT attribute 1.0 (scale/zp length 3 = dim 1)", axis=("float", 1.0))
    # deprecated alias domain
    rng = np.random.default_rng(seed_of("alias"))
    xa = f32(rng.standard_normal((2, 3)) * 3)
    add("q.interface.alias_vitis", Q, q_inputs(xa, f32([0.1, 0.2]), zp_array("int8", [0, -3]), "int8"),
        group="interface", axis=0, domain=DOMAIN_DEPRECATED, op_type="VitisQuantizeLinear",
        note="deprecated alias VitisQuantizeLinear (domain com.vai.quantize), per-axis axis 0")
    add("dq.interface.alias_vitis", DQ, dq_inputs(np.array([[1, -128, 127], [0, 5, -7]], np.int8), f32([0.1, 0.2]),
                                                  zp_array("int8", [0, -3]), "int8"),
        group="interface", axis=0, domain=DOMAIN_DEPRECATED, op_type="VitisDequantizeLinear",
        note="deprecated alias VitisDequantizeLinear (domain com.vai.quantize), per-axis axis 0")


# ---------------------------------------------------------------------------------------
# running


def build_model(case) -> bytes:
    names = [n for n, _, _ in case["inputs"]]
    attrs = {}
    if isinstance(case["axis"], int):
        attrs["axis"] = case["axis"]
    elif isinstance(case["axis"], tuple):
        attrs["axis"] = float(case["axis"][1])
    node = helper.make_node(case["op_type"], names, ["y"], name="node", domain=case["domain"], **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, onnx_enum(t), None) for n, t, _ in case["inputs"] if n]
    graph = helper.make_graph([node], "case", graph_inputs,
                              [helper.make_tensor_value_info("y", onnx_enum(case["out_dtype"]), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET_DEFAULT),
                                                    helper.make_opsetid(case["domain"], OPSET_CUSTOM)],
                              producer_name="polyquant-quark-golden")
    model.ir_version = 9
    return model.SerializeToString()


def ort_value(t: str, a: np.ndarray):
    a = np.require(a, requirements="C")
    if t == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint16), TP.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(a)


def run_case(so, case):
    try:
        sess = ort.InferenceSession(build_model(case), so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - record whatever onnxruntime raises
        return {"stage": "session", "class": type(e).__name__, "message": str(e)}, None
    feeds = {n: ort_value(t, a) for n, t, a in case["inputs"] if n}
    try:
        out = sess.run_with_ort_values(["y"], feeds)[0]
    except Exception as e:  # noqa: BLE001
        return {"stage": "run", "class": type(e).__name__, "message": str(e)}, None
    dtype = ORT_TYPE_NAMES[out.data_type()]
    shape = tuple(out.shape())
    nbytes = out.tensor_size_in_bytes()
    raw = ctypes.string_at(out.data_ptr(), nbytes) if nbytes else b""
    arr = np.frombuffer(raw, dtype=storage_dtype(dtype)).reshape(shape).copy()
    return None, (dtype, arr)


# ---------------------------------------------------------------------------------------
# a numpy model of the kernel (used only to check and summarise the recorded behaviour)

INT64_MIN = np.int64(-(2**63))


def expand(param, xshape, axis):
    """Broadcast a per-tensor or per-axis parameter like the kernel does (axis absent -> 0)."""
    p = np.asarray(param)
    if p.ndim == 0 or (p.ndim == 1 and p.shape[0] == 1):
        return np.broadcast_to(p.reshape(()), xshape)
    ax = 0 if axis == "absent" or isinstance(axis, tuple) else axis
    ax = ax + len(xshape) if ax < 0 else ax
    b = [1] * len(xshape)
    b[ax] = p.shape[0]
    return np.broadcast_to(p.reshape(b), xshape)


def float_to_int64_x86(r: np.ndarray) -> np.ndarray:
    """cvttss2si semantics: NaN, +-inf and |r| >= 2^63 give INT64_MIN."""
    r = np.asarray(r)
    ok = np.isfinite(r) & (np.abs(r.astype(np.float64)) < 2.0**63)
    out = np.full(r.shape, INT64_MIN, np.int64)
    out[ok] = r[ok].astype(np.int64)
    return out


def bf16_bits_to_f32_quark(b: np.ndarray) -> np.ndarray:
    u = b.astype(np.uint32) << 16
    nan = (b & 0x7FFF) > 0x7F80
    u = np.where(nan, np.uint32(0x7FC00000), u)
    return u.view(np.float32)


def f32_to_bf16_quark(v: np.ndarray) -> np.ndarray:
    v = np.require(v, np.float32, requirements="C")
    u = bits_of(v).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(v), np.uint16(0x7FC1), r)


def f32_to_f16_ort_cast(v: np.ndarray) -> np.ndarray:
    """x clamped to +-65504 (NaN untouched), then a round-to-nearest-even float16 cast."""
    v = np.asarray(v, np.float32)
    c = np.where(v < -65504, np.float32(-65504), np.where(v > 65504, np.float32(65504), v)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        h = c.astype(np.float16).view(np.uint16)
    nan = np.isnan(c)
    b = bits_of(np.require(c, requirements="C"))
    # NaN: sign kept, quiet bit set, top 10 payload bits kept
    nan_bits = (((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x3FF)).astype(np.uint16)
    return np.where(nan, nan_bits, h).view(np.float16)


def f16_to_f32_ort_cast(x: np.ndarray) -> np.ndarray:
    """Exact widening; a NaN keeps sign and payload.  Observed on the generating machine: a
    signalling NaN gets the quiet bit in whole blocks of 16 elements (flat index < n - n % 16)
    and stays signalling in the last n % 16 elements (onnxruntime's Cast: vector body / scalar
    tail)."""
    v = np.require(x.astype(np.float32), requirements="C")
    b = bits_of(v)
    n = v.size
    body = (np.arange(n) < n - n % 16).reshape(v.shape)
    return np.where(np.isnan(v) & body, b | np.uint32(0x00400000), b).view(np.float32)


def bf16_dq_quark(x, zp, s):
    """(ToFloat(x) - ToFloat(zp)) * s as compiled: see the NaN rules in docs/golden-data.md."""
    X, Z = bf16_bits_to_f32_quark(x), bf16_bits_to_f32_quark(zp)
    y = np.require(((X - Z) * s).astype(np.float32), requirements="C")
    xn, zn, sn = np.isnan(X), np.isnan(Z), np.isnan(s)
    s_quiet = (bits_of(np.require(s, requirements="C")) | np.uint32(0x00400000)).view(np.float32)
    y = np.where(xn | zn, np.float32(np.nan), y)  # 0x7FC00000
    y = np.where(xn & zn & sn, s_quiet, y)
    y = np.where(~xn & ~zn & sn, s_quiet, y)
    return y.astype(np.float32)


def model(case, inp):
    """Expected output (storage dtype) for an 'ok' case, or None if the model does not cover it."""
    if len(case["inputs"]) != 3 or case["inputs"][1][1] != "float32":
        return None
    x, s, zp = (a for _, _, a in case["inputs"])
    T = case["inputs"][2][1]
    if T not in INT_TYPES and T not in FLOAT_TYPES:
        return None
    if case["op"] == Q and case["inputs"][0][1] != "float32":
        return None
    if case["op"] == DQ and case["inputs"][0][1] != T:
        # the kernel dispatches on the zero point's type and reads x's buffer as that type
        if x.dtype.itemsize != storage_dtype(T).itemsize:
            return None
        x = np.require(x, requirements="C").view(storage_dtype(T))
    ax = case["axis"]
    S = expand(s, x.shape, ax).astype(np.float32)
    with np.errstate(all="ignore"):
        if case["op"] == Q:
            if T in INT_TYPES:
                _, dt, lo, hi = INT_TYPES[T]
                r = np.asarray(np.rint(x / S), np.float32)
                t = float_to_int64_x86(r) + expand(zp, x.shape, ax).astype(np.int64)  # int64 wrap-around
                return np.clip(t, lo, hi).astype(dt)
            if T == "float16":
                return f32_to_f16_ort_cast(x)
            Z = bf16_bits_to_f32_quark(expand(zp, x.shape, ax))
            return f32_to_bf16_quark((x / S + Z).astype(np.float32))
        if T in INT_TYPES:
            d = x.astype(np.int64) - expand(zp, x.shape, ax).astype(np.int64)
            return (d.astype(np.float32) * S).astype(np.float32)
        if T == "float16":
            return f16_to_f32_ort_cast(x)
        return bf16_dq_quark(x, np.asarray(expand(zp, x.shape, ax)), S)


def compare(case, expected, got):
    """'exact' (bits), 'nan_payload' (same except which NaN), or 'differ'."""
    if expected.shape != got.shape:
        return "differ"
    e, g = np.require(expected, requirements="C"), np.require(got, requirements="C")
    if e.dtype.kind == "f":
        eb, gb = bits_of(e), bits_of(g)
        if np.array_equal(eb, gb):
            return "exact"
        en, gn = np.isnan(e), np.isnan(g)
        if np.array_equal(en, gn) and np.array_equal(eb[~en], gb[~gn]):
            return "nan_payload"
        return "differ"
    if case["out_dtype"] == "bfloat16":
        if np.array_equal(e, g):
            return "exact"
        en, gn = (e & 0x7FFF) > 0x7F80, (g & 0x7FFF) > 0x7F80
        if np.array_equal(en, gn) and np.array_equal(e[~en], g[~gn]):
            return "nan_payload"
        return "differ"
    return "exact" if np.array_equal(e, g) else "differ"


# ---------------------------------------------------------------------------------------
# output


def describe_array(key, t, a):
    d = {"dtype": t, "shape": list(a.shape), "key": key}
    if t == "bfloat16":
        d["stored_as"] = "uint16 bit pattern"
    return d


def versions():
    out = {"python": platform.python_version()}
    for dist in ("amd-quark", "torch", "onnxruntime", "onnx", "numpy", "protobuf", "ninja"):
        out[dist] = md.version(dist)
    return out


def library_info(lib: str):
    info = {"file": os.path.basename(lib), "sha256": hashlib.sha256(Path(lib).read_bytes()).hexdigest(),
            "built_by": "quark.onnx.operators.custom_ops.get_library_path('CPU') (torch JIT extension build)"}
    ninja = Path(lib).parent / "build.ninja"
    if ninja.exists():
        for line in ninja.read_text().splitlines():
            if line.startswith("cflags ="):
                flags = line.split("=", 1)[1].split()
                info["cflags"] = [f for f in flags if f.startswith(("-O", "-std", "-D", "-f"))]
            if line.startswith("cxx ="):
                cxx = line.split("=", 1)[1].strip()
                try:
                    info["compiler"] = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                                                      check=True).stdout.splitlines()[0]
                except (OSError, subprocess.CalledProcessError):
                    pass
    return info


def cpu_name():
    model = cpu_model()
    return platform.processor() if model is None else model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--library", help="use this Quark custom-op .so instead of get_library_path('CPU')")
    ap.add_argument("--no-check", action="store_true", help="skip the numpy-model comparison")
    args = ap.parse_args()

    if args.library:
        lib = args.library
    else:
        from quark.onnx.operators.custom_ops import get_library_path  # builds the .so on first use
        lib = get_library_path("CPU")

    build_random_q()
    build_random_dq()
    build_ties_q()
    build_edges_q()
    build_specials_q()
    build_specials_dq()
    build_rounding_dq()
    build_exhaustive_dq()
    build_granularity()
    build_large()
    build_interface()

    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4

    arrays: dict[str, np.ndarray] = {}
    records = []
    counts: dict[str, dict[str, int]] = {}
    group_counts: dict[str, int] = {}
    check: dict[str, int] = {"exact": 0, "nan_payload": 0, "differ": 0, "not_modelled": 0}
    differ = []
    for case in CASES:
        cid = case["id"]
        rec = {"id": cid, "op": case["op_type"], "domain": case["domain"], "group": case["group"],
               "note": case["note"]}
        if case["axis"] == "absent":
            rec["attrs"] = {}
            rec["axis_attribute"] = "absent"
        elif isinstance(case["axis"], tuple):
            rec["attrs"] = {"axis": case["axis"][1]}
            rec["axis_attribute"] = "float"
        else:
            rec["attrs"] = {"axis": case["axis"]}
            rec["axis_attribute"] = "int"
        rec["inputs"] = []
        for name, t, a in case["inputs"]:
            if not name:
                rec["inputs"].append({"name": "", "dtype": None, "shape": None, "key": None})
                continue
            key = f"{cid}/{name}"
            arrays[key] = a
            rec["inputs"].append({"name": name, **describe_array(key, t, a)})
        rec["declared_output"] = {"name": "y", "dtype": case["out_dtype"]}
        err, res = run_case(so, case)
        if err is not None:
            rec["outcome"] = "error"
            rec["error"] = err
        else:
            dtype, arr = res
            key = f"{cid}/y"
            arrays[key] = arr
            rec["outcome"] = "ok"
            rec["output"] = {"name": "y", **describe_array(key, dtype, arr)}
        records.append(rec)
        T = next((t for n, t, _ in case["inputs"][2:3]), None) if case["group"] != "interface" else "interface"
        c = counts.setdefault(case["op_type"], {})
        c[T] = c.get(T, 0) + 1
        group_counts[case["group"]] = group_counts.get(case["group"], 0) + 1
        if not args.no_check:
            exp = model(case, case["inputs"]) if err is None else None
            if exp is None:
                check["not_modelled"] += 1
            else:
                r = compare(case, exp, res[1])
                check[r] += 1
                if r == "differ":
                    differ.append(cid)

    header = {
        "format": 1,
        "description": "Outputs of AMD Quark's CPU custom ops ExtendedQuantizeLinear / ExtendedDequantizeLinear "
                       "(com.amd.quark, version 1) run in onnxruntime, one single-node model per case. "
                       "See docs/golden-data.md.",
        "generator": "tools/golden/quark.py",
        "versions": versions(),
        "custom_op_library": library_info(lib),
        "machine": {"arch": platform.machine(), "cpu": cpu_name(), "libc": " ".join(platform.libc_ver())},
        "model": {"opset_imports": {"": OPSET_DEFAULT, DOMAIN: OPSET_CUSTOM}, "ir_version": 9,
                  "node_name": "node", "inputs": "all parameters are graph inputs (no initializers)"},
        "session": {"providers": ["CPUExecutionProvider"], "graph_optimization_level": "ORT_DISABLE_ALL",
                    "intra_op_num_threads": 1, "inter_op_num_threads": 1},
        "storage": {
            "arrays": "arrays.npz",
            "key": "each input/output has 'key'; np.load('arrays.npz')[key]",
            "bfloat16": "stored as the uint16 bit pattern (numpy uint16); 'stored_as' says so",
            "float16": "stored as numpy float16 (bit patterns preserved)",
            "float32": "stored as numpy float32 (bit patterns preserved, NaN payloads included)",
        },
        "axis_attribute": "'int': attrs.axis set as an INT attribute; 'absent': no axis attribute on the node; "
                          "'float': axis set as a FLOAT attribute",
        "error": "outcome 'error': stage 'session' (InferenceSession creation) or 'run'; class = the Python "
                 "exception class onnxruntime raised; message = str(exception)",
        "counts": {"cases": len(records), "errors": sum(r["outcome"] == "error" for r in records),
                   "per_op_and_type": counts, "per_group": group_counts},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_index(args.out / "index.json", header, records)
    write_npz(args.out / "arrays.npz", arrays)

    total = sum((args.out / f).stat().st_size for f in ("index.json", "arrays.npz"))
    print(f"{len(records)} cases, {total} bytes written to {args.out}")
    print(json.dumps(counts, indent=1))
    print("errors:", sum(r["outcome"] == "error" for r in records))
    if not args.no_check:
        print("model check:", check)
        for cid in differ:
            print("  differs from the model:", cid)


if __name__ == "__main__":
    main()
