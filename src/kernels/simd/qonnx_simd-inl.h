// float32 SIMD kernels of the QONNX ops, written once against the `Vec` vocabulary and compiled
// per kernel set (avx2/, avx512/) inside that set's namespace. Each body is the vector form of the
// per-element spec in qonnx_kernels.h, operation for operation. Include after defining `Vec`.
//
// No include guard: meant to be included once per kernel-set translation unit.

// Vector bodies are lambdas; they must be inlined into the row loop or every vector pays a call.
#define POLYQUANT_ALWAYS_INLINE __attribute__((always_inline))

// numpy.sign in vector form: +1, -1, +0 for zeros, NaN for NaN.
inline Vec::F sign_v(Vec::F x) {
  const Vec::F zero = Vec::zero();
  Vec::F s = Vec::select(Vec::isnan(x), x, zero);
  s = Vec::select(Vec::lt(x, zero), Vec::splat(-1.0f), s);
  return Vec::select(Vec::gt(x, zero), Vec::splat(1.0f), s);
}

template <RoundingMode kMode>
inline Vec::F round_v(Vec::F x) {
  if constexpr (kMode == RoundingMode::kHalfEven) {
    return Vec::rint(x);
  } else if constexpr (kMode == RoundingMode::kCeil) {
    return Vec::ceil(x);
  } else if constexpr (kMode == RoundingMode::kFloor) {
    return Vec::floor(x);
  } else if constexpr (kMode == RoundingMode::kUp) {
    return Vec::mul(sign_v(x), Vec::ceil(Vec::abs(x)));
  } else if constexpr (kMode == RoundingMode::kDown) {
    return Vec::trunc(x);
  } else if constexpr (kMode == RoundingMode::kHalfUp) {
    return Vec::mul(sign_v(x), Vec::floor(Vec::add(Vec::abs(x), Vec::splat(0.5f))));
  } else {
    return Vec::mul(sign_v(x), Vec::ceil(Vec::sub(Vec::abs(x), Vec::splat(0.5f))));
  }
}

// Drives a row: loads kN operands (contiguous or broadcast), applies `body` to whole vectors and
// stores. Partial vectors (the tail, and the head peeled for aligned streaming stores) go through
// the same body on a zero-padded copy, so every element sees identical arithmetic.
template <int kN, class Body>
inline void for_each_vector(const RowArgs& a, Body&& body) {
  constexpr int L = Vec::kLanes;
  const float* src[kN];
  Vec::F splats[kN];
  for (int k = 0; k < kN; ++k) {
    src[k] = a.input<float>(k);
    splats[k] = Vec::splat(src[k][0]);
  }
  float* out = static_cast<float*>(a.out);
  const std::int64_t n = a.n;

  auto partial = [&](std::int64_t j, std::int64_t count) {
    alignas(64) float buf[kN][L];
    alignas(64) float res[L];
    Vec::F v[kN];
    for (int k = 0; k < kN; ++k) {
      if (a.is_broadcast(k)) {
        v[k] = splats[k];
        continue;
      }
      for (int l = 0; l < L; ++l) buf[k][l] = l < count ? src[k][j + l] : 0.0f;
      v[k] = Vec::loadu(buf[k]);
    }
    Vec::storeu(res, body(v));
    for (std::int64_t l = 0; l < count; ++l) out[j + l] = res[l];
  };

  std::int64_t j = 0;
  const bool stream = a.stream && (reinterpret_cast<std::uintptr_t>(out) % sizeof(float)) == 0;
  if (stream) {
    const std::uintptr_t misalign = reinterpret_cast<std::uintptr_t>(out) % (L * sizeof(float));
    if (misalign != 0) {
      const std::int64_t head = std::min<std::int64_t>(n, (L * sizeof(float) - misalign) / sizeof(float));
      partial(0, head);
      j = head;
    }
  }
  Vec::F v[kN];
  constexpr std::uint32_t kParamsMask = ((1u << kN) - 1u) & ~1u;
  if ((a.broadcast_mask & kParamsMask) == kParamsMask) {
    // Per-tensor and per-channel rows, the common case: parameters stay in registers.
    for (int k = 1; k < kN; ++k) v[k] = splats[k];
    if (stream) {
      for (; j + L <= n; j += L) {
        v[0] = Vec::loadu(src[0] + j);
        Vec::stream(out + j, body(v));
      }
    } else {
      for (; j + L <= n; j += L) {
        v[0] = Vec::loadu(src[0] + j);
        Vec::storeu(out + j, body(v));
      }
    }
  } else {
    for (; j + L <= n; j += L) {
      for (int k = 0; k < kN; ++k) v[k] = a.is_broadcast(k) ? splats[k] : Vec::loadu(src[k] + j);
      const Vec::F r = body(v);
      if (stream) Vec::stream(out + j, r);
      else Vec::storeu(out + j, r);
    }
  }
  if (j < n) partial(j, n - j);
  if (stream) Vec::fence();
}

