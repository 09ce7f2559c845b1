// Weak operands (TensorView::weak: a Python scalar under numpy 2's NEP 50 promotion). qonnx meets
// one Python scalar with several dtypes: float_quant divides a float32 X by a Python-float scale
// in float32 and multiplies its float64 result by the same scale as float64; trunc_v2 computes
// output_scale / scale of two Python floats in Python, so its result is float64. Expected values
// were produced by qonnx 1.0.0's own functions (numpy 2.4), written as hex floats.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "polyquant/polyquant.h"
#include "qonnx_call.h"
#include "test_util.h"

namespace polyquant {
namespace {

const std::vector<float> kX = {1.0f, -2.7f, 3.3f, 0.123f, -0.0f, 100.0f, 7.77f, -0.051f};

TensorView weak_double(const double& v) {
  TensorView t(&v, DType::kFloat64, Dims{});
  t.weak = true;
  return t;
}
TensorView weak_int(const std::int64_t& v) {
  TensorView t(&v, DType::kInt64, Dims{});
  t.weak = true;
  return t;
}

::testing::AssertionResult same_bits(const std::vector<double>& got, const std::vector<double>& want) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!test::same_value(got[i], want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << " want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// float_quant(x_f32, 0.1, 4, 3): the division by float32(0.1), the product by the double 0.1.
TEST(WeakOperands, FloatQuantPythonFloatScaleOnEveryKernelSet) {
  const double scale = 0.1, inf = INFINITY;
  const std::int64_t e = 4, m = 3, bias = 7;
  const std::vector<double> want = {0x1.0000000000000p+0,  -0x1.6666666666667p+1, 0x1.999999999999ap+1,
                                    0x1.0000000000000p-3,  -0x0.0p+0,             0x1.8000000000000p+5,
                                    0x1.0000000000000p+3,  -0x1.999999999999ap-5};
  const TensorView x = test::vec_view(kX), s = weak_double(scale), ev = weak_int(e), mv = weak_int(m),
                   bv = weak_int(bias), maxv(&inf, DType::kFloat64, Dims{});
  const qonnx::FloatQuantAttrs attrs{false, false, false, true, RoundingMode::kHalfEven, true};
  const TensorSpec spec = qonnx::float_quant_spec(x, s, ev, mv, bv, maxv, attrs);
  EXPECT_EQ(spec.dtype, DType::kFloat64);
  const RuntimeInfo info = runtime_info();
  for (const auto& isa : info.supported) {
    set_kernel_set(isa);
    SCOPED_TRACE("kernel set " + isa);
    std::vector<double> out(kX.size());
    qonnx::float_quant(x, s, ev, mv, bv, maxv, attrs, MutableTensorView(out.data(), DType::kFloat64, spec.shape));
    EXPECT_TRUE(same_bits(out, want));
  }
  set_kernel_set(info.isa);
  // The same scale as a float32 array multiplies by float32(0.1): other bits (so the test can fail).
  const float scale_f32 = 0.1f;
  std::vector<double> strong(kX.size());
  qonnx::float_quant(x, TensorView(&scale_f32, DType::kFloat32, Dims{}), ev, mv, bv, maxv, attrs,
                     MutableTensorView(strong.data(), DType::kFloat64, spec.shape));
  EXPECT_EQ(strong[0], 0x1.0000004000000p+0);
}

// trunc_v2(20 x, 0.1, 0.0, 8.0, narrow 0, signed 1, 0.7, float32(4), FLOOR): float64.
TEST(WeakOperands, TruncV2TwoPythonFloatScalesMakeFloat64) {
  std::vector<float> x20;
  for (float v : kX) x20.push_back(v * 20.0f);
  const double scale = 0.1, zeropt = 0.0, out_scale = 0.7;
  const float in_bits = 8.0f, out_bits = 4.0f;
  const TensorView x = test::vec_view(x20), s = weak_double(scale), z = weak_double(zeropt),
                   os = weak_double(out_scale);
  const TensorView ib(&in_bits, DType::kFloat32, Dims{}), ob(&out_bits, DType::kFloat32, Dims{});
  const TensorSpec spec = qonnx::trunc_v2_spec(x, s, z, ib, os, ob);
  ASSERT_EQ(spec.dtype, DType::kFloat64);
  const std::vector<double> want = {0x1.3999999999999p+2,  -0x1.6666666666666p+2, 0x1.3999999999999p+2,
                                    0x1.0ccccccccccccp+1,  0x0.0p+0,              0x1.3999999999999p+2,
                                    0x1.3999999999999p+2,  -0x1.6666666666666p+0};
  std::vector<double> out(kX.size());
  qonnx::trunc_v2(x, s, z, ib, os, ob, qonnx::TruncV2Attrs{true, false, RoundingMode::kFloor},
                  MutableTensorView(out.data(), DType::kFloat64, spec.shape));
  EXPECT_TRUE(same_bits(out, want));
}

// A weak scalar takes an array's dtype unless its kind is higher (NEP 50).
TEST(WeakOperands, PromotionFollowsNep50) {
  const double py_float = 0.5;
  const std::int64_t py_int = 3;
  const std::vector<float> xf = {1.0f, 2.0f};
  const std::uint16_t xh[2] = {0x3c00, 0x4000};  // float16 1, 2
  const TensorView x32 = test::vec_view(xf), x16(xh, DType::kFloat16, Dims{2});
  const float zero = 0.0f;
  const TensorView z = test::scalar_view(zero);
  // Python float against float16: float16 (a float64 array would make it float64).
  EXPECT_EQ(qonnx::bipolar_quant_spec(x16, weak_double(py_float)).dtype, DType::kFloat16);
  EXPECT_EQ(qonnx::bipolar_quant_spec(x16, TensorView(&py_float, DType::kFloat64, Dims{})).dtype, DType::kFloat64);
  // Python int against float32: float32 (an int64 array would make it float64).
  const float bits = 8.0f;
  EXPECT_EQ(qonnx::int_quant_spec(x32, weak_int(py_int), z, test::scalar_view(bits), {}).dtype, DType::kFloat32);
  EXPECT_EQ(qonnx::int_quant_spec(x32, TensorView(&py_int, DType::kInt64, Dims{}), z, test::scalar_view(bits), {}).dtype,
            DType::kFloat64);
  // Trunc v1 with two Python-int widths: 2.0 ** (8 - 4) is a Python float, y stays float32.
  EXPECT_EQ(qonnx::trunc_spec(x32, test::scalar_view(bits), z, weak_int(py_int), weak_int(py_int)).dtype,
            DType::kFloat32);
}

TEST(WeakOperands, OnlyZeroDimensionalViewsMayBeWeak) {
  const std::vector<float> xf = {1.0f, 2.0f};
  TensorView s = test::vec_view(xf);
  s.weak = true;
  try {
    (void)qonnx::bipolar_quant_spec(test::vec_view(xf), s);
    FAIL() << "a weak 1-d scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scale: a weak operand"), std::string::npos) << e.what();
  }
}

// 2 ** (2.0 ** E - 1.0 - bias) of Python numbers overflows a Python float: qonnx raises
// OverflowError; the same widths as arrays compute in numpy (inf).
TEST(WeakOperands, PythonArithmeticOverflowIsAnOverflowError) {
  const double one = 1.0, e = 11.0, bias = 0.0, inf = INFINITY;
  const std::int64_t m = 3;
  const std::vector<float> xf = {1.0f, 2.0f};
  const TensorView x = test::vec_view(xf), maxv(&inf, DType::kFloat64, Dims{});
  const qonnx::FloatQuantAttrs attrs{};
  std::vector<double> out(2);
  const MutableTensorView o(out.data(), DType::kFloat64, Dims{2});
  try {
    qonnx::float_quant(x, weak_double(one), weak_double(e), weak_int(m), weak_double(bias), maxv, attrs, o);
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kOverflow) << err.what();
  }
  EXPECT_NO_THROW(qonnx::float_quant(x, weak_double(one), TensorView(&e, DType::kFloat64, Dims{}), weak_int(m),
                                     TensorView(&bias, DType::kFloat64, Dims{}), maxv, attrs, o));
}

}  // namespace
}  // namespace polyquant
