// The shared steps of QKeras' scale searches: kept axes, the grouped max and the po2 least-squares scale.
#include "families/qkeras/scale_search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/device_elementwise.h"
#include "core/exact_sum.h"
#include "core/elementwise.h"
#include "core/numpy_semantics.h"
#include "core/parallel.h"

namespace polyquant::qkeras::internal {

// ---- axes ------------------------------------------------------------------------------------
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

bool exact_reciprocals(const ScaleArray& s) {
  return all_exact_reciprocals(s.values.data(), static_cast<std::int64_t>(s.values.size()));
}

void copy_scale_into(const ScaleArray& s, const MutableTensorView& out, const char* what) {
  detail::require_output(out, TensorSpec{DType::kFloat32, s.shape}, what);
  if (s.values.empty()) return;
  detail::convert_into(s.view(), out);
}

void report_scale(ScaleArray& s, float factor, const MutableTensorView& out, const char* what) {
  detail::require_output(out, TensorSpec{DType::kFloat32, s.shape}, what);
  const auto n = static_cast<std::int64_t>(s.values.size());
  if (n > 0 && out.device.is_cpu() && out.dtype == DType::kFloat32 && out.is_contiguous()) {
    // Straight into the caller's array, on the threads (one scale per element for rank-1 auto_po2).
    auto* dst = static_cast<float*>(out.data);
    detail::parallel_for(n, 1 << 16, [&](std::int64_t i0, std::int64_t i1) {
      const detail::ScopedFlushDenormals flush;
      for (std::int64_t i = i0; i < i1; ++i) dst[i] = s.values[static_cast<std::size_t>(i)] * factor;
    });
    return;
  }
  map_scale(s, [&](float v) { return v * factor; });
  copy_scale_into(s, out, what);
}

float* speculative_output(const MutableTensorView& out, const Dims& shape, const float* x) {
  const std::int64_t n = shape.numel();
  if (n <= 0 || out.dtype != DType::kFloat32 || !(out.shape == shape) || !out.is_contiguous()) return nullptr;
  const auto o0 = reinterpret_cast<std::uintptr_t>(out.data), x0 = reinterpret_cast<std::uintptr_t>(x);
  const auto bytes = static_cast<std::uintptr_t>(n) * sizeof(float);
  if (o0 < x0 + bytes && x0 < o0 + bytes) return nullptr;
  return static_cast<float*>(out.data);
}

// ---- reducers ---------------------------------------------------------------------------------
namespace {
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
  // Runs of n elements (the innermost dimension, reduced), x_stride apart, into acc + r *
  // group_stride: short contiguous ones as the kernel's segments, a call per ~1024 elements.
  void runs(float* acc, std::int64_t group_stride, const float* x, std::int64_t x_stride, const float* aux, std::int64_t aux_stride,
            std::int64_t aux_inner_stride, std::int64_t n, std::int64_t count) const {
    if (n >= 1024 || x_stride != n) {
      for (std::int64_t r = 0; r < count; ++r) row(acc + r * group_stride, 0, x + r * x_stride, aux, aux_inner_stride, n);
      return;
    }
    const std::int64_t tile = std::max<std::int64_t>(1, 1024 / n);
    for (std::int64_t r = 0; r < count; r += tile) {
      detail::GroupMaxParams p = params;
      p.per_element = false;
      p.segment = n;
      p.acc_stride = group_stride;
      detail::RowArgs a;
      a.in[0] = x + r * n;
      a.out = acc + r * group_stride;
      a.n = std::min(tile, count - r) * n;
      kernel(&p, a);
    }
    (void)aux, (void)aux_stride;
  }
  void merge(float& into, float from) const { into = fold(into, from); }
};
}  // namespace

