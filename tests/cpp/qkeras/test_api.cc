// The QKeras quantizers through the public API (polyquant/qkeras.h): the literal gold vectors of
// QKeras' own tests and values recorded from QKeras at commit 78ea90f (float32 bit patterns from
// tests/data/qkeras), the same bits on every kernel set and thread count (fixed, "auto" and
// "auto_po2" scales, training mode with stochastic rounding), strided / reversed / zero-stride
// views against contiguous copies, errors naming the parameter, and rank-0 and empty inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/fpenv.h"
#include "core/grouped_reduce.h"
#include "core/half.h"
#include "families/qkeras/scale_search.h"
#include "kernels/registry.h"
#include "polyquant/polyquant.h"
#include "test_util.h"

namespace polyquant::qkeras {
namespace {
using test::expect_error;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> from_bits(std::initializer_list<std::uint32_t> bits) {
  std::vector<float> v;
  for (std::uint32_t b : bits) v.push_back(std::bit_cast<float>(b));
  return v;
}

std::size_t count(const Dims& shape) { return static_cast<std::size_t>(shape.numel()); }

TensorView view(const std::vector<float>& v, const Dims& shape) { return TensorView(v.data(), DType::kFloat32, shape); }
TensorView scalar_view(const float& v) { return TensorView(&v, DType::kFloat32, Dims{}); }
TensorView view(const std::vector<float>& v) { return view(v, Dims{static_cast<std::int64_t>(v.size())}); }

// Bit-for-bit equality (any NaN equals any NaN), usable with a braced list of expected values.
::testing::AssertionResult same_floats(const std::vector<float>& got, const std::vector<float>& want) {
  return test::all_same(got, want);
}

bool is_auto(Alpha a) { return a == Alpha::kAuto || a == Alpha::kAutoPo2; }

ScaleAxis axis_int(int k) { return ScaleAxis{ScaleAxis::Kind::kInt, {k}}; }
ScaleAxis axis_list(std::vector<int> axes) { return ScaleAxis{ScaleAxis::Kind::kList, std::move(axes)}; }

// What one call produced: the output, the scale it reports (quantized_bits: the reported scale of
// an auto call that is not frozen; quantized_linear: the quantization scale) and, when asked for,
// the gradient.
struct Result {
  Dims shape;
  std::vector<float> out;
  Dims scale_shape;
  std::vector<float> scale;
  std::vector<float> gradient;
};

::testing::AssertionResult same_result(const Result& got, const Result& want) {
  if (got.shape.str() != want.shape.str()) {
    return ::testing::AssertionFailure() << "shape " << got.shape.str() << " != " << want.shape.str();
  }
  if (got.scale_shape.str() != want.scale_shape.str()) {
    return ::testing::AssertionFailure() << "scale shape " << got.scale_shape.str() << " != " << want.scale_shape.str();
  }
  if (auto r = same_floats(got.out, want.out); !r) return ::testing::AssertionFailure() << "output: " << r.message();
  if (auto r = same_floats(got.scale, want.scale); !r) return ::testing::AssertionFailure() << "scale: " << r.message();
  if (auto r = same_floats(got.gradient, want.gradient); !r) return ::testing::AssertionFailure() << "gradient: " << r.message();
  return ::testing::AssertionSuccess();
}

Result call_bits(const TensorView& x, const QuantizedBitsAttrs& a, const TensorView& alpha = {}, const Training& training = {},
                 const Settings& settings = {}, bool gradient = false) {
  Result r;
  const TensorSpec spec = quantized_bits_spec(x, alpha, a, settings);
  EXPECT_EQ(spec.dtype, DType::kFloat32);
  r.shape = spec.shape;
  r.out.assign(count(spec.shape), 12345.0f);
  const MutableTensorView out(r.out.data(), DType::kFloat32, spec.shape);
  if (is_auto(a.alpha) && !a.frozen_scale) {
    r.scale_shape = quantized_bits_scale_shape(x, a, settings);
    r.scale.assign(count(r.scale_shape), 12345.0f);
    const MutableTensorView s(r.scale.data(), DType::kFloat32, r.scale_shape);
    quantized_bits(x, alpha, a, settings, training, out, &s);
  } else {
    quantized_bits(x, alpha, a, settings, training, out);
  }
  if (gradient) {
    r.gradient.assign(count(spec.shape), 12345.0f);
    quantized_bits_gradient(x, alpha, a, settings, MutableTensorView(r.gradient.data(), DType::kFloat32, spec.shape));
  }
  return r;
}

Result call_relu(const TensorView& x, const QuantizedReluAttrs& a, const Training& training = {}, bool gradient = false) {
  Result r;
  const TensorSpec spec = quantized_relu_spec(x, a);
  EXPECT_EQ(spec.dtype, DType::kFloat32);
  r.shape = spec.shape;
  r.out.assign(count(spec.shape), 12345.0f);
  quantized_relu(x, a, training, MutableTensorView(r.out.data(), DType::kFloat32, spec.shape));
  if (gradient) {
    r.gradient.assign(count(spec.shape), 12345.0f);
    quantized_relu_gradient(x, a, MutableTensorView(r.gradient.data(), DType::kFloat32, spec.shape));
  }
  return r;
}

Result call_linear(const TensorView& x, const QuantizedLinearAttrs& a, const TensorView& alpha = {},
                   const Training& training = {}, const Settings& settings = {}, bool gradient = false) {
  Result r;
  const TensorSpec spec = quantized_linear_spec(x, alpha, a, settings);
  EXPECT_EQ(spec.dtype, DType::kFloat32);
  r.shape = spec.shape;
  r.out.assign(count(spec.shape), 12345.0f);
  r.scale_shape = quantized_linear_scale_shape(x, alpha, a, settings);
  r.scale.assign(count(r.scale_shape), 12345.0f);
  const MutableTensorView s(r.scale.data(), DType::kFloat32, r.scale_shape);
  quantized_linear(x, alpha, a, settings, training, MutableTensorView(r.out.data(), DType::kFloat32, spec.shape), &s);
  if (gradient) {
    r.gradient.assign(count(spec.shape), 12345.0f);
    quantized_linear_gradient(x, alpha, a, settings, MutableTensorView(r.gradient.data(), DType::kFloat32, spec.shape));
  }
  return r;
}

QuantizedBitsAttrs bits_attrs(double bits, double integer, bool symmetric = false, bool keep_negative = true) {
  QuantizedBitsAttrs a;
  a.bits = bits;
  a.integer = integer;
  a.symmetric = symmetric;
  a.keep_negative = keep_negative;
  return a;
}

QuantizedBitsAttrs bits_auto(Alpha alpha, double bits, double integer = 0, ScaleAxis axis = {}) {
  QuantizedBitsAttrs a = bits_attrs(bits, integer, true);
  a.alpha = alpha;
  a.scale_axis = std::move(axis);
  return a;
}

QuantizedReluAttrs relu_attrs(double bits, double integer, bool use_sigmoid = false, double negative_slope = 0) {
  QuantizedReluAttrs a;
  a.bits = bits;
  a.integer = integer;
  a.use_sigmoid = use_sigmoid;
  a.negative_slope = negative_slope;
  return a;
}

QuantizedLinearAttrs linear_attrs(double bits, double integer = 0, bool symmetric = true, bool keep_negative = true,
                                  Alpha alpha = Alpha::kNone, ScaleAxis axis = {}) {
  QuantizedLinearAttrs a;
  a.bits = bits;
  a.integer = integer;
  a.symmetric = symmetric;
  a.keep_negative = keep_negative;
  a.alpha = alpha;
  a.scale_axis = std::move(axis);
  return a;
}

// Restores the kernel set and thread count a test changes.
class RuntimeGuard {
 public:
  RuntimeGuard() : before_(runtime_info()) {}
  ~RuntimeGuard() {
    set_kernel_set(before_.isa);
    set_num_threads(before_.num_threads);
  }
  const RuntimeInfo& before() const { return before_; }

 private:
  RuntimeInfo before_;
};

// Runs `f` on every kernel set the CPU supports with 1, 2 and 5 threads (capped by the pool) and
// expects each result to equal the first one (scalar set, one thread) bit for bit.
void expect_same_everywhere(const std::string& what, const std::function<Result()>& f) {
  const RuntimeGuard guard;
  const auto& sets = guard.before().supported;
  std::optional<Result> want;
  for (auto it = sets.rbegin(); it != sets.rend(); ++it) {
    set_kernel_set(*it);
    for (int threads : {1, 2, 5}) {
      set_num_threads(threads);
      Result got = f();
      if (!want) {
        want = std::move(got);
        continue;
      }
      EXPECT_TRUE(same_result(got, *want)) << what << ": kernel set " << *it << ", " << threads << " threads vs scalar, 1 thread";
    }
  }
}

// ---- data --------------------------------------------------------------------------------------

// Per-channel data of a channels-last tensor: gaussian values whose magnitude depends on the
// channel (2^-6 .. 2^4), exact ties of a 2^-8 grid, exact zeros, and channel 1 all zero.
std::vector<float> channel_data(const Dims& shape, std::uint64_t salt) {
  auto rng = test::make_rng(salt);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 19), tie(-300, 300);
  const std::int64_t channels = shape.rank == 0 ? 1 : shape[shape.rank - 1];
  std::vector<float> v(count(shape));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto c = static_cast<std::int64_t>(i) % channels;
    const int p = pick(rng);
    if (c == 1 || p == 0) {
      v[i] = 0.0f;
    } else if (p == 1) {
      v[i] = (static_cast<float>(tie(rng)) + 0.5f) * 0x1p-8f;
    } else {
      v[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(c % 11) - 6);
    }
  }
  return v;
}

// Values on the 2^-12 grid inside (-limit, limit): every product and sum the quantizers form from
// them on a coarser grid is exact, so a stochastic result is exactly a grid neighbour.
std::vector<float> grid_data(std::size_t n, std::uint64_t salt, float limit) {
  auto rng = test::make_rng(salt);
  const int k = static_cast<int>(limit * 4096.0f) - 1;
  std::uniform_int_distribution<int> pick(-k, k);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(pick(rng)) * 0x1p-12f;
  return v;
}

std::vector<float> channel_alpha(std::int64_t channels, std::uint64_t salt) {
  auto rng = test::make_rng(salt);
  const float choices[] = {0.5f, 0.25f, 3.0f, 1e-3f, -2.0f, 1.0f, 0.1f};
  std::vector<float> v(static_cast<std::size_t>(channels));
  for (auto& a : v) a = choices[rng() % 7];
  return v;
}

// =================================================================================================
// Gold vectors: QKeras' own tests (notes §7) and values recorded from QKeras (notes §1, §11).
// =================================================================================================

// §7.1 tests/qactivation_test.py::test_quantized_bits (bits, integer, symmetric, keep_negative).
TEST(QKerasGold, QuantizedBitsFixedPoint) {
  const std::vector<float> in = {-3, -2, -1, -0.5f, 0, 0.5f, 1, 4, 10};
  EXPECT_TRUE(same_floats(
      call_bits(view(in), bits_attrs(6, 2, false, true)).out,
      from_bits({0xc0400000, 0xc0000000, 0xbf800000, 0xbf000000, 0x00000000, 0x3f000000, 0x3f800000, 0x40780000, 0x40780000})));
  EXPECT_TRUE(same_floats(
      call_bits(view(in), bits_attrs(6, 2, false, false)).out,
      from_bits({0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x3f000000, 0x3f800000, 0x407c0000, 0x407c0000})));
  const std::vector<float> in_sym = {-10, -4, -1, -0.5f, 0, 0.5f, 1, 4, 10};
  EXPECT_TRUE(same_floats(
      call_bits(view(in_sym), bits_attrs(6, 2, true, true)).out,
      from_bits({0xc0780000, 0xc0780000, 0xbf800000, 0xbf000000, 0x00000000, 0x3f000000, 0x3f800000, 0x40780000, 0x40780000})));
  // (8, 100, 1, True): the test's listed numbers are vacuous (rtol 5e27); these are QKeras' output
  // (step 2^93; -1.0992908e30 of the notes is one float32 step off, §11).
  const std::vector<float> huge = {1.25e29f, 3.0f, -1.1e30f, 4.0e32f};
  EXPECT_TRUE(same_floats(call_bits(view(huge, Dims{1, 4}), bits_attrs(8, 100, true, true)).out,
                          from_bits({0x6fd00000, 0x00000000, 0xf15e0000, 0x717e0000})));
}

// §7.2 test_quantized_bits_with_auto_po2_scale: outputs and reported scales, exact. The test passes
// a float64 array; QKeras casts it to float32 (so does polyquant).
TEST(QKerasGold, QuantizedBitsAutoPo2Scale) {
  const std::vector<double> x64 = {0.23, 2.76, 0.1, 0.33, 0.53, 0.16, 0.3, 1.43};
  std::vector<float> x32(x64.begin(), x64.end());
  struct Case {
    double bits, integer;
    std::vector<float> out, scale;
  };
  const Case cases[] = {
      {4,
       2,
       from_bits({0x3e800000, 0x40400000, 0x3dc00000, 0x3e800000, 0x3ee00000, 0x00000000, 0x3e600000, 0x3fc00000}),
       {0.125f, 1.0f, 0.0625f, 0.5f}},
      {4,
       1,
       from_bits({0x3e800000, 0x40400000, 0x3dc00000, 0x3e800000, 0x3ee00000, 0x00000000, 0x3e600000, 0x3fc00000}),
       {0.25f, 2.0f, 0.125f, 1.0f}},
      {5,
       2,
       from_bits({0x3e600000, 0x40300000, 0x3dc00000, 0x3ec00000, 0x3ef00000, 0x3e800000, 0x3e700000, 0x3fb00000}),
       {0.125f, 1.0f, 0.0625f, 0.5f}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("bits " + std::to_string(c.bits) + " integer " + std::to_string(c.integer));
    const QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, c.bits, c.integer);
    for (const TensorView& x : {TensorView(x64.data(), DType::kFloat64, Dims{2, 4}), view(x32, Dims{2, 4})}) {
      const Result r = call_bits(x, a);
      EXPECT_EQ(r.scale_shape.str(), "(1, 4)");
      EXPECT_TRUE(same_floats(r.out, c.out));
      EXPECT_TRUE(same_floats(r.scale, c.scale));
    }
  }
}

const std::vector<float> kRelu33 = {
    0.458069f, 0.573227f, 0.194336f, 1.539047f, 0.045883f, 4.009995f, 3.962494f, 3.9375f,   0.363266f, 0.875198f, 0.710938f,
    4.0f,      7.0f,      3.9375f,   3.937592f, 0.199326f, 0.458008f, 0.625977f, 0.544922f, 1.046875f, 0.586899f, 3.367188f,
    3.804688f, 0.3125f,   0.0625f,   0.5625f,   0.375f,    3.367188f, 1.046875f, 2.796875f, 0.054688f, 1.5625f,   2.5625f};

// §7.4 test_quantized_relu (bits, integer, use_sigmoid); the half-to-even witnesses are in both.
TEST(QKerasGold, QuantizedRelu) {
  const std::vector<float> in = {-3.0f, 0.0f, 2.5625f, 3.3671875f, 1.5625f, 1.046875f, 0.054688f};
  EXPECT_TRUE(same_floats(call_relu(view(in), relu_attrs(6, 2)).out,
                          from_bits({0x00000000, 0x00000000, 0x40240000, 0x40580000, 0x3fc80000, 0x3f880000, 0x3d800000})));
  EXPECT_TRUE(same_floats(
      call_relu(view(kRelu33), relu_attrs(6, 2, true)).out,
      from_bits({0x3f000000, 0x3f200000, 0x3e800000, 0x3fc00000, 0x00000000, 0x407c0000, 0x407c0000, 0x407c0000, 0x3ec00000,
                 0x3f600000, 0x3f400000, 0x407c0000, 0x407c0000, 0x407c0000, 0x407c0000, 0x3e800000, 0x3f000000, 0x3f200000,
                 0x3f000000, 0x3f800000, 0x3f200000, 0x40580000, 0x40700000, 0x3e800000, 0x00000000, 0x3f000000, 0x3ec00000,
                 0x40580000, 0x3f800000, 0x40300000, 0x00000000, 0x3fc00000, 0x40200000})));
}

