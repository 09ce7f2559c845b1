// AIMET's MinMaxEncodingAnalyzer, bit-exact (aimet_analyzers.h; notation: common.h): per-element
// min / max in x's dtype with torch's sign of a zero, folded across batches and merges, and the
// encoding computed from them.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device_elementwise.h"
#include "core/grouped_reduce.h"
#include "families/aimet/analyzers/common.h"
#include "families/aimet/analyzers/torch_cpu.h"
#include "kernels/registry.h"
#include "polyquant/aimet_analyzers.h"

namespace polyquant::aimet {

using namespace analyzers_detail;  // the analyzers' shared internals: common.h, torch_cpu.h

namespace {

using detail::GroupedLayout;

// ---- grouped min / max (MinMax statistics) -------------------------------------------------------
struct MinMaxAcc {
  float lo = INFINITY, hi = -INFINITY;
  std::uint8_t negative_zero = 0;  // a -0.0 was folded in (GroupMinMaxParams::negative_zero)
};

struct MinMaxReducer {
  using Acc = MinMaxAcc;
  struct ThreadEnv {
    ThreadEnv() {}  // no floating-point environment to set
  };
  detail::RowKernel kernel = detail::best_kernel(detail::KernelOp::kGroupMinMax, detail::WorkType::kF32);

