// Vector bodies of the dtype conversions (kernels/convert/kernels.h), written once against the
// `Vec` vocabulary and compiled per kernel set: float16, bfloat16, the minifloats (float8 / float6 /
// float4 / e8m0, narrow_simd-inl.h) and the sub-byte integers to and from float32 with integer
// bit arithmetic (plus one exact product); every other pair, and the tail of a run, by the spec.
//
// No include guard: meant to be included once per kernel-set translation unit.
#include "kernels/convert/narrow_simd-inl.h"

namespace convert_detail {

// float16 code (zero-extended to 32 bits) -> float32 bits. With em = the code without its sign:
// a normal code moves its exponent and mantissa up 13 bits and rebiases (+112 << 23); exponent 31
// (inf, NaN) rebiases to 255 (+224 << 23), the payload kept; exponent 0 is mant * 2^-24, an exact
// product of two normal float32 numbers (or +0) that is itself normal, so neither the rounding
// mode nor flush-to-zero can change it.
inline Vec::I half_to_float_bits(Vec::I h) {
  const Vec::I em = Vec::and_i(h, Vec::splat_i(0x7fff));
  const Vec::I exponent = Vec::shr_i<10>(em);
  const Vec::I moved = Vec::shl_i<13>(em);
  const Vec::I normal = Vec::add_i(moved, Vec::splat_i(112 << 23));
  const Vec::I special = Vec::add_i(moved, Vec::splat_i(224 << 23));
  const Vec::I tiny = Vec::bits(Vec::mul(Vec::to_float(em), Vec::splat(0x1p-24f)));
  Vec::I r = Vec::select_i(Vec::eq_i(exponent, Vec::splat_i(31)), special, normal);
  r = Vec::select_i(Vec::eq_i(exponent, Vec::splat_i(0)), tiny, r);
  return Vec::or_i(r, Vec::shl_i<16>(Vec::and_i(h, Vec::splat_i(0x8000))));
}

// float32 bits -> float16 code, float_to_half_bits lane by lane. ax = |x|'s bits:
//   ax >= 0x38800000 (normal half):   (ax - (112 << 23) + 0xFFF + lsb) >> 13, lsb the kept part's
//                                     last bit: adding just under half a unit, plus that bit,
//                                     carries exactly when the discarded part is above half or at
//                                     half with an odd kept part (ties to even; a carry into the
//                                     exponent is the correct next binade);
//   0x33000000 <= ax < 0x38800000:    a subnormal half: the 24-bit significand shifted right by
//                                     126 - (ax >> 23) (14..24), rounded the same way;
//   ax < 0x33000000:                  below half the smallest subnormal: zero;
//   ax >= 0x477FF000:                 rounds to 65520 or more: inf;
//   NaN:                              0x7E00 | the payload's top 10 bits.
// The sign is or-ed back at the end.
inline Vec::I float_to_half_bits(Vec::I u) {
  const Vec::I sign = Vec::shr_i<16>(Vec::and_i(u, Vec::splat_i(INT32_MIN)));
  const Vec::I ax = Vec::and_i(u, Vec::splat_i(0x7fffffff));
  const Vec::I one = Vec::splat_i(1);
  const Vec::I lsb = Vec::and_i(Vec::shr_i<13>(ax), one);
  const Vec::I normal = Vec::shr_i<13>(Vec::add_i(Vec::sub_i(ax, Vec::splat_i(112 << 23)), Vec::add_i(Vec::splat_i(0xfff), lsb)));
  const Vec::I significand = Vec::or_i(Vec::and_i(ax, Vec::splat_i(0x7fffff)), Vec::splat_i(0x800000));
  const Vec::I shift = Vec::sub_i(Vec::splat_i(126), Vec::shr_i<23>(ax));
  const Vec::I halfway = Vec::shr_var_i(Vec::splat_i(1 << 23), Vec::sub_i(Vec::splat_i(24), shift));  // 2^(shift - 1)
  const Vec::I kept_lsb = Vec::and_i(Vec::shr_var_i(significand, shift), one);
  const Vec::I subnormal =
      Vec::shr_var_i(Vec::add_i(significand, Vec::add_i(Vec::sub_i(halfway, one), kept_lsb)), shift);
  const Vec::I nan = Vec::or_i(Vec::splat_i(0x7e00), Vec::and_i(Vec::shr_i<13>(ax), Vec::splat_i(0x3ff)));
  Vec::I r = Vec::select_i(Vec::gt_i(Vec::splat_i(0x38800000), ax), subnormal, normal);
  r = Vec::select_i(Vec::gt_i(Vec::splat_i(0x33000000), ax), Vec::splat_i(0), r);
  r = Vec::select_i(Vec::gt_i(ax, Vec::splat_i(0x477fefff)), Vec::splat_i(0x7c00), r);
  r = Vec::select_i(Vec::gt_i(ax, Vec::splat_i(0x7f800000)), nan, r);
  return Vec::or_i(r, sign);
}

// float32 bits -> bfloat16 code: round to nearest even by adding 0x7FFF plus the kept part's last
// bit (as bfloat16_round_bits, in wrapping 32-bit arithmetic); a NaN becomes 0x7FC0 with its sign.
inline Vec::I float_to_bfloat16_bits(Vec::I u) {
  const Vec::I rounded =
      Vec::shr_i<16>(Vec::add_i(u, Vec::add_i(Vec::splat_i(0x7fff), Vec::and_i(Vec::shr_i<16>(u), Vec::splat_i(1)))));
  const Vec::I nan = Vec::or_i(Vec::shr_i<16>(Vec::and_i(u, Vec::splat_i(INT32_MIN))), Vec::splat_i(0x7fc0));
  return Vec::select_i(Vec::isnan(Vec::from_bits(u)), nan, rounded);
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
    const auto* src = static_cast<const std::uint16_t*>(a.in[0]);
    auto* dst = static_cast<float*>(a.out);
    if (p.from == DType::kFloat16) {
      for (; j + L <= n; j += L) Vec::storeu(dst + j, Vec::from_bits(convert_detail::half_to_float_bits(Vec::load_u16(src + j))));
    } else {
      for (; j + L <= n; j += L) Vec::storeu(dst + j, Vec::from_bits(Vec::shl_i<16>(Vec::load_u16(src + j))));
    }
  } else if (p.from == DType::kFloat32 && (p.to == DType::kFloat16 || p.to == DType::kBFloat16)) {
    const auto* src = static_cast<const float*>(a.in[0]);
    auto* dst = static_cast<std::uint16_t*>(a.out);
    if (p.to == DType::kFloat16) {
      for (; j + L <= n; j += L) Vec::store_u16(dst + j, convert_detail::float_to_half_bits(Vec::bits(Vec::loadu(src + j))));
    } else {
      for (; j + L <= n; j += L) Vec::store_u16(dst + j, convert_detail::float_to_bfloat16_bits(Vec::bits(Vec::loadu(src + j))));
    }
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