// §7.5 tests/leakyrelu_test.py::test_quantized_relu (bits, integer, use_sigmoid, negative_slope).
TEST(QKerasGold, QuantizedReluLeaky) {
  const std::vector<float> in = {-3.0f, -2.0f, -1.0f, 0.0f, 2.5625f, 3.3671875f, 1.5625f, 1.046875f, 0.054688f, 6.0f};
  EXPECT_TRUE(same_floats(call_relu(view(in), relu_attrs(6, 2, false, 0.25)).out,
                          from_bits({0xbf400000, 0xbf000000, 0xbe800000, 0x00000000, 0x40200000, 0x40580000, 0x3fc00000,
                                     0x3f800000, 0x00000000, 0x40780000})));
  EXPECT_TRUE(same_floats(
      call_relu(view(kRelu33), relu_attrs(6, 2, true, 0.125)).out,
      from_bits({0x3f000000, 0x3f000000, 0x3e800000, 0x3fc00000, 0x00000000, 0x40780000, 0x40780000, 0x40780000, 0x3e800000,
                 0x3f800000, 0x3f400000, 0x40780000, 0x40780000, 0x40780000, 0x40780000, 0x3e800000, 0x3f000000, 0x3f400000,
                 0x3f000000, 0x3f800000, 0x3f000000, 0x40500000, 0x40700000, 0x3e800000, 0x00000000, 0x3f000000, 0x3f000000,
                 0x40500000, 0x3f800000, 0x40300000, 0x00000000, 0x3fc00000, 0x40200000})));
  std::vector<float> negated = kRelu33;
  for (float& v : negated) v = -v;
  EXPECT_TRUE(same_floats(
      call_relu(view(negated), relu_attrs(6, 2, true, 0.125)).out,
      from_bits({0x00000000, 0x00000000, 0x00000000, 0xbe800000, 0x00000000, 0xbf000000, 0xbf000000, 0xbf000000, 0x00000000,
                 0x00000000, 0x00000000, 0xbf000000, 0xbf000000, 0xbf000000, 0xbf000000, 0x00000000, 0x00000000, 0x00000000,
                 0x00000000, 0xbe800000, 0x00000000, 0xbf000000, 0xbf000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
                 0xbf000000, 0xbe800000, 0xbe800000, 0x00000000, 0xbe800000, 0xbe800000})));
}

// §7.6 tests/qnoise_test.py: qnoise_factor 0, 1 and 0.5 as a float32 variable (use_variables=True).
TEST(QKerasGold, QNoise) {
  const std::vector<float> in = {0.0f, 0.5f, -0.5f, 0.6f, -0.6f, 2.0f, -2.0f};
  const float one = 1.0f;
  const std::vector<std::vector<float>> want = {
      from_bits({0x00000000, 0x3f000000, 0xbf000000, 0x3f19999a, 0xbf19999a, 0x40000000, 0xc0000000}),
      from_bits({0x00000000, 0x3f000000, 0xbf000000, 0x3f000000, 0xbf000000, 0x3fe00000, 0xbfe00000}),
      from_bits({0x00000000, 0x3f000000, 0xbf000000, 0x3f0ccccd, 0xbf0ccccd, 0x3ff00000, 0xbff00000})};
  const double qs[] = {0.0, 1.0, 0.5};
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE("qnoise_factor " + std::to_string(qs[k]));
    QuantizedBitsAttrs b = bits_attrs(4, 1, true, true);
    b.alpha = Alpha::kValue;
    b.qnoise = {qs[k], true};
    EXPECT_TRUE(same_floats(call_bits(view(in), b, scalar_view(one)).out, want[static_cast<std::size_t>(k)]));
    // quantized_linear(4, 1, alpha=1): the same values (tests/qnoise_test.py @ d7b20af).
    QuantizedLinearAttrs l = linear_attrs(4, 1, true, true, Alpha::kValue);
    l.qnoise = {qs[k], true};
    EXPECT_TRUE(same_floats(call_linear(view(in), l, scalar_view(one)).out, want[static_cast<std::size_t>(k)]));
  }
  // quantized_relu(4, 1): is_quantized_clip x relu_upper_bound x qnoise_factor.
  const std::vector<float> relu_in = {0.0f, 0.5f, -0.5f, 0.6f, 2.0f, 3.0f};
  struct ReluCase {
    bool quantized_clip;
    std::optional<double> upper_bound;
    double q;
    std::vector<float> want;
  };
  const ReluCase relu_cases[] = {
      {false, {}, 0.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f19999a, 0x40000000, 0x40400000})},
      {false, {}, 1.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f200000, 0x3ff00000, 0x3ff00000})},
      {false, {}, 0.5, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f1ccccd, 0x3ff80000, 0x401c0000})},
      {true, {}, 0.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f19999a, 0x3ff00000, 0x3ff00000})},
      {true, {}, 1.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f200000, 0x3ff00000, 0x3ff00000})},
      {true, {}, 0.5, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f1ccccd, 0x3ff00000, 0x3ff00000})},
      {false, 1.5, 0.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f19999a, 0x3fc00000, 0x3fc00000})},
      {false, 1.5, 1.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f200000, 0x3fc00000, 0x3fc00000})},
      {false, 1.5, 0.5, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f1ccccd, 0x3fc00000, 0x3fc00000})},
      {true, 1.5, 0.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f19999a, 0x3ff00000, 0x3ff00000})},
      {true, 1.5, 1.0, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f200000, 0x3ff00000, 0x3ff00000})},
      {true, 1.5, 0.5, from_bits({0x00000000, 0x3f000000, 0x00000000, 0x3f1ccccd, 0x3ff00000, 0x3ff00000})},
  };
  for (const ReluCase& c : relu_cases) {
    SCOPED_TRACE("relu is_quantized_clip " + std::to_string(c.quantized_clip) + " upper bound " +
                 (c.upper_bound ? std::to_string(*c.upper_bound) : "None") + " qnoise_factor " + std::to_string(c.q));
    QuantizedReluAttrs a = relu_attrs(4, 1);
    a.is_quantized_clip = c.quantized_clip;
    a.relu_upper_bound = c.upper_bound;
    a.qnoise = {c.q, true};
    EXPECT_TRUE(same_floats(call_relu(view(relu_in), a).out, c.want));
  }
}

// §7.9 test_quantized_relu_fast_inference: the fast path equals the normal one (float64 input).
TEST(QKerasGold, QuantizedReluFastInference) {
  const std::vector<double> in = {-2.1, 0.73, 2.36, 4.98};
  const TensorView x(in.data(), DType::kFloat64, Dims{4});
  const std::vector<float> want = {0.0f, 0.73046875f, 2.359375f, 3.99609375f};
  QuantizedReluAttrs a = relu_attrs(10, 2);
  EXPECT_TRUE(same_floats(call_relu(x, a).out, want));
  a.enable_fast_inference = true;
  EXPECT_TRUE(same_floats(call_relu(x, a).out, want));
}

// §7.10 quantized_linear tests (tests/qactivation_test.py @ d7b20af): the sign function.
TEST(QKerasGold, QuantizedLinearSignFunction) {
  const std::vector<float> in = {-1, 0, 1, 2, 3};
  EXPECT_TRUE(same_floats(call_linear(view(in), linear_attrs(1)).out,
                          from_bits({0xbf000000, 0x3f000000, 0x3f000000, 0x3f000000, 0x3f000000})));
}

// §7.10 test_scale_values, bits=2: QKeras' `scale` is the quantization scale / data_type_scale
// (0.5 here); outputs as recorded.
TEST(QKerasGold, QuantizedLinearScaleValues) {
  const float dts = linear_data_type_scale(2, 0, true);
  ASSERT_EQ(dts, 0.5f);
  struct Case {
    Alpha alpha;
    std::vector<float> x;
    Dims shape;
    std::vector<float> scale;  // QKeras' `scale`
    std::vector<float> out;
  };
  const std::vector<float> r1 = {1, 2, 3, 4, 5};
  const std::vector<float> r2 = {-1, 0, 1, 2.5f, 4, -1, 4, 5, -2, -1, 1, 2, 3, 0, 20};
  const std::vector<float> r3 = {0, 1, 2, 3, 4, 5, 6, 7};
  const Case cases[] = {
      {Alpha::kAuto, r1, Dims{5}, {2, 4, 6, 8, 10}, from_bits({0x3f800000, 0x40000000, 0x40400000, 0x40800000, 0x40a00000})},
      {Alpha::kAutoPo2, r1, Dims{5}, {2, 4, 8, 8, 8}, from_bits({0x3f800000, 0x40000000, 0x40800000, 0x40800000, 0x40800000})},
      {Alpha::kAuto,
       r2,
       Dims{3, 5},
       {2, 8, 10, 5, 40},
       from_bits({0xbf800000, 0x00000000, 0x00000000, 0x40200000, 0x00000000, 0xbf800000, 0x40800000, 0x40a00000, 0xc0200000,
                  0x00000000, 0x3f800000, 0x00000000, 0x40a00000, 0x00000000, 0x41a00000})},
      {Alpha::kAutoPo2,
       r2,
       Dims{3, 5},
       {2, 8, 8, 4, 32},
       from_bits({0xbf800000, 0x00000000, 0x00000000, 0x40000000, 0x00000000, 0xbf800000, 0x40800000, 0x40800000, 0xc0000000,
                  0x00000000, 0x3f800000, 0x00000000, 0x40800000, 0x00000000, 0x41800000})},
      {Alpha::kAuto,
       r3,
       Dims{2, 2, 2},
       {12, 14},
       from_bits({0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x40c00000, 0x40e00000, 0x40c00000, 0x40e00000})},
      {Alpha::kAutoPo2,
       r3,
       Dims{2, 2, 2},
       {16, 16},
       from_bits({0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x41000000, 0x41000000, 0x41000000})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.alpha == Alpha::kAuto ? "auto " : "auto_po2 ") + c.shape.str());
    const Result r = call_linear(view(c.x, c.shape), linear_attrs(2, 0, true, true, c.alpha));
    std::vector<float> quantization_scale = c.scale;
    for (float& s : quantization_scale) s *= dts;
    EXPECT_TRUE(same_floats(r.scale, quantization_scale));
    EXPECT_TRUE(same_floats(r.out, c.out));
  }
}

// §7.10 test_scale_shape: ones of shape (1,), (2, 3), (2, 2, 4); QKeras' scale 128/127 (auto) and
// 1 (auto_po2) at the default 8 bits (data_type_scale 2^-7).
TEST(QKerasGold, QuantizedLinearScaleShape) {
  const std::pair<Dims, std::string> shapes[] = {{Dims{1}, "(1,)"}, {Dims{2, 3}, "(1, 3)"}, {Dims{2, 2, 4}, "(1, 1, 4)"}};
  for (const auto& [shape, want] : shapes) {
    const std::vector<float> ones(count(shape), 1.0f);
    for (Alpha alpha : {Alpha::kAuto, Alpha::kAutoPo2}) {
      SCOPED_TRACE(shape.str());
      const QuantizedLinearAttrs a = linear_attrs(8, 0, true, true, alpha);
      EXPECT_EQ(quantized_linear_scale_shape(view(ones, shape), {}, a).str(), want);
      const Result r = call_linear(view(ones, shape), a);
      EXPECT_EQ(r.scale_shape.str(), want);
      const float scale = alpha == Alpha::kAuto ? 1.0078740119934082f : 1.0f;
      for (float s : r.scale) EXPECT_TRUE(test::same_value(s, scale * 0x1p-7f)) << test::describe(s);
    }
  }
}