  // Runs the kernel per element over `rows` rows of n groups (acc interleaved {lo, hi}).
  void per_element(Acc* acc, const float* x, std::int64_t x_row_stride, std::int64_t n, std::int64_t rows) const {
    thread_local std::vector<float> lo, hi;
    thread_local std::vector<std::uint8_t> negative_zero;
    lo.resize(static_cast<std::size_t>(n));
    hi.resize(static_cast<std::size_t>(n));
    negative_zero.resize(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      const auto u = static_cast<std::size_t>(j);
      lo[u] = acc[j].lo, hi[u] = acc[j].hi, negative_zero[u] = acc[j].negative_zero;
    }
    const std::int64_t tile = std::max<std::int64_t>(4, 1024 / std::max<std::int64_t>(n, 1));
    for (std::int64_t r = 0; r < rows; r += tile) {
      detail::GroupMinMaxParams p;
      p.per_element = true;
      p.rows = std::min(tile, rows - r);
      p.x_row_stride = x_row_stride;
      p.max_out = hi.data();
      p.negative_zero = negative_zero.data();
      detail::RowArgs a;
      a.in[0] = x + r * x_row_stride;
      a.out = lo.data();
      a.n = n;
      kernel(&p, a);
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const auto u = static_cast<std::size_t>(j);
      acc[j].lo = lo[u], acc[j].hi = hi[u], acc[j].negative_zero = negative_zero[u];
    }
  }
  void row(Acc* acc, std::int64_t group_stride, const float* x, const float*, std::int64_t, std::int64_t n) const {
    if (group_stride == 0) {
      detail::GroupMinMaxParams p;
      p.max_out = &acc->hi;
      p.negative_zero = &acc->negative_zero;
      detail::RowArgs a;
      a.in[0] = x;
      a.out = &acc->lo;
      a.n = n;
      kernel(&p, a);
      return;
    }
    if (group_stride == 1) {
      per_element(acc, x, 0, n, 1);
      return;
    }
    for (std::int64_t j = 0; j < n; ++j) {
      Acc& g = acc[j * group_stride];
      g.lo = detail::group_min_fold(g.lo, x[j]);
      g.hi = detail::group_max_fold_keep(g.hi, x[j]);
      g.negative_zero |= static_cast<std::uint8_t>(detail::is_negative_zero(x[j]));
    }
  }
  void rows(Acc* acc, std::int64_t group_stride, const float* x, std::int64_t x_row_stride, const float* aux, std::int64_t aux_stride,
            std::int64_t n, std::int64_t nrows) const {
    if (group_stride != 1) {
      for (std::int64_t r = 0; r < nrows; ++r) row(acc, group_stride, x + r * x_row_stride, aux, aux_stride, n);
      return;
    }
    per_element(acc, x, x_row_stride, n, nrows);
  }
  void merge(Acc& into, const Acc& from) const {
    into.lo = detail::group_min_fold(into.lo, from.lo);
    into.hi = detail::group_max_fold_keep(into.hi, from.hi);
    into.negative_zero |= from.negative_zero;
  }
};

// Per-group min and max of x (float32 data through the kernels, float64 by a plain loop), and
// whether the group holds a -0.0 (settle_zero_signs replays only those groups).
void grouped_min_max(const Data& data, const ReducedView& rv, std::vector<double>& mn, std::vector<double>& mx,
                     std::vector<std::uint8_t>& negative_zero) {
  const GroupedLayout L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  const std::int64_t g = L.num_groups;
  mn.assign(static_cast<std::size_t>(g), INFINITY);
  mx.assign(static_cast<std::size_t>(g), -INFINITY);
  negative_zero.assign(static_cast<std::size_t>(g), 0);
  if (data.f) {
    std::vector<MinMaxAcc> acc(static_cast<std::size_t>(g));
    detail::grouped_reduce(data.f, nullptr, L, MinMaxReducer{}, acc.data());
    for (std::int64_t i = 0; i < g; ++i) {
      const auto u = static_cast<std::size_t>(i);
      mn[u] = acc[u].lo, mx[u] = acc[u].hi, negative_zero[u] = acc[u].negative_zero;
    }
    return;
  }
  // float64: a plain loop.
  detail::for_each_element_group(L, [&](std::int64_t i, std::int64_t group) {
    const auto ug = static_cast<std::size_t>(group);
    const double v = data.d[i];
    double& lo = mn[ug];
    double& hi = mx[ug];
    if (v < lo || std::isnan(v)) lo = std::isnan(lo) ? lo : v;
    if (v > hi || std::isnan(v)) hi = std::isnan(hi) ? hi : v;
    if (v == 0 && std::signbit(v)) negative_zero[ug] = 1;
  });
}

// ---- the sign of a zero min / max (MinMax statistics) ---------------------------------------------
// AIMET's reduce() permutes the reduced dimensions of a contiguous x first, reshapes to
// (-1, *shape) (a view when the reduced dimensions are adjacent in memory, else a contiguous copy)
// and calls torch.amin / amax over dimension 0. The values are the min / max whatever the order;
// which of several zeros of different signs comes out depends on torch's reduction loops
// (measured against torch 2.15 on every layout AIMET produces, single-threaded):
//   inner (the reduced run is x's innermost, stride 1; or one group): per group, 4 vectors of V
//     lanes take elements k < 4V * floor(n / 4V) (lane k mod 4V, the later of equal values wins),
//     folded as f(f(a0, a1), f(a2, a3)) lane by lane, then lanes 1..V-1 into lane 0 by the scalar
//     rule (the earlier wins), then the remaining elements one by one by the scalar rule;
//   outer (a kept run is innermost): groups are columns of that run of W; columns below
//     W - W mod 4V run in vectors (the last of equal values down the column wins), the others in
//     the scalar loop (the first wins).
// V = torch_vector_lanes(dtype).
// Only groups whose min (max) is exactly 0 and that hold a -0.0 are replayed (settle_zero_signs),
// and only zeros can win there (every other value is larger (smaller), NaN would have made the
// result NaN): a loop tracks the last zero of each lane (NaN: none yet), the folds keep the later
// or the earlier zero as torch's loops do.
template <class T>
T later_zero(T a, T b) { return std::isnan(b) ? a : b; }
template <class T>
T earlier_zero(T a, T b) { return std::isnan(a) ? b : a; }

// z = x when x is a zero, else z, without branches (zeros are frequent: ReLU outputs).
template <class T>
inline T take_if_zero(T x, T z) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const U mask = U{0} - static_cast<U>(x == 0);
  return std::bit_cast<T>((std::bit_cast<U>(x) & mask) | (std::bit_cast<U>(z) & ~mask));
}

// The inner loop over a contiguous run of n values (the group's elements in torch's order).
template <class T>
T inner_zero(const T* p, std::int64_t n, int v) {
  const T none = std::numeric_limits<T>::quiet_NaN();
  const std::int64_t block = 4 * static_cast<std::int64_t>(v), count = n / block;
  T r = none;
  if (count > 0) {
    T lane[64];
    for (std::int64_t l = 0; l < block; ++l) lane[l] = none;
    for (std::int64_t i = 0; i < count; ++i) {
      const T* q = p + i * block;
      for (std::int64_t l = 0; l < block; ++l) lane[l] = take_if_zero(q[l], lane[l]);
    }
    T b0 = none;
    for (int l = 0; l < v; ++l) {
      const T b = later_zero(later_zero(lane[l], lane[v + l]), later_zero(lane[2 * v + l], lane[3 * v + l]));
      b0 = l == 0 ? b : earlier_zero(b0, b);
    }
    r = b0;
  }
  for (std::int64_t k = count * block; k < n && std::isnan(r); ++k)
    if (p[k] == 0) r = p[k];
  return r;
}

// The outer loops: one walk of x in C order (each group's rows come in torch's order), keeping per
// group its last zero (vector columns) or its first (scalar columns). `zero[g]` starts as NaN.
// The innermost dimension is a run of `run` values: one group each (kept: groups g0, g0 + 1, ...,
// column (g0 + j) mod columns, vector below vec_columns), or all of group g0 (reduced).
template <class T>
void zeros_in_run(const T* p, std::int64_t run, std::int64_t g0, bool kept, std::int64_t columns, std::int64_t vec_columns, T* zero) {
  if (kept) {
    std::int64_t j = 0;
    while (j < run) {
      const std::int64_t c = (g0 + j) % columns;
      const bool vector = c < vec_columns;
      const std::int64_t end = std::min(run, j + (vector ? vec_columns - c : columns - c));
      T* z = zero + g0;
      if (vector) {
        for (std::int64_t k = j; k < end; ++k) z[k] = take_if_zero(p[k], z[k]);
      } else {
        for (std::int64_t k = j; k < end; ++k)
          if (std::isnan(z[k]) && p[k] == 0) z[k] = p[k];
      }
      j = end;
    }
    return;
  }
  T& z = zero[g0];
  if (g0 % columns < vec_columns) {  // the last zero of the run, if any
    for (std::int64_t k = run - 1; k >= 0; --k)
      if (p[k] == 0) {
        z = p[k];
        break;
      }
  } else if (std::isnan(z)) {  // the first zero, if none yet
    for (std::int64_t k = 0; k < run; ++k)
      if (p[k] == 0) {
        z = p[k];
        break;
      }
  }
}

// Only groups whose min or max is a zero and that hold a -0.0 are replayed: in a group without
// one every zero is +0, and the kernel's extreme, one of the group's zeros, is +0 already (ReLU
// outputs: no pass at all).
void settle_zero_signs(const Data& data, const ReducedView& rv, std::vector<double>& mn, std::vector<double>& mx,
                       const std::vector<std::uint8_t>& negative_zero) {
  const auto groups = static_cast<std::int64_t>(mn.size());
  auto needs_replay = [&](std::int64_t g) {
    const auto u = static_cast<std::size_t>(g);
    return negative_zero[u] != 0 && (mn[u] == 0 || mx[u] == 0);
  };
  bool any = false;
  for (std::int64_t g = 0; g < groups && !any; ++g) any = needs_replay(g);
  if (!any) return;
  // The dimensions of extent > 1 of the grouped layout (x's C strides, group strides: 0 when reduced).
  const GroupedLayout L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  struct Dim {
    std::int64_t size, stride, group_stride;
    bool keep;
  };
  std::vector<Dim> dims;
  for (int d = 0; d < L.rank; ++d) {
    const auto ud = static_cast<std::size_t>(d);
    if (L.shape[ud] > 1) dims.push_back(Dim{L.shape[ud], L.x_stride[ud], L.group_stride[ud], L.group_stride[ud] != 0});
  }
  std::vector<Dim> kept, reduced;
  int first_reduced = -1, last_reduced = -1;
  for (int i = 0; i < static_cast<int>(dims.size()); ++i) {
    const Dim& d = dims[static_cast<std::size_t>(i)];
    (d.keep ? kept : reduced).push_back(d);
    if (!d.keep) {
      if (first_reduced < 0) first_reduced = i;
      last_reduced = i;
    }
  }
  const bool adjacent = reduced.empty() || last_reduced - first_reduced + 1 == static_cast<int>(reduced.size());
  // inner: the group's elements are one contiguous run (the reduced dimensions trail, adjacent)
  const bool inner = reduced.empty() || (adjacent && last_reduced == static_cast<int>(dims.size()) - 1);
  std::int64_t columns = groups;  // outer: the innermost kept run
  if (!inner && adjacent) {
    columns = 1;
    for (std::size_t i = static_cast<std::size_t>(last_reduced) + 1; i < dims.size(); ++i) columns *= dims[i].size;
  }
  const int v = torch_vector_lanes(data.dtype);
  const std::int64_t vec_columns = columns - columns % (4 * v);
  std::int64_t n = 1;
  for (const Dim& d : reduced) n *= d.size;
  auto settle = [&](std::int64_t g, double z) {
    const auto u = static_cast<std::size_t>(g);
    if (std::isnan(z)) return;  // (cannot happen: the extreme is a zero of the group)
    if (mn[u] == 0) mn[u] = z;
    if (mx[u] == 0) mx[u] = z;
  };
  auto run_typed = [&](auto type_tag) {
    using T = decltype(type_tag);
    const T* x = std::is_same_v<T, float> ? reinterpret_cast<const T*>(data.f) : reinterpret_cast<const T*>(data.d);
    if (inner) {
      for (std::int64_t g = 0; g < groups; ++g) {
        if (!needs_replay(g)) continue;
        std::int64_t base = 0;
        for (const Dim& d : kept) base += (g / d.group_stride) % d.size * d.stride;
        settle(g, inner_zero(x + base, n, v));
      }
      return;
    }
    // outer: rows are the reduced dimensions (when they are not adjacent AIMET's reshape copies,
    // and the copy's rows follow x's C order too).
    std::vector<T> zero(static_cast<std::size_t>(groups), std::numeric_limits<T>::quiet_NaN());
    const int last = static_cast<int>(dims.size()) - 1;
    const std::int64_t run = dims[static_cast<std::size_t>(last)].size;
    const bool kept_run = dims[static_cast<std::size_t>(last)].keep;
    std::vector<std::int64_t> idx(dims.size(), 0);
    std::int64_t off = 0, g0 = 0;
    for (;;) {
      zeros_in_run(x + off, run, g0, kept_run, columns, vec_columns, zero.data());
      int d = last - 1;
      for (; d >= 0; --d) {
        const auto ud = static_cast<std::size_t>(d);
        off += dims[ud].stride;
        g0 += dims[ud].group_stride;
        if (++idx[ud] < dims[ud].size) break;
        off -= dims[ud].size * dims[ud].stride;
        g0 -= dims[ud].size * dims[ud].group_stride;
        idx[ud] = 0;
      }
      if (d < 0) break;
    }
    for (std::int64_t g = 0; g < groups; ++g)
      if (needs_replay(g)) settle(g, zero[static_cast<std::size_t>(g)]);
  };
  if (data.f) run_typed(0.0f);
  else run_typed(0.0);
}

}  // namespace

