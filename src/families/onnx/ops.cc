// ONNX QuantizeLinear / DequantizeLinear (opset 28): validation, the dtype rules of onnx's reference
// evaluator, and kernel parameters. The numerics are the shared Q/DQ kernels (families/onnx/kernels.h).
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "core/device_elementwise.h"
#include "kernels/registry.h"
#include "families/onnx/qdq_support.h"
#include "polyquant/error.h"
#include "polyquant/onnx_qdq.h"

namespace polyquant::onnx {
namespace {

using detail::DequantDifference;
using detail::QuantTarget;
using detail::QuotientRounding;

[[noreturn]] void type_error(const std::string& m) { throw Error(ErrorKind::kType, m); }

bool one_of(DType t, std::initializer_list<DType> list) {
  for (DType u : list) {
    if (t == u) return true;
  }
  return false;
}

std::string list_names(std::initializer_list<DType> list) {
  std::string s;
  for (DType u : list) s += (s.empty() ? "" : ", ") + std::string(dtype_name(u));
  return s;
}

constexpr std::initializer_list<DType> kQuantizedTypes = {
    DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16, DType::kUInt4, DType::kInt4, DType::kUInt2,
    DType::kInt2, DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
    DType::kFloat4E2M1, DType::kFloat6E2M3, DType::kFloat6E3M2};
constexpr std::initializer_list<DType> kDequantizeInputs = {
    DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16, DType::kInt32, DType::kUInt4, DType::kInt4,
    DType::kUInt2, DType::kInt2, DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2,
    DType::kFloat8E5M2FNUZ, DType::kFloat4E2M1, DType::kFloat6E2M3, DType::kFloat6E3M2};
constexpr std::initializer_list<DType> kQuantizeInputs = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                                          DType::kInt32};
constexpr std::initializer_list<DType> kQuantizeScales = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                                          DType::kInt32, DType::kFloat8E8M0};
constexpr std::initializer_list<DType> kDequantizeScales = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                                            DType::kFloat8E8M0};
constexpr std::initializer_list<DType> kFloatOutputs = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

bool is_float8(DType t) {
  return one_of(t, {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ});
}

void integer_range(DType t, std::int64_t& lo, std::int64_t& hi) {
  switch (t) {
    case DType::kUInt8: lo = 0; hi = 255; return;
    case DType::kInt8: lo = -128; hi = 127; return;
    case DType::kUInt16: lo = 0; hi = 65535; return;
    case DType::kInt16: lo = -32768; hi = 32767; return;
    case DType::kUInt4: lo = 0; hi = 15; return;
    case DType::kInt4: lo = -8; hi = 7; return;
    case DType::kUInt2: lo = 0; hi = 3; return;
    case DType::kInt2: lo = -2; hi = 1; return;
    default: lo = 0; hi = 0; return;
  }
}

// The dtype numpy / ml_dtypes divide x by the scale in (onnx's evaluator: `x / y_scale`).
DType division_dtype(DType x, DType s) {
  if (x == DType::kInt32 || s == DType::kInt32) return DType::kFloat64;  // true division of integers
  if (x == s) return x == DType::kFloat8E8M0 ? DType::kFloat32 : x;
  if (x == DType::kFloat32 || s == DType::kFloat32) return DType::kFloat32;
  return DType::kFloat32;  // float16 or bfloat16 with e8m0, float16 with bfloat16: ml_dtypes gives float32
}

const detail::QdqNames kQNames{"QuantizeLinear", "y_scale", "y_zero_point"};
const detail::QdqNames kDqNames{"DequantizeLinear", "x_scale", "x_zero_point"};

DType quantize_output_dtype(const TensorView* zp, const QuantizeLinearAttrs& attrs) {
  DType t = DType::kUInt8;
  if (zp != nullptr) {
    if (attrs.output_dtype && *attrs.output_dtype != zp->dtype) {
      throw Error(ErrorKind::kValue, std::string("QuantizeLinear: output_dtype ") + dtype_name(*attrs.output_dtype) +
                                         " does not match y_zero_point's dtype " + dtype_name(zp->dtype));
    }
    t = zp->dtype;
  } else if (attrs.output_dtype) {
    t = *attrs.output_dtype;
  }
  if (!one_of(t, kQuantizedTypes)) {
    type_error(std::string("QuantizeLinear: ") + (zp ? "y_zero_point" : "output_dtype") + " has dtype " +
               dtype_name(t) + "; allowed: " + list_names(kQuantizedTypes));
  }
  return t;
}

}  // namespace