// §4.5 / §7.10 test_gradients_explicit and test_gradient_formula: outputs and straight-through
// gradients as recorded from QKeras.
TEST(QKerasGold, QuantizedLinearGradients) {
  const std::vector<float> x1 = {-1.1f, -0.1f, 0.0f, 0.1f, 1.1f};
  struct Explicit {
    double bits;
    bool keep_negative;
    std::vector<float> out, gradient;
  };
  const Explicit explicit_cases[] = {
      {1, true, {-0.5f, -0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 1, 1, 0}},
      {8, true, {-0.9921875f, -0.1015625f, 0.0f, 0.1015625f, 0.9921875f}, {0, 1, 1, 1, 0}},
      {1, false, {0.0f, 0.0f, 0.0f, 0.0f, 0.5f}, {0, 0, 1, 1, 0}},
      {8, false, {0.0f, 0.0f, 0.0f, 0.1015625f, 0.99609375f}, {0, 0, 1, 1, 0}},
  };
  for (const Explicit& c : explicit_cases) {
    SCOPED_TRACE("bits " + std::to_string(c.bits) + " keep_negative " + std::to_string(c.keep_negative));
    const Result r = call_linear(view(x1), linear_attrs(c.bits, 0, true, c.keep_negative), {}, {}, {}, true);
    EXPECT_TRUE(same_floats(r.out, c.out));
    EXPECT_TRUE(same_floats(r.gradient, c.gradient));
  }
  const std::vector<float> x2 = {-1, 0, 1, 2, 3};
  struct Formula {
    double bits;
    bool symmetric, keep_negative;
    std::optional<float> alpha;
    std::vector<float> out, gradient;
  };
  const Formula formula_cases[] = {
      {1, true, true, {}, {-0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 0, 0}},
      {8, true, true, {}, {-0.9921875f, 0.0f, 0.9921875f, 0.9921875f, 0.9921875f}, {0, 1, 0, 0, 0}},
      {1, false, true, {}, {-0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 0, 0}},
      {8, false, true, {}, {-1.0f, 0.0f, 0.9921875f, 0.9921875f, 0.9921875f}, {1, 1, 0, 0, 0}},
      {1, false, false, {}, {0.0f, 0.0f, 0.5f, 0.5f, 0.5f}, {0, 1, 0, 0, 0}},
      {8, false, false, {}, {0.0f, 0.0f, 0.99609375f, 0.99609375f, 0.99609375f}, {0, 1, 0, 0, 0}},
      {1, true, true, 2.0f, {-1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {1, 1, 1, 0, 0}},
      {8, true, true, 2.0f, {-1.0f, 0.0f, 1.0f, 1.984375f, 1.984375f}, {1, 1, 1, 0, 0}},
      {1, false, true, 2.0f, {-1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {1, 1, 1, 0, 0}},
      {8, false, true, 2.0f, {-1.0f, 0.0f, 1.0f, 1.984375f, 1.984375f}, {1, 1, 1, 0, 0}},
      {1, false, false, 2.0f, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f}, {0, 1, 1, 0, 0}},
      {8, false, false, 2.0f, {0.0f, 0.0f, 1.0f, 1.9921875f, 1.9921875f}, {0, 1, 1, 0, 0}},
  };
  for (const Formula& c : formula_cases) {
    SCOPED_TRACE("bits " + std::to_string(c.bits) + " symmetric " + std::to_string(c.symmetric) + " keep_negative " +
                 std::to_string(c.keep_negative) + (c.alpha ? " alpha 2" : " alpha None"));
    const float alpha = c.alpha.value_or(1.0f);
    const QuantizedLinearAttrs a = linear_attrs(c.bits, 0, c.symmetric, c.keep_negative, c.alpha ? Alpha::kValue : Alpha::kNone);
    const Result r = call_linear(view(x2), a, scalar_view(alpha), {}, {}, true);
    EXPECT_TRUE(same_floats(r.out, c.out));
    EXPECT_TRUE(same_floats(r.gradient, c.gradient));
  }
}

// tests/min_max_test.py::test_quantized_linear: q(-1000) and q(1000) are QKeras' min() and max(),
// which are fixed points; the midpoint of an 8-bit grid maps to the recorded value.
TEST(QKerasGold, QuantizedLinearSaturatesAtMinAndMax) {
  struct Case {
    double bits;
    bool symmetric, keep_negative;
    float alpha, min, max;
    std::optional<float> midpoint;
  };
  const Case cases[] = {
      {1, true, true, 1, -0.5f, 0.5f, {}},  {8, true, true, 1, -0.9921875f, 0.9921875f, 0.0f},
      {1, false, true, 1, -0.5f, 0.5f, {}}, {8, false, true, 1, -1.0f, 0.9921875f, 0.0f},
      {1, false, false, 1, 0.0f, 0.5f, {}}, {8, false, false, 1, 0.0f, 0.99609375f, 0.5f},
      {1, true, true, 2, -1.0f, 1.0f, {}},  {8, true, true, 2, -1.984375f, 1.984375f, 0.0f},
      {1, false, true, 2, -1.0f, 1.0f, {}}, {8, false, true, 2, -2.0f, 1.984375f, 0.0f},
      {1, false, false, 2, 0.0f, 1.0f, {}}, {8, false, false, 2, 0.0f, 1.9921875f, 1.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("bits " + std::to_string(c.bits) + " symmetric " + std::to_string(c.symmetric) + " keep_negative " +
                 std::to_string(c.keep_negative) + " alpha " + std::to_string(c.alpha));
    std::vector<float> x = {-1000.0f, 1000.0f, c.min, c.max};
    std::vector<float> want = {c.min, c.max, c.min, c.max};
    if (c.midpoint) {
      x.push_back(static_cast<float>((static_cast<double>(c.min) + c.max) / 2));
      want.push_back(*c.midpoint);
    }
    const Alpha alpha = c.alpha == 1.0f ? Alpha::kNone : Alpha::kValue;
    const Result r = call_linear(view(x), linear_attrs(c.bits, 0, c.symmetric, c.keep_negative, alpha), scalar_view(c.alpha));
    EXPECT_TRUE(same_floats(r.out, want));
  }
}

// §1 / §11: the literal blend x + q * ((-x) + xq) does not return xq for huge x, and a fixed alpha
// moves xq away from x; the values as recorded from QKeras (tests/data/qkeras cases c0319, c0361,
// c0795, c0798, c1303, c1304).
TEST(QKerasGold, BlendCancellationAndSignOfZero) {
  const std::vector<float> huge = {1e5f, 2e5f, 1e6f, 3e7f, -3e7f};
  EXPECT_TRUE(same_floats(call_bits(view(huge), bits_attrs(8, 0)).out,
                          from_bits({0x3f7e0000, 0x3f800000, 0x3f800000, 0x00000000, 0x00000000})));
  const std::vector<float> small = {0.3f, 0.7f, 0.123f, -0.61f};
  const float alpha = 0.001f;
  QuantizedBitsAttrs a = bits_attrs(8, 0);
  a.alpha = Alpha::kValue;
  EXPECT_TRUE(same_floats(call_bits(view(small), a, scalar_view(alpha)).out,
                          from_bits({0x399ba400, 0x3a385000, 0x39031200, 0xba1fc000})));
  // use_ste=False: the clip floor keep_negative * (-m + symmetric) is -0.0 when unsigned (§11).
  const std::vector<float> signed_zero = {-0.3f, 0.0f, 0.3f};
  QuantizedBitsAttrs unsigned_no_ste = bits_attrs(4, 0, false, false);
  unsigned_no_ste.use_ste = false;
  EXPECT_TRUE(same_floats(call_bits(view(signed_zero), unsigned_no_ste).out, from_bits({0x80000000, 0x00000000, 0x3ea00000})));
  // x = -0.0 there: QKeras gives +0.0 because TensorFlow's clip takes another branch on a tensor's
  // last few elements; polyquant gives the bound -0.0 on every element (docs/qkeras.md's documented
  // departure "zero_sign_scalar_remainder").
  EXPECT_TRUE(same_floats(call_bits(view(std::vector<float>{-0.0f}), unsigned_no_ste).out, {-0.0f}));
  // use_ste=False with a Python-float qnoise_factor: (1 - q) in double, rounded once.
  const std::vector<float> point6 = {0.6f};
  const float one = 1.0f;
  QuantizedBitsAttrs no_ste = bits_attrs(4, 1);
  no_ste.alpha = Alpha::kValue;
  no_ste.qnoise = {0.3, false};
  no_ste.use_ste = false;
  EXPECT_TRUE(same_floats(call_bits(view(point6), no_ste, scalar_view(one)).out, from_bits({0x3f11eb86})));
  QuantizedReluAttrs relu = relu_attrs(8, 0);
  relu.is_quantized_clip = false;
  EXPECT_TRUE(same_floats(call_relu(view(std::vector<float>{1e5f, 3e7f}), relu).out, from_bits({0x3f800000, 0x00000000})));
  EXPECT_TRUE(same_floats(call_relu(view(std::vector<float>{-3e7f}), relu_attrs(8, 0, false, 0.5)).out, from_bits({0x00000000})));
}

// §7.12 and §2: derived vectors of the notes (an independent float32 model of QKeras' source).
TEST(QKerasGold, DerivedVectors) {
  auto bits = [](std::vector<float> x, QuantizedBitsAttrs a) { return call_bits(view(x), a).out; };
  auto relu = [](std::vector<float> x, QuantizedReluAttrs a) { return call_relu(view(x), a).out; };
  auto linear = [](std::vector<float> x, QuantizedLinearAttrs a) { return call_linear(view(x), a).out; };
  // Half-to-even in the fixed-point path.
  EXPECT_TRUE(same_floats(bits({0.125f, 0.375f, 0.625f, -0.125f, -0.375f}, bits_attrs(3, 0)), {0, 0.5f, 0.5f, 0, -0.5f}));
  EXPECT_TRUE(same_floats(relu({1.0f / 32, 3.0f / 32, 5.0f / 32, 0.99f}, relu_attrs(4, 0)), {0, 0.125f, 0.125f, 0.9375f}));
  EXPECT_TRUE(
      same_floats(relu({-1, 0, 0.1f, 0.2f, 0.5f, 1, 2}, relu_attrs(4, 0, true)), {0, 0, 0.125f, 0.25f, 0.5f, 0.9375f, 0.9375f}));
  // bits = 1 with keep_negative: +-1 whatever `integer` is, 0 -> +1.
  for (double integer : {0.0, 3.0}) {
    EXPECT_TRUE(same_floats(bits({-2, -0.1f, 0, 0.1f, 2}, bits_attrs(1, integer)), {-1, -1, 1, 1, 1}));
  }
  // bits = 1 unsigned is a 1-bit grid {0, 0.5} (§2.3).
  EXPECT_TRUE(same_floats(bits({-2, -0.1f, 0, 0.1f, 0.3f, 2}, bits_attrs(1, 0, false, false)), {0, 0, 0, 0, 0.5f, 0.5f}));
  EXPECT_TRUE(same_floats(linear({-2, -0.1f, 0, -0.0f, 0.1f, 2}, linear_attrs(1)), {-0.5f, -0.5f, 0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_TRUE(same_floats(linear({-2, -0.1f, 0, 0.1f, 0.3f, 0.5f, 0.75f, 2}, linear_attrs(1, 0, true, false)),
                          {0, 0, 0, 0, 0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_TRUE(same_floats(linear({-2, -0.76f, 0.3f, 2}, linear_attrs(3, 0, false)), {-1, -0.75f, 0.25f, 0.75f}));
  EXPECT_TRUE(same_floats(linear({-2, -0.76f, 0.3f, 2}, linear_attrs(3, 0, true)), {-0.75f, -0.75f, 0.25f, 0.75f}));
  EXPECT_TRUE(same_floats(linear({-2, 0.3f, 2}, linear_attrs(3, 0, true, false)), {0, 0.25f, 0.875f}));
  EXPECT_TRUE(same_floats(linear({0, 0.5f, 1, 1.5f, 2}, linear_attrs(8, 3)), {0, 0.5f, 1, 1.5f, 2}));
  // quantized_linear(2, alpha="auto") on that vector: identity, per-element scale [2e-7, 1, 2, 3, 4].
  const Result auto_linear =
      call_linear(view(std::vector<float>{0, 0.5f, 1, 1.5f, 2}), linear_attrs(2, 0, true, true, Alpha::kAuto));
  EXPECT_TRUE(same_floats(auto_linear.out, {0, 0.5f, 1, 1.5f, 2}));
  EXPECT_TRUE(same_floats(auto_linear.scale, {1e-7f, 0.5f, 1, 1.5f, 2}));
  EXPECT_TRUE(same_floats(bits({0.1f, 0.3f, -0.3f}, bits_attrs(8, -2)), {0.099609375f, 0.248046875f, -0.25f}));
  EXPECT_TRUE(same_floats(bits({3.3f, 20, -20}, bits_attrs(4, 4)), {4, 14, -16}));
  // §2.2: a fixed alpha multiplies after quantization in quantized_bits, divides first in
  // quantized_linear.
  const float two = 2.0f;
  QuantizedBitsAttrs b2 = bits_attrs(8, 0);
  b2.alpha = Alpha::kValue;
  const std::vector<float> x3 = {0.3f, 0.6f, 1.5f};
  EXPECT_TRUE(same_floats(call_bits(view(x3), b2, scalar_view(two)).out, {0.59375f, 1.203125f, 1.984375f}));
  EXPECT_TRUE(same_floats(call_linear(view(x3), linear_attrs(8, 0, true, true, Alpha::kValue), scalar_view(two)).out,
                          {0.296875f, 0.59375f, 1.5f}));
  // §2.4: a rank-1 auto_po2 input gets one least-squares scale per element; the same values as a
  // column [4, 1] share one.
  const std::vector<float> v4 = {0.3f, -0.05f, 1.7f, 0.001f};
  const Result row = call_bits(view(v4), bits_auto(Alpha::kAutoPo2, 4));
  EXPECT_TRUE(same_floats(row.out, {0.25f, -0.046875f, 1.75f, 0.0008544921875f}));
  EXPECT_TRUE(same_floats(row.scale, {2, 0.0625f, 2, 0.0009765625f}));
  const Result column = call_bits(view(v4, Dims{4, 1}), bits_auto(Alpha::kAutoPo2, 4));
  EXPECT_TRUE(same_floats(column.out, {0.25f, 0, 1.75f, 0}));
  EXPECT_TRUE(same_floats(column.scale, {2}));
  EXPECT_EQ(column.scale_shape.str(), "(1, 1)");
  // keep_negative is ignored by the auto path: negatives survive.
  QuantizedBitsAttrs unsigned_auto = bits_auto(Alpha::kAuto, 4);
  unsigned_auto.keep_negative = false;
  EXPECT_LT(call_bits(view(std::vector<float>{-1, 0.5f, 1}, Dims{3, 1}), unsigned_auto).out[0], 0.0f);
}

// The straight-through gradients: quantized_bits 1 (use_ste) or 1 - q; quantized_relu d x_u / d x.
TEST(QKerasGold, BitsAndReluGradients) {
  const std::vector<float> x = {-2, -0.5f, 0, 0.5f, 1.875f, 1.9f, 3, kNaN};
  QuantizedBitsAttrs b = bits_attrs(4, 1);
  EXPECT_TRUE(same_floats(call_bits(view(x), b, {}, {}, {}, true).gradient, std::vector<float>(x.size(), 1.0f)));
  b.use_ste = false;
  b.qnoise = {0.3, false};
  EXPECT_TRUE(same_floats(call_bits(view(x), b, {}, {}, {}, true).gradient, std::vector<float>(x.size(), 0.7f)));
  // quantized_relu(4, 1): quantized clip at 2 - 2^-3 = 1.875.
  EXPECT_TRUE(same_floats(call_relu(view(x), relu_attrs(4, 1), {}, true).gradient, {0, 0, 0, 1, 1, 0, 0, 0}));
  EXPECT_TRUE(same_floats(call_relu(view(x), relu_attrs(4, 1, false, 0.25), {}, true).gradient,
                          {0.25f, 0.25f, 0.25f, 1, 0, 0, 0, 0}));  // leaky: 5 non-sign bits, cap 1.75
  QuantizedReluAttrs bounded = relu_attrs(4, 1);
  bounded.is_quantized_clip = false;
  bounded.relu_upper_bound = 2.5;
  bounded.use_ste = false;
  bounded.qnoise = {0.5, false};
  EXPECT_TRUE(same_floats(call_relu(view(x), bounded, {}, true).gradient, {0, 0, 0, 0.5f, 0.5f, 0.5f, 0, 0}));
}

// =================================================================================================
// The same bits on every kernel set and thread count; layouts against contiguous copies.
// =================================================================================================

// One quantizer configuration, callable on any view of an input whose last dimension has
// `channels` entries (per-channel alphas and post-training scales have that length).
struct QuantizerCase {
  std::string name;
  bool finite_data;  // the auto searches: per-channel finite data (NaN would fill whole groups)
  std::function<Result(const TensorView& x)> run;
};

std::vector<QuantizerCase> quantizer_cases(std::int64_t channels, int rank) {
  auto alpha = std::make_shared<std::vector<float>>(channel_alpha(channels, 40));
  auto frozen = std::make_shared<std::vector<float>>(static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < frozen->size(); ++i) (*frozen)[i] = std::ldexp(1.0f, static_cast<int>(i % 9) - 4);
  const Dims channel_shape{channels};
  Dims frozen_shape;
  frozen_shape.rank = rank;
  for (int d = 0; d < rank; ++d) frozen_shape[d] = d == rank - 1 ? channels : 1;
  std::vector<QuantizerCase> v;
  auto bits = [&](std::string name, QuantizedBitsAttrs a, bool with_alpha = false, Training t = {}, Settings s = {}) {
    const bool finite = is_auto(a.alpha);
    v.push_back({std::move(name), finite, [=](const TensorView& x) {
                   const TensorView av = a.frozen_scale ? view(*frozen, frozen_shape)
                                         : with_alpha   ? view(*alpha, channel_shape)
                                                        : TensorView();
                   return call_bits(x, a, av, t, s, !is_auto(a.alpha));
                 }});
  };
  auto relu = [&](std::string name, QuantizedReluAttrs a, Training t = {}) {
    v.push_back({std::move(name), false, [=](const TensorView& x) { return call_relu(x, a, t, true); }});
  };
  auto linear = [&](std::string name, QuantizedLinearAttrs a, bool with_alpha = false, Training t = {}, Settings s = {}) {
    const bool finite = is_auto(a.alpha);
    v.push_back({std::move(name), finite, [=](const TensorView& x) {
                   return call_linear(x, a, with_alpha ? view(*alpha, channel_shape) : TensorView(), t, s, !is_auto(a.alpha));
                 }});
  };
  const Training train{true, 20261124};
  // quantized_bits, fixed point
  bits("bits(8,0)", bits_attrs(8, 0));
  {
    QuantizedBitsAttrs a = bits_attrs(4, 2, true, true);
    a.alpha = Alpha::kValue;
    bits("bits(4,2,sym) per-channel alpha", a, true);
  }
  {
    QuantizedBitsAttrs a = bits_attrs(4, 0, false, false);
    a.use_ste = false;
    a.qnoise = {0.3, false};
    bits("bits(4,0,unsigned) use_ste=False q=0.3", a);
  }
  bits("bits(1,0) sign", bits_attrs(1, 0));
  {
    QuantizedBitsAttrs a = bits_attrs(0, 3, false, false);
    a.qnoise = {0.5, false};
    bits("bits(0,3,unsigned) q=0.5", a);
  }
  {
    QuantizedBitsAttrs a = bits_attrs(6, -2);
    a.qnoise = {0.3, true};
    bits("bits(6,-2) q=0.3 variable", a);
  }
  {
    QuantizedBitsAttrs a = bits_attrs(3, 0.5, true, false);
    a.qnoise = {0.7, false};
    bits("bits(3,0.5,sym,unsigned) q=0.7", a);
  }
  // quantized_bits, auto / auto_po2
  bits("bits auto 4", bits_auto(Alpha::kAuto, 4));
  bits("bits auto 8 integer 3 scale_axis 0", bits_auto(Alpha::kAuto, 8, 3, axis_int(0)));
  bits("bits auto_po2 4 integer 2", bits_auto(Alpha::kAutoPo2, 4, 2));
  bits("bits auto_po2 8 scale_axis []", bits_auto(Alpha::kAutoPo2, 8, 0, axis_list({})));
  bits("bits auto_po2 6 scale_axis 0", bits_auto(Alpha::kAutoPo2, 6, 0, axis_int(0)));
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 4, 0, axis_int(-1));
    a.elements_per_scale = {ElementsPerScale::Kind::kInt, {3}};
    a.min_po2_exponent = -6;
    a.max_po2_exponent = -1;
    bits("bits auto_po2 4 scale_axis -1 elements_per_scale 3 exponents [-6, -1]", a);
  }
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 5, 1, axis_list({rank - 1}));
    a.elements_per_scale = {ElementsPerScale::Kind::kList, {6}};
    a.max_po2_exponent = -3;
    bits("bits auto_po2 5 scale_axis [last] elements_per_scale [6] max exponent -3", a);
  }
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 4, 0, axis_list({0, rank - 1}));
    a.elements_per_scale = {ElementsPerScale::Kind::kInt, {1}};
    a.min_po2_exponent = -4;
    bits("bits auto_po2 4 scale_axis [0, last] elements_per_scale 1 min exponent -4", a);
  }
  bits("bits auto_po2 5 channels_first", bits_auto(Alpha::kAutoPo2, 5), false, {}, Settings{1e-7f, DataFormat::kChannelsFirst});
  bits("bits auto_po2 8 epsilon 1e-3", bits_auto(Alpha::kAutoPo2, 8), false, {}, Settings{1e-3f, DataFormat::kChannelsLast});
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 4);
    a.use_ste = false;
    a.qnoise = {0.5, false};
    bits("bits auto_po2 4 use_ste=False q=0.5", a);
  }
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 8, 3);
    a.frozen_scale = true;
    bits("bits auto_po2 8 post_training_scale", a);
  }
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 4);
    a.use_stochastic_rounding = true;
    bits("bits auto_po2 4 stochastic (ignored) training", a, false, train);
  }
  // quantized_relu
  relu("relu(6,2)", relu_attrs(6, 2));
  relu("relu(6,2,sigmoid)", relu_attrs(6, 2, true));
  relu("relu(6,2) ns=0.25", relu_attrs(6, 2, false, 0.25));
  relu("relu(6,2,sigmoid) ns=0.125", relu_attrs(6, 2, true, 0.125));
  {
    QuantizedReluAttrs a = relu_attrs(4, 1);
    a.is_quantized_clip = false;
    a.relu_upper_bound = 1.5;
    a.qnoise = {0.5, false};
    relu("relu(4,1) upper bound 1.5 q=0.5", a);
  }
  {
    QuantizedReluAttrs a = relu_attrs(8, 0);
    a.is_quantized_clip = false;
    relu("relu(8,0) unbounded", a);
  }
  {
    QuantizedReluAttrs a = relu_attrs(10, 2);
    a.enable_fast_inference = true;
    relu("relu(10,2) fast inference", a);
  }
  {
    QuantizedReluAttrs a = relu_attrs(4, 1, false, 1.0);
    a.use_ste = false;
    a.qnoise = {0.25, true};
    relu("relu(4,1) ns=1 use_ste=False q=0.25", a);
  }
  relu("relu(5,-1)", relu_attrs(5, -1));
  // quantized_linear
  linear("linear(8,0)", linear_attrs(8));
  linear("linear(4,1,asym) per-channel alpha", linear_attrs(4, 1, false, true, Alpha::kValue), true);
  linear("linear(1,0) sign", linear_attrs(1));
  linear("linear(1,0,unsigned)", linear_attrs(1, 0, true, false));
  {
    QuantizedLinearAttrs a = linear_attrs(3, 0, true, false);
    a.qnoise = {0.3, false};
    linear("linear(3,0,unsigned) q=0.3", a);
  }
  linear("linear auto 4", linear_attrs(4, 0, true, true, Alpha::kAuto));
  linear("linear auto 3 unsigned", linear_attrs(3, 0, true, false, Alpha::kAuto));
  linear("linear auto_po2 4", linear_attrs(4, 0, true, true, Alpha::kAutoPo2));
  linear("linear auto_po2 8 scale_axis []", linear_attrs(8, 2, false, true, Alpha::kAutoPo2, axis_list({})));
  linear("linear auto_po2 1 (sign)", linear_attrs(1, 0, true, true, Alpha::kAutoPo2));
  linear("linear auto_po2 6 scale_axis 0", linear_attrs(6, 0, true, true, Alpha::kAutoPo2, axis_int(0)));
  linear("linear auto_po2 5 channels_first", linear_attrs(5, 0, true, true, Alpha::kAutoPo2), false, {},
         Settings{1e-7f, DataFormat::kChannelsFirst});
  // training mode: stochastic rounding
  {
    QuantizedBitsAttrs a = bits_attrs(4, 0);
    a.use_stochastic_rounding = true;
    bits("bits(4,0) stochastic training", a, false, train);
  }
  {
    QuantizedReluAttrs a = relu_attrs(6, 2, false, 0.5);
    a.use_stochastic_rounding = true;
    relu("relu(6,2) ns=0.5 stochastic training", a, train);
  }
  {
    QuantizedReluAttrs a = relu_attrs(6, 2, true);
    a.use_stochastic_rounding = true;
    relu("relu(6,2,sigmoid) stochastic training", a, train);
  }
  {
    QuantizedLinearAttrs a = linear_attrs(8);
    a.use_stochastic_rounding = true;
    linear("linear(8,0) stochastic training", a, false, train);
  }
  {
    QuantizedLinearAttrs a = linear_attrs(4, 0, true, true, Alpha::kAutoPo2);
    a.use_stochastic_rounding = true;
    linear("linear auto_po2 4 stochastic training", a, false, train);
  }
  return v;
}

