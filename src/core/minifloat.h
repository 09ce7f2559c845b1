// The narrow float formats of ONNX (bfloat16, float8, float6, float4, e8m0) as ml_dtypes (numpy's
// `astype`) converts them, which is what onnx's reference evaluator computes with.
//
// A minifloat with E exponent bits, M mantissa bits and bias b encodes a magnitude field f (sign
// apart) as: exponent field e = f >> M, mantissa m = f & (2^M - 1); e = 0 is subnormal,
// m * 2^(1-b-M); otherwise (2^M + m) * 2^(e-b-M). The formats differ only in what the top codes
// mean:
//   ieee    (float8_e5m2):       e all ones: m = 0 infinity, else NaN. Overflow -> inf.
//   fn      (float8_e4m3fn):     no infinity; magnitude all ones is NaN. Overflow and inf -> NaN.
//   fnuz    (float8_*fnuz):      no infinity, no -0; 0x80 is the only NaN. Overflow and inf -> NaN.
//   finite  (float6_*, float4):  no infinity, no NaN. Overflow and inf saturate to the largest
//                                magnitude; NaN becomes a zero whose sign bit is the *opposite* of
//                                the NaN's (ml_dtypes' bit arithmetic on the NaN's pattern).
// Rounding is to nearest, ties to even, on the exact float32 value; a float64 value is first
// rounded to float32 (ml_dtypes converts through float, so float64 inputs are rounded twice).
// e8m0 (float8_e8m0fnu) holds 2^(e-127) and NaN (0xFF): zero, negatives and NaN give NaN; ties go
// up (a value 1.5 * 2^k gives 2^(k+1)); below 2^-127 gives 2^-127, above 2^127 NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/target.h"
#include "core/x86_nan.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

enum class MinifloatKind : std::uint8_t { kIeee, kFn, kFnuz, kFinite, kE8M0 };

struct MinifloatFormat {
  int exp_bits = 0;
  int man_bits = 0;
  int bias = 0;
  MinifloatKind kind = MinifloatKind::kFinite;
  std::uint8_t max_magnitude = 0;  // largest finite magnitude field
  float max_value = 0;             // its value
};

// The format of a float8/float6/float4/e8m0 dtype (bfloat16 is handled as float32's upper half).
POLYQUANT_HD constexpr MinifloatFormat minifloat_format(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN: return {4, 3, 7, MinifloatKind::kFn, 0x7E, 448.0f};
    case DType::kFloat8E4M3FNUZ: return {4, 3, 8, MinifloatKind::kFnuz, 0x7F, 240.0f};
    case DType::kFloat8E5M2: return {5, 2, 15, MinifloatKind::kIeee, 0x7B, 57344.0f};
    case DType::kFloat8E5M2FNUZ: return {5, 2, 16, MinifloatKind::kFnuz, 0x7F, 57344.0f};
    case DType::kFloat8E8M0: return {8, 0, 127, MinifloatKind::kE8M0, 0xFE, 1.7014118346046923e38f};
    case DType::kFloat6E2M3: return {2, 3, 1, MinifloatKind::kFinite, 0x1F, 7.5f};
    case DType::kFloat6E3M2: return {3, 2, 3, MinifloatKind::kFinite, 0x1F, 28.0f};
    case DType::kFloat4E2M1: return {2, 1, 1, MinifloatKind::kFinite, 0x7, 6.0f};
    default: return {};
  }
}
// Whether t is one of the byte-stored minifloats above (bfloat16 and float16 are not).
POLYQUANT_HD constexpr bool has_minifloat_format(DType t) { return minifloat_format(t).exp_bits != 0; }

