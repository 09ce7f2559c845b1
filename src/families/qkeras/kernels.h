// Kernel-side description of the QKeras quantizers (google/qkeras 78ea90f): parameter structs and
// the per-element scalar formulas that define them, the spec every vector kernel equals bit for bit.
//
// QKeras evaluates each quantizer as a chain of separate float32 TensorFlow ops, eagerly, in the
// order its Python is written; the formulas below are that chain, op for op, with no algebraic
// shortcut (several QKeras quirks live in exactly those ops: the `x + q * (xq - x)` blend does not
// return xq for huge x; `p + (-p + round(p))` turns -0 into +0 and inf into NaN). Every row loop
// runs inside ScopedFlushDenormals (TensorFlow's flush-to-zero / denormals-are-zero), and the
// kernels are compiled with -ffp-contract=off.
//
// Comparison ops follow TensorFlow's float32 CPU kernels: minimum/maximum propagate NaN and, on two
// equal operands (+0 and -0), return the second one (the clip bound), as the vectorized Eigen path
// does for all but a tensor's last few elements.
#pragma once

#include <bit>
#include <cmath>
#include <limits>
#include <cstdint>

#include "core/philox.h"
#include "core/target.h"
#include "kernels/row.h"
#include "core/fpenv.h"
#include "core/x86_nan.h"
#include <type_traits>