// 2003 x 66 = 132,198 elements: two elementwise chunks of 2^16, several grouped-reduction chunks
// when everything is one group (978 rows each), odd row counts for the SIMD tails.
TEST(QKerasInvariance, EveryKernelSetAndThreadCount) {
  const Dims shape{2003, 66};
  const std::vector<float> mixed = test::mixed_values(count(shape), 41, 0.125f);
  const std::vector<float> finite = channel_data(shape, 42);
  for (const QuantizerCase& c : quantizer_cases(66, 2)) {
    const std::vector<float>& x = c.finite_data ? finite : mixed;
    expect_same_everywhere(c.name, [&] { return c.run(view(x, shape)); });
  }
}

// The auto searches on data with NaN and infinities in some channels (and everything in one
// group): NaN fills its group, the rest is unaffected.
TEST(QKerasInvariance, AutoScalesWithSpecials) {
  const Dims shape{1001, 66};
  std::vector<float> x = channel_data(shape, 43);
  for (std::size_t i = 5; i < x.size(); i += 66 * 37) x[i] = kNaN;
  for (std::size_t i = 7; i < x.size(); i += 66 * 41) x[i] = -kInf;
  for (std::size_t i = 9; i < x.size(); i += 66 * 13) x[i] = 1e-41f;  // subnormal: flushed
  for (const QuantizerCase& c : quantizer_cases(66, 2)) {
    if (!c.finite_data) continue;
    expect_same_everywhere(c.name + " with specials", [&] { return c.run(view(x, shape)); });
  }
}

// Rank 1 (300,001 elements: a five-chunk maximum, then one least-squares scale per element) and
// rank 4 channels-last (NHWC) shapes.
TEST(QKerasInvariance, Rank1AndRank4) {
  const Dims r1{300001};
  std::vector<float> spread = channel_data(Dims{300001, 1}, 44);
  for (std::size_t i = 0; i < spread.size(); ++i) spread[i] *= std::ldexp(1.0f, static_cast<int>(i % 13) - 6);
  for (Alpha alpha : {Alpha::kAuto, Alpha::kAutoPo2}) {
    const std::string name = alpha == Alpha::kAuto ? "auto" : "auto_po2";
    expect_same_everywhere("rank-1 bits " + name, [&] { return call_bits(view(spread, r1), bits_auto(alpha, 6, 1)); });
    expect_same_everywhere("rank-1 linear " + name,
                           [&] { return call_linear(view(spread, r1), linear_attrs(6, 1, true, true, alpha)); });
  }
  const Dims r4{6, 20, 20, 66};
  const std::vector<float> x4 = channel_data(r4, 45);
  for (const QuantizerCase& c : quantizer_cases(66, 4)) {
    if (!c.finite_data) continue;
    expect_same_everywhere("rank-4 " + c.name, [&] { return c.run(view(x4, r4)); });
  }
}

// A view of `values` (C order, `shape`) stored in another layout: dimension order `order` in
// memory (outermost first), `gap` floats between consecutive innermost elements, dimensions in
// `reversed` walked backwards. Untouched memory holds a sentinel.
struct StridedCopy {
  std::vector<float> storage;
  TensorView view;
};

StridedCopy strided_copy(const std::vector<float>& values, const Dims& shape, const std::vector<int>& order, std::int64_t gap,
                         std::uint32_t reversed) {
  Dims strides = shape;
  std::int64_t step = gap;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = step;
    step *= std::max<std::int64_t>(shape[*it], 1);
  }
  std::int64_t offset = 0;
  for (int d = 0; d < shape.rank; ++d) {
    if ((reversed >> d) & 1u) {
      offset += (shape[d] - 1) * strides[d];
      strides[d] = -strides[d];
    }
  }
  StridedCopy c;
  c.storage.assign(static_cast<std::size_t>(step + 1), 7777.0f);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape.rank), 0);
  for (std::size_t flat = 0; flat < values.size(); ++flat) {
    std::int64_t off = offset, rem = static_cast<std::int64_t>(flat);
    for (int d = shape.rank - 1; d >= 0; --d) {
      off += (rem % shape[d]) * strides[d];
      rem /= shape[d];
    }
    c.storage[static_cast<std::size_t>(off)] = values[flat];
  }
  c.view = TensorView(c.storage.data() + offset, DType::kFloat32, shape, strides);
  return c;
}

// Every quantizer on strided, transposed, reversed and zero-stride views gives what it gives on a
// contiguous copy (training mode included: the random stream is keyed by the output's flat index).
TEST(QKerasLayouts, StridedViewsEqualContiguousCopies) {
  const Dims shape{5, 61, 66};
  const std::vector<float> mixed = test::mixed_values(count(shape), 46, 0.125f);
  const std::vector<float> finite = channel_data(shape, 47);
  struct ViewLayout {
    const char* name;
    std::vector<int> order;
    std::int64_t gap;
    std::uint32_t reversed;
  };
  const ViewLayout layouts[] = {
      {"reversed", {0, 1, 2}, 1, 0b111},
      {"every other element", {0, 1, 2}, 2, 0},
      {"channels outermost (transposed)", {2, 0, 1}, 1, 0},
      {"transposed, gapped, partly reversed", {1, 2, 0}, 3, 0b101},
  };
  for (const QuantizerCase& c : quantizer_cases(66, 3)) {
    const std::vector<float>& x = c.finite_data ? finite : mixed;
    const Result want = c.run(view(x, shape));
    for (const ViewLayout& l : layouts) {
      const StridedCopy s = strided_copy(x, shape, l.order, l.gap, l.reversed);
      EXPECT_TRUE(same_result(c.run(s.view), want)) << c.name << " on a " << l.name << " view";
    }
    // Zero strides: one row broadcast over dims 0 and 1 (np.broadcast_to), and one value per row
    // broadcast over the channels, each against its materialized copy.
    const std::vector<float> row(x.begin(), x.begin() + 66);
    std::vector<float> rows_copy(x.size()), channel_copy(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      rows_copy[i] = row[i % 66];
      channel_copy[i] = x[i / 66];
    }
    const TensorView row_broadcast(row.data(), DType::kFloat32, shape, Dims{0, 0, 1});
    EXPECT_TRUE(same_result(c.run(row_broadcast), c.run(view(rows_copy, shape)))) << c.name << " on a row broadcast";
    const TensorView channel_broadcast(x.data(), DType::kFloat32, shape, Dims{61, 1, 0});
    EXPECT_TRUE(same_result(c.run(channel_broadcast), c.run(view(channel_copy, shape)))) << c.name << " on a channel broadcast";
  }
}

// Strided, reversed and in-place outputs (and a reversed scale output) hold what a contiguous
// output holds; float64 inputs are rounded to float32 first and float64 outputs are the float32
// results widened.
TEST(QKerasLayouts, OutputsAndDtypes) {
  const Dims shape{129, 66};
  const std::vector<float> x = channel_data(shape, 48);
  std::vector<double> x64(x.begin(), x.end());
  const std::size_t n = x.size();
  const Dims reversed_strides{-66, -1};
  auto reversed_view = [&](std::vector<float>& buf) {
    return MutableTensorView(buf.data() + n - 1, DType::kFloat32, shape, reversed_strides);
  };
  auto unreverse = [&](const std::vector<float>& buf) { return std::vector<float>(buf.rbegin(), buf.rend()); };
  const Training train{true, 99};

  // quantized_bits auto_po2 with its scale
  const QuantizedBitsAttrs ba = bits_auto(Alpha::kAutoPo2, 6);
  const Result want_bits = call_bits(view(x, shape), ba);
  {
    std::vector<float> out(n), scale(66);
    const MutableTensorView scale_view(scale.data() + 65, DType::kFloat32, Dims{1, 66}, Dims{66, -1});
    quantized_bits(view(x, shape), {}, ba, {}, {}, reversed_view(out), &scale_view);
    EXPECT_TRUE(same_floats(unreverse(out), want_bits.out));
    EXPECT_TRUE(same_floats(std::vector<float>(scale.rbegin(), scale.rend()), want_bits.scale));
    std::vector<float> in_place = x;
    quantized_bits(view(in_place, shape), {}, ba, {}, {}, MutableTensorView(in_place.data(), DType::kFloat32, shape));
    EXPECT_TRUE(same_floats(in_place, want_bits.out)) << "in place";
    const Result from64 = call_bits(TensorView(x64.data(), DType::kFloat64, shape), ba);
    EXPECT_TRUE(same_result(from64, want_bits)) << "float64 input";
    std::vector<double> out64(n);
    quantized_bits(view(x, shape), {}, ba, {}, {}, MutableTensorView(out64.data(), DType::kFloat64, shape));
    EXPECT_TRUE(same_floats(std::vector<float>(out64.begin(), out64.end()), want_bits.out)) << "float64 output";
  }
  // quantized_relu in training mode
  QuantizedReluAttrs ra = relu_attrs(6, 2, false, 0.25);
  ra.use_stochastic_rounding = true;
  const Result want_relu = call_relu(view(x, shape), ra, train);
  {
    std::vector<float> out(n);
    quantized_relu(view(x, shape), ra, train, reversed_view(out));
    EXPECT_TRUE(same_floats(unreverse(out), want_relu.out));
    std::vector<float> in_place = x;
    quantized_relu(view(in_place, shape), ra, train, MutableTensorView(in_place.data(), DType::kFloat32, shape));
    EXPECT_TRUE(same_floats(in_place, want_relu.out)) << "in place";
  }
  // quantized_linear auto with its quantization scale; x overwritten through a reversed alias
  const QuantizedLinearAttrs la = linear_attrs(5, 0, true, true, Alpha::kAuto);
  const Result want_linear = call_linear(view(x, shape), la);
  {
    std::vector<float> out(n), scale(66);
    const MutableTensorView scale_view(scale.data() + 65, DType::kFloat32, Dims{1, 66}, Dims{66, -1});
    quantized_linear(view(x, shape), {}, la, {}, {}, reversed_view(out), &scale_view);
    EXPECT_TRUE(same_floats(unreverse(out), want_linear.out));
    EXPECT_TRUE(same_floats(std::vector<float>(scale.rbegin(), scale.rend()), want_linear.scale));
    std::vector<float> aliased = x;
    quantized_linear(view(aliased, shape), {}, la, {}, {}, reversed_view(aliased));
    EXPECT_TRUE(same_floats(unreverse(aliased), want_linear.out)) << "output aliasing x reversed";
  }
}

// =================================================================================================
// Planned calls (the *_plan functions, what the bindings use).
// =================================================================================================

// One op against its plan: the plan's spec is `spec` (the *_spec result); each run writes what
// `op` writes, byte for byte: the output, the scale (`scale_shape`: the reported scale's shape, or
// none) and the search info; it runs twice, the second time on another thread; an output of
// another shape or a non-float dtype is rejected naming `name`. The plan gets the scale's view
// after planning, as the bindings size it.
using PlanFn = std::function<PlannedCall(const MutableTensorView* scale, SearchInfo* info)>;
using OpFn = std::function<void(const MutableTensorView& out, const MutableTensorView* scale, SearchInfo* info)>;
void expect_plan_equals_op(const std::string& what, const TensorSpec& spec, const std::optional<Dims>& scale_shape,
                           const PlanFn& plan, const OpFn& op, const char* name) {
  SCOPED_TRACE(what);
  const auto bytes_equal = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  std::vector<float> out_op(count(spec.shape), 12345.0f), scale_op(scale_shape ? count(*scale_shape) : 0, 12345.0f);
  const MutableTensorView scale_op_view(scale_op.data(), DType::kFloat32, scale_shape.value_or(Dims{}));
  SearchInfo info_op{-1, -1};  // stays so where the op reports no search
  op(MutableTensorView(out_op.data(), DType::kFloat32, spec.shape), scale_shape ? &scale_op_view : nullptr, &info_op);

  std::vector<float> out_plan(out_op.size()), scale_plan(scale_op.size());
  MutableTensorView scale_plan_view;  // set after planning
  SearchInfo info_plan;
  const PlannedCall call = plan(scale_shape ? &scale_plan_view : nullptr, &info_plan);
  EXPECT_EQ(call.spec().dtype, spec.dtype);
  EXPECT_EQ(call.spec().shape.str(), spec.shape.str());
  if (scale_shape) scale_plan_view = MutableTensorView(scale_plan.data(), DType::kFloat32, *scale_shape);
  const MutableTensorView out(out_plan.data(), DType::kFloat32, spec.shape);
  for (int run = 0; run < 2; ++run) {
    std::fill(out_plan.begin(), out_plan.end(), 99.0f);
    std::fill(scale_plan.begin(), scale_plan.end(), 99.0f);
    info_plan = SearchInfo{-1, -1};
    if (run == 0) call.run(out);
    else std::thread([&] { call.run(out); }).join();
    EXPECT_TRUE(bytes_equal(out_plan, out_op)) << "output, run " << run;
    EXPECT_TRUE(bytes_equal(scale_plan, scale_op)) << "scale, run " << run;
    EXPECT_EQ(info_plan.max_passes, info_op.max_passes) << "run " << run;
    EXPECT_EQ(info_plan.least_squares_rounds, info_op.least_squares_rounds) << "run " << run;
  }
  expect_error([&] { call.run(MutableTensorView(out_plan.data(), DType::kInt32, spec.shape)); }, ErrorKind::kValue, {name, "int32"});
  expect_error([&] { call.run(MutableTensorView(out_plan.data(), DType::kFloat32, Dims{spec.shape.numel()})); },
               ErrorKind::kValue, {name, "out must have shape"});
}

