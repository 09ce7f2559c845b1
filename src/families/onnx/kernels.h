// Kernel-side description of the linear quantize / dequantize ops (ONNX QuantizeLinear /
// DequantizeLinear, Quark's ExtendedQuantizeLinear / ExtendedDequantizeLinear; AIMET's affine ops
// reuse the integer path): parameter structs and the per-element scalar formulas that define them.
//
// Integer and narrow-float outputs are written in their own storage (int8 ... uint32, one byte per
// sub-byte or minifloat element, 16-bit bfloat16/float16), so the engine writes them directly.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/half.h"
#include "core/minifloat.h"
#include "core/target.h"
#include "kernels/row.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

// ---- QuantizeLinear: operands x, scale[, zero_point] --------------------------------------------
// Working types: x and scale arrive as float32 (x of float16 / bfloat16 and scales of float16 /
// bfloat16 / e8m0 are exact in it) for the float32 kernel, or float64 (int32 x, float64
// precision) for the float64 kernel. The zero point arrives as float32 (every zero point of an
// 8/16-bit output and every float zero point is exact in it) or, for 32-bit integer outputs, as
// float64 (exact for int32/uint32).
enum class QuantTarget : std::uint8_t {
  kInteger,        // clamp(rint(q) + zp, qmin, qmax), see NonFinitePolicy
  kMinifloat,      // minifloat(q [+ zp]) with `format`, `saturate` (float8: onnx's saturate_cast)
  kBFloat16,       // bfloat16(q + zp), round to nearest even, overflow -> inf, NaN -> `bf16_nan`
  kFloat16Clamp,   // float16(clamp(x, -65504, 65504)), scale and zero point ignored (Quark's
                   // float16 output: ORT's Cast of the clamped x); NaN: sign, quiet bit and the
                   // payload's top 9 bits
  kFloat16,        // float16(q + zp), round to nearest even, overflow -> inf, NaN kept
};

// The rounding of the quotient q = x / scale to the division's dtype, when it is narrower than the
// working type (numpy divides float16 / bfloat16 arrays in float32 and rounds the quotient once;
// that is the correctly rounded narrow quotient).
enum class QuotientRounding : std::uint8_t { kNone, kFloat16, kBFloat16 };
// With a `precision` narrower than an operand, the operands are first rounded to it as well.

// What an integer output gets from a NaN, an infinity or a quotient beyond the integer range.
enum class NonFinitePolicy : std::uint8_t {
  // ONNX Runtime's (MLAS) rule, used for the ONNX ops: +inf and large positive -> qmax, -inf and
  // large negative -> qmin, NaN -> qmin. Finite quotients: clamp(rint(q) + zp) exactly.
  kSaturate,
  // Quark's CPU kernel on x86-64: t = int64(rint(q)) + zp with the int64 conversion of NaN, +-inf
  // and |rint(q)| >= 2^63 giving INT64_MIN (cvttss2si) and the sum wrapping modulo 2^64, then
  // clamp(t, qmin, qmax): NaN and infinities give qmin, or qmax when zp < 0.
  kInt64Cast,
};

struct QuantizeLinearParams {
  QuantTarget target = QuantTarget::kInteger;
  QuotientRounding quotient = QuotientRounding::kNone;
  bool round_operands = false;       // round x and the scale to the quotient's dtype before dividing
  NonFinitePolicy non_finite = NonFinitePolicy::kSaturate;
  DType out_dtype = DType::kUInt8;   // the element written: int8..uint32, a sub-byte integer or minifloat
  std::int64_t qmin = 0, qmax = 255; // integer targets
  bool has_zero_point = false;       // operand 2 exists (absent: zero)
  bool add_zero_point = false;       // float targets: add the zero point to q (else it is ignored)
  bool zero_point_f64 = false;       // the float32 kernel reads the zero point as float64
  bool saturate = true;              // minifloat targets
  MinifloatFormat format{};          // minifloat targets
  std::uint16_t bf16_nan = 0x7FC1;   // kBFloat16: the NaN written (Quark's CPU op: 0x7FC1); 0:
                                     // ml_dtypes' rule (0x7FC0 with the NaN's sign)
};

