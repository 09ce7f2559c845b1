// float32 SIMD kernels of the QONNX ops, written once against the `Vec` vocabulary and compiled
// per kernel set (avx2/, avx512/) inside that set's namespace. Each body is the vector form of the
// per-element spec in families/qonnx/kernels.h, operation for operation. Include after defining `Vec`.
//
// No include guard: meant to be included once per kernel-set translation unit.

#include "kernels/simd/row_loop-inl.h"

// ---- IntQuant --------------------------------------------------------------------------------
// kHalf: the float16 spec (int_quant_element<Half>): the operands rounded to float16, then every
// operation's result. The clamp needs none (its results are float16 values already: the value or
// a bound), nor does the rounding, whose float16 form (with_vector_rounding<true>) rounds inside.
template <bool kHalf, class Round>
void int_quant_rows(const IntQuantParams& p, const RowArgs& a, const Round& round) {
  auto H = [](Vec::F v) POLYQUANT_ALWAYS_INLINE { return half_step<kHalf>(v); };
  const Vec::F lo = Vec::splat(static_cast<float>(p.lo)), hi = Vec::splat(static_cast<float>(p.hi));
  const Vec::F one = Vec::splat(1.0f), minus_one = Vec::splat(-1.0f), zero = Vec::zero();
  if (p.bipolar) {
    for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F x = H(v[0]), s = H(v[1]), z = H(v[2]);
      const Vec::F y = H(Vec::add_first_nan(H(Vec::div(x, s)), z));
      const Vec::F b = Vec::select(Vec::ge(y, zero), one, minus_one);
      return H(Vec::mul_first_nan(H(Vec::sub(b, z)), s));
    });
    return;
  }
  for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
    const Vec::F x = H(v[0]), s = H(v[1]), z = H(v[2]);
    Vec::F y = H(Vec::add_first_nan(H(Vec::div(x, s)), z));
    y = Vec::select(Vec::gt(y, hi), hi, y);
    y = Vec::select(Vec::lt(y, lo), lo, y);
    y = round(y);
    return H(Vec::mul_first_nan(H(Vec::sub(y, z)), s));
  });
}

void int_quant_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const IntQuantParams*>(params);
  if (p.half_steps) {  // float16 work, every rounding mode in its float16 form
    with_vector_rounding<true>(p.mode, [&](const auto& round) POLYQUANT_ALWAYS_INLINE { int_quant_rows<true>(p, a, round); });
    return;
  }
  if (p.divide_as != WorkType::kF32 || p.add_as != WorkType::kF32) {  // mixed precisions: rare
    ref::int_quant_f32(params, a);
    return;
  }
  with_vector_rounding(p.mode, [&](const auto& round) POLYQUANT_ALWAYS_INLINE { int_quant_rows<false>(p, a, round); });
}

// ---- BipolarQuant ----------------------------------------------------------------------------
template <bool kHalf>
void bipolar_quant_rows(const RowArgs& a) {
  const Vec::F one = Vec::splat(1.0f), minus_one = Vec::splat(-1.0f), zero = Vec::zero();
  for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
    return half_step<kHalf>(Vec::mul(Vec::select(Vec::ge(half_step<kHalf>(v[0]), zero), one, minus_one), half_step<kHalf>(v[1])));
  });
}

void bipolar_quant_f32(const void* params, const RowArgs& a) {
  if (static_cast<const BipolarQuantParams*>(params)->half_steps) bipolar_quant_rows<true>(a);
  else bipolar_quant_rows<false>(a);
}

// ---- Trunc v1 / v2 ---------------------------------------------------------------------------
// y / t for the power-of-two truncation scale t: when t is one broadcast value 2^k with 2^-k a
// normal float32, y * 2^-k rounds the same real number once, so it equals the division bit for bit
// and spares a divider pass. Any other t (inf, 0, subnormal reciprocal, per-element) divides.
inline bool exact_inverse_power_of_two(const RowArgs& a, int operand, float* inverse) {
  if (!a.is_broadcast(operand)) return false;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(a.input<float>(operand)[0]);
  const std::uint32_t biased = bits >> 23;  // sign bit must be clear: positive powers only
  if ((bits & 0x7fffffu) != 0 || biased < 1 || biased > 253) return false;
  *inverse = std::bit_cast<float>((254u - biased) << 23);
  return true;
}

