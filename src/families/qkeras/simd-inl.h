// float32 SIMD kernels of the QKeras quantizers, written once against the `Vec` vocabulary and
// compiled per kernel set inside that set's namespace. Each body is the vector form of the
// per-element spec in families/qkeras/kernels.h, operation for operation, inside the same flush-to-zero
// scope. Stochastic rounding (a Philox draw per element) and gradients run the scalar spec: they
// are training-time paths, not the bandwidth-bound inference the vector kernels are for.
//
// No include guard: meant to be included once per kernel-set translation unit.

#include "kernels/simd/row_loop-inl.h"

// tf.minimum / tf.maximum: NaN in either operand gives NaN (the first operand's when both are);
// equal operands (+0, -0) give the second.
inline Vec::F tf_min_v(Vec::F a, Vec::F b) { return Vec::select(Vec::isnan(a), a, Vec::select(Vec::lt(a, b), a, b)); }
inline Vec::F tf_max_v(Vec::F a, Vec::F b) { return Vec::select(Vec::isnan(a), a, Vec::select(Vec::gt(a, b), a, b)); }
inline Vec::F tf_clip_v(Vec::F t, Vec::F lo, Vec::F hi) { return tf_max_v(tf_min_v(t, hi), lo); }
// The clip in two instructions: x86's min(hi, t) is hi < t ? hi : t and max(lo, r) is
// lo > r ? lo : r, so a NaN t passes through both as through tf_clip_v. It differs from tf_clip_v
// only with a NaN bound, and on a tie (tf keeps the bound, x86 the value), which gives the same
// bits unless the tie is +0 against -0: so it equals tf_clip_v where neither bound is NaN or
// zero, or where the caller's use of the result erases the sign of a zero.
inline Vec::F min_max_clip_v(Vec::F t, Vec::F lo, Vec::F hi) { return Vec::max(lo, Vec::min(hi, t)); }
// XLA's clamp: the bound wins on NaN and on equality.
inline Vec::F xla_clip_v(Vec::F t, Vec::F lo, Vec::F hi) {
  t = Vec::select(Vec::gt(t, lo), t, lo);
  return Vec::select(Vec::lt(t, hi), t, hi);
}
// tf.sign: +1, -1, and x + 0 for +-0 (+0) and NaN (x).
inline Vec::F tf_sign_v(Vec::F x) {
  const Vec::F zero = Vec::zero();
  return Vec::select(Vec::gt(x, zero), Vec::splat(1.0f), Vec::select(Vec::lt(x, zero), Vec::splat(-1.0f), Vec::add(x, zero)));
}
// qk_nan_result: NaN lanes become x quieted (x + x carries x's payload and sign) where x is NaN,
// the default NaN 0xFFC00000 elsewhere.
inline Vec::F nan_result_v(Vec::F out, Vec::F x) {
  const Vec::F fallback = Vec::select(Vec::isnan(x), Vec::add(x, x), Vec::from_bits(Vec::splat_i(static_cast<std::int32_t>(kQkDefaultNanBits))));
  return Vec::select(Vec::isnan(out), fallback, out);
}
// 1 / s for lanes holding 2^k, k in [-126, 126] (the caller checked): the exponent field negated.
inline Vec::F reciprocal_pow2_v(Vec::F s) { return Vec::from_bits(Vec::sub_i(Vec::splat_i(0x7F000000), Vec::bits(s))); }
// a / d, as a product with d's exact reciprocal `inv` when there is one (HasInv: a
// std::bool_constant, so the choice is made once per row, outside the vector loop).
template <class HasInv>
POLYQUANT_ALWAYS_INLINE inline Vec::F div_by(Vec::F a, Vec::F d, HasInv, Vec::F inv) {
  if constexpr (HasInv::value) return Vec::mul(a, inv);
  else return Vec::div(a, d);
}
// a / s for a scale operand s, by its reciprocal when every scale is a power of two.
template <class Pow2Scales>
POLYQUANT_ALWAYS_INLINE inline Vec::F div_by_scale(Vec::F a, Vec::F s, Pow2Scales) {
  if constexpr (Pow2Scales::value) return Vec::mul(a, reciprocal_pow2_v(s));
  else return Vec::div(a, s);
}
// f(std::bool_constant<a>{}, ...): runtime flags as compile-time constants, for loop bodies that
// must not test them per vector.
template <class F>
POLYQUANT_ALWAYS_INLINE inline void with_flags(bool a, F&& f) {
  if (a) f(std::true_type{});
  else f(std::false_type{});
}
template <class F>
POLYQUANT_ALWAYS_INLINE inline void with_flags(bool a, bool b, F&& f) {
  with_flags(a, [&](auto fa) POLYQUANT_ALWAYS_INLINE { with_flags(b, [&](auto fb) POLYQUANT_ALWAYS_INLINE { f(fa, fb); }); });
}
template <class F>
POLYQUANT_ALWAYS_INLINE inline void with_flags(bool a, bool b, bool c, F&& f) {
  with_flags(a, b, [&](auto fa, auto fb) POLYQUANT_ALWAYS_INLINE { with_flags(c, [&](auto fc) POLYQUANT_ALWAYS_INLINE { f(fa, fb, fc); }); });
}
// _round_through: p + (-p + round_half_even(p)).
inline Vec::F round_through_v(Vec::F p) { return Vec::add(p, Vec::add(Vec::neg(p), Vec::rint(p))); }

