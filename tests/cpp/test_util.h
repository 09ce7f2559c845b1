// Shared helpers of the C++ tests: a seeded generator that reports its seed, bit-exact comparison
// and value sets that exercise rounding boundaries and IEEE specials.
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

#include "polyquant/error.h"

namespace polyquant::test {

// Seed from POLYQUANT_TEST_SEED (default fixed), printed in every failure message via SCOPED_TRACE.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("POLYQUANT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return 20261122;
}

inline std::mt19937_64 make_rng(std::uint64_t salt = 0) { return std::mt19937_64(test_seed() + salt); }

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

// IEEE specials and boundary values of float32.
inline std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
          std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
          std::numeric_limits<float>::min(), -std::numeric_limits<float>::min(), 1e-40f, -1e-40f,
          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1e30f, -1e30f, 3e38f,
          0.49999997f, -0.49999997f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 8388607.5f, 8388609.0f, -8388609.0f,
          16777216.0f, 2147483648.0f, -2147483648.0f,
          // NaNs with a payload and signalling NaNs, of both signs: every kernel set must return the
          // reference's NaN bits, not only a NaN.
          std::bit_cast<float>(0x7FC12345u), std::bit_cast<float>(0xFFC54321u), std::bit_cast<float>(0x7F812345u),
          std::bit_cast<float>(0xFF800001u)};
}

// Values x with x/scale landing exactly on k + 0.5 and one ulp either side, for |k| < kmax.
inline std::vector<float> near_ties(float scale, int kmax) {
  std::vector<float> v;
  for (int k = -kmax; k <= kmax; ++k) {
    const float t = (static_cast<float>(k) + 0.5f) * scale;
    v.push_back(t);
    v.push_back(std::nextafter(t, std::numeric_limits<float>::infinity()));
    v.push_back(std::nextafter(t, -std::numeric_limits<float>::infinity()));
    v.push_back(static_cast<float>(k) * scale);
  }
  return v;
}

// A mix of random magnitudes (log-uniform over many binades), ties and specials.
inline std::vector<float> mixed_values(std::size_t n, std::uint64_t salt, float scale = 1.0f) {
  auto rng = make_rng(salt);
  std::uniform_real_distribution<float> expo(-30.0f, 30.0f), unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  const auto ties = near_ties(scale, 20);
  const auto specials = special_values();
  std::vector<float> v(n);
  for (auto& x : v) {
    const int p = pick(rng);
    if (p == 0) x = specials[rng() % specials.size()];
    else if (p <= 3) x = ties[rng() % ties.size()];
    else if (p <= 6) x = unit(rng) * 20.0f * scale;
    else x = unit(rng) * std::exp2(expo(rng));
  }
  return v;
}

// `count` elements of `esize` bytes repeating the row of `row_len` elements at `row`: element i is
// row[i % row_len]. A repeated-row operand (row_len + kRepeatedRowPad elements) and the same rows
// written out in full, for the kernel tests of RowArgs::repeated_row_mask.
inline std::vector<unsigned char> cyclic_copy(const unsigned char* row, std::size_t esize, std::int64_t row_len, std::int64_t count) {
  std::vector<unsigned char> out(static_cast<std::size_t>(count) * esize);
  for (std::int64_t i = 0; i < count; ++i) {
    std::memcpy(out.data() + static_cast<std::size_t>(i) * esize, row + static_cast<std::size_t>(i % row_len) * esize, esize);
  }
  return out;
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
