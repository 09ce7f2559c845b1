// Row kernels of the grouped reductions (core/grouped_reduce.h): per-channel / per-block
// statistics behind data-dependent scales (QKeras' auto/auto_po2) and AIMET's MinMax statistics.
//
// A reduction row kernel folds a run of n contiguous float32 elements (RowArgs::in[0], and in[1]
// where a second operand is read) into accumulators at RowArgs::out: one accumulator per element
// (`per_element`: the run lies along a kept dimension, element j feeds group j) or one for the
// whole run. No broadcast operands. Kernels run in the caller's floating-point environment.
//
// Every kernel set gives the same bits: each accumulator receives its elements in the same order
// in every set (the vector kernels keep the scalar spec's lane assignment below), and the maximum
// is order-independent by construction.
#pragma once

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/exact_sum.h"
#include "core/target.h"
#include "kernels/row.h"
#include <type_traits>

namespace polyquant::detail {

// ---- maximum: acc (float) = max over the run of x or |x| ---------------------------------------
// Subnormals and -0 count as +0, so equal values have one bit pattern and the maximum does not
// depend on the order of the fold (the callers flush subnormals anyway, as TensorFlow does). A NaN
// anywhere makes the accumulator NaN (which NaN is unspecified; callers canonicalize).
struct GroupMaxParams {
  bool absolute = true;
  bool per_element = false;
  // per_element: `rows` rows of n elements, x_row_stride elements apart, fold into the same n
  // accumulators, each taking its rows in order (a tile of a channels-last tensor).
  std::int64_t rows = 1;
  std::int64_t x_row_stride = 0;
  // segment > 0 (not per_element): the run is n / segment consecutive segments of `segment`
  // elements (n a multiple), segment s folding into acc[s * acc_stride]: many short groups (a
  // tall, narrow tensor reduced along its rows) in one call.
  std::int64_t segment = 0;
  std::int64_t acc_stride = 1;
};

// ---- sums of products: the least-squares sums of a scale fit ------------------------------------
// With v = x / divisor (x when !divide; x * inv_divisor when that reciprocal is exact, the same
// bits), each element contributes p = v * z and q = z * z, each rounded to float32 (tf.multiply),
// added in float64:
//   per_element: acc[2j] += p_rj, acc[2j + 1] += q_rj for r = 0 .. rows - 1 in order
//                (acc: n {sum_p, sum_q} pairs)
//   otherwise:   acc[k mod 8] += p_k, acc[8 + k mod 8] += q_k for the run's k-th element
//                (acc: 16 partial sums the caller combines in index order)
//   segment > 0: the run is n / segment consecutive segments (n a multiple: many short groups in
//                one call), each as a run of its own into 16 partials starting at 0.0, folded in
//                index order: acc[2 s] = part[0] + .. + part[7], acc[2 s + 1] = part[8] + ..
//                + part[15] (written, not added to): the sums a caller would combine from a
//                separate run, without 16 partials per segment in memory
struct ProductSumsParams {
  bool per_element = false;
  bool divide = false;
  float divisor = 1.0f;
  float inv_divisor = 0.0f;  // exact 1 / divisor, or 0
  // per_element: `rows` rows of n elements (x every x_row_stride, z every z_row_stride elements)
  // add into the same n pairs, each pair taking its rows in order.
  std::int64_t rows = 1;
  std::int64_t x_row_stride = 0, z_row_stride = 0;
  std::int64_t segment = 0;
};

// ---- minimum and maximum: acc (float) = min / max over the run of x (AIMET's MinMax statistics) --
// torch.amin / amax semantics: values kept exactly (subnormals, signs), a NaN anywhere makes the
// accumulator NaN. A run of n elements folds as 16 virtual lanes (lane = index mod 16 over the
// first n - n % 16 elements, each lane starting from +inf / -inf), then acc folds the lanes in
// lane order, then the remaining elements in order; every fold keeps the earlier value on ties.
// So every kernel set gives the same bits, the sign of a zero extreme included (which zero wins
// when both occur is a property of this lane order; torch's depends on its own vectorisation).
// Where `negative_zero` is set, it also records which accumulators saw a -0.0 (set to 1, never
// cleared, indexed alike): a zero extreme of an accumulator that saw none is +0 whatever the order,
// so only those that saw one need torch's order replayed for the sign (AIMET's MinMax statistics).
struct GroupMinMaxParams {
  bool per_element = false;  // element j of the run feeds accumulator j (rows in order)
  std::int64_t rows = 1;     // per_element: rows of n elements, x_row_stride apart
  std::int64_t x_row_stride = 0;
  float* max_out = nullptr;  // the maxima (RowArgs::out holds the minima), indexed alike
  std::uint8_t* negative_zero = nullptr;
};
inline constexpr int kMinMaxVirtualLanes = 16;

// ---- exact sums: float32 terms into float64 accumulators whose adds never round ---------------
// A value v joins its accumulator a only where a + v is exact in float64 (exact_float64_add,
// core/exact_sum.h); otherwise a is spilled (appended to the spill list with its accumulator's
// index) and the accumulator restarts at v. So the accumulators and the spills always hold the
// exact sum of every term; callers add them into core/exact_sums.h's per-target sums and round
// once, which gives the same bits for any split or order (AIMET's gradient sums). NaN and infinite
// values always spill (the check fails on them), so they reach the exact sums' flags.
//   per_element: acc[j] takes t_rj for rows r = 0 .. rows - 1 (row r at x + r * x_row_stride),
//                row by row, each row in column order;
//   otherwise:   32 virtual lanes (enough independent chains to hide the add-and-check latency)
//                take the run: term k goes to lane k mod 32, in blocks (below);
//   segment > 0: the run is n / segment consecutive segments (n a multiple: many short runs, e.g.
//                AIMET's blocks, in one call); each segment goes, in blocks, into 32 fresh lanes
//                (+0), the lanes are folded pairwise (exact_sums_fold_lanes) and the folded value
//                joins acc[s] by the same rule; every spill of segment s has index s.
// Blocks: from the start of the run (of each segment), len terms in all, the terms go in blocks
// of 32 m, m = min(16, len / 32) (exact_sums_block_rows), while a whole block remains; the rest
// term by term. A block is narrow when every term is finite and its nonzero terms' exponent fields
// (1 for subnormals) span at most 53 - 24 - ceil(log2 m) binades (exact_sums_block_is_narrow): then
// each lane's m terms sum exactly in float64 in any order (float32_block_sum_is_exact), and that
// sum (+0 for zeros) joins the lane, one check instead of m. Any other block goes term by term.
// Spills are appended in that order, so every kernel set writes the same accumulators and the same
// spill list. (A segment whose terms are narrow for its whole length spills nothing under these
// steps and joins its exact sum, so a kernel set may sum such segments in any order: the vector
// bodies do, for short segments.) Runs in the caller's floating-point environment
// (AIMET's never flushes).
// Terms already summed by the kernel that wrote them, as it wrote them (AIMET's gradient kernel),
// in one of two forms:
//   whole-run blocks (16 rows of 32 terms each): block b holds terms [512 b, 512 b + 512);
//     lane_sums[b][l] is the sum of its terms 32 i + l in float64 in any order, max_bits[b] and
//     min_bits[b] its span as exact_sums_span gives it;
//   segments (ExactSumsParams::segment, AIMET's blocks of the parameter): segment s holds terms
//     [segment_length s, segment_length (s + 1)); segment_sum[s] is the sum of all of them in
//     float64 in any order, segment_max_bits[s] and segment_min_bits[s] its span.
// A sum is used only where its terms are narrow (exact_sums_span_is_narrow: there every order
// gives the exact sum), so a kernel need not order its adds, and a sum that is not narrow may hold
// anything.
struct PresummedBlocks {
  static constexpr int kMaxBlocks = 4;
  static constexpr int kMaxSegments = 128;
  std::int64_t blocks = 0;  // whole-run blocks (0: none)
  alignas(64) double lane_sums[kMaxBlocks][32];
  std::uint32_t max_bits[kMaxBlocks], min_bits[kMaxBlocks];
  std::int64_t segments = 0, segment_length = 0;  // segments (0: none)
  double segment_sum[kMaxSegments];
  std::uint32_t segment_max_bits[kMaxSegments], segment_min_bits[kMaxSegments];
};

struct ExactSumsParams {
  bool per_element = false;
  std::int64_t rows = 1;
  std::int64_t x_row_stride = 0;
  std::int64_t segment = 0;
  // A hint, no change to the results: most terms are zeros (AIMET's offset gradient, zero at every
  // element inside the grid), so a vector body may look for the nonzero ones first (whole-run
  // blocks and short segments).
  bool mostly_zeros = false;
  // Another path choice: the terms already summed (PresummedBlocks): the whole run's blocks
  // (whole-run mode, blocks = n / 512: every whole block), or the segments (segment mode, the same
  // segment length and count); otherwise ignored. The vector bodies take their spans and sums
  // from it.
  const PresummedBlocks* presummed = nullptr;
  // The spill list: spill_value[i] left accumulator spill_index[i]; *spill_count entries so far.
  // Room past *spill_count for one spill per term (rows * n), and with segments 32 more per segment
  // (its fold's 31 pairs and the join): exact_sums_spill_room.
  double* spill_value = nullptr;
  std::int32_t* spill_index = nullptr;
  std::int64_t* spill_count = nullptr;
};
inline constexpr int kExactSumVirtualLanes = 32;

// Terms summed per element by the kernel that wrote them, as it wrote them (AIMET's gradient kernel
// when the parameters run along x's rows, channels last): the row's first `done` terms (set by the
// kernel; 0 where it summed none) joined acc[j] by the per_element rule above (one row, column
// order), their spills through `sums` with index j. The kernel may leave out zero terms (a zero
// changes no exact sum; at most the sign of a zero accumulator, or whether a non-finite one spills
// now or later), so the accumulators plus the spills hold the exact sums the exact-sums kernel
// would have left over those terms, and the kernel need not store them. The caller sums the rest
// (terms done .. n) with that kernel.
struct ColumnSums {
  double* acc = nullptr;
  const ExactSumsParams* sums = nullptr;
  std::int64_t done = 0;
};
// The most spills one exact-sums call can append (terms: rows * n; segments: n / segment or 0).
constexpr std::int64_t exact_sums_spill_room(std::int64_t terms, std::int64_t segments) {
  return terms + static_cast<std::int64_t>(kExactSumVirtualLanes) * segments;
}

inline namespace POLYQUANT_TARGET_NAMESPACE {

// A NaN, once folded in, stays (v < NaN is false); ties keep the accumulator.
POLYQUANT_HD inline float group_min_fold(float acc, float v) { return (v < acc || v != v) ? v : acc; }
POLYQUANT_HD inline bool is_negative_zero(float v) { return std::bit_cast<std::uint32_t>(v) == 0x80000000u; }
POLYQUANT_HD inline float group_max_fold_keep(float acc, float v) { return (v > acc || v != v) ? v : acc; }

POLYQUANT_HD inline float group_max_value(float x, bool absolute) {
  const float v = absolute ? std::fabs(x) : x;
  return std::fabs(v) < FLT_MIN ? 0.0f : v;
}
// a NaN, once folded in, stays.
POLYQUANT_HD inline float group_max_fold(float acc, float v) { return (v > acc || v != v) ? v : acc; }

// A segment's 16 partials folded in index order into its {sum_p, sum_q} pair (ProductSumsParams).
POLYQUANT_HD inline void product_sums_fold_segment(const double* part, double* pair) {
  double sp = 0.0, sq = 0.0;
  for (int k = 0; k < 8; ++k) {
    sp += part[k];
    sq += part[8 + k];
  }
  pair[0] = sp;
  pair[1] = sq;
}

// Appends `value`, owed to accumulator `index`, to the spill list.
POLYQUANT_HD inline void exact_sums_spill(const ExactSumsParams& p, double value, std::int64_t index) {
  const std::int64_t c = (*p.spill_count)++;
  p.spill_value[c] = value;
  p.spill_index[c] = static_cast<std::int32_t>(index);
}

// Value v (a term, or an exact sum) into accumulator acc[i]: joined where the add is exact, else
// acc[i] spills and restarts at v.
POLYQUANT_HD inline void exact_sums_join(double* acc, std::int64_t i, double v, const ExactSumsParams& p) {
  double s;
  if (exact_float64_add(acc[i], v, s)) {
    acc[i] = s;
    return;
  }
  exact_sums_spill(p, acc[i], i);
  acc[i] = v;
}
// Term t into acc[i] (ExactSumsParams).
POLYQUANT_HD inline void exact_sums_add(double* acc, std::int64_t i, float t, const ExactSumsParams& p) {
  exact_sums_join(acc, i, static_cast<double>(t), p);
}

// The rows of 32 terms per block for a run (segment) of len terms (ExactSumsParams' blocks); 0 when
// it has no whole row.
POLYQUANT_HD inline int exact_sums_block_rows(std::int64_t len) {
  return len / kExactSumVirtualLanes >= 16 ? 16 : static_cast<int>(len / kExactSumVirtualLanes);
}
// Whether a block of 32 m terms is narrow, from its largest magnitude and its smallest nonzero one
// (as float32 bits; max_bits 0: all zeros, which is narrow): every term finite, the exponent
// fields (subnormals: 1) spanning few enough binades that each lane's m terms sum exactly in
// float64.
POLYQUANT_HD inline bool exact_sums_span_is_narrow(std::uint32_t max_bits, std::uint32_t min_bits, int m) {
  if (max_bits == 0) return true;
  if (max_bits >= 0x7F800000u) return false;
  const int min_field = static_cast<int>(min_bits >> 23) > 1 ? static_cast<int>(min_bits >> 23) : 1;
  return float32_block_sum_is_exact(min_field, static_cast<int>(max_bits >> 23), m);
}
// The span of t[0 .. n), exact_sums_span_is_narrow's operands: the largest magnitude and the
// smallest nonzero one as float32 bits (both 0 where every term is a zero).
POLYQUANT_HD inline void exact_sums_span(const float* t, std::int64_t n, std::uint32_t& max_bits, std::uint32_t& min_bits) {
  max_bits = 0;
  min_bits = 0xFFFFFFFFu;
  for (std::int64_t k = 0; k < n; ++k) {
    const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(t[k]) & 0x7FFFFFFFu;
    max_bits = magnitude > max_bits ? magnitude : max_bits;
    if (magnitude != 0) min_bits = magnitude < min_bits ? magnitude : min_bits;
  }
  if (max_bits == 0) min_bits = 0;
}
// Whether the block t[0 .. 32 m) is narrow (exact_sums_span_is_narrow).
POLYQUANT_HD inline bool exact_sums_block_is_narrow(const float* t, int m) {
  std::uint32_t max_bits, min_bits;
  exact_sums_span(t, kExactSumVirtualLanes * m, max_bits, min_bits);
  return exact_sums_span_is_narrow(max_bits, min_bits, m);
}
// A lane a zero joins without change: finite and not -0 (+0 + -0 is +0, and a non-finite lane
// refuses it and spills).
POLYQUANT_HD inline bool exact_sums_lane_is_plain(double a) {
  return std::isfinite(a) && std::bit_cast<std::uint64_t>(a) != 0x8000000000000000u;
}
// The block t[0 .. 32 m) into lanes[0 .. 32) by the blocks' rule: a narrow block's lane sums join
// their lanes, any other block goes term by term (spills indexed by lane).
POLYQUANT_HD inline void exact_sums_block(double* lanes, const float* t, int m, const ExactSumsParams& p) {
  constexpr int V = kExactSumVirtualLanes;
  if (!exact_sums_block_is_narrow(t, m)) {
    for (int k = 0; k < V * m; ++k) exact_sums_add(lanes, k % V, t[k], p);
    return;
  }
  for (int l = 0; l < V; ++l) {
    double sum = 0.0;
    for (int i = 0; i < m; ++i) sum += static_cast<double>(t[V * i + l]);
    exact_sums_join(lanes, l, sum, p);
  }
}
// A run (segment) of len terms into lanes[0 .. 32): whole blocks, then the rest term by term.
POLYQUANT_HD inline void exact_sums_run(double* lanes, const float* t, std::int64_t len, const ExactSumsParams& p) {
  constexpr int V = kExactSumVirtualLanes;
  const int m = exact_sums_block_rows(len);
  std::int64_t k = 0;
  if (m > 0) {
    for (; k + V * m <= len; k += V * m) exact_sums_block(lanes, t + k, m, p);
  }
  for (; k < len; ++k) exact_sums_add(lanes, k % V, t[k], p);
}

// Folds 32 lanes into lanes[0], pairwise (lane l + width into lane l for width 16, 8, .., 1): a
// pair whose add would round spills the left value with `index` and keeps the right one. Returns
// the folded value; the lanes are left undefined.
POLYQUANT_HD inline double exact_sums_fold_lanes(double* lanes, std::int64_t index, const ExactSumsParams& p) {
  for (int width = kExactSumVirtualLanes / 2; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) {
      double s;
      if (exact_float64_add(lanes[l], lanes[l + width], s)) {
        lanes[l] = s;
        continue;
      }
      exact_sums_spill(p, lanes[l], index);
      lanes[l] = lanes[l + width];
    }
  }
  return lanes[0];
}

POLYQUANT_HD inline float product_sums_v(float x, const ProductSumsParams& p) {
  if (!p.divide) return x;
  return p.inv_divisor != 0.0f ? x * p.inv_divisor : x / p.divisor;
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
// ---- Scalar reference rows (host code) ----------------------------------------------------------
// A plain loop over the formulas above per op, <op>_reference_row<W> in the working type W, is what
// the registry's scalar kernels ref::<op>_<work> run (kernels/reference_kernels.cc stamps them from
// the op list). These rows are the portable fallback, and the oracle every vector kernel is tested
// against.
inline namespace POLYQUANT_TARGET_NAMESPACE {
template <class W>
inline void group_max_reference_row(const void* params, const RowArgs& a) {
  static_assert(std::is_same_v<W, float>);
  const auto& p = *static_cast<const GroupMaxParams*>(params);
  const float* x = a.input<float>(0);
  auto* acc = static_cast<float*>(a.out);
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      for (std::int64_t r = 0; r < p.rows; ++r) acc[j] = group_max_fold(acc[j], group_max_value(x[r * p.x_row_stride + j], p.absolute));
    }
  } else if (p.segment > 0) {
    for (std::int64_t s = 0; s * p.segment < a.n; ++s) {
      float m = acc[s * p.acc_stride];
      for (std::int64_t j = s * p.segment; j < (s + 1) * p.segment; ++j) m = group_max_fold(m, group_max_value(x[j], p.absolute));
      acc[s * p.acc_stride] = m;
    }
  } else {
    float m = acc[0];
    for (std::int64_t j = 0; j < a.n; ++j) m = group_max_fold(m, group_max_value(x[j], p.absolute));
    acc[0] = m;
  }
}

template <class W>
inline void group_min_max_reference_row(const void* params, const RowArgs& a) {
  static_assert(std::is_same_v<W, float>);
  const auto& p = *static_cast<const GroupMinMaxParams*>(params);
  const float* x = a.input<float>(0);
  auto* mn = static_cast<float*>(a.out);
  float* mx = p.max_out;
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      for (std::int64_t r = 0; r < p.rows; ++r) {
        const float v = x[r * p.x_row_stride + j];
        mn[j] = group_min_fold(mn[j], v);
        mx[j] = group_max_fold_keep(mx[j], v);
        if (p.negative_zero != nullptr && is_negative_zero(v)) p.negative_zero[j] = 1;
      }
    }
    return;
  }
  bool negative_zero = false;
  constexpr int kL = kMinMaxVirtualLanes;
  float lane_min[kL], lane_max[kL];
  for (int l = 0; l < kL; ++l) lane_min[l] = INFINITY, lane_max[l] = -INFINITY;
  const std::int64_t body = a.n - a.n % kL;
  for (std::int64_t j = 0; j < body; ++j) {
    lane_min[j % kL] = group_min_fold(lane_min[j % kL], x[j]);
    lane_max[j % kL] = group_max_fold_keep(lane_max[j % kL], x[j]);
    negative_zero = negative_zero || is_negative_zero(x[j]);
  }
  float m0 = mn[0], m1 = mx[0];
  for (int l = 0; l < kL; ++l) m0 = group_min_fold(m0, lane_min[l]), m1 = group_max_fold_keep(m1, lane_max[l]);
  for (std::int64_t j = body; j < a.n; ++j) {
    m0 = group_min_fold(m0, x[j]), m1 = group_max_fold_keep(m1, x[j]);
    negative_zero = negative_zero || is_negative_zero(x[j]);
  }
  mn[0] = m0;
  mx[0] = m1;
  if (p.negative_zero != nullptr && negative_zero) p.negative_zero[0] = 1;
}

