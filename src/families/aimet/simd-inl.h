// float32 SIMD kernels of AIMET's affine ops, written once against the `Vec` vocabulary and
// compiled per kernel set inside that set's namespace. Each body is the vector form of the
// per-element spec in families/aimet/kernels.h, operation for operation, in float32 or in a
// float16 / bfloat16 working precision (AffineParams::narrow: every step the spec rounds to it,
// narrow_to, rounds the lanes to it and back).
//
// No include guard: meant to be included once per kernel-set translation unit.

#include "kernels/simd/row_loop-inl.h"
#include "kernels/simd/exact_sums-inl.h"
#include "kernels/simd/sixteen_bit-inl.h"

// torch.clamp: v < lo ? lo : (v > hi ? hi : v), so NaN passes and a value equal to a bound (+-0
// included) is kept. x86's max(a, b) is a > b ? a : b, so max(lo, v) is v < lo ? lo : v with every
// NaN and zero case the same, and min(hi, .) likewise; the outer test may come second because
// lo <= hi (the grid's bounds, or o + qmin <= o + qmax, or both NaN). Two instructions, not four.
inline Vec::F torch_clamp_v(Vec::F v, Vec::F lo, Vec::F hi) { return Vec::min(hi, Vec::max(lo, v)); }

// narrow_to's vector form: the lanes rounded to the working precision kR and back (float16: the
// hardware's round trip; bfloat16: torch's conversion, every NaN the default quiet NaN); float32
// as they are.
template <QuotientRounding kR>
POLYQUANT_ALWAYS_INLINE inline Vec::F narrow_v(Vec::F v) {
  if constexpr (kR == QuotientRounding::kFloat16) {
    return Vec::round_to_half(v);
  } else if constexpr (kR == QuotientRounding::kBFloat16) {
    return Vec::select(Vec::isnan(v), Vec::splat(std::numeric_limits<float>::quiet_NaN()), sixteen_bit::round_to_bfloat16_unless_nan(v));
  } else {
    return v;
  }
}

// The rows of affine_f32 in working precision kR. kCanonicalNan (bfloat16 results,
// AffineParams::canonical_nan): every NaN result becomes the default quiet NaN, as canonical_if
// does in the spec. Operands x, scale, offset; the parameters rounded to kR first (the spec's
// scale.to(dtype), offset.to(dtype)).
template <QuotientRounding kR, bool kCanonicalNan>
void affine_rows(const AffineParams& p, const RowArgs& a) {
  const Vec::F lo = Vec::splat(static_cast<float>(p.qmin)), hi = Vec::splat(static_cast<float>(p.qmax));
  const Vec::F quiet_nan = Vec::splat(std::numeric_limits<float>::quiet_NaN());
  auto canonical = [&](Vec::F r) POLYQUANT_ALWAYS_INLINE {
    if constexpr (kCanonicalNan) return Vec::select(Vec::isnan(r), quiet_nan, r);
    else return r;
  };
  auto N = [](Vec::F v) POLYQUANT_ALWAYS_INLINE { return narrow_v<kR>(v); };
  // Blocked parameters (RowArgs::per_row_mask): for_each_vector walks the rows, each with its own
  // scale and offset splat.
  switch (p.kind) {
    case AffineKind::kDequantize:
      for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        const Vec::F s = N(v[1]), o = N(v[2]);
        return canonical(N(Vec::mul(N(Vec::add(v[0], o)), s)));
      });
      return;
    case AffineKind::kQuantize:
      for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        const Vec::F s = N(v[1]), o = N(v[2]);
        return canonical(torch_clamp_v(N(Vec::sub(Vec::rint(N(Vec::div(v[0], s))), o)), lo, hi));
      });
      return;
    default:
      for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
        const Vec::F s = N(v[1]), o = N(v[2]);
        const Vec::F q = torch_clamp_v(N(Vec::sub(Vec::rint(N(Vec::div(v[0], s))), o)), lo, hi);
        return canonical(N(Vec::mul(N(Vec::add(q, o)), s)));
      });
      return;
  }
}

template <QuotientRounding kR>
void affine_rows_in(const AffineParams& p, const RowArgs& a) {
  if (p.canonical_nan) affine_rows<kR, true>(p, a);
  else affine_rows<kR, false>(p, a);
}

