// QKeras' alpha='auto' / 'auto_po2' scale searches: scale arrays, kept axes, grouped max, least squares.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/fpenv.h"
#include "core/grouped_reduce.h"
#include "core/parallel.h"
#include "families/qkeras/kernels.h"
#include "families/qkeras/common.h"
#include "kernels/registry.h"

namespace polyquant::qkeras::internal {

// QKeras' po2 rounding of a positive scale: 2^round_half_even(ln(s + eps) / ln 2), in float32.
// The spec, and the path every input the fast one below does not settle takes.
inline float po2_round_reference(float s, float eps) {
  constexpr float kLn2 = 0.693147182f;  // float32(ln 2): np.log(2.0) and K.log(2.0) alike
  const float e = std::nearbyint(std::log(s + eps) / kLn2);
  // powf(2, e) of an integral e in the normal range is 2^e exactly: built from its exponent field
  // without a pow call (elsewhere, pow itself under the same flush rule).
  return (e >= -126.0f && e <= 127.0f) ? std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<int>(e) + 127) << 23)
                                        : pow2_float32(e);
}

// po2_round_fast_bits, kPo2SlowLo / kPo2SlowHi: the fast path of po2_round, in the kernel
// formulas (families/qkeras/kernels.h) so the rank-1 rounds' kernel can run it.
using detail::kPo2SlowHi;
using detail::kPo2SlowLo;
using detail::po2_round_fast_bits;

inline float po2_round(float s, float eps) {
  const std::uint32_t fast = po2_round_fast_bits(s + eps);
  return fast != 0 ? std::bit_cast<float>(fast) : po2_round_reference(s, eps);
}

// ---- axes ------------------------------------------------------------------------------------
// Which dimensions keep their own scale: the complement of QKeras' _get_scaling_axis.
std::vector<bool> kept_dims(const ScaleAxis& axis, int rank, const Settings& settings);
// `shape` with 1 on every dimension that does not keep its own scale.
Dims kept_shape(const Dims& shape, const std::vector<bool>& keep);
// No blocks: one group per kept index on every dimension.
inline std::vector<std::int64_t> no_blocks(int rank) { return std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1); }

// A float32 array with its (broadcastable) shape: a scale during a search.
struct ScaleArray {
  Dims shape;
  std::vector<float> values;
  TensorView view() const { return TensorView(values.data(), DType::kFloat32, shape); }
  bool same_bits(const ScaleArray& o) const {
    return shape == o.shape && values.size() == o.values.size() &&
           (values.empty() || std::memcmp(values.data(), o.values.data(), values.size() * sizeof(float)) == 0);
  }
};

// Whether every scale is a power of two with an exact float32 reciprocal: the kernels may then
// multiply by 1/s where QKeras divides by s (see QkBitsParams).
// Nonzero when the float of these bits has no exact reciprocal, detail::exact_reciprocal's rule
// (a nonzero fraction field, or a biased exponent outside [1, 253]) as integer bit tests without
// a branch, so loops over it vectorize.
inline std::uint32_t lacks_exact_reciprocal(std::uint32_t bits) {
  return (bits & 0x7FFFFFu) | static_cast<std::uint32_t>((bits >> 23) - 1u > 252u);
}
// Bit k of the result is flags[k] (64 bytes, each 0 or 1): eight bytes at a time, the product
// with 0x0102040810204080 gathers their low bits into its top byte (no carries: each of the
// eight partial products lands on a bit of its own).
inline std::uint64_t flag_mask64(const std::uint8_t* flags) {
  std::uint64_t mask = 0;
  for (int w = 0; w < 8; ++w) {
    std::uint64_t word;
    std::memcpy(&word, flags + 8 * w, sizeof(word));
    mask |= ((word * 0x0102040810204080ull) >> 56) << (8 * w);
  }
  return mask;
}
inline std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }
inline bool all_exact_reciprocals(const float* v, std::int64_t m) {
  std::uint32_t bad = 0;
  for (std::int64_t k = 0; k < m; ++k) bad |= lacks_exact_reciprocal(std::bit_cast<std::uint32_t>(v[k]));
  return bad == 0;
}
bool exact_reciprocals(const ScaleArray& s);

// Writes a scale array into a caller's view of its shape (any strides).
void copy_scale_into(const ScaleArray& s, const MutableTensorView& out, const char* what);

