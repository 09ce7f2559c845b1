// QKeras' quantized_bits: validation, its float32 constants, its auto / auto_po2 search, the kernel calls.
#include "polyquant/qkeras.h"

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device_elementwise.h"
#include "core/fpenv.h"
#include "core/grouped_reduce.h"
#include "core/numpy_semantics.h"
#include "families/qkeras/common.h"
#include "families/qkeras/scale_search.h"
#include "kernels/registry.h"

namespace polyquant::qkeras {
using namespace internal;

namespace {
struct BitsConstants {
  float m, m_i;
  bool auto_alpha;
};

BitsConstants bits_constants(const QuantizedBitsAttrs& a) {
  require_finite(a.bits, "bits");
  require_finite(a.integer, "integer");
  // unsigned_bits = bits - keep_negative (Python arithmetic), then K.pow(2.0, float32(.)).
  const double unsigned_bits = a.bits - (a.keep_negative ? 1.0 : 0.0);
  return {pow2_float32(static_cast<float>(unsigned_bits)), pow2_float32(static_cast<float>(a.integer)),
          a.alpha == Alpha::kAuto || a.alpha == Alpha::kAutoPo2};
}

// Validates the call's attributes and x (not the settings nor the search's axes) and returns QKeras' constants.
BitsConstants validate_bits(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& a) {
  require_devices(x, alpha, "quantized_bits");
  require_x(x);
  const BitsConstants c = bits_constants(a);
  require_finite(a.qnoise.factor, "qnoise_factor");
  require_well_formed(a.scale_axis);
  require_well_formed(a.elements_per_scale);
  const bool auto_alpha = a.alpha == Alpha::kAuto || a.alpha == Alpha::kAutoPo2;
  if (a.alpha != Alpha::kAutoPo2) {
    if (a.elements_per_scale.kind != ElementsPerScale::Kind::kNone) {
      value_error("elements_per_scale: only supported with alpha='auto_po2'");
    }
    if (a.min_po2_exponent) value_error("min_po2_exponent: only supported with alpha='auto_po2'");
    if (a.max_po2_exponent) value_error("max_po2_exponent: only supported with alpha='auto_po2'");
  }
  if (a.frozen_scale && !auto_alpha) {
    value_error("post_training_scale: only supported with alpha='auto' or 'auto_po2'");
  }
  if (auto_alpha && !a.frozen_scale && a.bits < 2) {
    value_error("bits: alpha='auto'/'auto_po2' needs bits >= 2 (a symmetric grid of " + number(a.bits) +
                " bit has no nonzero level; QKeras returns NaN or 0), got " + number(a.bits));
  }
  if (a.min_po2_exponent) require_finite(*a.min_po2_exponent, "min_po2_exponent");
  if (a.max_po2_exponent) require_finite(*a.max_po2_exponent, "max_po2_exponent");
  if ((a.alpha == Alpha::kValue || a.frozen_scale) && alpha.numel() > 0 && alpha.data == nullptr) {
    value_error(a.frozen_scale ? "post_training_scale: tensor has no data" : "alpha: tensor has no data");
  }
  return c;
}

LsLayout bits_ls_layout(const Dims& shape, const QuantizedBitsAttrs& a, const Settings& settings) {
  const int r = shape.rank;
  LsLayout l{std::vector<bool>(static_cast<std::size_t>(r), true), no_blocks(r)};
  if (r <= 1) return l;  // rank <= 1: one least-squares scale per element (QKeras since 2021-05)
  const auto& eps = a.elements_per_scale;
  if (eps.kind == ElementsPerScale::Kind::kNone) {
    l.keep = kept_dims(a.scale_axis, r, settings);
    return l;
  }
  // QKeras' _validate_axis_and_eps, with ValueErrors instead of assertions.
  if (a.scale_axis.kind == ScaleAxis::Kind::kNone) value_error("elements_per_scale: needs scale_axis to be set");
  std::vector<int> axes = a.scale_axis.axes;
  std::vector<std::int64_t> per;
  if (a.scale_axis.kind == ScaleAxis::Kind::kInt) {
    if (eps.kind == ElementsPerScale::Kind::kList) {
      value_error("elements_per_scale: a list needs a list scale_axis (scale_axis is the integer " + std::to_string(axes.at(0)) + ")");
    }
    per = {eps.values.at(0)};
  } else if (eps.kind == ElementsPerScale::Kind::kInt) {
    per.assign(axes.size(), eps.values.at(0));
  } else {
    if (eps.values.size() != axes.size()) {
      value_error("elements_per_scale: " + std::to_string(eps.values.size()) + " values for " + std::to_string(axes.size()) +
                  " scale axes; the lists must have the same length");
    }
    per = eps.values;
  }
  l.keep = kept_dims(a.scale_axis, r, settings);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    int ax = axes[i];
    if (ax < 0) ax += r;
    if (ax < 0 || ax >= r) value_error("scale_axis: " + std::to_string(axes[i]) + " is out of range for rank " + std::to_string(r));
    if (per[i] <= 0) value_error("elements_per_scale: must be positive, got " + std::to_string(per[i]));
    if (shape[ax] % per[i] != 0) {
      value_error("elements_per_scale: axis " + std::to_string(ax) + " of length " + std::to_string(shape[ax]) +
                  " is not divisible by " + std::to_string(per[i]));
    }
    if (l.block[static_cast<std::size_t>(ax)] != 1 && l.block[static_cast<std::size_t>(ax)] != per[i]) {
      value_error("scale_axis: axis " + std::to_string(ax) + " is listed twice with different elements_per_scale");
    }
    l.block[static_cast<std::size_t>(ax)] = per[i];
  }
  return l;
}

// Kept dims of the max pass of quantized_bits' auto path: rank > 1 as scale_axis says, rank 1 the
// whole vector (axis [0]), rank 0 the value itself (QKeras cannot reduce a scalar).
std::vector<bool> bits_max_keep(const Dims& shape, const QuantizedBitsAttrs& a, const Settings& settings) {
  if (shape.rank > 1) return kept_dims(a.scale_axis, shape.rank, settings);
  return std::vector<bool>(static_cast<std::size_t>(shape.rank), false);
}

// The internal scale s of an auto/auto_po2 call (units of x / 2^integer).
// `speculative_out` (may be null): see LeastSquaresReducer::out_kernel; `*output_written` tells
// whether the final output is already there.
// `x_device`: x when it is on a CUDA device (then `x` is null): the maximum pass and the
// least-squares rounds run there, but for the rounds that read a host copy of x, made on first
// need (least_squares_sums_on_device says when; and every round of one-element groups).
ScaleArray bits_auto_scale(const float* x, const TensorView* x_device, const Dims& shape, const TensorView& frozen,
                           const QuantizedBitsAttrs& a,
                           const BitsConstants& c, const Settings& settings, SearchInfo& info,
                           const detail::QkBitsAutoParams& final_params, float* speculative_out, bool& output_written,
                           float* scale_report = nullptr, bool* scale_reported = nullptr) {
  output_written = false;
  const float eps = settings.epsilon;
  ScaleArray s;
  if (a.frozen_scale) {
    // scale = self.scale / m: the post_training_scale array rounded to float32, divided in float32.
    const ContiguousF32 f = contiguous_f32(frozen);
    s.shape = frozen.shape;
    s.values.assign(f.data, f.data + frozen.numel());
    map_scale(s, [&](float v) { return v / c.m; });
    return s;
  }
  // levels = (2^(bits-1) - 1) * 2 (Python arithmetic; bits real), a float32 divisor in TF.
  const double half_levels = std::pow(2.0, a.bits - 1.0) - 1.0;
  const auto levels = static_cast<float>(half_levels * 2.0);
  s = x_device != nullptr ? group_max_on_device(*x_device, bits_max_keep(shape, a, settings), true, true, c.m_i)
                          : group_max(x, shape, bits_max_keep(shape, a, settings), true, true, c.m_i);
  info.max_passes = 1;
  map_scale(s, [&](float v) { return (v * 2.0f) / levels; });
  if (a.alpha != Alpha::kAutoPo2) return s;
  map_scale(s, [&](float v) { return po2_round(v, eps); });
  const LsLayout ls = bits_ls_layout(shape, a, settings);
  Po2Clip clip;
  // 2 ** exponent in Python (double), then float32 where it meets the tensor; Keras' clip raises
  // the maximum to the minimum when both are given and max < min.
  std::optional<double> lo, hi;
  if (a.min_po2_exponent) lo = std::pow(2.0, *a.min_po2_exponent);
  if (a.max_po2_exponent) hi = std::pow(2.0, *a.max_po2_exponent);
  if (lo && hi && *hi < *lo) hi = lo;
  if (lo) clip.lo = static_cast<float>(*lo);
  if (hi) clip.hi = static_cast<float>(*hi);
  const float m_i = c.m_i;
  const float half_levels_f = static_cast<float>(half_levels);
  ContiguousF32 host_copy;
  auto host_x = [&]() {
    if (x == nullptr && x_device != nullptr) {
      host_copy = contiguous_f32(*x_device);
      x = host_copy.data;
    }
    return x;
  };
  // Five rounds (QKeras has no convergence test); a round that returns its input bit for bit is a
  // fixed point, so the remaining rounds would repeat it.
  bool one_element_groups = shape.rank >= 1 && shape.numel() > 0 && (s.values.size() == 1 || s.shape == shape);
  for (int d = 0; d < shape.rank; ++d) {
    one_element_groups = one_element_groups && ls.keep[static_cast<std::size_t>(d)] && ls.block[static_cast<std::size_t>(d)] == 1;
  }
  if (one_element_groups) {
    // Every group is one element (rank 1): the rounds run element by element (ElementwiseRounds).
    ElementwiseRounds<detail::QkBitsAutoParams> rounds;
    rounds.kernel = detail::best_kernel(KernelOp::kQkBitsAuto, WorkType::kF32);
    rounds.level_params.m = c.m;
    rounds.level_params.m_i = m_i;
    rounds.level_params.inv_m = detail::exact_reciprocal(c.m);
    rounds.level_params.inv_m_i = detail::exact_reciprocal(m_i);
    rounds.level_params.half_levels = half_levels_f;
    rounds.level_params.level_only = true;
    rounds.out_params = final_params;
    rounds.eps = eps;
    rounds.clip = clip;
    ScaleArray next;
    next.shape = shape;
    const auto result = rounds.run(host_x(), shape.numel(), s.values, s.shape == shape, next.values, speculative_out, scale_report);
    info.least_squares_rounds += result.rounds;
    output_written = speculative_out != nullptr;
    if (scale_reported != nullptr) *scale_reported = speculative_out != nullptr && scale_report != nullptr;
    return next;
  }
  LeastSquaresSums sums;
  std::vector<LeastSquaresAcc> device_sums;
  for (int round = 0; round < 5; ++round) {
    const detail::GroupedLayout L = detail::make_grouped_layout(shape, ls.keep, ls.block, s.shape);
    detail::QkBitsAutoParams level_params;
    level_params.m = c.m;
    level_params.m_i = m_i;
    level_params.inv_m = detail::exact_reciprocal(c.m);
    level_params.inv_m_i = detail::exact_reciprocal(m_i);
    level_params.pow2_scales = exact_reciprocals(s);
    level_params.half_levels = half_levels_f;
    level_params.level_only = true;
    ++info.least_squares_rounds;
    if (x_device != nullptr && least_squares_sums_on_device(*x_device, KernelOp::kQkBitsAuto, level_params, s, L, device_sums)) {
      ++info.least_squares_rounds_on_device;
      ScaleArray next = least_squares_po2(device_sums, L, shape, ls.keep, ls.block, eps, clip);
      const bool converged = next.same_bits(s);
      s = std::move(next);
      if (converged) break;
      continue;
    }
    LeastSquaresReducer reducer;
    reducer.level_kernel = detail::best_kernel(KernelOp::kQkBitsAuto, WorkType::kF32);
    reducer.level_params = &level_params;
    reducer.divide = true;
    reducer.divisor = m_i;
    reducer.base = host_x();
    detail::QkBitsAutoParams round_output = final_params;
    round_output.pow2_scales = level_params.pow2_scales;
    if (speculative_out != nullptr) {
      reducer.out_kernel = detail::best_kernel(KernelOp::kQkBitsAuto, WorkType::kF32);
      reducer.out_params = &round_output;
      reducer.out_base = speculative_out;
    }
    detail::grouped_reduce(x, s.values.data(), L, reducer, sums.zeroed(L.num_groups));
    ScaleArray next = least_squares_po2(sums.view(), L, shape, ls.keep, ls.block, eps, clip);
    const bool converged = next.same_bits(s);
    s = std::move(next);
    if (converged) {
      output_written = speculative_out != nullptr;
      break;
    }
  }
  return s;
}

// A validated quantized_bits call: its output, QKeras' constants and the quantizing kernel's
// parameters (fixed point: all of them; auto / auto_po2: all but the scale's, which the search
// finds when the call runs).
struct BitsPlan {
  TensorSpec spec;
  BitsConstants c;
  detail::QkBitsParams fixed;          // alpha None or a value
  detail::QkBitsAutoParams automatic;  // alpha "auto" / "auto_po2"
};

BitsPlan plan_bits(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs, const Settings& settings,
                   const Training& training) {
  BitsPlan plan;
  plan.c = validate_bits(x, alpha, attrs);
  require_settings(settings);
  if (plan.c.auto_alpha && !attrs.frozen_scale) {
    // The axes of the search (each throws naming scale_axis / elements_per_scale).
    bits_max_keep(x.shape, attrs, settings);
    if (attrs.alpha == Alpha::kAutoPo2) bits_ls_layout(x.shape, attrs, settings);
  }
  plan.spec.dtype = DType::kFloat32;
  plan.spec.shape = x.shape;
  if (attrs.alpha == Alpha::kValue) {
    const std::array<Dims, 2> shapes{x.shape, alpha.shape};
    static constexpr const char* kNames[] = {"x", "alpha"};
    plan.spec.shape = broadcast_shapes(shapes, "quantized_bits", kNames);
  } else if (attrs.frozen_scale) {
    const std::array<Dims, 2> shapes{x.shape, alpha.shape};
    static constexpr const char* kNames[] = {"x", "post_training_scale"};
    plan.spec.shape = broadcast_shapes(shapes, "quantized_bits", kNames);
  }
  const BitsConstants& c = plan.c;
  if (!c.auto_alpha) {
    detail::QkBitsParams& p = plan.fixed;
    p.keep_negative = attrs.keep_negative;
    p.binary = attrs.bits - (attrs.keep_negative ? 1.0 : 0.0) <= 0;
    p.m = c.m;
    p.m_i = c.m_i;
    p.inv_m = detail::exact_reciprocal(c.m);
    p.inv_m_i = detail::exact_reciprocal(c.m_i);
    {
      const detail::ScopedFlushDenormals flush;
      // keep_negative * (-m + symmetric), m - 1 (a False keep_negative gives -0.0).
      p.lo = (attrs.keep_negative ? 1.0f : 0.0f) * ((-p.m) + (attrs.symmetric ? 1.0f : 0.0f));
      p.hi = p.m - 1.0f;
    }
    p.blend = make_blend(attrs.qnoise, attrs.use_ste);
    p.stochastic = make_stochastic(attrs.use_stochastic_rounding, training, 1.0f);
  } else {
    detail::QkBitsAutoParams& p = plan.automatic;
    p.m = c.m;
    p.m_i = c.m_i;
    p.inv_m = detail::exact_reciprocal(c.m);
    p.inv_m_i = detail::exact_reciprocal(c.m_i);
    p.half_levels = static_cast<float>(std::pow(2.0, attrs.bits - 1.0) - 1.0);
    p.blend = make_blend(attrs.qnoise, attrs.use_ste);
  }
  return plan;
}

// The call `plan` validated: the scale search (auto / auto_po2, reading x), then the quantizing pass.
void run_bits(const BitsPlan& plan, const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
              const Settings& settings, const MutableTensorView& out, const MutableTensorView* scale_out, SearchInfo* info) {
  SearchInfo search;
  detail::require_output(out, plan.spec, "quantized_bits");
  const BitsConstants& c = plan.c;
  if (!c.auto_alpha) {
    const float one = 1.0f;
    const TensorView scale = attrs.alpha == Alpha::kValue ? alpha : TensorView(&one, DType::kFloat32, Dims{});
    const std::array<TensorView, 2> inputs{x, scale};
    run_kernel(KernelOp::kQkBits, inputs.data(), 2, out, &plan.fixed);
    if (info != nullptr) *info = search;
    return;
  }
  // On a device x stays there: alpha="auto" runs its maximum pass there (the scale derived on the
  // host), auto_po2 its least-squares rounds too, but for those that read a host copy of x
  // (bits_auto_scale), and a post_training_scale is read on the host (x is not). The quantizing
  // pass runs on the device with the scale found.
  const bool on_device = !x.device.is_cpu();
  std::vector<unsigned char> alpha_copy;
  ContiguousF32 xf;
  if (!on_device) xf = contiguous_f32(x);
  const TensorView frozen = attrs.frozen_scale ? detail::host_readable(alpha, alpha_copy) : alpha;
  detail::QkBitsAutoParams p = plan.automatic;
  bool output_written = false;
  float* speculative = on_device ? nullptr : speculative_output(out, x.shape, xf.data);
  // A valid contiguous float32 scale output of x's shape (rank-1 auto_po2: one scale per element)
  // clear of x and of the output: the element-by-element rounds write the reported scale there.
  float* report = nullptr;
  if (speculative != nullptr && scale_out != nullptr && !attrs.frozen_scale) {
    report = speculative_output(*scale_out, x.shape, xf.data);
    const auto r0 = reinterpret_cast<std::uintptr_t>(report), o0 = reinterpret_cast<std::uintptr_t>(speculative);
    const auto bytes = static_cast<std::uintptr_t>(x.shape.numel()) * sizeof(float);
    if (report != nullptr && r0 < o0 + bytes && o0 < r0 + bytes) report = nullptr;
  }
  bool scale_reported = false;
  ScaleArray s = bits_auto_scale(xf.data, on_device ? &x : nullptr, x.shape, frozen, attrs, c, settings, search,
                                 p, speculative,
                                 output_written, report,
                                 &scale_reported);
  if (info != nullptr) *info = search;
  if (!output_written) {
    p.pow2_scales = exact_reciprocals(s);
    const std::array<TensorView, 2> inputs{on_device ? x : TensorView(xf.data, DType::kFloat32, x.shape), s.view()};
    run_kernel(KernelOp::kQkBitsAuto, inputs.data(), 2, out, &p);
  }
  if (scale_out != nullptr && !attrs.frozen_scale && !scale_reported) {
    // The output is written: s becomes the reported scale in place (one scale per element for
    // rank-1 auto_po2, so no copy of it).
    report_scale(s, c.m, *scale_out, "quantized_bits scale");
  }
}

// The gradient's kernel parameters (d out / d x: 1 or 1 - q; times grad_output with `upstream`).
detail::QkBitsParams bits_gradient_params(const QuantizedBitsAttrs& attrs, bool upstream) {
  detail::QkBitsParams p;
  p.gradient = true;
  p.upstream = upstream;
  p.blend = make_blend(attrs.qnoise, attrs.use_ste);
  return p;
}

// `alpha_value`: alpha is the alpha tensor (Alpha::kValue), else the scale is 1. `grad_output`
// (may be null): the upstream gradient, the third operand (p.upstream).
void run_bits_gradient(const TensorSpec& spec, const detail::QkBitsParams& p, const TensorView& x, const TensorView& alpha,
                       bool alpha_value, const TensorView* grad_output, const MutableTensorView& out) {
  detail::require_output(out, spec, "quantized_bits gradient");
  const float one = 1.0f;
  const TensorView scale = alpha_value ? alpha : TensorView(&one, DType::kFloat32, Dims{});
  const std::array<TensorView, 3> inputs{x, scale, grad_output != nullptr ? *grad_output : TensorView()};
  run_kernel(KernelOp::kQkBits, inputs.data(), grad_output != nullptr ? 3 : 2, out, &p);
}
}  // namespace

