// The parameter arithmetic of AIMET's quantizer modules (aimet-torch 2.42.0): scale and offset from
// the learnable min / max, the recalibrated range, a calibration batch's dynamic encoding, and the
// LPBQ scales. Every step is one float32 operation in the order torch runs it (see
// aimet_quantizer.h), so the results match AIMET bit for bit; the arrays are small (one value per
// channel or block), so these are plain loops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "polyquant/aimet_quantizer.h"
#include "polyquant/error.h"

namespace polyquant::aimet {
namespace {

void require_same_size(std::size_t a, std::size_t b, const char* what) {
  if (a != b) throw Error(ErrorKind::kValue, std::string(what) + ": the arrays must have the same length");
}

// torch.round: half to even (the default floating-point rounding mode).
template <class T>
T round_half_even(T v) {
  return std::nearbyint(v);
}

// torch.clamp with scalar bounds: std::min(std::max(v, lo), hi); NaN passes, -0.0 stays.
template <class T>
T clamp(T v, T lo, T hi) {
  return std::min(std::max(v, lo), hi);
}

float num_steps_f(Grid grid) { return static_cast<float>(grid.qmax - grid.qmin); }

// The arithmetic below forms qmax - qmin, qmin + qmax, -qmin and -qmax in int64: a grid must keep
// each of them in range (at most 2^63 - 1 steps, qmin above INT64_MIN), else it is refused.
void check_grid(Grid grid, const char* what) {
  std::int64_t steps = 0, sum = 0;
  if (grid.qmin > grid.qmax || grid.qmin == std::numeric_limits<std::int64_t>::min() ||
      __builtin_sub_overflow(grid.qmax, grid.qmin, &steps) || __builtin_add_overflow(grid.qmin, grid.qmax, &sum)) {
    throw Error(ErrorKind::kValue, std::string(what) + ": the grid [" + std::to_string(grid.qmin) + ", " +
                                       std::to_string(grid.qmax) +
                                       "] is not supported; qmin <= qmax, qmin > INT64_MIN and at most 2^63 - 1 steps");
  }
}

}  // namespace

double minimum_scale(std::int64_t num_steps) {
  // The largest s <= float32 eps with s * N <= 0.01 (aimet_common.quantsim._get_minimum_scale).
  const double eps = static_cast<double>(std::numeric_limits<float>::epsilon());
  return std::min(eps, 0.01 / static_cast<double>(num_steps));
}

float symmetric_offset(Grid grid) {
  check_grid(grid, "symmetric_offset");
  // -round((qmin + qmax) / 2) with Python's round (half to even) of a true division.
  const double centre = std::nearbyint(static_cast<double>(grid.qmin + grid.qmax) / 2.0);
  return static_cast<float>(-static_cast<std::int64_t>(centre));
}

void quantizer_scale(std::span<const float> min, std::span<const float> max, Grid grid, std::span<float> scale) {
  check_grid(grid, "quantizer_scale");
  require_same_size(min.size(), max.size(), "quantizer_scale");
  require_same_size(min.size(), scale.size(), "quantizer_scale");
  const float n = num_steps_f(grid);
  const float floor = static_cast<float>(minimum_scale(grid.qmax - grid.qmin));
  for (std::size_t i = 0; i < min.size(); ++i) {
    const float s = std::fabs((max[i] - min[i]) / n);
    scale[i] = std::isnan(s) ? s : std::max(s, floor);  // clamp_min lets NaN through
  }
}

void quantizer_offset(std::span<const float> min, std::span<const float> scale, Grid grid, bool symmetric,
                      std::span<float> offset) {
  check_grid(grid, "quantizer_offset");
  require_same_size(min.size(), scale.size(), "quantizer_offset");
  require_same_size(min.size(), offset.size(), "quantizer_offset");
  if (symmetric) {
    std::fill(offset.begin(), offset.end(), symmetric_offset(grid));
    return;
  }
  const float qmin = static_cast<float>(grid.qmin);
  const float lo = static_cast<float>(-grid.qmax), hi = static_cast<float>(-grid.qmin);
  for (std::size_t i = 0; i < min.size(); ++i) {
    offset[i] = clamp(round_half_even(min[i] / scale[i]) - qmin, lo, hi);
  }
}

void quantizer_range(std::span<const float> scale, std::span<const float> offset, Grid grid, std::span<float> min,
                     std::span<float> max) {
  check_grid(grid, "quantizer_range");
  require_same_size(scale.size(), offset.size(), "quantizer_range");
  require_same_size(scale.size(), min.size(), "quantizer_range");
  require_same_size(scale.size(), max.size(), "quantizer_range");
  const float qmin = static_cast<float>(grid.qmin), qmax = static_cast<float>(grid.qmax);
  for (std::size_t i = 0; i < scale.size(); ++i) {
    // get_scale() * (get_offset() + qmin + zero_point_shift), zero_point_shift = 0.0
    min[i] = scale[i] * ((offset[i] + qmin) + 0.0f);
    max[i] = scale[i] * ((offset[i] + qmax) + 0.0f);
  }
}

void scale_offset_from_range(std::span<const float> min, std::span<const float> max, Grid grid, bool symmetric,
                             std::span<float> scale, std::span<float> offset) {
  check_grid(grid, "scale_offset_from_range");
  require_same_size(min.size(), max.size(), "scale_offset_from_range");
  require_same_size(min.size(), scale.size(), "scale_offset_from_range");
  require_same_size(min.size(), offset.size(), "scale_offset_from_range");
  const float n = num_steps_f(grid), qmin = static_cast<float>(grid.qmin);
  const float sym = symmetric_offset(grid);
  for (std::size_t i = 0; i < min.size(); ++i) {
    scale[i] = (max[i] - min[i]) / n;
    offset[i] = symmetric ? sym : round_half_even(min[i] / scale[i]) - qmin;
  }
}

void range_for_scale_offset(std::span<const float> scale, std::span<const float> offset, Grid grid, bool symmetric,
                            std::span<float> min, std::span<float> max) {
  check_grid(grid, "range_for_scale_offset");
  require_same_size(scale.size(), offset.size(), "range_for_scale_offset");
  require_same_size(scale.size(), min.size(), "range_for_scale_offset");
  require_same_size(scale.size(), max.size(), "range_for_scale_offset");
  quantizer_range(scale, offset, grid, min, max);
  const float n = num_steps_f(grid), qmin = static_cast<float>(grid.qmin);
  const float floor = static_cast<float>(minimum_scale(grid.qmax - grid.qmin));
  const float lo = static_cast<float>(-grid.qmax), hi = static_cast<float>(-grid.qmin);
  const auto reproduces = [&](float mn, float mx, float s, float o) {
    float got = std::fabs((mx - mn) / n);
    if (!std::isnan(got)) got = std::max(got, floor);
    if (got != s) return false;
    return symmetric || clamp(round_half_even(mn / got) - qmin, lo, hi) == o;
  };
  constexpr int kMaxUlps = 64;
  for (std::size_t i = 0; i < scale.size(); ++i) {
    const float s = scale[i], o = offset[i];
    if (!std::isfinite(s) || !std::isfinite(o) || reproduces(min[i], max[i], s, o)) continue;
    bool found = false;
    for (int moving_max = 1; moving_max >= 0 && !found; --moving_max) {
      float up = moving_max ? max[i] : min[i], down = up;
      for (int step = 0; step < kMaxUlps && !found; ++step) {
        up = std::nextafter(up, std::numeric_limits<float>::infinity());
        down = std::nextafter(down, -std::numeric_limits<float>::infinity());
        for (const float c : {up, down}) {
          const float mn = moving_max ? min[i] : c, mx = moving_max ? c : max[i];
          if (reproduces(mn, mx, s, o)) {
            min[i] = mn, max[i] = mx, found = true;
            break;
          }
        }
      }
    }
  }
}

std::vector<std::int64_t> lpbq_channel_shape(std::span<const std::int64_t> shape,
                                             std::span<const std::int64_t> grouping) {
  if (shape.size() != grouping.size()) {
    throw Error(ErrorKind::kRuntime, "block_grouping: its length must equal the length of shape");
  }
  std::vector<std::int64_t> out(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t g = grouping[i];
    if (g == -1) {
      out[i] = 1;
    } else if (g <= 0 || shape[i] % g != 0) {
      throw Error(ErrorKind::kRuntime, "block_grouping: each group size must divide the quantizer shape evenly");
    } else {
      out[i] = shape[i] / g;
    }
  }
  return out;
}

namespace {

// The per-element part of LPBQ in the working type W (AIMET's working-precision rule).
template <class W>
void lpbq_grid(std::span<const float> raw, const std::vector<std::int64_t>& shape,
               const std::vector<std::int64_t>& group, const std::vector<std::int64_t>& pc_shape,
               std::span<const float> pc, std::int64_t levels, std::span<float> scale, std::span<float> ints) {
  const std::size_t rank = shape.size();
  const W hi = static_cast<W>(levels), lo = W(1), zero = W(0);
  std::vector<std::int64_t> idx(rank, 0);
  for (std::size_t e = 0; e < raw.size(); ++e) {
    std::int64_t c = 0;
    for (std::size_t d = 0; d < rank; ++d) c = c * pc_shape[d] + idx[d] / group[d];
    const W s = static_cast<W>(pc[static_cast<std::size_t>(c)]);
    // quantize_dequantize(raw, s, 0, 1, 2^k): (clamp(round(x / s) - 0, 1, 2^k) + 0) * s
    const W q = clamp(round_half_even(static_cast<W>(raw[e]) / s) - zero, lo, hi);
    const float y = static_cast<float>((q + zero) * s);
    scale[e] = y;
    // quantize(scale, s, 0, 1, 2^k): clamp(round(y / s) - 0, 1, 2^k)
    ints[e] = static_cast<float>(clamp(round_half_even(static_cast<W>(y) / s) - zero, lo, hi));
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void lpbq_scales(std::span<const float> raw_scale, std::span<const std::int64_t> shape,
                 std::span<const std::int64_t> grouping, std::int64_t bitwidth, std::int64_t decompressed_bw,
                 std::span<float> per_channel_scale, std::span<float> scale, std::span<float> per_block_int_scale) {
  const std::vector<std::int64_t> pc_shape = lpbq_channel_shape(shape, grouping);
  std::int64_t n = 1, n_pc = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) n *= shape[d], n_pc *= pc_shape[d];
  require_same_size(raw_scale.size(), static_cast<std::size_t>(n), "lpbq_scales (raw_scale)");
  require_same_size(scale.size(), static_cast<std::size_t>(n), "lpbq_scales (scale)");
  require_same_size(per_block_int_scale.size(), static_cast<std::size_t>(n), "lpbq_scales (per_block_int_scale)");
  require_same_size(per_channel_scale.size(), static_cast<std::size_t>(n_pc), "lpbq_scales (per_channel_scale)");
  if (bitwidth < 1 || bitwidth > 63 || decompressed_bw < 1 || decompressed_bw > 63) {
    throw Error(ErrorKind::kValue, "lpbq_scales: bitwidth and decompressed_bw must be in [1, 63]");
  }
  const std::int64_t k = decompressed_bw - bitwidth;
  if (k < 0 || k > 62) {
    throw Error(ErrorKind::kRuntime, "decompressed_bw: must be at least bitwidth (and at most bitwidth + 62)");
  }
  std::vector<std::int64_t> group(shape.size()), shp(shape.begin(), shape.end());
  // the group size along d (an empty dimension has no groups: any nonzero size, no division by 0)
  for (std::size_t d = 0; d < shape.size(); ++d) group[d] = pc_shape[d] == 0 ? 1 : shape[d] / pc_shape[d];

  // per-channel scale: torch.amax over each group (NaN wins), then / 2^k
  std::vector<float> gmax(static_cast<std::size_t>(n_pc), -std::numeric_limits<float>::infinity());
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t c = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) c = c * pc_shape[d] + idx[d] / group[d];
    float& m = gmax[static_cast<std::size_t>(c)];
    const float v = raw_scale[static_cast<std::size_t>(e)];
    if (std::isnan(v) || v > m) m = std::isnan(m) ? m : v;
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  const float divisor = static_cast<float>(std::ldexp(1.0, static_cast<int>(k)));
  for (std::size_t c = 0; c < gmax.size(); ++c) per_channel_scale[c] = gmax[c] / divisor;

  // AIMET's working precision for the grid [1, 2^k]: float32 unless eps > 0.25 / (2^k - 1)
  const std::int64_t levels = std::int64_t{1} << k;
  const double steps = static_cast<double>(levels - 1);
  const bool f32 = steps == 0 || static_cast<double>(std::numeric_limits<float>::epsilon()) <= 0.25 / steps;
  if (f32) {
    lpbq_grid<float>(raw_scale, shp, group, pc_shape, per_channel_scale, levels, scale, per_block_int_scale);
  } else {
    lpbq_grid<double>(raw_scale, shp, group, pc_shape, per_channel_scale, levels, scale, per_block_int_scale);
  }
}

}  // namespace polyquant::aimet
