// QKeras' alpha='auto' / 'auto_po2' scale searches: scale arrays, kept axes, grouped max, least squares.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "core/fpenv.h"
#include "core/grouped_reduce.h"
#include "families/qkeras/common.h"
#include "kernels/registry.h"

namespace polyquant::qkeras::internal {

// QKeras' po2 rounding of a positive scale: 2^round_half_even(ln(s + eps) / ln 2), in float32.
inline float po2_round(float s, float eps) {
  constexpr float kLn2 = 0.693147182f;  // float32(ln 2): np.log(2.0) and K.log(2.0) alike
  const float e = std::nearbyint(std::log(s + eps) / kLn2);
  // powf(2, e) of an integral e in the normal range is 2^e exactly: built from its exponent field
  // without a pow call (elsewhere, pow itself under the same flush rule).
  return (e >= -126.0f && e <= 127.0f) ? std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<int>(e) + 127) << 23)
                                        : pow2_float32(e);
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
bool exact_reciprocals(const ScaleArray& s);

// Writes a scale array into a caller's view of its shape (any strides).
void copy_scale_into(const ScaleArray& s, const MutableTensorView& out, const char* what);

// The output as a plain float32 array the least-squares rounds may write into while they search
// (C-contiguous, x's shape, not overlapping the x they read), or null.
float* speculative_output(const MutableTensorView& out, const Dims& shape, const float* x);

// Elementwise float32 map of a scale array under the flush rule.
template <class F>
void map_scale(ScaleArray& s, F&& f) {
  const detail::ScopedFlushDenormals flush;
  for (float& v : s.values) v = f(v);
}

// ---- reductions ------------------------------------------------------------------------------
// Max-based statistic per group of the kept dimensions: max(|x / divisor|) or max(x).
ScaleArray group_max(const float* x, const Dims& shape, const std::vector<bool>& keep, bool absolute, bool divide, float divisor);

// Sums of v*z and z*z over a group (v = x / divisor for quantized_bits' xs, x for
// quantized_linear), each product rounded to float32 (tf.multiply) and summed in float64. The level
// z of a run comes from the quantizer's own kernel in level mode, a block at a time, and the sums
// from the product-sums kernel (both the dispatched kernel set); a run's flat index (for
// stochastic levels) is its offset from `base`.
struct LeastSquaresAcc {
  double xz = 0, zz = 0;
};
static_assert(sizeof(LeastSquaresAcc) == 2 * sizeof(double), "the product-sums kernel writes {xz, zz} pairs");
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
  // Short contiguous rows (few channels): blocks of whole rows, the scale row tiled over the block,
  // so each kernel call covers up to 1024 elements. Every pair still takes its rows in order.
  void short_rows(Acc* acc, const float* x, const float* aux, std::int64_t aux_stride, std::int64_t n, std::int64_t rows) const {
    constexpr std::int64_t kBlock = 1024;
    const std::int64_t tile = std::max<std::int64_t>(1, kBlock / n);
    alignas(64) float z[kBlock];
    alignas(64) float scale[kBlock];
    if (aux_stride == 1) {
      for (std::int64_t r = 0; r < tile; ++r) std::memcpy(scale + r * n, aux, static_cast<std::size_t>(n) * sizeof(float));
    }
    detail::ProductSumsParams sp = sums_params(true);
    sp.x_row_stride = n;
    sp.z_row_stride = n;
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
      sp.rows = t;
      detail::RowArgs s;
      s.in[0] = xr;
      s.in[1] = z;
      s.out = acc;
      s.n = n;
      sums_kernel(&sp, s);
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

ScaleArray least_squares_po2(const std::vector<LeastSquaresAcc>& sums, const detail::GroupedLayout& L, const Dims& x_shape,
                             const std::vector<bool>& keep, const std::vector<std::int64_t>& block, float eps, const Po2Clip& clip);

// Reduction layout of the least-squares rounds: kept dims and blocks (elements_per_scale).
struct LsLayout {
  std::vector<bool> keep;
  std::vector<std::int64_t> block;
};

}  // namespace polyquant::qkeras::internal
