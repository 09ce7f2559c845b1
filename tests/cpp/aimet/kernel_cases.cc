// Kernel cases of AIMET's affine ops (src/families/aimet): quantize, quantize_dequantize and
// dequantize on grids from 1 to 22 bits, with tiny, zero and negative scales and integer and
// non-integer offsets, per tensor and with blocked parameters; torch's fake quantization (AIMET's
// no-grad shortcut) with float64 and float32 zero points. No rounding-mode parameter: run once.
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
        AffineParams p;
        p.kind = kind;
        p.qmin = lo;
        p.qmax = hi;
        p.canonical_nan = canonical;
        const Params params = Params::of(p);
        const std::string what = "affine kind " + std::to_string(static_cast<int>(kind));
        c.checks.push_back({Kind::kRows, what + " grid [" + std::to_string(lo) + "," + std::to_string(hi) + "] canonical_nan=" +
                                             std::to_string(canonical),
                            params, ops});
        c.checks.push_back({Kind::kPerRowParams, what, params, ops});
        if (!canonical && hi <= 255) c.checks.push_back({Kind::kRepeatedRows, what, params, ops});
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

// The gradients of quantize_dequantize have scalar kernels only; tests/cpp/aimet/test_api.cc checks
// them through the API.
KernelCases kernel_cases_affine_grad() {
  KernelCases c;
  c.tested_elsewhere = "no optimized kernel (scalar only); tests/cpp/aimet/test_api.cc";
  c.bench = [p = std::make_shared<AffineGradParams>()](BenchRow& r) {
    r.call(p.get(), {r.x(), r.x(), r.value(0.5f), r.value(0.0f)});
  };
  return c;
}

}  // namespace polyquant::test
