// The engine's device path (core/device_elementwise.cc) through the public API: every layout an op
// may be given on a device gives the bytes of the same call on the host, on the caller's stream and
// device; bad device input is a clear error. The same tests run on the host stand-in for the CUDA
// library (fake_device.h, in polyquant_tests: there they also check the launches, conversions and
// temporaries the plan promises, and that no launch touches memory outside the device) and on a
// real GPU (polyquant_cuda_tests, device_under_test.h).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <functional>
#include <string>
#include <random>
#include <utility>
#include <vector>

#include "backends/cuda/backend_abi.h"
#include "kernels/convert/kernels.h"
#include "core/cuda_backend.h"
#include "core/device_elementwise.h"
#include "core/device_under_test.h"
#include "core/fake_device.h"
#include "core/exact_sums.h"
#include "polyquant/aimet.h"
#include "polyquant/aimet_analyzers.h"
#include "polyquant/error.h"
#include "polyquant/onnx_qdq.h"
#include "polyquant/qkeras.h"
#include "polyquant/qonnx.h"
#include "polyquant/quark.h"
#include "polyquant/runtime.h"
#include "test_values.h"

namespace polyquant {
namespace {

using test::DeviceUnderTest;
using test::FakeDevice;

// Host bytes of one tensor and a device copy of them.
struct Array {
  std::vector<unsigned char> host;
  void* device = nullptr;
  DType dtype = DType::kFloat32;

  template <class T>
  static Array of(DeviceUnderTest& fake, const std::vector<T>& values, DType dtype, int device_index = 0) {
    Array a;
    a.dtype = dtype;
    a.host.resize(values.size() * sizeof(T));
    std::memcpy(a.host.data(), values.data(), a.host.size());
    a.device = fake.upload(a.host.data(), a.host.size(), device_index);
    return a;
  }
  static Array zeros(DeviceUnderTest& fake, std::size_t bytes, DType dtype, int device_index = 0) {
    Array a;
    a.dtype = dtype;
    a.host.assign(bytes, 0);
    a.device = fake.allocate(bytes, device_index);
    return a;
  }
  // Views at element `offset` with the given shape and strides, on the host and on device `index`.
  TensorView host_view(const Dims& shape, const Dims& strides, std::int64_t offset = 0) const {
    return TensorView(host.data() + offset * static_cast<std::int64_t>(dtype_size(dtype)), dtype, shape, strides);
  }
  TensorView device_view(const Dims& shape, const Dims& strides, std::int64_t offset = 0, int index = 0) const {
    TensorView v(static_cast<const unsigned char*>(device) + offset * static_cast<std::int64_t>(dtype_size(dtype)), dtype, shape,
                 strides);
    v.device = cuda_device(index);
    return v;
  }
  MutableTensorView host_out(const Dims& shape, const Dims& strides, std::int64_t offset = 0) {
    return MutableTensorView(host.data() + offset * static_cast<std::int64_t>(dtype_size(dtype)), dtype, shape, strides);
  }
  MutableTensorView device_out(const Dims& shape, const Dims& strides, std::int64_t offset = 0, int index = 0) {
    MutableTensorView v(static_cast<unsigned char*>(device) + offset * static_cast<std::int64_t>(dtype_size(dtype)), dtype, shape,
                        strides);
    v.device = cuda_device(index);
    return v;
  }
  // The device bytes, copied to the host once the queued work is done.
  std::vector<unsigned char> download(DeviceUnderTest& dev) const {
    std::vector<unsigned char> bytes(host.size());
    dev.download(bytes.data(), device, bytes.size());
    return bytes;
  }
};

std::vector<float> x_values(std::size_t n, std::uint64_t salt) {
  std::vector<float> v = test::mixed_values(n, salt, 4.0f);
  const std::vector<float> specials = test::special_values();
  const std::vector<float> ties = test::near_ties(0.25f, 40);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 7 == 3) v[i] = specials[(i / 7) % specials.size()];
    if (i % 7 == 5) v[i] = ties[(i / 7) % ties.size()];
  }
  return v;
}

TensorView host_scalar(const float& value) { return TensorView(&value, DType::kFloat32, Dims{}); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class DeviceEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = fake_.unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
  // The stand-in's bookkeeping, or nullptr on a GPU (whose tests check the bytes only).
  FakeDevice* stand_in() { return fake_.fake(); }

  // quantized_bits with `bits` on hx (host memory) and then dx (the same values on the device), both
  // of `shape`, each into a C-contiguous output and reported scale (the stand-in's counts reset
  // between the calls, so they count the device call's work): the device's output, scale and round
  // count equal the host's. Returns {host, device} search info.
  std::pair<qkeras::SearchInfo, qkeras::SearchInfo> expect_bits_search_equals_the_host(const TensorView& hx, const TensorView& dx,
                                                                                     const Dims& shape,
                                                                                     const qkeras::QuantizedBitsAttrs& bits) {
    const Dims scale_shape = qkeras::quantized_bits_scale_shape(hx, bits);
    const auto bytes = static_cast<std::size_t>(shape.numel()) * 4, scale_bytes = static_cast<std::size_t>(scale_shape.numel()) * 4;
    Array want = Array::zeros(fake_, bytes, DType::kFloat32), got = Array::zeros(fake_, bytes, DType::kFloat32);
    Array want_s = Array::zeros(fake_, scale_bytes, DType::kFloat32), got_s = Array::zeros(fake_, scale_bytes, DType::kFloat32);
    const Dims cs = contiguous_strides(shape), ss = contiguous_strides(scale_shape);
    MutableTensorView hs = want_s.host_out(scale_shape, ss), ds = got_s.device_out(scale_shape, ss);
    qkeras::SearchInfo host_search, device_search;
    qkeras::quantized_bits(hx, TensorView{}, bits, {}, {}, want.host_out(shape, cs), &hs, &host_search);
    if (FakeDevice* f = stand_in()) f->reset_stats();
    qkeras::quantized_bits(dx, TensorView{}, bits, {}, {}, got.device_out(shape, cs), &ds, &device_search);
    EXPECT_EQ(got.download(fake_), want.host) << "quantized_bits output";
    EXPECT_EQ(got_s.download(fake_), want_s.host) << "quantized_bits scale";
    EXPECT_EQ(device_search.least_squares_rounds, host_search.least_squares_rounds);
    EXPECT_EQ(host_search.least_squares_rounds_on_device, 0);
    return {host_search, device_search};
  }

  DeviceUnderTest fake_;
};

// IntQuant over a (4, 6, 10) x, with `scale` of `scale_shape` in the given dtype.
struct IntQuantCase {
  const char* name;
  Dims scale_shape;
  DType scale_dtype;
  int launches, conversions, allocations;  // what the device plan costs
  int resolved;  // launches with per-row / repeated-row operands, run resolved per thread (RowCursor)
  int read_ahead;  // per-tensor launches, run reading x ahead with the parameters held (kFirstStreams)
};

TEST_F(DeviceEngine, IntQuantEqualsTheHostForEveryParameterLayout) {
  const Dims shape{4, 6, 10};
  const std::vector<float> xv = x_values(240, 1);
  const IntQuantCase cases[] = {
      {"per tensor", Dims{}, DType::kFloat32, 1, 0, 0, 0, 1},
      {"per channel, last axis", Dims{10}, DType::kFloat32, 1, 0, 0, 1, 0},          // one repeated row, in place
      {"per channel, axis 0", Dims{4, 1, 1}, DType::kFloat32, 1, 0, 0, 1, 0},        // one value per row, in place
      {"per channel, middle axis", Dims{6, 1}, DType::kFloat32, 2, 1, 1, 1, 0},      // gathered: 24 per-row values
      {"blockwise", Dims{4, 6, 1}, DType::kFloat32, 1, 0, 0, 1, 0},                  // one value per row of 10
      {"full", Dims{4, 6, 10}, DType::kFloat32, 1, 0, 0, 0, 0},                      // two contiguous operands
      {"per channel, float64 scale", Dims{10}, DType::kFloat64, 3, 2, 2, 1, 0},  // x and zeropt converted to float64
  };
  for (const IntQuantCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::int64_t n_scale = c.scale_shape.numel();
    std::vector<double> sv(static_cast<std::size_t>(n_scale));
    for (std::int64_t i = 0; i < n_scale; ++i) sv[static_cast<std::size_t>(i)] = 0.125 * static_cast<double>(1 + i % 5);
    Array x = Array::of(fake_, xv, DType::kFloat32);
    Array scale = c.scale_dtype == DType::kFloat64
                      ? Array::of(fake_, sv, DType::kFloat64)
                      : Array::of(fake_, std::vector<float>(sv.begin(), sv.end()), DType::kFloat32);
    Array zp = Array::of(fake_, std::vector<float>{0.0f}, DType::kFloat32);
    const float bits = 4.0f;
    const Dims cs = contiguous_strides(shape), ss = contiguous_strides(c.scale_shape);
    const TensorSpec spec = qonnx::int_quant_spec(x.host_view(shape, cs), scale.host_view(c.scale_shape, ss),
                                                  zp.host_view(Dims{}, Dims{}), host_scalar(bits), {});
    Array expected = Array::zeros(fake_, static_cast<std::size_t>(spec.shape.numel()) * dtype_size(spec.dtype), spec.dtype);
    Array got = Array::zeros(fake_, expected.host.size(), spec.dtype);
    qonnx::int_quant(x.host_view(shape, cs), scale.host_view(c.scale_shape, ss), zp.host_view(Dims{}, Dims{}), host_scalar(bits),
                     {}, expected.host_out(spec.shape, contiguous_strides(spec.shape)));
    if (stand_in() != nullptr) stand_in()->reset_stats();
    qonnx::int_quant(x.device_view(shape, cs), scale.device_view(c.scale_shape, ss), zp.device_view(Dims{}, Dims{}),
                     host_scalar(bits), {}, got.device_out(spec.shape, contiguous_strides(spec.shape)));
    EXPECT_EQ(got.download(fake_), expected.host);
    if (FakeDevice* f = stand_in()) {
      EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
      EXPECT_EQ(f->stats().launches + f->stats().conversions, c.launches) << "launches + conversions";
      EXPECT_EQ(f->stats().conversions, c.conversions);
      EXPECT_EQ(f->stats().allocations, c.allocations);
      EXPECT_EQ(f->stats().resolved_launches, c.resolved) << "launches run resolved per thread";
      EXPECT_EQ(f->stats().read_ahead_launches, c.read_ahead) << "per-tensor launches run reading x ahead";
      EXPECT_EQ(f->outstanding_temporaries(), 0);
    }
  }
}

