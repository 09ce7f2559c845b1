// QKeras layer: validation, QKeras' derived constants (each computed as its float32 TensorFlow op
// computes it), the scale searches of alpha="auto"/"auto_po2" over grouped reductions, and the
// kernel calls. No numerics beyond the constants: the per-element work is in the kernels.
#include "polyquant/qkeras.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/elementwise.h"
#include "core/fpenv.h"
#include "core/grouped_reduce.h"
#include "core/parallel.h"
#include "kernels/registry.h"
#include "core/numpy_semantics.h"
#include "polyquant/error.h"

namespace polyquant::qkeras {
namespace {

using detail::KernelOp;
using detail::WorkType;

[[noreturn]] void value_error(const std::string& message) { throw Error(ErrorKind::kValue, message); }

std::string number(double v) {
  std::string s = std::to_string(v);
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

void require_finite(double v, const char* name) {
  if (!std::isfinite(v)) value_error(std::string(name) + ": must be a finite number, got " + number(v));
}

// The shapes of the variant-like attribute structs: one entry for an int kind.
void require_well_formed(const ScaleAxis& axis) {
  if (axis.kind == ScaleAxis::Kind::kInt && axis.axes.size() != 1) {
    value_error("scale_axis: an int scale_axis holds exactly one axis, got " + std::to_string(axis.axes.size()));
  }
}
void require_well_formed(const ElementsPerScale& eps) {
  if (eps.kind == ElementsPerScale::Kind::kInt && eps.values.size() != 1) {
    value_error("elements_per_scale: an int elements_per_scale holds exactly one value, got " + std::to_string(eps.values.size()));
  }
}
void require_settings(const Settings& settings) {
  if (!(settings.epsilon >= 0.0f) || !std::isfinite(settings.epsilon)) {
    value_error("epsilon: must be a finite number >= 0, got " + number(settings.epsilon));
  }
}

void require_x(const TensorView& x) {
  if (!is_floating(x.dtype) && x.dtype != DType::kBool && dtype_size(x.dtype) == 0) {
    throw Error(ErrorKind::kType, "x: unsupported dtype");
  }
  if (x.numel() > 0 && x.data == nullptr) value_error("x: tensor has no data");
}

// 2^e in float32 as tf.pow(2.0, e) (exact for integral e; powf otherwise).
float pow2_float32(float e) { return std::pow(2.0f, e); }

// QKeras' po2 rounding of a positive scale: 2^round_half_even(ln(s + eps) / ln 2), in float32.
float po2_round(float s, float eps) {
  constexpr float kLn2 = 0.693147182f;  // float32(ln 2): np.log(2.0) and K.log(2.0) alike
  const float e = std::nearbyint(std::log(s + eps) / kLn2);
  // powf(2, e) of an integral e in the normal range is 2^e exactly: built from its exponent field
  // without a pow call (elsewhere, pow itself under the same flush rule).
  return (e >= -126.0f && e <= 127.0f) ? std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<int>(e) + 127) << 23)
                                        : pow2_float32(e);
}

// Everything the elementwise engine needs to run one kernel over x and one float32 operand.
void run_kernel(KernelOp op, const TensorView* inputs, int count, const MutableTensorView& out, const void* params) {
  std::array<DType, 2> kd{DType::kFloat32, DType::kFloat32};
  detail::ElementwiseCall call;
  call.inputs = std::span<const TensorView>(inputs, static_cast<std::size_t>(count));
  call.kernel_dtypes = std::span<const DType>(kd.data(), static_cast<std::size_t>(count));
  call.out = out;
  call.kernel_out_dtype = DType::kFloat32;
  call.kernel = detail::best_kernel(op, WorkType::kF32);
  call.params = params;
  call.repeated_row_operands = true;  // a per-channel scale (alpha), channels last
  detail::run_elementwise(call);
}

detail::QkBlend make_blend(const QNoise& q, bool use_ste) {
  require_finite(q.factor, "qnoise_factor");
  detail::QkBlend b;
  b.use_ste = use_ste;
  b.q = static_cast<float>(q.factor);
  // (1 - q): a Python float (double, rounded once) or float32 arithmetic on a float32 variable.
  b.one_minus_q = q.float32_variable ? 1.0f - b.q : static_cast<float>(1.0 - q.factor);
  return b;
}

detail::QkStochastic make_stochastic(bool requested, const Training& training, float scale) {
  detail::QkStochastic s;
  s.enabled = requested && training.enabled;
  s.seed = training.seed;
  s.scale = scale;
  return s;
}

// ---- axes ------------------------------------------------------------------------------------
// Which dimensions keep their own scale: the complement of QKeras' _get_scaling_axis.
std::vector<bool> kept_dims(const ScaleAxis& axis, int rank, const Settings& settings) {
  std::vector<bool> keep(static_cast<std::size_t>(rank), false);
  switch (axis.kind) {
    case ScaleAxis::Kind::kNone:
      if (rank == 0) break;
      if (settings.image_data_format == DataFormat::kChannelsLast) keep[static_cast<std::size_t>(rank - 1)] = true;
      else keep[0] = true;
      break;
    case ScaleAxis::Kind::kInt: {
      int k = axis.axes.empty() ? 0 : axis.axes[0];
      if (k < -rank || k >= rank || rank == 0) {
        value_error("scale_axis: " + std::to_string(k) + " is out of range for an input of rank " + std::to_string(rank) +
                    " (allowed: " + std::to_string(-rank) + " .. " + std::to_string(rank - 1) + ")");
      }
      if (k < 0) k += rank;
      keep[static_cast<std::size_t>(k)] = true;
      break;
    }
    case ScaleAxis::Kind::kList:
      // QKeras reduces over [i for i in range(rank) if i not in scale_axis]: entries that name no
      // dimension keep nothing.
      for (int a : axis.axes) {
        if (a >= 0 && a < rank) keep[static_cast<std::size_t>(a)] = true;
      }
      break;
  }
  return keep;
}

Dims kept_shape(const Dims& shape, const std::vector<bool>& keep) {
  Dims s = shape;
  for (int d = 0; d < shape.rank; ++d) {
    if (!keep[static_cast<std::size_t>(d)]) s[d] = 1;
  }
  return s;
}

std::vector<std::int64_t> no_blocks(int rank) { return std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1); }

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
bool exact_reciprocals(const ScaleArray& s) {
  for (float v : s.values) {
    if (detail::exact_reciprocal(v) == 0.0f) return false;
  }
  return true;
}

