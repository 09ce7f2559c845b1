// Vector bodies of the linear quantize / dequantize kernels (families/onnx/kernels.h), written once against
// the `Vec` vocabulary and compiled per kernel set. They cover the hot cases — float32 x and scale;
// Q to 8/16-bit and sub-byte integers (ONNX Runtime's saturation or Quark's int64 rule) and to every
// minifloat; DQ from 8/16-bit and sub-byte integers and minifloats read in their storage, and from
// the float16 / bfloat16 x the engine widens to float32 — and hand every other row to the scalar
// reference, which they equal bit for bit.
#include "kernels/simd/row_loop-inl.h"
#include "kernels/simd/sixteen_bit-inl.h"
#include "kernels/convert/narrow_simd-inl.h"

namespace qdq_detail {

// Output policies of the Q loops (how for_each_vector stores a vector of results).
// 8/16-bit integers: the integer-valued float32 lanes narrowed; for outputs far larger than the
// caches (RowArgs::stream), non-temporal stores (for_each_vector aligns them to the stored width),
// which spare the read of each output line.
template <class OutT>
struct NarrowOut {
  using T = OutT;
  using Result = Vec::F;
  static constexpr bool kCanStream = true;
  static void store(T* p, const Result& r) {
    if constexpr (std::is_same_v<T, std::int8_t>) Vec::store_as_i8(p, r);
    else if constexpr (std::is_same_v<T, std::uint8_t>) Vec::store_as_u8(p, r);
    else if constexpr (std::is_same_v<T, std::int16_t>) Vec::store_as_i16(p, r);
    else Vec::store_as_u16(p, r);
  }
  static void stream(T* p, const Result& r) {
    if constexpr (std::is_same_v<T, std::int8_t>) Vec::stream_as_i8(p, r);
    else if constexpr (std::is_same_v<T, std::uint8_t>) Vec::stream_as_u8(p, r);
    else if constexpr (std::is_same_v<T, std::int16_t>) Vec::stream_as_i16(p, r);
    else Vec::stream_as_u16(p, r);
  }
};

// Signed sub-byte integer outputs (int4, int2; one element per byte): the value's two's-complement
// low bits, i.e. v + 2^bits for a negative v (ml_dtypes: int4 -1 is 0x0F).
template <int kModulus>
struct SignedSubByteOut {
  using T = std::uint8_t;
  using Result = Vec::F;
  static constexpr bool kCanStream = true;
  POLYQUANT_ALWAYS_INLINE static Vec::F wrapped(const Result& r) {
    return Vec::select(Vec::lt(r, Vec::zero()), Vec::add(r, Vec::splat(static_cast<float>(kModulus))), r);
  }
  static void store(T* p, const Result& r) { Vec::store_as_u8(p, wrapped(r)); }
  static void stream(T* p, const Result& r) { Vec::stream_as_u8(p, wrapped(r)); }
};

// Minifloat outputs (float8 / float6 / float4 / e8m0, one code per byte): the value encoded as
// minifloat_from_float (narrow_simd-inl.h).
template <DType kT>
struct MinifloatOut {
  using T = std::uint8_t;
  using Result = Vec::F;
  static constexpr bool kCanStream = true;
  POLYQUANT_ALWAYS_INLINE static void store(T* p, const Result& r) { Vec::store_u8(p, narrow_simd::from_float_bits<kT>(Vec::bits(r))); }
  POLYQUANT_ALWAYS_INLINE static void stream(T* p, const Result& r) { Vec::stream_u8(p, narrow_simd::from_float_bits<kT>(Vec::bits(r))); }
};

// The formulas after the quotient q = x / s (float32, exact IEEE division), with zp the zero point.
//
// Integer targets: y = clamp(rint(q), qmin - zp, qmax - zp) + zp, all in float32 and exact (the
// bounds and the sum are integers below 2^17). max(NaN, lo) is lo, so NaN gives qmin; +-inf
// saturate. Quark's int64 policy (kQuarkCast) differs only where rint(q) is NaN or |rint(q)| >= 2^63:
// the int64 conversion gives INT64_MIN there and INT64_MIN + zp clamps to qmin, or wraps to a huge
// positive value (qmax) when zp < 0.
template <bool kQuarkCast>
struct IntegerFormula {
  Vec::F qmin, qmax;
  explicit IntegerFormula(const QuantizeLinearParams& p)
      : qmin(Vec::splat(static_cast<float>(p.qmin))), qmax(Vec::splat(static_cast<float>(p.qmax))) {}
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F q, Vec::F zp) const {
    const Vec::F r = Vec::rint(q);
    const Vec::F y = Vec::add(Vec::min(Vec::max(r, Vec::sub(qmin, zp)), Vec::sub(qmax, zp)), zp);
    if constexpr (kQuarkCast) {
      const auto out_of_int64 = Vec::mask_or(Vec::isnan(r), Vec::ge(Vec::abs(r), Vec::splat(9223372036854775808.0f)));
      return Vec::select(out_of_int64, Vec::select(Vec::lt(zp, Vec::zero()), qmax, qmin), y);
    }
    return y;
  }
};