// kHalf: the float16 spec (trunc_v1_element<Half>), every operand and step rounded to float16
// (rint and the rounding of an integer-valued or float16 value are float16 values already).
template <bool kInverse, bool kHalf, class Round>
inline void trunc_v1_row(const RowArgs& a, float inverse, const Round& round) {
  auto H = [](Vec::F v) POLYQUANT_ALWAYS_INLINE { return half_step<kHalf>(v); };
  const Vec::F inv = Vec::splat(inverse);
  for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
    const Vec::F x = H(v[0]), s = H(v[1]), z = H(v[2]);
    Vec::F y = Vec::rint(H(Vec::add_first_nan(H(Vec::div(x, s)), z)));
    y = round(H(kInverse ? Vec::mul(y, inv) : Vec::div(y, H(v[3]))));
    return H(Vec::mul_first_nan(H(Vec::sub(y, z)), s));
  });
}

// Shared entry of the Trunc kernels: mixed working precisions go to the spec; a power-of-two
// truncation scale with an exact inverse multiplies. float16 work (TruncParams::half_steps)
// divides (a float32 scale need not be a float16 value: the spec rounds it first), with every
// rounding mode in its float16 form.
template <class Row>
inline void trunc_dispatch(const void* params, const RowArgs& a, RowKernel reference, Row&& row) {
  const auto& p = *static_cast<const TruncParams*>(params);
  if (p.half_steps) {
    with_vector_rounding<true>(p.mode, [&](const auto& round) POLYQUANT_ALWAYS_INLINE {
      row.template operator()<false, true>(0.0f, round);
    });
    return;
  }
  if (p.divide_as != WorkType::kF32 || p.add_as != WorkType::kF32) {
    reference(params, a);
    return;
  }
  float inverse = 0.0f;
  const bool use_inverse = exact_inverse_power_of_two(a, 3, &inverse);
  with_vector_rounding(p.mode, [&](const auto& round) POLYQUANT_ALWAYS_INLINE {
    if (use_inverse) row.template operator()<true, false>(inverse, round);
    else row.template operator()<false, false>(inverse, round);
  });
}

void trunc_v1_f32(const void* params, const RowArgs& a) {
  trunc_dispatch(params, a, ref::trunc_v1_f32, [&]<bool kInverse, bool kHalf>(float inverse, const auto& round) {
    trunc_v1_row<kInverse, kHalf>(a, inverse, round);
  });
}

template <bool kInverse, bool kHalf, class Round>
inline void trunc_v2_row(const RowArgs& a, float inverse, const Round& round) {
  auto H = [](Vec::F v) POLYQUANT_ALWAYS_INLINE { return half_step<kHalf>(v); };
  const Vec::F inv = Vec::splat(inverse);
  for_each_vector<8>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
    const Vec::F lo = H(v[5]), hi = H(v[6]);
    Vec::F y = Vec::rint(H(Vec::add_first_nan(H(Vec::div(H(v[0]), H(v[1]))), H(v[2]))));
    y = H(kInverse ? Vec::mul(y, inv) : Vec::div(y, H(v[3])));
    y = Vec::select(Vec::gt(y, hi), hi, y);
    y = Vec::select(Vec::lt(y, lo), lo, y);
    y = round(y);
    return H(Vec::mul_first_nan(H(Vec::sub(y, H(v[7]))), H(v[4])));
  });
}

void trunc_v2_f32(const void* params, const RowArgs& a) {
  trunc_dispatch(params, a, ref::trunc_v2_f32, [&]<bool kInverse, bool kHalf>(float inverse, const auto& round) {
    trunc_v2_row<kInverse, kHalf>(a, inverse, round);
  });
}

// ---- FloatQuant ------------------------------------------------------------------------------
// floor(log2f(a)) equals the biased exponent of a except just below a power of two, where log2f
// may round up to the next integer. Lanes whose mantissa lies in the top 2^11 codes of a binade
// (and inf/NaN lanes, and lanes whose internal scale would be subnormal or overflow) are handed to
// the scalar spec; everywhere else the exponent field is exact, which the exhaustive test over all
// float32 values checks. With an integral m and 1 - bias - m, the whole exponent computation
// (floor(log2) - m, the maximum with the subnormal floor, 2^e and 2^-e) is exact integer work.
inline constexpr std::int32_t kLog2ExactMantissaLimit = (1 << 23) - (1 << 11);

