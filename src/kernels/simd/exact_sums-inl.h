// One vector of float32 terms into per-element float64 accumulators by the exact sums' per_element
// rule (kernels/reduce/kernels.h, ExactSumsParams): lane l joins acc[first + l] where that add is
// exact; a refused lane spills its accumulator (index first + l, lanes in order) and restarts it at
// the term. In the `Vec` vocabulary.
//
// Shared by the exact-sums kernel (kernels/reduce) and the kernels that sum their own terms as they
// write them (families/aimet's gradient, ColumnSums), so both leave the same accumulators and the
// same spill list; guarded per kernel set like row_loop-inl.h, and included after it.
#ifndef POLYQUANT_EXACT_SUMS_SIMD_INCLUDED
#define POLYQUANT_EXACT_SUMS_SIMD_INCLUDED

// The refused lanes of t (bit l of `refused`), in lane order: spilled and restarted. Out of line:
// rare (a term that would round the float64 accumulator, or a NaN / infinite one).
[[gnu::noinline]] inline void exact_sums_spill_lanes(double* acc, std::int64_t first, Vec::F t, unsigned refused,
                                                     const ExactSumsParams& p) {
  alignas(64) float terms[Vec::kLanes];
  Vec::storeu(terms, t);
  for (int l = 0; l < Vec::kLanes; ++l) {
    if (((refused >> l) & 1u) == 0) continue;
    exact_sums_spill(p, acc[first + l], first + l);
    acc[first + l] = static_cast<double>(terms[l]);
  }
}

POLYQUANT_ALWAYS_INLINE inline void exact_sums_add_v(double* acc, std::int64_t first, Vec::F t, const ExactSumsParams& p) {
  const unsigned refused = Vec::add_exact_f64(acc + first, t);
  if (refused != 0) [[unlikely]] exact_sums_spill_lanes(acc, first, t, refused, p);
}

#endif  // POLYQUANT_EXACT_SUMS_SIMD_INCLUDED
