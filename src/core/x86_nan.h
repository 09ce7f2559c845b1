// NaN results as x86 computes them, spelled out for the device (see below). Host and device code;
// nothing here changes what the host computes.
#pragma once

#if defined(__CUDA_ARCH__)
#define POLYQUANT_SPELL_OUT_X86_NANS 1
#else
#define POLYQUANT_SPELL_OUT_X86_NANS 0
#endif
// f(x) for an elementary function f whose x86 / C library result for a NaN x is x quieted.
#if defined(__CUDA_ARCH__)
#define POLYQUANT_X86_UNARY(f, x) (std::isnan(x) ? quieted(x) : f(x))
#else
#define POLYQUANT_X86_UNARY(f, x) f(x)
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/target.h"

namespace polyquant::detail {
inline namespace POLYQUANT_TARGET_NAMESPACE {

// ---- NaN results as x86 computes them, spelled out for the device ------------------------------
// The CPU reference is x86 SSE / AVX arithmetic (as numpy's and torch's CPU kernels are). An x86
// operation whose result is NaN returns its first NaN operand, quieted (sign and payload kept, the
// quiet bit set); when no operand is NaN (an invalid operation: inf - inf, 0 * inf, 0 / 0,
// inf / inf, log of a negative number) it returns the "default NaN", negative with only the quiet
// bit set (float 0xFFC00000, double 0xFFF8000000000000). Conversions between float and double keep
// the sign and the payload's top bits and set the quiet bit. NVIDIA GPUs do not follow these rules
// (an invalid operation gives 0x7FFFFFFF, and NaN payloads need not survive), so device code never
// lets the hardware pick a NaN: the x86_* operations below compute the IEEE result and, on the
// device only, replace a NaN result by x86's. On the host they are the plain operators and
// functions, compiled exactly as before.

POLYQUANT_HD inline float quieted(float x) { return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) | 0x00400000u); }
POLYQUANT_HD inline double quieted(double x) {
  return std::bit_cast<double>(std::bit_cast<std::uint64_t>(x) | 0x0008000000000000ull);
}
template <class T>
POLYQUANT_HD inline T x86_default_nan() {
  if constexpr (sizeof(T) == 4) return std::bit_cast<T>(0xFFC00000u);
  else return std::bit_cast<T>(0xFFF8000000000000ull);
}
// x86's NaN result of a binary operation on a and b (called where the result is NaN).
template <class T>
POLYQUANT_HD inline T x86_nan(T a, T b) {
  return std::isnan(a) ? quieted(a) : (std::isnan(b) ? quieted(b) : x86_default_nan<T>());
}
// x86's NaN result of a unary operation on a (a NaN operand, or an invalid operation).
template <class T>
POLYQUANT_HD inline T x86_nan(T a) {
  return std::isnan(a) ? quieted(a) : x86_default_nan<T>();
}

// The IEEE result r of a binary operation on a and b, with x86's NaN where r is NaN (on the device;
// on the host r as it is). Half (core/half.h) computes in float with these, so for it they are its
// plain operators.
template <class T>
POLYQUANT_HD inline T x86_checked(T r, [[maybe_unused]] T a, [[maybe_unused]] T b) {
#if POLYQUANT_SPELL_OUT_X86_NANS
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(r)) return x86_nan(a, b);
  }
#endif
  return r;
}
template <class T>
POLYQUANT_HD inline T x86_add(T a, T b) { return x86_checked<T>(a + b, a, b); }
template <class T>
POLYQUANT_HD inline T x86_sub(T a, T b) { return x86_checked<T>(a - b, a, b); }
template <class T>
POLYQUANT_HD inline T x86_mul(T a, T b) { return x86_checked<T>(a * b, a, b); }
template <class T>
POLYQUANT_HD inline T x86_div(T a, T b) { return x86_checked<T>(a / b, a, b); }
// -x and |x|: sign-bit operations on x86, which keep a NaN's bits. The device may compile them as
// an addition with a negated or absolute operand, which returns its canonical NaN, so device code
// flips or clears the sign bit itself.
template <class T>
POLYQUANT_HD inline T x86_neg(T x) {
#if POLYQUANT_SPELL_OUT_X86_NANS
  if constexpr (sizeof(T) == 4) return std::bit_cast<T>(std::bit_cast<std::uint32_t>(x) ^ 0x80000000u);
  else return std::bit_cast<T>(std::bit_cast<std::uint64_t>(x) ^ 0x8000000000000000ull);
#else
  return -x;
#endif
}
template <class T>
POLYQUANT_HD inline T x86_abs(T x) {
#if POLYQUANT_SPELL_OUT_X86_NANS
  if constexpr (sizeof(T) == 4) return std::bit_cast<T>(std::bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu);
  else return std::bit_cast<T>(std::bit_cast<std::uint64_t>(x) & 0x7FFFFFFFFFFFFFFFull);
#else
  return std::fabs(x);
#endif
}

// std::nearbyint, std::floor, ...: a NaN comes back quieted.
template <class T>
POLYQUANT_HD inline T x86_nearbyint(T x) {
#if POLYQUANT_SPELL_OUT_X86_NANS
  if (std::isnan(x)) return quieted(x);
#endif
  return std::nearbyint(x);
}
// float <-> double conversions (cvtss2sd, cvtsd2ss): sign kept, payload's top bits kept, quieted.
POLYQUANT_HD inline double x86_to_double(float x) {
#if POLYQUANT_SPELL_OUT_X86_NANS
  if (std::isnan(x)) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x) | 0x00400000u;
    return std::bit_cast<double>((static_cast<std::uint64_t>(u >> 31) << 63) | 0x7FF0000000000000ull |
                                 (static_cast<std::uint64_t>(u & 0x007FFFFFu) << 29));
  }
#endif
  return static_cast<double>(x);
}
POLYQUANT_HD inline double x86_to_double(double x) { return x; }
POLYQUANT_HD inline float x86_to_float(double x) {
#if POLYQUANT_SPELL_OUT_X86_NANS
  if (std::isnan(x)) {
    const std::uint64_t u = std::bit_cast<std::uint64_t>(x) | 0x0008000000000000ull;
    return std::bit_cast<float>(static_cast<std::uint32_t>((u >> 63) << 31) | 0x7F800000u |
                                static_cast<std::uint32_t>((u >> 29) & 0x007FFFFFu));
  }
#endif
  return static_cast<float>(x);
}
POLYQUANT_HD inline float x86_to_float(float x) { return x; }
// static_cast<To>(v) between float and double (and to itself) with x86's NaN conversion.
template <class To, class From>
POLYQUANT_HD inline To x86_cast(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<To, double>) return x86_to_double(v);
  else return x86_to_float(v);
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