namespace polyquant::detail {

// How the quantized value xq meets the input: QKeras' qnoise blend.
//   use_ste:   out = x + q * ((-x) + xq)            (quantized_bits, quantized_relu)
//   otherwise: out = (1 - q) * x + q * xq           ((1 - q) rounded once to float32)
//   linear:    out = x + q * (xq - x)               (quantized_linear; equal to the first form)
struct QkBlend {
  bool use_ste = true;
  float q = 1.0f;
  float one_minus_q = 0.0f;
};

// Stochastic rounding (training mode): U from Philox keyed by the seed, the element's flat index
// and a stream number (a call's iteration of a scale search), on TensorFlow's 2^-23 lattice.
struct QkStochastic {
  bool enabled = false;
  std::uint64_t seed = 0;
  std::uint32_t stream = 0;
  float scale = 1.0f;  // 1 / precision: 1 (quantized_bits, quantized_linear) or 2 (quantized_relu)
};

// ---- quantized_bits, fixed-point path: operands x, alpha ------------------------------------
// Division by a power of two: where QKeras divides by m or m_i (or by a scale operand) and that
// divisor is 2^k with a normal reciprocal, x / 2^k and x * 2^-k are the one rounding of the same
// exact value (overflow, flush to zero and NaN included), so the vector kernels multiply by the
// reciprocal (divisions dominate their cost). inv_* = exact_reciprocal(divisor), 0 when it is not
// exact; `pow2_scales`: every value of the scale operand is such a power of two.
struct QkBitsParams {
  bool binary = false;         // bits - keep_negative <= 0: the +-1 branch
  bool keep_negative = true;
  float m = 0, m_i = 0;        // 2^(bits - keep_negative), 2^integer (float32 pow)
  float inv_m = 0, inv_m_i = 0;
  float lo = 0, hi = 0;        // keep_negative * (-m + symmetric) (-0.0 when unsigned), m - 1
  QkBlend blend;
  QkStochastic stochastic;
  bool gradient = false;       // write d out / d x instead of out
  bool upstream = false;       // with gradient: times grad_output, operand 2 (qk_chain)
};

// ---- the least-squares terms of a scale search ---------------------------------------------------
// With level_only, a quantizer may write one of the terms of a least-squares sum instead of its
// level z: v * z, |v * z| or z * z, each rounded to float32 as the product-sums kernel rounds them
// (v = x / m_i for quantized_bits, x for quantized_linear), or the unit of such a term (its lowest
// set bit's value; +inf for a zero or non-finite term). A device's search sums the terms exactly
// per group and takes the units' minimum (scale_search.h, least_squares_sums_on_device). Only the
// device runs these modes; the vector kernels hand them to the scalar rows.
enum class LsTerm : std::uint8_t { kLevel, kXz, kAbsXz, kZz, kXzUnit, kZzUnit };

// ---- quantized_bits, alpha "auto"/"auto_po2" final pass: operands x, s (internal scale) -------
struct QkBitsAutoParams {
  float m = 0, m_i = 0;
  float inv_m = 0, inv_m_i = 0;
  bool pow2_scales = false;
  float half_levels = 0;       // 2^(bits - 1) - 1, the largest integer magnitude
  QkBlend blend;
  bool gradient = false;
  bool level_only = false;     // write the integer level z (the least-squares rounds' input)
  LsTerm ls_term = LsTerm::kLevel;  // with level_only: write that term of xs and z instead
  // With level_only: write instead the least-squares quotient of a group of one element,
  // qk_bits_ls_quotient(xs, z, eps) (the rounds of a rank-1 search, scale_search.h).
  bool ls_quotient = false;
  float eps = 0;
  // With ls_quotient: write po2_round's fast path of that quotient instead, the bits
  // po2_round_fast_bits(q + eps) as a float (a power of two, or +0 where the reference decides).
  bool ls_po2 = false;
  // The quantizing pass (not level_only) also writes the reported scale s * m of element j at
  // scale_out[j] (float32, under the flush rule), where not null: the rank-1 rounds' report.
  float* scale_out = nullptr;
};

// ---- quantized_relu: operand x ---------------------------------------------------------------
struct QkReluParams {
  float m = 0, m_i = 0;        // 2^(bits - (negative_slope != 0)), 2^integer
  float inv_m = 0, inv_m_i = 0;
  float clip_value = 0;        // m_i - m_f: the unquantized companion's ceiling (is_quantized_clip)
  float one_minus_inv_m = 0;   // 1 - 1 / m
  float negative_slope = 0;    // ns (float32)
  float m_i_ns = 0;            // m_i * ns
  float neg_factor = 0;        // 1 / (ns * m)
  bool leaky = false;          // ns != 0 (K.relu takes the leaky_relu kernel)
  bool negative_part = false;  // ns > 0
  bool sigmoid = false;        // use_sigmoid (hard sigmoid)
  bool quantized_clip = true;  // is_quantized_clip
  bool has_upper_bound = false;
  bool bound_output = false;   // relu_upper_bound truthy and not is_quantized_clip
  float upper_bound = 0;
  bool fast_inference = false; // enable_fast_inference: m_i * clamp(round(x * 2^(bits-integer)) * 2^-bits, 0, 1 - 2^-bits)
  float fast_p_factor = 0, fast_factor = 0, fast_ceiling = 0;
  QkBlend blend;
  QkStochastic stochastic;
  bool gradient = false;
  bool upstream = false;       // with gradient: times grad_output, operand 1 (qk_chain)
};

// ---- quantized_linear: operands x, quantization scale ----------------------------------------
struct QkLinearParams {
  float clip_min = 0, clip_max = 0;
  bool pow2_scales = false;
  float shift = 0;             // 0.5 for the sign function (bits == 1, keep_negative), else 0
  QkBlend blend;
  QkStochastic stochastic;
  bool gradient = false;
  bool upstream = false;       // with gradient: times grad_output, operand 2 (qk_chain)
  bool level_only = false;     // write the level round_through(c - shift) + shift
  LsTerm ls_term = LsTerm::kLevel;  // with level_only: write that term of x and the level instead
};

inline namespace POLYQUANT_TARGET_NAMESPACE {

// 1 / v when v = 2^k with 2^-k a normal float32 (k in [-126, 126]): then x / v == x * (1 / v) for
// every float32 x under any flush mode. 0 when v is anything else.
POLYQUANT_HD inline float exact_reciprocal(float v) {
  // From the bits: a positive power of two has a zero fraction field; biased exponent E in
  // [1, 253] keeps 2^-(E - 127) normal, and its biased exponent is 254 - E.
  const auto bits = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t biased = bits >> 23;  // the sign bit makes negatives fail the range test
  if ((bits & 0x7FFFFFu) != 0 || biased < 1 || biased > 253) return 0.0f;
  return std::bit_cast<float>((254u - biased) << 23);
}

// tf.minimum / tf.maximum (NaN propagating; equal operands give the second).
POLYQUANT_HD inline float tf_min(float a, float b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a < b ? a : b); }
POLYQUANT_HD inline float tf_max(float a, float b) { return std::isnan(a) ? a : std::isnan(b) ? b : (a > b ? a : b); }
// tf.clip_by_value(t, lo, hi) = maximum(minimum(t, hi), lo).
POLYQUANT_HD inline float tf_clip(float t, float lo, float hi) { return tf_max(tf_min(t, hi), lo); }
// XLA's clamp (quantized_relu's fast path is XLA-compiled): max(t, lo) then min(., hi), each
// returning the bound when t is NaN or equal to it (NaN gives lo).
POLYQUANT_HD inline float xla_clip(float t, float lo, float hi) {
  t = t > lo ? t : lo;
  return t < hi ? t : hi;
}
// The NaN a quantizer writes. Where an element's result is NaN, which NaN comes out of the op chain
// depends on operand order whenever two NaNs of different sign or payload meet (x and -x in
// round_through's p + (-p + round(p)), x and a NaN scale), and C++ compilers may commute a + b or
// a * b for floats, so neither the scalar code nor a vector kernel pins the bits down by itself.
// The rule, explicit in every kernel set: a NaN input x gives x itself, quieted (what TensorFlow's
// elementwise chain returns: tf.sign, tf.round, +, * all carry the first NaN operand, and QKeras
// starts every chain from x); any other NaN result (from +-inf, a NaN scale or alpha) is x86's
// default NaN 0xFFC00000, what TensorFlow gives for +-inf inputs.
inline constexpr std::uint32_t kQkDefaultNanBits = 0xFFC00000u;
POLYQUANT_HD inline float qk_nan_result(float out, float x) {
  if (!std::isnan(out)) return out;
  if (std::isnan(x)) return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) | 0x00400000u);
  return std::bit_cast<float>(kQkDefaultNanBits);
}

