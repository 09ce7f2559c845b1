// The elementwise engine through the public API: numpy broadcasting (per-channel shapes, outputs
// larger than X), strided and negative-stride views, zero-size tensors, working-dtype promotion
// and large multi-threaded runs, each against a direct per-element evaluation of the spec.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "kernels/convert/kernels.h"
#include "families/qonnx/kernels.h"
#include "polyquant/aimet.h"
#include "polyquant/qkeras.h"
#include "qonnx_call.h"
#include "test_util.h"

namespace polyquant {
namespace {

// Element offset of output multi-index `idx` (of shape `out`) inside a broadcast operand.
std::int64_t operand_offset(const Dims& out, const std::vector<std::int64_t>& idx, const Layout& v) {
  std::int64_t off = 0;
  for (int d = 0; d < v.shape.rank; ++d) {
    const int o = out.rank - v.shape.rank + d;
    if (v.shape[d] != 1) off += idx[static_cast<std::size_t>(o)] * v.strides[d];
  }
  return off;
}

template <class F>
void for_each_index(const Dims& shape, F&& f) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape.rank), 0);
  const std::int64_t n = shape.numel();
  for (std::int64_t flat = 0; flat < n; ++flat) {
    std::int64_t rem = flat;
    for (int d = shape.rank - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = rem % shape[d];
      rem /= shape[d];
    }
    f(flat, idx);
  }
}

// IntQuant (float32 work) through the public API vs. the per-element spec with explicit indexing.
void check_int_quant(const TensorView& x, const TensorView& s, const TensorView& z, const Dims& want_shape,
                     RoundingMode mode = RoundingMode::kHalfEven) {
  const float b = 4.0f;
  const qonnx::IntQuantAttrs attrs{true, false, mode};
  const TensorSpec spec = qonnx::int_quant_spec(x, s, z, test::scalar_view(b), attrs);
  ASSERT_EQ(spec.shape, want_shape);
  std::vector<float> out(static_cast<std::size_t>(spec.shape.numel()));
  qonnx::int_quant(x, s, z, test::scalar_view(b), attrs, MutableTensorView(out.data(), DType::kFloat32, spec.shape));
  std::vector<float> want(out.size());
  for_each_index(spec.shape, [&](std::int64_t flat, const std::vector<std::int64_t>& idx) {
    const float xv = static_cast<const float*>(x.data)[operand_offset(spec.shape, idx, x)];
    const float sv = static_cast<const float*>(s.data)[operand_offset(spec.shape, idx, s)];
    const float zv = static_cast<const float*>(z.data)[operand_offset(spec.shape, idx, z)];
    float y = xv / sv + zv;
    y = y > 7.0f ? 7.0f : y;
    y = y < -8.0f ? -8.0f : y;
    want[static_cast<std::size_t>(flat)] = (detail::round_t(mode, y) - zv) * sv;
  });
  EXPECT_TRUE(test::all_same(out, want));
}

