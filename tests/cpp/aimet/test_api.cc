// AIMET's affine ops through the public API (<polyquant/aimet.h>): layouts (strided, reversed,
// zero-stride, in place, overlapping) against contiguous calls, blockwise against parameters
// expanded per element, per-element values against the scalar spec of families/aimet/kernels.h, the
// working-precision choice, the no-grad shortcut's eligibility, gradients, and errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/exact_sum.h"
#include "core/half.h"
#include "core/parallel.h"
#include "families/aimet/kernels.h"
#include "kernels/reduce/kernels.h"
#include "polyquant/aimet.h"
#include "polyquant/error.h"
#include "test_util.h"

namespace polyquant {
namespace {

using aimet::AffineArgs;
using aimet::Grid;
using test::expect_error;

std::vector<float> values(std::size_t n, std::uint64_t salt, float scale) {
  auto rng = test::make_rng(salt);
  std::vector<float> v(n);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 3e38f, -3e38f};
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<int>(rng() % 601) - 300;
    switch (rng() % 5) {
      case 0: v[i] = (static_cast<float>(k) + 0.5f) * scale; break;  // ties of x / s
      case 1: v[i] = std::nextafter((static_cast<float>(k) + 0.5f) * scale, INFINITY); break;
      case 2: v[i] = specials[rng() % 8]; break;
      default: v[i] = static_cast<float>(k) * scale / 7.0f; break;
    }
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!test::same_value(a[i], b[i])) return false;
  }
  return true;
}

TEST(Aimet, GridsOfTheThreeCallForms) {
  EXPECT_EQ(aimet::grid_from_bitwidth(8, false).qmax, 255);
  EXPECT_EQ(aimet::grid_from_bitwidth(8, true).qmin, -128);
  EXPECT_EQ(aimet::grid_from_bitwidth(8, true).qmax, 127);
  EXPECT_EQ(aimet::grid_from_num_steps(254, true).qmin, -127);  // "strict symmetric"
  EXPECT_EQ(aimet::grid_from_num_steps(254, true).qmax, 127);
  EXPECT_EQ(aimet::grid_from_bitwidth(1, true).qmin, -1);
  EXPECT_EQ(aimet::grid_from_bitwidth(1, true).qmax, 0);
  EXPECT_THROW(aimet::grid_from_bitwidth(0, false), Error);
  EXPECT_THROW(aimet::grid_from_bitwidth(63, false), Error);
}

TEST(Aimet, ElementsFollowTheScalarSpec) {
  // Per-channel (4, 1) parameters on (4, 37): every element equals affine_element / the shortcut's
  // fake_quantize_element with its channel's parameters.
  const std::vector<float> x = values(4 * 37, 1, 0.05f);
  const std::vector<float> s = {0.05f, 0.1f, 1e-30f, 3.0f}, o = {-3.0f, 0.0f, -128.0f, -0.5f};
  const Dims xs{4, 37}, ps{4, 1};
  std::vector<float> out(x.size());
  for (int op = 0; op < 4; ++op) {
    const AffineArgs args{{0, 255}, {}};
    const TensorView xv(x.data(), DType::kFloat32, xs), sv(s.data(), DType::kFloat32, ps), ov(o.data(), DType::kFloat32, ps);
    const MutableTensorView outv(out.data(), DType::kFloat32, xs);
    detail::AffineParams p;
    p.qmin = 0;
    p.qmax = 255;
    if (op == 0) { aimet::quantize(xv, sv, ov, args, outv); p.kind = detail::AffineKind::kQuantize; }
    if (op == 1) { aimet::quantize_dequantize(xv, sv, ov, args, aimet::QdqPath::kTraining, outv); }
    if (op == 2) { aimet::dequantize(xv, sv, ov, {}, outv); p.kind = detail::AffineKind::kDequantize; }
    if (op == 3) aimet::quantize_dequantize(xv, sv, ov, args, aimet::QdqPath::kNoGrad, outv);
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 37; ++j) {
        const std::size_t i = static_cast<std::size_t>(c * 37 + j);
        float want;
        if (op == 3) {
          detail::FakeQuantizeParams f;
          f.per_channel = true;
          const double zp = o[c] == -0.5f ? 0.0 : -static_cast<double>(o[c]);  // -int32(offset)
          want = detail::fake_quantize_element<float>(f, x[i], s[c], zp);
        } else {
          want = detail::affine_element<float>(p, x[i], s[c], o[c]);
        }
        ASSERT_TRUE(test::same_value(out[i], want)) << "op " << op << " at " << i << ": " << test::describe(out[i])
                                                    << " vs " << test::describe(want) << " x " << test::describe(x[i]);
      }
    }
  }
}

TEST(Aimet, LayoutsEqualContiguousCalls) {
  const std::vector<float> x = values(6 * 40, 2, 0.1f);
  const std::vector<float> s = {0.1f, 0.2f, 0.05f, 0.1f, 0.3f}, o = {-3.0f, 0.0f, -7.0f, -1.0f, -9.0f};
  const AffineArgs args{{0, 15}, {}};
  // (6, 40) with blocks of 8 along the last axis over scale (1, 5) -> want via the blocked call.
  const std::int64_t blocks[] = {-1, 8};
  const AffineArgs blocked{{0, 15}, blocks};
  const TensorView sv(s.data(), DType::kFloat32, Dims{1, 5}), ov(o.data(), DType::kFloat32, Dims{1, 5});
  std::vector<float> want(x.size());
  aimet::quantize_dequantize(TensorView(x.data(), DType::kFloat32, Dims{6, 40}), sv, ov, blocked, aimet::QdqPath::kNoGrad,
                             MutableTensorView(want.data(), DType::kFloat32, Dims{6, 40}));
  // The same with the parameters expanded to one value per element.
  std::vector<float> se(x.size()), oe(x.size()), got(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    se[i] = s[(i % 40) / 8];
    oe[i] = o[(i % 40) / 8];
  }
  aimet::quantize_dequantize(TensorView(x.data(), DType::kFloat32, Dims{6, 40}), TensorView(se.data(), DType::kFloat32, Dims{6, 40}),
                             TensorView(oe.data(), DType::kFloat32, Dims{6, 40}), args, aimet::QdqPath::kNoGrad,
                             MutableTensorView(got.data(), DType::kFloat32, Dims{6, 40}));
  EXPECT_TRUE(same_bits(got, want));
  // x reversed (negative strides) and written into a strided output.
  std::vector<float> xr(x.rbegin(), x.rend()), big(2 * x.size(), 7.0f);
  aimet::quantize_dequantize(TensorView(xr.data() + xr.size() - 1, DType::kFloat32, Dims{6, 40}, Dims{-40, -1}), sv, ov, blocked,
                             aimet::QdqPath::kNoGrad, MutableTensorView(big.data(), DType::kFloat32, Dims{6, 40}, Dims{80, 2}));
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(test::same_value(big[2 * i], want[i])) << i;
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(big[2 * i + 1], 7.0f) << "wrote between the strided elements";
  // In place, and into an output overlapping x shifted by one element.
  std::vector<float> inplace = x;
  aimet::quantize_dequantize(TensorView(inplace.data(), DType::kFloat32, Dims{6, 40}), sv, ov, blocked, aimet::QdqPath::kNoGrad,
                             MutableTensorView(inplace.data(), DType::kFloat32, Dims{6, 40}));
  EXPECT_TRUE(same_bits(inplace, want));
  std::vector<float> shifted(x.size() + 1);
  std::memcpy(shifted.data() + 1, x.data(), x.size() * sizeof(float));
  aimet::quantize_dequantize(TensorView(shifted.data() + 1, DType::kFloat32, Dims{6, 40}), sv, ov, blocked, aimet::QdqPath::kNoGrad,
                             MutableTensorView(shifted.data(), DType::kFloat32, Dims{6, 40}));
  EXPECT_TRUE(same_bits(std::vector<float>(shifted.begin(), shifted.end() - 1), want));
  // A zero-stride x (one value broadcast) equals that value everywhere.
  std::vector<float> one(x.size());
  aimet::quantize(TensorView(x.data() + 5, DType::kFloat32, Dims{6, 40}, Dims{0, 0}), sv, ov, AffineArgs{{0, 15}, blocks},
                  MutableTensorView(one.data(), DType::kFloat32, Dims{6, 40}));
  for (std::size_t i = 0; i < one.size(); ++i) {
    detail::AffineParams p;
    p.kind = detail::AffineKind::kQuantize;
    p.qmax = 15;
    ASSERT_TRUE(test::same_value(one[i], detail::affine_element<float>(p, x[5], s[(i % 40) / 8], o[(i % 40) / 8]))) << i;
  }
}

TEST(Aimet, ShortcutEligibility) {
  std::vector<float> x(24), s(24, 0.1f), o(24, 0.0f);
  const TensorView xv(x.data(), DType::kFloat32, Dims{4, 6});
  const AffineArgs args{{0, 255}, {}};
  auto takes = [&](const Dims& sd, const Dims& od) {
    return aimet::takes_no_grad_shortcut(xv, TensorView(s.data(), DType::kFloat32, sd), TensorView(o.data(), DType::kFloat32, od), args);
  };
  EXPECT_TRUE(takes(Dims{}, Dims{}));
  EXPECT_TRUE(takes(Dims{1, 1}, Dims{1}));
  EXPECT_TRUE(takes(Dims{4, 1}, Dims{4, 1}));
  EXPECT_TRUE(takes(Dims{6}, Dims{1, 6}));
  EXPECT_FALSE(takes(Dims{4, 6}, Dims{4, 6}));
  EXPECT_FALSE(takes(Dims{4, 1}, Dims{}));
}

