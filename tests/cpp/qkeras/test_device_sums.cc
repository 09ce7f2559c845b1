// The settling of QKeras' least-squares sums that lets a device, which sums exactly in any order,
// give the host's fixed-order float64 sums after their float32 conversion (scale_search.h,
// float32_of_every_float64_sum): every float64 summation order must agree with what it settles,
// it must settle typical sums, and it must refuse the sums whose orders can disagree with a
// rounding of the exact value.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/exact_sum.h"
#include "core/fpenv.h"
#include "families/qkeras/kernels.h"
#include "families/qkeras/scale_search.h"

namespace polyquant::qkeras::internal {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

struct Sums {
  double exact = 0, magnitude = 0, unit = kUnknown;
};
Sums sums_of(const std::vector<float>& t) {
  detail::ExactSumFloat32 s, m;
  Sums r;
  for (float v : t) {
    s.add(v);
    m.add(std::fabs(v));
    r.unit = std::min(r.unit, static_cast<double>(detail::float32_unit(v)));
  }
  r.exact = s.to_double();
  r.magnitude = m.to_double();
  return r;
}

// A float64 sum of t from +0 in the order `order`: one chain, or a pairwise tree over the order,
// or eight lanes then folded (the product-sums kernel's pattern).
double chain_sum(const std::vector<float>& t, const std::vector<std::size_t>& order) {
  double s = 0.0;
  for (std::size_t i : order) s += static_cast<double>(t[i]);
  return s;
}
double tree_sum(const std::vector<float>& t, const std::vector<std::size_t>& order, std::size_t lo, std::size_t hi) {
  if (hi - lo == 1) return 0.0 + static_cast<double>(t[order[lo]]);
  const std::size_t mid = lo + (hi - lo) / 2;
  return tree_sum(t, order, lo, mid) + tree_sum(t, order, mid, hi);
}
double lane_sum(const std::vector<float>& t, const std::vector<std::size_t>& order) {
  double lanes[8] = {};
  for (std::size_t k = 0; k < order.size(); ++k) lanes[k % 8] += static_cast<double>(t[order[k]]);
  double s = 0.0;
  for (double l : lanes) s += l;
  return s;
}

// Every order's float32 conversion under the flush rule, as bits (a few random orders, each summed
// three ways, plus the sorted orders that maximise and minimise cancellation).
std::vector<std::uint32_t> order_results(const std::vector<float>& t, std::mt19937_64& rng) {
  const detail::ScopedFlushDenormals flush;
  std::vector<std::size_t> order(t.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<std::uint32_t> out;
  auto add = [&](double s) { out.push_back(std::bit_cast<std::uint32_t>(static_cast<float>(s))); };
  for (int k = 0; k < 6; ++k) {
    std::shuffle(order.begin(), order.end(), rng);
    add(chain_sum(t, order));
    if (!order.empty()) add(tree_sum(t, order, 0, order.size()));
    add(lane_sum(t, order));
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return std::fabs(t[a]) < std::fabs(t[b]); });
  add(chain_sum(t, order));
  std::reverse(order.begin(), order.end());
  add(chain_sum(t, order));
  return out;
}

TEST(LeastSquaresOnDevice, Float32UnitIsTheLowestSetBit) {
  EXPECT_EQ(detail::float32_unit(1.0f), 1.0f);
  EXPECT_EQ(detail::float32_unit(3.0f), 1.0f);
  EXPECT_EQ(detail::float32_unit(-2.5f), 0.5f);
  EXPECT_EQ(detail::float32_unit(0.75f), 0.25f);
  EXPECT_EQ(detail::float32_unit(1.0f + 0x1p-23f), 0x1p-23f);
  EXPECT_EQ(detail::float32_unit(std::numeric_limits<float>::max()), 0x1p104f);
  EXPECT_EQ(detail::float32_unit(0x1p-126f), 0x1p-126f);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(detail::float32_unit(std::bit_cast<float>(6u))), 2u);  // 6 * 2^-149
  EXPECT_EQ(std::bit_cast<std::uint32_t>(detail::float32_unit(std::bit_cast<float>(0x00400000u))), 0x00400000u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(detail::float32_unit(0.0f), inf);
  EXPECT_EQ(detail::float32_unit(-0.0f), inf);
  EXPECT_EQ(detail::float32_unit(inf), inf);
  EXPECT_EQ(detail::float32_unit(-inf), inf);
  EXPECT_EQ(detail::float32_unit(std::numeric_limits<float>::quiet_NaN()), inf);
}

// Random groups of terms (spans from one binade to 2^200, both signs or one, lengths 1 to 3000):
// whatever is settled, every order gives; and most are settled by the bound alone.
TEST(LeastSquaresOnDevice, EverySettledSumIsEveryOrdersSum) {
  std::mt19937_64 rng(20261207);
  int settled_by_bound = 0, settled = 0, cases = 0;
  for (int c = 0; c < 3000; ++c) {
    const std::size_t n = 1 + static_cast<std::size_t>(rng() % (c % 10 == 0 ? 3000 : 60));
    const int span = static_cast<int>(rng() % 8) == 0 ? 200 : static_cast<int>(rng() % 30);
    const bool signed_terms = rng() % 2 == 0;
    const int significand_bits = 1 + static_cast<int>(rng() % 24);  // short ones make ties
    std::vector<float> t(n);
    for (float& v : t) {
      const auto m = static_cast<float>(rng() >> (64 - significand_bits)) + 1.0f;
      v = std::ldexp(m, static_cast<int>(rng() % static_cast<std::uint64_t>(span + 1)) - 100 - significand_bits);
      if (signed_terms && rng() % 2 == 0) v = -v;
      if (rng() % 16 == 0) v = 0.0f;
    }
    const Sums s = sums_of(t);
    const std::vector<std::uint32_t> orders = order_results(t, rng);
    const detail::ScopedFlushDenormals flush;
    for (const double unit : {kUnknown, s.unit}) {
      float value;
      if (!float32_of_every_float64_sum(s.exact, s.magnitude, static_cast<std::int64_t>(n), unit, value)) continue;
      for (std::uint32_t bits : orders) {
        ASSERT_EQ(bits, std::bit_cast<std::uint32_t>(value)) << "case " << c << " n=" << n << " unit=" << unit;
      }
      (unit == kUnknown ? settled_by_bound : settled) += 1;
    }
    ++cases;
  }
  EXPECT_GT(settled_by_bound, cases / 2);
  EXPECT_GT(settled, cases * 3 / 4);
}

// Sums a hair from a float32 tie: b + ulp(b) / 2 plus many terms near float64's last bits of b, of
// random signs and significands, so float64 orders differ from one another and from the exact
// sum's rounding. Whatever is settled must still be every order's result (a bound any smaller
// than gamma(n - 1) fails here), and each order's result must be one the bound allows.
TEST(LeastSquaresOnDevice, NearTiesInManyOrders) {
  std::mt19937_64 rng(7);
  int settled = 0, disagreeing = 0;
  for (int c = 0; c < 4000; ++c) {
    const float b = std::ldexp(1.0f + static_cast<float>(rng() % (1u << 23)) * 0x1p-23f, static_cast<int>(rng() % 40) - 20);
    std::vector<float> t{b, std::ldexp(1.0f, std::ilogb(b) - 24)};
    const std::size_t k = 1 + static_cast<std::size_t>(rng() % 600);
    const int bias = static_cast<int>(rng() % 3) - 1;  // mostly positive, mostly negative, or mixed
    for (std::size_t i = 0; i < k; ++i) {
      const auto m = static_cast<float>(1 + rng() % 255);
      // Every other case, each term below half an ulp of b in float64 (lost when added to b, kept
      // when added to one another first); else up to 255 such ulps.
      const int below = c % 2 == 0 ? 9 + static_cast<int>(rng() % 4) : static_cast<int>(rng() % 12);
      const float v = std::ldexp(m, std::ilogb(b) - 52 - below);
      const bool negative = bias == 0 ? rng() % 2 == 0 : bias < 0 ? rng() % 4 != 0 : rng() % 4 == 0;
      t.push_back(negative ? -v : v);
    }
    const Sums s = sums_of(t);
    const std::vector<std::uint32_t> orders = order_results(t, rng);
    disagreeing += std::any_of(orders.begin(), orders.end(), [&](std::uint32_t o) { return o != orders.front(); }) ? 1 : 0;
    const detail::ScopedFlushDenormals flush;
    for (const double unit : {kUnknown, s.unit}) {
      float value;
      if (!float32_of_every_float64_sum(s.exact, s.magnitude, static_cast<std::int64_t>(t.size()), unit, value)) continue;
      ++settled;
      for (std::uint32_t bits : orders) ASSERT_EQ(bits, std::bit_cast<std::uint32_t>(value)) << "case " << c;
    }
  }
  EXPECT_GT(disagreeing, 100) << "the cases must make float64 orders disagree";
  EXPECT_GT(settled, 100) << "and some near ties are still settled";
}

// Channels of normal data quantized as quantized_bits(8) quantizes them (levels up to 127, the
// max-based po2 scale): every v z and z z sum is settled on the device, none goes to the host;
// for 65536-element channels some z z sums (integers) fall exactly on a float32 tie, which only
// the units settle.
TEST(LeastSquaresOnDevice, RealisticChannelsAreAllSettled) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float half_levels = 127.0f;
  for (const int n : {4096, 65536}) {
    int by_units = 0;
    const int groups = n == 4096 ? 300 : 60;
    std::vector<float> x(static_cast<std::size_t>(n)), xz(x.size()), zz(x.size());
    for (int g = 0; g < groups; ++g) {
      const float sigma = std::ldexp(1.0f, static_cast<int>(rng() % 8) - 4);
      float largest = 0.0f;
      for (float& v : x) {
        v = normal(rng) * sigma;
        largest = std::max(largest, std::fabs(v));
      }
      const float s = std::exp2(std::nearbyint(std::log2(largest / half_levels)));
      {
        const detail::ScopedFlushDenormals flush;
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float z = detail::qk_bits_auto_level(x[i], s, half_levels);
          xz[i] = detail::ls_term_of(x[i], z, detail::LsTerm::kXz);
          zz[i] = detail::ls_term_of(x[i], z, detail::LsTerm::kZz);
        }
      }
      for (const std::vector<float>* t : {&xz, &zz}) {
        const Sums sums = sums_of(*t);
        const detail::ScopedFlushDenormals flush;
        float value;
        if (float32_of_every_float64_sum(sums.exact, sums.magnitude, n, kUnknown, value)) continue;
        ++by_units;
        EXPECT_TRUE(float32_of_every_float64_sum(sums.exact, sums.magnitude, n, sums.unit, value)) << "n=" << n << " group " << g;
      }
    }
    if (n == 65536) {
      EXPECT_GT(by_units, 0) << "integer z z sums on a tie";
    }
  }
}

