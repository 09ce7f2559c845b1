// Fixed-bin histograms and reductions with torch's CPU float32 semantics (torch 2.15): the pieces
// AIMET's histogram analyzers are made of, reusable by any family that calibrates from histograms.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace polyquant::detail {

// torch.histc(x, bins, min=lo, max=hi) on float32 data, counts added into `counts` (int64):
//   - the range: [lo, hi] as doubles; lo == hi takes x's own extremes (NaN and inf included),
//     then still equal: [lo - 1, hi + 1]; a non-finite end throws Error(kRuntime, "torch.histc:
//     range of [lo, hi] is not finite"), lo >= hi throws "max must be larger than min";
//   - left / right are the ends rounded to float32 (torch's linspace keeps both ends);
//   - element v counts when left <= v <= right (NaN never), into bin
//       int64( ((v - left) * bins) / (right - left) )   (each step rounded to float32)
//     with `bins` itself moved to bins - 1 (the last bin includes its right edge).
void torch_histc_f32(std::span<const float> x, std::int64_t bins, double lo, double hi, std::int64_t* counts);

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
