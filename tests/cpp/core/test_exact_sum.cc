// ExactSum: exact accumulation (checked against a 128-bit integer sum where the range allows one,
// and order / split / merge independence everywhere), and correct rounding (checked with the
// accumulator's own exact arithmetic: the result is a nearest float, ties to even).
#include "core/exact_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace polyquant::detail {
namespace {

using Sum = ExactSumFloat32;

Sum sum_of(const std::vector<float>& t) {
  Sum s;
  for (float v : t) s.add(v);
  return s;
}

bool same_limbs(const Sum& a, const Sum& b) {
  for (int i = 0; i < Sum::kLimbCount; ++i) {
    if (a.limb(i) != b.limb(i)) return false;
  }
  return true;
}

std::uint32_t bits(float v) { return std::bit_cast<std::uint32_t>(v); }
std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }

// Every finite float32 bit pattern is equally likely (all exponents, subnormals, both zeros).
std::vector<float> random_finite_floats(std::mt19937_64& rng, std::size_t n) {
  std::vector<float> t;
  while (t.size() < n) {
    const float v = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isfinite(v)) t.push_back(v);
  }
  return t;
}

// Terms m * 2^e with |m| < 2^24 and e in [-63, 16]: their sum is an exact __int128 in units of
// 2^-63 (each term below 2^40, at most a few thousand terms).
struct Term {
  std::int32_t m;
  int e;
  float value() const { return std::ldexp(static_cast<float>(m), e); }  // exact: |m| < 2^24
};

std::vector<Term> bounded_terms(std::mt19937_64& rng, std::size_t n) {
  std::vector<Term> t(n);
  std::uniform_int_distribution<int> e(-63, 16);
  std::uniform_int_distribution<std::int32_t> m(-(1 << 24) + 1, (1 << 24) - 1);
  for (Term& v : t) v = {m(rng), e(rng)};
  return t;
}

void expect_correctly_rounded_somewhere(const Sum& s);

TEST(ExactSum, EqualsA128BitIntegerSum) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const auto terms = bounded_terms(rng, 1 + rng() % 3000);
    __int128 oracle = 0;
    ExactSum<-63, 5> s;  // units of 2^-63, 160 bits
    std::vector<float> t;
    for (const Term& v : terms) {
      oracle += static_cast<__int128>(v.m) * (static_cast<__int128>(1) << (v.e + 63));
      s.add(v.value());
      t.push_back(v.value());
    }
    // The normalized limbs are the two's-complement digits of the oracle.
    auto u = static_cast<unsigned __int128>(oracle);
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(s.limb(i), static_cast<std::int64_t>(static_cast<std::uint32_t>(u))) << "trial " << trial << " limb " << i;
      u >>= 32;
    }
    ASSERT_EQ(s.limb(4), oracle < 0 ? -1 : 0);
    // The float32 accumulator holds the same value: it rounds identically.
    const Sum f = sum_of(t);
    ASSERT_EQ(bits(f.to_float()), bits(s.to_float()));
    ASSERT_EQ(bits(f.to_double()), bits(s.to_double()));
    expect_correctly_rounded_somewhere(f);
  }
}

TEST(ExactSum, AnyOrderSplitAndMergeGiveTheSameBits) {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    auto t = random_finite_floats(rng, 1 + rng() % 2000);
    const Sum whole = sum_of(t);
    std::shuffle(t.begin(), t.end(), rng);
    const Sum shuffled = sum_of(t);
    // Random split into parts, merged in a random order.
    std::vector<Sum> parts(1 + rng() % 7);
    for (float v : t) parts[rng() % parts.size()].add(v);
    std::shuffle(parts.begin(), parts.end(), rng);
    Sum merged;
    for (const Sum& p : parts) merged.merge(p);
    ASSERT_TRUE(same_limbs(whole, shuffled));
    ASSERT_TRUE(same_limbs(whole, merged));
    ASSERT_EQ(bits(whole.to_float()), bits(merged.to_float()));
    ASSERT_EQ(bits(whole.to_double()), bits(merged.to_double()));
  }
}