// Writes a scale array into a caller's view of its shape (any strides).
void copy_scale_into(const ScaleArray& s, const MutableTensorView& out, const char* what) {
  detail::require_output(out, TensorSpec{DType::kFloat32, s.shape}, what);
  if (s.values.empty()) return;
  detail::convert_into(s.view(), out);
}

// x as C-contiguous float32 (converted or copied only when it is not already).
struct ContiguousF32 {
  std::vector<float> storage;
  const float* data = nullptr;
};
ContiguousF32 contiguous_f32(const TensorView& x) {
  ContiguousF32 c;
  if (x.dtype == DType::kFloat32 && x.is_contiguous()) {
    c.data = static_cast<const float*>(x.data);
    return c;
  }
  c.storage.resize(static_cast<std::size_t>(x.numel()));
  detail::convert_into(x, MutableTensorView(c.storage.data(), DType::kFloat32, x.shape));
  c.data = c.storage.data();
  return c;
}

// The output as a plain float32 array the least-squares rounds may write into while they search
// (C-contiguous, x's shape, not overlapping the x they read), or null.
float* speculative_output(const MutableTensorView& out, const Dims& shape, const float* x) {
  const std::int64_t n = shape.numel();
  if (n <= 0 || out.dtype != DType::kFloat32 || !(out.shape == shape) || !out.is_contiguous()) return nullptr;
  const auto o0 = reinterpret_cast<std::uintptr_t>(out.data), x0 = reinterpret_cast<std::uintptr_t>(x);
  const auto bytes = static_cast<std::uintptr_t>(n) * sizeof(float);
  if (o0 < x0 + bytes && x0 < o0 + bytes) return nullptr;
  return static_cast<float*>(out.data);
}

// ---- reducers ---------------------------------------------------------------------------------
// max over the group of |x| (absolute) or x, in float32 under TensorFlow's flush rule (subnormals
// count as zero, as the kernel's spec says); NaN propagates (TensorFlow's reduce_max on CPU; made
// the canonical quiet NaN by group_max). The division by 2^integer of quantized_bits'
// max(|x / m_i|) is applied once to the result: x -> x / d rounds monotonically (flush to zero
// included), so max(|x| / d) == max(|x|) / d.
struct MaxReducer {
  using Acc = float;
  using ThreadEnv = detail::ScopedFlushDenormals;  // TensorFlow's flush rule on every thread
  detail::GroupMaxParams params;
  detail::RowKernel kernel = detail::best_kernel(KernelOp::kGroupMax, WorkType::kF32);
  static float fold(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN() : detail::group_max_fold(a, b); }
  void row(float* acc, std::int64_t group_stride, const float* x, const float*, std::int64_t, std::int64_t n) const {
    if (group_stride <= 1) {
      detail::GroupMaxParams p = params;
      p.per_element = group_stride == 1;
      detail::RowArgs a;
      a.in[0] = x;
      a.out = acc;
      a.n = n;
      kernel(&p, a);
      return;
    }
    for (std::int64_t j = 0; j < n; ++j) acc[j * group_stride] = fold(acc[j * group_stride], detail::group_max_value(x[j], params.absolute));
  }
  // Rows of n elements, x_row_stride apart, into the same n accumulators, four rows per pass.
  void rows(float* acc, std::int64_t group_stride, const float* x, std::int64_t x_row_stride, const float* aux,
            std::int64_t aux_stride, std::int64_t n, std::int64_t rows) const {
    if (group_stride != 1) {
      for (std::int64_t r = 0; r < rows; ++r) row(acc, group_stride, x + r * x_row_stride, aux, aux_stride, n);
      return;
    }
    // Short rows (few channels): more rows per call, so each call still covers ~1024 elements.
    const std::int64_t kTile = std::max<std::int64_t>(4, 1024 / std::max<std::int64_t>(n, 1));
    for (std::int64_t r = 0; r < rows; r += kTile) {
      detail::GroupMaxParams p = params;
      p.per_element = true;
      p.rows = std::min(kTile, rows - r);
      p.x_row_stride = x_row_stride;
      detail::RowArgs a;
      a.in[0] = x + r * x_row_stride;
      a.out = acc;
      a.n = n;
      kernel(&p, a);
    }
  }
  void merge(float& into, float from) const { into = fold(into, from); }
};

