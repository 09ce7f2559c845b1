// Exact sums of floating-point terms, rounded once at the end: the same result in any order, any
// split between threads or blocks, and on any backend (host and device code).
//
// Why: a sum whose result feeds a decision or a gradient (AIMET's grad_scale / grad_offset, QKeras'
// least-squares fits, calibration statistics) must give the same bits on every kernel set, every
// thread count and on the GPU. A float sum in a fixed order pins the order (and so the work split);
// an exact sum frees it. Rounding the exact value once is also the most accurate answer any order
// could give.
//
// Representation. The value is a two's-complement fixed-point integer in units of 2^kLsbExponent,
// held in kLimbs signed 64-bit limbs of 32 bits each (limb i weighs 2^(32 i)), the top limb carrying
// the sign. A term m * 2^e (m an integer of up to 53 bits) is added by splitting m << (e - lsb) over
// three limbs: every limb changes by less than 2^32 per term, so a limb cannot overflow before 2^30
// terms; the accumulator then carries (normalize()) on its own. Non-finite terms are kept aside as
// flags: the result is NaN after a NaN or after both +inf and -inf, else the infinity.
//
// ExactSumFloat32 covers every finite float32 term (units of 2^-149, the smallest subnormal) and any
// float64 term that is a multiple of 2^-149 below 2^190 (e.g. the exact float64 sum of a block of
// float32 terms; see float32_block_sum_is_exact): 352 bits, room for 2^62 terms of float32's maximum.
//
// Rounding: to_float() / to_double() round the exact value to nearest, ties to even, once (no double
// rounding through float64), with subnormal results and overflow to infinity as IEEE arithmetic
// gives them. An exact zero is +0 (as a float sum started from +0 gives it, whatever the terms' signs).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "core/target.h"

namespace polyquant::detail {

template <int kLsbExponent, int kLimbs>
class ExactSum {
 public:
  static constexpr int kLsb = kLsbExponent;
  static constexpr int kLimbCount = kLimbs;
  static constexpr int kBits = 32 * kLimbs;
  // Terms whose magnitude is below 2^kMaxExponent fit (one bit of the top limb is the sign, and 2^30
  // such terms may accumulate before a carry pass).
  static constexpr int kMaxExponent = kLsbExponent + kBits - 1 - 31;

  POLYQUANT_HD ExactSum() { clear(); }

  POLYQUANT_HD void clear() {
    for (int i = 0; i < kLimbs; ++i) limb_[i] = 0;
    pending_ = 0;
    nan_ = pos_inf_ = neg_inf_ = false;
  }

  // Adds a float64 term. Precondition for a finite term: a multiple of 2^kLsbExponent with magnitude
  // below 2^kMaxExponent (fits() checks it; every float32 value fits ExactSumFloat32).
  POLYQUANT_HD void add(double v) {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
    const bool negative = (bits >> 63) != 0;
    const int field = static_cast<int>((bits >> 52) & 0x7ff);
    std::uint64_t m = bits & ((std::uint64_t{1} << 52) - 1);
    if (field == 0x7ff) {
      if (m != 0) nan_ = true;
      else if (negative) neg_inf_ = true;
      else pos_inf_ = true;
      return;
    }
    if (field != 0) m |= std::uint64_t{1} << 52;
    if (m == 0) return;
    // v = m * 2^e, e = max(field, 1) - 1075; with m's trailing zeros moved into e, m * 2^shift in
    // the accumulator's units (shift >= 0 by the precondition).
    const int zeros = std::countr_zero(m);
    add_magnitude(m >> zeros, (field == 0 ? 1 : field) - 1075 + zeros - kLsbExponent, negative);
  }
  POLYQUANT_HD void add(float v) { add(static_cast<double>(v)); }