// ---- IntQuant --------------------------------------------------------------------------------
void int_quant_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const IntQuantParams*>(params);
  if (p.divide_as != WorkType::kF32 || p.add_as != WorkType::kF32) {  // mixed precisions: rare
    ref::int_quant_f32(params, a);
    return;
  }
  const Vec::F lo = Vec::splat(static_cast<float>(p.lo)), hi = Vec::splat(static_cast<float>(p.hi));
  const Vec::F one = Vec::splat(1.0f), minus_one = Vec::splat(-1.0f), zero = Vec::zero();
  if (p.bipolar) {
    for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F y = Vec::add(Vec::div(v[0], v[1]), v[2]);
      const Vec::F b = Vec::select(Vec::ge(y, zero), one, minus_one);
      return Vec::mul(Vec::sub(b, v[2]), v[1]);
    });
    return;
  }
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      Vec::F y = Vec::add(Vec::div(v[0], v[1]), v[2]);
      y = Vec::select(Vec::gt(y, hi), hi, y);
      y = Vec::select(Vec::lt(y, lo), lo, y);
      y = round_v<kMode>(y);
      return Vec::mul(Vec::sub(y, v[2]), v[1]);
    });
  });
}

// ---- BipolarQuant ----------------------------------------------------------------------------
void bipolar_quant_f32(const void*, const RowArgs& a) {
  const Vec::F one = Vec::splat(1.0f), minus_one = Vec::splat(-1.0f), zero = Vec::zero();
  for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
    return Vec::mul(Vec::select(Vec::ge(v[0], zero), one, minus_one), v[1]);
  });
}

// ---- Trunc v1 / v2 ---------------------------------------------------------------------------
void trunc_v1_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const TruncParams*>(params);
  if (p.divide_as != WorkType::kF32 || p.add_as != WorkType::kF32) {
    ref::trunc_v1_f32(params, a);
    return;
  }
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      Vec::F y = Vec::rint(Vec::add(Vec::div(v[0], v[1]), v[2]));
      y = round_v<kMode>(Vec::div(y, v[3]));
      return Vec::mul(Vec::sub(y, v[2]), v[1]);
    });
  });
}

void trunc_v2_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const TruncParams*>(params);
  if (p.divide_as != WorkType::kF32 || p.add_as != WorkType::kF32) {
    ref::trunc_v2_f32(params, a);
    return;
  }
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for_each_vector<8>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      Vec::F y = Vec::rint(Vec::add(Vec::div(v[0], v[1]), v[2]));
      y = Vec::div(y, v[3]);
      y = Vec::select(Vec::gt(y, v[6]), v[6], y);
      y = Vec::select(Vec::lt(y, v[5]), v[5], y);
      y = round_v<kMode>(y);
      return Vec::mul(Vec::sub(y, v[7]), v[4]);
    });
  });
}

// ---- FloatQuant ------------------------------------------------------------------------------
// floor(log2f(a)) equals the biased exponent of a except just below a power of two, where log2f
// may round up to the next integer. Lanes whose mantissa lies in the top 2^11 codes of a binade
// (and inf/NaN lanes, and lanes whose internal scale would be subnormal or overflow) are handed to
// the scalar spec; everywhere else the exponent field is exact, which the exhaustive test over all
// float32 values checks.
inline constexpr std::int32_t kLog2ExactMantissaLimit = (1 << 23) - (1 << 11);