// Sums of v*z and z*z over a group (v = x / divisor for quantized_bits' xs, x for
// quantized_linear), each product rounded to float32 (tf.multiply) and summed in float64. The level
// z of a run comes from the quantizer's own kernel in level mode, a block at a time, and the sums
// from the product-sums kernel (both the dispatched kernel set); a run's flat index (for
// stochastic levels) is its offset from `base`.
struct LeastSquaresAcc {
  double xz = 0, zz = 0;
};
static_assert(sizeof(LeastSquaresAcc) == 2 * sizeof(double), "the product-sums kernel writes {xz, zz} pairs");
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
                             const std::vector<bool>& keep, const std::vector<std::int64_t>& block, float eps, const Po2Clip& clip) {
  const float count = static_cast<float>(L.group_size);
  std::vector<float> per_group(sums.size());
  // One value per group, independently: threads for the many groups of per-element scales.
  detail::parallel_for(static_cast<std::int64_t>(sums.size()), 1 << 14, [&](std::int64_t g0, std::int64_t g1) {
    const detail::ScopedFlushDenormals flush;
    for (auto g = static_cast<std::size_t>(g0); g < static_cast<std::size_t>(g1); ++g) {
      const float qx = static_cast<float>(sums[g].xz) / count;
      const float qq = static_cast<float>(sums[g].zz) / count;
      float s = po2_round(qx / (qq + eps), eps);
      if (clip.lo || clip.hi) {
        // K.clip -> tf.clip_by_value(s, lo, hi) (maximum(minimum(s, hi), lo)).
        if (clip.hi) s = detail::tf_min(s, *clip.hi);
        if (clip.lo) s = detail::tf_max(s, *clip.lo);
      }
      // A NaN scale is the quiet +NaN, as group_max's: the sums' NaN (and so its sign) depends on
      // the order in which a kernel set met NaNs of different signs.
      per_group[g] = std::isnan(s) ? std::numeric_limits<float>::quiet_NaN() : s;
    }
  });
  ScaleArray out;
  out.shape = kept_shape(x_shape, keep);
  bool blocked = false;
  for (std::int64_t b : block) blocked = blocked || b != 1;
  if (!blocked) {
    // Without blocks the groups are the kept shape's elements in C order.
    out.values = std::move(per_group);
    return out;
  }
  out.values.resize(static_cast<std::size_t>(out.shape.numel()));
  // Group of each element of the kept shape: C order over kept dims, block index = index / block.
  const int r = x_shape.rank;
  std::vector<std::int64_t> group_stride(static_cast<std::size_t>(r), 0);
  std::int64_t g = 1;
  for (int d = r - 1; d >= 0; --d) {
    if (!keep[static_cast<std::size_t>(d)]) continue;
    group_stride[static_cast<std::size_t>(d)] = g;
    g *= x_shape[d] / block[static_cast<std::size_t>(d)];
  }
  std::array<std::int64_t, kMaxRank> idx{};
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(out.values.size()); ++i) {
    std::int64_t rem = i, grp = 0;
    for (int d = r - 1; d >= 0; --d) {
      idx[static_cast<std::size_t>(d)] = rem % out.shape[d];
      rem /= out.shape[d];
      grp += (idx[static_cast<std::size_t>(d)] / block[static_cast<std::size_t>(d)]) * group_stride[static_cast<std::size_t>(d)];
    }
    out.values[static_cast<std::size_t>(i)] = per_group[static_cast<std::size_t>(grp)];
  }
  return out;
}

// Max-based statistic per group of the kept dimensions: max(|x / divisor|) or max(x).
ScaleArray group_max(const float* x, const Dims& shape, const std::vector<bool>& keep, bool absolute, bool divide, float divisor) {
  const detail::GroupedLayout L = detail::make_grouped_layout(shape, keep, no_blocks(shape.rank), Dims{});
  ScaleArray out;
  out.shape = kept_shape(shape, keep);
  out.values.assign(static_cast<std::size_t>(L.num_groups), -std::numeric_limits<float>::infinity());
  MaxReducer reducer;
  reducer.params.absolute = absolute;
  detail::grouped_reduce(x, nullptr, L, reducer, out.values.data());
  const detail::ScopedFlushDenormals flush;
  for (float& v : out.values) {
    if (std::isnan(v)) v = std::numeric_limits<float>::quiet_NaN();
    else if (divide) v = v / divisor;
  }
  return out;
}

// Elementwise float32 map of a scale array under the flush rule.
template <class F>
void map_scale(ScaleArray& s, F&& f) {
  const detail::ScopedFlushDenormals flush;
  for (float& v : s.values) v = f(v);
}

// ---- quantized_bits ---------------------------------------------------------------------------
struct BitsConstants {
  float m, m_i;
  bool auto_alpha;
};

BitsConstants bits_constants(const QuantizedBitsAttrs& a) {
  require_finite(a.bits, "bits");
  require_finite(a.integer, "integer");
  // unsigned_bits = bits - keep_negative (Python arithmetic), then K.pow(2.0, float32(.)).
  const double unsigned_bits = a.bits - (a.keep_negative ? 1.0 : 0.0);
  return {pow2_float32(static_cast<float>(unsigned_bits)), pow2_float32(static_cast<float>(a.integer)),
          a.alpha == Alpha::kAuto || a.alpha == Alpha::kAutoPo2};
}

void validate_bits(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& a) {
  require_x(x);
  bits_constants(a);
  require_finite(a.qnoise.factor, "qnoise_factor");
  require_well_formed(a.scale_axis);
  require_well_formed(a.elements_per_scale);
  const bool auto_alpha = a.alpha == Alpha::kAuto || a.alpha == Alpha::kAutoPo2;
  if (a.alpha != Alpha::kAutoPo2) {
    if (a.elements_per_scale.kind != ElementsPerScale::Kind::kNone) {
      value_error("elements_per_scale: only supported with alpha='auto_po2'");
    }
    if (a.min_po2_exponent) value_error("min_po2_exponent: only supported with alpha='auto_po2'");
    if (a.max_po2_exponent) value_error("max_po2_exponent: only supported with alpha='auto_po2'");
  }
  if (a.frozen_scale && !auto_alpha) {
    value_error("post_training_scale: only supported with alpha='auto' or 'auto_po2'");
  }
  if (auto_alpha && !a.frozen_scale && a.bits < 2) {
    value_error("bits: alpha='auto'/'auto_po2' needs bits >= 2 (a symmetric grid of " + number(a.bits) +
                " bit has no nonzero level; QKeras returns NaN or 0), got " + number(a.bits));
  }
  if (a.min_po2_exponent) require_finite(*a.min_po2_exponent, "min_po2_exponent");
  if (a.max_po2_exponent) require_finite(*a.max_po2_exponent, "max_po2_exponent");
  if ((a.alpha == Alpha::kValue || a.frozen_scale) && alpha.numel() > 0 && alpha.data == nullptr) {
    value_error(a.frozen_scale ? "post_training_scale: tensor has no data" : "alpha: tensor has no data");
  }
}

