// QKeras' quantized_relu: validation, its float32 constants and the kernel calls (no scale search).
#include "polyquant/qkeras.h"

#include <array>
#include <optional>
#include <cmath>
#include <string>
#include <utility>

#include "core/device_elementwise.h"
#include "core/fpenv.h"
#include "core/numpy_semantics.h"
#include "families/qkeras/common.h"
#include "kernels/registry.h"

namespace polyquant::qkeras {
using namespace internal;

namespace {
detail::QkReluParams relu_params(const QuantizedReluAttrs& a) {
  require_finite(a.bits, "bits");
  require_finite(a.integer, "integer");
  require_finite(a.negative_slope, "negative_slope");
  const double ns = a.negative_slope;
  if (ns < 0) value_error("negative_slope: must be >= 0, got " + number(ns));
  if (ns != 0 && std::log2(ns) != std::floor(std::log2(ns))) {
    value_error("negative_slope: must be 0 or a power of two (0.125, 0.25, 0.5, ...), got " + number(ns));
  }
  if (ns != 0 && (std::fabs(std::log2(ns)) > 126)) {
    value_error("negative_slope: a power of two between 2^-126 and 2^126 (float32), got " + number(ns));
  }
  if (a.relu_upper_bound) {
    if (std::isnan(*a.relu_upper_bound)) value_error("relu_upper_bound: must be a number, got nan");
  }
  detail::QkReluParams p;
  const detail::ScopedFlushDenormals flush;
  const double non_sign_bits = a.bits - (ns != 0 ? 1.0 : 0.0);
  // QKeras: K.cast(K.pow(2, non_sign_bits)) and K.pow(2, integer) in integer arithmetic for
  // integral values; the float power is the same number (and defined for the negative or
  // fractional integer QKeras cannot compute).
  p.m = pow2_float32(static_cast<float>(non_sign_bits));
  p.m_i = pow2_float32(static_cast<float>(a.integer));
  p.inv_m = detail::exact_reciprocal(p.m);
  p.inv_m_i = detail::exact_reciprocal(p.m_i);
  const float m_f = pow2_float32(static_cast<float>(a.integer) - static_cast<float>(non_sign_bits));
  p.clip_value = p.m_i - m_f;
  p.one_minus_inv_m = 1.0f - 1.0f / p.m;
  p.negative_slope = static_cast<float>(ns);
  p.leaky = ns != 0;
  p.negative_part = ns > 0;
  if (p.negative_part) {
    p.m_i_ns = p.m_i * p.negative_slope;
    p.neg_factor = 1.0f / (p.negative_slope * p.m);
  }
  p.sigmoid = a.use_sigmoid;
  p.quantized_clip = a.is_quantized_clip;
  p.has_upper_bound = a.relu_upper_bound.has_value();
  p.upper_bound = a.relu_upper_bound ? static_cast<float>(*a.relu_upper_bound) : 0.0f;
  // `if self.relu_upper_bound and not self.is_quantized_clip`: 0.0 is falsy.
  p.bound_output = a.relu_upper_bound && *a.relu_upper_bound != 0.0 && !a.is_quantized_clip;
  p.blend = make_blend(a.qnoise, a.use_ste);
  if (a.enable_fast_inference) {
    p.fast_inference = true;
    // m_i = 1 << integer; p = x * 2^(bits - integer); factor = 2^-bits; all Python numbers.
    p.m_i = static_cast<float>(std::pow(2.0, a.integer));
    p.fast_p_factor = static_cast<float>(std::pow(2.0, a.bits - a.integer));
    const double factor = std::pow(2.0, -a.bits);
    p.fast_factor = static_cast<float>(factor);
    p.fast_ceiling = static_cast<float>(1.0 - factor);
  }
  return p;
}

// A validated quantized_relu call: its output and the kernel's parameters (stochastic rounding off).
struct ReluPlan {
  TensorSpec spec;
  detail::QkReluParams params;
};

ReluPlan plan_relu(const TensorView& x, const QuantizedReluAttrs& attrs) {
  const detail::NamedView operands[] = {{&x, "x"}};
  detail::op_device(operands, nullptr, "quantized_relu");
  require_x(x);
  return {TensorSpec{DType::kFloat32, x.shape}, relu_params(attrs)};
}

ReluPlan plan_relu(const TensorView& x, const QuantizedReluAttrs& attrs, const Training& training) {
  ReluPlan plan = plan_relu(x, attrs);
  plan.params.stochastic = make_stochastic(attrs.use_stochastic_rounding && !attrs.enable_fast_inference, training, 2.0f);
  return plan;
}

ReluPlan plan_relu_gradient(const TensorView& x, const QuantizedReluAttrs& attrs, const TensorView* grad_output) {
  ReluPlan plan = plan_relu(x, attrs);
  if (grad_output != nullptr) require_grad_output(*grad_output, x, plan.spec, "quantized_relu gradient");
  plan.params.fast_inference = false;
  plan.params.gradient = true;
  plan.params.upstream = grad_output != nullptr;
  return plan;
}

// `what` names the call in the output's error. `grad_output` (may be null): the upstream gradient
// of a gradient call, the second operand.
void run_relu(const ReluPlan& plan, const TensorView& x, const TensorView* grad_output, const MutableTensorView& out,
              const char* what) {
  detail::require_output(out, plan.spec, what);
  const std::array<TensorView, 2> inputs{x, grad_output != nullptr ? *grad_output : TensorView()};
  run_kernel(KernelOp::kQkRelu, inputs.data(), grad_output != nullptr ? 2 : 1, out, &plan.params);
}

PlannedCall planned(ReluPlan plan, const TensorView& x, const TensorView* grad_output, const char* what) {
  TensorSpec spec = plan.spec;
  const std::optional<TensorView> g = grad_output != nullptr ? std::optional<TensorView>(*grad_output) : std::nullopt;
  return PlannedCall(std::move(spec), [plan = std::move(plan), x, g, what](const MutableTensorView& out) {
    run_relu(plan, x, g ? &*g : nullptr, out, what);
  });
}
}  // namespace

TensorSpec quantized_relu_spec(const TensorView& x, const QuantizedReluAttrs& attrs) { return plan_relu(x, attrs).spec; }

void quantized_relu(const TensorView& x, const QuantizedReluAttrs& attrs, const Training& training, const MutableTensorView& out) {
  run_relu(plan_relu(x, attrs, training), x, nullptr, out, "quantized_relu");
}

PlannedCall quantized_relu_plan(const TensorView& x, const QuantizedReluAttrs& attrs, const Training& training) {
  return planned(plan_relu(x, attrs, training), x, nullptr, "quantized_relu");
}

void quantized_relu_gradient(const TensorView& x, const QuantizedReluAttrs& attrs, const MutableTensorView& out,
                             const TensorView* grad_output) {
  run_relu(plan_relu_gradient(x, attrs, grad_output), x, grad_output, out, "quantized_relu gradient");
}

PlannedCall quantized_relu_gradient_plan(const TensorView& x, const QuantizedReluAttrs& attrs, const TensorView* grad_output) {
  return planned(plan_relu_gradient(x, attrs, grad_output), x, grad_output, "quantized_relu gradient");
}

}  // namespace polyquant::qkeras