// Writes s * factor (float32, under the flush rule) into a caller's view of s's shape (any
// strides; validated); s may be changed (it is the search's last use of it).
void report_scale(ScaleArray& s, float factor, const MutableTensorView& out, const char* what);

// The output as a plain float32 array the least-squares rounds may write into while they search
// (C-contiguous, x's shape, not overlapping the x they read), or null.
float* speculative_output(const MutableTensorView& out, const Dims& shape, const float* x);

// Elementwise float32 map of a scale array under the flush rule (on every thread: one scale per
// row of a tall array is a million of them).
template <class F>
void map_scale(ScaleArray& s, F&& f) {
  detail::parallel_for(static_cast<std::int64_t>(s.values.size()), std::int64_t{1} << 15, [&](std::int64_t i0, std::int64_t i1) {
    const detail::ScopedFlushDenormals flush;
    for (std::int64_t i = i0; i < i1; ++i) s.values[static_cast<std::size_t>(i)] = f(s.values[static_cast<std::size_t>(i)]);
  });
}

// ---- reductions ------------------------------------------------------------------------------
// Max-based statistic per group of the kept dimensions: max(|x / divisor|) or max(x).
ScaleArray group_max(const float* x, const Dims& shape, const std::vector<bool>& keep, bool absolute, bool divide, float divisor);
// group_max of x on a CUDA device (any float dtype and strides; as the host's, which reads x as
// float32): the device's per-group minimum and maximum (core/device_elementwise.h). The host folds
// flush(v) or flush(|v|), monotone non-decreasing functions of the float32 value, so its maximum is
// that function of the float32 maximum, or of the larger of -minimum and maximum; float32
// rounding is monotone too, so rounding the float64 extremes gives the float32 ones. A NaN in a
// group makes its scale the quiet NaN, as on the host.
ScaleArray group_max_on_device(const TensorView& x, const std::vector<bool>& keep, bool absolute, bool divide, float divisor);

// Sums of v*z and z*z over a group (v = x / divisor for quantized_bits' xs, x for
// quantized_linear), each product rounded to float32 (tf.multiply) and summed in float64. The level
// z of a run comes from the quantizer's own kernel in level mode, a block at a time, and the sums
// from the product-sums kernel (both the dispatched kernel set); a run's flat index (for
// stochastic levels) is its offset from `base`.
// (No member initializers: a search's buffer of them is zeroed by every thread, LeastSquaresSums.)
struct LeastSquaresAcc {
  double xz, zz;
};
static_assert(sizeof(LeastSquaresAcc) == 2 * sizeof(double), "the product-sums kernel writes {xz, zz} pairs");

// The sum pairs of every group of a search: allocated once, zeroed before each round by all
// threads (so the first touch of a large buffer, one pair per row of a tall array, is split too).
class LeastSquaresSums {
 public:
  LeastSquaresAcc* zeroed(std::int64_t n) {
    if (n != size_) {
      buffer_.reset(new LeastSquaresAcc[static_cast<std::size_t>(n)]);
      size_ = n;
    }
    detail::parallel_for(n, std::int64_t{1} << 15, [&](std::int64_t g0, std::int64_t g1) {
      std::fill(buffer_.get() + g0, buffer_.get() + g1, LeastSquaresAcc{0.0, 0.0});
    });
    return buffer_.get();
  }
  std::span<const LeastSquaresAcc> view() const { return {buffer_.get(), static_cast<std::size_t>(size_)}; }

 private:
  std::unique_ptr<LeastSquaresAcc[]> buffer_;
  std::int64_t size_ = -1;
};
// Defined here: each quantizer's search loop configures one and runs detail::grouped_reduce over it.
struct LeastSquaresReducer {
  using Acc = LeastSquaresAcc;
  using ThreadEnv = detail::ScopedFlushDenormals;  // TensorFlow's flush rule on every thread
  detail::RowKernel level_kernel = nullptr;
  const void* level_params = nullptr;
  detail::RowKernel sums_kernel = detail::best_kernel(KernelOp::kProductSums, WorkType::kF32);
  bool divide = false;
  float divisor = 1.0f;
  const float* base = nullptr;
  // Optional: the quantizer's output kernel, run on the same blocks with the round's scale into
  // `out_base` (C-contiguous in x's layout, not overlapping x). When the round's new scale equals
  // the one it used (a fixed point: the search ends), that is the final output and the
  // quantizing pass is skipped.
  detail::RowKernel out_kernel = nullptr;
  const void* out_params = nullptr;
  float* out_base = nullptr;