// Reduction layout of the least-squares rounds: kept dims and blocks (elements_per_scale).
struct LsLayout {
  std::vector<bool> keep;
  std::vector<std::int64_t> block;
};

LsLayout bits_ls_layout(const Dims& shape, const QuantizedBitsAttrs& a, const Settings& settings) {
  const int r = shape.rank;
  LsLayout l{std::vector<bool>(static_cast<std::size_t>(r), true), no_blocks(r)};
  if (r <= 1) return l;  // rank <= 1: one least-squares scale per element (QKeras since 2021-05)
  const auto& eps = a.elements_per_scale;
  if (eps.kind == ElementsPerScale::Kind::kNone) {
    l.keep = kept_dims(a.scale_axis, r, settings);
    return l;
  }
  // QKeras' _validate_axis_and_eps, with ValueErrors instead of assertions.
  if (a.scale_axis.kind == ScaleAxis::Kind::kNone) value_error("elements_per_scale: needs scale_axis to be set");
  std::vector<int> axes = a.scale_axis.axes;
  std::vector<std::int64_t> per;
  if (a.scale_axis.kind == ScaleAxis::Kind::kInt) {
    if (eps.kind == ElementsPerScale::Kind::kList) {
      value_error("elements_per_scale: a list needs a list scale_axis (scale_axis is the integer " + std::to_string(axes.at(0)) + ")");
    }
    per = {eps.values.at(0)};
  } else if (eps.kind == ElementsPerScale::Kind::kInt) {
    per.assign(axes.size(), eps.values.at(0));
  } else {
    if (eps.values.size() != axes.size()) {
      value_error("elements_per_scale: " + std::to_string(eps.values.size()) + " values for " + std::to_string(axes.size()) +
                  " scale axes; the lists must have the same length");
    }
    per = eps.values;
  }
  l.keep = kept_dims(a.scale_axis, r, settings);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    int ax = axes[i];
    if (ax < 0) ax += r;
    if (ax < 0 || ax >= r) value_error("scale_axis: " + std::to_string(axes[i]) + " is out of range for rank " + std::to_string(r));
    if (per[i] <= 0) value_error("elements_per_scale: must be positive, got " + std::to_string(per[i]));
    if (shape[ax] % per[i] != 0) {
      value_error("elements_per_scale: axis " + std::to_string(ax) + " of length " + std::to_string(shape[ax]) +
                  " is not divisible by " + std::to_string(per[i]));
    }
    if (l.block[static_cast<std::size_t>(ax)] != 1 && l.block[static_cast<std::size_t>(ax)] != per[i]) {
      value_error("scale_axis: axis " + std::to_string(ax) + " is listed twice with different elements_per_scale");
    }
    l.block[static_cast<std::size_t>(ax)] = per[i];
  }
  return l;
}

// Kept dims of the max pass of quantized_bits' auto path: rank > 1 as scale_axis says, rank 1 the
// whole vector (axis [0]), rank 0 the value itself (QKeras cannot reduce a scalar).
std::vector<bool> bits_max_keep(const Dims& shape, const QuantizedBitsAttrs& a, const Settings& settings) {
  if (shape.rank > 1) return kept_dims(a.scale_axis, shape.rank, settings);
  return std::vector<bool>(static_cast<std::size_t>(shape.rank), false);
}

