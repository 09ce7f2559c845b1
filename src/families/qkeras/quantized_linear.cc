// QKeras' quantized_linear: validation, its float32 constants, its auto / auto_po2 search, the kernel calls.
#include "polyquant/qkeras.h"

#include <array>
#include <optional>
#include <cstdint>
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

float linear_data_type_scale(double bits, double integer, bool keep_negative) {
  const detail::ScopedFlushDenormals flush;
  // K.pow(2.0, tf.cast(integer, float32) - bits + keep_negative), each step float32.
  const float e = (static_cast<float>(integer) - static_cast<float>(bits)) + (keep_negative ? 1.0f : 0.0f);
  return pow2_float32(e);
}

namespace {
struct LinearConstants {
  float clip_min, clip_max, shift, data_type_scale;
  bool sign_function, auto_alpha;
};

LinearConstants linear_constants(const QuantizedLinearAttrs& a) {
  require_finite(a.bits, "bits");
  require_finite(a.integer, "integer");
  if (a.bits <= 0) value_error("bits: Bit count " + number(a.bits) + " must be positive");
  LinearConstants c{};
  const detail::ScopedFlushDenormals flush;
  c.sign_function = a.bits == 1.0 && a.keep_negative;
  c.auto_alpha = a.alpha == Alpha::kAuto || a.alpha == Alpha::kAutoPo2;
  if (c.sign_function) {
    c.clip_min = -0.5f;
    c.clip_max = 0.5f;
    c.shift = 0.5f;
  } else {
    const float u = pow2_float32(static_cast<float>(a.bits - (a.keep_negative ? 1.0 : 0.0)));
    c.clip_min = (a.keep_negative ? 1.0f : 0.0f) * ((-u) + (a.symmetric ? 1.0f : 0.0f));
    c.clip_max = u - 1.0f;
    c.shift = 0.0f;
  }
  c.data_type_scale = linear_data_type_scale(a.bits, a.integer, a.keep_negative);
  return c;
}

std::vector<bool> linear_keep(const Dims& shape, const QuantizedLinearAttrs& a, const Settings& settings) {
  return kept_dims(a.scale_axis, shape.rank, settings);
}

// The quantization scale of a call: alpha * data_type_scale, data_type_scale, or the auto search.
// `final_params`/`speculative_out` (may be null): the quantizing pass's parameters and output for
// the least-squares rounds to write while they search (see LeastSquaresReducer::out_kernel);
// `*output_written` tells whether the final output is already there.
ScaleArray linear_scale(const TensorView& x, const float* xf, const TensorView& alpha, const QuantizedLinearAttrs& a,
                        const LinearConstants& c, const Settings& settings, const Training& training, SearchInfo& info,
                        const detail::QkLinearParams* final_params = nullptr, float* speculative_out = nullptr,
                        bool* output_written = nullptr) {
  if (output_written != nullptr) *output_written = false;
  ScaleArray s;
  if (!c.auto_alpha) {
    if (a.alpha == Alpha::kValue) {
      const ContiguousF32 f = contiguous_f32(alpha);
      s.shape = alpha.shape;
      s.values.assign(f.data, f.data + alpha.numel());
      const float d = c.data_type_scale;
      map_scale(s, [d](float v) { return v * d; });
    } else {
      s.shape = Dims{};
      s.values = {c.data_type_scale};
    }
    return s;
  }
  const float eps = settings.epsilon;
  const std::vector<bool> keep = linear_keep(x.shape, a, settings);
  float clip_range;
  {
    const detail::ScopedFlushDenormals flush;
    clip_range = c.clip_max - c.clip_min;
  }
  // (xf: x itself on the host, or the host copy auto_po2's rounds read; null for an empty x)
  s = x.device.is_cpu() || xf != nullptr ? group_max(xf, x.shape, keep, a.keep_negative, false, 1.0f)
                                         : group_max_on_device(x, keep, a.keep_negative, false, 1.0f);
  info.max_passes = 1;
  const bool kn = a.keep_negative;
  map_scale(s, [&](float v) {
    const float q = kn ? (v * 2.0f) / clip_range : v / clip_range;
    return detail::tf_max(q, eps);
  });
  if (a.alpha != Alpha::kAutoPo2) return s;
  map_scale(s, [&](float v) { return po2_round(v, eps); });
  const int rank = x.shape.rank;
  const LsLayout ls{rank <= 1 ? std::vector<bool>(static_cast<std::size_t>(rank), true) : keep, no_blocks(rank)};
  detail::QkLinearParams level_params;
  level_params.level_only = true;
  level_params.clip_min = c.clip_min;
  level_params.clip_max = c.clip_max;
  level_params.shift = c.shift;
  // tf.while_loop(any(last != s), ..., maximum_iterations=5 or 1): the dummy start is -1.
  const int max_rounds = c.sign_function ? 1 : 5;
  ScaleArray last;
  last.shape = s.shape;
  last.values.assign(s.values.size(), -1.0f);
  LeastSquaresSums sums;
  std::vector<LeastSquaresAcc> device_sums;
  // x on a device: the rounds run there, but for those that read a host copy of x, made on first
  // need (least_squares_sums_on_device says when).
  ContiguousF32 host_copy;
  auto host_x = [&]() {
    if (xf == nullptr && !x.device.is_cpu()) {
      host_copy = contiguous_f32(x);
      xf = host_copy.data;
    }
    return xf;
  };
  for (int round = 0; round < max_rounds; ++round) {
    bool any_differs = last.shape != s.shape;
    for (std::size_t i = 0; !any_differs && i < s.values.size(); ++i) any_differs = last.values[i] != s.values[i];
    if (!any_differs) break;
    level_params.pow2_scales = exact_reciprocals(s);
    level_params.stochastic = make_stochastic(a.use_stochastic_rounding, training, 1.0f);
    level_params.stochastic.stream = static_cast<std::uint32_t>(round + 1);
    const detail::GroupedLayout L = detail::make_grouped_layout(x.shape, ls.keep, ls.block, s.shape);
    ++info.least_squares_rounds;
    if (!x.device.is_cpu() && least_squares_sums_on_device(x, KernelOp::kQkLinear, level_params, s, L, device_sums)) {
      ++info.least_squares_rounds_on_device;
      ScaleArray next = least_squares_po2(device_sums, L, x.shape, ls.keep, ls.block, eps, Po2Clip{});
      last = std::move(s);
      s = std::move(next);
      continue;
    }
    // Stochastic levels (training) are keyed by the element's flat index and the round.
    LeastSquaresReducer reducer;
    reducer.level_kernel = detail::best_kernel(KernelOp::kQkLinear, WorkType::kF32);
    reducer.level_params = &level_params;
    reducer.base = host_x();
    // The quantizing pass draws its own noise in training: no speculative output then.
    const bool speculate = speculative_out != nullptr && final_params != nullptr && !final_params->stochastic.enabled;
    detail::QkLinearParams round_output;
    if (speculate) {
      round_output = *final_params;
      round_output.pow2_scales = level_params.pow2_scales;
      reducer.out_kernel = detail::best_kernel(KernelOp::kQkLinear, WorkType::kF32);
      reducer.out_params = &round_output;
      reducer.out_base = speculative_out;
    }
    detail::grouped_reduce(xf, s.values.data(), L, reducer, sums.zeroed(L.num_groups));
    ScaleArray next = least_squares_po2(sums.view(), L, x.shape, ls.keep, ls.block, eps, Po2Clip{});
    last = std::move(s);
    s = std::move(next);
    // This round's output used `last`: final when the search stops here with the same scale.
    if (output_written != nullptr) *output_written = speculate && last.same_bits(s);
  }
  return s;
}

// A validated quantized_linear call: its output, QKeras' constants and the kernel's parameters
// (all but the scale's, which the call finds when it runs: from alpha, or by the search over x).
struct LinearPlan {
  TensorSpec spec;
  LinearConstants c;
  detail::QkLinearParams params;
};

LinearPlan plan_linear(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs, const Settings& settings) {
  require_devices(x, alpha, "quantized_linear");
  require_x(x);
  LinearPlan plan{TensorSpec{DType::kFloat32, x.shape}, linear_constants(attrs), {}};
  require_finite(attrs.qnoise.factor, "qnoise_factor");
  require_well_formed(attrs.scale_axis);
  require_settings(settings);
  if (attrs.alpha == Alpha::kAuto || attrs.alpha == Alpha::kAutoPo2) linear_keep(x.shape, attrs, settings);
  if (attrs.alpha == Alpha::kValue) {
    if (alpha.numel() > 0 && alpha.data == nullptr) value_error("alpha: tensor has no data");
    const std::array<Dims, 2> shapes{x.shape, alpha.shape};
    static constexpr const char* kNames[] = {"x", "alpha"};
    plan.spec.shape = broadcast_shapes(shapes, "quantized_linear", kNames);
  }
  return plan;
}

// The quantizer's plan: the quantizing kernel's parameters, stochastic rounding as `training` says.
LinearPlan plan_linear(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs, const Settings& settings,
                       const Training& training) {
  LinearPlan plan = plan_linear(x, alpha, attrs, settings);
  detail::QkLinearParams& p = plan.params;
  p.clip_min = plan.c.clip_min;
  p.clip_max = plan.c.clip_max;
  p.shift = plan.c.shift;
  p.blend = make_blend(attrs.qnoise, true);
  p.stochastic = make_stochastic(attrs.use_stochastic_rounding, training, 1.0f);
  return plan;
}

// The gradient's plan: the kernel in gradient mode (its search, if any, outside training).
LinearPlan plan_linear_gradient(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                const Settings& settings, const TensorView* grad_output) {
  LinearPlan plan = plan_linear(x, alpha, attrs, settings);
  if (grad_output != nullptr) require_grad_output(*grad_output, x, plan.spec, "quantized_linear gradient");
  detail::QkLinearParams& p = plan.params;
  p.clip_min = plan.c.clip_min;
  p.clip_max = plan.c.clip_max;
  p.gradient = true;
  p.upstream = grad_output != nullptr;
  p.blend = make_blend(attrs.qnoise, true);
  return plan;
}

// x as the scale search reads it. On the CPU with a searched alpha: x as contiguous float32, which
// the quantizing pass then reads too (host_copy). On a device x stays there: alpha="auto" runs its
// maximum pass there (the scale derived on the host), auto_po2 its least-squares rounds too (but
// for those that read a host copy, linear_scale), and the quantizing pass runs there with the
// scale found.
struct SearchInput {
  bool host_copy = false;
  ContiguousF32 xf;
};
SearchInput search_input(const TensorView& x, const LinearConstants& c) {
  SearchInput in;
  in.host_copy = c.auto_alpha && x.device.is_cpu();
  if (in.host_copy) in.xf = contiguous_f32(x);
  return in;
}

// The call `plan` validated: the scale (the search reads x), then the quantizing pass.
void run_linear(const LinearPlan& plan, const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                const Settings& settings, const Training& training, const MutableTensorView& out,
                const MutableTensorView* quantization_scale_out, SearchInfo* info) {
  detail::require_output(out, plan.spec, "quantized_linear");
  const LinearConstants& c = plan.c;
  const SearchInput in = search_input(x, c);
  const bool host_copy = in.host_copy;
  const ContiguousF32& xf = in.xf;
  SearchInfo search;
  detail::QkLinearParams p = plan.params;
  bool output_written = false;
  const ScaleArray s = linear_scale(x, xf.data, alpha, attrs, c, settings, training, search, &p,
                                    host_copy ? speculative_output(out, x.shape, xf.data) : nullptr, &output_written);
  if (info != nullptr) *info = search;
  if (!output_written) {
    p.pow2_scales = exact_reciprocals(s);
    const std::array<TensorView, 2> inputs{host_copy ? TensorView(xf.data, DType::kFloat32, x.shape) : x, s.view()};
    run_kernel(KernelOp::kQkLinear, inputs.data(), 2, out, &p);
  }
  if (quantization_scale_out != nullptr) copy_scale_into(s, *quantization_scale_out, "quantized_linear quantization_scale");
}

void run_linear_gradient(const LinearPlan& plan, const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                         const Settings& settings, const TensorView* grad_output, const MutableTensorView& out) {
  detail::require_output(out, plan.spec, "quantized_linear gradient");
  const LinearConstants& c = plan.c;
  const SearchInput in = search_input(x, c);
  const bool host_copy = in.host_copy;
  const ContiguousF32& xf = in.xf;
  SearchInfo search;
  const ScaleArray s = linear_scale(x, xf.data, alpha, attrs, c, settings, Training{}, search);
  const std::array<TensorView, 3> inputs{host_copy ? TensorView(xf.data, DType::kFloat32, x.shape) : x, s.view(),
                                         grad_output != nullptr ? *grad_output : TensorView()};
  run_kernel(KernelOp::kQkLinear, inputs.data(), grad_output != nullptr ? 3 : 2, out, &plan.params);
}
}  // namespace

