// Thin float32 vector vocabulary for AVX2 (8 lanes). Only included by translation units compiled
// with the AVX2 flags.
#pragma once

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstdint>

namespace polyquant::detail::avx2 {

struct Vec {
  using F = __m256;
  using I = __m256i;
  using M = __m256;  // all-ones lanes are true
  static constexpr int kLanes = 8;

  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, F v) { _mm256_stream_ps(p, v); }  // p must be 32-byte aligned
  static F splat(float v) { return _mm256_set1_ps(v); }
  static F zero() { return _mm256_setzero_ps(); }

  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  // a * b with x86's rule for two NaN operands: the first operand's NaN, quieted (mul_first_nan
  // in core/scalar_math.h). The compiler treats a product as commutative and may swap the operands
  // of mul(); the instruction's operand order is spelled out here (AT&T: source 2, source 1,
  // destination), so this is one multiply instead of a NaN test, an add and a blend.
  static F mul_first_nan(F a, F b) {
    F r;
    asm("vmulps %2, %1, %0" : "=x"(r) : "x"(a), "xm"(b));
    return r;
  }
  // mul_first_nan of float64 lanes (the products stored as float64 below: a float32 result times
  // its scale, whose NaN may differ from the result's).
  static __m256d mul_first_nan_f64(__m256d a, __m256d b) {
    __m256d r;
    asm("vmulpd %2, %1, %0" : "=x"(r) : "x"(a), "xm"(b));
    return r;
  }
  // a + b with the same rule (add_first_nan, x86_add in core/scalar_math.h).
  static F add_first_nan(F a, F b) {
    F r;
    asm("vaddps %2, %1, %0" : "=x"(r) : "x"(a), "xm"(b));
    return r;
  }

