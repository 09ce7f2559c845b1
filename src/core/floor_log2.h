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

// floor(log2(v)) from the table, for positive v (FloatQuant's |x / s| + tiny); NaN and +inf as
// floor(log2(v)) gives them (the NaN quieted, +inf).
POLYQUANT_HD inline float floor_log2_by_table(const FloorLog2RoundUp& t, float v) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t biased = (bits >> 23) & 0xFFu;
  if (biased == 0xFFu) return std::isnan(v) ? quieted(v) : v;
  const std::uint32_t mantissa = bits & 0x7FFFFFu;
  return static_cast<float>(static_cast<int>(biased) - 127 + (mantissa >= t.f32[biased] ? 1 : 0));
}
POLYQUANT_HD inline double floor_log2_by_table(const FloorLog2RoundUp& t, double v) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(v);
  const std::uint64_t biased = (bits >> 52) & 0x7FFu;
  if (biased == 0x7FFu) return std::isnan(v) ? quieted(v) : v;
  const std::uint64_t mantissa = bits & 0xFFFFFFFFFFFFFull;
  return static_cast<double>(static_cast<int>(biased) - 1023 + (mantissa >= t.f64[biased] ? 1 : 0));
}
POLYQUANT_HD inline Half floor_log2_by_table(const FloorLog2RoundUp& t, Half v) {
  const unsigned biased = (v.bits >> 10) & 0x1Fu;
  if (biased == 0x1Fu) {  // float16(log2f(float(v))): NaN quieted, +inf
    return (v.bits & 0x3FFu) != 0 ? Half::from_bits(static_cast<std::uint16_t>(v.bits | 0x0200u)) : v;
  }
  const unsigned mantissa = v.bits & 0x3FFu;
  return Half(static_cast<float>(static_cast<int>(biased) - 15 + (mantissa >= t.f16[biased] ? 1 : 0)));
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

// Measures the table from floor_t(log2_t(v)) on the host: per binade, a binary search over the
// significands from kFloorLog2Search* for the first whose floor is the exponent + 1 (the run is
// contiguous: test_floor_log2.cc checks every significand searched).
inline FloorLog2RoundUp measure_floor_log2_round_up() {
  FloorLog2RoundUp t{};
  const auto first_rounding_up = [](auto lo, auto end, auto rounds_up) {
    auto hi = end;  // answer in [lo, end]; end: none
    while (lo < hi) {
      const auto mid = lo + (hi - lo) / 2;
      if (rounds_up(mid)) hi = mid;
      else lo = mid + 1;
    }
    return hi;
  };
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
  for (unsigned b = 0; b < 32; ++b) {
    t.f16[b] = 1u << 10;
    if (b == 0 || b == 31) continue;
    const float next = static_cast<float>(static_cast<int>(b) - 14);
    t.f16[b] = static_cast<std::uint16_t>(first_rounding_up(unsigned{kFloorLog2SearchF16}, 1u << 10, [&](unsigned m) {
      return static_cast<float>(floor_t(log2_t(Half::from_bits(static_cast<std::uint16_t>((b << 10) | m))))) == next;
    }));
  }
  return t;
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