TEST(Aimet, WorkingPrecisionFollowsAimetsStabilityRule) {
  // float16 with an 8-bit grid computes in float16 (eps 2^-10 <= 0.25 / 255): x / s rounds to
  // float16 before round(); with 9 bits it computes in float32. x = 0.1001 (float16) / s = 0.0003.
  const std::uint16_t xh = 0x2E68;  // float16 0.10010...
  const float s = 0.000300f, o = 0.0f;
  std::uint16_t q8 = 0, q9 = 0;
  const TensorView xv(&xh, DType::kFloat16, Dims{}), sv(&s, DType::kFloat32, Dims{}), ov(&o, DType::kFloat32, Dims{});
  aimet::quantize(xv, sv, ov, AffineArgs{{0, 511}, {}}, MutableTensorView(&q9, DType::kFloat16, Dims{}));
  aimet::quantize(xv, sv, ov, AffineArgs{{0, 255}, {}}, MutableTensorView(&q8, DType::kFloat16, Dims{}));
  EXPECT_EQ(q8, 0x5BF8u);  // 255 (clamped) in float16
  EXPECT_NE(q9, 0u);
  // float32 cannot hold a 25-bit unsigned grid: quantize raises, quantize_dequantize upcasts.
  const float xf = 1.0f;
  float y = 0;
  const TensorView xv32(&xf, DType::kFloat32, Dims{});
  EXPECT_THROW(aimet::quantize(xv32, sv, ov, AffineArgs{{0, (1 << 25) - 1}, {}}, MutableTensorView(&y, DType::kFloat32, Dims{})), Error);
  aimet::quantize_dequantize(xv32, sv, ov, AffineArgs{{0, (1 << 25) - 1}, {}}, aimet::QdqPath::kTraining,
                             MutableTensorView(&y, DType::kFloat32, Dims{}));
  EXPECT_EQ(y, static_cast<float>(std::nearbyint(1.0 / static_cast<double>(s)) * static_cast<double>(s)));
}

TEST(Aimet, GradientsSumOverSharedParameters) {
  // d/ds of a per-tensor QDQ is the sum of the per-element terms; d/dx the masked gradient.
  const std::vector<float> x = {0.26f, -0.74f, 100.0f, 0.0f}, g = {1.0f, 2.0f, 3.0f, 4.0f};
  const float s = 0.1f, o = -5.0f;
  std::vector<float> gx(4);
  float gs = 0, go = 0;
  const AffineArgs args{{0, 15}, {}};
  aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, TensorView(g.data(), DType::kFloat32, Dims{4}),
                         TensorView(x.data(), DType::kFloat32, Dims{4}), TensorView(&s, DType::kFloat32, Dims{}),
                         TensorView(&o, DType::kFloat32, Dims{}), args, MutableTensorView(gx.data(), DType::kFloat32, Dims{4}),
                         MutableTensorView(&gs, DType::kFloat32, Dims{}), MutableTensorView(&go, DType::kFloat32, Dims{}));
  detail::AffineGradParams p;
  p.op.qmax = 15;
  double want_s = 0, want_o = 0;
  for (int i = 0; i < 4; ++i) {
    p.of = detail::AffineGradOf::kX;
    EXPECT_TRUE(test::same_value(gx[static_cast<std::size_t>(i)], detail::affine_grad_element<float>(p, g[i], x[i], s, o)));
    p.of = detail::AffineGradOf::kScale;
    want_s += detail::affine_grad_element<float>(p, g[i], x[i], s, o);
    p.of = detail::AffineGradOf::kOffset;
    want_o += detail::affine_grad_element<float>(p, g[i], x[i], s, o);
  }
  EXPECT_EQ(gs, static_cast<float>(want_s));
  EXPECT_EQ(go, static_cast<float>(want_o));
  EXPECT_EQ(gx[2], 0.0f);  // 100 / 0.1 - (-5) is far above 15: masked
}

// The spec of quantize_dequantize's training-path gradients on the 8-bit unsigned grid: the scale
// and offset terms of every flat element e, exactly, into its parameter element target(e) (Acc:
// ExactSumFloat32 / ExactSumFloat64, rounded once by the caller), and grad_x per element.
template <class W, class Acc>
struct SpecGradients {
  std::vector<Acc> scale, offset;
  std::vector<W> x;
};
template <class Acc, class W, class Target>
SpecGradients<W, Acc> spec_gradients(const std::vector<W>& g, const std::vector<W>& x, const std::vector<W>& s,
                                     const std::vector<W>& o, Target target) {
  SpecGradients<W, Acc> r{std::vector<Acc>(s.size()), std::vector<Acc>(s.size()), std::vector<W>(x.size())};
  detail::AffineGradParams p;
  p.op.qmax = 255;
  for (std::size_t e = 0; e < x.size(); ++e) {
    const auto t = static_cast<std::size_t>(target(static_cast<std::int64_t>(e)));
    p.of = detail::AffineGradOf::kScale;
    r.scale[t].add(detail::affine_grad_element<W>(p, g[e], x[e], s[t], o[t]));
    p.of = detail::AffineGradOf::kOffset;
    r.offset[t].add(detail::affine_grad_element<W>(p, g[e], x[e], s[t], o[t]));
    p.of = detail::AffineGradOf::kX;
    r.x[e] = detail::affine_grad_element<W>(p, g[e], x[e], s[t], o[t]);
  }
  return r;
}

// The gradient sums are exact sums rounded once to float32: for every parameter element, the
// terms of the spec (affine_grad_element) summed in an ExactSumFloat32 and rounded once. The fused
// walk (contiguous x) on one thread and on two, and the general path (x a transposed view, whose
// terms are sorted per element), must all give those bits. Gradients spanning many binades (tiny
// and huge ones, so that float64 accumulators must spill) on every layout: per tensor, per channel
// along either axis, blocks along either axis; runs that are not multiples of the chunks; with and
// without a NaN, and with +inf and -inf (a NaN sum).
TEST(Aimet, GradientSumsAreExactSumsRoundedOnce) {
  // runs of 4608: chunks split between threads; blocks of 72 (batched runs with a scalar tail) and
  // of 64 (the vector fold of the exact-sums kernel's segments)
  constexpr std::int64_t R = 13, C = 4608, B = 72, B64 = 64;
  const std::int64_t n = R * C;
  // Two sets of gradients: spanning many binades (most blocks of terms are not narrow: their adds
  // are checked one by one), and ordinary ones (most blocks narrow: summed in plain adds, where the
  // gradient kernel may already have summed them, ExactSumsParams::presummed).
  for (const bool ordinary : {false, true}) {
  auto rng = test::make_rng(91);
  std::vector<float> x(static_cast<std::size_t>(n)), g(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = [&] { return static_cast<float>(static_cast<double>(rng() % 2000001) / 1000000.0 - 1.0); };
    x[static_cast<std::size_t>(i)] = 40.0f * u();
    const std::uint64_t pick = rng() % 100;
    g[static_cast<std::size_t>(i)] = ordinary ? u() : pick == 0 ? 1e-30f * u() : pick == 1 ? 1e30f * u() : pick < 10 ? std::ldexp(u(), -20) : u();
  }
  // x transposed in memory: the same logical (R, C) tensor, strides (1, R), for the general path.
  std::vector<float> xt(static_cast<std::size_t>(n)), gt(static_cast<std::size_t>(n));
  struct Layout {
    const char* name;
    std::vector<std::int64_t> param_shape, block;
    std::function<std::int64_t(std::int64_t, std::int64_t)> target;
  };
  const Layout layouts[] = {
      {"per tensor", {}, {}, [](std::int64_t, std::int64_t) { return std::int64_t{0}; }},
      {"rows", {R, 1}, {}, [](std::int64_t i, std::int64_t) { return i; }},
      {"columns", {1, C}, {}, [](std::int64_t, std::int64_t j) { return j; }},
      {"blocks along rows", {R, C / B}, {1, B}, [](std::int64_t i, std::int64_t j) { return i * (C / B) + j / B; }},
      {"blocks of 64 along rows", {R, C / B64}, {1, B64}, [](std::int64_t i, std::int64_t j) { return i * (C / B64) + j / B64; }},
      {"blocks along columns", {1, C}, {R, 1}, [](std::int64_t, std::int64_t j) { return j; }},
  };
  for (int specials = 0; specials < 3; ++specials) {
    if (specials == 1) g[static_cast<std::size_t>(n / 2)] = NAN;
    if (specials == 2) {
      g[static_cast<std::size_t>(n / 2)] = INFINITY;
      g[static_cast<std::size_t>(n / 2 + C)] = -INFINITY;  // the same column, the next row
    }
    for (std::int64_t i = 0; i < R; ++i) {
      for (std::int64_t j = 0; j < C; ++j) {
        xt[static_cast<std::size_t>(j * R + i)] = x[static_cast<std::size_t>(i * C + j)];
        gt[static_cast<std::size_t>(j * R + i)] = g[static_cast<std::size_t>(i * C + j)];
      }
    }
    for (const Layout& l : layouts) {
      const Dims pshape(std::span<const std::int64_t>(l.param_shape));
      const std::int64_t np = pshape.numel();
      std::vector<float> s(static_cast<std::size_t>(np)), o(static_cast<std::size_t>(np));
      for (std::int64_t k = 0; k < np; ++k) {
        s[static_cast<std::size_t>(k)] = 0.05f + 0.01f * static_cast<float>(k % 7);
        o[static_cast<std::size_t>(k)] = -128.0f + static_cast<float>(k % 5);
      }
      const AffineArgs args{{0, 255}, l.block};
      // The spec: every term, exactly, per parameter element.
      const auto spec = spec_gradients<detail::ExactSumFloat32>(g, x, s, o, [&](std::int64_t e) { return l.target(e / C, e % C); });
      const std::vector<detail::ExactSumFloat32>& want_s = spec.scale;
      const std::vector<detail::ExactSumFloat32>& want_o = spec.offset;
      const std::vector<float>& want_x = spec.x;
      struct Run {
        const char* how;
        int threads;
        bool transposed;
      };
      for (const Run& run : {Run{"fused, 1 thread", 1, false}, Run{"fused, 2 threads", 2, false}, Run{"general path", 2, true}}) {
        detail::set_thread_limit(run.threads);
        std::vector<float> gx(static_cast<std::size_t>(n)), gs(static_cast<std::size_t>(np)), go(static_cast<std::size_t>(np));
        std::vector<float> value(static_cast<std::size_t>(n)), forward(static_cast<std::size_t>(n));
        TensorView xv(x.data(), DType::kFloat32, Dims{R, C}), gv(g.data(), DType::kFloat32, Dims{R, C});
        if (run.transposed) {
          xv = TensorView(xt.data(), DType::kFloat32, Dims{R, C}, Dims{1, R});
          gv = TensorView(gt.data(), DType::kFloat32, Dims{R, C}, Dims{1, R});
        }
        const TensorView sv(s.data(), DType::kFloat32, pshape), ov(o.data(), DType::kFloat32, pshape);
        aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, gv, xv, sv, ov, args,
                               MutableTensorView(gx.data(), DType::kFloat32, Dims{R, C}),
                               MutableTensorView(gs.data(), DType::kFloat32, pshape), MutableTensorView(go.data(), DType::kFloat32, pshape),
                               MutableTensorView(value.data(), DType::kFloat32, Dims{R, C}));
        detail::set_thread_limit(256);
        // the forward output from the same pass is the training forward's, bit for bit
        aimet::quantize_dequantize(xv, sv, ov, args, aimet::QdqPath::kTraining, MutableTensorView(forward.data(), DType::kFloat32, Dims{R, C}));
        ASSERT_EQ(0, std::memcmp(value.data(), forward.data(), value.size() * sizeof(float))) << l.name << " " << run.how << " output";
        for (std::int64_t e = 0; e < n; ++e) {
          ASSERT_TRUE(test::same_value(gx[static_cast<std::size_t>(e)], want_x[static_cast<std::size_t>(e)])) << l.name << " " << run.how << " element " << e;
        }
        for (std::int64_t k = 0; k < np; ++k) {
          const auto kk = static_cast<std::size_t>(k);
          ASSERT_EQ(std::bit_cast<std::uint32_t>(gs[kk]), std::bit_cast<std::uint32_t>(want_s[kk].to_float()))
              << l.name << " " << run.how << " grad_scale[" << k << "] specials=" << specials << " ordinary=" << ordinary << ": " << gs[kk]
              << " vs " << want_s[kk].to_float();
          ASSERT_EQ(std::bit_cast<std::uint32_t>(go[kk]), std::bit_cast<std::uint32_t>(want_o[kk].to_float()))
              << l.name << " " << run.how << " grad_offset[" << k << "] specials=" << specials << " ordinary=" << ordinary;
        }
      }
    }
  }
  }
}