TEST(QKerasPlans, PlannedCallsEqualTheOps) {
  const Dims shape{4, 6, 8};
  const std::vector<float> x = channel_data(shape, 97);
  const std::vector<float> alpha = channel_alpha(8, 98);
  const TensorView xv = view(x, shape), av = view(alpha, Dims{8});
  const Settings settings;
  const Training training{true, 0x5eedULL};  // stochastic rounding where the attributes ask for it

  // quantized_bits: a fixed point with a per-channel alpha and stochastic rounding, auto and
  // auto_po2 searches reporting their scale, a frozen (post_training_scale) call; the gradient.
  QuantizedBitsAttrs fixed = bits_attrs(5, 1);
  fixed.alpha = Alpha::kValue;
  fixed.use_stochastic_rounding = true;
  QuantizedBitsAttrs po2 = bits_auto(Alpha::kAutoPo2, 6, 1, axis_int(2));
  po2.use_ste = false;
  po2.qnoise = {0.75, false};
  QuantizedBitsAttrs frozen = bits_auto(Alpha::kAutoPo2, 8, 2);
  frozen.frozen_scale = true;
  const float frozen_value = 4.0f;
  const TensorView frozen_scale(&frozen_value, DType::kFloat32, Dims{});
  struct BitsCase {
    const char* name;
    QuantizedBitsAttrs attrs;
    TensorView alpha;
  };
  for (const BitsCase& c : {BitsCase{"fixed, alpha, stochastic", fixed, av}, BitsCase{"auto", bits_auto(Alpha::kAuto, 4), {}},
                            BitsCase{"auto_po2", po2, {}}, BitsCase{"post_training_scale", frozen, frozen_scale}}) {
    const TensorSpec spec = quantized_bits_spec(xv, c.alpha, c.attrs, settings);
    std::optional<Dims> scale_shape;
    if (is_auto(c.attrs.alpha) && !c.attrs.frozen_scale) scale_shape = quantized_bits_scale_shape(xv, c.attrs, settings);
    expect_plan_equals_op(
        std::string("quantized_bits ") + c.name, spec, scale_shape,
        [&](const MutableTensorView* s, SearchInfo* i) { return quantized_bits_plan(xv, c.alpha, c.attrs, settings, training, s, i); },
        [&](const MutableTensorView& o, const MutableTensorView* s, SearchInfo* i) {
          quantized_bits(xv, c.alpha, c.attrs, settings, training, o, s, i);
        },
        "quantized_bits");
    expect_plan_equals_op(
        std::string("quantized_bits_gradient ") + c.name, spec, std::nullopt,
        [&](const MutableTensorView*, SearchInfo*) { return quantized_bits_gradient_plan(xv, c.alpha, c.attrs, settings); },
        [&](const MutableTensorView& o, const MutableTensorView*, SearchInfo*) {
          quantized_bits_gradient(xv, c.alpha, c.attrs, settings, o);
        },
        "quantized_bits gradient");
  }

  // quantized_relu: leaky with stochastic rounding, and capped by relu_upper_bound; the gradient.
  QuantizedReluAttrs leaky = relu_attrs(6, 2, false, 0.25);
  leaky.use_stochastic_rounding = true;
  QuantizedReluAttrs capped = relu_attrs(4, 1);
  capped.relu_upper_bound = 1.5;
  capped.is_quantized_clip = false;
  for (const QuantizedReluAttrs& a : {leaky, capped}) {
    const TensorSpec spec = quantized_relu_spec(xv, a);
    expect_plan_equals_op(
        "quantized_relu", spec, std::nullopt,
        [&](const MutableTensorView*, SearchInfo*) { return quantized_relu_plan(xv, a, training); },
        [&](const MutableTensorView& o, const MutableTensorView*, SearchInfo*) { quantized_relu(xv, a, training, o); },
        "quantized_relu");
    expect_plan_equals_op(
        "quantized_relu_gradient", spec, std::nullopt,
        [&](const MutableTensorView*, SearchInfo*) { return quantized_relu_gradient_plan(xv, a); },
        [&](const MutableTensorView& o, const MutableTensorView*, SearchInfo*) { quantized_relu_gradient(xv, a, o); },
        "quantized_relu gradient");
  }

  // quantized_linear: alpha None, a per-channel alpha, auto_po2 with stochastic rounding (each
  // reporting its quantization scale); the gradients (auto_po2: its search runs there too).
  QuantizedLinearAttrs value = linear_attrs(6, 1);
  value.alpha = Alpha::kValue;
  QuantizedLinearAttrs searched = linear_attrs(5, 0, true, true, Alpha::kAutoPo2);
  searched.use_stochastic_rounding = true;
  struct LinearCase {
    const char* name;
    QuantizedLinearAttrs attrs;
    TensorView alpha;
  };
  for (const LinearCase& c : {LinearCase{"None", linear_attrs(4, 2, false), {}}, LinearCase{"alpha", value, av},
                              LinearCase{"auto_po2, stochastic", searched, {}}}) {
    const TensorSpec spec = quantized_linear_spec(xv, c.alpha, c.attrs, settings);
    expect_plan_equals_op(
        std::string("quantized_linear ") + c.name, spec, quantized_linear_scale_shape(xv, c.alpha, c.attrs, settings),
        [&](const MutableTensorView* s, SearchInfo* i) { return quantized_linear_plan(xv, c.alpha, c.attrs, settings, training, s, i); },
        [&](const MutableTensorView& o, const MutableTensorView* s, SearchInfo* i) {
          quantized_linear(xv, c.alpha, c.attrs, settings, training, o, s, i);
        },
        "quantized_linear");
    expect_plan_equals_op(
        std::string("quantized_linear_gradient ") + c.name, spec, std::nullopt,
        [&](const MutableTensorView*, SearchInfo*) { return quantized_linear_gradient_plan(xv, c.alpha, c.attrs, settings); },
        [&](const MutableTensorView& o, const MutableTensorView*, SearchInfo*) {
          quantized_linear_gradient(xv, c.alpha, c.attrs, settings, o);
        },
        "quantized_linear gradient");
  }
}

// =================================================================================================
// Training mode: stochastic rounding.
// =================================================================================================

// Every stochastic result is the floor or the ceiling neighbour on the grid; the same seed gives
// the same bits, another seed other bits; without training (or without use_stochastic_rounding)
// the rounding is QKeras' half-to-even.
TEST(QKerasTraining, StochasticRoundingPicksAGridNeighbour) {
  const std::size_t n = 150001;
  const std::vector<float> x = grid_data(n, 50, 0.95f);
  auto neighbours_ok = [&](const std::vector<float>& out, float step, float lo, float hi, float precision, const char* what) {
    std::size_t bad = 0, up = 0, down = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float p = x[i] / step * precision;  // exact: powers of two
      const float f = std::clamp(std::floor(p) / precision * step, lo, hi);
      const float c = std::clamp(std::ceil(p) / precision * step, lo, hi);
      if (out[i] != f && out[i] != c) {
        if (bad++ < 5)
          ADD_FAILURE() << what << " element " << i << ": x " << x[i] << " gave " << out[i] << ", not " << f << " or " << c;
      }
      if (f != c) (out[i] == c ? up : down)++;
    }
    EXPECT_EQ(bad, 0u) << what;
    EXPECT_GT(up, n / 10) << what << ": never rounded up";
    EXPECT_GT(down, n / 10) << what << ": never rounded down";
  };
  const Training train{true, 7}, other{true, 8};

  QuantizedBitsAttrs b = bits_attrs(8, 0);
  b.use_stochastic_rounding = true;
  const Result bits1 = call_bits(view(x), b, {}, train);
  neighbours_ok(bits1.out, 0x1p-7f, -1.0f, 1.0f - 0x1p-7f, 1.0f, "quantized_bits(8, 0)");
  EXPECT_TRUE(same_floats(call_bits(view(x), b, {}, train).out, bits1.out)) << "same seed";
  EXPECT_FALSE(same_floats(call_bits(view(x), b, {}, other).out, bits1.out)) << "another seed";
  QuantizedBitsAttrs b_det = bits_attrs(8, 0);
  EXPECT_TRUE(same_floats(call_bits(view(x), b, {}, Training{false, 7}).out, call_bits(view(x), b_det).out)) << "not training";
  EXPECT_TRUE(same_floats(call_bits(view(x), b_det, {}, train).out, call_bits(view(x), b_det).out))
      << "training without use_stochastic_rounding";

  // quantized_relu(6, 2): precision 0.5, so p = x * 16 rounds to a multiple of 0.5 (step 1/32).
  std::vector<float> xr = x;
  for (float& v : xr) v = std::fabs(v) * 4.0f;  // [0, 3.8): below the clip value 3.9375
  QuantizedReluAttrs r = relu_attrs(6, 2);
  r.use_stochastic_rounding = true;
  const Result relu1 = call_relu(view(xr), r, train);
  {
    std::size_t bad = 0, fine = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float p = xr[i] * 32.0f;
      const float f = std::floor(p) / 32.0f, c = std::ceil(p) / 32.0f;
      if (relu1.out[i] != f && relu1.out[i] != c && bad++ < 5) {
        ADD_FAILURE() << "relu element " << i << ": " << xr[i] << " -> " << relu1.out[i];
      }
      fine += relu1.out[i] != std::round(relu1.out[i] * 16.0f) / 16.0f;  // on the half-step grid
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_GT(fine, n / 10) << "quantized_relu's stochastic rounding uses precision 0.5 (half steps)";
  }
  EXPECT_TRUE(same_floats(call_relu(view(xr), r, train).out, relu1.out)) << "same seed";
  EXPECT_TRUE(same_floats(call_relu(view(xr), r).out, call_relu(view(xr), relu_attrs(6, 2)).out)) << "not training";

  QuantizedLinearAttrs l = linear_attrs(8);
  l.use_stochastic_rounding = true;
  const Result linear1 = call_linear(view(x), l, {}, train);
  neighbours_ok(linear1.out, 0x1p-7f, -127.0f * 0x1p-7f, 127.0f * 0x1p-7f, 1.0f, "quantized_linear(8, 0)");
  EXPECT_TRUE(same_floats(call_linear(view(x), l, {}, train).out, linear1.out)) << "same seed";
  EXPECT_FALSE(same_floats(call_linear(view(x), l, {}, other).out, linear1.out)) << "another seed";

  // quantized_bits' auto path ignores use_stochastic_rounding (QKeras: floor(|x| / s + 0.5)).
  QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 6);
  const Result deterministic = call_bits(view(x), a);
  a.use_stochastic_rounding = true;
  EXPECT_TRUE(same_result(call_bits(view(x), a, {}, train), deterministic));
}

// Unbiased up to the 2^-23 lattice: one value broadcast (zero stride) over 200,000 elements,
// a quarter of a step above a grid point, rounds up about a quarter of the time.
TEST(QKerasTraining, StochasticRoundingIsUnbiased) {
  const float value = (37.0f + 0.25f) * 0x1p-7f;
  const std::int64_t n = 200000;
  const TensorView x(&value, DType::kFloat32, Dims{n}, Dims{0});
  QuantizedBitsAttrs b = bits_attrs(8, 0);
  b.use_stochastic_rounding = true;
  const Result r = call_bits(x, b, {}, Training{true, 11});
  std::int64_t up = 0;
  for (float v : r.out) {
    ASSERT_TRUE(v == 37.0f * 0x1p-7f || v == 38.0f * 0x1p-7f) << v;
    up += v == 38.0f * 0x1p-7f;
  }
  const double fraction = static_cast<double>(up) / static_cast<double>(n);
  EXPECT_NEAR(fraction, 0.25, 0.0075) << up << " of " << n << " rounded up";  // ~7.7 standard deviations
}

// =================================================================================================
// Errors: polyquant::Error of the right kind, naming the parameter.
// =================================================================================================

const std::vector<float> kX4 = {0.5f, -1.0f, 2.0f, 0.25f};
const std::vector<float> kX23 = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f, -0.75f};

// Each bad attribute is rejected by the *_spec function and by the call itself.
void expect_bits_error(const QuantizedBitsAttrs& a, std::initializer_list<const char*> fragments, const TensorView& alpha = {},
                       bool spec_too = true) {
  const Dims shape{2, 3};
  const TensorView x = view(kX23, shape);
  if (spec_too) expect_error([&] { quantized_bits_spec(x, alpha, a); }, ErrorKind::kValue, fragments);
  std::vector<float> out(kX23.size()), scale(64);
  expect_error(
      [&] {
        const MutableTensorView s(scale.data(), DType::kFloat32, quantized_bits_scale_shape(x, a));
        quantized_bits(x, alpha, a, {}, {}, MutableTensorView(out.data(), DType::kFloat32, shape), &s);
      },
      ErrorKind::kValue, fragments);
}

void expect_linear_error(const QuantizedLinearAttrs& a, std::initializer_list<const char*> fragments,
                         const TensorView& alpha = {}, bool spec_too = true) {
  const TensorView x = view(kX23, Dims{2, 3});
  if (spec_too) expect_error([&] { quantized_linear_spec(x, alpha, a); }, ErrorKind::kValue, fragments);
  std::vector<float> out(kX23.size());
  expect_error(
      [&] {
        quantized_linear(x, alpha, a, {}, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{2, 3}));
      },
      ErrorKind::kValue, fragments);
  expect_error(
      [&] {
        quantized_linear_gradient(x, alpha, a, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{2, 3}));
      },
      ErrorKind::kValue, fragments);
}

void expect_relu_error(const QuantizedReluAttrs& a, std::initializer_list<const char*> fragments) {
  const TensorView x = view(kX4);
  expect_error([&] { quantized_relu_spec(x, a); }, ErrorKind::kValue, fragments);
  std::vector<float> out(4);
  expect_error([&] { quantized_relu(x, a, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{4})); }, ErrorKind::kValue,
               fragments);
  expect_error([&] { quantized_relu_gradient(x, a, MutableTensorView(out.data(), DType::kFloat32, Dims{4})); }, ErrorKind::kValue,
               fragments);
}

TEST(QKerasErrors, QuantizedBitsAttributes) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  expect_bits_error(bits_attrs(nan, 0), {"bits", "finite"});
  expect_bits_error(bits_attrs(8, inf), {"integer", "finite"});
  {
    QuantizedBitsAttrs a = bits_attrs(8, 0);
    a.qnoise = {nan, false};
    expect_bits_error(a, {"qnoise_factor"});
  }
  // elements_per_scale and the exponent limits need alpha="auto_po2".
  for (Alpha alpha : {Alpha::kNone, Alpha::kAuto}) {
    QuantizedBitsAttrs a = bits_attrs(8, 0, true);
    a.alpha = alpha;
    a.scale_axis = axis_int(1);
    a.elements_per_scale = {ElementsPerScale::Kind::kInt, {3}};
    expect_bits_error(a, {"elements_per_scale", "auto_po2"});
    a.elements_per_scale = {};
    a.min_po2_exponent = -3;
    expect_bits_error(a, {"min_po2_exponent", "auto_po2"});
    a.min_po2_exponent.reset();
    a.max_po2_exponent = 3;
    expect_bits_error(a, {"max_po2_exponent", "auto_po2"});
  }
  {
    QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 8);
    a.min_po2_exponent = nan;
    expect_bits_error(a, {"min_po2_exponent", "finite"});
    a.min_po2_exponent.reset();
    a.max_po2_exponent = -inf;
    expect_bits_error(a, {"max_po2_exponent", "finite"});
  }
  {
    const float s = 2.0f;
    QuantizedBitsAttrs a = bits_attrs(8, 0);
    a.frozen_scale = true;
    expect_bits_error(a, {"post_training_scale"}, scalar_view(s));
    a.alpha = Alpha::kValue;
    expect_bits_error(a, {"post_training_scale"}, scalar_view(s));
  }
  // auto with fewer than 2 bits has no nonzero level (QKeras returns NaN or 0).
  for (double bits : {1.0, 0.0, -3.0}) expect_bits_error(bits_auto(Alpha::kAuto, bits), {"bits", "auto"});
  expect_bits_error(bits_auto(Alpha::kAutoPo2, 1), {"bits", "auto"});
}

TEST(QKerasErrors, QuantizedBitsScaleAxisAndElementsPerScale) {
  expect_bits_error(bits_auto(Alpha::kAutoPo2, 8, 0, axis_int(2)), {"scale_axis", "2", "rank 2"}, {}, false);
  expect_bits_error(bits_auto(Alpha::kAuto, 8, 0, axis_int(-3)), {"scale_axis", "-3"}, {}, false);
  QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 8, 0, axis_int(1));
  a.elements_per_scale = {ElementsPerScale::Kind::kInt, {2}};
  expect_bits_error(a, {"elements_per_scale", "not divisible", "3"}, {}, false);
  a.elements_per_scale = {ElementsPerScale::Kind::kInt, {0}};
  expect_bits_error(a, {"elements_per_scale", "positive"}, {}, false);
  a.elements_per_scale = {ElementsPerScale::Kind::kInt, {-3}};
  expect_bits_error(a, {"elements_per_scale", "positive"}, {}, false);
  a.elements_per_scale = {ElementsPerScale::Kind::kList, {3}};
  expect_bits_error(a, {"elements_per_scale", "list"}, {}, false);
  a.scale_axis = {};
  a.elements_per_scale = {ElementsPerScale::Kind::kInt, {3}};
  expect_bits_error(a, {"elements_per_scale", "scale_axis"}, {}, false);
  a.scale_axis = axis_list({0, 1});
  a.elements_per_scale = {ElementsPerScale::Kind::kList, {1, 3, 1}};
  expect_bits_error(a, {"elements_per_scale", "same length"}, {}, false);
  a.elements_per_scale = {ElementsPerScale::Kind::kList, {2, 2}};
  expect_bits_error(a, {"elements_per_scale", "not divisible"}, {}, false);
  a.scale_axis = axis_list({1, 5});
  a.elements_per_scale = {ElementsPerScale::Kind::kInt, {1}};
  expect_bits_error(a, {"scale_axis", "5"}, {}, false);
  a.scale_axis = axis_list({1, -1});
  a.elements_per_scale = {ElementsPerScale::Kind::kList, {3, 1}};
  expect_bits_error(a, {"scale_axis", "twice"}, {}, false);
}

