// float32 lanes rounded to float16 / bfloat16 and back, in the `Vec` vocabulary: the vector forms of
// float_to_bfloat16_bits and of the round trips through float16 and bfloat16 (core/half.h), bit
// for bit, the rounding by integer arithmetic or the hardware's immediate, so neither MXCSR's
// rounding mode nor flush-to-zero changes a bit.
//
// Shared by the conversion kernels (kernels/convert) and the kernels whose working precision is a
// 16-bit float computed in float32 (families/aimet); guarded per kernel set like row_loop-inl.h.
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

}  // namespace sixteen_bit

#endif  // POLYQUANT_SIXTEEN_BIT_SIMD_INCLUDED
