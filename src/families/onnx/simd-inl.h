// Vector bodies of the linear quantize / dequantize kernels (families/onnx/kernels.h), written once against
// the `Vec` vocabulary and compiled per kernel set. They cover the hot cases — float32 x and scale,
// 8/16-bit integer outputs (Q, ONNX Runtime's saturation or Quark's int64 rule) or inputs (DQ) —
// and hand every other row to the scalar reference, which they equal bit for bit.
#include "kernels/simd/row_loop-inl.h"

namespace qdq_detail {

// Q: y = clamp(rint(x / s), qmin - zp, qmax - zp) + zp, all in float32 and exact (the bounds and the
// sum are integers below 2^17). max(NaN, lo) is lo, so NaN gives qmin; +-inf saturate.
// Narrowing output policy; for outputs far larger than the caches (RowArgs::stream), non-temporal
// stores (for_each_vector aligns them to the stored width), which spare the read of each output line.
template <class T>
struct NarrowOut {
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
template <class OutT>
struct NarrowPolicy : NarrowOut<OutT> {
  using T = OutT;
};

//
// Quark's int64 policy (kQuarkCast) differs only where rint(q) is NaN or |rint(q)| >= 2^63: the
// int64 conversion gives INT64_MIN there and INT64_MIN + zp clamps to qmin, or wraps to a huge
// positive value (qmax) when zp < 0.
template <class T, bool kQuarkCast>
void quantize_rows(const QuantizeLinearParams& p, const RowArgs& a) {
  const Vec::F qmin = Vec::splat(static_cast<float>(p.qmin)), qmax = Vec::splat(static_cast<float>(p.qmax));
  const Vec::F two63 = Vec::splat(9223372036854775808.0f), zero = Vec::zero();
  auto quark_cast = [&](Vec::F r, Vec::F y, Vec::F zp) POLYQUANT_ALWAYS_INLINE {
    const auto out_of_int64 = Vec::mask_or(Vec::isnan(r), Vec::ge(Vec::abs(r), two63));
    return Vec::select(out_of_int64, Vec::select(Vec::lt(zp, zero), qmax, qmin), y);
  };
  if (p.has_zero_point) {
    for_each_vector<3, NarrowPolicy<T>>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F r = Vec::rint(Vec::div(v[0], v[1]));
      const Vec::F c = Vec::min(Vec::max(r, Vec::sub(qmin, v[2])), Vec::sub(qmax, v[2]));
      const Vec::F y = Vec::add(c, v[2]);
      if constexpr (kQuarkCast) return quark_cast(r, y, v[2]);
      else return y;
    });
  } else {
    for_each_vector<2, NarrowPolicy<T>>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F r = Vec::rint(Vec::div(v[0], v[1]));
      const Vec::F y = Vec::min(Vec::max(r, qmin), qmax);
      if constexpr (kQuarkCast) return quark_cast(r, y, zero);
      else return y;
    });
  }
}

// Blocked parameters: rows of row_len elements, the scale and zero point one value per row
// (RowArgs::per_row_mask) or one for all; x and the output run on. Each row is the per-tensor
// loop with that row's parameters in registers; a row's tail goes through the scalar element
// function (the spec), so every element gets exactly the reference's arithmetic.
template <class T, bool kQuarkCast>
void quantize_blocks(const QuantizeLinearParams& p, const RowArgs& a) {
  constexpr int L = Vec::kLanes;
  const float* x = a.input<float>(0);
  const float* s = a.input<float>(1);
  const float* z = p.has_zero_point ? a.input<float>(2) : nullptr;
  T* out = static_cast<T*>(a.out);
  const std::int64_t len = a.row_len, rows = a.n / a.row_len;
  const bool s_rows = a.is_per_row(1), z_rows = z && a.is_per_row(2);
  const Vec::F qmin = Vec::splat(static_cast<float>(p.qmin)), qmax = Vec::splat(static_cast<float>(p.qmax));
  const Vec::F two63 = Vec::splat(9223372036854775808.0f), zero = Vec::zero();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float sr = s[s_rows ? r : 0], zr = z ? z[z_rows ? r : 0] : 0.0f;
    const Vec::F sv = Vec::splat(sr), zv = Vec::splat(zr);
    const Vec::F lo = Vec::sub(qmin, zv), hi = Vec::sub(qmax, zv);
    const Vec::F sentinel = Vec::select(Vec::lt(zv, zero), qmax, qmin);
    const std::int64_t base = r * len;
    std::int64_t j = 0;
    for (; j + L <= len; j += L) {
      const Vec::F q = Vec::rint(Vec::div(Vec::loadu(x + base + j), sv));
      Vec::F y = Vec::add(Vec::min(Vec::max(q, lo), hi), zv);
      if constexpr (kQuarkCast) y = Vec::select(Vec::mask_or(Vec::isnan(q), Vec::ge(Vec::abs(q), two63)), sentinel, y);
      // Large outputs: non-temporal stores where the vector's destination is aligned to its width.
      T* dst = out + base + j;
      if (a.stream && reinterpret_cast<std::uintptr_t>(dst) % (L * sizeof(T)) == 0) NarrowOut<T>::stream(dst, y);
      else NarrowOut<T>::store(dst, y);
    }
    for (; j < len; ++j) quantize_linear_element<float>(p, x[base + j], sr, zr, out, base + j);
  }
  if (a.stream) Vec::fence();
}