  // The product-sums kernel's parameters: v = x / divisor (by its exact reciprocal when it has one).
  detail::ProductSumsParams sums_params(bool per_element) const {
    detail::ProductSumsParams sp;
    sp.per_element = per_element;
    sp.divide = divide;
    sp.divisor = divisor;
    sp.inv_divisor = divide ? detail::exact_reciprocal(divisor) : 0.0f;
    return sp;
  }

  void write_output(const detail::RowArgs& level_args) const {
    if (out_kernel == nullptr) return;
    detail::RowArgs o = level_args;
    o.out = out_base + level_args.index;
    o.stream = true;
    out_kernel(out_params, o);
  }

  void row(Acc* acc, std::int64_t group_stride, const float* x, const float* aux, std::int64_t aux_stride, std::int64_t n) const {
    constexpr std::int64_t kBlock = 1024;  // a multiple of 8: the k mod 8 partials run on across blocks
    alignas(64) float z[kBlock];
    alignas(64) float gathered[kBlock];
    // Sixteen partial sums (k mod 8 of xz, then of zz) in a fixed pattern: the same order on every run.
    double partials[16] = {};
    detail::ProductSumsParams sp = sums_params(group_stride == 1);
    for (std::int64_t b = 0; b < n; b += kBlock) {
      const std::int64_t m = std::min(kBlock, n - b);
      detail::RowArgs a;
      a.in[0] = x + b;
      if (aux_stride == 0) {
        a.in[1] = aux;
        a.broadcast_mask = 2u;
      } else if (aux_stride == 1) {
        a.in[1] = aux + b;
      } else {
        for (std::int64_t k = 0; k < m; ++k) gathered[k] = aux[(b + k) * aux_stride];
        a.in[1] = gathered;
      }
      a.out = z;
      a.n = m;
      a.index = (x + b) - base;
      level_kernel(level_params, a);
      write_output(a);
      if (group_stride <= 1) {
        detail::RowArgs s;
        s.in[0] = x + b;
        s.in[1] = z;
        s.out = group_stride == 1 ? static_cast<void*>(acc + b) : static_cast<void*>(partials);
        s.n = m;
        sums_kernel(&sp, s);
      } else {
        Acc* ab = acc + b * group_stride;
        for (std::int64_t k = 0; k < m; ++k) {
          const float v = detail::product_sums_v(x[b + k], sp);
          ab[k * group_stride].xz += static_cast<double>(v * z[k]);
          ab[k * group_stride].zz += static_cast<double>(z[k] * z[k]);
        }
      }
    }
    if (group_stride == 0) {
      double sxz = 0, szz = 0;
      for (int k = 0; k < 8; ++k) {
        sxz += partials[k];
        szz += partials[8 + k];
      }
      acc[0].xz += sxz;
      acc[0].zz += szz;
    }
  }
  // Short contiguous rows (few channels): blocks of `tile` whole rows (up to 1024 elements), the
  // scale row tiled over the block. Each position of the block (row i of the tile, column c) has
  // its own pair in `lanes`, which takes that position's terms block by block; at the end each
  // column's `tile` pairs are added to its accumulator in row order. A fixed order (it depends on
  // n alone), and no chain of dependent adds: a column of a (n / 4, 4) array would otherwise be
  // one add after another, tile rows at a time.
  void short_rows(Acc* acc, const float* x, const float* aux, std::int64_t aux_stride, std::int64_t n, std::int64_t rows) const {
    constexpr std::int64_t kBlock = 1024;
    const std::int64_t tile = std::max<std::int64_t>(1, kBlock / n);
    alignas(64) float z[kBlock];
    alignas(64) float scale[kBlock];
    alignas(64) Acc lanes[kBlock];
    if (aux_stride == 1) {
      for (std::int64_t r = 0; r < tile; ++r) std::memcpy(scale + r * n, aux, static_cast<std::size_t>(n) * sizeof(float));
    }
    std::fill(lanes, lanes + tile * n, Acc{});
    const detail::ProductSumsParams sp = sums_params(true);
    for (std::int64_t r = 0; r < rows; r += tile) {
      const std::int64_t t = std::min(tile, rows - r);
      const float* xr = x + r * n;
      detail::RowArgs a;
      a.in[0] = xr;
      a.in[1] = aux_stride == 0 ? aux : scale;
      a.broadcast_mask = aux_stride == 0 ? 2u : 0u;
      a.out = z;
      a.n = t * n;
      a.index = xr - base;
      level_kernel(level_params, a);
      write_output(a);
      detail::RowArgs s;
      s.in[0] = xr;
      s.in[1] = z;
      s.out = lanes;
      s.n = t * n;
      sums_kernel(&sp, s);
    }
    for (std::int64_t i = 0; i < tile; ++i) {
      for (std::int64_t c = 0; c < n; ++c) merge(acc[c], lanes[i * n + c]);
    }
  }
  // Rows of n elements, x_row_stride apart, into the same n accumulator pairs (channels last):
  // four rows' levels at a time, then their sums in one pass over the pairs (rows in order).
  void rows(Acc* acc, std::int64_t group_stride, const float* x, std::int64_t x_row_stride, const float* aux,
            std::int64_t aux_stride, std::int64_t n, std::int64_t rows) const {
    if (group_stride != 1 || aux_stride > 1) {
      for (std::int64_t r = 0; r < rows; ++r) row(acc, group_stride, x + r * x_row_stride, aux, aux_stride, n);
      return;
    }
    constexpr std::int64_t kBlock = 1024, kTile = 4;
    if (n < 256 && x_row_stride == n) {
      short_rows(acc, x, aux, aux_stride, n, rows);
      return;
    }
    alignas(64) float z[kTile][kBlock];
    detail::ProductSumsParams sp = sums_params(true);
    sp.x_row_stride = x_row_stride;
    sp.z_row_stride = kBlock;
    for (std::int64_t r = 0; r < rows; r += kTile) {
      const std::int64_t tile = std::min(kTile, rows - r);
      for (std::int64_t b = 0; b < n; b += kBlock) {
        const std::int64_t m = std::min(kBlock, n - b);
        for (std::int64_t i = 0; i < tile; ++i) {
          const float* xr = x + (r + i) * x_row_stride + b;
          detail::RowArgs a;
          a.in[0] = xr;
          a.in[1] = aux_stride == 0 ? aux : aux + b;
          a.broadcast_mask = aux_stride == 0 ? 2u : 0u;
          a.out = z[i];
          a.n = m;
          a.index = xr - base;
          level_kernel(level_params, a);
          write_output(a);
        }
        sp.rows = tile;
        detail::RowArgs s;
        s.in[0] = x + r * x_row_stride + b;
        s.in[1] = z[0];
        s.out = acc + b;
        s.n = m;
        sums_kernel(&sp, s);
      }
    }
  }
  // Runs of n elements (the innermost dimension, reduced), x_stride apart, into acc + r *
  // group_stride, the scale of run r at aux + r * aux_stride stepping aux_inner_stride (0 or 1):
  // short contiguous runs go a block of whole runs at a time (levels of ~1024 elements per
  // kernel call, each run's sum pair from the product-sums kernel's segments: its 16 partials
  // combined in index order), each added to its group: row()'s order, run by run.
  void runs(Acc* acc, std::int64_t group_stride, const float* x, std::int64_t x_stride, const float* aux, std::int64_t aux_stride,
            std::int64_t aux_inner_stride, std::int64_t n, std::int64_t count) const {
    constexpr std::int64_t kBlock = 1024;
    if (n >= kBlock / 4 || x_stride != n || aux_inner_stride > 1) {
      for (std::int64_t r = 0; r < count; ++r) {
        row(acc + r * group_stride, 0, x + r * x_stride, aux + r * aux_stride, aux_inner_stride, n);
      }
      return;
    }
    const std::int64_t tile = kBlock / n;
    alignas(64) float z[kBlock];
    alignas(64) float scale[kBlock];
    alignas(64) Acc pairs[kBlock];
    detail::ProductSumsParams sp = sums_params(false);
    sp.segment = n;
    const bool one_scale = aux_stride == 0 && aux_inner_stride == 0;
    // One scale per run, adjacent: passed compact to the kernels (RowArgs::per_row_mask).
    const bool per_run_scale = aux_stride == 1 && aux_inner_stride == 0;
    for (std::int64_t r = 0; r < count; r += tile) {
      const std::int64_t t = std::min(tile, count - r);
      const float* xr = x + r * n;
      if (!one_scale && !per_run_scale) {
        for (std::int64_t i = 0; i < t; ++i) {
          const float* ai = aux + (r + i) * aux_stride;
          if (aux_inner_stride == 0) {
            std::fill(scale + i * n, scale + (i + 1) * n, ai[0]);
          } else {
            std::memcpy(scale + i * n, ai, static_cast<std::size_t>(n) * sizeof(float));
          }
        }
      }
      detail::RowArgs a;
      a.in[0] = xr;
      a.in[1] = one_scale ? aux : per_run_scale ? aux + r : scale;
      a.broadcast_mask = one_scale ? 2u : 0u;
      if (per_run_scale) {
        a.per_row_mask = 2u;
        a.row_len = n;
      }
      a.out = z;
      a.n = t * n;
      a.index = xr - base;
      level_kernel(level_params, a);
      write_output(a);
      detail::RowArgs s;
      s.in[0] = xr;
      s.in[1] = z;
      s.out = pairs;
      s.n = t * n;
      sums_kernel(&sp, s);
      for (std::int64_t i = 0; i < t; ++i) merge(acc[(r + i) * group_stride], pairs[i]);
    }
  }
  void merge(Acc& into, const Acc& from) const {
    into.xz += from.xz;
    into.zz += from.zz;
  }
};

