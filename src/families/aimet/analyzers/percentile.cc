// AIMET's PercentileEncodingAnalyzer, bit-exact (aimet_analyzers.h; notation: common.h): the edges
// where the cumulative histogram reaches p% and 100 - p%, adjusted as AIMET's adjust_min_max.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "families/aimet/analyzers/common.h"
#include "families/aimet/analyzers/torch_cpu.h"
#include "polyquant/aimet_analyzers.h"

namespace polyquant::aimet {

using namespace analyzers_detail;  // the analyzers' shared internals: common.h, torch_cpu.h

PercentileEncodingAnalyzer::PercentileEncodingAnalyzer(AnalyzerShape shape, std::int64_t num_bins, double percentile)
    : HistogramEncodingAnalyzer(std::move(shape), HistogramOptions{num_bins, std::numeric_limits<double>::infinity()}) {
  set_percentile(percentile);
}

void PercentileEncodingAnalyzer::set_percentile(double percentile) {
  if (!(percentile >= 50 && percentile <= 100)) fail(ErrorKind::kValue, "Percentile value must be within 50-100 range");
  percentile_ = percentile;
}

namespace {
// adjust_min_max on float32 scalars (0-d tensors: torch's scalar loops, so ties keep the first
// operand): include 0, clamp finite, widen narrow ranges, symmetric grid.
void adjust_min_max(double cmin, double cmax, double n, bool symmetric, double& out_min, double& out_max) {
  const double ms = minimum_scale(n);
  cmin = (std::isnan(cmin)) ? cmin : (0.0 < cmin ? 0.0 : cmin);
  cmax = (std::isnan(cmax)) ? cmax : (cmax < 0.0 ? 0.0 : cmax);
  cmin = torch_clamp(cmin, -FLT_MAX, 0.0);
  cmax = torch_clamp(cmax, 0.0, FLT_MAX);
  const double thr = f32(f32(cmax - cmin) / f32(n));
  if (thr < f32(ms)) {
    if (symmetric) {
      cmin = f32(cmin - f32(ms * std::ceil(n / 2)));
      cmax = f32(cmax + f32(ms * std::floor(n / 2)));
    } else {
      cmax = f32(cmax + f32(ms * n));
    }
  }
  if (symmetric) {
    const double pos = std::floor(n / 2), neg = std::ceil(n / 2);
    const double a = f32(cmax / f32(pos)), b = f32(-cmin / f32(neg));
    const double delta = b > a ? b : a;  // Python's max(a, b)
    cmin = f32(f32(-neg) * delta);
    cmax = f32(f32(pos) * delta);
  }
  out_min = cmin;
  out_max = cmax;
}
}  // namespace

EncodingRange PercentileEncodingAnalyzer::compute_from_stats(const HistogramState& s, double num_steps, bool is_symmetric) const {
  check_num_steps(num_steps);
  if (s.empty()) throw StatisticsNotFoundError();
  const std::int64_t h = static_cast<std::int64_t>(s.min.size()), bins = s.num_bins;
  EncodingRange r = make_range(s.dtype, shape().shape, h);
  std::vector<float> cum(static_cast<std::size_t>(bins));
  const double p = percentile_;
  for (std::int64_t k = 0; k < h; ++k) {
    const float* c = s.counts.data() + k * bins;
    const float* e = s.edges.data() + k * (bins + 1);
    double run = 0;  // torch's cumsum accumulates in double, rounding each output to float32
    for (std::int64_t i = 0; i < bins; ++i) {
      run += c[i];
      cum[static_cast<std::size_t>(i)] = static_cast<float>(run);
    }
    std::int64_t min_index = 0, max_index = bins;
    if (p != 100) {
      const float total = cum[static_cast<std::size_t>(bins - 1)];
      const float t_max = (total * static_cast<float>(p)) / 100.0f;
      const float t_min = total * static_cast<float>(1 - p / 100);
      auto left = [&](float t) { return std::lower_bound(cum.begin(), cum.end(), t) - cum.begin(); };
      max_index = left(t_max);
      min_index = left(t_min);
    }
    double mn, mx;
    adjust_min_max(e[min_index], e[max_index], num_steps, is_symmetric, mn, mx);
    r.min[static_cast<std::size_t>(k)] = torch_round_to(s.dtype, mn);
    r.max[static_cast<std::size_t>(k)] = torch_round_to(s.dtype, mx);
  }
  return r;
}

}  // namespace polyquant::aimet