// tf.sign: -1, +1, +0 for both zeros (TensorFlow 2.15's CPU kernel gives +0 for -0, and a negative
// subnormal reaches it flushed to -0 in QKeras' auto path, after x / m_i) and NaN. x + 0 is +0
// for +-0 and x (quieted) for NaN.
POLYQUANT_HD inline float tf_sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x + 0.0f; }
// tf.round: half to even.
POLYQUANT_HD inline float tf_round(float x) { return std::nearbyint(x); }

// QKeras' stochastic_round(x, precision) with U drawn for element `index`.
POLYQUANT_HD inline float stochastic_round(float x, const QkStochastic& s, std::uint64_t index) {
  const float scaled = x * s.scale;
  const float low = std::floor(scaled);
  const float fraction = scaled - low;
  const float u = uniform_on_2pow23_lattice(s.seed, s.stream, index);
  const float r = fraction < u ? low : std::ceil(scaled);
  return r / s.scale;
}

// QKeras' _round_through: p + stop_gradient(-p + round(p)), literally (so +-inf gives NaN and a
// zero result is +0).
POLYQUANT_HD inline float round_through(float p, const QkStochastic& s, std::uint64_t index) {
  const float r = s.enabled ? stochastic_round(p, s, index) : tf_round(p);
  return p + ((-p) + r);
}

POLYQUANT_HD inline float blend(float x, float xq, const QkBlend& b) {
  if (b.use_ste) return x + b.q * ((-x) + xq);
  return b.one_minus_q * x + b.q * xq;
}