TEST(QKerasErrors, QuantizedBitsAlphaAndOutputs) {
  const TensorView x = view(kX23, Dims{2, 3});
  QuantizedBitsAttrs a = bits_attrs(8, 0);
  a.alpha = Alpha::kValue;
  // The alpha tensor is missing (a default view: one element, no data) or does not broadcast.
  expect_bits_error(a, {"alpha", "no data"});
  const std::vector<float> two = {1.0f, 2.0f};
  expect_bits_error(a, {"alpha", "(2,)", "(2, 3)"}, view(two));
  QuantizedBitsAttrs frozen = bits_auto(Alpha::kAutoPo2, 8);
  frozen.frozen_scale = true;
  expect_bits_error(frozen, {"post_training_scale", "no data"});
  expect_bits_error(frozen, {"post_training_scale", "(2,)"}, view(two));
  // Outputs: wrong shape, an integer dtype, no data; the scale output likewise.
  std::vector<float> out(6);
  std::vector<std::int32_t> out_int(6);
  const QuantizedBitsAttrs b = bits_attrs(8, 0);
  expect_error(
      [&] {
        quantized_bits(x, {}, b, {}, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{3, 2}));
      },
      ErrorKind::kValue, {"quantized_bits", "out", "(2, 3)", "(3, 2)"});
  expect_error(
      [&] {
        quantized_bits(x, {}, b, {}, {}, MutableTensorView(out_int.data(), DType::kInt32, Dims{2, 3}));
      },
      ErrorKind::kValue, {"quantized_bits", "out", "int32"});
  expect_error(
      [&] {
        quantized_bits(x, {}, b, {}, {}, MutableTensorView(nullptr, DType::kFloat32, Dims{2, 3}));
      },
      ErrorKind::kValue, {"quantized_bits", "out", "no data"});
  expect_error([&] { quantized_bits_gradient(x, {}, b, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{6})); },
               ErrorKind::kValue, {"quantized_bits gradient", "(2, 3)"});
  const QuantizedBitsAttrs au = bits_auto(Alpha::kAuto, 8);
  std::vector<float> scale(6);
  const MutableTensorView wrong_scale(scale.data(), DType::kFloat32, Dims{3});
  expect_error(
      [&] {
        quantized_bits(x, {}, au, {}, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{2, 3}), &wrong_scale);
      },
      ErrorKind::kValue, {"scale", "(1, 3)"});
  const MutableTensorView int_scale(out_int.data(), DType::kInt32, Dims{1, 3});
  expect_error(
      [&] {
        quantized_bits(x, {}, au, {}, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{2, 3}), &int_scale);
      },
      ErrorKind::kValue, {"scale", "int32"});
  // x without data
  expect_error([&] { quantized_bits_spec(TensorView(nullptr, DType::kFloat32, Dims{2, 3}), {}, b); }, ErrorKind::kValue, {"x"});
}

TEST(QKerasErrors, QuantizedReluAttributes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_relu_error(relu_attrs(6, 2, false, 0.1), {"negative_slope", "power of two", "0.1"});
  expect_relu_error(relu_attrs(6, 2, false, 0.3), {"negative_slope", "power of two"});
  expect_relu_error(relu_attrs(6, 2, false, -0.25), {"negative_slope", ">= 0"});
  expect_relu_error(relu_attrs(6, 2, false, nan), {"negative_slope"});
  expect_relu_error(relu_attrs(nan, 2), {"bits"});
  expect_relu_error(relu_attrs(6, -std::numeric_limits<double>::infinity()), {"integer"});
  QuantizedReluAttrs a = relu_attrs(6, 2);
  a.relu_upper_bound = nan;
  expect_relu_error(a, {"relu_upper_bound"});
  a.relu_upper_bound.reset();
  a.qnoise = {nan, true};
  expect_relu_error(a, {"qnoise_factor"});
  std::vector<float> out(4);
  expect_error(
      [&] {
        quantized_relu(view(kX4), relu_attrs(6, 2), {}, MutableTensorView(out.data(), DType::kFloat32, Dims{2, 2}));
      },
      ErrorKind::kValue, {"quantized_relu", "(4,)", "(2, 2)"});
  std::vector<std::int8_t> out8(4);
  expect_error([&] { quantized_relu(view(kX4), relu_attrs(6, 2), {}, MutableTensorView(out8.data(), DType::kInt8, Dims{4})); },
               ErrorKind::kValue, {"quantized_relu", "int8"});
}

TEST(QKerasErrors, QuantizedLinearAttributes) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bits : {0.0, -1.0, -0.5}) expect_linear_error(linear_attrs(bits), {"bits", "positive"});
  expect_linear_error(linear_attrs(nan), {"bits", "finite"});
  expect_linear_error(linear_attrs(8, nan), {"integer", "finite"});
  for (Alpha alpha : {Alpha::kAuto, Alpha::kAutoPo2})
    expect_linear_error(linear_attrs(0, 0, true, true, alpha), {"bits", "positive"});
  QuantizedLinearAttrs q = linear_attrs(8);
  q.qnoise = {nan, false};
  expect_linear_error(q, {"qnoise_factor"});
  // alpha missing or not broadcastable
  expect_linear_error(linear_attrs(8, 0, true, true, Alpha::kValue), {"alpha", "no data"});
  const std::vector<float> four = {1, 2, 3, 4};
  expect_linear_error(linear_attrs(8, 0, true, true, Alpha::kValue), {"alpha", "(4,)", "(2, 3)"}, view(four));
  // scale_axis out of range for the auto searches
  expect_linear_error(linear_attrs(8, 0, true, true, Alpha::kAutoPo2, axis_int(2)), {"scale_axis", "2"}, {}, false);
  expect_linear_error(linear_attrs(8, 0, true, true, Alpha::kAuto, axis_int(-3)), {"scale_axis", "-3"}, {}, false);
  expect_error(
      [&] {
        quantized_linear_scale_shape(view(kX23, Dims{2, 3}), {}, linear_attrs(8, 0, true, true, Alpha::kAuto, axis_int(7)));
      },
      ErrorKind::kValue, {"scale_axis", "7"});
  // outputs
  const TensorView x = view(kX23, Dims{2, 3});
  std::vector<float> out(6), scale(6);
  const QuantizedLinearAttrs au = linear_attrs(8, 0, true, true, Alpha::kAuto);
  const MutableTensorView wrong_scale(scale.data(), DType::kFloat32, Dims{3});
  expect_error(
      [&] {
        quantized_linear(x, {}, au, {}, {}, MutableTensorView(out.data(), DType::kFloat32, Dims{2, 3}), &wrong_scale);
      },
      ErrorKind::kValue, {"quantization_scale", "(1, 3)"});
  std::vector<std::uint16_t> out16(6);
  expect_error(
      [&] {
        quantized_linear(x, {}, au, {}, {}, MutableTensorView(out16.data(), DType::kUInt16, Dims{2, 3}));
      },
      ErrorKind::kValue, {"quantized_linear", "uint16"});
}

// The specs validate every attribute the call rejects (a non-finite qnoise_factor; with alpha
// "auto"/"auto_po2" an out-of-range scale_axis or an elements_per_scale that does not divide the
// axis; a bad epsilon).
TEST(QKerasErrors, SpecValidatesEveryAttribute) {
  const TensorView x = view(kX23, Dims{2, 3});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  QuantizedBitsAttrs q = bits_attrs(8, 0);
  q.qnoise = {nan, false};
  expect_error([&] { quantized_bits_spec(x, {}, q); }, ErrorKind::kValue, {"qnoise_factor"});
  expect_error([&] { quantized_bits_spec(x, {}, bits_auto(Alpha::kAutoPo2, 8, 0, axis_int(5))); }, ErrorKind::kValue,
               {"scale_axis"});
  QuantizedBitsAttrs e = bits_auto(Alpha::kAutoPo2, 8, 0, axis_int(1));
  e.elements_per_scale = {ElementsPerScale::Kind::kInt, {2}};
  expect_error([&] { quantized_bits_spec(x, {}, e); }, ErrorKind::kValue, {"elements_per_scale"});
  QuantizedLinearAttrs l = linear_attrs(8);
  l.qnoise = {nan, false};
  expect_error([&] { quantized_linear_spec(x, {}, l); }, ErrorKind::kValue, {"qnoise_factor"});
  expect_error([&] { quantized_linear_spec(x, {}, linear_attrs(8, 0, true, true, Alpha::kAuto, axis_int(5))); },
               ErrorKind::kValue, {"scale_axis"});
  for (float eps : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Settings bad;
    bad.epsilon = eps;
    expect_error([&] { quantized_bits_spec(x, {}, bits_auto(Alpha::kAutoPo2, 8), bad); }, ErrorKind::kValue, {"epsilon"});
    expect_error([&] { quantized_linear_spec(x, {}, linear_attrs(8), bad); }, ErrorKind::kValue, {"epsilon"});
  }
  // A power-of-two negative slope outside float32's range.
  QuantizedReluAttrs r;
  r.negative_slope = std::ldexp(1.0, -1000);
  expect_error([&] { quantized_relu_spec(x, r); }, ErrorKind::kValue, {"negative_slope"});
  r.negative_slope = std::ldexp(1.0, 200);
  expect_error([&] { quantized_relu_spec(x, r); }, ErrorKind::kValue, {"negative_slope"});
}

// A plan validates when it is made, with the op's errors: nothing is left to fail but the output.
TEST(QKerasErrors, PlansValidateWhenMade) {
  const TensorView x = view(kX23, Dims{2, 3});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  QuantizedBitsAttrs q = bits_attrs(8, 0);
  q.qnoise = {nan, false};
  expect_error([&] { quantized_bits_plan(x, {}, q, {}, {}); }, ErrorKind::kValue, {"qnoise_factor"});
  expect_error([&] { quantized_bits_gradient_plan(x, {}, q, {}); }, ErrorKind::kValue, {"qnoise_factor"});
  expect_error([&] { quantized_bits_plan(x, {}, bits_auto(Alpha::kAutoPo2, 8, 0, axis_int(5)), {}, {}); }, ErrorKind::kValue,
               {"scale_axis"});
  QuantizedReluAttrs r;
  r.negative_slope = 0.3;
  expect_error([&] { quantized_relu_plan(x, r, {}); }, ErrorKind::kValue, {"negative_slope"});
  expect_error([&] { quantized_relu_gradient_plan(x, r); }, ErrorKind::kValue, {"negative_slope"});
  expect_error([&] { quantized_linear_plan(x, {}, linear_attrs(0), {}, {}); }, ErrorKind::kValue, {"bits"});
  expect_error([&] { quantized_linear_gradient_plan(x, {}, linear_attrs(8, 0, true, true, Alpha::kAuto, axis_int(5)), {}); },
               ErrorKind::kValue, {"scale_axis"});
}

// A ScaleAxis or ElementsPerScale whose vector does not fit its kind (an int kind with no entry or
// several) is polyquant::Error naming the parameter (it was std::out_of_range from vector::at).
TEST(QKerasErrors, MalformedScaleAxisAndElementsPerScaleAreErrors) {
  QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, 8, 0, axis_int(1));
  a.elements_per_scale = {ElementsPerScale::Kind::kInt, {}};
  expect_bits_error(a, {"elements_per_scale"}, {}, false);
  a.scale_axis = {ScaleAxis::Kind::kInt, {}};
  a.elements_per_scale = {ElementsPerScale::Kind::kList, {3}};
  expect_bits_error(a, {"scale_axis"}, {}, false);
}

// =================================================================================================
// Rank-0 and empty inputs.
// =================================================================================================

Dims broadcast(const Dims& a, const Dims& b) {
  const std::array<Dims, 2> shapes{a, b};
  return broadcast_shapes(shapes, "test");
}

// Every quantizer and alpha kind on rank-0 and empty inputs: the documented output and scale
// shapes, no crash; a rank-0 input gives what the same value as a (1,) vector gives.
TEST(QKerasShapes, RankZeroAndEmpty) {
  const Dims shapes[] = {Dims{}, Dims{0}, Dims{3, 0}, Dims{0, 4}, Dims{2, 0, 3}, Dims{1}};
  const std::vector<float> data = {0.3f, -1.7f, 0.05f, 2.0f};
  const float alpha_value = 0.5f, frozen_value = 4.0f;
  const TensorView alpha0(&alpha_value, DType::kFloat32, Dims{});
  const TensorView alpha1(&alpha_value, DType::kFloat32, Dims{1});
  const TensorView frozen0(&frozen_value, DType::kFloat32, Dims{});
  struct BitsCase {
    const char* name;
    QuantizedBitsAttrs attrs;
    TensorView alpha;
  };
  QuantizedBitsAttrs value = bits_attrs(6, 1);
  value.alpha = Alpha::kValue;
  QuantizedBitsAttrs frozen = bits_auto(Alpha::kAutoPo2, 8, 2);
  frozen.frozen_scale = true;
  QuantizedBitsAttrs frozen_auto = bits_auto(Alpha::kAuto, 8);
  frozen_auto.frozen_scale = true;
  const BitsCase bits_cases[] = {
      {"None", bits_attrs(6, 1), {}},
      {"alpha 0-d", value, alpha0},
      {"alpha (1,)", value, alpha1},
      {"auto", bits_auto(Alpha::kAuto, 6), {}},
      {"auto_po2", bits_auto(Alpha::kAutoPo2, 6, 1), {}},
      {"auto_po2 scale_axis []", bits_auto(Alpha::kAutoPo2, 6, 1, axis_list({})), {}},
      {"auto_po2 post_training_scale", frozen, frozen0},
      {"auto post_training_scale", frozen_auto, frozen0},
  };
  for (const Dims& shape : shapes) {
    const std::vector<float> x(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(count(shape), 1)));
    const TensorView xv(x.empty() ? nullptr : x.data(), DType::kFloat32, shape);
    for (const BitsCase& c : bits_cases) {
      SCOPED_TRACE(std::string("quantized_bits ") + c.name + " on " + shape.str());
      const bool with_alpha = c.attrs.alpha == Alpha::kValue || c.attrs.frozen_scale;
      Result r;
      ASSERT_NO_THROW(r = call_bits(xv, c.attrs, c.alpha, Training{true, 1}, {}, true));
      EXPECT_EQ(r.shape.str(), (with_alpha ? broadcast(shape, c.alpha.shape) : shape).str());
      if (is_auto(c.attrs.alpha) && !c.attrs.frozen_scale) {
        if (shape.rank == 0) {
          EXPECT_EQ(r.scale_shape.str(), "()");
        }
        if (shape.rank == 1) {
          EXPECT_EQ(r.scale_shape.str(), c.attrs.alpha == Alpha::kAutoPo2 ? shape.str() : "(1,)");
        }
        if (shape.rank >= 2 && c.attrs.scale_axis.kind == ScaleAxis::Kind::kNone) {
          EXPECT_EQ(r.scale_shape[shape.rank - 1], shape[shape.rank - 1]);
        }
      }
      if (shape.rank == 0) {
        const Result as_vector = call_bits(view(x, Dims{1}), c.attrs, c.alpha, Training{true, 1}, {}, true);
        EXPECT_TRUE(same_floats(r.out, as_vector.out));
        EXPECT_TRUE(same_floats(r.scale, as_vector.scale));
        EXPECT_TRUE(same_floats(r.gradient, as_vector.gradient));
      }
    }
    for (QuantizedReluAttrs a : {relu_attrs(6, 2), relu_attrs(6, 2, true, 0.25), relu_attrs(10, 2)}) {
      SCOPED_TRACE("quantized_relu on " + shape.str());
      a.use_stochastic_rounding = true;
      Result r;
      ASSERT_NO_THROW(r = call_relu(xv, a, Training{true, 1}, true));
      EXPECT_EQ(r.shape.str(), shape.str());
      if (shape.rank == 0) {
        EXPECT_TRUE(same_floats(r.out, call_relu(view(x, Dims{1}), a, Training{true, 1}).out));
      }
      a.enable_fast_inference = true;
      ASSERT_NO_THROW(call_relu(xv, a));
    }
    struct LinearCase {
      const char* name;
      QuantizedLinearAttrs attrs;
      TensorView alpha;
    };
    const LinearCase linear_cases[] = {
        {"None", linear_attrs(6, 1), {}},
        {"sign", linear_attrs(1), {}},
        {"alpha 0-d", linear_attrs(6, 1, true, true, Alpha::kValue), alpha0},
        {"alpha (1,)", linear_attrs(6, 1, true, true, Alpha::kValue), alpha1},
        {"auto", linear_attrs(6, 1, true, true, Alpha::kAuto), {}},
        {"auto unsigned", linear_attrs(6, 1, true, false, Alpha::kAuto), {}},
        {"auto_po2", linear_attrs(6, 1, true, true, Alpha::kAutoPo2), {}},
        {"auto_po2 sign", linear_attrs(1, 0, true, true, Alpha::kAutoPo2), {}},
    };
    for (const LinearCase& c : linear_cases) {
      SCOPED_TRACE(std::string("quantized_linear ") + c.name + " on " + shape.str());
      Result r;
      QuantizedLinearAttrs a = c.attrs;
      a.use_stochastic_rounding = true;
      ASSERT_NO_THROW(r = call_linear(xv, a, c.alpha, Training{true, 1}, {}, true));
      EXPECT_EQ(r.shape.str(), (a.alpha == Alpha::kValue ? broadcast(shape, c.alpha.shape) : shape).str());
      if (a.alpha == Alpha::kValue) {
        EXPECT_EQ(r.scale_shape.str(), c.alpha.shape.str());
      }
      if (a.alpha == Alpha::kNone) {
        EXPECT_EQ(r.scale_shape.str(), "()");
      }
      if (is_auto(a.alpha) && shape.rank == 0) {
        EXPECT_EQ(r.scale_shape.str(), "()");
      }
      if (is_auto(a.alpha) && shape.rank >= 1) {
        EXPECT_EQ(r.scale_shape[shape.rank - 1], shape[shape.rank - 1]);
      }
      if (shape.rank == 0) {
        const Result as_vector = call_linear(view(x, Dims{1}), a, c.alpha, Training{true, 1}, {}, true);
        EXPECT_TRUE(same_floats(r.out, as_vector.out));
        EXPECT_TRUE(same_floats(r.scale, as_vector.scale));
        EXPECT_TRUE(same_floats(r.gradient, as_vector.gradient));
      }
    }
  }
  // An empty alpha broadcasts a 0-d x to an empty output.
  const float one = 1.0f;
  QuantizedBitsAttrs v = bits_attrs(8, 0);
  v.alpha = Alpha::kValue;
  EXPECT_EQ(call_bits(scalar_view(one), v, TensorView(nullptr, DType::kFloat32, Dims{0})).shape.str(), "(0,)");
  EXPECT_EQ(
      call_linear(scalar_view(one), linear_attrs(8, 0, true, true, Alpha::kValue), TensorView(nullptr, DType::kFloat32, Dims{0}))
          .shape.str(),
      "(0,)");
}


