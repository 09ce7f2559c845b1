// AIMET quantizer-module parameter arithmetic (polyquant/aimet_quantizer.h): minimum scale,
// scale / offset / range from min and max, a calibration batch's encoding, and the LPBQ scales, against
// values worked out by hand in float32 (the Python golden replay checks them against aimet-torch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "polyquant/aimet_quantizer.h"
#include "polyquant/error.h"

namespace polyquant::aimet {
namespace {

constexpr Grid kU8{0, 255};
constexpr Grid kS8{-128, 127};

TEST(AimetQuantizer, MinimumScale) {
  EXPECT_EQ(minimum_scale(255), static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(minimum_scale(15), static_cast<double>(std::numeric_limits<float>::epsilon()));
  EXPECT_EQ(minimum_scale(4294967295LL), 0.01 / 4294967295.0);
}

TEST(AimetQuantizer, SymmetricOffsetRoundsHalfToEven) {
  EXPECT_EQ(symmetric_offset(kS8), 0.0f);  // -round(-0.5) = 0
  EXPECT_FALSE(std::signbit(symmetric_offset(kS8)));
  EXPECT_EQ(symmetric_offset(kU8), -128.0f);       // -round(127.5) = -128
  EXPECT_EQ(symmetric_offset(Grid{0, 1}), 0.0f);   // -round(0.5) = 0
  EXPECT_EQ(symmetric_offset(Grid{0, 3}), -2.0f);  // -round(1.5) = -2
  EXPECT_EQ(symmetric_offset(Grid{-127, 127}), 0.0f);
}

TEST(AimetQuantizer, ScaleIsAbsoluteAndFloored) {
  const std::vector<float> mn{-1.0f, 2.0f, 0.0f, -std::numeric_limits<float>::infinity()};
  const std::vector<float> mx{1.0f, -2.0f, 0.0f, 1.0f};
  std::vector<float> s(4);
  quantizer_scale(mn, mx, kU8, s);
  EXPECT_EQ(s[0], 2.0f / 255.0f);
  EXPECT_EQ(s[1], 4.0f / 255.0f);  // min > max: |.|
  EXPECT_EQ(s[2], std::numeric_limits<float>::epsilon());
  EXPECT_TRUE(std::isinf(s[3]));
}

TEST(AimetQuantizer, AsymmetricOffsetIsClampedIntoTheGrid) {
  const std::vector<float> mn{-1.0f, 5.0f, -10.0f, -0.001f};
  const std::vector<float> sc{2.0f / 255.0f, 1.0f, 0.01f, 1.0f};
  std::vector<float> o(4);
  quantizer_offset(mn, sc, kU8, false, o);
  EXPECT_EQ(o[0], std::nearbyint(-1.0f / (2.0f / 255.0f)));  // -127.5 -> -128 (half to even)
  EXPECT_EQ(o[1], 0.0f);                                      // 5 clamped to -qmin = 0
  EXPECT_EQ(o[2], -255.0f);                                   // -1000 clamped to -qmax
  EXPECT_TRUE(std::signbit(o[3]));                            // round(-0.001) = -0.0 survives
  quantizer_offset(mn, sc, kS8, false, o);
  EXPECT_EQ(o[1], 128.0f);  // 5 + 128 = 133 clamped to 128
  quantizer_offset(mn, sc, kU8, true, o);
  for (float v : o) EXPECT_EQ(v, -128.0f);
}

TEST(AimetQuantizer, RangeIsGridSnapped) {
  const std::vector<float> sc{0.5f}, of{-3.0f};
  std::vector<float> mn(1), mx(1);
  quantizer_range(sc, of, kU8, mn, mx);
  EXPECT_EQ(mn[0], -1.5f);
  EXPECT_EQ(mx[0], 126.0f);
}

TEST(AimetQuantizer, DynamicEncodingIsNeitherAbsNorClamped) {
  const std::vector<float> mn{2.0f, -1.0f}, mx{-2.0f, 1.0f};
  std::vector<float> s(2), o(2);
  scale_offset_from_range(mn, mx, kU8, false, s, o);
  EXPECT_EQ(s[0], -4.0f / 255.0f);
  EXPECT_EQ(o[0], std::nearbyint(2.0f / (-4.0f / 255.0f)));  // -127.5 -> -128, not clamped
  EXPECT_EQ(s[1], 2.0f / 255.0f);
}

TEST(AimetQuantizer, LpbqScales) {
  // shape (2, 4), grouping (1, 4): one per-channel scale per row; 4-bit in 8-bit (k = 4, grid [1, 16])
  const std::vector<std::int64_t> shape{2, 4}, grouping{1, 4};
  EXPECT_EQ(lpbq_channel_shape(shape, grouping), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(lpbq_channel_shape(shape, std::vector<std::int64_t>{1, -1}), (std::vector<std::int64_t>{2, 1}));
  const std::vector<float> raw{1.6f, 0.8f, 0.05f, 0.31f, 3.2f, 3.2f, 3.2f, 3.2f};
  std::vector<float> pc(2), s(8), ints(8);
  lpbq_scales(raw, shape, grouping, 4, 8, pc, s, ints);
  EXPECT_EQ(pc[0], 1.6f / 16.0f);
  EXPECT_EQ(pc[1], 3.2f / 16.0f);
  const std::vector<float> want_ints{16, 8, 1, 3, 16, 16, 16, 16};  // 0.05/0.1 -> 0.5 -> clamp 1; 3.1 -> 3
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(ints[i], want_ints[i]) << i;
    EXPECT_EQ(s[i], want_ints[i] * pc[i / 4]) << i;
  }
  // dbw == bw: every block takes its group's max
  lpbq_scales(raw, shape, grouping, 4, 4, pc, s, ints);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(s[i], raw[i / 4 * 4]) << i;
}

TEST(AimetQuantizer, LpbqNaNPropagatesThroughTheGroupMax) {
  const std::vector<std::int64_t> shape{1, 2}, grouping{1, 2};
  const std::vector<float> raw{std::numeric_limits<float>::quiet_NaN(), 1.0f};
  std::vector<float> pc(1), s(2), ints(2);
  lpbq_scales(raw, shape, grouping, 4, 8, pc, s, ints);
  EXPECT_TRUE(std::isnan(pc[0]));
}

TEST(AimetQuantizer, LpbqErrors) {
  const std::vector<std::int64_t> shape{4, 3};
  EXPECT_THROW(lpbq_channel_shape(shape, std::vector<std::int64_t>{2}), Error);
  EXPECT_THROW(lpbq_channel_shape(shape, std::vector<std::int64_t>{1, 2}), Error);
  std::vector<float> raw(12, 1.0f), pc(4), s(12), ints(12);
  EXPECT_THROW(lpbq_scales(raw, shape, std::vector<std::int64_t>{1, 3}, 8, 4, pc, s, ints), Error);
}

// Grids whose int64 arithmetic (qmax - qmin, qmin + qmax, -qmin) would overflow are refused with a
// ValueError-kind error instead of undefined behaviour (a 64-bit grid, qmin = INT64_MIN, qmin > qmax).
TEST(AimetQuantizer, GridsBeyondInt64StepsAreRefused) {
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min(), kMax = std::numeric_limits<std::int64_t>::max();
  std::vector<float> mn{-1.0f}, mx{1.0f}, s(1), o(1);
  for (const Grid g : {Grid{kMin, kMax}, Grid{-1, kMax}, Grid{kMin, -1}, Grid{5, 4}, Grid{kMax - 1, kMax}}) {
    bool value_error = false;
    try {
      quantizer_scale(mn, mx, g, s);
    } catch (const Error& e) {
      value_error = e.kind() == ErrorKind::kValue;
    }
    EXPECT_TRUE(value_error) << g.qmin << " " << g.qmax;
    EXPECT_THROW(quantizer_offset(mn, s, g, false, o), Error);
    EXPECT_THROW(quantizer_range(s, o, g, mn, mx), Error);
    EXPECT_THROW(scale_offset_from_range(mn, mx, g, true, s, o), Error);
    EXPECT_THROW(range_for_scale_offset(s, o, g, false, mn, mx), Error);
    EXPECT_THROW((void)symmetric_offset(g), Error);
  }
  // the widest grids polyquant takes: 63 bits, signed and unsigned
  EXPECT_NO_THROW(quantizer_scale(mn, mx, Grid{0, kMax}, s));
  EXPECT_NO_THROW(quantizer_scale(mn, mx, Grid{-(std::int64_t{1} << 62), (std::int64_t{1} << 62) - 1}, s));
  std::vector<float> raw(4, 1.0f), pc(1), bs(4), ints(4);
  const std::vector<std::int64_t> shape{1, 4}, grouping{1, 4};
  EXPECT_THROW(lpbq_scales(raw, shape, grouping, kMin, 8, pc, bs, ints), Error);
  EXPECT_THROW(lpbq_scales(raw, shape, grouping, 4, kMax, pc, bs, ints), Error);
}

// An empty quantizer shape (a zero dimension) has an empty per-channel shape: no division by zero
// (found by fuzz_aimet's quantizer_params; SIGFPE before).
TEST(AimetQuantizer, LpbqEmptyShape) {
  const std::vector<std::int64_t> shape{0, 4}, grouping{1, 4};
  EXPECT_EQ(lpbq_channel_shape(shape, grouping), (std::vector<std::int64_t>{0, 1}));
  std::vector<float> raw, pc, s, ints;
  EXPECT_NO_THROW(lpbq_scales(raw, shape, grouping, 4, 8, pc, s, ints));
}

}  // namespace
}  // namespace polyquant::aimet
