"""Same-run speed comparison of polyquant.aimet and aimet-torch 2.42.0 (CPU) on 64 Mi float32
elements: quantize_dequantize per-tensor, per-channel (first and last axis) and blockwise, no-grad
and training forward, and the encoding analyzers' update_stats + compute_encodings. Each call is
timed interleaved with the other library's and with a numpy copy (x.copy()) and a read-only pass
(x.sum()) of the same array; medians. Outputs are also compared bit for bit (NaN-ness for NaNs).

x is normal with standard deviation 4. ``--params calibrated`` (the default) quantizes it with the
8-bit asymmetric encoding its min / max give (what MinMax calibration yields: few values clamp);
``--params saturating`` with scale 0.05 and offset -3 (most values clamp), the parameters of the
figures published before calibrated ones. torch's per-tensor fake quantization runs about twice as
long on the saturating data; the per-channel kernels hardly depend on it.

Runs in the AIMET generator's environment (docs/golden-data.md#aimet: aimet-torch 2.42.0, torch
2.15) with the installed polyquant on the path, e.g.

    PYTHONPATH=<polyquant's site-packages> /work/venv-aimet/bin/python tools/golden/speed/compare_aimet.py \
        --repeat 5 --json /tmp/aimet_speed.json

Memory: every quantize_dequantize call (and the copy) allocates a fresh 256 MiB output. On a VM
whose balloon driver reports free memory to the host (virtio-balloon free page reporting, 2 MiB
blocks free for about 2 s), pages freed that long ago are taken back by the host and the next call
that gets them faults them in again: ~290 ms instead of ~23 ms for polyquant, ~500 instead of ~45 ms
for the copy, a spike that lands on whichever call is next. Unless ``--cold-memory``, each timed
call is therefore preceded (untimed) by touching and freeing twice its output's size, so
every call, either library's, starts from recently used memory as in a steady-state loop.

Not run in CI (CI never installs aimet-torch). torch uses as many threads as polyquant
(POLYQUANT_NUM_THREADS or the machine's cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

import polyquant
import polyquant.aimet as pa
from aimet_torch.quantization.affine import quantize_dequantize as aimet_qdq
from aimet_torch.quantization import encoding_analyzer as aimet_ea


WARM_BYTES = 0  # set from --cold-memory in main()


def warm_memory(nbytes: int) -> None:
    """Faults in and frees nbytes, so that the next allocation of that size gets pages the host has
    not taken back (see the module docstring)."""
    if nbytes:
        buffer = np.empty(nbytes, np.uint8)
        buffer[::4096] = 1
        del buffer


def timed(fn):
    warm_memory(WARM_BYTES)
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def same(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--analyzer-repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--params", choices=("calibrated", "saturating"), default="calibrated")
    ap.add_argument("--cold-memory", action="store_true",
                    help="do not touch and free twice the output's size before each timed call")
    args = ap.parse_args()
    threads = int(os.environ.get("POLYQUANT_NUM_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)

    rng = np.random.default_rng(0)
    x = (rng.standard_normal(64 * 2**20, dtype=np.float32) * 4).reshape(4096, 16384)
    xt = torch.from_numpy(x)
    global WARM_BYTES
    WARM_BYTES = 0 if args.cold_memory else 2 * x.nbytes  # the output and a temporary's worth
    rows = []

    f = np.float32
    if args.params == "calibrated":  # scale = (max - min) / 255, offset = round(min / scale)
        scale = f((x.max() - x.min()) / f(255))
        offset = f(np.round(x.min() / scale))
    else:
        scale, offset = f(0.05), f(-3.0)
    print(f"params {args.params}: scale {scale!r}, offset {offset!r}", flush=True)

    # The quantize_dequantize cases run round-robin (each round times every case once), so that a
    # slow spell of the machine lands on all cases alike instead of on the one running then.
    cases = []
    for name, shape, pshape, block in (("per-tensor", (4096, 16384), (), None),
                                       ("per-channel axis 0", (4096, 16384), (4096, 1), None),
                                       ("per-channel last axis", (1048576, 64), (64,), None),
                                       ("blockwise (1, 32)", (4096, 16384), (4096, 512), (1, 32))):
        s, o = np.full(pshape, scale, f), np.full(pshape, offset, f)
        kw = {"block_size": block} if block else {}
        case = dict(name=name, shape=shape, xs=x.reshape(shape), xts=xt.reshape(shape), s=s, o=o,
                    st=torch.from_numpy(s), ot=torch.from_numpy(o), kw=kw,
                    samples={k: [] for k in ("ours", "ours_train", "peer", "peer_train", "copy")})
        y = pa.quantize_dequantize(case["xs"], s, o, 8, **kw)  # warm-up, and the bit-exactness check
        with torch.no_grad():
            yp = aimet_qdq(case["xts"], case["st"], case["ot"], 8, **kw)
        case["exact"] = same(y, yp.numpy())
        del y, yp
        cases.append(case)
    for _ in range(args.repeat):
        for c in cases:
            xs, xts, s, o, kw, t = c["xs"], c["xts"], c["s"], c["o"], c["kw"], c["samples"]
            t["copy"].append(timed(lambda: xs.copy())[0])
            t["ours"].append(timed(lambda: pa.quantize_dequantize(xs, s, o, 8, **kw))[0])
            with torch.no_grad():
                t["peer"].append(timed(lambda: aimet_qdq(xts, c["st"], c["ot"], 8, **kw))[0])
            sg, og = c["st"].clone().requires_grad_(), c["ot"].clone().requires_grad_()
            t["peer_train"].append(timed(lambda: aimet_qdq(xts, sg, og, 8, **kw))[0])
            t["ours_train"].append(timed(lambda: pa._qdq_forward(xs, s, o, (8,), kw, True))[0])
    for c in cases:
        m = {k: statistics.median(v) * 1e3 for k, v in c["samples"].items()}
        rows.append(dict(case=c["name"], shape=list(c["shape"]), polyquant_ms=m["ours"], copy_ms=m["copy"],
                         of_copy=m["copy"] / m["ours"], aimet_ms=m["peer"], speedup=m["peer"] / m["ours"],
                         polyquant_training_ms=m["ours_train"], aimet_training_ms=m["peer_train"],
                         training_speedup=m["peer_train"] / m["ours_train"], bit_exact=c["exact"],
                         samples_ms={k: [round(v * 1e3, 2) for v in vs] for k, vs in c["samples"].items()}))
        print({k: v for k, v in rows[-1].items() if k != "samples_ms"}, flush=True)
    del cases

    reads = []
    for _ in range(args.repeat):
        reads.append(timed(lambda: x.sum())[0])
    read_ms = statistics.median(reads) * 1e3

    def analyzer_case(name, make_ours, make_peer, shape, data, symmetric=False, repeat=None):
        ours, ours_update, peer, peer_update = [], [], [], []
        for _ in range(repeat or args.analyzer_repeat):
            a = make_ours(shape)
            t0 = time.perf_counter()
            a.update_stats(data)
            t1 = time.perf_counter()
            lo, hi = a.compute_encodings(255, symmetric)
            ours.append(time.perf_counter() - t0)
            ours_update.append(t1 - t0)
            b = make_peer(shape)
            t0 = time.perf_counter()
            with torch.no_grad():
                b.update_stats(torch.from_numpy(data))
                t1 = time.perf_counter()
                plo, phi = b.compute_encodings(255, symmetric)
            peer.append(time.perf_counter() - t0)
            peer_update.append(t1 - t0)
        exact = same(lo, plo.numpy()) and same(hi, phi.numpy())
        m = {k: statistics.median(v) * 1e3 for k, v in
             dict(ours=ours, ours_update=ours_update, peer=peer, peer_update=peer_update).items()}
        rows.append(dict(case=name, shape=list(data.shape), params=list(shape), polyquant_ms=m["ours"], aimet_ms=m["peer"],
                         speedup=m["peer"] / m["ours"], polyquant_update_ms=m["ours_update"],
                         aimet_update_ms=m["peer_update"], read_ms=read_ms, update_of_read=read_ms / m["ours_update"],
                         bit_exact=exact))
        print(rows[-1], flush=True)

    for shape, tag in (((1,), "per-tensor"), ((4096, 1), "per-channel (4096, 1)")):
        # (MinMax is cheap on both sides: at least 7 repeats, so its update has a median)
        analyzer_case(f"MinMax {tag}", lambda s: pa.MinMaxEncodingAnalyzer(s), lambda s: aimet_ea.MinMaxEncodingAnalyzer(s),
                      shape, x, repeat=max(7, args.analyzer_repeat))
        analyzer_case(f"Percentile 99.9 {tag}", lambda s: pa.PercentileEncodingAnalyzer(s, percentile=99.9),
                      lambda s: aimet_ea.PercentileEncodingAnalyzer(s, percentile=99.9), shape, x)
        analyzer_case(f"SQNR {tag}", lambda s: pa.SqnrEncodingAnalyzer(s), lambda s: aimet_ea.SqnrEncodingAnalyzer(s),
                      shape, x)

    report = dict(polyquant=polyquant.runtime_info(), torch=torch.__version__, threads=threads,
                  elements=int(x.size), repeat=args.repeat, analyzer_repeat=args.analyzer_repeat, params=args.params, cold_memory=args.cold_memory,
                  scale=float(scale), offset=float(offset), rows=rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