// ---- the fast paths of the searches against the computations they replace --------------------

// po2_round's fast path (no logarithm away from the rounding boundary) equals the reference
// 2^round(logf(s + eps) / ln 2) bit for bit: every exponent and sign, each one's window edges
// and a stride of mantissas, specials, with and without Keras' epsilon. (Checked once over every
// float32 y as well; this is the part that runs on every build.)
TEST(QKerasPo2Round, FastPathEqualsReference) {
  using internal::kPo2SlowHi;
  using internal::kPo2SlowLo;
  const detail::ScopedFlushDenormals flush;
  std::vector<std::uint32_t> mantissas{0, 1, 2, 0x7FFFFF, 0x7FFFFE, 3474675, 3474676, 3474677};
  for (std::uint32_t edge : {kPo2SlowLo, kPo2SlowHi}) {
    for (std::uint32_t d = 0; d < 4; ++d) mantissas.push_back(edge + d), mantissas.push_back(edge - d);
  }
  for (std::uint32_t f = 0; f < 0x800000; f += 4099) mantissas.push_back(f);
  std::int64_t checked = 0;
  for (float eps : {0.0f, 1e-7f}) {
    for (std::uint32_t high = 0; high < 512; ++high) {  // sign and exponent field
      for (std::uint32_t f : mantissas) {
        const float s = std::bit_cast<float>((high << 23) | f);
        const float got = internal::po2_round(s, eps), want = internal::po2_round_reference(s, eps);
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want)) << "s bits " << std::bit_cast<std::uint32_t>(s) << " eps " << eps;
        ++checked;
      }
    }
    for (float s : {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, 1e-45f, -1e-45f, 1e-39f}) {
      const float got = internal::po2_round(s, eps), want = internal::po2_round_reference(s, eps);
      EXPECT_TRUE(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want) || (std::isnan(got) && std::isnan(want))) << s;
    }
  }
  EXPECT_GT(checked, 1000000);
}

// The rank-1 auto_po2 search as every layout ran it before the element-by-element rounds: the
// max pass, then up to five global rounds over the grouped reduction (one group per element),
// stopping at the first round that returns its input bit for bit; then the quantizing pass.
struct GlobalSearch {
  std::vector<float> out, scale;  // scale as reported (s * m)
  int rounds = 0;
};
GlobalSearch global_rank1_search(const std::vector<float>& x, const QuantizedBitsAttrs& a, float eps) {
  using namespace internal;
  const Dims shape{static_cast<std::int64_t>(x.size())};
  const float m = std::pow(2.0f, static_cast<float>(a.bits - 1.0)), m_i = std::pow(2.0f, static_cast<float>(a.integer));
  const double half_levels = std::pow(2.0, a.bits - 1.0) - 1.0;
  const auto levels = static_cast<float>(half_levels * 2.0);
  ScaleArray s = group_max(x.data(), shape, {false}, true, true, m_i);
  map_scale(s, [&](float v) { return (v * 2.0f) / levels; });
  map_scale(s, [&](float v) { return po2_round_reference(v, eps); });
  Po2Clip clip;
  std::optional<double> lo, hi;
  if (a.min_po2_exponent) lo = std::pow(2.0, *a.min_po2_exponent);
  if (a.max_po2_exponent) hi = std::pow(2.0, *a.max_po2_exponent);
  if (lo && hi && *hi < *lo) hi = lo;
  if (lo) clip.lo = static_cast<float>(*lo);
  if (hi) clip.hi = static_cast<float>(*hi);
  GlobalSearch g;
  const std::vector<bool> keep{true};
  const std::vector<std::int64_t> block{1};
  for (int round = 0; round < 5; ++round) {
    const detail::GroupedLayout L = detail::make_grouped_layout(shape, keep, block, s.shape);
    std::vector<LeastSquaresAcc> sums(static_cast<std::size_t>(L.num_groups));
    detail::QkBitsAutoParams lp;
    lp.m = m;
    lp.m_i = m_i;
    lp.half_levels = static_cast<float>(half_levels);
    lp.level_only = true;
    LeastSquaresReducer reducer;
    reducer.level_kernel = detail::best_kernel(detail::KernelOp::kQkBitsAuto, detail::WorkType::kF32);
    reducer.level_params = &lp;
    reducer.divide = true;
    reducer.divisor = m_i;
    reducer.base = x.data();
    detail::grouped_reduce(x.data(), s.values.data(), L, reducer, sums.data());
    ++g.rounds;
    ScaleArray next = least_squares_po2(sums, L, shape, keep, block, eps, clip);
    const bool converged = next.same_bits(s);
    s = std::move(next);
    if (converged) break;
  }
  detail::QkBitsAutoParams fp;
  fp.m = m;
  fp.m_i = m_i;
  fp.half_levels = static_cast<float>(half_levels);
  fp.blend = make_blend(a.qnoise, a.use_ste);
  g.out.resize(x.size());
  detail::RowArgs r;
  r.in[0] = x.data();
  r.in[1] = s.values.data();
  r.out = g.out.data();
  r.n = static_cast<std::int64_t>(x.size());
  detail::best_kernel(detail::KernelOp::kQkBitsAuto, detail::WorkType::kF32)(&fp, r);
  map_scale(s, [&](float v) { return v * m; });
  g.scale = s.values;
  return g;
}

// Rank-1 data with what the rounds meet: ties of the level grid, exact zeros of both signs,
// subnormals (flushed), huge values, NaN and infinities, and a spread of magnitudes.
std::vector<float> rank1_data(std::size_t n, std::uint64_t salt, bool specials) {
  std::vector<float> x = grid_data(n, salt, 3.0f);
  std::mt19937_64 rng(salt);
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 3 == 1) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 11) - 5);
    if (i % 17 == 4) x[i] = (i % 2) ? -0.0f : 0.0f;
    if (i % 29 == 6) x[i] = std::ldexp(x[i], -100);
  }
  if (specials && n > 40) {
    x[n / 3] = kNaN;
    x[n / 2] = -kInf;
    x[n / 5] = 1e-41f;
    x[n / 7] = 3e38f;
  }
  return x;
}

// The element-by-element rounds of a rank-1 auto_po2 search give the global loop's scales,
// output and round count, bit for bit, for every kernel set and 1 and 2 threads: odd sizes (one
// element, a partial block, blocks and chunks and their edges), specials, clips, bits.
// The rank-1 rounds' kernel mode (QkBitsAutoParams::ls_po2: po2_round's fast path of the
// one-element quotient, +0 where the reference decides) on every kernel set equals the scalar
// element, and, where z = 1 and eps = 0 make the quotient x itself, po2_round_fast_bits(x): every
// exponent at the window edges +-2 ulp, and zeros, negatives, subnormals, huge values, NaN.
TEST(QKerasPo2Round, KernelFastPathOnEveryKernelSet) {
  using internal::kPo2SlowHi;
  using internal::kPo2SlowLo;
  std::vector<float> x, s;
  std::vector<bool> quotient_is_x;
  std::vector<int> exponents{-126, -125, -124, 123, 124, 125, 126, 127};  // fields 1 .. 3 and 250 .. 254
  for (int e = -120; e <= 120; e += 7) exponents.push_back(e);
  for (int e : exponents) {
    // x in [2^e, 2^(e+1)) with the scale 2^e: |x| / s + 0.5 floors to 1 (x < 1.5 * 2^e), z = 1.
    for (std::uint32_t edge : {kPo2SlowLo, kPo2SlowHi}) {
      for (int d = -2; d <= 2; ++d) {
        x.push_back(std::ldexp(1.0f + static_cast<float>(static_cast<std::int64_t>(edge) + d) / 8388608.0f, e));
        s.push_back(std::ldexp(1.0f, e));
        quotient_is_x.push_back(true);
      }
    }
    x.push_back(std::ldexp(1.25f, e)), s.push_back(std::ldexp(1.0f, e)), quotient_is_x.push_back(true);
  }
  for (float v : {0.0f, -0.0f, -1.0f, 1e-40f, -3e-39f, 3e38f, kInf, -kInf, kNaN, 7.0f, 1e-30f}) {
    for (float sc : {1.0f, 0x1p-23f, 0.0f, 3.0f, kNaN, 0x1p100f}) x.push_back(v), s.push_back(sc), quotient_is_x.push_back(false);
  }
  const auto n = static_cast<std::int64_t>(x.size());
  detail::QkBitsAutoParams p;
  p.m = 128.0f;
  p.m_i = 1.0f;
  p.inv_m_i = 1.0f;
  p.half_levels = 127.0f;
  p.level_only = true;
  p.ls_quotient = true;
  p.ls_po2 = true;
  for (float eps : {0.0f, 1e-7f}) {
    p.eps = eps;
    std::vector<float> want(static_cast<std::size_t>(n));
    detail::RowArgs a;
    a.in[0] = x.data();
    a.in[1] = s.data();
    a.n = n;
    a.out = want.data();
    detail::qk_bits_auto_reference_row<float>(&p, a);
    for (std::int64_t i = 0; i < n; ++i) {
      if (eps != 0.0f || !quotient_is_x[static_cast<std::size_t>(i)]) continue;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(want[static_cast<std::size_t>(i)]), internal::po2_round_fast_bits(x[static_cast<std::size_t>(i)]))
          << "x " << x[static_cast<std::size_t>(i)];
    }
    for (const detail::Isa isa : detail::supported_isas()) {
      const detail::RowKernel kernel = detail::kernel_for(detail::KernelOp::kQkBitsAuto, detail::WorkType::kF32, isa);
      for (bool pow2 : {false, true}) {
        p.pow2_scales = pow2;
        std::vector<float> got(static_cast<std::size_t>(n), 12345.0f), scales = s;
        if (pow2) {  // the reciprocal path only for powers of two
          for (float& v : scales) v = detail::exact_reciprocal(v) != 0.0f ? v : 1.0f;
          a.in[1] = scales.data();
          a.out = want.data();
          detail::qk_bits_auto_reference_row<float>(&p, a);
        }
        a.out = got.data();
        kernel(&p, a);
        EXPECT_TRUE(same_floats(got, want)) << "eps " << eps << " pow2 " << pow2;
        a.in[1] = s.data();
        a.out = want.data();
        detail::qk_bits_auto_reference_row<float>(&p, a);
      }
    }
  }
}

// The quantizing pass's second output (QkBitsAutoParams::scale_out, the rank-1 report s * m) on
// every kernel set equals the scalar rows': lengths with tails, unaligned outputs, streamed or
// not, scales per element, one for all, or one per row.
TEST(QKerasLayouts, ReportedScaleOutputOnEveryKernelSet) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(600), s(600);
  for (float& v : x) v = normal(rng);
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = i % 5 == 0 ? 0.3f : std::ldexp(1.0f, static_cast<int>(i % 9) - 6);
  x[3] = kNaN, x[40] = -0.0f, x[77] = 1e-40f, s[9] = kNaN, s[12] = 1e-39f;
  detail::QkBitsAutoParams p;
  p.m = 128.0f;
  p.m_i = 2.0f;
  p.inv_m = 1.0f / 128.0f;
  p.inv_m_i = 0.5f;
  p.half_levels = 127.0f;
  p.blend = {true, 1.0f, 0.0f};
  for (const detail::Isa isa : detail::supported_isas()) {
    const detail::RowKernel kernel = detail::kernel_for(detail::KernelOp::kQkBitsAuto, detail::WorkType::kF32, isa);
    for (std::int64_t n : {1, 15, 16, 17, 64, 100, 513}) {
      for (std::int64_t offset : {0, 1, 16}) {
        for (int scale_kind = 0; scale_kind < 3; ++scale_kind) {  // per element, broadcast, per row of 8
          for (bool stream : {false, true}) {
            const std::string what = "n " + std::to_string(n) + " offset " + std::to_string(offset) + " scales " +
                                     std::to_string(scale_kind) + " stream " + std::to_string(stream);
            if (scale_kind == 2 && n % 8 != 0) continue;
            std::vector<float> out(700, 1.0f), report(700, 2.0f), want_out(700, 1.0f), want_report(700, 2.0f);
            detail::RowArgs a;
            a.in[0] = x.data();
            a.in[1] = s.data();
            a.broadcast_mask = scale_kind == 1 ? 2u : 0u;
            if (scale_kind == 2) a.per_row_mask = 2u, a.row_len = 8;
            a.n = n;
            a.stream = stream;
            a.out = want_out.data() + offset;
            p.scale_out = want_report.data() + offset;
            detail::qk_bits_auto_reference_row<float>(&p, a);
            a.out = out.data() + offset;
            p.scale_out = report.data() + offset;
            kernel(&p, a);
            EXPECT_TRUE(same_floats(out, want_out)) << what;
            EXPECT_TRUE(same_floats(report, want_report)) << what;
          }
        }
      }
    }
  }
}

// Per-row operands (RowArgs::per_row_mask: one value per row of row_len elements), read by the row
// loop itself: every mix of x and the scale running on, one value, or one per row, row lengths
// shorter, equal to and longer than a vector and not a multiple of it, on every kernel set, equal
// to the scalar rows.
TEST(QKerasLayouts, PerRowOperandsOnEveryKernelSet) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(512), s(512);
  for (float& v : x) v = normal(rng);
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::ldexp(1.0f, static_cast<int>(i % 7) - 4) * (i % 3 == 0 ? 1.5f : 1.0f);
  x[5] = kNaN, x[6] = -0.0f, s[2] = kNaN;
  detail::QkBitsAutoParams p;
  p.m = 128.0f;
  p.m_i = 1.0f;
  p.half_levels = 127.0f;
  p.blend = {true, 1.0f, 0.0f};
  enum class Kind { kRunsOn, kOne, kPerRow };
  for (const detail::Isa isa : detail::supported_isas()) {
    const detail::RowKernel kernel = detail::kernel_for(detail::KernelOp::kQkBitsAuto, detail::WorkType::kF32, isa);
    for (std::int64_t len : {1, 5, 8, 16, 24, 40}) {
      for (Kind xk : {Kind::kRunsOn, Kind::kOne, Kind::kPerRow}) {
        for (Kind sk : {Kind::kRunsOn, Kind::kOne, Kind::kPerRow}) {
          if (xk != Kind::kPerRow && sk != Kind::kPerRow) continue;
          for (bool stream : {false, true}) {
            const std::int64_t n = len * 9;
            detail::RowArgs a;
            a.in[0] = x.data();
            a.in[1] = s.data();
            a.n = n;
            a.row_len = len;
            a.stream = stream;
            a.broadcast_mask = (xk == Kind::kOne ? 1u : 0u) | (sk == Kind::kOne ? 2u : 0u);
            a.per_row_mask = (xk == Kind::kPerRow ? 1u : 0u) | (sk == Kind::kPerRow ? 2u : 0u);
            std::vector<float> got(static_cast<std::size_t>(n) + 32, 7.0f), want = got;
            a.out = got.data() + 16;
            kernel(&p, a);
            a.out = want.data() + 16;
            detail::qk_bits_auto_reference_row<float>(&p, a);
            EXPECT_TRUE(same_floats(got, want)) << "len " << len << " x " << static_cast<int>(xk) << " scale " << static_cast<int>(sk)
                                                << " stream " << stream;
          }
        }
      }
    }
  }
}

