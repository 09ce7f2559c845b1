// Vector bodies of the dtype conversions (kernels/convert/kernels.h), written once against the
// `Vec` vocabulary and compiled per kernel set: float16 to and from float32 with the hardware's
// conversions (F16C, which every kernel set requires; NaN lanes of a widening fixed up), bfloat16,
// the minifloats (float8 / float6 / float4 / e8m0, narrow_simd-inl.h) and the sub-byte integers
// with integer bit arithmetic (plus one exact product); every other pair, and the tail of a run,
// by the spec.
//
// No include guard: meant to be included once per kernel-set translation unit.
#include "kernels/convert/narrow_simd-inl.h"
#include "kernels/simd/sixteen_bit-inl.h"

namespace convert_detail {

// float16 NaN code (zero-extended to 32 bits) -> the float32 bits the spec gives it
// (half_bits_to_float): the payload moved up 13 bits under exponent 255, so a signaling NaN stays
// signaling, and the sign kept.
inline Vec::I half_nan_to_float_bits(Vec::I h) {
  const Vec::I moved = Vec::shl_i<13>(Vec::and_i(h, Vec::splat_i(0x7fff)));
  return Vec::or_i(Vec::add_i(moved, Vec::splat_i(224 << 23)), Vec::shl_i<16>(Vec::and_i(h, Vec::splat_i(0x8000))));
}

}  // namespace convert_detail

