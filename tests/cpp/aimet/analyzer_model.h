// An independent scalar model of AIMET's encoding analyzers for the C++ tests (test_analyzers.cc),
// written from the semantics in polyquant/aimet_analyzers.h and AIMET's encoding_analyzer.py, not
// from the library's internals (nothing here includes src/): which encoding element each value of x
// feeds, MinMax's per-element min / max, the histograms' finite ranges, bin edges and counts, and
// the encodings of MinMax and Percentile in float32. It is deliberately plain (one loop per
// definition, double arithmetic wherever AIMET's result does not depend on the precision) so that
// a disagreement points at the library.
#pragma once

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "polyquant/aimet_analyzers.h"
#include "polyquant/tensor.h"

namespace polyquant::test::aimet_model {

// ---- 16-bit floats (own conversions, round to nearest even) ---------------------------------------
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e - 15 + 127) << 23) | (m << 13));
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half, round(|f| * 2^24)
    const float q = std::bit_cast<float>(ax) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(q)));
  }
  std::uint32_t h = ((((ax >> 23) - 127 + 15) << 10) | ((ax & 0x7fffffu) >> 13));
  const std::uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

inline float bfloat16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

inline std::uint16_t float_to_bfloat16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// v rounded to dtype t (float16 / bfloat16 through float32, as torch rounds a float32 result).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat64: return v;
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat16: return half_to_float(float_to_half(static_cast<float>(v)));
    case DType::kBFloat16: return bfloat16_to_float(float_to_bfloat16(static_cast<float>(v)));
    default: return v;
  }
}

// ---- a batch: x's values in C order and a view of them in the dtype -------------------------------
struct Batch {
  DType dtype = DType::kFloat32;
  Dims shape;
  std::vector<double> values;  // C order of `shape`, each exact in `dtype`
  bool transposed = false;     // rank 2 only: stored as the transpose, viewed through strides
  std::vector<float> f;
  std::vector<double> d;
  std::vector<std::uint16_t> h;

  TensorView view() const {
    const void* p = dtype == DType::kFloat32 ? static_cast<const void*>(f.data())
                    : dtype == DType::kFloat64 ? static_cast<const void*>(d.data())
                                               : static_cast<const void*>(h.data());
    if (transposed) return TensorView(p, dtype, shape, Dims{1, shape[0]});
    return TensorView(p, dtype, shape);
  }
};

// values are rounded to dtype; `transposed` (rank 2) stores them column-major.
inline Batch make_batch(DType dtype, const Dims& shape, std::vector<double> values, bool transposed = false) {
  Batch b;
  b.dtype = dtype;
  b.shape = shape;
  b.transposed = transposed && shape.rank == 2;
  for (double& v : values) v = round_to(dtype, v);
  b.values = std::move(values);
  const std::size_t n = b.values.size();
  auto at = [&](std::size_t i) {  // the storage slot of C-order element i
    if (!b.transposed) return i;
    const auto rows = static_cast<std::size_t>(shape[0]), cols = static_cast<std::size_t>(shape[1]);
    return (i % cols) * rows + i / cols;
  };
  if (dtype == DType::kFloat32) b.f.resize(n);
  else if (dtype == DType::kFloat64) b.d.resize(n);
  else b.h.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = b.values[i];
    if (dtype == DType::kFloat32) b.f[at(i)] = static_cast<float>(v);
    else if (dtype == DType::kFloat64) b.d[at(i)] = v;
    else if (dtype == DType::kFloat16) b.h[at(i)] = float_to_half(static_cast<float>(v));
    else b.h[at(i)] = float_to_bfloat16(static_cast<float>(v));
  }
  return b;
}

// ---- geometry: the encoding element of each value ------------------------------------------------
inline std::int64_t numel(const Dims& d) {
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d[i];
  return n;
}

// element[i] = the encoding element (C order over `a.shape`) that x's i-th value (C order) feeds.
// Without a block size `shape` broadcasts against x's trailing dimensions; with one, x is viewed as
// (-1, n0, B0, n1, B1, ...), leading omitted block entries being 1 where n > 1, else the whole
// dimension, and -1 entries x's size / n.
inline std::vector<std::int64_t> element_of(const Dims& x, const aimet::AnalyzerShape& a) {
  const Dims& s = a.shape;
  const std::int64_t n = numel(x);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  if (!a.block_size) {
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t rest = i, e = 0, stride = 1;
      for (int d = x.rank - 1, k = s.rank - 1; d >= 0; --d, --k) {
        const std::int64_t j = rest % x[d];
        rest /= x[d];
        if (k >= 0) {
          if (s[k] > 1) e += j * stride;
          stride *= s[k];
        }
      }
      out[static_cast<std::size_t>(i)] = e;
    }
    return out;
  }
  const auto& given = *a.block_size;
  const int lead = s.rank - static_cast<int>(given.size());
  std::vector<std::int64_t> block(static_cast<std::size_t>(s.rank));
  for (int d = 0; d < s.rank; ++d) {
    const std::int64_t b = d < lead ? (s[d] > 1 ? 1 : -1) : given[static_cast<std::size_t>(d - lead)];
    block[static_cast<std::size_t>(d)] = b == -1 ? x[x.rank - s.rank + d] / s[d] : b;
  }
  std::int64_t per = 1;
  for (int d = 0; d < s.rank; ++d) per *= s[d] * block[static_cast<std::size_t>(d)];
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i % per, e = 0, stride = 1;
    for (int d = s.rank - 1; d >= 0; --d) {
      rest /= block[static_cast<std::size_t>(d)];  // the position inside the block
      e += (rest % s[d]) * stride;
      rest /= s[d];
      stride *= s[d];
    }
    out[static_cast<std::size_t>(i)] = e;
  }
  return out;
}

