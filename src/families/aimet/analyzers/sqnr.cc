// AIMET's SqnrEncodingAnalyzer and the TfEnhanced options, bit-exact (aimet_analyzers.h; notation:
// common.h): a grid search over (delta, offset) candidates minimising the histogram-estimated noise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/histogram.h"
#include "core/parallel.h"
#include "families/aimet/analyzers/common.h"
#include "families/aimet/analyzers/torch_cpu.h"
#include "polyquant/aimet_analyzers.h"

namespace polyquant::aimet {

using namespace analyzers_detail;  // the analyzers' shared internals: common.h, torch_cpu.h

SqnrOptions tf_enhanced_options(int torch_sum_lanes) {
  SqnrOptions o;
  o.num_bins = 512;
  o.asymmetric_delta_candidates = 17;
  o.symmetric_delta_candidates = 101;
  o.offset_candidates = 21;
  o.gamma = 3.0;
  o.histogram_growth_limit = 3.0;
  o.torch_sum_lanes = torch_sum_lanes;
  return o;
}

SqnrEncodingAnalyzer::SqnrEncodingAnalyzer(AnalyzerShape shape, SqnrOptions options)
    : HistogramEncodingAnalyzer(std::move(shape), HistogramOptions{options.num_bins, options.histogram_growth_limit}), sqnr_(options) {
  if (sqnr_.torch_sum_lanes != 8 && sqnr_.torch_sum_lanes != 16)
    fail(ErrorKind::kValue, "torch_sum_lanes: must be 8 (AVX2) or 16 (AVX-512), got " + std::to_string(sqnr_.torch_sum_lanes));
  // AIMET chunks with range(0, n, max_parallelism): 0 raises ValueError there (at compute time).
  if (sqnr_.max_parallelism < 1)
    fail(ErrorKind::kValue, "max_parallelism: must be a positive integer, got " + std::to_string(sqnr_.max_parallelism));
  // The delta candidates are max_delta * k / (count - 1), k = 1..count: AIMET divides by zero for
  // 1 (inf / NaN encodings) and has no candidate for 0 or less. The upper bound keeps the
  // candidate tables (histograms x deltas x offsets) addressable.
  constexpr std::int64_t kMaxCandidates = std::int64_t{1} << 24;
  auto check_deltas = [&](const char* name, std::int64_t v) {
    if (v < 2 || v > kMaxCandidates)
      fail(ErrorKind::kValue, std::string(name) + ": must be an integer from 2 to " + std::to_string(kMaxCandidates) + ", got " + std::to_string(v));
  };
  check_deltas("asymmetric_delta_candidates", sqnr_.asymmetric_delta_candidates);
  check_deltas("symmetric_delta_candidates", sqnr_.symmetric_delta_candidates);
  // The offset grid has min(N + 2, count) - 1 values spaced N / (count - 2): 2 divides by zero
  // in AIMET, 0 or less gives a backward range torch.arange refuses; 1 leaves only the observed
  // offset (AIMET's grid is empty then).
  const std::int64_t oc = sqnr_.offset_candidates;
  if (oc != 1 && (oc < 3 || oc > kMaxCandidates))
    fail(ErrorKind::kValue, "offset_candidates: must be 1 or an integer from 3 to " + std::to_string(kMaxCandidates) + ", got " + std::to_string(oc));
}

namespace {

// GCC if-converts (and so vectorises) the comparisons of these loops only without trapping math;
// results are unchanged (only floating-point exception flags could differ, and none are read).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#endif
// The estimated noise of one histogram for one (delta, offset) candidate, in W (float, or double
// for the asymmetric candidates of float64 statistics), each step rounded as torch's:
//   m_b = (e0 + hd / 2) + hd * b   (hd = e1 - e0; the first sum float32, the rest in W)
//   q = clamp(rne(m_b / delta - off), 0, N); err_b = |(q + off) * delta - m_b|^2 * count_b
//   (times gamma where q was clipped), summed in torch's vector order. `err` is bins of scratch.
// Builtins rather than std::fabs / std::copysign: GCC does not inline functions compiled with
// other optimisation options into these loops.
inline float abs_of(float v) { return __builtin_fabsf(v); }
inline double abs_of(double v) { return __builtin_fabs(v); }
inline float sign_from(float r, float v) { return __builtin_copysignf(r, v); }
inline double sign_from(double r, double v) { return __builtin_copysign(r, v); }

template <class W>
W candidate_noise(const float* counts, float base, float hd, std::int64_t bins, W delta, W off, W wn, W wg, bool use_gamma, int w_lanes,
                  W* err) {
  const W big = sizeof(W) == 8 ? W(4503599627370496.0) : W(8388608.0f);
  const W wg1 = use_gamma ? wg : W(1);
  const auto nb = static_cast<std::int32_t>(bins);  // < 2^31 (constructor); int32 -> W converts vectorised
  for (std::int32_t b = 0; b < nb; ++b) {
    const W m = static_cast<W>(base) + static_cast<W>(static_cast<W>(hd) * static_cast<W>(b));
    const W t = m / delta;
    W q = static_cast<W>(t - off);
    const W a = abs_of(q);
    const W r = static_cast<W>(static_cast<W>(a + big) - big);
    q = a < big ? sign_from(r, q) : q;  // rint_even, branch-free
    const bool clipped = (q < 0) | (q > wn);
    q = q < 0 ? W(0) : (wn < q ? wn : q);
    W e = static_cast<W>(q + off);
    e = static_cast<W>(e * delta);
    e = static_cast<W>(e - m);
    e = abs_of(e);
    e = static_cast<W>(e * e);
    e = static_cast<W>(e * static_cast<W>(counts[b]));
    err[b] = static_cast<W>(e * (clipped ? wg1 : W(1)));  // e * 1 == e exactly
  }
  return detail::torch_sum_row(err, bins, w_lanes);
}

template float candidate_noise<float>(const float*, float, float, std::int64_t, float, float, float, float, bool, int, float*);
template double candidate_noise<double>(const float*, float, float, std::int64_t, double, double, double, double, bool, int, double*);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// The noise of every candidate of every histogram (h histograms of nc candidates, deltas / offsets
// flat in `cd` / `co`), computed across threads, then per histogram the index of the first minimum
// (torch.min: NaN wins, then the smallest, the first of equals).
template <class W>
std::vector<std::int64_t> best_candidates(const HistogramState& s, std::int64_t nc, const std::vector<double>& cd,
                                          const std::vector<double>& co, double n, double gamma, int lanes) {
  const std::int64_t h = static_cast<std::int64_t>(s.min.size()), bins = s.num_bins;
  std::vector<W> noise(static_cast<std::size_t>(h * nc));
  const W wn = static_cast<W>(n), wg = static_cast<W>(gamma);
  const bool use_gamma = gamma != 1.0;
  const int w_lanes = sizeof(W) == 8 ? lanes / 2 : lanes;
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(bins, 1));
  detail::parallel_for(h * nc, grain, [&](std::int64_t begin, std::int64_t end) {
    thread_local std::vector<W> err;
    err.resize(static_cast<std::size_t>(bins));
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t k = i / nc;
      const float* edges = s.edges.data() + k * (bins + 1);
      const float hd = edges[1] - edges[0];
      const float base = edges[0] + hd / 2.0f;
      noise[static_cast<std::size_t>(i)] =
          candidate_noise<W>(s.counts.data() + k * bins, base, hd, bins, static_cast<W>(cd[static_cast<std::size_t>(i)]),
                             static_cast<W>(co[static_cast<std::size_t>(i)]), wn, wg, use_gamma, w_lanes, err.data());
    }
  });
  std::vector<std::int64_t> best(static_cast<std::size_t>(h), 0);
  for (std::int64_t k = 0; k < h; ++k) {
    const W* nk = noise.data() + k * nc;
    W best_noise = nk[0];
    for (std::int64_t c = 1; c < nc; ++c) {
      if (!std::isnan(best_noise) && (std::isnan(nk[c]) || nk[c] < best_noise)) {
        best[static_cast<std::size_t>(k)] = c;
        best_noise = nk[c];
      }
    }
  }
  return best;
}

}  // namespace

