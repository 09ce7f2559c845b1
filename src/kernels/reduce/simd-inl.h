// float32 SIMD kernels of the grouped reductions (kernels/reduce/kernels.h), written once against the
// `Vec` vocabulary and compiled per kernel set. Lane l of a vector starting at element j (a
// multiple of the lane count, itself a multiple of 8) is element j + l, so the k mod 8 partial
// sums receive their products in the scalar spec's order.
//
// No include guard: meant to be included once per kernel-set translation unit.

#include "kernels/simd/row_loop-inl.h"
#include "kernels/simd/exact_sums-inl.h"

void group_max_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const GroupMaxParams*>(params);
  constexpr int L = Vec::kLanes;
  const float* x = a.input<float>(0);
  auto* acc = static_cast<float*>(a.out);
  const Vec::F tiny = Vec::splat(FLT_MIN), zero = Vec::zero();
  const bool absolute = p.absolute;
  auto value = [&](Vec::F v) POLYQUANT_ALWAYS_INLINE {
    if (absolute) v = Vec::abs(v);
    return Vec::select(Vec::lt(Vec::abs(v), tiny), zero, v);
  };
  auto fold = [](Vec::F m, Vec::F v) POLYQUANT_ALWAYS_INLINE {
    return Vec::select(Vec::mask_or(Vec::gt(v, m), Vec::isnan(v)), v, m);
  };
  std::int64_t j = 0;
  if (p.per_element && a.n > 0 && a.n < L && L % a.n == 0 && p.x_row_stride == a.n && p.rows * a.n >= L) {
    // Few channels (n divides L), rows contiguous: lane l of every vector is channel l mod n, so
    // the rows fold vertically and each channel's lanes fold at the end (the maximum is
    // order-independent; which NaN is unspecified).
    const std::int64_t n = a.n, total = p.rows * a.n;
    Vec::F mv = value(Vec::loadu(x));
    std::int64_t k = L;
    for (; k + 2 * L <= total; k += 2 * L) mv = fold(fold(mv, value(Vec::loadu(x + k))), value(Vec::loadu(x + k + L)));
    for (; k + L <= total; k += L) mv = fold(mv, value(Vec::loadu(x + k)));
    alignas(64) float lanes[L];
    Vec::storeu(lanes, mv);
    for (int l = 0; l < L; ++l) acc[l % n] = group_max_fold(acc[l % n], lanes[l]);
    for (; k < total; ++k) acc[k % n] = group_max_fold(acc[k % n], group_max_value(x[k], absolute));
    return;
  }
  if (p.per_element) {
    const std::int64_t rows = p.rows, stride = p.x_row_stride;
    for (; j + L <= a.n; j += L) {
      Vec::F m = Vec::loadu(acc + j);
      for (std::int64_t r = 0; r < rows; ++r) m = fold(m, value(Vec::loadu(x + r * stride + j)));
      Vec::storeu(acc + j, m);
    }
    for (; j < a.n; ++j) {
      for (std::int64_t r = 0; r < rows; ++r) acc[j] = group_max_fold(acc[j], group_max_value(x[r * stride + j], absolute));
    }
    return;
  }
  if (p.segment > 0) {
    // Short groups: each segment's vectors, then its lanes and tail, folded without branches as
    // integers: key(v) orders non-NaN floats as signed integers (every value has one bit pattern
    // here: -0 and subnormals are +0), a NaN is tracked apart. The maximum is order-independent;
    // a NaN result is the quiet NaN (which NaN is unspecified).
    const std::int64_t seg = p.segment;
    auto key = [](float v) POLYQUANT_ALWAYS_INLINE {
      const auto b = std::bit_cast<std::int32_t>(v);
      return b ^ ((b >> 31) & 0x7FFFFFFF);
    };
    alignas(64) float lanes[L];
    if (absolute && seg >= L) {
      // |x| is +0, positive or +NaN: as int32 its bits order the values with every NaN above +inf,
      // so an integer maximum over the segment's vectors, across the lanes and over the tail
      // finds the maximum or a NaN. The flush (a subnormal maximum is +0) comes after: it keeps
      // the order, so the maximum of flushed values is the flushed maximum.
      const Vec::I magnitude = Vec::splat_i(0x7FFFFFFF);
      for (std::int64_t s = 0; s * seg < a.n; ++s) {
        const float* xs = x + s * seg;
        const float m0 = acc[s * p.acc_stride];
        Vec::I mv = Vec::and_i(Vec::bits(Vec::loadu(xs)), magnitude);
        std::int64_t k = L;
        for (; k + L <= seg; k += L) mv = Vec::max_i(mv, Vec::and_i(Vec::bits(Vec::loadu(xs + k)), magnitude));
        std::int32_t best = Vec::reduce_max_i(mv);
        for (; k < seg; ++k) best = std::max(best, std::bit_cast<std::int32_t>(xs[k]) & 0x7FFFFFFF);
        if (best < 0x00800000) best = 0;  // below FLT_MIN: +0 (group_max_value)
        const float m = std::bit_cast<float>(best);
        acc[s * p.acc_stride] = (m != m || m0 != m0) ? std::numeric_limits<float>::quiet_NaN() : group_max_fold(m0, m);
      }
      return;
    }
    for (std::int64_t s = 0; s * seg < a.n; ++s) {
      const float* xs = x + s * seg;
      const float m0 = acc[s * p.acc_stride];
      bool nan = m0 != m0;
      std::int32_t best = key(m0);
      std::int64_t k = 0;
      if (seg >= L) {
        Vec::F mv = value(Vec::loadu(xs));
        for (k = L; k + L <= seg; k += L) mv = fold(mv, value(Vec::loadu(xs + k)));
        Vec::storeu(lanes, mv);
        for (float v : lanes) nan |= v != v, best = std::max(best, key(v));
      }
      for (; k < seg; ++k) {
        const float v = group_max_value(xs[k], absolute);
        nan |= v != v;
        best = std::max(best, key(v));
      }
      acc[s * p.acc_stride] = nan ? std::numeric_limits<float>::quiet_NaN() : std::bit_cast<float>(best ^ ((best >> 31) & 0x7FFFFFFF));
    }
    return;
  }
  Vec::F m0 = Vec::splat(acc[0]), m1 = m0;
  for (; j + 2 * L <= a.n; j += 2 * L) {
    m0 = fold(m0, value(Vec::loadu(x + j)));
    m1 = fold(m1, value(Vec::loadu(x + j + L)));
  }
  for (; j + L <= a.n; j += L) m0 = fold(m0, value(Vec::loadu(x + j)));
  alignas(64) float lanes[2 * L];
  Vec::storeu(lanes, m0);
  Vec::storeu(lanes + L, m1);
  float m = acc[0];
  for (float v : lanes) m = group_max_fold(m, v);
  for (; j < a.n; ++j) m = group_max_fold(m, group_max_value(x[j], absolute));
  acc[0] = m;
}