TensorSpec quantized_bits_spec(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                               const Settings& settings) {
  return plan_bits(x, alpha, attrs, settings, Training{}).spec;
}

Dims quantized_bits_scale_shape(const TensorView& x, const QuantizedBitsAttrs& attrs, const Settings& settings) {
  if (x.shape.rank == 0) return Dims{};
  // Rank 1: one max-based scale for the vector; auto_po2's least squares then give one per element.
  if (x.shape.rank == 1) return attrs.alpha == Alpha::kAutoPo2 ? x.shape : Dims{1};
  return kept_shape(x.shape, kept_dims(attrs.scale_axis, x.shape.rank, settings));
}

void quantized_bits(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs, const Settings& settings,
                    const Training& training, const MutableTensorView& out, const MutableTensorView* scale_out, SearchInfo* info) {
  run_bits(plan_bits(x, alpha, attrs, settings, training), x, alpha, attrs, settings, out, scale_out, info);
}

PlannedCall quantized_bits_plan(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                                const Settings& settings, const Training& training, const MutableTensorView* scale_out,
                                SearchInfo* info) {
  BitsPlan plan = plan_bits(x, alpha, attrs, settings, training);
  TensorSpec spec = plan.spec;
  return PlannedCall(std::move(spec), [plan = std::move(plan), x, alpha, attrs, settings, scale_out, info](const MutableTensorView& out) {
    run_bits(plan, x, alpha, attrs, settings, out, scale_out, info);
  });
}