// The float64 working precision (float64 x) sums its float64 terms exactly too (ExactSumFloat64),
// rounded once to float64: per tensor and per channel, against the spec's terms.
TEST(Aimet, Float64GradientSumsAreExact) {
  constexpr std::int64_t R = 7, C = 300;
  auto rng = test::make_rng(17);
  std::vector<double> x(static_cast<std::size_t>(R * C)), g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<double>(rng() % 2000001) / 50000.0 - 20.0;
    g[i] = std::ldexp(static_cast<double>(rng() % 2000001) / 1000000.0 - 1.0, static_cast<int>(rng() % 120) - 60);
  }
  for (const bool per_channel : {false, true}) {
    const Dims pshape = per_channel ? Dims{R, 1} : Dims{};
    const std::int64_t np = pshape.numel();
    std::vector<double> s(static_cast<std::size_t>(np), 0.0625), o(static_cast<std::size_t>(np), -3.0);
    std::vector<double> gs(static_cast<std::size_t>(np)), go(static_cast<std::size_t>(np));
    aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, TensorView(g.data(), DType::kFloat64, Dims{R, C}),
                           TensorView(x.data(), DType::kFloat64, Dims{R, C}), TensorView(s.data(), DType::kFloat64, pshape),
                           TensorView(o.data(), DType::kFloat64, pshape), AffineArgs{{0, 255}, {}}, MutableTensorView(),
                           MutableTensorView(gs.data(), DType::kFloat64, pshape), MutableTensorView(go.data(), DType::kFloat64, pshape));
    const auto spec = spec_gradients<detail::ExactSumFloat64>(g, x, s, o, [&](std::int64_t e) { return per_channel ? e / C : 0; });
    const std::vector<detail::ExactSumFloat64>& want_s = spec.scale;
    const std::vector<detail::ExactSumFloat64>& want_o = spec.offset;
    for (std::size_t t = 0; t < static_cast<std::size_t>(np); ++t) {
      EXPECT_EQ(std::bit_cast<std::uint64_t>(gs[t]), std::bit_cast<std::uint64_t>(want_s[t].to_double())) << per_channel << " " << t;
      EXPECT_EQ(std::bit_cast<std::uint64_t>(go[t]), std::bit_cast<std::uint64_t>(want_o[t].to_double())) << per_channel << " " << t;
    }
  }
}

TEST(Aimet, BadInputNamesTheParameter) {
  std::vector<float> x(24, 1.0f), s(24, 0.5f), o(24, 0.0f), out(24);
  const TensorView xv(x.data(), DType::kFloat32, Dims{4, 6});
  const MutableTensorView outv(out.data(), DType::kFloat32, Dims{4, 6});
  auto sv = [&](Dims d) { return TensorView(s.data(), DType::kFloat32, d); };
  auto ov = [&](Dims d) { return TensorView(o.data(), DType::kFloat32, d); };
  const std::int64_t b3[] = {1, 4}, b1[] = {4}, bneg[] = {1, -1};
  expect_error([&] { aimet::quantize(xv, sv(Dims{3}), ov(Dims{}), AffineArgs{{0, 255}, {}}, outv); }, ErrorKind::kRuntime,
               "cannot be expanded like input tensor");
  expect_error([&] { aimet::quantize(xv, sv(Dims{2, 2}), ov(Dims{2, 2}), AffineArgs{{0, 255}, b3}, outv); }, ErrorKind::kRuntime,
               "block size");
  expect_error([&] { aimet::quantize(xv, sv(Dims{2, 2}), ov(Dims{2, 2}), AffineArgs{{0, 255}, b1}, outv); }, ErrorKind::kRuntime,
               "block_size");
  expect_error([&] { aimet::quantize(xv, sv(Dims{2, 4}), ov(Dims{2, 4}), AffineArgs{{0, 255}, bneg}, outv); }, ErrorKind::kRuntime,
               "divide evenly");
  expect_error([&] { aimet::quantize(xv, sv(Dims{}), ov(Dims{}), AffineArgs{{5, 4}, {}}, outv); }, ErrorKind::kRuntime,
               "qmin (5) must be smaller than or equal to qmax (4)");
  expect_error([&] { aimet::quantize(xv, sv(Dims{}), ov(Dims{}), AffineArgs{{0, (std::int64_t{1} << 25) - 1}, {}}, outv); },
               ErrorKind::kRuntime, "torch.float32 is unable to represent quantized output of range");
  expect_error([&] { aimet::quantize(xv, sv(Dims{}), ov(Dims{5}), AffineArgs{{0, 255}, {}}, outv); }, ErrorKind::kRuntime, "Offset");
  std::vector<std::int32_t> xi(24);
  expect_error([&] { aimet::quantize(TensorView(xi.data(), DType::kInt32, Dims{4, 6}), sv(Dims{}), ov(Dims{}), AffineArgs{{0, 255}, {}}, outv); },
               ErrorKind::kType, "tensor has dtype int32");
  expect_error([&] { aimet::dequantize(xv, sv(Dims{}), ov(Dims{}), {}, MutableTensorView(out.data(), DType::kFloat32, Dims{24})); },
               ErrorKind::kValue, "out must have shape");
}