TEST(LeastSquaresOnDevice, ConstructedTiesAndSpecials) {
  float v;
  // (The sums outside the flush: a unit below 2^-126 is a float32 subnormal.)
  auto settle = [&](const std::vector<float>& t, bool with_unit) {
    const Sums s = sums_of(t);
    const detail::ScopedFlushDenormals flush;
    return float32_of_every_float64_sum(s.exact, s.magnitude, static_cast<std::int64_t>(t.size()), with_unit ? s.unit : kUnknown, v);
  };
  // 1 + 2^-24: a float32 tie; every float64 order is exact and rounds it to even, 1. The bound
  // cannot tell, the units can.
  EXPECT_FALSE(settle({1.0f, 0x1p-24f}, false));
  ASSERT_TRUE(settle({1.0f, 0x1p-24f}, true));
  EXPECT_EQ(v, 1.0f);
  // One ulp either side of the tie: the bound settles both.
  ASSERT_TRUE(settle({1.0f, 0x1p-24f, 0x1p-47f}, false));
  EXPECT_EQ(v, 1.0f + 0x1p-23f);
  ASSERT_TRUE(settle({1.0f, 0x1p-24f, -0x1p-47f}, false));
  EXPECT_EQ(v, 1.0f);
  // 1 + 2^-24 + 2^-80: the exact sum rounds up to 1 + 2^-23, but every float64 order loses the
  // 2^-80 and rounds the tie to 1: neither the bound nor the units settle it (the host runs it).
  const std::vector<float> lost{1.0f, 0x1p-24f, 0x1p-80f};
  EXPECT_FALSE(settle(lost, false));
  EXPECT_FALSE(settle(lost, true));
  detail::ExactSumFloat32 e;
  for (float t : lost) e.add(t);
  EXPECT_EQ(e.to_float(), 1.0f + 0x1p-23f);
  volatile double tiny = 0x1p-80;
  EXPECT_EQ(static_cast<float>((1.0 + 0x1p-24) + tiny), 1.0f);
  // Cancellation to zero: +0 in every order, settled by the units only.
  EXPECT_FALSE(settle({1.0f, -1.0f}, false));
  ASSERT_TRUE(settle({1.0f, -1.0f}, true));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0u);
  // Zeros only (either sign): +0.
  ASSERT_TRUE(settle({-0.0f, -0.0f}, false));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0u);
  // Non-finite terms: their sum in every order.
  const float inf = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(settle({1.0f, inf}, false));
  EXPECT_EQ(v, inf);
  ASSERT_TRUE(settle({-inf, 1.0f}, false));
  EXPECT_EQ(v, -inf);
  ASSERT_TRUE(settle({inf, -inf}, false));
  EXPECT_TRUE(std::isnan(v));
  ASSERT_TRUE(settle({1.0f, std::numeric_limits<float>::quiet_NaN()}, false));
  EXPECT_TRUE(std::isnan(v));
  // A sum in float32's subnormal range: flushed as the host's conversion flushes it.
  ASSERT_TRUE(settle({0x1p-125f, -(0x1p-125f - 0x1p-140f)}, true));
  {
    const detail::ScopedFlushDenormals flush;
    volatile double sum = 0x1p-140;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(v), std::bit_cast<std::uint32_t>(static_cast<float>(sum)));
  }
  // Beyond float32's range: +inf in every order.
  const float big = std::numeric_limits<float>::max();
  ASSERT_TRUE(settle({big, big, big}, false));
  EXPECT_EQ(v, inf);
}

}  // namespace
}  // namespace polyquant::qkeras::internal
