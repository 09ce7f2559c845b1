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

namespace {
// `text` for an error message: control bytes (a NUL would end the message where C strings carry
// it, e.g. in a Python exception) and non-ASCII bytes as \xNN, backslash and quote escaped.
std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string r;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\' || c == '\'') {
      r += '\\';
      r += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      r += "\\x";
      r += kHex[c >> 4];
      r += kHex[c & 15];
    } else {
      r += ch;
    }
  }
  return r;
}
}  // namespace

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
  throw Error(ErrorKind::kValue, std::string(param) + ": unknown rounding mode '" + printable(text) +
                                     "'; allowed (case-insensitive): ROUND, HALF_EVEN, CEIL, FLOOR, UP, DOWN, "
                                     "HALF_UP, HALF_DOWN");
}

}  // namespace polyquant
