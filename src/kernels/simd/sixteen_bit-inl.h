// float32 lanes rounded to float16 / bfloat16 and back, in the `Vec` vocabulary: the vector forms of
// float_to_bfloat16_bits and of the round trips through float16 and bfloat16 (core/half.h), bit
// for bit, the rounding by integer arithmetic or the hardware's immediate, so neither MXCSR's
// rounding mode nor flush-to-zero changes a bit.
//
// Shared by the conversion kernels (kernels/convert) and the kernels that compute a 16-bit float
// precision in float32 (families/aimet's working precisions, families/onnx's 16-bit quotients);
// guarded per kernel set like row_loop-inl.h.
#ifndef POLYQUANT_SIXTEEN_BIT_SIMD_INCLUDED
#define POLYQUANT_SIXTEEN_BIT_SIMD_INCLUDED

namespace sixteen_bit {

// float32 bits -> bfloat16 code: round to nearest even by adding 0x7FFF plus the kept part's last
// bit (as bfloat16_round_bits, in wrapping 32-bit arithmetic: the largest finite values round up to
// infinity); a NaN becomes 0x7FC0 with its sign.
inline Vec::I float_to_bfloat16_bits(Vec::I u) {
  const Vec::I rounded =
      Vec::shr_i<16>(Vec::add_i(u, Vec::add_i(Vec::splat_i(0x7fff), Vec::and_i(Vec::shr_i<16>(u), Vec::splat_i(1)))));
  const Vec::I nan = Vec::or_i(Vec::shr_i<16>(Vec::and_i(u, Vec::splat_i(INT32_MIN))), Vec::splat_i(0x7fc0));
  return Vec::select_i(Vec::isnan(Vec::from_bits(u)), nan, rounded);
}

// bfloat16_bits_to_float(float_to_bfloat16_bits(v)) for a v that is not NaN (the caller picks its
// NaN): the same sum, its low 16 bits cleared.
inline Vec::F round_to_bfloat16_unless_nan(Vec::F v) {
  const Vec::I u = Vec::bits(v);
  const Vec::I sum = Vec::add_i(u, Vec::add_i(Vec::splat_i(0x7fff), Vec::and_i(Vec::shr_i<16>(u), Vec::splat_i(1))));
  return Vec::from_bits(Vec::and_i(sum, Vec::splat_i(static_cast<std::int32_t>(0xFFFF0000u))));
}

// round_to_quotient_dtype's vector form (families/onnx/kernels.h): the lanes rounded to float16 and
// back (the hardware's round trip: a NaN keeps its sign and its payload's top bits, quieted) or to
// bfloat16 and back (a NaN becomes 0x7FC00000 with its sign), float32 as they are. `r` is one
// choice for a whole row, a branch the predictor learns.
POLYQUANT_ALWAYS_INLINE inline Vec::F round_to_quotient_dtype_v(Vec::F v, QuotientRounding r) {
  if (r == QuotientRounding::kFloat16) return Vec::round_to_half(v);
  if (r == QuotientRounding::kBFloat16) {
    const Vec::F nan = Vec::from_bits(Vec::or_i(Vec::and_i(Vec::bits(v), Vec::splat_i(INT32_MIN)), Vec::splat_i(0x7FC00000)));
    return Vec::select(Vec::isnan(v), nan, round_to_bfloat16_unless_nan(v));
  }
  return v;
}

}  // namespace sixteen_bit

#endif  // POLYQUANT_SIXTEEN_BIT_SIMD_INCLUDED
