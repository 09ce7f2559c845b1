#!/usr/bin/env python3
"""torch's CUDA peers of polyquant's device kernels, timed like bench/cuda/bench_rows_on_device.cc
(CUDA events, medians after warm-up, same element count), and the ratios against polyquant's
results from that program's --json file. Run by scripts/gpu_check.sh on a GPU machine.

    scripts/gpu_bench_torch.py --polyquant OUT/bench_polyquant.json [--elements N] [--reps R] [--json FILE]

The peers (issue 20's targets):
  * y.copy_(x), the yardstick of a device-to-device copy;
  * torch.fake_quantize_per_tensor_affine and torch.fake_quantize_per_channel_affine (axis 0 over 256
    channels, last axis over 1024), the ops AIMET's quantize_dequantize calls when it can;
  * AIMET's blockwise quantize_dequantize composed of torch ops (blocks of 32);
  * the FP8 chain (x / s).clamp(-448, 448).to(torch.float8_e4m3fn).
"""
import argparse
import json
import statistics
import sys

# (polyquant op, polyquant parameters) -> torch peer, for the ratio table.
PAIRS = [
    (("fake_quantize", "per-tensor"), "fake_quantize_per_tensor_affine"),
    (("fake_quantize per_channel", "per-channel axis 0"), "fake_quantize_per_channel_affine axis 0"),
    (("fake_quantize per_channel", "per-channel last axis"), "fake_quantize_per_channel_affine last axis"),
    (("affine", "blockwise 32"), "AIMET blockwise qdq (torch ops)"),
    (("quantize_linear float8_e4m3fn", "per-tensor"), "(x / s).clamp(-448, 448).to(float8_e4m3fn)"),
]


def median_ms(torch, run, reps):
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def torch_peers(n, reps):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.rand(n, device="cuda", generator=gen) * 40 - 20).float()
    y = torch.empty_like(x)
    results = {}
    results["y.copy_(x)"] = median_ms(torch, lambda: y.copy_(x), reps)
    results["fake_quantize_per_tensor_affine"] = median_ms(
        torch, lambda: torch.fake_quantize_per_tensor_affine(x, 0.5, 0, 0, 255), reps)
    for axis_name, shape, axis in (("axis 0", (256, n // 256), 0), ("last axis", (n // 1024, 1024), 1)):
        channels = shape[axis]
        xs = x.view(shape)
        scale = torch.full((channels,), 0.5, device="cuda")
        zero_point = torch.zeros(channels, dtype=torch.int32, device="cuda")
        results[f"fake_quantize_per_channel_affine {axis_name}"] = median_ms(
            torch, lambda: torch.fake_quantize_per_channel_affine(xs, scale, zero_point, axis, 0, 255), reps)
    blocks = x.view(-1, 32)
    block_scale = torch.full((blocks.shape[0], 1), 0.5, device="cuda")
    block_offset = torch.zeros((blocks.shape[0], 1), device="cuda")

    def aimet_blockwise():
        q = torch.clamp(torch.round(blocks / block_scale) - block_offset, 0, 255)
        return (q + block_offset) * block_scale

    results["AIMET blockwise qdq (torch ops)"] = median_ms(torch, aimet_blockwise, reps)
    results["(x / s).clamp(-448, 448).to(float8_e4m3fn)"] = median_ms(
        torch, lambda: (x / 0.5).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), reps)
    return torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--polyquant", required=True, help="bench_rows_on_device's --json output")
    parser.add_argument("--elements", type=int, default=64 << 20)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", help="write torch's times and the ratios here")
    args = parser.parse_args()
    with open(args.polyquant) as f:
        ours = {(r["op"], r["parameters"]): r for r in json.load(f)["results"]}
    try:
        version, cuda, device, peers = torch_peers(args.elements, args.reps)
    except Exception as e:  # no torch, or no CUDA device for it: say so, the C++ results stand
        print(f"gpu_bench_torch: torch peers not timed: {type(e).__name__}: {e}")
        return 1
    copy_ms = peers["y.copy_(x)"]
    print(f"torch {version} (CUDA {cuda}) on {device}; {args.elements} float32 elements, medians of {args.reps}")
    print(f"{'polyquant':<52} {'ms':>8}   {'torch peer':<46} {'ms':>8} {'speed-up':>9}")
    table = []
    for (op, params), peer in PAIRS:
        mine = ours.get((op, params))
        if mine is None:
            print(f"{op + ' ' + params:<52} missing from {args.polyquant}")
            continue
        ratio = peers[peer] / mine["ms"]
        table.append({"polyquant": f"{op} {params}", "ms": mine["ms"], "peer": peer, "peer_ms": peers[peer], "speedup": ratio})
        print(f"{op + ' ' + params:<52} {mine['ms']:8.3f}   {peer:<46} {peers[peer]:8.3f} {ratio:8.2f}x")
    polyquant_copy = ours.get(("copy (cudaMemcpyAsync)", ""))
    if polyquant_copy:
        print(f"copies of x: cudaMemcpyAsync {polyquant_copy['ms']:.3f} ms, torch y.copy_(x) {copy_ms:.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": version, "cuda": cuda, "device": device, "peers_ms": peers, "ratios": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
