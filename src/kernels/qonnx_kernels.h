// Kernel-side description of the QONNX ops: operand order, parameter structs, and the per-element
// scalar formulas that define them (the spec every optimized kernel must equal bit for bit).
#pragma once

#include <cstdint>

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

// ---- IntQuant: operands x, scale, zeropt (working type); output float32 ---------------------
struct IntQuantParams {
  RoundingMode mode = RoundingMode::kHalfEven;
  bool bipolar = false;  // bitwidth == 1 and signed
  double lo = 0, hi = 0; // clamp bounds, already rounded to the working type
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline float int_quant_element(T x, T s, T z, bool bipolar, T lo, T hi) {
  T y = x / s + z;
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
};

inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline T trunc_v1_element(T x, T s, T z, T t) {
  T y = rint_t(x / s + z);
  y = round_t<kMode>(y / t);
  return (y - z) * s;
}
}  // namespace POLYQUANT_TARGET_NAMESPACE

// ---- Trunc v2: operands x, scale, zeropt, trunc_scale, out_scale, lo, hi -----------------------
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <RoundingMode kMode, class T>
inline T trunc_v2_element(T x, T s, T z, T t, T out_scale, T lo, T hi) {
  T y = rint_t(x / s + z);
  y = y / t;
  y = (y > hi) ? hi : y;
  y = (y < lo) ? lo : y;
  y = round_t<kMode>(y);
  return (y - z / t) * out_scale;
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
