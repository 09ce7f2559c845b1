// Kernel-side description of the QONNX ops: operand order, parameter structs, and the per-element
// scalar formulas that define them (the spec every optimized kernel must equal bit for bit).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/scalar_math.h"
#include "core/target.h"
#include "kernels/row.h"

namespace polyquant::detail {

enum class KernelOp : std::uint8_t { kIntQuant, kBipolarQuant, kTruncV1, kTruncV2, kFloatQuant };
inline constexpr int kNumKernelOps = 5;

// Working precision of a kernel; operands arrive converted to it.
enum class WorkType : std::uint8_t { kF16, kF32, kF64 };
inline constexpr int kNumWorkTypes = 3;

enum class Isa : std::uint8_t { kScalar, kAvx2, kAvx512 };
inline constexpr int kNumIsas = 3;
const char* isa_name(Isa isa);

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class T>
constexpr WorkType work_type_v = std::is_same_v<T, Half> ? WorkType::kF16
                                 : std::is_same_v<T, float> ? WorkType::kF32
                                                            : WorkType::kF64;

// a op b evaluated in precision w (operands are exact in w: they come from narrower dtypes).
inline double divide_in(WorkType w, double a, double b) {
  switch (w) {
    case WorkType::kF16: return to_double(Half(static_cast<float>(a)) / Half(static_cast<float>(b)));
    case WorkType::kF32: return static_cast<double>(static_cast<float>(a) / static_cast<float>(b));
    default: return a / b;
  }
}
inline double add_in(WorkType w, double a, double b) {
  switch (w) {
    case WorkType::kF16: return to_double(Half(static_cast<float>(a)) + Half(static_cast<float>(b)));
    case WorkType::kF32: return static_cast<double>(static_cast<float>(a) + static_cast<float>(b));
    default: return a + b;
  }
}

// x / s + z as numpy evaluates it: the division in promote(x, s), the addition in
// promote(x, s, z), each possibly narrower than the op's working type T.
template <class T>
inline T scaled_offset(T x, T s, T z, WorkType divide_as, WorkType add_as) {
  if (divide_as == work_type_v<T> && add_as == work_type_v<T>) return x / s + z;
  const double q = divide_in(divide_as, to_double(x), to_double(s));
  return from_double<T>(add_in(add_as, q, to_double(z)));
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- IntQuant: operands x, scale, zeropt (working type); output float32 ---------------------
struct IntQuantParams {
  RoundingMode mode = RoundingMode::kHalfEven;
  bool bipolar = false;  // bitwidth == 1 and signed
  double lo = 0, hi = 0; // clamp bounds, already rounded to the working type
  WorkType divide_as = WorkType::kF32;  // precision of x / scale
  WorkType add_as = WorkType::kF32;     // precision of (x / scale) + zeropt
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline float int_quant_element(T x, T s, T z, bool bipolar, T lo, T hi, WorkType divide_as, WorkType add_as) {
  T y = scaled_offset(x, s, z, divide_as, add_as);
  if (bipolar) {
    y = (y >= T(0.0f)) ? T(1.0f) : T(-1.0f);
  } else {
    y = (y > hi) ? hi : y;  // comparisons are false for NaN: NaN passes the clamp
    y = (y < lo) ? lo : y;
    y = round_t<kMode>(y);
  }
  return static_cast<float>(to_double((y - z) * s));
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- BipolarQuant: operands x, scale; output in the working type ----------------------------
struct BipolarQuantParams {};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class T>
inline T bipolar_quant_element(T x, T s) {
  return ((x >= T(0.0f)) ? T(1.0f) : T(-1.0f)) * s;
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- Trunc v1: operands x, scale, zeropt, trunc_scale (= 2^(in_bw - out_bw)) -------------------
struct TruncParams {
  RoundingMode mode = RoundingMode::kFloor;
  WorkType divide_as = WorkType::kF32;  // precision of x / scale
  WorkType add_as = WorkType::kF32;     // precision of (x / scale) + zeropt and its rint
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline T trunc_v1_element(T x, T s, T z, T t, WorkType divide_as, WorkType add_as) {
  T y = rint_t(scaled_offset(x, s, z, divide_as, add_as));
  y = round_t<kMode>(y / t);
  return (y - z) * s;
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- Trunc v2: operands x, scale, zeropt, trunc_scale, out_scale, lo, hi, zeropt / trunc_scale ---
// (zeropt / trunc_scale is precomputed in its own numpy dtype, promote(zeropt, trunc_scale).)
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline T trunc_v2_element(T x, T s, T z, T t, T out_scale, T lo, T hi, T zt, WorkType divide_as, WorkType add_as) {
  T y = rint_t(scaled_offset(x, s, z, divide_as, add_as));
  y = y / t;
  y = (y > hi) ? hi : y;
  y = (y < lo) ? lo : y;
  y = round_t<kMode>(y);
  return (y - zt) * out_scale;
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- FloatQuant: operands x, scale, min_exp (= 1 - bias - m), max (M); output float32 ----------
// M arrives as float64 (the reference clips against a float64 bound). Optimized float32 kernels
// compare in float32, which is exact only when every M is a float32 value (max_fits_float32).
struct FloatQuantParams {
  RoundingMode mode = RoundingMode::kHalfEven;
  double mantissa_bits = 0;  // m, exact in the working type
  bool saturation = true;
  bool has_inf = false;
  bool has_nan = false;
  bool max_fits_float32 = true;
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline float float_quant_element(T x, T s, T min_exp, double max_value, const FloatQuantParams& p) {
  const T xs = x / s;
  T e = floor_t(log2_t(abs_t(xs) + tiny<T>())) - from_double<T>(p.mantissa_bits);
  if (!isnan_t(e) && !(e > min_exp)) e = min_exp;  // np.maximum, NaN propagating
  const T internal_scale = exp2_t(e);
  const T q = internal_scale * round_t<kMode>(xs / internal_scale);
  const double qd = to_double(q);
  double clipped = qd;
  if (qd > max_value) clipped = max_value;  // np.clip(q, -M, M): NaN stays NaN
  if (qd < -max_value) clipped = -max_value;
  if (!p.saturation) {
    if (p.has_inf) {
      if (qd > max_value) clipped = INFINITY;
      if (qd < -max_value) clipped = -INFINITY;
    } else if (p.has_nan) {
      if (qd > max_value || qd < -max_value || isinf_t(q)) clipped = NAN;
    }
  }
  return static_cast<float>(clipped * to_double(s));
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

}  // namespace polyquant::detail
