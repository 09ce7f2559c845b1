// floor(log2(v)) as the host's C library computes log2 (numpy calls it; FloatQuant's exponent), for
// device code, which cannot call it: CUDA's log2f differs from glibc's in the last bit (the GPU
// suite found log2f(2.5) off by one ulp), and near a power of two the last bit decides the floor.
//
// For a positive normal v = 2^k * 1.m, log2(v) lies in [k, k + 1) and its floor is k, except just
// below 2^(k + 1), where log2(v) rounds up to the integer k + 1. Which significands round up is the
// library's decision; whatever it is, it is a run of the binade's top significands (log2 is
// increasing), so one number per binade describes it: the first significand from which the floor is
// k + 1. FloorLog2RoundUp holds that number for every binade of float32, float64 and float16 (whose
// log2 numpy computes as float16(log2f(float(v)))), measured once from the very functions the CPU
// reference calls (measure_floor_log2_round_up) and copied to the device, where floor_log2_by_table
// computes the floor from the exponent and significand bits. tests/cpp/core/test_floor_log2.cc
// checks, on the host, that floor_log2_by_table equals the library's floor(log2(v)) on every top
// significand of every binade (and every float16).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/half.h"
#include "core/scalar_math.h"
#include "core/target.h"
#include "core/x86_nan.h"