// x in every memory layout the engine accepts: transposed, reversed, strided, broadcast (a zero
// stride), an offset view; the output contiguous, transposed (converted into place), in place and
// overlapping the input other than in place (buffered).
TEST_F(DeviceEngine, EveryMemoryLayoutOfXAndTheOutput) {
  const std::vector<float> xv = x_values(600, 2);
  Array scale = Array::of(fake_, std::vector<float>{0.25f, 0.5f, 0.125f, 1.0f, 0.75f}, DType::kFloat32);
  const float zp = 1.0f, bits = 5.0f;
  struct Layout_ {
    const char* name;
    Dims shape, strides;
    std::int64_t offset;
  };
  const Layout_ layouts[] = {
      {"contiguous", Dims{12, 5}, Dims{5, 1}, 0},
      {"transposed", Dims{12, 5}, Dims{1, 12}, 0},
      {"reversed rows", Dims{12, 5}, Dims{-5, 1}, 55},
      {"reversed everything", Dims{12, 5}, Dims{-5, -1}, 59},
      {"every third row", Dims{12, 5}, Dims{15, 1}, 0},
      {"odd strides", Dims{12, 5}, Dims{7, 3}, 1},
      {"broadcast rows", Dims{12, 5}, Dims{0, 1}, 3},
      {"one value everywhere", Dims{12, 5}, Dims{0, 0}, 11},
  };
  const Dims out_shape{12, 5};
  for (const Layout_& l : layouts) {
    SCOPED_TRACE(l.name);
    Array x = Array::of(fake_, xv, DType::kFloat32);
    const TensorView hx = x.host_view(l.shape, l.strides, l.offset), dx = x.device_view(l.shape, l.strides, l.offset);
    Array expected = Array::zeros(fake_, 60 * 4, DType::kFloat32);
    qonnx::int_quant(hx, scale.host_view(Dims{5}, Dims{1}), host_scalar(zp), host_scalar(bits), {},
                     expected.host_out(out_shape, Dims{5, 1}));
    // Contiguous output.
    Array got = Array::zeros(fake_, 60 * 4, DType::kFloat32);
    qonnx::int_quant(dx, scale.device_view(Dims{5}, Dims{1}), host_scalar(zp), host_scalar(bits), {},
                     got.device_out(out_shape, Dims{5, 1}));
    EXPECT_EQ(got.download(fake_), expected.host) << "contiguous out";
    // Transposed output: written through a temporary and converted into place.
    Array transposed = Array::zeros(fake_, 60 * 4, DType::kFloat32);
    qonnx::int_quant(dx, scale.device_view(Dims{5}, Dims{1}), host_scalar(zp), host_scalar(bits), {},
                     transposed.device_out(out_shape, Dims{1, 12}));
    const std::vector<unsigned char> t = transposed.download(fake_);
    for (int i = 0; i < 12; ++i) {
      for (int j = 0; j < 5; ++j) EXPECT_EQ(std::memcmp(t.data() + (i + 12 * j) * 4, expected.host.data() + (i * 5 + j) * 4, 4), 0);
    }
    if (FakeDevice* f = stand_in()) {
      EXPECT_TRUE(f->stats().faults.empty());
      EXPECT_EQ(f->outstanding_temporaries(), 0);
    }
  }
  // In place, and overlapping other than in place (out = x reversed): numpy's buffered result.
  for (const bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "out = x reversed" : "in place");
    Array x = Array::of(fake_, std::vector<float>(xv.begin(), xv.begin() + 60), DType::kFloat32);
    Array expected = Array::zeros(fake_, 240, DType::kFloat32);
    qonnx::int_quant(x.host_view(out_shape, Dims{5, 1}), scale.host_view(Dims{5}, Dims{1}), host_scalar(zp), host_scalar(bits),
                     {}, expected.host_out(out_shape, reversed ? Dims{-5, -1} : Dims{5, 1}, reversed ? 59 : 0));
    qonnx::int_quant(x.device_view(out_shape, Dims{5, 1}), scale.device_view(Dims{5}, Dims{1}), host_scalar(zp),
                     host_scalar(bits), {}, x.device_out(out_shape, reversed ? Dims{-5, -1} : Dims{5, 1}, reversed ? 59 : 0));
    EXPECT_EQ(x.download(fake_), expected.host);
    if (FakeDevice* f = stand_in()) {
      EXPECT_EQ(f->outstanding_temporaries(), 0);
    }
  }
}

// Every rounding mode, signedness and narrow range, a 1-bit width (the bipolar path), an integer
// bit width held on the device (read back to the host: it decides the bounds), and BipolarQuant.
TEST_F(DeviceEngine, EveryIntQuantParameterPathAndBipolarQuant) {
  const std::vector<float> xv = x_values(257, 3);
  Array x = Array::of(fake_, xv, DType::kFloat32);
  Array scale = Array::of(fake_, std::vector<float>{0.375f}, DType::kFloat32);
  const Dims shape{257};
  const RoundingMode modes[] = {RoundingMode::kHalfEven, RoundingMode::kFloor, RoundingMode::kCeil, RoundingMode::kUp,
                                RoundingMode::kDown, RoundingMode::kHalfUp, RoundingMode::kHalfDown};
  for (const RoundingMode mode : modes) {
    for (const bool is_signed : {true, false}) {
      for (const bool narrow : {false, true}) {
        for (const std::int32_t bits : {1, 3, 8}) {
          SCOPED_TRACE(std::to_string(static_cast<int>(mode)) + " signed " + std::to_string(is_signed) + " narrow " +
                       std::to_string(narrow) + " bits " + std::to_string(bits));
          Array bw = Array::of(fake_, std::vector<std::int32_t>{bits}, DType::kInt32);
          const qonnx::IntQuantAttrs attrs{is_signed, narrow, mode};
          Array expected = Array::zeros(fake_, 257 * 4, DType::kFloat32), got = Array::zeros(fake_, 257 * 4, DType::kFloat32);
          const float zp = 0.0f;
          qonnx::int_quant(x.host_view(shape, Dims{1}), scale.host_view(Dims{}, Dims{}), host_scalar(zp),
                           bw.host_view(Dims{}, Dims{}), attrs, expected.host_out(shape, Dims{1}));
          if (stand_in() != nullptr) stand_in()->reset_stats();
          qonnx::int_quant(x.device_view(shape, Dims{1}), scale.device_view(Dims{}, Dims{}), host_scalar(zp),
                           bw.device_view(Dims{}, Dims{}), attrs, got.device_out(shape, Dims{1}));
          EXPECT_EQ(got.download(fake_), expected.host);
          if (FakeDevice* f = stand_in()) {
            EXPECT_GE(f->stats().host_reads, 1) << "the device bit width is read back";
            EXPECT_EQ(f->stats().launches, 1);
          }
        }
      }
    }
  }
  Array expected = Array::zeros(fake_, 257 * 4, DType::kFloat32), got = Array::zeros(fake_, 257 * 4, DType::kFloat32);
  qonnx::bipolar_quant(x.host_view(shape, Dims{1}), scale.host_view(Dims{}, Dims{}), expected.host_out(shape, Dims{1}));
  qonnx::bipolar_quant(x.device_view(shape, Dims{1}), scale.device_view(Dims{}, Dims{}), got.device_out(shape, Dims{1}));
  EXPECT_EQ(got.download(fake_), expected.host);
}

// float16 and float64 x run in their own working precision on the device as on the host.
TEST_F(DeviceEngine, Float16AndFloat64WorkingPrecisions) {
  std::vector<std::uint16_t> halves(65536);
  for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i);
  Array xh = Array::of(fake_, halves, DType::kFloat16);
  Array sh = Array::of(fake_, std::vector<std::uint16_t>{0x3400}, DType::kFloat16);  // 0.25
  Array expected = Array::zeros(fake_, 65536 * 2, DType::kFloat16), got = Array::zeros(fake_, 65536 * 2, DType::kFloat16);
  const Dims shape{65536};
  const float bits = 6.0f, zp = 0.0f;
  const std::uint16_t zp16 = 0x3C00;  // 1.0 as float16: the working precision stays float16
  const TensorView zp_half(&zp16, DType::kFloat16, Dims{});
  qonnx::int_quant(xh.host_view(shape, Dims{1}), sh.host_view(Dims{}, Dims{}), zp_half, host_scalar(bits), {},
                   expected.host_out(shape, Dims{1}));
  qonnx::int_quant(xh.device_view(shape, Dims{1}), sh.device_view(Dims{}, Dims{}), zp_half, host_scalar(bits), {},
                   got.device_out(shape, Dims{1}));
  EXPECT_EQ(got.download(fake_), expected.host) << "every float16 x";

  const std::vector<float> xf = x_values(500, 4);
  std::vector<double> xd(500);
  for (std::size_t i = 0; i < xd.size(); ++i) xd[i] = static_cast<double>(xf[i]) * (1.0 + 1e-12);
  Array x64 = Array::of(fake_, xd, DType::kFloat64);
  Array s64 = Array::of(fake_, std::vector<double>{0.1}, DType::kFloat64);
  Array e64 = Array::zeros(fake_, 500 * 8, DType::kFloat64), g64 = Array::zeros(fake_, 500 * 8, DType::kFloat64);
  qonnx::int_quant(x64.host_view(Dims{500}, Dims{1}), s64.host_view(Dims{}, Dims{}), host_scalar(zp), host_scalar(bits), {},
                   e64.host_out(Dims{500}, Dims{1}));
  qonnx::int_quant(x64.device_view(Dims{500}, Dims{1}), s64.device_view(Dims{}, Dims{}), host_scalar(zp), host_scalar(bits),
                   {}, g64.device_out(Dims{500}, Dims{1}));
  EXPECT_EQ(g64.download(fake_), e64.host);
}

