// Thin float32 vector vocabulary for AVX-512 (16 lanes), the same interface as vec_avx2.h. Only
// included by translation units compiled with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace polyquant::detail::avx512 {

struct Vec {
  using F = __m512;
  using I = __m512i;
  using M = __mmask16;
  static constexpr int kLanes = 16;

  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void stream(float* p, F v) { _mm512_stream_ps(p, v); }  // p must be 64-byte aligned
  static F splat(float v) { return _mm512_set1_ps(v); }
  static F zero() { return _mm512_setzero_ps(); }

  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  // a * b with x86's rule for two NaN operands: the first operand's NaN, quieted (mul_first_nan
  // in core/scalar_math.h). The compiler treats a product as commutative and may swap the operands
  // of mul(); the instruction's operand order is spelled out here (AT&T: source 2, source 1,
  // destination), so this is one multiply instead of a NaN test, an add and a blend.
  static F mul_first_nan(F a, F b) {
    F r;
    asm("vmulps %2, %1, %0" : "=v"(r) : "v"(a), "vm"(b));
    return r;
  }
  // mul_first_nan of float64 lanes (the products stored as float64 below: a float32 result times
  // its scale, whose NaN may differ from the result's).
  static __m512d mul_first_nan_f64(__m512d a, __m512d b) {
    __m512d r;
    asm("vmulpd %2, %1, %0" : "=v"(r) : "v"(a), "vm"(b));
    return r;
  }
  // a + b with the same rule (add_first_nan, x86_add in core/scalar_math.h).
  static F add_first_nan(F a, F b) {
    F r;
    asm("vaddps %2, %1, %0" : "=v"(r) : "v"(a), "vm"(b));
    return r;
  }