void affine_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const AffineParams*>(params);
  const bool blocks = a.per_row_mask != 0;
  if (blocks && (a.repeated_row_mask != 0 || a.is_per_row(0) || a.is_broadcast(0) || !(a.is_per_row(1) || a.is_broadcast(1)) ||
                 !(a.is_per_row(2) || a.is_broadcast(2)))) {
    ref::affine_f32(params, a);
    return;
  }
  switch (p.narrow) {
    case QuotientRounding::kFloat16: affine_rows_in<QuotientRounding::kFloat16>(p, a); return;
    case QuotientRounding::kBFloat16: affine_rows_in<QuotientRounding::kBFloat16>(p, a); return;
    default: affine_rows_in<QuotientRounding::kNone>(p, a); return;
  }
}

// Operands x, scale (float32) and the zero point as float32 (params.zero_point_f32; exact:
// The rows of fake_quantize_f32. kCanonicalNan (bfloat16 results, AffineParams::canonical_nan):
// every NaN result becomes the default quiet NaN, as canonical_if does in the spec.
template <bool kCanonicalNan>
void fake_quantize_rows(const FakeQuantizeParams& p, const RowArgs& a) {
  const Vec::F lo = Vec::splat(static_cast<float>(p.qmin)), hi = Vec::splat(static_cast<float>(p.qmax));
  const Vec::F one = Vec::splat(1.0f), int64_limit = Vec::splat(0x1p63f);
  const Vec::F quiet_nan = Vec::splat(std::numeric_limits<float>::quiet_NaN());
  auto canonical = [&](Vec::F r) POLYQUANT_ALWAYS_INLINE {
    if constexpr (kCanonicalNan) return Vec::select(Vec::isnan(r), quiet_nan, r);
    else return r;
  };
  if (p.per_channel) {
    for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F qf = Vec::add(v[2], Vec::rint(Vec::mul(v[0], Vec::div(one, v[1]))));
      // int64(qf) of NaN, +-inf and |qf| >= 2^63 is INT64_MIN on x86: the lower bound.
      const auto unrepresentable = Vec::mask_or(Vec::isnan(qf), Vec::ge(Vec::abs(qf), int64_limit));
      const Vec::F c = Vec::select(unrepresentable, lo, torch_clamp_v(qf, lo, hi));
      return canonical(Vec::mul(Vec::sub(c, v[2]), v[1]));
    });
  } else {
    for_each_vector<3>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
      const Vec::F qf = Vec::add(v[2], Vec::rint(Vec::mul(v[0], Vec::div(one, v[1]))));
      const Vec::F c = Vec::select(Vec::isnan(qf), lo, torch_clamp_v(qf, lo, hi));  // fmax(NaN, lo) = lo
      return canonical(Vec::mul(Vec::sub(c, v[2]), v[1]));
    });
  }
}

// params.exact_in_float says every zero point and both bounds lie within +-2^23, so the clamped
// level minus the zero point is exact in float32 and so is everything the reference does in int64
// or double).
void fake_quantize_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const FakeQuantizeParams*>(params);
  if (!p.exact_in_float || !p.zero_point_f32 || p.gradient || a.per_row_mask != 0) {
    ref::fake_quantize_f32(params, a);
    return;
  }
  if (p.canonical_nan) fake_quantize_rows<true>(p, a);
  else fake_quantize_rows<false>(p, a);
}

// The store modes of the kernels below that write the gradient of x and, optionally, the forward's
// output beside sums of their own: pass.template operator()<kStream, kValue>() for the call's mode
// (streamed or plain stores; with the forward's output or without it, autograd's backward, whose
// forward ran before), fenced after streamed stores.
template <class Pass>
POLYQUANT_ALWAYS_INLINE inline void with_gradient_store_mode(bool stream, bool with_value, Pass&& pass) {
  if (stream) {
    if (with_value) {
      pass.template operator()<true, true>();
    } else {
      pass.template operator()<true, false>();
    }
    Vec::fence();
  } else if (with_value) {
    pass.template operator()<false, true>();
  } else {
    pass.template operator()<false, false>();
  }
}