// Trunc v1 / v2 and FloatQuant, whose derived operands (truncation scales, exponent floors, the
// largest value) the fused host engine computes per block: on a device they are computed on the
// host over their sources' shape and copied over. Per-tensor and per-channel bit widths (on the
// device: read back), every rounding mode of Trunc, FloatQuant's formats with and without
// infinities, NaN, subnormals and saturation, float32 and float16 x.
TEST_F(DeviceEngine, TruncAndFloatQuantEqualTheHost) {
  const Dims shape{6, 40};
  const Dims xs = contiguous_strides(shape);
  const std::vector<float> xv = x_values(240, 12);
  auto compare = [&](const char* what, DType x_dtype, DType out_dtype,
                     const std::function<void(const TensorView&, bool, const MutableTensorView&)>& op) {
    SCOPED_TRACE(std::string(what) + " " + dtype_name(x_dtype));
    std::vector<unsigned char> xb(240 * dtype_size(x_dtype));
    detail::convert_values_scalar(xv.data(), DType::kFloat32, 1, xb.data(), x_dtype, 1, 240);
    Array x = Array::of(fake_, xb, x_dtype);
    const std::size_t bytes = 240 * dtype_size(out_dtype);
    Array expected = Array::zeros(fake_, bytes, out_dtype), got = Array::zeros(fake_, bytes, out_dtype);
    op(x.host_view(shape, xs), false, expected.host_out(shape, xs));
    op(x.device_view(shape, xs), true, got.device_out(shape, xs));
    EXPECT_EQ(got.download(fake_), expected.host);
    if (FakeDevice* f = stand_in()) {
      EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
      EXPECT_EQ(f->outstanding_temporaries(), 0);
    }
  };
  // Parameters: per tensor, or per channel (axis 0: shape (6, 1)) with different widths per channel.
  std::vector<float> scale_v(6), in_bits_v(6), out_bits_v(6), out_scale_v(6);
  for (int i = 0; i < 6; ++i) {
    scale_v[static_cast<std::size_t>(i)] = 0.0625f * static_cast<float>(1 + i);
    in_bits_v[static_cast<std::size_t>(i)] = static_cast<float>(8 + i % 3);
    out_bits_v[static_cast<std::size_t>(i)] = static_cast<float>(3 + i % 4);
    out_scale_v[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(1 + i % 2);
  }
  Array scale = Array::of(fake_, scale_v, DType::kFloat32), in_bits = Array::of(fake_, in_bits_v, DType::kFloat32),
        out_bits = Array::of(fake_, out_bits_v, DType::kFloat32), out_scale = Array::of(fake_, out_scale_v, DType::kFloat32);
  // Per-channel widths that are all equal: the derivations report a block of one value.
  Array in_bits_same = Array::of(fake_, std::vector<float>(6, 9.0f), DType::kFloat32),
        out_bits_same = Array::of(fake_, std::vector<float>(6, 4.0f), DType::kFloat32);
  const float zero = 0.0f;
  for (const int layout : {0, 1, 2}) {
    const bool per_channel = layout > 0;
    const Dims ps = per_channel ? Dims{6, 1} : Dims{};
    const Dims pst = contiguous_strides(ps);
    auto param = [&](const Array& a, bool on_device) {
      const Array& p = layout == 2 && &a == &in_bits ? in_bits_same : layout == 2 && &a == &out_bits ? out_bits_same : a;
      return on_device ? p.device_view(ps, pst) : p.host_view(ps, pst);
    };
    for (const RoundingMode mode : {RoundingMode::kFloor, RoundingMode::kHalfEven, RoundingMode::kCeil, RoundingMode::kHalfUp}) {
      compare(layout == 0 ? "Trunc v1" : layout == 1 ? "Trunc v1, per channel" : "Trunc v1, per channel, equal widths", DType::kFloat32, DType::kFloat32,
              [&](const TensorView& x, bool dev, const MutableTensorView& o) {
                qonnx::trunc(x, param(scale, dev), host_scalar(zero), param(in_bits, dev), param(out_bits, dev), mode, o);
              });
      qonnx::TruncV2Attrs a2;
      a2.rounding_mode = mode;
      compare(layout == 0 ? "Trunc v2" : layout == 1 ? "Trunc v2, per channel" : "Trunc v2, per channel, equal widths", DType::kFloat32, DType::kFloat32,
              [&](const TensorView& x, bool dev, const MutableTensorView& o) {
                qonnx::trunc_v2(x, param(scale, dev), host_scalar(zero), param(in_bits, dev), param(out_scale, dev),
                                param(out_bits, dev), a2, o);
              });
    }
  }
  // FloatQuant: its output is float64 (qonnx's clip against the float64 limit).
  const float e4 = 4.0f, m3 = 3.0f, bias7 = 7.0f, max448 = 448.0f, e5 = 5.0f, m2 = 2.0f, bias15 = 15.0f, max57344 = 57344.0f;
  for (const DType x_dtype : {DType::kFloat32, DType::kFloat16}) {
    for (int format = 0; format < 4; ++format) {
      qonnx::FloatQuantAttrs fa;
      fa.has_inf = format == 1;
      fa.has_nan = format >= 1;
      fa.has_subnormal = format != 2;
      fa.saturation = format != 3;
      fa.rounding_mode = format == 3 ? RoundingMode::kUp : RoundingMode::kHalfEven;
      const bool e5m2 = format == 1;
      compare("FloatQuant", x_dtype, DType::kFloat64, [&](const TensorView& x, bool dev, const MutableTensorView& o) {
        qonnx::float_quant(x, dev ? scale.device_view(Dims{}, Dims{}) : scale.host_view(Dims{}, Dims{}),
                           host_scalar(e5m2 ? e5 : e4), host_scalar(e5m2 ? m2 : m3), host_scalar(e5m2 ? bias15 : bias7),
                           host_scalar(e5m2 ? max57344 : max448), fa, o);
      });
    }
  }
}

// ONNX QuantizeLinear and DequantizeLinear (and Quark's Extended ops, which share their plans)
// for integer, sub-byte and minifloat targets, per tensor, per axis (first and last) and blocked
// (with a last partial block), with and without a zero point: the host's bytes.
struct QdqLayout {
  const char* name;
  Dims scale_shape;
  std::int64_t axis, block_size;
};

TEST_F(DeviceEngine, QuantizeAndDequantizeLinearEqualTheHost) {
  const Dims shape{4, 64};
  const std::vector<float> xv = x_values(256, 8);
  const QdqLayout layouts[] = {{"per tensor", Dims{}, 1, 0},
                               {"axis 0", Dims{4}, 0, 0},
                               {"axis 1", Dims{64}, 1, 0},
                               {"blocked 16", Dims{4, 4}, 1, 16},
                               {"blocked 24, a partial block", Dims{4, 3}, 1, 24}};
  const DType targets[] = {DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt4, DType::kUInt2,
                           DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat4E2M1};
  for (const QdqLayout& l : layouts) {
    const std::int64_t np = l.scale_shape.numel();
    std::vector<float> sv(static_cast<std::size_t>(np));
    for (std::int64_t i = 0; i < np; ++i) sv[static_cast<std::size_t>(i)] = 0.03125f * static_cast<float>(1 + i % 7);
    Array x = Array::of(fake_, xv, DType::kFloat32);
    Array scale = Array::of(fake_, sv, DType::kFloat32);
    for (const DType target : targets) {
      for (const bool with_zero_point : {false, true}) {
        for (const bool saturate : {true, false}) {
          if (!saturate && !(target == DType::kFloat8E4M3FN || target == DType::kFloat8E5M2)) continue;
          SCOPED_TRACE(std::string(l.name) + " " + dtype_name(target) + (with_zero_point ? " with zero point" : "") +
                       (saturate ? "" : " not saturating"));
          // A zero point of the target type: small codes (zero for the minifloats).
          std::vector<std::uint8_t> zb(static_cast<std::size_t>(np) * dtype_size(target), 0);
          if (!is_minifloat(target)) {
            for (std::size_t i = 0; i < zb.size(); i += dtype_size(target)) zb[i] = static_cast<std::uint8_t>(i % 3);
          }
          Array zp = Array::of(fake_, zb, target);
          onnx::QuantizeLinearAttrs qa;
          qa.axis = l.axis;
          qa.block_size = l.block_size;
          qa.saturate = saturate;
          qa.output_dtype = target;
          const Dims ss = contiguous_strides(l.scale_shape);
          const TensorView hz = zp.host_view(l.scale_shape, ss), dz = zp.device_view(l.scale_shape, ss);
          const std::size_t qbytes = 256 * dtype_size(target);
          Array q_host = Array::zeros(fake_, qbytes, target), q_dev = Array::zeros(fake_, qbytes, target);
          onnx::quantize_linear(x.host_view(shape, Dims{64, 1}), scale.host_view(l.scale_shape, ss), with_zero_point ? &hz : nullptr,
                                qa, q_host.host_out(shape, Dims{64, 1}));
          onnx::quantize_linear(x.device_view(shape, Dims{64, 1}), scale.device_view(l.scale_shape, ss),
                                with_zero_point ? &dz : nullptr, qa, q_dev.device_out(shape, Dims{64, 1}));
          EXPECT_EQ(q_dev.download(fake_), q_host.host) << "QuantizeLinear";
          // And back, into float32 and (through the conversion kernel) bfloat16.
          Array q = Array::of(fake_, q_host.host, target);
          for (const DType out_dtype : {DType::kFloat32, DType::kBFloat16}) {
            onnx::DequantizeLinearAttrs da;
            da.axis = l.axis;
            da.block_size = l.block_size;
            if (out_dtype != DType::kFloat32) da.output_dtype = out_dtype;
            const std::size_t dbytes = 256 * dtype_size(out_dtype);
            Array d_host = Array::zeros(fake_, dbytes, out_dtype), d_dev = Array::zeros(fake_, dbytes, out_dtype);
            onnx::dequantize_linear(q.host_view(shape, Dims{64, 1}), scale.host_view(l.scale_shape, ss),
                                    with_zero_point ? &hz : nullptr, da, d_host.host_out(shape, Dims{64, 1}));
            onnx::dequantize_linear(q.device_view(shape, Dims{64, 1}), scale.device_view(l.scale_shape, ss),
                                    with_zero_point ? &dz : nullptr, da, d_dev.device_out(shape, Dims{64, 1}));
            EXPECT_EQ(d_dev.download(fake_), d_host.host) << "DequantizeLinear to " << dtype_name(out_dtype);
          }
          if (FakeDevice* f = stand_in()) {
            EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
            EXPECT_EQ(f->outstanding_temporaries(), 0);
          }
        }
      }
    }
  }
}

// Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear (per tensor with a host scalar scale,
// per channel), through the same plans.
TEST_F(DeviceEngine, QuarkExtendedOpsEqualTheHost) {
  const Dims shape{8, 32};
  Array x = Array::of(fake_, x_values(256, 9), DType::kFloat32);
  std::vector<float> sv(32);
  for (std::size_t i = 0; i < sv.size(); ++i) sv[i] = 0.0625f * static_cast<float>(1 + i % 5);
  Array scale = Array::of(fake_, sv, DType::kFloat32);
  Array zp = Array::of(fake_, std::vector<std::int8_t>(32, 3), DType::kInt8);
  quark::ExtendedAttrs attrs;
  attrs.axis = 1;
  const TensorView hz = zp.host_view(Dims{32}, Dims{1}), dz = zp.device_view(Dims{32}, Dims{1});
  Array q_host = Array::zeros(fake_, 256, DType::kInt8), q_dev = Array::zeros(fake_, 256, DType::kInt8);
  quark::extended_quantize_linear(x.host_view(shape, Dims{32, 1}), scale.host_view(Dims{32}, Dims{1}), &hz, attrs,
                                  q_host.host_out(shape, Dims{32, 1}));
  quark::extended_quantize_linear(x.device_view(shape, Dims{32, 1}), scale.device_view(Dims{32}, Dims{1}), &dz, attrs,
                                  q_dev.device_out(shape, Dims{32, 1}));
  EXPECT_EQ(q_dev.download(fake_), q_host.host);
  Array q = Array::of(fake_, q_host.host, DType::kInt8);
  Array d_host = Array::zeros(fake_, 1024, DType::kFloat32), d_dev = Array::zeros(fake_, 1024, DType::kFloat32);
  quark::extended_dequantize_linear(q.host_view(shape, Dims{32, 1}), scale.host_view(Dims{32}, Dims{1}), &hz, attrs,
                                    d_host.host_out(shape, Dims{32, 1}));
  quark::extended_dequantize_linear(q.device_view(shape, Dims{32, 1}), scale.device_view(Dims{32}, Dims{1}), &dz, attrs,
                                    d_dev.device_out(shape, Dims{32, 1}));
  EXPECT_EQ(d_dev.download(fake_), d_host.host);
}

// AIMET's quantize, quantize_dequantize (the no-grad path, which runs torch's fake quantization
// with zero points read from offset, and the training formula) and dequantize: per tensor, per
// channel on the first and the last axis, blockwise; float32, float16 and bfloat16 x.
struct AimetLayout {
  const char* name;
  Dims param_shape;
  std::vector<std::int64_t> block_size;
};

TEST_F(DeviceEngine, AimetAffineOpsEqualTheHost) {
  const Dims shape{8, 48};
  const std::vector<float> xv = x_values(384, 10);
  const AimetLayout layouts[] = {{"per tensor", Dims{1}, {}},
                                 {"per channel, axis 0", Dims{8, 1}, {}},
                                 {"per channel, last axis", Dims{48}, {}},
                                 {"blockwise 16", Dims{8, 3}, {1, 16}}};
  for (const DType x_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    // x in its dtype: float32 values converted by the spec (convert_values_scalar).
    std::vector<unsigned char> xb(384 * dtype_size(x_dtype));
    detail::convert_values_scalar(xv.data(), DType::kFloat32, 1, xb.data(), x_dtype, 1, 384);
    Array x = Array::of(fake_, xb, x_dtype);
    for (const AimetLayout& l : layouts) {
      const std::int64_t np = l.param_shape.numel();
      std::vector<float> sv(static_cast<std::size_t>(np)), ov(static_cast<std::size_t>(np));
      for (std::int64_t i = 0; i < np; ++i) {
        sv[static_cast<std::size_t>(i)] = 0.02f * static_cast<float>(1 + i % 6);
        ov[static_cast<std::size_t>(i)] = -static_cast<float>(i % 4) - (i % 5 == 0 ? 0.5f : 0.0f);  // a fractional offset too
      }
      std::vector<unsigned char> sb(static_cast<std::size_t>(np) * dtype_size(x_dtype)), ob(sb.size());
      detail::convert_values_scalar(sv.data(), DType::kFloat32, 1, sb.data(), x_dtype, 1, np);
      detail::convert_values_scalar(ov.data(), DType::kFloat32, 1, ob.data(), x_dtype, 1, np);
      Array scale = Array::of(fake_, sb, x_dtype), offset = Array::of(fake_, ob, x_dtype);
      const Dims ps = contiguous_strides(l.param_shape), xs = contiguous_strides(shape);
      aimet::AffineArgs args;
      args.grid = aimet::grid_from_bitwidth(4, true);
      args.block_size = l.block_size;
      const std::size_t bytes = 384 * dtype_size(x_dtype);
      auto check = [&](const char* what, const std::function<void(const TensorView&, const TensorView&, const TensorView&,
                                                                  const MutableTensorView&)>& op) {
        SCOPED_TRACE(std::string(dtype_name(x_dtype)) + " " + l.name + " " + what);
        Array expected = Array::zeros(fake_, bytes, x_dtype), got = Array::zeros(fake_, bytes, x_dtype);
        op(x.host_view(shape, xs), scale.host_view(l.param_shape, ps), offset.host_view(l.param_shape, ps),
           expected.host_out(shape, xs));
        op(x.device_view(shape, xs), scale.device_view(l.param_shape, ps), offset.device_view(l.param_shape, ps),
           got.device_out(shape, xs));
        EXPECT_EQ(got.download(fake_), expected.host);
        if (FakeDevice* f = stand_in()) {
          EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
          EXPECT_EQ(f->outstanding_temporaries(), 0);
        }
      };
      check("quantize", [&](const TensorView& a, const TensorView& b, const TensorView& c, const MutableTensorView& o) {
        aimet::quantize(a, b, c, args, o);
      });
      for (const aimet::QdqPath path : {aimet::QdqPath::kNoGrad, aimet::QdqPath::kTraining}) {
        check(path == aimet::QdqPath::kNoGrad ? "quantize_dequantize, no grad" : "quantize_dequantize, training",
              [&](const TensorView& a, const TensorView& b, const TensorView& c, const MutableTensorView& o) {
                aimet::quantize_dequantize(a, b, c, args, path, o);
              });
      }
      check("dequantize", [&](const TensorView& a, const TensorView& b, const TensorView& c, const MutableTensorView& o) {
        aimet::dequantize(a, b, c, l.block_size, o);
      });
    }
  }
}

// QKeras' quantizers without a scale search: quantized_bits and quantized_linear with alpha None or
// a per-channel value (on the device), quantized_relu (with sigmoid, a negative slope, an upper
// bound), stochastic rounding in training (the same Philox draws, keyed to the element index), and
// their gradients, alone and times an upstream gradient; quantized_linear's quantization scale
// written into a device array.
TEST_F(DeviceEngine, QKerasQuantizersWithoutASearchEqualTheHost) {
  const Dims shape{16, 24};
  const Dims xs = contiguous_strides(shape);
  Array x = Array::of(fake_, x_values(384, 11), DType::kFloat32);
  std::vector<float> av(24);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = 0.5f + 0.25f * static_cast<float>(i % 5);
  Array alpha = Array::of(fake_, av, DType::kFloat32);
  const float no_alpha = 1.0f;
  auto compare = [&](const char* what, const std::function<void(const TensorView&, const TensorView&, const MutableTensorView&)>& op,
                     bool per_channel_alpha) {
    SCOPED_TRACE(what);
    Array expected = Array::zeros(fake_, 384 * 4, DType::kFloat32), got = Array::zeros(fake_, 384 * 4, DType::kFloat32);
    const TensorView ha = per_channel_alpha ? alpha.host_view(Dims{24}, Dims{1}) : host_scalar(no_alpha);
    const TensorView da = per_channel_alpha ? alpha.device_view(Dims{24}, Dims{1}) : host_scalar(no_alpha);
    op(x.host_view(shape, xs), ha, expected.host_out(shape, xs));
    op(x.device_view(shape, xs), da, got.device_out(shape, xs));
    EXPECT_EQ(got.download(fake_), expected.host);
    if (FakeDevice* f = stand_in()) {
      EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
      EXPECT_EQ(f->outstanding_temporaries(), 0);
    }
  };
  const qkeras::Training training{true, 1234};
  // The backward's upstream gradient (grad_output): specials, subnormals (flushed) and ties.
  std::vector<float> gv = test::mixed_values(384, 17, 10.0f);
  gv[0] = std::numeric_limits<float>::infinity(), gv[1] = std::numeric_limits<float>::quiet_NaN(), gv[2] = -1e-40f, gv[3] = -0.0f;
  Array grad = Array::of(fake_, gv, DType::kFloat32);
  const TensorView g_host = grad.host_view(shape, xs), g_device = grad.device_view(shape, xs);
  auto upstream = [&](const TensorView& a) { return a.device.is_cpu() ? &g_host : &g_device; };
  for (const bool per_channel : {false, true}) {
    for (const bool stochastic : {false, true}) {
      qkeras::QuantizedBitsAttrs bits;
      bits.bits = 4;
      bits.integer = 1;
      bits.alpha = per_channel ? qkeras::Alpha::kValue : qkeras::Alpha::kNone;
      bits.use_stochastic_rounding = stochastic;
      compare(stochastic ? "quantized_bits, stochastic" : "quantized_bits",
              [&](const TensorView& a, const TensorView& b, const MutableTensorView& o) {
                qkeras::quantized_bits(a, b, bits, {}, training, o);
              },
              per_channel);
      compare("quantized_bits gradient", [&](const TensorView& a, const TensorView& b, const MutableTensorView& o) {
        qkeras::quantized_bits_gradient(a, b, bits, {}, o);
      }, per_channel);
      qkeras::QuantizedBitsAttrs noisy = bits;
      noisy.use_ste = false;
      noisy.qnoise.factor = 0.25;
      compare("quantized_bits gradient times grad_output", [&](const TensorView& a, const TensorView& b, const MutableTensorView& o) {
        qkeras::quantized_bits_gradient(a, b, noisy, {}, o, upstream(a));
      }, per_channel);
      qkeras::QuantizedLinearAttrs linear;
      linear.bits = 5;
      linear.alpha = bits.alpha;
      linear.use_stochastic_rounding = stochastic;
      compare(stochastic ? "quantized_linear, stochastic" : "quantized_linear",
              [&](const TensorView& a, const TensorView& b, const MutableTensorView& o) {
                qkeras::quantized_linear(a, b, linear, {}, training, o);
              },
              per_channel);
      linear.qnoise.factor = 0.75;
      compare("quantized_linear gradient times grad_output", [&](const TensorView& a, const TensorView& b, const MutableTensorView& o) {
        qkeras::quantized_linear_gradient(a, b, linear, {}, o, upstream(a));
      }, per_channel);
    }
  }
  for (const bool sigmoid : {false, true}) {
    for (const bool stochastic : {false, true}) {
      qkeras::QuantizedReluAttrs relu;
      relu.bits = 6;
      relu.integer = 2;
      relu.use_sigmoid = sigmoid;
      relu.negative_slope = sigmoid ? 0.0 : 0.25;
      relu.relu_upper_bound = 3.0;
      relu.use_stochastic_rounding = stochastic;
      compare("quantized_relu", [&](const TensorView& a, const TensorView&, const MutableTensorView& o) {
        qkeras::quantized_relu(a, relu, training, o);
      }, false);
      compare("quantized_relu gradient", [&](const TensorView& a, const TensorView&, const MutableTensorView& o) {
        qkeras::quantized_relu_gradient(a, relu, o);
      }, false);
      compare("quantized_relu gradient times grad_output", [&](const TensorView& a, const TensorView&, const MutableTensorView& o) {
        qkeras::quantized_relu_gradient(a, relu, o, upstream(a));
      }, false);
    }
  }
  // quantized_linear's quantization scale, written into a device array.
  qkeras::QuantizedLinearAttrs linear;
  linear.alpha = qkeras::Alpha::kValue;
  std::vector<float> scale_host(24);
  Array scale_dev = Array::zeros(fake_, 24 * 4, DType::kFloat32), out = Array::zeros(fake_, 384 * 4, DType::kFloat32);
  std::vector<float> out_host(384);
  const MutableTensorView sh(scale_host.data(), DType::kFloat32, Dims{24});
  const MutableTensorView sd = scale_dev.device_out(Dims{24}, Dims{1});
  qkeras::quantized_linear(x.host_view(shape, xs), alpha.host_view(Dims{24}, Dims{1}), linear, {}, {},
                           MutableTensorView(out_host.data(), DType::kFloat32, shape), &sh);
  qkeras::quantized_linear(x.device_view(shape, xs), alpha.device_view(Dims{24}, Dims{1}), linear, {}, {},
                           out.device_out(shape, xs), &sd);
  const std::vector<unsigned char> got_scale = scale_dev.download(fake_);
  EXPECT_EQ(std::memcmp(got_scale.data(), scale_host.data(), 24 * 4), 0) << "quantization_scale";
}

// alpha="auto" on a device: the maximum pass there (per-group min / max, scale_search.h's
// group_max_on_device), the scale derived on the host, the quantizing pass there; alpha="auto_po2":
// the least-squares rounds' sums there too (rank 1 quantized_bits: on a host copy), the quantizing
// pass on the device; a
// post_training_scale (frozen), on the host or the device: quantized_bits (every scale_axis, rank 1,
// the reported scale into a device array) and quantized_linear (signed and unsigned: the maximum of
// x rather than of |x|), float32, float16 and float64 x, transposed x, a NaN in a channel,
// subnormals and zeros of both signs, the host's bits.
TEST_F(DeviceEngine, QKerasAutoScaleEqualsTheHost) {
  const Dims shape{16, 24};
  std::vector<float> v = x_values(384, 17);
  for (float& e : v) e = std::isnan(e) ? 0.75f : e;
  v[30] = std::numeric_limits<float>::quiet_NaN();  // channel 6 (channels last) / row 1
  v[31] = 1e-40f, v[55] = -0.0f, v[56] = 0.0f;
  for (std::size_t i = 0; i < 24; ++i) v[24 * 5 + i] = -1e-39f;  // a row of subnormals only (flushed to 0)
  for (const DType dtype : {DType::kFloat32, DType::kFloat16, DType::kFloat64}) {
    std::vector<unsigned char> bytes(384 * dtype_size(dtype));
    detail::convert_values_scalar(v.data(), DType::kFloat32, 1, bytes.data(), dtype, 1, 384);
    Array x = Array::of(fake_, bytes, dtype);
    for (const bool transposed : {false, true}) {
      const Dims strides = transposed ? Dims{1, 16} : Dims{24, 1};
      struct AxisCase {
        const char* name;
        qkeras::ScaleAxis axis;
        Dims shape;
      };
      qkeras::ScaleAxis axis0;
      axis0.kind = qkeras::ScaleAxis::Kind::kInt;
      axis0.axes = {0};
      const AxisCase cases[] = {{"channels last", qkeras::ScaleAxis{}, shape}, {"scale_axis=0", axis0, shape},
                                {"rank 1", qkeras::ScaleAxis{}, Dims{384}}};
      for (const AxisCase& c : cases) {
       for (const qkeras::Alpha searched : {qkeras::Alpha::kAuto, qkeras::Alpha::kAutoPo2}) {
        if (transposed && c.shape.rank == 1) continue;
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + c.name + (transposed ? " transposed" : "") +
                     (searched == qkeras::Alpha::kAuto ? " auto" : " auto_po2"));
        const Dims st = c.shape.rank == 1 ? Dims{1} : strides;
        const TensorView hx = x.host_view(c.shape, st), dx = x.device_view(c.shape, st);
        qkeras::QuantizedBitsAttrs bits;
        bits.bits = 6;
        bits.integer = 1;
        bits.alpha = searched;
        bits.scale_axis = c.axis;
        const Dims scale_shape = qkeras::quantized_bits_scale_shape(hx, bits);
        const std::int64_t ns = scale_shape.numel();
        const Dims cs = contiguous_strides(c.shape), ss = contiguous_strides(scale_shape);
        const qkeras::SearchInfo device_search = expect_bits_search_equals_the_host(hx, dx, c.shape, bits).second;
        // auto_po2: every round's sums on the device (none near a float32 rounding boundary here),
        // but for one-element groups (rank 1), whose rounds run on a host copy.
        const int rounds_on_device = searched == qkeras::Alpha::kAutoPo2 && c.shape.rank > 1 ? device_search.least_squares_rounds : 0;
        EXPECT_EQ(device_search.least_squares_rounds_on_device, rounds_on_device);
        if (searched == qkeras::Alpha::kAutoPo2) {
          EXPECT_GE(device_search.least_squares_rounds, 1);
        }
        if (FakeDevice* f = stand_in()) {
          // The maximum pass on the device; auto_po2's rounds there: three terms (v z, |v z|, z z),
          // each written by a launch and summed by a reduction, and where a sum lies on a float32
          // rounding boundary (this data's short significands make ties), two more (the units).
          EXPECT_EQ(f->stats().reductions, f->stats().launches);
          EXPECT_GE(f->stats().launches, 1 + 3 * rounds_on_device) << "the quantizing pass and the rounds' terms";
          EXPECT_LE(f->stats().launches, 1 + 5 * rounds_on_device) << "the quantizing pass and the rounds' terms";
          EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
          EXPECT_EQ(f->outstanding_temporaries(), 0);
        }
        for (const bool keep_negative : {true, false}) {
          qkeras::QuantizedLinearAttrs linear;
          linear.bits = 5;
          linear.alpha = searched;
          linear.keep_negative = keep_negative;
          linear.scale_axis = c.axis;
          Array lw = Array::zeros(fake_, 384 * 4, DType::kFloat32), lg = Array::zeros(fake_, 384 * 4, DType::kFloat32);
          qkeras::SearchInfo host_linear, device_linear;
          qkeras::quantized_linear(hx, TensorView{}, linear, {}, {}, lw.host_out(c.shape, cs), nullptr, &host_linear);
          qkeras::quantized_linear(dx, TensorView{}, linear, {}, {}, lg.device_out(c.shape, cs), nullptr, &device_linear);
          EXPECT_EQ(lg.download(fake_), lw.host) << "quantized_linear, keep_negative " << keep_negative;
          EXPECT_EQ(device_linear.least_squares_rounds, host_linear.least_squares_rounds);
          // (rank 1: one group per element, whose exact sums fit the device too)
          EXPECT_EQ(device_linear.least_squares_rounds_on_device,
                    searched == qkeras::Alpha::kAutoPo2 ? device_linear.least_squares_rounds : 0);
          qkeras::quantized_linear_gradient(hx, TensorView{}, linear, {}, lw.host_out(c.shape, cs));
          qkeras::quantized_linear_gradient(dx, TensorView{}, linear, {}, lg.device_out(c.shape, cs));
          EXPECT_EQ(lg.download(fake_), lw.host) << "quantized_linear gradient, keep_negative " << keep_negative;
        }
        // A post_training_scale (frozen) in host memory and on the device: x is not read.
        Array want = Array::zeros(fake_, 384 * 4, DType::kFloat32), got = Array::zeros(fake_, 384 * 4, DType::kFloat32);
        std::vector<float> frozen(static_cast<std::size_t>(ns));
        for (std::size_t i = 0; i < frozen.size(); ++i) frozen[i] = 0.125f * static_cast<float>(1 + i % 5);
        Array frozen_dev = Array::of(fake_, frozen, DType::kFloat32);
        qkeras::QuantizedBitsAttrs fixed = bits;
        fixed.frozen_scale = true;
        const TensorView frozen_host(frozen.data(), DType::kFloat32, scale_shape);
        qkeras::quantized_bits(hx, frozen_host, fixed, {}, {}, want.host_out(c.shape, cs));
        qkeras::quantized_bits(dx, frozen_host, fixed, {}, {}, got.device_out(c.shape, cs));
        EXPECT_EQ(got.download(fake_), want.host) << "quantized_bits, post_training_scale";
        Array got2 = Array::zeros(fake_, 384 * 4, DType::kFloat32);
        qkeras::quantized_bits(dx, frozen_dev.device_view(scale_shape, ss), fixed, {}, {}, got2.device_out(c.shape, cs));
        EXPECT_EQ(got2.download(fake_), want.host) << "quantized_bits, post_training_scale on the device";
       }
      }
    }
  }
}