// The internal scale s of an auto/auto_po2 call (units of x / 2^integer).
// `speculative_out` (may be null): see LeastSquaresReducer::out_kernel; `*output_written` tells
// whether the final output is already there.
ScaleArray bits_auto_scale(const float* x, const Dims& shape, const TensorView& frozen, const QuantizedBitsAttrs& a,
                           const BitsConstants& c, const Settings& settings, SearchInfo& info,
                           const detail::QkBitsAutoParams& final_params, float* speculative_out, bool& output_written) {
  output_written = false;
  const float eps = settings.epsilon;
  ScaleArray s;
  if (a.frozen_scale) {
    // scale = self.scale / m: the post_training_scale array rounded to float32, divided in float32.
    const ContiguousF32 f = contiguous_f32(frozen);
    s.shape = frozen.shape;
    s.values.assign(f.data, f.data + frozen.numel());
    map_scale(s, [&](float v) { return v / c.m; });
    return s;
  }
  // levels = (2^(bits-1) - 1) * 2 (Python arithmetic; bits real), a float32 divisor in TF.
  const double half_levels = std::pow(2.0, a.bits - 1.0) - 1.0;
  const auto levels = static_cast<float>(half_levels * 2.0);
  s = group_max(x, shape, bits_max_keep(shape, a, settings), true, true, c.m_i);
  info.max_passes = 1;
  map_scale(s, [&](float v) { return (v * 2.0f) / levels; });
  if (a.alpha != Alpha::kAutoPo2) return s;
  map_scale(s, [&](float v) { return po2_round(v, eps); });
  const LsLayout ls = bits_ls_layout(shape, a, settings);
  Po2Clip clip;
  // 2 ** exponent in Python (double), then float32 where it meets the tensor; Keras' clip raises
  // the maximum to the minimum when both are given and max < min.
  std::optional<double> lo, hi;
  if (a.min_po2_exponent) lo = std::pow(2.0, *a.min_po2_exponent);
  if (a.max_po2_exponent) hi = std::pow(2.0, *a.max_po2_exponent);
  if (lo && hi && *hi < *lo) hi = lo;
  if (lo) clip.lo = static_cast<float>(*lo);
  if (hi) clip.hi = static_cast<float>(*hi);
  const float m_i = c.m_i;
  const float half_levels_f = static_cast<float>(half_levels);
  // Five rounds (QKeras has no convergence test); a round that returns its input bit for bit is a
  // fixed point, so the remaining rounds would repeat it.
  for (int round = 0; round < 5; ++round) {
    const detail::GroupedLayout L = detail::make_grouped_layout(shape, ls.keep, ls.block, s.shape);
    std::vector<LeastSquaresAcc> sums(static_cast<std::size_t>(L.num_groups));
    detail::QkBitsAutoParams level_params;
    level_params.m = c.m;
    level_params.m_i = m_i;
    level_params.inv_m = detail::exact_reciprocal(c.m);
    level_params.inv_m_i = detail::exact_reciprocal(m_i);
    level_params.pow2_scales = exact_reciprocals(s);
    level_params.half_levels = half_levels_f;
    level_params.level_only = true;
    LeastSquaresReducer reducer;
    reducer.level_kernel = detail::best_kernel(KernelOp::kQkBitsAuto, WorkType::kF32);
    reducer.level_params = &level_params;
    reducer.divide = true;
    reducer.divisor = m_i;
    reducer.base = x;
    detail::QkBitsAutoParams round_output = final_params;
    round_output.pow2_scales = level_params.pow2_scales;
    if (speculative_out != nullptr) {
      reducer.out_kernel = detail::best_kernel(KernelOp::kQkBitsAuto, WorkType::kF32);
      reducer.out_params = &round_output;
      reducer.out_base = speculative_out;
    }
    detail::grouped_reduce(x, s.values.data(), L, reducer, sums.data());
    ++info.least_squares_rounds;
    ScaleArray next = least_squares_po2(sums, L, shape, ls.keep, ls.block, eps, clip);
    const bool converged = next.same_bits(s);
    s = std::move(next);
    if (converged) {
      output_written = speculative_out != nullptr;
      break;
    }
  }
  return s;
}

}  // namespace

float pow2f(float e) { return pow2_float32(e); }

float linear_data_type_scale(double bits, double integer, bool keep_negative) {
  const detail::ScopedFlushDenormals flush;
  // K.pow(2.0, tf.cast(integer, float32) - bits + keep_negative), each step float32.
  const float e = (static_cast<float>(integer) - static_cast<float>(bits)) + (keep_negative ? 1.0f : 0.0f);
  return pow2_float32(e);
}

TensorSpec quantized_bits_spec(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                               const Settings& settings) {
  validate_bits(x, alpha, attrs);
  require_settings(settings);
  if ((attrs.alpha == Alpha::kAuto || attrs.alpha == Alpha::kAutoPo2) && !attrs.frozen_scale) {
    // The axes of the search (each throws naming scale_axis / elements_per_scale).
    bits_max_keep(x.shape, attrs, settings);
    if (attrs.alpha == Alpha::kAutoPo2) bits_ls_layout(x.shape, attrs, settings);
  }
  TensorSpec spec;
  spec.dtype = DType::kFloat32;
  spec.shape = x.shape;
  if (attrs.alpha == Alpha::kValue) {
    const std::array<Dims, 2> shapes{x.shape, alpha.shape};
    static constexpr const char* kNames[] = {"x", "alpha"};
    spec.shape = broadcast_shapes(shapes, "quantized_bits", kNames);
  } else if (attrs.frozen_scale) {
    const std::array<Dims, 2> shapes{x.shape, alpha.shape};
    static constexpr const char* kNames[] = {"x", "post_training_scale"};
    spec.shape = broadcast_shapes(shapes, "quantized_bits", kNames);
  }
  return spec;
}

Dims quantized_bits_scale_shape(const TensorView& x, const QuantizedBitsAttrs& attrs, const Settings& settings) {
  if (x.shape.rank == 0) return Dims{};
  // Rank 1: one max-based scale for the vector; auto_po2's least squares then give one per element.
  if (x.shape.rank == 1) return attrs.alpha == Alpha::kAutoPo2 ? x.shape : Dims{1};
  return kept_shape(x.shape, kept_dims(attrs.scale_axis, x.shape.rank, settings));
}