void product_sums_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const ProductSumsParams*>(params);
  constexpr int L = Vec::kLanes;
  const float* x = a.input<float>(0);
  const float* z = a.input<float>(1);
  auto* acc = static_cast<double*>(a.out);
  const bool divide = p.divide, has_inv = p.inv_divisor != 0.0f;
  const Vec::F divisor = Vec::splat(p.divisor), inv = Vec::splat(p.inv_divisor);
  auto v_of = [&](Vec::F xv) POLYQUANT_ALWAYS_INLINE {
    if (!divide) return xv;
    return has_inv ? Vec::mul(xv, inv) : Vec::div(xv, divisor);
  };
  std::int64_t j = 0;
  if (p.per_element) {
    // A tile of rows per vector of columns: the pairs stay in L1 while their rows are added.
    const std::int64_t rows = p.rows, xs = p.x_row_stride, zs = p.z_row_stride;
    for (; j + L <= a.n; j += L) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const Vec::F zv = Vec::loadu(z + r * zs + j);
        Vec::accumulate_pairs_f64(acc + 2 * j, Vec::mul(v_of(Vec::loadu(x + r * xs + j)), zv), Vec::mul(zv, zv));
      }
    }
    // The remaining columns row by row (each pair still takes its rows in order; the pairs'
    // chains of additions interleave).
    const std::int64_t j0 = j;
    for (std::int64_t r = 0; r < rows && j0 < a.n; ++r) {
      for (j = j0; j < a.n; ++j) {
        const float zr = z[r * zs + j];
        acc[2 * j] += static_cast<double>(product_sums_v(x[r * xs + j], p) * zr);
        acc[2 * j + 1] += static_cast<double>(zr * zr);
      }
    }
    return;
  }
  // One run, or (segment) many short ones each with its own 16 partials, folded into its pair; a
  // segment's k-th element is lane k mod L of its vectors (L a multiple of 8), so k mod 8 holds.
  const std::int64_t segment = p.segment > 0 ? p.segment : a.n;
  for (std::int64_t s = 0; s * segment < a.n; ++s) {
    const float* xs = x + s * segment;
    const float* zs = z + s * segment;
    alignas(64) double local[16] = {};
    double* part = p.segment > 0 ? local : acc;
    std::int64_t k = 0;
    for (; k + L <= segment; k += L) {
      const Vec::F zv = Vec::loadu(zs + k);
      Vec::accumulate_mod8_f64(part, Vec::mul(v_of(Vec::loadu(xs + k)), zv));
      Vec::accumulate_mod8_f64(part + 8, Vec::mul(zv, zv));
    }
    for (; k < segment; ++k) {
      const float v = product_sums_v(xs[k], p);
      part[k & 7] += static_cast<double>(v * zs[k]);
      part[8 + (k & 7)] += static_cast<double>(zs[k] * zs[k]);
    }
    if (p.segment > 0) product_sums_fold_segment(local, acc + 2 * s);
  }
}

