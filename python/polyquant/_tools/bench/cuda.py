"""`polyquant bench --device cuda[:N]`: the ops on a GPU, through the Python package on torch CUDA
tensors (docs/cuda.md#python), timed with CUDA events (warm-up, then medians) beside a device copy of
the same bytes (`y.copy_(x)`) and torch's peers, in the same run:

- throughput as a fraction of the copy, counting the bytes each op moves (x read, the output written;
  per-channel and blockwise parameters are small beside them);
- AIMET's quantize_dequantize against torch.fake_quantize_per_tensor_affine / per_channel_affine (what
  AIMET v2 calls where its shortcut applies) and, blockwise, against AIMET's formula composed of torch
  ops; ONNX's float8 QuantizeLinear against torch's conversion chain
  ``(x / s).clamp(-448, 448).to(torch.float8_e4m3fn)``.

Each polyquant result is also compared bit for bit with the same call on the host (numpy), so a
speed figure never comes from a wrong kernel."""

from __future__ import annotations

import json
import statistics
from typing import Any, Callable

import numpy as np

from ..common import CommandError


def _device_index(device: str) -> int:
    name, _, index = device.partition(":")
    if name != "cuda" or (index and not index.isdigit()):
        raise CommandError(f"--device: expected cpu, cuda or cuda:N, got {device!r}")
    return int(index or 0)


def _require_gpu(index: int) -> Any:
    import polyquant

    cuda = polyquant.runtime_info()["backends"]["cuda"]
    if not cuda["available"]:
        raise CommandError(f"--device cuda: polyquant's CUDA backend is unavailable: {cuda['reason']}")
    if index >= len(cuda["devices"]):
        raise CommandError(f"--device cuda:{index}: this machine has {len(cuda['devices'])} CUDA device(s)")
    try:
        import torch
    except ImportError:
        raise CommandError("--device cuda: the GPU benchmark runs on torch CUDA tensors; install torch with CUDA") from None
    if not torch.cuda.is_available():
        raise CommandError("--device cuda: torch sees no CUDA device (a CPU-only torch build?)")
    return torch


