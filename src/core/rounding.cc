// Names and parsing of rounding modes.
#include <algorithm>
#include <cctype>
#include <string>

#include "polyquant/error.h"
#include "polyquant/rounding.h"

namespace polyquant {

const char* rounding_mode_name(RoundingMode mode) {
  switch (mode) {
    case RoundingMode::kHalfEven: return "ROUND";
    case RoundingMode::kCeil: return "CEIL";
    case RoundingMode::kFloor: return "FLOOR";
    case RoundingMode::kUp: return "UP";
    case RoundingMode::kDown: return "DOWN";
    case RoundingMode::kHalfUp: return "HALF_UP";
    case RoundingMode::kHalfDown: return "HALF_DOWN";
  }
  return "?";
}

RoundingMode parse_rounding_mode(std::string_view text, const char* param) {
  std::string upper(text);
  // Python's str.upper() on ASCII; non-ASCII bytes never match a mode name anyway.
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "ROUND" || upper == "HALF_EVEN") return RoundingMode::kHalfEven;
  if (upper == "CEIL") return RoundingMode::kCeil;
  if (upper == "FLOOR") return RoundingMode::kFloor;
  if (upper == "UP") return RoundingMode::kUp;
  if (upper == "DOWN") return RoundingMode::kDown;
  if (upper == "HALF_UP") return RoundingMode::kHalfUp;
  if (upper == "HALF_DOWN") return RoundingMode::kHalfDown;
  throw Error(ErrorKind::kValue, std::string(param) + ": unknown rounding mode '" + std::string(text) +
                                     "'; allowed (case-insensitive): ROUND, HALF_EVEN, CEIL, FLOOR, UP, DOWN, "
                                     "HALF_UP, HALF_DOWN");
}

}  // namespace polyquant