// A zero-stride x (numpy broadcast_to, torch expand() through DLPack, a 0-d x against zero-stride
// parameters) is one value for the whole output: every element must equal the op on that value.
// Before the fix the SIMD kernels read x as contiguous memory (wrong values; at 10^7 elements a
// heap over-read past the one float that backs the view).
TEST(Engine, ZeroStrideXEqualsTheOpOnItsOneValue) {
  constexpr std::int64_t n = 3'000'017;  // streaming stores, several threads, an odd tail
  const RuntimeInfo info = runtime_info();
  for (const auto& isa : info.supported) {
    set_kernel_set(isa);
    SCOPED_TRACE("kernel set " + isa);
    for (const float xv : {0.3f, -1.7f, 100.0f}) {
      const TensorView x(&xv, DType::kFloat32, Dims{n}, Dims{0});
      const float s = 0.25f, z = 0.0f, b = 4.0f;
      const qonnx::IntQuantAttrs attrs{true, false, RoundingMode::kHalfEven};
      std::vector<float> out(static_cast<std::size_t>(n), 12345.0f);
      qonnx::int_quant(x, test::scalar_view(s), test::scalar_view(z), test::scalar_view(b), attrs,
                       MutableTensorView(out.data(), DType::kFloat32, Dims{n}));
      const float want = test::int_quant({xv}, s, z, b, true, false)[0];
      std::int64_t bad = 0;
      for (float v : out) bad += std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(want);
      EXPECT_EQ(bad, 0) << "IntQuant of a zero-stride x = " << xv;

      std::fill(out.begin(), out.end(), 12345.0f);
      qonnx::bipolar_quant(x, test::scalar_view(s), MutableTensorView(out.data(), DType::kFloat32, Dims{n}));
      const float want_b = test::bipolar_quant({xv}, s)[0];
      bad = 0;
      for (float v : out) bad += std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(want_b);
      EXPECT_EQ(bad, 0) << "BipolarQuant of a zero-stride x = " << xv;

      std::fill(out.begin(), out.end(), 12345.0f);
      qonnx::FloatQuantAttrs fq;
      const float e = 4.0f, m = 3.0f, bias = 7.0f, mv = 448.0f;
      qonnx::float_quant(x, test::scalar_view(s), test::scalar_view(e), test::scalar_view(m), test::scalar_view(bias),
                         test::scalar_view(mv), fq, MutableTensorView(out.data(), DType::kFloat32, Dims{n}));
      const float want_f = test::float_quant({xv}, s, e, m, bias, mv, fq)[0];
      bad = 0;
      for (float v : out) bad += std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(want_f);
      EXPECT_EQ(bad, 0) << "FloatQuant of a zero-stride x = " << xv;

      std::fill(out.begin(), out.end(), 12345.0f);
      const float ib = 8.0f, ob = 4.0f, os = 2.0f;
      qonnx::trunc(x, test::scalar_view(s), test::scalar_view(z), test::scalar_view(ib), test::scalar_view(ob),
                   RoundingMode::kFloor, MutableTensorView(out.data(), DType::kFloat32, Dims{n}));
      const float want_t1 = test::trunc_v1({xv}, s, z, ib, ob, RoundingMode::kFloor)[0];
      bad = 0;
      for (float v : out) bad += std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(want_t1);
      EXPECT_EQ(bad, 0) << "Trunc v1 of a zero-stride x = " << xv;

      std::fill(out.begin(), out.end(), 12345.0f);
      const qonnx::TruncV2Attrs t2{true, false, RoundingMode::kHalfUp};
      qonnx::trunc_v2(x, test::scalar_view(s), test::scalar_view(z), test::scalar_view(ib), test::scalar_view(os),
                      test::scalar_view(ob), t2, MutableTensorView(out.data(), DType::kFloat32, Dims{n}));
      const float want_t2 = test::trunc_v2({xv}, s, z, ib, os, ob, true, false, RoundingMode::kHalfUp)[0];
      bad = 0;
      for (float v : out) bad += std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(want_t2);
      EXPECT_EQ(bad, 0) << "Trunc v2 of a zero-stride x = " << xv;

      // A 0-d x against a zero-stride (expanded) scale: the output takes the scale's shape, and every
      // operand of every row is one value.
      std::fill(out.begin(), out.end(), 12345.0f);
      const TensorView x0(&xv, DType::kFloat32, Dims{});
      const TensorView s_expanded(&s, DType::kFloat32, Dims{n}, Dims{0});
      qonnx::int_quant(x0, s_expanded, test::scalar_view(z), test::scalar_view(b), attrs,
                       MutableTensorView(out.data(), DType::kFloat32, Dims{n}));
      bad = 0;
      for (float v : out) bad += std::bit_cast<std::uint32_t>(v) != std::bit_cast<std::uint32_t>(want);
      EXPECT_EQ(bad, 0) << "IntQuant of a 0-d x = " << xv << " with a zero-stride scale";
    }
  }
  set_kernel_set(info.isa);
}