// The po2 least-squares scale per group: s = po2(mean(xz) / (mean(zz) + eps)), then clipped to
// [2^min_e, 2^max_e] when given; expanded onto `out_shape` (the kept dimensions, blocks repeated).
struct Po2Clip {
  std::optional<float> lo, hi;
};

// One group's least-squares scale from its sums (count: its element count, as float32), under the
// flush rule: po2(mean(xz) / (mean(zz) + eps)), clipped, a NaN made the quiet +NaN. In three steps
// (the quotient, po2_round, the rest), which least_squares_po2 runs as passes over many groups:
// finish(po2_round(quotient(sums, count, eps), eps), clip).
inline float least_squares_quotient(const LeastSquaresAcc& sums, float count, float eps) {
  const float qx = static_cast<float>(sums.xz) / count;
  const float qq = static_cast<float>(sums.zz) / count;
  return qx / (qq + eps);
}
inline float least_squares_finish(float s, const Po2Clip& clip) {
  if (clip.lo || clip.hi) {
    // K.clip -> tf.clip_by_value(s, lo, hi) (maximum(minimum(s, hi), lo)).
    if (clip.hi) s = detail::tf_min(s, *clip.hi);
    if (clip.lo) s = detail::tf_max(s, *clip.lo);
  }
  // A NaN scale is the quiet +NaN, as group_max's: the sums' NaN (and so its sign) depends on
  // the order in which a kernel set met NaNs of different signs.
  return std::isnan(s) ? std::numeric_limits<float>::quiet_NaN() : s;
}