// Minifloat targets: v = q (+ zp when the zero point is added), clipped to [-max, max] when
// saturating (NaN kept: a NaN lane bypasses the clip, whose max would turn it into -max).
struct MinifloatFormula {
  Vec::F max_value;
  bool add_zero_point, saturate;
  explicit MinifloatFormula(const QuantizeLinearParams& p)
      : max_value(Vec::splat(p.format.max_value)), add_zero_point(p.add_zero_point && p.has_zero_point), saturate(p.saturate) {}
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F q, Vec::F zp) const {
    Vec::F v = add_zero_point ? Vec::add_first_nan(q, zp) : q;
    if (saturate) v = Vec::select(Vec::isnan(v), v, Vec::min(Vec::max(v, Vec::neg(max_value)), max_value));
    return v;
  }
};

// quotient_f32's vector form: x / s in float32, rounded to the division's dtype (a float16 or
// bfloat16 x and scale: float32's 24 bits hold more than twice float16's 11 and bfloat16's 8, plus
// two, so the quotient rounded twice is the quotient rounded once, as numpy's 16-bit division
// gives it), the operands rounded to it first where `precision` asks.
struct QuotientV {
  QuotientRounding rounding;
  bool round_operands;
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F x, Vec::F s) const {
    if (round_operands) {
      x = sixteen_bit::round_to_quotient_dtype_v(x, rounding);
      s = sixteen_bit::round_to_quotient_dtype_v(s, rounding);
    }
    return sixteen_bit::round_to_quotient_dtype_v(Vec::div(x, s), rounding);
  }
};

// 16-bit float targets (Quark's float16 and bfloat16 outputs): v = q (+ zp where there is one; a
// NaN q and a NaN zp give q's NaN, x86's first operand, as the spec adds them).
struct FloatTargetFormula {
  bool add_zero_point;
  explicit FloatTargetFormula(const QuantizeLinearParams& p) : add_zero_point(p.has_zero_point) {}
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F q, Vec::F zp) const { return add_zero_point ? Vec::add_first_nan(q, zp) : q; }
};

// float16 outputs: float_to_half_bits (the hardware's round to nearest even; a NaN keeps its sign
// and its payload's top bits, quieted).
struct HalfOut {
  using T = std::uint16_t;
  using Result = Vec::F;
  static constexpr bool kCanStream = true;
  POLYQUANT_ALWAYS_INLINE static void store(T* p, const Result& r) { Vec::store_half(p, r); }
  POLYQUANT_ALWAYS_INLINE static void stream(T* p, const Result& r) { Vec::stream_half(p, r); }
};

// bfloat16 outputs: bfloat16_round_bits, a NaN written as `nan_code` (QuantizeLinearParams::bf16_nan;
// 0: ml_dtypes' 0x7FC0 with the NaN's sign).
struct BFloat16Out {
  using T = std::uint16_t;
  using Result = Vec::F;
  static constexpr bool kCanStream = true;
  std::uint16_t nan_code = 0;
  POLYQUANT_ALWAYS_INLINE Vec::I code(const Result& r) const {
    const Vec::I bits = sixteen_bit::float_to_bfloat16_bits(Vec::bits(r));
    return nan_code == 0 ? bits : Vec::select_i(Vec::isnan(r), Vec::splat_i(nan_code), bits);
  }
  POLYQUANT_ALWAYS_INLINE void store(T* p, const Result& r) const { Vec::store_u16(p, code(r)); }
  POLYQUANT_ALWAYS_INLINE void stream(T* p, const Result& r) const { Vec::stream_u16(p, code(r)); }
};