// auto_po2's least-squares rounds with their sums on the device (scale_search.h,
// least_squares_sums_on_device), over layouts that reach each grouped-layout shape: channels last
// and first, rank 4, blocks (elements_per_scale), a clipped exponent range, and quantized_linear
// with stochastic levels (training); data with full significands, so no sum lies on a float32
// rounding boundary and each round is three term launches and three exact sums. A layout whose
// groups need more dimensions than the exact sums kernel takes (nine, from blocks on alternate
// axes of a rank-8 x) runs its rounds on a host copy. The host's bits throughout.
TEST_F(DeviceEngine, QKerasLeastSquaresRoundsOnTheDevice) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  auto list_axis = [](std::vector<int> axes) {
    qkeras::ScaleAxis a;
    a.kind = qkeras::ScaleAxis::Kind::kList;
    a.axes = std::move(axes);
    return a;
  };
  struct Case {
    const char* name;
    Dims shape;
    qkeras::ScaleAxis axis;
    qkeras::ElementsPerScale per;
    bool clipped;
    bool on_device;
  };
  qkeras::ElementsPerScale four;
  four.kind = qkeras::ElementsPerScale::Kind::kInt;
  four.values = {4};
  qkeras::ElementsPerScale two = four;
  two.values = {2};
  const Case cases[] = {
      {"channels last", Dims{64, 48}, qkeras::ScaleAxis{}, {}, false, true},
      {"scale_axis 0", Dims{64, 48}, list_axis({0}), {}, false, true},
      {"rank 4", Dims{4, 6, 8, 10}, qkeras::ScaleAxis{}, {}, true, true},
      {"blocks of 4", Dims{8, 16, 12}, list_axis({1}), four, false, true},
      {"blocks on axes 0 and 2", Dims{8, 6, 12}, list_axis({0, 2}), four, true, true},
      {"nine grouped dimensions", Dims{2, 4, 2, 4, 2, 4, 2, 4}, list_axis({1, 3, 5, 7}), two, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::int64_t n = c.shape.numel();
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& e : v) e = normal(rng);
    Array x = Array::of(fake_, v, DType::kFloat32);
    const Dims cs = contiguous_strides(c.shape);
    const TensorView hx = x.host_view(c.shape, cs), dx = x.device_view(c.shape, cs);
    const std::size_t bytes = static_cast<std::size_t>(n) * 4;
    qkeras::QuantizedBitsAttrs bits;
    bits.bits = 8;
    bits.integer = 2;
    bits.alpha = qkeras::Alpha::kAutoPo2;
    bits.scale_axis = c.axis;
    bits.elements_per_scale = c.per;
    if (c.clipped) {
      bits.min_po2_exponent = -3.0;
      bits.max_po2_exponent = -1.0;
    }
    const qkeras::SearchInfo device_search = expect_bits_search_equals_the_host(hx, dx, c.shape, bits).second;
    EXPECT_GE(device_search.least_squares_rounds, 1);
    const int on_device = c.on_device ? device_search.least_squares_rounds : 0;
    EXPECT_EQ(device_search.least_squares_rounds_on_device, on_device);
    if (FakeDevice* f = stand_in()) {
      EXPECT_EQ(f->stats().launches, 1 + 3 * on_device) << "the quantizing pass and three terms per round";
      EXPECT_EQ(f->stats().reductions, 1 + 3 * on_device) << "the maximum pass and three sums per round";
      EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
      EXPECT_EQ(f->outstanding_temporaries(), 0);
    }
    if (!c.per.values.empty() || c.clipped) continue;  // (quantized_linear has neither)
    Array want = Array::zeros(fake_, bytes, DType::kFloat32), got = Array::zeros(fake_, bytes, DType::kFloat32);
    for (const bool training : {false, true}) {
      qkeras::QuantizedLinearAttrs linear;
      linear.bits = 6;
      linear.alpha = qkeras::Alpha::kAutoPo2;
      linear.scale_axis = c.axis;
      linear.use_stochastic_rounding = training;
      const qkeras::Training t{training, 99};
      qkeras::SearchInfo host_linear, device_linear;
      qkeras::quantized_linear(hx, TensorView{}, linear, {}, t, want.host_out(c.shape, cs), nullptr, &host_linear);
      qkeras::quantized_linear(dx, TensorView{}, linear, {}, t, got.device_out(c.shape, cs), nullptr, &device_linear);
      EXPECT_EQ(got.download(fake_), want.host) << "quantized_linear, training " << training;
      EXPECT_EQ(device_linear.least_squares_rounds, host_linear.least_squares_rounds);
      EXPECT_EQ(device_linear.least_squares_rounds_on_device, device_linear.least_squares_rounds);
    }
  }
}

