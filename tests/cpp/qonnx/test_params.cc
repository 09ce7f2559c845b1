// Derived parameters (Trunc's truncation scale, the integer bounds of a bit width) as qonnx 1.0.0
// computes them: integer bit widths in numpy's integer arithmetic of their own dtype (exact beyond
// 2^53, wrapping at the dtype's width, refusing negative powers), and per-element parameters
// equal to the same parameters given one element at a time. Expected values were produced by
// qonnx 1.0.0's own functions (numpy 2.4) and are written as hex floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "qonnx_call.h"
#include "test_util.h"

namespace polyquant {
namespace {

template <class T>
TensorView scalar_of(const T& v, DType t) {
  return TensorView(&v, t, Dims{});
}

const std::vector<float> kX = {1.5f, -3.0f, 100.25f, -200.5f, 0.3f, 7.0f};
const float kOne = 1.0f, kZero = 0.0f, kHalf = 0.5f;

template <class Out>
::testing::AssertionResult same_bits(const std::vector<Out>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!test::same_value(static_cast<double>(got[i]), want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << static_cast<double>(got[i]) << " want "
                                           << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Trunc v1 in the float64 dtype numpy gives it (integer widths make trunc_scale float64).
std::vector<double> trunc_v1_f64(const TensorView& ib, const TensorView& ob) {
  const TensorView x = test::vec_view(kX);
  const TensorSpec spec = qonnx::trunc_spec(x, test::scalar_view(kOne), test::scalar_view(kZero), ib, ob);
  EXPECT_EQ(spec.dtype, DType::kFloat64);
  std::vector<double> out(kX.size());
  qonnx::trunc(x, test::scalar_view(kOne), test::scalar_view(kZero), ib, ob, RoundingMode::kFloor,
               MutableTensorView(out.data(), DType::kFloat64, spec.shape));
  return out;
}

// in_bitwidth - out_bitwidth is int64 arithmetic in numpy: (2^53 + 1) - 2^53 = 1, trunc_scale 2.
// Read through float64 both were 2^53 and trunc_scale 1.
TEST(IntegerParams, TruncV1BitWidthDifferenceIsInt64Arithmetic) {
  const std::int64_t ib = (std::int64_t{1} << 53) + 1, ob = std::int64_t{1} << 53;
  EXPECT_TRUE(same_bits(trunc_v1_f64(scalar_of(ib, DType::kInt64), scalar_of(ob, DType::kInt64)),
                        {0x1p+0, -0x1p+1, 0x1.9p+5, -0x1.9p+6, 0.0, 0x1.8p+1}));
}

// int8 widths subtract in int8 and wrap: 100 - (-100) = 200 -> -56, trunc_scale 2^-56.
TEST(IntegerParams, TruncV1BitWidthDifferenceWrapsLikeNumpy) {
  const std::int8_t ib = 100, ob = -100;
  EXPECT_TRUE(same_bits(trunc_v1_f64(scalar_of(ib, DType::kInt8), scalar_of(ob, DType::kInt8)),
                        {0x1p+57, -0x1.8p+57, 0x1.9p+62, -0x1.9p+63, 0.0, 0x1.cp+58}));
  // uint8 with int8 promotes to int16: 200 - (-100) = 300, no wrap; trunc_scale 2^300.
  const std::uint8_t ibu = 200;
  EXPECT_TRUE(same_bits(trunc_v1_f64(scalar_of(ibu, DType::kUInt8), scalar_of(ob, DType::kInt8)),
                        {0.0, -0x1p+0, 0.0, -0x1p+0, 0.0, 0.0}));
  // Two bool widths: numpy cannot subtract booleans.
  const bool t = true;
  EXPECT_THROW(trunc_v1_f64(scalar_of(t, DType::kBool), scalar_of(t, DType::kBool)), Error);
}

// min_int/max_int of an integer width run in the width's dtype with numpy's wrap-around.
TEST(IntegerParams, IntQuantBoundsFollowTheWidthsIntegerDtype) {
  struct Case {
    DType dtype;
    std::int64_t bits;
    bool is_signed, narrow;
    std::vector<double> want;
  };
  const std::vector<double> zeros(kX.size(), 0.0);
  const Case cases[] = {
      {DType::kInt8, 9, true, false, zeros},                          // 2**8 wraps to 0: range [0, -1]
      {DType::kUInt64, 8, true, false, std::vector<double>(kX.size(), 0x1p+63)},  // min = 2^64 - 128
      {DType::kInt64, 65, true, false, zeros},                        // 2**64 wraps to 0
      {DType::kInt32, 32, false, false, zeros},                       // 2**32 - 1 wraps to -1
      {DType::kInt16, 16, false, true, zeros},                        // 2**16 - 2 wraps to -2
      {DType::kUInt8, 8, false, false, {0x1.8p+0, 0.0, 0x1.9p+6, 0.0, 0x1p-1, 0x1.cp+2}},  // 255, no wrap
  };
  for (const Case& c : cases) {
    const std::uint64_t storage = static_cast<std::uint64_t>(c.bits);  // little-endian: low bytes first
    const TensorView b(&storage, c.dtype, Dims{});
    const qonnx::IntQuantAttrs attrs{c.is_signed, c.narrow, RoundingMode::kHalfEven};
    std::vector<float> out(kX.size());
    qonnx::int_quant(test::vec_view(kX), test::scalar_view(kHalf), test::scalar_view(kZero), b, attrs,
                     MutableTensorView(out.data(), DType::kFloat32, Dims{6}));
    EXPECT_TRUE(same_bits(out, c.want)) << dtype_name(c.dtype) << " bitwidth " << c.bits;
  }
  // numpy refuses 2 ** (0 - 1) in integers: a clear error, in the spec already.
  const std::int64_t zero_bits = 0;
  try {
    (void)qonnx::int_quant_spec(test::vec_view(kX), test::scalar_view(kOne), test::scalar_view(kZero),
                                scalar_of(zero_bits, DType::kInt64), {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("bitwidth"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("negative integer powers"), std::string::npos) << e.what();
  }
}

// Trunc v2 with a per-row integer out_bitwidth: each row's bounds in the width's dtype.
TEST(IntegerParams, TruncV2PerRowIntegerBounds) {
  const std::vector<float> x = {300.0f, -300.0f, 1000.5f, -7.25f, 40000.0f, -40000.0f};
  const TensorView xv(x.data(), DType::kFloat32, Dims{3, 2});
  const std::int64_t ib = 32;
  const float os = 2.0f;
  const qonnx::TruncV2Attrs attrs{true, false, RoundingMode::kFloor};
  auto run = [&](const TensorView& ob) {
    std::vector<float> out(6);
    qonnx::trunc_v2(xv, test::scalar_view(kOne), test::scalar_view(kZero), scalar_of(ib, DType::kInt64),
                    test::scalar_view(os), ob, attrs, MutableTensorView(out.data(), DType::kFloat32, Dims{3, 2}));
    return out;
  };
  const std::vector<std::int8_t> ob8 = {8, 9, 16};
  EXPECT_TRUE(same_bits(run(TensorView(ob8.data(), DType::kInt8, Dims{3, 1})),
                        {0x1.fcp+7, -0x1p+8, 0.0, 0.0, 0.0, 0.0}));
  const std::vector<std::int64_t> ob64 = {(std::int64_t{1} << 62) + 3, 63, 64};
  EXPECT_TRUE(same_bits(run(TensorView(ob64.data(), DType::kInt64, Dims{3, 1})),
                        {0.0, 0.0, 0x1.f4p+9, -0x1p+3, 0x1.388p+15, -0x1.388p+15}));
}

// numpy raises on 2 ** (0 - 1) in int64 (an out_bitwidth of 0, signed), anywhere in a per-element
// width; polyquant raises a clear error from the op. The spec only computes shape and dtype (it
// reads no parameter values), so it accepts the call.
TEST(IntegerParams, TruncV2NegativeIntegerPowerRaisesInTheOp) {
  const std::vector<float> x = {1.0f, 2.0f};
  const std::vector<std::int64_t> ob = {8, 0};
  const std::int64_t ib = 8;
  const float os = 1.0f;
  const TensorView obv(ob.data(), DType::kInt64, Dims{2});
  const TensorSpec spec = qonnx::trunc_v2_spec(test::vec_view(x), test::scalar_view(kOne), test::scalar_view(kZero),
                                               scalar_of(ib, DType::kInt64), test::scalar_view(os), obv);
  EXPECT_EQ(spec.shape, Dims{2});
  std::vector<float> out(2);
  try {
    qonnx::trunc_v2(test::vec_view(x), test::scalar_view(kOne), test::scalar_view(kZero), scalar_of(ib, DType::kInt64),
                    test::scalar_view(os), obv, {true, false, RoundingMode::kFloor},
                    MutableTensorView(out.data(), DType::kFloat32, Dims{2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("out_bitwidth"), std::string::npos) << e.what();
  }
}

// Per-element derived parameters (every bit width and out_scale its own) give, element for
// element, what the same values give as 0-d parameters: the streamed derivation is the per-tensor
// one, on every kernel set.
TEST(DerivedParams, PerElementEqualsPerTensor) {
  const std::int64_t n = 70'001;  // several threads (grain 65536) and a vector tail
  const auto x = test::mixed_values(static_cast<std::size_t>(n), 91, 4.0f);
  auto rng = test::make_rng(92);
  std::vector<std::int64_t> ib(static_cast<std::size_t>(n)), ob(static_cast<std::size_t>(n));
  std::vector<float> os(static_cast<std::size_t>(n)), obf(static_cast<std::size_t>(n));
  const float out_scales[] = {2.0f, 12.0f, 0.5f, 3.0f, 1.0f, 0.0f, 1e30f};
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    ib[k] = 4 + static_cast<std::int64_t>(rng() % 12);
    ob[k] = 1 + static_cast<std::int64_t>(rng() % 10);
    os[k] = out_scales[rng() % 7];
    obf[k] = static_cast<float>(2 + rng() % 8);
  }
  const float s = 0.5f, z = 1.0f;
  const Dims shape{n};
  const RuntimeInfo info = runtime_info();
  for (const auto& isa : info.supported) {
    set_kernel_set(isa);
    for (const RoundingMode mode : {RoundingMode::kFloor, RoundingMode::kHalfUp}) {
      std::vector<double> v1(static_cast<std::size_t>(n));
      qonnx::trunc(TensorView(x.data(), DType::kFloat32, shape), test::scalar_view(s), test::scalar_view(z),
                   TensorView(ib.data(), DType::kInt64, shape), TensorView(ob.data(), DType::kInt64, shape), mode,
                   MutableTensorView(v1.data(), DType::kFloat64, shape));
      std::vector<float> v2(static_cast<std::size_t>(n));
      const qonnx::TruncV2Attrs attrs{true, false, mode};
      qonnx::trunc_v2(TensorView(x.data(), DType::kFloat32, shape), test::scalar_view(s), test::scalar_view(z),
                      scalar_of(ib[0], DType::kInt64), TensorView(os.data(), DType::kFloat32, shape),
                      TensorView(obf.data(), DType::kFloat32, shape), attrs,
                      MutableTensorView(v2.data(), DType::kFloat32, shape));
      std::int64_t bad1 = 0, bad2 = 0;
      for (std::int64_t i = 0; i < n; i += 7) {  // a sample: one call per element is slow
        const auto k = static_cast<std::size_t>(i);
        const TensorView xi(&x[k], DType::kFloat32, Dims{});
        double w1 = 0;
        qonnx::trunc(xi, test::scalar_view(s), test::scalar_view(z), scalar_of(ib[k], DType::kInt64),
                     scalar_of(ob[k], DType::kInt64), mode, MutableTensorView(&w1, DType::kFloat64, Dims{}));
        bad1 += !test::same_value(v1[k], w1);
        float w2 = 0;
        qonnx::trunc_v2(xi, test::scalar_view(s), test::scalar_view(z), scalar_of(ib[0], DType::kInt64),
                        test::scalar_view(os[k]), test::scalar_view(obf[k]), attrs,
                        MutableTensorView(&w2, DType::kFloat32, Dims{}));
        bad2 += !test::same_value(v2[k], w2);
      }
      EXPECT_EQ(bad1, 0) << "Trunc v1, " << isa;
      EXPECT_EQ(bad2, 0) << "Trunc v2, " << isa;
    }
  }
  set_kernel_set(info.isa);
}


// Planned calls (the *_plan functions, what the bindings and the ORT library use): each plan's spec
// is its *_spec result, and running it writes what the op writes, bit for bit, again and on
// another thread; an output of another shape is rejected as the op rejects it.
TEST(QonnxPlans, PlannedCallsEqualTheOps) {
  const Dims shape{3, 4, 5};
  const std::int64_t n = shape.numel();
  const std::vector<float> x = test::mixed_values(static_cast<std::size_t>(n), 90, 0.5f);
  const std::vector<float> s = {0.5f, 0.25f, 3.0f, 0.1f};
  const float z = 0.5f, bits = 4.0f, in_bits = 8.0f, out_scale = 2.0f, e = 4.0f, m = 3.0f, bias = 7.0f, mx = 448.0f;
  const TensorView xv(x.data(), DType::kFloat32, shape), sv(s.data(), DType::kFloat32, Dims{4, 1});
  const TensorView zv(&z, DType::kFloat32, Dims{}), bv(&bits, DType::kFloat32, Dims{}), iv(&in_bits, DType::kFloat32, Dims{}),
      osv(&out_scale, DType::kFloat32, Dims{}), ev(&e, DType::kFloat32, Dims{}), mv(&m, DType::kFloat32, Dims{}),
      biasv(&bias, DType::kFloat32, Dims{}), maxv(&mx, DType::kFloat32, Dims{});
  struct Case {
    const char* name;
    TensorSpec spec;
    PlannedCall plan;
    std::function<void(const MutableTensorView&)> op;
  };
  const qonnx::IntQuantAttrs ia{true, false, RoundingMode::kHalfEven};
  const qonnx::TruncV2Attrs ta;
  const qonnx::FloatQuantAttrs fa;
  const Case cases[] = {
      {"IntQuant", qonnx::int_quant_spec(xv, sv, zv, bv, ia), qonnx::int_quant_plan(xv, sv, zv, bv, ia),
       [&](const MutableTensorView& o) { qonnx::int_quant(xv, sv, zv, bv, ia, o); }},
      {"BipolarQuant", qonnx::bipolar_quant_spec(xv, sv), qonnx::bipolar_quant_plan(xv, sv),
       [&](const MutableTensorView& o) { qonnx::bipolar_quant(xv, sv, o); }},
      {"Trunc", qonnx::trunc_spec(xv, sv, zv, iv, bv), qonnx::trunc_plan(xv, sv, zv, iv, bv, RoundingMode::kFloor),
       [&](const MutableTensorView& o) { qonnx::trunc(xv, sv, zv, iv, bv, RoundingMode::kFloor, o); }},
      {"Trunc v2", qonnx::trunc_v2_spec(xv, sv, zv, iv, osv, bv), qonnx::trunc_v2_plan(xv, sv, zv, iv, osv, bv, ta),
       [&](const MutableTensorView& o) { qonnx::trunc_v2(xv, sv, zv, iv, osv, bv, ta, o); }},
      {"FloatQuant", qonnx::float_quant_spec(xv, sv, ev, mv, biasv, maxv, fa),
       qonnx::float_quant_plan(xv, sv, ev, mv, biasv, maxv, fa),
       [&](const MutableTensorView& o) { qonnx::float_quant(xv, sv, ev, mv, biasv, maxv, fa, o); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.plan.spec().dtype, c.spec.dtype);
    ASSERT_TRUE(c.plan.spec().shape == c.spec.shape);
    // float32, or FloatQuant's float64 (the function's value): compared byte for byte.
    const std::size_t bytes = static_cast<std::size_t>(n) * (c.spec.dtype == DType::kFloat64 ? 8 : 4);
    std::vector<unsigned char> want(bytes), got(bytes);
    c.op(MutableTensorView(want.data(), c.spec.dtype, c.spec.shape));
    for (int run = 0; run < 2; ++run) {
      std::fill(got.begin(), got.end(), 0xA5);
      const MutableTensorView o(got.data(), c.spec.dtype, c.spec.shape);
      if (run == 0) c.plan.run(o);
      else std::thread([&] { c.plan.run(o); }).join();
      EXPECT_EQ(got, want) << "run " << run;
    }
    test::expect_error([&] { c.plan.run(MutableTensorView(got.data(), c.spec.dtype, Dims{n})); }, ErrorKind::kValue,
                       "out");
  }
}

}  // namespace
}  // namespace polyquant
