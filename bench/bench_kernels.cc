// Single-thread throughput of each kernel row (no engine, no threads) on in-cache and out-of-cache
// sizes, with memcpy of the same bytes as the yardstick. Bytes counted: read X + write out.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/registry.h"

namespace polyquant::detail {
namespace {

struct Buffers {
  std::vector<float> x, out, ones, zeros, sixteen, lo, hi, min_exp;
  std::vector<double> max_value, sums;
  std::vector<std::int8_t> x8, zero8;
  explicit Buffers(std::size_t n)
      : x(n), out(n), ones(1, 0.5f), zeros(1, 0.0f), sixteen(1, 16.0f), lo(1, -8.0f), hi(1, 7.0f), min_exp(1, -9.0f),
        max_value(1, 448.0), sums(2 * n), x8(n), zero8(1, 3) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-20.0f, 20.0f);
    for (auto& v : x) v = d(rng);
    for (auto& v : x8) v = static_cast<std::int8_t>(rng());
  }
};

void bench_memcpy(benchmark::State& state) {
  Buffers b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::memcpy(b.out.data(), b.x.data(), b.x.size() * sizeof(float));
    benchmark::DoNotOptimize(b.out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 8);
}

void bench_kernel(benchmark::State& state, KernelEntry e) {
  Buffers b(static_cast<std::size_t>(state.range(0)));
  RowArgs a;
  a.in[0] = b.x.data();
  const void* params_ptr = nullptr;
  IntQuantParams iq{RoundingMode::kHalfEven, false, -128, 127};
  BipolarQuantParams bq;
  TruncParams tp{RoundingMode::kFloor};
  // OCP E4M3 as the FloatQuant node computes it: float32 output.
  FloatQuantParams fq{.mode = RoundingMode::kHalfEven, .mantissa_bits = 3, .saturation = true, .has_inf = false,
                      .has_nan = true, .is_signed = true, .max_fits_float32 = true, .double_output = false};
  QkBitsParams qb;
  qb.m = 128.0f;
  qb.m_i = 1.0f;
  qb.lo = -128.0f;
  qb.hi = 127.0f;
  QkBitsAutoParams qa;
  qa.m = 128.0f;
  qa.m_i = 1.0f;
  qa.half_levels = 127.0f;
  QkReluParams qr;
  qr.m = 256.0f;
  qr.m_i = 1.0f;
  qr.clip_value = 1.0f - 1.0f / 256.0f;
  qr.one_minus_inv_m = qr.clip_value;
  QkLinearParams ql;
  ql.clip_min = -127.0f;
  ql.clip_max = 127.0f;
  // Reductions, per element (a kept innermost dimension): bytes counted are still x read + 4 per
  // element, for comparison with the elementwise kernels.
  GroupMaxParams gm{true, true};
  // Linear Q: float32 -> int8 (x / 0.5, zero point 0); DQ: int8 -> float32 (zero point 3). Bytes
  // counted as for the others (8 per element), for comparison with memcpy of float32.
  QuantizeLinearParams ql8;
  ql8.out_dtype = DType::kInt8;
  ql8.qmin = -128;
  ql8.qmax = 127;
  ql8.has_zero_point = true;
  DequantizeLinearParams dq8;
  dq8.x_dtype = DType::kInt8;
  dq8.has_zero_point = true;
  ProductSumsParams ps{true, true, 2.0f, 0.5f};
  // AIMET: quantize_dequantize on the 8-bit unsigned grid (the training path's formula and the
  // no-grad shortcut's fake quantization), its x gradient, and MinMax statistics per tensor
  // (negative zeros tracked, as the analyzer runs it).
  AffineParams af;
  FakeQuantizeParams fk;
  fk.exact_in_float = true;
  fk.zero_point_f32 = true;
  AffineGradParams ag;
  float min_max[2] = {INFINITY, -INFINITY};
  std::uint8_t negative_zero = 0;
  GroupMinMaxParams mm;
  mm.max_out = &min_max[1];
  mm.negative_zero = &negative_zero;
  void* out = b.out.data();
  switch (e.op) {
    case KernelOp::kGroupMax: params_ptr = &gm; break;
    case KernelOp::kQuantizeLinear: a.in[1] = b.ones.data(); a.in[2] = b.zeros.data(); a.broadcast_mask = 6; params_ptr = &ql8; break;
    case KernelOp::kDequantizeLinear:
      a.in[0] = b.x8.data(); a.in[1] = b.ones.data(); a.in[2] = b.zero8.data(); a.broadcast_mask = 6; params_ptr = &dq8; break;
    case KernelOp::kProductSums: a.in[1] = b.x.data(); params_ptr = &ps; out = b.sums.data(); break;
    case KernelOp::kQkBits: a.in[1] = b.ones.data(); a.broadcast_mask = 2; params_ptr = &qb; break;
    case KernelOp::kQkBitsAuto: a.in[1] = b.ones.data(); a.broadcast_mask = 2; params_ptr = &qa; break;
    case KernelOp::kQkRelu: params_ptr = &qr; break;
    case KernelOp::kQkLinear: a.in[1] = b.ones.data(); a.broadcast_mask = 2; params_ptr = &ql; break;
    case KernelOp::kIntQuant: a.in[1] = b.ones.data(); a.in[2] = b.zeros.data(); a.broadcast_mask = 6; params_ptr = &iq; break;
    case KernelOp::kBipolarQuant: a.in[1] = b.ones.data(); a.broadcast_mask = 2; params_ptr = &bq; break;
    case KernelOp::kTruncV1:
      a.in[1] = b.ones.data(); a.in[2] = b.zeros.data(); a.in[3] = b.sixteen.data(); a.broadcast_mask = 14; params_ptr = &tp; break;
    case KernelOp::kTruncV2:
      a.in[1] = b.ones.data(); a.in[2] = b.zeros.data(); a.in[3] = b.sixteen.data(); a.in[4] = b.sixteen.data();
      a.in[5] = b.lo.data(); a.in[6] = b.hi.data(); a.in[7] = b.zeros.data(); a.broadcast_mask = 254;
      params_ptr = &tp; break;
    case KernelOp::kFloatQuant:
      a.in[1] = b.ones.data(); a.in[2] = b.min_exp.data(); a.in[3] = b.max_value.data(); a.broadcast_mask = 14;
      params_ptr = &fq; break;
    case KernelOp::kAffine: a.in[1] = b.ones.data(); a.in[2] = b.zeros.data(); a.broadcast_mask = 6; params_ptr = &af; break;
    case KernelOp::kFakeQuantize: a.in[1] = b.ones.data(); a.in[2] = b.zeros.data(); a.broadcast_mask = 6; params_ptr = &fk; break;
    case KernelOp::kAffineGrad:
      a.in[1] = b.x.data(); a.in[2] = b.ones.data(); a.in[3] = b.zeros.data(); a.broadcast_mask = 12; params_ptr = &ag; break;
    case KernelOp::kGroupMinMax: params_ptr = &mm; out = &min_max[0]; break;
  }
  a.out = out;
  a.n = state.range(0);
  a.stream = state.range(0) * 4 >= (32 << 20);
  for (auto _ : state) {
    e.fn(params_ptr, a);
    benchmark::DoNotOptimize(b.out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0) * 8);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("memcpy", bench_memcpy)->Arg(1 << 14)->Arg(1 << 24);
  for (const auto& e : all_kernels()) {
    if (e.work != WorkType::kF32) continue;
    bool supported = false;
    for (Isa s : supported_isas()) supported = supported || s == e.isa;
    if (!supported) continue;
    benchmark::RegisterBenchmark(e.name, bench_kernel, e)->Arg(1 << 14)->Arg(1 << 24);
  }
  return true;
}();

}  // namespace
}  // namespace polyquant::detail

BENCHMARK_MAIN();