// Work goes to the caller's stream and device; the caller's current device is restored.
TEST_F(DeviceEngine, RunsOnTheCallersStreamAndTheTensorsDevice) {
  const int device = fake_.device_count() > 1 ? 1 : 0;
  Array x = Array::of(fake_, x_values(64, 5), DType::kFloat32, device);
  Array out = Array::zeros(fake_, 64 * 4, DType::kFloat32, device);
  const float scale = 0.5f, zp = 0.0f, bits = 8.0f;
  std::vector<float> expected(64);
  qonnx::int_quant(x.host_view(Dims{64}, Dims{1}), host_scalar(scale), host_scalar(zp), host_scalar(bits), {},
                   MutableTensorView(expected.data(), DType::kFloat32, Dims{64}));
  void* const stream = fake_.stream();
  if (FakeDevice* f = stand_in()) f->reset_stats();
  {
    const ScopedStream scoped(stream);
    EXPECT_EQ(current_stream(), stream);
    qonnx::int_quant(x.device_view(Dims{64}, Dims{1}, 0, device), host_scalar(scale), host_scalar(zp), host_scalar(bits), {},
                     out.device_out(Dims{64}, Dims{1}, 0, device));
  }
  EXPECT_EQ(current_stream(), nullptr);
  const std::vector<unsigned char> got = out.download(fake_);
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), 64 * 4), 0);
  if (FakeDevice* f = stand_in()) {
    EXPECT_EQ(f->stats().last_stream, stream);
    EXPECT_EQ(f->stats().host_scalar_launches, 1) << "host scalars travel inside the launch";
    EXPECT_EQ(f->stats().allocations, 0);
    EXPECT_TRUE(f->stats().faults.empty()) << "ran on cuda:1, where the tensors live";
    EXPECT_EQ(f->current_device(), 0) << "the caller's device is restored";
  }
}