// Whether a call with per-row operands is the blocked layout the *_blocks loops run: x running on,
// the scale and zero point one value per row or one for all. Anything else (x per row, broadcast or
// repeating a row, a parameter running on per element or repeating a row) goes to the reference.
inline bool blocked_parameters(const RowArgs& a, bool has_zero_point) {
  return a.repeated_row_mask == 0 && !a.is_per_row(0) && !a.is_broadcast(0) && (a.is_per_row(1) || a.is_broadcast(1)) &&
         (!has_zero_point || a.is_per_row(2) || a.is_broadcast(2));
}

template <class T>
void quantize_rows_for(const QuantizeLinearParams& p, const RowArgs& a) {
  if (a.per_row_mask != 0) {
    if (!blocked_parameters(a, p.has_zero_point)) return ref::quantize_linear_f32(&p, a);
    if (p.non_finite == NonFinitePolicy::kInt64Cast) return quantize_blocks<T, true>(p, a);
    return quantize_blocks<T, false>(p, a);
  }
  if (p.non_finite == NonFinitePolicy::kInt64Cast) quantize_rows<T, true>(p, a);
  else quantize_rows<T, false>(p, a);
}

// DQ with blocked parameters (see quantize_blocks).
template <class T>
void dequantize_blocks(const DequantizeLinearParams& p, const RowArgs& a) {
  constexpr int L = Vec::kLanes;
  const T* x = a.input<T>(0);
  const float* s = a.input<float>(1);
  const T* z = p.has_zero_point ? a.input<T>(2) : nullptr;
  float* out = static_cast<float*>(a.out);
  const std::int64_t len = a.row_len, rows = a.n / a.row_len;
  const bool s_rows = a.is_per_row(1), z_rows = z && a.is_per_row(2);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float sr = s[s_rows ? r : 0], zr = z ? static_cast<float>(z[z_rows ? r : 0]) : 0.0f;
    const Vec::F sv = Vec::splat(sr), zv = Vec::splat(zr);
    const std::int64_t base = r * len;
    std::int64_t j = 0;
    for (; j + L <= len; j += L) {
      const Vec::F y = Vec::mul(Vec::sub(Vec::load_from(x + base + j), zv), sv);
      float* dst = out + base + j;
      if (a.stream && reinterpret_cast<std::uintptr_t>(dst) % (L * sizeof(float)) == 0) Vec::stream(dst, y);
      else Vec::storeu(dst, y);
    }
    for (; j < len; ++j) out[base + j] = (static_cast<float>(x[base + j]) - zr) * sr;
  }
  if (a.stream) Vec::fence();
}

// DQ: y = (float(x) - float(zp)) * s in float32 (the difference is exact for 8/16-bit integers).
template <class T>
void dequantize_rows(const DequantizeLinearParams& p, const RowArgs& a) {
  if (a.per_row_mask != 0) {
    if (!blocked_parameters(a, p.has_zero_point)) return ref::dequantize_linear_f32(&p, a);
    return dequantize_blocks<T>(p, a);
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
  const Vec::F zp_splat = Vec::splat(zp ? static_cast<float>(zp[0]) : 0.0f);
  float* out = static_cast<float*>(a.out);
  const std::int64_t n = a.n;
  auto scalar = [&](std::int64_t j) {
    const float zv = zp ? static_cast<float>(zp[zp_one ? 0 : (zp_repeats ? j % len : j)]) : 0.0f;
    out[j] = (static_cast<float>(x[j]) - zv) * s[s_one ? 0 : (s_repeats ? j % len : j)];
  };
  std::int64_t j = 0;
  const bool stream = a.stream && (reinterpret_cast<std::uintptr_t>(out) % sizeof(float)) == 0;
  if (stream) {
    while (j < n && (reinterpret_cast<std::uintptr_t>(out + j) % (L * sizeof(float))) != 0) scalar(j++);
  }
  std::int64_t in_row = j % len;
  for (; j + L <= n; j += L) {
    const Vec::F zv = zp_one ? zp_splat : Vec::load_from(zp + (zp_repeats ? in_row : j));
    const Vec::F sv = s_one ? s_splat : Vec::loadu(s + (s_repeats ? in_row : j));
    const Vec::F y = Vec::mul(Vec::sub(Vec::load_from(x + j), zv), sv);
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
  const bool vector = p.target == QuantTarget::kInteger && p.quotient == QuotientRounding::kNone && !p.round_operands &&
                      !p.zero_point_f64;
  if (vector) {
    switch (p.out_dtype) {
      case DType::kInt8: return qdq_detail::quantize_rows_for<std::int8_t>(p, a);
      case DType::kUInt8: return qdq_detail::quantize_rows_for<std::uint8_t>(p, a);
      case DType::kInt16: return qdq_detail::quantize_rows_for<std::int16_t>(p, a);
      case DType::kUInt16: return qdq_detail::quantize_rows_for<std::uint16_t>(p, a);
      default: break;
    }
  }
  ref::quantize_linear_f32(params, a);
}

void dequantize_linear_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const DequantizeLinearParams*>(params);
  const bool vector = p.difference == DequantDifference::kFloat32 && !p.ignore_scale && !p.canonical_nan &&
                      !a.is_broadcast(0);
  if (vector) {
    switch (p.x_dtype) {
      case DType::kInt8: return qdq_detail::dequantize_rows<std::int8_t>(p, a);
      case DType::kUInt8: return qdq_detail::dequantize_rows<std::uint8_t>(p, a);
      case DType::kInt16: return qdq_detail::dequantize_rows<std::int16_t>(p, a);
      case DType::kUInt16: return qdq_detail::dequantize_rows<std::uint16_t>(p, a);
      default: break;
    }
  }
  ref::dequantize_linear_f32(params, a);
}