void quantized_bits(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs, const Settings& settings,
                    const Training& training, const MutableTensorView& out, const MutableTensorView* scale_out, SearchInfo* info) {
  SearchInfo search;
  const TensorSpec spec = quantized_bits_spec(x, alpha, attrs, settings);
  detail::require_output(out, spec, "quantized_bits");
  const BitsConstants c = bits_constants(attrs);
  if (!c.auto_alpha) {
    detail::QkBitsParams p;
    p.keep_negative = attrs.keep_negative;
    p.binary = attrs.bits - (attrs.keep_negative ? 1.0 : 0.0) <= 0;
    p.m = c.m;
    p.m_i = c.m_i;
    p.inv_m = detail::exact_reciprocal(c.m);
    p.inv_m_i = detail::exact_reciprocal(c.m_i);
    {
      const detail::ScopedFlushDenormals flush;
      // keep_negative * (-m + symmetric), m - 1 (a False keep_negative gives -0.0).
      p.lo = (attrs.keep_negative ? 1.0f : 0.0f) * ((-p.m) + (attrs.symmetric ? 1.0f : 0.0f));
      p.hi = p.m - 1.0f;
    }
    p.blend = make_blend(attrs.qnoise, attrs.use_ste);
    p.stochastic = make_stochastic(attrs.use_stochastic_rounding, training, 1.0f);
    const float one = 1.0f;
    const TensorView scale = attrs.alpha == Alpha::kValue ? alpha : TensorView(&one, DType::kFloat32, Dims{});
    const std::array<TensorView, 2> inputs{x, scale};
    run_kernel(KernelOp::kQkBits, inputs.data(), 2, out, &p);
    if (info != nullptr) *info = search;
    return;
  }
  const ContiguousF32 xf = contiguous_f32(x);
  detail::QkBitsAutoParams p;
  p.m = c.m;
  p.m_i = c.m_i;
  p.inv_m = detail::exact_reciprocal(c.m);
  p.inv_m_i = detail::exact_reciprocal(c.m_i);
  p.half_levels = static_cast<float>(std::pow(2.0, attrs.bits - 1.0) - 1.0);
  p.blend = make_blend(attrs.qnoise, attrs.use_ste);
  bool output_written = false;
  const ScaleArray s = bits_auto_scale(xf.data, x.shape, alpha, attrs, c, settings, search, p,
                                       speculative_output(out, x.shape, xf.data), output_written);
  if (info != nullptr) *info = search;
  if (!output_written) {
    p.pow2_scales = exact_reciprocals(s);
    const std::array<TensorView, 2> inputs{TensorView(xf.data, DType::kFloat32, x.shape), s.view()};
    run_kernel(KernelOp::kQkBitsAuto, inputs.data(), 2, out, &p);
  }
  if (scale_out != nullptr && !attrs.frozen_scale) {
    ScaleArray reported = s;
    map_scale(reported, [&](float v) { return v * c.m; });
    copy_scale_into(reported, *scale_out, "quantized_bits scale");
  }
}

void quantized_bits_gradient(const TensorView& x, const TensorView& alpha, const QuantizedBitsAttrs& attrs,
                             const Settings& settings, const MutableTensorView& out) {
  const TensorSpec spec = quantized_bits_spec(x, alpha, attrs, settings);
  detail::require_output(out, spec, "quantized_bits gradient");
  detail::QkBitsParams p;
  p.gradient = true;
  p.blend = make_blend(attrs.qnoise, attrs.use_ste);
  const float one = 1.0f;
  const TensorView scale = attrs.alpha == Alpha::kValue ? alpha : TensorView(&one, DType::kFloat32, Dims{});
  const std::array<TensorView, 2> inputs{x, scale};
  run_kernel(KernelOp::kQkBits, inputs.data(), 2, out, &p);
}

// ---- quantized_relu ----------------------------------------------------------------------------
namespace {
detail::QkReluParams relu_params(const QuantizedReluAttrs& a) {
  require_finite(a.bits, "bits");
  require_finite(a.integer, "integer");
  require_finite(a.negative_slope, "negative_slope");
  const double ns = a.negative_slope;
  if (ns < 0) value_error("negative_slope: must be >= 0, got " + number(ns));
  if (ns != 0 && std::log2(ns) != std::floor(std::log2(ns))) {
    value_error("negative_slope: must be 0 or a power of two (0.125, 0.25, 0.5, ...), got " + number(ns));
  }
  if (ns != 0 && (std::fabs(std::log2(ns)) > 126)) {
    value_error("negative_slope: a power of two between 2^-126 and 2^126 (float32), got " + number(ns));
  }
  if (a.relu_upper_bound) {
    if (std::isnan(*a.relu_upper_bound)) value_error("relu_upper_bound: must be a number, got nan");
  }
  detail::QkReluParams p;
  const detail::ScopedFlushDenormals flush;
  const double non_sign_bits = a.bits - (ns != 0 ? 1.0 : 0.0);
  // QKeras: K.cast(K.pow(2, non_sign_bits)) and K.pow(2, integer) in integer arithmetic for
  // integral values; the float power is the same number (and defined for the negative or
  // fractional integer QKeras cannot compute).
  p.m = pow2_float32(static_cast<float>(non_sign_bits));
  p.m_i = pow2_float32(static_cast<float>(a.integer));
  p.inv_m = detail::exact_reciprocal(p.m);
  p.inv_m_i = detail::exact_reciprocal(p.m_i);
  const float m_f = pow2_float32(static_cast<float>(a.integer) - static_cast<float>(non_sign_bits));
  p.clip_value = p.m_i - m_f;
  p.one_minus_inv_m = 1.0f - 1.0f / p.m;
  p.negative_slope = static_cast<float>(ns);
  p.leaky = ns != 0;
  p.negative_part = ns > 0;
  if (p.negative_part) {
    p.m_i_ns = p.m_i * p.negative_slope;
    p.neg_factor = 1.0f / (p.negative_slope * p.m);
  }
  p.sigmoid = a.use_sigmoid;
  p.quantized_clip = a.is_quantized_clip;
  p.has_upper_bound = a.relu_upper_bound.has_value();
  p.upper_bound = a.relu_upper_bound ? static_cast<float>(*a.relu_upper_bound) : 0.0f;
  // `if self.relu_upper_bound and not self.is_quantized_clip`: 0.0 is falsy.
  p.bound_output = a.relu_upper_bound && *a.relu_upper_bound != 0.0 && !a.is_quantized_clip;
  p.blend = make_blend(a.qnoise, a.use_ste);
  if (a.enable_fast_inference) {
    p.fast_inference = true;
    // m_i = 1 << integer; p = x * 2^(bits - integer); factor = 2^-bits; all Python numbers.
    p.m_i = static_cast<float>(std::pow(2.0, a.integer));
    p.fast_p_factor = static_cast<float>(std::pow(2.0, a.bits - a.integer));
    const double factor = std::pow(2.0, -a.bits);
    p.fast_factor = static_cast<float>(factor);
    p.fast_ceiling = static_cast<float>(1.0 - factor);
  }
  return p;
}
}  // namespace

