// Rounding modes. Every op takes one explicitly; nothing depends on the floating-point environment.
#pragma once

#include <string_view>

#include "polyquant/export.h"

namespace polyquant {

// Each mode is defined by a literal formula evaluated in the working precision T of the op
// (float32 for float32 inputs), with numpy semantics for sign (sign(+-0) = +0, sign(NaN) = NaN):
//
//   kHalfEven  rint(x)                         nearest, ties to even        QONNX "ROUND"/"HALF_EVEN"
//   kCeil      ceil(x)                         toward +inf                  "CEIL"
//   kFloor     floor(x)                        toward -inf                  "FLOOR"
//   kUp        sign(x) * ceil(|x|)             away from zero               "UP"
//   kDown      trunc(x)                        toward zero                  "DOWN"
//   kHalfUp    sign(x) * floor(|x| + T(0.5))   ties away from zero          "HALF_UP"
//   kHalfDown  sign(x) * ceil(|x| - T(0.5))    ties toward zero             "HALF_DOWN"
//
// The half modes are *not* std::round: the addition of 0.5 rounds in T, so in float32
// kHalfUp(0.49999997f) == 1 and kHalfUp(8388609.f) == 8388610. Zero signs follow the formulas:
// kHalfDown(+0.0) == -0.0, kHalfUp(-0.3) == -0.0, kUp(-0.0) == +0.0.
enum class RoundingMode {
  kHalfEven,
  kCeil,
  kFloor,
  kUp,
  kDown,
  kHalfUp,
  kHalfDown,
};

inline constexpr int kNumRoundingModes = 7;

// QONNX spelling of a mode ("ROUND", "CEIL", ...).
POLYQUANT_API const char* rounding_mode_name(RoundingMode mode);

// Parses a QONNX rounding_mode attribute: upper-cased, then matched exactly against ROUND,
// HALF_EVEN, CEIL, FLOOR, UP, DOWN, HALF_UP, HALF_DOWN. Anything else throws Error naming
// `param` and the allowed values.
POLYQUANT_API RoundingMode parse_rounding_mode(std::string_view text, const char* param = "rounding_mode");

}  // namespace polyquant