// quantize_dequantize's kAll, with the forward or without (autograd's backward), where the call asks for the terms' sums
// (AffineGradParams::scale_blocks, offset_blocks) and the row is one of the fused backward's usual
// chunks, outputs aligned where they stream, grad_output and x running on:
//   whole-run blocks: scale and offset one value each, the row's whole blocks of 512 terms (at
//     least one, at most PresummedBlocks::kMaxBlocks; the rest of the row is the caller's);
//   segments: scale and offset one value per row (AIMET's blocks, RowArgs::per_row_mask), rows of
//     32 k <= 512 terms (at most PresummedBlocks::kMaxSegments), each row one segment.
// Each vector's outputs are for_each_vector's, stored the same way; its scale and offset terms also
// go into their block's span and 32 float64 lane sums in registers (term k of the block into lane
// k mod 32), stored at the block's end (a segment's lanes added into one sum), so the exact sums
// need not read a narrow block again. The memory-bound loop has room for those 16 vector
// operations per 16 elements; the sums' own pass ran after each chunk with the memory idle. Needs
// 32 vector registers (two sets of lane sums and spans, and the gradients' constants). Returns the
// elements done (the row's first ones): 0 elsewhere (AVX2), and where the row is not such a chunk
// (`blocks` and `segments` left 0).
template <class Grads, class ValueOf>
std::int64_t affine_grad_presummed(const AffineGradParams& g, const RowArgs& a, Grads grads, ValueOf value_of) {
  constexpr int L = Vec::kLanes;
  constexpr std::int64_t kRunBlock = 16 * kExactSumVirtualLanes;
  if constexpr (L < 16) {
    return 0;
  } else {
    PresummedBlocks* const pre[2] = {g.scale_blocks, g.offset_blocks};
    if (pre[0] == nullptr || pre[1] == nullptr || a.repeated_row_mask != 0) return 0;
    const bool segments = a.per_row_mask != 0;
    const std::int64_t block = segments ? a.row_len : kRunBlock;
    if (segments ? ((a.per_row_mask & 0xFu) != 0b1100u || (a.broadcast_mask & 0xFu) != 0 || block % kExactSumVirtualLanes != 0 ||
                    block > kRunBlock || a.n % block != 0 || a.n / block > PresummedBlocks::kMaxSegments)
                 : ((a.broadcast_mask & 0xFu) != 0b1100u || a.n < block || a.n / block > PresummedBlocks::kMaxBlocks)) {
      return 0;
    }
    const std::int64_t blocks = a.n / block, done = blocks * block;
    auto* out = static_cast<float*>(a.out);
    auto* value_out = static_cast<float*>(g.value_out);
    float* const terms[2] = {static_cast<float*>(g.scale_terms), static_cast<float*>(g.offset_terms)};
    auto aligned = [](const float* q) { return reinterpret_cast<std::uintptr_t>(q) % (L * sizeof(float)) == 0; };
    if (a.stream && !(aligned(out) && aligned(value_out))) return 0;
    const float* dy = a.input<float>(0);
    const float* x = a.input<float>(1);
    const float* scale = a.input<float>(2);
    const float* offset = a.input<float>(3);
    Vec::F v[4];
    v[2] = Vec::splat(scale[0]);
    v[3] = Vec::splat(offset[0]);
    const Vec::I magnitude = Vec::splat_i(0x7FFFFFFF), one_i = Vec::splat_i(1);
    // One block's lane sums and span (exact_sums_f32 takes them instead of its own).
    struct BlockSums {
      Vec::Lanes32 sum;
      Vec::I largest, smallest_less_one;
    };
    auto block_pass = [&]<bool kStream, bool kValue>() POLYQUANT_ALWAYS_INLINE {
      for (std::int64_t b = 0; b < blocks; ++b) {
        if (segments) {  // the row's parameters
          v[2] = Vec::splat(scale[b]);
          v[3] = Vec::splat(offset[b]);
        }
        BlockSums sums[2];
        for (BlockSums& bs : sums) bs = {Vec::zero_lanes32(), Vec::splat_i(0), Vec::splat_i(-1)};
        auto take = [&]<int q>(BlockSums& bs, Vec::F t, const float* stored) POLYQUANT_ALWAYS_INLINE {
          const Vec::I bits = Vec::and_i(Vec::bits(t), magnitude);
          bs.largest = Vec::max_i(bs.largest, bits);
          bs.smallest_less_one = Vec::min_u(bs.smallest_less_one, Vec::sub_i(bits, one_i));
          Vec::template add_half_lanes32<q>(bs.sum, stored);
        };
        // (grads and value_of are copies: their captured constants then stay in registers, where
        // a float store might otherwise change what a reference points to)
        auto one = [&]<int q>(std::int64_t j) POLYQUANT_ALWAYS_INLINE {  // the vector at j: lanes [L q, L q + L)
          v[0] = Vec::loadu(dy + j);
          v[1] = Vec::loadu(x + j);
          Vec::F level, d_scale, d_offset;
          const Vec::F dx = grads(v, level, d_scale, d_offset);
          if constexpr (kStream) {
            Vec::stream(out + j, dx);
            if constexpr (kValue) Vec::stream(value_out + j, value_of(v, level));
          } else {
            Vec::storeu(out + j, dx);
            if constexpr (kValue) Vec::storeu(value_out + j, value_of(v, level));
          }
          Vec::storeu(terms[0] + j, d_scale);
          Vec::storeu(terms[1] + j, d_offset);
          take.template operator()<q>(sums[0], d_scale, terms[0] + j);
          take.template operator()<q>(sums[1], d_offset, terms[1] + j);
        };
        for (std::int64_t j = b * block; j < (b + 1) * block; j += kExactSumVirtualLanes) {
          one.template operator()<0>(j);
          one.template operator()<1>(j + L);
        }
        for (int k = 0; k < 2; ++k) {
          const auto largest = static_cast<std::uint32_t>(Vec::reduce_max_i(sums[k].largest));
          const std::uint32_t smallest = Vec::reduce_min_u(sums[k].smallest_less_one) + 1u;
          if (segments) {
            Vec::fold_lanes32(sums[k].sum, pre[k]->segment_sum[b]);  // the plain sum: exact where it is used
            pre[k]->segment_max_bits[b] = largest;
            pre[k]->segment_min_bits[b] = smallest;
          } else {
            Vec::store_lanes32(pre[k]->lane_sums[b], sums[k].sum);
            pre[k]->max_bits[b] = largest;
            pre[k]->min_bits[b] = smallest;
          }
        }
      }
    };
    with_gradient_store_mode(a.stream, value_out != nullptr, block_pass);
    for (PresummedBlocks* p : pre) {
      if (segments) {
        p->segments = blocks;
        p->segment_length = block;
      } else {
        p->blocks = blocks;
      }
    }
    return done;
  }
}

