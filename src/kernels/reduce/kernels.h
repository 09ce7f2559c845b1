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

#include "core/target.h"
#include "kernels/row.h"

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
};

// ---- sums of products: the least-squares sums of a scale fit ------------------------------------
// With v = x / divisor (x when !divide; x * inv_divisor when that reciprocal is exact, the same
// bits), each element contributes p = v * z and q = z * z, each rounded to float32 (tf.multiply),
// added in float64:
//   per_element: acc[2j] += p_rj, acc[2j + 1] += q_rj for r = 0 .. rows - 1 in order
//                (acc: n {sum_p, sum_q} pairs)
//   otherwise:   acc[k mod 8] += p_k, acc[8 + k mod 8] += q_k for the run's k-th element
//                (acc: 16 partial sums the caller combines in index order)
struct ProductSumsParams {
  bool per_element = false;
  bool divide = false;
  float divisor = 1.0f;
  float inv_divisor = 0.0f;  // exact 1 / divisor, or 0
  // per_element: `rows` rows of n elements (x every x_row_stride, z every z_row_stride elements)
  // add into the same n pairs, each pair taking its rows in order.
  std::int64_t rows = 1;
  std::int64_t x_row_stride = 0, z_row_stride = 0;
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

POLYQUANT_HD inline float product_sums_v(float x, const ProductSumsParams& p) {
  if (!p.divide) return x;
  return p.inv_divisor != 0.0f ? x * p.inv_divisor : x / p.divisor;
}

}  // namespace POLYQUANT_TARGET_NAMESPACE
}  // namespace polyquant::detail