POLYQUANT_HD inline float qk_bits_element(float x, float alpha, const QkBitsParams& p, std::uint64_t index) {
  if (p.gradient) return p.blend.use_ste ? 1.0f : p.blend.one_minus_q;
  float xq;
  if (!p.binary) {
    const float scaled = (x * p.m) / p.m_i;
    const float c = tf_clip(round_through(scaled, p.stochastic, index), p.lo, p.hi);
    xq = (p.m_i * c) / p.m;
  } else {
    xq = tf_sign(x);
    xq = xq + (1.0f - std::fabs(xq));
    if (!p.keep_negative) xq = (xq + 1.0f) / 2.0f;
  }
  return qk_nan_result(blend(x, alpha * xq, p.blend), x);
}

// z = sign(xs) * where(v < L, v, L) with v = floor(|xs| / s + 0.5): the auto path's integer level.
POLYQUANT_HD inline float qk_bits_auto_level(float xs, float s, float half_levels) {
  const float v = std::floor(std::fabs(xs) / s + 0.5f);
  return tf_sign(xs) * (v < half_levels ? v : half_levels);
}

// The value of t's lowest set bit (a power of two from 2^-149, built from bits: no arithmetic to
// flush), +inf for a zero or non-finite t: every float64 sum of terms whose units are at least u
// and whose magnitudes sum below 2^53 u is exact.
POLYQUANT_HD inline float float32_unit(float t) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(t) & 0x7FFFFFFFu;
  if (b == 0 || b >= 0x7F800000u) return std::numeric_limits<float>::infinity();
  const std::uint32_t field = b >> 23;
  const std::uint32_t significand = (b & 0x7FFFFFu) | (field != 0 ? 0x800000u : 0u);
  // t = significand * 2^(max(field, 1) - 150); its lowest set bit weighs 2^(that + trailing zeros).
  const int e = static_cast<int>(field != 0 ? field : 1u) - 150 + std::countr_zero(significand);
  return e >= -126 ? std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23)
                   : std::bit_cast<float>(std::uint32_t{1} << (e + 149));  // a subnormal power of two
}
// The least-squares term `t` of v and level z (LsTerm), float32 products as the product-sums kernel
// forms them (its z is the level as written, NaN made qk_nan_result's NaN: a NaN either way).
POLYQUANT_HD inline float ls_term_of(float v, float z, LsTerm t) {
  const float zz = z * z;
  const float xz = v * z;
  switch (t) {
    case LsTerm::kZz: return zz;
    case LsTerm::kZzUnit: return float32_unit(zz);
    case LsTerm::kAbsXz: return std::fabs(xz);
    case LsTerm::kXzUnit: return float32_unit(xz);
    default: return xz;
  }
}

// The mantissa fields (y = 2^k * (1 + f / 2^23)) between which po2_round defers to the reference:
// sqrt(2) * (1 -+ 2^-9.5), about 1.4E-3 around the rounding boundary log2(y) = k + 1/2.
inline constexpr std::uint32_t kPo2SlowLo = 3462675;  // floor((sqrt(2) - 1) * 2^23) - 12000
inline constexpr std::uint32_t kPo2SlowHi = 3486676;  // ceil((sqrt(2) - 1) * 2^23) + 12000

// po2_round_reference (scale_search.h), bit for bit, without the logarithm for almost every
// y = s + eps.
// For a positive normal y = 2^k * m (1 <= m < 2), log2(y) = k + log2(m) lies in [k, k + 1), so
// the rounded exponent is k when m < sqrt(2) and k + 1 when m > sqrt(2). The reference computes
// log2(y) as float32 logf(y) / float32(ln 2): logf is within 1 ulp, the division and float32(ln 2)
// add 1/2 ulp and 3e-9 relative, so for |log2(y)| < 128 the computed quotient is within 1e-4 of
// log2(y), while a mantissa outside [kPo2SlowLo, kPo2SlowHi] puts log2(y) more than 1.4e-3 from
// k + 1/2: both round alike. Inside that window, and for y outside the normal exponents 2 .. 252
// (zero, subnormal, negative, huge, inf, NaN), the reference runs. Pinned by Po2Round tests (every
// exponent's window edges, strided mantissas; and once exhaustively over every float32 y).
// The bits of po2_round(s, eps) from y = s + eps where the fast path settles it, else 0 (no
// power of two has those bits). Branch-free, so a loop over it vectorizes.
POLYQUANT_HD inline std::uint32_t po2_round_fast_bits(float y) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(y);
  const std::uint32_t field = b >> 23;  // sign and exponent: 2 .. 252 for a positive normal y
  const std::uint32_t mantissa = b & 0x7fffffu;
  const bool settled = field >= 2 && field <= 252 && (mantissa < kPo2SlowLo || mantissa > kPo2SlowHi);
  const std::uint32_t k = field + (mantissa > kPo2SlowHi ? 1u : 0u);  // biased exponent of the result
  return settled ? k << 23 : 0u;
}