// Per-tensor, per-channel and broadcast rows (for_each_vector); non-temporal stores for outputs
// far larger than the caches where the output policy allows them (RowArgs::stream).
template <class Out, class Formula>
void quantize_rows(const QuantizeLinearParams& p, const RowArgs& a, const Formula& formula, const Out& out) {
  const QuotientV quotient{p.quotient, p.round_operands};
  if (p.has_zero_point) {
    for_each_vector<3, Out>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE { return formula(quotient(v[0], v[1]), v[2]); }, out);
  } else {
    for_each_vector<2, Out>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE { return formula(quotient(v[0], v[1]), Vec::zero()); }, out);
  }
}

// Whether a call with per-row operands is the blocked layout the vector loops run: x running on,
// the scale and zero point one value per row or one for all. Anything else (x per row, broadcast or
// repeating a row, a parameter running on per element or repeating a row) goes to the reference.
inline bool blocked_parameters(const RowArgs& a, bool has_zero_point) {
  return a.repeated_row_mask == 0 && !a.is_per_row(0) && !a.is_broadcast(0) && (a.is_per_row(1) || a.is_broadcast(1)) &&
         (!has_zero_point || a.is_per_row(2) || a.is_broadcast(2));
}

template <class Out, class Formula>
void quantize_with(const QuantizeLinearParams& p, const RowArgs& a, const Formula& formula, const Out& out = Out{}) {
  if (a.per_row_mask != 0) {
    // Blocked parameters: for_each_vector walks the rows, each with its own scale and zero point.
    if (!blocked_parameters(a, p.has_zero_point)) return ref::quantize_linear_f32(&p, a);
  }
  quantize_rows<Out>(p, a, formula, out);
}

template <class Out>
void quantize_integer(const QuantizeLinearParams& p, const RowArgs& a) {
  if (p.non_finite == NonFinitePolicy::kInt64Cast) quantize_with<Out>(p, a, IntegerFormula<true>(p));
  else quantize_with<Out>(p, a, IntegerFormula<false>(p));
}

// Whether `format` is the standard one of its dtype (the vector encoders are compiled per dtype).
inline bool standard_format(const QuantizeLinearParams& p) {
  const MinifloatFormat f = minifloat_format(p.out_dtype);
  return f.exp_bits == p.format.exp_bits && f.man_bits == p.format.man_bits && f.bias == p.format.bias &&
         f.kind == p.format.kind && f.max_magnitude == p.format.max_magnitude && f.max_value == p.format.max_value;
}

// How the DQ loops read x and the zero point: as vectors of float32 values (load) and one by one
// (value), both exact. Integers of 8/16 bits (and float32, which the engine widened x to):
template <class StorageT>
struct IntegerReader {
  using T = StorageT;
  POLYQUANT_ALWAYS_INLINE static Vec::F load(const T* p) { return Vec::load_from(p); }
  static float value(T v) { return static_cast<float>(v); }
};
// Minifloat codes, one per byte, decoded (narrow_simd-inl.h; minifloat_to_float one by one).
template <DType kT>
struct MinifloatReader {
  using T = std::uint8_t;
  POLYQUANT_ALWAYS_INLINE static Vec::F load(const T* p) { return Vec::from_bits(narrow_simd::to_float_bits<kT>(Vec::load_u8(p))); }
  static float value(T v) { return minifloat_to_float(minifloat_format(kT), v); }
};
// Sub-byte integers, one per byte: the low kBits bits, two's complement when signed.
template <int kBits, bool kSigned>
struct SubByteReader {
  using T = std::uint8_t;
  POLYQUANT_ALWAYS_INLINE static Vec::F load(const T* p) { return narrow_simd::sub_byte_to_float<kBits, kSigned>(Vec::load_u8(p)); }
  static float value(T v) { return static_cast<float>(read_dequantize_operand(&v, 0, kSigned ? (kBits == 4 ? DType::kInt4 : DType::kInt2)
                                                                                           : (kBits == 4 ? DType::kUInt4 : DType::kUInt2))); }
};

