// The narrow types' codes to and from float32 in the `Vec` vocabulary, one code per 32-bit lane:
// the float formats of core/minifloat.h (float8 e4m3fn / e4m3fnuz / e5m2 / e5m2fnuz, float6 e2m3 /
// e3m2, float4 e2m1, e8m0), bit for bit minifloat_to_float / minifloat_from_float (the spec, which
// equals ml_dtypes), and the sub-byte integers (int4 / uint4 / int2 / uint2, one per byte).
// Integer bit arithmetic plus one exact product, so neither the rounding mode nor flush-to-zero
// can change a bit. The format is a template argument: every shift and constant is known when the
// kernel is compiled.
//
// Shared by the conversion kernels (kernels/convert) and the quantize / dequantize kernels that
// write and read these types directly (families/onnx); guarded per kernel set like row_loop-inl.h.
#ifndef POLYQUANT_NARROW_SIMD_INCLUDED
#define POLYQUANT_NARROW_SIMD_INCLUDED

#ifndef POLYQUANT_ALWAYS_INLINE
#define POLYQUANT_ALWAYS_INLINE __attribute__((always_inline))
#endif

namespace narrow_simd {

// The constants of format kT for a width-W code with sign bit S = 2^(W-1), M mantissa bits, bias b.
template <DType kT>
struct Layout {
  static constexpr MinifloatFormat kF = minifloat_format(kT);
  static constexpr int kWidth = 1 + kF.exp_bits + kF.man_bits;
  static constexpr int kMan = kF.man_bits;
  static constexpr std::int32_t kSignBit = 1 << (kWidth - 1);
  static constexpr std::int32_t kExpOnes = (1 << kF.exp_bits) - 1;
  // float32 exponent-field offset between the two formats: a normal code's exponent plus this is
  // float32's.
  static constexpr std::int32_t kRebias = (127 - kF.bias) << 23;
  // Smallest normal magnitude, 2^(1-b), as float32 bits; half the smallest subnormal, 2^(-b-M):
  // below it every value rounds to zero.
  static constexpr std::int32_t kMinNormalBits = (128 - kF.bias) << 23;
  static constexpr std::int32_t kZeroBelowBits = (127 - kF.bias - kF.man_bits) << 23;
  // A subnormal code is mant * 2^(1-b-M).
  static constexpr float kSubnormalUnit = static_cast<float>(1.0 / static_cast<double>(std::int64_t{1} << (kF.bias + kF.man_bits - 1)));
};

// Code (zero-extended to the lane) -> float32 bits, minifloat_to_float lane by lane.
//   normal:    (mag << (23 - M)) + rebias;
//   subnormal: mant * 2^(1-b-M), an exact product of normal float32 numbers that is itself normal
//              (or +0), so no flush-to-zero setting can touch it;
//   specials:  ieee: exponent all ones -> inf (mantissa 0) or NaN; fn: magnitude all ones -> NaN;
//              fnuz: 0x80 -> -NaN; NaN is float32's quiet NaN with the code's sign.
// e8m0: 2^(c-127): c << 23, c = 0 is the float32 subnormal 2^-127 (0x00400000), 0xFF NaN.
template <DType kT>
POLYQUANT_ALWAYS_INLINE inline Vec::I to_float_bits(Vec::I c) {
  using F = Layout<kT>;
  const Vec::I qnan = Vec::splat_i(0x7fc00000);
  if constexpr (F::kF.kind == MinifloatKind::kE8M0) {
    Vec::I r = Vec::shl_i<23>(c);
    r = Vec::select_i(Vec::eq_i(c, Vec::splat_i(0)), Vec::splat_i(0x00400000), r);
    return Vec::select_i(Vec::eq_i(c, Vec::splat_i(0xff)), qnan, r);
  } else {
    const Vec::I mag = Vec::and_i(c, Vec::splat_i(F::kSignBit - 1));
    const Vec::I exponent = Vec::shr_i<F::kMan>(mag);
    const Vec::I sign = Vec::shl_i<32 - F::kWidth>(Vec::and_i(c, Vec::splat_i(F::kSignBit)));
    const Vec::I normal = Vec::add_i(Vec::shl_i<23 - F::kMan>(mag), Vec::splat_i(F::kRebias));
    const Vec::I mant = Vec::and_i(mag, Vec::splat_i((1 << F::kMan) - 1));
    const Vec::I tiny = Vec::bits(Vec::mul(Vec::to_float(mant), Vec::splat(F::kSubnormalUnit)));
    Vec::I r = Vec::select_i(Vec::eq_i(exponent, Vec::splat_i(0)), tiny, normal);
    if constexpr (F::kF.kind == MinifloatKind::kIeee) {
      const Vec::I special = Vec::select_i(Vec::eq_i(mant, Vec::splat_i(0)), Vec::splat_i(0x7f800000), qnan);
      r = Vec::select_i(Vec::eq_i(exponent, Vec::splat_i(F::kExpOnes)), special, r);
    } else if constexpr (F::kF.kind == MinifloatKind::kFn) {
      r = Vec::select_i(Vec::eq_i(mag, Vec::splat_i(F::kSignBit - 1)), qnan, r);
    }
    r = Vec::or_i(r, sign);
    if constexpr (F::kF.kind == MinifloatKind::kFnuz) {
      r = Vec::select_i(Vec::eq_i(c, Vec::splat_i(0x80)), Vec::splat_i(static_cast<std::int32_t>(0xffc00000u)), r);
    }
    return r;
  }
}

// float32 bits -> code, minifloat_from_float(format, v, saturate = false) lane by lane (a saturating
// caller clips the value to the largest finite magnitude first, as the spec does). ax = |v|'s bits:
//   ax >= 2^(1-b):        (ax - rebias + 2^(22-M) - 1 + lsb) >> (23 - M), lsb the kept part's last
//                         bit: adding just under half a unit, plus that bit, carries exactly when
//                         the discarded part is above half or at half with an odd kept part (ties to
//                         even; a carry into the exponent is the next binade);
//   2^(-b-M) <= ax < 2^(1-b): a subnormal code: the 24-bit significand shifted right by
//                         (151 - b - M) - (ax >> 23) (24 - M .. 24), rounded the same way;
//   ax < 2^(-b-M):        zero (float32 subnormals included);
//   magnitude above the largest finite one (infinities included): the format's overflow code —
//                         ieee: inf; fn: NaN; fnuz: 0x80; finite: the largest magnitude;
//   NaN:                  ieee: the quiet NaN with the sign; fn: magnitude all ones with the sign;
//                         fnuz: 0x80; finite: a zero whose sign is the opposite of the NaN's.
// fnuz has no -0: a zero magnitude is 0x00.
// e8m0: 2^k for the float32 exponent k, plus one when the mantissa is >= 1.5 (ties up); the
// float32 subnormals give 2^-127 (code 0), or 2^-126 from 1.5 * 2^-127 up; zero, negatives,
// infinities and NaN give NaN (0xFF), as do values from 1.5 * 2^127 up.
template <DType kT>
POLYQUANT_ALWAYS_INLINE inline Vec::I from_float_bits(Vec::I u) {
  using F = Layout<kT>;
  const Vec::I ax = Vec::and_i(u, Vec::splat_i(0x7fffffff));
  const Vec::I zero = Vec::splat_i(0);
  if constexpr (F::kF.kind == MinifloatKind::kE8M0) {
    const Vec::I exponent = Vec::shr_i<23>(ax);
    Vec::I r = Vec::add_i(exponent, Vec::and_i(Vec::shr_i<22>(ax), Vec::splat_i(1)));
    const Vec::I sub = Vec::select_i(Vec::gt_i(ax, Vec::splat_i(0x5fffff)), Vec::splat_i(1), zero);
    r = Vec::select_i(Vec::eq_i(exponent, zero), sub, r);
    // Not a positive finite number: -0 and +0, negatives (sign bit set), inf, NaN.
    const auto invalid = Vec::mask_or(Vec::mask_or(Vec::eq_i(ax, zero), Vec::gt_i(zero, u)), Vec::gt_i(ax, Vec::splat_i(0x7f7fffff)));
    return Vec::select_i(invalid, Vec::splat_i(0xff), r);
  } else {
    const Vec::I one = Vec::splat_i(1);
    const Vec::I sign = Vec::shr_i<32 - F::kWidth>(Vec::and_i(u, Vec::splat_i(INT32_MIN)));
    const Vec::I lsb = Vec::and_i(Vec::shr_i<23 - F::kMan>(ax), one);
    const Vec::I normal = Vec::shr_i<23 - F::kMan>(
        Vec::add_i(Vec::sub_i(ax, Vec::splat_i(F::kRebias)), Vec::add_i(Vec::splat_i((1 << (22 - F::kMan)) - 1), lsb)));
    Vec::I mag = normal;
    const auto below_normal = Vec::gt_i(Vec::splat_i(F::kMinNormalBits), ax);
    // The subnormal and zero range only where a lane needs it: quantized tensors rarely have
    // values there (the scale maps them onto the normal range), so the branch predicts well.
    if (Vec::mask_bits(below_normal) != 0) {
      const Vec::I significand = Vec::or_i(Vec::and_i(ax, Vec::splat_i(0x7fffff)), Vec::splat_i(0x800000));
      const Vec::I shift = Vec::sub_i(Vec::splat_i(151 - F::kF.bias - F::kMan), Vec::shr_i<23>(ax));
      const Vec::I halfway = Vec::shr_var_i(Vec::splat_i(1 << 23), Vec::sub_i(Vec::splat_i(24), shift));  // 2^(shift - 1)
      const Vec::I kept_lsb = Vec::and_i(Vec::shr_var_i(significand, shift), one);
      const Vec::I subnormal = Vec::shr_var_i(Vec::add_i(significand, Vec::add_i(Vec::sub_i(halfway, one), kept_lsb)), shift);
      mag = Vec::select_i(below_normal, subnormal, normal);
      mag = Vec::select_i(Vec::gt_i(Vec::splat_i(F::kZeroBelowBits), ax), zero, mag);
    }
    const auto overflow = Vec::gt_i(mag, Vec::splat_i(F::kF.max_magnitude));
    const auto nan = Vec::gt_i(ax, Vec::splat_i(0x7f800000));
    Vec::I r = Vec::or_i(mag, sign);
    if constexpr (F::kF.kind == MinifloatKind::kIeee) {
      const Vec::I inf = Vec::or_i(sign, Vec::splat_i(F::kExpOnes << F::kMan));
      r = Vec::select_i(overflow, inf, r);
      r = Vec::select_i(nan, Vec::or_i(inf, Vec::splat_i(1 << (F::kMan - 1))), r);
    } else if constexpr (F::kF.kind == MinifloatKind::kFn) {
      r = Vec::select_i(Vec::mask_or(overflow, nan), Vec::or_i(sign, Vec::splat_i(F::kSignBit - 1)), r);
    } else if constexpr (F::kF.kind == MinifloatKind::kFnuz) {
      r = Vec::select_i(Vec::eq_i(mag, zero), zero, r);
      r = Vec::select_i(Vec::mask_or(overflow, nan), Vec::splat_i(0x80), r);
    } else {
      r = Vec::select_i(overflow, Vec::or_i(sign, Vec::splat_i(F::kF.max_magnitude)), r);
      // NaN: the opposite sign's zero — sign bit set exactly when the NaN's is clear.
      const Vec::I flipped = Vec::select_i(Vec::eq_i(sign, zero), Vec::splat_i(F::kSignBit), zero);
      r = Vec::select_i(nan, flipped, r);
    }
    return r;
  }
}

// Runs `body(integral_constant<DType, t>)` for a minifloat dtype t (false: not a minifloat).
template <class Body>
bool with_minifloat(DType t, Body&& body) {
  switch (t) {
    case DType::kFloat8E4M3FN: body(std::integral_constant<DType, DType::kFloat8E4M3FN>{}); return true;
    case DType::kFloat8E4M3FNUZ: body(std::integral_constant<DType, DType::kFloat8E4M3FNUZ>{}); return true;
    case DType::kFloat8E5M2: body(std::integral_constant<DType, DType::kFloat8E5M2>{}); return true;
    case DType::kFloat8E5M2FNUZ: body(std::integral_constant<DType, DType::kFloat8E5M2FNUZ>{}); return true;
    case DType::kFloat8E8M0: body(std::integral_constant<DType, DType::kFloat8E8M0>{}); return true;
    case DType::kFloat6E2M3: body(std::integral_constant<DType, DType::kFloat6E2M3>{}); return true;
    case DType::kFloat6E3M2: body(std::integral_constant<DType, DType::kFloat6E3M2>{}); return true;
    case DType::kFloat4E2M1: body(std::integral_constant<DType, DType::kFloat4E2M1>{}); return true;
    default: return false;
  }
}

// Sub-byte integer codes (int4 / uint4 / int2 / uint2, one per byte; only the low bits count) ->
// their values as float32: the low `bits` bits, minus 2^bits when signed and the top one is set.
template <int kBits, bool kSigned>
POLYQUANT_ALWAYS_INLINE inline Vec::F sub_byte_to_float(Vec::I c) {
  Vec::I v = Vec::and_i(c, Vec::splat_i((1 << kBits) - 1));
  if constexpr (kSigned) v = Vec::sub_i(v, Vec::shl_i<1>(Vec::and_i(v, Vec::splat_i(1 << (kBits - 1)))));
  return Vec::to_float(v);
}

// float32 -> sub-byte integer code as the spec's astype: the integer part (truncation; NaN -> 0),
// its two's-complement low bits. |v| >= 2^31 (infinities included) gives 0 in those bits: such a
// float32 is a multiple of 2^8, and the spec's int64 cast of it (0 beyond int64) keeps no low bit.
template <int kBits>
inline Vec::I float_to_sub_byte(Vec::F v) {
  const Vec::I t = Vec::select_i(Vec::lt(Vec::abs(v), Vec::splat(2147483648.0f)), Vec::to_int(v), Vec::splat_i(0));
  return Vec::and_i(t, Vec::splat_i((1 << kBits) - 1));
}

}  // namespace narrow_simd

#endif  // POLYQUANT_NARROW_SIMD_INCLUDED