TensorSpec quantized_relu_spec(const TensorView& x, const QuantizedReluAttrs& attrs) {
  require_x(x);
  relu_params(attrs);
  return TensorSpec{DType::kFloat32, x.shape};
}

void quantized_relu(const TensorView& x, const QuantizedReluAttrs& attrs, const Training& training, const MutableTensorView& out) {
  const TensorSpec spec = quantized_relu_spec(x, attrs);
  detail::require_output(out, spec, "quantized_relu");
  detail::QkReluParams p = relu_params(attrs);
  p.stochastic = make_stochastic(attrs.use_stochastic_rounding && !attrs.enable_fast_inference, training, 2.0f);
  const std::array<TensorView, 1> inputs{x};
  run_kernel(KernelOp::kQkRelu, inputs.data(), 1, out, &p);
}

void quantized_relu_gradient(const TensorView& x, const QuantizedReluAttrs& attrs, const MutableTensorView& out) {
  const TensorSpec spec = quantized_relu_spec(x, attrs);
  detail::require_output(out, spec, "quantized_relu gradient");
  detail::QkReluParams p = relu_params(attrs);
  p.fast_inference = false;
  p.gradient = true;
  const std::array<TensorView, 1> inputs{x};
  run_kernel(KernelOp::kQkRelu, inputs.data(), 1, out, &p);
}

// ---- quantized_linear --------------------------------------------------------------------------
namespace {
struct LinearConstants {
  float clip_min, clip_max, shift, data_type_scale;
  bool sign_function, auto_alpha;
};

LinearConstants linear_constants(const QuantizedLinearAttrs& a) {
  require_finite(a.bits, "bits");
  require_finite(a.integer, "integer");
  if (a.bits <= 0) value_error("bits: Bit count " + number(a.bits) + " must be positive");
  LinearConstants c{};
  const detail::ScopedFlushDenormals flush;
  c.sign_function = a.bits == 1.0 && a.keep_negative;
  c.auto_alpha = a.alpha == Alpha::kAuto || a.alpha == Alpha::kAutoPo2;
  if (c.sign_function) {
    c.clip_min = -0.5f;
    c.clip_max = 0.5f;
    c.shift = 0.5f;
  } else {
    const float u = pow2_float32(static_cast<float>(a.bits - (a.keep_negative ? 1.0 : 0.0)));
    c.clip_min = (a.keep_negative ? 1.0f : 0.0f) * ((-u) + (a.symmetric ? 1.0f : 0.0f));
    c.clip_max = u - 1.0f;
    c.shift = 0.0f;
  }
  c.data_type_scale = linear_data_type_scale(a.bits, a.integer, a.keep_negative);
  return c;
}

std::vector<bool> linear_keep(const Dims& shape, const QuantizedLinearAttrs& a, const Settings& settings) {
  return kept_dims(a.scale_axis, shape.rank, settings);
}

// The quantization scale of a call: alpha * data_type_scale, data_type_scale, or the auto search.
// `final_params`/`speculative_out` (may be null): the quantizing pass's parameters and output for
// the least-squares rounds to write while they search (see LeastSquaresReducer::out_kernel);
// `*output_written` tells whether the final output is already there.
ScaleArray linear_scale(const TensorView& x, const float* xf, const TensorView& alpha, const QuantizedLinearAttrs& a,
                        const LinearConstants& c, const Settings& settings, const Training& training, SearchInfo& info,
                        const detail::QkLinearParams* final_params = nullptr, float* speculative_out = nullptr,
                        bool* output_written = nullptr) {
  if (output_written != nullptr) *output_written = false;
  ScaleArray s;
  if (!c.auto_alpha) {
    if (a.alpha == Alpha::kValue) {
      const ContiguousF32 f = contiguous_f32(alpha);
      s.shape = alpha.shape;
      s.values.assign(f.data, f.data + alpha.numel());
      const float d = c.data_type_scale;
      map_scale(s, [d](float v) { return v * d; });
    } else {
      s.shape = Dims{};
      s.values = {c.data_type_scale};
    }
    return s;
  }
  const float eps = settings.epsilon;
  const std::vector<bool> keep = linear_keep(x.shape, a, settings);
  float clip_range;
  {
    const detail::ScopedFlushDenormals flush;
    clip_range = c.clip_max - c.clip_min;
  }
  s = group_max(xf, x.shape, keep, a.keep_negative, false, 1.0f);
  info.max_passes = 1;
  const bool kn = a.keep_negative;
  map_scale(s, [&](float v) {
    const float q = kn ? (v * 2.0f) / clip_range : v / clip_range;
    return detail::tf_max(q, eps);
  });
  if (a.alpha != Alpha::kAutoPo2) return s;
  map_scale(s, [&](float v) { return po2_round(v, eps); });
  const int rank = x.shape.rank;
  const LsLayout ls{rank <= 1 ? std::vector<bool>(static_cast<std::size_t>(rank), true) : keep, no_blocks(rank)};
  detail::QkLinearParams level_params;
  level_params.level_only = true;
  level_params.clip_min = c.clip_min;
  level_params.clip_max = c.clip_max;
  level_params.shift = c.shift;
  // tf.while_loop(any(last != s), ..., maximum_iterations=5 or 1): the dummy start is -1.
  const int max_rounds = c.sign_function ? 1 : 5;
  ScaleArray last;
  last.shape = s.shape;
  last.values.assign(s.values.size(), -1.0f);
  for (int round = 0; round < max_rounds; ++round) {
    bool any_differs = last.shape != s.shape;
    for (std::size_t i = 0; !any_differs && i < s.values.size(); ++i) any_differs = last.values[i] != s.values[i];
    if (!any_differs) break;
    level_params.pow2_scales = exact_reciprocals(s);
    level_params.stochastic = make_stochastic(a.use_stochastic_rounding, training, 1.0f);
    level_params.stochastic.stream = static_cast<std::uint32_t>(round + 1);
    const detail::GroupedLayout L = detail::make_grouped_layout(x.shape, ls.keep, ls.block, s.shape);
    std::vector<LeastSquaresAcc> sums(static_cast<std::size_t>(L.num_groups));
    // Stochastic levels (training) are keyed by the element's flat index and the round.
    LeastSquaresReducer reducer;
    reducer.level_kernel = detail::best_kernel(KernelOp::kQkLinear, WorkType::kF32);
    reducer.level_params = &level_params;
    reducer.base = xf;
    // The quantizing pass draws its own noise in training: no speculative output then.
    const bool speculate = speculative_out != nullptr && final_params != nullptr && !final_params->stochastic.enabled;
    detail::QkLinearParams round_output;
    if (speculate) {
      round_output = *final_params;
      round_output.pow2_scales = level_params.pow2_scales;
      reducer.out_kernel = detail::best_kernel(KernelOp::kQkLinear, WorkType::kF32);
      reducer.out_params = &round_output;
      reducer.out_base = speculative_out;
    }
    detail::grouped_reduce(xf, s.values.data(), L, reducer, sums.data());
    ++info.least_squares_rounds;
    ScaleArray next = least_squares_po2(sums, L, x.shape, ls.keep, ls.block, eps, Po2Clip{});
    last = std::move(s);
    s = std::move(next);
    // This round's output used `last`: final when the search stops here with the same scale.
    if (output_written != nullptr) *output_written = speculate && last.same_bits(s);
  }
  return s;
}
}  // namespace

