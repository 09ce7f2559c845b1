// Kernel-side description of AIMET's affine quantization (aimet_torch.quantization.affine, 2.42.0):
// parameter structs and the per-element scalar formulas that define them, operation for operation
// in AIMET's working precision.
//
// Operands: x, scale, offset (AIMET's offset is minus the zero point), all in the working type W
// (float32 or float64; a float16 / bfloat16 working precision runs in the float32 kernel with every
// operation's result rounded to it, `narrow`, which is what torch's CPU ops on those dtypes do: each
// computes in float32 and rounds once, and float32 is wide enough for that double rounding to be
// innocuous for + - * /).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/scalar_math.h"
#include "families/onnx/kernels.h"

namespace polyquant::detail {

enum class AffineKind : std::uint8_t {
  kQuantize,            // clamp(round(x / s) - o, qmin, qmax)
  kQuantizeDequantize,  // (clamp(round(x / s) - o, qmin, qmax) + o) * s
  kDequantize,          // (x + o) * s
};

struct AffineParams {
  AffineKind kind = AffineKind::kQuantizeDequantize;
  QuotientRounding narrow = QuotientRounding::kNone;  // float16 / bfloat16 working precision
  double qmin = 0, qmax = 255;                         // integers, exact in the working type
  bool canonical_nan = false;  // bfloat16 results: every NaN is +0x7FC0 (c10::BFloat16's conversion)
};

// torch.fake_quantize_per_{tensor,channel}_affine on the CPU (AIMET's no-grad shortcut of
// quantize_dequantize). Operands: x (float32 for float16 / bfloat16 / float32 x, or float64), the
// float32 scale, the integer zero point -offset.to(int32) as float64.
//   per tensor:  qf = W(zp) + rint(x * (1.0f / s)); c = clamp(qf, qmin, qmax) in double (NaN ->
//                qmin); out = float(int64(c) - zp) * s in float32.
//   per channel: qf = W(zp) + rint(x * (1.0f / s)); t = int64(qf) (x86: NaN, +-inf and |qf| >= 2^63
//                give INT64_MIN); c = clamp(t, qmin, qmax); out = (c - zp) * double(s), rounded to
//                the output (through float32 for 16-bit outputs).
// W is float for float16/bfloat16/float32 x (x * inv_scale promotes to float) and double for
// float64 x.
struct FakeQuantizeParams {
  bool per_channel = false;
  std::int64_t qmin = 0, qmax = 255;
  bool exact_in_float = false;  // qmin, qmax and every zero point within +-2^23 (vector kernels)
  bool zero_point_f32 = false;  // the zero point operand arrives as float32 (exact: exact_in_float)
  bool canonical_nan = false;   // as AffineParams::canonical_nan
  // The gradient of x instead (operand 3: grad_output, in W): grad * mask, mask = the level before
  // the clamp lies in [qmin, qmax] (per tensor: the float q; per channel: int64(q)).
  bool gradient = false;
};

// Gradients of the training path (the autograd Functions of torch_builtins), per element, before
// the reduction to the parameter's shape. Operands: grad_output, x, scale, offset, in W.
// kAll: all three in one pass (the quotient, its rounding and the mask computed once): the
// gradient of x at the row's output, the scale and offset terms at element j of scale_terms and
// offset_terms, and where value_out is set the op's forward value (affine_element) at element j
// of it (W arrays of the row's length; host memory: the CPU backward's chunk buffers or output).
// scale_blocks and offset_blocks (kAll, optional, both or neither; a path choice, no change to any
// output): a vector body may also fill them with the scale and offset terms' whole-run blocks
// (kernels/reduce: PresummedBlocks) as it writes the terms, or leave their `blocks` at 0; the
// scalar rows leave them.
// scale_columns and offset_columns (kAll, optional, both or neither; a path choice too): where both
// parameters are one value per element of the row, a vector body may instead add the row's first
// terms straight into those per-element sums (kernels/reduce: ColumnSums, which says how many),
// storing none of them; the scalar rows leave them.
enum class AffineGradOf : std::uint8_t { kX, kScale, kOffset, kAll };
struct PresummedBlocks;
struct ColumnSums;
struct AffineGradParams {
  AffineParams op;
  AffineGradOf of = AffineGradOf::kX;
  void* scale_terms = nullptr;   // kAll only
  void* offset_terms = nullptr;  // kAll only
  void* value_out = nullptr;     // kAll only, optional
  PresummedBlocks* scale_blocks = nullptr;   // kAll only, optional
  PresummedBlocks* offset_blocks = nullptr;  // kAll only, optional
  ColumnSums* scale_columns = nullptr;       // kAll only, optional
  ColumnSums* offset_columns = nullptr;      // kAll only, optional
};

inline namespace POLYQUANT_TARGET_NAMESPACE {

template <class W>
POLYQUANT_HD inline W narrow_to(W v, QuotientRounding r) {
  if constexpr (std::is_same_v<W, float>) {
    // torch's float -> bfloat16 conversion turns every NaN into +0x7FC0
    if (r == QuotientRounding::kBFloat16 && std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();
    return round_to_quotient_dtype(v, r);
  } else {
    return v;
  }
}
template <class W>
POLYQUANT_HD inline W canonical_if(bool canonical, W v) {
  return canonical && std::isnan(v) ? std::numeric_limits<W>::quiet_NaN() : v;
}

// torch.clamp(v, lo, hi) on the CPU: NaN passes, -0 stays -0 (no bound is crossed).
template <class W>
POLYQUANT_HD inline W torch_clamp(W v, W lo, W hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// round(x / s) - o before the clamp: the value AIMET's mask is computed from.
template <class W>
POLYQUANT_HD inline W affine_unclamped(const AffineParams& p, W x, W s, W o) {
  return narrow_to<W>(x86_sub(x86_nearbyint(narrow_to<W>(x86_div(x, s), p.narrow)), o), p.narrow);
}

template <class W>
POLYQUANT_HD inline W affine_value(const AffineParams& p, W x, W s, W o) {
  if (p.narrow != QuotientRounding::kNone) {  // scale.to(dtype), offset.to(dtype)
    s = narrow_to<W>(s, p.narrow);
    o = narrow_to<W>(o, p.narrow);
  }
  if (p.kind == AffineKind::kDequantize) return narrow_to<W>(x86_mul(narrow_to<W>(x86_add(x, o), p.narrow), s), p.narrow);
  const W q = torch_clamp(affine_unclamped(p, x, s, o), static_cast<W>(p.qmin), static_cast<W>(p.qmax));
  if (p.kind == AffineKind::kQuantize) return q;
  return narrow_to<W>(x86_mul(narrow_to<W>(x86_add(q, o), p.narrow), s), p.narrow);
}
template <class W>
POLYQUANT_HD inline W affine_element(const AffineParams& p, W x, W s, W o) {
  return canonical_if(p.canonical_nan, affine_value(p, x, s, o));
}

// int64(v) as x86-64's cvttsd2si gives it: INT64_MIN for NaN, infinities and |v| >= 2^63.
template <class W>
POLYQUANT_HD inline std::int64_t x86_int64(W v) {
  if (!(v >= W(-9223372036854775808.0) && v < W(9223372036854775808.0))) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

// One element of torch's fake quantization; returns the value to store (float for the float32
// kernel, double for the float64 one).
template <class W>
POLYQUANT_HD inline W fake_quantize_value(const FakeQuantizeParams& p, W x, float s, double zp) {
  const float inv_scale = x86_div(1.0f, s);
  const auto z = static_cast<std::int64_t>(zp);
  const W qf = x86_add(static_cast<W>(z), x86_nearbyint(x86_mul(x, x86_cast<W>(inv_scale))));
  const double lo = static_cast<double>(p.qmin), hi = static_cast<double>(p.qmax);
  if (!p.per_channel) {
    const double c = std::fmin(std::fmax(static_cast<double>(qf), lo), hi);  // fmax(NaN, lo) = lo
    return x86_cast<W>(x86_mul(static_cast<float>(static_cast<std::int64_t>(c) - z), s));
  }
  const double t = static_cast<double>(x86_int64(qf));
  const double c = std::fmin(std::fmax(t, lo), hi);
  const double y = x86_mul(c - static_cast<double>(z), x86_to_double(s));
  return x86_cast<W>(y);  // float32 kernel: the double rounded to float (then to 16 bits)
}
template <class W>
POLYQUANT_HD inline W fake_quantize_element(const FakeQuantizeParams& p, W x, float s, double zp) {
  return canonical_if(p.canonical_nan, fake_quantize_value(p, x, s, zp));
}

// torch's fake-quantization backward: grad * mask (a product with 0 / 1: -0 for a negative masked
// gradient, NaN for a NaN one).
template <class W>
POLYQUANT_HD inline W fake_quantize_grad_element(const FakeQuantizeParams& p, W dy, W x, float s, double zp) {
  const float inv_scale = x86_div(1.0f, s);
  const auto z = static_cast<std::int64_t>(zp);
  const W qf = x86_add(static_cast<W>(z), x86_nearbyint(x86_mul(x, x86_cast<W>(inv_scale))));
  bool in_range;
  if (!p.per_channel) {
    in_range = static_cast<W>(p.qmin) <= qf && qf <= static_cast<W>(p.qmax);
  } else {
    const std::int64_t q = x86_int64(qf);
    in_range = p.qmin <= q && q <= p.qmax;
  }
  return x86_mul(dy, in_range ? W(1) : W(0));
}

// One per-element gradient of the training path.
//
// Which NaN comes out where two operands of a product (or sum) can both be NaN is spelled out
// (mul_first_nan: x86's rule, the first operand's NaN, quieted), as are the products with the
// 0 / 1 mask: C++ lets the compiler swap the operands of '*' and '+' and fold `g * 1` to `g` (a
// signalling NaN g then stays signalling), and g++ decides differently per branch and per
// optimisation level. The spelled-out forms are what the Release build of the plain expressions
// returned (golden data and kernel tests unchanged), now for every build and every kernel:
//   dequantize:  d/dx = d/do = s * g, d/ds = (x + o) * g, with x's NaN first in x + o;
//   quantize:    masked = g where the mask holds, else g * 0; d/ds = (x / s) * -(masked / s);
//   quantize_dequantize: d/do = g * s, d/ds = g * factor.
template <class W>
POLYQUANT_HD inline W affine_grad_element(const AffineGradParams& g, W dy, W x, W s, W o) {
  const AffineParams& p = g.op;
  const QuotientRounding r = p.narrow;
  if (r != QuotientRounding::kNone) {
    s = narrow_to<W>(s, r);
    o = narrow_to<W>(o, r);
  }
  const W zero = W(0);
  switch (p.kind) {
    case AffineKind::kDequantize:  // d/dx = d/do = g * s; d/ds = g * (x + o)
      if (g.of == AffineGradOf::kScale) {
        const W shifted = std::isnan(x) ? x86_add(x, x) : x86_add(x, o);
        return narrow_to<W>(mul_first_nan(narrow_to<W>(shifted, r), dy), r);
      }
      return narrow_to<W>(mul_first_nan(s, dy), r);
    case AffineKind::kQuantize: {
      // masked = g * mask (a product with 0 / 1: keeps g's sign, NaN * 0 = NaN);
      // d/dx = masked / s; d/ds = -(masked / s) * (x / s); d/do = -masked.
      const W v = affine_unclamped(p, x, s, o);
      const bool in_range = v >= static_cast<W>(p.qmin) && v <= static_cast<W>(p.qmax);
      const W masked = narrow_to<W>(in_range ? dy : x86_mul(dy, zero), r);
      if (g.of == AffineGradOf::kOffset) return x86_neg(masked);
      const W dx = narrow_to<W>(x86_div(masked, s), r);
      if (g.of == AffineGradOf::kX) return dx;
      return narrow_to<W>(mul_first_nan(narrow_to<W>(x86_div(x, s), r), x86_neg(dx)), r);
    }
    default: {
      // d/dx = where(mask, g, 0); d/ds = g * where(mask, round(x/s) - x/s, clamp(round(x/s),
      // o + qmin, o + qmax)); d/do = where(mask, 0, g * s).
      const W v = affine_unclamped(p, x, s, o);
      const bool in_range = static_cast<W>(p.qmin) <= v && v <= static_cast<W>(p.qmax);
      if (g.of == AffineGradOf::kX) return in_range ? dy : zero;
      if (g.of == AffineGradOf::kOffset) return in_range ? zero : narrow_to<W>(mul_first_nan(dy, s), r);
      const W scaled = narrow_to<W>(x86_div(x, s), r);
      const W rounded = x86_nearbyint(scaled);
      W factor;
      if (in_range) {
        factor = narrow_to<W>(x86_sub(rounded, scaled), r);
      } else {
        const W lo = narrow_to<W>(x86_add(o, static_cast<W>(p.qmin)), r), hi = narrow_to<W>(x86_add(o, static_cast<W>(p.qmax)), r);
        factor = torch_clamp(rounded, lo, hi);
      }
      return narrow_to<W>(mul_first_nan(dy, factor), r);
    }
  }
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
// ---- Per-element rows (host and device) and the scalar reference rows (host) --------------------
// <op>_row_element<W>(params, args, j) computes output element j of a row (kernels/row.h);
// <op>_reference_row<W>, a plain loop over it, is what the registry's scalar kernels
// ref::<op>_<work> run (kernels/reference_kernels.cc stamps them from the op list), and the CUDA
// backend runs the same element in its kernels. These rows are the portable fallback, the only
// kernels of the float16 / bfloat16 working precisions, the gradients and the float64 work, and the
// oracle every vector kernel is tested against.
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class W>
POLYQUANT_HD inline void affine_row_element(const AffineParams& p, const RowArgs& a, std::int64_t j) {
  static_cast<W*>(a.out)[j] = affine_element<W>(p, a.at<W>(0, j), a.at<W>(1, j), a.at<W>(2, j));
}

// The value (or, with `gradient`, the gradient of x) of torch's fake quantization; the zero point
// arrives as float32 or float64 (FakeQuantizeParams::zero_point_f32).
template <class W>
POLYQUANT_HD inline void fake_quantize_row_element(const FakeQuantizeParams& p, const RowArgs& a, std::int64_t j) {
  const double zp = p.zero_point_f32 ? x86_to_double(a.at<float>(2, j)) : a.at<double>(2, j);
  auto* out = static_cast<W*>(a.out);
  if (p.gradient) out[j] = fake_quantize_grad_element<W>(p, a.at<W>(3, j), a.at<W>(0, j), a.at<float>(1, j), zp);
  else out[j] = fake_quantize_element<W>(p, a.at<W>(0, j), a.at<float>(1, j), zp);
}

template <class W>
POLYQUANT_HD inline void affine_grad_row_element(const AffineGradParams& p, const RowArgs& a, std::int64_t j) {
  const W dy = a.at<W>(0, j), x = a.at<W>(1, j), s = a.at<W>(2, j), o = a.at<W>(3, j);
  if (p.of != AffineGradOf::kAll) {
    static_cast<W*>(a.out)[j] = affine_grad_element<W>(p, dy, x, s, o);
    return;
  }
  AffineGradParams one = p;
  one.of = AffineGradOf::kScale;
  static_cast<W*>(p.scale_terms)[j] = affine_grad_element<W>(one, dy, x, s, o);
  one.of = AffineGradOf::kOffset;
  static_cast<W*>(p.offset_terms)[j] = affine_grad_element<W>(one, dy, x, s, o);
  one.of = AffineGradOf::kX;
  static_cast<W*>(a.out)[j] = affine_grad_element<W>(one, dy, x, s, o);
  if (p.value_out != nullptr) static_cast<W*>(p.value_out)[j] = affine_element<W>(p.op, x, s, o);
}

template <class W>
inline void affine_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const AffineParams*>(params);
  for (std::int64_t j = 0; j < a.n; ++j) affine_row_element<W>(p, a, j);
}

template <class W>
inline void fake_quantize_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FakeQuantizeParams*>(params);
  for (std::int64_t j = 0; j < a.n; ++j) fake_quantize_row_element<W>(p, a, j);
}

template <class W>
inline void affine_grad_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const AffineGradParams*>(params);
  for (std::int64_t j = 0; j < a.n; ++j) affine_grad_row_element<W>(p, a, j);
}

}  // namespace POLYQUANT_TARGET_NAMESPACE

template <> struct RowElementTraits<KernelOp::kAffine> { using Params = AffineParams; };
template <> struct RowElementTraits<KernelOp::kFakeQuantize> {
  using Params = FakeQuantizeParams;
  static constexpr int kSecondStream = 3;  // grad_output (gradient)
};
template <> struct RowElementTraits<KernelOp::kAffineGrad> {
  using Params = AffineGradParams;
  static constexpr int kSecondStream = 1;  // x, beside grad_output (operand 0)
};

}  // namespace polyquant::detail