TEST_F(DeviceEngine, MixedDevicesAreErrorsNamingTheParameters) {
  Array x = Array::of(fake_, x_values(16, 6), DType::kFloat32);
  Array x1 = Array::of(fake_, x_values(16, 6), DType::kFloat32, fake_.device_count() > 1 ? 1 : 0);
  Array s = Array::of(fake_, std::vector<float>(16, 0.5f), DType::kFloat32);
  Array out = Array::zeros(fake_, 64, DType::kFloat32);
  std::vector<float> host(16, 0.5f), host_out(16);
  const float zp = 0.0f, bits = 4.0f;
  const Dims shape{16};
  auto run = [&](const TensorView& xv, const TensorView& sv, const MutableTensorView& ov) {
    return error_of([&] { qonnx::int_quant(xv, sv, host_scalar(zp), host_scalar(bits), {}, ov); });
  };
  const TensorView host_scale(host.data(), DType::kFloat32, shape);
  const MutableTensorView host_output(host_out.data(), DType::kFloat32, shape);
  std::string e = run(x.device_view(shape, Dims{1}), host_scale, out.device_out(shape, Dims{1}));
  EXPECT_NE(e.find("IntQuant: scale is on cpu but x is on cuda:0"), std::string::npos) << e;
  e = run(x.device_view(shape, Dims{1}), s.device_view(shape, Dims{1}), host_output);
  EXPECT_NE(e.find("out is on cpu but x is on cuda:0"), std::string::npos) << e;
  if (fake_.device_count() > 1) {
    e = run(x1.device_view(shape, Dims{1}, 0, 1), s.device_view(shape, Dims{1}), out.device_out(shape, Dims{1}));
    EXPECT_NE(e.find("scale is on cuda:0 but x is on cuda:1"), std::string::npos) << e;
  }
  // A host pointer labelled as device memory, memory of the other device, a device that does not exist.
  TensorView lying(host.data(), DType::kFloat32, shape);
  lying.device = cuda_device(0);
  e = run(lying, s.device_view(shape, Dims{1}), out.device_out(shape, Dims{1}));
  EXPECT_NE(e.find("x is labelled cuda:0 but its data is host memory"), std::string::npos) << e;
  if (fake_.device_count() > 1) {
    e = run(x1.device_view(shape, Dims{1}, 0, 0), s.device_view(shape, Dims{1}), out.device_out(shape, Dims{1}));
    EXPECT_NE(e.find("its data is memory of cuda:1"), std::string::npos) << e;
  }
  e = run(x.device_view(shape, Dims{1}, 0, 7), s.device_view(shape, Dims{1}, 0, 7), out.device_out(shape, Dims{1}, 0, 7));
  EXPECT_NE(e.find("cuda:7, which does not exist: this machine has " + std::to_string(fake_.device_count()) + " CUDA device(s)"),
            std::string::npos)
      << e;
  if (FakeDevice* f = stand_in()) {
    EXPECT_TRUE(f->stats().faults.empty());
    EXPECT_EQ(f->stats().launches, 0);
  }
}

// AIMET's gradients (affine_backward) on the device: grad_x and the forward output from the
// kernels, grad_scale and grad_offset from per-element terms summed exactly per parameter element
// on the device (PolyquantCudaExactSums: limb-wise integer parts, rounded once on the host), so
// the host's bits: every op, per tensor (one group of every term), per channel on the first and
// last axis (a group that changes with every term: a flush per term), blockwise, per element (no
// sum), float32, float16, bfloat16 and float64 x (float64 terms are summed by the host), terms
// with NaN, infinities, ties and a spread of magnitudes (sums that round), and both paths of
// quantize_dequantize (the no-grad one takes torch's fake-quantization gradient).
TEST_F(DeviceEngine, AimetGradientsEqualTheHost) {
  const Dims shape{8, 48};
  const Dims xs = contiguous_strides(shape);
  const std::vector<float> xv = x_values(384, 12);
  std::vector<float> gv = test::mixed_values(384, 13, 1e3f);
  gv[7] = 3e38f, gv[8] = 3e38f, gv[100] = -1e-40f, gv[200] = 0.5f;  // an overflowing pair, a subnormal
  const AimetLayout layouts[] = {{"per tensor", Dims{1}, {}},
                                 {"per channel, axis 0", Dims{8, 1}, {}},
                                 {"per channel, last axis", Dims{48}, {}},
                                 {"blockwise 16", Dims{8, 3}, {1, 16}},
                                 {"per element", Dims{8, 48}, {}}};
  const aimet::AffineOp ops[] = {aimet::AffineOp::kQuantizeDequantize, aimet::AffineOp::kQuantize,
                                 aimet::AffineOp::kDequantize, aimet::AffineOp::kQuantizeDequantizeNoGrad};
  const char* op_names[] = {"quantize_dequantize", "quantize", "dequantize", "quantize_dequantize, no grad"};
  int reductions = 0;
  for (const DType x_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    const std::size_t es = dtype_size(x_dtype), bytes = 384 * es;
    std::vector<unsigned char> xb(bytes), gb(bytes);
    detail::convert_values_scalar(xv.data(), DType::kFloat32, 1, xb.data(), x_dtype, 1, 384);
    detail::convert_values_scalar(gv.data(), DType::kFloat32, 1, gb.data(), x_dtype, 1, 384);
    Array x = Array::of(fake_, xb, x_dtype), grad = Array::of(fake_, gb, x_dtype);
    for (const AimetLayout& l : layouts) {
      const std::int64_t np = l.param_shape.numel();
      std::vector<float> sv(static_cast<std::size_t>(np)), ov(static_cast<std::size_t>(np));
      for (std::int64_t i = 0; i < np; ++i) {
        sv[static_cast<std::size_t>(i)] = 0.02f * static_cast<float>(1 + i % 6);
        ov[static_cast<std::size_t>(i)] = -static_cast<float>(i % 4) - (i % 5 == 0 ? 0.5f : 0.0f);
      }
      std::vector<unsigned char> sb(static_cast<std::size_t>(np) * es), ob(sb.size());
      detail::convert_values_scalar(sv.data(), DType::kFloat32, 1, sb.data(), x_dtype, 1, np);
      detail::convert_values_scalar(ov.data(), DType::kFloat32, 1, ob.data(), x_dtype, 1, np);
      Array scale = Array::of(fake_, sb, x_dtype), offset = Array::of(fake_, ob, x_dtype);
      const Dims ps = contiguous_strides(l.param_shape);
      aimet::AffineArgs args;
      args.grid = aimet::grid_from_bitwidth(4, true);
      args.block_size = l.block_size;
      for (std::size_t k = 0; k < std::size(ops); ++k) {
        SCOPED_TRACE(std::string(dtype_name(x_dtype)) + " " + l.name + " " + op_names[k]);
        const std::size_t pbytes = static_cast<std::size_t>(np) * es;
        Array want_gx = Array::zeros(fake_, bytes, x_dtype), got_gx = Array::zeros(fake_, bytes, x_dtype);
        Array want_out = Array::zeros(fake_, bytes, x_dtype), got_out = Array::zeros(fake_, bytes, x_dtype);
        Array want_gs = Array::zeros(fake_, pbytes, x_dtype), got_gs = Array::zeros(fake_, pbytes, x_dtype);
        Array want_go = Array::zeros(fake_, pbytes, x_dtype), got_go = Array::zeros(fake_, pbytes, x_dtype);
        aimet::affine_backward(ops[k], grad.host_view(shape, xs), x.host_view(shape, xs), scale.host_view(l.param_shape, ps),
                               offset.host_view(l.param_shape, ps), args, want_gx.host_out(shape, xs),
                               want_gs.host_out(l.param_shape, ps), want_go.host_out(l.param_shape, ps),
                               want_out.host_out(shape, xs));
        const bool sums = ops[k] != aimet::AffineOp::kQuantizeDequantizeNoGrad;
        if (FakeDevice* f = stand_in()) f->reset_stats();
        aimet::affine_backward(ops[k], grad.device_view(shape, xs), x.device_view(shape, xs),
                               scale.device_view(l.param_shape, ps), offset.device_view(l.param_shape, ps), args,
                               got_gx.device_out(shape, xs), sums ? got_gs.device_out(l.param_shape, ps) : MutableTensorView(),
                               sums ? got_go.device_out(l.param_shape, ps) : MutableTensorView(), got_out.device_out(shape, xs));
        EXPECT_EQ(got_gx.download(fake_), want_gx.host) << "grad_x";
        EXPECT_EQ(got_out.download(fake_), want_out.host) << "output";
        if (sums) {
          EXPECT_EQ(got_gs.download(fake_), want_gs.host) << "grad_scale";
          EXPECT_EQ(got_go.download(fake_), want_go.host) << "grad_offset";
        }
        if (FakeDevice* f = stand_in()) {
          EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
          EXPECT_EQ(f->outstanding_temporaries(), 0);
          reductions += f->stats().reductions;
          // float32 terms with a sum are summed on the device: one reduction per parameter.
          const bool float32_terms = x_dtype != DType::kFloat64;
          if (sums && float32_terms && std::string(l.name) != "per element") {
            EXPECT_EQ(f->stats().reductions, 2);
          }
          if (!float32_terms || std::string(l.name) == "per element") {
            EXPECT_EQ(f->stats().reductions, 0);
          }
          // Every launch reads ahead, the gradient's grad_output and x (its second stream) both:
          // per tensor in the per-tensor kernel, per channel and blockwise in the resolved one;
          // per element (scale and offset contiguous too) in the general kernel.
          const std::string name = l.name;
          const int launches = f->stats().launches;
          EXPECT_EQ(f->stats().read_ahead_launches, name == "per tensor" ? launches : 0) << "launches reading ahead";
          EXPECT_EQ(f->stats().resolved_launches, name != "per tensor" && name != "per element" ? launches : 0) << "resolved launches";
        }
      }
    }
  }
  if (stand_in() != nullptr) {
    EXPECT_GT(reductions, 0);
  }
}