// A planned call (quantize_plan, quantize_dequantize_plan, dequantize_plan: what the bindings use):
// its spec is the *_spec result, running it writes what the op writes, byte for byte, it runs
// again, on another thread too, and an output of another shape or dtype is rejected as the op
// rejects it. Per-channel and blocked parameters, both quantize_dequantize paths (the no-grad
// shortcut taken, and refused for a zero point outside the grid), a float16 tensor; the block
// sizes are changed, then gone, before the plans run (a plan keeps no reference to them).
TEST(Aimet, PlannedCallsEqualTheOps) {
  const Dims xs{6, 40};
  const std::vector<float> x = values(6 * 40, 3, 0.1f);
  const std::vector<float> s = {0.1f, 0.2f, 0.05f, 0.1f, 0.3f, 0.02f}, o = {-3.0f, 0.0f, -7.0f, -1.0f, -9.0f, -2.0f};
  const std::vector<float> o_outside = {-3.0f, 0.0f, 300.0f, -1.0f, -9.0f, -2.0f};  // zero point -300 < qmin
  std::vector<std::uint16_t> xh(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xh[i] = static_cast<std::uint16_t>(0x2E00 + (i * 37) % 0x0800);  // float16 0.09 .. 0.5
  const TensorView xv(x.data(), DType::kFloat32, xs), xhv(xh.data(), DType::kFloat16, xs);
  const TensorView channel_s(s.data(), DType::kFloat32, Dims{6, 1}), channel_o(o.data(), DType::kFloat32, Dims{6, 1}),
      outside_o(o_outside.data(), DType::kFloat32, Dims{6, 1}), block_s(s.data(), DType::kFloat32, Dims{1, 5}),
      block_o(o.data(), DType::kFloat32, Dims{1, 5});
  const auto same_spec = [](const TensorSpec& a, const TensorSpec& b) { return a.dtype == b.dtype && a.shape == b.shape; };

  struct Case {
    std::string name;
    TensorSpec spec;
    PlannedCall plan;
    std::function<void(const MutableTensorView&)> op;
    const char* op_name;
  };
  std::vector<Case> cases;
  {
    // Block sizes owned here only: the plans outlive them.
    std::vector<std::int64_t> blocks = {-1, 8};
    const AffineArgs channel{{0, 255}, {}}, signed_grid{{-8, 7}, {}}, blocked{{0, 15}, blocks};
    const auto add = [&](std::string name, TensorSpec spec, PlannedCall plan, std::function<void(const MutableTensorView&)> op,
                         const char* op_name) {
      cases.push_back(Case{std::move(name), std::move(spec), std::move(plan), std::move(op), op_name});
    };
    add("quantize per channel", aimet::quantize_spec(xv, channel_s, channel_o, channel),
        aimet::quantize_plan(xv, channel_s, channel_o, channel),
        [=](const MutableTensorView& out) { aimet::quantize(xv, channel_s, channel_o, channel, out); }, "quantize");
    add("quantize float16 blocked", aimet::quantize_spec(xhv, block_s, block_o, blocked),
        aimet::quantize_plan(xhv, block_s, block_o, blocked),
        [=](const MutableTensorView& out) { aimet::quantize(xhv, block_s, block_o, AffineArgs{{0, 15}, blocks}, out); }, "quantize");
    for (const aimet::QdqPath path : {aimet::QdqPath::kNoGrad, aimet::QdqPath::kTraining}) {
      const std::string p = path == aimet::QdqPath::kNoGrad ? " no-grad" : " training";
      add("quantize_dequantize per channel" + p, aimet::quantize_dequantize_spec(xv, channel_s, channel_o, channel, path),
          aimet::quantize_dequantize_plan(xv, channel_s, channel_o, channel, path),
          [=](const MutableTensorView& out) { aimet::quantize_dequantize(xv, channel_s, channel_o, channel, path, out); },
          "quantize_dequantize");
      add("quantize_dequantize zero point outside the grid" + p,
          aimet::quantize_dequantize_spec(xv, channel_s, outside_o, signed_grid, path),
          aimet::quantize_dequantize_plan(xv, channel_s, outside_o, signed_grid, path),
          [=](const MutableTensorView& out) { aimet::quantize_dequantize(xv, channel_s, outside_o, signed_grid, path, out); },
          "quantize_dequantize");
      add("quantize_dequantize blocked" + p, aimet::quantize_dequantize_spec(xv, block_s, block_o, blocked, path),
          aimet::quantize_dequantize_plan(xv, block_s, block_o, blocked, path),
          [=](const MutableTensorView& out) {
            aimet::quantize_dequantize(xv, block_s, block_o, AffineArgs{{0, 15}, blocks}, path, out);
          },
          "quantize_dequantize");
    }
    add("dequantize per channel", aimet::dequantize_spec(xv, channel_s, channel_o, {}), aimet::dequantize_plan(xv, channel_s, channel_o, {}),
        [=](const MutableTensorView& out) { aimet::dequantize(xv, channel_s, channel_o, {}, out); }, "dequantize");
    add("dequantize float16 blocked", aimet::dequantize_spec(xhv, block_s, block_o, blocks),
        aimet::dequantize_plan(xhv, block_s, block_o, blocks),
        [=](const MutableTensorView& out) { aimet::dequantize(xhv, block_s, block_o, blocks, out); }, "dequantize");
    blocks.assign({3, 3});  // what a plan still reading them would see (the ops' lambdas hold copies)
  }
  EXPECT_TRUE(aimet::takes_no_grad_shortcut(xv, channel_s, channel_o, AffineArgs{{0, 255}, {}}));
  EXPECT_FALSE(aimet::takes_no_grad_shortcut(xv, channel_s, outside_o, AffineArgs{{-8, 7}, {}}));

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(same_spec(c.plan.spec(), c.spec));
    const std::size_t bytes = static_cast<std::size_t>(c.spec.shape.numel()) * dtype_size(c.spec.dtype);
    std::vector<unsigned char> want(bytes, 0x5A), got(bytes);
    c.op(MutableTensorView(want.data(), c.spec.dtype, c.spec.shape));
    const MutableTensorView out(got.data(), c.spec.dtype, c.spec.shape);
    for (int run = 0; run < 2; ++run) {
      std::fill(got.begin(), got.end(), static_cast<unsigned char>(0xA5));
      if (run == 0) c.plan.run(out);
      else std::thread([&] { c.plan.run(out); }).join();
      EXPECT_EQ(got, want) << "run " << run;
    }
    const DType other = c.spec.dtype == DType::kFloat32 ? DType::kFloat64 : DType::kFloat32;
    std::vector<unsigned char> wide(static_cast<std::size_t>(c.spec.shape.numel()) * 8);
    expect_error([&] { c.plan.run(MutableTensorView(wide.data(), other, c.spec.shape)); }, ErrorKind::kValue,
                 {c.op_name, "out must have shape"});
    expect_error([&] { c.plan.run(MutableTensorView(got.data(), c.spec.dtype, Dims{c.spec.shape.numel()})); }, ErrorKind::kValue,
                 {c.op_name, "out must have shape"});
  }
}

// A plan validates when it is made, with the op's errors and exception kinds.
TEST(Aimet, PlansValidateWhenMade) {
  std::vector<float> x(24, 1.0f), s(24, 0.5f), o(24, 0.0f);
  const TensorView xv(x.data(), DType::kFloat32, Dims{4, 6}), sv(s.data(), DType::kFloat32, Dims{3}), ov(o.data(), DType::kFloat32, Dims{});
  const TensorView scalar(s.data(), DType::kFloat32, Dims{});
  expect_error([&] { aimet::quantize_plan(xv, sv, ov, AffineArgs{{0, 255}, {}}); }, ErrorKind::kRuntime,
               "cannot be expanded like input tensor");
  expect_error([&] { aimet::quantize_plan(xv, scalar, ov, AffineArgs{{0, (std::int64_t{1} << 25) - 1}, {}}); }, ErrorKind::kRuntime,
               "torch.float32 is unable to represent quantized output of range");
  expect_error([&] { aimet::quantize_dequantize_plan(xv, scalar, ov, AffineArgs{{5, 4}, {}}, aimet::QdqPath::kNoGrad); },
               ErrorKind::kRuntime, "qmin (5) must be smaller than or equal to qmax (4)");
  std::vector<std::int32_t> xi(24);
  expect_error([&] { aimet::dequantize_plan(TensorView(xi.data(), DType::kInt32, Dims{4, 6}), scalar, ov, {}); }, ErrorKind::kType,
               "tensor has dtype int32");
}


// AffineGradOf::kAll (the backward's one-pass call) writes, on every kernel set, exactly what the
// scalar kernel's three single-gradient calls write: grad_x at the row's output, the scale and
// offset terms beside it. Every kind, per tensor (broadcast parameters) and per element, rows of
// every length around the vector widths, streamed or not, with specials, ties and clamped values.
TEST(Aimet, AllGradientsInOnePassEqualTheSingleCalls) {
  constexpr std::size_t kMax = 1100;
  const std::vector<float> x = test::mixed_values(kMax + 8, 5, 30.0f), dy = test::mixed_values(kMax + 8, 6);
  std::vector<float> s(kMax + 8), o(kMax + 8);
  for (std::size_t i = 0; i < s.size(); ++i) {
    s[i] = 0.05f + 0.01f * static_cast<float>(i % 5);
    o[i] = -128.0f + static_cast<float>(i % 3);
  }
  for (const detail::KernelEntry& e : detail::all_kernels()) {
    if (e.op != detail::KernelOp::kAffineGrad || e.work != detail::WorkType::kF32 || !test::isa_available(e.isa)) continue;
    const detail::RowKernel ref = detail::reference_kernel(e.op, e.work);
    for (const detail::AffineKind kind : {detail::AffineKind::kQuantize, detail::AffineKind::kQuantizeDequantize, detail::AffineKind::kDequantize}) {
      for (const bool broadcast : {true, false}) {
        for (std::int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 70, 1000, 1037}) {
          for (const bool stream : {false, true}) {
            alignas(64) static float got[3][kMax + 16], want[3][kMax + 16];
            detail::RowArgs a;
            a.in[0] = dy.data() + 1;  // misaligned output heads below: the streamed head is partial
            a.in[1] = x.data() + 3;
            a.in[2] = s.data();
            a.in[3] = o.data();
            if (broadcast) a.broadcast_mask = (1u << 2) | (1u << 3);
            a.n = n;
            a.stream = stream;
            detail::AffineGradParams p;
            p.op.kind = kind;
            p.op.qmin = 0;
            p.op.qmax = 255;
            p.of = detail::AffineGradOf::kAll;
            p.scale_terms = got[1];
            p.offset_terms = got[2];
            a.out = got[0] + 1;
            p.scale_terms = got[1] + 1;
            p.offset_terms = got[2] + 1;
            e.fn(&p, a);
            a.stream = false;
            const detail::AffineGradOf ofs[3] = {detail::AffineGradOf::kX, detail::AffineGradOf::kScale, detail::AffineGradOf::kOffset};
            for (int k = 0; k < 3; ++k) {
              detail::AffineGradParams one = p;
              one.of = ofs[k];
              a.out = want[k] + 1;
              ref(&one, a);
            }
            for (int k = 0; k < 3; ++k) {
              ASSERT_EQ(0, std::memcmp(got[k] + 1, want[k] + 1, static_cast<std::size_t>(n) * sizeof(float)))
                  << e.name << " kind " << static_cast<int>(kind) << " output " << k << " n=" << n << " broadcast=" << broadcast
                  << " stream=" << stream;
            }
          }
        }
      }
    }
  }
}

