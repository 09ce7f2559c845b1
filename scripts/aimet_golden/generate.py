#!/usr/bin/env python3
"""Golden data for polyquant.aimet, produced by aimet-torch 2.42.0 itself (CPU).

Usage (in the reference virtual environment, see README.md beside this file):

    python generate.py [--out DIR] [--only GROUP[,GROUP...]]
    python generate.py --timings-only [--timing-reps N]

Writes ``index.json`` (one JSON object per case) and ``arrays.npz`` (every tensor, stored exactly)
into ``tests/data/aimet/`` (or ``--out``). Every case is run through aimet-torch's public API
(``aimet_torch.quantization.affine`` and ``aimet_torch.quantization.encoding_analyzer``); the result
(arrays, JSON) or the exception raised (class name and message) is recorded.

With ``--timings-only`` it measures aimet-torch's speed on 64 Mi float32 elements instead and writes
``scripts/aimet_golden/peer_timings.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "tests" / "data" / "aimet"

import torch  # noqa: E402

warnings.filterwarnings("ignore")

from aimet_torch.quantization import affine as A  # noqa: E402
from aimet_torch.quantization.affine.backends import torch_builtins as TB  # noqa: E402
from aimet_torch.quantization import encoding_analyzer as EA  # noqa: E402

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
DT_NAME = {F32: "float32", F16: "float16", BF16: "bfloat16", F64: "float64"}
NAME_DT = {v: k for k, v in DT_NAME.items()}

# ------------------------------------------------------------------------------------------------
# which path quantize_dequantize took (the no-grad shortcut through torch.fake_quantize_*, or not)

_PATH_LOG: list[str] = []
_orig_fq = TB._torch_fake_quantize
_orig_fq_pt = TB._call_torch_fake_quantize_per_tensor
_orig_fq_pc = TB._call_torch_fake_quantize_per_channel


def _fq(*a, **k):
    _PATH_LOG.append("shortcut_considered")
    r = _orig_fq(*a, **k)
    if r is None:
        _PATH_LOG.append("shortcut_declined")
    return r


def _fq_pt(*a, **k):
    _PATH_LOG.append("fake_quantize_per_tensor")
    return _orig_fq_pt(*a, **k)


def _fq_pc(*a, **k):
    _PATH_LOG.append("fake_quantize_per_channel")
    try:
        return _orig_fq_pc(*a, **k)
    except RuntimeError:
        _PATH_LOG.append("fake_quantize_per_channel_raised")
        raise


TB._torch_fake_quantize = _fq
TB._call_torch_fake_quantize_per_tensor = _fq_pt
TB._call_torch_fake_quantize_per_channel = _fq_pc


def _path_from_log(log: list[str]) -> str:
    """'fake_quantize_per_tensor', 'fake_quantize_per_channel', or 'reference' (the
    QuantDequantFunc formula); 'reference_after_per_channel_raised' when torch rejected the
    per-channel call (zero point outside [qmin, qmax]) and AIMET fell back."""
    if "fake_quantize_per_channel_raised" in log:
        return "reference_after_per_channel_raised"
    if "shortcut_declined" in log or "shortcut_considered" not in log:
        return "reference"
    if "fake_quantize_per_tensor" in log:
        return "fake_quantize_per_tensor"
    if "fake_quantize_per_channel" in log:
        return "fake_quantize_per_channel"
    return "unknown"


# ------------------------------------------------------------------------------------------------
# storage


def to_numpy(t: torch.Tensor) -> tuple[np.ndarray, str]:
    t = t.detach().cpu()
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    t = t.contiguous()
    if t.dtype == BF16:
        return t.view(torch.int16).numpy().view(np.uint16).copy(), "bfloat16"
    if t.dtype == torch.bool:
        return t.numpy().copy(), "bool"
    a = t.numpy().copy()
    return a, str(a.dtype)


def from_numpy(a: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(np.asarray(np.ascontiguousarray(a).view(np.int16).copy())).view(BF16)
    return torch.from_numpy(np.asarray(np.ascontiguousarray(a).copy()))


class Store:
    """Arrays are packed per stored dtype into one flat pool each (few zip entries, small file);
    an array spec is {"dtype", "shape", "pool", "start"}: pool[start : start + prod(shape)]."""

    def __init__(self):
        self.cases: list[dict] = []
        self.ids: set[str] = set()
        self.pools: dict[str, list[np.ndarray]] = {}
        self.sizes: dict[str, int] = {}

    def arr(self, cid: str, name: str, t) -> dict:
        if isinstance(t, np.ndarray):
            a, dt = t, str(t.dtype)
        else:
            a, dt = to_numpy(t)
        pool = "bfloat16" if dt == "bfloat16" else str(a.dtype)
        start = self.sizes.get(pool, 0)
        self.pools.setdefault(pool, []).append(np.ascontiguousarray(a).reshape(-1))
        self.sizes[pool] = start + a.size
        d = {"dtype": dt, "shape": list(a.shape), "pool": pool, "start": start}
        return d

    def add(self, case: dict):
        assert case["id"] not in self.ids, case["id"]
        self.ids.add(case["id"])
        self.cases.append(case)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for pool, parts in self.pools.items():
            dt = np.uint16 if pool == "bfloat16" else np.dtype(pool)
            out["pool_" + pool] = np.concatenate(parts).astype(dt, copy=False) if parts else np.zeros(0, dt)
        return out


def write_npz(path: Path, arrays: dict[str, np.ndarray]):
    """np.load-compatible .npz with fixed timestamps (np.savez stamps the current time)."""
    with zipfile.ZipFile(path, "w") as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.require(arrays[key], requirements="C"), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def err_record(e: BaseException) -> dict:
    return {"class": type(e).__name__, "message": str(e)}


def seed_of(cid: str) -> int:
    return zlib.crc32(cid.encode())


def jsonable(v):
    """Call arguments as JSON (tuples become lists; the test turns block_size lists back into tuples)."""
    if isinstance(v, tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    return v


def json_safe(v):
    """Encodings dicts from AIMET: tensors/tuples to lists; floats kept as Python floats (repr
    round-trips exactly); non-finite floats written as the strings 'nan', 'inf', '-inf'."""
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, torch.Tensor):
        return json_safe(v.tolist())
    if isinstance(v, float):
        if math.isnan(v):
            return {"float": "nan"}
        if math.isinf(v):
            return {"float": "inf" if v > 0 else "-inf"}
        return v
    if isinstance(v, (np.floating,)):
        return json_safe(float(v))
    if isinstance(v, (np.integer,)):
        return int(v)
    return v


# ------------------------------------------------------------------------------------------------
# float helpers (all on torch tensors of the given dtype)


def bits_dtype(dt):
    return {F32: torch.int32, F16: torch.int16, BF16: torch.int16, F64: torch.int64}[dt]


def ulp_step(t: torch.Tensor, direction: int) -> torch.Tensor:
    """next representable value towards +inf (direction=+1) or -inf (-1), finite nonzero inputs."""
    if t.dtype in (F32, F64, F16):
        return torch.nextafter(t, torch.full_like(t, math.inf * direction))
    # bfloat16: through the bit pattern
    b = t.view(torch.int16).to(torch.int32) & 0xFFFF
    neg = (b & 0x8000) != 0
    up = direction > 0
    delta = torch.where(neg ^ torch.tensor(up), torch.ones_like(b), -torch.ones_like(b))
    nb = b + delta
    nb = torch.where(nb >= 0x8000, nb - 0x10000, nb)
    return nb.to(torch.int16).view(BF16)


def specials(dt) -> list[float]:
    fi = torch.finfo(dt)
    tiny_sub = float(torch.tensor(fi.tiny, dtype=dt) * torch.tensor(2.0 ** -(
        {F32: 23, F16: 10, BF16: 7, F64: 52}[dt]), dtype=dt)) if dt != F64 else 5e-324
    vals = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, tiny_sub, -tiny_sub, fi.tiny, -fi.tiny,
            fi.max, -fi.max]
    if dt in (F32, BF16, F64):
        vals += [1e30, -1e30, 2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, 2.0 ** 31, -(2.0 ** 31) - 2.0 ** 8]
    else:
        vals += [60000.0, -60000.0, 2048.0, -2049.0]
    return vals


def nan_payloads(dt) -> torch.Tensor:
    if dt == F32:
        return torch.tensor([0x7FC00001, -0x00400000, 0x7FFFFFFF], dtype=torch.int32).view(F32)
    if dt == F16:
        return torch.tensor([0x7E01, -0x0200 & 0xFFFF], dtype=torch.int32).to(torch.int16).view(F16)
    if dt == BF16:
        return torch.tensor([0x7FC1, 0xFFC0 - 0x10000], dtype=torch.int16).view(BF16)
    return torch.tensor([0x7FF8000000000001], dtype=torch.int64).view(F64)


def expand_param(p: np.ndarray, x_shape, block_size) -> np.ndarray:
    """Per-element view of a scale/offset (float64) for building inputs."""
    p = np.asarray(p, dtype=np.float64)
    if block_size is None:
        return np.broadcast_to(p, x_shape).copy()
    bs = list(block_size)
    tail = x_shape[len(x_shape) - p.ndim:]
    out = p
    for d in range(p.ndim):
        b = bs[d] if bs[d] != -1 else tail[d] // p.shape[d]
        out = np.repeat(out, b, axis=d)
    return np.broadcast_to(out, x_shape).copy()


def make_input(cid: str, x_shape, dt, scale_e: np.ndarray, offset_e: np.ndarray, qmin, qmax,
               kind: str = "mixed") -> torch.Tensor:
    """x of shape x_shape in dtype dt, from grid-unit targets times the per-element scale,
    with ties (k + 0.5) * s, their neighbours one ulp away, values beyond the grid and specials."""
    rng = np.random.default_rng(seed_of(cid))
    n = int(np.prod(x_shape))
    s = scale_e.reshape(-1)
    o = offset_e.reshape(-1)
    lo = float(min(qmin, qmax))
    hi = float(max(qmin, qmax))
    units = np.empty(n)
    kinds = rng.integers(0, 10, size=n) if kind == "mixed" else np.full(n, 0)
    for i in range(n):
        k = kinds[i]
        oi = o[i] if np.isfinite(o[i]) else 0.0
        if k in (0, 1, 2):  # uniform over the grid and a little beyond
            units[i] = rng.uniform(lo + oi - 3, hi + oi + 3)
        elif k in (3, 4):  # exact ties
            base = rng.choice([lo + oi, hi + oi, 0.0, math.floor(rng.uniform(min(lo + oi, 0) - 2, max(hi + oi, 0) + 3))])
            units[i] = math.floor(base) + rng.choice([-1.5, -0.5, 0.5, 1.5])
        elif k == 5:  # edges of the grid
            units[i] = rng.choice([lo, hi]) + oi + rng.choice([-2, -1, -0.5, 0, 0.5, 1, 2])
        elif k == 6:  # far beyond
            units[i] = rng.choice([-1, 1]) * rng.uniform(2, 4) * max(abs(lo + oi), abs(hi + oi), 1)
        elif k == 7:  # near zero
            units[i] = rng.choice([0.0, -0.0, 0.5, -0.5, 0.25, -0.25, 1e-3, -1e-3, -1e-9])
        else:
            units[i] = rng.uniform(lo + oi, hi + oi)
    x64 = units * s
    x = torch.from_numpy(np.asarray(x64)).to(dt)
    # one ulp neighbours for a few ties
    flat = x.reshape(-1).clone()
    tie_idx = [i for i in range(n) if kinds[i] in (3, 4)]
    for j, i in enumerate(tie_idx):
        if j % 3 == 1 and torch.isfinite(flat[i]) and flat[i] != 0:
            flat[i] = ulp_step(flat[i:i + 1], +1)[0]
        elif j % 3 == 2 and torch.isfinite(flat[i]) and flat[i] != 0:
            flat[i] = ulp_step(flat[i:i + 1], -1)[0]
    if kind == "mixed" and n >= 24:
        sp = torch.tensor(specials(dt), dtype=F64).to(dt)
        npl = nan_payloads(dt)
        pool = torch.cat([sp, npl])
        pos = rng.choice(n, size=min(n // 4, pool.numel()), replace=False)
        pick = rng.choice(pool.numel(), size=pos.size, replace=False)
        for p_, q_ in zip(pos, pick):
            flat[int(p_)] = pool[int(q_)]
    return flat.reshape(x_shape)


# ------------------------------------------------------------------------------------------------
# functional cases

OPS = {"quantize": A.quantize, "quantize_dequantize": A.quantize_dequantize, "dequantize": A.dequantize}


def qrange(bitwidth=None, signed=False, num_steps=None):
    if bitwidth is not None:
        num_steps = 2 ** bitwidth - 1
    if signed:
        return -math.ceil(num_steps / 2), math.floor(num_steps / 2)
    return 0, num_steps


def _call_kwargs(kwargs: dict) -> dict:
    k = dict(kwargs)
    if "block_size" in k and isinstance(k["block_size"], list):
        k["block_size"] = tuple(k["block_size"])
    return k


def _call_args(args: list) -> list:
    return [tuple(a) if isinstance(a, list) else a for a in args]


def _internal_dtype(x_dtype, qmin, qmax, op):
    """The working dtype AIMET's reference formula would use (its own helpers), or None."""
    try:
        if op == "dequantize":
            return DT_NAME[x_dtype]
        d = x_dtype
        if not TB._is_numerically_stable(d, qmin, qmax):
            d = F32
            if not TB._is_numerically_stable(d, qmin, qmax):
                d = F64
        return DT_NAME[d]
    except Exception:  # noqa: BLE001
        return None