template <class W>
inline void exact_sums_reference_row(const void* params, const RowArgs& a) {
  static_assert(std::is_same_v<W, float>);
  const auto& p = *static_cast<const ExactSumsParams*>(params);
  const float* x = a.input<float>(0);
  auto* acc = static_cast<double*>(a.out);
  if (p.per_element) {
    for (std::int64_t r = 0; r < p.rows; ++r) {
      for (std::int64_t j = 0; j < a.n; ++j) exact_sums_add(acc, j, x[r * p.x_row_stride + j], p);
    }
    return;
  }
  if (p.segment > 0) {
    constexpr int V = kExactSumVirtualLanes;
    for (std::int64_t s = 0; s * p.segment < a.n; ++s) {
      double lanes[V] = {};
      // the segment's spills carry its index: run its terms through lanes indexed from 0, then
      // relabel what they spilled
      const std::int64_t first = *p.spill_count;
      exact_sums_run(lanes, x + s * p.segment, p.segment, p);
      for (std::int64_t c = first; c < *p.spill_count; ++c) p.spill_index[c] = static_cast<std::int32_t>(s);
      exact_sums_join(acc, s, exact_sums_fold_lanes(lanes, s, p), p);
    }
    return;
  }
  exact_sums_run(acc, x, a.n, p);
}