// The float16 / bfloat16 working precisions in the vector kernels (AffineParams::narrow): every
// rounding step rounds like the spec's narrow_to at each rounding boundary. dequantize with scale 1
// and offset +0 rounds x twice (x + o, then the product); x runs over every 16-bit code of the
// format as float32 and, around each, the float32 neighbours and the ties to the next code +- 1 ulp
// (bfloat16: every low half 0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF), NaN payloads and infinities
// included.
TEST(Aimet, SixteenBitWorkingPrecisionRoundsLikeTheSpec) {
  for (const detail::QuotientRounding narrow : {detail::QuotientRounding::kFloat16, detail::QuotientRounding::kBFloat16}) {
    std::vector<float> x;
    for (std::uint32_t code = 0; code <= 0xFFFF; ++code) {
      if (narrow == detail::QuotientRounding::kBFloat16) {
        for (const std::uint32_t low : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) x.push_back(std::bit_cast<float>((code << 16) | low));
      } else {
        const float v = detail::half_bits_to_float(static_cast<std::uint16_t>(code));
        const float next = detail::half_bits_to_float(static_cast<std::uint16_t>(code + 1 <= 0xFFFF ? code + 1 : code));
        const float tie = static_cast<float>((static_cast<double>(v) + static_cast<double>(next)) / 2);  // exact in float32
        for (const float t : {v, std::nextafter(v, INFINITY), std::nextafter(v, -INFINITY), tie, std::nextafter(tie, INFINITY),
                              std::nextafter(tie, -INFINITY)}) {
          x.push_back(t);
        }
      }
    }
    const float one = 1.0f, zero = 0.0f;
    for (const detail::KernelEntry& e : detail::all_kernels()) {
      if (e.op != detail::KernelOp::kAffine || e.work != detail::WorkType::kF32 || !test::isa_available(e.isa)) continue;
      for (const bool canonical : {false, true}) {
        detail::AffineParams p;
        p.kind = detail::AffineKind::kDequantize;
        p.narrow = narrow;
        p.canonical_nan = canonical;
        std::vector<float> got(x.size()), want(x.size());
        detail::RowArgs a;
        a.in[0] = x.data();
        a.in[1] = &one;
        a.in[2] = &zero;
        a.broadcast_mask = 0b110u;
        a.n = static_cast<std::int64_t>(x.size());
        a.out = got.data();
        e.fn(&p, a);
        a.out = want.data();
        detail::reference_kernel(e.op, e.work)(&p, a);
        for (std::size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
              << e.name << " narrow=" << static_cast<int>(narrow) << " canonical=" << canonical << " x bits 0x" << std::hex
              << std::bit_cast<std::uint32_t>(x[i]);
        }
      }
    }
  }
}

// The gradient kernel's call of every output (kAll) of quantize_dequantize over [0, 255] in working
// precision `narrow`, on rows of grad_output `dy`, x, scale and offset (their masks the caller's).
struct AllGradientsCall {
  detail::RowArgs a;
  detail::AffineGradParams p;
};
AllGradientsCall all_gradients_call(detail::QuotientRounding narrow, const float* dy, const float* x, const float* scale, const float* offset,
                                    std::int64_t n, bool stream) {
  AllGradientsCall c;
  c.a.in[0] = dy;
  c.a.in[1] = x;
  c.a.in[2] = scale;
  c.a.in[3] = offset;
  c.a.n = n;
  c.a.stream = stream;
  c.p.op.kind = detail::AffineKind::kQuantizeDequantize;
  c.p.op.qmin = 0;
  c.p.op.qmax = 255;
  c.p.op.narrow = narrow;
  c.p.op.canonical_nan = narrow == detail::QuotientRounding::kBFloat16;
  c.p.of = detail::AffineGradOf::kAll;
  return c;
}
// The call's outputs into out[0] (grad_x), out[1] (the forward's output, or none), out[2] and out[3]
// (the scale and offset terms).
template <std::size_t N>
void point_gradient_outputs(AllGradientsCall& c, float (&out)[4][N], bool with_value) {
  c.a.out = out[0];
  c.p.value_out = with_value ? out[1] : nullptr;
  c.p.scale_terms = out[2];
  c.p.offset_terms = out[3];
}