// ---- DequantizeLinear: operands x, scale[, zero_point] ------------------------------------------
// x and the zero point arrive in their storage dtype (`x_dtype`) when it is an 8/16/32-bit or sub-byte
// integer or a minifloat (one code per byte), otherwise as float32 (float16, bfloat16: exact; the
// ONNX ops' x of every type may also arrive so, widened by the engine). The scale arrives as float32. The
// kernel writes float32 (product_f64 false) or float64; the engine rounds that to the output dtype.
enum class DequantDifference : std::uint8_t {
  kFloat32,  // (float32(x) - float32(zp)) * s in float32 (exact difference for 8/16-bit integers)
  kFloat64,  // (float64(float32(x)) - float64(zp)) * float64(s), the product in float64 (onnx's
             // int32 with a zero point: x.astype(float32) minus an int32 array promotes to float64)
  kRounded,  // float32(x - zp) * s: the exact difference rounded once to float32 (Quark: int64)
};
struct DequantizeLinearParams {
  DType x_dtype = DType::kUInt8;   // storage of x and the zero point as the kernel reads them
  bool has_zero_point = false;
  DequantDifference difference = DequantDifference::kFloat32;
  bool ignore_scale = false;       // Quark's float16 input: a plain cast
  bool canonical_nan = false;      // Quark's bfloat16 input: every NaN of x / zp reads as +0x7FC00000
};

inline namespace POLYQUANT_TARGET_NAMESPACE {

// ---- scalar formulas ----------------------------------------------------------------------------
// The quotient of the float32 kernel, rounded to the division's dtype.
POLYQUANT_HD inline float round_to_quotient_dtype(float v, QuotientRounding r) {
  switch (r) {
    case QuotientRounding::kFloat16: return half_bits_to_float(float_to_half_bits(v));
    case QuotientRounding::kBFloat16: return bfloat16_bits_to_float(float_to_bfloat16_bits(v));
    default: return v;
  }
}
POLYQUANT_HD inline float quotient_f32(float x, float s, QuotientRounding r, bool round_operands) {
  if (round_operands) {
    x = round_to_quotient_dtype(x, r);
    s = round_to_quotient_dtype(s, r);
  }
  return round_to_quotient_dtype(x86_div(x, s), r);
}

// clamp(rint(q) + zp, qmin, qmax) for an integer zero point zp, under `policy`. W is float or double.
template <class W>
POLYQUANT_HD inline std::int64_t quantize_integer(W q, double zp, std::int64_t qmin, std::int64_t qmax, NonFinitePolicy policy) {
  const W r = std::nearbyint(q);
  const auto z = static_cast<std::int64_t>(zp);
  std::int64_t t;
  if (policy == NonFinitePolicy::kInt64Cast) {
    const bool fits = r >= W(-9223372036854775808.0) && r < W(9223372036854775808.0);  // false for NaN
    const std::int64_t i = fits ? static_cast<std::int64_t>(r) : std::numeric_limits<std::int64_t>::min();
    t = static_cast<std::int64_t>(static_cast<std::uint64_t>(i) + static_cast<std::uint64_t>(z));
  } else {
    if (std::isnan(r)) return qmin;
    // Beyond [qmin - zp, qmax - zp] the result saturates; inside, the sum is exact in int64.
    const double lo = static_cast<double>(qmin - z), hi = static_cast<double>(qmax - z);
    const double rd = static_cast<double>(r);
    if (rd <= lo) return qmin;
    if (rd >= hi) return qmax;
    t = static_cast<std::int64_t>(rd) + z;
  }
  return t < qmin ? qmin : (t > qmax ? qmax : t);
}

// Stores integer value v (in range) as an element of `t`.
POLYQUANT_HD inline void store_integer(void* out, std::int64_t j, DType t, std::int64_t v) {
  switch (t) {
    case DType::kInt8: static_cast<std::int8_t*>(out)[j] = static_cast<std::int8_t>(v); return;
    case DType::kInt16: static_cast<std::int16_t*>(out)[j] = static_cast<std::int16_t>(v); return;
    case DType::kUInt16: static_cast<std::uint16_t*>(out)[j] = static_cast<std::uint16_t>(v); return;
    case DType::kInt32: static_cast<std::int32_t*>(out)[j] = static_cast<std::int32_t>(v); return;
    case DType::kUInt32: static_cast<std::uint32_t*>(out)[j] = static_cast<std::uint32_t>(v); return;
    case DType::kInt4:
    case DType::kInt2:
      // Sub-byte integers keep their two's-complement low bits (ml_dtypes: int4 -1 is 0x0F).
      static_cast<std::uint8_t*>(out)[j] = static_cast<std::uint8_t>(v & (t == DType::kInt4 ? 0x0F : 0x03));
      return;
    default: static_cast<std::uint8_t*>(out)[j] = static_cast<std::uint8_t>(v); return;  // uint8/4/2
  }
}

// float16 of Quark's clamped cast.
POLYQUANT_HD inline std::uint16_t float16_clamped_bits(float x) {
  if (std::isnan(x)) {  // ORT's Cast keeps the payload's top bits and sets the quiet bit
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x03FFu));
  }
  const float c = x > 65504.0f ? 65504.0f : (x < -65504.0f ? -65504.0f : x);
  return float_to_half_bits(c);
}