def functional_case(st: Store, cid: str, group: str, op: str, x: torch.Tensor, scale: torch.Tensor,
                    offset: torch.Tensor, args: list, kwargs: dict, note: str = "", grad: bool = False,
                    grad_output_seed: str | None = None, extra: dict | None = None):
    case = {"id": cid, "group": group, "op": op, "note": note,
            "call": {"args": jsonable(args), "kwargs": jsonable(kwargs)}}
    if extra:
        case.update(extra)
    case["inputs"] = {"tensor": st.arr(cid, "tensor", x), "scale": st.arr(cid, "scale", scale),
                      "offset": st.arr(cid, "offset", offset)}
    fn = OPS[op]
    # AIMET memoizes _is_grid_representable(dtype, qmin, qmax) with functools.lru_cache: a float
    # grid bound (bitwidth 8.0 gives qmax 255.0) hits the entry of an earlier int call (255 == 255.0)
    # and works, while in a fresh process it raises AttributeError. Record the fresh behaviour.
    TB._is_grid_representable.cache_clear()
    a = _call_args(args)
    k = _call_kwargs(kwargs)
    if not grad:
        _PATH_LOG.clear()
        try:
            with torch.no_grad():
                out = fn(x.clone(), scale.clone(), offset.clone(), *a, **k)
            case["outcome"] = "ok"
            case["output"] = st.arr(cid, "output", out)
        except Exception as e:  # noqa: BLE001
            case["outcome"] = "error"
            case["error"] = err_record(e)
        if op == "quantize_dequantize":
            case["path"] = _path_from_log(_PATH_LOG)
        else:
            case["path"] = "reference"
        st.add(case)
        return case
    # training path: tensor, scale and offset require grad; backward with a given grad_output
    rng = np.random.default_rng(seed_of(grad_output_seed or cid))
    xg = x.clone().requires_grad_(True)
    sg = scale.clone().requires_grad_(True)
    og = offset.clone().requires_grad_(True)
    go = torch.from_numpy(np.asarray(rng.standard_normal(tuple(x.shape)))).to(x.dtype if x.is_floating_point() else F32)
    if go.numel() >= 8:  # signed zeros in grad_output
        go.view(-1)[0] = 0.0
        go.view(-1)[1] = -0.0
    case["grad_output"] = st.arr(cid, "grad_output", go)
    _PATH_LOG.clear()
    try:
        out = fn(xg, sg, og, *a, **k)
        out.backward(go)
        case["outcome"] = "ok"
        case["output"] = st.arr(cid, "output", out)
        for nm, t in (("grad_tensor", xg), ("grad_scale", sg), ("grad_offset", og)):
            if t.grad is None:
                case[nm] = None
            else:
                case[nm] = st.arr(cid, nm, t.grad)
    except Exception as e:  # noqa: BLE001
        case["outcome"] = "error"
        case["error"] = err_record(e)
    case["path"] = _path_from_log(_PATH_LOG) if op == "quantize_dequantize" else "reference"
    if op == "quantize_dequantize" and case["outcome"] == "ok":
        # the same call without grad (the inference shortcut, where eligible)
        _PATH_LOG.clear()
        TB._is_grid_representable.cache_clear()
        try:
            with torch.no_grad():
                out2 = fn(x.clone(), scale.clone(), offset.clone(), *a, **k)
            case["output_no_grad"] = st.arr(cid, "output_no_grad", out2)
            case["path_no_grad"] = _path_from_log(_PATH_LOG)
        except Exception as e:  # noqa: BLE001
            case["output_no_grad_error"] = err_record(e)
            case["path_no_grad"] = _path_from_log(_PATH_LOG)
    st.add(case)
    return case