// quantize_dequantize's kAll where both parameters are one value per element of the row (channels
// last: every row adds into the same per-element sums) and the call asks for those sums
// (AffineGradParams::scale_columns, offset_columns): each whole vector's outputs as for_each_vector
// writes them, its scale and offset terms added straight into their columns' exact sums
// (exact_sums_add_v, the exact-sums kernel's per-element step) and never stored. The sums then need
// no pass of their own after the chunk (in a profile of one thread, 43% of the call's time went to
// that pass on AVX-512, most of it with the memory idle). Returns the
// elements done (the row's whole vectors; the rest is the caller's), 0 where the row is not such a
// chunk.
template <class Grads, class ValueOf>
std::int64_t affine_grad_into_columns(const AffineGradParams& g, const RowArgs& a, Grads grads, ValueOf value_of) {
  constexpr int L = Vec::kLanes;
  ColumnSums* const columns[2] = {g.scale_columns, g.offset_columns};
  if (columns[0] == nullptr || columns[1] == nullptr || a.per_row_mask != 0 || a.repeated_row_mask != 0 ||
      (a.broadcast_mask & 0xFu) != 0) {
    return 0;
  }
  const std::int64_t done = a.n / L * L;
  auto* out = static_cast<float*>(a.out);
  auto* value_out = static_cast<float*>(g.value_out);
  auto aligned = [](const float* q) { return reinterpret_cast<std::uintptr_t>(q) % (L * sizeof(float)) == 0; };
  if (done == 0 || (a.stream && !(aligned(out) && aligned(value_out)))) return 0;
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* scale = a.input<float>(2);
  const float* offset = a.input<float>(3);
  double* const acc[2] = {columns[0]->acc, columns[1]->acc};
  const ExactSumsParams* const sums[2] = {columns[0]->sums, columns[1]->sums};
  // The offset terms are zeros wherever the level lies in the grid (most elements), and a zero
  // changes no exact sum (at most the sign of a zero accumulator). So only the nonzero ones are
  // added, queued without a branch as they come and joined (exact_sums_add, the same per-element
  // step) in column order every kQueue or so and at the end: a branch per vector on whether it
  // holds any mispredicted so often, with a few percent of elements clipped, that it cost more
  // than adding every vector.
  const Vec::I magnitude = Vec::splat_i(0x7FFFFFFF), zero_i = Vec::splat_i(0);
  constexpr int kQueue = 256;
  alignas(64) float queue[kQueue + 2 * L];
  alignas(64) std::int32_t queue_at[kQueue + 2 * L];
  int queued = 0;
  auto join_queue = [&] {
    for (int i = 0; i < queued; ++i) exact_sums_add(acc[1], queue_at[i], queue[i], *sums[1]);
    queued = 0;
  };
  auto pass = [&]<bool kStream, bool kValue>() POLYQUANT_ALWAYS_INLINE {
    for (std::int64_t j = 0; j < done; j += L) {
      const Vec::F v[4] = {Vec::loadu(dy + j), Vec::loadu(x + j), Vec::loadu(scale + j), Vec::loadu(offset + j)};
      Vec::F level, d_scale, d_offset;
      const Vec::F dx = grads(v, level, d_scale, d_offset);
      if constexpr (kStream) {
        Vec::stream(out + j, dx);
        if constexpr (kValue) Vec::stream(value_out + j, value_of(v, level));
      } else {
        Vec::storeu(out + j, dx);
        if constexpr (kValue) Vec::storeu(value_out + j, value_of(v, level));
      }
      exact_sums_add_v(acc[0], j, d_scale, *sums[0]);
      queued += Vec::store_selected(queue + queued, queue_at + queued, Vec::gt_i(Vec::and_i(Vec::bits(d_offset), magnitude), zero_i),
                                    d_offset, static_cast<std::int32_t>(j));
      if (queued > kQueue) [[unlikely]] join_queue();
    }
  };
  with_gradient_store_mode(a.stream, value_out != nullptr, pass);
  join_queue();
  columns[0]->done = columns[1]->done = done;
  return done;
}