// AIMET's MinMax analyzer on device tensors: the statistics (per tensor, per channel on either axis,
// blockwise) from the device's order-key min / max, the host's bits; a batch with a NaN or with a
// -0.0 where a zero is the minimum or maximum goes to the host's code (which NaN, which zero sign);
// float32, float16, bfloat16 and float64, contiguous and transposed x; the running fold of two
// batches and compute_dynamic_encodings too.
TEST_F(DeviceEngine, MinMaxAnalyzerStatisticsEqualTheHost) {
  const Dims shape{12, 40};
  std::vector<float> base = test::mixed_values(480, 31, 8.0f);
  for (float& v : base) v = std::isnan(v) ? 2.5f : v;  // the NaN batch below adds its own
  struct Batch {
    const char* name;
    std::vector<float> values;
    bool host_decides;  // NaN, or a -0.0 in a group whose min or max is zero
  };
  std::vector<Batch> batches;
  batches.push_back({"finite", base, false});
  std::vector<float> with_nan = base;
  with_nan[77] = std::numeric_limits<float>::quiet_NaN();
  batches.push_back({"a NaN", with_nan, true});
  std::vector<float> zeros(480, 0.0f);
  for (std::size_t i = 0; i < zeros.size(); i += 3) zeros[i] = -0.0f;
  for (std::size_t i = 1; i < zeros.size(); i += 7) zeros[i] = 1.5f;
  batches.push_back({"signed zeros", zeros, true});
  std::vector<float> infinities = base;
  infinities[5] = std::numeric_limits<float>::infinity(), infinities[300] = -std::numeric_limits<float>::infinity();
  infinities[200] = -0.0f;  // a -0.0 whose group has nonzero min and max: the keys settle it
  batches.push_back({"infinities", infinities, false});
  const aimet::AnalyzerShape shapes[] = {{Dims{1}, std::nullopt}, {Dims{12, 1}, std::nullopt}, {Dims{40}, std::nullopt},
                                         {Dims{12, 4}, std::vector<std::int64_t>{1, 10}}};
  for (const DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    for (const Batch& batch : batches) {
      std::vector<unsigned char> bytes(480 * dtype_size(dtype));
      detail::convert_values_scalar(batch.values.data(), DType::kFloat32, 1, bytes.data(), dtype, 1, 480);
      Array x = Array::of(fake_, bytes, dtype);
      for (const aimet::AnalyzerShape& as : shapes) {
        for (const bool transposed : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + batch.name + " analyzer shape " + as.shape.str() +
                       (transposed ? " transposed x" : ""));
          // transposed: x is (40, 12) in memory, seen as (12, 40) through strides
          const Dims strides = transposed ? Dims{1, 12} : Dims{40, 1};
          aimet::MinMaxEncodingAnalyzer on_host(as), on_device(as);
          if (FakeDevice* f = stand_in()) f->reset_stats();
          for (int round = 0; round < 2; ++round) {
            on_host.update_stats(x.host_view(shape, strides));
            on_device.update_stats(x.device_view(shape, strides));
          }
          const auto want = on_host.state(), got = on_device.state();
          EXPECT_EQ(got.dtype, want.dtype);
          ASSERT_EQ(got.min.size(), want.min.size());
          for (std::size_t g = 0; g < want.min.size(); ++g) {
            EXPECT_EQ(std::bit_cast<std::uint64_t>(got.min[g]), std::bit_cast<std::uint64_t>(want.min[g])) << "min " << g;
            EXPECT_EQ(std::bit_cast<std::uint64_t>(got.max[g]), std::bit_cast<std::uint64_t>(want.max[g])) << "max " << g;
          }
          const aimet::EncodingRange e_host = on_host.compute_dynamic_encodings(x.host_view(shape, strides), 255, false);
          const aimet::EncodingRange e_dev = on_device.compute_dynamic_encodings(x.device_view(shape, strides), 255, false);
          ASSERT_EQ(e_dev.min.size(), e_host.min.size());
          for (std::size_t g = 0; g < e_host.min.size(); ++g) {
            EXPECT_EQ(std::bit_cast<std::uint64_t>(e_dev.min[g]), std::bit_cast<std::uint64_t>(e_host.min[g])) << "encoding min " << g;
            EXPECT_EQ(std::bit_cast<std::uint64_t>(e_dev.max[g]), std::bit_cast<std::uint64_t>(e_host.max[g])) << "encoding max " << g;
          }
          if (FakeDevice* f = stand_in()) {
            EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
            EXPECT_EQ(f->stats().reductions, 3);  // two batches and the dynamic encodings, each one reduction
            EXPECT_EQ(f->outstanding_temporaries(), 0);
            // only the batches the keys cannot settle come back to the host
            EXPECT_EQ(f->stats().host_reads > 3, batch.host_decides);
          }
        }
      }
    }
  }
}

// AIMET's histogram analyzers on the device: each group's finite min / max by order keys and its
// torch.histc counts by integer atomics (PolyquantCudaGroupHistogram), the edges, growth and merges
// on the host, so the host's bits: first batches, later batches that grow and re-bin the
// histograms (AIMET's chunks of x), fixed ranges (start_with_range), dynamic encodings; per tensor,
// per channel on either axis, blockwise; float32, float16, bfloat16, float64; transposed x;
// NaN and infinities (not finite: skipped), constant batches (a widened range), and the batches the
// device leaves to the host's code on a copy (a zero minimum in a group holding -0.0; a constant
// so large that the widened range has zero width).
TEST_F(DeviceEngine, HistogramAnalyzersEqualTheHost) {
  const Dims shape{12, 40};
  // (mixed values, but none so large that a range overflows: that makes AIMET's edges NaN)
  std::vector<float> base = test::mixed_values(480, 41, 8.0f);
  for (float& v : base) v = std::isfinite(v) && std::fabs(v) < 1e4f ? v : 2.5f;
  struct Batch {
    const char* name;
    std::vector<float> first, later;  // the later batch grows the range
    bool host_decides;
  };
  auto scaled = [](std::vector<float> v, float f) {
    for (float& e : v) e *= f;
    return v;
  };
  std::vector<Batch> batches;
  batches.push_back({"finite", base, scaled(base, 3.0f), false});
  std::vector<float> specials = base;
  specials[3] = std::numeric_limits<float>::quiet_NaN(), specials[50] = std::numeric_limits<float>::infinity();
  specials[301] = -std::numeric_limits<float>::infinity(), specials[200] = -0.0f;
  batches.push_back({"NaN and infinities", specials, scaled(specials, 0.25f), false});
  batches.push_back({"constant", std::vector<float>(480, 2.5f), scaled(base, 2.0f), false});
  std::vector<float> zeros(480, 0.0f);
  for (std::size_t i = 0; i < zeros.size(); i += 3) zeros[i] = -0.0f;
  for (std::size_t i = 1; i < zeros.size(); i += 7) zeros[i] = 1.5f;
  batches.push_back({"signed zeros", zeros, base, true});
  batches.push_back({"huge constant", std::vector<float>(480, 6e4f), base, true});
  const aimet::AnalyzerShape shapes[] = {{Dims{1}, std::nullopt}, {Dims{12, 1}, std::nullopt}, {Dims{40}, std::nullopt},
                                         {Dims{12, 4}, std::vector<std::int64_t>{1, 10}}};
  auto bits_of = [](const auto& v) {
    std::vector<unsigned char> b(v.size() * sizeof(v[0]));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto expect_same = [&](const aimet::HistogramState& got, const aimet::HistogramState& want) {
    EXPECT_EQ(got.dtype, want.dtype);
    EXPECT_EQ(bits_of(got.counts), bits_of(want.counts)) << "counts";
    EXPECT_EQ(bits_of(got.edges), bits_of(want.edges)) << "edges";
    EXPECT_EQ(bits_of(got.min), bits_of(want.min)) << "min";
    EXPECT_EQ(bits_of(got.max), bits_of(want.max)) << "max";
    EXPECT_EQ(bits_of(got.limit_lo), bits_of(want.limit_lo)) << "limits";
    EXPECT_EQ(bits_of(got.limit_hi), bits_of(want.limit_hi)) << "limits";
  };
  for (const DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    for (const Batch& batch : batches) {
      auto upload = [&](const std::vector<float>& values) {
        std::vector<unsigned char> bytes(480 * dtype_size(dtype));
        detail::convert_values_scalar(values.data(), DType::kFloat32, 1, bytes.data(), dtype, 1, 480);
        return Array::of(fake_, bytes, dtype);
      };
      Array first = upload(batch.first), later = upload(batch.later);
      for (const aimet::AnalyzerShape& as : shapes) {
        for (const bool transposed : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + batch.name + " analyzer shape " + as.shape.str() +
                       (transposed ? " transposed x" : ""));
          const Dims strides = transposed ? Dims{1, 12} : Dims{40, 1};  // transposed: (40, 12) in memory
          aimet::PercentileEncodingAnalyzer on_host(as, 64, 99.0), on_device(as, 64, 99.0);
          if (FakeDevice* f = stand_in()) f->reset_stats();
          // (AIMET's errors too: the same on both; a float64 batch that grows a float32 histogram
          // fails in AIMET's re-binning, after its ranges: the histograms before the failing one
          // are counted and merged, so one reduction fewer only where the first one fails)
          int reductions = 6;
          for (const Array* a : {&first, &later}) {
            const std::string e_host = error_of([&] { on_host.update_stats(a->host_view(shape, strides)); });
            const std::string e_dev = error_of([&] { on_device.update_stats(a->device_view(shape, strides)); });
            EXPECT_EQ(e_dev, e_host);
            if (e_host.find("index_add_()") != std::string::npos) reductions = -1;
            expect_same(on_device.state(), on_host.state());
          }
          aimet::EncodingRange e_host, e_dev;
          EXPECT_EQ(error_of([&] { e_dev = on_device.compute_dynamic_encodings(later.device_view(shape, strides), 255, false); }),
                    error_of([&] { e_host = on_host.compute_dynamic_encodings(later.host_view(shape, strides), 255, false); }));
          EXPECT_EQ(bits_of(e_dev.min), bits_of(e_host.min)) << "dynamic encodings";
          EXPECT_EQ(bits_of(e_dev.max), bits_of(e_host.max)) << "dynamic encodings";
          if (FakeDevice* f = stand_in()) {
            EXPECT_TRUE(f->stats().faults.empty()) << f->stats().faults.front();
            EXPECT_EQ(f->outstanding_temporaries(), 0);
            // settled on the device: min / max and counts for each of the three calls
            if (!batch.host_decides) {
              if (reductions > 0) EXPECT_EQ(f->stats().reductions, reductions);
              else EXPECT_TRUE(f->stats().reductions == 5 || f->stats().reductions == 6) << f->stats().reductions;
            }
          }
          // A fixed range: each batch's slices binned over it, on the device as on the host; a batch
          // beyond it is the same error.
          if (batch.host_decides) continue;
          const std::int64_t h = on_host.state().min.size() > 0 ? static_cast<std::int64_t>(on_host.state().min.size()) : 1;
          const std::vector<double> lo(static_cast<std::size_t>(h), -64.0), hi(static_cast<std::size_t>(h), 64.0);
          aimet::PercentileEncodingAnalyzer fixed_host(as, 64, 99.0), fixed_device(as, 64, 99.0);
          fixed_host.start_with_range(dtype, lo, hi);
          fixed_device.start_with_range(dtype, lo, hi);
          for (const Array* a : {&first, &later}) {
            const std::string e_host_fixed = error_of([&] { fixed_host.update_stats(a->host_view(shape, strides)); });
            const std::string e_dev_fixed = error_of([&] { fixed_device.update_stats(a->device_view(shape, strides)); });
            EXPECT_EQ(e_dev_fixed, e_host_fixed);
          }
          expect_same(fixed_device.state(), fixed_host.state());
        }
      }
    }
  }
}