// An output that shares memory with x in another layout (numpy: out=x[::-1], out=x.T, a shifted
// window) must give what a separate output would: the engine buffers such calls, as numpy ufuncs
// do. Before the fix the kernels overwrote x while still reading it.
TEST(Engine, OutputOverlappingXInAnotherLayout) {
  const qonnx::IntQuantAttrs attrs{true, false, RoundingMode::kHalfEven};
  const float s = 0.25f, z = 0.0f, b = 4.0f;
  auto quantize = [&](const TensorView& x, const MutableTensorView& out) {
    qonnx::int_quant(x, test::scalar_view(s), test::scalar_view(z), test::scalar_view(b), attrs, out);
  };
  for (const std::int64_t n : {std::int64_t{7}, std::int64_t{1001}, std::int64_t{300'001}}) {
    const auto original = test::mixed_values(static_cast<std::size_t>(n), 77, 1.0f);
    const auto expected = test::int_quant(original, s, z, b, true, false);
    // out = x[::-1]
    auto data = original;
    quantize(TensorView(data.data(), DType::kFloat32, Dims{n}),
             MutableTensorView(data.data() + n - 1, DType::kFloat32, Dims{n}, Dims{-1}));
    std::vector<float> want(expected.rbegin(), expected.rend());
    EXPECT_TRUE(test::all_same(data, want)) << "out = x[::-1], n = " << n;
    // out = x shifted by one element (x = data[0:n-1], out = data[1:n])
    data = original;
    quantize(TensorView(data.data(), DType::kFloat32, Dims{n - 1}),
             MutableTensorView(data.data() + 1, DType::kFloat32, Dims{n - 1}));
    const auto shifted = test::int_quant(std::vector<float>(original.begin(), original.end() - 1), s, z, b, true, false);
    EXPECT_TRUE(test::all_same(std::vector<float>(data.begin() + 1, data.end()), shifted)) << "shifted, n = " << n;
    // In place with the same layout needs no buffer and stays correct.
    data = original;
    quantize(TensorView(data.data(), DType::kFloat32, Dims{n}), MutableTensorView(data.data(), DType::kFloat32, Dims{n}));
    EXPECT_TRUE(test::all_same(data, expected)) << "in place, n = " << n;
  }
  // out = x.T for a square matrix.
  constexpr std::int64_t k = 67;
  const auto original = test::mixed_values(static_cast<std::size_t>(k * k), 78, 1.0f);
  const auto expected = test::int_quant(original, s, z, b, true, false);
  auto data = original;
  quantize(TensorView(data.data(), DType::kFloat32, Dims{k, k}),
           MutableTensorView(data.data(), DType::kFloat32, Dims{k, k}, Dims{1, k}));
  std::vector<float> want(static_cast<std::size_t>(k * k));
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t j = 0; j < k; ++j) want[static_cast<std::size_t>(j * k + i)] = expected[static_cast<std::size_t>(i * k + j)];
  }
  EXPECT_TRUE(test::all_same(data, want)) << "out = x.T";
}

TEST(Engine, PerChannelShapes) {
  const auto xs = test::mixed_values(6 * 5 * 4 * 3, 30);
  const auto ss = std::vector<float>{0.5f, 0.25f, 1.5f, 0.1f, 3.0f, 0.75f};
  const float z = 0.0f;
  const TensorView x(xs.data(), DType::kFloat32, Dims{6, 5, 4, 3});
  check_int_quant(x, TensorView(ss.data(), DType::kFloat32, Dims{6, 1, 1, 1}), test::scalar_view(z), Dims{6, 5, 4, 3});
  const TensorView x2(xs.data(), DType::kFloat32, Dims{5, 6, 4, 3});
  check_int_quant(x2, TensorView(ss.data(), DType::kFloat32, Dims{1, 6, 1, 1}), test::scalar_view(z), Dims{5, 6, 4, 3});
  check_int_quant(x2, TensorView(ss.data(), DType::kFloat32, Dims{6, 1, 1}), test::scalar_view(z), Dims{5, 6, 4, 3});
  const TensorView x3(xs.data(), DType::kFloat32, Dims{60, 6});
  check_int_quant(x3, TensorView(ss.data(), DType::kFloat32, Dims{6}), test::scalar_view(z), Dims{60, 6},
                  RoundingMode::kHalfUp);
}

TEST(Engine, OutputLargerThanX) {
  const std::vector<float> xs = {0.3f, -1.7f, 2.5f};
  const std::vector<float> ss = {0.5f, 2.0f};
  const float z = 0.0f;
  check_int_quant(TensorView(xs.data(), DType::kFloat32, Dims{3}), TensorView(ss.data(), DType::kFloat32, Dims{2, 1}),
                  test::scalar_view(z), Dims{2, 3});
}

