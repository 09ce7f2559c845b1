"""AIMET's training path at 16 Mi elements: the forward, the gradients, and forward + backward
through torch autograd against the same training path composed of plain torch ops.

    PYTHONPATH=python .venv/bin/python scripts/bench_aimet_training.py [--reps 15] [--cases ...]

Rows (medians over --reps runs, milliseconds; x of shape (4096, 4096), 8-bit unsigned grid):
  forward      polyquant.aimet.quantize_dequantize on numpy arrays (AIMET's no-grad result: its
               fake-quantization shortcut where AIMET takes it, per tensor and per channel)
  grad         polyquant.aimet.quantize_dequantize_grad (the training path's output and its
               three gradients)
  autograd     torch: out = quantize_dequantize(x, scale, offset) with scale and offset requiring
               grad, then out.backward(g)
  torch        the same training path in plain torch ops (round with a straight-through
               gradient, clamp, the affine map), forward + backward
Layouts: per tensor (scale shape ()), per channel along either axis ((4096, 1) and (1, 4096)),
blockwise ((4096, 32) with blocks of (1, 128)); x float32 or bfloat16 (bfloat16 through torch
tensors only, numpy has no bfloat16).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import polyquant.aimet as pa

N = 4096
QMIN, QMAX = 0, 255

LAYOUTS = {
    "per_tensor": ((), None),
    "per_channel_rows": ((N, 1), None),
    "per_channel_cols": ((1, N), None),
    "blockwise_1x128": ((N, 32), (1, 128)),
}


def median_ms(fn, reps: int) -> float:
    fn()  # warm-up: page faults of fresh outputs, the pool's threads
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def operands(layout: str, rng):
    shape, block = LAYOUTS[layout]
    x = (rng.standard_normal((N, N), dtype=np.float32) * 3).astype(np.float32)
    g = rng.standard_normal((N, N), dtype=np.float32)
    scale = np.full(shape, 0.05, dtype=np.float32) * (1 + rng.random(shape, dtype=np.float32))
    offset = np.round(-128 + 8 * rng.standard_normal(shape)).astype(np.float32)
    kwargs = {} if block is None else {"block_size": block}
    return x, g, np.asarray(scale, np.float32), np.asarray(offset, np.float32), kwargs


def torch_composed(torch, x, s, o, block):
    """AIMET's quantize_dequantize formula in torch ops, with round's straight-through gradient."""
    if block is not None:  # (rows, blocks, block) view, parameters broadcast over the block
        xv = x.view(s.shape[0], s.shape[1], block[1])
        sv, ov = s.unsqueeze(-1), o.unsqueeze(-1)
    else:
        xv, sv, ov = x, s, o
    t = xv / sv
    r = t + (torch.round(t) - t).detach()
    q = torch.clamp(r - ov, QMIN, QMAX)
    return ((q + ov) * sv).view(x.shape)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--cases", nargs="*", default=list(LAYOUTS))
    ap.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    print(f"{'layout':18} {'dtype':9} {'forward':>9} {'grad':>9} {'autograd':>9} {'torch':>9}  grad/fwd  autograd/fwd  torch/autograd")
    for layout in args.cases:
        x, g, s, o, kw = operands(layout, rng)
        block = LAYOUTS[layout][1]
        for dtype in args.dtypes:
            if dtype == "bfloat16":
                if torch is None:
                    continue
                xt = torch.from_numpy(x).to(torch.bfloat16)
                gt = torch.from_numpy(g).to(torch.bfloat16)
                fwd = median_ms(lambda: pa.quantize_dequantize(xt, torch.from_numpy(s), torch.from_numpy(o),
                                                               bitwidth=8, signed=False, **kw), args.reps)
                grad = median_ms(lambda: pa.quantize_dequantize_grad(gt, xt, torch.from_numpy(s), torch.from_numpy(o),
                                                                     bitwidth=8, signed=False, **kw), args.reps)
            else:
                xt, gt = (torch.from_numpy(x), torch.from_numpy(g)) if torch is not None else (None, None)
                fwd = median_ms(lambda: pa.quantize_dequantize(x, s, o, bitwidth=8, signed=False, **kw), args.reps)
                grad = median_ms(lambda: pa.quantize_dequantize_grad(g, x, s, o, bitwidth=8, signed=False, **kw),
                                 args.reps)
            auto = comp = float("nan")
            if torch is not None:
                st = torch.from_numpy(s.copy()).requires_grad_(True)
                ot = torch.from_numpy(o.copy()).requires_grad_(True)
                xg = xt.detach().clone().requires_grad_(True)

                def autograd():
                    st.grad = ot.grad = xg.grad = None
                    pa.quantize_dequantize(xg, st, ot, bitwidth=8, signed=False, **kw).backward(gt)

                def composed():
                    st.grad = ot.grad = xg.grad = None
                    torch_composed(torch, xg, st.to(xg.dtype) if dtype == "bfloat16" else st,
                                   ot.to(xg.dtype) if dtype == "bfloat16" else ot, block).backward(gt)

                auto = median_ms(autograd, args.reps)
                comp = median_ms(composed, args.reps)
            print(f"{layout:18} {dtype:9} {fwd:9.1f} {grad:9.1f} {auto:9.1f} {comp:9.1f}  {grad / fwd:8.2f}  "
                  f"{auto / fwd:12.2f}  {comp / auto:14.2f}", flush=True)


if __name__ == "__main__":
    main()