struct BlendV {
  Vec::F q, one_minus_q;
  bool use_ste;
  explicit BlendV(const QkBlend& b) : q(Vec::splat(b.q)), one_minus_q(Vec::splat(b.one_minus_q)), use_ste(b.use_ste) {}
  POLYQUANT_ALWAYS_INLINE Vec::F operator()(Vec::F x, Vec::F xq) const {
    if (use_ste) return Vec::add(x, Vec::mul(q, Vec::add(Vec::neg(x), xq)));
    return Vec::add(Vec::mul(one_minus_q, x), Vec::mul(q, xq));
  }
};

// ---- quantized_bits, fixed point -------------------------------------------------------------
void qk_bits_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkBitsParams*>(params);
  if (p.stochastic.enabled || p.gradient) {
    ref::qk_bits_f32(params, a);
    return;
  }
  const ScopedFlushDenormals flush;
  const BlendV blend(p.blend);
  const Vec::F m = Vec::splat(p.m), m_i = Vec::splat(p.m_i), lo = Vec::splat(p.lo), hi = Vec::splat(p.hi);
  const Vec::F inv_m = Vec::splat(p.inv_m), inv_m_i = Vec::splat(p.inv_m_i);
  const Vec::F one = Vec::splat(1.0f), two = Vec::splat(2.0f);
  if (!p.binary) {
    // (lo = 0 where keep_negative is off: then the +-0 ties need tf's own choice)
    const bool nonzero_bounds = p.lo != 0.0f && p.hi != 0.0f && !std::isnan(p.lo) && !std::isnan(p.hi);
    with_flags(p.inv_m != 0.0f, p.inv_m_i != 0.0f, nonzero_bounds, [&](auto has_inv_m, auto has_inv_m_i, auto plain_clip) POLYQUANT_ALWAYS_INLINE {
      for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        const Vec::F scaled = div_by(Vec::mul(v[0], m), m_i, has_inv_m_i, inv_m_i);
        const Vec::F rounded = round_through_v(scaled);
        const Vec::F c = plain_clip ? min_max_clip_v(rounded, lo, hi) : tf_clip_v(rounded, lo, hi);
        const Vec::F xq = div_by(Vec::mul(m_i, c), m, has_inv_m, inv_m);
        return nan_result_v(blend(v[0], Vec::mul(v[1], xq)), v[0]);
      });
    });
  } else {
    const bool keep_negative = p.keep_negative;
    for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      Vec::F xq = tf_sign_v(v[0]);
      xq = Vec::add(xq, Vec::sub(one, Vec::abs(xq)));
      if (!keep_negative) xq = Vec::div(Vec::add(xq, one), two);
      return nan_result_v(blend(v[0], Vec::mul(v[1], xq)), v[0]);
    });
  }
}