TEST(Engine, StridedAndNegativeStrideViews) {
  const auto xs = test::mixed_values(8 * 10, 31);
  const std::vector<float> zs = {0.5f, -1.0f, 0.0f, 2.0f, 0.25f};
  const float s = 0.375f;
  // Transposed view of an (8, 10) array: shape (10, 8), strides (1, 10).
  check_int_quant(TensorView(xs.data(), DType::kFloat32, Dims{10, 8}, Dims{1, 10}), test::scalar_view(s),
                  TensorView(zs.data(), DType::kFloat32, Dims{1, 1}), Dims{10, 8});
  // Every other column, reversed rows.
  check_int_quant(TensorView(xs.data() + 70, DType::kFloat32, Dims{8, 5}, Dims{-10, 2}), test::scalar_view(s),
                  TensorView(zs.data(), DType::kFloat32, Dims{5}), Dims{8, 5}, RoundingMode::kFloor);
}

TEST(Engine, ZeroSizeTensors) {
  const float s = 1.0f, z = 0.0f, b = 8.0f;
  std::vector<float> none;
  const TensorView x(none.data(), DType::kFloat32, Dims{0, 4});
  const auto spec = qonnx::int_quant_spec(x, test::scalar_view(s), test::scalar_view(z), test::scalar_view(b), {});
  EXPECT_EQ(spec.shape, (Dims{0, 4}));
  qonnx::int_quant(x, test::scalar_view(s), test::scalar_view(z), test::scalar_view(b), {},
                   MutableTensorView(nullptr, DType::kFloat32, spec.shape));
}

TEST(Engine, LargeMultithreadedRunsEqualSmallRuns) {
  // 3M elements go through the thread pool and streaming stores; each slice must equal the same
  // slice computed alone.
  const std::size_t n = 3'000'017;
  const auto xs = test::mixed_values(n, 32, 0.1f);
  std::vector<float> big = test::int_quant(xs, 0.1f, 0.0f, 8, true, false, RoundingMode::kHalfUp);
  for (std::size_t start : {std::size_t{0}, n / 2 - 3, n - 1000}) {
    const std::vector<float> part(xs.begin() + static_cast<std::ptrdiff_t>(start),
                                  xs.begin() + static_cast<std::ptrdiff_t>(start + 1000));
    const auto small = test::int_quant(part, 0.1f, 0.0f, 8, true, false, RoundingMode::kHalfUp);
    EXPECT_TRUE(test::all_same(std::vector<float>(big.begin() + static_cast<std::ptrdiff_t>(start),
                                                  big.begin() + static_cast<std::ptrdiff_t>(start + 1000)),
                               small));
  }
}

TEST(Engine, Float64ParametersPromoteTheWorkingDtype) {
  // numpy 2: float32 X with a float64 scale computes in float64, then IntQuant casts to float32.
  const auto xs = test::mixed_values(4096, 33);
  const double s = 0.1, z = 0.0;
  const float b = 8.0f;
  std::vector<float> out(xs.size());
  const qonnx::IntQuantAttrs attrs{true, false, RoundingMode::kHalfUp};
  qonnx::int_quant(test::vec_view(xs), TensorView(&s, DType::kFloat64, Dims{}), TensorView(&z, DType::kFloat64, Dims{}),
                   test::scalar_view(b), attrs, MutableTensorView(out.data(), DType::kFloat32, Dims{4096}));
  std::vector<float> want(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    want[i] = detail::int_quant_element<RoundingMode::kHalfUp, double>(xs[i], s, z, false, -128.0, 127.0,
                                                                     detail::WorkType::kF64, detail::WorkType::kF64);
  }
  EXPECT_TRUE(test::all_same(out, want));
}

