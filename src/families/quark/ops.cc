// Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear: validation and kernel parameters over
// the shared Q/DQ kernels (families/onnx/kernels.h).
#include <array>
#include <limits>
#include <string>

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

TensorSpec extended_quantize_linear_spec(const TensorView& x, const TensorView& y_scale,
                                         const TensorView* y_zero_point, const ExtendedAttrs& attrs) {
  require_float32(x, kQNames.op, "x");
  require_float32(y_scale, kQNames.op, "y_scale");
  const DType out = y_zero_point ? y_zero_point->dtype : DType::kUInt8;
  if (!supported(out)) {
    throw Error(ErrorKind::kType, std::string(kQNames.op) + ": y_zero_point has dtype " + dtype_name(out) +
                                      "; allowed: " + kTypeList);
  }
  detail::check_param_layout(x, y_scale, y_zero_point, attrs.axis, 0, kQNames, false);
  return {out, x.shape};
}

void extended_quantize_linear(const TensorView& x, const TensorView& y_scale, const TensorView* y_zero_point,
                              const ExtendedAttrs& attrs, const MutableTensorView& out) {
  const TensorSpec spec = extended_quantize_linear_spec(x, y_scale, y_zero_point, attrs);
  detail::require_exact_output(out, spec, kQNames.op);
  const detail::ParamLayout layout = detail::check_param_layout(x, y_scale, y_zero_point, attrs.axis, 0, kQNames, false);
  const bool quark = attrs.semantics == Semantics::kQuarkCpu;
  detail::QuantizeLinearParams p;
  p.out_dtype = spec.dtype;
  p.has_zero_point = y_zero_point != nullptr;
  p.add_zero_point = true;
  switch (spec.dtype) {
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
      integer_range(spec.dtype, p.qmin, p.qmax);
      p.zero_point_f64 = spec.dtype == DType::kInt32 || spec.dtype == DType::kUInt32;
      break;
  }
  const std::array<DType, 3> kernel_dtypes{DType::kFloat32, DType::kFloat32,
                                           p.zero_point_f64 ? DType::kFloat64 : DType::kFloat32};
  detail::ElementwiseCall call;
  call.kernel_dtypes = kernel_dtypes;
  call.out = out;
  call.kernel_out_dtype = spec.dtype;
  call.kernel = detail::best_kernel(detail::KernelOp::kQuantizeLinear, detail::WorkType::kF32);
  call.params = &p;
  detail::run_with_layout(call, x, y_scale, p.has_zero_point ? y_zero_point : nullptr, layout);
}

TensorSpec extended_dequantize_linear_spec(const TensorView& x, const TensorView& x_scale,
                                           const TensorView* x_zero_point, const ExtendedAttrs& attrs) {
  if (!supported(x.dtype)) {
    throw Error(ErrorKind::kType, std::string(kDqNames.op) + ": x has dtype " + dtype_name(x.dtype) + "; allowed: " + kTypeList);
  }
  require_float32(x_scale, kDqNames.op, "x_scale");
  if (x_zero_point != nullptr && x_zero_point->dtype != x.dtype) {
    throw Error(ErrorKind::kType, std::string(kDqNames.op) + ": x_zero_point has dtype " + dtype_name(x_zero_point->dtype) +
                                      "; it must have x's dtype " + dtype_name(x.dtype));
  }
  detail::check_param_layout(x, x_scale, x_zero_point, attrs.axis, 0, kDqNames, false);
  return {DType::kFloat32, x.shape};
}

void extended_dequantize_linear(const TensorView& x, const TensorView& x_scale, const TensorView* x_zero_point,
                                const ExtendedAttrs& attrs, const MutableTensorView& out) {
  const TensorSpec spec = extended_dequantize_linear_spec(x, x_scale, x_zero_point, attrs);
  detail::require_exact_output(out, spec, kDqNames.op);
  const detail::ParamLayout layout = detail::check_param_layout(x, x_scale, x_zero_point, attrs.axis, 0, kDqNames, false);
  const bool quark = attrs.semantics == Semantics::kQuarkCpu;
  const bool floating = x.dtype == DType::kFloat16 || x.dtype == DType::kBFloat16;
  detail::DequantizeLinearParams p;
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
  const std::array<DType, 3> kernel_dtypes{p.x_dtype, DType::kFloat32, p.x_dtype};
  detail::ElementwiseCall call;
  call.kernel_dtypes = kernel_dtypes;
  call.out = out;
  call.kernel_out_dtype = DType::kFloat32;
  call.kernel = detail::best_kernel(detail::KernelOp::kDequantizeLinear, detail::WorkType::kF32);
  call.params = &p;
  detail::run_with_layout(call, x, x_scale, p.has_zero_point ? x_zero_point : nullptr, layout);
}

}  // namespace polyquant::quark