// ---- quantized_bits, auto / auto_po2 final pass -----------------------------------------------
void qk_bits_auto_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkBitsAutoParams*>(params);
  if (p.gradient || (p.level_only && p.ls_term != LsTerm::kLevel)) {  // (terms: a device's search only)
    ref::qk_bits_auto_f32(params, a);
    return;
  }
  const ScopedFlushDenormals flush;
  const BlendV blend(p.blend);
  const Vec::F m = Vec::splat(p.m), m_i = Vec::splat(p.m_i), half_levels = Vec::splat(p.half_levels);
  const Vec::F inv_m = Vec::splat(p.inv_m), inv_m_i = Vec::splat(p.inv_m_i);
  const Vec::F half = Vec::splat(0.5f);
  const bool level_only = p.level_only, ls_quotient = p.ls_quotient, ls_po2 = p.ls_po2;
  with_flags(p.inv_m != 0.0f, p.inv_m_i != 0.0f, p.pow2_scales,
             [&](auto has_inv_m, auto has_inv_m_i, auto pow2_scales) POLYQUANT_ALWAYS_INLINE {
    if (level_only && ls_quotient) {
      // qk_bits_ls_quotient: float(0.0 + double(p)) is p + 0.0f, and z * z + 0.0f is z * z.
      const Vec::F zero = Vec::zero(), eps = Vec::splat(p.eps), nan = Vec::splat(std::numeric_limits<float>::quiet_NaN());
      auto quotient = [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        const Vec::F xs = div_by(v[0], m_i, has_inv_m_i, inv_m_i);
        const Vec::F level = Vec::floor(Vec::add(div_by_scale(Vec::abs(xs), v[1], pow2_scales), half));
        const Vec::F z = Vec::mul(tf_sign_v(xs), Vec::select(Vec::lt(level, half_levels), level, half_levels));
        const Vec::F q = Vec::div(Vec::add(Vec::mul(xs, z), zero), Vec::add(Vec::mul(z, z), eps));
        return Vec::select(Vec::isnan(q), nan, q);
      };
      if (ls_po2) {
        // po2_round_fast_bits(q + eps) on the bits: exponent field k (sign included) in 2 .. 252
        // and the mantissa outside the window give k << 23 (k + 1 above it), else 0.
        const Vec::I mantissa_mask = Vec::splat_i(0x7FFFFF), one_i = Vec::splat_i(1), zero_i = Vec::splat_i(0);
        const Vec::I two = Vec::splat_i(2), top = Vec::splat_i(252);
        const Vec::I lo = Vec::splat_i(static_cast<std::int32_t>(kPo2SlowLo)), hi = Vec::splat_i(static_cast<std::int32_t>(kPo2SlowHi));
        for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
          const Vec::I b = Vec::bits(Vec::add(quotient(v), eps));
          const Vec::I field = Vec::shr_i<23>(b), mantissa = Vec::and_i(b, mantissa_mask);
          const Vec::M above = Vec::gt_i(mantissa, hi);
          Vec::I r = Vec::shl_i<23>(Vec::add_i(field, Vec::select_i(above, one_i, zero_i)));
          r = Vec::select_i(Vec::mask_or(Vec::gt_i(lo, mantissa), above), r, zero_i);
          r = Vec::select_i(Vec::mask_or(Vec::gt_i(two, field), Vec::gt_i(field, top)), zero_i, r);
          return Vec::from_bits(r);
        });
        return;
      }
      for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE { return quotient(v); });
      return;
    }
    if (level_only) {
      for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        const Vec::F xs = div_by(v[0], m_i, has_inv_m_i, inv_m_i);
        const Vec::F level = Vec::floor(Vec::add(div_by_scale(Vec::abs(xs), v[1], pow2_scales), half));
        return nan_result_v(Vec::mul(tf_sign_v(xs), Vec::select(Vec::lt(level, half_levels), level, half_levels)), v[0]);
      });
      return;
    }
    auto quantized = [&](const Vec::F* v, Vec::F& scale) POLYQUANT_ALWAYS_INLINE {
      const Vec::F xs = div_by(v[0], m_i, has_inv_m_i, inv_m_i);
      const Vec::F level = Vec::floor(Vec::add(div_by_scale(Vec::abs(xs), v[1], pow2_scales), half));
      const Vec::F z = Vec::mul(tf_sign_v(xs), Vec::select(Vec::lt(level, half_levels), level, half_levels));
      scale = Vec::mul(v[1], m);
      const Vec::F full = Vec::mul(m_i, xs);
      return nan_result_v(blend(full, Vec::mul(scale, div_by(Vec::mul(m_i, z), m, has_inv_m, inv_m))), v[0]);
    };
    if (p.scale_out != nullptr) {
      // The reported scale s * m is the kernel's own `scale`: a second output, streamed with the first.
      for_each_vector<2, FloatOuts<2>>(
          a,
          [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            Vec::F scale;
            const Vec::F q = quantized(v, scale);
            return Vectors<2>{{q, scale}};
          },
          FloatOuts<2>{static_cast<const float*>(a.out), {p.scale_out}, {true}});
      return;
    }
    for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      Vec::F scale;
      return quantized(v, scale);
    });
  });
}