TEST(Engine, Int64ZeroPointAndFloat16Inputs) {
  const std::vector<float> xs = {0.3f, -1.7f, 2.5f, 100.0f, -0.0f};
  const std::int64_t z = 1;
  const float s = 0.5f, b = 4.0f;
  std::vector<float> out(xs.size());
  qonnx::int_quant(test::vec_view(xs), test::scalar_view(s), TensorView(&z, DType::kInt64, Dims{}), test::scalar_view(b),
                   {}, MutableTensorView(out.data(), DType::kFloat32, Dims{5}));
  std::vector<float> want;
  // numpy: x / scale in float32, then + int64 zeropt in float64.
  for (float v : xs) {
    want.push_back(detail::int_quant_element<RoundingMode::kHalfEven, double>(v, 0.5, 1.0, false, -8.0, 7.0,
                                                                           detail::WorkType::kF32, detail::WorkType::kF64));
  }
  EXPECT_TRUE(test::all_same(out, want));

  // float16 X and scale: arithmetic rounds to half after every operation.
  std::vector<std::uint16_t> xh;
  for (float v : xs) xh.push_back(detail::Half(v).bits);
  const std::uint16_t sh = detail::Half(0.1f).bits, zh = detail::Half(0.0f).bits;
  std::vector<float> out16(xs.size());
  qonnx::int_quant(TensorView(xh.data(), DType::kFloat16, Dims{5}), TensorView(&sh, DType::kFloat16, Dims{}),
                   TensorView(&zh, DType::kFloat16, Dims{}), test::scalar_view(b), {},
                   MutableTensorView(out16.data(), DType::kFloat32, Dims{5}));
  std::vector<float> want16;
  using detail::Half;
  for (auto hb : xh) {
    want16.push_back(static_cast<float>(detail::int_quant_element<RoundingMode::kHalfEven, Half>(
        Half::from_bits(hb), Half::from_bits(sh), Half::from_bits(zh), false, Half(-8.0f), Half(7.0f),
        detail::WorkType::kF16, detail::WorkType::kF16)));
  }
  EXPECT_TRUE(test::all_same(out16, want16));
}

// Short rows (a per-channel parameter on the last axis, blockwise parameters) of float16 and
// bfloat16 tensors: the engine fuses the rows into one call and converts x and the output per call
// (Runner::fuse_rows_). The same values in a transposed view cannot be fused and go segment by
// segment through the blocked path: both must give the same bytes, for every row length around the
// vector width and the fused call's size.
TEST(Engine, FusedShortRowsOfNarrowTensorsEqualSegments) {
  for (const DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (const std::int64_t cols : {std::int64_t{8}, std::int64_t{24}, std::int64_t{128}, std::int64_t{200}}) {
      const std::int64_t rows = 301;
      const std::size_t n = static_cast<std::size_t>(rows * cols);
      const std::vector<float> values = test::mixed_values(n, 90 + static_cast<std::uint64_t>(cols), 3.0f);
      std::vector<std::uint16_t> x(n), xt(n);  // x row-major; xt the same values stored transposed
      detail::convert_values_scalar(values.data(), DType::kFloat32, 1, x.data(), dtype, 1, static_cast<std::int64_t>(n));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) xt[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
      const Dims shape{rows, cols};
      const TensorView fused(x.data(), dtype, shape), segments(xt.data(), dtype, shape, Dims{1, rows});
      struct Params {
        const char* name;
        Dims shape;
        std::vector<std::int64_t> block;
      };
      const Params layouts[] = {{"per channel, last axis", Dims{cols}, {}}, {"blocks of 4", Dims{rows, cols / 4}, {1, 4}}};
      for (const Params& l : layouts) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(cols) + " columns, " + l.name);
        const std::int64_t m = l.shape.numel();
        std::vector<float> scale(static_cast<std::size_t>(m)), offset(static_cast<std::size_t>(m));
        for (std::int64_t i = 0; i < m; ++i) {
          scale[static_cast<std::size_t>(i)] = 0.01f * static_cast<float>(1 + i % 7);
          offset[static_cast<std::size_t>(i)] = static_cast<float>(-128 + i % 5);
        }
        aimet::AffineArgs args;
        args.block_size = l.block;
        // float32 parameters, and parameters of the tensor's dtype (converted by the engine: one
        // value per row, or one value, in another dtype than the kernel reads)
        std::vector<std::uint16_t> scale16(static_cast<std::size_t>(m)), offset16(static_cast<std::size_t>(m));
        detail::convert_values_scalar(scale.data(), DType::kFloat32, 1, scale16.data(), dtype, 1, m);
        detail::convert_values_scalar(offset.data(), DType::kFloat32, 1, offset16.data(), dtype, 1, m);
        for (const bool narrow_params : {false, true}) {
          SCOPED_TRACE(narrow_params ? "parameters of the tensor's dtype" : "float32 parameters");
          const TensorView s = narrow_params ? TensorView(scale16.data(), dtype, l.shape) : TensorView(scale.data(), DType::kFloat32, l.shape);
          const TensorView o = narrow_params ? TensorView(offset16.data(), dtype, l.shape) : TensorView(offset.data(), DType::kFloat32, l.shape);
          const TensorSpec spec = aimet::quantize_dequantize_spec(fused, s, o, args, aimet::QdqPath::kTraining);
          const std::size_t bytes = n * dtype_size(spec.dtype);
          std::vector<unsigned char> a(bytes, 0xAB), b(bytes, 0xCD);
          aimet::quantize_dequantize(fused, s, o, args, aimet::QdqPath::kTraining, MutableTensorView(a.data(), spec.dtype, shape));
          aimet::quantize_dequantize(segments, s, o, args, aimet::QdqPath::kTraining, MutableTensorView(b.data(), spec.dtype, shape));
          EXPECT_EQ(a, b);
          // and a narrow output written through the fused rows' conversion
          std::vector<std::uint16_t> narrow_a(n, 0xAAAA), narrow_b(n, 0xBBBB);
          aimet::quantize_dequantize(fused, s, o, args, aimet::QdqPath::kTraining, MutableTensorView(narrow_a.data(), dtype, shape));
          aimet::quantize_dequantize(segments, s, o, args, aimet::QdqPath::kTraining, MutableTensorView(narrow_b.data(), dtype, shape));
          EXPECT_EQ(narrow_a, narrow_b);
          // the no-grad path's kernels read parameters repeated over their rows (not compact)
          std::vector<std::uint16_t> no_grad_a(n, 0xAAAA), no_grad_b(n, 0xBBBB);
          aimet::quantize_dequantize(fused, s, o, args, aimet::QdqPath::kNoGrad, MutableTensorView(no_grad_a.data(), dtype, shape));
          aimet::quantize_dequantize(segments, s, o, args, aimet::QdqPath::kNoGrad, MutableTensorView(no_grad_b.data(), dtype, shape));
          EXPECT_EQ(no_grad_a, no_grad_b);
        }
      }
    }
  }
}