ScaleArray least_squares_po2(std::span<const LeastSquaresAcc> sums, const detail::GroupedLayout& L, const Dims& x_shape,
                             const std::vector<bool>& keep, const std::vector<std::int64_t>& block, float eps, const Po2Clip& clip);

// ---- least-squares sums on a device ----------------------------------------------------------
// The host's sums are float64 sums in an order fixed by the shape (grouped_reduce's chunks, the
// reducer's tiles and lanes), which a device cannot replay. It need not: every float64 summation
// order of n terms t_i starting from +0 lies within gamma(n - 1) * sum |t_i| of the exact sum S
// (gamma(k) = k u / (1 - k u), u = 2^-53: each term passes through at most n - 1 rounded adds;
// an add with a +0 operand is exact, and no partial sum of float32 terms is a float64 subnormal,
// so the flush rule never touches them), and rounding to float32 is monotone. So where the float32
// roundings of both ends of that interval around S are the same nonzero value, the host's
// fixed-order sum rounds to it too, and the device, which sums exactly (any order, integer
// atomics), has the host's float32 sum without knowing its order. Where S lies within about
// n 2^-53 relative of a float32 rounding boundary, the terms' units may still show that every
// order adds exactly; elsewhere the round runs on a host copy of x, which gives the same bits by
// construction.
//
// float32_of_every_float64_sum: `exact` is the exact sum of n float32 terms rounded once to
// float64 (NaN / +-inf where a term is non-finite: then every order gives that too), `magnitude`
// the exact sum of their magnitudes rounded likewise, `unit` the smallest lowest-set-bit value of
// the terms (LsTerm's units; +inf when unknown). True, with `value`, when every float64 summation
// order from +0, converted to float32 in the caller's floating-point environment (the flush
// rule's, as least_squares_quotient converts), gives `value`: where the bound leaves a single
// float32, or where the terms' units show that every order adds exactly.
bool float32_of_every_float64_sum(double exact, double magnitude, std::int64_t n, double unit, float& value);