// The training path's per-element gradients (affine_grad_element), operation for operation, in
// working precision kR (narrow_v where the spec rounds: the parameters first, then each step it
// rounds), with the spec's spelled-out NaN choices. Operands: grad_output, x, scale, offset. The
// mask "v in [qmin, qmax]" is two ordered comparisons (false for NaN), and-ed. Products whose
// operands can both be NaN take the first one's (Vec::mul_first_nan).
template <QuotientRounding kR>
void affine_grad_rows(const AffineGradParams& g, const RowArgs& a) {
  const AffineParams& p = g.op;
  auto N = [](Vec::F v) POLYQUANT_ALWAYS_INLINE { return narrow_v<kR>(v); };
  const Vec::F lo = Vec::splat(static_cast<float>(p.qmin)), hi = Vec::splat(static_cast<float>(p.qmax));
  const Vec::F zero = Vec::zero();
  // v = rint(x / s) - o, the level before the clamp; `then` where lo <= v <= hi (both ordered
  // comparisons: false for NaN), else `otherwise`.
  auto if_in_range = [lo, hi](Vec::F v, Vec::F then, Vec::F otherwise) POLYQUANT_ALWAYS_INLINE {
    return Vec::select(Vec::mask_and(Vec::ge(v, lo), Vec::le(v, hi)), then, otherwise);
  };
  switch (p.kind) {
    case AffineKind::kDequantize:  // d/dx = d/do = s * g; d/ds = (x + o) * g
      if (g.of == AffineGradOf::kScale) {
        for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
          const Vec::F shifted = Vec::select(Vec::isnan(v[1]), Vec::add(v[1], v[1]), Vec::add(v[1], N(v[3])));  // x's NaN first
          return N(Vec::mul_first_nan(N(shifted), v[0]));
        });
      } else {
        for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE { return N(Vec::mul_first_nan(N(v[2]), v[0])); });
      }
      return;
    case AffineKind::kQuantize:
      // masked = g where in range, else g * 0; d/dx = masked / s; d/ds = (x / s) * -(masked / s);
      // d/do = -masked
      switch (g.of) {
        case AffineGradOf::kOffset:
          for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            const Vec::F level = N(Vec::sub(Vec::rint(N(Vec::div(v[1], N(v[2])))), N(v[3])));
            return Vec::neg(N(if_in_range(level, v[0], Vec::mul(v[0], zero))));
          });
          return;
        case AffineGradOf::kX:
          for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            const Vec::F s = N(v[2]);
            const Vec::F level = N(Vec::sub(Vec::rint(N(Vec::div(v[1], s))), N(v[3])));
            return N(Vec::div(N(if_in_range(level, v[0], Vec::mul(v[0], zero))), s));
          });
          return;
        default:
          for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            const Vec::F s = N(v[2]);
            const Vec::F scaled = N(Vec::div(v[1], s));
            const Vec::F level = N(Vec::sub(Vec::rint(scaled), N(v[3])));
            const Vec::F dx = N(Vec::div(N(if_in_range(level, v[0], Vec::mul(v[0], zero))), s));
            return N(Vec::mul_first_nan(scaled, Vec::neg(dx)));
          });
          return;
      }
    default:
      // d/dx = where(mask, g, 0); d/ds = g * where(mask, round(x/s) - x/s, clamp(round(x/s),
      // o + qmin, o + qmax)); d/do = where(mask, 0, g * s)
      switch (g.of) {
        case AffineGradOf::kX:
          for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            const Vec::F level = N(Vec::sub(Vec::rint(N(Vec::div(v[1], N(v[2])))), N(v[3])));
            return if_in_range(level, v[0], zero);
          });
          return;
        case AffineGradOf::kOffset:
          for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            const Vec::F s = N(v[2]);
            const Vec::F level = N(Vec::sub(Vec::rint(N(Vec::div(v[1], s))), N(v[3])));
            return if_in_range(level, zero, N(Vec::mul_first_nan(v[0], s)));
          });
          return;
        case AffineGradOf::kAll: {  // each as its own case (and the forward, affine_rows) computes it
          auto grads = [=](const Vec::F* v, Vec::F& level, Vec::F& d_scale, Vec::F& d_offset) POLYQUANT_ALWAYS_INLINE {
            const Vec::F s = N(v[2]), o = N(v[3]);
            const Vec::F scaled = N(Vec::div(v[1], s));
            const Vec::F rounded = Vec::rint(scaled);
            level = N(Vec::sub(rounded, o));
            const Vec::F clamped = torch_clamp_v(rounded, N(Vec::add(o, lo)), N(Vec::add(o, hi)));
            d_scale = N(Vec::mul_first_nan(v[0], if_in_range(level, N(Vec::sub(rounded, scaled)), clamped)));
            d_offset = if_in_range(level, zero, N(Vec::mul_first_nan(v[0], s)));
            return if_in_range(level, v[0], zero);
          };
          auto* terms_s = static_cast<float*>(g.scale_terms);
          auto* terms_o = static_cast<float*>(g.offset_terms);
          const Vec::F quiet_nan = Vec::splat(std::numeric_limits<float>::quiet_NaN());
          const bool canonical = p.canonical_nan;
          auto value_of = [=](const Vec::F* v, Vec::F level) POLYQUANT_ALWAYS_INLINE {  // affine_rows' quantize_dequantize
            const Vec::F value = N(Vec::mul(N(Vec::add(torch_clamp_v(level, lo, hi), N(v[3]))), N(v[2])));
            return canonical ? Vec::select(Vec::isnan(value), quiet_nan, value) : value;
          };
          // the terms summed as they are written, where they may be (their blocks along the run,
          // or their columns); the rest below
          std::int64_t done = affine_grad_presummed(g, a, grads, value_of);
          const bool columns = done == 0 && (done = affine_grad_into_columns(g, a, grads, value_of)) > 0;
          if (done == a.n) return;
          RowArgs rest = a;
          rest.in[0] = a.input<float>(0) + done;
          rest.in[1] = a.input<float>(1) + done;
          if (columns) {  // (the presummed blocks' parameters: one value each)
            rest.in[2] = a.input<float>(2) + done;
            rest.in[3] = a.input<float>(3) + done;
          }
          rest.out = static_cast<float*>(a.out) + done;
          rest.n = a.n - done;
          rest.index = a.index + done;
          if (g.value_out == nullptr) {  // autograd's backward: the gradients alone
            for_each_vector<4, FloatOuts<3>>(
                rest,
                [=](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
                  Vec::F level, d_scale, d_offset;
                  const Vec::F dx = grads(v, level, d_scale, d_offset);
                  return Vectors<3>{{dx, d_scale, d_offset}};
                },
                FloatOuts<3>{static_cast<const float*>(rest.out), {terms_s + done, terms_o + done}});
            return;
          }
          for_each_vector<4, FloatOuts<4>>(
              rest,
              [=](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
                Vec::F level, d_scale, d_offset;
                const Vec::F dx = grads(v, level, d_scale, d_offset);
                return Vectors<4>{{dx, value_of(v, level), d_scale, d_offset}};
              },
              FloatOuts<4>{static_cast<const float*>(rest.out), {static_cast<float*>(g.value_out) + done, terms_s + done, terms_o + done},
                           {true, false, false}});
          return;
        }
        default:
          for_each_vector<4>(a, [&](const Vec::F* v) POLYQUANT_ALWAYS_INLINE {
            const Vec::F s = N(v[2]), o = N(v[3]);
            const Vec::F scaled = N(Vec::div(v[1], s));
            const Vec::F rounded = Vec::rint(scaled);
            const Vec::F level = N(Vec::sub(rounded, o));
            const Vec::F clamped = torch_clamp_v(rounded, N(Vec::add(o, lo)), N(Vec::add(o, hi)));
            return N(Vec::mul_first_nan(v[0], if_in_range(level, N(Vec::sub(rounded, scaled)), clamped)));
          });
          return;
      }
  }
}