void float_quant_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FloatQuantParams*>(params);
  // Per-element formats, or a limit M that float32 cannot hold, are rare: the spec handles them.
  if (!p.max_fits_float32 || !a.is_broadcast(2) || !a.is_broadcast(3)) {
    ref::float_quant_f32(params, a);
    return;
  }
  const float min_exp_s = a.input<float>(2)[0];
  const double max_s = a.input<double>(3)[0];
  const Vec::F min_exp = Vec::splat(min_exp_s);
  const Vec::F max_v = Vec::splat(static_cast<float>(max_s));
  const Vec::F min_v = Vec::mul(max_v, Vec::splat(-1.0f));  // -M, keeping -0.0 for M = +0.0
  const Vec::F tiny = Vec::splat(1.17549435e-38f);
  const Vec::F m = Vec::splat(static_cast<float>(p.mantissa_bits));
  const Vec::F inf = Vec::splat(__builtin_inff()), nan = Vec::splat(__builtin_nanf(""));
  with_rounding_mode(p.mode, [&]<RoundingMode kMode>() {
    for_each_vector<2>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F xs = Vec::div(v[0], v[1]);
      const Vec::F mag = Vec::add(Vec::abs(xs), tiny);
      const Vec::I mag_bits = Vec::bits(mag);
      const Vec::I biased = Vec::shr_i<23>(mag_bits);
      const Vec::I mantissa = Vec::and_i(mag_bits, Vec::splat_i(0x7fffff));
      Vec::M scalar_lanes = Vec::mask_or(Vec::gt_i(biased, Vec::splat_i(254)),
                                         Vec::gt_i(mantissa, Vec::splat_i(kLog2ExactMantissaLimit - 1)));
      Vec::F e = Vec::sub(Vec::to_float(Vec::add_i(biased, Vec::splat_i(-127))), m);
      e = Vec::select(Vec::gt(e, min_exp), e, min_exp);
      // 2^e and 2^-e for e in [-126, 126] built from exponent fields; other lanes go scalar.
      // xs / 2^e == xs * 2^-e bit for bit: both round the same real number once, and 2^-e is exact.
      scalar_lanes = Vec::mask_or(scalar_lanes, Vec::lt(e, Vec::splat(-126.0f)));
      scalar_lanes = Vec::mask_or(scalar_lanes, Vec::gt(e, Vec::splat(126.0f)));
      const Vec::I e_int = Vec::to_int(Vec::select(scalar_lanes, Vec::zero(), e));
      const Vec::F internal_scale = Vec::from_bits(Vec::shl_i<23>(Vec::add_i(e_int, Vec::splat_i(127))));
      const Vec::F inverse_scale = Vec::from_bits(Vec::shl_i<23>(Vec::sub_i(Vec::splat_i(127), e_int)));
      const Vec::F q = Vec::mul(internal_scale, round_v<kMode>(Vec::mul(xs, inverse_scale)));
      const Vec::M over = Vec::gt(q, max_v), under = Vec::lt(q, min_v);
      Vec::F c = Vec::select(over, max_v, Vec::select(under, min_v, q));
      if (!p.saturation) {
        if (p.has_inf) {
          c = Vec::select(over, inf, Vec::select(under, Vec::splat(-__builtin_inff()), c));
        } else if (p.has_nan) {
          c = Vec::select(Vec::mask_or(Vec::mask_or(over, under), Vec::isinf(q)), nan, c);
        }
      }
      Vec::F r = Vec::mul(c, v[1]);
      if (const unsigned lanes_mask = Vec::mask_bits(scalar_lanes); lanes_mask != 0) {
        alignas(64) float xv[Vec::kLanes], sv[Vec::kLanes], res[Vec::kLanes];
        Vec::storeu(xv, v[0]);
        Vec::storeu(sv, v[1]);
        Vec::storeu(res, r);
        for (int l = 0; l < Vec::kLanes; ++l) {
          if ((lanes_mask >> l) & 1u) res[l] = float_quant_element<kMode, float>(xv[l], sv[l], min_exp_s, max_s, p);
        }
        r = Vec::loadu(res);
      }
      return r;
    });
  });
}