// Minimum and maximum (GroupMinMaxParams): 16 / L vectors hold the 16 virtual lanes of the spec.
void group_min_max_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const GroupMinMaxParams*>(params);
  constexpr int L = Vec::kLanes;
  constexpr int kVecs = kMinMaxVirtualLanes / L;
  const float* x = a.input<float>(0);
  auto* mn = static_cast<float*>(a.out);
  float* mx = p.max_out;
  auto fold_min = [](Vec::F m, Vec::F v, Vec::M nan) POLYQUANT_ALWAYS_INLINE { return Vec::select(Vec::mask_or(Vec::lt(v, m), nan), v, m); };
  auto fold_max = [](Vec::F m, Vec::F v, Vec::M nan) POLYQUANT_ALWAYS_INLINE { return Vec::select(Vec::mask_or(Vec::gt(v, m), nan), v, m); };
  // -0.0 is the one float whose bits, as int32, are below INT32_MIN + 1.
  const Vec::I above_negative_zero = Vec::splat_i(std::numeric_limits<std::int32_t>::min() + 1);
  auto negative_zero = [&](Vec::F v) POLYQUANT_ALWAYS_INLINE { return Vec::gt_i(above_negative_zero, Vec::bits(v)); };
  const Vec::M none = Vec::lt(Vec::zero(), Vec::zero());
  std::uint8_t* seen = p.negative_zero;
  std::int64_t j = 0;
  if (p.per_element) {
    const std::int64_t rows = p.rows, stride = p.x_row_stride;
    for (; j + L <= a.n; j += L) {
      Vec::F m0 = Vec::loadu(mn + j), m1 = Vec::loadu(mx + j);
      Vec::M nz = none;
      for (std::int64_t r = 0; r < rows; ++r) {
        const Vec::F v = Vec::loadu(x + r * stride + j);
        const Vec::M nan = Vec::isnan(v);
        m0 = fold_min(m0, v, nan);
        m1 = fold_max(m1, v, nan);
        nz = Vec::mask_or(nz, negative_zero(v));
      }
      Vec::storeu(mn + j, m0);
      Vec::storeu(mx + j, m1);
      if (seen != nullptr) {
        const unsigned bits = Vec::mask_bits(nz);
        for (int l = 0; l < L; ++l)
          if ((bits >> l) & 1u) seen[j + l] = 1;
      }
    }
    for (; j < a.n; ++j) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const float v = x[r * stride + j];
        mn[j] = group_min_fold(mn[j], v);
        mx[j] = group_max_fold_keep(mx[j], v);
        if (seen != nullptr && is_negative_zero(v)) seen[j] = 1;
      }
    }
    return;
  }
  Vec::F lo[kVecs], hi[kVecs];
  for (int v = 0; v < kVecs; ++v) lo[v] = Vec::splat(INFINITY), hi[v] = Vec::splat(-INFINITY);
  Vec::M nz = none;
  for (; j + kMinMaxVirtualLanes <= a.n; j += kMinMaxVirtualLanes) {
    for (int v = 0; v < kVecs; ++v) {
      const Vec::F xv = Vec::loadu(x + j + v * L);
      const Vec::M nan = Vec::isnan(xv);
      lo[v] = fold_min(lo[v], xv, nan);
      hi[v] = fold_max(hi[v], xv, nan);
      nz = Vec::mask_or(nz, negative_zero(xv));
    }
  }
  bool any_negative_zero = Vec::mask_bits(nz) != 0;
  alignas(64) float lane_min[kMinMaxVirtualLanes], lane_max[kMinMaxVirtualLanes];
  for (int v = 0; v < kVecs; ++v) Vec::storeu(lane_min + v * L, lo[v]), Vec::storeu(lane_max + v * L, hi[v]);
  float m0 = mn[0], m1 = mx[0];
  for (int l = 0; l < kMinMaxVirtualLanes; ++l) m0 = group_min_fold(m0, lane_min[l]), m1 = group_max_fold_keep(m1, lane_max[l]);
  for (; j < a.n; ++j) {
    m0 = group_min_fold(m0, x[j]), m1 = group_max_fold_keep(m1, x[j]);
    any_negative_zero = any_negative_zero || is_negative_zero(x[j]);
  }
  mn[0] = m0;
  mx[0] = m1;
  if (seen != nullptr && any_negative_zero) seen[0] = 1;
}