TensorSpec quantized_linear_spec(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                 const Settings& settings) {
  return plan_linear(x, alpha, attrs, settings).spec;
}

Dims quantized_linear_scale_shape(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                  const Settings& settings) {
  if (attrs.alpha == Alpha::kValue) return alpha.shape;
  if (attrs.alpha == Alpha::kNone) return Dims{};
  if (x.shape.rank <= 1 && attrs.alpha == Alpha::kAutoPo2) return x.shape;
  return kept_shape(x.shape, linear_keep(x.shape, attrs, settings));
}

void quantized_linear(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs, const Settings& settings,
                      const Training& training, const MutableTensorView& out, const MutableTensorView* quantization_scale_out,
                      SearchInfo* info) {
  run_linear(plan_linear(x, alpha, attrs, settings, training), x, alpha, attrs, settings, training, out,
             quantization_scale_out, info);
}

PlannedCall quantized_linear_plan(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                  const Settings& settings, const Training& training,
                                  const MutableTensorView* quantization_scale_out, SearchInfo* info) {
  LinearPlan plan = plan_linear(x, alpha, attrs, settings, training);
  TensorSpec spec = plan.spec;
  return PlannedCall(std::move(spec), [plan = std::move(plan), x, alpha, attrs, settings, training, quantization_scale_out,
                                       info](const MutableTensorView& out) {
    run_linear(plan, x, alpha, attrs, settings, training, out, quantization_scale_out, info);
  });
}

void quantized_linear_gradient(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                               const Settings& settings, const MutableTensorView& out, const TensorView* grad_output) {
  run_linear_gradient(plan_linear_gradient(x, alpha, attrs, settings, grad_output), x, alpha, attrs, settings, grad_output, out);
}

PlannedCall quantized_linear_gradient_plan(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                           const Settings& settings, const TensorView* grad_output) {
  LinearPlan plan = plan_linear_gradient(x, alpha, attrs, settings, grad_output);
  TensorSpec spec = plan.spec;
  const std::optional<TensorView> g = grad_output != nullptr ? std::optional<TensorView>(*grad_output) : std::nullopt;
  return PlannedCall(std::move(spec), [plan = std::move(plan), x, alpha, attrs, settings, g](const MutableTensorView& out) {
    run_linear_gradient(plan, x, alpha, attrs, settings, g ? &*g : nullptr, out);
  });
}

}  // namespace polyquant::qkeras
