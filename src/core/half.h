// IEEE binary16 as numpy evaluates it: every arithmetic op is done in float32 and rounded back to
// half (round to nearest even). For + - * / this single float32 step followed by the rounding to
// half is exactly the correctly rounded half result, because float32 carries more than 2*11+2
// significand bits (no double-rounding error).
#pragma once

#include "core/target.h"
#include "core/x86_nan.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace polyquant::detail {

// Per-kernel-set copies (see core/target.h): no inline function compiled with one set's flags
// may be shared with code compiled for another.
inline namespace POLYQUANT_TARGET_NAMESPACE {

POLYQUANT_HD inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: value = mant * 2^-24, normalise
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<std::uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// float32 -> binary16, round to nearest even; overflow gives inf, NaN stays NaN (quiet).
POLYQUANT_HD inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  const int exp = static_cast<int>(ax >> 23) - 127;
  if (exp >= -14) {  // normal half
    const std::uint32_t mant = ax & 0x7fffffu;
    std::uint32_t h = (static_cast<std::uint32_t>(exp + 15) << 10) | (mant >> 13);
    const std::uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent: fine
    return static_cast<std::uint16_t>(sign | h);
  }
  if (exp < -25) return sign;  // below half the smallest subnormal: rounds to zero
  // Subnormal half: value / 2^-24 rounded to an integer, ties to even.
  const std::uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const int shift = -exp - 14 + 13;  // 14..24
  std::uint32_t h = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

struct Half {
  std::uint16_t bits = 0;

  Half() = default;
  POLYQUANT_HD explicit Half(float f) : bits(float_to_half_bits(f)) {}
  POLYQUANT_HD static Half from_bits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  POLYQUANT_HD explicit operator float() const { return half_bits_to_float(bits); }
  POLYQUANT_HD explicit operator double() const { return half_bits_to_float(bits); }

  POLYQUANT_HD friend Half operator+(Half a, Half b) { return Half(x86_add(float(a), float(b))); }
  POLYQUANT_HD friend Half operator-(Half a, Half b) { return Half(x86_sub(float(a), float(b))); }
  POLYQUANT_HD friend Half operator*(Half a, Half b) { return Half(x86_mul(float(a), float(b))); }
  POLYQUANT_HD friend Half operator/(Half a, Half b) { return Half(x86_div(float(a), float(b))); }
  POLYQUANT_HD friend Half operator-(Half a) { return from_bits(static_cast<std::uint16_t>(a.bits ^ 0x8000u)); }
  POLYQUANT_HD friend bool operator>(Half a, Half b) { return float(a) > float(b); }
  POLYQUANT_HD friend bool operator<(Half a, Half b) { return float(a) < float(b); }
  POLYQUANT_HD friend bool operator>=(Half a, Half b) { return float(a) >= float(b); }
  POLYQUANT_HD friend bool operator<=(Half a, Half b) { return float(a) <= float(b); }
  POLYQUANT_HD friend bool operator==(Half a, Half b) { return float(a) == float(b); }
};

// float64 -> binary16 with a single rounding (numpy's astype). Going through float32 could
// double-round, so the value is rounded on the half grid directly in double precision.
POLYQUANT_HD inline Half half_from_double(double d) {
  if (!std::isfinite(d)) return Half(x86_to_float(d));  // NaN quieted as x86 converts it
  const double a = std::fabs(d);
  if (a >= 65520.0) return Half(std::copysign(INFINITY, static_cast<float>(d)));
  int exp = 0;
  std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1)
  const int quantum_exp = exp - 1 < -14 ? -24 : exp - 11;
  const double n = std::nearbyint(std::ldexp(a, -quantum_exp));  // exact scaling, ties to even
  return Half(static_cast<float>(std::copysign(std::ldexp(n, quantum_exp), d)));
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