TEST(QKerasLayouts, Rank1RoundsEqualTheGlobalLoop) {
  const RuntimeGuard guard;
  struct Case {
    double bits, integer;
    std::optional<double> min_e, max_e;
  };
  const Case cases[] = {{8, 0, {}, {}}, {4, 2, {}, {}}, {6, 1, -3.0, 1.0}, {3, 0, {}, -4.0}, {16, -3, -40.0, {}}, {2, 0, {}, {}}};
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1023}, std::size_t{1025},
                        std::size_t{16385}, std::size_t{70001}}) {
    for (bool specials : {false, true}) {
      const std::vector<float> x = rank1_data(n, 500 + n, specials);
      for (const Case& k : cases) {
        QuantizedBitsAttrs a = bits_auto(Alpha::kAutoPo2, k.bits, k.integer);
        a.min_po2_exponent = k.min_e;
        a.max_po2_exponent = k.max_e;
        set_kernel_set(guard.before().isa);
        set_num_threads(guard.before().num_threads);
        const GlobalSearch want = global_rank1_search(x, a, Settings{}.epsilon);
        for (const std::string& isa : guard.before().supported) {
          set_kernel_set(isa);
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            const Dims shape{static_cast<std::int64_t>(n)};
            std::vector<float> out(n, 12345.0f), scale(n, 12345.0f);
            SearchInfo info;
            const MutableTensorView sv(scale.data(), DType::kFloat32, shape);
            quantized_bits(view(x, shape), {}, a, Settings{}, Training{}, MutableTensorView(out.data(), DType::kFloat32, shape), &sv, &info);
            const std::string what = "n=" + std::to_string(n) + " bits=" + std::to_string(k.bits) + " specials=" +
                                     std::to_string(specials) + " " + isa + " threads=" + std::to_string(threads);
            EXPECT_TRUE(same_floats(out, want.out)) << what;
            EXPECT_TRUE(same_floats(scale, want.scale)) << what;
            EXPECT_EQ(info.least_squares_rounds, want.rounds) << what;
            // A strided output (no speculative writes): the same output through the final pass.
            std::vector<float> wide(2 * n, 7.0f);
            quantized_bits(view(x, shape), {}, a, Settings{}, Training{},
                           MutableTensorView(wide.data(), DType::kFloat32, shape, Dims{2}));
            std::vector<float> strided(n);
            for (std::size_t i = 0; i < n; ++i) strided[i] = wide[2 * i];
            EXPECT_TRUE(same_floats(strided, want.out)) << what << " strided out";
          }
        }
      }
    }
  }
}


// The grouped reductions' segment modes (many short groups per call: scale_axis=0 on a tall,
// narrow tensor) on every kernel set equal the scalar reference rows bit for bit: every segment
// length 1 .. 40 and a few longer, ties, NaN, +-0, subnormals, accumulators strided.
TEST(QKerasLayouts, SegmentKernelsMatchTheReference) {
  std::vector<float> x = grid_data(4096, 77, 4.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i % 31 == 3) x[i] = kNaN;
    if (i % 37 == 5) x[i] = -0.0f;
    if (i % 41 == 7) x[i] = 1e-40f;
    if (i % 43 == 9) x[i] = -kInf;
  }
  // A stretch of subnormals and zeros: whole segments whose maximum flushes to +0.
  for (std::size_t i = 300; i < 600; ++i) x[i] = i % 3 == 0 ? -0.0f : (i % 3 == 1 ? 1e-40f : -3e-39f);
  std::vector<float> z(x.size());
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = std::isfinite(x[i]) ? std::nearbyint(x[i] * 30.0f) : x[i];
  std::vector<std::int64_t> segments;
  for (std::int64_t n = 1; n <= 40; ++n) segments.push_back(n);
  for (std::int64_t n : {64, 100, 255}) segments.push_back(n);
  for (const detail::Isa isa : detail::supported_isas()) {
    const detail::RowKernel max_kernel = detail::kernel_for(detail::KernelOp::kGroupMax, detail::WorkType::kF32, isa);
    const detail::RowKernel sums_kernel = detail::kernel_for(detail::KernelOp::kProductSums, detail::WorkType::kF32, isa);
    ASSERT_NE(max_kernel, nullptr);
    ASSERT_NE(sums_kernel, nullptr);
    for (std::int64_t seg : segments) {
      const std::int64_t count = std::min<std::int64_t>(37, static_cast<std::int64_t>(x.size()) / seg - 1);
      for (std::int64_t offset : {0, 3}) {
        const detail::ScopedFlushDenormals flush;
        detail::RowArgs a;
        a.in[0] = x.data() + offset;
        a.in[1] = z.data() + offset;
        a.n = count * seg;
        for (std::int64_t stride : {1, 3}) {
          for (bool absolute : {true, false}) {
            detail::GroupMaxParams p;
            p.absolute = absolute;
            p.segment = seg;
            p.acc_stride = stride;
            std::vector<float> got(static_cast<std::size_t>(count * stride), -kInf), want = got;
            for (std::size_t i = 0; i < got.size(); i += 5) got[i] = want[i] = 0.5f;
            a.out = got.data();
            max_kernel(&p, a);
            a.out = want.data();
            detail::group_max_reference_row<float>(&p, a);
            ASSERT_TRUE(same_floats(got, want)) << "group_max segment " << seg << " offset " << offset << " stride " << stride;
          }
        }
        // Few channels per element (n divides the lane count), rows contiguous.
        for (std::int64_t channels : {1, 2, 4, 8, 16}) {
          for (std::int64_t rows : {1, 3, 4, 7, 16, 33}) {
            for (bool absolute : {true, false}) {
              detail::GroupMaxParams p;
              p.absolute = absolute;
              p.per_element = true;
              p.rows = rows;
              p.x_row_stride = channels;
              std::vector<float> got(static_cast<std::size_t>(channels), -kInf), want = got;
              got[0] = want[0] = 0.25f;
              detail::RowArgs g;
              g.in[0] = x.data() + offset + seg;
              g.n = channels;
              g.out = got.data();
              max_kernel(&p, g);
              g.out = want.data();
              detail::group_max_reference_row<float>(&p, g);
              ASSERT_TRUE(same_floats(got, want)) << "group_max channels " << channels << " rows " << rows;
            }
          }
        }
        for (int divide = 0; divide < 3; ++divide) {
          detail::ProductSumsParams p;
          p.segment = seg;
          p.divide = divide > 0;
          p.divisor = divide == 2 ? 3.0f : 0.25f;
          p.inv_divisor = divide == 1 ? 4.0f : 0.0f;
          // Each segment's pair is written, not added to: different prior contents, same result.
          std::vector<double> got(static_cast<std::size_t>(2 * count), 0.125), want(got.size(), -7.0);
          a.out = got.data();
          sums_kernel(&p, a);
          a.out = want.data();
          detail::product_sums_reference_row<float>(&p, a);
          for (std::size_t i = 0; i < got.size(); ++i) {
            ASSERT_TRUE(std::bit_cast<std::uint64_t>(got[i]) == std::bit_cast<std::uint64_t>(want[i]) ||
                        (std::isnan(got[i]) && std::isnan(want[i])))
                << "product_sums segment " << seg << " offset " << offset << " divide " << divide << " at " << i;
          }
        }
      }
    }
  }
}

// Tall, narrow and channels-first layouts (the innermost dimension reduced: segments) give the
// same scales and outputs on every kernel set and thread count as the scalar set on one thread,
// which folds each run by itself.
TEST(QKerasLayouts, ReducedInnermostLayoutsOnEveryKernelSet) {
  struct Layout {
    Dims shape;
    ScaleAxis axis;
  };
  const Layout layouts[] = {{Dims{4099, 16}, axis_int(0)},  {Dims{3001, 5}, axis_int(0)},   {Dims{257, 1}, axis_int(0)},
                            {Dims{16, 2053}, axis_int(0)},  {Dims{33, 17, 9}, axis_int(1)}, {Dims{7, 64, 33}, axis_int(0)},
                            {Dims{1, 70001}, axis_int(0)},  {Dims{5, 3, 300}, axis_list({0, 1})},
                            // few channels, channels last: rows folded as whole vectors
                            {Dims{4099, 4}, ScaleAxis{}},   {Dims{3001, 2}, ScaleAxis{}},   {Dims{1001, 8}, ScaleAxis{}},
                            {Dims{999, 16}, ScaleAxis{}},   {Dims{5, 1}, ScaleAxis{}}};
  for (const Layout& l : layouts) {
    std::vector<float> x = rank1_data(count(l.shape), 900 + count(l.shape), true);
    for (Alpha alpha : {Alpha::kAuto, Alpha::kAutoPo2}) {
      const std::string what = std::string(alpha == Alpha::kAuto ? "auto " : "auto_po2 ") + std::to_string(l.shape[0]) + "x" +
                               std::to_string(l.shape[l.shape.rank - 1]);
      expect_same_everywhere(what, [&] { return call_bits(view(x, l.shape), bits_auto(alpha, 6, 1, l.axis)); });
      expect_same_everywhere(what + " linear", [&] { return call_linear(view(x, l.shape), linear_attrs(6, 1, true, true, alpha, l.axis)); });
    }
  }
  // A row of a tall, narrow tensor (scale_axis=0: one group per row, folded as segments) is the
  // row quantized alone as a (1, n) tensor (one group, one run).
  for (const Dims& shape : {Dims{4099, 16}, Dims{3001, 5}, Dims{515, 40}}) {
    const std::int64_t n = shape[1];
    std::vector<float> x = rank1_data(count(shape), 950 + count(shape), true);
    for (Alpha alpha : {Alpha::kAuto, Alpha::kAutoPo2}) {
      const Result all = call_bits(view(x, shape), bits_auto(alpha, 8, 0, axis_int(0)));
      for (std::int64_t r = 0; r < shape[0]; r += 97) {
        const std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
        const Result one = call_bits(view(row, Dims{1, n}), bits_auto(alpha, 8, 0, axis_int(0)));
        const std::vector<float> want_out(all.out.begin() + r * n, all.out.begin() + (r + 1) * n);
        EXPECT_TRUE(same_floats(one.out, want_out)) << "row " << r << " of " << shape[0] << "x" << n;
        EXPECT_TRUE(same_floats(one.scale, {all.scale[static_cast<std::size_t>(r)]})) << "row " << r << " of " << shape[0] << "x" << n;
      }
    }
  }
}

// The gradients times an upstream gradient (grad_output): grad_output * (d out / d x), x86's float32
// product with grad_output first, under TensorFlow's flush (a subnormal grad_output counts as a zero
// of its sign), against that product spelled out here: NaN grad_output comes back quieted, inf * 0
// is x86's default NaN; on every kernel set and thread count; float16 grad_output widened exactly;
// a grad_output of another shape or dtype is an error naming it.
TEST(QKerasApi, GradientsTimesGradOutputAreTheFlushedProduct) {
  const Dims shape{3, 40};
  std::vector<float> x(120), g(120);
  for (int i = 0; i < 120; ++i) {
    x[static_cast<std::size_t>(i)] = -4.0f + 0.0703125f * static_cast<float>(i);  // across the clip and zero
    g[static_cast<std::size_t>(i)] = std::ldexp(static_cast<float>((i * 37) % 23) - 11.0f, (i % 9) - 4);
  }
  g[0] = std::numeric_limits<float>::infinity();
  g[1] = std::bit_cast<float>(0x7FC12345u);  // a NaN with a payload
  g[2] = std::bit_cast<float>(0xFF812345u);  // a signalling NaN
  g[3] = -1e-40f;                            // subnormal: flushed
  g[4] = -0.0f;
  g[100] = -std::numeric_limits<float>::infinity();  // x = 3.03: above quantized_relu's clip, d = 0
  const TensorView xv(x.data(), DType::kFloat32, shape), gv(g.data(), DType::kFloat32, shape);
  const float one = 1.0f;
  const TensorView no_alpha(&one, DType::kFloat32, Dims{});
  auto expected = [&](const std::vector<float>& d) {
    std::vector<float> want(120);
    for (std::size_t i = 0; i < 120; ++i) {
      float gi = g[i];
      if (std::isnan(gi)) {  // x86: the NaN operand, quieted
        want[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(gi) | 0x00400000u);
        continue;
      }
      if (gi != 0.0f && std::fabs(gi) < std::numeric_limits<float>::min()) gi = std::copysign(0.0f, gi);  // DAZ
      if (std::isinf(gi) && d[i] == 0.0f) {
        want[i] = std::bit_cast<float>(0xFFC00000u);  // x86's default NaN
        continue;
      }
      const float p = gi * d[i];
      want[i] = (p != 0.0f && std::fabs(p) < std::numeric_limits<float>::min()) ? std::copysign(0.0f, p) : p;  // FTZ
    }
    return want;
  };
  auto bits_of = [](const std::vector<float>& v) {
    std::vector<std::uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * 4);
    return b;
  };
  QuantizedBitsAttrs bits;
  bits.bits = 4;
  bits.use_ste = false;
  bits.qnoise.factor = 0.25;
  QuantizedReluAttrs relu;
  relu.bits = 4;
  relu.integer = 1;
  relu.negative_slope = 0.125;
  QuantizedLinearAttrs linear;
  linear.bits = 3;
  linear.qnoise.factor = 0.5;
  struct Case {
    const char* name;
    std::function<void(const MutableTensorView&, const TensorView*)> run;
  };
  const Case cases[] = {
      {"quantized_bits", [&](const MutableTensorView& o, const TensorView* up) { quantized_bits_gradient(xv, no_alpha, bits, {}, o, up); }},
      {"quantized_relu", [&](const MutableTensorView& o, const TensorView* up) { quantized_relu_gradient(xv, relu, o, up); }},
      {"quantized_linear", [&](const MutableTensorView& o, const TensorView* up) { quantized_linear_gradient(xv, no_alpha, linear, {}, o, up); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> d(120);
    c.run(MutableTensorView(d.data(), DType::kFloat32, shape), nullptr);
    ASSERT_TRUE(std::any_of(d.begin(), d.end(), [](float v) { return v != 0.0f && v != 1.0f; }) ||
                std::any_of(d.begin(), d.end(), [](float v) { return v == 0.0f; }))
        << "the derivative takes more than one value";
    const std::vector<float> want = expected(d);
    expect_same_everywhere(c.name, [&] {
      Result r;
      r.out.assign(120, 12345.0f);
      c.run(MutableTensorView(r.out.data(), DType::kFloat32, shape), &gv);
      EXPECT_EQ(bits_of(r.out), bits_of(want));
      return r;
    });
    // float16 grad_output: exactly widened.
    std::vector<detail::Half> g16(120);
    std::vector<float> g16_wide(120);
    for (std::size_t i = 5; i < 120; ++i) g16[i] = detail::Half(g[i]), g16_wide[i] = static_cast<float>(g16[i]);
    const TensorView g16_view(g16.data(), DType::kFloat16, shape), g16_wide_view(g16_wide.data(), DType::kFloat32, shape);
    std::vector<float> from16(120), from32(120);
    c.run(MutableTensorView(from16.data(), DType::kFloat32, shape), &g16_view);
    c.run(MutableTensorView(from32.data(), DType::kFloat32, shape), &g16_wide_view);
    EXPECT_EQ(bits_of(from16), bits_of(from32));
    std::vector<double> g64(120);
    const TensorView wrong_dtype(g64.data(), DType::kFloat64, shape), wrong_shape(g.data(), DType::kFloat32, Dims{120});
    std::vector<float> o(120);
    expect_error([&] { c.run(MutableTensorView(o.data(), DType::kFloat32, shape), &wrong_dtype); }, ErrorKind::kType,
                 "grad_output: dtype float64 is not supported; float32, float16 or bfloat16");
    expect_error([&] { c.run(MutableTensorView(o.data(), DType::kFloat32, shape), &wrong_shape); }, ErrorKind::kValue,
                 "grad_output: shape (120,) must equal the gradient's shape (3, 40)");
  }
}

}  // namespace
}  // namespace polyquant::qkeras
