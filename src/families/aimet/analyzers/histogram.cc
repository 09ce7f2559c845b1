// AIMET's histogram analyzer base (HistogramEncodingAnalyzer, of Percentile and SQNR), bit-exact
// (aimet_analyzers.h; notation: common.h): per-element finite ranges, bin edges and torch.histc
// counts, the growth of a histogram into a later batch's range, merges and states.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/backend_abi.h"
#include "core/device_elementwise.h"
#include "core/grouped_reduce.h"
#include "core/histogram.h"
#include "core/parallel.h"
#include "families/aimet/analyzers/common.h"
#include "families/aimet/analyzers/torch_cpu.h"
#include "polyquant/aimet_analyzers.h"

namespace polyquant::aimet {

using namespace analyzers_detail;  // the analyzers' shared internals: common.h, torch_cpu.h

HistogramEncodingAnalyzer::HistogramEncodingAnalyzer(AnalyzerShape shape, HistogramOptions options)
    : shape_(std::move(shape)), options_(options) {
  if (options_.num_bins <= 0) fail(ErrorKind::kValue, "Number of bins cannot be less than or equal to 0 (num_bins must be > 0).");
  if (options_.num_bins > std::numeric_limits<std::int32_t>::max())
    fail(ErrorKind::kValue, "num_bins: must be below 2^31, got " + std::to_string(options_.num_bins));
  if (!(options_.growth_limit >= 1.0)) {
    std::ostringstream os;
    os << "Growth limit must be at least 1.0. Got " << options_.growth_limit << " (histogram_growth_limit must be >= 1)";
    fail(ErrorKind::kRuntime, os.str());
  }
}

namespace {

using detail::GroupedLayout;

// _create_bin_edges: [lo, hi] (in dtype t; lo == hi widened by 0.5 in t), edges
// f32(f32(i * step) + lo) with step = f32((hi - lo) / bins), all float32.
void create_edges(DType t, double lo, double hi, std::int64_t bins, float* edges) {
  if (lo == hi) {
    lo = op_in(t, lo - 0.5);
    hi = op_in(t, hi + 0.5);
  }
  const float l = static_cast<float>(lo), h = static_cast<float>(hi);
  const float step = (h - l) / static_cast<float>(bins);
  for (std::int64_t i = 0; i <= bins; ++i) edges[i] = static_cast<float>(i) * step + l;
}

// ---- one histogram's input -----------------------------------------------------------------------
// `n` values of the data: contiguous from flat index `first`, or at the flat indices `idx`.
struct Slice {
  const Data* data = nullptr;
  std::int64_t first = 0;
  const std::int64_t* idx = nullptr;
  std::int64_t n = 0;
};

template <class T>
struct RunLoad {
  const T* p;
  T operator()(std::int64_t i) const { return p[i]; }
};
template <class T>
struct IndexLoad {
  const T* p;
  const std::int64_t* idx;
  T operator()(std::int64_t i) const { return p[idx[i]]; }
};

// f(load, T{}) with load(i) = the slice's i-th value in its storage type T (float or double).
template <class F>
void visit(const Slice& s, const F& f) {
  if (s.data->f) {
    if (s.idx) f(IndexLoad<float>{s.data->f, s.idx}, 0.0f);
    else f(RunLoad<float>{s.data->f + s.first}, 0.0f);
  } else {
    if (s.idx) f(IndexLoad<double>{s.data->d, s.idx}, 0.0);
    else f(RunLoad<double>{s.data->d + s.first}, 0.0);
  }
}

// Slices at least this long are split across threads when the histograms are not.
constexpr std::int64_t kSliceGrain = std::int64_t{1} << 16;

// Finite min / max of a slice (+inf / -inf when it has none), as torch's min_all / max_all.
MinMaxPart finite_min_max(const Slice& s, DType dtype, bool parallel) {
  const TorchMinAllShape shape = torch_min_all_shape(dtype);
  MinMaxPart r;
  visit(s, [&](const auto& at, auto zero) {
    using T = decltype(zero);
    if (s.n == 0) return;
    if (s.n < shape.period) {
      r = short_min_max<T>(at, s.n, shape);
      return;
    }
    auto lanes = [&](std::int64_t b, std::int64_t e, LaneMinMax<T>& acc) {
      if (shape.period == 16) lane_min_max<T, 16>(at, b, e, acc);
      else if (shape.period == 8) lane_min_max<T, 8>(at, b, e, acc);
      else lane_min_max<T, 4>(at, b, e, acc);
    };
    LaneMinMax<T> acc;
    if (parallel && s.n >= 2 * kSliceGrain) {
      // Pieces of whole periods, folded lane by lane in order (the last of equal values wins, so
      // folding pieces in order equals one pass).
      const std::int64_t pieces = (s.n + kSliceGrain - 1) / kSliceGrain;
      std::vector<LaneMinMax<T>> part(static_cast<std::size_t>(pieces));
      detail::parallel_for(pieces, 1, [&](std::int64_t pb, std::int64_t pe) {
        for (std::int64_t q = pb; q < pe; ++q)
          lanes(q * kSliceGrain, std::min(s.n, (q + 1) * kSliceGrain), part[static_cast<std::size_t>(q)]);
      });
      acc = part[0];
      for (std::size_t q = 1; q < part.size(); ++q)
        for (int l = 0; l < shape.period; ++l)
          acc.lo[l] = min_later(acc.lo[l], part[q].lo[l]), acc.hi[l] = max_later(acc.hi[l], part[q].hi[l]);
    } else {
      lanes(0, s.n, acc);
    }
    r.mn = combine_lanes(acc.lo, shape, true);
    r.mx = combine_lanes(acc.hi, shape, false);
  });
  return r;
}

// torch.histc counts of values [b, e) (as float32) plus the values below `below` / above `above`
// (compared in the storage type), for bins <= kHistcMaxCountingBins: `counts` has bins + 1 slots,
// the last one taking the values outside the range. Blocks: bin indices are computed vectorised
// (histc_bin_of, inline), then counted.
template <class T, class Load>
void bin_part(const Load& at, std::int64_t b, std::int64_t e, const detail::HistcBinning& hb, T below, T above, std::int64_t* counts,
              std::int64_t& n_below, std::int64_t& n_above) {
  constexpr int kBlock = 256;
  const detail::HistcBins bins = hb.counting();
  std::int32_t idx[kBlock];
  std::int64_t nb = 0, na = 0;
  for (std::int64_t i = b; i < e; i += kBlock) {
    const int m = static_cast<int>(std::min<std::int64_t>(kBlock, e - i));
    std::int32_t bb = 0, ba = 0;
    for (int j = 0; j < m; ++j) {
      const T v = at(i + j);
      idx[j] = detail::histc_bin_of(static_cast<float>(v), bins);
      bb += static_cast<std::int32_t>(v < below);
      ba += static_cast<std::int32_t>(v > above);
    }
    nb += bb;
    na += ba;
    for (int j = 0; j < m; ++j) ++counts[idx[j]];
  }
  n_below += nb;
  n_above += na;
}

// Counts of one histogram over [lo, hi] (torch.histc of the float32 data) plus the values below
// `below` / above `above` (compared in the data's dtype) into the end bins; float32 counts. With
// `parallel`, a long slice is split across threads; the integer counts add exactly.
void bin_slice(const Slice& s, std::int64_t bins, double lo, double hi, double below, double above, bool parallel, float* counts_out) {
  const Data& d = *s.data;
  thread_local std::vector<std::int64_t> counts;
  counts.assign(static_cast<std::size_t>(bins + 1), 0);  // + the slot of values outside the range
  std::int64_t n_below = 0, n_above = 0;
  const double bl = torch_round_to(d.dtype, below), ab = torch_round_to(d.dtype, above);
  if (lo == hi || bins > detail::kHistcMaxCountingBins) {
    // torch.histc over the data's own extremes, or too many bins for bin_part: the reference loop.
    std::vector<float> xs(static_cast<std::size_t>(s.n));
    visit(s, [&](const auto& at, auto) {
      for (std::int64_t i = 0; i < s.n; ++i) {
        xs[static_cast<std::size_t>(i)] = static_cast<float>(at(i));
        n_below += at(i) < bl;
        n_above += at(i) > ab;
      }
    });
    detail::torch_histc_f32(xs, bins, lo, hi, counts.data());
  } else {
    const detail::HistcBinning hb(lo, hi, bins);
    visit(s, [&](const auto& at, auto zero) {
      using T = decltype(zero);
      const T tb = static_cast<T>(bl), ta = static_cast<T>(ab);
      if (parallel && s.n >= 2 * kSliceGrain) {
        std::mutex mu;
        std::int64_t* total = counts.data();
        detail::parallel_for(s.n, kSliceGrain, [&](std::int64_t b, std::int64_t e) {
          std::vector<std::int64_t> part(static_cast<std::size_t>(bins + 1), 0);
          std::int64_t pb = 0, pa = 0;
          bin_part<T>(at, b, e, hb, tb, ta, part.data(), pb, pa);
          std::lock_guard<std::mutex> lock(mu);
          for (std::int64_t k = 0; k < bins; ++k) total[k] += part[static_cast<std::size_t>(k)];
          n_below += pb;
          n_above += pa;
        });
      } else {
        bin_part<T>(at, 0, s.n, hb, tb, ta, counts.data(), n_below, n_above);
      }
    });
  }
  for (std::int64_t k = 0; k < bins; ++k) counts_out[k] = static_cast<float>(counts[static_cast<std::size_t>(k)]);
  counts_out[0] = counts_out[0] + static_cast<float>(n_below);
  counts_out[bins - 1] = counts_out[bins - 1] + static_cast<float>(n_above);
}

// Element indices of encoding element k's slice, in C order (the histogram input).
struct SliceIndex {
  GroupedLayout L;
  // For each group, the flat indices of its elements in C order.
  std::vector<std::int64_t> offsets;  // group-major: group g's elements at [g * size, (g+1) * size)
};
SliceIndex slice_index(const ReducedView& rv, std::int64_t numel) {
  SliceIndex s;
  s.L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  const auto& L = s.L;
  s.offsets.resize(static_cast<std::size_t>(numel));
  std::vector<std::int64_t> fill(static_cast<std::size_t>(L.num_groups), 0);
  detail::for_each_element_group(L, [&](std::int64_t i, std::int64_t group) {
    s.offsets[static_cast<std::size_t>(group * L.group_size + fill[static_cast<std::size_t>(group)]++)] = i;
  });
  return s;
}

// Whether every encoding element's slice is one contiguous run of x in C order (no kept
// dimension after a reduced one), so histogram k reads elements [k * size, (k + 1) * size).
bool slices_contiguous(const ReducedView& rv) {
  bool reduced_seen = false;
  for (std::size_t d = 0; d < rv.keep.size(); ++d) {
    if (rv.view[static_cast<int>(d)] == 1) continue;
    if (!rv.keep[d]) reduced_seen = true;
    else if (reduced_seen) return false;
  }
  return true;
}

// Each encoding element's slice of x: the contiguous run [k * size, (k + 1) * size) when
// `contiguous` (slices_contiguous), else the flat indices slice_index lists for it.
struct ElementSlices {
  SliceIndex index;  // the grouped layout; offsets only when not contiguous
  bool contiguous = false;
  Slice of(const Data& data, std::int64_t k) const {
    Slice sl;
    sl.data = &data;
    sl.n = index.L.group_size;
    if (contiguous) sl.first = k * sl.n;
    else sl.idx = index.offsets.data() + k * sl.n;
    return sl;
  }
};
ElementSlices element_slices(const ReducedView& rv, std::int64_t numel, bool contiguous) {
  ElementSlices es;
  es.contiguous = contiguous;
  if (contiguous) es.index.L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  else es.index = slice_index(rv, numel);
  return es;
}

// Runs body(k) for k in [0, h), across threads when `parallel`; an error is that of the lowest k
// that failed, as a loop in order would report (later histograms may have run).
void for_each_histogram(std::int64_t h, bool parallel, const std::function<void(std::int64_t)>& body) {
  if (!parallel) {
    for (std::int64_t k = 0; k < h; ++k) body(k);
    return;
  }
  std::mutex mu;
  std::int64_t failed = h;
  std::exception_ptr error;
  detail::parallel_for(h, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) {
      try {
        body(k);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (k < failed) failed = k, error = std::current_exception();
        return;
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

// Histograms run one per thread when there are several and enough data; otherwise each long
// slice is split across threads.
bool histograms_in_parallel(std::int64_t h, std::int64_t numel) {
  return h > 1 && numel >= 2 * kSliceGrain && detail::num_threads() > 1;
}

// ---- x on a device -------------------------------------------------------------------------------
// The steps that read the data run on x's device, every group at once: each group's finite minimum
// and maximum by order-key atomics (any order gives them) and its torch.histc counts (integers,
// counted by histc_bin_of, the host's per-value steps). The host computes edges, ranges and
// merges from them as it does for host data, so the host's bits. What the device cannot settle
// returns nothing, and the caller runs the host code on a copy of x: a zero extreme in a group
// holding -0.0 (which zero torch's lane order keeps), a histc over the data's own extremes (a
// range of zero width) or more than kHistcMaxCountingBins bins.

// Element j of x (C order) belongs to group sum_d i_d * strides[d] over `shape`.
struct DeviceGrouping {
  int rank = 0;
  std::array<std::int64_t, detail::kMaxGroupedRank> shape{}, strides{};
  std::int64_t groups = 1;
};
// The groups of the encoding elements' slices (element_slices' grouping).
DeviceGrouping slice_grouping(const ReducedView& rv) {
  const GroupedLayout L = detail::make_grouped_layout(rv.view, rv.keep, std::vector<std::int64_t>(rv.keep.size(), 1), Dims{});
  DeviceGrouping g;
  g.rank = L.rank;
  g.shape = L.shape;
  g.strides = L.group_stride;
  g.groups = L.num_groups;
  return g;
}
// h consecutive chunks of n / h elements (AIMET's reshape(x, (h, -1)) of a later batch).
DeviceGrouping chunk_grouping(std::int64_t h, std::int64_t n) {
  DeviceGrouping g;
  g.rank = 2;
  g.shape[0] = h, g.shape[1] = n / h;
  g.strides[0] = 1, g.strides[1] = 0;
  g.groups = h;
  return g;
}

// Every group's finite_min_max.
std::optional<std::vector<MinMaxPart>> device_finite_min_max(const TensorView& x, const DeviceGrouping& g) {
  const detail::GroupMinMax r = detail::group_min_max_on_device(x, g.rank, g.shape.data(), g.strides.data(), g.groups, true);
  std::vector<MinMaxPart> parts(r.min.size());
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (r.negative_zero[k] && (r.min[k] == 0.0 || r.max[k] == 0.0)) return std::nullopt;
    parts[k].mn = r.min[k];
    parts[k].mx = r.max[k];
  }
  return parts;
}

// Every group's bin_slice counts (group k over [lo[k], hi[k]], the values below lo[k] / above hi[k]
// in the end bins): `checked` already holds each group's HistcBinning, built in group order so that
// the first error is the host's.
struct DeviceBinning {
  std::vector<PolyquantCudaHistogramBinning> groups;
  bool possible = true;  // false: a group takes bin_slice's reference loop
};
// Group k's binning over [lo, hi] with thresholds lo / hi (HistcBinning's errors; lo == hi or too many
// bins: not possible on the device).
void add_binning(DeviceBinning& b, DType dtype, std::int64_t bins, double lo, double hi) {
  if (lo == hi || bins > detail::kHistcMaxCountingBins) {
    b.possible = false;
    return;
  }
  const detail::HistcBinning hb(lo, hi, bins);
  // the thresholds as bin_slice compares them: rounded to the dtype, then to the storage type
  const bool wide = dtype == DType::kFloat64;
  auto storage = [&](double v) { return wide ? torch_round_to(dtype, v) : static_cast<double>(static_cast<float>(torch_round_to(dtype, v))); };
  b.groups.push_back({hb.counting(), storage(lo), storage(hi)});
}
// The counts of every group, bin_slice's float32 counts (groups * bins).
std::vector<float> device_counts(const TensorView& x, const DeviceGrouping& g, std::int64_t bins, const DeviceBinning& b) {
  const std::vector<std::uint64_t> c =
      detail::group_histogram_on_device(x, g.rank, g.shape.data(), g.strides.data(), g.groups, bins, b.groups);
  std::vector<float> out(static_cast<std::size_t>(g.groups * bins));
  for (std::int64_t k = 0; k < g.groups; ++k) {
    const std::uint64_t* ck = c.data() + k * (bins + 2);
    float* o = out.data() + k * bins;
    for (std::int64_t j = 0; j < bins; ++j) o[j] = static_cast<float>(ck[j]);
    o[0] = o[0] + static_cast<float>(ck[bins]);
    o[bins - 1] = o[bins - 1] + static_cast<float>(ck[bins + 1]);
  }
  return out;
}

// _create_bin_edges' growth limits AIMET fixes at the first batch: lo - range * g / 2,
// hi + range * g / 2 (float32).
void set_growth_limits(HistogramState& s, double growth_limit) {
  const auto h = static_cast<std::int64_t>(s.min.size());
  const std::int64_t bins = s.num_bins;
  s.limit_lo.resize(static_cast<std::size_t>(h));
  s.limit_hi.resize(static_cast<std::size_t>(h));
  const float g = static_cast<float>(growth_limit);
  for (std::int64_t k = 0; k < h; ++k) {
    const float lo = s.edges[static_cast<std::size_t>(k * (bins + 1))], hi = s.edges[static_cast<std::size_t>(k * (bins + 1) + bins)];
    const float range = hi - lo;
    const float half = (range * g) / 2.0f;
    s.limit_lo[static_cast<std::size_t>(k)] = lo - half;
    s.limit_hi[static_cast<std::size_t>(k)] = hi + half;
  }
}

}  // namespace

HistogramState HistogramEncodingAnalyzer::batch_stats(const TensorView& x) const { return batch_stats_impl(x, true); }

// The batch's histograms (with_counts) or only its ranges and edges, raising the errors binning
// would raise either way.
HistogramState HistogramEncodingAnalyzer::batch_stats_impl(const TensorView& x, bool with_counts) const {
  check_dtype(x.dtype);
  const ReducedView rv = reduced_view(x.shape, shape_, true);
  check_not_empty(x);
  const std::int64_t bins = options_.num_bins;
  HistogramState s;
  s.dtype = x.dtype;
  s.num_bins = bins;
  std::vector<unsigned char> host_copy;
  TensorView source = x;
  if (!x.device.is_cpu()) {
    const DeviceGrouping g = slice_grouping(rv);
    if (const std::optional<std::vector<MinMaxPart>> ranges = device_finite_min_max(x, g)) {
      const std::int64_t h = g.groups;
      s.edges.assign(static_cast<std::size_t>(h * (bins + 1)), 0.0f);
      s.min.resize(static_cast<std::size_t>(h));
      s.max.resize(static_cast<std::size_t>(h));
      DeviceBinning binning;
      for (std::int64_t k = 0; k < h && binning.possible; ++k) {
        const MinMaxPart& r = (*ranges)[static_cast<std::size_t>(k)];
        float* edges = s.edges.data() + k * (bins + 1);
        create_edges(x.dtype, r.mn, r.mx, bins, edges);
        add_binning(binning, x.dtype, bins, edges[0], edges[bins]);
        s.min[static_cast<std::size_t>(k)] = r.mn;
        s.max[static_cast<std::size_t>(k)] = r.mx;
      }
      if (binning.possible) {
        s.counts = with_counts ? device_counts(x, g, bins, binning) : std::vector<float>(static_cast<std::size_t>(h * bins), 0.0f);
        set_growth_limits(s, options_.growth_limit);
        return s;
      }
    }
    source = polyquant::detail::host_readable(x, host_copy);
  }
  const Data data = read_data(source);
  const ElementSlices slices = element_slices(rv, data.n, data.n > 0 && slices_contiguous(rv));
  const std::int64_t h = slices.index.L.num_groups;
  s.counts.assign(static_cast<std::size_t>(h * bins), 0.0f);
  s.edges.assign(static_cast<std::size_t>(h * (bins + 1)), 0.0f);
  s.min.resize(static_cast<std::size_t>(h));
  s.max.resize(static_cast<std::size_t>(h));
  const bool across = histograms_in_parallel(h, data.n);
  for_each_histogram(h, across, [&](std::int64_t k) {
    const Slice sl = slices.of(data, k);
    const MinMaxPart r = finite_min_max(sl, data.dtype, !across);
    float* edges = s.edges.data() + k * (bins + 1);
    create_edges(data.dtype, r.mn, r.mx, bins, edges);
    if (with_counts || edges[0] == edges[bins]) {
      thread_local std::vector<float> scratch;
      float* out = s.counts.data() + k * bins;
      if (!with_counts) scratch.resize(static_cast<std::size_t>(bins)), out = scratch.data();
      bin_slice(sl, bins, edges[0], edges[bins], edges[0], edges[bins], !across, out);
    } else {
      detail::HistcBinning(edges[0], edges[bins], bins);  // torch.histc's range checks
    }
    s.min[static_cast<std::size_t>(k)] = r.mn;
    s.max[static_cast<std::size_t>(k)] = r.mx;
  });
  set_growth_limits(s, options_.growth_limit);
  return s;
}

namespace {

// One histogram of AIMET's merge_stats, in three steps: the range it grows to for a batch spanning
// [new_min, new_max] (merged_range: clamped to the growth limits, never shrinking), the old counts
// moved into that range (moved_counts, re-binned when it grew), then the batch's counts over the
// new range added (finish_merge). W = the working dtype (float32, or float64 for a float64 batch).
DType merge_working_dtype(DType batch_dtype) { return batch_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

std::pair<double, double> merged_range(double new_min, double new_max, const float* edges, std::int64_t bins, float limit_lo,
                                       float limit_hi) {
  auto clamp_t = [](double x, double lo, double hi) {
    if (std::isnan(lo) || std::isnan(hi)) return static_cast<double>(NAN);
    const double r = x < lo ? lo : x;
    return hi < r ? hi : r;
  };
  return {clamp_t(new_min, limit_lo, edges[0]), clamp_t(new_max, edges[bins], limit_hi)};
}

std::vector<float> moved_counts(DType batch_dtype, double umin, double umax, std::int64_t bins, const float* counts, const float* edges,
                                double cur_min, double cur_max) {
  const DType w = merge_working_dtype(batch_dtype);
  auto rw = [&](double v) { return torch_round_to(w, v); };
  std::vector<float> updates(static_cast<std::size_t>(bins), 0.0f);
  if (umin == cur_min && umax == cur_max) {
    std::copy(counts, counts + bins, updates.begin());
    return updates;
  }
  if (w == DType::kFloat64) fail(ErrorKind::kRuntime, "index_add_(): self (Float) and source (Double) must have the same scalar type");
  const double dest_w = rw(rw(umax - umin) / static_cast<double>(static_cast<float>(bins)));
  const float src_w = edges[1] - edges[0];
  const float umin32 = static_cast<float>(umin), dw32 = static_cast<float>(dest_w);
  auto bin_num = [&](float start) {
    const float q = (start - umin32) / dw32;
    // int32 conversion as x86 does it (out of range / NaN: INT32_MIN), then min(., bins - 1).
    std::int64_t i = (std::isnan(q) || q >= 2147483648.0f || q < -2147483648.0f) ? std::int64_t{INT32_MIN} : static_cast<std::int32_t>(q);
    i = std::min<std::int64_t>(i, bins - 1);
    if (i < 0) fail(ErrorKind::kRuntime, "index out of range in self");
    return i;
  };
  std::vector<double> dest_upd(static_cast<std::size_t>(bins));
  std::vector<std::int64_t> dest_idx(static_cast<std::size_t>(bins));
  for (std::int64_t j = 0; j < bins; ++j) {
    const float a = edges[j];
    const std::int64_t k = bin_num(a);
    const double dest_end = rw(umin + rw(dest_w * static_cast<double>(k + 1)));
    const double split = round_half_even(rw(rw(rw(dest_end - a) / src_w) * counts[j]));
    dest_idx[static_cast<std::size_t>(j)] = k;
    dest_upd[static_cast<std::size_t>(j)] = torch_minimum(split, counts[j]);
  }
  for (std::int64_t j = 0; j < bins; ++j)
    updates[static_cast<std::size_t>(dest_idx[static_cast<std::size_t>(j)])] += static_cast<float>(dest_upd[static_cast<std::size_t>(j)]);
  for (std::int64_t j = 0; j < bins; ++j) {
    if (!(dest_upd[static_cast<std::size_t>(j)] < counts[j])) continue;
    const std::int64_t k = bin_num(edges[j] + dw32);
    updates[static_cast<std::size_t>(k)] += static_cast<float>(rw(counts[j] - dest_upd[static_cast<std::size_t>(j)]));
  }
  return updates;
}

// Another analyzer's histogram as the batch: its counts moved into [umin, umax] by the same
// proportional split (exact when its edges are the new edges).
std::vector<float> other_counts_moved(DType batch_dtype, double umin, double umax, std::int64_t bins, const float* other_counts,
                                      const float* other_edges) {
  const DType w = merge_working_dtype(batch_dtype);
  auto rw = [&](double v) { return torch_round_to(w, v); };
  std::vector<float> fresh(static_cast<std::size_t>(bins), 0.0f);
  const float dw32 = static_cast<float>(rw(rw(umax - umin) / static_cast<double>(static_cast<float>(bins))));
  std::vector<float> new_edges(static_cast<std::size_t>(bins + 1));
  create_edges(w, umin, umax, bins, new_edges.data());
  if (std::equal(new_edges.begin(), new_edges.end(), other_edges)) {
    std::copy(other_counts, other_counts + bins, fresh.begin());
    return fresh;
  }
  const float src_w = other_edges[1] - other_edges[0];
  const float umin32 = static_cast<float>(umin);
  for (std::int64_t j = 0; j < bins; ++j) {
    const float a = other_edges[j];
    const float q = (a - umin32) / dw32;
    const std::int64_t k = std::clamp<std::int64_t>(static_cast<std::int64_t>(q), 0, bins - 1);
    const double dest_end = rw(umin + rw(static_cast<double>(dw32) * static_cast<double>(k + 1)));
    const double split = round_half_even(rw(rw(rw(dest_end - a) / src_w) * other_counts[j]));
    const double du = std::min<double>(split, other_counts[j]);
    fresh[static_cast<std::size_t>(k)] += static_cast<float>(du);
    if (du < other_counts[j]) {
      const std::int64_t k2 = std::clamp<std::int64_t>(static_cast<std::int64_t>(((a + dw32) - umin32) / dw32), 0, bins - 1);
      fresh[static_cast<std::size_t>(k2)] += static_cast<float>(other_counts[j] - du);
    }
  }
  return fresh;
}

// counts = fresh + updates over the new range [umin, umax], its edges, and the running range.
void finish_merge(DType batch_dtype, double umin, double umax, std::int64_t bins, const float* fresh, const std::vector<float>& updates,
                  float* counts, float* edges, double& cur_min, double& cur_max) {
  for (std::int64_t k = 0; k < bins; ++k) counts[k] = fresh[k] + updates[static_cast<std::size_t>(k)];
  create_edges(merge_working_dtype(batch_dtype), umin, umax, bins, edges);
  cur_min = umin;
  cur_max = umax;
}

// Adds the counts of `from` into `into`, both started over the same fixed range (start_with_range):
// float32 sums, exact while every count stays below 2^24, so any order of merging gives the same
// bits.
void add_fixed_range_counts(HistogramState& into, const HistogramState& from) {
  if (!into.fixed_range || !from.fixed_range)
    fail(ErrorKind::kValue,
         "merge: a histogram started with start_with_range merges only with another started over the same range "
         "(the other one grows its range as AIMET's does)");
  auto same_bits = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](auto u, auto v) {
             return std::signbit(u) == std::signbit(v) && (u == v || (std::isnan(u) && std::isnan(v)));
           });
  };
  if (into.dtype != from.dtype || !same_bits(into.min, from.min) || !same_bits(into.max, from.max) || !same_bits(into.edges, from.edges))
    fail(ErrorKind::kValue, "merge: the analyzers were started over different ranges (start_with_range with the same dtype, min and max)");
  for (std::size_t i = 0; i < into.counts.size(); ++i) into.counts[i] = into.counts[i] + from.counts[i];
}

}  // namespace

void HistogramEncodingAnalyzer::start_with_range(DType dtype, std::span<const double> min, std::span<const double> max) {
  if (!is_analyzer_dtype(dtype))
    fail(ErrorKind::kValue, std::string("start_with_range: dtype ") + dtype_name(dtype) + " is not supported (float16, bfloat16, float32, float64)");
  const auto h = static_cast<std::size_t>(shape_.shape.numel());
  auto check_size = [&](const char* what, std::size_t got) {
    if (got != h)
      fail(ErrorKind::kValue, std::string("start_with_range: ") + what + " has " + std::to_string(got) + " values, expected " +
                                  std::to_string(h) + " (one per element of the analyzer's shape)");
  };
  check_size("min", min.size());
  check_size("max", max.size());
  auto describe = [](const char* what, std::size_t k, double v) {
    std::ostringstream os;
    os.precision(17);
    os << "start_with_range: " << what << "[" << k << "] = " << v;
    return os.str();
  };
  for (std::size_t k = 0; k < h; ++k) {
    for (auto [what, v] : {std::pair<const char*, double>{"min", min[k]}, std::pair<const char*, double>{"max", max[k]}}) {
      if (!std::isfinite(v)) fail(ErrorKind::kValue, describe(what, k, v) + " is not finite");
      if (torch_round_to(dtype, v) != v) fail(ErrorKind::kValue, describe(what, k, v) + " is not a " + dtype_name(dtype) + " value");
    }
    if (!(min[k] <= max[k])) fail(ErrorKind::kValue, describe("min", k, min[k]) + " is above max[" + std::to_string(k) + "]");
  }
  // The first batch's state (batch_stats_impl) for data spanning exactly [min, max], without counts.
  const std::int64_t bins = options_.num_bins;
  HistogramState s;
  s.dtype = dtype;
  s.num_bins = bins;
  s.counts.assign(h * static_cast<std::size_t>(bins), 0.0f);
  s.edges.assign(h * static_cast<std::size_t>(bins + 1), 0.0f);
  s.min.assign(min.begin(), min.end());
  s.max.assign(max.begin(), max.end());
  s.limit_lo.resize(h);
  s.limit_hi.resize(h);
  const float g = static_cast<float>(options_.growth_limit);
  for (std::size_t k = 0; k < h; ++k) {
    float* edges = s.edges.data() + k * static_cast<std::size_t>(bins + 1);
    create_edges(dtype, min[k], max[k], bins, edges);
    detail::HistcBinning(edges[0], edges[bins], bins);  // torch.histc's range checks (a finite width)
    const float range = edges[bins] - edges[0];
    const float half = (range * g) / 2.0f;
    s.limit_lo[k] = edges[0] - half;
    s.limit_hi[k] = edges[bins] + half;
  }
  s.fixed_range = true;
  std::unique_lock lock(mutex_);
  state_ = std::move(s);
}

// update_stats on a fixed range: each element's own slice of x (as AIMET bins a first batch, not
// its later batches' chunks) binned over the fixed edges, the counts added.
void HistogramEncodingAnalyzer::update_fixed_range_locked(const TensorView& x) {
  check_dtype(x.dtype);
  if (x.dtype != state_.dtype)
    fail(ErrorKind::kValue, std::string("x: dtype ") + dtype_name(x.dtype) + " differs from " + dtype_name(state_.dtype) +
                                ", the dtype of the range fixed by start_with_range");
  const ReducedView rv = reduced_view(x.shape, shape_, true);
  check_not_empty(x);
  const std::int64_t bins = options_.num_bins;
  auto check_range = [&](std::int64_t k, const MinMaxPart& r) {
    const auto u = static_cast<std::size_t>(k);
    if (r.mn < state_.min[u] || r.mx > state_.max[u]) {
      std::ostringstream os;
      os.precision(9);
      os << "x: element " << k << "'s values span [" << r.mn << ", " << r.mx << "], outside the range [" << state_.min[u] << ", "
         << state_.max[u] << "] fixed by start_with_range";
      fail(ErrorKind::kValue, os.str());
    }
  };
  auto add_counts = [&](const std::vector<float>& fresh) {
    for (std::size_t i = 0; i < fresh.size(); ++i) state_.counts[i] = state_.counts[i] + fresh[i];
  };
  std::vector<unsigned char> host_copy;
  TensorView source = x;
  if (!x.device.is_cpu()) {
    const DeviceGrouping g = slice_grouping(rv);
    if (const std::optional<std::vector<MinMaxPart>> ranges = device_finite_min_max(x, g)) {
      DeviceBinning binning;
      for (std::int64_t k = 0; k < g.groups && binning.possible; ++k) {
        check_range(k, (*ranges)[static_cast<std::size_t>(k)]);
        const float* edges = state_.edges.data() + k * (bins + 1);
        add_binning(binning, x.dtype, bins, edges[0], edges[bins]);
      }
      if (binning.possible) {
        add_counts(device_counts(x, g, bins, binning));
        return;
      }
    }
    source = polyquant::detail::host_readable(x, host_copy);
  }
  const Data data = read_data(source);
  const ElementSlices slices = element_slices(rv, data.n, slices_contiguous(rv));
  const std::int64_t h = slices.index.L.num_groups;
  std::vector<float> fresh(static_cast<std::size_t>(h * bins), 0.0f);
  const bool across = histograms_in_parallel(h, data.n);
  for_each_histogram(h, across, [&](std::int64_t k) {
    const Slice sl = slices.of(data, k);
    check_range(k, finite_min_max(sl, data.dtype, !across));
    const float* edges = state_.edges.data() + k * (bins + 1);
    bin_slice(sl, bins, edges[0], edges[bins], edges[0], edges[bins], !across, fresh.data() + k * bins);
  });
  add_counts(fresh);
}

void HistogramEncodingAnalyzer::update_stats(const TensorView& x) {
  // Held for the whole update: later batches are binned into the running ranges. The core's
  // thread pool never takes an analyzer's lock, so the parallel loops below cannot deadlock on it.
  std::unique_lock lock(mutex_);
  if (state_.fixed_range) {
    update_fixed_range_locked(x);
    return;
  }
  if (state_.empty()) {
    state_ = batch_stats(x);
    return;
  }
  // The batch's ranges (validated as AIMET's binning validates them; its histograms are unused).
  const HistogramState batch = batch_stats_impl(x, false);
  const std::int64_t h = static_cast<std::int64_t>(state_.min.size()), bins = options_.num_bins;
  const std::int64_t n = x.numel(), chunk = n / h;  // AIMET: reshape(x, (num_histograms, -1))
  // Histogram k's new range and its old counts moved into it.
  auto grow = [&](std::int64_t k, std::pair<double, double>& range, std::vector<float>& updates) {
    const auto u = static_cast<std::size_t>(k);
    const float* edges = state_.edges.data() + k * (bins + 1);
    range = merged_range(batch.min[u], batch.max[u], edges, bins, state_.limit_lo[u], state_.limit_hi[u]);
    updates = moved_counts(x.dtype, range.first, range.second, bins, state_.counts.data() + k * bins, edges, state_.min[u], state_.max[u]);
  };
  auto finish = [&](std::int64_t k, const std::pair<double, double>& range, const float* fresh, const std::vector<float>& updates) {
    const auto u = static_cast<std::size_t>(k);
    finish_merge(x.dtype, range.first, range.second, bins, fresh, updates, state_.counts.data() + k * bins,
                 state_.edges.data() + k * (bins + 1), state_.min[u], state_.max[u]);
  };
  std::vector<unsigned char> host_copy;
  TensorView source = x;
  if (!x.device.is_cpu()) {
    // Every histogram's range and moved counts first, in order (the host's errors, in its order:
    // each histogram's re-binning, then its binning's range checks), then one count on the device.
    // Where histogram k fails, the ones before it are merged and the error raised, as the host's
    // loop leaves them (and AIMET's).
    std::vector<std::pair<double, double>> ranges(static_cast<std::size_t>(h));
    std::vector<std::vector<float>> updates(static_cast<std::size_t>(h));
    DeviceBinning binning;
    std::exception_ptr failure;
    std::int64_t ready = 0;
    for (; ready < h && binning.possible; ++ready) {
      const auto u = static_cast<std::size_t>(ready);
      try {
        grow(ready, ranges[u], updates[u]);
        add_binning(binning, x.dtype, bins, ranges[u].first, ranges[u].second);
      } catch (...) {
        failure = std::current_exception();
        break;
      }
    }
    if (binning.possible) {
      if (ready > 0) {
        // (a failed histogram's and the later ones' counts are not needed: binned as the first one)
        binning.groups.resize(static_cast<std::size_t>(h), binning.groups.front());
        const std::vector<float> fresh = device_counts(x, chunk_grouping(h, n), bins, binning);
        for (std::int64_t k = 0; k < ready; ++k)
          finish(k, ranges[static_cast<std::size_t>(k)], fresh.data() + k * bins, updates[static_cast<std::size_t>(k)]);
      }
      if (failure) std::rethrow_exception(failure);
      state_.dtype = merge_working_dtype(x.dtype);
      return;
    }
    source = polyquant::detail::host_readable(x, host_copy);
  }
  const Data data = read_data(source);
  const bool across = histograms_in_parallel(h, data.n);
  for_each_histogram(h, across, [&](std::int64_t k) {
    std::pair<double, double> range;
    std::vector<float> updates;
    grow(k, range, updates);
    Slice sl;
    sl.data = &data;
    sl.first = k * chunk;
    sl.n = chunk;
    std::vector<float> fresh(static_cast<std::size_t>(bins), 0.0f);
    bin_slice(sl, bins, range.first, range.second, range.first, range.second, !across, fresh.data());
    finish(k, range, fresh.data(), updates);
  });
  state_.dtype = merge_working_dtype(x.dtype);
}

void HistogramEncodingAnalyzer::reset_stats() {
  std::unique_lock lock(mutex_);
  state_ = {};
}

bool HistogramEncodingAnalyzer::has_stats() const {
  std::shared_lock lock(mutex_);
  return !state_.empty();
}

HistogramState HistogramEncodingAnalyzer::state() const {
  std::shared_lock lock(mutex_);
  return state_;
}

EncodingRange HistogramEncodingAnalyzer::compute_encodings(double num_steps, bool is_symmetric) const {
  std::shared_lock lock(mutex_);
  return compute_from_stats(state_, num_steps, is_symmetric);
}

void HistogramEncodingAnalyzer::merge_locked(const HistogramState& other) {
  if (other.empty()) return;
  if (state_.empty()) {
    state_ = other;
    return;
  }
  if (state_.fixed_range || other.fixed_range) {
    add_fixed_range_counts(state_, other);
    return;
  }
  const std::int64_t h = static_cast<std::int64_t>(state_.min.size()), bins = options_.num_bins;
  for (std::int64_t k = 0; k < h; ++k) {
    const auto u = static_cast<std::size_t>(k);
    float* counts = state_.counts.data() + k * bins;
    float* edges = state_.edges.data() + k * (bins + 1);
    const auto [umin, umax] = merged_range(other.min[u], other.max[u], edges, bins, state_.limit_lo[u], state_.limit_hi[u]);
    const std::vector<float> updates = moved_counts(other.dtype, umin, umax, bins, counts, edges, state_.min[u], state_.max[u]);
    const std::vector<float> fresh =
        other_counts_moved(other.dtype, umin, umax, bins, other.counts.data() + k * bins, other.edges.data() + k * (bins + 1));
    finish_merge(other.dtype, umin, umax, bins, fresh.data(), updates, counts, edges, state_.min[u], state_.max[u]);
  }
  state_.dtype = merge_working_dtype(other.dtype);
}

void HistogramEncodingAnalyzer::merge(const HistogramEncodingAnalyzer& other) {
  if (!(other.shape_.shape == shape_.shape) || other.options_.num_bins != options_.num_bins)
    fail(ErrorKind::kValue, "merge: the analyzers' shapes or bin counts differ");
  // a.merge(a): the statistics fed twice (same edges: the counts double)
  merge_under_locks(mutex_, other.mutex_, other.state_, &other == this,
                            [this](const HistogramState& s) { merge_locked(s); });
}

void HistogramEncodingAnalyzer::set_state(HistogramState s) {
  if (!s.empty()) {
    if (!is_analyzer_dtype(s.dtype))
      fail(ErrorKind::kValue, std::string("state: dtype ") + dtype_name(s.dtype) + " is not supported (float16, bfloat16, float32, float64)");
    const auto h = static_cast<std::size_t>(shape_.shape.numel());
    const auto b = static_cast<std::size_t>(options_.num_bins);
    auto expect = [](const char* what, std::size_t got, std::size_t want) {
      if (got != want)
        fail(ErrorKind::kValue, std::string("state: ") + what + " has " + std::to_string(got) + " values, expected " + std::to_string(want) +
                                    " (the analyzer's shape and num_bins)");
    };
    if (s.num_bins != options_.num_bins)
      fail(ErrorKind::kValue, "state: num_bins is " + std::to_string(s.num_bins) + ", the analyzer's is " + std::to_string(options_.num_bins));
    expect("min", s.min.size(), h);
    expect("max", s.max.size(), h);
    expect("histogram", s.counts.size(), h * b);
    expect("bin_edges", s.edges.size(), h * (b + 1));
    expect("range_limit (low)", s.limit_lo.size(), h);
    expect("range_limit (high)", s.limit_hi.size(), h);
  } else if (!s.max.empty() || !s.counts.empty() || !s.edges.empty() || !s.limit_lo.empty() || !s.limit_hi.empty() || s.fixed_range) {
    fail(ErrorKind::kValue, "state: min is empty but other statistics are not (an empty state has none, and no fixed range)");
  }
  std::unique_lock lock(mutex_);
  state_ = std::move(s);
}

EncodingRange HistogramEncodingAnalyzer::compute_from(const HistogramState& s, double num_steps, bool is_symmetric) const {
  return compute_from_stats(s, num_steps, is_symmetric);
}

EncodingRange HistogramEncodingAnalyzer::compute_dynamic_encodings(const TensorView& x, double num_steps, bool is_symmetric) const {
  return compute_from_stats(batch_stats(x), num_steps, is_symmetric);
}
}  // namespace polyquant::aimet