// DQ with blocked parameters: rows of row_len elements, the scale and zero point one value per row
// (RowArgs::per_row_mask) or one for all; x and the output run on. A row's tail goes through the
// scalar formula (the spec).
template <class Reader>
void dequantize_blocks(const DequantizeLinearParams& p, const RowArgs& a) {
  using T = typename Reader::T;
  constexpr int L = Vec::kLanes;
  const T* x = a.input<T>(0);
  const float* s = a.input<float>(1);
  const T* z = p.has_zero_point ? a.input<T>(2) : nullptr;
  float* out = static_cast<float*>(a.out);
  const std::int64_t len = a.row_len, rows = a.n / a.row_len;
  const bool s_rows = a.is_per_row(1), z_rows = z && a.is_per_row(2);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float sr = s[s_rows ? r : 0], zr = z ? Reader::value(z[z_rows ? r : 0]) : 0.0f;
    const Vec::F sv = Vec::splat(sr), zv = Vec::splat(zr);
    const std::int64_t base = r * len;
    std::int64_t j = 0;
    for (; j + L <= len; j += L) {
      const Vec::F y = Vec::mul(Vec::sub(Reader::load(x + base + j), zv), sv);
      float* dst = out + base + j;
      if (a.stream && reinterpret_cast<std::uintptr_t>(dst) % (L * sizeof(float)) == 0) Vec::stream(dst, y);
      else Vec::storeu(dst, y);
    }
    for (; j < len; ++j) out[base + j] = (Reader::value(x[base + j]) - zr) * sr;
  }
  if (a.stream) Vec::fence();
}

// DQ: y = (float(x) - float(zp)) * s in float32 (the difference is exact for 8/16-bit and sub-byte
// integers; for minifloats, whose zero point is zero or absent, it is x itself).
template <class Reader>
void dequantize_rows(const DequantizeLinearParams& p, const RowArgs& a) {
  using T = typename Reader::T;
  if (a.per_row_mask != 0) {
    if (!blocked_parameters(a, p.has_zero_point)) return ref::dequantize_linear_f32(&p, a);
    return dequantize_blocks<Reader>(p, a);
  }
  if (a.is_repeated_row(0)) return ref::dequantize_linear_f32(&p, a);  // x repeating one row: rare
  constexpr int L = Vec::kLanes;
  const T* x = a.input<T>(0);
  const float* s = a.input<float>(1);
  const T* zp = p.has_zero_point ? a.input<T>(2) : nullptr;
  const bool s_one = a.is_broadcast(1), zp_one = !zp || a.is_broadcast(2);
  // Repeated-row parameters (a per-axis parameter on the last axis) are read at the element's
  // offset within the row, `in_row`, carried along the loop.
  const bool s_repeats = a.is_repeated_row(1), zp_repeats = zp && a.is_repeated_row(2);
  const std::int64_t len = a.repeated_row_mask != 0 ? a.row_len : 1, step = L % len;
  const Vec::F s_splat = Vec::splat(s[0]);
  const Vec::F zp_splat = Vec::splat(zp ? Reader::value(zp[0]) : 0.0f);
  float* out = static_cast<float*>(a.out);
  const std::int64_t n = a.n;
  auto scalar = [&](std::int64_t j) {
    const float zv = zp ? Reader::value(zp[zp_one ? 0 : (zp_repeats ? j % len : j)]) : 0.0f;
    out[j] = (Reader::value(x[j]) - zv) * s[s_one ? 0 : (s_repeats ? j % len : j)];
  };
  std::int64_t j = 0;
  const bool stream = a.stream && (reinterpret_cast<std::uintptr_t>(out) % sizeof(float)) == 0;
  if (stream) {
    while (j < n && (reinterpret_cast<std::uintptr_t>(out + j) % (L * sizeof(float))) != 0) scalar(j++);
  }
  std::int64_t in_row = j % len;
  for (; j + L <= n; j += L) {
    const Vec::F zv = zp_one ? zp_splat : Reader::load(zp + (zp_repeats ? in_row : j));
    const Vec::F sv = s_one ? s_splat : Vec::loadu(s + (s_repeats ? in_row : j));
    const Vec::F y = Vec::mul(Vec::sub(Reader::load(x + j), zv), sv);
    if (stream) Vec::stream(out + j, y);
    else Vec::storeu(out + j, y);
    in_row += step;
    if (in_row >= len) in_row -= len;
  }
  for (; j < n; ++j) scalar(j);
  if (stream) Vec::fence();
}

}  // namespace qdq_detail

