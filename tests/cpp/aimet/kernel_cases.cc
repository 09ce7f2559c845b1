// Kernel cases of AIMET's affine ops (src/families/aimet): quantize, quantize_dequantize and
// dequantize on grids from 1 to 22 bits, with tiny, zero and negative scales and integer and
// non-integer offsets, per tensor and with blocked parameters, in float32 and in the float16 /
// bfloat16 working precisions (AffineParams::narrow); torch's fake quantization (AIMET's no-grad
// shortcut) with float64 and float32 zero points. No rounding-mode parameter: run once.
#include <limits>

#include "kernel_cases.h"

namespace polyquant::test {

using namespace polyquant::detail;
using Kind = KernelCheck::Kind;

KernelCases kernel_cases_affine() {
  KernelCases c;
  // x around the grid (ties of x / s included by mixed_values' halves), scales with a tiny, a zero
  // and a negative one, integer and non-integer offsets.
  const auto ops = operands({{mixed_values(kOperandLength, 21, 64.0f), {}, false},
                             {random_params(22, {0.5f, 0.1f, 3.0f, -0.25f, 1e-30f, 0.0f, 0.0078125f}), {}, true},
                             {random_params(23, {0.0f, -128.0f, 3.0f, -0.5f, 2.5f, -0.0f}), {}, true}});
  const std::pair<double, double> grids[] = {{0, 255}, {-128, 127}, {0, 1}, {-8, 7}, {0, 65535}, {-2097152, 2097151}, {5, 5}};
  for (const auto& [lo, hi] : grids) {
    for (AffineKind kind : {AffineKind::kQuantize, AffineKind::kQuantizeDequantize, AffineKind::kDequantize}) {
      for (bool canonical : {false, true}) {
        for (QuotientRounding narrow : {QuotientRounding::kNone, QuotientRounding::kFloat16, QuotientRounding::kBFloat16}) {
          if (narrow != QuotientRounding::kNone && hi > 255) continue;  // 16-bit working precisions hold the grid (require_grid_in)
          AffineParams p;
          p.kind = kind;
          p.qmin = lo;
          p.qmax = hi;
          p.canonical_nan = canonical;
          p.narrow = narrow;
          const Params params = Params::of(p);
          const std::string what = "affine kind " + std::to_string(static_cast<int>(kind)) + " narrow " + std::to_string(static_cast<int>(narrow));
          c.checks.push_back({Kind::kRows, what + " grid [" + std::to_string(lo) + "," + std::to_string(hi) + "] canonical_nan=" +
                                               std::to_string(canonical),
                              params, ops});
          c.checks.push_back({Kind::kPerRowParams, what, params, ops});
          if (hi <= 255) c.checks.push_back({Kind::kRepeatedRows, what, params, ops});
        }
      }
    }
  }
  // quantize_dequantize on the 8-bit unsigned grid.
  c.bench = [p = std::make_shared<AffineParams>()](BenchRow& r) { r.call(p.get(), {r.x(), r.value(0.5f), r.value(0.0f)}); };
  return c;
}

KernelCases kernel_cases_fake_quantize() {
  KernelCases c;
  std::vector<double> zero_points(kOperandLength);
  auto rng = make_rng(26);
  const double choices[] = {0, 128, -3, 7, 255, -8388608, 8388608};
  for (auto& v : zero_points) v = choices[rng() % 7];
  const std::vector<Operand> ops_f64_zp = {{mixed_values(kOperandLength, 24, 64.0f), {}, false},
                                           {random_params(25, {0.5f, 0.1f, 3.0f, -0.25f, 1e-30f, 0.0f, 0.0078125f}), {}, true},
                                           {{}, zero_points, true}};
  // The zero point as float32 (exact: within 2^23), as the op passes it for the vector kernels.
  std::vector<Operand> ops_f32_zp = ops_f64_zp;
  ops_f32_zp[2].f32.assign(zero_points.begin(), zero_points.end());
  ops_f32_zp[2].f64.clear();
  const auto f64_zp = operands(ops_f64_zp), f32_zp = operands(ops_f32_zp);
  const std::pair<std::int64_t, std::int64_t> grids[] = {{0, 255}, {-128, 127}, {0, 1}, {-8, 7}, {0, 65535}, {-8388608, 8388607}};
  for (const auto& [lo, hi] : grids) {
    for (bool per_channel : {false, true}) {
      for (bool exact : {false, true}) {
        FakeQuantizeParams p;
        p.per_channel = per_channel;
        p.qmin = lo;
        p.qmax = hi;
        p.exact_in_float = exact;
        const std::string what = std::string(per_channel ? "per channel" : "per tensor") + " exact_in_float=" +
                                 std::to_string(exact);
        c.checks.push_back({Kind::kRows, what + " grid [" + std::to_string(lo) + "," + std::to_string(hi) + "]",
                            Params::of(p), f64_zp});
        p.zero_point_f32 = true;
        const Params with_f32_zp = Params::of(p);
        c.checks.push_back({Kind::kRows, what + " float32 zero point", with_f32_zp, f32_zp});
        if (exact && hi <= 255) c.checks.push_back({Kind::kRepeatedRows, what + " float32 zero point", with_f32_zp, f32_zp});
        // bfloat16 results: every NaN the canonical quiet NaN (c10::BFloat16's conversion).
        p.canonical_nan = true;
        c.checks.push_back({Kind::kRows, what + " float32 zero point canonical_nan", Params::of(p), f32_zp});
      }
    }
  }
  // The no-grad shortcut's fake quantization on the 8-bit unsigned grid.
  FakeQuantizeParams bench;
  bench.exact_in_float = true;
  bench.zero_point_f32 = true;
  c.bench = [p = std::make_shared<FakeQuantizeParams>(bench)](BenchRow& r) {
    r.call(p.get(), {r.x(), r.value(0.5f), r.value(0.0f)});
  };
  return c;
}

// The training path's per-element gradients (quantize, quantize_dequantize and dequantize; of x,
// scale and offset) on the grids of the affine cases. Operands grad_output, x, scale, offset: the
// upstream gradient mixes specials (NaNs with payloads and both signs, +-0, +-inf, subnormals) with
// ordinary values, x is around the grid with ties of x / s, and NaN / +-inf / +-0 offsets and
// scales join the affine cases' tiny, zero and negative ones; float32 and the float16 / bfloat16
// working precisions. tests/cpp/aimet/test_api.cc checks the reduction to the parameters' shapes
// through the API.
KernelCases kernel_cases_affine_grad() {
  KernelCases c;
  std::vector<float> upstream = mixed_values(kOperandLength, 31, 1.0f);
  sprinkle_nans(upstream, 5, 37);
  std::vector<float> x = mixed_values(kOperandLength, 32, 64.0f);
  sprinkle_nans(x, 11, 53);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const auto ops = operands({{upstream, {}, false},
                             {x, {}, false},
                             {random_params(33, {0.5f, 0.1f, 3.0f, -0.25f, 1e-30f, 0.0f, -0.0f, 0.0078125f, 1e-45f, inf, nan}), {}, true},
                             {random_params(34, {0.0f, -128.0f, 3.0f, -0.5f, 2.5f, -0.0f, inf, -inf, nan}), {}, true}});
  const std::pair<double, double> grids[] = {{0, 255}, {-128, 127}, {0, 1}, {-8, 7}, {0, 65535}, {-2097152, 2097151}, {5, 5}};
  for (const auto& [lo, hi] : grids) {
    for (AffineKind kind : {AffineKind::kQuantize, AffineKind::kQuantizeDequantize, AffineKind::kDequantize}) {
      for (AffineGradOf of : {AffineGradOf::kX, AffineGradOf::kScale, AffineGradOf::kOffset}) {
        for (QuotientRounding narrow : {QuotientRounding::kNone, QuotientRounding::kFloat16, QuotientRounding::kBFloat16}) {
          if (narrow != QuotientRounding::kNone && hi > 255) continue;  // 16-bit working precisions hold the grid (require_grid_in)
          AffineGradParams p;
          p.op.kind = kind;
          p.op.qmin = lo;
          p.op.qmax = hi;
          p.op.narrow = narrow;
          p.of = of;
          const Params params = Params::of(p);
          const std::string what = "affine_grad kind " + std::to_string(static_cast<int>(kind)) + " of " +
                                   std::to_string(static_cast<int>(of)) + " narrow " + std::to_string(static_cast<int>(narrow)) +
                                   " grid [" + std::to_string(lo) + "," + std::to_string(hi) + "]";
          c.checks.push_back({Kind::kRows, what, params, ops});
          c.checks.push_back({Kind::kPerRowParams, what, params, ops});  // blocks (fused backward, engine)
          if (hi <= 255) c.checks.push_back({Kind::kRepeatedRows, what, params, ops});
        }
      }
    }
  }
  // The scale term of quantize_dequantize's gradient on the 8-bit unsigned grid.
  AffineGradParams bench;
  bench.op.kind = AffineKind::kQuantizeDequantize;
  bench.of = AffineGradOf::kScale;
  c.bench = [p = std::make_shared<AffineGradParams>(bench)](BenchRow& r) {
    r.call(p.get(), {r.x(), r.x(), r.value(0.5f), r.value(0.0f)});
  };
  return c;
}

}  // namespace polyquant::test