// Exact sums (ExactSumsParams): per element, each vector's lanes join their accumulators where the
// add is exact; otherwise the 32 lanes take the run in blocks: a narrow block's lane sums (plain
// vector adds) join with one check per lane, any other block and the whole rows after the blocks
// join term by term. Refused lanes spill in lane order, which is the scalar spec's order.
void exact_sums_f32(const void* params, const RowArgs& a) {
  const auto& p = *static_cast<const ExactSumsParams*>(params);
  constexpr int L = Vec::kLanes;
  constexpr int V = kExactSumVirtualLanes;
  static_assert(V % L == 0, "the virtual lanes are whole vectors");
  const float* x = a.input<float>(0);
  auto* acc = static_cast<double*>(a.out);
  if (p.per_element) {
    for (std::int64_t r = 0; r < p.rows; ++r) {
      const float* row = x + r * p.x_row_stride;
      std::int64_t j = 0;
      for (; j + L <= a.n; j += L) exact_sums_add_v(acc, j, Vec::loadu(row + j), p);
      for (; j < a.n; ++j) exact_sums_add(acc, j, row[j], p);
    }
    return;
  }
  static_assert(V == 32, "Lanes32 holds the virtual lanes");
  const Vec::I magnitude = Vec::splat_i(0x7FFFFFFF), zero_i = Vec::splat_i(0), one_i = Vec::splat_i(1);
  // Every lane plain (exact_sums_lane_is_plain): a block of zeros may then be skipped. Asked only
  // when a block of zeros comes (the lanes' `plain` state: 1 yes, 0 no, -1 not known yet).
  auto all_plain = [](const double* memory) {
    bool plain = true;
    for (int l = 0; l < V; ++l) plain = plain && exact_sums_lane_is_plain(memory[l]);
    return plain;
  };
  auto lanes_are_plain = [&](const double* memory, int& plain) {
    if (plain < 0) plain = all_plain(memory) ? 1 : 0;
    return plain == 1;
  };
  // The lanes (in `memory`) whose joins of value[l] were refused: spilled (index `label`, or the
  // lane where label < 0) and restarted at value[l], in lane order; the lanes' plain state is then
  // not known.
  auto spill_refused = [&](double* memory, const auto* value, std::uint32_t refused, std::int64_t label, int& plain) {
    for (int l = 0; l < V; ++l) {
      if (((refused >> l) & 1u) == 0) continue;
      exact_sums_spill(p, memory[l], label < 0 ? l : label);
      memory[l] = static_cast<double>(value[l]);
    }
    plain = -1;
  };
  // Row t[0 .. 32) term by term into the lanes.
  auto add_row = [&](Vec::Lanes32& lanes, double* memory, int& plain, const float* t, std::int64_t label) POLYQUANT_ALWAYS_INLINE {
    const std::uint32_t refused = Vec::add_exact_lanes32(lanes, t);
    if (refused != 0) [[unlikely]] {
      Vec::store_lanes32(memory, lanes);
      spill_refused(memory, t, refused, label, plain);
      lanes = Vec::load_lanes32(memory);
    }
  };
  // A scan of terms for the narrowness rule: their largest magnitude and smallest nonzero magnitude
  // (as bits: magnitude - 1 taken as unsigned maps zeros past every other).
  struct Span {
    Vec::I largest, smallest_less_one;
  };
  auto no_span = [&] { return Span{zero_i, Vec::splat_i(-1)}; };
  // The span's largest magnitude and smallest nonzero magnitude as bits (exact_sums_span_is_narrow's operands).
  auto largest_bits = [](const Span& span) { return static_cast<std::uint32_t>(Vec::reduce_max_i(span.largest)); };
  auto smallest_bits = [](const Span& span) { return Vec::reduce_min_u(span.smallest_less_one) + 1u; };
  // Rows t[0 .. 32 rows) into the span and into the lane sums `sum` (rounded as float64 adds are),
  // in two halves of 16 lanes: every row's first 16 terms, then its last 16, so that only half of
  // the sums is live in each loop (see add_block).
  auto span_and_sum = [&](Span& span, Vec::Lanes32& sum, const float* t, std::int64_t rows) POLYQUANT_ALWAYS_INLINE {
    auto half = [&]<int h>() POLYQUANT_ALWAYS_INLINE {  // lanes [16 h, 16 h + 16) of every row
      for (std::int64_t i = 0; i < rows; ++i) {
        const float* part = t + V * i + 16 * h;
        for (int k = 0; k < 16; k += L) {
          const Vec::I bits = Vec::and_i(Vec::bits(Vec::loadu(part + k)), magnitude);
          span.largest = Vec::max_i(span.largest, bits);
          span.smallest_less_one = Vec::min_u(span.smallest_less_one, Vec::sub_i(bits, one_i));
        }
        Vec::template add_half_lanes32<h>(sum, part);
      }
    };
    half.template operator()<0>();
    half.template operator()<1>();
  };
  // Mostly zeros (ExactSumsParams::mostly_zeros): the positions of the nonzero terms (either sign
  // of zero is a zero) among t[0 .. 32 m), at most kSparseTerms of them into `at`, in order; -1
  // where there are more. One test per row of 32 terms; a row with a nonzero term is then read
  // vector by vector.
  constexpr int kSparseTerms = 16;
  auto row_is_zeros = [&](const float* row) POLYQUANT_ALWAYS_INLINE {
    Vec::I any = Vec::bits(Vec::loadu(row));
    for (int k = L; k < V; k += L) any = Vec::or_i(any, Vec::bits(Vec::loadu(row + k)));
    return Vec::mask_bits(Vec::gt_i(Vec::and_i(any, magnitude), zero_i)) == 0;
  };
  auto nonzero_terms = [&](const float* t, int m, int* at) {
    int count = 0;
    for (int i = 0; i < m; ++i) {
      const float* row = t + V * i;
      if (row_is_zeros(row)) [[likely]] continue;
      for (int k = 0; k < V; k += L) {
        unsigned bits = Vec::mask_bits(Vec::gt_i(Vec::and_i(Vec::bits(Vec::loadu(row + k)), magnitude), zero_i));
        for (; bits != 0; bits &= bits - 1) {
          if (count == kSparseTerms) return -1;
          at[count++] = V * i + k + std::countr_zero(bits);
        }
      }
    }
    return count;
  };
  bool sparse = p.mostly_zeros;  // off for the rest of the call after a block with more nonzero terms
  // A narrow block's lane sums `sum` join the lanes in `memory` (fresh lanes take them).
  auto join_block = [&](double* memory, int& plain, bool fresh, const Vec::Lanes32& sum, std::int64_t label) POLYQUANT_ALWAYS_INLINE {
    if (fresh) {
      Vec::store_lanes32(memory, sum);
      return;
    }
    Vec::Lanes32 lanes = Vec::load_lanes32(memory);
    const std::uint32_t refused = Vec::join_exact_lanes32(lanes, sum);  // refused lanes unchanged
    Vec::store_lanes32(memory, lanes);
    if (refused != 0) [[unlikely]] {
      alignas(64) double sums[V];
      Vec::store_lanes32(sums, sum);
      spill_refused(memory, sums, refused, label, plain);
    }
  };
  // The block t[0 .. 32 m) into the lanes, whose home is `memory` (exact_sums_block): the block's
  // span, from which exact_sums_block_is_narrow's answer, and its lane sums (zeros leave a lane sum
  // as it is: +0 stays +0; a block that is not narrow drops them), joined with one check per lane.
  // Registers: the lanes wait in memory, and the block is summed in two halves of 16 lanes (every
  // row's first 16 terms, then its last 16). With 32 lanes, 32 sums and the span live at once, AVX2's
  // 16 registers spilled in the summing loop. (A test per row to skip rows of zeros cost dense
  // blocks more than it saved; the caller's hint, below, asks for it instead.) `fresh`: the lanes
  // are a segment's +0 lanes, which take any finite lane sum exactly.
  // Mostly zeros: the span and the lane sums of the block's few nonzero terms alone. They are the
  // block's: zeros widen no span, and where the block is narrow every partial sum of a lane's terms
  // is exact, so leaving out its zeros (and their order) changes no lane sum; a lane of zeros is
  // +0 either way.
  // `pre`: the block's span and lane sums, already taken (ExactSumsParams::presummed), or null.
  auto add_block = [&](double* memory, int& plain, bool fresh, const float* t, int m, std::int64_t label,
                       const PresummedBlocks* pre, std::int64_t block) POLYQUANT_ALWAYS_INLINE {
    std::uint32_t max_bits, min_bits;
    Vec::Lanes32 sum;
    int at[kSparseTerms], count = -1;
    if (pre != nullptr) {
      max_bits = pre->max_bits[block];
      min_bits = pre->min_bits[block];
      sum = Vec::load_lanes32(pre->lane_sums[block]);
    } else if (sparse && (count = nonzero_terms(t, m, at)) >= 0) {
      alignas(64) double sums[V] = {};
      max_bits = 0;
      min_bits = count == 0 ? 0u : 0xFFFFFFFFu;  // as smallest_bits gives it for a block of zeros
      for (int c = 0; c < count; ++c) {
        const float v = t[at[c]];
        const std::uint32_t bits = std::bit_cast<std::uint32_t>(v) & 0x7FFFFFFFu;
        max_bits = std::max(max_bits, bits);
        min_bits = std::min(min_bits, bits);
        sums[at[c] % V] += static_cast<double>(v);
      }
      sum = Vec::load_lanes32(sums);
    } else {
      sparse = false;
      Span span = no_span();
      sum = Vec::zero_lanes32();
      span_and_sum(span, sum, t, m);
      max_bits = largest_bits(span);
      min_bits = smallest_bits(span);
    }
    // zeros join plain lanes without changing them (fresh lanes take them: that writes memory)
    if (max_bits == 0 && !fresh && lanes_are_plain(memory, plain)) return;
    if (exact_sums_span_is_narrow(max_bits, min_bits, m)) [[likely]] {
      join_block(memory, plain, fresh, sum, label);
      return;
    }
    Vec::Lanes32 lanes = fresh ? Vec::zero_lanes32() : Vec::load_lanes32(memory);
    for (int i = 0; i < m; ++i) add_row(lanes, memory, plain, t + V * i, label);
    Vec::store_lanes32(memory, lanes);
  };
  // A run (segment) of n terms into the lanes in `memory` (exact_sums_run): the blocks, the whole
  // rows left, then the last terms in scalar; `fresh`: the lanes start at +0.
  auto run_lanes = [&](double* memory, int plain, bool fresh, const float* t, std::int64_t n, std::int64_t label) POLYQUANT_ALWAYS_INLINE {
    const int m = exact_sums_block_rows(n);
    // the caller's blocks: a whole run (not a segment), every whole block of 16 rows of it
    const PresummedBlocks* pre = p.presummed;
    if (pre != nullptr && !(label < 0 && !fresh && m == 16 && pre->blocks > 0 && n / (V * m) == pre->blocks)) pre = nullptr;
    std::int64_t k = 0;
    if (m > 0) {
      for (; k + V * m <= n; k += V * m) add_block(memory, plain, fresh && k == 0, t + k, m, label, pre, k / (V * m));
    }
    if (k + V <= n) {
      Vec::Lanes32 lanes = Vec::load_lanes32(memory);
      for (; k + V <= n; k += V) add_row(lanes, memory, plain, t + k, label);
      Vec::store_lanes32(memory, lanes);
    }
    if (k == n) return;
    const std::int64_t first = *p.spill_count;
    for (; k < n; ++k) exact_sums_add(memory, k % V, t[k], p);
    if (label >= 0) {
      for (std::int64_t c = first; c < *p.spill_count; ++c) p.spill_index[c] = static_cast<std::int32_t>(label);
    }
  };
  if (p.segment > 0) {
    const std::int64_t seg = p.segment, segments = a.n / seg;
    // The spec's steps for segment s. With whole blocks the first (fresh) block writes every lane.
    auto spec_segment = [&](std::int64_t s) {
      alignas(64) double memory[V];
      if (exact_sums_block_rows(seg) == 0) std::fill(memory, memory + V, 0.0);
      run_lanes(memory, 1, true, x + s * seg, seg, s);
      double folded;
      if (Vec::fold_lanes32(Vec::load_lanes32(memory), folded)) {
        exact_sums_join(acc, s, folded, p);
        return;
      }
      // a fold that would round: the spec's scalar steps
      exact_sums_join(acc, s, exact_sums_fold_lanes(memory, s, p), p);
    };
    // Short segments of whole rows (AIMET's blocks): where a segment's terms are narrow for its
    // length (exact_sums_span_is_narrow with seg terms), every add of the spec's blocks, rows and
    // fold in it is exact, so the spec spills nothing and joins acc[s] with the segment's exact
    // sum, which plain float64 adds in any order give. Such a segment takes one pass (its span and
    // lane sums) and one test, where the spec's steps pay a block test and a checked fold; any
    // other segment takes the spec's steps. (The test used to be made per group of 1024 terms:
    // with AIMET's blocks of 128, whose scale terms off the grid are up to qmax times the others,
    // most groups failed it, and every segment of those took the spec's steps.)
    // Segments the caller summed (ExactSumsParams::presummed) take their spans and sums from it.
    constexpr std::int64_t kShortTerms = 512;
    std::int64_t s = 0;
    const PresummedBlocks* pre = p.presummed;
    if (pre != nullptr && pre->segments == segments && pre->segment_length == seg && seg % V == 0 && seg <= kShortTerms) {
      for (; s < segments; ++s) {
        if (exact_sums_span_is_narrow(pre->segment_max_bits[s], pre->segment_min_bits[s], static_cast<int>(seg))) [[likely]] {
          exact_sums_join(acc, s, pre->segment_sum[s], p);
        } else {
          spec_segment(s);
        }
      }
    }
    if (seg % V == 0 && seg <= kShortTerms) {
      const std::int64_t rows = seg / V;
      for (; s < segments; ++s) {
        if (p.mostly_zeros) {
          // a segment of zeros: narrow, its lanes +0, folded to +0 (as below, without the sums)
          bool zeros = true;
          for (std::int64_t i = 0; i < rows && zeros; ++i) zeros = row_is_zeros(x + s * seg + V * i);
          if (zeros) {
            exact_sums_join(acc, s, 0.0, p);
            continue;
          }
        }
        Span span = no_span();
        Vec::Lanes32 lanes = Vec::zero_lanes32();
        span_and_sum(span, lanes, x + s * seg, rows);
        double sum;
        Vec::fold_lanes32(lanes, sum);  // the sum; its exactness follows from the test below
        if (exact_sums_span_is_narrow(largest_bits(span), smallest_bits(span), static_cast<int>(seg))) {
          exact_sums_join(acc, s, sum, p);
        } else {
          spec_segment(s);
        }
      }
    }
    for (; s < segments; ++s) spec_segment(s);
    return;
  }
  run_lanes(acc, -1, false, x, a.n, -1);
}