// ---- quantized_relu --------------------------------------------------------------------------
void qk_relu_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkReluParams*>(params);
  if (p.stochastic.enabled || p.gradient) {
    ref::qk_relu_f32(params, a);
    return;
  }
  const ScopedFlushDenormals flush;
  const Vec::F m_i = Vec::splat(p.m_i), zero = Vec::zero(), one = Vec::splat(1.0f);
  if (p.fast_inference) {
    const Vec::F p_factor = Vec::splat(p.fast_p_factor), factor = Vec::splat(p.fast_factor), ceiling = Vec::splat(p.fast_ceiling);
    for_each_vector<1>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      return Vec::mul(m_i, xla_clip_v(Vec::mul(Vec::rint(Vec::mul(v[0], p_factor)), factor), zero, ceiling));
    });
    return;
  }
  const BlendV blend(p.blend);
  const Vec::F m = Vec::splat(p.m), ns = Vec::splat(p.negative_slope), m_i_ns = Vec::splat(p.m_i_ns);
  const Vec::F neg_factor = Vec::splat(p.neg_factor), ceiling = Vec::splat(p.one_minus_inv_m);
  const Vec::F clip_value = Vec::splat(p.clip_value), upper_bound = Vec::splat(p.upper_bound);
  const Vec::F half = Vec::splat(0.5f), two = Vec::splat(2.0f), minus_one = Vec::splat(-1.0f);
  const Vec::F inv_m = Vec::splat(p.inv_m), inv_m_i = Vec::splat(p.inv_m_i);
  const bool leaky = p.leaky, negative_part = p.negative_part, sigmoid = p.sigmoid;
  const bool quantized_clip = p.quantized_clip, has_upper_bound = p.has_upper_bound, bound_output = p.bound_output;
  with_flags(p.inv_m != 0.0f, p.inv_m_i != 0.0f, [&](auto has_inv_m, auto has_inv_m_i) POLYQUANT_ALWAYS_INLINE {
    for_each_vector<1>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F x = v[0];
      const Vec::F companion = leaky ? Vec::select(Vec::gt(x, zero), x, Vec::mul(x, ns)) : tf_max_v(x, zero);
      Vec::F xu = companion;
      if (quantized_clip) xu = Vec::select(Vec::le(x, clip_value), companion, clip_value);
      else if (has_upper_bound) xu = Vec::select(Vec::le(x, upper_bound), companion, upper_bound);
      Vec::F xq;
      if (sigmoid) {
        const Vec::F scaled = Vec::mul(tf_clip_v(Vec::add(Vec::mul(half, div_by(x, m_i, has_inv_m_i, inv_m_i)), half), zero, one), m);
        xq = Vec::mul(m_i, tf_clip_v(Vec::sub(Vec::mul(two, div_by(round_through_v(scaled), m, has_inv_m, inv_m)), one), zero, ceiling));
        if (negative_part) {
          const Vec::F r = round_through_v(Vec::mul(scaled, ns));
          xq = Vec::add(xq, Vec::mul(m_i_ns, tf_clip_v(Vec::sub(Vec::mul(two, Vec::mul(r, neg_factor)), one), minus_one, zero)));
        }
      } else {
        const Vec::F scaled = div_by(Vec::mul(x, m), m_i, has_inv_m_i, inv_m_i);
        xq = Vec::mul(m_i, tf_clip_v(div_by(round_through_v(scaled), m, has_inv_m, inv_m), zero, ceiling));
        if (negative_part) {
          const Vec::F r = round_through_v(Vec::mul(scaled, ns));
          xq = Vec::add(xq, Vec::mul(m_i_ns, tf_clip_v(Vec::mul(r, neg_factor), minus_one, zero)));
        }
      }
      if (bound_output) xq = Vec::select(Vec::le(xq, upper_bound), xq, upper_bound);
      return nan_result_v(blend(xu, xq), x);
    });
  });
}

// ---- quantized_linear ------------------------------------------------------------------------
void qk_linear_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const QkLinearParams*>(params);
  if (p.stochastic.enabled || p.gradient || (p.level_only && p.ls_term != LsTerm::kLevel)) {
    ref::qk_linear_f32(params, a);
    return;
  }
  const ScopedFlushDenormals flush;
  const Vec::F clip_min = Vec::splat(p.clip_min), clip_max = Vec::splat(p.clip_max), shift = Vec::splat(p.shift);
  const Vec::F q = Vec::splat(p.blend.q);
  // The two-instruction clip even where a bound is 0 (keep_negative off): the one difference it
  // can make, -0 against +0 on a tie, never reaches an output, since the clipped value c only
  // enters as c - shift (-shift for either zero when shift is not 0, else a zero of c's sign)
  // and then round_through, which gives +0 for both zeros. NaN bounds (0 * inf for a huge bit
  // width) keep tf's clip.
  const bool plain_clip_exact = !std::isnan(p.clip_min) && !std::isnan(p.clip_max);
  with_flags(p.level_only, p.pow2_scales, plain_clip_exact, [&](auto level_only, auto pow2_scales, auto plain_clip) POLYQUANT_ALWAYS_INLINE {
    for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F t = div_by_scale(v[0], v[1], pow2_scales);
      const Vec::F c = plain_clip ? min_max_clip_v(t, clip_min, clip_max) : tf_clip_v(t, clip_min, clip_max);
      const Vec::F level = Vec::add(round_through_v(Vec::sub(c, shift)), shift);
      if constexpr (decltype(level_only)::value) return nan_result_v(level, v[0]);
      const Vec::F xq = Vec::mul(level, v[1]);
      return nan_result_v(Vec::add(v[0], Vec::mul(q, Vec::sub(xq, v[0]))), v[0]);
    });
  });
}