  // True when add(v) keeps its precondition (non-finite values always do).
  POLYQUANT_HD static bool fits(double v) {
    const std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
    const int field = static_cast<int>((bits >> 52) & 0x7ff);
    const std::uint64_t m = bits & ((std::uint64_t{1} << 52) - 1);
    if (field == 0x7ff || (field == 0 && m == 0)) return true;
    if (field - 1023 >= kMaxExponent) return false;  // |v| >= 2^(field - 1023)
    // The lowest set bit of v's significand must weigh at least 2^kLsbExponent.
    const std::uint64_t full = field == 0 ? m : (m | (std::uint64_t{1} << 52));
    const int low = (field == 0 ? 1 : field) - 1075 + std::countr_zero(full);
    return low >= kLsbExponent;
  }

  // Adds another accumulator's exact value (and its non-finite flags).
  POLYQUANT_HD void merge(const ExactSum& other) {
    ExactSum o = other;
    o.normalize();
    normalize();
    for (int i = 0; i < kLimbs; ++i) limb_[i] += o.limb_[i];
    pending_ = 1;
    nan_ = nan_ || o.nan_;
    pos_inf_ = pos_inf_ || o.pos_inf_;
    neg_inf_ = neg_inf_ || o.neg_inf_;
  }

  // Carries: every limb but the top one into [0, 2^32); the top one keeps the sign.
  POLYQUANT_HD void normalize() {
    for (int i = 0; i + 1 < kLimbs; ++i) {
      const std::int64_t carry = limb_[i] >> 32;  // floor division by 2^32 (arithmetic shift)
      limb_[i] -= carry * (std::int64_t{1} << 32);
      limb_[i + 1] += carry;
    }
    pending_ = 0;
  }

  POLYQUANT_HD bool is_nan() const { return nan_ || (pos_inf_ && neg_inf_); }
  POLYQUANT_HD bool is_infinite() const { return !is_nan() && (pos_inf_ || neg_inf_); }

  // The exact finite part's sign: -1, 0 or 1 (non-finite flags aside).
  POLYQUANT_HD int sign() const {
    ExactSum c = *this;
    c.normalize();
    if (c.limb_[kLimbs - 1] < 0) return -1;
    for (int i = 0; i < kLimbs; ++i) {
      if (c.limb_[i] != 0) return 1;
    }
    return 0;
  }

  // The accumulator as plain parts, for sums spread over many accumulators that meet by integer
  // adds (a GPU's atomics: backends/cuda, exact group sums): the normalized limbs (limb i weighs
  // 2^(32 i) units; every one but the top in [0, 2^32)) and the non-finite flags (kFlagNaN,
  // kFlagPosInf, kFlagNegInf). Limb-wise sums of parts are the parts of the sum: from_parts()
  // takes them back (any limb values, as long as no limb overflowed: each add of normalized
  // parts moves a limb by less than 2^32).
  static constexpr std::uint32_t kFlagNaN = 1, kFlagPosInf = 2, kFlagNegInf = 4;
  POLYQUANT_HD std::uint32_t to_parts(std::int64_t* limbs) const {
    ExactSum c = *this;
    c.normalize();
    for (int i = 0; i < kLimbs; ++i) limbs[i] = c.limb_[i];
    return (nan_ ? kFlagNaN : 0u) | (pos_inf_ ? kFlagPosInf : 0u) | (neg_inf_ ? kFlagNegInf : 0u);
  }
  POLYQUANT_HD static ExactSum from_parts(const std::int64_t* limbs, std::uint32_t flags) {
    ExactSum s;
    for (int i = 0; i < kLimbs; ++i) s.limb_[i] = limbs[i];
    s.pending_ = 1;  // not normalized: every reader normalizes a copy first
    s.nan_ = (flags & kFlagNaN) != 0;
    s.pos_inf_ = (flags & kFlagPosInf) != 0;
    s.neg_inf_ = (flags & kFlagNegInf) != 0;
    return s;
  }

  // The normalized limbs (tests compare them with an independent exact sum).
  POLYQUANT_HD std::int64_t limb(int i) const {
    ExactSum c = *this;
    c.normalize();
    return c.limb_[i];
  }

