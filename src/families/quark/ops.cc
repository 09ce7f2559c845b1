// Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear: each call is planned once (validation,
// layout, kernel parameters; families/onnx/qdq_support.h) and run on the shared Q/DQ kernels.
#include <array>
#include <limits>
#include <string>

#include "core/device_elementwise.h"
#include "kernels/registry.h"
#include "families/onnx/qdq_support.h"
#include "polyquant/error.h"
#include "polyquant/quark.h"

namespace polyquant::quark {
namespace {

using detail::QuantTarget;

constexpr const char* kTypeList = "int8, uint8, int16, uint16, int32, uint32, float16, bfloat16";

bool supported(DType t) {
  switch (t) {
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kFloat16:
    case DType::kBFloat16: return true;
    default: return false;
  }
}

void integer_range(DType t, std::int64_t& lo, std::int64_t& hi) {
  switch (t) {
    case DType::kInt8: lo = -128; hi = 127; return;
    case DType::kUInt8: lo = 0; hi = 255; return;
    case DType::kInt16: lo = -32768; hi = 32767; return;
    case DType::kUInt16: lo = 0; hi = 65535; return;
    case DType::kInt32: lo = std::numeric_limits<std::int32_t>::min(); hi = std::numeric_limits<std::int32_t>::max(); return;
    default: lo = 0; hi = std::numeric_limits<std::uint32_t>::max(); return;
  }
}

void require_float32(const TensorView& v, const char* op, const char* name) {
  if (v.dtype != DType::kFloat32) {
    throw Error(ErrorKind::kType, std::string(op) + ": " + name + " must be float32 (got " + dtype_name(v.dtype) + ")");
  }
}

const detail::QdqNames kQNames{"ExtendedQuantizeLinear", "y_scale", "y_zero_point"};
const detail::QdqNames kDqNames{"ExtendedDequantizeLinear", "x_scale", "x_zero_point"};

}  // namespace

namespace {

// ExtendedQuantizeLinear resolved once: validation, the layout and the kernel's parameters for the
// chosen semantics (Quark's CPU kernel, or the ONNX rules it extends).
detail::QdqPlan<detail::QuantizeLinearParams> plan_extended_quantize_linear(const TensorView& x, const TensorView& y_scale,
                                                                            const TensorView* y_zero_point,
                                                                            const ExtendedAttrs& attrs) {
  const detail::NamedView operands[] = {{&x, "x"}, {&y_scale, "y_scale"}, {y_zero_point != nullptr ? y_zero_point : &x, "y_zero_point"}};
  detail::op_device(operands, nullptr, kQNames.op);
  require_float32(x, kQNames.op, "x");
  require_float32(y_scale, kQNames.op, "y_scale");
  const DType out = y_zero_point ? y_zero_point->dtype : DType::kUInt8;
  if (!supported(out)) {
    throw Error(ErrorKind::kType, std::string(kQNames.op) + ": y_zero_point has dtype " + dtype_name(out) +
                                      "; allowed: " + kTypeList);
  }
  detail::QdqPlan<detail::QuantizeLinearParams> plan;
  plan.op = kQNames.op;
  plan.scale_name = kQNames.scale;
  plan.zero_point_name = kQNames.zero_point;
  plan.spec = {out, x.shape};
  plan.layout = detail::check_param_layout(x, y_scale, y_zero_point, attrs.axis, 0, kQNames, false);
  const bool quark = attrs.semantics == Semantics::kQuarkCpu;
  detail::QuantizeLinearParams& p = plan.params;
  p.out_dtype = out;
  p.has_zero_point = y_zero_point != nullptr;
  p.add_zero_point = true;
  switch (out) {
    case DType::kFloat16:
      p.target = quark ? QuantTarget::kFloat16Clamp : QuantTarget::kFloat16;
      if (quark) p.has_zero_point = false;
      break;
    case DType::kBFloat16:
      p.target = QuantTarget::kBFloat16;
      p.bf16_nan = quark ? 0x7FC1 : 0;
      break;
    default:
      p.target = QuantTarget::kInteger;
      p.non_finite = quark ? detail::NonFinitePolicy::kInt64Cast : detail::NonFinitePolicy::kSaturate;
      integer_range(out, p.qmin, p.qmax);
      p.zero_point_f64 = out == DType::kInt32 || out == DType::kUInt32;
      break;
  }
  plan.with_zero_point = p.has_zero_point;
  plan.kernel_dtypes = {DType::kFloat32, DType::kFloat32, p.zero_point_f64 ? DType::kFloat64 : DType::kFloat32};
  plan.kernel_out_dtype = out;
  plan.use_kernel(detail::KernelOp::kQuantizeLinear, detail::WorkType::kF32);
  return plan;
}

// ExtendedDequantizeLinear resolved once.
detail::QdqPlan<detail::DequantizeLinearParams> plan_extended_dequantize_linear(const TensorView& x, const TensorView& x_scale,
                                                                                const TensorView* x_zero_point,
                                                                                const ExtendedAttrs& attrs) {
  const detail::NamedView operands[] = {{&x, "x"}, {&x_scale, "x_scale"}, {x_zero_point != nullptr ? x_zero_point : &x, "x_zero_point"}};
  detail::op_device(operands, nullptr, kDqNames.op);
  if (!supported(x.dtype)) {
    throw Error(ErrorKind::kType, std::string(kDqNames.op) + ": x has dtype " + dtype_name(x.dtype) + "; allowed: " + kTypeList);
  }
  require_float32(x_scale, kDqNames.op, "x_scale");
  if (x_zero_point != nullptr && x_zero_point->dtype != x.dtype) {
    throw Error(ErrorKind::kType, std::string(kDqNames.op) + ": x_zero_point has dtype " + dtype_name(x_zero_point->dtype) +
                                      "; it must have x's dtype " + dtype_name(x.dtype));
  }
  detail::QdqPlan<detail::DequantizeLinearParams> plan;
  plan.op = kDqNames.op;
  plan.scale_name = kDqNames.scale;
  plan.zero_point_name = kDqNames.zero_point;
  plan.spec = {DType::kFloat32, x.shape};
  plan.layout = detail::check_param_layout(x, x_scale, x_zero_point, attrs.axis, 0, kDqNames, false);
  const bool quark = attrs.semantics == Semantics::kQuarkCpu;
  const bool floating = x.dtype == DType::kFloat16 || x.dtype == DType::kBFloat16;
  detail::DequantizeLinearParams& p = plan.params;
  p.x_dtype = floating ? DType::kFloat32 : x.dtype;
  p.has_zero_point = x_zero_point != nullptr;
  if (floating) {
    p.difference = detail::DequantDifference::kFloat32;
    p.ignore_scale = quark && x.dtype == DType::kFloat16;
    p.canonical_nan = quark && x.dtype == DType::kBFloat16;
    if (p.ignore_scale) p.has_zero_point = false;
  } else {
    // 8/16-bit differences are exact in float32 and give the same bits either way.
    const bool wide = x.dtype == DType::kInt32 || x.dtype == DType::kUInt32;
    p.difference = wide ? detail::DequantDifference::kRounded : detail::DequantDifference::kFloat32;
  }
  plan.with_zero_point = p.has_zero_point;
  plan.kernel_dtypes = {p.x_dtype, DType::kFloat32, p.x_dtype};
  plan.kernel_out_dtype = DType::kFloat32;
  plan.use_kernel(detail::KernelOp::kDequantizeLinear, detail::WorkType::kF32);
  return plan;
}

}  // namespace

TensorSpec extended_quantize_linear_spec(const TensorView& x, const TensorView& y_scale,
                                         const TensorView* y_zero_point, const ExtendedAttrs& attrs) {
  return plan_extended_quantize_linear(x, y_scale, y_zero_point, attrs).spec;
}

void extended_quantize_linear(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                              const ExtendedAttrs& attrs, const MutableTensorView& out) {
  detail::run_plan(plan_extended_quantize_linear(x, y_scale, y_zero_point, attrs), x, y_scale, y_zero_point, out);
}

TensorSpec extended_dequantize_linear_spec(const TensorView& x, const TensorView& x_scale,
                                           const TensorView* x_zero_point, const ExtendedAttrs& attrs) {
  return plan_extended_dequantize_linear(x, x_scale, x_zero_point, attrs).spec;
}

void extended_dequantize_linear(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                                const ExtendedAttrs& attrs, const MutableTensorView& out) {
  detail::run_plan(plan_extended_dequantize_linear(x, x_scale, x_zero_point, attrs), x, x_scale, x_zero_point, out);
}

PlannedCall extended_quantize_linear_plan(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                                          const ExtendedAttrs& attrs) {
  return detail::planned_call(plan_extended_quantize_linear(x, y_scale, y_zero_point, attrs), x, y_scale, y_zero_point);
}

PlannedCall extended_dequantize_linear_plan(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                                            const ExtendedAttrs& attrs) {
  return detail::planned_call(plan_extended_dequantize_linear(x, x_scale, x_zero_point, attrs), x, x_scale, x_zero_point);
}

}  // namespace polyquant::quark