def grid_call(form: str, bitwidth=None, signed=False, num_steps=None, qmin=None, qmax=None, block_size=None):
    """(args, kwargs) for one overload form."""
    bs = list(block_size) if block_size is not None else None
    if form == "bw_pos":
        args = [bitwidth, signed]
        kw = {}
        if bs is not None:
            args.append(bs)
        return args, kw
    if form == "bw_pos1":
        return [bitwidth], ({"block_size": bs} if bs is not None else {})
    if form == "bw_kw":
        kw = {"bitwidth": bitwidth, "signed": signed}
        if bs is not None:
            kw["block_size"] = bs
        return [], kw
    if form == "num_steps":
        kw = {"num_steps": num_steps, "signed": signed}
        if bs is not None:
            kw["block_size"] = bs
        return [], kw
    if form == "qq_pos":
        args = [qmin, qmax]
        if bs is not None:
            args.append(bs)
        return args, {}
    if form == "qq_kw":
        kw = {"qmin": qmin, "qmax": qmax}
        if bs is not None:
            kw["block_size"] = bs
        return [], kw
    raise ValueError(form)


def t(v, dt=F32):
    return torch.tensor(v, dtype=F64).to(dt)


def gen_functional(st: Store):
    G = "functional"
    # --- the overloads ---------------------------------------------------------------------------
    forms = [
        ("bw_pos1_4", [4], {}),
        ("bw_pos_4_false", [4, False], {}),
        ("bw_pos_4_true", [4, True], {}),
        ("bw_pos_8_true_none", [8, True, None], {}),
        ("bw_pos_8_none", [8, None], {}),
        ("bw_kw_4", [], {"bitwidth": 4}),
        ("bw_kw_4_signed", [], {"bitwidth": 4, "signed": True}),
        ("bw_pos_kw_signed", [4], {"signed": True}),
        ("ns_15_unsigned", [], {"num_steps": 15, "signed": False}),
        ("ns_254_signed", [], {"num_steps": 254, "signed": True}),
        ("ns_255_signed", [], {"num_steps": 255, "signed": True}),
        ("ns_7_signed", [], {"num_steps": 7, "signed": True}),
        ("ns_2_signed", [], {"num_steps": 2, "signed": True}),
        ("ns_1_signed", [], {"num_steps": 1, "signed": True}),
        ("ns_1_unsigned", [], {"num_steps": 1, "signed": False}),
        ("ns_0_unsigned", [], {"num_steps": 0, "signed": False}),
        ("ns_100_unsigned", [], {"num_steps": 100, "signed": False}),
        ("ns_15f_unsigned", [], {"num_steps": 15.0, "signed": False}),
        ("ns_15f_signed", [], {"num_steps": 15.0, "signed": True}),
        ("qq_pos_m8_7", [-8, 7], {}),
        ("qq_pos_0_15", [0, 15], {}),
        ("qq_kw_m8_7", [], {"qmin": -8, "qmax": 7}),
        ("qq_mixed_m8_kw7", [-8], {"qmax": 7}),
        ("qq_pos_3_3", [3, 3], {}),
        ("qq_pos_m100_37", [-100, 37], {}),
        ("qq_pos_0_1", [0, 1], {}),
        ("qq_pos_5_3", [5, 3], {}),
        ("qq_pos_4_1_trap", [4, 1], {}),
        ("qq_pos_m3_1000", [-3, 1000], {}),
        ("qq_pos_10_20", [10, 20], {}),
        ("qq_pos_m20_m10", [-20, -10], {}),
        ("bw_kw_signed_int1_trap", [], {"bitwidth": 4, "signed": 1}),
        ("bw_pos_0_true", [0, True], {}),
        ("bw_pos_0", [0], {}),
        ("bw_pos_neg1", [-1], {}),
        ("bw_float_8", [8.0], {}),
        ("bw_float_8_signed", [8.0, True], {}),
        ("bw_float_4_5", [4.5], {}),
        ("qq_float", [0.0, 15.0], {}),
    ]
    for name, args, kwargs in forms:
        for op in ("quantize", "quantize_dequantize"):
            for pname, s, o in (("asym", 0.25, -3.0), ("sym", 0.1, 0.0), ("pc", [0.25, 0.1, 0.5], [-3.0, 0.0, 2.0])):
                cid = f"{G}/overload/{op}/{name}/{pname}"
                sc, of = t(s), t(o)
                shape = (4, 3) if pname == "pc" else (48,)
                try:
                    qmin, qmax = A.backends._parse_args(tuple(args), dict(kwargs))[:2]
                    qmin, qmax = float(qmin), float(qmax)
                except Exception:  # noqa: BLE001
                    qmin, qmax = 0.0, 15.0
                x = make_input(cid, shape, F32, expand_param(sc.numpy(), shape, None),
                               expand_param(of.numpy(), shape, None), qmin, qmax)
                functional_case(st, cid, G, op, x, sc, of, args, kwargs, note="overload parsing")

    # --- every bitwidth, signed and unsigned -------------------------------------------------------
    def bw_params(b, signed, dt_scale):
        s = 0.37 if b < 20 else 0.37 * 2.0 ** -(b - 20)
        if signed:
            o = 0.0
        else:
            o = -float(2 ** (b - 1)) if b >= 1 else 0.0
        return s, o

    for dt in (F32, F16, BF16, F64):
        bws = list(range(1, 33)) + [40, 53, 63, 64] if dt in (F32, F64) else list(range(1, 18)) + [24, 32, 40, 64]
        for b in bws:
            for signed in (False, True):
                for op in ("quantize", "quantize_dequantize"):
                    if dt == F64 and b not in (1, 8, 16, 23, 24, 25, 31, 32, 40, 53, 63, 64):
                        continue
                    cid = f"{G}/bitwidth/{op}/{DT_NAME[dt]}/b{b}/{'signed' if signed else 'unsigned'}"
                    s, o = bw_params(b, signed, dt)
                    qmin, qmax = qrange(bitwidth=b, signed=signed)
                    sc, of = t(s), t(o)
                    shape = (64,)
                    x = make_input(cid, shape, dt, expand_param(sc.numpy(), shape, None),
                                   expand_param(of.numpy(), shape, None), qmin, qmax)
                    functional_case(st, cid, G, op, x, sc, of, [b, signed], {}, note="bitwidth sweep, per-tensor")
    # per-channel (the per-channel shortcut) at several bitwidths and dtypes
    for dt in (F32, F16, BF16):
        for b in (1, 2, 4, 8, 12, 16, 24, 31, 32):
            for signed in (False, True):
                for op in ("quantize", "quantize_dequantize"):
                    cid = f"{G}/bitwidth_pc/{op}/{DT_NAME[dt]}/b{b}/{'signed' if signed else 'unsigned'}"
                    qmin, qmax = qrange(bitwidth=b, signed=signed)
                    sc = t([0.37, 0.011, 2.5, 1 / 255])
                    of = t([0.0, 0.0, 0.0, 0.0] if signed else [-float(2 ** (b - 1)), 0.0, -1.0, -float(qmax)])
                    shape = (4, 10)
                    scv, ofv = sc.reshape(4, 1), of.reshape(4, 1)
                    x = make_input(cid, shape, dt, expand_param(scv.numpy(), shape, None),
                                   expand_param(ofv.numpy(), shape, None), qmin, qmax)
                    functional_case(st, cid, G, op, x, scv, ofv, [b, signed], {}, note="bitwidth sweep, per-channel axis 0")

    # --- granularity: per-tensor, per-channel on several axes, blockwise --------------------------
    xshape = (2, 3, 4, 5)
    gran = [
        ("pt_0d", xshape, [], None),
        ("pt_1", xshape, [1], None),
        ("pt_1111", xshape, [1, 1, 1, 1], None),
        ("pt_11_rank1", (7,), [1, 1], "rank above the input: not expandable"),
        ("pc_first_2111", xshape, [2, 1, 1, 1], None),
        ("pc_middle_311", xshape, [3, 1, 1], None),
        ("pc_middle_1311", xshape, [1, 3, 1, 1], None),
        ("pc_third_41", xshape, [4, 1], None),
        ("pc_last_5", xshape, [5], None),
        ("pc_last_11115", xshape, [1, 1, 1, 5], None),
        ("two_axes_315", xshape, [3, 1, 5], None),
        ("full_2345", xshape, [2, 3, 4, 5], None),
        ("pc_rank1_7", (7,), [7], None),
        ("pc_rank2_last", (6, 8), [8], None),
        ("pc_rank2_first", (6, 8), [6, 1], None),
        ("bad_shape_4", xshape, [4], "not broadcastable"),
        ("bad_shape_3", (6, 8), [3], "not broadcastable"),
    ]
    for gname, shape, sshape, note in gran:
        for op in ("quantize", "quantize_dequantize", "dequantize"):
            for dt in (F32, F16, BF16):
                if dt != F32 and not gname.startswith(("pt_0d", "pc_first", "pc_last_5", "two_axes", "pc_middle_311")):
                    continue
                for variant in ("asym8", "sym4"):
                    cid = f"{G}/granularity/{op}/{DT_NAME[dt]}/{gname}/{variant}"
                    rng = np.random.default_rng(seed_of(cid))
                    n = int(np.prod(sshape)) if sshape else 1
                    sc = rng.uniform(0.01, 0.5, size=n)
                    if variant == "asym8":
                        b, signed = 8, False
                        of = -np.round(rng.uniform(0, 255, size=n))
                    else:
                        b, signed = 4, True
                        of = np.zeros(n)
                    qmin, qmax = qrange(bitwidth=b, signed=signed)
                    scv = torch.from_numpy(np.asarray(sc.reshape(sshape))).to(F32)
                    ofv = torch.from_numpy(np.asarray(of.reshape(sshape))).to(F32)
                    try:
                        se = expand_param(scv.numpy(), shape, None)
                        oe = expand_param(ofv.numpy(), shape, None)
                    except ValueError:
                        se = np.full(shape, float(sc.reshape(-1)[0]))
                        oe = np.full(shape, float(of.reshape(-1)[0]))
                    if op == "dequantize":
                        x = torch.from_numpy(np.asarray(rng.integers(qmin, qmax + 1, size=shape).astype(np.float64))).to(dt)
                        args = []
                    else:
                        x = make_input(cid, shape, dt, se, oe, qmin, qmax)
                        args = [b, signed]
                    functional_case(st, cid, G, op, x, scv, ofv, args, {}, note=note or "")
    # offset shaped differently from scale (the shortcut needs equal shapes)
    for op in ("quantize", "quantize_dequantize"):
        for nm, ss, os_ in (("scale_pc_offset_0d", [3, 1, 1], []), ("scale_0d_offset_pc", [], [3, 1, 1]),
                            ("scale_pc_offset_1", [1, 3, 1, 1], [1]), ("scale_last_offset_first", [5], [2, 1, 1, 1])):
            cid = f"{G}/granularity_mixed/{op}/{nm}"
            rng = np.random.default_rng(seed_of(cid))
            sc = torch.from_numpy(np.asarray(rng.uniform(0.01, 0.5, size=ss))).to(F32)
            of = torch.from_numpy(np.asarray(-np.round(rng.uniform(0, 255, size=os_)))).to(F32)
            se = expand_param(sc.numpy(), xshape, None)
            oe = expand_param(of.numpy(), xshape, None)
            x = make_input(cid, xshape, F32, se, oe, 0, 255)
            functional_case(st, cid, G, op, x, sc, of, [8, False], {}, note="offset shape differs from scale shape")

    # --- blockwise ----------------------------------------------------------------------------------
    blocks = [
        ("b_4x6_s2x3_b2x2", (4, 6), (2, 3), (2, 2)),
        ("b_4x6_s2x3_bm1x2", (4, 6), (2, 3), (-1, 2)),
        ("b_4x6_s2x3_bm1xm1", (4, 6), (2, 3), (-1, -1)),
        ("b_4x6_s4x1_b1x6", (4, 6), (4, 1), (1, 6)),
        ("b_4x6_s4x1_b1xm1", (4, 6), (4, 1), (1, -1)),
        ("b_4x6_s1x6_bm1x1", (4, 6), (1, 6), (-1, 1)),
        ("b_4x6_s4x6_b1x1", (4, 6), (4, 6), (1, 1)),
        ("b_lead_3x4x6_s2x3_b2x2", (3, 4, 6), (2, 3), (2, 2)),
        ("b_lead_2x3x4x6_s2x3_bm1x2", (2, 3, 4, 6), (2, 3), (-1, 2)),
        ("b_3axes_2x4x6_s2x2x3_b1x2x2", (2, 4, 6), (2, 2, 3), (1, 2, 2)),
        ("b_3axes_2x4x6_s1x2x3_bm1xm1x2", (2, 4, 6), (1, 2, 3), (-1, -1, 2)),
        ("b_3axes_4x4x8_s2x2x2_b2x2x4", (4, 4, 8), (2, 2, 2), (2, 2, 4)),
        ("b_last32_8x64_s8x2_b1x32", (8, 64), (8, 2), (1, 32)),
        ("b_first_6x4_s3x4_b2x1", (6, 4), (3, 4), (2, 1)),
        ("b_8_6_8_3_s4_3_8_1", (8, 6, 8, 3), (4, 3, 8, 1), (-1, 2, 1, 3)),
        ("b_rank1_12_s3_b4", (12,), (3,), (4,)),
        ("b_rank1_12_s3_bm1", (12,), (3,), (-1,)),
    ]
    for bname, xs, ss, bs in blocks:
        for op in ("quantize", "quantize_dequantize", "dequantize"):
            for dt in (F32, F16, BF16):
                if dt != F32 and bname not in ("b_4x6_s2x3_b2x2", "b_last32_8x64_s8x2_b1x32", "b_lead_3x4x6_s2x3_b2x2"):
                    continue
                for variant in ("asym8", "sym4"):
                    for form in (("bw_kw", "qq_pos") if bname in ("b_4x6_s2x3_b2x2",) else ("bw_pos",)):
                        cid = f"{G}/blockwise/{op}/{DT_NAME[dt]}/{bname}/{variant}/{form}"
                        rng = np.random.default_rng(seed_of(cid))
                        b, signed = (8, False) if variant == "asym8" else (4, True)
                        qmin, qmax = qrange(bitwidth=b, signed=signed)
                        sc = torch.from_numpy(np.asarray(rng.uniform(0.01, 0.5, size=ss))).to(F32)
                        of = torch.from_numpy(np.asarray(-np.round(rng.uniform(0, 255, size=ss)) if not signed else np.zeros(ss))).to(F32)
                        se = expand_param(sc.numpy(), xs, bs)
                        oe = expand_param(of.numpy(), xs, bs)
                        if op == "dequantize":
                            x = torch.from_numpy(np.asarray(rng.integers(qmin, qmax + 1, size=xs).astype(np.float64))).to(dt)
                            args, kw = [], {"block_size": list(bs)}
                            if form == "bw_pos":
                                args = [list(bs)]
                                kw = {}
                        else:
                            x = make_input(cid, xs, dt, se, oe, qmin, qmax)
                            args, kw = grid_call(form, bitwidth=b, signed=signed, qmin=qmin, qmax=qmax, block_size=bs)
                        functional_case(st, cid, G, op, x, sc, of, args, kw, note="blockwise")
    # block_size with the num_steps form and keyword block_size
    for op in ("quantize", "quantize_dequantize"):
        cid = f"{G}/blockwise/{op}/num_steps_kw_block"
        xs, ss, bs = (4, 6), (2, 3), (2, 2)
        rng = np.random.default_rng(seed_of(cid))
        sc = torch.from_numpy(np.asarray(rng.uniform(0.01, 0.5, size=ss))).to(F32)
        of = torch.zeros(ss)
        x = make_input(cid, xs, F32, expand_param(sc.numpy(), xs, bs), expand_param(of.numpy(), xs, bs), -127, 127)
        functional_case(st, cid, G, op, x, sc, of, [], {"num_steps": 254, "signed": True, "block_size": [2, 2]},
                        note="blockwise, num_steps form")

    # --- degenerate parameters ------------------------------------------------------------------------
    scales = [("zero", 0.0), ("negzero", -0.0), ("tiny1e-30", 1e-30), ("sub1e-40", 1e-40), ("minsub", 2.0 ** -149),
              ("neg0.5", -0.5), ("neg0.37", -0.37), ("inf", math.inf), ("nan", math.nan), ("huge3e38", 3e38),
              ("1e-5", 1e-5), ("pow2", 2.0 ** -7), ("third", 1 / 3), ("0.1", 0.1), ("1/255", 1 / 255)]
    offsets = [("0", 0.0), ("m3.5", -3.5), ("m3.7", -3.7), ("2.3", 2.3), ("0.5", 0.5), ("m0.5", -0.5),
               ("m128", -128.0), ("out_m300", -300.0), ("out_20", 20.0), ("out_1e10", 1e10), ("m2.5", -2.5),
               ("nan", math.nan), ("negzero", -0.0)]
    for op in ("quantize", "quantize_dequantize", "dequantize"):
        for dt in (F32, F16, BF16):
            for sname, s in scales:
                for oname, o in offsets:
                    if dt != F32 and oname not in ("0", "m3.5", "out_m300"):
                        continue
                    if oname not in ("0", "m3.5", "m128") and sname not in ("0.1", "zero", "neg0.5", "pow2"):
                        continue
                    for gran_ in ("pt", "pc"):
                        if gran_ == "pc" and oname not in ("0", "m3.5", "out_m300", "out_20", "2.3", "m0.5"):
                            continue
                        cid = f"{G}/params/{op}/{DT_NAME[dt]}/s_{sname}/o_{oname}/{gran_}"
                        b, signed = 8, False
                        qmin, qmax = qrange(bitwidth=b, signed=signed)
                        if gran_ == "pt":
                            sc, of = t(s), t(o)
                            shape = (40,)
                        else:
                            sc = t([[s], [0.25], [s]])
                            of = t([[o], [-128.0], [0.0]])
                            shape = (3, 16)
                        se = expand_param(np.nan_to_num(sc.numpy().astype(np.float64), nan=0.1, posinf=0.1), shape, None)
                        se = np.where(se == 0, 0.1, se)
                        se = np.where(np.abs(se) < 1e-20, 1e-20, se)
                        oe = expand_param(np.nan_to_num(of.numpy().astype(np.float64), nan=0.0), shape, None)
                        if op == "dequantize":
                            rng = np.random.default_rng(seed_of(cid))
                            x = torch.from_numpy(np.asarray(rng.integers(qmin, qmax + 1, size=shape).astype(np.float64))).to(dt)
                            args = []
                        else:
                            x = make_input(cid, shape, dt, se, np.clip(oe, -1e6, 1e6), qmin, qmax)
                            args = [b, signed]
                        functional_case(st, cid, G, op, x, sc, of, args, {}, note="degenerate parameters")
    # scale/offset in the input's dtype (float16/bfloat16) and float64 parameters
    for op in ("quantize", "quantize_dequantize", "dequantize"):
        for dt in (F16, BF16, F32):
            for pdt in (F16, BF16, F64, F32):
                for b, signed in ((4, True), (8, False), (8, True), (16, False)):
                    for gran_ in ("pt", "pc"):
                        cid = f"{G}/param_dtype/{op}/x_{DT_NAME[dt]}/p_{DT_NAME[pdt]}/b{b}{'s' if signed else 'u'}/{gran_}"
                        rng = np.random.default_rng(seed_of(cid))
                        qmin, qmax = qrange(bitwidth=b, signed=signed)
                        if gran_ == "pt":
                            shape, ss = (48,), ()
                        else:
                            shape, ss = (4, 12), (4, 1)
                        sc = torch.from_numpy(np.asarray(rng.uniform(0.003, 0.4, size=ss))).to(pdt)
                        of = torch.from_numpy(np.asarray(np.zeros(ss) if signed else -np.round(rng.uniform(0, qmax, size=ss)))).to(pdt)
                        se = expand_param(sc.to(F64).numpy(), shape, None)
                        oe = expand_param(of.to(F64).numpy(), shape, None)
                        if op == "dequantize":
                            x = torch.from_numpy(np.asarray(rng.integers(qmin, qmax + 1, size=shape).astype(np.float64))).to(dt)
                            args = []
                        else:
                            x = make_input(cid, shape, dt, se, oe, qmin, qmax)
                            args = [b, signed]
                        functional_case(st, cid, G, op, x, sc, of, args, {}, note="parameter dtype")

    # --- inputs: specials and ties at several scales ---------------------------------------------------
    for op in ("quantize", "quantize_dequantize"):
        for dt in (F32, F16, BF16):
            for sname, s in (("0.1", 0.1), ("pow2", 0.25), ("1/255", 1 / 255), ("0.0123", 0.0123), ("3", 3.0),
                             ("0.003", 0.003), ("1e-3", 1e-3)):
                for b, signed, o in ((8, False, -128.0), (8, True, 0.0), (4, False, -3.0), (16, True, 0.0)):
                    for gran_ in ("pt", "pc"):
                        cid = f"{G}/inputs/{op}/{DT_NAME[dt]}/s_{sname}/b{b}{'s' if signed else 'u'}/{gran_}"
                        qmin, qmax = qrange(bitwidth=b, signed=signed)
                        if gran_ == "pt":
                            sc, of, shape = t(s), t(o), (96,)
                        else:
                            sc, of, shape = t([s, s * 1.5, s / 3]).reshape(1, 3), t([o, o, 0.0]).reshape(1, 3), (32, 3)
                        x = make_input(cid, shape, dt, expand_param(sc.to(F64).numpy(), shape, None),
                                       expand_param(of.to(F64).numpy(), shape, None), qmin, qmax)
                        functional_case(st, cid, G, op, x, sc, of, [b, signed], {}, note="ties, specials, beyond the grid")
    # exhaustive ties: x = s * (k + 0.5) for every k of a 4-bit grid, exact and +-1 ulp, several scales
    for op in ("quantize", "quantize_dequantize"):
        for dt in (F32, F16, BF16):
            for sname, s in (("0.1", 0.1), ("pow2", 0.125), ("1/255", 1 / 255), ("0.0123", 0.0123), ("7", 7.0)):
                for gran_ in ("pt", "pc"):
                    cid = f"{G}/ties/{op}/{DT_NAME[dt]}/s_{sname}/{gran_}"
                    ks = np.arange(-20, 21, dtype=np.float64) + 0.5
                    sd = torch.tensor(s, dtype=F32).to(F64).item()
                    base = torch.from_numpy(np.asarray(ks * sd)).to(dt)
                    x = torch.stack([base, ulp_step(base, 1), ulp_step(base, -1)])  # (3, 41)
                    if gran_ == "pt":
                        sc, of = t(s), t(-3.0)
                    else:
                        sc, of = t([s, s, s]).reshape(3, 1), t([-3.0, 0.0, 5.0]).reshape(3, 1)
                    functional_case(st, cid, G, op, x, sc, of, [-8, 7], {}, note="ties (k+0.5)*s and one ulp either side")
    # dequantize of special inputs
    for dt in (F32, F16, BF16):
        for sname, s, o in (("0.1", 0.1, -3.0), ("neg", -0.5, 2.5), ("zero", 0.0, 0.0), ("inf", math.inf, 0.0)):
            cid = f"{G}/inputs/dequantize/{DT_NAME[dt]}/s_{sname}"
            x = torch.cat([torch.tensor(specials(dt), dtype=F64).to(dt), nan_payloads(dt),
                           torch.arange(-5, 6, dtype=F64).to(dt)])
            functional_case(st, cid, G, "dequantize", x, t(s), t(o), [], {}, note="specials")