  POLYQUANT_HD float to_float() const { return round_to<float, 24, -126, 128>(); }
  POLYQUANT_HD double to_double() const { return round_to<double, 53, -1022, 1024>(); }

 private:
  POLYQUANT_HD void add_magnitude(std::uint64_t m, int shift, bool negative) {
    // m < 2^53 split in 32-bit halves, each shifted by shift % 32 within limbs shift / 32 ...
    const int index = shift >> 5, offset = shift & 31;
    const std::uint64_t lo = (m & 0xffffffffu) << offset, hi = (m >> 32) << offset;
    const std::int64_t d0 = static_cast<std::int64_t>(lo & 0xffffffffu);
    const std::int64_t d1 = static_cast<std::int64_t>((lo >> 32) + (hi & 0xffffffffu));
    const std::int64_t d2 = static_cast<std::int64_t>(hi >> 32);
    if (negative) {
      limb_[index] -= d0;
      if (index + 1 < kLimbs) limb_[index + 1] -= d1;
      if (index + 2 < kLimbs) limb_[index + 2] -= d2;
    } else {
      limb_[index] += d0;
      if (index + 1 < kLimbs) limb_[index + 1] += d1;
      if (index + 2 < kLimbs) limb_[index + 2] += d2;
    }
    // Each limb moved by less than 2^33 (d1 sums two parts below 2^32): carry long before 2^62.
    if (++pending_ == (std::uint32_t{1} << 28)) normalize();
  }

  // Round to nearest even into T with `kDigits` significand bits, normal exponents from kMinExp,
  // overflow at 2^kMaxExp.
  template <class T, int kDigits, int kMinExp, int kMaxExp>
  POLYQUANT_HD T round_to() const {
    if (is_nan()) return std::numeric_limits<T>::quiet_NaN();
    if (pos_inf_) return std::numeric_limits<T>::infinity();
    if (neg_inf_) return -std::numeric_limits<T>::infinity();
    ExactSum c = *this;
    c.normalize();
    const bool negative = c.limb_[kLimbs - 1] < 0;
    // The magnitude as unsigned 32-bit limbs (two's complement negation when negative).
    std::uint32_t mag[kLimbs];
    std::uint64_t borrow = 1;
    for (int i = 0; i < kLimbs; ++i) {
      const std::uint32_t w = static_cast<std::uint32_t>(static_cast<std::uint64_t>(c.limb_[i]) & 0xffffffffu);
      if (negative) {
        const std::uint64_t s = static_cast<std::uint64_t>(static_cast<std::uint32_t>(~w)) + borrow;
        mag[i] = static_cast<std::uint32_t>(s);
        borrow = s >> 32;
      } else {
        mag[i] = w;
      }
    }
    int top = kLimbs - 1;
    while (top >= 0 && mag[top] == 0) --top;
    if (top < 0) return T(0);  // an exact zero: +0
    // p: the index (in units of 2^kLsbExponent) of the highest set bit.
    const int p = 32 * top + 31 - std::countl_zero(mag[top]);
    const int exponent = p + kLsbExponent;  // the value lies in [2^exponent, 2^(exponent + 1))
    // Significand bits kept: kDigits for a normal result, fewer below 2^kMinExp (subnormal).
    const int keep = exponent >= kMinExp ? kDigits : kDigits - (kMinExp - exponent);
    // Below half the smallest subnormal: rounds to a zero of the sum's sign (keep == 0 is exactly
    // the half-way band, handled by the round bit below).
    if (keep < 0) return negative ? -T(0) : T(0);
    // kept = bits [low, p] (none when keep == 0); round bit = bit low - 1; sticky = any bit below.
    const int low = p - keep + 1;
    std::uint64_t kept = 0;
    for (int b = p; b >= low && b >= 0; --b) kept = (kept << 1) | bit(mag, b);
    if (low < 0) kept <<= -low;  // units finer than the target's never reach here, but stay exact
    const int round_index = low - 1;
    const std::uint64_t round_bit = round_index >= 0 ? bit(mag, round_index) : 0;
    bool sticky = false;
    for (int i = 0; i < kLimbs && !sticky; ++i) {
      const int lo_bit = 32 * i;
      if (lo_bit >= round_index) break;
      const int n = round_index - lo_bit;  // bits of limb i below round_index
      const std::uint32_t mask = n >= 32 ? 0xffffffffu : ((std::uint32_t{1} << n) - 1);
      sticky = (mag[i] & mask) != 0;
    }
    if (round_bit && (sticky || (kept & 1))) ++kept;
    // value = kept * 2^(low + kLsbExponent): exact in T (kept <= 2^kDigits) unless it overflows.
    const int scale = low + kLsbExponent;
    if (scale + 64 - std::countl_zero(kept) > kMaxExp) {
      return negative ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    }
    const T r = scale_by_power_of_two(static_cast<T>(kept), scale);
    return negative ? -r : r;
  }

