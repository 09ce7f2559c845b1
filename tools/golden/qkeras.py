"""Golden data for polyquant's QKeras quantizers, made by running real QKeras on TensorFlow CPU.

    python -m tools.golden.qkeras --qkeras /path/to/qkeras-checkout [--commit SHA] [--out DIR] [--timings]

(from the repository root, in the TensorFlow environment; docs/golden-data.md#qkeras says how).

Runs ``quantized_bits``, ``quantized_relu`` and ``quantized_linear`` from the QKeras checkout over
every deterministic parameter path (issue 6) and writes, under ``--out`` (default
``tests/data/qkeras`` of this repository):

* ``index.json``: versions, settings and one record per case (constructor kwargs, input key,
  expected outcome or exception, str(q), get_config(), scale / min / max / range keys);
* ``inputs.npz``: the float32 inputs, shared between cases (``x0000``, ...);
* ``quantized_bits.npz``, ``quantized_relu.npz``, ``quantized_linear.npz``: the outputs (exact
  bits) and every array-valued attribute, keyed as named in the index;
* ``qkeras_own_tests.json``: the literal vectors of QKeras' own tests, with what QKeras gives now.

With ``--timings`` it also measures QKeras' own speed on 64 Mi float32 elements and writes
``tools/golden/speed/qkeras_peer_timings.json``.

This is not run in CI (CI has no TensorFlow); CI checks the committed output.
"""

from __future__ import annotations

if not __package__:  # run as a script, tools/golden would shadow the reference's own packages
    raise SystemExit("run from the repository root: python -m tools.golden.qkeras")

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
import warnings

from .common import SPEED, data_dir, dist_version, machine_description
PINNED_COMMIT = "78ea90fc381fef23faa4db0e1d88bd1173c1c644"
SEED = 20261124
FORMAT_VERSION = 1


# ------------------------------------------------------------------------------------------------
# Encoding helpers
# ------------------------------------------------------------------------------------------------

def _np():
    import numpy as np

    return np


def enc(v):
    """JSON-encodes a constructor argument / config value without losing its Python type."""
    np = _np()
    import tensorflow as tf

    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if np.isfinite(v):
            return v
        return {"__float__": repr(v)}
    if isinstance(v, np.generic):
        return {"__npscalar__": enc(v.item()), "dtype": str(v.dtype)}
    if isinstance(v, np.ndarray):
        return {"__ndarray__": [enc(e) for e in v.ravel().tolist()], "dtype": str(v.dtype),
                "shape": list(v.shape)}
    if isinstance(v, tf.Variable):
        a = v.numpy()
        return {"__tf_variable__": enc(a), "name": v.name}
    if isinstance(v, tf.Tensor):
        return {"__tf_tensor__": enc(v.numpy())}
    if isinstance(v, (list, tuple)):
        out = [enc(e) for e in v]
        return out if isinstance(v, list) else {"__tuple__": out}
    if isinstance(v, dict):
        return {str(k): enc(e) for k, e in v.items()}
    return {"__repr__": repr(v), "type": type(v).__name__}


def dec(v):
    """Inverse of enc for constructor kwargs (used to build the quantizers from the case list)."""
    np = _np()
    import tensorflow as tf

    if isinstance(v, list):
        return [dec(e) for e in v]
    if isinstance(v, dict):
        if "__float__" in v:
            return float(v["__float__"])
        if "__npscalar__" in v:
            return np.dtype(v["dtype"]).type(dec(v["__npscalar__"]))
        if "__ndarray__" in v:
            return np.array([dec(e) for e in v["__ndarray__"]], dtype=v["dtype"]).reshape(v["shape"])
        if "__tf_tensor__" in v:
            return tf.constant(dec(v["__tf_tensor__"]))
        if "__tuple__" in v:
            return tuple(dec(e) for e in v["__tuple__"])
        return {k: dec(e) for k, e in v.items()}
    return v


def err(stage, e):
    msg = str(e)
    if len(msg) > 600:
        msg = msg[:600] + "..."
    return {"stage": stage, "type": type(e).__name__, "message": msg}


class Store:
    """Arrays for one .npz file, kept as one flat buffer per dtype: a reference is
    {"buf": dtype name, "offset": element offset, "shape": [...]} (C order)."""

    def __init__(self):
        self.parts = {}
        self.sizes = {}

    def put(self, a):
        np = _np()
        shape = list(np.shape(a))  # before ascontiguousarray, which makes 0-d arrays 1-d
        a = np.ascontiguousarray(a)
        name = str(a.dtype)
        assert a.dtype.kind in "fiub" and a.dtype.isnative, a.dtype
        off = self.sizes.get(name, 0)
        self.parts.setdefault(name, []).append(a.ravel())
        self.sizes[name] = off + a.size
        return {"buf": name, "offset": off, "shape": shape}

    def arrays(self):
        np = _np()
        return {k: np.concatenate(v) if v else np.zeros(0) for k, v in self.parts.items()}


class InputPool(Store):
    """float32 inputs, deduplicated by content."""

    def __init__(self):
        super().__init__()
        self.by_hash = {}

    def put(self, x):
        np = _np()
        x = np.asarray(x)
        assert x.dtype == np.float32, x.dtype
        h = hashlib.sha1(str(x.shape).encode() + x.tobytes()).hexdigest()
        if h not in self.by_hash:
            self.by_hash[h] = super().put(x)
        return dict(self.by_hash[h])


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------

class Inputs:
    def __init__(self, seed):
        np = _np()
        self.rng = np.random.default_rng(seed)

    def rand(self, shape, scale=1.0):
        """Normal values mixed with uniform ones over about +-2.5 scale."""
        np = _np()
        n = int(np.prod(shape)) if len(shape) else 1
        a = self.rng.standard_normal(n) * scale
        u = self.rng.uniform(-2.5, 2.5, n) * scale
        pick = self.rng.random(n) < 0.5
        a = np.where(pick, a, u)
        return a.astype(np.float32).reshape(shape)

    def ties(self, step, lo, hi, neg_step=None, max_codes=40, extra_codes=()):
        """Values on the half-grid (k + 1/2)*step for codes k around and inside [lo, hi], the
        grid points k*step, and the float32 neighbours (+-1 ulp) of each half point."""
        np = _np()
        lo = int(np.floor(lo))
        hi = int(np.ceil(hi))
        if hi - lo <= max_codes:
            ks = list(range(lo - 2, hi + 3))
        else:
            ks = set(range(lo - 2, lo + 6)) | set(range(-5, 6)) | set(range(hi - 5, hi + 3))
            ks |= set(int(k) for k in self.rng.integers(lo, hi, 10))
            ks = sorted(ks)
        ks = sorted(set(ks) | set(extra_codes))
        vals = []
        for k in ks:
            st = step if (k >= 0 or neg_step is None) else neg_step
            h = np.float32((k + 0.5) * st)
            vals += [h, np.nextafter(h, np.float32(np.inf)), np.nextafter(h, np.float32(-np.inf)),
                     np.float32(k * st)]
        return np.array(vals, dtype=np.float32)

    @staticmethod
    def specials():
        np = _np()
        f = np.float32
        tiny = np.finfo(np.float32).tiny
        mx = np.finfo(np.float32).max
        sub = np.float32(1.4e-45)
        v = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, sub, -sub, 1e-40, -1e-40, 5.877472e-39,
             tiny, -tiny, 1e-30, -1e-30, 0.5, -0.5, 0.25, -0.7, 1e5, -1e5, 2e5, -2e5, 1e6, -1e6,
             1.6777216e7, 3e7, -3e7, 1e20, -1e20, 1e30, 3e38, -3e38, mx, -mx]
        return np.array([f(e) for e in v], dtype=np.float32)


# ------------------------------------------------------------------------------------------------
# Case list
# ------------------------------------------------------------------------------------------------