// The least-squares quotient mean(v * z) / (mean(z * z) + eps) of a group holding one element:
// its sums are 0.0 + double(v * z) and 0.0 + double(z * z) (products rounded to float32, as the
// product-sums kernel adds them), its count 1. A NaN quotient is the quiet +NaN (only NaN-ness
// reaches the scale, which is made the quiet +NaN anyway), so every kernel set writes the same bits.
// (float(0.0 + double(p)) is p + 0.0f: both exact, both turning -0 into +0.)
POLYQUANT_HD inline float qk_bits_ls_quotient(float v, float z, float eps) {
  const double xz = 0.0 + static_cast<double>(v * z);
  const double zz = 0.0 + static_cast<double>(z * z);
  const float q = (static_cast<float>(xz) / 1.0f) / (static_cast<float>(zz) / 1.0f + eps);
  return std::isnan(q) ? std::numeric_limits<float>::quiet_NaN() : q;
}

POLYQUANT_HD inline float qk_bits_auto_element(float x, float s, const QkBitsAutoParams& p) {
  if (p.gradient) return p.blend.use_ste ? 1.0f : p.blend.one_minus_q;
  const float xs = x / p.m_i;
  const float z = qk_bits_auto_level(xs, s, p.half_levels);
  if (p.level_only && p.ls_quotient) {
    const float q = qk_bits_ls_quotient(xs, z, p.eps);
    return p.ls_po2 ? std::bit_cast<float>(po2_round_fast_bits(q + p.eps)) : q;
  }
  if (p.level_only && p.ls_term != LsTerm::kLevel) return ls_term_of(xs, z, p.ls_term);
  if (p.level_only) return qk_nan_result(z, x);
  const float scale = s * p.m;
  const float full = p.m_i * xs;
  const float xq = scale * ((p.m_i * z) / p.m);
  return qk_nan_result(blend(full, xq, p.blend), x);
}

// K.relu(x, alpha=ns): tf.nn.relu (maximum with +0, NaN propagating) or tf.nn.leaky_relu
// (x > 0 ? x : x * ns).
POLYQUANT_HD inline float qk_relu_companion(float x, const QkReluParams& p) {
  if (p.leaky) return x > 0.0f ? x : x * p.negative_slope;
  return tf_max(x, 0.0f);
}

POLYQUANT_HD inline float qk_relu_unquantized(float x, const QkReluParams& p) {
  if (p.quantized_clip) return x <= p.clip_value ? qk_relu_companion(x, p) : p.clip_value;
  if (p.has_upper_bound) return x <= p.upper_bound ? qk_relu_companion(x, p) : p.upper_bound;
  return qk_relu_companion(x, p);
}