  POLYQUANT_HD static std::uint64_t bit(const std::uint32_t* mag, int b) { return (mag[b >> 5] >> (b & 31)) & 1u; }

  // x * 2^e, exact: x is an integer below 2^54 and the result is representable (overflow was
  // handled by the caller). A result below the normal range is reached through a normal
  // intermediate: a product that is exactly representable, subnormal or not, is not rounded.
  template <class T>
  POLYQUANT_HD static T scale_by_power_of_two(T x, int e) {
    constexpr int kMinNormal = std::numeric_limits<T>::min_exponent - 1;  // -126 / -1022
    static_assert(kLsbExponent >= kMinNormal || kLsbExponent + 64 >= kMinNormal,
                  "the two-step scaling below needs e + 64 to be a normal exponent for every e >= kLsbExponent");
    if (e >= kMinNormal) return x * power_of_two<T>(e);
    return x * power_of_two<T>(e + 64) * power_of_two<T>(-64);
  }

  template <class T>
  POLYQUANT_HD static T power_of_two(int e) {
    if constexpr (sizeof(T) == 4) return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23);
    else return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
  }

  std::int64_t limb_[kLimbs];
  std::uint32_t pending_;
  bool nan_, pos_inf_, neg_inf_;
};

// Every float32 term, exactly: units of 2^-149, 11 limbs (352 bits).
using ExactSumFloat32 = ExactSum<-149, 11>;
// Every float64 term, exactly: units of 2^-1074 (the smallest subnormal), 67 limbs (2144 bits).
// Round it with to_double() only.
using ExactSumFloat64 = ExactSum<-1074, 67>;

// s = a + t, and whether that float64 add was exact (no rounding, no overflow). By Fast2Sum, with
// |u| >= |v| and round to nearest, fl(u + v) - u is computed exactly and equals v exactly when the
// add did not round; testing both operand orders covers either magnitude order. Any NaN or
// infinite operand or sum fails the test (inf - inf is NaN, and comparisons with NaN are false).
// So a float64 accumulator that only takes the adds this accepts holds its terms' exact sum.
POLYQUANT_HD inline bool exact_float64_add(double a, double t, double& s) {
  s = a + t;
  return s - a == t && s - t == a;
}

// True when any float64 summation order of n float32 terms gives their exact sum: all are multiples
// of 2^(min_field - 150) (min_field: the smallest biased exponent field among the nonzero terms,
// 1 for subnormals) and each is below 2^(max_field - 126), so every partial sum is a multiple of the
// first below n 2^(max_field - 126): it needs max_field - min_field + 24 + ceil(log2 n) bits, which
// float64 holds when that is at most 53.
POLYQUANT_HD inline bool float32_block_sum_is_exact(int min_field, int max_field, std::int64_t n) {
  const int log2n = n <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<std::uint64_t>(n - 1)));  // ceil(log2 n)
  return max_field - min_field + 24 + log2n <= 53;
}

}  // namespace polyquant::detail