// Groupings of the n = rows * cols elements of a grouped reduction (C order over `shape`; element j
// in group sum_d i_d * strides[d]): runs of one group that are whole warps, that end inside a warp
// (two or three groups among its lanes), that are shorter than a few lanes (more groups than a warp
// combines), and groups that change with every element: each kind of the device's flushes
// (backends/cuda/backend.cu, grouped_walk_kernel).
struct GroupLayout {
  const char* name;
  Dims shape;
  Dims strides;
  std::int64_t groups;
  std::int64_t group_of(std::int64_t j) const {
    std::int64_t group = 0;
    for (int d = shape.rank - 1; d >= 0; --d) {
      group += (j % shape[d]) * strides[d];
      j /= shape[d];
    }
    return group;
  }
};
std::vector<GroupLayout> group_layouts(std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;  // a multiple of 60 and of 7 * 300
  return {{"one group", Dims{rows, cols}, Dims{0, 0}, 1},
          {"per row", Dims{rows, cols}, Dims{1, 0}, rows},
          {"per column", Dims{rows, cols}, Dims{0, 1}, cols},
          {"per element", Dims{rows, cols}, Dims{cols, 1}, n},
          {"blocks of 100", Dims{rows, cols / 100, 100}, Dims{cols / 100, 1, 0}, rows * (cols / 100)},
          {"rows of 20", Dims{n / 20, 20}, Dims{1, 0}, n / 20},
          {"rows of 60", Dims{n / 60, 60}, Dims{1, 0}, n / 60},
          {"rows of 5", Dims{n / 5, 5}, Dims{1, 0}, n / 5},
          {"3 channels last", Dims{n / 3, 3}, Dims{0, 1}, 3},
          {"5 channels last, rows of 4 in blocks", Dims{n / 20, 4, 5}, Dims{5, 0, 1}, n / 4}};
}

// The device's exact sums themselves: many groups of terms whose float32 and float64 sums round
// (huge and tiny terms, cancellations, NaN, both infinities, an overflow to infinity), against the
// host's ExactSums over the same terms; group layouts whose runs fill a warp's lanes, end inside one,
// are a few lanes long or change with every term (the device's flushes: backends/cuda/backend.cu).
TEST_F(DeviceEngine, ExactGroupSumsEqualTheHostsExactSums) {
  const std::int64_t rows = 7, cols = 300, n = rows * cols;
  std::vector<float> t = test::mixed_values(static_cast<std::size_t>(n), 21, 1e30f);
  for (std::int64_t i = 0; i < n; ++i) {
    if (i % 13 == 1) t[static_cast<std::size_t>(i)] = std::ldexp(1.0f, -140 + static_cast<int>(i % 50));
    if (i % 17 == 2) t[static_cast<std::size_t>(i)] = -t[static_cast<std::size_t>(i - 1)];
  }
  t[5] = std::numeric_limits<float>::infinity();               // row 0: +inf
  t[cols + 9] = -std::numeric_limits<float>::infinity();       // row 1: -inf
  t[2 * cols + 3] = std::numeric_limits<float>::quiet_NaN();   // row 2: NaN
  t[3 * cols + 1] = std::numeric_limits<float>::infinity();    // row 3: +inf and -inf: NaN
  t[3 * cols + 2] = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < cols; ++j) t[static_cast<std::size_t>(4 * cols + j)] = 3e38f;  // row 4 overflows
  Array terms = Array::of(fake_, t, DType::kFloat32);
  for (const GroupLayout& g : group_layouts(rows, cols)) {
    SCOPED_TRACE(g.name);
    std::vector<std::vector<float>> members(static_cast<std::size_t>(g.groups));
    for (std::int64_t j = 0; j < n; ++j) members[static_cast<std::size_t>(g.group_of(j))].push_back(t[static_cast<std::size_t>(j)]);
    const std::vector<float> got = detail::exact_group_sums_on_device(
        cuda_device(0), static_cast<const float*>(terms.device), g.shape, g.strides, g.groups);
    ASSERT_EQ(got.size(), members.size());
    for (std::size_t k = 0; k < members.size(); ++k) {
      const float want = detail::ExactSums<detail::ExactSumFloat32>::sum_of<float>(members[k].data(),
                                                                                    static_cast<std::int64_t>(members[k].size()));
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[k]), std::bit_cast<std::uint32_t>(want)) << "group " << k;
    }
  }
}

// A device tensor the host must read (a bit width, a search's copy of x) arrives whole whatever its
// layout: transposed, reversed, with a zero stride, at an offset. A view that is not contiguous is
// gathered on the device first and read back in one copy (on the stand-in: one conversion and one
// waiting read, not one per element).
TEST_F(DeviceEngine, HostReadsOfAnyLayoutAreOneGatherAndOneCopy) {
  const std::vector<float> v = x_values(6 * 10, 41);
  Array a = Array::of(fake_, v, DType::kFloat32);
  struct Layout {
    const char* name;
    Dims shape, strides;
    std::int64_t offset;
  };
  const Layout layouts[] = {{"contiguous", {6, 10}, {10, 1}, 0},     {"transposed", {10, 6}, {1, 10}, 0},
                            {"reversed rows", {6, 10}, {-10, 1}, 50}, {"broadcast", {4, 6, 10}, {0, 10, 1}, 0},
                            {"strided slice", {3, 4}, {20, 2}, 3}};
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    if (stand_in() != nullptr) stand_in()->reset_stats();
    std::vector<unsigned char> storage;
    const TensorView got = detail::host_readable(a.device_view(l.shape, l.strides, l.offset), storage);
    std::vector<float> want(static_cast<std::size_t>(l.shape.numel()));
    detail::convert_into(a.host_view(l.shape, l.strides, l.offset), MutableTensorView(want.data(), DType::kFloat32, l.shape));
    ASSERT_EQ(got.numel(), l.shape.numel());
    ASSERT_EQ(0, std::memcmp(got.data, want.data(), want.size() * sizeof(float)));
    if (stand_in() != nullptr) {
      const bool contiguous = std::string(l.name) == "contiguous";
      EXPECT_EQ(stand_in()->stats().host_reads, 1);
      EXPECT_EQ(stand_in()->stats().conversions, contiguous ? 0 : 1);
    }
  }
}

// The device's group minimum and maximum (order keys folded with atomics, NaN and -0.0 as flags)
// against the host's over every grouping above, with NaN, both infinities, +-0 and subnormals among
// the values; all values and the finite ones only.
TEST_F(DeviceEngine, GroupMinMaxEqualsTheHostForEveryGrouping) {
  const std::int64_t rows = 7, cols = 300, n = rows * cols;
  std::vector<float> v = test::mixed_values(static_cast<std::size_t>(n), 22, 1e20f);
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; i += 97) v[static_cast<std::size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t i = 5; i < n; i += 131) v[static_cast<std::size_t>(i)] = (i / 131) % 2 == 0 ? inf : -inf;
  for (std::int64_t i = 11; i < n; i += 89) v[static_cast<std::size_t>(i)] = (i / 89) % 2 == 0 ? -0.0f : 0.0f;
  for (std::int64_t i = 3; i < n; i += 173) v[static_cast<std::size_t>(i)] = -std::numeric_limits<float>::denorm_min();
  const Array x = Array::of(fake_, v, DType::kFloat32);
  for (const GroupLayout& g : group_layouts(rows, cols)) {
    for (const bool finite_only : {false, true}) {
      SCOPED_TRACE(std::string(g.name) + (finite_only ? ", finite only" : ""));
      const auto groups = static_cast<std::size_t>(g.groups);
      std::vector<double> lo(groups, inf), hi(groups, -inf);
      std::vector<std::uint8_t> nan(groups, 0), negative_zero(groups, 0);
      for (std::int64_t j = 0; j < n; ++j) {
        const double e = v[static_cast<std::size_t>(j)];
        const auto k = static_cast<std::size_t>(g.group_of(j));
        if (finite_only && !std::isfinite(e)) continue;
        if (std::isnan(e)) {
          nan[k] = 1;
          continue;
        }
        if (e == 0.0 && std::signbit(e)) negative_zero[k] = 1;
        // Order keys put -0.0 just below +0.0: the key's extremes as values.
        if (e < lo[k] || (e == lo[k] && std::signbit(e))) lo[k] = e;
        if (e > hi[k] || (e == hi[k] && !std::signbit(e))) hi[k] = e;
      }
      const detail::GroupMinMax got = detail::group_min_max_on_device(x.device_view(Dims{n}, Dims{1}), g.shape.rank, g.shape.v.data(),
                                                                      g.strides.v.data(), g.groups, finite_only);
      ASSERT_EQ(got.min.size(), groups);
      for (std::size_t k = 0; k < groups; ++k) {
        ASSERT_EQ(std::bit_cast<std::uint64_t>(got.min[k]), std::bit_cast<std::uint64_t>(lo[k])) << "group " << k << " min";
        ASSERT_EQ(std::bit_cast<std::uint64_t>(got.max[k]), std::bit_cast<std::uint64_t>(hi[k])) << "group " << k << " max";
        ASSERT_EQ(got.nan[k], nan[k]) << "group " << k;
        ASSERT_EQ(got.negative_zero[k], negative_zero[k]) << "group " << k;
      }
    }
  }
}

// Without the override, a device tensor on a machine without the CUDA library is an error with
// the backend's reason, never a crash.
TEST(DeviceEngineWithoutBackend, ADeviceTensorNamesTheMissingBackend) {
  std::vector<float> data(4, 1.0f), out(4);
  TensorView x(data.data(), DType::kFloat32, Dims{4});
  x.device = cuda_device(0);
  MutableTensorView o(out.data(), DType::kFloat32, Dims{4});
  o.device = cuda_device(0);
  const float scale = 1.0f, zp = 0.0f, bits = 4.0f;
  if (detail::cuda_backend().available()) GTEST_SKIP() << "a CUDA device is present";
  const std::string e = error_of([&] { qonnx::int_quant(x, host_scalar(scale), host_scalar(zp), host_scalar(bits), {}, o); });
  EXPECT_NE(e.find("the CUDA backend is unavailable"), std::string::npos) << e;
}

}  // namespace
}  // namespace polyquant
