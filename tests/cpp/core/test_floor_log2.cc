// FloatQuant's floor(log2(v)) by table (core/floor_log2.h), the device's way, against the C
// library's floor(log2(v)) on the host, the CPU reference's way: every significand the table's
// measurement searches, in every binade of float32, float64 and float16, plus a sample of the rest
// of each binade (where the floor must be the exponent) and the non-finite values.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>

#include "core/floor_log2.h"

namespace polyquant::detail {
namespace {

const FloorLog2RoundUp& table() {
  static const FloorLog2RoundUp t = measure_floor_log2_round_up();
  return t;
}

TEST(FloorLog2, Float32TableEqualsTheCLibraryOnEveryBinade) {
  int rounding_up = 0;
  for (std::uint32_t b = 1; b < 255; ++b) {
    for (std::uint32_t m = 0; m < (1u << 23); m += (m < kFloorLog2SearchF32 ? 4093 : 1)) {
      const float v = std::bit_cast<float>((b << 23) | m);
      const float want = floor_t(log2_t(v)), got = floor_log2_by_table(table(), v);
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want)) << "v = " << v;
    }
    rounding_up += table().f32[b] < (1u << 23);
  }
  EXPECT_GT(rounding_up, 100);  // most binades end in significands whose log2 rounds up
}

TEST(FloorLog2, Float64TableEqualsTheCLibraryOnEveryBinade) {
  int rounding_up = 0;
  for (std::uint64_t b = 1; b < 2047; ++b) {
    for (std::uint64_t m = 0; m < (std::uint64_t{1} << 52);
         m += (m < kFloorLog2SearchF64 ? (std::uint64_t{1} << 52) / 1021 : 1)) {
      const double v = std::bit_cast<double>((b << 52) | m);
      const double want = floor_t(log2_t(v)), got = floor_log2_by_table(table(), v);
      ASSERT_EQ(std::bit_cast<std::uint64_t>(got), std::bit_cast<std::uint64_t>(want)) << "v = " << v;
    }
    rounding_up += table().f64[b] < (std::uint64_t{1} << 52);
  }
  EXPECT_GT(rounding_up, 1000);
}

TEST(FloorLog2, Float16TableEqualsTheCLibraryOnEveryValue) {
  for (std::uint32_t bits = 0x0400; bits <= 0x7FFF; ++bits) {  // positive normals, +inf and NaNs
    const Half v = Half::from_bits(static_cast<std::uint16_t>(bits));
    ASSERT_EQ(floor_log2_by_table(table(), v).bits, floor_t(log2_t(v)).bits) << "bits = " << bits;
  }
}

TEST(FloorLog2, NonFiniteValuesAsTheCLibraryGivesThem) {
  for (std::uint32_t bits : {0x7F800000u, 0x7FC00000u, 0x7FC12345u, 0x7F812345u}) {
    const float v = std::bit_cast<float>(bits);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(floor_log2_by_table(table(), v)), std::bit_cast<std::uint32_t>(floor_t(log2_t(v))));
  }
  for (std::uint64_t bits : {0x7FF0000000000000ull, 0x7FF8000000000000ull, 0x7FF8000000012345ull, 0x7FF0000000012345ull}) {
    const double v = std::bit_cast<double>(bits);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(floor_log2_by_table(table(), v)), std::bit_cast<std::uint64_t>(floor_t(log2_t(v))));
  }
}

}  // namespace
}  // namespace polyquant::detail