// One QuantizeLinear element in working type W (x, s, zp already in W / double).
template <class W>
POLYQUANT_HD inline void quantize_linear_element(const QuantizeLinearParams& p, W x, W s, double zp, void* out, std::int64_t j) {
  if (p.target == QuantTarget::kFloat16Clamp) {
    static_cast<std::uint16_t*>(out)[j] = float16_clamped_bits(x86_cast<float>(x));
    return;
  }
  W q;
  if constexpr (std::is_same_v<W, float>) q = quotient_f32(x, s, p.quotient, p.round_operands);
  else q = x86_div(x, s);
  switch (p.target) {
    case QuantTarget::kInteger:
      store_integer(out, j, p.out_dtype, quantize_integer(q, zp, p.qmin, p.qmax, p.non_finite));
      return;
    case QuantTarget::kMinifloat: {
      W v = q;
      if (p.add_zero_point && p.has_zero_point) v = x86_add(v, x86_cast<W>(zp));  // no zero point: -0 stays -0
      // A float64 value is clipped (saturate) in float64, then converted through float32.
      if (p.saturate && !std::isnan(v)) {
        const W m = static_cast<W>(p.format.max_value);
        v = v > m ? m : (v < -m ? -m : v);
      }
      static_cast<std::uint8_t*>(out)[j] = minifloat_from_float(p.format, x86_cast<float>(v), p.saturate);
      return;
    }
    case QuantTarget::kBFloat16: {
      const float v = x86_cast<float>(p.has_zero_point ? x86_add(q, x86_cast<W>(zp)) : q);
      static_cast<std::uint16_t*>(out)[j] =
          std::isnan(v) ? (p.bf16_nan ? p.bf16_nan : float_to_bfloat16_bits(v)) : bfloat16_round_bits(v);
      return;
    }
    case QuantTarget::kFloat16:
      static_cast<std::uint16_t*>(out)[j] = float_to_half_bits(x86_cast<float>(p.has_zero_point ? x86_add(q, x86_cast<W>(zp)) : q));
      return;
    default:
      return;
  }
}

// The value of a dequantize operand (x, the zero point) read in its storage dtype t.
POLYQUANT_HD inline double read_dequantize_operand(const void* p, std::int64_t j, DType t) {
  const auto byte = [&] { return static_cast<const std::uint8_t*>(p)[j]; };
  if (has_minifloat_format(t)) return x86_to_double(minifloat_to_float(minifloat_format(t), byte()));
  switch (t) {
    // Sub-byte integers: the low bits of their byte, two's complement when signed.
    case DType::kInt4: return static_cast<std::int8_t>(static_cast<std::uint8_t>(byte() << 4)) >> 4;
    case DType::kUInt4: return byte() & 0x0F;
    case DType::kInt2: return static_cast<std::int8_t>(static_cast<std::uint8_t>(byte() << 6)) >> 6;
    case DType::kUInt2: return byte() & 0x03;
    case DType::kInt8: return static_cast<const std::int8_t*>(p)[j];
    case DType::kUInt8: return static_cast<const std::uint8_t*>(p)[j];
    case DType::kInt16: return static_cast<const std::int16_t*>(p)[j];
    case DType::kUInt16: return static_cast<const std::uint16_t*>(p)[j];
    case DType::kInt32: return static_cast<const std::int32_t*>(p)[j];
    case DType::kUInt32: return static_cast<const std::uint32_t*>(p)[j];
    default: return x86_to_double(static_cast<const float*>(p)[j]);  // float32 (float16, bfloat16)
  }
}