def build_cases(inp):
    """Returns a list of dicts: quantizer, kwargs, x (float32), path, inputs, input_kind."""
    np = _np()
    f32 = np.float32
    cases = []

    def add(quantizer, kwargs, x, path, inputs, input_kind="numpy", note=None):
        c = {"quantizer": quantizer, "kwargs": kwargs, "x": np.asarray(x, dtype=np.float32),
             "path": path, "inputs": inputs, "input_kind": input_kind}
        if note:
            c["note"] = note
        cases.append(c)

    specials = inp.specials()
    specials_tail = np.concatenate([specials, inp.rand((13,), 0.6)])

    def specials_cols(scale):
        """Rank 2: one column of random values per special value, plus two plain columns, so a
        per-channel scale sees each special alone."""
        sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3e38, -3e38, 1e6],
                      dtype=np.float32)
        base = inp.rand((6, sp.size + 2), scale)
        base[2, : sp.size] = sp
        base[:, sp.size] = np.float32(0.0)        # all-zero channel
        base[:, sp.size + 1] = np.array([1e-40, -1e-40, 1e-39, 0.0, -0.0, 1e-45], np.float32)
        return base

    # ---------------- quantized_bits ----------------
    QB = "quantized_bits"
    for bits in [1, 2, 3, 4, 5, 8, 16]:
        for integer in [-2, 0, 1, 3]:
            for sym, kn in [(0, True), (1, True), (0, False), (1, False)]:
                kw = dict(bits=bits, integer=integer, symmetric=sym, keep_negative=kn)
                ub = bits - int(kn)
                step = 2.0 ** (integer - ub)
                m = 2 ** ub
                lo = -m + sym if kn else 0
                add(QB, kw, inp.rand((6, 8), 0.7 * 2.0 ** integer), "fixed.grid", "random")
                if ub > 0:
                    add(QB, kw, inp.ties(step, lo if kn else -4, m - 1), "fixed.grid", "ties")
                else:
                    add(QB, kw, inp.ties(0.5, -4, 4), "fixed.grid", "ties")
                if bits in (1, 4, 8, 16) and integer in (0, 3):
                    add(QB, kw, specials, "fixed.grid", "specials")
    for bits in [3, 8]:
        for integer in [bits, bits + 2]:
            for sym, kn in [(0, True), (1, True), (0, False)]:
                kw = dict(bits=bits, integer=integer, symmetric=sym, keep_negative=kn)
                step = 2.0 ** (integer - bits + int(kn))
                add(QB, kw, inp.rand((5, 7), 0.7 * 2.0 ** integer), "fixed.integer_ge_bits", "random")
                add(QB, kw, inp.ties(step, -(2 ** (bits - 1)), 2 ** bits), "fixed.integer_ge_bits", "ties")
    for bits in [0, -1]:
        for kn in [True, False]:
            for integer in [0, 2]:
                kw = dict(bits=bits, integer=integer, keep_negative=kn)
                add(QB, kw, inp.rand((4, 6), 1.0), "fixed.bits_le_0", "random")
                add(QB, kw, specials, "fixed.bits_le_0", "specials")
    for kw in [dict(bits=4, integer=0.5), dict(bits=4, integer=1.5, keep_negative=False),
               dict(bits=8, integer=-8), dict(bits=24, integer=0), dict(bits=32, integer=4)]:
        add(QB, kw, inp.rand((5, 6), 0.8 * 2.0 ** kw["integer"]), "fixed.odd_widths", "random")
        add(QB, kw, specials, "fixed.odd_widths", "specials")
    # ranks 0..4 and empty, fixed path
    for kw in [dict(bits=8, integer=0), dict(bits=4, integer=1, symmetric=1)]:
        for shape in [(), (9,), (2, 3, 4), (2, 2, 3, 4), (0,), (2, 0, 3)]:
            add(QB, kw, inp.rand(shape, 0.8), "fixed.rank", "rank%d" % len(shape) if all(shape) else "empty")
    # the notes' derived examples (§7.12 / §1)
    add(QB, dict(bits=3, integer=0), np.array([0.125, 0.375, 0.625, -0.125, -0.375], f32), "fixed.grid", "notes")
    add(QB, dict(bits=8, integer=0), np.array([1e5, 2e5, 1e6, 3e7, -3e7], f32), "fixed.grid", "notes")
    add(QB, dict(bits=1, keep_negative=False), np.array([-2, -0.1, 0, 0.1, 0.3, 2], f32), "fixed.grid", "notes")

    # numeric / per-channel alpha
    for alpha in [1, 1.0, 2, 0.5, 0.001, 3, 1000, 0.3, -1.0, 0.0]:
        for bits, integer in [(8, 0), (4, 1)]:
            kw = dict(bits=bits, integer=integer, alpha=alpha)
            add(QB, kw, inp.rand((6, 4), 0.7 * 2.0 ** integer), "alpha.number", "random")
            add(QB, kw, inp.ties(2.0 ** (integer - bits + 1), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1),
                "alpha.number", "ties")
    add(QB, dict(bits=8, integer=0, alpha=0.001), np.array([0.3, 0.7, 0.123, -0.61], f32), "alpha.number", "notes")
    add(QB, dict(bits=8, integer=0, alpha=2), np.array([0.3, 0.6, 1.5], f32), "alpha.number", "notes")
    add(QB, dict(bits=8, integer=0, alpha=2.0), specials, "alpha.number", "specials")
    alist = [0.5, 1.0, 2.0, 4.0]
    for kw in [dict(bits=8, integer=0, alpha=alist), dict(bits=4, integer=1, symmetric=1, alpha=alist),
               dict(bits=6, integer=0, keep_negative=False, alpha=[0.25, 3.0, 1.0, 0.1])]:
        add(QB, kw, inp.rand((6, 4), 0.8), "alpha.list", "random")
        add(QB, kw, inp.rand((2, 3, 4), 0.8), "alpha.list", "rank3")
        add(QB, kw, inp.rand((4,), 0.8), "alpha.list", "rank1")
    add(QB, dict(bits=8, integer=0, alpha=[2.0]), inp.rand((6, 4), 0.8), "alpha.list", "random")
    for alpha in [np.array(2.0, f32), np.array([2.0], f32), np.array(0.5), np.array([0.5, 1.0, 2.0, 4.0], f32),
                  np.array([[0.5, 1.0, 2.0, 4.0]], f32)]:
        add(QB, dict(bits=8, integer=0, alpha=alpha), inp.rand((6, 4), 0.8), "alpha.array", "random")

    # auto / auto_po2
    for alpha in ["auto", "auto_po2"]:
        for bits in [1, 2, 3, 4, 8, 16]:
            for integer in [0, 2, -1]:
                for kn in [True, False]:
                    kw = dict(bits=bits, integer=integer, keep_negative=kn, alpha=alpha)
                    x = inp.rand((10, 5), 0.8 * 2.0 ** integer)
                    x[:, 4] = 0.0
                    add(QB, kw, x, alpha + ".grid", "random")
                    if kn:
                        add(QB, kw, qb_auto_ties(inp, bits, integer), alpha + ".grid", "ties")
            add(QB, dict(bits=bits, alpha=alpha), specials_cols(0.7), alpha + ".grid", "specials")
        add(QB, dict(bits=4, alpha=alpha, symmetric=0), inp.rand((6, 3)), alpha + ".grid", "random",
            note="symmetric forced to True by a string alpha")
        add(QB, dict(bits=4, alpha=alpha, use_stochastic_rounding=True), inp.rand((6, 3)), alpha + ".stochastic_inference", "random")
        # ranks and scale_axis
        for shape in [(7,), (6, 5), (3, 4, 5), (2, 3, 4, 5)]:
            r = len(shape)
            axes = [None, 0, r - 1, -1, [0], [r - 1], [0, r - 1], []]
            if r >= 3:
                axes += [1, [1, 2]]
            seen = []
            for ax in axes:
                if ax in seen:
                    continue
                seen.append(ax)
                for integer in [0, 2]:
                    kw = dict(bits=4, integer=integer, alpha=alpha, scale_axis=ax)
                    add(QB, kw, inp.rand(shape, 0.9 * 2.0 ** integer), alpha + ".scale_axis", "rank%d" % r)
        for shape in [(), (0,), (0, 4), (4, 0), (2, 0, 3)]:
            add(QB, dict(bits=4, alpha=alpha), inp.rand(shape, 0.9), alpha + ".rank", "rank0" if shape == () else "empty")
        add(QB, dict(bits=4, alpha=alpha, scale_axis=5), inp.rand((3, 4), 0.9), alpha + ".scale_axis", "rank2",
            note="scale_axis beyond the rank")
        # notes' derived examples
        add(QB, dict(bits=4, alpha=alpha), np.array([0.3, -0.05, 1.7, 0.001], f32), alpha + ".rank", "notes")
        add(QB, dict(bits=4, alpha=alpha), np.array([[0.3], [-0.05], [1.7], [0.001]], f32), alpha + ".rank", "notes")
        add(QB, dict(bits=4, alpha=alpha, keep_negative=False), np.array([[-1], [0.5], [1]], f32), alpha + ".grid", "notes")
        # qnoise / ste / variables
        for q in [0.0, 0.5, 0.3, 1.0]:
            for ste in [True, False]:
                for var in [False, True]:
                    kw = dict(bits=4, integer=1, alpha=alpha, qnoise_factor=q, use_ste=ste, use_variables=var)
                    add(QB, kw, inp.rand((6, 4), 1.2), alpha + ".qnoise", "random")
    # integer vs eps (notes §2.4)
    xs = (inp.rng.standard_normal((16, 4)) * 2.0 ** -12).astype(f32)
    for integer in [0, 4, 8, 10, 12]:
        add(QB, dict(bits=8, integer=integer, alpha="auto_po2"), xs, "auto_po2.integer_eps", "random")
        add(QB, dict(bits=8, integer=integer, alpha="auto"), xs, "auto.integer_eps", "random")
    # elements_per_scale
    x48 = inp.rand((4, 8), 1.0)
    x246 = inp.rand((2, 4, 6), 1.0)
    for kw, x in [(dict(scale_axis=1, elements_per_scale=2), x48), (dict(scale_axis=1, elements_per_scale=4), x48),
                  (dict(scale_axis=1, elements_per_scale=8), x48), (dict(scale_axis=1, elements_per_scale=1), x48),
                  (dict(scale_axis=1, elements_per_scale=3), x48), (dict(scale_axis=0, elements_per_scale=2), x48),
                  (dict(scale_axis=[0, 1], elements_per_scale=2), x48),
                  (dict(scale_axis=[0, 1], elements_per_scale=[2, 4]), x48),
                  (dict(scale_axis=[1], elements_per_scale=[4]), x48),
                  (dict(scale_axis=[0, 1], elements_per_scale=[2]), x48),
                  (dict(scale_axis=1, elements_per_scale=[2]), x48),
                  (dict(elements_per_scale=2), x48),
                  (dict(scale_axis=[1, 2], elements_per_scale=[2, 3]), x246),
                  (dict(scale_axis=2, elements_per_scale=3), x246),
                  (dict(scale_axis=1, elements_per_scale=2), inp.rand((8,), 1.0))]:
        add(QB, dict(bits=4, alpha="auto_po2", **kw), x, "auto_po2.elements_per_scale", "random")
    add(QB, dict(bits=4, alpha="auto", scale_axis=1, elements_per_scale=2), x48, "auto.elements_per_scale", "random")
    # min/max po2 exponent
    xsmall = inp.rand((8, 4), 0.05)
    for mn, mx in [(-3, None), (None, -6), (-4, -1), (0, 0), (-30, 5), (-2.5, None), (None, 3)]:
        kw = dict(bits=8, alpha="auto_po2", min_po2_exponent=mn, max_po2_exponent=mx)
        add(QB, kw, xsmall, "auto_po2.po2_exponent", "random")
        add(QB, kw, inp.rand((8, 4), 8.0), "auto_po2.po2_exponent", "random")
    add(QB, dict(bits=8, alpha="auto_po2", min_po2_exponent=-3, max_po2_exponent=-1, scale_axis=1, elements_per_scale=2),
        x48, "auto_po2.po2_exponent", "random")
    add(QB, dict(bits=8, alpha="auto", min_po2_exponent=-3), xsmall, "auto.po2_exponent", "random")
    add(QB, dict(bits=8, alpha=None, max_po2_exponent=-3), xsmall, "fixed.po2_exponent", "random")
    # post_training_scale
    xp = inp.rand((6, 4), 3.0)
    pts = np.array([[0.25, 2.0, 0.5, 4.0]], f32)
    for bits, integer, alpha, p in [(8, 3, "auto_po2", pts), (8, 3, "auto_po2", pts.tolist()),
                                    (8, 0, "auto_po2", 0.5), (4, 1, "auto", pts),
                                    (8, 3, "auto_po2", np.array([[0.25, 2.0, 0.5]], f32)),
                                    (8, 0, "bogus", 1.0), (8, 0, None, 1.0), (8, 0, 1.0, pts)]:
        add(QB, dict(bits=bits, integer=integer, alpha=alpha, post_training_scale=p), xp,
            "post_training_scale", "random")
    # bad / odd alpha strings
    for alpha in ["bogus", "my_po2", "AUTO", ""]:
        add(QB, dict(bits=4, alpha=alpha), inp.rand((6, 4), 1.0), "alpha.string_other", "random")
    # qnoise / STE / variables on the fixed path
    for bits, integer, sym, alpha in [(4, 1, True, 1), (8, 0, False, None), (4, 0, False, 0.3)]:
        for q in [0.0, 0.5, 0.3, 1.0]:
            for ste in [True, False]:
                for var in [False, True]:
                    kw = dict(bits=bits, integer=integer, symmetric=sym, alpha=alpha, qnoise_factor=q,
                              use_ste=ste, use_variables=var)
                    add(QB, kw, np.concatenate([np.array([0.0, 0.5, -0.5, 0.6, -0.6, 2.0, -2.0], f32),
                                                inp.rand((9,), 1.0), specials]), "fixed.qnoise", "mixed")
    for kw in [dict(bits=4, integer=1, use_variables=True, var_name="qb"),
               dict(bits=4, integer=1, var_name="qb_novar"),
               dict(bits=4, integer=1, use_variables=True, var_name="qb2", qnoise_factor=0.5)]:
        add(QB, kw, inp.rand((3, 4), 1.0), "fixed.var_name", "random")
    add(QB, dict(bits=4, integer=0, keep_negative=False, use_ste=False), np.array([-0.3, -0.0, 0.0, 0.3], f32),
        "fixed.qnoise", "notes")
    # sign of zero from negative subnormals depends on the element's position: TF's SIMD packets
    # (8 floats) give -0.0, the scalar remainder +0.0
    for n in (7, 17):
        add(QB, dict(bits=4, integer=0, keep_negative=False, use_ste=False), np.full(n, -1e-39, f32), "fixed.qnoise", "notes")
    add(QB, dict(bits=4, integer=1, alpha=1, qnoise_factor=0.3, use_ste=False), np.array([0.6], f32), "fixed.qnoise", "notes")
    add(QB, dict(bits=4, integer=1, alpha=1, qnoise_factor=0.3), np.array([0.6], f32), "fixed.qnoise", "notes")
    for bits, integer in [(4, 1), (8, 0), (1, 0)]:
        add(QB, dict(bits=bits, integer=integer, use_stochastic_rounding=True), inp.ties(2.0 ** (integer - bits + 1), -(2 ** (bits - 1)), 2 ** (bits - 1)),
            "fixed.stochastic_inference", "ties")

    # ---------------- quantized_relu ----------------
    QR = "quantized_relu"
    for bits in [1, 2, 3, 4, 6, 8, 16]:
        for integer in [0, 1, 2, 3]:
            for sig in [0, 1]:
                for ns in [0.0, 0.25]:
                    kw = dict(bits=bits, integer=integer, use_sigmoid=sig, negative_slope=ns)
                    nsb = bits - (ns != 0)
                    m = 2.0 ** nsb
                    mi = 2.0 ** integer
                    add(QR, kw, inp.rand((6, 8), 0.8 * mi), "relu.grid", "random")
                    if nsb >= 0:
                        if sig == 0:
                            step = mi / m
                            x = inp.ties(step, -m * max(ns, 1e-9) if ns else -3, m,
                                         neg_step=(step / ns if ns else None))
                        else:
                            # p = hardsig(x/mi)*m has ties at p = k + 1/2 -> x = mi*(2(k+1/2)/m - 1)
                            x = inp.ties(2.0 * mi / m, -1, m, extra_codes=())
                            x = np.concatenate([x - np.float32(mi), x, -x]).astype(f32)
                        add(QR, kw, x, "relu.grid", "ties")
                    if bits in (1, 4, 8) and integer in (0, 2):
                        add(QR, kw, specials, "relu.grid", "specials")
    for bits, integer in [(3, 3), (4, 5), (6, 6), (4, -1), (4, 1.5), (0, 0), (-1, 0)]:
        for ns in [0.0, 0.5]:
            kw = dict(bits=bits, integer=integer, negative_slope=ns)
            add(QR, kw, inp.rand((5, 6), 0.8 * 2.0 ** integer), "relu.odd_widths", "random")
    for ns in [0.125, 0.5, 1.0, 2.0, 0.0625, 0.1, -0.25, 3.0]:
        for bits, integer in [(4, 0), (8, 2)]:
            for sig in [0, 1]:
                kw = dict(bits=bits, integer=integer, use_sigmoid=sig, negative_slope=ns)
                step = 2.0 ** (integer - bits + 1)
                add(QR, kw, inp.rand((5, 6), 1.5 * 2.0 ** integer), "relu.negative_slope", "random")
                add(QR, kw, inp.ties(step, -(2 ** bits) * 2, 2 ** bits, neg_step=step / abs(ns), max_codes=30),
                    "relu.negative_slope", "ties")
    add(QR, dict(bits=8, integer=0, negative_slope=0.5), specials, "relu.negative_slope", "specials")
    for ub in [None, 1.5, 0.0, 0.3, 100.0, -1.0]:
        for qc in [True, False]:
            for bits, integer, ns in [(4, 1, 0.0), (8, 2, 0.0), (6, 2, 0.25)]:
                kw = dict(bits=bits, integer=integer, negative_slope=ns, relu_upper_bound=ub, is_quantized_clip=qc)
                add(QR, kw, np.concatenate([np.array([0.0, 0.5, -0.5, 0.6, 2.0, 3.0, 1.5, 1.49, 1.51, 0.3, 0.31], f32),
                                            inp.rand((12,), 2.0 ** integer)]), "relu.upper_bound", "mixed")
            add(QR, dict(bits=4, integer=1, use_sigmoid=1, relu_upper_bound=ub, is_quantized_clip=qc),
                inp.rand((12,), 2.0), "relu.upper_bound", "random")
    for q in [0.0, 0.5, 0.3, 1.0]:
        for ste in [True, False]:
            for var in [False, True]:
                for ub, qc, ns in [(None, False, 0.0), (None, True, 0.0), (1.5, False, 0.0), (1.5, True, 0.0),
                                   (None, True, 0.5)]:
                    kw = dict(bits=4, integer=1, negative_slope=ns, relu_upper_bound=ub, is_quantized_clip=qc,
                              qnoise_factor=q, use_ste=ste, use_variables=var)
                    add(QR, kw, np.concatenate([np.array([0.0, 0.5, -0.5, 0.6, 2.0, 3.0], f32),
                                                inp.rand((8,), 1.0), specials]), "relu.qnoise", "mixed")
    for kw in [dict(bits=4, integer=1, use_variables=True, var_name="qr"), dict(bits=4, integer=1, var_name="qr")]:
        add(QR, kw, inp.rand((3, 4), 1.0), "relu.var_name", "random")
    for sig, ns in [(0, 0.0), (1, 0.0), (0, 0.25), (1, 0.125)]:
        kw = dict(bits=4, integer=1, use_sigmoid=sig, negative_slope=ns, use_stochastic_rounding=True)
        add(QR, kw, inp.ties(0.125, -16, 16), "relu.stochastic_inference", "ties")
    for bits, integer in [(10, 2), (8, 0), (4, 0), (4, 3), (16, 0), (20, 2), (24, 0), (4, -1)]:
        kw = dict(bits=bits, integer=integer, enable_fast_inference=True)
        add(QR, kw, inp.rand((5, 6), 1.5 * 2.0 ** max(integer, 0)), "relu.fast_inference", "random")
        add(QR, kw, inp.ties(2.0 ** (integer - bits), -4, 2 ** bits), "relu.fast_inference", "ties")
        add(QR, kw, specials, "relu.fast_inference", "specials")
    add(QR, dict(bits=10, integer=2, enable_fast_inference=True, negative_slope=0.25, use_sigmoid=1, qnoise_factor=0.5),
        inp.rand((5, 6), 2.0), "relu.fast_inference", "random", note="fast path ignores the other options")
    for kw in [dict(bits=8, integer=0), dict(bits=4, integer=1, negative_slope=0.5, use_sigmoid=1)]:
        for shape in [(), (9,), (2, 3, 4), (2, 2, 3, 4), (0,), (2, 0, 3)]:
            add(QR, kw, inp.rand(shape, 0.8), "relu.rank", "rank%d" % len(shape) if all(shape) else "empty")
    add(QR, dict(bits=4, integer=0), np.array([1 / 32, 3 / 32, 5 / 32, 0.99], f32), "relu.grid", "notes")
    add(QR, dict(bits=4, integer=0, use_sigmoid=1), np.array([-1, 0, 0.1, 0.2, 0.5, 1, 2], f32), "relu.grid", "notes")
    add(QR, dict(bits=8, integer=0, is_quantized_clip=False), np.array([1e5, 3e7], f32), "relu.upper_bound", "notes")
    add(QR, dict(bits=8, integer=0, negative_slope=0.5), np.array([-3e7], f32), "relu.negative_slope", "notes")
    add(QR, dict(bits=6, integer=2, use_sigmoid=1, negative_slope=0.125), np.linspace(-5, 5, 81).astype(f32),
        "relu.negative_slope", "notes")

    # ---------------- quantized_linear ----------------
    QL = "quantized_linear"
    for bits in [1, 2, 3, 4, 8, 16]:
        for integer in [-2, 0, 1, 3]:
            for sym, kn in [(1, True), (0, True), (1, False), (0, False)]:
                kw = dict(bits=bits, integer=integer, symmetric=sym, keep_negative=kn)
                s = 2.0 ** (integer - bits + int(kn))
                u = 2.0 ** (bits - int(kn))
                lo = (-u + sym) if kn else 0
                add(QL, kw, inp.rand((6, 8), 0.7 * 2.0 ** integer), "linear.grid", "random")
                if bits == 1 and kn:
                    add(QL, kw, inp.ties(s, -3, 3), "linear.grid", "ties")
                else:
                    add(QL, kw, inp.ties(s, lo if kn else -3, u - 1), "linear.grid", "ties")
                if bits in (1, 4, 8, 16) and integer in (0, 3):
                    add(QL, kw, specials, "linear.grid", "specials")
    for bits in [0, -1, 0.5]:
        add(QL, dict(bits=bits), inp.rand((3, 4)), "linear.bad_bits", "random")
    for kw in [dict(bits=4, integer=-1), dict(bits=4, integer=6), dict(bits=4, integer=1.5), dict(bits=24, integer=0),
               dict(bits=3, integer=5, keep_negative=False)]:
        add(QL, kw, inp.rand((5, 6), 0.8 * 2.0 ** kw["integer"]), "linear.odd_widths", "random")
        add(QL, kw, specials, "linear.odd_widths", "specials")
    for alpha in [2.0, 0.5, 0.3, 1, 3, -1.0, 0.0]:
        for bits, integer, sym in [(8, 0, 1), (4, 1, 0)]:
            kw = dict(bits=bits, integer=integer, symmetric=sym, alpha=alpha)
            add(QL, kw, inp.rand((6, 4), 0.7 * 2.0 ** integer * abs(alpha or 1)), "linear.alpha_number", "random")
            add(QL, kw, inp.ties(2.0 ** (integer - bits + 1) * (alpha or 1), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1),
                "linear.alpha_number", "ties")
    add(QL, dict(bits=8, integer=0, alpha=2.0), specials, "linear.alpha_number", "specials")
    add(QL, dict(bits=1, alpha=2.0), inp.rand((6, 4)), "linear.alpha_number", "random")
    for alpha in [[0.5, 1.0, 2.0, 4.0], np.array([0.5, 1.0, 2.0, 4.0], f32), np.array([[0.25, 3.0, 1.0, 0.1]], f32),
                  np.array(2.0, f32), [2.0]]:
        for kw in [dict(bits=8, integer=0, alpha=alpha), dict(bits=4, integer=1, keep_negative=False, alpha=alpha)]:
            add(QL, kw, inp.rand((6, 4), 1.0), "linear.alpha_array", "random")
            add(QL, kw, inp.rand((2, 3, 4), 1.0), "linear.alpha_array", "rank3")
    for alpha in ["auto", "auto_po2"]:
        for bits in [1, 2, 3, 4, 8, 16]:
            for integer in [0, 2]:
                for sym, kn in [(1, True), (0, True), (1, False), (0, False)]:
                    kw = dict(bits=bits, integer=integer, symmetric=sym, keep_negative=kn, alpha=alpha)
                    x = inp.rand((10, 5), 0.8 * 2.0 ** integer)
                    x[:, 4] = 0.0
                    add(QL, kw, x, "linear." + alpha + ".grid", "random")
                    if integer == 0:
                        add(QL, kw, ql_auto_ties(inp, bits, sym, kn), "linear." + alpha + ".grid", "ties")
            add(QL, dict(bits=bits, alpha=alpha), specials_cols(0.7), "linear." + alpha + ".grid", "specials")
        for shape in [(7,), (6, 5), (3, 4, 5), (2, 3, 4, 5)]:
            r = len(shape)
            axes = [None, 0, r - 1, -1, [0], [r - 1], [0, r - 1], []]
            if r >= 3:
                axes += [1, [1, 2]]
            seen = []
            for ax in axes:
                if ax in seen:
                    continue
                seen.append(ax)
                add(QL, dict(bits=4, alpha=alpha, scale_axis=ax), inp.rand(shape, 0.9), "linear." + alpha + ".scale_axis",
                    "rank%d" % r)
        for shape in [(), (0,), (0, 4), (4, 0)]:
            add(QL, dict(bits=4, alpha=alpha), inp.rand(shape, 0.9), "linear." + alpha + ".rank",
                "rank0" if shape == () else "empty")
        add(QL, dict(bits=4, alpha=alpha, use_stochastic_rounding=True), inp.rand((6, 3)),
            "linear." + alpha + ".stochastic_inference", "random")
        for q in [0.0, 0.5, 0.3]:
            for var in [False, True]:
                add(QL, dict(bits=4, integer=1, alpha=alpha, qnoise_factor=q, use_variables=var), inp.rand((6, 4), 1.2),
                    "linear." + alpha + ".qnoise", "random")
    add(QL, dict(bits=2, alpha="auto"), np.array([0, 0.5, 1, 1.5, 2], f32), "linear.auto.rank", "notes")
    add(QL, dict(bits=8, integer=3), np.array([0, 0.5, 1, 1.5, 2], f32), "linear.grid", "notes")
    for alpha in ["bogus", "AUTO", "my_po2"]:
        add(QL, dict(bits=4, alpha=alpha), inp.rand((3, 4)), "linear.alpha_string_other", "random")
    for q in [0.0, 0.5, 0.3, 1.0]:
        for var in [False, True]:
            for bits, integer, alpha in [(4, 1, 1), (8, 0, None), (4, 0, 0.3)]:
                kw = dict(bits=bits, integer=integer, alpha=alpha, qnoise_factor=q, use_variables=var)
                add(QL, kw, np.concatenate([np.array([0.0, 0.5, -0.5, 0.6, -0.6, 2.0, -2.0], f32),
                                            inp.rand((9,), 1.0), specials]), "linear.qnoise", "mixed")
    for kw in [dict(bits=4, integer=1, use_variables=True, var_name="ql"), dict(bits=4, integer=1, var_name="ql")]:
        add(QL, kw, inp.rand((3, 4), 1.0), "linear.var_name", "random")
    for bits, kn in [(4, True), (1, True), (1, False), (8, False)]:
        add(QL, dict(bits=bits, keep_negative=kn, use_stochastic_rounding=True), inp.ties(2.0 ** (1 - bits), -(2 ** bits), 2 ** bits),
            "linear.stochastic_inference", "ties")
    for kw in [dict(bits=8, integer=0), dict(bits=1), dict(bits=4, integer=1, symmetric=0)]:
        for shape in [(), (9,), (2, 3, 4), (2, 2, 3, 4), (0,), (2, 0, 3)]:
            add(QL, kw, inp.rand(shape, 0.8), "linear.rank", "rank%d" % len(shape) if all(shape) else "empty")
    add(QL, dict(bits=1), np.array([-2, -0.1, 0, -0.0, 0.1, 2], f32), "linear.grid", "notes")
    add(QL, dict(bits=1, keep_negative=False), np.array([-2, -0.1, 0, 0.1, 0.3, 0.5, 0.75, 2], f32), "linear.grid", "notes")

    # ---------------- TF-tensor inputs (TF flushes subnormals; the numpy parts of QKeras do not) ----------------
    tf_kinds = [
        (QB, dict(bits=8, integer=0)), (QB, dict(bits=4, integer=0, keep_negative=False, use_ste=False)),
        (QB, dict(bits=8, integer=0, qnoise_factor=0.5, use_ste=False)), (QB, dict(bits=8, alpha="auto_po2")),
        (QB, dict(bits=8, alpha="auto")), (QB, dict(bits=8, alpha=[0.5, 1.0, 2.0, 4.0])),
        (QR, dict(bits=8, integer=0)), (QR, dict(bits=8, integer=0, negative_slope=0.25)),
        (QR, dict(bits=8, integer=0, qnoise_factor=0.5, use_ste=False)), (QR, dict(bits=8, integer=0, enable_fast_inference=True)),
        (QR, dict(bits=4, integer=1, use_sigmoid=1)),
        (QL, dict(bits=8, integer=0)), (QL, dict(bits=1)), (QL, dict(bits=8, alpha="auto_po2")), (QL, dict(bits=8, alpha="auto")),
    ]
    for qn, kw in tf_kinds:
        sp = specials if "alpha" not in kw or not isinstance(kw["alpha"], str) else specials_cols(0.7)
        if isinstance(kw.get("alpha"), list):
            sp = specials_tail[: (specials_tail.size // 4) * 4].reshape(-1, 4)
        sub = (inp.rand((4, 4), 1.0) * np.float32(1e-38)).astype(f32)
        for kind in ["numpy", "tf"]:
            add(qn, kw, sp, "input_kind", "specials", input_kind=kind)
            add(qn, kw, sub, "input_kind", "subnormal", input_kind=kind)

    # ---------------- appended for issue 17 (after every earlier case, so their data is unchanged) ----------------
    # The auto path with use_ste=False: -0.0 and negative subnormals give +0.0 (z from tf.sign(x / m_i),
    # +0 for both zeros; TF flushes the subnormals), at every position of SIMD packets and remainders.
    def signed_zeros(n, cols=None):
        x = np.linspace(-1, 1, n, dtype=f32)
        x[0::4] = f32(-0.0)
        x[1::4] = f32(-1e-39)
        x[2::8] = f32(-(2.0 ** -149))
        x[3::8] = f32(0.0)
        return x if cols is None else x.reshape(-1, cols)
    for kw in [dict(bits=5, integer=2, alpha="auto", symmetric=1, use_ste=False),
               dict(bits=4, integer=0, alpha="auto", qnoise_factor=0.125, use_ste=False),
               dict(bits=4, integer=0, alpha="auto", qnoise_factor=0.125),
               dict(bits=4, integer=0, alpha="auto", keep_negative=False, use_ste=False)]:
        for x in (signed_zeros(6), signed_zeros(40), signed_zeros(40, 8)):
            add(QB, kw, x, "auto.qnoise", "notes")
    for kw in [dict(bits=4, integer=0, alpha="auto_po2", use_ste=False),
               dict(bits=8, integer=3, alpha="auto_po2", qnoise_factor=0.5, use_ste=False)]:
        for x in (signed_zeros(6), signed_zeros(40), signed_zeros(40, 8)):
            add(QB, kw, x, "auto_po2.qnoise", "notes")
    return cases


def qb_auto_ties(inp, bits, integer):
    """quantized_bits auto: a column whose max is L*u makes the "auto" scale exactly u (in units of
    x/2^integer); the other entries sit on (k+1/2)*u and +-1 ulp."""
    np = _np()
    L = 2 ** (bits - 1) - 1
    mi = 2.0 ** integer
    cols = []
    for c in range(3):
        u = 2.0 ** (-2 - c)
        if L <= 0:
            ks = [0, 1, 2]
        elif L <= 12:
            ks = list(range(0, L + 1))
        else:
            ks = [0, 1, 2, 3, L - 3, L - 2, L - 1, L] + [int(k) for k in inp.rng.integers(4, L - 3, 4)]
        vals = [np.float32(max(L, 1) * u * mi)]
        for k in ks:
            h = np.float32((k + 0.5) * u * mi)
            vals += [h, np.nextafter(h, np.float32(np.inf)), np.nextafter(h, np.float32(-np.inf)), -h]
        cols.append(vals)
    n = max(len(c) for c in cols)
    out = np.zeros((n, 3), np.float32)
    for j, c in enumerate(cols):
        out[: len(c), j] = c
    return out


def ql_auto_ties(inp, bits, sym, kn):
    """quantized_linear auto: a column maximum chosen so that max*2/clip_range (or max/clip_range)
    is exactly u; other entries on (k+1/2)*u and +-1 ulp."""
    np = _np()
    if bits == 1 and kn:
        cmin, cmax = -0.5, 0.5
    else:
        uu = 2.0 ** (bits - int(kn))
        cmin, cmax = (int(kn) * (-uu + sym)), uu - 1
    rng_ = cmax - cmin
    cols = []
    for c in range(3):
        u = 2.0 ** (-2 - c)
        mx = rng_ * u / 2 if kn else rng_ * u
        top = int(cmax)
        if top <= 12:
            ks = list(range(int(np.floor(cmin)) - 1, top + 1))
        else:
            ks = [-3, -2, -1, 0, 1, 2, top - 2, top - 1, top] + [int(k) for k in inp.rng.integers(3, top - 3, 4)]
        vals = [np.float32(mx)]
        for k in ks:
            h = np.float32((k + 0.5) * u)
            if abs(h) > mx:
                continue
            vals += [h, np.nextafter(h, np.float32(np.inf)), np.nextafter(h, np.float32(-np.inf))]
        cols.append(vals)
    n = max(len(c) for c in cols)
    out = np.zeros((n, 3), np.float32)
    for j, c in enumerate(cols):
        out[: len(c), j] = c
    return out


# ------------------------------------------------------------------------------------------------
# Running one case
# ------------------------------------------------------------------------------------------------

def to_array(v):
    np = _np()
    import tensorflow as tf

    if isinstance(v, (tf.Tensor, tf.Variable)):
        return np.asarray(v.numpy())
    return np.asarray(v)


RANGE_LIMIT = 1024  # longer range() results are stored as head, tail and a digest


def record_value(store, v, prev=None):
    """Describes an attribute's value in the index: a single number inline ("value", exact: a
    float32 widened to a JSON double), anything longer by reference into the store. When `prev`
    (the record of the same attribute before the call) holds identical bits, the record says so
    instead of storing the array again."""
    np = _np()
    a = to_array(v)
    d = {"dtype": str(a.dtype), "shape": list(a.shape), "pytype": type(v).__name__}
    if a.dtype.kind not in "fiub":
        d["repr"] = repr(v)
        return d
    digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
    if prev is not None and prev.get("_digest") == digest and prev.get("dtype") == d["dtype"] \
            and prev.get("shape") == d["shape"] and prev.get("pytype") == d["pytype"]:
        return {"same_as_before_call": True}
    d["_digest"] = digest
    if a.size == 1:
        d["value"] = enc(a.reshape(()).item())
    elif a.size > RANGE_LIMIT:
        d["sha256_16"] = digest  # first 16 hex digits of sha256 over the C-order bytes
        d["head"] = store.put(a.ravel()[:64].copy())
        d["tail"] = store.put(a.ravel()[-64:].copy())
    else:
        ref = store.put(a)
        del ref["shape"]  # the attribute's own shape
        d["ref"] = ref
    return d


def attr(store, fn, prev=None):
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            v = fn()
        d = record_value(store, v, prev)
        ws = sorted({str(x.category.__name__) + ": " + str(x.message)[:200] for x in w})
        if ws:
            d["warnings"] = ws
        return d
    except Exception as e:  # noqa: BLE001 - every failure is a recorded outcome
        return {"error": err("attr", e)}


def run_case(cid, c, classes, pool, store):
    np = _np()
    import tensorflow as tf

    rec = {"id": cid, "quantizer": c["quantizer"], "path": c["path"], "inputs": c["inputs"],
           "kwargs": enc(c["kwargs"]), "input": pool.put(c["x"]), "input_kind": c["input_kind"],
           "shape": list(c["x"].shape)}
    if "note" in c:
        rec["note"] = c["note"]
    cls = classes[c["quantizer"]]
    try:
        q = cls(**dec(enc(c["kwargs"])))
    except Exception as e:  # noqa: BLE001
        rec["outcome"] = err("init", e)
        return rec
    before = {}
    big = isinstance(c["kwargs"].get("bits"), (int, float)) and c["kwargs"].get("bits", 8) > 20
    for name in ("min", "max", "range"):
        if name == "range" and big:
            before[name] = {"skipped": "range() of more than 2^20 values is not recorded"}
            continue
        before[name] = attr(store, getattr(q, name))
    rec["before_call"] = before
    x = c["x"].copy()
    xin = tf.constant(x) if c["input_kind"] == "tf" else x
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = q(xin)
        ws = sorted({str(x_.category.__name__) + ": " + str(x_.message)[:200] for x_ in w})
        if ws:
            rec["warnings"] = ws
    except Exception as e:  # noqa: BLE001
        rec["outcome"] = err("call", e)
        y = None
    if y is not None:
        ya = to_array(y)
        rec["outcome"] = "ok"
        rec["output"] = store.put(ya)
        rec["output_dtype"] = str(ya.dtype)
        rec["output_pytype"] = type(y).__name__
    after = {}
    for name in ("min", "max", "range"):
        if name == "range" and big:
            after[name] = before[name]
            continue
        after[name] = attr(store, getattr(q, name), before[name])
    after["scale"] = attr(store, lambda: q.scale)
    if c["quantizer"] == "quantized_linear":
        after["quantization_scale"] = attr(store, lambda: q.quantization_scale)
        after["data_type_scale"] = attr(store, lambda: q.data_type_scale)
        try:
            lo, hi = q.get_clip_bounds()
            after["get_clip_bounds"] = [record_value(store, lo), record_value(store, hi)]
        except Exception as e:  # noqa: BLE001
            after["get_clip_bounds"] = {"error": err("attr", e)}
    if c["quantizer"] == "quantized_bits":
        after["freeze_scale"] = bool(getattr(q, "freeze_scale", False))
    rec["after_call"] = after
    for part in (before, after):
        for v in part.values():
            for e in (v if isinstance(v, list) else [v]):
                if isinstance(e, dict):
                    e.pop("_digest", None)
    try:
        rec["str"] = str(q)
    except Exception as e:  # noqa: BLE001
        rec["str"] = {"error": err("str", e)}
    try:
        cfg = q.get_config()
        rec["get_config"] = enc(cfg)
        try:
            json.dumps(cfg)
            rec["get_config_json_native"] = True
        except (TypeError, ValueError):
            rec["get_config_json_native"] = False
    except Exception as e:  # noqa: BLE001
        rec["get_config"] = {"error": err("get_config", e)}
    return rec


# ------------------------------------------------------------------------------------------------
# QKeras' own tests (literal vectors)
# ------------------------------------------------------------------------------------------------

RELU_33 = [0.458069, 0.573227, 0.194336, 1.539047, 0.045883, 4.009995, 3.962494, 3.937500, 0.363266, 0.875198,
           0.710938, 4.000000, 7.000000, 3.937500, 3.937592, 0.199326, 0.458008, 0.625977, 0.544922, 1.046875,
           0.586899, 3.367188, 3.804688, 0.312500, 0.062500, 0.562500, 0.375000, 3.367188, 1.046875, 2.796875,
           0.054688, 1.562500, 2.562500]


def own_tests(classes):
    """The literal vectors of QKeras' own tests, each with the file/test it comes from, the
    assertion the test makes, and the value QKeras at the pinned commit gives for it."""
    np = _np()
    import tensorflow as tf

    qb, qr, ql = classes["quantized_bits"], classes["quantized_relu"], classes["quantized_linear"]
    f32 = np.float32
    out = []
    HEAD = PINNED_COMMIT
    OLD = "d7b20af563498e248094e0e0481ce73e69ceaa39"

    def hexs(a):
        a = np.asarray(a, dtype=np.float32)
        return [format(int(b), "08x") for b in a.ravel().view(np.uint32)]

    def vec(test, commit, quantizer, kwargs, x, expected, assertion, note=None, shape=None, input_dtype="float32",
            call=None):
        xa = np.asarray(x, dtype=input_dtype)
        if shape:
            xa = xa.reshape(shape)
        q = {"quantized_bits": qb, "quantized_relu": qr, "quantized_linear": ql}[quantizer](**kwargs)
        y = q(xa) if call is None else call(q, xa)
        ya = to_array(y)
        e = {"test": test, "commit": commit, "quantizer": quantizer, "kwargs": enc(kwargs),
             "input": enc(xa.astype(np.float32).tolist()) if input_dtype == "float32" else enc(xa.tolist()),
             "input_dtype": input_dtype, "shape": list(xa.shape), "expected": enc(expected), "assertion": assertion,
             "qkeras_output": enc(ya.astype(np.float64).tolist()), "qkeras_output_dtype": str(ya.dtype),
             "qkeras_output_f32_hex": hexs(ya) if ya.dtype == np.float32 else None}
        if expected is not None:
            ex = np.asarray(expected, dtype=np.float64).reshape(ya.shape)
            e["expected_equals_qkeras_exactly"] = bool(np.array_equal(ex.astype(np.float32), ya.astype(np.float32)))
        if note:
            e["note"] = note
        out.append(e)
        return q, ya

    # tests/qactivation_test.py::test_quantized_bits
    T = "tests/qactivation_test.py::test_quantized_bits"
    vec(T, HEAD, "quantized_bits", dict(bits=8, integer=100, symmetric=1, keep_negative=True),
        [[1.25e29, 3, -1.1e30, 4.0e32]], [[1.23794004e29, 0.0, -1.09929075e30, 1.26269884e30]], "assert_allclose rtol=5e27",
        note="vacuous: rtol (not atol) of 5e27 passes anything; the listed numbers are not QKeras' output, use qkeras_output")
    vec(T, HEAD, "quantized_bits", dict(bits=6, integer=2, symmetric=0, keep_negative=True),
        [[-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1, 4, 10]], [[-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1, 3.875, 3.875]],
        "assert_allclose rtol=1e-5")
    vec(T, HEAD, "quantized_bits", dict(bits=6, integer=2, symmetric=0, keep_negative=False),
        [[-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1, 4, 10]], [[0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 1, 3.9375, 3.9375]],
        "assert_allclose rtol=1e-5")
    vec(T, HEAD, "quantized_bits", dict(bits=6, integer=2, symmetric=1, keep_negative=True),
        [[-10, -4, -1.0, -0.5, 0.0, 0.5, 1, 4, 10]], [[-3.875, -3.875, -1.0, -0.5, 0.0, 0.5, 1, 3.875, 3.875]],
        "assert_allclose rtol=1e-5")
    # test_quantized_bits_with_auto_po2_scale
    T = "tests/qactivation_test.py::test_quantized_bits_with_auto_po2_scale"
    xpo2 = [[0.23, 2.76, 0.1, 0.33], [0.53, 0.16, 0.3, 1.43]]
    for bits, integer, eo, es in [(4, 2, [[0.25, 3.0, 0.09375, 0.25], [0.4375, 0.0, 0.21875, 1.5]], [[0.125, 1., 0.0625, 0.5]]),
                                  (4, 1, [[0.25, 3., 0.09375, 0.25], [0.4375, 0., 0.21875, 1.5]], [[0.25, 2., 0.125, 1.]]),
                                  (5, 2, [[0.21875, 2.75, 0.09375, 0.375], [0.46875, 0.25, 0.234375, 1.375]],
                                   [[0.125, 1, 0.0625, 0.5]])]:
        q, _ = vec(T, HEAD, "quantized_bits", dict(bits=bits, integer=integer, alpha="auto_po2"), xpo2, eo,
                   "assert_array_equal (output)", input_dtype="float64",
                   note="the test passes a float64 numpy array; QKeras casts it to float32")
        s = to_array(q.scale)
        out[-1]["expected_scale"] = es
        out[-1]["qkeras_scale"] = enc(s.astype(np.float64).tolist())
        out[-1]["expected_scale_equals_qkeras_exactly"] = bool(np.array_equal(np.asarray(es, np.float32), s))
    # test_quantized_relu (qactivation)
    T = "tests/qactivation_test.py::test_quantized_relu"
    vec(T, HEAD, "quantized_relu", dict(bits=6, integer=2, use_sigmoid=0),
        [[-3.0, 0.0, 2.5625, 3.3671875, 1.5625, 1.046875, 0.054688]], [[0.0, 0.0, 2.5625, 3.375, 1.5625, 1.0625, 0.0625]],
        "assert_allclose rtol=1e-5")
    vec(T, HEAD, "quantized_relu", dict(bits=6, integer=2, use_sigmoid=1), [RELU_33],
        [[0.5, 0.625, 0.25, 1.5, 0.0, 3.9375, 3.9375, 3.9375, 0.375, 0.875, 0.75, 3.9375, 3.9375, 3.9375, 3.9375, 0.25, 0.5,
          0.625, 0.5, 1.0, 0.625, 3.375, 3.75, 0.25, 0.0, 0.5, 0.375, 3.375, 1.0, 2.75, 0.0, 1.5, 2.5]],
        "assert_allclose rtol=1e-5")
    # test_quantized_relu_fast_inference
    T = "tests/qactivation_test.py::test_quantized_relu_fast_inference"
    xfi = np.array([-2.1, 0.73, 2.36, 4.98])
    q1 = qr(10, 2, enable_fast_inference=False)
    q2 = qr(10, 2, enable_fast_inference=True)
    y1, y2 = to_array(q1(xfi)), to_array(q2(xfi))
    out.append({"test": T, "commit": HEAD, "quantizer": "quantized_relu",
                "kwargs": [enc(dict(bits=10, integer=2, enable_fast_inference=False)), enc(dict(bits=10, integer=2, enable_fast_inference=True))],
                "input": xfi.tolist(), "input_dtype": "float64", "expected": None,
                "assertion": "assert_array_equal(q1(x), q2(x)) (no literal expected values)",
                "qkeras_output": [y1.astype(np.float64).tolist(), y2.astype(np.float64).tolist()],
                "qkeras_output_dtype": [str(y1.dtype), str(y2.dtype)],
                "note": "float64 input: the normal path casts to float32, the fast path computes in float64"})
    # tests/leakyrelu_test.py::test_quantized_relu
    T = "tests/leakyrelu_test.py::test_quantized_relu"
    vec(T, HEAD, "quantized_relu", dict(bits=6, integer=2, use_sigmoid=0, negative_slope=0.25),
        [[-3.0, -2.0, -1.0, 0.0, 2.5625, 3.3671875, 1.5625, 1.046875, 0.054688, 6.0]],
        [[-0.75, -0.5, -0.25, 0.0, 2.5, 3.375, 1.5, 1.0, 0.0, 3.875]], "assert_allclose rtol=1e-5")
    vec(T, HEAD, "quantized_relu", dict(bits=6, integer=2, use_sigmoid=1, negative_slope=0.125), [RELU_33],
        [[0.5, 0.5, 0.25, 1.5, 0., 3.875, 3.875, 3.875, 0.25, 1., 0.75, 3.875, 3.875, 3.875, 3.875, 0.25, 0.5, 0.75,
          0.5, 1., 0.5, 3.25, 3.75, 0.25, 0., 0.5, 0.5, 3.25, 1., 2.75, 0., 1.5, 2.5]], "assert_allclose rtol=1e-5")
    vec(T, HEAD, "quantized_relu", dict(bits=6, integer=2, use_sigmoid=1, negative_slope=0.125), [[-v for v in RELU_33]],
        [[0.0, 0.0, 0.0, -0.25, 0.0, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, -0.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0, -0.25,
          0.0, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0, -0.5, -0.25, -0.25, 0.0, -0.25, -0.25]], "assert_allclose rtol=1e-5")
    # tests/qnoise_test.py
    T = "tests/qnoise_test.py::test_qnoise_quantized_bits"
    xin = [0.0, 0.5, -0.5, 0.6, -0.6, 2.0, -2.0]
    xq = np.array([0.0, 0.5, -0.5, 0.5, -0.5, 1.75, -1.75], f32)
    for qf, exp in [(0.0, np.array(xin, f32)), (1.0, xq), (0.5, 0.5 * (np.array(xin, f32) + xq))]:
        def call(q, xa, qf=qf):
            q.update_qnoise_factor(qnoise_factor=qf)
            return q(xa)
        vec(T, HEAD, "quantized_bits", dict(bits=4, integer=1, symmetric=True, keep_negative=True, alpha=1,
                                           use_stochastic_rounding=False, use_variables=True),
            xin, exp.tolist(), "assert_equal", call=call, note="update_qnoise_factor(%r) before the call" % qf)
        out[-1]["update_qnoise_factor"] = qf
    T = "tests/qnoise_test.py::test_qnoise_quantized_relu"
    rin = [0.0, 0.5, -0.5, 0.6, 2.0, 3.0]
    xr = np.array([0.0, 0.5, 0.0, 0.6, 2.0, 3.0], f32)
    x_ub = np.array([0.0, 0.5, 0.0, 0.6, 1.5, 1.5], f32)
    x_cl = np.array([0.0, 0.5, 0.0, 0.6, 1.875, 1.875], f32)
    xqr = np.array([0.0, 0.5, 0.0, 0.625, 1.875, 1.875], f32)
    for ub, qc, exps in [(None, False, [xr, xqr, 0.5 * (xr + xqr)]), (None, True, [x_cl, xqr, 0.5 * (x_cl + xqr)]),
                         (1.5, False, [np.clip(x_ub, None, 1.5), np.clip(xqr, None, 1.5), np.clip(0.5 * (x_ub + xqr), None, 1.5)]),
                         (1.5, True, [x_cl, xqr, 0.5 * (x_cl + xqr)])]:
        for qf, exp in zip([0.0, 1.0, 0.5], exps):
            def call(q, xa, qf=qf):
                q.update_qnoise_factor(qnoise_factor=qf)
                return q(xa)
            vec(T, HEAD, "quantized_relu", dict(bits=4, integer=1, use_sigmoid=False, negative_slope=0,
                                               use_stochastic_rounding=False, relu_upper_bound=ub, is_quantized_clip=qc,
                                               use_variables=True),
                rin, np.asarray(exp, f32).tolist(), "assert_equal", call=call,
                note="update_qnoise_factor(%r) before the call" % qf)
            out[-1]["update_qnoise_factor"] = qf
    # tests/min_max_test.py::test_quantized_bits
    T = "tests/min_max_test.py::test_quantized_bits"
    mm = {(1, 0): [-1.0, 1.0], (2, 0): [-1.0, 1.0], (3, 0): [-1.0, 1.0], (4, 0): [-1.0, 1.0], (5, 0): [-1.0, 1.0],
          (6, 0): [-1.0, 1.0], (7, 0): [-1.0, 1.0], (8, 0): [-1.0, 1.0], (1, 1): [-1.0, 1.0], (2, 1): [-2.0, 2.0],
          (3, 1): [-2.0, 2.0], (4, 1): [-2.0, 2.0], (5, 1): [-2.0, 2.0], (6, 1): [-2.0, 2.0], (7, 1): [-2.0, 2.0],
          (8, 1): [-2.0, 2.0], (3, 2): [-4.0, 4.0], (4, 2): [-4.0, 4.0], (5, 2): [-4.0, 4.0], (6, 2): [-4.0, 4.0],
          (7, 2): [-4.0, 4.0], (8, 2): [-4.0, 4.0]}
    for (b, i), (emin, emax) in mm.items():
        q = qb(b, i, 1)
        e = {"test": T, "commit": HEAD, "quantizer": "quantized_bits", "kwargs": enc(dict(bits=b, integer=i, symmetric=1)),
             "expected_min": emin, "expected_max": emax, "assertion": "expected == q.min(), q.max() (no call)",
             "qkeras_min": float(q.min()), "qkeras_max": float(q.max())}
        if b <= i:
            e["note"] = "the test's loop skips this entry (b <= i)"
        out.append(e)
    # tests/range_test.py
    for T, cls, table in [
        ("tests/range_test.py::test_quantized_relu_range", qr,
         {(3, 0): [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875], (3, 1): [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75],
          (3, 2): [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5], (3, 3): [0, 1, 2, 3, 4, 5, 6, 7],
          (6, 1): [k / 32 for k in range(64)]}),
        ("tests/range_test.py::test_quantized_bits_range", qb,
         {(3, 0): [0.0, 0.25, 0.5, 0.75, -1.0, -0.75, -0.5, -0.25], (3, 1): [0.0, 0.5, 1.0, 1.5, -2.0, -1.5, -1.0, -0.5],
          (3, 2): [0.0, 1.0, 2.0, 3.0, -4.0, -3.0, -2.0, -1.0], (3, 3): [0.0, 2.0, 4.0, 6.0, -8.0, -6.0, -4.0, -2.0],
          (6, 1): [k / 16 for k in range(32)] + [-2 + k / 16 for k in range(32)]})]:
        for (b, i), exp in table.items():
            r = to_array(cls(b, i).range())
            out.append({"test": T, "commit": HEAD, "quantizer": cls.__name__, "kwargs": enc(dict(bits=b, integer=i)),
                        "expected_range": exp, "assertion": "assert_allclose(q.range(), expected, rtol=1e-5)",
                        "qkeras_range": r.astype(np.float64).tolist(), "qkeras_range_dtype": str(r.dtype),
                        "expected_equals_qkeras_exactly": bool(np.array_equal(np.asarray(exp, np.float64), r.astype(np.float64)))})
    # quantized_linear tests deleted from HEAD (file at d7b20af), run here against the HEAD code
    T = "tests/qactivation_test.py::TestQuantizedLinear::test_sign_function"
    q, y = vec(T, OLD, "quantized_linear", dict(bits=1, keep_negative=True), [-1.0, 0.0, 1.0, 2.0, 3.0],
               [-0.5, 0.5, 0.5, 0.5, 0.5], "tf.equal(res, q.max() * [-1, 1, 1, 1, 1])",
               note="expected written out: q.max() = 0.5")
    T = "tests/qactivation_test.py::TestQuantizedLinear::test_scale_shape"
    for shape in [(1,), (2, 3), (2, 2, 4)]:
        for alpha in ["auto", "auto_po2"]:
            q = ql(alpha=alpha)
            q(tf.ones(shape))
            exp = (1,) if len(shape) == 1 else tuple([1] * (len(shape) - 1)) + shape[-1:]
            s = to_array(q.scale)
            out.append({"test": T, "commit": OLD, "quantizer": "quantized_linear", "kwargs": enc(dict(alpha=alpha)),
                        "input": "tf.ones(%r)" % (shape,), "shape": list(shape), "expected_scale_shape": list(exp),
                        "assertion": "q.scale.shape == expected", "qkeras_scale": s.astype(np.float64).tolist(),
                        "qkeras_scale_shape": list(s.shape)})
    T = "tests/qactivation_test.py::TestQuantizedLinear::test_scale_values"
    for inputs, ea, ep in [([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 6.0, 8.0, 10.0], [2.0, 4.0, 8.0, 8.0, 8.0]),
                           ([[-1.0, 0.0, 1.0, 2.5, 4.0], [-1.0, 4.0, 5.0, -2.0, -1.0], [1.0, 2.0, 3.0, 0.0, 20.0]],
                            [[2.0, 8.0, 10.0, 5.0, 40.0]], [[2.0, 8.0, 8.0, 4.0, 32.0]]),
                           ([[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]], [[[12.0, 14.0]]], [[[16.0, 16.0]]])]:
        for alpha, exp in [("auto", ea), ("auto_po2", ep)]:
            q, y = vec(T, OLD, "quantized_linear", dict(alpha=alpha, bits=2), inputs, None,
                       "tf.debugging.assert_equal(q.scale, expected_scale)", input_dtype="float64",
                       note="input passed as a Python list")
            s = to_array(q.scale)
            out[-1]["expected_scale"] = exp
            out[-1]["qkeras_scale"] = s.astype(np.float64).tolist()
            out[-1]["expected_scale_equals_qkeras_exactly"] = bool(np.array_equal(np.asarray(exp, np.float32), s))
    T = "tests/qactivation_test.py::TestQuantizedLinear::test_gradients_explicit"
    for kn, bits, eg in [(True, 1, [0, 1, 1, 1, 0]), (True, 8, [0, 1, 1, 1, 0]), (False, 1, [0, 0, 1, 1, 0]),
                         (False, 8, [0, 0, 1, 1, 0])]:
        xv = tf.Variable([-1.1, -0.1, 0.0, 0.1, 1.1])
        q = ql(bits=bits, keep_negative=kn)
        with tf.GradientTape() as tape:
            tape.watch(xv)
            o = q(xv)
        g = to_array(tape.gradient(o, xv))
        out.append({"test": T, "commit": OLD, "quantizer": "quantized_linear", "kwargs": enc(dict(bits=bits, keep_negative=kn)),
                    "input": [-1.1, -0.1, 0.0, 0.1, 1.1], "expected_gradient": eg, "assertion": "assert_allclose(gradient, expected)",
                    "qkeras_output": to_array(o).astype(np.float64).tolist(), "qkeras_gradient": g.astype(np.float64).tolist()})
    T = "tests/qactivation_test.py::TestQuantizedLinear::test_gradient_formula"
    for alpha in [None, 2.0]:
        for sym, kn in [(True, True), (False, True), (False, False)]:
            for bits in [1, 8]:
                xv = tf.Variable([-1.0, 0.0, 1.0, 2.0, 3.0])
                q = ql(bits=bits, symmetric=sym, keep_negative=kn, alpha=alpha)
                with tf.GradientTape() as tape:
                    o = q(xv)
                g = to_array(tape.gradient(o, xv))
                exp = ((xv.numpy() >= to_array(q.min())) & (xv.numpy() <= to_array(q.max()))).astype(np.float32)
                out.append({"test": T, "commit": OLD, "quantizer": "quantized_linear",
                            "kwargs": enc(dict(bits=bits, symmetric=sym, keep_negative=kn, alpha=alpha)),
                            "input": [-1.0, 0.0, 1.0, 2.0, 3.0], "expected_gradient": exp.tolist(),
                            "assertion": "gradient == ((x >= q.min()) & (x <= q.max()))",
                            "qkeras_output": to_array(o).astype(np.float64).tolist(), "qkeras_gradient": g.astype(np.float64).tolist(),
                            "qkeras_min": float(to_array(q.min())), "qkeras_max": float(to_array(q.max()))})
    T = "tests/min_max_test.py::test_quantized_linear"
    for alpha in [None, 2.0]:
        for sym, kn in [(True, True), (False, True), (False, False)]:
            for bits in [1, 8]:
                q = ql(bits=bits, symmetric=sym, keep_negative=kn, alpha=alpha)
                mn, mx = float(to_array(q.min())), float(to_array(q.max()))
                vals = {"q(-1000)": float(to_array(q(-1000))), "q(1000)": float(to_array(q(1000))),
                        "q(min)": float(to_array(q(q.min()))), "q(max)": float(to_array(q(q.max())))}
                if bits != 1:
                    vals["q(midpoint)"] = float(to_array(q((q.max() + q.min()) / 2.0)))
                out.append({"test": T, "commit": OLD, "quantizer": "quantized_linear",
                            "kwargs": enc(dict(bits=bits, symmetric=sym, keep_negative=kn, alpha=alpha)),
                            "assertion": "q(-1000)==min, q(1000)==max, q(min)==min, q(max)==max, midpoint maps to neither (bits != 1)",
                            "qkeras_min": mn, "qkeras_max": mx, "qkeras_values": vals})
    T = "tests/qnoise_test.py::test_qnoise_linear_quantizer"
    for qf, exp in [(0.0, np.array(xin, f32)), (1.0, xq), (0.5, 0.5 * (np.array(xin, f32) + xq))]:
        def call(q, xa, qf=qf):
            q.update_qnoise_factor(qf)
            return q(xa)
        vec(T, OLD, "quantized_linear", dict(bits=4, integer=1, symmetric=True, keep_negative=True, alpha=1,
                                            use_stochastic_rounding=False, use_variables=True),
            xin, exp.tolist(), "assert_equal", call=call, note="update_qnoise_factor(%r) before the call" % qf)
        out[-1]["update_qnoise_factor"] = qf
    return out


# ------------------------------------------------------------------------------------------------
# Timings
# ------------------------------------------------------------------------------------------------

def timings(classes, versions, out_path, elements, reps):
    np = _np()
    import tensorflow as tf

    rows = 4096
    cols = elements // rows
    shape = (rows, cols)
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal(shape, dtype=np.float32)
    xt = tf.constant(x)
    res = {"elements": rows * cols, "shape": list(shape), "dtype": "float32", "repetitions": reps,
           "statistic": "median wall seconds",
           "machine": machine_description(arch=False, load_key="loadavg_at_start"), "versions": versions,
           "tf_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                          "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
           "input": "a tf.constant made once from the numpy array (eager, CPU); each call's output is materialized with .numpy()",
           "note": "one warm-up call, then `repetitions` timed calls; the machine may be shared (see loadavg)",
           "results": {}}

    def med(fn):
        fn()  # warm-up
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        return {"median_s": ts[len(ts) // 2], "all_s": ts}

    res["results"]["numpy x.copy()"] = med(lambda: x.copy())
    res["results"]["numpy np.copyto(out, x)"] = (lambda o: med(lambda: np.copyto(o, x)))(np.empty_like(x))
    qb, qr, ql = classes["quantized_bits"], classes["quantized_relu"], classes["quantized_linear"]
    for name, q in [("quantized_bits(8,0,alpha=1)", qb(8, 0, alpha=1)), ("quantized_relu(8,0)", qr(8, 0)),
                    ("quantized_linear(8,0,alpha=1)", ql(8, 0, alpha=1)),
                    ("quantized_bits(8,0,alpha='auto_po2')", qb(8, 0, alpha="auto_po2")),
                    ("quantized_bits(8,0,alpha='auto')", qb(8, 0, alpha="auto")),
                    ("quantized_linear(8,0,alpha='auto_po2')", ql(8, 0, alpha="auto_po2")),
                    ("quantized_linear(8,0,alpha='auto')", ql(8, 0, alpha="auto"))]:
        res["results"][name] = med(lambda q=q: q(xt).numpy())
        res["results"][name]["speed_vs_numpy_copy"] = (res["results"]["numpy x.copy()"]["median_s"]
                                                      / res["results"][name]["median_s"])
        print("timing", name, res["results"][name]["median_s"], flush=True)
    # the same fixed-alpha call on a numpy input (QKeras converts it)
    q = qb(8, 0, alpha=1)
    res["results"]["quantized_bits(8,0,alpha=1) numpy input"] = med(lambda: q(x).numpy())
    res["machine"]["loadavg_at_end"] = os.getloadavg()
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


# ------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkeras", required=True, help="a QKeras source checkout (the directory holding qkeras/)")
    ap.add_argument("--commit", default=None,
                    help="the checkout's commit (read with git when it is a git work tree); default %s" % PINNED_COMMIT)
    ap.add_argument("--out", default=str(data_dir("qkeras")))
    ap.add_argument("--timings", action="store_true", help="also measure QKeras' speed (writes tools/golden/speed/qkeras_peer_timings.json)")
    ap.add_argument("--timings-only", action="store_true")
    ap.add_argument("--timing-elements", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--timing-reps", type=int, default=5)
    args = ap.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    src = os.path.abspath(args.qkeras)
    sys.path.insert(0, src)
    import numpy as np
    import tensorflow as tf
    import tensorflow.keras.backend as K
    import qkeras
    from qkeras.quantizers import quantized_bits, quantized_linear, quantized_relu

    assert os.path.dirname(os.path.abspath(qkeras.__file__)) == os.path.join(src, "qkeras"), qkeras.__file__
    commit = args.commit
    if commit is None:
        try:
            commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], check=True, capture_output=True,
                                    text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = PINNED_COMMIT
            print("note: %s is not a git work tree; assuming commit %s (pass --commit)" % (src, commit))
    if commit != PINNED_COMMIT:
        print("warning: QKeras commit %s is not the pinned %s" % (commit, PINNED_COMMIT))

    def sha256(p):
        with open(p, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    versions = {"tensorflow": tf.__version__, "numpy": np.__version__, "python": platform.python_version(),
                "keras": dist_version("keras"), "tensorflow_dist": "tensorflow-cpu " + str(dist_version("tensorflow-cpu")),
                "qkeras_commit": commit,
                "qkeras_quantizers_py_sha256": sha256(os.path.join(src, "qkeras", "quantizers.py")),
                "qkeras_base_quantizer_py_sha256": sha256(os.path.join(src, "qkeras", "base_quantizer.py"))}
    classes = {"quantized_bits": quantized_bits, "quantized_relu": quantized_relu, "quantized_linear": quantized_linear}

    if not args.timings_only:
        os.makedirs(args.out, exist_ok=True)
        inp = Inputs(SEED)
        cases = build_cases(inp)
        pool = InputPool()
        stores = {k: Store() for k in classes}
        records = []
        t0 = time.time()
        for i, c in enumerate(cases):
            cid = "c%04d" % i
            records.append(run_case(cid, c, classes, pool, stores[c["quantizer"]]))
            if i % 200 == 0:
                print("case", i, "of", len(cases), "%.0fs" % (time.time() - t0), flush=True)
        files = {"inputs": "inputs.npz"}
        np.savez_compressed(os.path.join(args.out, "inputs.npz"), **pool.arrays())
        for k, st in stores.items():
            files[k] = k + ".npz"
            np.savez_compressed(os.path.join(args.out, k + ".npz"), **st.arrays())
        index = {
            "format_version": FORMAT_VERSION,
            "generator": "tools/golden/qkeras.py",
            "versions": versions,
            "settings": {"image_data_format": K.image_data_format(), "epsilon": float(K.epsilon()),
                         "floatx": K.floatx(), "learning_phase": int(K.learning_phase()), "seed": SEED,
                         "internal_sigmoid": "hard"},
            "files": files,
            "conventions": {
                "input": "{buf, offset, shape}: elements offset.. of array `buf` (float32) in inputs.npz, C order",
                "output": "{buf, offset, shape}: the same into <quantizer>.npz (buf = dtype name); exact bits of QKeras' result",
                "outcome": "'ok' or {stage: init|call, type, message}: the exception QKeras raised",
                "before_call/after_call": "attribute -> {dtype, shape, pytype, and value (one number, exact) or ref "
                                          "{buf, offset} (as output, with the attribute's shape) or head/tail/sha256_16 (over %d elements)} or {error} or "
                                          "{same_as_before_call} or {skipped}" % RANGE_LIMIT,
                "kwargs": "JSON; {__ndarray__: values, dtype, shape} is a numpy array, {__float__: 'inf'} a non-finite float",
            },
            "cases": records,
        }
        with open(os.path.join(args.out, "index.json"), "w") as f:
            json.dump(index, f, separators=(",", ":"), sort_keys=False)
            f.write("\n")
        own = {"versions": versions,
               "note": "Literal vectors from QKeras' own tests (file::test at the commit given per entry), "
                       "with the assertion each test makes and what QKeras at the pinned commit returns "
                       "(qkeras_* fields; float32 results as float64 lists, bit patterns where given). The "
                       "quantized_linear tests were deleted from HEAD; they come from the file at d7b20af and "
                       "are run against the HEAD code.",
               "vectors": own_tests(classes)}
        with open(os.path.join(args.out, "qkeras_own_tests.json"), "w") as f:
            json.dump(own, f, indent=None, separators=(",", ":"))
            f.write("\n")
        print("wrote %d cases (%d distinct inputs) in %.0fs" % (len(records), len(pool.by_hash), time.time() - t0))
    if args.timings or args.timings_only:
        timings(classes, versions, str(SPEED / "qkeras_peer_timings.json"), args.timing_elements, args.timing_reps)


if __name__ == "__main__":
    main()