// AffineGradParams::scale_blocks / offset_blocks (kAll with the forward, quantize_dequantize): the
// kernel that sums the terms' blocks as it writes them writes the same outputs as the reference's, and
// the sums it fills are the terms' own: each block's (segment's) span (largest and smallest nonzero
// magnitude), and where the block is narrow each lane's exact sum (a segment's: its exact sum). The
// AVX-512 set fills them for a row's whole blocks of 512 terms (broadcast parameters; the rest of
// the row is written as the reference writes it) and for rows of 32 k <= 512 terms with a scale and
// offset per row (AIMET's blocks, each row a segment), outputs aligned where they stream; other rows
// and kernel sets leave `blocks` and `segments` at 0, which the exact sums then do without. In
// float32 and in the float16 / bfloat16 working precisions.
TEST(Aimet, GradientKernelPresumsTheTermsBlocks) {
  constexpr std::int64_t kMax = 4224;
  const std::vector<float> x = test::mixed_values(kMax + 16, 7, 30.0f), dy = test::mixed_values(kMax + 16, 8);
  // some rows see NaN / infinite terms (mixed_values' specials)
  std::vector<float> scales(kMax), offsets(kMax);
  for (std::int64_t r = 0; r < kMax; ++r) {
    scales[static_cast<std::size_t>(r)] = 0.07f * static_cast<float>(1 + r % 3);
    offsets[static_cast<std::size_t>(r)] = -128.0f + static_cast<float>(r % 5);
  }
  int narrow_blocks = 0, narrow_segments = 0;  // blocks and segments whose sums were compared
  for (const detail::KernelEntry& e : detail::all_kernels()) {
    if (e.op != detail::KernelOp::kAffineGrad || e.work != detail::WorkType::kF32 || !test::isa_available(e.isa)) continue;
    const detail::RowKernel ref = detail::reference_kernel(e.op, e.work);
    // row_len 0: one scale and offset for the row (whole-run blocks); else one per row of row_len
    for (std::int64_t row_len : {0, 32, 96, 128, 512, 48, 544}) {
      for (const detail::QuotientRounding narrow : {detail::QuotientRounding::kNone, detail::QuotientRounding::kFloat16,
                                                     detail::QuotientRounding::kBFloat16}) {
        std::vector<std::int64_t> sizes{512, 1024, 1536, 2048, 1000, 2560, 1100, 2047, 2100};
        if (row_len > 0) sizes = {row_len, 2048 - 2048 % row_len, 129 * row_len <= kMax ? 129 * row_len : 3 * row_len};
        for (std::int64_t n : sizes) {
          for (const bool stream : {false, true}) {
            for (const bool dense_x : {false, true}) {  // dense_x: finite normal-range x, narrow blocks
              for (const bool with_value : {true, false}) {  // without: autograd's backward (no forward output)
                std::vector<float> xs(x.begin(), x.begin() + n), dys(dy.begin(), dy.begin() + n);
                if (dense_x) {
                  for (std::size_t i = 0; i < xs.size(); ++i) {
                    xs[i] = std::isfinite(xs[i]) ? std::fmod(xs[i], 12.0f) + 0.013f : 1.0f;
                    dys[i] = std::isfinite(dys[i]) && std::fabs(dys[i]) > 1e-3f && std::fabs(dys[i]) < 1e3f ? dys[i] : 0.5f;
                  }
                }
                alignas(64) static float got[4][kMax], want[4][kMax];
                AllGradientsCall c = all_gradients_call(narrow, dys.data(), xs.data(), scales.data(), offsets.data(), n, stream);
                detail::RowArgs& a = c.a;
                detail::AffineGradParams& p = c.p;
                if (row_len > 0) {
                  a.per_row_mask = (1u << 2) | (1u << 3);
                  a.row_len = row_len;
                } else {
                  a.broadcast_mask = (1u << 2) | (1u << 3);
                }
                point_gradient_outputs(c, got, with_value);
                detail::PresummedBlocks blocks[2];
                p.scale_blocks = &blocks[0];
                p.offset_blocks = &blocks[1];
                e.fn(&p, a);
                const std::string where = std::string(e.name) + " narrow=" + std::to_string(static_cast<int>(narrow)) +
                                          " row_len=" + std::to_string(row_len) + " n=" + std::to_string(n) +
                                          " stream=" + std::to_string(stream) + " dense_x=" + std::to_string(dense_x) +
                                          " with_value=" + std::to_string(with_value);
                // the outputs: the reference's
                a.stream = false;
                p.scale_blocks = p.offset_blocks = nullptr;
                point_gradient_outputs(c, want, with_value);
                ref(&p, a);
                for (int k = 0; k < 4; ++k) {
                  if (k == 1 && !with_value) continue;
                  ASSERT_EQ(0, std::memcmp(got[k], want[k], static_cast<std::size_t>(n) * sizeof(float))) << where << " output " << k;
                }
                const bool avx512 = e.isa == detail::Isa::kAvx512;
                const bool fills_blocks = avx512 && row_len == 0 && n >= 512 && n / 512 <= detail::PresummedBlocks::kMaxBlocks;
                const bool fills_segments = avx512 && row_len > 0 && row_len % 32 == 0 && row_len <= 512 &&
                                            n / row_len <= detail::PresummedBlocks::kMaxSegments;
                for (int k = 0; k < 2; ++k) {
                  ASSERT_EQ(blocks[k].blocks, fills_blocks ? n / 512 : 0) << where << " terms " << k;
                  ASSERT_EQ(blocks[k].segments, fills_segments ? n / row_len : 0) << where << " terms " << k;
                  for (std::int64_t b = 0; b < blocks[k].blocks; ++b) {
                    const float* t = want[2 + k] + 512 * b;
                    std::uint32_t max_bits, min_bits;
                    detail::exact_sums_span(t, 512, max_bits, min_bits);
                    ASSERT_EQ(blocks[k].max_bits[b], max_bits) << where << " terms " << k << " block " << b;
                    ASSERT_EQ(blocks[k].min_bits[b], min_bits) << where << " terms " << k << " block " << b;
                    if (!detail::exact_sums_span_is_narrow(max_bits, min_bits, 16)) continue;
                    ++narrow_blocks;
                    for (int l = 0; l < 32; ++l) {
                      double sum = 0.0;  // exact: the block is narrow
                      for (int i = 0; i < 16; ++i) sum += static_cast<double>(t[32 * i + l]);
                      ASSERT_EQ(std::bit_cast<std::uint64_t>(blocks[k].lane_sums[b][l]), std::bit_cast<std::uint64_t>(sum))
                          << where << " terms " << k << " block " << b << " lane " << l;
                    }
                  }
                  if (blocks[k].segments > 0) {
                    ASSERT_EQ(blocks[k].segment_length, row_len) << where;
                  }
                  for (std::int64_t s = 0; s < blocks[k].segments; ++s) {
                    const float* t = want[2 + k] + row_len * s;
                    const auto i = static_cast<std::size_t>(s);
                    std::uint32_t max_bits, min_bits;
                    detail::exact_sums_span(t, row_len, max_bits, min_bits);
                    ASSERT_EQ(blocks[k].segment_max_bits[i], max_bits) << where << " terms " << k << " segment " << s;
                    ASSERT_EQ(blocks[k].segment_min_bits[i], min_bits) << where << " terms " << k << " segment " << s;
                    if (!detail::exact_sums_span_is_narrow(max_bits, min_bits, static_cast<int>(row_len))) continue;
                    ++narrow_segments;
                    double sum = 0.0;  // exact: the segment is narrow
                    for (std::int64_t j = 0; j < row_len; ++j) sum += static_cast<double>(t[j]);
                    ASSERT_EQ(std::bit_cast<std::uint64_t>(blocks[k].segment_sum[i]), std::bit_cast<std::uint64_t>(sum))
                        << where << " terms " << k << " segment " << s;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  if (test::isa_available(detail::Isa::kAvx512)) {
    EXPECT_GT(narrow_blocks, 0) << "no narrow block was compared";
    EXPECT_GT(narrow_segments, 0) << "no narrow segment was compared";
  }
}

// The gradient kernel adds the scale and offset terms into per-element sums as it writes them where
// both parameters are one value per element of the row (ColumnSums: channels last). On every kernel
// set, over rows called one after another into the same accumulators (started at values that make
// some adds round): the outputs and the terms it stores equal the reference kernel's, it sums a
// prefix of whole vectors (ColumnSums::done, and none on the scalar rows), and for every column the
// accumulator plus its spills is exactly the start value plus every term of that column.
TEST(Aimet, GradientKernelSumsTheTermsIntoColumns) {
  constexpr std::int64_t kRows = 7, kMax = 2100, kStride = 2112;
  const std::vector<float> x = test::mixed_values(kRows * kMax, 17, 30.0f), dy = test::mixed_values(kRows * kMax, 18);
  std::vector<float> scales(kMax), offsets(kMax);
  for (std::int64_t j = 0; j < kMax; ++j) {
    scales[static_cast<std::size_t>(j)] = 0.07f * static_cast<float>(1 + j % 3);
    offsets[static_cast<std::size_t>(j)] = -128.0f + static_cast<float>(j % 5);
  }
  int fused_calls = 0, spills = 0;
  for (const detail::KernelEntry& e : detail::all_kernels()) {
    if (e.op != detail::KernelOp::kAffineGrad || e.work != detail::WorkType::kF32 || !test::isa_available(e.isa)) continue;
    const detail::RowKernel ref = detail::reference_kernel(e.op, e.work);
    for (const detail::QuotientRounding narrow : {detail::QuotientRounding::kNone, detail::QuotientRounding::kBFloat16}) {
      for (const std::int64_t n : {std::int64_t{5}, std::int64_t{16}, std::int64_t{1000}, std::int64_t{2048}, kMax}) {
        for (const bool stream : {false, true}) {
          for (const bool with_value : {true, false}) {
            const std::string where = std::string(e.name) + " narrow=" + std::to_string(static_cast<int>(narrow)) + " n=" + std::to_string(n) +
                                      " stream=" + std::to_string(stream) + " with_value=" + std::to_string(with_value);
            // start values: zeros, ordinary sums, huge and tiny ones (an add of a term rounds)
            std::vector<double> acc[2], start[2];
            for (int k = 0; k < 2; ++k) {
              acc[k].resize(static_cast<std::size_t>(n));
              for (std::int64_t j = 0; j < n; ++j) {
                const int pick = static_cast<int>((j * 7 + k) % 4);
                // (float32 values: an accumulator holds exact sums of float32 terms)
                acc[k][static_cast<std::size_t>(j)] = pick == 0 ? 0.0 : pick == 1 ? 0.375 * static_cast<double>(j % 11) : pick == 2 ? double{3e18f} : double{1e-30f};
              }
              start[k] = acc[k];
            }
            std::vector<double> spill_value[2];
            std::vector<std::int32_t> spill_index[2];
            std::vector<std::vector<float>> terms[2];
            for (std::int64_t r = 0; r < kRows; ++r) {
              alignas(64) static float got[4][kStride], want[4][kStride];  // each row 64-byte aligned (streamed outputs)
              AllGradientsCall c = all_gradients_call(narrow, dy.data() + r * kMax, x.data() + r * kMax, scales.data(), offsets.data(), n, stream);
              detail::RowArgs& a = c.a;
              detail::AffineGradParams& p = c.p;
              // every element's terms written (the reference), then the kernel with its columns
              point_gradient_outputs(c, want, with_value);
              ref(&p, a);
              std::int64_t spill_count[2] = {0, 0};
              std::vector<double> spill_room_value[2];
              std::vector<std::int32_t> spill_room_index[2];
              detail::ExactSumsParams sp[2];
              detail::ColumnSums columns[2];
              for (int k = 0; k < 2; ++k) {
                spill_room_value[k].resize(static_cast<std::size_t>(n));
                spill_room_index[k].resize(static_cast<std::size_t>(n));
                sp[k].per_element = true;
                sp[k].spill_value = spill_room_value[k].data();
                sp[k].spill_index = spill_room_index[k].data();
                sp[k].spill_count = &spill_count[k];
                columns[k].acc = acc[k].data();
                columns[k].sums = &sp[k];
                columns[k].done = 0;  // as the caller starts it: the kernel sets it where it sums
              }
              for (float* q : got) std::fill(q, q + kStride, -7.0f);
              point_gradient_outputs(c, got, with_value);
              p.scale_columns = &columns[0];
              p.offset_columns = &columns[1];
              e.fn(&p, a);
              const std::int64_t done = columns[0].done;
              ASSERT_EQ(columns[1].done, done) << where;
              const std::int64_t lanes = e.isa == detail::Isa::kAvx512 ? 16 : e.isa == detail::Isa::kAvx2 ? 8 : 0;
              ASSERT_EQ(done, lanes == 0 ? 0 : n / lanes * lanes) << where;
              if (done > 0) ++fused_calls;
              ASSERT_EQ(0, std::memcmp(got[0], want[0], static_cast<std::size_t>(n) * sizeof(float))) << where << " grad_x row " << r;
              if (with_value) {
                ASSERT_EQ(0, std::memcmp(got[1], want[1], static_cast<std::size_t>(n) * sizeof(float))) << where << " value row " << r;
              }
              for (int k = 0; k < 2; ++k) {
                // the terms past the summed prefix are stored for the caller
                ASSERT_EQ(0, std::memcmp(got[2 + k] + done, want[2 + k] + done, static_cast<std::size_t>(n - done) * sizeof(float)))
                    << where << " terms " << k << " row " << r;
                terms[k].emplace_back(want[2 + k], want[2 + k] + n);
                // the caller's share: the rest of the row's terms, by the spec's per-element rule
                for (std::int64_t j = done; j < n; ++j) detail::exact_sums_add(acc[k].data(), j, want[2 + k][j], sp[k]);
                spills += static_cast<int>(spill_count[k]);
                for (std::int64_t i = 0; i < spill_count[k]; ++i) {
                  spill_value[k].push_back(spill_room_value[k][static_cast<std::size_t>(i)]);
                  spill_index[k].push_back(spill_room_index[k][static_cast<std::size_t>(i)]);
                }
              }
            }
            for (int k = 0; k < 2; ++k) {
              for (std::int64_t j = 0; j < n; ++j) {
                const auto jj = static_cast<std::size_t>(j);
                detail::ExactSumFloat32 got_sum, want_sum;
                got_sum.add(acc[k][jj]);
                for (std::size_t i = 0; i < spill_index[k].size(); ++i) {
                  if (spill_index[k][i] == j) got_sum.add(spill_value[k][i]);
                }
                want_sum.add(start[k][jj]);
                for (const std::vector<float>& row : terms[k]) want_sum.add(row[jj]);
                ASSERT_EQ(std::bit_cast<std::uint64_t>(got_sum.to_double()), std::bit_cast<std::uint64_t>(want_sum.to_double()))
                    << where << " sum " << k << " column " << j;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(fused_calls, 0) << "no kernel summed into the columns";
  EXPECT_GT(spills, 0) << "no add was refused";
}

// Blockwise gradients whose blocks each own a parameter element are rounded and written by the
// walk itself (fused_backward's owned elements). The same bits where the gradients land on the
// parameters they are taken against (in place: grad_scale into scale, grad_offset into offset, and
// crossed), and where the blocks share elements (blocks two rows tall: every element gathers two
// runs, and the final step writes it); each equal to the exact sums rounded once.
TEST(Aimet, BlockwiseGradientsMatchWhereverTheyAreWritten) {
  constexpr std::int64_t R = 8, C = 2048, B = 128;
  const std::vector<float> x = test::mixed_values(R * C, 5, 20.0f), g = test::mixed_values(R * C, 6);
  for (const std::int64_t tall : {1, 2}) {
    const Dims pshape{R / tall, C / B};
    const std::int64_t np = pshape.numel();
    std::vector<float> s(static_cast<std::size_t>(np)), o(static_cast<std::size_t>(np));
    for (std::int64_t k = 0; k < np; ++k) {
      s[static_cast<std::size_t>(k)] = 0.05f + 0.01f * static_cast<float>(k % 7);
      o[static_cast<std::size_t>(k)] = -128.0f + static_cast<float>(k % 5);
    }
    const std::vector<std::int64_t> block{tall, B};
    const AffineArgs args{{0, 255}, block};
    const TensorView xv(x.data(), DType::kFloat32, Dims{R, C}), gv(g.data(), DType::kFloat32, Dims{R, C});
    std::vector<float> gx(static_cast<std::size_t>(R * C)), value(static_cast<std::size_t>(R * C));
    auto backward = [&](const float* scale, const float* offset, const MutableTensorView& gs, const MutableTensorView& go) {
      aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, gv, xv, TensorView(scale, DType::kFloat32, pshape),
                             TensorView(offset, DType::kFloat32, pshape), args, MutableTensorView(gx.data(), DType::kFloat32, Dims{R, C}),
                             gs, go, MutableTensorView(value.data(), DType::kFloat32, Dims{R, C}));
    };
    std::vector<float> want_s(static_cast<std::size_t>(np)), want_o(static_cast<std::size_t>(np));
    backward(s.data(), o.data(), MutableTensorView(want_s.data(), DType::kFloat32, pshape),
             MutableTensorView(want_o.data(), DType::kFloat32, pshape));
    const std::string where = "blocks " + std::to_string(tall) + " x " + std::to_string(B);
    // the spec: every term exactly, per element, rounded once
    const auto spec = spec_gradients<detail::ExactSumFloat32>(
        g, x, s, o, [&](std::int64_t e) { return (e / C / tall) * (C / B) + e % C / B; });
    const std::vector<detail::ExactSumFloat32>& exact_s = spec.scale;
    const std::vector<detail::ExactSumFloat32>& exact_o = spec.offset;
    for (std::size_t t = 0; t < static_cast<std::size_t>(np); ++t) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(want_s[t]), std::bit_cast<std::uint32_t>(exact_s[t].to_float())) << where << " scale " << t;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(want_o[t]), std::bit_cast<std::uint32_t>(exact_o[t].to_float())) << where << " offset " << t;
    }
    // in place, and crossed
    for (const bool crossed : {false, true}) {
      std::vector<float> s2 = s, o2 = o;
      float* into_s = crossed ? o2.data() : s2.data();
      float* into_o = crossed ? s2.data() : o2.data();
      backward(s2.data(), o2.data(), MutableTensorView(into_s, DType::kFloat32, pshape), MutableTensorView(into_o, DType::kFloat32, pshape));
      ASSERT_EQ(0, std::memcmp(into_s, want_s.data(), want_s.size() * sizeof(float))) << where << " crossed=" << crossed;
      ASSERT_EQ(0, std::memcmp(into_o, want_o.data(), want_o.size() * sizeof(float))) << where << " crossed=" << crossed;
    }
    // Parameters of other dtypes (a float32 tensor's working precision) have gradients of their
    // dtype, which go through the walk's float32 copy, as do strided gradients: the exact sums
    // rounded once to float32, then converted as the final step converts its sums (as float64,
    // into the gradient's dtype).
    for (const DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat64}) {
      const std::size_t bytes = static_cast<std::size_t>(np) * dtype_size(dtype);
      std::vector<unsigned char> s_d(bytes), o_d(bytes), gs(bytes, 0xA5), go(bytes, 0xA5), spec_s(bytes), spec_o(bytes);
      detail::convert_values_scalar(s.data(), DType::kFloat32, 1, s_d.data(), dtype, 1, np);
      detail::convert_values_scalar(o.data(), DType::kFloat32, 1, o_d.data(), dtype, 1, np);
      std::vector<float> s_f(static_cast<std::size_t>(np)), o_f(static_cast<std::size_t>(np));  // their values
      detail::convert_values_scalar(s_d.data(), dtype, 1, s_f.data(), DType::kFloat32, 1, np);
      detail::convert_values_scalar(o_d.data(), dtype, 1, o_f.data(), DType::kFloat32, 1, np);
      aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, gv, xv, TensorView(s_d.data(), dtype, pshape),
                             TensorView(o_d.data(), dtype, pshape), args, MutableTensorView(gx.data(), DType::kFloat32, Dims{R, C}),
                             MutableTensorView(gs.data(), dtype, pshape), MutableTensorView(go.data(), dtype, pshape),
                             MutableTensorView(value.data(), DType::kFloat32, Dims{R, C}));
      const auto spec_d = spec_gradients<detail::ExactSumFloat32>(
          g, x, s_f, o_f, [&](std::int64_t e) { return (e / C / tall) * (C / B) + e % C / B; });
      std::vector<double> sums_s(static_cast<std::size_t>(np)), sums_o(static_cast<std::size_t>(np));
      for (std::size_t t = 0; t < sums_s.size(); ++t) {
        sums_s[t] = static_cast<double>(spec_d.scale[t].to_float());
        sums_o[t] = static_cast<double>(spec_d.offset[t].to_float());
      }
      detail::convert_values_scalar(sums_s.data(), DType::kFloat64, 1, spec_s.data(), dtype, 1, np);
      detail::convert_values_scalar(sums_o.data(), DType::kFloat64, 1, spec_o.data(), dtype, 1, np);
      ASSERT_EQ(gs, spec_s) << where << " " << dtype_name(dtype);
      ASSERT_EQ(go, spec_o) << where << " " << dtype_name(dtype);
    }
    std::vector<float> every_other_s(static_cast<std::size_t>(2 * np), 7.0f), every_other_o(static_cast<std::size_t>(2 * np), 7.0f);
    const Dims every_other{2 * pshape[1], 2};
    backward(s.data(), o.data(), MutableTensorView(every_other_s.data(), DType::kFloat32, pshape, every_other),
             MutableTensorView(every_other_o.data(), DType::kFloat32, pshape, every_other));
    for (std::size_t t = 0; t < static_cast<std::size_t>(np); ++t) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(every_other_s[2 * t]), std::bit_cast<std::uint32_t>(want_s[t])) << where << " strided scale " << t;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(every_other_o[2 * t]), std::bit_cast<std::uint32_t>(want_o[t])) << where << " strided offset " << t;
      ASSERT_EQ(every_other_s[2 * t + 1], 7.0f) << where << " written between the strided elements";
      ASSERT_EQ(every_other_o[2 * t + 1], 7.0f) << where << " written between the strided elements";
    }
  }
}

// Outputs far beyond the caches are streamed, and the fused backward starts each run's chunks where
// grad_x is 64-byte aligned (a numpy array sits 16 bytes past such a boundary). At every offset of
// grad_x and the forward output (the same and different ones), on one long run (per tensor), on runs
// that start at different offsets (rows of an odd length, a scale per row) and on channels-last rows
// (a scale per column, threads taking chunks of every row): the gradients are the exact sums rounded
// once, grad_x the spec's per element, and the forward output quantize_dequantize's.
TEST(Aimet, StreamedGradientsMatchAtEveryOutputAlignment) {
  struct Layout {
    const char* name;
    std::int64_t rows, cols;
    bool per_row;  // a scale per row, else per column (channels last); rows == 1: per tensor
  };
  const Layout layouts[] = {{"per tensor", 1, (std::int64_t{1} << 21) + 1000, false},
                            {"rows of an odd length", 64, 33001, true},
                            {"channels last", 520, 4096, false}};
  for (const Layout& l : layouts) {
    const std::int64_t n = l.rows * l.cols;
    ASSERT_GT(n * static_cast<std::int64_t>(sizeof(float)), std::int64_t{8} << 20) << "streamed sizes only";
    const std::vector<float> x = test::mixed_values(n, 11, 20.0f), g = test::mixed_values(n, 12);
    const Dims xshape{l.rows, l.cols};
    const Dims pshape = l.rows == 1 ? Dims{} : l.per_row ? Dims{l.rows, 1} : Dims{1, l.cols};
    const std::int64_t np = pshape.numel();
    std::vector<float> s(static_cast<std::size_t>(np)), o(static_cast<std::size_t>(np));
    for (std::int64_t k = 0; k < np; ++k) {
      s[static_cast<std::size_t>(k)] = 0.05f + 0.01f * static_cast<float>(k % 7);
      o[static_cast<std::size_t>(k)] = -128.0f + static_cast<float>(k % 5);
    }
    auto target = [&](std::int64_t e) { return l.rows == 1 ? 0 : l.per_row ? e / l.cols : e % l.cols; };
    const auto spec = spec_gradients<detail::ExactSumFloat32>(g, x, s, o, target);
    const std::vector<detail::ExactSumFloat32>& exact_s = spec.scale;
    const std::vector<detail::ExactSumFloat32>& exact_o = spec.offset;
    const std::vector<float>& want_x = spec.x;
    const TensorView xv(x.data(), DType::kFloat32, xshape), gv(g.data(), DType::kFloat32, xshape);
    const TensorView sv(s.data(), DType::kFloat32, pshape), ov(o.data(), DType::kFloat32, pshape);
    const AffineArgs args{{0, 255}, {}};
    std::vector<float> forward(static_cast<std::size_t>(n));
    aimet::quantize_dequantize(xv, sv, ov, args, aimet::QdqPath::kTraining, MutableTensorView(forward.data(), DType::kFloat32, xshape));
    // 64-byte aligned storage with room for an offset of up to 15 elements
    struct Buffer {
      std::unique_ptr<float[], decltype(&std::free)> memory{nullptr, &std::free};
      explicit Buffer(std::int64_t count)
          : memory(static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>((count + 16 + 15) / 16 * 16) * sizeof(float))), &std::free) {}
    };
    Buffer gx_buffer(n), value_buffer(n);
    for (const auto& [x_offset, value_offset] : {std::pair{0, 0}, std::pair{4, 4}, std::pair{1, 1}, std::pair{13, 13}, std::pair{4, 9}}) {
      float* gx = gx_buffer.memory.get() + x_offset;
      float* value = value_buffer.memory.get() + value_offset;
      std::vector<float> gs(static_cast<std::size_t>(np)), go(static_cast<std::size_t>(np));
      aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, gv, xv, sv, ov, args, MutableTensorView(gx, DType::kFloat32, xshape),
                             MutableTensorView(gs.data(), DType::kFloat32, pshape), MutableTensorView(go.data(), DType::kFloat32, pshape),
                             MutableTensorView(value, DType::kFloat32, xshape));
      const std::string where = std::string(l.name) + " grad_x offset " + std::to_string(x_offset) + ", output offset " + std::to_string(value_offset);
      ASSERT_EQ(0, std::memcmp(gx, want_x.data(), static_cast<std::size_t>(n) * sizeof(float))) << where << ": grad_x";
      ASSERT_EQ(0, std::memcmp(value, forward.data(), static_cast<std::size_t>(n) * sizeof(float))) << where << ": output";
      for (std::size_t t = 0; t < static_cast<std::size_t>(np); ++t) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(gs[t]), std::bit_cast<std::uint32_t>(exact_s[t].to_float())) << where << ": grad_scale " << t;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(go[t]), std::bit_cast<std::uint32_t>(exact_o[t].to_float())) << where << ": grad_offset " << t;
      }
    }
  }
}

// affine_backward's optional forward output equals each op's forward on every path: float32 and
// bfloat16 / float64 tensors, per tensor and blockwise, quantize / dequantize / both quantize_dequantize
// paths, x itself as the output (in place: computed after the gradients read x), and an output
// that overlaps a gradient is refused by name.
TEST(Aimet, BackwardWritesTheForwardOutput) {
  constexpr std::int64_t R = 6, C = 256;
  const std::vector<float> xf = test::mixed_values(R * C, 3, 20.0f), gf = test::mixed_values(R * C, 4);
  std::vector<float> s(R * 4, 0.07f), o(R * 4, -100.0f);
  const std::int64_t block[] = {1, 64};
  for (const aimet::AffineOp op : {aimet::AffineOp::kQuantize, aimet::AffineOp::kQuantizeDequantize, aimet::AffineOp::kDequantize,
                                   aimet::AffineOp::kQuantizeDequantizeNoGrad}) {
    for (const bool blocked : {false, true}) {
      const Dims ps = blocked ? Dims{R, 4} : Dims{};
      const AffineArgs args{{0, 255}, blocked ? std::span<const std::int64_t>(block) : std::span<const std::int64_t>()};
      const TensorView xv(xf.data(), DType::kFloat32, Dims{R, C}), gv(gf.data(), DType::kFloat32, Dims{R, C});
      const TensorView sv(s.data(), DType::kFloat32, ps), ov(o.data(), DType::kFloat32, ps);
      std::vector<float> out(R * C), want(R * C), gx(R * C), gs(s.size()), go(s.size());
      const MutableTensorView outv(want.data(), DType::kFloat32, Dims{R, C});
      switch (op) {
        case aimet::AffineOp::kQuantize: aimet::quantize(xv, sv, ov, args, outv); break;
        case aimet::AffineOp::kDequantize: aimet::dequantize(xv, sv, ov, args.block_size, outv); break;
        case aimet::AffineOp::kQuantizeDequantize: aimet::quantize_dequantize(xv, sv, ov, args, aimet::QdqPath::kTraining, outv); break;
        default: aimet::quantize_dequantize(xv, sv, ov, args, aimet::QdqPath::kNoGrad, outv); break;
      }
      const bool sums = op != aimet::AffineOp::kQuantizeDequantizeNoGrad;
      aimet::affine_backward(op, gv, xv, sv, ov, args, MutableTensorView(gx.data(), DType::kFloat32, Dims{R, C}),
                             sums ? MutableTensorView(gs.data(), DType::kFloat32, ps) : MutableTensorView(),
                             sums ? MutableTensorView(go.data(), DType::kFloat32, ps) : MutableTensorView(),
                             MutableTensorView(out.data(), DType::kFloat32, Dims{R, C}));
      ASSERT_EQ(0, std::memcmp(out.data(), want.data(), out.size() * sizeof(float))) << static_cast<int>(op) << " " << blocked;
      // in place: x is the output
      std::vector<float> x_in_place = xf, gx2(R * C);
      aimet::affine_backward(op, gv, TensorView(x_in_place.data(), DType::kFloat32, Dims{R, C}), sv, ov, args,
                             MutableTensorView(gx2.data(), DType::kFloat32, Dims{R, C}), MutableTensorView(), MutableTensorView(),
                             MutableTensorView(x_in_place.data(), DType::kFloat32, Dims{R, C}));
      ASSERT_EQ(0, std::memcmp(x_in_place.data(), want.data(), out.size() * sizeof(float))) << "in place " << static_cast<int>(op);
      ASSERT_EQ(0, std::memcmp(gx2.data(), gx.data(), gx.size() * sizeof(float))) << "in place grad_x " << static_cast<int>(op);
    }
  }
  // bfloat16 x: the output converted as the forward converts it
  std::vector<std::uint16_t> xb(R * C), outb(R * C), wantb(R * C), gxb(R * C);
  for (std::size_t i = 0; i < xb.size(); ++i) xb[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(xf[i]) >> 16);
  const TensorView xbv(xb.data(), DType::kBFloat16, Dims{R, C}), gbv(xb.data(), DType::kBFloat16, Dims{R, C});
  const TensorView sv(s.data(), DType::kFloat32, Dims{}), ov(o.data(), DType::kFloat32, Dims{});
  const AffineArgs args{{0, 255}, {}};
  float gs = 0, go = 0;
  aimet::quantize_dequantize(xbv, sv, ov, args, aimet::QdqPath::kTraining, MutableTensorView(wantb.data(), DType::kBFloat16, Dims{R, C}));
  aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, gbv, xbv, sv, ov, args, MutableTensorView(gxb.data(), DType::kBFloat16, Dims{R, C}),
                         MutableTensorView(&gs, DType::kFloat32, Dims{}), MutableTensorView(&go, DType::kFloat32, Dims{}),
                         MutableTensorView(outb.data(), DType::kBFloat16, Dims{R, C}));
  EXPECT_EQ(outb, wantb);
  // an output overlapping a gradient
  std::vector<float> shared(R * C);
  expect_error([&] {
    aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, TensorView(gf.data(), DType::kFloat32, Dims{R, C}),
                           TensorView(xf.data(), DType::kFloat32, Dims{R, C}), sv, ov, args,
                           MutableTensorView(shared.data(), DType::kFloat32, Dims{R, C}), MutableTensorView(), MutableTensorView(),
                           MutableTensorView(shared.data(), DType::kFloat32, Dims{R, C}));
  }, ErrorKind::kValue, "output must not overlap grad_x");
}