// float16 work (FloatQuantParams::half_steps): numpy's float16 log2 is float16(log2f(v)), which
// rounds up to the next integer from a significand that depends on the binade (a few of the top
// codes of the outer binades: measure_floor_log2_round_up_f16). The row looks the binade's last
// significand with floor(log2) = exponent up in this table, indexed by the float16 biased exponent.
inline const std::int32_t* half_floor_log2_last_kept() {
  static const std::array<std::int32_t, 32> table = [] {
    std::uint16_t first_up[32];
    measure_floor_log2_round_up_f16(first_up);
    std::array<std::int32_t, 32> t{};
    for (int b = 0; b < 32; ++b) t[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(first_up[b]) - 1;
    return t;
  }();
  return table.data();
}

// The scalar spec's clipped value for the lanes in `lanes_mask`, written into `c` (the vector
// row's rare lanes: see kLog2ExactMantissaLimit). Out of line: the row has hundreds of
// instantiations (modes x outputs x overflow x layouts), and each carries a call, not a copy.
// kHalf: the float16 spec, on the operands rounded to float16 (its clipped value is a float16 value,
// +-M, +-inf or NaN: a float32).
template <bool kHalf>
__attribute__((noinline)) inline void float_quant_scalar_lanes(RoundingMode mode, unsigned lanes_mask, const float* x, const float* s,
                                                        const float* min_exp, const float* max_value, bool per_element,
                                                        double max_d, const FloatQuantParams& p, float* c) {
  with_rounding_mode(mode, [&]<RoundingMode kMode>() {
    for (int l = 0; l < Vec::kLanes; ++l) {
      if ((lanes_mask >> l) & 1u) {
        const double lane_max = per_element ? static_cast<double>(max_value[l]) : max_d;
        if constexpr (kHalf) {
          c[l] = static_cast<float>(float_quant_clipped<kMode, Half>(Half(x[l]), Half(s[l]), Half(min_exp[l]), lane_max, p));
        } else {
          c[l] = static_cast<float>(float_quant_clipped<kMode, float>(x[l], s[l], min_exp[l], lane_max, p));
        }
      }
    }
  });
}

// kCheckRange: the exponent e may leave [-126, 126] (a very small subnormal floor, a floor above
// 126, or m = 0).
// kHalf: float16 work (FloatQuantParams::half_steps), the float16 spec on float32 lanes: x and the
// scale rounded to float16, and every float16 operation's result (x / s, |xs| + tiny, the quotient
// by 2^e, the product) rounded to float16 (half_step); floor(log2) by the table above. 2^e is a
// float16 value for e in [-24, 15] (subnormal below -14), which the range check keeps; there the
// float32 quotient xs * 2^-e is exact, so rounding it to float16 is float16's division. The other
// steps are exact integer work as in float32.
// kScaleInverse: the scale is one power of two, so x / scale is x * (1 / scale) bit for bit.
// kOverflow: saturate (the common case, its own instantiation), or go beyond the range: to +-inf
// in a format with infinities, else to NaN (one instantiation for both, the choice per row in
// splat constants; it costs two selects per vector on the rarer non-saturating formats).
// Out: FloatOut writes float32(c * s); WideProductOut writes the reference's float64 c * s.
enum class Overflow { kSaturate, kBeyondRange };

// kPerElement: min_exp and M are vector operands 2 and 3 (float32, M exact in float32, min_exp
// integral in [-1000, 1000]: float_quant_per_element checks) instead of the row's broadcast
// min_exp and max_value; the math is the same.
template <bool kCheckRange, bool kScaleInverse, Overflow kOverflow, class Out, bool kPerElement = false, bool kHalf = false,
          class Round>
inline void float_quant_row(const RowArgs& a, const FloatQuantParams& p, std::int32_t m, std::int32_t min_exp,
                            float max_value, float scale_inverse, const Out& policy, const Round& round) {
  static_assert(!kPerElement || kCheckRange);
  static_assert(!kHalf || (kCheckRange && !kScaleInverse && !kPerElement));
  auto H = [](Vec::F v) POLYQUANT_ALWAYS_INLINE { return half_step<kHalf>(v); };
  const Vec::F inv_s = Vec::splat(scale_inverse);
  const Vec::F tiny = Vec::splat(kHalf ? 6.103515625e-05f : 1.17549435e-38f);  // finfo.tiny: 2^-14, 2^-126
  const std::int32_t* last_kept = kHalf ? half_floor_log2_last_kept() : nullptr;
  const Vec::I half_bias_shift = Vec::splat_i(127 - 15), five_bits = Vec::splat_i(31), ten_bits = Vec::splat_i(0x3ff);
  const Vec::I exponent_offset = Vec::splat_i(127 + m), min_e_splat = Vec::splat_i(min_exp);
  const Vec::I mantissa_mask = Vec::splat_i(0x7fffff), bias = Vec::splat_i(127);
  const Vec::I last_exact = Vec::splat_i(kLog2ExactMantissaLimit - 1), finite_limit = Vec::splat_i(0x7f7fffff);
  const Vec::I e_hi = Vec::splat_i(kHalf ? 15 : 126), e_lo = Vec::splat_i(kHalf ? -24 : -126);
  // The clip range [lo, M]: lo = -M (a -0.0 for M = +0.0 keeps numpy's sign), or +0.0 unsigned.
  const Vec::F max_splat = Vec::splat(max_value);
  const Vec::F minus_one = Vec::splat(-1.0f);
  const bool is_signed = p.is_signed;
  // Beyond the range (non-saturating): +-inf where the format has infinities, NaN where not.
  const Vec::F nan = Vec::splat(__builtin_nanf(""));
  const Vec::F above = p.has_inf ? Vec::splat(__builtin_inff()) : nan;
  const Vec::F below = p.has_inf ? Vec::splat(-__builtin_inff()) : nan;
  const Vec::M infinite_q_is_nan = all_lanes(!p.has_inf);
  const float min_exp_f = static_cast<float>(min_exp);
  const double max_d = static_cast<double>(max_value);
  for_each_vector<kPerElement ? 4 : 2, Out>(a, [=, &p](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
    const Vec::I min_e = kPerElement ? Vec::to_int(v[2]) : min_e_splat;
    const Vec::F max_v = kPerElement ? v[3] : max_splat;
    const Vec::F min_v = is_signed ? Vec::mul(max_v, minus_one) : Vec::zero();
    const Vec::F s = H(v[1]);
    const Vec::F xs = kScaleInverse ? Vec::mul(v[0], inv_s) : H(Vec::div(H(v[0]), s));
    const Vec::I mag = Vec::bits(H(Vec::add(Vec::abs(xs), tiny)));
    Vec::M scalar_lanes;
    Vec::I biased_floor;  // floor(log2(mag)) + 127
    if constexpr (kHalf) {
      // A float16 value's biased exponent is the float32 one less 112 (its index in the table,
      // masked: inf and NaN lanes go to the spec), its significand the float32 one's top 10 bits.
      scalar_lanes = Vec::gt_i(mag, finite_limit);
      const Vec::I exponent = Vec::shr_i<23>(mag);
      const Vec::I index = Vec::and_i(Vec::sub_i(exponent, half_bias_shift), five_bits);
      const Vec::M rounds_up = Vec::gt_i(Vec::and_i(Vec::shr_i<13>(mag), ten_bits), Vec::lookup32_i(last_kept, index));
      biased_floor = Vec::select_i(rounds_up, Vec::add_i(exponent, Vec::splat_i(1)), exponent);
    } else {
      scalar_lanes = Vec::mask_or(Vec::gt_i(mag, finite_limit), Vec::gt_i(Vec::and_i(mag, mantissa_mask), last_exact));
      biased_floor = Vec::shr_i<23>(mag);
    }
    const Vec::I e = Vec::max_i(Vec::sub_i(biased_floor, exponent_offset), min_e);
    if constexpr (kCheckRange) {
      scalar_lanes = Vec::mask_or(scalar_lanes, Vec::mask_or(Vec::gt_i(e, e_hi), Vec::gt_i(e_lo, e)));
    }
    // xs / 2^e == xs * 2^-e bit for bit: both round the same real number once, and 2^-e is exact.
    const Vec::F internal_scale = Vec::from_bits(Vec::shl_i<23>(Vec::add_i(e, bias)));
    const Vec::F inverse_scale = Vec::from_bits(Vec::shl_i<23>(Vec::sub_i(bias, e)));
    const Vec::F q = H(Vec::mul(internal_scale, round(H(Vec::mul(xs, inverse_scale)))));
    // np.clip(q, lo, M) = min(max(q, lo), M), keeping q on ties: max/min return their second
    // operand when the first is not strictly greater/less, and for NaN, so a NaN q passes through.
    // (NaN bounds never reach this path.)
    Vec::F c = Vec::min(max_v, Vec::max(min_v, q));
    if constexpr (kOverflow == Overflow::kBeyondRange) {
      // The reference assigns `above` to q > M, then `below` to q < lo: with lo > M (a negative M)
      // both hold and `below` wins. Without infinities an infinite q is NaN too.
      c = Vec::select(Vec::lt(q, min_v), below, Vec::select(Vec::gt(q, max_v), above, c));
      c = Vec::select(Vec::isinf(q), Vec::select(infinite_q_is_nan, nan, c), c);
    }
    if (const unsigned lanes_mask = Vec::mask_bits(scalar_lanes); lanes_mask != 0) [[unlikely]] {
      // The clipped value is a float32 (q, +-M with M a float32, +-inf or NaN), so the scalar
      // spec's lanes fit the vector and share the product below.
      alignas(64) float xv[Vec::kLanes], sv[Vec::kLanes], cv[Vec::kLanes], ev[Vec::kLanes], mv[Vec::kLanes];
      Vec::storeu(xv, v[0]);
      Vec::storeu(sv, s);
      Vec::storeu(cv, c);
      Vec::storeu(ev, kPerElement ? v[2] : Vec::splat(min_exp_f));
      Vec::storeu(mv, max_v);
      float_quant_scalar_lanes<kHalf>(round.mode, lanes_mask, xv, sv, ev, mv, kPerElement, max_d, p, cv);
      c = Vec::loadu(cv);
    }
    if constexpr (std::is_same_v<Out, WideProductOut>) {
      return WideProduct{c, s};
    } else if constexpr (std::is_same_v<Out, FloatOut>) {
      return Vec::mul_first_nan(c, s);  // the spec's clipped * s (both can be NaN)
    } else {
      return c;  // ScaledOut multiplies by the float64 factor
    }
  }, policy);
}

// Per-element min_exp and M (FloatQuant with per-element exponent widths, biases or max_val): in
// chunks, M is narrowed to float32 and min_exp checked integral in [-1000, 1000] (a vectorized
// pass over the chunk); a chunk where any M is not a float32 value (or NaN) or any min_exp is not
// such an integer goes to the spec, the others to the vector row with operands 2 and 3.
template <class Out>
inline void float_quant_per_element(const RowArgs& a, const FloatQuantParams& p, const Out& policy) {
  constexpr std::int64_t kChunk = 1024;
  alignas(64) float limits[kChunk];
  const auto m = static_cast<std::int32_t>(p.mantissa_bits);
  const std::size_t out_size = p.double_output ? sizeof(double) : sizeof(float);
  for (std::int64_t b = 0; b < a.n; b += kChunk) {
    const std::int64_t n = std::min(kChunk, a.n - b);
    RowArgs c = a;
    c.n = n;
    c.out = static_cast<unsigned char*>(a.out) + b * static_cast<std::int64_t>(out_size);
    for (int k = 0; k < 3; ++k) {
      if (!a.is_broadcast(k)) c.in[static_cast<std::size_t>(k)] = a.input<float>(k) + b;
    }
    const double* max_d = a.input<double>(3) + (a.is_broadcast(3) ? 0 : b);
    c.in[3] = max_d;
    const float* min_exp = c.input<float>(2);
    const std::int64_t n_max = a.is_broadcast(3) ? 1 : n, n_min = a.is_broadcast(2) ? 1 : n;
    // (Loops the compiler vectorizes: flags accumulate with |, locals for the bound.)
    unsigned inexact = 0;
    for (std::int64_t i = 0, end = n_max; i < end; ++i) {
      limits[i] = static_cast<float>(max_d[i]);
      inexact |= static_cast<unsigned>(!(static_cast<double>(limits[i]) == max_d[i]));  // NaN too
    }
    for (std::int64_t i = 0, end = n_min; i < end; ++i) {
      // e + 1.5 * 2^23 - 1.5 * 2^23 == e: e is an integer (for |e| < 2^22; NaN fails)
      const float e = min_exp[i];
      const float shifted = e + 12582912.0f;
      inexact |= static_cast<unsigned>(!((e >= -1000.0f) & (e <= 1000.0f) & ((shifted - 12582912.0f) == e)));
    }
    if (inexact != 0) {
      ref::float_quant_f32(&p, c);
      continue;
    }
    c.in[3] = limits;
    with_vector_rounding(p.mode, [&](const auto& round) POLYQUANT_ALWAYS_INLINE {
      if (!p.saturation) {
        float_quant_row<true, false, Overflow::kBeyondRange, Out, true>(c, p, m, 0, 0.0f, 0.0f, policy, round);
      } else {
        float_quant_row<true, false, Overflow::kSaturate, Out, true>(c, p, m, 0, 0.0f, 0.0f, policy, round);
      }
    });
  }
}

void float_quant_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FloatQuantParams*>(params);
  const bool integral_m = p.mantissa_bits >= 0 && p.mantissa_bits <= 64 &&
                          p.mantissa_bits == static_cast<double>(static_cast<int>(p.mantissa_bits));
  if (!(a.is_broadcast(2) && a.is_broadcast(3)) && !p.half_steps && p.xs_as == WorkType::kF32 && integral_m) {
    if (p.has_product_scale && p.double_output) float_quant_per_element(a, p, ScaledOut<double>{p.product_scale});
    else if (p.has_product_scale) float_quant_per_element(a, p, ScaledOut<float>{p.product_scale});
    else if (p.double_output) float_quant_per_element(a, p, WideProductOut{});
    else float_quant_per_element(a, p, FloatOut{});
    return;
  }
  // The integer exponent path needs one broadcast format per row with integral m and subnormal
  // floor, a limit M that float32 holds (and is not NaN: np.clip's NaN bound is the spec's job),
  // and X / scale in float32 (or all of it float16 work); anything else is rare and goes to the
  // spec.
  const bool fast = p.max_fits_float32 && (p.half_steps || p.xs_as == WorkType::kF32) && a.is_broadcast(2) &&
                    a.is_broadcast(3) && integral_m;
  const float min_exp = fast ? a.input<float>(2)[0] : 0.0f;
  const double max_d = fast ? a.input<double>(3)[0] : 0.0;
  if (!fast || !(min_exp >= -1000.0f && min_exp <= 1000.0f) || min_exp != static_cast<float>(static_cast<int>(min_exp)) ||
      std::isnan(max_d)) {
    ref::float_quant_f32(params, a);
    return;
  }
  const auto m = static_cast<std::int32_t>(p.mantissa_bits);
  const auto min_e = static_cast<std::int32_t>(min_exp);  // an integer of [-1000, 1000]: a float16 value too
  const auto max_value = static_cast<float>(max_d);
  // e = max(exponent - m, min_e) leaves the normal range when the floor does or when m < 1.
  const bool check_range = min_e < -126 || min_e > 126 || m < 1;
  float scale_inverse = 0.0f;
  const bool use_inverse = !p.half_steps && exact_inverse_power_of_two(a, 1, &scale_inverse);
  auto run_out = [&]<class Out>(const Out& policy) {
    auto rows = [&]<bool kHalf>() {
      with_vector_rounding<kHalf>(p.mode, [&](const auto& round) POLYQUANT_ALWAYS_INLINE {
        auto run = [&]<bool kCheckRange, bool kInverse>() {
          if (p.saturation) {
            float_quant_row<kCheckRange, kInverse, Overflow::kSaturate, Out, false, kHalf>(a, p, m, min_e, max_value,
                                                                                          scale_inverse, policy, round);
          } else {
            float_quant_row<kCheckRange, kInverse, Overflow::kBeyondRange, Out, false, kHalf>(a, p, m, min_e, max_value,
                                                                                             scale_inverse, policy, round);
          }
        };
        // An out-of-range exponent floor is rare: that row divides by the scale even where it could
        // multiply by its inverse (the same bits), which spares an instantiation. float16 work
        // always checks its narrower range, and divides.
        if constexpr (kHalf) {
          run.template operator()<true, false>();
        } else {
          if (check_range) run.template operator()<true, false>();
          else if (use_inverse) run.template operator()<false, true>();
          else run.template operator()<false, false>();
        }
      });
    };
    if (p.half_steps) rows.template operator()<true>();
    else rows.template operator()<false>();
  };
  // A weak Python-float scale that float32 does not hold multiplies as a float64 factor.
  if (p.has_product_scale && p.double_output) run_out(ScaledOut<double>{p.product_scale});
  else if (p.has_product_scale) run_out(ScaledOut<float>{p.product_scale});
  else if (p.double_output) run_out(WideProductOut{});
  else run_out(FloatOut{});
}
