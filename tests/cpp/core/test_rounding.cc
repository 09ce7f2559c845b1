// Rounding modes: the QONNX specification table, parsing, and the float32 quirks of the literal
// formulas (half modes add 0.5 in float32; zero signs follow numpy's sign()).
#include <gtest/gtest.h>

#include "core/scalar_math.h"
#include "polyquant/error.h"
#include "polyquant/rounding.h"
#include "test_util.h"

namespace polyquant {
namespace {

using detail::round_t;

TEST(Rounding, QonnxSpecificationTable) {
  // tests/custom_op/test_runding_mode.py of qonnx: the same inputs through every mode.
  const std::vector<float> x = {5.5f, 2.5f, 1.6f, 1.1f, 1.0f, -1.0f, -1.1f, -1.6f, -2.5f, -5.5f};
  const struct {
    const char* name;
    std::vector<float> want;
  } table[] = {
      {"ROUND", {6, 2, 2, 1, 1, -1, -1, -2, -2, -6}},     {"HALF_EVEN", {6, 2, 2, 1, 1, -1, -1, -2, -2, -6}},
      {"CEIL", {6, 3, 2, 2, 1, -1, -1, -1, -2, -5}},      {"FLOOR", {5, 2, 1, 1, 1, -1, -2, -2, -3, -6}},
      {"UP", {6, 3, 2, 2, 1, -1, -2, -2, -3, -6}},        {"DOWN", {5, 2, 1, 1, 1, -1, -1, -1, -2, -5}},
      {"HALF_UP", {6, 3, 2, 1, 1, -1, -1, -2, -3, -6}},   {"HALF_DOWN", {5, 2, 2, 1, 1, -1, -1, -2, -2, -5}},
  };
  for (const auto& row : table) {
    SCOPED_TRACE(row.name);
    const RoundingMode mode = parse_rounding_mode(row.name);
    std::vector<float> got;
    for (float v : x) got.push_back(round_t(mode, v));
    EXPECT_TRUE(test::all_same(got, row.want));
  }
}

TEST(Rounding, HalfModesRoundTheHalfInFloat32) {
  EXPECT_EQ(round_t(RoundingMode::kHalfUp, 0.49999997f), 1.0f);  // 0.49999997f + 0.5f == 1.0f
  EXPECT_TRUE(test::same_value(round_t(RoundingMode::kHalfDown, 0.49999997f), -0.0f));
  EXPECT_EQ(round_t(RoundingMode::kHalfUp, 8388609.0f), 8388610.0f);
  EXPECT_EQ(round_t(RoundingMode::kHalfDown, 8388609.0f), 8388608.0f);
  // In float64 the same inputs behave like exact arithmetic.
  EXPECT_EQ(round_t(RoundingMode::kHalfUp, 0.49999997), 0.0);
  EXPECT_EQ(round_t(RoundingMode::kHalfUp, 8388609.0), 8388609.0);
}

TEST(Rounding, ZeroSignsFollowTheFormulas) {
  const struct {
    RoundingMode mode;
    float in, want;
  } cases[] = {
      {RoundingMode::kHalfEven, -0.4f, -0.0f}, {RoundingMode::kCeil, -0.4f, -0.0f},
      {RoundingMode::kDown, -0.3f, -0.0f},     {RoundingMode::kUp, -0.0f, 0.0f},
      {RoundingMode::kHalfUp, -0.0f, 0.0f},    {RoundingMode::kHalfUp, -0.3f, -0.0f},
      {RoundingMode::kHalfDown, 0.0f, -0.0f},  {RoundingMode::kHalfDown, 0.3f, -0.0f},
      {RoundingMode::kHalfDown, -0.3f, 0.0f},  {RoundingMode::kFloor, -0.0f, -0.0f},
      {RoundingMode::kDown, -0.0f, -0.0f},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(rounding_mode_name(c.mode)) + " of " + test::describe(c.in));
    EXPECT_TRUE(test::same_value(round_t(c.mode, c.in), c.want)) << test::describe(round_t(c.mode, c.in));
  }
}

TEST(Rounding, NanAndInfinityPassThrough) {
  for (int m = 0; m < kNumRoundingModes; ++m) {
    const auto mode = static_cast<RoundingMode>(m);
    EXPECT_TRUE(std::isnan(round_t(mode, std::numeric_limits<float>::quiet_NaN())));
    EXPECT_EQ(round_t(mode, std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
    EXPECT_EQ(round_t(mode, -std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  }
}

TEST(Rounding, TiesToEvenOnEveryBinadeBelow2To23) {
  for (int e = -1; e < 23; ++e) {
    const float base = std::ldexp(1.0f, e);
    for (float k : {0.0f, 1.0f, 2.0f, 3.0f}) {
      const float t = std::floor(base) + k + 0.5f;
      if (t >= 8388608.0f) continue;
      const float want = std::fmod(std::floor(t), 2.0f) == 0.0f ? std::floor(t) : std::floor(t) + 1.0f;
      EXPECT_EQ(detail::rint_t(t), want) << t;
      EXPECT_EQ(detail::rint_t(-t), -want) << t;
    }
  }
}

TEST(Rounding, ParseIsCaseInsensitiveAndStrict) {
  EXPECT_EQ(parse_rounding_mode("round"), RoundingMode::kHalfEven);
  EXPECT_EQ(parse_rounding_mode("Half_Even"), RoundingMode::kHalfEven);
  EXPECT_EQ(parse_rounding_mode("half_down"), RoundingMode::kHalfDown);
  for (const char* bad : {" ROUND", "ROUND_TO_ZERO", "STOCHASTIC_ROUND", "", "nearest"}) {
    try {
      parse_rounding_mode(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kValue);
      EXPECT_NE(std::string(e.what()).find("rounding_mode"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("HALF_DOWN"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace polyquant