// affine_grad_rows in the call's working precision. Blocked parameters (many short runs in one
// call, one scale and offset per run) go through its vector paths too: for_each_vector walks them
// row by row with that row's parameters splat.
void affine_grad_f32(const void* params, const RowArgs& a) {
  const auto& g = *static_cast<const AffineGradParams*>(params);
  const AffineParams& p = g.op;
  if ((a.per_row_mask & 0b0011u) != 0) {
    ref::affine_grad_f32(params, a);
    return;
  }
  if (g.of == AffineGradOf::kAll && p.kind != AffineKind::kQuantizeDequantize) {
    // quantize / dequantize: the forward and the three single-gradient passes (the training path's
    // hot one, quantize_dequantize, has its own in affine_grad_rows).
    AffineGradParams one = g;
    RowArgs b = a;
    b.stream = false;
    if (g.value_out != nullptr) {
      RowArgs f = a;
      f.in[0] = a.in[1];
      f.in[1] = a.in[2];
      f.in[2] = a.in[3];
      f.broadcast_mask = a.broadcast_mask >> 1;
      f.per_row_mask = a.per_row_mask >> 1;
      f.repeated_row_mask = a.repeated_row_mask >> 1;
      f.out = g.value_out;
      f.stream = false;
      affine_f32(&p, f);
    }
    one.of = AffineGradOf::kScale;
    b.out = g.scale_terms;
    affine_grad_f32(&one, b);
    one.of = AffineGradOf::kOffset;
    b.out = g.offset_terms;
    affine_grad_f32(&one, b);
    one.of = AffineGradOf::kX;
    affine_grad_f32(&one, a);
    return;
  }
  switch (p.narrow) {
    case QuotientRounding::kFloat16: affine_grad_rows<QuotientRounding::kFloat16>(g, a); return;
    case QuotientRounding::kBFloat16: affine_grad_rows<QuotientRounding::kBFloat16>(g, a); return;
    default: affine_grad_rows<QuotientRounding::kNone>(g, a); return;
  }
}