POLYQUANT_HD inline float canonical_nan_f32(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::quiet_NaN() : v;
}

// One DequantizeLinear element: x and zp values exact as double, s the float32 scale. Returns the
// float32 result, or (kFloat64) the float64 one.
POLYQUANT_HD inline double dequantize_linear_element(const DequantizeLinearParams& p, double x, float s, double zp) {
  switch (p.difference) {
    case DequantDifference::kFloat64:  // onnx: float64(float32(x)) - zp, times the scale in float64
      return x86_mul(x86_sub(x86_to_double(x86_to_float(x)), zp), x86_to_double(s));
    case DequantDifference::kRounded: return x86_to_double(x86_mul(x86_to_float(x86_sub(x, zp)), s));
    default: {
      float xf = x86_to_float(x), zf = x86_to_float(zp);
      if (p.canonical_nan) {
        xf = canonical_nan_f32(xf);
        zf = canonical_nan_f32(zf);
      }
      if (p.ignore_scale) return x86_to_double(xf);
      return x86_to_double(x86_mul(x86_sub(xf, zf), s));
    }
  }
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
// ---- Per-element rows (host and device) and the scalar reference rows (host) --------------------
// <op>_row_element<W>(params, args, j) computes output element j of a row (kernels/row.h);
// <op>_reference_row<W>, a plain loop over it, is what the registry's scalar kernels
// ref::<op>_<work> run (kernels/reference_kernels.cc stamps them from the op list), and the CUDA
// backend runs the same element in its kernels. These rows are the portable fallback, the only
// kernels of the rarer formats, and the oracle every vector kernel is tested against.
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class W>
POLYQUANT_HD inline void quantize_linear_row_element(const QuantizeLinearParams& p, const RowArgs& a, std::int64_t j) {
  const bool zp_f64 = std::is_same_v<W, double> || p.zero_point_f64;
  double zp = 0.0;
  if (p.has_zero_point) zp = zp_f64 ? a.at<double>(2, j) : x86_to_double(a.at<float>(2, j));
  quantize_linear_element<W>(p, a.at<W>(0, j), a.at<W>(1, j), zp, a.out, j);
}

// Out: the element written, float (the float32 kernel) or double.
template <class Out>
POLYQUANT_HD inline void dequantize_linear_row_element(const DequantizeLinearParams& p, const RowArgs& a, std::int64_t j) {
  const double x = read_dequantize_operand(a.in[0], a.index_of(0, j), p.x_dtype);
  const double zp = p.has_zero_point ? read_dequantize_operand(a.in[2], a.index_of(2, j), p.x_dtype) : 0.0;
  static_cast<Out*>(a.out)[j] = x86_cast<Out>(dequantize_linear_element(p, x, a.at<float>(1, j), zp));
}

template <class W>
inline void quantize_linear_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QuantizeLinearParams*>(params);
  for (std::int64_t j = 0; j < a.n; ++j) quantize_linear_row_element<W>(p, a, j);
}

template <class Out>
inline void dequantize_linear_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const DequantizeLinearParams*>(params);
  for (std::int64_t j = 0; j < a.n; ++j) dequantize_linear_row_element<Out>(p, a, j);
}

}  // namespace POLYQUANT_TARGET_NAMESPACE

template <> struct RowElementTraits<KernelOp::kQuantizeLinear> { using Params = QuantizeLinearParams; };
template <> struct RowElementTraits<KernelOp::kDequantizeLinear> { using Params = DequantizeLinearParams; };

}  // namespace polyquant::detail