// One value per short row in another dtype than the kernel reads, for a kernel that takes such
// operands repeated over each row (QONNX: a float16 scale per row of a float32 x, which numpy
// computes in float32): fused rows convert each row's value before repeating it; the same values
// in a transposed view go segment by segment. Both must give the same bytes.
TEST(Engine, FusedRowsConvertTheirRepeatedValues) {
  for (const std::int64_t cols : {std::int64_t{8}, std::int64_t{24}, std::int64_t{200}}) {
    const std::int64_t rows = 301;
    const std::size_t n = static_cast<std::size_t>(rows * cols);
    const std::vector<float> x = test::mixed_values(n, 97 + static_cast<std::uint64_t>(cols), 3.0f);
    std::vector<float> xt(n);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) xt[static_cast<std::size_t>(c * rows + r)] = x[static_cast<std::size_t>(r * cols + c)];
    std::vector<std::uint16_t> scale(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) scale[static_cast<std::size_t>(r)] = detail::Half(0.01f * static_cast<float>(1 + r % 7)).bits;
    const Dims shape{rows, cols};
    const TensorView fused(x.data(), DType::kFloat32, shape), segments(xt.data(), DType::kFloat32, shape, Dims{1, rows});
    const TensorView s(scale.data(), DType::kFloat16, Dims{rows, 1});
    const float z = 0.0f, b = 8.0f;
    std::vector<float> a(n, 1.0f), c(n, 2.0f);
    qonnx::int_quant(fused, s, test::scalar_view(z), test::scalar_view(b), {}, MutableTensorView(a.data(), DType::kFloat32, shape));
    qonnx::int_quant(segments, s, test::scalar_view(z), test::scalar_view(b), {}, MutableTensorView(c.data(), DType::kFloat32, shape));
    EXPECT_TRUE(test::all_same(a, c)) << cols << " columns";
  }
}

