// Golden vectors produced by running qonnx 1.0.0's numpy functions (IntQuant, Trunc and BipolarQuant
// cases recorded from the reference, and the FloatQuant cases of qonnx's own test_floatquant.py),
// through the public C++ API.
#include <gtest/gtest.h>

#include "qonnx_call.h"
#include "test_util.h"

namespace polyquant {
namespace {

using test::all_same;
constexpr float inf = std::numeric_limits<float>::infinity();
const float nan = std::numeric_limits<float>::quiet_NaN();
using R = RoundingMode;

const std::vector<float> X = {-3.7f, -1.2f, -0.5f, -0.3f, -0.0f, 0.0f, 0.3f, 0.5f, 1.5f, 2.5f, 2.6f, 100.0f, inf, -inf, nan};

TEST(QonnxGolden, IntQuant) {
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 4, true, false), {-4, -1, -0.0f, -0.0f, 0, 0, 0, 0, 2, 2, 3, 7, 7, -8, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 4, true, true), {-4, -1, -0.0f, -0.0f, 0, 0, 0, 0, 2, 2, 3, 7, 7, -7, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 2, false, true), {0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 0, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 1, true, false), {-1, -1, -1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 1, false, false), {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 2.5f, true, false), {-3, -1, -0.0f, -0.0f, 0, 0, 0, 0, 2, 2, 2, 2, 2, -3, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, -1, 0, 4, true, false),
                       {-4, -1, -0.0f, -0.0f, -0.0f, -0.0f, 0, 0, 2, 2, 3, 8, 8, -7, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 0, 0, 4, true, false),
                       {-0.0f, -0.0f, -0.0f, -0.0f, nan, nan, 0, 0, 0, 0, 0, 0, 0, -0.0f, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 0.5f, 0.5f, 4, true, false, R::kHalfUp),
                       {-3.75f, -1.25f, -0.75f, -0.25f, 0.25f, 0.25f, 0.25f, 0.75f, 1.75f, 2.75f, 2.75f, 3.25f, 3.25f, -4.25f, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 4, true, false, R::kHalfDown),
                       {-4, -1, -0.0f, 0, -0.0f, -0.0f, -0.0f, 0, 1, 2, 3, 7, 7, -8, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 4, true, false, R::kUp), {-4, -2, -1, -1, 0, 0, 1, 1, 2, 3, 3, 7, 7, -8, nan}));
  EXPECT_TRUE(all_same(test::int_quant(X, 1, 0, 4, true, false, R::kDown),
                       {-3, -1, -0.0f, -0.0f, 0, 0, 0, 0, 1, 2, 2, 7, 7, -8, nan}));
}

TEST(QonnxGolden, BipolarQuant) {
  const float a = 0.5f;
  EXPECT_TRUE(all_same(test::bipolar_quant(X, 0.5f), {-a, -a, -a, -a, a, a, a, a, a, a, a, a, a, -a, -a}));
  EXPECT_TRUE(all_same(test::bipolar_quant(X, -2.0f), {2, 2, 2, 2, -2, -2, -2, -2, -2, -2, -2, -2, -2, 2, 2}));
}

const std::vector<float> T = {-100, -17, -16, -15.6f, -1, 0, 1, 7.5f, 8, 15.9f, 16, 24, 100, 1000};

TEST(QonnxGolden, Trunc) {
  EXPECT_TRUE(all_same(test::trunc_v1(T, 1, 0, 8, 4, R::kFloor), {-7, -2, -1, -1, -1, 0, 0, 0, 0, 1, 1, 1, 6, 62}));
  EXPECT_TRUE(all_same(test::trunc_v1(T, 1, 0, 8, 4, R::kHalfEven), {-6, -1, -1, -1, -0.0f, 0, 0, 0, 0, 1, 1, 2, 6, 62}));
  EXPECT_TRUE(all_same(test::trunc_v2(T, 1, 0, 8, 16, 4, true, false, R::kFloor),
                       {-112, -32, -16, -16, -16, 0, 0, 0, 0, 16, 16, 16, 96, 112}));
  EXPECT_TRUE(all_same(test::trunc_v2(T, 1, 0, 8, 16, 4, false, false, R::kFloor),
                       {0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 96, 240}));
  EXPECT_TRUE(all_same(test::trunc_v2(T, 1, 0, 8, 16, 4, true, true, R::kFloor),
                       {-112, -32, -16, -16, -16, 0, 0, 0, 0, 16, 16, 16, 96, 112}));
  EXPECT_TRUE(all_same(test::trunc_v2(T, 1, 0, 8, 12, 4, true, false, R::kFloor),
                       {-84, -24, -12, -12, -12, 0, 0, 0, 0, 12, 12, 12, 72, 84}));
  EXPECT_TRUE(all_same(test::trunc_v2(T, 1, 4, 8, 16, 4, true, false, R::kFloor),
                       {-100, -20, -20, -20, -4, -4, -4, -4, -4, 12, 12, 12, 92, 108}));
}