MinMaxEncodingAnalyzer::MinMaxEncodingAnalyzer(AnalyzerShape shape) : shape_(std::move(shape)) {}

MinMaxEncodingAnalyzer::State MinMaxEncodingAnalyzer::batch_stats(const TensorView& x) const {
  check_dtype(x.dtype);
  const ReducedView rv = reduced_view(x.shape, shape_, false);
  check_not_empty(x);
  std::vector<unsigned char> host_copy;
  TensorView source = x;
  if (!x.device.is_cpu()) {
    // On a device: each group's minimum and maximum by order-key atomics there (any order gives
    // them). What the keys cannot settle, a NaN (which one torch keeps) or a zero minimum / maximum
    // in a group holding a -0.0 (the sign torch's loops pick), is decided by the host's code on a
    // copy of x: rare in calibration data, and then the host's bits.
    const GroupedLayout L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
    const polyquant::detail::GroupMinMax r =
        polyquant::detail::group_min_max_on_device(x, L.rank, L.shape.data(), L.group_stride.data(), L.num_groups);
    bool settled = true;
    for (std::size_t g = 0; g < r.min.size() && settled; ++g) {
      settled = !r.nan[g] && !(r.negative_zero[g] && (r.min[g] == 0 || r.max[g] == 0));
    }
    if (settled) {
      State s;
      s.dtype = x.dtype;
      s.min = r.min;
      s.max = r.max;
      return s;
    }
    source = polyquant::detail::host_readable(x, host_copy);
  }
  const Data data = read_data(source);
  State s;
  s.dtype = x.dtype;
  std::vector<std::uint8_t> negative_zero;
  grouped_min_max(data, rv, s.min, s.max, negative_zero);
  settle_zero_signs(data, rv, s.min, s.max, negative_zero);
  return s;
}