void quantized_bits_gradient(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                             const Settings& settings, const MutableTensorView& out, const TensorView* grad_output) {
  const TensorSpec spec = quantized_bits_spec(x, alpha, attrs, settings);
  if (grad_output != nullptr) require_grad_output(*grad_output, x, spec, "quantized_bits gradient");
  run_bits_gradient(spec, bits_gradient_params(attrs, grad_output != nullptr), x, alpha, attrs.alpha == Alpha::kValue, grad_output,
                    out);
}

PlannedCall quantized_bits_gradient_plan(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                                         const Settings& settings, const TensorView* grad_output) {
  TensorSpec spec = quantized_bits_spec(x, alpha, attrs, settings);
  if (grad_output != nullptr) require_grad_output(*grad_output, x, spec, "quantized_bits gradient");
  const bool alpha_value = attrs.alpha == Alpha::kValue;
  const std::optional<TensorView> g = grad_output != nullptr ? std::optional<TensorView>(*grad_output) : std::nullopt;
  return PlannedCall(spec, [spec, p = bits_gradient_params(attrs, g.has_value()), x, alpha, alpha_value, g](const MutableTensorView& out) {
    run_bits_gradient(spec, p, x, alpha, alpha_value, g ? &*g : nullptr, out);
  });
}

}  // namespace polyquant::qkeras