// An output far beyond the caches (Runner::stream_: 32 MiB or more) of a call that converts an
// operand or its output takes the engine's blocks; each block's stores are non-temporal (the
// conversion kernel's, or the op's kernel writing the output in place) and the first block is
// shortened so that the later ones start where the output is 64-byte aligned. `run(first, count,
// out)` runs the op on elements [first, first + count) of its input into `out` (count elements of
// OutT). At every output address (aligned, 2 or 4 bytes past, numpy's 16, an odd number of
// elements past) the whole call's bytes must equal the same op on slices small enough to take none
// of that (1 Mi elements), and the bytes around the output stay untouched.
template <class OutT, class Run>
void expect_streamed_output_equals_slices(std::int64_t n, Run&& run) {
  std::vector<OutT> want(static_cast<std::size_t>(n));
  for (std::int64_t at = 0; at < n; at += std::int64_t{1} << 20) run(at, std::min(std::int64_t{1} << 20, n - at), want.data() + at);
  constexpr std::size_t kGuard = 64;
  std::vector<OutT> memory(static_cast<std::size_t>(n) + kGuard);
  OutT guard;
  std::memset(&guard, 0xA5, sizeof guard);
  const auto base = reinterpret_cast<std::uintptr_t>(memory.data());
  const std::size_t aligned = (64 - base % 64) % 64 / sizeof(OutT);  // elements to a 64-byte boundary
  for (const std::size_t bytes_past : {std::size_t{0}, std::size_t{4}, std::size_t{16}, std::size_t{26}, std::size_t{52}}) {
    const std::size_t past = bytes_past / sizeof(OutT);
    SCOPED_TRACE("output " + std::to_string(past * sizeof(OutT)) + " bytes past a 64-byte boundary");
    std::fill(memory.begin(), memory.end(), guard);
    OutT* out = memory.data() + aligned + past;
    run(0, n, out);
    EXPECT_EQ(0, std::memcmp(out, want.data(), static_cast<std::size_t>(n) * sizeof(OutT)));
    auto is_guard = [](const OutT& v) { return std::memcmp(&v, "\xA5\xA5\xA5\xA5", sizeof(OutT)) == 0; };
    EXPECT_TRUE(std::all_of(memory.data(), out, is_guard)) << "written before the output";
    EXPECT_TRUE(std::all_of(out + n, memory.data() + memory.size(), is_guard)) << "written past the output";
  }
}

// Converted outputs: AIMET's quantize_dequantize of a 16-bit x, computed in float32 and converted
// back, a block at a time, by the conversion kernel.
TEST(Engine, StreamedConvertedOutputsEqualSlicesAtEveryOutputAddress) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::int64_t n = (std::int64_t{32} << 20) / 2 + 1037;  // 16-bit elements past the streaming size, an odd tail
    const std::vector<float> values = test::mixed_values(static_cast<std::size_t>(n), 95, 3.0f);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(n));
    detail::convert_values_scalar(values.data(), DType::kFloat32, 1, x.data(), dtype, 1, n);
    const float scale = 0.05f, offset = -128.0f;
    const TensorView s(&scale, DType::kFloat32, Dims{}), o(&offset, DType::kFloat32, Dims{});
    const aimet::AffineArgs args;
    expect_streamed_output_equals_slices<std::uint16_t>(n, [&](std::int64_t first, std::int64_t count, std::uint16_t* out) {
      aimet::quantize_dequantize(TensorView(x.data() + first, dtype, Dims{count}), s, o, args, aimet::QdqPath::kTraining,
                                 MutableTensorView(out, dtype, Dims{count}));
    });
  }
}

// Outputs the kernel writes in place from converted inputs: QKeras' quantized_bits of a 16-bit x
// into its float32 output (the input converted a block at a time, the kernel's own stores).
TEST(Engine, StreamedInPlaceOutputsOfConvertedInputsEqualSlicesAtEveryOutputAddress) {
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::int64_t n = (std::int64_t{32} << 20) / 4 + 1037;  // float32 outputs past the streaming size, an odd tail
    const std::vector<float> values = test::mixed_values(static_cast<std::size_t>(n), 96, 3.0f);
    std::vector<std::uint16_t> x(static_cast<std::size_t>(n));
    detail::convert_values_scalar(values.data(), DType::kFloat32, 1, x.data(), dtype, 1, n);
    qkeras::QuantizedBitsAttrs attrs;
    attrs.bits = 6;
    attrs.integer = 2;
    expect_streamed_output_equals_slices<float>(n, [&](std::int64_t first, std::int64_t count, float* out) {
      qkeras::quantized_bits(TensorView(x.data() + first, dtype, Dims{count}), TensorView(), attrs, {}, {},
                             MutableTensorView(out, DType::kFloat32, Dims{count}));
    });
  }
}

}  // namespace
}  // namespace polyquant