def _median_ms(torch: Any, fn: Callable[[], Any], repeat: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_device_bench(device: str, size: int, repeat: int) -> dict:
    index = _device_index(device)
    torch = _require_gpu(index)
    import polyquant.aimet as pa
    import polyquant.onnx as po
    import polyquant.qonnx as pq

    dev = torch.device(f"cuda:{index}")
    torch.cuda.set_device(dev)
    rows, cols = size // 4096, 4096
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(rows, cols, device=dev, generator=gen) * 3
    y = torch.empty_like(x)
    scale_c = torch.linspace(0.02, 0.5, cols, device=dev)
    scale_r = torch.linspace(0.02, 0.5, rows, device=dev).reshape(rows, 1)
    blocks = torch.linspace(0.02, 0.5, rows * (cols // 32), device=dev).reshape(rows, cols // 32)
    zeros_c, zeros_r = torch.zeros(cols, device=dev), torch.zeros(rows, 1, device=dev)
    copy_ms = _median_ms(torch, lambda: y.copy_(x), repeat)
    copy_bytes = 2 * x.numel() * 4
    host = {"x": x.cpu().numpy(), "scale_c": scale_c.cpu().numpy(), "scale_r": scale_r.cpu().numpy(),
            "blocks": blocks.cpu().numpy()}
    cases: list[dict] = []

    def case(name: str, layout: str, fn: Callable[[], Any], host_fn: Callable[[], np.ndarray] | None, out_bytes: int,
             peer: tuple[str, Callable[[], Any]] | None = None) -> None:
        ms = _median_ms(torch, fn, repeat)
        moved = x.numel() * 4 + out_bytes
        row = {"op": name, "layout": layout, "ms": ms, "fraction_of_copy": (moved / ms) / (copy_bytes / copy_ms)}
        if host_fn is not None:
            got = fn()
            torch.cuda.synchronize()
            want = host_fn()
            g = got.cpu().contiguous() if hasattr(got, "cpu") else np.ascontiguousarray(got)
            got_bytes = g.view(torch.uint8).numpy().tobytes() if hasattr(g, "numpy") else g.tobytes()
            row["bit_exact_vs_host"] = tuple(g.shape) == want.shape and got_bytes == np.ascontiguousarray(want).tobytes()
        if peer is not None:
            peer_ms = _median_ms(torch, peer[1], repeat)
            row.update({"peer": peer[0], "peer_ms": peer_ms, "speedup_vs_peer": peer_ms / ms})
        cases.append(row)

    n = x.numel()
    hx = host["x"]
    case("int_quant", "per tensor", lambda: pq.int_quant(x, 0.05, 0.0, 8, 1, 0, "ROUND"),
         lambda: pq.int_quant(hx, np.float32(0.05), 0.0, 8, 1, 0, "ROUND"), 4 * n)
    case("int_quant", "per channel, last axis", lambda: pq.int_quant(x, scale_c, 0.0, 8, 1, 0, "ROUND"),
         lambda: pq.int_quant(hx, host["scale_c"], 0.0, 8, 1, 0, "ROUND"), 4 * n)
    case("int_quant", "per channel, axis 0", lambda: pq.int_quant(x, scale_r, 0.0, 8, 1, 0, "ROUND"),
         lambda: pq.int_quant(hx, host["scale_r"], 0.0, 8, 1, 0, "ROUND"), 4 * n)
    case("float_quant", "per tensor", lambda: pq.float_quant(x, 1.0, 4, 3), lambda: pq.float_quant(hx, 1.0, 4, 3), 8 * n)
    case("quantize_linear int8", "per tensor", lambda: po.quantize_linear(x, 0.05, torch.zeros((), dtype=torch.int8, device=dev)),
         lambda: po.quantize_linear(hx, np.float32(0.05), np.int8(0)), n)
    case("quantize_linear int8", "blockwise 32",
         lambda: po.quantize_linear(x, blocks, torch.zeros_like(blocks, dtype=torch.int8), axis=1, block_size=32),
         lambda: po.quantize_linear(hx, host["blocks"], np.zeros(host["blocks"].shape, np.int8), axis=1, block_size=32), n)
    fp8_zero = torch.zeros((), dtype=torch.float8_e4m3fn, device=dev)
    case("quantize_linear float8_e4m3fn", "per tensor", lambda: po.quantize_linear(x, 0.05, fp8_zero), None, n,
         ("(x / s).clamp(-448, 448).to(float8_e4m3fn)", lambda: (x / 0.05).clamp(-448, 448).to(torch.float8_e4m3fn)))
    q8 = po.quantize_linear(x, 0.05, torch.zeros((), dtype=torch.int8, device=dev))
    case("dequantize_linear int8", "per tensor", lambda: po.dequantize_linear(q8, torch.tensor(0.05, device=dev)), None, 4 * n)
    case("aimet quantize_dequantize", "per tensor", lambda: pa.quantize_dequantize(x, torch.tensor(0.05, device=dev),
                                                                                    torch.tensor(0.0, device=dev), 8, True),
         None, 4 * n, ("torch.fake_quantize_per_tensor_affine",
                       lambda: torch.fake_quantize_per_tensor_affine(x, 0.05, 0, -128, 127)))
    case("aimet quantize_dequantize", "per channel, last axis", lambda: pa.quantize_dequantize(x, scale_c, zeros_c, 8, True),
         None, 4 * n, ("torch.fake_quantize_per_channel_affine",
                       lambda: torch.fake_quantize_per_channel_affine(x, scale_c, zeros_c.int(), 1, -128, 127)))
    case("aimet quantize_dequantize", "per channel, axis 0", lambda: pa.quantize_dequantize(x, scale_r, zeros_r, 8, True),
         None, 4 * n, ("torch.fake_quantize_per_channel_affine",
                       lambda: torch.fake_quantize_per_channel_affine(x, scale_r.reshape(-1), zeros_r.reshape(-1).int(), 0, -128, 127)))
    blocked_scale = blocks.reshape(rows, cols // 32, 1)
    xb = x.reshape(rows, cols // 32, 32)

    def torch_blockwise() -> Any:  # AIMET's formula composed of torch ops (its blockwise path)
        return (torch.clamp(torch.round(xb / blocked_scale), -8, 7)) * blocked_scale

    case("aimet quantize_dequantize", "blockwise 32",
         lambda: pa.quantize_dequantize(x, blocks, torch.zeros_like(blocks), 4, True, block_size=(1, 32)), None, 4 * n,
         ("AIMET's formula in torch ops", torch_blockwise))
    # QKeras' auto_po2: a maximum pass, up to five least-squares rounds with their sums on the
    # device (each three term writes and three exact sums over x), the quantizing pass; the fraction
    # counts x and the output once. The peer is the path before the rounds ran on the device: x
    # copied to the host and searched there (the CPU's threads), the output written on the host.
    import polyquant.qkeras as qk

    for layout, make in (("per channel, last axis", lambda: qk.quantized_bits(8, 0, alpha="auto_po2")),
                         ("per channel, axis 0", lambda: qk.quantized_bits(8, 0, alpha="auto_po2", scale_axis=0))):
        on_device, on_host = make(), make()
        try:
            case("qkeras quantized_bits auto_po2", layout, lambda: on_device(x), lambda: make()(hx), 4 * n,
                 ("x.cpu() and the host's search", lambda: on_host(x.cpu())))
        except Exception as e:  # a row that fails says so; the table's other rows stand
            cases.append({"op": "qkeras quantized_bits auto_po2", "layout": layout, "error": f"{type(e).__name__}: {e}"})
    return {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "elements": n, "repeat": repeat,
            "copy_ms": copy_ms, "copy_bandwidth_gb_s": copy_bytes / copy_ms / 1e6, "cases": cases}


def format_device_report(report: dict) -> str:
    lines = [f"{report['device']} (torch {report['torch']}): {report['elements']} float32 elements, medians of "
             f"{report['repeat']} CUDA-event-timed runs; y.copy_(x) {report['copy_ms']:.3f} ms = "
             f"{report['copy_bandwidth_gb_s']:.0f} GB/s (bytes read + written)",
             f"{'op':<32} {'layout':<24} {'ms':>8} {'of copy':>8} {'bits':>6}  peer"]
    for r in report["cases"]:
        if "error" in r:
            lines.append(f"{r['op']:<32} {r['layout']:<24} failed: {r['error']}")
            continue
        bits = {True: "same", False: "DIFF", None: "-"}[r.get("bit_exact_vs_host")]
        peer = f"{r['peer']}: {r['peer_ms']:.3f} ms ({r['speedup_vs_peer']:.2f}x)" if "peer" in r else ""
        lines.append(f"{r['op']:<32} {r['layout']:<24} {r['ms']:>8.3f} {100 * r['fraction_of_copy']:>7.0f}% {bits:>6}  {peer}")
    return "\n".join(lines)


def device_bench_command(args: Any, out: Any) -> int:
    report = run_device_bench(args.device, args.size, args.repeat)
    print(json.dumps(report, indent=2) if args.json else format_device_report(report), file=out)
    return 1 if any(r.get("bit_exact_vs_host") is False for r in report["cases"]) else 0