// grad_x alone (no sums wanted) with short runs whose parameters vary along the run (a scale per
// channel on the last axis, a per-tensor offset): each element meets its own channel's scale, as
// in the call that also asks for the sums, and as on a strided x (the general path). Found by
// fuzz_aimet: the batched short-run walk once took such runs, reading one scale per run.
TEST(Aimet, GradXAloneWithChannelsLastScale) {
  constexpr std::int64_t R = 33, C = 8;
  const std::vector<float> x = test::mixed_values(R * C, 11, 20.0f), g = test::mixed_values(R * C, 12);
  std::vector<float> s(C), o(1, -100.0f);
  for (std::int64_t j = 0; j < C; ++j) s[static_cast<std::size_t>(j)] = 0.05f * static_cast<float>(j + 1);
  const TensorView xv(x.data(), DType::kFloat32, Dims{R, C}), gv(g.data(), DType::kFloat32, Dims{R, C});
  const TensorView sv(s.data(), DType::kFloat32, Dims{1, C}), ov(o.data(), DType::kFloat32, Dims{});
  const AffineArgs args{{0, 255}, {}};
  std::vector<float> alone(R * C), with_sums(R * C), gs(C), go(1);
  for (const aimet::AffineOp op : {aimet::AffineOp::kQuantizeDequantize, aimet::AffineOp::kQuantizeDequantizeNoGrad}) {
    aimet::affine_backward(op, gv, xv, sv, ov, args, MutableTensorView(alone.data(), DType::kFloat32, Dims{R, C}),
                           MutableTensorView(), MutableTensorView());
    aimet::affine_backward(aimet::AffineOp::kQuantizeDequantize, gv, xv, sv, ov, args,
                           MutableTensorView(with_sums.data(), DType::kFloat32, Dims{R, C}),
                           MutableTensorView(gs.data(), DType::kFloat32, Dims{1, C}), MutableTensorView(go.data(), DType::kFloat32, Dims{}));
    detail::AffineGradParams p;
    p.op.qmax = 255;
    for (std::int64_t e = 0; e < R * C; ++e) {
      const auto i = static_cast<std::size_t>(e);
      const float want = detail::affine_grad_element<float>(p, g[i], x[i], s[static_cast<std::size_t>(e % C)], o[0]);
      ASSERT_TRUE(test::same_value(alone[i], want)) << static_cast<int>(op) << " element " << e;
      ASSERT_TRUE(test::same_value(with_sums[i], want)) << "with sums, element " << e;
    }
  }
}

}  // namespace
}  // namespace polyquant