// r is S rounded to nearest, ties to even, in T: 2S - r - next(r) <= 0 <= 2S - r - prev(r), and on
// a tie r's significand is even; computed exactly in the accumulator (terms of T widened exactly).
template <class T>
void expect_correctly_rounded(const Sum& s, T r) {
  ASSERT_FALSE(std::isnan(r));
  const T inf = std::numeric_limits<T>::infinity();
  if (std::isinf(r)) {  // overflow: |S| is at least max + half an ulp of max (the tie goes up, to even)
    const T max = std::numeric_limits<T>::max();
    const T half_ulp = (max - std::nextafter(max, T(0))) / 2;
    Sum d = s;
    d.add(r > 0 ? -static_cast<double>(max) : static_cast<double>(max));
    d.add(r > 0 ? -static_cast<double>(half_ulp) : static_cast<double>(half_ulp));
    EXPECT_GE(r > 0 ? d.sign() : -d.sign(), 0);
    return;
  }
  auto twice_minus = [&](T a, T b) {
    Sum d = s;
    d.merge(s);
    d.add(-static_cast<double>(a));
    d.add(-static_cast<double>(b));
    return d.sign();
  };
  const T up = std::nextafter(r, inf), down = std::nextafter(r, -inf);
  if (!std::isinf(up) && Sum::fits(static_cast<double>(up))) {
    const int c = twice_minus(r, up);
    EXPECT_LE(c, 0) << "closer to the next float up";
    if (c == 0) {
      EXPECT_EQ(bits(r) & 1u, 0u) << "a tie must go to the even neighbour";
    }
  }
  if (!std::isinf(down) && Sum::fits(static_cast<double>(down))) {
    const int c = twice_minus(r, down);
    EXPECT_GE(c, 0) << "closer to the next float down";
    if (c == 0) {
      EXPECT_EQ(bits(r) & 1u, 0u) << "a tie must go to the even neighbour";
    }
  }
}

void expect_correctly_rounded_somewhere(const Sum& s) { expect_correctly_rounded<float>(s, s.to_float()); }

TEST(ExactSum, RoundsOnceToNearestEven) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    // Mixed magnitudes: cancellation, subnormal results, results far from every term.
    std::vector<float> t;
    const int n = 1 + static_cast<int>(rng() % 40);
    const int span = static_cast<int>(rng() % 60);
    const int base = -150 + static_cast<int>(rng() % 270);
    std::uniform_int_distribution<std::int32_t> m(-(1 << 24) + 1, (1 << 24) - 1);
    for (int i = 0; i < n; ++i) {
      const int e = std::clamp(base + static_cast<int>(rng() % (span + 1)), -149, 104);
      t.push_back(std::ldexp(static_cast<float>(m(rng)), e));
    }
    const Sum s = sum_of(t);
    expect_correctly_rounded<float>(s, s.to_float());
    expect_correctly_rounded<double>(s, s.to_double());  // where double's neighbours are in the units
  }
}

