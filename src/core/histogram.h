// Fixed-bin histograms and reductions with torch's CPU float32 semantics (torch 2.15): the pieces
// AIMET's histogram analyzers are made of, reusable by any family that calibrates from histograms.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/target.h"

namespace polyquant::detail {

// torch.histc's per-value steps over a range fixed beforehand, for at most 2^24 bins (so bins - 1
// is exact in float32 and trunc(min(q, bins - 1)) == min(trunc(q), bins - 1)): the bin of float32
// value f, or `outside` where f is not in [left, right] (NaN included). Host and device code: the
// CPU's counting loop and the CUDA histogram kernel both count by it.
struct HistcBins {
  float left, right, nbins, width;
  float last;            // bins - 1
  std::int32_t outside;  // the index returned for a value outside the range
};
POLYQUANT_HD inline std::int32_t histc_bin_of(float f, const HistcBins& b) {
  const float q = ((f - b.left) * b.nbins) / b.width;
  // x86's int64 conversion of NaN, an infinity or |q| >= 2^63 gives INT64_MIN, clamped to bin 0
  const bool valid = (q >= 0.0f) & (q < 9.2233720368547758e18f);
  const float clamped = valid ? (q < b.last ? q : b.last) : 0.0f;
  const bool in = (f >= b.left) & (f <= b.right);
  return in ? static_cast<std::int32_t>(clamped) : b.outside;
}
inline constexpr std::int64_t kHistcMaxCountingBins = std::int64_t{1} << 24;

// torch.histc(x, bins, min=lo, max=hi) on float32 data, counts added into `counts` (int64):
//   - the range: [lo, hi] as doubles; lo == hi takes x's own extremes (NaN and inf included),
//     then still equal: [lo - 1, hi + 1]; a non-finite end throws Error(kRuntime, "torch.histc:
//     range of [lo, hi] is not finite"), lo >= hi throws "max must be larger than min";
//   - left / right are the ends rounded to float32 (torch's linspace keeps both ends);
//   - element v counts when left <= v <= right (NaN never), into bin
//       int64( ((v - left) * bins) / (right - left) )   (each step rounded to float32)
//     with `bins` itself moved to bins - 1 (the last bin includes its right edge).
void torch_histc_f32(std::span<const float> x, std::int64_t bins, double lo, double hi, std::int64_t* counts);

// torch.histc's binning over a range that needs no data (lo != hi): the checks and errors above,
// then per value the float32 steps of torch_histc_f32. Counts are integers, so any split of the
// data into parts whose counts are added gives exactly the counts of one pass.
struct HistcBinning {
  HistcBinning(double lo, double hi, std::int64_t bins);  // lo != hi
  float left, right, nbins, width;
  std::int64_t bins;
  // The quotient ((v - left) * bins) / width, each step rounded to float32.
  float scaled(float v) const { return ((v - left) * nbins) / width; }
  // The bin of a quotient: int64 truncation as x86 converts (NaN, infinities and |q| >= 2^63 give
  // INT64_MIN), then clamped to [0, bins - 1].
  std::int64_t bin(float q) const {
    if (!(q >= 0.0f && q < 9.2233720368547758e18f)) return 0;
    const auto pos = static_cast<std::int64_t>(q);
    return pos < bins ? pos : bins - 1;
  }
  bool contains(float v) const { return v >= left && v <= right; }
  // histc_bin_of's parameters (bins <= kHistcMaxCountingBins); `outside` is bins.
  HistcBins counting() const {
    return {left, right, nbins, width, static_cast<float>(bins - 1), static_cast<std::int32_t>(bins)};
  }
};

// torch's CPU sum of a contiguous float32 (or float64) row, in its vector order
// (aten/src/ATen/native/cpu/SumKernel.cpp: vectorized_inner_sum / scalar_inner_sum). `lanes` is
// the vector width of torch's CPU capability in elements (16 float32 for AVX-512, 8 for AVX2;
// half that for float64). Vectors of `lanes` consecutive elements are added four at a time into a
// four-level cascade of partial sums; the leftover vectors go into the first partial, the four
// partials are added in order, then the scalar tail, then the lanes in order. Rows shorter than a
// vector use the same cascade with scalars.
float torch_sum_row(const float* v, std::int64_t n, int lanes);
double torch_sum_row(const double* v, std::int64_t n, int lanes);

}  // namespace polyquant::detail