// One least-squares round's sums over x on its CUDA device with scale s, as the host's reducer
// would give them after least_squares_quotient's float32 conversion: the quantizer `op` writes each
// kind of term (its level-mode parameters with that LsTerm, indexed by it) into device memory, the
// device sums each group exactly, and float32_of_every_float64_sum settles each group's float32
// sums (with the terms' units for the few the bound leaves open). False (sums unspecified) where
// some group is not settled, or the grouped layout has more dimensions than the exact sums kernel
// takes or too many groups for its parts; the caller then runs the round on the host.
// `term_params` is indexed by LsTerm (kLevel's entry unused).
using LsTermParams = std::array<const void*, 6>;
bool least_squares_sums_on_device(const TensorView& x, KernelOp op, const LsTermParams& term_params, const ScaleArray& s,
                                  const detail::GroupedLayout& L, std::vector<LeastSquaresAcc>& sums);
template <class P>
bool least_squares_sums_on_device(const TensorView& x, KernelOp op, const P& level_params, const ScaleArray& s,
                                  const detail::GroupedLayout& L, std::vector<LeastSquaresAcc>& sums) {
  std::array<P, 6> params;
  LsTermParams pointers{};
  for (std::size_t t = 0; t < params.size(); ++t) {
    params[t] = level_params;
    params[t].ls_term = static_cast<detail::LsTerm>(t);
    pointers[t] = &params[t];
  }
  return least_squares_sums_on_device(x, op, pointers, s, L, sums);
}

// ---- the least-squares rounds when every group is one element -------------------------------
// Every dimension kept and no blocks (rank-1 inputs: one least-squares scale per element): a
// group's sums are its one product, 0.0 + double(v * z) and 0.0 + double(z * z), so a round maps
// each scale through a function of its own element alone, s' = f(x, s). The rounds of the search
// then run element by element: a block of x is read once and iterated up to `max_rounds` times in
// cache, instead of each round streaming x, the scales and a 16-byte accumulator per element.
//
// Same bits as the global loop: the global loop runs round r = 1, 2, .. and stops after the
// first round whose scale array equals its input bit for bit (shape included: the max pass's
// broadcast scale never equals a round's full one), else after max_rounds; each element's
// result is f applied r times. Since f is elementwise, once f(s) == s an element stays put, so
// every element's result is f^k(s0) with k its own first fixed round or max_rounds, and the
// global loop's round count is the largest first fixed round over the blocks (at least
// `first_fixed_round`: 2 when s0 is the broadcast max-pass scale), or max_rounds when some
// element has none. `pow2_scales` is set per block from the block's scales (it only lets the
// kernel multiply by an exact reciprocal: the same bits).
template <class P>
struct ElementwiseRounds {
  detail::RowKernel kernel = nullptr;  // the quantizer's kernel: level mode and output mode
  P level_params;                      // level_only set (run() sets ls_quotient, ls_po2 and eps)
  P out_params;                        // the final pass's parameters, or unused when out is null
  float eps = 0;
  Po2Clip clip;
  int max_rounds = 5;

  struct Result {
    int rounds = 0;  // rounds the global loop runs
  };

  // po2_round by the reference for an element the kernel's fast path left (its quotient from the
  // element's own formula), a NaN made the quiet NaN: the scale before the clip.
  float reference_scale(float x, float s, const P& ls_params) const {
    P qp = ls_params;
    qp.ls_po2 = false;
    const float po2 = po2_round_reference(detail::qk_bits_auto_element(x, s, qp), eps);
    return std::isnan(po2) ? std::numeric_limits<float>::quiet_NaN() : po2;
  }