TEST(ExactSum, ConstructedTiesSpecialsAndEdges) {
  auto f = [](std::vector<float> t) { return sum_of(t).to_float(); };
  const float big = 1e30f, max = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(f({big, 1.0f, -big}), 1.0f);                    // cancellation keeps the small term exactly
  EXPECT_EQ(f({16777216.0f, 1.0f}), 16777216.0f);           // 2^24 + 1: a tie, to even (down)
  EXPECT_EQ(f({16777218.0f, 1.0f}), 16777220.0f);           // 2^24 + 3: a tie, to even (up)
  EXPECT_EQ(f({16777216.0f, 1.0f, std::ldexp(1.0f, -100)}), 16777218.0f);  // just above the tie
  EXPECT_EQ(f({16777216.0f, 1.0f, -std::ldexp(1.0f, -100)}), 16777216.0f);  // just below it
  EXPECT_EQ(f({-16777216.0f, -1.0f}), -16777216.0f);
  // Rounded once: a float64 chain (2^24 + 2^-40 -> 2^24, + 1 -> a float32 tie -> 2^24) rounds twice.
  EXPECT_EQ(f({16777216.0f, std::ldexp(1.0f, -40), 1.0f}), 16777218.0f);
  EXPECT_EQ(f({tiny, tiny, tiny}), 3 * tiny);               // subnormal results, exact
  EXPECT_EQ(f({std::numeric_limits<float>::min(), -tiny}), std::nextafter(std::numeric_limits<float>::min(), 0.0f));
  EXPECT_EQ(f({max, max}), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f({-max, -max}), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f({max, std::ldexp(1.0f, 103)}), std::numeric_limits<float>::infinity());  // the tie above max: to even = 2^128
  EXPECT_EQ(f({max, std::ldexp(1.0f, 102)}), max);
  EXPECT_EQ(f({max, max, -max}), max);                      // no intermediate overflow
  EXPECT_EQ(bits(f({-0.0f, -0.0f})), bits(0.0f));           // an exact zero is +0
  EXPECT_EQ(bits(f({})), bits(0.0f));
  EXPECT_EQ(bits(f({1.5f, -1.5f})), bits(0.0f));
  EXPECT_TRUE(std::isnan(f({1.0f, std::nanf("")})));
  EXPECT_TRUE(std::isnan(f({std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})));
  EXPECT_EQ(f({std::numeric_limits<float>::infinity(), -max, -max}), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f({-std::numeric_limits<float>::infinity(), 1.0f}), -std::numeric_limits<float>::infinity());
  // to_double of float32 terms: exact whenever the sum has at most 53 significant bits.
  EXPECT_EQ(sum_of({16777216.0f, 1.0f}).to_double(), 16777217.0);
  EXPECT_EQ(sum_of({max, max}).to_double(), 2.0 * static_cast<double>(max));
  EXPECT_EQ(sum_of({tiny, -0.0f}).to_double(), static_cast<double>(tiny));
}

TEST(ExactSum, Float64TermsWithinTheUnits) {
  Sum s;
  EXPECT_TRUE(Sum::fits(std::ldexp(1.0, -149)));
  EXPECT_FALSE(Sum::fits(std::ldexp(1.0, -150)));
  EXPECT_FALSE(Sum::fits(std::ldexp(1.0, Sum::kMaxExponent)));
  EXPECT_TRUE(Sum::fits(std::ldexp(1.0, Sum::kMaxExponent - 1)));
  EXPECT_TRUE(Sum::fits(std::numeric_limits<double>::quiet_NaN()));
  const double a = std::ldexp(3.0, 120), b = std::ldexp(1.0, -149);
  s.add(a);
  s.add(b);
  s.add(-a);
  EXPECT_EQ(s.to_double(), b);
  EXPECT_EQ(s.to_float(), std::numeric_limits<float>::denorm_min());
}

TEST(ExactSum, BlockCriterionMeansEveryFloat64OrderIsExact) {
  std::mt19937_64 rng(4);
  int checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 256);
    const int lo = 1 + static_cast<int>(rng() % 200), width = static_cast<int>(rng() % 40);
    std::vector<float> t(static_cast<std::size_t>(n));
    int min_field = 255, max_field = 0;
    for (float& v : t) {
      const int field = std::min(lo + static_cast<int>(rng() % (width + 1)), 254);
      v = std::bit_cast<float>(static_cast<std::uint32_t>(field) << 23 | static_cast<std::uint32_t>(rng() & 0x807fffffu));
      min_field = std::min(min_field, field);
      max_field = std::max(max_field, field);
    }
    if (!float32_block_sum_is_exact(min_field, max_field, n)) continue;
    ++checked;
    const double exact = sum_of(t).to_double();
    for (int order = 0; order < 3; ++order) {
      std::shuffle(t.begin(), t.end(), rng);
      double chain = 0;
      for (float v : t) chain += static_cast<double>(v);
      ASSERT_EQ(bits(chain), bits(exact));
    }
  }
  EXPECT_GT(checked, 200);
}

}  // namespace
}  // namespace polyquant::detail