void convert_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const ConvertParams*>(params);
  // The engine converts plain contiguous runs; any other shape of call is the spec's.
  if (a.broadcast_mask != 0 || a.per_row_mask != 0 || a.repeated_row_mask != 0) return ref::convert_f32(params, a);
  constexpr int L = Vec::kLanes;
  const std::int64_t n = a.n;
  std::int64_t j = 0;
  auto widen = [&](auto code_to_float) {  // 8-bit codes -> float32
    const auto* src = static_cast<const std::uint8_t*>(a.in[0]);
    auto* dst = static_cast<float*>(a.out);
    for (; j + L <= n; j += L) Vec::storeu(dst + j, code_to_float(Vec::load_u8(src + j)));
  };
  auto narrow = [&](auto float_to_code) {  // float32 -> 8-bit codes
    const auto* src = static_cast<const float*>(a.in[0]);
    auto* dst = static_cast<std::uint8_t*>(a.out);
    for (; j + L <= n; j += L) Vec::store_u8(dst + j, float_to_code(Vec::loadu(src + j)));
  };
  bool vector = true;
  if (p.to == DType::kFloat32 && (p.from == DType::kFloat16 || p.from == DType::kBFloat16)) {
    // The engine widens an operand a block at a time (2048 elements) and then computes on it in
    // the L1 cache, so its reads come in bursts with no load in flight in between: asking for the
    // next block's lines while widening this one overlaps them with that compute (5-10% on a
    // 16 Mi float16 / bfloat16 quantize_dequantize on this VM). A prefetch past the end is harmless.
    constexpr std::int64_t kWidenPrefetchAhead = 2048;
    const auto* src = static_cast<const std::uint16_t*>(a.in[0]);
    auto* dst = static_cast<float*>(a.out);
    if (p.from == DType::kFloat16) {
      for (; j + L <= n; j += L) {
        // The hardware widens every code exactly but quiets a signaling NaN, whose bits the spec
        // keeps: NaN lanes (rare) take the bit arithmetic.
        __builtin_prefetch(src + j + kWidenPrefetchAhead);
        Vec::F v = Vec::load_half(src + j);
        const Vec::M nan = Vec::isnan(v);
        if (Vec::mask_bits(nan) != 0) v = Vec::select(nan, Vec::from_bits(convert_detail::half_nan_to_float_bits(Vec::load_u16(src + j))), v);
        Vec::storeu(dst + j, v);
      }
    } else {
      for (; j + L <= n; j += L) {
        __builtin_prefetch(src + j + kWidenPrefetchAhead);
        Vec::storeu(dst + j, Vec::from_bits(Vec::shl_i<16>(Vec::load_u16(src + j))));
      }
    }
  } else if (p.from == DType::kFloat32 && (p.to == DType::kFloat16 || p.to == DType::kBFloat16)) {
    const auto* src = static_cast<const float*>(a.in[0]);
    auto* dst = static_cast<std::uint16_t*>(a.out);
    // Far beyond the caches (RowArgs::stream): non-temporal stores from the first element where a
    // vector's codes are aligned (the elements before it by the spec), so the output's lines are
    // not read before they are written.
    const bool stream = a.stream && reinterpret_cast<std::uintptr_t>(dst) % 2 == 0;
    if (stream) {
      const std::uintptr_t misalign = reinterpret_cast<std::uintptr_t>(dst) % (L * 2);
      const std::int64_t head = std::min<std::int64_t>(n, misalign == 0 ? 0 : static_cast<std::int64_t>((L * 2 - misalign) / 2));
      convert_values_scalar(src, p.from, 1, dst, p.to, 1, head);
      j = head;
    }
    if (p.to == DType::kFloat16) {  // the hardware's rounding is the spec's
      if (stream) {
        for (; j + L <= n; j += L) Vec::stream_half(dst + j, Vec::loadu(src + j));
      } else {
        for (; j + L <= n; j += L) Vec::store_half(dst + j, Vec::loadu(src + j));
      }
    } else {
      if (stream) {
        for (; j + L <= n; j += L) Vec::stream_u16(dst + j, sixteen_bit::float_to_bfloat16_bits(Vec::bits(Vec::loadu(src + j))));
      } else {
        for (; j + L <= n; j += L) Vec::store_u16(dst + j, sixteen_bit::float_to_bfloat16_bits(Vec::bits(Vec::loadu(src + j))));
      }
    }
    if (stream) Vec::fence();
  } else if (p.to == DType::kFloat32) {
    switch (p.from) {
      // Lambdas, not function pointers: an always-inline function called through a pointer does
      // not inline at -O1 (the sanitized build), which is an error.
      case DType::kInt4: widen([](Vec::I c) { return narrow_simd::sub_byte_to_float<4, true>(c); }); break;
      case DType::kUInt4: widen([](Vec::I c) { return narrow_simd::sub_byte_to_float<4, false>(c); }); break;
      case DType::kInt2: widen([](Vec::I c) { return narrow_simd::sub_byte_to_float<2, true>(c); }); break;
      case DType::kUInt2: widen([](Vec::I c) { return narrow_simd::sub_byte_to_float<2, false>(c); }); break;
      default:
        vector = narrow_simd::with_minifloat(p.from, [&](auto t) {
          widen([](Vec::I c) { return Vec::from_bits(narrow_simd::to_float_bits<decltype(t)::value>(c)); });
        });
    }
  } else if (p.from == DType::kFloat32) {
    switch (p.to) {
      case DType::kInt4:
      case DType::kUInt4: narrow([](Vec::F v) { return narrow_simd::float_to_sub_byte<4>(v); }); break;
      case DType::kInt2:
      case DType::kUInt2: narrow([](Vec::F v) { return narrow_simd::float_to_sub_byte<2>(v); }); break;
      default:
        vector = narrow_simd::with_minifloat(p.to, [&](auto t) {
          narrow([](Vec::F v) { return narrow_simd::from_float_bits<decltype(t)::value>(Vec::bits(v)); });
        });
    }
  } else {
    vector = false;
  }
  if (!vector) return ref::convert_f32(params, a);
  if (j < n) {
    const auto from_size = static_cast<std::int64_t>(dtype_size(p.from)), to_size = static_cast<std::int64_t>(dtype_size(p.to));
    convert_values_scalar(static_cast<const char*>(a.in[0]) + j * from_size, p.from, 1, static_cast<char*>(a.out) + j * to_size,
                          p.to, 1, n - j);
  }
}
