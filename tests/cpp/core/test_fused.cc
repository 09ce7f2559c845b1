// Derived parameters computed inside the kernel pass (core/fused.h): per-element parameters in
// runs (memo hits, blocks of one value handed to the kernel as broadcast) and in random order
// (misses), strided, negative-stride and broadcast parameter views, rows shorter and longer than
// the 1024-element block, multithreaded sizes, chained derivations (Trunc v2's zeropt /
// trunc_scale), and errors raised before any output element is written. Every element must equal
// the same op called on that element's values as 0-d tensors (the per-tensor path).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "polyquant/polyquant.h"
#include "test_util.h"

namespace polyquant {
namespace {

// The address of the element of `v` (broadcast onto a rank-2 out shape) at (r, c).
const void* element(const TensorView& v, std::int64_t r, std::int64_t c) {
  const std::int64_t idx[2] = {r, c};
  std::int64_t off = 0;
  for (int d = 0; d < v.shape.rank; ++d) {
    const int o = 2 - v.shape.rank + d;
    if (v.shape[d] != 1) off += idx[o] * v.strides[d];
  }
  return static_cast<const unsigned char*>(v.data) + off * static_cast<std::int64_t>(dtype_size(v.dtype));
}

template <std::size_t K>
using Op = std::function<void(const TensorView& x, const std::array<TensorView, K>& params, const MutableTensorView& out)>;

// Runs `op` over x (rows x cols) with `params` on every kernel set and compares a sample of the
// elements (every `step`-th, plus both ends of each block boundary nearby) with 0-d calls.
template <std::size_t K>
void expect_elementwise(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                        const std::array<TensorView, K>& params, const Op<K>& op, std::int64_t step) {
  const Dims shape{rows, cols};
  const std::int64_t n = rows * cols;
  const RuntimeInfo info = runtime_info();
  for (const auto& isa : info.supported) {
    set_kernel_set(isa);
    std::vector<float> out(static_cast<std::size_t>(n), -1.0f);
    op(TensorView(x.data(), DType::kFloat32, shape), params, MutableTensorView(out.data(), DType::kFloat32, shape));
    std::int64_t bad = 0, checked = 0;
    for (std::int64_t i = 0; i < n; i += (i % 1024 == 1023 || i % 1024 == 0) ? 1 : step) {
      const std::int64_t r = i / cols, c = i % cols;
      std::array<TensorView, K> one;
      for (std::size_t k = 0; k < K; ++k) one[k] = TensorView(element(params[k], r, c), params[k].dtype, Dims{});
      float want = 0;
      op(TensorView(&x[static_cast<std::size_t>(i)], DType::kFloat32, Dims{}), one,
         MutableTensorView(&want, DType::kFloat32, Dims{}));
      ++checked;
      if (!test::same_value(out[static_cast<std::size_t>(i)], want)) {
        if (++bad <= 3) {
          ADD_FAILURE() << isa << ": element " << i << " got " << test::describe(out[static_cast<std::size_t>(i)])
                        << " want " << test::describe(want);
        }
      }
    }
    EXPECT_EQ(bad, 0) << isa << ", " << checked << " checked";
  }
  set_kernel_set(info.isa);
}

// n values drawn from `pool`, in runs of `run` (1: a random value per element).
template <class T>
std::vector<T> drawn(std::int64_t n, std::int64_t run, const std::vector<T>& pool, std::uint64_t salt) {
  auto rng = test::make_rng(salt);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; i += run) {
    const T value = pool[rng() % pool.size()];
    for (std::int64_t j = i; j < i + run && j < n; ++j) v[static_cast<std::size_t>(j)] = value;
  }
  return v;
}

const Op<4> kTruncV1 = [](const TensorView& x, const std::array<TensorView, 4>& p, const MutableTensorView& out) {
  qonnx::trunc(x, p[0], p[1], p[2], p[3], RoundingMode::kFloor, out);
};
const Op<5> kTruncV2 = [](const TensorView& x, const std::array<TensorView, 5>& p, const MutableTensorView& out) {
  qonnx::trunc_v2(x, p[0], p[1], p[2], p[3], p[4], {true, false, RoundingMode::kHalfUp}, out);
};
const float kMantissa = 3.0f;
const Op<4> kFloatQuant = [](const TensorView& x, const std::array<TensorView, 4>& p, const MutableTensorView& out) {
  qonnx::FloatQuantAttrs attrs;
  attrs.has_nan = true;
  qonnx::float_quant(x, p[0], p[1], TensorView(&kMantissa, DType::kFloat32, Dims{}), p[2], p[3], attrs, out);
};

// Full-size parameters in runs (that straddle blocks) and in random order, over > 2^17 elements
// (several threads), for all three ops; Trunc v2's zeropt / trunc_scale derives from a derived
// operand (chained) with a per-element zeropt.
TEST(FusedDerived, PerElementRunsAndRandomOrderEqualPerTensor) {
  const std::int64_t rows = 3, cols = 50'001;  // 150'003 elements
  const std::int64_t n = rows * cols;
  const auto x = test::mixed_values(static_cast<std::size_t>(n), 301, 60.0f);
  const Dims shape{rows, cols};
  for (const std::int64_t run : {std::int64_t{1}, std::int64_t{700}, std::int64_t{5000}}) {
    SCOPED_TRACE("run " + std::to_string(run));
    const auto scale = drawn<float>(n, run, {0.5f, 0.25f, 0.75f, 3.0f}, 1);
    const auto zeropt = drawn<float>(n, run, {0.0f, 1.0f, -3.0f, 2.5f}, 2);
    const auto in_bw = drawn<std::int64_t>(n, run, {8, 10, 16}, 3);
    const auto out_bw = drawn<std::int64_t>(n, run, {3, 4, 6}, 4);
    const auto out_scale = drawn<float>(n, run, {2.0f, 6.0f, 0.5f, 1.0f, 1e30f}, 5);
    const auto out_bwf = drawn<float>(n, run, {2.0f, 4.0f, 8.0f, 5.0f}, 6);
    const auto exponent = drawn<float>(n, run, {4.0f, 5.0f, 3.0f}, 7);
    const auto bias = drawn<float>(n, run, {7.0f, 15.0f, 3.0f}, 8);
    const auto max_val = drawn<double>(n, run, {448.0, 240.1, 1e9, 57344.0}, 9);  // 240.1: not a float32
    auto f32 = [&](const std::vector<float>& v) { return TensorView(v.data(), DType::kFloat32, shape); };
    expect_elementwise<4>(x, rows, cols, {f32(scale), f32(zeropt), TensorView(in_bw.data(), DType::kInt64, shape),
                                          TensorView(out_bw.data(), DType::kInt64, shape)},
                          kTruncV1, 5);
    expect_elementwise<5>(x, rows, cols,
                          {f32(scale), f32(zeropt), TensorView(in_bw.data(), DType::kInt64, shape), f32(out_scale),
                           f32(out_bwf)},
                          kTruncV2, 5);
    expect_elementwise<4>(x, rows, cols,
                          {f32(scale), f32(exponent), f32(bias), TensorView(max_val.data(), DType::kFloat64, shape)},
                          kFloatQuant, 5);
  }
}

// Parameter views of every layout: per-row (R, 1) broadcast (derived once per row), per-column
// (C,) repeated on every row, a negative stride, a stride of 2 and a zero-stride (expanded) view;
// rows shorter (37) and longer (3000) than the block.
TEST(FusedDerived, StridedNegativeAndBroadcastParameterViews) {
  for (const std::int64_t cols : {std::int64_t{37}, std::int64_t{3000}}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const std::int64_t rows = 45;
    const std::int64_t n = rows * cols;
    const auto x = test::mixed_values(static_cast<std::size_t>(n), 302, 40.0f);
    const auto per_row = drawn<float>(rows, 1, {0.5f, 0.25f, 2.0f}, 11);
    const auto per_col = drawn<float>(cols, 3, {1.0f, 4.0f, 0.125f, 8.0f}, 12);
    const auto wide = drawn<float>(2 * n, 1, {3.0f, 4.0f, 5.0f, 6.0f}, 13);  // read every 2nd
    const auto rev = drawn<float>(n, 9, {8.0f, 12.0f, 16.0f}, 14);
    const float expanded = 5.0f;
    const TensorView row_view(per_row.data(), DType::kFloat32, Dims{rows, 1});
    const TensorView col_view(per_col.data(), DType::kFloat32, Dims{cols});
    const TensorView strided(wide.data(), DType::kFloat32, Dims{rows, cols}, Dims{2 * cols, 2});
    const TensorView negative(rev.data() + (n - 1), DType::kFloat32, Dims{rows, cols}, Dims{-cols, -1});
    const TensorView zero_stride(&expanded, DType::kFloat32, Dims{rows, cols}, Dims{0, 0});
    expect_elementwise<4>(x, rows, cols, {row_view, col_view, negative, strided}, kTruncV1, 3);
    expect_elementwise<4>(x, rows, cols, {col_view, row_view, zero_stride, negative}, kTruncV1, 3);
    expect_elementwise<5>(x, rows, cols, {row_view, negative, zero_stride, col_view, strided}, kTruncV2, 3);
    expect_elementwise<5>(x, rows, cols, {negative, col_view, row_view, strided, row_view}, kTruncV2, 3);
    expect_elementwise<4>(x, rows, cols, {col_view, strided, negative, row_view}, kFloatQuant, 3);
  }
}

// Float16 and float64 parameters: each derived value in its numpy dtype, then rounded once to the
// kernel's (Trunc v2's zeropt / trunc_scale in float64 beside a float32 working dtype).
TEST(FusedDerived, MixedParameterDtypes) {
  const std::int64_t rows = 2, cols = 2500, n = rows * cols;
  const Dims shape{rows, cols};
  const auto x = test::mixed_values(static_cast<std::size_t>(n), 303, 30.0f);
  std::vector<std::uint16_t> scale16(static_cast<std::size_t>(n));
  const auto scale_f = drawn<float>(n, 1, {0.5f, 0.25f, 1.5f}, 21);
  for (std::int64_t i = 0; i < n; ++i) {
    scale16[static_cast<std::size_t>(i)] = static_cast<std::uint16_t>(
        scale_f[static_cast<std::size_t>(i)] == 0.5f ? 0x3800 : scale_f[static_cast<std::size_t>(i)] == 0.25f ? 0x3400 : 0x3e00);
  }
  const auto zeropt64 = drawn<double>(n, 4, {0.1, 3.0, -7.25}, 22);
  const auto out_scale = drawn<float>(n, 2, {2.0f, 6.0f, 0.375f}, 23);
  const auto out_bw = drawn<std::int8_t>(n, 5, {2, 4, 7}, 24);
  const std::int64_t in_bw = 8;
  expect_elementwise<5>(x, rows, cols,
                        {TensorView(scale16.data(), DType::kFloat16, shape), TensorView(zeropt64.data(), DType::kFloat64, shape),
                         TensorView(&in_bw, DType::kInt64, Dims{}), TensorView(out_scale.data(), DType::kFloat32, shape),
                         TensorView(out_bw.data(), DType::kInt8, shape)},
                        [](const TensorView& xv, const std::array<TensorView, 5>& p, const MutableTensorView& out) {
                          // float64 output of the op, rounded once into out's float32
                          qonnx::trunc_v2(xv, p[0], p[1], p[2], p[3], p[4], {true, true, RoundingMode::kFloor}, out);
                        },
                        1);
}

// Dense derivations and the per-element FloatQuant vector path, a new value per element: ratios
// out_scale / scale near sqrt(2) times a power of two (log2 rounding ties), non-positive, subnormal
// and overflowing ratios; non-integral width differences; float64, float16 and int64 sources;
// FloatQuant with non-integral min_exp, M that float32 does not hold in some chunks, every
// overflow mode, float64 outputs and a weak Python-float scale.
TEST(FusedDerived, DenseDerivationsAndPerElementFloatQuant) {
  const std::int64_t rows = 3, cols = 4100, n = rows * cols;
  const Dims shape{rows, cols};
  const auto x = test::mixed_values(static_cast<std::size_t>(n), 305, 500.0f);
  auto f32 = [&](const std::vector<float>& v) { return TensorView(v.data(), DType::kFloat32, shape); };
  const auto scale = drawn<float>(n, 1, {0.5f, 0.25f, 0.75f, 3.0f, 1.0f}, 31);
  const auto zeropt = drawn<float>(n, 1, {0.0f, 1.0f, -3.0f, 2.5f}, 32);
  // 1.41421354 / 1.41421366 straddle sqrt(2); 1e-40 is subnormal; -2, 0, 3e38 (ratio overflow).
  const auto out_scale = drawn<float>(n, 1, {2.0f, 1.41421354f, 1.41421366f, 2.8284271f, 0.7071068f, 6.0f, -2.0f, 0.0f,
                                             1e-40f, 3e38f, 0.375f},
                                      33);
  const auto out_bwf = drawn<float>(n, 1, {2.0f, 4.0f, 8.0f, 5.0f, 4.5f, 1.0f}, 34);
  const auto in_bwf = drawn<float>(n, 1, {8.0f, 10.0f, 16.0f, 8.5f, 200.0f}, 35);
  const auto out_bw1 = drawn<float>(n, 1, {3.0f, 4.0f, 6.0f, -130.0f}, 36);
  const auto in_bw64 = drawn<double>(n, 1, {8.0, 10.0, 16.0, 9.25}, 37);
  const auto out_bw64 = drawn<std::int64_t>(n, 1, {3, 4, 6}, 38);
  std::vector<std::uint16_t> out_bw16(static_cast<std::size_t>(n));
  {
    const auto pick = drawn<int>(n, 1, {0, 1, 2}, 39);
    for (std::int64_t i = 0; i < n; ++i) {
      static constexpr std::uint16_t kHalf[] = {0x4400 /*4*/, 0x4600 /*6*/, 0x4200 /*3*/};
      out_bw16[static_cast<std::size_t>(i)] = kHalf[pick[static_cast<std::size_t>(i)]];
    }
  }
  expect_elementwise<4>(x, rows, cols, {f32(scale), f32(zeropt), f32(in_bwf), f32(out_bw1)}, kTruncV1, 1);
  expect_elementwise<4>(x, rows, cols,
                        {f32(scale), f32(zeropt), TensorView(in_bw64.data(), DType::kFloat64, shape),
                         TensorView(out_bw64.data(), DType::kInt64, shape)},
                        kTruncV1, 3);
  expect_elementwise<5>(x, rows, cols, {f32(scale), f32(zeropt), f32(in_bwf), f32(out_scale), f32(out_bwf)}, kTruncV2, 1);
  expect_elementwise<5>(x, rows, cols,
                        {f32(scale), f32(zeropt), f32(in_bwf), f32(out_scale),
                         TensorView(out_bw16.data(), DType::kFloat16, shape)},
                        kTruncV2, 3);
  expect_elementwise<5>(x, rows, cols,
                        {f32(scale), TensorView(in_bw64.data(), DType::kFloat64, shape), f32(in_bwf),
                         f32(out_scale), TensorView(out_bw64.data(), DType::kInt64, shape)},
                        kTruncV2, 3);
  // FloatQuant: M of 240.1 (not a float32) only in the second row's chunks; a bias of 7.5 makes
  // min_exp non-integral; exponent widths 4, 5, 3 and 9 (2^(2^9 - 1 - bias) overflows float32).
  auto max_val = drawn<double>(n, 1, {448.0, 57344.0, 0.0, 1e9, 3.0}, 40);
  for (std::int64_t i = cols; i < 2 * cols; i += 97) max_val[static_cast<std::size_t>(i)] = 240.1;
  const auto exponent = drawn<float>(n, 1, {4.0f, 5.0f, 3.0f, 9.0f}, 41);
  const auto bias = drawn<float>(n, 1, {7.0f, 15.0f, 3.0f, 7.5f, -2.0f}, 42);
  const float mantissa = 3.0f, weak_scale = 0.1f;
  for (int mode = 0; mode < 3; ++mode) {
    for (const bool double_out : {false, true}) {
      for (const bool weak : {false, true}) {
        SCOPED_TRACE("mode " + std::to_string(mode) + (double_out ? " float64 out" : "") + (weak ? " weak scale" : ""));
        qonnx::FloatQuantAttrs attrs;
        attrs.saturation = mode == 0;
        attrs.has_inf = mode == 1;
        attrs.has_nan = mode == 2;
        attrs.is_signed = mode != 1;
        attrs.rounding_mode = mode == 2 ? RoundingMode::kFloor : RoundingMode::kHalfEven;
        const Op<4> op = [&](const TensorView& xv, const std::array<TensorView, 4>& p, const MutableTensorView& out) {
          TensorView s = p[0];
          if (weak) {
            s = TensorView(&weak_scale, DType::kFloat32, Dims{});
            s.weak = true;
          }
          if (!double_out) {
            qonnx::float_quant(xv, s, p[1], TensorView(&mantissa, DType::kFloat32, Dims{}), p[2], p[3], attrs, out);
            return;
          }
          std::vector<double> wide(static_cast<std::size_t>(out.numel()));
          qonnx::float_quant(xv, s, p[1], TensorView(&mantissa, DType::kFloat32, Dims{}), p[2], p[3], attrs,
                             MutableTensorView(wide.data(), DType::kFloat64, out.shape));
          // Compare the float64 results through their bits folded into a float (distinct doubles
          // that round to one float would hide a difference only if both ops erred alike).
          auto* o = static_cast<float*>(out.data);
          for (std::size_t i = 0; i < wide.size(); ++i) {
            const std::uint64_t bits = std::bit_cast<std::uint64_t>(wide[i]);
            o[i] = std::isnan(wide[i]) ? NAN : std::bit_cast<float>(static_cast<std::uint32_t>(bits ^ (bits >> 32)) & 0x7f7fffffu);
          }
        };
        expect_elementwise<4>(x, rows, cols,
                              {f32(scale), f32(exponent), f32(bias), TensorView(max_val.data(), DType::kFloat64, shape)},
                              op, 3);
      }
    }
  }
}

// An invalid per-element width raises before any element is written, also when out is x itself
// (in place) and the bad value is the last of > 2^17 elements.
TEST(FusedDerived, ErrorsLeaveTheOutputUntouched) {
  const std::int64_t n = 140'000;
  const Dims shape{n};
  auto x = test::mixed_values(static_cast<std::size_t>(n), 304, 10.0f);
  const std::vector<float> x0 = x;
  std::vector<std::int64_t> ob(static_cast<std::size_t>(n), 4);
  ob.back() = 0;  // signed: 2 ** (0 - 1) in int64
  std::vector<float> obf(static_cast<std::size_t>(n), 4.0f);
  obf[static_cast<std::size_t>(n / 2)] = NAN;
  const float one = 1.0f, zero = 0.0f, os = 2.0f;
  const std::int64_t ib = 8;
  auto call = [&](const TensorView& obv) {
    qonnx::trunc_v2(TensorView(x.data(), DType::kFloat32, shape), TensorView(&one, DType::kFloat32, Dims{}),
                    TensorView(&zero, DType::kFloat32, Dims{}), TensorView(&ib, DType::kInt64, Dims{}),
                    TensorView(&os, DType::kFloat32, Dims{}), obv, {true, false, RoundingMode::kFloor},
                    MutableTensorView(x.data(), DType::kFloat32, shape));
  };
  for (const TensorView& obv : {TensorView(ob.data(), DType::kInt64, shape), TensorView(obf.data(), DType::kFloat32, shape)}) {
    try {
      call(obv);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kValue);
      EXPECT_NE(std::string(e.what()).find("out_bitwidth"), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::memcmp(x.data(), x0.data(), x.size() * sizeof(float)), 0) << "output written before the error";
  }
}

}  // namespace
}  // namespace polyquant