template <class W>
inline void product_sums_reference_row(const void* params, const RowArgs& a) {
  static_assert(std::is_same_v<W, float>);
  const auto& p = *static_cast<const ProductSumsParams*>(params);
  const float* x = a.input<float>(0);
  const float* z = a.input<float>(1);
  auto* acc = static_cast<double*>(a.out);
  if (p.per_element) {
    for (std::int64_t j = 0; j < a.n; ++j) {
      for (std::int64_t r = 0; r < p.rows; ++r) {
        const float zr = z[r * p.z_row_stride + j];
        acc[2 * j] += static_cast<double>(product_sums_v(x[r * p.x_row_stride + j], p) * zr);
        acc[2 * j + 1] += static_cast<double>(zr * zr);
      }
    }
    return;
  }
  const std::int64_t segment = p.segment > 0 ? p.segment : a.n;
  for (std::int64_t s = 0; s * segment < a.n; ++s) {
    double local[16] = {};
    double* part = p.segment > 0 ? local : acc;
    for (std::int64_t k = 0; k < segment; ++k) {
      const std::int64_t j = s * segment + k;
      const float v = product_sums_v(x[j], p);
      part[k & 7] += static_cast<double>(v * z[j]);
      part[8 + (k & 7)] += static_cast<double>(z[j] * z[j]);
    }
    if (p.segment > 0) product_sums_fold_segment(local, acc + 2 * s);
  }
}

}  // namespace POLYQUANT_TARGET_NAMESPACE

}  // namespace polyquant::detail