namespace polyquant::detail {

// The significands (as integers) searched from: below them every binade's floor is its exponent
// (for float32 the vector kernels rely on the same bound, kLog2ExactMantissaLimit).
inline constexpr std::uint32_t kFloorLog2SearchF32 = (1u << 23) - (1u << 11);
inline constexpr std::uint64_t kFloorLog2SearchF64 = (std::uint64_t{1} << 52) - (std::uint64_t{1} << 11);
inline constexpr std::uint16_t kFloorLog2SearchF16 = 0;  // float16: every significand is searched

struct FloorLog2RoundUp {
  // By biased exponent: the first significand whose floor(log2) is the exponent + 1; 2^23 / 2^52 /
  // 2^10 (one past the last) where none rounds up.
  std::uint32_t f32[256];
  std::uint64_t f64[2048];
  std::uint16_t f16[32];
};

inline namespace POLYQUANT_TARGET_NAMESPACE {

// The bit layout of each type the table covers: its bits' integer type, the widths of exponent and
// significand, the bias, and the table's row for it.
template <class T>
struct FloorLog2Layout;
template <>
struct FloorLog2Layout<float> {
  using Bits = std::uint32_t;
  static constexpr int kMantissaBits = 23, kExponentMask = 0xFF, kBias = 127;
  POLYQUANT_HD static const std::uint32_t* row(const FloorLog2RoundUp& t) { return t.f32; }
  POLYQUANT_HD static Bits bits(float v) { return std::bit_cast<Bits>(v); }
  POLYQUANT_HD static float from_int(int k) { return static_cast<float>(k); }
};
template <>
struct FloorLog2Layout<double> {
  using Bits = std::uint64_t;
  static constexpr int kMantissaBits = 52, kExponentMask = 0x7FF, kBias = 1023;
  POLYQUANT_HD static const std::uint64_t* row(const FloorLog2RoundUp& t) { return t.f64; }
  POLYQUANT_HD static Bits bits(double v) { return std::bit_cast<Bits>(v); }
  POLYQUANT_HD static double from_int(int k) { return static_cast<double>(k); }
};
template <>
struct FloorLog2Layout<Half> {
  using Bits = std::uint16_t;
  static constexpr int kMantissaBits = 10, kExponentMask = 0x1F, kBias = 15;
  POLYQUANT_HD static const std::uint16_t* row(const FloorLog2RoundUp& t) { return t.f16; }
  POLYQUANT_HD static Bits bits(Half v) { return v.bits; }
  POLYQUANT_HD static Half from_int(int k) { return Half(static_cast<float>(k)); }
};

// floor(log2(v)) from the table, for positive v (FloatQuant's |x / s| + tiny): the exponent, plus one
// from the binade's round-up significand on. NaN and +inf as floor(log2(v)) gives them: +inf, and
// the NaN quieted (float16's log2 is float16(log2f(float(v))): the same).
template <class T>
POLYQUANT_HD inline T floor_log2_by_table(const FloorLog2RoundUp& t, T v) {
  using L = FloorLog2Layout<T>;
  using Bits = typename L::Bits;
  const Bits bits = L::bits(v);
  const Bits mantissa_mask = static_cast<Bits>((Bits{1} << L::kMantissaBits) - 1);
  const int biased = static_cast<int>((bits >> L::kMantissaBits) & L::kExponentMask);
  const Bits mantissa = static_cast<Bits>(bits & mantissa_mask);
  if (biased == L::kExponentMask) {
    if (mantissa == 0) return v;  // +inf
    const Bits quiet_bit = static_cast<Bits>(Bits{1} << (L::kMantissaBits - 1));
    if constexpr (std::is_same_v<T, Half>) return Half::from_bits(static_cast<std::uint16_t>(bits | quiet_bit));
    else return std::bit_cast<T>(static_cast<Bits>(bits | quiet_bit));
  }
  return L::from_int(biased - L::kBias + (mantissa >= L::row(t)[biased] ? 1 : 0));
}

}  // namespace POLYQUANT_TARGET_NAMESPACE

// The device's copy of the table: each CUDA translation unit whose kernels read it defines one
// (POLYQUANT_DEFINE_FLOOR_LOG2_TABLE, at namespace scope: whole-program compilation shares no device
// symbols between units) and fills it before launching them (backends/cuda/row_kernels.cu).
// Both have internal linkage: the CUDA library links six builds of its kernels' unit.
#if defined(__CUDACC__)
static __device__ const FloorLog2RoundUp& floor_log2_round_up();
#define POLYQUANT_DEFINE_FLOOR_LOG2_TABLE()                                                                  \
  namespace polyquant::detail {                                                                              \
  static __constant__ FloorLog2RoundUp floor_log2_round_up_on_device;                                        \
  static __device__ const FloorLog2RoundUp& floor_log2_round_up() { return floor_log2_round_up_on_device; }  \
  }
#endif

inline namespace POLYQUANT_TARGET_NAMESPACE {

// floor(log2(v)) in T (FloatQuant's floor(log2(|x / s| + tiny))): the C library's on the host, the
// table's on the device (equal, see above).
template <class T>
POLYQUANT_HD inline T floor_log2_t(T v) {
#if defined(__CUDA_ARCH__)
  return floor_log2_by_table(floor_log2_round_up(), v);
#else
  return floor_t(log2_t(v));
#endif
}

// The first significand in [lo, end) for which rounds_up holds (end: none), by binary search: the
// significands that round up are a run at the top of the binade.
template <class Bits, class RoundsUp>
inline Bits first_rounding_up(Bits lo, Bits end, RoundsUp&& rounds_up) {
  Bits hi = end;  // answer in [lo, end]
  while (lo < hi) {
    const Bits mid = lo + (hi - lo) / 2;
    if (rounds_up(mid)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

// The float16 row of the table (FloorLog2RoundUp::f16), measured as below; the CPU's float16 work
// in the float32 vector kernels reads it too (QONNX FloatQuant).
inline void measure_floor_log2_round_up_f16(std::uint16_t (&f16)[32]) {
  for (unsigned b = 0; b < 32; ++b) {
    f16[b] = 1u << 10;
    if (b == 0 || b == 31) continue;
    const float next = static_cast<float>(static_cast<int>(b) - 14);
    f16[b] = static_cast<std::uint16_t>(first_rounding_up(unsigned{kFloorLog2SearchF16}, 1u << 10, [&](unsigned m) {
      return static_cast<float>(floor_t(log2_t(Half::from_bits(static_cast<std::uint16_t>((b << 10) | m))))) == next;
    }));
  }
}

// Measures the table from floor_t(log2_t(v)) on the host: per binade, a binary search over the
// significands from kFloorLog2Search* for the first whose floor is the exponent + 1 (the run is
// contiguous: test_floor_log2.cc checks every significand searched).
inline FloorLog2RoundUp measure_floor_log2_round_up() {
  FloorLog2RoundUp t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    t.f32[b] = 1u << 23;
    if (b == 0 || b == 255) continue;
    const float next = static_cast<float>(static_cast<int>(b) - 126);
    t.f32[b] = first_rounding_up(kFloorLog2SearchF32, std::uint32_t{1} << 23, [&](std::uint32_t m) {
      return floor_t(log2_t(std::bit_cast<float>((b << 23) | m))) == next;
    });
  }
  for (std::uint64_t b = 0; b < 2048; ++b) {
    t.f64[b] = std::uint64_t{1} << 52;
    if (b == 0 || b == 2047) continue;
    const double next = static_cast<double>(static_cast<int>(b) - 1022);
    t.f64[b] = first_rounding_up(kFloorLog2SearchF64, std::uint64_t{1} << 52, [&](std::uint64_t m) {
      return floor_t(log2_t(std::bit_cast<double>((b << 52) | m))) == next;
    });
  }
  measure_floor_log2_round_up_f16(t.f16);
  return t;
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