TensorSpec quantized_linear_spec(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                 const Settings& settings) {
  require_x(x);
  linear_constants(attrs);
  require_finite(attrs.qnoise.factor, "qnoise_factor");
  require_well_formed(attrs.scale_axis);
  require_settings(settings);
  if (attrs.alpha == Alpha::kAuto || attrs.alpha == Alpha::kAutoPo2) linear_keep(x.shape, attrs, settings);
  TensorSpec spec{DType::kFloat32, x.shape};
  if (attrs.alpha == Alpha::kValue) {
    if (alpha.numel() > 0 && alpha.data == nullptr) value_error("alpha: tensor has no data");
    const std::array<Dims, 2> shapes{x.shape, alpha.shape};
    static constexpr const char* kNames[] = {"x", "alpha"};
    spec.shape = broadcast_shapes(shapes, "quantized_linear", kNames);
  }
  return spec;
}

Dims quantized_linear_scale_shape(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                                  const Settings& settings) {
  if (attrs.alpha == Alpha::kValue) return alpha.shape;
  if (attrs.alpha == Alpha::kNone) return Dims{};
  if (x.shape.rank <= 1 && attrs.alpha == Alpha::kAutoPo2) return x.shape;
  return kept_shape(x.shape, linear_keep(x.shape, attrs, settings));
}

void quantized_linear(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs, const Settings& settings,
                      const Training& training, const MutableTensorView& out, const MutableTensorView* quantization_scale_out,
                      SearchInfo* info) {
  const TensorSpec spec = quantized_linear_spec(x, alpha, attrs, settings);
  detail::require_output(out, spec, "quantized_linear");
  const LinearConstants c = linear_constants(attrs);
  ContiguousF32 xf;
  if (c.auto_alpha) xf = contiguous_f32(x);
  SearchInfo search;
  detail::QkLinearParams p;
  p.clip_min = c.clip_min;
  p.clip_max = c.clip_max;
  p.shift = c.shift;
  p.blend = make_blend(attrs.qnoise, true);
  p.stochastic = make_stochastic(attrs.use_stochastic_rounding, training, 1.0f);
  bool output_written = false;
  const ScaleArray s = linear_scale(x, xf.data, alpha, attrs, c, settings, training, search, &p,
                                    c.auto_alpha ? speculative_output(out, x.shape, xf.data) : nullptr, &output_written);
  if (info != nullptr) *info = search;
  if (!output_written) {
    p.pow2_scales = exact_reciprocals(s);
    const std::array<TensorView, 2> inputs{c.auto_alpha ? TensorView(xf.data, DType::kFloat32, x.shape) : x, s.view()};
    run_kernel(KernelOp::kQkLinear, inputs.data(), 2, out, &p);
  }
  if (quantization_scale_out != nullptr) copy_scale_into(s, *quantization_scale_out, "quantized_linear quantization_scale");
}

void quantized_linear_gradient(const TensorView& x, const TensorView& alpha, const QuantizedLinearAttrs& attrs,
                               const Settings& settings, const MutableTensorView& out) {
  const TensorSpec spec = quantized_linear_spec(x, alpha, attrs, settings);
  detail::require_output(out, spec, "quantized_linear gradient");
  const LinearConstants c = linear_constants(attrs);
  ContiguousF32 xf;
  if (c.auto_alpha) xf = contiguous_f32(x);
  SearchInfo search;
  const ScaleArray s = linear_scale(x, xf.data, alpha, attrs, c, settings, Training{}, search);
  detail::QkLinearParams p;
  p.clip_min = c.clip_min;
  p.clip_max = c.clip_max;
  p.gradient = true;
  p.blend = make_blend(attrs.qnoise, true);
  const std::array<TensorView, 2> inputs{c.auto_alpha ? TensorView(xf.data, DType::kFloat32, x.shape) : x, s.view()};
  run_kernel(KernelOp::kQkLinear, inputs.data(), 2, out, &p);
}

}  // namespace polyquant::qkeras