namespace {
// torch.minimum / maximum of the running statistics with a batch's (both contiguous, one row of
// all channels): the result in the promoted dtype, NaN propagating, ties (+0 against -0) as torch's
// loops give them.
void fold_min_max(MinMaxEncodingAnalyzer::State& into, const MinMaxEncodingAnalyzer::State& from) {
  const auto n = static_cast<std::int64_t>(into.min.size());
  const std::int64_t block = torch_binary_block(promote(into.dtype, from.dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const bool vector_loop = torch_vector_loop(i, n, block);
    into.min[u] = torch_minimum(into.min[u], from.min[u], vector_loop);
    into.max[u] = torch_maximum(into.max[u], from.max[u], vector_loop);
  }
  into.dtype = promote(into.dtype, from.dtype);
}
}  // namespace

void MinMaxEncodingAnalyzer::update_stats(const TensorView& x) {
  // The batch's statistics need no lock (shape_ never changes); only the fold does.
  State s = batch_stats(x);
  std::unique_lock lock(mutex_);
  if (state_.min.empty()) {
    state_ = std::move(s);
    return;
  }
  fold_min_max(state_, s);
}

void MinMaxEncodingAnalyzer::reset_stats() {
  std::unique_lock lock(mutex_);
  state_ = {};
}

bool MinMaxEncodingAnalyzer::has_stats() const {
  std::shared_lock lock(mutex_);
  return !state_.min.empty();
}

MinMaxEncodingAnalyzer::State MinMaxEncodingAnalyzer::state() const {
  std::shared_lock lock(mutex_);
  return state_;
}

void MinMaxEncodingAnalyzer::merge_locked(const State& other) {
  if (other.min.empty()) return;
  if (state_.min.empty()) {
    state_ = other;
    return;
  }
  fold_min_max(state_, other);
}

void MinMaxEncodingAnalyzer::merge(const MinMaxEncodingAnalyzer& other) {
  if (!(other.shape_.shape == shape_.shape)) fail(ErrorKind::kValue, "merge: the analyzers' shapes differ");
  // a.merge(a): min / max of equal values leave them as they are
  merge_under_locks(mutex_, other.mutex_, other.state_, &other == this,
                            [this](const State& s) { merge_locked(s); });
}

void MinMaxEncodingAnalyzer::set_state(State state) {
  if (!state.min.empty() || !state.max.empty()) {
    if (!is_analyzer_dtype(state.dtype))
      fail(ErrorKind::kValue, std::string("state: dtype ") + dtype_name(state.dtype) + " is not supported (float16, bfloat16, float32, float64)");
    const auto n = static_cast<std::size_t>(shape_.shape.numel());
    if (state.min.size() != n || state.max.size() != n)
      fail(ErrorKind::kValue, "state: min and max must have " + std::to_string(n) + " values (the analyzer's shape), got " +
                                  std::to_string(state.min.size()) + " and " + std::to_string(state.max.size()));
  }
  std::unique_lock lock(mutex_);
  state_ = std::move(state);
}

namespace {
// MinMaxEncodingAnalyzer.compute_encodings_from_stats, per element (T = the statistics' dtype,
// P = T promoted with float32):
//   mwz = clamp(min, max=0), xwz = clamp(max, min=0)                          (T; -0 and NaN kept)
//   diff = (xwz - mwz) / N                                                     (T)
//   adj = min_scale * (diff < min_scale)                                       (float32: a Python
//                                                           float times a bool tensor)
//   symmetric:  max' = xwz + f32(floor(N/2) * adj), min' = mwz - f32(ceil(N/2) * adj)   (P)
//               delta = maximum(max' / (floor(N/2) + [N == 3]), -min' / ceil(N/2))    (P)
//               min' = -ceil(N/2) * delta, max' = floor(N/2) * delta                   (P)
//   asymmetric: max' = xwz + f32(N * adj), min' = mwz                          (P, T)
//   max = clamp(max', max=finfo(T).max) -> T, min = clamp(min', min=finfo(T).min) -> T
void minmax_encoding(DType t, double mn, double mx, double n, bool symmetric, double& out_min, double& out_max) {
  const DType p = promote(t, DType::kFloat32);
  const double ms = minimum_scale(n);
  const double mwz = mn > 0 ? 0.0 : mn;
  const double xwz = mx < 0 ? 0.0 : mx;
  const double diff = op_in(t, op_in(t, xwz - mwz) / op_in(t == DType::kFloat64 ? t : DType::kFloat32, n));
  const double adj = diff < torch_round_to(t, ms) ? f32(ms) : 0.0;
  double umin, umax;
  if (symmetric) {
    const double pos = std::floor(n / 2), neg = std::ceil(n / 2);
    umax = op_in(p, xwz + f32(f32(pos) * adj));
    umin = op_in(p, mwz - f32(f32(neg) * adj));
    const double den = pos + (n == 3 ? 1 : 0);
    const double a = op_in(p, umax / torch_round_to(p, den));
    const double b = op_in(p, -umin / torch_round_to(p, neg));
    const double delta = torch_maximum(a, b);
    umin = op_in(p, torch_round_to(p, -neg) * delta);
    umax = op_in(p, torch_round_to(p, pos) * delta);
  } else {
    umax = op_in(p, xwz + f32(f32(n) * adj));
    umin = mwz;
  }
  const double fmax = finfo_max(t);
  out_max = torch_round_to(t, std::isnan(umax) ? umax : std::min(umax, torch_round_to(p, fmax)));
  out_min = torch_round_to(t, std::isnan(umin) ? umin : std::max(umin, -torch_round_to(p, fmax)));
}
}  // namespace

EncodingRange MinMaxEncodingAnalyzer::compute_encodings(double num_steps, bool is_symmetric) const {
  check_num_steps(num_steps);
  std::shared_lock lock(mutex_);
  if (state_.min.empty()) throw StatisticsNotFoundError();
  const auto n = static_cast<std::int64_t>(state_.min.size());
  EncodingRange r = make_range(state_.dtype, shape_.shape, n);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    minmax_encoding(state_.dtype, state_.min[u], state_.max[u], num_steps, is_symmetric, r.min[u], r.max[u]);
  }
  return r;
}

EncodingRange MinMaxEncodingAnalyzer::compute_dynamic_encodings(const TensorView& x, double num_steps, bool is_symmetric) const {
  MinMaxEncodingAnalyzer batch(shape_);
  batch.state_ = batch_stats(x);
  return batch.compute_encodings(num_steps, is_symmetric);
}
}  // namespace polyquant::aimet