std::optional<DType> dtype_from_onnx(int t) {
  switch (t) {
    case 1: return DType::kFloat32;
    case 2: return DType::kUInt8;
    case 3: return DType::kInt8;
    case 4: return DType::kUInt16;
    case 5: return DType::kInt16;
    case 6: return DType::kInt32;
    case 7: return DType::kInt64;
    case 9: return DType::kBool;
    case 10: return DType::kFloat16;
    case 11: return DType::kFloat64;
    case 12: return DType::kUInt32;
    case 13: return DType::kUInt64;
    case 16: return DType::kBFloat16;
    case 17: return DType::kFloat8E4M3FN;
    case 18: return DType::kFloat8E4M3FNUZ;
    case 19: return DType::kFloat8E5M2;
    case 20: return DType::kFloat8E5M2FNUZ;
    case 21: return DType::kUInt4;
    case 22: return DType::kInt4;
    case 23: return DType::kFloat4E2M1;
    case 24: return DType::kFloat8E8M0;
    case 25: return DType::kUInt2;
    case 26: return DType::kInt2;
    case 27: return DType::kFloat6E2M3;
    case 28: return DType::kFloat6E3M2;
    default: return std::nullopt;
  }
}

int onnx_type_of(DType d) {
  for (int t = 1; t <= 28; ++t) {
    const std::optional<DType> u = dtype_from_onnx(t);
    if (u && *u == d) return t;
  }
  return 0;
}

namespace {

// QuantizeLinear resolved once: validation, the output dtype, the layout, the division's precision
// and the kernel's parameters.
detail::QdqPlan<detail::QuantizeLinearParams> plan_quantize_linear(const TensorView& x, const TensorView& y_scale,
                                                                   const TensorView* y_zero_point,
                                                                   const QuantizeLinearAttrs& attrs) {
  const detail::NamedView operands[] = {{&x, "x"}, {&y_scale, "y_scale"}, {y_zero_point != nullptr ? y_zero_point : &x, "y_zero_point"}};
  detail::op_device(operands, nullptr, "QuantizeLinear");
  if (!one_of(x.dtype, kQuantizeInputs)) {
    type_error(std::string("QuantizeLinear: x has dtype ") + dtype_name(x.dtype) + "; allowed: " +
               list_names(kQuantizeInputs));
  }
  if (!one_of(y_scale.dtype, kQuantizeScales)) {
    type_error(std::string("QuantizeLinear: y_scale has dtype ") + dtype_name(y_scale.dtype) + "; allowed: " +
               list_names(kQuantizeScales));
  }
  if (attrs.precision && !one_of(*attrs.precision, kFloatOutputs)) {
    type_error(std::string("QuantizeLinear: precision ") + dtype_name(*attrs.precision) + " is not allowed; allowed: " +
               list_names(kFloatOutputs));
  }
  detail::QdqPlan<detail::QuantizeLinearParams> plan;
  plan.op = kQNames.op;
  plan.scale_name = kQNames.scale;
  plan.zero_point_name = kQNames.zero_point;
  plan.spec = {quantize_output_dtype(y_zero_point, attrs), x.shape};
  plan.layout = detail::check_param_layout(x, y_scale, y_zero_point, attrs.axis, attrs.block_size, kQNames, true);

  detail::QuantizeLinearParams& p = plan.params;
  p.out_dtype = plan.spec.dtype;
  const DType divide = attrs.precision ? *attrs.precision : division_dtype(x.dtype, y_scale.dtype);
  const bool wide = divide == DType::kFloat64;
  p.quotient = divide == DType::kFloat16 ? QuotientRounding::kFloat16
               : divide == DType::kBFloat16 ? QuotientRounding::kBFloat16
                                            : QuotientRounding::kNone;
  p.round_operands = attrs.precision.has_value() && p.quotient != QuotientRounding::kNone;
  p.non_finite = detail::NonFinitePolicy::kSaturate;
  const bool integer = !is_minifloat(plan.spec.dtype);
  if (integer) {
    p.target = QuantTarget::kInteger;
    integer_range(plan.spec.dtype, p.qmin, p.qmax);
  } else {
    p.target = QuantTarget::kMinifloat;
    p.format = detail::minifloat_format(plan.spec.dtype);
    p.saturate = is_float8(plan.spec.dtype) ? attrs.saturate : false;
    p.add_zero_point = !is_float8(plan.spec.dtype);  // the evaluator ignores float8 zero points
  }
  p.has_zero_point = y_zero_point != nullptr && (integer || p.add_zero_point);
  plan.with_zero_point = p.has_zero_point;
  const DType work = wide ? DType::kFloat64 : DType::kFloat32;
  plan.kernel_dtypes = {work, work, work};
  plan.kernel_out_dtype = plan.spec.dtype;
  plan.use_kernel(detail::KernelOp::kQuantizeLinear, wide ? detail::WorkType::kF64 : detail::WorkType::kF32);
  return plan;
}

// DequantizeLinear resolved once: validation (float8 zero points must be zero), the layout, the
// precision of x - zero_point and the kernel's parameters.
detail::QdqPlan<detail::DequantizeLinearParams> plan_dequantize_linear(const TensorView& x, const TensorView& x_scale,
                                                                       const TensorView* x_zero_point,
                                                                       const DequantizeLinearAttrs& attrs) {
  const detail::NamedView operands[] = {{&x, "x"}, {&x_scale, "x_scale"}, {x_zero_point != nullptr ? x_zero_point : &x, "x_zero_point"}};
  detail::op_device(operands, nullptr, "DequantizeLinear");
  if (!one_of(x.dtype, kDequantizeInputs)) {
    type_error(std::string("DequantizeLinear: x has dtype ") + dtype_name(x.dtype) + "; allowed: " +
               list_names(kDequantizeInputs));
  }
  if (!one_of(x_scale.dtype, kDequantizeScales)) {
    type_error(std::string("DequantizeLinear: x_scale has dtype ") + dtype_name(x_scale.dtype) + "; allowed: " +
               list_names(kDequantizeScales));
  }
  if (attrs.output_dtype && !one_of(*attrs.output_dtype, kFloatOutputs)) {
    type_error(std::string("DequantizeLinear: output_dtype ") + dtype_name(*attrs.output_dtype) + " is not allowed; allowed: " +
               list_names(kFloatOutputs));
  }
  if (x_zero_point != nullptr && x_zero_point->dtype != x.dtype) {
    type_error(std::string("DequantizeLinear: x_zero_point has dtype ") + dtype_name(x_zero_point->dtype) +
               "; it must have x's dtype " + dtype_name(x.dtype));
  }
  detail::QdqPlan<detail::DequantizeLinearParams> plan;
  plan.op = kDqNames.op;
  plan.scale_name = kDqNames.scale;
  plan.zero_point_name = kDqNames.zero_point;
  plan.spec = {attrs.output_dtype ? *attrs.output_dtype : x_scale.dtype, x.shape};
  plan.layout = detail::check_param_layout(x, x_scale, x_zero_point, attrs.axis, attrs.block_size, kDqNames, true);
  if (x_zero_point != nullptr && is_float8(x.dtype)) {
    // The evaluator requires float8 zero points to be zero after a cast to uint8 (|v| < 1).
    std::vector<unsigned char> storage;
    const TensorView zero_point = detail::host_readable(*x_zero_point, storage);  // a device one is copied
    for (std::int64_t i = 0; i < zero_point.numel(); ++i) {
      if (std::fabs(detail::read_as_double(zero_point, i)) >= 1.0) {
        throw Error(ErrorKind::kValue, "DequantizeLinear: x_zero_point must be zero for float8 types");
      }
    }
  }
  // x read in its own storage by the kernel (integers, one-per-byte sub-byte integers and minifloats);
  // float16 / bfloat16 are widened to float32 by the engine.
  const bool direct_x = one_of(x.dtype, {DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16, DType::kInt32, DType::kInt4,
                                         DType::kUInt4, DType::kInt2, DType::kUInt2}) ||
                        is_minifloat(x.dtype);
  detail::DequantizeLinearParams& p = plan.params;
  p.x_dtype = direct_x ? x.dtype : DType::kFloat32;
  p.has_zero_point = x_zero_point != nullptr && !is_float8(x.dtype) && x.dtype != DType::kFloat4E2M1;
  plan.with_zero_point = p.has_zero_point;
  const bool wide = x.dtype == DType::kInt32 && p.has_zero_point;
  p.difference = wide ? DequantDifference::kFloat64 : DequantDifference::kFloat32;
  plan.kernel_dtypes = {p.x_dtype, DType::kFloat32, p.x_dtype};
  plan.kernel_out_dtype = wide ? DType::kFloat64 : DType::kFloat32;
  plan.use_kernel(detail::KernelOp::kDequantizeLinear, wide ? detail::WorkType::kF64 : detail::WorkType::kF32);
  return plan;
}

}  // namespace

