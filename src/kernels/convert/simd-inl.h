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
  const auto from_size = static_cast<std::int64_t>(dtype_size(p.from)), to_size = static_cast<std::int64_t>(dtype_size(p.to));
  const auto* src = static_cast<const unsigned char*>(a.in[0]);
  auto* dst = static_cast<unsigned char*>(a.out);
  // The run through `one(s, d)`, which converts the L elements at s into the L at d: whole vectors
  // in place, and a partial vector (a tail, a head) on a zero-padded copy through the same body, so
  // every element sees the same arithmetic. With `streamed` (one with non-temporal stores, its
  // destination aligned to the vector's bytes) and RowArgs::stream, the vectors from the first
  // aligned destination on are streamed, so the output's lines are not read before they are
  // written (far beyond the caches); the head before it is a partial vector.
  auto partial = [&](auto one, std::int64_t j, std::int64_t count) {
    alignas(64) unsigned char in[Vec::kLanes * 8] = {}, out[Vec::kLanes * 8];  // the widest element: 8 bytes
    std::memcpy(in, src + j * from_size, static_cast<std::size_t>(count * from_size));
    one(in, out);
    std::memcpy(dst + j * to_size, out, static_cast<std::size_t>(count * to_size));
  };
  auto drive = [&](auto one, auto streamed, std::int64_t prefetch_bytes = 0) {
    std::int64_t j = 0;
    bool stream = false;
    if constexpr (!std::is_same_v<decltype(streamed), std::nullptr_t>) {
      const auto at = reinterpret_cast<std::uintptr_t>(dst);
      stream = a.stream && at % static_cast<std::uintptr_t>(to_size) == 0;
      if (stream) {
        const std::uintptr_t misalign = at % static_cast<std::uintptr_t>(L * to_size);
        j = std::min<std::int64_t>(n, misalign == 0 ? 0 : static_cast<std::int64_t>((L * to_size - static_cast<std::int64_t>(misalign)) / to_size));
        if (j > 0) partial(one, 0, j);
        for (; j + L <= n; j += L) streamed(src + j * from_size, dst + j * to_size);
        Vec::fence();
      }
    }
    if (!stream) {
      for (; j + L <= n; j += L) {
        if (prefetch_bytes > 0) __builtin_prefetch(src + j * from_size + prefetch_bytes, 0, 1);  // into L2 (past the end: harmless)
        one(src + j * from_size, dst + j * to_size);
      }
    }
    if (j < n) partial(one, j, n - j);
  };
  auto as_u16 = [](const unsigned char* q) { return reinterpret_cast<const std::uint16_t*>(q); };
  auto as_f32 = [](const unsigned char* q) { return reinterpret_cast<const float*>(q); };
  auto out_u16 = [](unsigned char* q) { return reinterpret_cast<std::uint16_t*>(q); };
  auto out_f32 = [](unsigned char* q) { return reinterpret_cast<float*>(q); };
  auto widen = [&](auto code_to_float) {  // 8-bit codes -> float32
    drive([=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE { Vec::storeu(out_f32(d), code_to_float(Vec::load_u8(s))); },
          nullptr);
  };
  auto narrow = [&](auto float_to_code) {  // float32 -> 8-bit codes
    drive([=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE { Vec::store_u8(d, float_to_code(Vec::loadu(as_f32(s)))); },
          nullptr);
  };
  bool vector = true;
  if (p.to == DType::kFloat32 && (p.from == DType::kFloat16 || p.from == DType::kBFloat16)) {
    // The engine widens an operand a block at a time (2048 elements) and then computes on it in
    // the L1 cache, so its reads come in bursts with no load in flight in between: asking for the
    // lines four blocks ahead, into L2, while widening this one overlaps them with that compute.
    // bfloat16 training forward / gradient (16 Mi elements, one thread, this VM): 7.1-7.9 /
    // 21.5-22.3 ms asking one block ahead into L1, 6.5-6.9 / 21.9-22.2 ms not asking, 6.4-6.8 /
    // 20.1-20.9 ms as now (an L1 prefetch takes a fill buffer the widening's own loads wait for).
    constexpr std::int64_t kWidenPrefetchBytes = 4 * 2048 * 2;
    if (p.from == DType::kFloat16) {
      drive(
          [=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE {
            // The hardware widens every code exactly but quiets a signaling NaN, whose bits the spec
            // keeps: NaN lanes (rare) take the bit arithmetic.
            Vec::F v = Vec::load_half(as_u16(s));
            const Vec::M nan = Vec::isnan(v);
            if (Vec::mask_bits(nan) != 0) v = Vec::select(nan, Vec::from_bits(convert_detail::half_nan_to_float_bits(Vec::load_u16(as_u16(s)))), v);
            Vec::storeu(out_f32(d), v);
          },
          nullptr, kWidenPrefetchBytes);
    } else {
      drive(
          [=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE {
            Vec::storeu(out_f32(d), Vec::from_bits(Vec::shl_i<16>(Vec::load_u16(as_u16(s)))));
          },
          nullptr, kWidenPrefetchBytes);
    }
  } else if (p.from == DType::kFloat32 && p.to == DType::kFloat16) {  // the hardware's rounding is the spec's
    drive([=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE { Vec::store_half(out_u16(d), Vec::loadu(as_f32(s))); },
          [=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE { Vec::stream_half(out_u16(d), Vec::loadu(as_f32(s))); });
  } else if (p.from == DType::kFloat32 && p.to == DType::kBFloat16) {
    auto code = [=](const unsigned char* s) POLYQUANT_ALWAYS_INLINE { return sixteen_bit::float_to_bfloat16_bits(Vec::bits(Vec::loadu(as_f32(s)))); };
    drive([=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE { Vec::store_u16(out_u16(d), code(s)); },
          [=](const unsigned char* s, unsigned char* d) POLYQUANT_ALWAYS_INLINE { Vec::stream_u16(out_u16(d), code(s)); });
  } else if (p.to == DType::kFloat32) {
    switch (p.from) {
      // Lambdas, not function pointers: an always-inline function called through a pointer does
      // not inline at -O1 (the sanitized build), which is an error.
      case DType::kInt4: widen([](Vec::I c) POLYQUANT_ALWAYS_INLINE { return narrow_simd::sub_byte_to_float<4, true>(c); }); break;
      case DType::kUInt4: widen([](Vec::I c) POLYQUANT_ALWAYS_INLINE { return narrow_simd::sub_byte_to_float<4, false>(c); }); break;
      case DType::kInt2: widen([](Vec::I c) POLYQUANT_ALWAYS_INLINE { return narrow_simd::sub_byte_to_float<2, true>(c); }); break;
      case DType::kUInt2: widen([](Vec::I c) POLYQUANT_ALWAYS_INLINE { return narrow_simd::sub_byte_to_float<2, false>(c); }); break;
      default:
        vector = narrow_simd::with_minifloat(p.from, [&](auto t) {
          widen([](Vec::I c) POLYQUANT_ALWAYS_INLINE { return Vec::from_bits(narrow_simd::to_float_bits<decltype(t)::value>(c)); });
        });
    }
  } else if (p.from == DType::kFloat32) {
    switch (p.to) {
      case DType::kInt4:
      case DType::kUInt4: narrow([](Vec::F v) POLYQUANT_ALWAYS_INLINE { return narrow_simd::float_to_sub_byte<4>(v); }); break;
      case DType::kInt2:
      case DType::kUInt2: narrow([](Vec::F v) POLYQUANT_ALWAYS_INLINE { return narrow_simd::float_to_sub_byte<2>(v); }); break;
      default:
        vector = narrow_simd::with_minifloat(p.to, [&](auto t) {
          narrow([](Vec::F v) POLYQUANT_ALWAYS_INLINE { return narrow_simd::from_float_bits<decltype(t)::value>(Vec::bits(v)); });
        });
    }
  } else {
    vector = false;
  }
  if (!vector) ref::convert_f32(params, a);
}