ScaleArray least_squares_po2(std::span<const LeastSquaresAcc> sums, const detail::GroupedLayout& L, const Dims& x_shape,
                             const std::vector<bool>& keep, const std::vector<std::int64_t>& block, float eps, const Po2Clip& clip) {
  const float count = static_cast<float>(L.group_size);
  std::vector<float> per_group(sums.size());
  // One value per group, independently: threads for the many groups of per-element scales, and
  // least_squares_po2_scale's steps as passes over blocks of groups (the quotients, po2_round's
  // fast path, the rare inputs it leaves to the reference, the rest), which vectorize.
  detail::parallel_for(static_cast<std::int64_t>(sums.size()), 1 << 14, [&](std::int64_t g0, std::int64_t g1) {
    const detail::ScopedFlushDenormals flush;
    constexpr std::int64_t kBlock = 1024;
    alignas(64) std::uint32_t po2_bits[kBlock];
    for (std::int64_t b = g0; b < g1; b += kBlock) {
      const std::int64_t m = std::min(kBlock, g1 - b);
      float* q = per_group.data() + b;
      const LeastSquaresAcc* sb = sums.data() + b;
      for (std::int64_t i = 0; i < m; ++i) q[i] = least_squares_quotient(sb[i], count, eps);
      std::uint32_t any_slow = 0;
      for (std::int64_t i = 0; i < m; ++i) {
        po2_bits[i] = po2_round_fast_bits(q[i] + eps);
        any_slow |= po2_bits[i] == 0 ? 1u : 0u;
      }
      if (any_slow != 0) {
        for (std::int64_t i = 0; i < m; ++i) {
          if (po2_bits[i] == 0) po2_bits[i] = std::bit_cast<std::uint32_t>(po2_round_reference(q[i], eps));
        }
      }
      for (std::int64_t i = 0; i < m; ++i) q[i] = least_squares_finish(std::bit_cast<float>(po2_bits[i]), clip);
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

bool float32_of_every_float64_sum(double exact, double magnitude, std::int64_t n, double unit, float& value) {
  if (!std::isfinite(exact)) {  // a NaN term, or infinities: every order's sum is that NaN / infinity
    value = static_cast<float>(exact);
    return true;
  }
  if (magnitude == 0.0) {  // every term a zero: every sum from +0 is +0
    value = 0.0f;
    return true;
  }
  // Every term a multiple of `unit`, and every partial sum (at most the magnitudes' sum, which
  // `magnitude` holds within 2^-53 relative) below 2^53 units: every order adds exactly, to exact
  // (exact too: its rounding to float64 rounded nothing), and an exact zero is +0.
  if (unit <= std::numeric_limits<double>::max() && magnitude <= std::ldexp(unit, 53) * (1.0 - 0x1p-50)) {
    value = static_cast<float>(exact);
    return true;
  }
  // The bound gamma(n - 1) * sum |t_i| from above: magnitude is within 2^-53 relative of that sum,
  // 1 / (1 - k u) < 1 + 2^-12 for k < 2^40, and the slack of 2^-10 covers both and the roundings
  // of these few products; |exact| * 2^-51 covers exact's own rounding to float64. Each end is
  // then moved one float64 step outwards, past the rounding of the add that formed it.
  const double k = static_cast<double>(std::max<std::int64_t>(n - 1, 0));
  const double bound = k * 0x1p-53 * magnitude * (1.0 + 0x1p-10) + std::fabs(exact) * 0x1p-51;
  const double lo = std::nextafter(exact - bound, -std::numeric_limits<double>::infinity());
  const double hi = std::nextafter(exact + bound, std::numeric_limits<double>::infinity());
  const float lo32 = static_cast<float>(lo), hi32 = static_cast<float>(hi);
  // (Both ends rounding to a zero leave its sign open: an exact zero sum is +0, a tiny one flushes
  // to a zero of its own sign.)
  if (std::bit_cast<std::uint32_t>(lo32) != std::bit_cast<std::uint32_t>(hi32) || lo32 == 0.0f) return false;
  value = lo32;
  return true;
}

namespace {
// L's dimensions with adjacent ones merged where the group index runs on across them (and extents
// of 1 dropped), into `shape` / `strides`; false when more than the exact sums kernel takes remain.
bool merged_group_layout(const detail::GroupedLayout& L, Dims& shape, Dims& strides) {
  std::array<std::int64_t, detail::kMaxGroupedRank> sh{}, st{};
  int r = 0;
  for (int d = 0; d < L.rank; ++d) {
    const std::int64_t len = L.shape[static_cast<std::size_t>(d)], g = L.group_stride[static_cast<std::size_t>(d)];
    if (len == 1) continue;
    // Dimension r - 1 followed by this one: one dimension when stepping r - 1 once steps the group
    // index as len steps of this one do (both reduced: strides 0).
    if (r > 0 && st[static_cast<std::size_t>(r - 1)] == g * len) {
      sh[static_cast<std::size_t>(r - 1)] *= len;
      st[static_cast<std::size_t>(r - 1)] = g;
      continue;
    }
    sh[static_cast<std::size_t>(r)] = len;
    st[static_cast<std::size_t>(r)] = g;
    ++r;
  }
  if (r == 0) sh[0] = 1, st[0] = 0, r = 1;
  if (r > kMaxRank) return false;
  shape = Dims{};
  strides = Dims{};
  shape.rank = strides.rank = r;
  for (int d = 0; d < r; ++d) {
    shape[d] = sh[static_cast<std::size_t>(d)];
    strides[d] = st[static_cast<std::size_t>(d)];
  }
  return true;
}
}  // namespace

bool least_squares_sums_on_device(const TensorView& x, KernelOp op, const LsTermParams& term_params, const ScaleArray& s,
                                  const detail::GroupedLayout& L, std::vector<LeastSquaresAcc>& sums) {
  Dims shape, strides;
  if (x.numel() <= 0 || !merged_group_layout(L, shape, strides)) return false;
  // Each group's exact parts take 92 bytes of device memory, read back after each sum: where they
  // outweigh x itself (groups of fewer than 23 elements: a long rank-1 x, one scale per element)
  // past 1 MiB, or pass 256 MiB, copying x to the host once is the cheaper way.
  constexpr std::int64_t kPartsBytes = detail::ExactSumFloat32::kLimbCount * sizeof(std::int64_t) + sizeof(std::uint32_t);
  const std::int64_t parts_bytes = L.num_groups * kPartsBytes;
  if (parts_bytes > (std::int64_t{256} << 20) ||
      parts_bytes > std::max<std::int64_t>(x.numel() * static_cast<std::int64_t>(sizeof(float)), std::int64_t{1} << 20)) {
    return false;
  }
  const detail::DeviceScratch scratch(x.device, static_cast<std::size_t>(x.numel()) * sizeof(float));
  const auto* terms = static_cast<const float*>(scratch.data());
  MutableTensorView terms_out(scratch.data(), DType::kFloat32, x.shape);
  terms_out.device = x.device;
  // The round's scale, copied to the device once for the three to five launches that read it.
  const detail::DeviceScratch scale(x.device, s.values.size() * sizeof(float));
  MutableTensorView scale_out(scale.data(), DType::kFloat32, s.shape);
  scale_out.device = x.device;
  detail::convert_into_on_device(s.view(), scale_out);
  TensorView scale_in(scale.data(), DType::kFloat32, s.shape);
  scale_in.device = x.device;
  const std::array<TensorView, 2> inputs{x, scale_in};
  // Each kind of term written over the last one's, once its sums are read back.
  auto write_terms = [&](detail::LsTerm t) { run_kernel(op, inputs.data(), 2, terms_out, term_params[static_cast<std::size_t>(t)]); };
  std::array<std::vector<double>, 3> exact;  // v z, |v z|, z z
  const detail::LsTerm summed[] = {detail::LsTerm::kXz, detail::LsTerm::kAbsXz, detail::LsTerm::kZz};
  for (std::size_t k = 0; k < 3; ++k) {
    write_terms(summed[k]);
    exact[k] = detail::exact_group_sums_on_device_as_double(x.device, terms, shape, strides, L.num_groups);
  }
  const std::int64_t groups = L.num_groups;
  // Each group's two float32 sums, settled by the bound alone (unit +inf) or with the smallest
  // unit of its terms. z * z is never negative (a NaN aside), so its sum is its magnitudes' sum.
  auto settle_xz = [&](std::size_t g, double unit, float& v) {
    return float32_of_every_float64_sum(exact[0][g], exact[1][g], L.group_size, unit, v);
  };
  auto settle_zz = [&](std::size_t g, double unit, float& v) {
    return float32_of_every_float64_sum(exact[2][g], exact[2][g], L.group_size, unit, v);
  };
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  std::vector<float> xz(static_cast<std::size_t>(groups)), zz(xz.size());
  std::vector<std::size_t> open_xz, open_zz;
  {
    const detail::ScopedFlushDenormals flush;  // least_squares_quotient's conversion, under the flush rule
    for (std::size_t g = 0; g < xz.size(); ++g) {
      if (!settle_xz(g, kUnknown, xz[g])) open_xz.push_back(g);
      if (!settle_zz(g, kUnknown, zz[g])) open_zz.push_back(g);
    }
  }
  // Sums on or near a float32 rounding boundary: settled where every order adds exactly (short
  // groups of terms with few significant bits, as tests make them; an integer z * z sum exactly
  // between two float32s), from the smallest unit of each group's terms, found only for the kind
  // of sum that needs it.
  TensorView terms_in(terms, DType::kFloat32, x.shape);
  terms_in.device = x.device;
  auto settle_open = [&](const std::vector<std::size_t>& open, detail::LsTerm unit_term, auto&& settle, std::vector<float>& v) {
    if (open.empty()) return true;
    write_terms(unit_term);
    const std::vector<double> unit = detail::group_min_max_on_device(terms_in, shape.rank, shape.v.data(), strides.v.data(), groups).min;
    const detail::ScopedFlushDenormals flush;
    for (const std::size_t g : open) {
      if (!settle(g, unit[g], v[g])) return false;
    }
    return true;
  };
  if (!settle_open(open_xz, detail::LsTerm::kXzUnit, settle_xz, xz) || !settle_open(open_zz, detail::LsTerm::kZzUnit, settle_zz, zz)) {
    return false;
  }
  sums.resize(xz.size());
  for (std::size_t g = 0; g < sums.size(); ++g) sums[g] = LeastSquaresAcc{static_cast<double>(xz[g]), static_cast<double>(zz[g])};
  return true;
}

namespace {
// A NaN maximum becomes the quiet NaN; with `divide`, the maximum is divided by `divisor` (float32).
void finish_group_max(ScaleArray& s, bool divide, float divisor) {
  map_scale(s, [&](float v) { return std::isnan(v) ? std::numeric_limits<float>::quiet_NaN() : divide ? v / divisor : v; });
}
}  // namespace

ScaleArray group_max(const float* x, const Dims& shape, const std::vector<bool>& keep, bool absolute, bool divide, float divisor) {
  const detail::GroupedLayout L = detail::make_grouped_layout(shape, keep, no_blocks(shape.rank), Dims{});
  ScaleArray out;
  out.shape = kept_shape(shape, keep);
  out.values.assign(static_cast<std::size_t>(L.num_groups), -std::numeric_limits<float>::infinity());
  MaxReducer reducer;
  reducer.params.absolute = absolute;
  detail::grouped_reduce(x, nullptr, L, reducer, out.values.data());
  finish_group_max(out, divide, divisor);
  return out;
}

ScaleArray group_max_on_device(const TensorView& x, const std::vector<bool>& keep, bool absolute, bool divide, float divisor) {
  const detail::GroupedLayout L = detail::make_grouped_layout(x.shape, keep, no_blocks(x.shape.rank), Dims{});
  const detail::GroupMinMax r = detail::group_min_max_on_device(x, L.rank, L.shape.data(), L.group_stride.data(), L.num_groups);
  ScaleArray out;
  out.shape = kept_shape(x.shape, keep);
  out.values.resize(static_cast<std::size_t>(L.num_groups));
  for (std::size_t g = 0; g < out.values.size(); ++g) {
    if (r.nan[g]) {
      out.values[g] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const double m = absolute ? std::max(-r.min[g], r.max[g]) : r.max[g];
    out.values[g] = detail::group_max_value(static_cast<float>(m), false);  // the flush of values below FLT_MIN
  }
  finish_group_max(out, divide, divisor);
  return out;
}

}  // namespace polyquant::qkeras::internal
