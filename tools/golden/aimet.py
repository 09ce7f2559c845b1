"""Golden data for polyquant.aimet, produced by aimet-torch 2.42.0 itself (CPU).

Usage (from the repository root, in the reference virtual environment; docs/golden-data.md#aimet):

    python -m tools.golden.aimet [--out DIR] [--only GROUP[,GROUP...]]
    python -m tools.golden.aimet --timings-only [--timing-reps N]

Writes ``index.json`` (one JSON object per case) and ``arrays.npz`` (every tensor, stored exactly)
into ``tests/data/aimet/`` (or ``--out``). Every case is run through aimet-torch's public API
(``aimet_torch.quantization.affine`` and ``aimet_torch.quantization.encoding_analyzer``); the result
(arrays, JSON) or the exception raised (class name and message) is recorded.

With ``--timings-only`` it measures aimet-torch's speed on 64 Mi float32 elements instead and writes
``tools/golden/speed/aimet_peer_timings.json``.
"""

from __future__ import annotations

if not __package__:  # run as a script, tools/golden would shadow the reference's own packages
    raise SystemExit("run from the repository root: python -m tools.golden.aimet")

import argparse
import json
import math
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from .common import SPEED, data_dir, dist_version, machine_description, seed_of, write_npz

DEFAULT_OUT = data_dir("aimet")

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
    an array spec is [dtype, shape, start]: pool_<dtype>[start : start + prod(shape)].reshape(shape)."""

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
        return [dt, list(a.shape), start]

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


def err_record(e: BaseException) -> dict:
    return {"class": type(e).__name__, "message": str(e)}


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
                    grad_output_seed: str | None = None, extra: dict | None = None,
                    grad_output: torch.Tensor | None = None):
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
    if grad_output is not None:  # given by the case (the random draw above still runs: same stream)
        go = grad_output
    elif go.numel() >= 8:  # signed zeros in grad_output
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


def gen_grad_zero_sign(st: Store):
    """Appended after every other group (issue 17), so the earlier cases and their array pools stay
    byte for byte: the sign of zero of the reduced gradients grad_scale / grad_offset. 1-bit grids,
    x on the grid and half-way and a grad_output of -1, -0.5 or 0.5 (every term and every sum exact
    in any order), so many terms are -0.0: a scale element with one contribution (per-element
    scales, blocks of one), several (per channel, per tensor), and none (an empty tensor)."""
    G = "grad"
    layouts = [("full", (6, 8), (6, 8), None), ("block_of_one", (6, 8), (6, 8), (1, 1)),
               ("pc_first", (6, 8), (6, 1), None), ("pc_last", (6, 8), (8,), None), ("pt_0d", (6, 8), (), None),
               ("empty_rows", (0, 8), (1, 8), None), ("empty_pt", (0, 8), (), None),
               ("full_1d", (4,), (4,), None), ("lead_1", (1, 4), (4,), None), ("empty_lead", (0, 4), (4,), None),
               ("block_of_one_lead", (3, 2, 4), (2, 4), (1, 1)), ("block_1x2", (2, 4), (2, 2), (1, 2)),
               ("scalar", (), (), None), ("full_col", (4, 1), (4, 1), None), ("pc_col", (4, 3), (4, 1), None)]
    for op in ("quantize", "quantize_dequantize"):
        for gname, xs, ss, bs in layouts:
            for xdt in (F32, F16):
                for signed in (False, True):
                    cid = f"{G}/zero_sign/{op}/{gname}/x_{DT_NAME[xdt]}/b1{'s' if signed else 'u'}"
                    rng = np.random.default_rng(seed_of(cid))
                    x = torch.from_numpy(np.asarray(rng.integers(-3, 4, size=xs) * 0.5)).to(xdt)
                    go = torch.from_numpy(np.asarray(rng.choice([-1.0, -0.5, 0.5], size=xs))).to(xdt)
                    sc = torch.full(ss, 0.5, dtype=F32)
                    of = torch.from_numpy(np.asarray(rng.integers(-1, 1, size=ss).astype(np.float64))).to(F32)
                    kw = {"block_size": list(bs)} if bs else {}
                    functional_case(st, cid, G, op, x, sc, of, [1, signed], kw, grad=True,
                                    note="training path, sign of zero of reduced gradients", grad_output=go)


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
        error_case(st, f"{G}/{cls}/uninitialized_forward", ["initialized", "compute_encodings"],
                   [{"do": "construct", "spec": Q(cls, [1], 8, False)}, {"do": "call", "x": xq}])
        error_case(st, f"{G}/{cls}/qmin_eq_qmax", ["qmin", "qmax"],
                   [{"do": "construct", "spec": Q(cls, [1], qmin=3, qmax=3, symmetric=False)}])
        error_case(st, f"{G}/{cls}/qmin_above_qmax", ["qmin", "qmax"],
                   [{"do": "construct", "spec": Q(cls, [1], 10, 3, False)}])
        error_case(st, f"{G}/{cls}/missing_symmetric", "symmetric",
                   [{"do": "construct", "spec": Q(cls, [1], 8)}])
        error_case(st, f"{G}/{cls}/missing_symmetric_qq", "symmetric",
                   [{"do": "construct", "spec": Q(cls, [1], qmin=0, qmax=255)}])
        error_case(st, f"{G}/{cls}/unexpected_kwarg", "foo",
                   [{"do": "construct", "spec": Q(cls, [1], 8, False, foo=1)}])
        error_case(st, f"{G}/{cls}/shape_vs_input", ["shape", "scale"],
                   [{"do": "construct", "spec": Q(cls, [3], 8, False)},
                    {"do": "set", "attr": "min", "value": torch.full((3,), -1.0)},
                    {"do": "set", "attr": "max", "value": torch.full((3,), 1.0)},
                    {"do": "call", "x": xq}])
        error_case(st, f"{G}/{cls}/block_vs_input", "block_size",
                   [{"do": "construct", "spec": Q(cls, [2, 3], 8, False, block_size=[2, 2])},
                    {"do": "set", "attr": "min", "value": torch.full((2, 3), -1.0)},
                    {"do": "set", "attr": "max", "value": torch.full((2, 3), 1.0)},
                    {"do": "call", "x": torch.linspace(-1, 1, 20).reshape(4, 5)}])
        error_case(st, f"{G}/{cls}/calibrate_shape_vs_input", ["shape"],
                   [{"do": "construct", "spec": Q(cls, [3], 8, False)}, {"do": "calibrate", "x": xq}])
        error_case(st, f"{G}/{cls}/analyzer_shape_mismatch", "encoding_analyzer",
                   [{"do": "construct", "spec": Q(cls, [4, 1], 8, False,
                                                   encoding_analyzer=Q("MinMaxEncodingAnalyzer", [3, 1]))}])
        error_case(st, f"{G}/{cls}/bitwidth_0", ["bitwidth", "qmin", "qmax"],
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
        error_case(st, f"{G}/{an}/no_stats", ["statistics", "update_stats"],
                   [{"do": "construct", "spec": Q(an, [1], **shape_kw)},
                    {"do": "compute_encodings", "num_steps": 255, "is_symmetric": False}])
        for ns in (0, -1):
            error_case(st, f"{G}/{an}/num_steps_{ns}", "num_steps",
                       [{"do": "construct", "spec": Q(an, [1])}, {"do": "update_stats", "x": xq},
                        {"do": "compute_encodings", "num_steps": ns, "is_symmetric": False}])
        error_case(st, f"{G}/{an}/shape_vs_input", "shape",
                   [{"do": "construct", "spec": Q(an, [5])}, {"do": "update_stats", "x": xq}])
        error_case(st, f"{G}/{an}/all_nonfinite", ["finite", "nan", "inf"],
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
# quantizer modules, LPBQ and their encodings

ENC_VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")


def _maybe(st, cid, name, t):
    return None if t is None else st.arr(cid, name, t)


def record_encodings(q, input_shape) -> dict:
    out = {"input_shape": list(input_shape)}
    try:
        out["legacy"] = json_safe(q.get_legacy_encodings())
    except Exception as e:  # noqa: BLE001
        out["legacy_error"] = err_record(e)
    qnn = {}
    for v in ENC_VERSIONS:
        for hint in (True, False):
            key = f"{v}/{'input_shape' if hint else 'no_input_shape'}"
            try:
                enc = q.get_encodings()
                if enc is None:
                    r = {"result": None}
                else:
                    if hint:
                        enc._hint_input_shape(tuple(input_shape))
                    r = {"result": json_safe(enc.to_qnn_encoding_dict(v))}
            except Exception as e:  # noqa: BLE001
                r = {"error": err_record(e)}
            if not hint and r == qnn[f"{v}/input_shape"]:
                r = {"same_as": f"{v}/input_shape"}
            qnn[key] = r
    out["qnn"] = qnn
    return out


def record_state(st: Store, cid: str, q, tag: str) -> dict:
    d = {"is_initialized": bool(q.is_initialized())}
    for nm in ("get_scale", "get_offset", "get_min", "get_max", "get_per_channel_scale"):
        if not hasattr(q, nm):
            continue
        try:
            with torch.no_grad():
                v = getattr(q, nm)()
            d[nm] = _maybe(st, cid, f"{tag}_{nm}", v)
        except Exception as e:  # noqa: BLE001
            d[nm + "_error"] = err_record(e)
    d["min"] = st.arr(cid, f"{tag}_min", q.min.detach())
    d["max"] = st.arr(cid, f"{tag}_max", q.max.detach())
    return d


def record_forward(st: Store, cid: str, q, x: torch.Tensor, tag: str) -> dict:
    d = {"x": st.arr(cid, f"{tag}_x", x)}
    _PATH_LOG.clear()
    try:
        with torch.no_grad():
            y = q(x.clone())
        d["output_no_grad"] = st.arr(cid, f"{tag}_out_nograd", y)
        d["path_no_grad"] = _path_from_log(_PATH_LOG) if isinstance(q, A.QuantizeDequantize) else "reference"
    except Exception as e:  # noqa: BLE001
        d["output_no_grad_error"] = err_record(e)
    _PATH_LOG.clear()
    try:
        y = q(x.clone())
        d["output_train"] = st.arr(cid, f"{tag}_out_train", y)
        d["path_train"] = _path_from_log(_PATH_LOG) if isinstance(q, A.QuantizeDequantize) else "reference"
    except Exception as e:  # noqa: BLE001
        d["output_train_error"] = err_record(e)
    return d


def module_case(st: Store, cid: str, group: str, spec: dict, x_shape, minmax=None, batches=None,
                block_size=None, note="", encodings=True, dtypes=(F32, F16, BF16)):
    case = {"id": cid, "group": group, "spec": spec, "note": note}
    try:
        q = build(spec)
    except Exception as e:  # noqa: BLE001
        case["outcome"] = "error"
        case["error"] = err_record(e)
        st.add(case)
        return case
    case["initialized_at_start"] = bool(q.is_initialized())
    if minmax is not None:
        mn, mx = minmax
        case["set_min"] = st.arr(cid, "set_min", mn)
        with torch.no_grad():
            q.min.copy_(mn)
        case["initialized_after_min"] = bool(q.is_initialized())
        case["set_max"] = st.arr(cid, "set_max", mx)
        with torch.no_grad():
            q.max.copy_(mx)
    if batches is not None:
        cal = [{"x": st.arr(cid, f"cal{i}_x", b)} for i, b in enumerate(batches)]
        case["calibration"] = cal
        i = 0
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always")
            try:
                with q.compute_encodings():
                    for i, b in enumerate(batches):
                        _PATH_LOG.clear()
                        y = q(b.clone())
                        cal[i]["output"] = st.arr(cid, f"cal{i}_out", y)
                        cal[i]["path"] = _path_from_log(_PATH_LOG) if isinstance(q, A.QuantizeDequantize) else "reference"
                    i = len(batches)  # leaving the context computes the encodings
            except Exception as e:  # noqa: BLE001
                case["calibration_error"] = err_record(e)
                case["calibration_error_at"] = i  # batch index, or len(batches): on leaving the context
        # AIMET warns on leaving compute_encodings() when the range is non-finite or near float max
        case["calibration_warnings"] = [{"category": w.category.__name__, "message": str(w.message)} for w in wlist]
    case["state"] = record_state(st, cid, q, "state")
    # an input exercising the grid: ties, edges, specials, from the quantizer's own scale/offset
    try:
        with torch.no_grad():
            sc = q.get_scale()
            of = q.get_offset()
        se = expand_param(torch.nan_to_num(sc.to(F64), nan=0.1, posinf=0.1).numpy(), x_shape, block_size)
        oe = expand_param(torch.nan_to_num(of.to(F64), nan=0.0).numpy(), x_shape, block_size)
        se = np.where((se == 0) | ~np.isfinite(se), 0.1, se)
        oe = np.clip(oe, -1e6, 1e6)
    except Exception:  # noqa: BLE001
        se, oe = np.full(x_shape, 0.1), np.zeros(x_shape)
    qmin, qmax = q.qmin, q.qmax
    fwd = []
    for j, dt in enumerate(dtypes):
        x = make_input(f"{cid}/x{DT_NAME[dt]}", x_shape, dt, se, oe, qmin, qmax)
        fwd.append(record_forward(st, cid, q, x, f"fwd{j}"))
    case["forward"] = fwd
    if encodings:
        case["encodings"] = record_encodings(q, x_shape)
    case["outcome"] = "ok"
    st.add(case)
    return case


def _minmax_setting(name: str, rng, shape):
    n = int(np.prod(shape)) if shape else 1
    def fill(lo, hi):
        return np.full(n, lo, np.float64), np.full(n, hi, np.float64)
    if name == "random":
        mn, mx = -rng.uniform(0.1, 3, n), rng.uniform(0.1, 3, n)
    elif name == "zero":
        mn, mx = fill(0.0, 0.0)
    elif name == "equal_pos":
        mn, mx = fill(0.5, 0.5)
    elif name == "equal_neg":
        mn, mx = fill(-0.75, -0.75)
    elif name == "min_above_max":
        mn, mx = fill(1.0, -1.0)
    elif name == "min_above_max_pos":
        mn, mx = fill(2.0, 0.5)
    elif name == "inf":
        mn, mx = fill(-math.inf, math.inf)
    elif name == "inf_max":
        mn, mx = fill(-1.0, math.inf)
    elif name == "positive":
        mn, mx = fill(0.2, 0.9)
    elif name == "negative":
        mn, mx = fill(-0.9, -0.2)
    elif name == "tiny":
        mn, mx = fill(-1e-9, 2e-9)
    elif name == "huge":
        mn, mx = fill(-1e38, 3e38)
    elif name == "nan":
        mn, mx = fill(math.nan, 1.0)
    elif name == "asym_offset_edge":
        mn, mx = fill(-0.001, 10.0)
    elif name == "mixed":
        opts = ["random", "zero", "equal_pos", "min_above_max", "inf", "positive", "negative", "tiny", "huge",
                "random", "asym_offset_edge", "equal_neg"]
        mn, mx = np.empty(n), np.empty(n)
        for i in range(n):
            a, b = _minmax_setting(opts[i % len(opts)], rng, ())
            mn[i], mx[i] = float(a), float(b)
    else:
        raise ValueError(name)
    return (torch.from_numpy(np.asarray(mn.reshape(shape))).to(F32), torch.from_numpy(np.asarray(mx.reshape(shape))).to(F32))


def _batches(cid, x_shape, n=3, dt=F32, specials_in_last=False):
    rng = np.random.default_rng(seed_of(cid + "/batches"))
    out = []
    for i in range(n):
        scale = [1.0, 3.0, 0.5, 2.0][i % 4]
        shift = [0.0, 0.7, -0.2, 0.0][i % 4]
        b = torch.from_numpy(np.asarray(rng.standard_normal(x_shape) * scale + shift)).to(dt)
        if specials_in_last and i == n - 1:
            b.view(-1)[0] = math.inf
            b.view(-1)[1] = -math.inf
        out.append(b)
    return out


def gen_module(st: Store):
    G = "module"
    Q = lambda cls, *a, **k: {"class": cls, "args": list(a), "kwargs": k}  # noqa: E731
    grids = [("b8u", (8, False), {}), ("b8s", (8, True), {}), ("b4s", (4, True), {}), ("b4u", (4, False), {}),
             ("b16u", (16, False), {}), ("b2s", (2, True), {}), ("b1u", (1, False), {}), ("b32s", (32, True), {}),
             ("qq_0_255_sym", (), {"qmin": 0, "qmax": 255, "symmetric": True}),
             ("qq_m128_127_asym", (), {"qmin": -128, "qmax": 127, "symmetric": False}),
             ("qq_m8_7_sym", (-8, 7, True), {}),
             ("qq_m100_37_asym", (-100, 37, False), {}),
             ("qq_m127_127_sym", (), {"qmin": -127, "qmax": 127, "symmetric": True})]
    settings = ["random", "zero", "equal_pos", "equal_neg", "min_above_max", "min_above_max_pos", "inf", "inf_max",
                "positive", "negative", "tiny", "huge", "nan", "asym_offset_edge"]
    for cls in ("Quantize", "QuantizeDequantize"):
        for shp_name, shape in (("pt_1", (1,)), ("pt_0d", ())):
            for gname, gargs, gkw in grids:
                for sname in settings:
                    if shp_name == "pt_0d" and sname not in ("random", "zero", "min_above_max", "inf"):
                        continue
                    cid = f"{G}/{cls}/{shp_name}/{gname}/{sname}"
                    spec = Q(cls, list(shape), *gargs, **gkw)
                    rng = np.random.default_rng(seed_of(cid))
                    mm = _minmax_setting(sname, rng, shape)
                    enc = sname in ("random", "zero", "min_above_max", "inf") and gname in (
                        "b8u", "b8s", "b4s", "b1u", "b32s", "qq_0_255_sym", "qq_m128_127_asym", "qq_m100_37_asym")
                    dts = (F32, F16, BF16) if sname in ("random", "zero", "tiny", "huge", "nan") else (F32,)
                    module_case(st, cid, G, spec, (4, 6), minmax=mm, note="min/max set directly", encodings=enc,
                                dtypes=dts)
    shapes = [("pc_first", (4, 1), (4, 6), None), ("pc_last", (6,), (4, 6), None),
              ("pc_lead", (3, 1, 1), (2, 3, 4, 5), None), ("pc_two_axes", (3, 1, 5), (2, 3, 4, 5), None),
              ("block", (4, 2), (4, 6), (1, 3)), ("block_m1", (2, 3), (4, 6), (-1, 2)),
              ("block_lead", (2, 2), (3, 4, 6), (2, 3)), ("block_conv", (4, 2, 1, 1), (4, 8, 3, 3), (1, 4, 3, 3))]
    for cls in ("Quantize", "QuantizeDequantize"):
        for shp_name, shape, xs, bs in shapes:
            for gname, gargs, gkw in grids:
                if gname not in ("b8u", "b8s", "b4s", "b16u", "qq_0_255_sym", "qq_m128_127_asym", "qq_m100_37_asym"):
                    continue
                kw = dict(gkw)
                if bs is not None:
                    kw["block_size"] = list(bs)
                spec = Q(cls, list(shape), *gargs, **kw)
                for sname in ("mixed", "random"):
                    cid = f"{G}/{cls}/{shp_name}/{gname}/{sname}"
                    rng = np.random.default_rng(seed_of(cid))
                    mm = _minmax_setting(sname, rng, shape)
                    module_case(st, cid, G, spec, xs, minmax=mm, block_size=bs, note="min/max set directly",
                                dtypes=(F32, F16, BF16) if sname == "mixed" else (F32,), encodings=sname == "mixed")
                # calibration over several batches (the default MinMax analyzer)
                cid = f"{G}/{cls}/{shp_name}/{gname}/compute_encodings"
                module_case(st, cid, G, spec, xs, batches=_batches(cid, xs, 3, specials_in_last=False),
                            block_size=bs, note="compute_encodings over 3 batches", dtypes=(F32,),
                            encodings=gname in ("b8u", "b4s", "qq_0_255_sym"))
    # calibration of per-tensor quantizers, with other analyzers and input dtypes
    an_specs = [("minmax", None), ("percentile99", Q("PercentileEncodingAnalyzer", [1], percentile=99.0)),
                ("percentile100_64bins", Q("PercentileEncodingAnalyzer", [1], num_bins=64)),
                ("sqnr", Q("SqnrEncodingAnalyzer", [1])), ("tfe", Q("TfEnhancedEncodingAnalyzer", [1])),
                ("sqnr_gamma1_128bins", Q("SqnrEncodingAnalyzer", [1], num_bins=128, gamma=1.0))]
    for cls in ("Quantize", "QuantizeDequantize"):
        for aname, aspec in an_specs:
            for gname, gargs, gkw in grids:
                if gname not in ("b8u", "b8s", "b4s", "qq_0_255_sym", "b2s", "b16u"):
                    continue
                for dt in (F32, F16, BF16):
                    if dt != F32 and (aname not in ("minmax", "sqnr") or gname not in ("b8u", "b4s")):
                        continue
                    kw = dict(gkw)
                    if aspec is not None:
                        kw["encoding_analyzer"] = aspec
                    spec = Q(cls, [1], *gargs, **kw)
                    cid = f"{G}/{cls}/pt_1/{gname}/compute_encodings_{aname}/{DT_NAME[dt]}"
                    module_case(st, cid, G, spec, (64,), batches=_batches(cid, (64,), 3, dt=dt, specials_in_last=True),
                                note="compute_encodings over 3 batches, the last with +-inf",
                                encodings=dt == F32, dtypes=(dt,))
    # per-channel calibration with a histogram analyzer (leading axis)
    for cls in ("Quantize", "QuantizeDequantize"):
        for aname, akw in (("percentile99", {"percentile": 99.0}), ("sqnr", {})):
            an = "PercentileEncodingAnalyzer" if aname.startswith("percentile") else "SqnrEncodingAnalyzer"
            spec = Q(cls, [4, 1], 8, False, encoding_analyzer=Q(an, [4, 1], **akw))
            cid = f"{G}/{cls}/pc_first/b8u/compute_encodings_{aname}"
            module_case(st, cid, G, spec, (4, 32), batches=_batches(cid, (4, 32), 2), note="per-channel histogram analyzer")


def gen_lpbq(st: Store):
    G = "lpbq"
    GB = "GroupedBlockQuantizeDequantize"
    confs = [
        ("w4x32_b8_g1x4", (4, 4), (4, 32), (1, 8), (1, 4)),
        ("w4x32_b8_gm1", (4, 4), (4, 32), (1, 8), (1, -1)),
        ("w4x32_b8_g1x2", (4, 4), (4, 32), (1, 8), (1, 2)),
        ("w4x32_b8_g1x1", (4, 4), (4, 32), (1, 8), (1, 1)),
        ("w4x32_b8_gnone", (4, 4), (4, 32), (1, 8), None),
        ("w4x32_b8_g2x2", (4, 4), (4, 32), (1, 8), (2, 2)),
        ("w4x32_b8_gm1m1", (4, 4), (4, 32), (1, 8), (-1, -1)),
        ("w4x32_bm1_g1x4", (4, 4), (4, 32), (1, -1), (1, 4)),
        ("conv_8x8x3x3", (8, 2, 1, 1), (8, 8, 3, 3), (1, 4, 3, 3), (1, -1, 1, 1)),
        ("lead_2x4x32", (4, 4), (2, 4, 32), (1, 8), (1, 4)),
    ]
    bws = [(4, 8), (4, 4), (8, 16), (2, 8), (4, 6), (3, 8)]
    Q = lambda cls, *a, **k: {"class": cls, "args": list(a), "kwargs": k}  # noqa: E731
    for cname, shape, xs, bs, bg in confs:
        for bw, dbw in bws:
            if cname not in ("w4x32_b8_g1x4", "conv_8x8x3x3") and (bw, dbw) not in ((4, 8), (4, 4)):
                continue
            kw = {"block_size": list(bs)}
            if bg is not None:
                kw["block_grouping"] = list(bg)
            spec = Q(GB, list(shape), bw, True, dbw, **kw)
            for sname in ("random", "mixed"):
                cid = f"{G}/{cname}/b{bw}_d{dbw}/{sname}"
                rng = np.random.default_rng(seed_of(cid))
                mm = _minmax_setting(sname, rng, shape)
                if sname == "random":  # wide spread of block scales, so the integer scales vary
                    f = torch.from_numpy(np.asarray(np.exp(rng.uniform(-4, 0, size=shape)))).to(F32)
                    mm = (mm[0] * f, mm[1] * f)
                module_case(st, cid, G, spec, xs, minmax=mm, block_size=bs, note="LPBQ, min/max set directly",
                            dtypes=(F32, F16, BF16) if sname == "random" else (F32,))
            cid = f"{G}/{cname}/b{bw}_d{dbw}/compute_encodings"
            module_case(st, cid, G, spec, xs, batches=_batches(cid, xs, 2), block_size=bs, note="LPBQ compute_encodings",
                        dtypes=(F32,))
    # keyword constructor
    spec = Q(GB, [4, 4], bitwidth=4, symmetric=True, decompressed_bw=8, block_size=[1, 8], block_grouping=[1, 4])
    cid = f"{G}/keywords/random"
    module_case(st, cid, G, spec, (4, 32), minmax=_minmax_setting("random", np.random.default_rng(1), (4, 4)),
                block_size=(1, 8), note="keyword constructor")


# ------------------------------------------------------------------------------------------------
# encoding analyzers


def record_stats(st: Store, cid: str, an, tag: str):
    stats = an.observer.get_stats()
    if isinstance(stats, list):
        out = []
        for i, h in enumerate(stats):
            if h.histogram is None:
                out.append(None)
                continue
            out.append({"histogram": st.arr(cid, f"{tag}_h{i}_hist", h.histogram),
                        "bin_edges": st.arr(cid, f"{tag}_h{i}_edges", h.bin_edges),
                        "min": st.arr(cid, f"{tag}_h{i}_min", torch.as_tensor(h.min)),
                        "max": st.arr(cid, f"{tag}_h{i}_max", torch.as_tensor(h.max))})
        return {"kind": "histograms", "histograms": out}
    return {"kind": "minmax", "min": _maybe(st, cid, f"{tag}_min", stats.min), "max": _maybe(st, cid, f"{tag}_max", stats.max)}


NUM_STEPS = (255, 254, 15, 7, 3, 1)


def analyzer_case(st: Store, cid: str, spec: dict, batches, note="", num_steps=NUM_STEPS, record_hist=True):
    case = {"id": cid, "group": "analyzer", "spec": spec, "note": note}
    try:
        an = build(spec)
    except Exception as e:  # noqa: BLE001
        case["outcome"] = "error"
        case["error"] = err_record(e)
        st.add(case)
        return
    # histogram statistics: after every batch when small, after the last batch when moderate
    nb = getattr(an.observer, "num_bins", 0) * len(an.observer.get_stats()) if isinstance(an.observer.get_stats(), list) else 0
    upd = []
    for i, b in enumerate(batches):
        d = {"x": st.arr(cid, f"b{i}_x", b)}
        try:
            an.update_stats(b)
            if record_hist and (nb <= 1024 or (nb <= 8192 and i == len(batches) - 1)):
                d["stats"] = record_stats(st, cid, an, f"b{i}")
        except Exception as e:  # noqa: BLE001
            d["error"] = err_record(e)
            upd.append(d)
            break
        upd.append(d)
    case["updates"] = upd
    enc = []
    for ns in num_steps:
        for sym in (False, True):
            d = {"num_steps": ns, "is_symmetric": sym}
            try:
                mn, mx = an.compute_encodings(ns, sym)
                d["min"] = st.arr(cid, f"enc_{ns}_{int(sym)}_min", mn)
                d["max"] = st.arr(cid, f"enc_{ns}_{int(sym)}_max", mx)
            except Exception as e:  # noqa: BLE001
                d["error"] = err_record(e)
            enc.append(d)
    case["encodings"] = enc
    # reset_stats, then one batch again: must equal a fresh analyzer on that batch
    try:
        an.reset_stats()
        an.update_stats(batches[0])
        mn, mx = an.compute_encodings(255, False)
        case["after_reset"] = {"min": st.arr(cid, "reset_min", mn), "max": st.arr(cid, "reset_max", mx)}
    except Exception as e:  # noqa: BLE001
        case["after_reset"] = {"error": err_record(e)}
    case["outcome"] = "ok"
    st.add(case)


def _an_batches(cid, x_shape, kinds, dt=F32):
    rng = np.random.default_rng(seed_of(cid + "/batches"))
    out = []
    for k in kinds:
        if k == "normal":
            b = rng.standard_normal(x_shape)
        elif k == "wider":
            b = rng.standard_normal(x_shape) * 3.0 + 0.5
        elif k == "inside":
            b = rng.standard_normal(x_shape) * 0.3
        elif k == "shifted_pos":
            b = rng.uniform(0.5, 5.0, x_shape)
        elif k == "shifted_neg":
            b = rng.uniform(-7.0, -1.0, x_shape)
        elif k == "huge":
            b = rng.standard_normal(x_shape) * 100.0
        elif k == "constant":
            b = np.full(x_shape, 0.75)
        elif k == "zeros":
            b = np.zeros(x_shape)
        elif k == "uniform":
            b = rng.uniform(-1, 1, x_shape)
        else:
            raise ValueError(k)
        t_ = torch.from_numpy(np.asarray(b)).to(dt)
        out.append(t_)
    return out


def _with_specials(b: torch.Tensor, vals) -> torch.Tensor:
    b = b.clone()
    for i, v in enumerate(vals):
        b.view(-1)[i * 7 % b.numel()] = v
    return b


def gen_analyzer(st: Store):
    Q = lambda cls, *a, **k: {"class": cls, "args": list(a), "kwargs": k}  # noqa: E731
    layouts = [("pt_1", [1], None, (256,)), ("pt_0d", [], None, (128,)),
               ("pc_lead", [4, 1], None, (4, 64)), ("pc_trail", [8], None, (32, 8)),
               ("pc_3d", [2, 1, 3], None, (2, 20, 3)),
               ("block_last", [4, 2], [1, 16], (4, 32)), ("block_first", [2, 2], [2, -1], (4, 32))]
    seqs = [("grow", ["normal", "wider", "inside"]), ("one", ["normal"]),
            ("shift", ["shifted_pos", "shifted_neg", "huge"]), ("inf", ["normal", "wider+inf"]),
            ("constant", ["constant", "constant"]), ("zeros", ["zeros"])]
    confs = [
        ("minmax", "MinMaxEncodingAnalyzer", {}),
        ("percentile100", "PercentileEncodingAnalyzer", {}),
        ("percentile99", "PercentileEncodingAnalyzer", {"percentile": 99.0}),
        ("percentile50_16bins", "PercentileEncodingAnalyzer", {"percentile": 50, "num_bins": 16}),
        ("percentile99.9_100bins", "PercentileEncodingAnalyzer", {"percentile": 99.9, "num_bins": 100}),
        ("sqnr", "SqnrEncodingAnalyzer", {}),
        ("sqnr_small", "SqnrEncodingAnalyzer", {"num_bins": 64, "asymmetric_delta_candidates": 5,
                                                 "symmetric_delta_candidates": 11, "offset_candidates": 7,
                                                 "max_parallelism": 3, "gamma": 1.0}),
        ("sqnr_growth3", "SqnrEncodingAnalyzer", {"num_bins": 256, "histogram_growth_limit": 3.0}),
        ("tfe", "TfEnhancedEncodingAnalyzer", {}),
    ]
    for cname, cls, kw in confs:
        for lname, shape, bs, xs in layouts:
            for sname, kinds in seqs:
                if lname not in ("pt_1",) and sname not in ("grow", "one"):
                    continue
                if cname in ("percentile50_16bins", "percentile99.9_100bins", "sqnr_growth3") and lname not in ("pt_1", "pc_lead"):
                    continue
                cid = f"analyzer/{cname}/{lname}/{sname}"
                k = dict(kw)
                if bs is not None:
                    k["block_size"] = bs
                spec = Q(cls, shape, **k)
                base = [kk.split("+")[0] for kk in kinds]
                bt = _an_batches(cid, xs, base)
                for i, kk in enumerate(kinds):
                    if kk.endswith("+inf"):
                        bt[i] = _with_specials(bt[i], [math.inf, -math.inf, math.inf])
                analyzer_case(st, cid, spec, bt, note=f"{len(bt)} batches: {', '.join(kinds)}")
    # float16 / bfloat16 inputs
    for cname, cls, kw in confs:
        if cname not in ("minmax", "percentile99", "sqnr", "tfe"):
            continue
        for dt in (F16, BF16):
            for lname, shape, bs, xs in (("pt_1", [1], None, (256,)), ("pc_lead", [4, 1], None, (4, 64))):
                cid = f"analyzer/{cname}/{lname}/grow/{DT_NAME[dt]}"
                k = dict(kw)
                spec = Q(cls, shape, **k)
                analyzer_case(st, cid, spec, _an_batches(cid, xs, ["normal", "wider", "inside"], dt=dt),
                              note=f"{DT_NAME[dt]} inputs")
    # NaN in the input
    for cname, cls, kw in confs:
        if cname not in ("minmax", "percentile99", "sqnr"):
            continue
        cid = f"analyzer/{cname}/pt_1/nan"
        bt = _an_batches(cid, (64,), ["normal", "normal"])
        bt[1] = _with_specials(bt[1], [math.nan])
        analyzer_case(st, cid, Q(cls, [1], **kw), bt, note="a NaN in the second batch")
    # AIMET's own literal vectors (aimet.md section 4), recorded as cases too
    lit = [
        ("minmax_0_25.5", Q("MinMaxEncodingAnalyzer", [1]), [torch.arange(0, 25.5 + 0.25, 0.5)]),
        ("minmax_m2_9", Q("MinMaxEncodingAnalyzer", [1]), [torch.arange(-2.0, 10.0)]),
        ("minmax_3", Q("MinMaxEncodingAnalyzer", [1]), [torch.tensor([3.0])]),
        ("minmax_0", Q("MinMaxEncodingAnalyzer", [1]), [torch.tensor([0.0])]),
        ("percentile_0_1000_500bins_p99", Q("PercentileEncodingAnalyzer", [1], num_bins=500, percentile=99),
         [torch.arange(0.0, 1001.0)]),
        ("percentile_m2_9_1bin", Q("PercentileEncodingAnalyzer", [1], num_bins=1, percentile=100), [torch.arange(-2.0, 10.0)]),
        ("sqnr_m1_1_gamma1", Q("SqnrEncodingAnalyzer", [1], gamma=1.0), [torch.arange(-100.0, 101.0) / 100]),
        ("hist_merge_3bins", Q("PercentileEncodingAnalyzer", [1], num_bins=3),
         [torch.tensor([2, 3.5, 4.2, 5]), torch.tensor([5.3, 6.4, 7, 8]), torch.tensor([-4.2, 0, 2.3, 4.5])]),
        ("hist_split_3bins", Q("PercentileEncodingAnalyzer", [1], num_bins=3),
         [torch.tensor([1, 7, 5.3, 6, 5.7, 6.8, 6.2, 2.8, 3.9]), torch.tensor([0, 9, 7.8, 2.5, 4.6, 6.2, 8.8])]),
        ("hist_10bins_x1.5", Q("PercentileEncodingAnalyzer", [1], num_bins=10),
         [torch.arange(-50.0, 51.0), torch.arange(-50.0, 51.0) * 1.5]),
    ]
    for name, spec, bt in lit:
        analyzer_case(st, f"analyzer/literal/{name}", spec, [b.to(F32) for b in bt], note="AIMET test-suite literal")


# ------------------------------------------------------------------------------------------------


def versions():
    out = {"python": platform.python_version()}
    for d in ("aimet-torch", "torch", "numpy", "ml_dtypes"):
        out[d] = dist_version(d)
    out["torch.__version__"] = torch.__version__
    out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return out


GROUPS = {"functional": gen_functional, "grad": gen_grad, "module": gen_module, "lpbq": gen_lpbq,
          "analyzer": gen_analyzer, "errors": gen_errors, "grad_zero_sign": gen_grad_zero_sign}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--only", default=None, help="comma-separated groups (default: all)")
    ap.add_argument("--timings-only", action="store_true")
    ap.add_argument("--timing-reps", type=int, default=5)
    args = ap.parse_args()
    if args.timings_only:
        timings(SPEED / "aimet_peer_timings.json", args.timing_reps)
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
        "generator": "tools/golden/aimet.py",
        "versions": versions(),
        "machine": machine_description(arch=True),
        "torch_threads": torch.get_num_threads(),
        "storage": {"arrays": "arrays.npz holds one flat array per stored dtype, 'pool_<dtype>'; an array spec "
                              "[dtype, shape, start] is pool_<dtype>[start:start+prod(shape)].reshape(shape); "
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
    write_npz(out / "arrays.npz", {k: arrays[k] for k in sorted(arrays)})  # members by name
    sz = (out / "index.json").stat().st_size, (out / "arrays.npz").stat().st_size
    print(f"wrote {len(st.cases)} cases, {sum(st.sizes.values())} elements in {len(arrays)} pools; index.json {sz[0]} B, arrays.npz {sz[1]} B")
    print(json.dumps(counts))


def timings(path, reps):
    """aimet-torch's own speed on 64 Mi float32 elements (CPU): medians of `reps` timed calls after
    one warm-up call (fewer calls when one takes long), torch threads = the machine's cores."""
    torch.set_num_threads(os.cpu_count())
    rows, cols = 4096, 16384
    n = rows * cols
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=g)
    res = {"elements": n, "dtype": "float32", "repetitions": reps,
           "statistic": "median wall seconds (time.perf_counter) of the timed calls after one warm-up call; "
                        "calls taking over 20 s are repeated fewer times (see all_s)",
           "machine": machine_description(arch=True, load_key="loadavg"), "versions": versions(),
           "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
           "note": "this machine is shared: other jobs ran concurrently (see loadavg), so the numbers are noisy",
           "results": {}}

    def med(name, fn, shape, extra=None):
        t0 = time.perf_counter()
        fn()  # warm-up
        first = time.perf_counter() - t0
        k = reps if first < 20 else (1 if first > 60 else 2)
        ts = []
        for _ in range(k):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        r = {"median_s": statistics.median(ts), "all_s": ts, "warmup_s": first, "shape": list(shape)}
        if extra:
            r.update(extra)
        res["results"][name] = r
        print(f"timing {name}: {r['median_s']:.4f} s", flush=True)
        with open(path, "w") as f:  # partial results survive an interrupted run
            json.dump(res, f, indent=1)
            f.write("\n")

    med("torch x.clone()", lambda: x.clone(), x.shape)

    def qdq_cases():
        xl = x.view(1048576, 64)
        s_pt, o_pt = torch.tensor(0.02), torch.tensor(-128.0)
        s_c0, o_c0 = torch.rand(rows, 1, generator=g) * 0.02 + 0.01, torch.full((rows, 1), -128.0)
        s_cl, o_cl = torch.rand(64, generator=g) * 0.02 + 0.01, torch.full((64,), -128.0)
        s_b, o_b = torch.rand(rows, cols // 32, generator=g) * 0.02 + 0.01, torch.full((rows, cols // 32), -128.0)
        return [("per-tensor", x, s_pt, o_pt, None), ("per-channel axis 0, scale (4096, 1)", x, s_c0, o_c0, None),
                ("per-channel last axis, x (1048576, 64), scale (64,)", xl, s_cl, o_cl, None),
                ("blockwise, scale (4096, 512), block_size (1, 32)", x, s_b, o_b, (1, 32))]

    for label, xx, sc, of, bs in qdq_cases():
        def nograd(xx=xx, sc=sc, of=of, bs=bs):
            with torch.no_grad():
                return A.quantize_dequantize(xx, sc, of, 8, False, block_size=bs)

        _PATH_LOG.clear()
        nm = f"quantize_dequantize 8-bit, {label}, no grad"
        med(nm, nograd, xx.shape)
        res["results"][nm]["path"] = _path_from_log(_PATH_LOG)
        sg, og = sc.clone().requires_grad_(True), of.clone().requires_grad_(True)
        xg = xx.clone().requires_grad_(True)

        def train(xg=xg, sg=sg, og=og, bs=bs):
            return A.quantize_dequantize(xg, sg, og, 8, False, block_size=bs)

        med(f"quantize_dequantize 8-bit, {label}, training path forward (x, scale, offset require grad)",
            train, xx.shape, {"path": "reference"})
        del xg, sg, og
    s_pt, o_pt = torch.tensor(0.02), torch.tensor(-128.0)
    med("quantize 8-bit per-tensor, no grad", lambda: A.quantize(x, s_pt, o_pt, 8, False), x.shape)
    q8 = A.quantize(x, s_pt, o_pt, 8, False)
    med("dequantize per-tensor", lambda: A.dequantize(q8, s_pt, o_pt), x.shape)
    del q8

    # encoding analyzers: update_stats on one batch (a fresh analyzer each call), compute_encodings
    kinds = [("MinMaxEncodingAnalyzer", lambda sh: EA.MinMaxEncodingAnalyzer(sh)),
             ("PercentileEncodingAnalyzer(percentile=99.9)", lambda sh: EA.PercentileEncodingAnalyzer(sh, percentile=99.9)),
             ("SqnrEncodingAnalyzer", lambda sh: EA.SqnrEncodingAnalyzer(sh))]
    for shape_label, per_channel in (("per-tensor (1,)", False), ("per-channel (4096, 1)", True)):
        for name, ctor in kinds:
            xx, shape = x, ((rows, 1) if per_channel else (1,))
            if per_channel and name != "MinMaxEncodingAnalyzer":
                # one Python-level histogram per channel: probe 64 rows, and time the whole tensor
                # only if that extrapolates to under ~2 minutes per call
                t0 = time.perf_counter()
                ctor((64, 1)).update_stats(x[:64])
                est = (time.perf_counter() - t0) * rows / 64
                if est > 120:
                    r = max(64, int(rows * 120 / est) // 64 * 64)
                    xx, shape = x[:r], (r, 1)
            holder = {}

            def upd(ctor=ctor, xx=xx, shape=shape):
                an = ctor(shape)
                an.update_stats(xx)
                holder["an"] = an

            med(f"{name} update_stats, {shape_label}", upd, xx.shape, {"encoding_shape": list(shape)})
            an = holder["an"]
            for sym in (False, True):
                med(f"{name} compute_encodings(255, is_symmetric={sym}), {shape_label}",
                    lambda an=an, sym=sym: an.compute_encodings(255, sym), xx.shape, {"encoding_shape": list(shape)})
            if name != "MinMaxEncodingAnalyzer":
                # a second batch with a 1.5x wider range: the merge / re-binning step (one call)
                an = ctor(shape)
                an.update_stats(xx)
                x2 = xx * 1.5
                t0 = time.perf_counter()
                an.update_stats(x2)
                dt_ = time.perf_counter() - t0
                res["results"][f"{name} update_stats, second batch 1.5x wider (merge), {shape_label}"] = {
                    "median_s": dt_, "all_s": [dt_], "shape": list(xx.shape), "encoding_shape": list(shape),
                    "note": "one call"}
                print(f"timing {name} merge {shape_label}: {dt_:.3f} s", flush=True)
                del x2, an
            holder.clear()
    res["machine"]["loadavg_at_end"] = list(os.getloadavg())
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