// ---- MinMax statistics ----------------------------------------------------------------------------
// Per element: min and max (NaN when the element saw a NaN), and whether it saw +0 / -0 (a zero
// extreme's sign is only determined when the element's zeros all have one sign).
struct MinMaxStats {
  std::vector<double> min, max;
  std::vector<bool> pos_zero, neg_zero;
};

inline MinMaxStats minmax_stats(const Batch& b, const aimet::AnalyzerShape& a) {
  const auto elements = static_cast<std::size_t>(numel(a.shape));
  MinMaxStats m;
  m.min.assign(elements, INFINITY);
  m.max.assign(elements, -INFINITY);
  m.pos_zero.assign(elements, false);
  m.neg_zero.assign(elements, false);
  std::vector<bool> nan(elements, false);
  const auto el = element_of(b.shape, a);
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    const auto e = static_cast<std::size_t>(el[i]);
    const double v = b.values[i];
    if (std::isnan(v)) nan[e] = true;
    else {
      m.min[e] = std::min(m.min[e], v);
      m.max[e] = std::max(m.max[e], v);
      if (v == 0) (std::signbit(v) ? m.neg_zero : m.pos_zero)[e] = true;
    }
  }
  for (std::size_t e = 0; e < elements; ++e)
    if (nan[e]) m.min[e] = m.max[e] = NAN;
  return m;
}

// ---- histograms -----------------------------------------------------------------------------------
struct Histograms {
  std::int64_t bins = 0;
  std::vector<double> min, max;  // finite range of each element's values
  std::vector<float> edges;      // elements x (bins + 1)
  std::vector<float> counts;     // elements x bins
};

// The edges over [lo, hi] (lo == hi widened to [lo - 0.5, hi + 0.5] in dtype t):
// step = f32((hi - lo) / bins), edge_i = f32(f32(i * step) + lo), all in float32.
inline void make_edges(DType t, double lo, double hi, std::int64_t bins, float* edges) {
  if (lo == hi) {
    lo = round_to(t, t == DType::kFloat64 ? lo - 0.5 : static_cast<double>(static_cast<float>(lo) - 0.5f));
    hi = round_to(t, t == DType::kFloat64 ? hi + 0.5 : static_cast<double>(static_cast<float>(hi) + 0.5f));
  }
  const auto l = static_cast<float>(lo), h = static_cast<float>(hi);
  const float step = (h - l) / static_cast<float>(bins);
  for (std::int64_t i = 0; i <= bins; ++i) {
    const float is = static_cast<float>(i) * step;
    edges[i] = is + l;
  }
}

// How AIMET counts v (a value of dtype t) into the histogram with edges e[0..bins]: torch.histc of
// the float32 value over [e0, eB] (bin floor((v - e0) / (eB - e0) * bins), the last bin closed;
// -1: outside), and, independently, v below e0 / above eB (compared in t, the edges rounded to t)
// into the end bins: a float64 value just below a float32 edge is counted by both, as in AIMET.
// `ambiguous`: v lies so close to an inner bin boundary that float32 rounding could move it.
inline std::int64_t histc_bin(double v, const float* e, std::int64_t bins, bool* ambiguous = nullptr) {
  if (ambiguous) *ambiguous = false;
  const double e0 = e[0], eb = e[bins];
  const auto f = static_cast<double>(static_cast<float>(v));
  if (!(f >= e0 && f <= eb)) return -1;  // (NaN and infinities too)
  const double q = (f - e0) / (eb - e0) * static_cast<double>(bins);
  const double frac = q - std::floor(q);
  if (ambiguous && q > 1e-9 && q < static_cast<double>(bins) - 0.5 && (frac < 0.02 || frac > 0.98)) *ambiguous = true;
  return std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(q)), bins - 1);
}

inline void count_value(DType t, double v, const float* e, std::int64_t bins, float* counts) {
  const std::int64_t k = histc_bin(v, e, bins);
  if (k >= 0) counts[k] += 1.0f;
  if (v < round_to(t, e[0])) counts[0] += 1.0f;
  if (v > round_to(t, e[bins])) counts[bins - 1] += 1.0f;
}