  // min/max return the second operand when either is NaN (and for two zeros).
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }

  // Ordered, quiet comparisons: false whenever an operand is NaN, exactly like C++'s operators.
  static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M ge(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
  static M le(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static M isnan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M isinf(F a) { return _mm256_cmp_ps(abs(a), splat(__builtin_inff()), _CMP_EQ_OQ); }
  static M mask_or(M a, M b) { return _mm256_or_ps(a, b); }
  static M mask_and(M a, M b) { return _mm256_and_ps(a, b); }
  static unsigned mask_bits(M m) { return static_cast<unsigned>(_mm256_movemask_ps(m)); }
  static F select(M m, F if_true, F if_false) { return _mm256_blendv_ps(if_false, if_true, m); }

  static F rint(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F floor(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static F ceil(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
  static F trunc(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static F neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }  // flips the sign bit: -(+0) = -0
  static F abs(F a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }

  // Integer view of the lanes, for exponent manipulation.
  // Float lanes holding integers of int32 range to int32 (truncating; others are undefined).
  static I to_int(F a) { return _mm256_cvttps_epi32(a); }
  static I bits(F a) { return _mm256_castps_si256(a); }
  static F from_bits(I a) { return _mm256_castsi256_ps(a); }
  static I splat_i(std::int32_t v) { return _mm256_set1_epi32(v); }
  static I add_i(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub_i(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I max_i(I a, I b) { return _mm256_max_epi32(a, b); }
  static std::int32_t reduce_max_i(I a) {  // the largest lane: halves folded onto each other
    __m128i m = _mm_max_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(m);
  }
  static I min_u(I a, I b) { return _mm256_min_epu32(a, b); }  // lanes as uint32
  static std::uint32_t reduce_min_u(I a) {                        // the smallest lane, as uint32
    __m128i m = _mm_min_epu32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    m = _mm_min_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_min_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
  }
  static I and_i(I a, I b) { return _mm256_and_si256(a, b); }
  template <int kShift>
  static I shr_i(I a) { return _mm256_srli_epi32(a, kShift); }
  template <int kShift>
  static I shl_i(I a) { return _mm256_slli_epi32(a, kShift); }
  static M gt_i(I a, I b) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(a, b)); }
  static M eq_i(I a, I b) { return _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)); }
  static I or_i(I a, I b) { return _mm256_or_si256(a, b); }
  static I select_i(M m, I if_true, I if_false) { return _mm256_blendv_epi8(if_false, if_true, _mm256_castps_si256(m)); }
  static I shr_var_i(I a, I count) { return _mm256_srlv_epi32(a, count); }  // logical; counts 0..31
  // table[index] per lane, for a table of 32 int32 (lanes 0..31; the caller masks them).
  static I lookup32_i(const std::int32_t* table, I index) { return _mm256_i32gather_epi32(table, index, 4); }
  // The lanes of v where m is true, in lane order, stored at p, and their indices first + l at
  // index (each with room for 8: the entries past the count hold anything); returns the count.
  // A permutation per mask: lane k of the result takes lane (kSelected[bits] >> 4k) & 7 of v, so
  // that nibble is also the lane's index.
  static int store_selected(float* p, std::int32_t* index, M m, F v, std::int32_t first) {
    static constexpr auto kSelected = [] {
      std::array<std::uint32_t, 256> t{};
      for (unsigned bits = 0; bits < 256; ++bits) {
        for (unsigned l = 0, k = 0; l < 8; ++l) {
          if ((bits >> l) & 1u) t[bits] |= l << (4 * k++);
        }
      }
      return t;
    }();
    const auto bits = static_cast<unsigned>(_mm256_movemask_ps(m));
    const __m256i lane = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<std::int32_t>(kSelected[bits])),
                                                            _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                          _mm256_set1_epi32(7));
    _mm256_storeu_ps(p, _mm256_permutevar8x32_ps(v, lane));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(index), _mm256_add_epi32(_mm256_set1_epi32(first), lane));
    return std::popcount(bits);
  }
  static F to_float(I a) { return _mm256_cvtepi32_ps(a); }                 // int32 lanes, rounded once
  // 16-bit codes (float16, bfloat16) zero-extended to 32-bit lanes, and back (lanes <= 0xFFFF).
  static I load_u16(const std::uint16_t* p) { return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store_u16(std::uint16_t* p, I a) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
  }
  // float16 codes <-> float32 in hardware (F16C). Widening is exact except that it quiets a
  // signaling NaN (0x7C01 -> 0x7FC02000); narrowing rounds to nearest even by the immediate (not
  // MXCSR), and is bit for bit float_to_half_bits: a NaN becomes 0x7E00 | the payload's top 10 bits
  // with its sign. Neither reads MXCSR's DAZ or FTZ.
  static F load_half(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store_half(std::uint16_t* p, F a) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Each lane rounded to float16 and widened back: half_bits_to_float(float_to_half_bits(a)), bit
  // for bit (the narrowing's NaN is quiet, so the widening keeps it).
  static F round_to_half(F a) { return _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
  // Non-temporal forms (p aligned to the bytes stored: 16): a far larger-than-cache output.
  static void stream_u16(std::uint16_t* p, I a) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
  }
  static void stream_half(std::uint16_t* p, F a) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // 8-bit codes (float8/6/4, e8m0, sub-byte integers one per byte) zero-extended to 32-bit lanes,
  // and back (lanes <= 0xFF).
  static I load_u8(const std::uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static void store_u8(std::uint8_t* p, I a) {
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
  static void stream_u8(std::uint8_t* p, I a) {  // non-temporal; p 8-byte aligned
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    _mm_stream_si64(reinterpret_cast<long long*>(p), _mm_cvtsi128_si64(_mm_packus_epi16(w, w)));
  }

  // p[0..7] = double(a) * double(b): the exact product of two float32 vectors, as float64.
  static void store_product_f64(double* p, F a, F b) {
    const __m256d lo = mul_first_nan_f64(_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_castps256_ps128(b)));
    const __m256d hi = mul_first_nan_f64(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)));
    _mm256_storeu_pd(p, lo);
    _mm256_storeu_pd(p + 4, hi);
  }

  // acc[2l] += double(a_l), acc[2l + 1] += double(b_l) for every lane l (interleaved pairs of sums).
  static void accumulate_pairs_f64(double* acc, F a, F b) {
    for (int h = 0; h < 2; ++h) {
      const __m256d da = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(a, 1) : _mm256_castps256_ps128(a));
      const __m256d db = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(b, 1) : _mm256_castps256_ps128(b));
      const __m256d even = _mm256_unpacklo_pd(da, db);  // a0 b0 a2 b2
      const __m256d odd = _mm256_unpackhi_pd(da, db);   // a1 b1 a3 b3
      double* q = acc + 8 * h;
      _mm256_storeu_pd(q, _mm256_add_pd(_mm256_loadu_pd(q), _mm256_permute2f128_pd(even, odd, 0x20)));
      _mm256_storeu_pd(q + 4, _mm256_add_pd(_mm256_loadu_pd(q + 4), _mm256_permute2f128_pd(even, odd, 0x31)));
    }
  }
  // acc[l mod 8] += double(a_l), lanes in order (8 lanes: one add each).
  static void accumulate_mod8_f64(double* acc, F a) {
    _mm256_storeu_pd(acc, _mm256_add_pd(_mm256_loadu_pd(acc), _mm256_cvtps_pd(_mm256_castps256_ps128(a))));
    _mm256_storeu_pd(acc + 4, _mm256_add_pd(_mm256_loadu_pd(acc + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1))));
  }

  // acc[l] += double(a_l) for every lane l whose add is exact (exact_float64_add); lanes whose add
  // would round, or meets a NaN or infinity, keep acc[l] and are set in the returned mask.
  static unsigned add_exact_f64(double* acc, F a) {
    unsigned rounded = 0;
    for (int h = 0; h < 2; ++h) {
      const __m256d t = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(a, 1) : _mm256_castps256_ps128(a));
      const __m256d old = _mm256_loadu_pd(acc + 4 * h);
      const __m256d s = _mm256_add_pd(old, t);
      const __m256d exact = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s, old), t, _CMP_EQ_OQ),
                                          _mm256_cmp_pd(_mm256_sub_pd(s, t), old, _CMP_EQ_OQ));
      _mm256_storeu_pd(acc + 4 * h, _mm256_blendv_pd(old, s, exact));
      rounded |= (~static_cast<unsigned>(_mm256_movemask_pd(exact)) & 0xFu) << (4 * h);
    }
    return rounded;
  }

  // 32 float64 accumulators held in registers (exact_sums' whole-run lanes), and the exact add of 32
  // float32 terms into them: lane l takes double(t[l]) where that add is exact (add_exact_f64's
  // rule); the returned mask has bit l set where it is not (that lane unchanged).
  struct Lanes32 {
    __m256d v[8];
  };
  static Lanes32 load_lanes32(const double* p) {
    Lanes32 a;
    for (int i = 0; i < 8; ++i) a.v[i] = _mm256_loadu_pd(p + 4 * i);
    return a;
  }
  static void store_lanes32(double* p, const Lanes32& a) {
    for (int i = 0; i < 8; ++i) _mm256_storeu_pd(p + 4 * i, a.v[i]);
  }
  static Lanes32 zero_lanes32() {
    Lanes32 a;
    for (int i = 0; i < 8; ++i) a.v[i] = _mm256_setzero_pd();
    return a;
  }
  // The pairwise fold of exact_sums_fold_lanes (lane l + width into lane l, width 16, 8, .., 1)
  // when every one of its adds is exact: true and the folded value; false where any is not (the
  // caller then folds in scalar, spilling as the spec says).
  static bool fold_lanes32(const Lanes32& a, double& folded) {
    auto exact = [](__m256d x, __m256d y, __m256d s) {
      return _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s, x), y, _CMP_EQ_OQ), _mm256_cmp_pd(_mm256_sub_pd(s, y), x, _CMP_EQ_OQ));
    };
    __m256d ok = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    __m256d w16[4], w8[2];
    for (int i = 0; i < 4; ++i) {  // width 16: lanes 4i.. + lanes 16 + 4i..
      w16[i] = _mm256_add_pd(a.v[i], a.v[i + 4]);
      ok = _mm256_and_pd(ok, exact(a.v[i], a.v[i + 4], w16[i]));
    }
    for (int i = 0; i < 2; ++i) {  // width 8
      w8[i] = _mm256_add_pd(w16[i], w16[i + 2]);
      ok = _mm256_and_pd(ok, exact(w16[i], w16[i + 2], w8[i]));
    }
    const __m256d w4 = _mm256_add_pd(w8[0], w8[1]);  // width 4
    ok = _mm256_and_pd(ok, exact(w8[0], w8[1], w4));
    const __m128d l2 = _mm256_castpd256_pd128(w4), h2 = _mm256_extractf128_pd(w4, 1);
    const __m128d s4 = _mm_add_pd(l2, h2);  // width 2
    const __m128d ok4 = _mm_and_pd(_mm_cmpeq_pd(_mm_sub_pd(s4, l2), h2), _mm_cmpeq_pd(_mm_sub_pd(s4, h2), l2));
    const double x0 = _mm_cvtsd_f64(s4), x1 = _mm_cvtsd_f64(_mm_unpackhi_pd(s4, s4));
    folded = x0 + x1;  // width 1
    return _mm256_movemask_pd(ok) == 0xF && _mm_movemask_pd(ok4) == 3 && folded - x0 == x1 && folded - x1 == x0;
  }
  // double(t[l]) for l = 0 .. 31.
  static Lanes32 widen_lanes32(const float* t) {
    Lanes32 w;
    for (int i = 0; i < 8; ++i) w.v[i] = _mm256_cvtps_pd(_mm_loadu_ps(t + 4 * i));
    return w;
  }
  // Lanes [16 h, 16 h + 16) of acc += double(t[0 .. 16)), rounded as float64 adds are: half a
  // row at a time, so a loop over rows keeps only that half of the sums in registers.
  template <int h>
  static void add_half_lanes32(Lanes32& acc, const float* t) {
    for (int i = 0; i < 4; ++i) acc.v[4 * h + i] = _mm256_add_pd(acc.v[4 * h + i], _mm256_cvtps_pd(_mm_loadu_ps(t + 4 * i)));
  }
  // Lanes [8 q, 8 q + 8) of acc += double(t), rounded as float64 adds are (a vector of terms whose
  // first term is lane 8 q).
  template <int q>
  static void add_vector_lanes32(Lanes32& acc, F t) {
    acc.v[2 * q] = _mm256_add_pd(acc.v[2 * q], _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
    acc.v[2 * q + 1] = _mm256_add_pd(acc.v[2 * q + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
  }
  // Lane l of acc takes w[l] where that add is exact (add_exact_f64's rule); the returned mask has
  // bit l set where it is not (that lane unchanged).
  static std::uint32_t join_exact_lanes32(Lanes32& acc, const Lanes32& w) {
    std::uint32_t refused = 0;
    for (int i = 0; i < 8; ++i) {
      const __m256d s = _mm256_add_pd(acc.v[i], w.v[i]);
      const __m256d exact = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s, acc.v[i]), w.v[i], _CMP_EQ_OQ),
                                          _mm256_cmp_pd(_mm256_sub_pd(s, w.v[i]), acc.v[i], _CMP_EQ_OQ));
      acc.v[i] = _mm256_blendv_pd(acc.v[i], s, exact);
      refused |= (~static_cast<std::uint32_t>(_mm256_movemask_pd(exact)) & 0xFu) << (4 * i);
    }
    return refused;
  }
  static std::uint32_t add_exact_lanes32(Lanes32& acc, const float* t) { return join_exact_lanes32(acc, widen_lanes32(t)); }

  // p[0..7] = double(a) * b, rounded once to float64 (store_scaled_f64) or, from that double,
  // to float32 (store_scaled_f32): a float32 vector times a float64 factor, as numpy multiplies
  // a float64 array by a Python float (and casts the product into a float32 output).
  static void store_scaled_f64(double* p, F a, double b) {
    const auto f = _mm256_set1_pd(b);
    _mm256_storeu_pd(p, mul_first_nan_f64(_mm256_cvtps_pd(_mm256_castps256_ps128(a)), f));
    _mm256_storeu_pd(p + 4, mul_first_nan_f64(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)), f));
  }
  static void store_scaled_f32(float* p, F a, double b) {
    const auto f = _mm256_set1_pd(b);
    const auto lo = mul_first_nan_f64(_mm256_cvtps_pd(_mm256_castps256_ps128(a)), f), hi = mul_first_nan_f64(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)), f);
    const __m128 lo_f = _mm256_cvtpd_ps(lo), hi_f = _mm256_cvtpd_ps(hi);
    _mm256_storeu_ps(p, _mm256_set_m128(hi_f, lo_f));
  }

  // Lanes holding integers within the destination type's range, stored narrowed (8 elements).
  static void store_as_i8(std::int8_t* p, F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(w, w));
  }
  static void store_as_u8(std::uint8_t* p, F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
  static void store_as_i16(std::int16_t* p, F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  static void store_as_u16(std::uint16_t* p, F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  // The same, with non-temporal stores (p aligned to the stored width: 8 bytes for 8-bit, 16 for 16-bit).
  static __m128i narrow_i8(F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    return _mm_packs_epi16(w, w);
  }
  static __m128i narrow_u8(F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    return _mm_packus_epi16(w, w);
  }
  static void stream_as_i8(std::int8_t* p, F a) { _mm_stream_si64(reinterpret_cast<long long*>(p), _mm_cvtsi128_si64(narrow_i8(a))); }
  static void stream_as_u8(std::uint8_t* p, F a) { _mm_stream_si64(reinterpret_cast<long long*>(p), _mm_cvtsi128_si64(narrow_u8(a))); }
  static void stream_as_i16(std::int16_t* p, F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  static void stream_as_u16(std::uint16_t* p, F a) {
    const __m256i i = _mm256_cvtps_epi32(a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  // 8 integers widened to float32 lanes (exact).
  static F load_from(const std::int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_from(const std::uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_from(const std::int16_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_from(const std::uint16_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static F load_from(const float* p) { return loadu(p); }

  static void fence() { _mm_sfence(); }
};

}  // namespace polyquant::detail::avx2