  // s0: one value (broadcast) or n values. Writes the final scales into `s` (n values) and, when
  // `out` is not null, the quantizer's output with them (the final pass). With `report` (and
  // `out`), the final pass writes the reported scales there instead, s * out_params.m (float32,
  // the flush rule; P::scale_out), and `s` stays empty: nothing else needs them.
  Result run(const float* x, std::int64_t n, const std::vector<float>& s0, bool s0_full, std::vector<float>& s, float* out,
             float* report = nullptr) const {
    if (out == nullptr) report = nullptr;
    if (report == nullptr) s.resize(static_cast<std::size_t>(n));
    const int first_fixed_round = s0_full ? 1 : 2;
    constexpr std::int64_t kBlock = 1024, kChunk = std::int64_t{1} << 14;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<int> chunk_rounds(static_cast<std::size_t>(chunks), 0);
    const bool clipped = clip.lo.has_value() || clip.hi.has_value();
    detail::parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      const detail::ScopedFlushDenormals flush;
      alignas(64) float scales_a[kBlock], scales_b[kBlock], xs[kBlock], ss[kBlock];
      std::int32_t active[kBlock];  // the block's elements whose scale moved in the last round
      std::int32_t slow[kBlock];    // this round's elements the reference decides
      alignas(64) std::uint8_t moved[kBlock];  // round 1's flags (kBlock is a multiple of 64)
      for (std::int64_t c = c0; c < c1; ++c) {
        int rounds = 0;
        for (std::int64_t b = c * kChunk, end = std::min(n, (c + 1) * kChunk); b < end; b += kBlock) {
          const std::int64_t m = std::min(kBlock, end - b);
          // Round 1 reads the block's input scales where they are (s0's slice, or its one value
          // broadcast) and writes every new one into `next`, which then becomes `cur`.
          const float* s_in = s0_full ? s0.data() + b : s0.data();
          const std::int64_t s_step = s0_full ? 1 : 0;
          float* cur = scales_a;
          float* next = scales_b;
          std::int64_t live = m;  // round 1 takes the whole block in place, later rounds the moved ones
          // exact: the round's input scales all have exact reciprocals; all_exact: so do the
          // block's scales (a scale changes only by moving, and every moved one is tested).
          bool exact = all_exact_reciprocals(s_in, s0_full ? m : 1);
          bool all_exact = exact;
          int block_rounds = max_rounds;
          for (int r = 1; r <= max_rounds; ++r) {
            const bool whole = r == 1;
            const float* xr = x + b;
            const float* sr = s_in;
            if (!whole) {
              for (std::int64_t i = 0; i < live; ++i) xs[i] = x[b + active[i]], ss[i] = cur[active[i]];
              xr = xs;
              sr = ss;
            }
            // The kernel writes po2_round's fast path of each one-element quotient (P::ls_quotient,
            // P::ls_po2): the scale f(x, s) before the clip, or +0 where the reference decides.
            P lp = level_params;
            lp.pow2_scales = exact;
            lp.ls_quotient = true;
            lp.ls_po2 = true;
            lp.eps = eps;
            detail::RowArgs a;
            a.in[0] = xr;
            a.in[1] = sr;
            a.broadcast_mask = whole && !s0_full ? 2u : 0u;
            a.out = next;
            a.n = live;
            a.index = b;  // no stochastic levels in the searches: the index is unused
            kernel(&lp, a);
            std::int64_t still = 0, slow_count = 0;
            std::uint32_t bad = 0;
            if (whole) {
              // The whole block in passes that vectorize: the comparison with the input scale (as
              // bits, as ScaleArray::same_bits does) into byte flags, which also tells whether the
              // kernel left any to the reference (bits +0: rare; those are settled and the pass runs
              // again), and the clip before it when there is one. The moved ones are then listed
              // from 64-flag masks, one mispredicted branch per mask instead of one per word of
              // flags holding a moved one (most words on normal data, where the listing took as
              // long as the rounds' kernel).
              auto flag_moved = [&]() {
                std::uint32_t slow_bits = 0;
                for (std::int64_t i = 0; i < m; ++i) {
                  const std::uint32_t bits = std::bit_cast<std::uint32_t>(next[i]);
                  moved[i] = bits != std::bit_cast<std::uint32_t>(s_in[i * s_step]) ? 1u : 0u;
                  slow_bits |= bits == 0 ? 1u : 0u;
                }
                return slow_bits != 0;
              };
              auto settle_slow = [&]() {
                for (std::int64_t i = 0; i < m; ++i) {
                  if (std::bit_cast<std::uint32_t>(next[i]) == 0) next[i] = reference_scale(x[b + i], s_in[i * s_step], lp);
                }
              };
              if (clipped) {
                settle_slow();  // before the clip, which would clip the marker away
                for (std::int64_t i = 0; i < m; ++i) next[i] = least_squares_finish(next[i], clip);
                flag_moved();
              } else if (flag_moved()) {
                settle_slow();
                flag_moved();
              }
              std::swap(cur, next);
              std::fill(moved + m, moved + round_up(m, 64), std::uint8_t{0});
              for (std::int64_t i = 0; i < m; i += 64) {
                const std::uint64_t mask = flag_mask64(moved + i);
                for (std::uint64_t rest = mask; rest != 0; rest &= rest - 1) {
                  const std::int64_t k = i + std::countr_zero(rest);
                  active[still++] = static_cast<std::int32_t>(k);
                  bad |= lacks_exact_reciprocal(std::bit_cast<std::uint32_t>(cur[k]));
                }
              }
            } else {
              // The few moved ones, branch-free: each new scale (clipped) replaces the old one and
              // the moved ones form the next list; the ones the reference decides keep their old
              // scale for now and are listed apart.
              for (std::int64_t i = 0; i < live; ++i) {
                const std::int32_t k = active[i];
                float v = next[i];
                const bool is_slow = std::bit_cast<std::uint32_t>(v) == 0;
                if (clipped) v = least_squares_finish(v, clip);
                const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
                const bool moved_k = !is_slow && bits != std::bit_cast<std::uint32_t>(sr[i]);
                cur[k] = is_slow ? sr[i] : v;
                active[still] = k;  // still <= i: active[i] is read above before any later write
                still += moved_k ? 1 : 0;
                slow[slow_count] = k;
                slow_count += is_slow ? 1 : 0;
                bad |= moved_k ? lacks_exact_reciprocal(bits) : 0u;
              }
            }
            // The listed ones the reference decides (NaN among them: the fast path only returns
            // positive normal powers of two).
            for (std::int64_t j = 0; j < slow_count; ++j) {
              const std::int32_t k = slow[j];
              const float v = least_squares_finish(reference_scale(x[b + k], cur[k], lp), clip);
              const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
              if (bits == std::bit_cast<std::uint32_t>(cur[k])) continue;
              cur[k] = v;
              active[still++] = k;
              bad |= lacks_exact_reciprocal(bits);
            }
            live = still;
            // The next round's scales are the moved ones; the settled ones are not read again.
            exact = bad == 0;
            all_exact = all_exact && exact;
            if (live == 0) {
              block_rounds = std::max(r, first_fixed_round);
              break;
            }
          }
          // A block that found no fixed point ran every round: the global loop runs them all.
          rounds = std::max(rounds, block_rounds);
          if (report == nullptr) std::memcpy(s.data() + b, cur, static_cast<std::size_t>(m) * sizeof(float));
          if (out != nullptr) {
            // With `report`, the quantizing pass writes the reported scales too (P::scale_out).
            P op = out_params;
            op.scale_out = report == nullptr ? nullptr : report + b;
            op.pow2_scales = all_exact;
            detail::RowArgs a;
            a.in[0] = x + b;
            a.in[1] = cur;
            a.out = out + b;
            a.n = m;
            a.index = b;
            a.stream = true;  // the output (and report) are written once, not read again here
            kernel(&op, a);
          }
        }
        chunk_rounds[static_cast<std::size_t>(c)] = rounds;
      }
    });
    Result res;
    for (int r : chunk_rounds) res.rounds = std::max(res.rounds, r);
    return res;
  }
};

// Reduction layout of the least-squares rounds: kept dims and blocks (elements_per_scale).
struct LsLayout {
  std::vector<bool> keep;
  std::vector<std::int64_t> block;
};

}  // namespace polyquant::qkeras::internal