# ------------------------------------------------------------------------------------------------
# gradients (the training path: tensor, scale and offset all require grad)


def gen_grad(st: Store):
    G = "grad"
    grans = [
        ("pt_0d", (6, 8), (), None),
        ("pt_1", (6, 8), (1,), None),
        ("pc_first", (6, 8), (6, 1), None),
        ("pc_last", (6, 8), (8,), None),
        ("pc_middle_lead", (2, 3, 4), (3, 1), None),
        ("full", (6, 8), (6, 8), None),
        ("block", (6, 8), (3, 2), (2, 4)),
        ("block_lead", (2, 6, 8), (3, 2), (2, -1)),
    ]
    dtypes = [(F32, F32), (F16, F32), (BF16, F32), (F16, F16), (BF16, BF16), (F64, F32)]
    grids = [(8, False), (4, True), (16, False), (32, True), (2, False)]
    for op in ("quantize", "quantize_dequantize", "dequantize"):
        for gname, xs, ss, bs in grans:
            for xdt, pdt in dtypes:
                for b, signed in grids:
                    if (xdt, pdt) != (F32, F32) and (b, signed) not in ((8, False), (4, True)):
                        continue
                    cid = f"{G}/{op}/{gname}/x_{DT_NAME[xdt]}/p_{DT_NAME[pdt]}/b{b}{'s' if signed else 'u'}"
                    rng = np.random.default_rng(seed_of(cid))
                    qmin, qmax = qrange(bitwidth=b, signed=signed)
                    sc = torch.from_numpy(np.asarray(rng.uniform(0.01, 0.5, size=ss) * (2.0 ** -(b - 8) if b > 8 else 1))).to(pdt)
                    of = torch.from_numpy(np.asarray(np.zeros(ss) if signed else -np.round(rng.uniform(0, qmax, size=ss)))).to(pdt)
                    se = expand_param(sc.to(F64).numpy(), xs, bs)
                    oe = expand_param(of.to(F64).numpy(), xs, bs)
                    if op == "dequantize":
                        x = torch.from_numpy(np.asarray(rng.integers(qmin, qmax + 1, size=xs).astype(np.float64))).to(xdt)
                        args, kw = [], ({"block_size": list(bs)} if bs else {})
                    else:
                        x = make_input(cid, xs, xdt, se, oe, qmin, qmax)
                        args, kw = [b, signed], ({"block_size": list(bs)} if bs else {})
                    functional_case(st, cid, G, op, x, sc, of, args, kw, grad=True, note="training path")
    # degenerate parameters on the training path
    degen = [("s_zero", 0.0, -128.0), ("s_neg", -0.5, -100.0), ("o_frac", 0.1, -3.5), ("o_out", 0.1, -300.0),
             ("o_out_pos", 0.1, 20.0), ("s_nan", math.nan, 0.0), ("s_inf", math.inf, 0.0), ("s_tiny", 1e-30, -128.0)]
    for op in ("quantize", "quantize_dequantize", "dequantize"):
        for dname, s, o in degen:
            for gran_ in ("pt", "pc"):
                cid = f"{G}/{op}/degenerate/{dname}/{gran_}"
                rng = np.random.default_rng(seed_of(cid))
                qmin, qmax = 0, 255
                if gran_ == "pt":
                    sc, of, shape = t(s), t(o), (40,)
                else:
                    sc, of, shape = t([[s], [0.25]]), t([[o], [-128.0]]), (2, 20)
                if op == "dequantize":
                    x = torch.from_numpy(np.asarray(rng.integers(qmin, qmax + 1, size=shape).astype(np.float64))).to(F32)
                    args = []
                else:
                    se = np.full(shape, 0.1)
                    x = make_input(cid, shape, F32, se, np.full(shape, -128.0), qmin, qmax)
                    args = [8, False]
                functional_case(st, cid, G, op, x, sc, of, args, {}, grad=True, note="training path, degenerate parameters")
    # the other overload forms on the training path
    for op in ("quantize", "quantize_dequantize"):
        for fname, args, kw in (("num_steps", [], {"num_steps": 254, "signed": True}), ("qq", [-8, 7], {}),
                                ("qq_kw", [], {"qmin": 0, "qmax": 15}), ("qq_odd", [-100, 37], {})):
            cid = f"{G}/{op}/overload/{fname}"
            qmin, qmax = A.backends._parse_args(tuple(args), dict(kw))[:2]
            sc, of = t([[0.05], [0.3]]), t([[-2.0], [1.0]])
            shape = (2, 24)
            x = make_input(cid, shape, F32, expand_param(sc.numpy(), shape, None), expand_param(of.numpy(), shape, None),
                           qmin, qmax)
            functional_case(st, cid, G, op, x, sc, of, args, kw, grad=True, note="training path, overloads")