  // min/max return the second operand when either is NaN (and for two zeros).
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }

  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M ge(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static M le(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static M isnan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M isinf(F a) { return _mm512_cmp_ps_mask(abs(a), splat(__builtin_inff()), _CMP_EQ_OQ); }
  static M mask_or(M a, M b) { return static_cast<M>(a | b); }
  static M mask_and(M a, M b) { return static_cast<M>(a & b); }
  static unsigned mask_bits(M m) { return static_cast<unsigned>(m); }
  static F select(M m, F if_true, F if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }

  static F rint(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F floor(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static F ceil(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
  static F trunc(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static F neg(F a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(static_cast<int>(0x80000000u)))); }  // flips the sign bit: -(+0) = -0
  static F abs(F a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff))); }

  // Float lanes holding integers of int32 range to int32 (truncating; others are undefined).
  static I to_int(F a) { return _mm512_cvttps_epi32(a); }
  static I bits(F a) { return _mm512_castps_si512(a); }
  static F from_bits(I a) { return _mm512_castsi512_ps(a); }
  static I splat_i(std::int32_t v) { return _mm512_set1_epi32(v); }
  static I add_i(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub_i(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I max_i(I a, I b) { return _mm512_max_epi32(a, b); }
  static std::int32_t reduce_max_i(I a) { return _mm512_reduce_max_epi32(a); }  // the largest lane
  static I min_u(I a, I b) { return _mm512_min_epu32(a, b); }                       // lanes as uint32
  static std::uint32_t reduce_min_u(I a) { return _mm512_reduce_min_epu32(a); }  // the smallest lane, as uint32
  static I and_i(I a, I b) { return _mm512_and_si512(a, b); }
  template <int kShift>
  static I shr_i(I a) { return _mm512_srli_epi32(a, kShift); }
  template <int kShift>
  static I shl_i(I a) { return _mm512_slli_epi32(a, kShift); }
  static M gt_i(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static M eq_i(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static I or_i(I a, I b) { return _mm512_or_si512(a, b); }
  static I select_i(M m, I if_true, I if_false) { return _mm512_mask_blend_epi32(m, if_false, if_true); }
  static I shr_var_i(I a, I count) { return _mm512_srlv_epi32(a, count); }  // logical; counts 0..31
  // table[index] per lane, for a table of 32 int32 (lanes 0..31; the caller masks them): two
  // registers' permute, which reads only the index's low five bits.
  static I lookup32_i(const std::int32_t* table, I index) {
    return _mm512_permutex2var_epi32(_mm512_loadu_si512(table), index, _mm512_loadu_si512(table + 16));
  }
  // The lanes of v where m is set, in lane order, stored at p, and their indices first + l at
  // index (each with room for 16: the entries past the count hold anything); returns the count.
  static int store_selected(float* p, std::int32_t* index, M m, F v, std::int32_t first) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    _mm512_storeu_ps(p, _mm512_maskz_compress_ps(m, v));
    _mm512_storeu_si512(index, _mm512_add_epi32(_mm512_set1_epi32(first), _mm512_maskz_compress_epi32(m, lane)));
    return std::popcount(static_cast<unsigned>(m));
  }
  static F to_float(I a) { return _mm512_cvtepi32_ps(a); }                 // int32 lanes, rounded once
  // 16-bit codes (float16, bfloat16) zero-extended to 32-bit lanes, and back (lanes <= 0xFFFF).
  static I load_u16(const std::uint16_t* p) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store_u16(std::uint16_t* p, I a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(a)); }
  // float16 codes <-> float32 in hardware (F16C's conversions, widened to 16 lanes). Widening is
  // exact except that it quiets a signaling NaN (0x7C01 -> 0x7FC02000); narrowing rounds to
  // nearest even by the immediate (not MXCSR), and is bit for bit float_to_half_bits: a NaN becomes
  // 0x7E00 | the payload's top 10 bits with its sign. Neither reads MXCSR's DAZ or FTZ.
  static F load_half(const std::uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store_half(std::uint16_t* p, F a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Each lane rounded to float16 and widened back: half_bits_to_float(float_to_half_bits(a)), bit
  // for bit (the narrowing's NaN is quiet, so the widening keeps it).
  static F round_to_half(F a) { return _mm512_cvtph_ps(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
  // Non-temporal forms (p aligned to the bytes stored: 32): a far larger-than-cache output.
  static void stream_u16(std::uint16_t* p, I a) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(a)); }
  static void stream_half(std::uint16_t* p, F a) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // 8-bit codes (float8/6/4, e8m0, sub-byte integers one per byte) zero-extended to 32-bit lanes,
  // and back (lanes <= 0xFF).
  static I load_u8(const std::uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store_u8(std::uint8_t* p, I a) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(a)); }
  static void stream_u8(std::uint8_t* p, I a) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(a)); }  // p 16-byte aligned

  // p[0..15] = double(a) * double(b): the exact product of two float32 vectors, as float64.
  static void store_product_f64(double* p, F a, F b) {
    const __m512d lo = mul_first_nan_f64(_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
    const __m512d hi = mul_first_nan_f64(_mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)));
    _mm512_storeu_pd(p, lo);
    _mm512_storeu_pd(p + 8, hi);
  }

  // p[0..15] = double(a) * b, rounded once to float64 (store_scaled_f64) or, from that double,
  // to float32 (store_scaled_f32): a float32 vector times a float64 factor, as numpy multiplies
  // a float64 array by a Python float (and casts the product into a float32 output).
  static void store_scaled_f64(double* p, F a, double b) {
    const auto f = _mm512_set1_pd(b);
    _mm512_storeu_pd(p, mul_first_nan_f64(_mm512_cvtps_pd(_mm512_castps512_ps256(a)), f));
    _mm512_storeu_pd(p + 8, mul_first_nan_f64(_mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)), f));
  }
  static void store_scaled_f32(float* p, F a, double b) {
    const auto f = _mm512_set1_pd(b);
    const auto lo = mul_first_nan_f64(_mm512_cvtps_pd(_mm512_castps512_ps256(a)), f), hi = mul_first_nan_f64(_mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)), f);
    const __m256 lo_f = _mm512_cvtpd_ps(lo), hi_f = _mm512_cvtpd_ps(hi);
    _mm512_storeu_ps(p, _mm512_insertf32x8(_mm512_castps256_ps512(lo_f), hi_f, 1));
  }

  // acc[2l] += double(a_l), acc[2l + 1] += double(b_l) for every lane l (interleaved pairs of sums).
  static void accumulate_pairs_f64(double* acc, F a, F b) {
    for (int h = 0; h < 2; ++h) {
      const __m512d da = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(a, 1) : _mm512_castps512_ps256(a));
      const __m512d db = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(b, 1) : _mm512_castps512_ps256(b));
      // lanes 0..7 of a and b interleaved: a0 b0 a1 b1 ... a3 b3 | a4 b4 ... a7 b7
      const __m512i lo_idx = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
      const __m512i hi_idx = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
      double* q = acc + 16 * h;
      _mm512_storeu_pd(q, _mm512_add_pd(_mm512_loadu_pd(q), _mm512_permutex2var_pd(da, lo_idx, db)));
      _mm512_storeu_pd(q + 8, _mm512_add_pd(_mm512_loadu_pd(q + 8), _mm512_permutex2var_pd(da, hi_idx, db)));
    }
  }
  // acc[l mod 8] += double(a_l), lanes in order: lanes 0..7 first, then 8..15.
  static void accumulate_mod8_f64(double* acc, F a) {
    __m512d s = _mm512_add_pd(_mm512_loadu_pd(acc), _mm512_cvtps_pd(_mm512_castps512_ps256(a)));
    s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)));
    _mm512_storeu_pd(acc, s);
  }

  // acc[l] += double(a_l) for every lane l whose add is exact (exact_float64_add); lanes whose add
  // would round, or meets a NaN or infinity, keep acc[l] and are set in the returned mask.
  static unsigned add_exact_f64(double* acc, F a) {
    unsigned rounded = 0;
    for (int h = 0; h < 2; ++h) {
      const __m512d t = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(a, 1) : _mm512_castps512_ps256(a));
      const __m512d old = _mm512_loadu_pd(acc + 8 * h);
      const __m512d s = _mm512_add_pd(old, t);
      const __mmask8 exact = _mm512_cmp_pd_mask(_mm512_sub_pd(s, old), t, _CMP_EQ_OQ) &
                             _mm512_cmp_pd_mask(_mm512_sub_pd(s, t), old, _CMP_EQ_OQ);
      _mm512_mask_storeu_pd(acc + 8 * h, exact, s);
      rounded |= (~static_cast<unsigned>(exact) & 0xFFu) << (8 * h);
    }
    return rounded;
  }

  // 32 float64 accumulators held in registers (exact_sums' whole-run lanes), and the exact add of 32
  // float32 terms into them: lane l takes double(t[l]) where that add is exact (add_exact_f64's
  // rule); the returned mask has bit l set where it is not (that lane unchanged).
  struct Lanes32 {
    __m512d v[4];
  };
  static Lanes32 load_lanes32(const double* p) {
    return {{_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8), _mm512_loadu_pd(p + 16), _mm512_loadu_pd(p + 24)}};
  }
  static void store_lanes32(double* p, const Lanes32& a) {
    for (int i = 0; i < 4; ++i) _mm512_storeu_pd(p + 8 * i, a.v[i]);
  }
  static Lanes32 zero_lanes32() { return {{_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()}}; }
  // The pairwise fold of exact_sums_fold_lanes (lane l + width into lane l, width 16, 8, .., 1)
  // when every one of its adds is exact: true and the folded value; false where any is not (the
  // caller then folds in scalar, spilling as the spec says).
  static bool fold_lanes32(const Lanes32& a, double& folded) {
    auto exact = [](__m512d x, __m512d y, __m512d s) {
      return _mm512_mask_cmp_pd_mask(_mm512_cmp_pd_mask(_mm512_sub_pd(s, x), y, _CMP_EQ_OQ), _mm512_sub_pd(s, y), x, _CMP_EQ_OQ);
    };
    const __m512d s0 = _mm512_add_pd(a.v[0], a.v[2]), s1 = _mm512_add_pd(a.v[1], a.v[3]);  // width 16
    const __m512d s2 = _mm512_add_pd(s0, s1);                                                  // width 8
    const __m256d lo = _mm512_castpd512_pd256(s2), hi = _mm512_extractf64x4_pd(s2, 1);
    const __m256d s3 = _mm256_add_pd(lo, hi);  // width 4
    const __m128d l2 = _mm256_castpd256_pd128(s3), h2 = _mm256_extractf128_pd(s3, 1);
    const __m128d s4 = _mm_add_pd(l2, h2);  // width 2
    const double x0 = _mm_cvtsd_f64(s4), x1 = _mm_cvtsd_f64(_mm_unpackhi_pd(s4, s4));
    const __mmask8 ok = exact(a.v[0], a.v[2], s0) & exact(a.v[1], a.v[3], s1) & exact(s0, s1, s2);
    const __m256d ok3 = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(s3, lo), hi, _CMP_EQ_OQ), _mm256_cmp_pd(_mm256_sub_pd(s3, hi), lo, _CMP_EQ_OQ));
    const __m128d ok4 = _mm_and_pd(_mm_cmpeq_pd(_mm_sub_pd(s4, l2), h2), _mm_cmpeq_pd(_mm_sub_pd(s4, h2), l2));
    folded = x0 + x1;  // width 1
    return ok == 0xFF && _mm256_movemask_pd(ok3) == 0xF && _mm_movemask_pd(ok4) == 3 && folded - x0 == x1 && folded - x1 == x0;
  }
  // double(t[l]) for l = 0 .. 31.
  static Lanes32 widen_lanes32(const float* t) {
    const __m512 a = _mm512_loadu_ps(t), b = _mm512_loadu_ps(t + 16);
    return {{_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)),
             _mm512_cvtps_pd(_mm512_castps512_ps256(b)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1))}};
  }
  // Lanes [16 h, 16 h + 16) of acc += double(t[0 .. 16)), rounded as float64 adds are (half a row).
  template <int h>
  static void add_half_lanes32(Lanes32& acc, const float* t) {
    for (int i = 0; i < 2; ++i) acc.v[2 * h + i] = _mm512_add_pd(acc.v[2 * h + i], _mm512_cvtps_pd(_mm256_loadu_ps(t + 8 * i)));
  }
  // Lanes [16 q, 16 q + 16) of acc += double(t), rounded as float64 adds are (a vector of terms
  // whose first term is lane 16 q).
  template <int q>
  static void add_vector_lanes32(Lanes32& acc, F t) {
    acc.v[2 * q] = _mm512_add_pd(acc.v[2 * q], _mm512_cvtps_pd(_mm512_castps512_ps256(t)));
    acc.v[2 * q + 1] = _mm512_add_pd(acc.v[2 * q + 1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1)));
  }
  // Lane l of acc takes w[l] where that add is exact (add_exact_f64's rule); the returned mask has
  // bit l set where it is not (that lane unchanged).
  static std::uint32_t join_exact_lanes32(Lanes32& acc, const Lanes32& w) {
    std::uint32_t refused = 0;
    for (int i = 0; i < 4; ++i) {
      const __m512d s = _mm512_add_pd(acc.v[i], w.v[i]);
      const __mmask8 exact = _mm512_mask_cmp_pd_mask(_mm512_cmp_pd_mask(_mm512_sub_pd(s, acc.v[i]), w.v[i], _CMP_EQ_OQ),
                                                     _mm512_sub_pd(s, w.v[i]), acc.v[i], _CMP_EQ_OQ);
      acc.v[i] = _mm512_mask_mov_pd(acc.v[i], exact, s);
      refused |= (~static_cast<std::uint32_t>(exact) & 0xFFu) << (8 * i);
    }
    return refused;
  }
  static std::uint32_t add_exact_lanes32(Lanes32& acc, const float* t) { return join_exact_lanes32(acc, widen_lanes32(t)); }

  // Lanes holding integers within the destination type's range, stored narrowed (16 elements).
  static void store_as_i8(std::int8_t* p, F a) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(a))); }
  static void store_as_u8(std::uint8_t* p, F a) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(a))); }
  static void store_as_i16(std::int16_t* p, F a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(a))); }
  static void store_as_u16(std::uint16_t* p, F a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtusepi32_epi16(_mm512_cvtps_epi32(a))); }
  // The same, with non-temporal stores (p aligned to the stored width: 16 bytes for 8-bit, 32 for 16-bit).
  static void stream_as_i8(std::int8_t* p, F a) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(a))); }
  static void stream_as_u8(std::uint8_t* p, F a) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(a))); }
  static void stream_as_i16(std::int16_t* p, F a) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(a))); }
  static void stream_as_u16(std::uint16_t* p, F a) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtusepi32_epi16(_mm512_cvtps_epi32(a))); }
  // 16 integers widened to float32 lanes (exact).
  static F load_from(const std::int8_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))); }
  static F load_from(const std::uint8_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))); }
  static F load_from(const std::int16_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))); }
  static F load_from(const std::uint16_t* p) { return _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))); }
  static F load_from(const float* p) { return loadu(p); }

  static void fence() { _mm_sfence(); }
};

}  // namespace polyquant::detail::avx512