void quantize_linear_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QuantizeLinearParams*>(params);
  // The vector loop divides in float32 (the quotient rounded to a 16-bit division's dtype); float64
  // zero points are the spec's.
  if (!p.zero_point_f64) {
    if (p.target == QuantTarget::kInteger) {
      switch (p.out_dtype) {
        case DType::kInt8: return qdq_detail::quantize_integer<qdq_detail::NarrowOut<std::int8_t>>(p, a);
        case DType::kUInt8:
        case DType::kUInt4:
        case DType::kUInt2: return qdq_detail::quantize_integer<qdq_detail::NarrowOut<std::uint8_t>>(p, a);
        case DType::kInt4: return qdq_detail::quantize_integer<qdq_detail::SignedSubByteOut<16>>(p, a);
        case DType::kInt2: return qdq_detail::quantize_integer<qdq_detail::SignedSubByteOut<4>>(p, a);
        case DType::kInt16: return qdq_detail::quantize_integer<qdq_detail::NarrowOut<std::int16_t>>(p, a);
        case DType::kUInt16: return qdq_detail::quantize_integer<qdq_detail::NarrowOut<std::uint16_t>>(p, a);
        default: break;
      }
    } else if (p.target == QuantTarget::kFloat16) {
      return qdq_detail::quantize_with<qdq_detail::HalfOut>(p, a, qdq_detail::FloatTargetFormula(p));
    } else if (p.target == QuantTarget::kBFloat16) {
      return qdq_detail::quantize_with(p, a, qdq_detail::FloatTargetFormula(p), qdq_detail::BFloat16Out{p.bf16_nan});
    } else if (p.target == QuantTarget::kFloat16Clamp) {
      // Quark's float16 output: x itself, clamped to +-65504 (a NaN passes), as float16
      const Vec::F limit = Vec::splat(65504.0f);
      for_each_vector<1, qdq_detail::HalfOut>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        return Vec::select(Vec::isnan(v[0]), v[0], Vec::min(Vec::max(v[0], Vec::neg(limit)), limit));
      });
      return;
    } else if (p.target == QuantTarget::kMinifloat && qdq_detail::standard_format(p)) {
      const bool done = narrow_simd::with_minifloat(p.out_dtype, [&](auto t) {
        qdq_detail::quantize_with<qdq_detail::MinifloatOut<decltype(t)::value>>(p, a, qdq_detail::MinifloatFormula(p));
      });
      if (done) return;
    }
  }
  ref::quantize_linear_f32(params, a);
}

void dequantize_linear_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const DequantizeLinearParams*>(params);
  const bool vector = p.difference == DequantDifference::kFloat32 && !p.ignore_scale && !p.canonical_nan &&
                      !a.is_broadcast(0);
  if (vector) {
    using qdq_detail::IntegerReader, qdq_detail::SubByteReader;
    switch (p.x_dtype) {
      case DType::kInt8: return qdq_detail::dequantize_rows<IntegerReader<std::int8_t>>(p, a);
      case DType::kUInt8: return qdq_detail::dequantize_rows<IntegerReader<std::uint8_t>>(p, a);
      case DType::kInt16: return qdq_detail::dequantize_rows<IntegerReader<std::int16_t>>(p, a);
      case DType::kUInt16: return qdq_detail::dequantize_rows<IntegerReader<std::uint16_t>>(p, a);
      // x and the zero point widened to float32 by the engine (exactly): float16, bfloat16.
      case DType::kFloat32: return qdq_detail::dequantize_rows<IntegerReader<float>>(p, a);
      case DType::kInt4: return qdq_detail::dequantize_rows<SubByteReader<4, true>>(p, a);
      case DType::kUInt4: return qdq_detail::dequantize_rows<SubByteReader<4, false>>(p, a);
      case DType::kInt2: return qdq_detail::dequantize_rows<SubByteReader<2, true>>(p, a);
      case DType::kUInt2: return qdq_detail::dequantize_rows<SubByteReader<2, false>>(p, a);
      default:
        if (narrow_simd::with_minifloat(p.x_dtype, [&](auto t) {
              qdq_detail::dequantize_rows<qdq_detail::MinifloatReader<decltype(t)::value>>(p, a);
            })) {
          return;
        }
        break;
    }
  }
  ref::dequantize_linear_f32(params, a);
}
