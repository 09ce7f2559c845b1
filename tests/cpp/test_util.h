// Shared helpers of the C++ tests: bit-exact comparison and error expectations, over the seeded
// value sets of test_values.h.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/registry.h"
#include "polyquant/error.h"
#include "test_values.h"

namespace polyquant::test {

// Whether this CPU runs kernel set `isa` (the tests of a kernel the CPU lacks skip).
inline bool isa_available(detail::Isa isa) {
  for (detail::Isa s : detail::supported_isas()) {
    if (s == isa) return true;
  }
  return false;
}

// Same bits, or both NaN (any payload). The sign of zero is significant.
inline bool same_value(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}
inline bool same_value(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

// Same bits, NaN payload and sign included: for the kernels whose NaN results are specified bit
// for bit (the QKeras kernels, qk_nan_result).
inline bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }
inline bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

inline std::string describe(float v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g (0x%08x)", static_cast<double>(v), std::bit_cast<std::uint32_t>(v));
  return buf;
}

// Every element the same value (same_value), or with nan_bits the same bits (same_bits).
template <class T>
::testing::AssertionResult all_same(const std::vector<T>& got, const std::vector<T>& want, bool nan_bits = false) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (nan_bits ? !same_bits(got[i], want[i]) : !same_value(got[i], want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << describe(static_cast<float>(got[i]))
                                           << " want " << describe(static_cast<float>(want[i]))
                                           << " (seed " << test_seed() << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// f() must throw a polyquant::Error of `kind` whose message holds every fragment (the parameter's
// name, the allowed values): bad input gets a clear error, never another exception type.
template <class F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const char* fragment : fragments)
      EXPECT_NE(std::string_view(e.what()).find(fragment), std::string_view::npos)
          << "'" << fragment << "' not in: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a polyquant::Error: " << e.what();
  }
}
template <class F>
void expect_error(F&& f, ErrorKind kind, const std::string& fragment) {
  expect_error(std::forward<F>(f), kind, {fragment.c_str()});
}

}  // namespace polyquant::test