# ------------------------------------------------------------------------------------------------
# objects (quantizers, analyzers) described as JSON so the test can rebuild them

QUANTIZERS = {"Quantize": A.Quantize, "QuantizeDequantize": A.QuantizeDequantize,
              "GroupedBlockQuantizeDequantize": A.GroupedBlockQuantizeDequantize}
ANALYZERS = {"MinMaxEncodingAnalyzer": EA.MinMaxEncodingAnalyzer,
             "PercentileEncodingAnalyzer": EA.PercentileEncodingAnalyzer,
             "SqnrEncodingAnalyzer": EA.SqnrEncodingAnalyzer,
             "TfEnhancedEncodingAnalyzer": EA.TfEnhancedEncodingAnalyzer}


def build(spec: dict):
    """spec = {"class": name, "args": [...], "kwargs": {...}}; an analyzer argument is itself a spec;
    lists under block_size / block_grouping / shape become tuples."""
    def conv(k, v):
        if isinstance(v, dict) and "class" in v:
            return build(v)
        if k in ("block_size", "block_grouping", "shape") and isinstance(v, list):
            return tuple(v)
        return v
    cls = QUANTIZERS.get(spec["class"]) or ANALYZERS[spec["class"]]
    args = [conv("shape" if i == 0 else "", a) for i, a in enumerate(spec.get("args", []))]
    args = [tuple(a) if isinstance(a, list) else a for a in args]
    kwargs = {k: conv(k, v) for k, v in spec.get("kwargs", {}).items()}
    return cls(*args, **kwargs)


