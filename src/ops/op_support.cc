// Validation and parameter helpers shared by the framework layers.
#include "ops/op_support.h"

#include <cmath>

namespace polyquant::detail {

void require_floating(const TensorView& v, const char* name) {
  if (!is_floating(v.dtype)) {
    throw Error(ErrorKind::kType, std::string(name) + ": unsupported dtype " + dtype_name(v.dtype) +
                                      "; allowed: float16, float32, float64");
  }
}

double single_value(const TensorView& v, const char* name, const char* why) {
  if (v.numel() != 1) {
    throw Error(ErrorKind::kValue, std::string(name) + ": must have exactly one element (" + why + "), got shape " +
                                       v.shape.str());
  }
  return read_as_double(v, 0);
}

void require_finite(const TensorView& v, const char* name) {
  const std::int64_t n = v.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = read_as_double(v, i);
    if (!std::isfinite(x)) {
      throw Error(ErrorKind::kValue, std::string(name) + ": must be finite, got " + std::to_string(x));
    }
  }
}

void require_output(const MutableTensorView& out, const TensorSpec& spec, const char* op) {
  // out may have the spec's dtype or any other floating dtype; the result is then rounded once into
  // it, as numpy's astype does (the ONNX nodes of IntQuant and FloatQuant round to float32).
  if (!(out.shape == spec.shape) || !is_floating(out.dtype)) {
    throw Error(ErrorKind::kValue, std::string(op) + ": out must have shape " + spec.shape.str() + " and dtype " +
                                       dtype_name(spec.dtype) + " (or another float dtype to round into), got shape " +
                                       out.shape.str() + " and dtype " + dtype_name(out.dtype));
  }
  if (out.numel() > 0 && out.data == nullptr) throw Error(ErrorKind::kValue, std::string(op) + ": out has no data");
}

WorkType work_type_of(DType t) {
  switch (t) {
    case DType::kFloat16: return WorkType::kF16;
    case DType::kFloat32: return WorkType::kF32;
    case DType::kFloat64: return WorkType::kF64;
    default: throw Error(ErrorKind::kType, std::string("internal: no work type for ") + dtype_name(t));
  }
}

DType float_dtype_for(DType t) { return is_floating(t) ? t : DType::kFloat64; }

double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat16: return to_double(half_from_double(v));
    case DType::kFloat32: return static_cast<double>(static_cast<float>(v));
    default: return v;
  }
}

namespace {
// 2 ** e (numpy power with a weak Python int base) in T.
template <class T>
T pow2(T e) {
  if constexpr (std::is_same_v<T, Half>) return Half(std::pow(2.0f, float(e)));
  else return std::pow(T(2), e);
}

template <class T>
double range_bound(double bits_value, bool is_signed, bool narrow, bool want_max) {
  const T b = from_double<T>(bits_value);
  const T one(1.0f), two(2.0f);
  T r;
  if (want_max) {
    if (!is_signed && !narrow) r = pow2(b) - one;
    else if (!is_signed && narrow) r = pow2(b) - two;
    else r = pow2(b - one) - one;
  } else {
    if (is_signed && narrow) r = -pow2(b - one) + one;
    else if (is_signed) r = -pow2(b - one);
    else r = T(0.0f) * b;  // 0 (NaN for a NaN width, as numpy would)
  }
  return to_double(r);
}
}  // namespace

double int_range_min(double bits, DType bits_dtype, bool is_signed, bool narrow) {
  return with_float_type(float_dtype_for(bits_dtype),
                         [&]<class T>() { return range_bound<T>(bits, is_signed, narrow, false); });
}

double int_range_max(double bits, DType bits_dtype, bool is_signed, bool narrow) {
  return with_float_type(float_dtype_for(bits_dtype),
                         [&]<class T>() { return range_bound<T>(bits, is_signed, narrow, true); });
}

}  // namespace polyquant::detail
