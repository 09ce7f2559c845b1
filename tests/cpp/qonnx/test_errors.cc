// Bad input is reported as polyquant::Error naming the parameter and the allowed values.
#include <gtest/gtest.h>

#include "core/parallel.h"
#include "qonnx_call.h"
#include "test_util.h"

namespace polyquant {
namespace {
using test::expect_error;

const std::vector<float> xs = {0.5f, -1.0f, 2.0f};
const float one = 1.0f, zero = 0.0f, eight = 8.0f;

TEST(Errors, MultiElementBitwidth) {
  const std::vector<float> b = {4.0f, 8.0f};
  expect_error([&] { qonnx::int_quant_spec(test::vec_view(xs), test::scalar_view(one), test::scalar_view(zero), test::vec_view(b), {}); },
               ErrorKind::kValue, {"bitwidth", "exactly one element", "(2,)"});
}

TEST(Errors, NonFiniteBitwidth) {
  const float b = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { qonnx::int_quant_spec(test::vec_view(xs), test::scalar_view(one), test::scalar_view(zero), test::scalar_view(b), {}); },
               ErrorKind::kValue, {"bitwidth", "finite"});
}

// Extents whose product overflows int64 (a broadcast of two huge views) must be a clear error, not
// signed-overflow UB (UBSan) followed by nonsense sizes.
TEST(Errors, ElementCountBeyondInt64) {
  const std::int64_t big = std::int64_t{1} << 32;
  expect_error([&] { (void)Dims({big, big, 4}).numel(); }, ErrorKind::kValue, {"(4294967296, 4294967296, 4)", "2^63"});
  EXPECT_EQ(Dims({big, big, 0}).numel(), 0);  // an empty tensor stays empty whatever the other extents
  // A 0-stride view can describe it without memory; broadcasting it with x must fail cleanly.
  const float v = 1.0f;
  const TensorView huge_a(&v, DType::kFloat32, Dims{big, 1}, Dims{0, 0});
  const TensorView huge_b(&v, DType::kFloat32, Dims{1, big}, Dims{0, 0});
  expect_error([&] { qonnx::bipolar_quant_spec(huge_a, huge_b); }, ErrorKind::kValue, {"BipolarQuant", "2^63"});
  // Contiguous views compute their strides from the extents first: that product must not overflow
  // either (UBSan), whether the view is rejected or empty.
  expect_error([&] { TensorView t(&v, DType::kFloat32, Dims{big, big, 4}); }, ErrorKind::kValue, {"2^63"});
  const TensorView empty(&v, DType::kFloat32, Dims{0, big, big, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.is_contiguous());  // multiplies the extents again
}

TEST(Errors, ThreadCountEnvironmentValue) {
  EXPECT_EQ(detail::parse_thread_count("1", "POLYQUANT_NUM_THREADS"), 1);
  EXPECT_EQ(detail::parse_thread_count("16", "POLYQUANT_NUM_THREADS"), 16);
  for (const char* bad : {"abc", "0", "-3", "2x", " 2", "1e3", "99999999999", "257", ""}) {
    expect_error([&] { detail::parse_thread_count(bad, "POLYQUANT_NUM_THREADS"); }, ErrorKind::kValue,
                 {"POLYQUANT_NUM_THREADS", "1 to 256"});
  }
}

TEST(Errors, KernelSetAndThreadSwitches) {
  expect_error([] { set_kernel_set("sse9"); }, ErrorKind::kValue, {"sse9", "scalar"});
  expect_error([] { set_num_threads(0); }, ErrorKind::kValue, {"num_threads", "1 to 256"});
  const RuntimeInfo before = runtime_info();
  for (const auto& name : before.supported) {
    set_kernel_set(name);
    EXPECT_EQ(runtime_info().isa, name);
  }
  set_kernel_set(before.isa);
  set_num_threads(1);
  EXPECT_EQ(runtime_info().num_threads, 1);
  set_num_threads(256);  // capped by the pool's size
  EXPECT_EQ(runtime_info().num_threads, before.num_threads);
}

TEST(Errors, NonBroadcastableShapes) {
  const std::vector<float> s = {1.0f, 2.0f};
  expect_error([&] { qonnx::int_quant_spec(test::vec_view(xs), test::vec_view(s), test::scalar_view(zero), test::scalar_view(eight), {}); },
               ErrorKind::kValue, {"IntQuant", "x (3,)", "scale (2,)", "broadcast"});
}

TEST(Errors, IntegerDataTensor) {
  const std::vector<std::int32_t> xi = {1, 2, 3};
  expect_error([&] { qonnx::bipolar_quant_spec(TensorView(xi.data(), DType::kInt32, Dims{3}), test::scalar_view(one)); },
               ErrorKind::kType, {"x", "int32", "float32"});
}

TEST(Errors, WrongOutputSpec) {
  std::vector<float> out(2);
  expect_error([&] {
    qonnx::int_quant(test::vec_view(xs), test::scalar_view(one), test::scalar_view(zero), test::scalar_view(eight), {},
                     MutableTensorView(out.data(), DType::kFloat32, Dims{2}));
  }, ErrorKind::kValue, {"out", "(3,)"});
}

TEST(Errors, FloatQuantNeedsAnOverflowTarget) {
  const float e = 4, m = 3, bias = 7, mv = 448;
  const qonnx::FloatQuantAttrs attrs{false, false, true, false, RoundingMode::kHalfEven};
  expect_error([&] {
    qonnx::float_quant_spec(test::vec_view(xs), test::scalar_view(one), test::scalar_view(e), test::scalar_view(m),
                            test::scalar_view(bias), test::scalar_view(mv), attrs);
  }, ErrorKind::kValue, {"saturation", "has_inf", "has_nan"});
}

TEST(Errors, FloatQuantMantissaMustBeSingle) {
  const float e = 4, bias = 7, mv = 448;
  const std::vector<float> m = {3, 2};
  expect_error([&] {
    qonnx::float_quant_spec(test::vec_view(xs), test::scalar_view(one), test::scalar_view(e), test::vec_view(m),
                            test::scalar_view(bias), test::scalar_view(mv), {});
  }, ErrorKind::kValue, {"mantissa_bitwidth", "exactly one element"});
}

TEST(Errors, RankAndStrides) {
  const std::vector<std::int64_t> too_long(9, 1);
  expect_error([&] { Dims d{std::span<const std::int64_t>(too_long)}; (void)d; }, ErrorKind::kValue, {"rank", "8"});
  expect_error([&] { TensorView v(xs.data(), DType::kFloat32, Dims{3}, Dims{1, 1}); }, ErrorKind::kValue, {"strides"});
  expect_error([&] { TensorView v(xs.data(), DType::kFloat32, Dims{-3}); }, ErrorKind::kValue, {"negative"});
}

}  // namespace
}  // namespace polyquant