POLYQUANT_HD inline float qk_relu_element(float x, const QkReluParams& p, std::uint64_t index) {
  if (p.fast_inference) {
    return p.m_i * xla_clip(tf_round(x * p.fast_p_factor) * p.fast_factor, 0.0f, p.fast_ceiling);
  }
  if (p.gradient) {
    // d x_u / d x: relu' = [x > 0], leaky' = x > 0 ? 1 : ns, 0 where the ceiling was taken.
    float d;
    const bool below = p.quantized_clip ? x <= p.clip_value : p.has_upper_bound ? x <= p.upper_bound : true;
    if (!below) d = 0.0f;
    else if (p.leaky) d = x > 0.0f ? 1.0f : p.negative_slope;
    else d = x > 0.0f ? 1.0f : 0.0f;
    return p.blend.use_ste ? d : p.blend.one_minus_q * d;
  }
  const float xu = qk_relu_unquantized(x, p);
  float xq;
  if (p.sigmoid) {
    // hard_sigmoid(y) = clip(0.5 * y + 0.5, 0, 1)
    const float scaled = tf_clip(0.5f * (x / p.m_i) + 0.5f, 0.0f, 1.0f) * p.m;
    xq = p.m_i * tf_clip(2.0f * (round_through(scaled, p.stochastic, index) / p.m) - 1.0f, 0.0f, p.one_minus_inv_m);
    if (p.negative_part) {
      const float r = round_through(scaled * p.negative_slope, p.stochastic, index);
      xq = xq + p.m_i_ns * tf_clip(2.0f * (r * p.neg_factor) - 1.0f, -1.0f, 0.0f);
    }
  } else {
    const float scaled = (x * p.m) / p.m_i;
    xq = p.m_i * tf_clip(round_through(scaled, p.stochastic, index) / p.m, 0.0f, p.one_minus_inv_m);
    if (p.negative_part) {
      const float r = round_through(scaled * p.negative_slope, p.stochastic, index);
      xq = xq + p.m_i_ns * tf_clip(r * p.neg_factor, -1.0f, 0.0f);
    }
  }
  if (p.bound_output) xq = xq <= p.upper_bound ? xq : p.upper_bound;
  return qk_nan_result(blend(xu, xq, p.blend), x);
}

// _scale_clip_and_round: round_through(clip(x / s, lo, hi) - shift) + shift.
POLYQUANT_HD inline float qk_linear_level(float x, float s, const QkLinearParams& p, std::uint64_t index) {
  const float c = tf_clip(x / s, p.clip_min, p.clip_max);
  return round_through(c - p.shift, p.stochastic, index) + p.shift;
}