inline namespace POLYQUANT_TARGET_NAMESPACE {

// bfloat16 <-> float32. Widening is exact (NaN payloads kept). Narrowing rounds to nearest even;
// ml_dtypes turns every NaN into the quiet NaN 0x7FC0 with the sign kept.
POLYQUANT_HD inline float bfloat16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
POLYQUANT_HD inline std::uint16_t bfloat16_round_bits(float f) {  // round to nearest even, NaN not handled
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
POLYQUANT_HD inline std::uint16_t float_to_bfloat16_bits(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xFFC0 : 0x7FC0;
  return bfloat16_round_bits(f);
}

POLYQUANT_HD inline float minifloat_to_float(const MinifloatFormat& fmt, std::uint8_t bits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (fmt.kind == MinifloatKind::kE8M0) {
    return bits == 0xFF ? nan : std::ldexp(1.0f, static_cast<int>(bits) - 127);
  }
  const int width = 1 + fmt.exp_bits + fmt.man_bits;
  const unsigned sign_bit = 1u << (width - 1);
  const bool negative = (bits & sign_bit) != 0;
  const unsigned mag = bits & (sign_bit - 1);
  const unsigned exp_field = mag >> fmt.man_bits;
  const unsigned man = mag & ((1u << fmt.man_bits) - 1);
  switch (fmt.kind) {
    case MinifloatKind::kFn:
      if (mag == 0x7F) return negative ? -nan : nan;
      break;
    case MinifloatKind::kFnuz:
      if (bits == 0x80) return -nan;  // ml_dtypes widens it to 0xFFC00000
      break;
    case MinifloatKind::kIeee:
      if (exp_field == (1u << fmt.exp_bits) - 1) {
        const float v = man == 0 ? std::numeric_limits<float>::infinity() : nan;
        return negative ? x86_neg(v) : v;
      }
      break;
    default:
      break;
  }
  const float v = exp_field == 0 ? std::ldexp(static_cast<float>(man), 1 - fmt.bias - fmt.man_bits)
                                 : std::ldexp(static_cast<float>((1u << fmt.man_bits) | man),
                                              static_cast<int>(exp_field) - fmt.bias - fmt.man_bits);
  return negative ? x86_neg(v) : v;
}

// float32 -> minifloat bits, as ml_dtypes' astype. `saturate`: onnx's saturate_cast, which first
// clips to [-max, max] (infinities included; NaN unchanged).
POLYQUANT_HD inline std::uint8_t minifloat_from_float(const MinifloatFormat& fmt, float v, bool saturate) {
  if (fmt.kind == MinifloatKind::kE8M0) {
    if (!(v > 0.0f) || std::isinf(v)) return 0xFF;
    int e = 0;
    const float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1): 2^(e-1) <= v < 2^e
    int k = e - 1;
    if (m >= 0.75f) ++k;  // ties (1.5 * 2^k) go up
    if (k < -127) return 0x00;
    if (k > 127) return 0xFF;
    return static_cast<std::uint8_t>(k + 127);
  }
  const int width = 1 + fmt.exp_bits + fmt.man_bits;
  const unsigned sign_bit = 1u << (width - 1);
  const bool negative = std::signbit(v);
  const unsigned sign = negative ? sign_bit : 0u;
  if (std::isnan(v)) {
    switch (fmt.kind) {
      case MinifloatKind::kIeee: return static_cast<std::uint8_t>(sign | (((1u << fmt.exp_bits) - 1) << fmt.man_bits) | (1u << (fmt.man_bits - 1)));
      case MinifloatKind::kFn: return static_cast<std::uint8_t>(sign | (sign_bit - 1));
      case MinifloatKind::kFnuz: return 0x80;
      default: return static_cast<std::uint8_t>(negative ? 0u : sign_bit);
    }
  }
  float a = std::fabs(v);
  if (saturate && a > fmt.max_value) a = fmt.max_value;
  std::uint64_t mag = 0;
  bool overflow = std::isinf(a);
  if (!overflow) {
    const int emin = 1 - fmt.bias;
    int e = 0;
    (void)std::frexp(a, &e);
    const int ea = (a == 0.0f) ? emin : (e - 1 < emin ? emin : e - 1);
    // a * 2^(M - ea) is exact in double; its nearest even integer is the significand on the
    // format's grid at exponent ea (2^(M+1) carries into the next exponent by itself).
    const double q = std::nearbyint(std::ldexp(static_cast<double>(a), fmt.man_bits - ea));
    mag = (static_cast<std::uint64_t>(ea + fmt.bias - 1) << fmt.man_bits) + static_cast<std::uint64_t>(q);
    overflow = mag > fmt.max_magnitude;
  }
  if (overflow) {
    switch (fmt.kind) {
      case MinifloatKind::kIeee: return static_cast<std::uint8_t>(sign | (((1u << fmt.exp_bits) - 1) << fmt.man_bits));
      case MinifloatKind::kFn: return static_cast<std::uint8_t>(sign | (sign_bit - 1));
      case MinifloatKind::kFnuz: return 0x80;
      default: return static_cast<std::uint8_t>(sign | fmt.max_magnitude);
    }
  }
  if (mag == 0 && fmt.kind == MinifloatKind::kFnuz) return 0x00;  // no -0
  return static_cast<std::uint8_t>(sign | mag);
}

}  // inline namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