const std::vector<float> F = {0, -0.0f, 1e-45f, std::ldexp(1.0f, -10), 1.5f * std::ldexp(1.0f, -9), 0.1f, 1.0625f,
                              1.1875f, 17, 447, 464, 465, 1e30f, inf, -inf, nan, -1.0625f};

qonnx::FloatQuantAttrs fq(bool sat, bool has_inf, bool has_nan, R mode = R::kHalfEven) {
  return {has_inf, has_nan, true, sat, mode};
}

TEST(QonnxGolden, FloatQuantE4M3) {
  const float e8 = std::ldexp(1.0f, -8), e9 = std::ldexp(1.0f, -9), e10 = std::ldexp(1.0f, -10);
  EXPECT_TRUE(all_same(test::float_quant(F, 1, 4, 3, 7, 448, fq(true, false, true)),
                       {0, -0.0f, 0, 0, e8, 0.1015625f, 1, 1.25f, 16, 448, 448, 448, 448, nan, nan, nan, -1}));
  EXPECT_TRUE(all_same(test::float_quant(F, 1, 4, 3, 7, 448, fq(false, false, true)),
                       {0, -0.0f, 0, 0, e8, 0.1015625f, 1, 1.25f, 16, 448, 448, nan, nan, nan, nan, nan, -1}));
  EXPECT_TRUE(all_same(test::float_quant(F, 1, 4, 3, 7, 448, fq(false, true, false)),
                       {0, -0.0f, 0, 0, e8, 0.1015625f, 1, 1.25f, 16, 448, 448, inf, inf, nan, nan, nan, -1}));
  EXPECT_TRUE(all_same(test::float_quant(F, 1, 4, 3, 7, 448, fq(true, false, true, R::kFloor)),
                       {0, -0.0f, 0, 0, e9, 0.09375f, 1, 1.125f, 16, 416, 448, 448, 448, nan, nan, nan, -1.125f}));
  EXPECT_TRUE(all_same(test::float_quant(F, 0.5f, 4, 3, 7, 448, fq(true, false, true)),
                       {0, -0.0f, 0, e10, 1.5f * e9, 0.1015625f, 1, 1.25f, 16, 224, 224, 224, 224, nan, nan, nan, -1}));
  const auto zero_scale = test::float_quant(F, 0, 4, 3, 7, 448, fq(true, false, true));
  for (float v : zero_scale) EXPECT_TRUE(std::isnan(v));
}

TEST(QonnxGolden, FloatQuantLog2RoundsUpBelowPowersOfTwo) {
  // E8M3 bias 127, FLOOR: the reference's float32 log2 of 1048575.9375 is exactly 20.
  EXPECT_TRUE(all_same(test::float_quant({1048575.9375f}, 1, 8, 3, 127, 3.4e38f, fq(true, false, false, R::kFloor)),
                       {917504.0f}));
}

TEST(QonnxGolden, FloatQuantDefaultsOfTheReferenceTests) {
  // qonnx tests/custom_op/test_floatquant.py: default bias 2^(E-1)-1, max_val = format maximum.
  EXPECT_TRUE(all_same(test::float_quant({0, 1.5f, 3.25f, 8.0f}, 1, 2, 3, 1, 7.5f, fq(true, false, false)), {0, 1.5f, 3.25f, 7.5f}));
  EXPECT_TRUE(all_same(test::float_quant({28.2f}, 1, 3, 2, 3, 28.0f, fq(true, false, false)), {28.0f}));
  EXPECT_TRUE(all_same(test::float_quant({6.1f}, 1, 2, 1, 1, 6.0f, fq(true, false, false)), {6.0f}));
}

}  // namespace
}  // namespace polyquant
