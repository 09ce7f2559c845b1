// Seeded value sets that exercise rounding boundaries and IEEE specials: what the C++ tests feed
// the kernels, and what the kernel cases (kernel_cases.h) are built from. No test framework here:
// the kernel benchmarks use them too.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace polyquant::test {

// Seed from POLYQUANT_TEST_SEED (default fixed), printed in every failure message via SCOPED_TRACE.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("POLYQUANT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return 20261122;
}

inline std::mt19937_64 make_rng(std::uint64_t salt = 0) { return std::mt19937_64(test_seed() + salt); }

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

}  // namespace polyquant::test