// The histograms of a first batch: per element its finite [min, max], edges and counts.
inline Histograms first_batch(const Batch& b, const aimet::AnalyzerShape& a, std::int64_t bins) {
  const auto elements = static_cast<std::size_t>(numel(a.shape));
  Histograms hs;
  hs.bins = bins;
  hs.min.assign(elements, INFINITY);
  hs.max.assign(elements, -INFINITY);
  const auto el = element_of(b.shape, a);
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    const double v = b.values[i];
    if (!std::isfinite(v)) continue;
    const auto e = static_cast<std::size_t>(el[i]);
    hs.min[e] = std::min(hs.min[e], v);
    hs.max[e] = std::max(hs.max[e], v);
  }
  const auto ub = static_cast<std::size_t>(bins);
  hs.edges.resize(elements * (ub + 1));
  hs.counts.assign(elements * ub, 0.0f);
  for (std::size_t e = 0; e < elements; ++e) make_edges(b.dtype, hs.min[e], hs.max[e], bins, hs.edges.data() + e * (ub + 1));
  for (std::size_t i = 0; i < b.values.size(); ++i) {
    const auto e = static_cast<std::size_t>(el[i]);
    count_value(b.dtype, b.values[i], hs.edges.data() + e * (ub + 1), bins, hs.counts.data() + e * ub);
  }
  return hs;
}

// A later batch whose every value lies inside each element's current range (so no range grows):
// its counts add. As AIMET's update_stats, histogram k bins the k-th contiguous chunk of x in C
// order (the element's own values only when they are contiguous; aimet_analyzers.h's quirk).
inline void add_inside(Histograms& hs, const Batch& b) {
  const std::size_t h = hs.min.size(), chunk = b.values.size() / h, ub = static_cast<std::size_t>(hs.bins);
  for (std::size_t i = 0; i < chunk * h; ++i) {
    const std::size_t e = i / chunk;
    count_value(b.dtype, b.values[i], hs.edges.data() + e * (ub + 1), hs.bins, hs.counts.data() + e * ub);
  }
}

// ---- encodings (float32 statistics) ---------------------------------------------------------------
inline float min_scale(double n) { return static_cast<float>(std::min(static_cast<double>(FLT_EPSILON), 0.01 / n)); }

// MinMax's compute_encodings for float32 statistics, every step in float32: include 0; a range
// narrower than N * min_scale grows (asymmetric: max += N ms; symmetric: max += floor(N/2) ms,
// min -= ceil(N/2) ms); symmetric: delta = max(max / floor(N/2) (N == 3: / 2), -min / ceil(N/2)),
// min = -ceil(N/2) delta, max = floor(N/2) delta; then clamped to float32's finite range.
// MinMax adds the growth as a tensor, adj = ms * (range < ms): +0 when the range is wide enough,
// which turns a -0 max into +0. Percentile (`percentile` = true) grows only narrow ranges (a Python
// `if`) and has no N == 3 rule.
inline void minmax_encoding(float mn, float mx, double n, bool symmetric, float& out_min, float& out_max, bool percentile = false) {
  const float ms = min_scale(n);
  float lo = std::isnan(mn) ? mn : std::min(mn, 0.0f);
  float hi = std::isnan(mx) ? mx : std::max(mx, 0.0f);
  const auto pos = static_cast<float>(std::floor(n / 2)), neg = static_cast<float>(std::ceil(n / 2));
  const bool narrow = (hi - lo) / static_cast<float>(n) < ms;
  const float adj = narrow ? ms : 0.0f;
  if (symmetric) {
    if (narrow || !percentile) {
      hi = hi + pos * adj;
      lo = lo - neg * adj;
    }
    const float a = hi / (pos + (!percentile && n == 3 ? 1.0f : 0.0f)), b = -lo / neg;
    const float delta = (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b);
    lo = -neg * delta;
    hi = pos * delta;
  } else if (narrow || !percentile) {
    hi = hi + static_cast<float>(n) * adj;
  }
  out_min = std::isnan(lo) ? lo : std::max(lo, -FLT_MAX);
  out_max = std::isnan(hi) ? hi : std::min(hi, FLT_MAX);
}

// Percentile's compute_encodings for one float32 histogram: the left edge of the first bin whose
// cumulative count reaches total * p / 100 (and total * (1 - p / 100)); p == 100: the outer edges.
inline void percentile_encoding(const float* counts, const float* edges, std::int64_t bins, double p, double n, bool symmetric,
                                float& out_min, float& out_max) {
  std::int64_t lo = 0, hi = bins;
  if (p != 100) {
    std::vector<double> cum(static_cast<std::size_t>(bins));
    double run = 0;
    for (std::int64_t i = 0; i < bins; ++i) cum[static_cast<std::size_t>(i)] = run += counts[i];
    const double total = run;
    const auto first_reaching = [&](double t) {
      return std::lower_bound(cum.begin(), cum.end(), t) - cum.begin();
    };
    hi = first_reaching(static_cast<float>(static_cast<float>(total) * static_cast<float>(p) / 100.0f));
    lo = first_reaching(static_cast<float>(static_cast<float>(total) * static_cast<float>(1 - p / 100)));
  }
  minmax_encoding(edges[lo], edges[hi], n, symmetric, out_min, out_max, true);
}

}  // namespace polyquant::test::aimet_model
