// Kernel cases of the QKeras quantizers (src/families/qkeras): no rounding-mode parameter; every
// parameter path of each quantizer, with subnormal inputs and results (the flush-to-zero scope),
// huge values, NaNs of every kind (the kernels specify the NaN they return) and the divisions by
// m and m_i with and without their exact reciprocals.
#include <cstdio>

#include "kernel_cases.h"

namespace polyquant::test {

using namespace polyquant::detail;
using Kind = KernelCheck::Kind;

KernelCases kernel_cases_qk_bits() {
  KernelCases c;
  std::vector<float> x = mixed_values(kOperandLength, 30, 0.125f);
  for (std::size_t i = 5; i < x.size(); i += 11) x[i] = std::ldexp(static_cast<float>(i % 5) - 2.0f, -130 - static_cast<int>(i % 20));
  sprinkle_nans(x, 2, 23);
  std::vector<float> alpha = random_params(31, {1.0f, 0.5f, 3.0f, 1e-3f, -2.0f, 0.0f, 1e-39f});
  sprinkle_nans(alpha, 4, 29);
  const auto ops = operands({{x, {}, false}, {alpha, {}, true}});
  struct Case { float bits; float integer; bool sym; bool kn; float q; bool ste; };
  const Case cases[] = {{8, 0, false, true, 1, true},   {4, 2, true, true, 1, true},   {4, 0, false, false, 1, false},
                        {1, 0, false, true, 1, true},   {0, 3, false, false, 0.5f, true}, {6, -2, false, true, 0.3f, false},
                        {24, 10, false, true, 1, true}, {3, 0.5f, true, false, 0.7f, true}, {8, 130, false, true, 1, true},
                        {8, -140, false, true, 1, true}};
  for (const Case& k : cases) {
    QkBitsParams p;
    p.keep_negative = k.kn;
    p.binary = k.bits - (k.kn ? 1.0f : 0.0f) <= 0;
    p.m = std::pow(2.0f, k.bits - (k.kn ? 1.0f : 0.0f));
    p.m_i = std::pow(2.0f, k.integer);
    p.lo = (k.kn ? 1.0f : 0.0f) * ((-p.m) + (k.sym ? 1.0f : 0.0f));
    p.hi = p.m - 1.0f;
    p.blend = {k.ste, k.q, 1.0f - k.q};
    // Divisions by m and m_i, then products with their exact reciprocals (where they exist).
    for (bool reciprocals : {false, true}) {
      p.inv_m = reciprocals ? exact_reciprocal(p.m) : 0.0f;
      p.inv_m_i = reciprocals ? exact_reciprocal(p.m_i) : 0.0f;
      const Params params = Params::of(p);
      c.checks.push_back({Kind::kRows, "bits=" + std::to_string(k.bits) + " integer=" + std::to_string(k.integer) +
                                           " reciprocals=" + std::to_string(reciprocals),
                          params, ops});
      if (k.integer == 0 && (k.bits == 8 || k.bits == 1)) {
        c.checks.push_back({Kind::kRepeatedRows, "bits=" + std::to_string(k.bits), params, ops});
      }
    }
  }
  // quantized_bits(8, 0, alpha=0.5).
  QkBitsParams bench;
  bench.m = 128.0f;
  bench.m_i = 1.0f;
  bench.lo = -128.0f;
  bench.hi = 127.0f;
  c.bench = [p = std::make_shared<QkBitsParams>(bench)](BenchRow& r) { r.call(p.get(), {r.x(), r.value(0.5f)}); };
  return c;
}

KernelCases kernel_cases_qk_bits_auto() {
  KernelCases c;
  std::vector<float> x = mixed_values(kOperandLength, 32, 0.25f);
  for (std::size_t i = 7; i < x.size(); i += 17) x[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, 120 - static_cast<int>(i % 260));
  sprinkle_nans(x, 3, 19);
  // Scales: NaN ones too (a channel holding a NaN has a NaN scale).
  std::vector<float> scales = random_params(33, {0.125f, 0.0078125f, 1.0f, 0.0f, 0x1p-23f, 3.0f, INFINITY});
  sprinkle_nans(scales, 6, 31);
  const auto ops = operands({{x, {}, false}, {scales, {}, true}});
  // Power-of-two scales only (auto_po2), down to 2^-126 and up to 2^126: the reciprocal path.
  const auto pow2_ops = operands(
      {{x, {}, false}, {random_params(37, {0.125f, 0x1p-23f, 1.0f, 0x1p-126f, 0x1p126f, 0x1p-60f, 2.0f, 0x1p40f}), {}, true}});
  for (float bits : {2.0f, 4.0f, 8.0f, 16.0f, 4.5f}) {
    for (float integer : {0.0f, 3.0f, -5.0f, 0.5f, 126.0f}) {
      for (bool level_only : {false, true}) {
        QkBitsAutoParams p;
        p.m = std::pow(2.0f, bits - 1.0f);
        p.m_i = std::pow(2.0f, integer);
        p.half_levels = std::pow(2.0f, bits - 1.0f) - 1.0f;
        p.blend = {integer != 3.0f, 0.75f, 0.25f};
        p.level_only = level_only;
        const std::string what = "auto bits=" + std::to_string(bits) + " integer=" + std::to_string(integer) +
                                 " level_only=" + std::to_string(level_only);
        c.checks.push_back({Kind::kRows, what, Params::of(p), ops});
        p.inv_m = exact_reciprocal(p.m);
        p.inv_m_i = exact_reciprocal(p.m_i);
        c.checks.push_back({Kind::kRows, what + " reciprocals", Params::of(p), ops});
        p.pow2_scales = true;
        const Params pow2 = Params::of(p);
        c.checks.push_back({Kind::kRows, what + " reciprocals pow2_scales", pow2, pow2_ops});
        if (bits == 4.0f && integer == 0.0f && !level_only) c.checks.push_back({Kind::kRepeatedRows, what + " pow2_scales", pow2, pow2_ops});
        if (level_only) {
          // The one-element least-squares quotient of the rank-1 rounds, with Keras' epsilon and
          // without one (0 / 0: NaN), on any scales and on powers of two.
          for (float eps : {1e-7f, 0.0f}) {
            QkBitsAutoParams q = p;
            q.ls_quotient = true;
            q.eps = eps;
            const std::string wq = what + " ls_quotient eps=" + std::to_string(eps);
            c.checks.push_back({Kind::kRows, wq + " pow2_scales", Params::of(q), pow2_ops});
            q.pow2_scales = false;
            c.checks.push_back({Kind::kRows, wq, Params::of(q), ops});
            q.inv_m = q.inv_m_i = 0.0f;
            c.checks.push_back({Kind::kRows, wq + " no reciprocals", Params::of(q), ops});
            // po2_round's fast path of that quotient (ls_po2).
            q.ls_po2 = true;
            c.checks.push_back({Kind::kRows, wq + " ls_po2", Params::of(q), ops});
            q.pow2_scales = true;
            q.inv_m = p.inv_m;
            q.inv_m_i = p.inv_m_i;
            c.checks.push_back({Kind::kRows, wq + " ls_po2 pow2_scales", Params::of(q), pow2_ops});
          }
          // The least-squares terms and their units a device's search sums (LsTerm).
          for (const LsTerm t : {LsTerm::kXz, LsTerm::kAbsXz, LsTerm::kZz, LsTerm::kXzUnit, LsTerm::kZzUnit}) {
            QkBitsAutoParams q = p;
            q.ls_term = t;
            const std::string wt = what + " ls_term=" + std::to_string(static_cast<int>(t));
            c.checks.push_back({Kind::kRows, wt + " pow2_scales", Params::of(q), pow2_ops});
            q.pow2_scales = false;
            c.checks.push_back({Kind::kRows, wt, Params::of(q), ops});
          }
        }
      }
    }
  }
  // quantized_bits(8, 0, alpha="auto") with its scales computed: one scale of 0.5.
  QkBitsAutoParams bench;
  bench.m = 128.0f;
  bench.m_i = 1.0f;
  bench.half_levels = 127.0f;
  c.bench = [p = std::make_shared<QkBitsAutoParams>(bench)](BenchRow& r) { r.call(p.get(), {r.x(), r.value(0.5f)}); };
  return c;
}

KernelCases kernel_cases_qk_relu() {
  KernelCases c;
  std::vector<float> x = mixed_values(kOperandLength, 34, 0.0625f);
  for (std::size_t i = 3; i < x.size(); i += 13) x[i] = std::ldexp(1.0f, -128) * ((i % 2) ? -1.0f : 1.0f);
  sprinkle_nans(x, 5, 17);
  const auto ops = operands({{x, {}, false}});
  for (bool sigmoid : {false, true}) {
    for (float ns : {0.0f, 0.25f, 1.0f}) {
      for (int clip_mode = 0; clip_mode < 4; ++clip_mode) {
        for (bool fast : {false, true}) {
          if (fast && (sigmoid || ns != 0.0f || clip_mode != 0)) continue;
          QkReluParams p;
          const float bits = 6.0f, integer = 2.0f, nsb = bits - (ns != 0.0f ? 1.0f : 0.0f);
          p.m = std::pow(2.0f, nsb);
          p.m_i = std::pow(2.0f, integer);
          p.clip_value = p.m_i - std::pow(2.0f, integer - nsb);
          p.one_minus_inv_m = 1.0f - 1.0f / p.m;
          p.negative_slope = ns;
          p.leaky = ns != 0.0f;
          p.negative_part = ns > 0.0f;
          p.m_i_ns = p.m_i * ns;
          p.neg_factor = ns > 0.0f ? 1.0f / (ns * p.m) : 0.0f;
          p.sigmoid = sigmoid;
          p.quantized_clip = clip_mode == 0;
          p.has_upper_bound = clip_mode >= 2;
          p.upper_bound = 1.5f;
          p.bound_output = clip_mode == 3;
          p.blend = {clip_mode != 1, clip_mode == 2 ? 0.5f : 1.0f, clip_mode == 2 ? 0.5f : 0.0f};
          p.fast_inference = fast;
          p.fast_p_factor = 16.0f;
          p.fast_factor = 1.0f / 64.0f;
          p.fast_ceiling = 1.0f - 1.0f / 64.0f;
          for (bool reciprocals : {false, true}) {
            p.inv_m = reciprocals ? exact_reciprocal(p.m) : 0.0f;
            p.inv_m_i = reciprocals ? exact_reciprocal(p.m_i) : 0.0f;
            const Params params = Params::of(p);
            c.checks.push_back({Kind::kRows, "relu sigmoid=" + std::to_string(sigmoid) + " ns=" + std::to_string(ns) +
                                                 " clip_mode=" + std::to_string(clip_mode) + " fast=" + std::to_string(fast) +
                                                 " reciprocals=" + std::to_string(reciprocals),
                                params, ops});
            if (!reciprocals && !sigmoid && ns == 0.0f && clip_mode == 0) c.checks.push_back({Kind::kRepeatedRows, "relu", params, ops});
          }
        }
      }
    }
  }
  // quantized_relu(8, 0).
  QkReluParams bench;
  bench.m = 256.0f;
  bench.m_i = 1.0f;
  bench.clip_value = 1.0f - 1.0f / 256.0f;
  bench.one_minus_inv_m = bench.clip_value;
  c.bench = [p = std::make_shared<QkReluParams>(bench)](BenchRow& r) { r.call(p.get(), {r.x()}); };
  return c;
}

KernelCases kernel_cases_qk_linear() {
  KernelCases c;
  std::vector<float> x = mixed_values(kOperandLength, 35, 0.125f);
  for (std::size_t i = 7; i < x.size(); i += 17) x[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, 120 - static_cast<int>(i % 260));
  sprinkle_nans(x, 4, 19);
  std::vector<float> scales = random_params(36, {0.125f, 0.1f, 3.0f, 1e-7f, 0.0f, -0.5f, INFINITY});
  sprinkle_nans(scales, 9, 31);
  const auto ops = operands({{x, {}, false}, {scales, {}, true}});
  const auto pow2_ops = operands(
      {{x, {}, false}, {random_params(38, {0.125f, 0x1p-23f, 1.0f, 0x1p-126f, 0x1p126f, 0x1p-60f, 2.0f, 0x1p40f}), {}, true}});
  const std::pair<float, float> bounds[] = {{-127, 127}, {-128, 127}, {0, 255}, {-0.0f, 3}, {-0.5f, 0.5f}};
  for (const auto& [lo, hi] : bounds) {
    QkLinearParams p;
    p.clip_min = lo;
    p.clip_max = hi;
    p.shift = hi == 0.5f ? 0.5f : 0.0f;
    p.blend = {true, lo == 0 ? 0.3f : 1.0f, 0.0f};
    char range[64];
    std::snprintf(range, sizeof range, "[%g, %g]", static_cast<double>(lo), static_cast<double>(hi));
    for (bool level_only : {false, true}) {
      p.level_only = level_only;
      p.pow2_scales = false;
      c.checks.push_back({Kind::kRows, "linear " + std::string(range) + " level_only=" + std::to_string(level_only), Params::of(p), ops});
      p.pow2_scales = true;  // auto_po2 scales: x / s as x * (1 / s)
      const Params pow2 = Params::of(p);
      c.checks.push_back({Kind::kRows, "linear pow2 " + std::string(range) + " level_only=" + std::to_string(level_only), pow2, pow2_ops});
      if (lo == -127) c.checks.push_back({Kind::kRepeatedRows, "linear pow2", pow2, pow2_ops});
    }
    // The least-squares terms and their units a device's search sums (LsTerm).
    for (const LsTerm t : {LsTerm::kXz, LsTerm::kAbsXz, LsTerm::kZz, LsTerm::kXzUnit, LsTerm::kZzUnit}) {
      QkLinearParams q = p;
      q.level_only = true;
      q.ls_term = t;
      const std::string wt = "linear " + std::string(range) + " ls_term=" + std::to_string(static_cast<int>(t));
      q.pow2_scales = true;
      c.checks.push_back({Kind::kRows, wt + " pow2_scales", Params::of(q), pow2_ops});
      q.pow2_scales = false;
      c.checks.push_back({Kind::kRows, wt, Params::of(q), ops});
    }
  }
  // quantized_linear(8, 1.0, symmetric) with a scale of 0.5.
  QkLinearParams bench;
  bench.clip_min = -127.0f;
  bench.clip_max = 127.0f;
  c.bench = [p = std::make_shared<QkLinearParams>(bench)](BenchRow& r) { r.call(p.get(), {r.x(), r.value(0.5f)}); };
  return c;
}

}  // namespace polyquant::test