TensorSpec quantize_linear_spec(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                                const QuantizeLinearAttrs& attrs) {
  return plan_quantize_linear(x, y_scale, y_zero_point, attrs).spec;
}

void quantize_linear(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                     const QuantizeLinearAttrs& attrs, const MutableTensorView& out) {
  detail::run_plan(plan_quantize_linear(x, y_scale, y_zero_point, attrs), x, y_scale, y_zero_point, out);
}

TensorSpec dequantize_linear_spec(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                                  const DequantizeLinearAttrs& attrs) {
  return plan_dequantize_linear(x, x_scale, x_zero_point, attrs).spec;
}

void dequantize_linear(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                       const DequantizeLinearAttrs& attrs, const MutableTensorView& out) {
  detail::run_plan(plan_dequantize_linear(x, x_scale, x_zero_point, attrs), x, x_scale, x_zero_point, out);
}

PlannedCall quantize_linear_plan(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                                 const QuantizeLinearAttrs& attrs) {
  return detail::planned_call(plan_quantize_linear(x, y_scale, y_zero_point, attrs), x, y_scale, y_zero_point);
}

PlannedCall dequantize_linear_plan(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                                   const DequantizeLinearAttrs& attrs) {
  return detail::planned_call(plan_dequantize_linear(x, x_scale, x_zero_point, attrs), x, x_scale, x_zero_point);
}

}  // namespace polyquant::onnx