def error_case(st: Store, cid: str, param: str, steps: list, note: str = ""):
    """A sequence of steps on one object; records the first exception (or that none came)."""
    case = {"id": cid, "group": "errors", "kind": "steps", "param": param, "note": note, "steps": []}
    obj = None
    try:
        for i, stp in enumerate(steps):
            d = {k: v for k, v in stp.items() if not isinstance(v, torch.Tensor)}
            for k, v in stp.items():
                if isinstance(v, torch.Tensor):
                    d[k] = st.arr(cid, f"step{i}_{k}", v)
            case["steps"].append(d)
            do = stp["do"]
            if do == "construct":
                obj = build(stp["spec"])
            elif do == "set":
                with torch.no_grad():
                    getattr(obj, stp["attr"]).copy_(stp["value"])
            elif do == "call":
                with torch.no_grad():
                    obj(stp["x"])
            elif do == "update_stats":
                obj.update_stats(stp["x"])
            elif do == "compute_encodings":
                obj.compute_encodings(stp["num_steps"], stp["is_symmetric"])
            elif do == "calibrate":
                with obj.compute_encodings():
                    obj(stp["x"])
            elif do == "get_encodings":
                enc = obj.get_encodings()
                if "input_shape" in stp:
                    enc._hint_input_shape(tuple(stp["input_shape"]))
                enc.to_qnn_encoding_dict(stp["encoding_version"])
            else:
                raise ValueError(do)
        case["outcome"] = "ok"
    except Exception as e:  # noqa: BLE001
        case["outcome"] = "error"
        case["error"] = err_record(e)
        case["error_step"] = len(case["steps"]) - 1
    st.add(case)