POLYQUANT_HD inline float qk_linear_element(float x, float s, const QkLinearParams& p, std::uint64_t index) {
  if (p.gradient) {
    // (1 - q) + q * [clip_min <= x / s <= clip_max] (tf.clip_by_value passes the gradient on
    // its bounds; NaN compares false).
    const float xs = x / s;
    const float inside = (xs >= p.clip_min && xs <= p.clip_max) ? 1.0f : 0.0f;
    return p.blend.one_minus_q + p.blend.q * inside;
  }
  if (p.level_only && p.ls_term != LsTerm::kLevel) return ls_term_of(x, qk_linear_level(x, s, p, index), p.ls_term);
  if (p.level_only) return qk_nan_result(qk_linear_level(x, s, p, index), x);
  const float xq = qk_linear_level(x, s, p, index) * s;
  return qk_nan_result(x + p.blend.q * (xq - x), x);
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
// ---- Per-element rows (host and device) and the scalar reference rows (host) --------------------
// <op>_row_element<W>(params, args, j) computes output element j of a row (kernels/row.h);
// <op>_reference_row<W>, a plain loop over it inside TensorFlow's flush-to-zero environment
// (ScopedFlushDenormals), is what the registry's scalar kernels ref::<op>_<work> run
// (kernels/reference_kernels.cc stamps them from the op list). The CUDA backend runs the same
// elements; it must reproduce the flush itself (the device has no MXCSR: its float32 instructions
// flush when compiled with -ftz=true). These rows are the portable fallback, the stochastic-rounding
// and gradient paths of every kernel set, and the oracle every vector kernel is tested against.
inline namespace POLYQUANT_TARGET_NAMESPACE {
// A gradient row given the upstream gradient (params `upstream`: the op's last operand holds
// grad_output): the chain rule's product grad_output * (d out / d x), which is what the backward of
// QKeras' graph computes (TensorFlow's Mul gradient: the incoming gradient times the factor) and
// what torch autograd's backward returns, as x86 multiplies in float32 (its NaN on the device too),
// under the row's flush. Without it, the derivative itself.
POLYQUANT_HD inline float qk_chain(bool upstream, const RowArgs& a, int operand, std::int64_t j, float derivative) {
  return upstream ? x86_mul(a.at<float>(operand, j), derivative) : derivative;
}

template <class W>
POLYQUANT_HD inline void qk_bits_row_element(const QkBitsParams& p, const RowArgs& a, std::int64_t j) {
  static_assert(std::is_same_v<W, float>, "QKeras computes in float32");
  static_cast<float*>(a.out)[j] =
      qk_chain(p.upstream, a, 2, j, qk_bits_element(a.at<float>(0, j), a.at<float>(1, j), p, static_cast<std::uint64_t>(a.index + j)));
}

template <class W>
POLYQUANT_HD inline void qk_bits_auto_row_element(const QkBitsAutoParams& p, const RowArgs& a, std::int64_t j) {
  static_assert(std::is_same_v<W, float>, "QKeras computes in float32");
  static_cast<float*>(a.out)[j] = qk_bits_auto_element(a.at<float>(0, j), a.at<float>(1, j), p);
  if (p.scale_out != nullptr && !p.level_only && !p.gradient) p.scale_out[j] = a.at<float>(1, j) * p.m;
}

template <class W>
POLYQUANT_HD inline void qk_relu_row_element(const QkReluParams& p, const RowArgs& a, std::int64_t j) {
  static_assert(std::is_same_v<W, float>, "QKeras computes in float32");
  static_cast<float*>(a.out)[j] = qk_chain(p.upstream, a, 1, j, qk_relu_element(a.at<float>(0, j), p, static_cast<std::uint64_t>(a.index + j)));
}

template <class W>
POLYQUANT_HD inline void qk_linear_row_element(const QkLinearParams& p, const RowArgs& a, std::int64_t j) {
  static_assert(std::is_same_v<W, float>, "QKeras computes in float32");
  static_cast<float*>(a.out)[j] =
      qk_chain(p.upstream, a, 2, j, qk_linear_element(a.at<float>(0, j), a.at<float>(1, j), p, static_cast<std::uint64_t>(a.index + j)));
}

template <class W>
inline void qk_bits_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkBitsParams*>(params);
  const ScopedFlushDenormals flush;
  for (std::int64_t j = 0; j < a.n; ++j) qk_bits_row_element<W>(p, a, j);
}

template <class W>
inline void qk_bits_auto_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkBitsAutoParams*>(params);
  const ScopedFlushDenormals flush;
  for (std::int64_t j = 0; j < a.n; ++j) qk_bits_auto_row_element<W>(p, a, j);
}

template <class W>
inline void qk_relu_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkReluParams*>(params);
  const ScopedFlushDenormals flush;
  for (std::int64_t j = 0; j < a.n; ++j) qk_relu_row_element<W>(p, a, j);
}

template <class W>
inline void qk_linear_reference_row(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkLinearParams*>(params);
  const ScopedFlushDenormals flush;
  for (std::int64_t j = 0; j < a.n; ++j) qk_linear_row_element<W>(p, a, j);
}

}  // namespace POLYQUANT_TARGET_NAMESPACE

// kSecondStream: grad_output, with `upstream` (qk_chain).
template <> struct RowElementTraits<KernelOp::kQkBits> {
  using Params = QkBitsParams;
  static constexpr bool kFlushDenormals = true;
  static constexpr int kSecondStream = 2;
};
template <> struct RowElementTraits<KernelOp::kQkBitsAuto> { using Params = QkBitsAutoParams; static constexpr bool kFlushDenormals = true; };
template <> struct RowElementTraits<KernelOp::kQkRelu> {
  using Params = QkReluParams;
  static constexpr bool kFlushDenormals = true;
  static constexpr int kSecondStream = 1;
};
template <> struct RowElementTraits<KernelOp::kQkLinear> {
  using Params = QkLinearParams;
  static constexpr bool kFlushDenormals = true;
  static constexpr int kSecondStream = 2;
};

}  // namespace polyquant::detail