// _LpNormEncodingAnalyzer.compute_encodings_from_stats with p = 2 (see the header comment): the
// candidates of every histogram first, then all noises across threads, then the picks.
EncodingRange SqnrEncodingAnalyzer::compute_from_stats(const HistogramState& s, double n, bool is_symmetric) const {
  if (s.empty()) throw StatisticsNotFoundError();
  check_num_steps(n);
  const DType t = s.dtype;
  const std::int64_t h = static_cast<std::int64_t>(s.min.size());
  const double ms = minimum_scale(n);
  const int lanes = sqnr_.torch_sum_lanes;
  EncodingRange r = make_range(t, shape().shape, h);
  const DType w = promote(t, DType::kFloat32);
  auto rw = [&](double v) { return torch_round_to(w, v); };
  // Offsets of the asymmetric grid (the same for every histogram but the observed one).
  const double num_offsets = std::min(n + 2, static_cast<double>(sqnr_.offset_candidates));
  std::vector<double> grid_offsets;
  if (!is_symmetric) {
    const double step = n / (num_offsets - 2);
    for (float g : torch_arange_f32(-n, step, step, lanes)) grid_offsets.push_back(round_half_even(g));
  }
  const std::int64_t na = sqnr_.asymmetric_delta_candidates;
  const std::int64_t nd = sqnr_.symmetric_delta_candidates;
  const std::int64_t no = static_cast<std::int64_t>(grid_offsets.size()) + 1;
  const std::int64_t nc = is_symmetric ? nd : na * no;
  std::vector<double> cd(static_cast<std::size_t>(h * nc)), co(static_cast<std::size_t>(h * nc));
  std::vector<double> test_deltas(static_cast<std::size_t>(na)), test_offsets(static_cast<std::size_t>(no));
  // Ties of torch.maximum / minimum (+0 against -0, which decide the sign of a zero min): the
  // per-histogram operations run on rows of one chunk of max_parallelism histograms, the clamp of
  // the candidates on rows of nc candidates per histogram.
  const std::int64_t block_t = torch_binary_block(t, lanes), block_w = torch_binary_block(w, lanes);
  const std::int64_t chunk = sqnr_.max_parallelism;
  for (std::int64_t k = 0; k < h; ++k) {
    const auto u = static_cast<std::size_t>(k);
    double* kd = cd.data() + k * nc;
    double* ko = co.data() + k * nc;
    const bool chunk_vector = torch_vector_loop(k % chunk, std::min(chunk, h - k / chunk * chunk), block_t);
    // min_v = minimum(min, 0), max_v = maximum(max, 0), max_v = maximum(max_v, min_v + ms * N) (T)
    const double min_v = torch_minimum(s.min[u], 0.0, chunk_vector);
    double max_v = torch_maximum(s.max[u], 0.0, chunk_vector);
    max_v = torch_maximum(max_v, op_in(t, min_v + (t == DType::kFloat64 ? ms * n : f32(ms * n))), chunk_vector);
    if (is_symmetric) {
      // delta_max = 2 * f32(maximum(max_v, -min_v)) / N; deltas f32(f32(delta_max * k) / (D - 1)),
      // at least min_scale; one offset floor(-N / 2).
      const double mm = torch_round_to(DType::kFloat32, torch_maximum(max_v, -min_v));
      const float dmax = static_cast<float>(f32(2.0 * mm) / f32(n));
      const float off = static_cast<float>(std::floor(-n / 2));
      for (std::int64_t i = 0; i < nd; ++i) {
        float d = (dmax * static_cast<float>(i + 1)) / static_cast<float>(nd - 1);
        kd[i] = static_cast<float>(torch_maximum(d, f32(ms)));
        ko[i] = off;
      }
      continue;
    }
    // Asymmetric candidates: each (delta, offset) pair clamped into the observed range.
    const double md = f32(f32(op_in(t, max_v - min_v)) / f32(n));
    const double obs_off = round_half_even(rw(min_v / md));
    const double obs_min = rw(md * obs_off);
    const double obs_max = rw(obs_min + f32(md * f32(n)));
    for (std::int64_t i = 0; i < na; ++i) test_deltas[static_cast<std::size_t>(i)] = f32(f32(md * f32(static_cast<double>(i + 1))) / f32(static_cast<double>(na - 1)));
    std::copy(grid_offsets.begin(), grid_offsets.end(), test_offsets.begin());
    test_offsets.back() = obs_off;
    for (std::size_t a = 0; a < test_deltas.size(); ++a) {
      for (std::size_t o = 0; o < test_offsets.size(); ++o) {
        const double delta = test_deltas[a];
        double tmin = rw(delta * test_offsets[o]);
        double tmax = rw(tmin + f32(delta * f32(n)));
        const bool vector_loop = torch_vector_loop(static_cast<std::int64_t>(a * test_offsets.size() + o), nc, block_w);
        tmin = torch_maximum(obs_min, tmin, vector_loop);
        tmax = torch_minimum(obs_max, tmax, vector_loop);
        double d2 = rw(rw(tmax - tmin) / rw(n));
        d2 = torch_maximum(d2, rw(ms));  // torch.tensor([min_scale], dtype=W)
        kd[a * test_offsets.size() + o] = d2;
        ko[a * test_offsets.size() + o] = round_half_even(rw(tmin / d2));
      }
    }
  }
  const std::vector<std::int64_t> best = (!is_symmetric && w == DType::kFloat64)
                                             ? best_candidates<double>(s, nc, cd, co, n, sqnr_.gamma, lanes)
                                             : best_candidates<float>(s, nc, cd, co, n, sqnr_.gamma, lanes);
  for (std::int64_t k = 0; k < h; ++k) {
    const auto u = static_cast<std::size_t>(k);
    const auto c = static_cast<std::size_t>(k * nc + best[u]);
    const double best_delta = cd[c], best_offset = co[c];
    if (is_symmetric) {
      const double mn = f32(best_offset * best_delta);
      r.min[u] = torch_round_to(t, mn);
      r.max[u] = torch_round_to(t, f32(mn + f32(f32(n) * best_delta)));
    } else {
      const double mn = rw(best_offset * best_delta);
      r.min[u] = torch_round_to(t, mn);
      r.max[u] = torch_round_to(t, rw(mn + rw(rw(n) * best_delta)));
    }
  }
  return r;
}

}  // namespace polyquant::aimet
