// Scalar arithmetic in a working precision T (Half, float or double) with numpy's semantics, and
// the literal formula of every RoundingMode. This file is the numerical spec that the SIMD kernels
// must reproduce bit for bit.
#pragma once

#include "core/target.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/half.h"
#include "core/x86_nan.h"
#include "polyquant/rounding.h"

namespace polyquant::detail {

// Per-kernel-set copies (see core/target.h): no inline function compiled with one set's flags
// may be shared with code compiled for another.
inline namespace POLYQUANT_TARGET_NAMESPACE {

// ---- elementary functions in T --------------------------------------------------------------
// numpy evaluates float16 ufuncs in float32 and rounds the result back to half.
POLYQUANT_HD inline float floor_t(float x) { return POLYQUANT_X86_UNARY(std::floor, x); }
POLYQUANT_HD inline double floor_t(double x) { return POLYQUANT_X86_UNARY(std::floor, x); }
POLYQUANT_HD inline Half floor_t(Half x) { return Half(floor_t(float(x))); }
POLYQUANT_HD inline float ceil_t(float x) { return POLYQUANT_X86_UNARY(std::ceil, x); }
POLYQUANT_HD inline double ceil_t(double x) { return POLYQUANT_X86_UNARY(std::ceil, x); }
POLYQUANT_HD inline Half ceil_t(Half x) { return Half(ceil_t(float(x))); }
POLYQUANT_HD inline float trunc_t(float x) { return POLYQUANT_X86_UNARY(std::trunc, x); }
POLYQUANT_HD inline double trunc_t(double x) { return POLYQUANT_X86_UNARY(std::trunc, x); }
POLYQUANT_HD inline Half trunc_t(Half x) { return Half(trunc_t(float(x))); }

// Ties-to-even rounding to an integer without consulting the floating-point environment:
// adding and subtracting 2^(p-1) performs the rounding in the default mode of the hardware, which
// is what IEEE arithmetic always uses here (nothing in polyquant changes it). Values at or above
// 2^(p-1) are already integers.
POLYQUANT_HD inline float rint_t(float x) {
  constexpr float kBig = 8388608.0f;  // 2^23
  const float a = std::fabs(x);
  if (!(a < kBig)) return x;  // integers, inf, NaN
  const float r = (a + kBig) - kBig;  // a finite: no NaN
  return std::copysign(r, x);
}
POLYQUANT_HD inline double rint_t(double x) {
  constexpr double kBig = 4503599627370496.0;  // 2^52
  const double a = std::fabs(x);
  if (!(a < kBig)) return x;
  const double r = (a + kBig) - kBig;
  return std::copysign(r, x);
}
POLYQUANT_HD inline Half rint_t(Half x) { return Half(rint_t(float(x))); }

POLYQUANT_HD inline float abs_t(float x) { return x86_abs(x); }
POLYQUANT_HD inline double abs_t(double x) { return x86_abs(x); }
POLYQUANT_HD inline Half abs_t(Half x) { return Half::from_bits(static_cast<std::uint16_t>(x.bits & 0x7fffu)); }

POLYQUANT_HD inline bool isnan_t(float x) { return std::isnan(x); }
POLYQUANT_HD inline bool isnan_t(double x) { return std::isnan(x); }
POLYQUANT_HD inline bool isnan_t(Half x) { return (x.bits & 0x7fffu) > 0x7c00u; }
POLYQUANT_HD inline bool isinf_t(float x) { return std::isinf(x); }
POLYQUANT_HD inline bool isinf_t(double x) { return std::isinf(x); }
POLYQUANT_HD inline bool isinf_t(Half x) { return (x.bits & 0x7fffu) == 0x7c00u; }

// numpy.sign: +1, -1, +0 for either zero, NaN for NaN.
template <class T>
POLYQUANT_HD inline T sign_t(T x) {
  if (x > T(0.0f)) return T(1.0f);
  if (x < T(0.0f)) return T(-1.0f);
  if (isnan_t(x)) return x;
  return T(0.0f);
}

// numpy's log2/exp2. float32 goes to the C library's log2f/exp2f (what numpy calls on x86-64
// without AVX-512); float16 is computed in float32 and rounded.
// log2 of a negative number: glibc returns the default NaN (0 / 0).
POLYQUANT_HD inline float log2_t(float x) { return POLYQUANT_SPELL_OUT_X86_NANS && x < 0.0f ? x86_default_nan<float>() : POLYQUANT_X86_UNARY(std::log2, x); }
POLYQUANT_HD inline double log2_t(double x) { return POLYQUANT_SPELL_OUT_X86_NANS && x < 0.0 ? x86_default_nan<double>() : POLYQUANT_X86_UNARY(std::log2, x); }
POLYQUANT_HD inline Half log2_t(Half x) { return Half(log2_t(float(x))); }
POLYQUANT_HD inline float exp2_t(float x) { return POLYQUANT_X86_UNARY(std::exp2, x); }
POLYQUANT_HD inline double exp2_t(double x) { return POLYQUANT_X86_UNARY(std::exp2, x); }
POLYQUANT_HD inline Half exp2_t(Half x) { return Half(exp2_t(float(x))); }

// Value conversions as numpy's astype does them (round to nearest even, overflow to inf).
template <class T>
POLYQUANT_HD inline T from_double(double v);
template <>
POLYQUANT_HD inline float from_double<float>(double v) { return x86_to_float(v); }
template <>
POLYQUANT_HD inline double from_double<double>(double v) { return v; }
template <>
POLYQUANT_HD inline Half from_double<Half>(double v) { return half_from_double(v); }

template <class T>
POLYQUANT_HD inline double to_double(T v) {
  if constexpr (std::is_same_v<T, float>) return x86_to_double(v);
  else return static_cast<double>(v);
}

// Smallest positive normal number of T (numpy's finfo(T).tiny).
template <class T>
POLYQUANT_HD inline T tiny();
template <>
POLYQUANT_HD inline float tiny<float>() { return std::numeric_limits<float>::min(); }
template <>
POLYQUANT_HD inline double tiny<double>() { return std::numeric_limits<double>::min(); }
template <>
POLYQUANT_HD inline Half tiny<Half>() { return Half::from_bits(0x0400u); }

// numpy's product of sign(x) and a magnitude, as the sign-magnitude rounding modes compute it: x86
// (and so numpy's float32 / float64 loops) returns the first operand when both are NaN, quieted, with
// its sign and payload. C++ treats `*` as commutative and may swap the operands, which turned a -NaN
// input into +NaN; the rule is spelled out instead (qonnx: UP of -NaN is -NaN). numpy's float16
// loop multiplies in float with the operands the other way round and returns the second NaN, the
// magnitude's: UP of a float16 -NaN is +NaN (measured against qonnx, tests/python/qonnx/test_specials.py).
template <class T>
POLYQUANT_HD inline T numpy_sign_times_magnitude(T sign, T magnitude) {
  if constexpr (std::is_same_v<T, Half>) {
    if (isnan_t(magnitude)) return x86_add(magnitude, magnitude);
  }
  return isnan_t(sign) ? x86_add(sign, sign) : x86_mul(sign, magnitude);  // NaN + itself: the same NaN, quieted
}

// a * b with x86's (and so numpy's) rule for two NaN operands: the first one, quieted, with its
// sign and payload. C++ lets the compiler swap the operands of `*`, and g++ does so differently
// at different optimisation levels (at -O1 FloatQuant's 2^e * R(...) of a NaN x returned R's -NaN
// where numpy and the vector kernels return 2^e's +NaN); the rule is spelled out instead.
template <class T>
POLYQUANT_HD inline T mul_first_nan(T a, T b) {
  return isnan_t(a) ? x86_add(a, a) : x86_mul(a, b);  // NaN + itself: the same NaN, quieted
}

// a + b with x86's rule for two NaN operands: the first one, quieted (a NaN b alone comes back
// quieted either way). As with `*`, g++ may swap the operands of `+`, and did so differently at
// -O1 and -O3 in AIMET's gradient sums; the rule is spelled out wherever both can be NaN.
template <class T>
POLYQUANT_HD inline T add_first_nan(T a, T b) {
  return isnan_t(a) ? x86_add(a, a) : x86_add(a, b);  // NaN + itself: the same NaN, quieted
}

// ---- rounding modes -------------------------------------------------------------------------
template <RoundingMode kMode, class T>
POLYQUANT_HD inline T round_t(T x) {
  if constexpr (kMode == RoundingMode::kHalfEven) {
    return rint_t(x);
  } else if constexpr (kMode == RoundingMode::kCeil) {
    return ceil_t(x);
  } else if constexpr (kMode == RoundingMode::kFloor) {
    return floor_t(x);
  } else if constexpr (kMode == RoundingMode::kUp) {
    return numpy_sign_times_magnitude(sign_t(x), ceil_t(abs_t(x)));
  } else if constexpr (kMode == RoundingMode::kDown) {
    return trunc_t(x);
  } else if constexpr (kMode == RoundingMode::kHalfUp) {
    return numpy_sign_times_magnitude(sign_t(x), floor_t(x86_add(abs_t(x), T(0.5f))));
  } else {
    static_assert(kMode == RoundingMode::kHalfDown);
    return numpy_sign_times_magnitude(sign_t(x), ceil_t(x86_sub(abs_t(x), T(0.5f))));
  }
}

// Runtime-mode version, for code outside hot loops.
template <class T>
POLYQUANT_HD inline T round_t(RoundingMode mode, T x) {
  switch (mode) {
    case RoundingMode::kHalfEven: return round_t<RoundingMode::kHalfEven>(x);
    case RoundingMode::kCeil: return round_t<RoundingMode::kCeil>(x);
    case RoundingMode::kFloor: return round_t<RoundingMode::kFloor>(x);
    case RoundingMode::kUp: return round_t<RoundingMode::kUp>(x);
    case RoundingMode::kDown: return round_t<RoundingMode::kDown>(x);
    case RoundingMode::kHalfUp: return round_t<RoundingMode::kHalfUp>(x);
    case RoundingMode::kHalfDown: return round_t<RoundingMode::kHalfDown>(x);
  }
  return x;
}

// Calls f.template operator()<kMode>() with the mode as a compile-time constant.
template <class F>
POLYQUANT_HD inline decltype(auto) with_rounding_mode(RoundingMode mode, F&& f) {
  switch (mode) {
    case RoundingMode::kHalfEven: return f.template operator()<RoundingMode::kHalfEven>();
    case RoundingMode::kCeil: return f.template operator()<RoundingMode::kCeil>();
    case RoundingMode::kFloor: return f.template operator()<RoundingMode::kFloor>();
    case RoundingMode::kUp: return f.template operator()<RoundingMode::kUp>();
    case RoundingMode::kDown: return f.template operator()<RoundingMode::kDown>();
    case RoundingMode::kHalfUp: return f.template operator()<RoundingMode::kHalfUp>();
    case RoundingMode::kHalfDown: break;
  }
  return f.template operator()<RoundingMode::kHalfDown>();
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