def gen_errors(st: Store):
    G = "errors"
    RANGE = ["bitwidth", "qmin", "qmax", "range"]
    x46 = torch.linspace(-2, 2, 24).reshape(4, 6)
    # functional
    fcases = [
        ("block_not_dividing_m1", "block_size", "quantize_dequantize", x46, torch.full((2, 4), 0.1), torch.zeros(2, 4), [8], {"block_size": [2, -1]}),
        ("block_product_mismatch", "block_size", "quantize", x46, torch.full((2, 3), 0.1), torch.zeros(2, 3), [8], {"block_size": [2, 3]}),
        ("block_len_mismatch", "block_size", "quantize", x46, torch.full((2, 3), 0.1), torch.zeros(2, 3), [8], {"block_size": [2]}),
        ("block_dequantize_mismatch", "block_size", "dequantize", x46, torch.full((2, 3), 0.1), torch.zeros(2, 3), [], {"block_size": [3, 2]}),
        ("block_offset_shape", ["offset", "shape"], "quantize", x46, torch.full((2, 3), 0.1), torch.zeros(3, 2), [8], {"block_size": [2, 2]}),
        ("scale_not_expandable", "scale", "quantize", x46, torch.full((4,), 0.1), torch.zeros(4), [8], {}),
        ("scale_not_expandable_qdq", "scale", "quantize_dequantize", x46, torch.full((4,), 0.1), torch.zeros(4), [8], {}),
        ("scale_rank_above_input", "scale", "quantize_dequantize", torch.linspace(-1, 1, 6), torch.full((1, 6), 0.1), torch.zeros(1, 6), [8], {}),
        ("scale_not_expandable_dq", "scale", "dequantize", x46, torch.full((5,), 0.1), torch.zeros(5), [], {}),
        ("offset_not_broadcastable", "offset", "quantize", x46, torch.full((6,), 0.1), torch.zeros(4), [8], {}),
        ("offset_not_broadcastable_qdq", "offset", "quantize_dequantize", x46, torch.full((6,), 0.1), torch.zeros(4), [8], {}),
        ("bitwidth_64_quantize", RANGE, "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [64], {}),
        ("bitwidth_64_qdq", RANGE, "quantize_dequantize", x46, torch.tensor(0.1), torch.tensor(0.0), [64], {}),
        ("bitwidth_64_qdq_pc", RANGE, "quantize_dequantize", x46, torch.full((4, 1), 0.1), torch.zeros(4, 1), [64], {}),
        ("bitwidth_25_quantize_f32", RANGE, "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [25], {}),
        ("bitwidth_12_quantize_f16", RANGE, "quantize", x46.half(), torch.tensor(0.1), torch.tensor(0.0), [12], {}),
        ("bitwidth_9_quantize_bf16", RANGE, "quantize", x46.bfloat16(), torch.tensor(0.1), torch.tensor(0.0), [9], {}),
        ("bitwidth_float_quantize", "bitwidth", "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [8.0], {}),
        ("bitwidth_float_qdq", "bitwidth", "quantize_dequantize", x46, torch.tensor(0.1), torch.tensor(0.0), [8.0], {}),
        ("bitwidth_float_qdq_pc", "bitwidth", "quantize_dequantize", x46, torch.full((4, 1), 0.1), torch.zeros(4, 1), [8.0], {}),
        ("bitwidth_float_qdq_block", "bitwidth", "quantize_dequantize", x46, torch.full((2, 3), 0.1), torch.zeros(2, 3), [8.0], {"block_size": [2, 2]}),
        ("bitwidth_negative", RANGE, "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [-1], {}),
        ("qmin_above_qmax", ["qmin", "qmax"], "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [5, 3], {}),
        ("qmin_above_qmax_qdq", ["qmin", "qmax"], "quantize_dequantize", x46, torch.tensor(0.1), torch.tensor(0.0), [], {"qmin": 5, "qmax": 3}),
        ("num_steps_without_signed", "signed", "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [], {"num_steps": 15}),
        ("num_steps_without_signed_qdq", "signed", "quantize_dequantize", x46, torch.tensor(0.1), torch.tensor(0.0), [], {"num_steps": 15}),
        ("no_grid_arguments", ["bitwidth", "num_steps", "qmin"], "quantize", x46, torch.tensor(0.1), torch.tensor(0.0), [], {}),
        ("int_input_quantize", ["tensor", "dtype"], "quantize", torch.arange(24, dtype=torch.int32).reshape(4, 6), torch.tensor(0.1), torch.tensor(0.0), [8], {}),
        ("int_input_qdq", ["tensor", "dtype"], "quantize_dequantize", torch.arange(24, dtype=torch.int32).reshape(4, 6), torch.tensor(0.1), torch.tensor(0.0), [8], {}),
    ]
    for name, param, op, x, s, o, args, kw in fcases:
        functional_case(st, f"{G}/{name}", G, op, x, s, o, args, kw, note="bad input", extra={"kind": "functional", "param": param})
    # quantizers
    Q = lambda cls, *a, **k: {"class": cls, "args": list(a), "kwargs": k}  # noqa: E731
    xq = torch.linspace(-1, 1, 24).reshape(4, 6)
    for cls in ("Quantize", "QuantizeDequantize"):
        error_case(st, f"{G}/{cls}/uninitialized_forward", "compute_encodings",
                   [{"do": "construct", "spec": Q(cls, [1], 8, False)}, {"do": "call", "x": xq}])
        error_case(st, f"{G}/{cls}/qmin_eq_qmax", "qmax",
                   [{"do": "construct", "spec": Q(cls, [1], qmin=3, qmax=3, symmetric=False)}])
        error_case(st, f"{G}/{cls}/qmin_above_qmax", "qmax",
                   [{"do": "construct", "spec": Q(cls, [1], 10, 3, False)}])
        error_case(st, f"{G}/{cls}/missing_symmetric", "symmetric",
                   [{"do": "construct", "spec": Q(cls, [1], 8)}])
        error_case(st, f"{G}/{cls}/missing_symmetric_qq", "symmetric",
                   [{"do": "construct", "spec": Q(cls, [1], qmin=0, qmax=255)}])
        error_case(st, f"{G}/{cls}/unexpected_kwarg", "foo",
                   [{"do": "construct", "spec": Q(cls, [1], 8, False, foo=1)}])
        error_case(st, f"{G}/{cls}/shape_vs_input", "shape",
                   [{"do": "construct", "spec": Q(cls, [3], 8, False)},
                    {"do": "set", "attr": "min", "value": torch.full((3,), -1.0)},
                    {"do": "set", "attr": "max", "value": torch.full((3,), 1.0)},
                    {"do": "call", "x": xq}])
        error_case(st, f"{G}/{cls}/block_vs_input", "block_size",
                   [{"do": "construct", "spec": Q(cls, [2, 3], 8, False, block_size=[2, 2])},
                    {"do": "set", "attr": "min", "value": torch.full((2, 3), -1.0)},
                    {"do": "set", "attr": "max", "value": torch.full((2, 3), 1.0)},
                    {"do": "call", "x": torch.linspace(-1, 1, 20).reshape(4, 5)}])
        error_case(st, f"{G}/{cls}/calibrate_shape_vs_input", "shape",
                   [{"do": "construct", "spec": Q(cls, [3], 8, False)}, {"do": "calibrate", "x": xq}])
        error_case(st, f"{G}/{cls}/analyzer_shape_mismatch", "encoding_analyzer",
                   [{"do": "construct", "spec": Q(cls, [4, 1], 8, False,
                                                   encoding_analyzer=Q("MinMaxEncodingAnalyzer", [3, 1]))}])
        error_case(st, f"{G}/{cls}/bitwidth_0", "bitwidth",
                   [{"do": "construct", "spec": Q(cls, [1], 0, False)}])
        error_case(st, f"{G}/{cls}/encodings_no_input_shape_pc", "input_shape",
                   [{"do": "construct", "spec": Q(cls, [4, 1], 8, False)},
                    {"do": "set", "attr": "min", "value": torch.full((4, 1), -1.0)},
                    {"do": "set", "attr": "max", "value": torch.full((4, 1), 1.0)},
                    {"do": "get_encodings", "encoding_version": "2.0.0"}])
        error_case(st, f"{G}/{cls}/encodings_bad_version", "encoding_version",
                   [{"do": "construct", "spec": Q(cls, [1], 8, False)},
                    {"do": "set", "attr": "min", "value": torch.full((1,), -1.0)},
                    {"do": "set", "attr": "max", "value": torch.full((1,), 1.0)},
                    {"do": "get_encodings", "encoding_version": "0.5.0"}])
    GB = "GroupedBlockQuantizeDequantize"
    error_case(st, f"{G}/{GB}/asymmetric", "symmetric",
               [{"do": "construct", "spec": Q(GB, [4, 2], 4, False, 8, block_size=[1, 4], block_grouping=[1, 2])}])
    error_case(st, f"{G}/{GB}/decompressed_below_bitwidth", "decompressed_bw",
               [{"do": "construct", "spec": Q(GB, [4, 2], 8, True, 4, block_size=[1, 4], block_grouping=[1, 2])}])
    error_case(st, f"{G}/{GB}/grouping_length", "block_grouping",
               [{"do": "construct", "spec": Q(GB, [4, 2], 4, True, 8, block_size=[1, 4], block_grouping=[2])}])
    error_case(st, f"{G}/{GB}/grouping_not_dividing", "block_grouping",
               [{"do": "construct", "spec": Q(GB, [4, 3], 4, True, 8, block_size=[1, 4], block_grouping=[1, 2])}])
    # analyzers
    for an in ANALYZERS:
        shape_kw = {} if an == "TfEnhancedEncodingAnalyzer" else {}
        error_case(st, f"{G}/{an}/no_stats", "update_stats",
                   [{"do": "construct", "spec": Q(an, [1], **shape_kw)},
                    {"do": "compute_encodings", "num_steps": 255, "is_symmetric": False}])
        for ns in (0, -1):
            error_case(st, f"{G}/{an}/num_steps_{ns}", "num_steps",
                       [{"do": "construct", "spec": Q(an, [1])}, {"do": "update_stats", "x": xq},
                        {"do": "compute_encodings", "num_steps": ns, "is_symmetric": False}])
        error_case(st, f"{G}/{an}/shape_vs_input", "shape",
                   [{"do": "construct", "spec": Q(an, [5])}, {"do": "update_stats", "x": xq}])
        error_case(st, f"{G}/{an}/all_nonfinite", "input",
                   [{"do": "construct", "spec": Q(an, [1])},
                    {"do": "update_stats", "x": torch.tensor([math.nan, math.inf, -math.inf, math.nan])}])
        error_case(st, f"{G}/{an}/block_not_dividing", "block_size",
                   [{"do": "construct", "spec": Q(an, [2, 4], block_size=[2, -1])}, {"do": "update_stats", "x": xq}])
    for p in (49.9, 100.1, 0, -5, 101):
        error_case(st, f"{G}/PercentileEncodingAnalyzer/percentile_{p}", "percentile",
                   [{"do": "construct", "spec": Q("PercentileEncodingAnalyzer", [1], percentile=p)}])
    for an in ("PercentileEncodingAnalyzer", "SqnrEncodingAnalyzer"):
        error_case(st, f"{G}/{an}/num_bins_0", "num_bins",
                   [{"do": "construct", "spec": Q(an, [1], num_bins=0)}])
    error_case(st, f"{G}/SqnrEncodingAnalyzer/growth_limit_below_1", "histogram_growth_limit",
               [{"do": "construct", "spec": Q("SqnrEncodingAnalyzer", [1], histogram_growth_limit=0.5)}])


# ------------------------------------------------------------------------------------------------


def machine_description(load=False):
    info = {"nproc": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "machine": platform.machine()}
    try:
        txt = Path("/proc/cpuinfo").read_text()
        model = [ln.split(":", 1)[1].strip() for ln in txt.splitlines() if ln.startswith("model name")]
        flags = [ln.split(":", 1)[1].split() for ln in txt.splitlines() if ln.startswith("flags")]
        info["cpu_model"] = model[0] if model else None
        fl = set(flags[0]) if flags else set()
        info["cpu_flags"] = {k: (k in fl) for k in ["avx2", "fma", "avx512f", "avx512bw", "avx512vl"]}
    except OSError:
        pass
    try:
        info["mem_total_kib"] = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        pass
    if load:
        try:
            info["loadavg"] = list(os.getloadavg())
        except OSError:
            pass
    return info


def versions():
    from importlib.metadata import version as v

    out = {"python": platform.python_version()}
    for d in ("aimet-torch", "torch", "numpy", "ml_dtypes"):
        try:
            out[d] = v(d)
        except Exception:  # noqa: BLE001
            out[d] = None
    out["torch.__version__"] = torch.__version__
    out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out


GROUPS = {"functional": gen_functional, "grad": gen_grad, "errors": gen_errors}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--only", default=None, help="comma-separated groups (default: all)")
    ap.add_argument("--timings-only", action="store_true")
    ap.add_argument("--timing-reps", type=int, default=5)
    args = ap.parse_args()
    if args.timings_only:
        timings(HERE / "peer_timings.json", args.timing_reps)
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    st = Store()
    groups = args.only.split(",") if args.only else list(GROUPS)
    for g in groups:
        t0 = time.time()
        n0 = len(st.cases)
        GROUPS[g](st)
        print(f"{g}: {len(st.cases) - n0} cases in {time.time() - t0:.1f} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for c in st.cases:
        k = c["group"]
        counts.setdefault(k, {"cases": 0, "errors": 0})
        counts[k]["cases"] += 1
        counts[k]["errors"] += c.get("outcome") == "error"
    header = {
        "generator": "scripts/aimet_golden/generate.py",
        "versions": versions(),
        "machine": machine_description(),
        "torch_threads": torch.get_num_threads(),
        "storage": {"arrays": "arrays.npz holds one flat array per stored dtype, 'pool_<dtype>'; an array spec "
                              "{dtype, shape, pool, start} is pool_<pool>[start:start+prod(shape)].reshape(shape); "
                              "bfloat16 is kept as its uint16 bit pattern in pool_bfloat16; float16 as float16, "
                              "float32/float64 as is, bool as bool",
                    "non_finite_json_floats": "{\"float\": \"nan\" | \"inf\" | \"-inf\"} inside encodings dicts"},
        "counts": counts,
    }
    with open(out / "index.json", "w") as f:
        f.write("{\n")
        for k, v in header.items():
            f.write(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)},\n")
        f.write(' "cases": [\n')
        for i, c in enumerate(st.cases):
            f.write("  " + json.dumps(c, sort_keys=True, allow_nan=False) + ("," if i + 1 < len(st.cases) else "") + "\n")
        f.write(" ]\n}\n")
    arrays = st.arrays()
    write_npz(out / "arrays.npz", arrays)
    sz = (out / "index.json").stat().st_size, (out / "arrays.npz").stat().st_size
    print(f"wrote {len(st.cases)} cases, {sum(st.sizes.values())} elements in {len(arrays)} pools; index.json {sz[0]} B, arrays.npz {sz[1]} B")
    print(json.dumps(counts))


def timings(path, reps):
    raise SystemExit("timings: not written yet")


if __name__ == "__main__":
    main()
