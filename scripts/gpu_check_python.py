"""The Python package's device calls with torch on a real GPU (run by scripts/gpu_check.sh, with
PYTHONPATH naming a directory that holds the polyquant package, its built extension and
libpolyquant_cuda.so): every QONNX function, ONNX's Q/DQ and AIMET's forward ops on torch CUDA tensors, per tensor and per channel, with
device and Python-scalar parameters, out=, a non-default stream and a strided view, must give the
bits of the same call on numpy copies on the host. Prints one summary line; exit status 1 on a
difference, 0 when torch sees no GPU (a skip, said so)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np


FORK_AFTER_RUNTIME_INFO = """
import os, sys
import numpy as np
import polyquant
import polyquant.qonnx as pq
assert polyquant.runtime_info()["backends"]["cuda"]["available"], polyquant.runtime_info()
pid = os.fork()
if pid == 0:
    code = 1
    try:
        import torch
        x = np.linspace(-4, 4, 1000, dtype=np.float32)
        y = pq.int_quant(torch.from_numpy(x).cuda(), 0.25, 0.0, 8, 1, 0, "ROUND")
        code = 0 if y.cpu().numpy().tobytes() == pq.int_quant(x, 0.25, 0.0, 8, 1, 0, "ROUND").tobytes() else 2
    except BaseException as e:
        print(f"child: {type(e).__name__}: {e}", flush=True)
    os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("python/torch: SKIPPED (torch sees no CUDA device)")
        return 0
    import polyquant
    import polyquant.qonnx as pq

    cuda = polyquant.runtime_info()["backends"]["cuda"]
    if not cuda["available"]:
        print(f"python/torch: FAILED, the CUDA backend is unavailable: {cuda['reason']}")
        return 1
    rng = np.random.default_rng(20)
    x = (rng.standard_normal((64, 256)) * 3).astype(np.float32)
    x[0, :10] = [np.nan, -np.inf, np.inf, -0.0, 0.0, 0.25, 0.75, -1.25, 1e-40, -3e38]
    scale = np.linspace(0.0625, 1.0, 256, dtype=np.float32)
    scale_axis0 = np.linspace(0.1, 0.9, 64, dtype=np.float32).reshape(64, 1)
    dx, ds, ds0 = (torch.from_numpy(a).cuda() for a in (x, scale, scale_axis0))
    checks, failures = 0, []

    def check(name: str, got: "torch.Tensor", want: np.ndarray) -> None:
        nonlocal checks
        checks += 1
        torch.cuda.synchronize()
        g = got.cpu().contiguous()
        same = tuple(g.shape) == want.shape and g.element_size() == want.itemsize
        if same:  # the bytes, through uint8 (float8 has no numpy type)
            same = g.view(torch.uint8).numpy().tobytes() == np.ascontiguousarray(want).tobytes()
        if not same:
            failures.append(name)

    for mode in ("ROUND", "FLOOR", "CEIL", "UP", "DOWN", "HALF_UP", "HALF_DOWN"):
        check(f"int_quant per channel {mode}", pq.int_quant(dx, ds, 0.0, 8, 1, 0, mode), pq.int_quant(x, scale, 0.0, 8, 1, 0, mode))
        check(f"int_quant axis 0 {mode}", pq.int_quant(dx, ds0, 1.0, 4, 0, 1, mode), pq.int_quant(x, scale_axis0, 1.0, 4, 0, 1, mode))
    check("int_quant device bit width", pq.int_quant(dx, 0.5, 0.0, torch.tensor(6.0).cuda(), 1, 0, "ROUND"),
          pq.int_quant(x, 0.5, 0.0, np.float32(6.0), 1, 0, "ROUND"))
    check("binary_quant", pq.binary_quant(dx, ds), pq.binary_quant(x, scale))
    check("trunc_v1", pq.trunc_v1(dx, ds, 0.0, 8, 4, "FLOOR"), pq.trunc_v1(x, scale, 0.0, 8, 4, "FLOOR"))
    check("trunc_v2", pq.trunc_v2(dx, ds, 0.0, 8, 0, 1, 1.0, 4, "ROUND"), pq.trunc_v2(x, scale, 0.0, 8, 0, 1, 1.0, 4, "ROUND"))
    for e, m in ((4, 3), (5, 2), (2, 1)):
        check(f"float_quant e{e}m{m}", pq.float_quant(dx, 1.0, e, m), pq.float_quant(x, 1.0, e, m))
    out = torch.empty_like(dx)
    check("int_quant out=", pq.int_quant(dx, ds, 0.0, 8, 1, 0, "ROUND", out=out), pq.int_quant(x, scale, 0.0, 8, 1, 0, "ROUND"))
    check("int_quant transposed x", pq.int_quant(dx.t(), 0.25, 0.0, 8, 1, 0, "ROUND"), pq.int_quant(x.T, 0.25, 0.0, 8, 1, 0, "ROUND"))
    check("float16 x", pq.int_quant(dx.half(), 0.25, 0.0, 8, 1, 0, "ROUND"),
          pq.int_quant(x.astype(np.float16), 0.25, 0.0, 8, 1, 0, "ROUND"))
    # ONNX QuantizeLinear to float8 (torch's float8_e4m3fn tensors) and int8, per channel and
    # blocked, and DequantizeLinear back to float32 and bfloat16.
    import ml_dtypes
    import polyquant.onnx as po

    zero8 = np.zeros(256, ml_dtypes.float8_e4m3fn)
    dzero8 = torch.zeros(256, dtype=torch.float8_e4m3fn, device="cuda")
    check("quantize_linear float8_e4m3fn", po.quantize_linear(dx, ds, dzero8), po.quantize_linear(x, scale, zero8))
    zp = (np.arange(256) % 7).astype(np.int8)
    q = po.quantize_linear(dx, ds, torch.from_numpy(zp).cuda())
    want_q = po.quantize_linear(x, scale, zp)
    check("quantize_linear int8", q, want_q)
    for output_dtype, name in ((None, "float32"), (16, "bfloat16")):
        check(f"dequantize_linear int8 -> {name}", po.dequantize_linear(q, ds, torch.from_numpy(zp).cuda(), output_dtype=output_dtype),
              po.dequantize_linear(want_q, scale, zp, output_dtype=output_dtype))
    blocked = np.linspace(0.05, 1.5, 64 * 8, dtype=np.float32).reshape(64, 8)
    check("quantize_linear blocked 32", po.quantize_linear(dx, torch.from_numpy(blocked).cuda(), None, axis=1, block_size=32),
          po.quantize_linear(x, blocked, None, axis=1, block_size=32))
    # AIMET's forward ops on torch CUDA tensors (no grad), float32 and bfloat16, per channel.
    import polyquant.aimet as pa

    offset = -(np.arange(256) % 4).astype(np.float32)
    do = torch.from_numpy(offset).cuda()
    for f in (pa.quantize, pa.quantize_dequantize):
        check(f"aimet {f.__name__}", f(dx, ds, do, 8, True), f(x, scale, offset, 8, True))
        got = f(dx.bfloat16(), ds.bfloat16(), do.bfloat16(), 4, False)
        want = f(x.astype(ml_dtypes.bfloat16), scale.astype(ml_dtypes.bfloat16), offset.astype(ml_dtypes.bfloat16), 4, False)
        check(f"aimet {f.__name__} bfloat16", got, want)
    # AIMET's gradients on the device (grad_scale / grad_offset from the device's exact sums), per
    # channel, per tensor and blockwise, then torch autograd through them on CUDA: every gradient
    # equals the CPU's autograd bit for bit.
    g = (rng.standard_normal(x.shape) * 2).astype(np.float32)
    dg = torch.from_numpy(g).cuda()
    blocks = np.linspace(0.02, 0.5, 64 * 4, dtype=np.float32).reshape(64, 4)
    block_offsets = -(np.arange(64 * 4) % 3).astype(np.float32).reshape(64, 4)
    grad_cases = [("per channel", scale, offset, {}), ("per tensor", np.float32(0.125), np.float32(-2.0), {}),
                  ("blockwise 64", blocks, block_offsets, {"block_size": (1, 64)})]
    for label, s_host, o_host, kw in grad_cases:
        ds_, do_ = torch.tensor(s_host).cuda(), torch.tensor(o_host).cuda()
        for f in (pa.quantize_dequantize_grad, pa.quantize_grad):
            got = f(dg, dx, ds_, do_, 8, True, **kw)
            want = f(g, x, np.asarray(s_host), np.asarray(o_host), 8, True, **kw)
            for part, gv, wv in zip(("output", "grad_tensor", "grad_scale", "grad_offset"), got, want):
                check(f"aimet {f.__name__} {label} {part}", gv, wv)
        for device in ("cpu", "cuda"):
            xt = torch.from_numpy(x).to(device).requires_grad_(True)
            st = torch.tensor(s_host).to(device).requires_grad_(True)
            ot = torch.tensor(o_host).to(device).requires_grad_(True)
            y = pa.quantize_dequantize(xt, st, ot, 8, True, **kw)
            y.backward(torch.from_numpy(g).to(device))
            if device == "cpu":
                cpu = [t.detach().numpy().copy() for t in (y, xt.grad, st.grad, ot.grad)]
            else:
                for part, gv, wv in zip(("output", "x.grad", "scale.grad", "offset.grad"), (y, xt.grad, st.grad, ot.grad), cpu):
                    check(f"aimet autograd {label} {part}", gv.detach(), wv)
    # AIMET's MinMax statistics (per channel, per tensor) and QKeras' alpha="auto" from the device's
    # per-group min / max; a batch with a NaN is settled by the host's code (MinMax).
    import polyquant.qkeras as qk

    finite = np.where(np.isnan(x), np.float32(0.5), x)
    for batch in (finite, x):
        for shape in ((256,), (1,)):
            on_dev, on_host = (pa.analyzers.MinMaxEncodingAnalyzer(shape=shape) for _ in range(2))
            on_dev.update_stats(torch.from_numpy(batch).cuda())
            on_host.update_stats(batch)
            for part, gv, wv in zip(("min", "max"), on_dev.compute_encodings(255, False), on_host.compute_encodings(255, False)):
                checks += 1
                if np.asarray(gv).tobytes() != np.asarray(wv).tobytes():
                    failures.append(f"aimet MinMax {shape} {part}{' (NaN batch)' if batch is x else ''}")
    # The histogram analyzers (Percentile, SQNR): per-group finite min / max and torch.histc counts
    # on the device, two batches (the second grows and re-bins the histograms), the encodings.
    for batch in (finite, x):
        for shape in ((256,), (1,)):
            for kind in (lambda: pa.analyzers.PercentileEncodingAnalyzer(shape=shape, num_bins=512, percentile=99.9),
                         lambda: pa.analyzers.SqnrEncodingAnalyzer(shape=shape, num_bins=256)):
                on_dev, on_host = kind(), kind()
                for b in (batch, batch * np.float32(3)):
                    on_dev.update_stats(torch.from_numpy(b).cuda())
                    on_host.update_stats(b)
                name = type(on_dev).__name__
                for part, gv, wv in zip(("min", "max"), on_dev.compute_encodings(255, False), on_host.compute_encodings(255, False)):
                    checks += 1
                    if np.asarray(gv).tobytes() != np.asarray(wv).tobytes():
                        failures.append(f"aimet {name} {shape} {part}{' (NaN batch)' if batch is x else ''}")
    for make in (lambda: qk.quantized_bits(6, 1, alpha="auto"), lambda: qk.quantized_bits(6, 1, alpha="auto", scale_axis=0),
                 lambda: qk.quantized_linear(5, alpha="auto"), lambda: qk.quantized_linear(4, alpha="auto", keep_negative=False),
                 lambda: qk.quantized_bits(4, 0, alpha="auto_po2"), lambda: qk.quantized_linear(6, alpha="auto_po2"),
                 # (auto_po2's least-squares sums on the device, settled to the host's: docs/cuda.md)
                 lambda: qk.quantized_bits(8, 2, alpha="auto_po2", scale_axis=0),
                 lambda: qk.quantized_bits(6, 0, alpha="auto_po2", min_po2_exponent=-4, max_po2_exponent=0)):
        check(f"qkeras {make()}", make()(torch.from_numpy(finite).cuda()), make()(finite))
    # QKeras' quantizers through torch autograd on CUDA: the output and x.grad (the upstream gradient
    # times the straight-through derivative, one core pass) equal the CPU's autograd.
    for make in (lambda: qk.quantized_bits(4, 0, alpha=1, use_ste=False, qnoise_factor=0.25),
                 lambda: qk.quantized_relu(4, 1, negative_slope=0.125), lambda: qk.quantized_linear(4, alpha="auto")):
        results = {}
        for device in ("cpu", "cuda"):
            xt = torch.from_numpy(x).to(device).requires_grad_(True)
            y = make()(xt)
            y.backward(torch.from_numpy(g).to(device))
            results[device] = (y.detach(), xt.grad)
        for part, i in (("output", 0), ("x.grad", 1)):
            check(f"qkeras autograd {make()} {part}", results["cuda"][i], results["cpu"][i].numpy())
    # JAX arrays on the GPU, when JAX sees one: outputs in memory polyquant owns, handed to JAX.
    try:
        import jax

        gpu = jax.devices("gpu")[0]
    except Exception:  # no JAX, or JAX without its CUDA plugin
        gpu = None
    if gpu is not None:
        jx, js = jax.device_put(x, gpu), jax.device_put(scale, gpu)
        for mode in ("ROUND", "FLOOR"):
            y = pq.int_quant(jx, js, 0.0, 8, 1, 0, mode)
            checks += 1
            if not (isinstance(y, jax.Array) and np.asarray(y).tobytes() == pq.int_quant(x, scale, 0.0, 8, 1, 0, mode).tobytes()):
                failures.append(f"jax int_quant {mode}")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = pq.int_quant(dx, ds, 0.0, 8, 1, 0, "ROUND")
    stream.synchronize()
    check("int_quant on a side stream", y, pq.int_quant(x, scale, 0.0, 8, 1, 0, "ROUND"))
    # runtime_info() lists the devices through NVML (core/nvml_devices.h) without initialising CUDA,
    # so a process that asks and then forks can use the GPU in the child (CUDA's rule: not after
    # initialising it). A fresh interpreter: this one has initialised CUDA.
    checks += 1
    fork = subprocess.run([sys.executable, "-c", FORK_AFTER_RUNTIME_INFO], capture_output=True, text=True, timeout=120)
    if fork.returncode != 0:
        failures.append(f"fork after runtime_info (exit {fork.returncode}: {(fork.stdout + fork.stderr).strip()[-300:]})")
    if failures:
        print(f"python/torch: FAILED {len(failures)} of {checks} checks differ from the host: {', '.join(failures)}")
        return 1
    print(f"python/torch: {checks} checks on {torch.cuda.get_device_name()} (torch {torch.__version__}), "
          f"all bit-identical to the host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
