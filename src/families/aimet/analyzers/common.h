// What the AIMET encoding analyzers share: dtype rounding, x's view as an analyzer reduces it, x's
// data in C order, the encoding range, and the locking of merge.
//
// Every arithmetic step of the analyzers is rounded to the dtype torch computes it in. The notation
// in their comments: T is the statistics' dtype; a Python number meeting a tensor is rounded to the
// tensor's dtype (float32 for float16/bfloat16 tensors, whose ops compute in float32 and round the
// result back); `rT(v)` rounds to T, `f32(v)` to float32.
//
// The analyzers themselves, one file each: minmax.cc, histogram.cc (the base of Percentile and
// SQNR), percentile.cc, sqnr.cc; torch's CPU loop order they reproduce: torch_cpu.h.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/minifloat.h"
#include "polyquant/aimet_analyzers.h"

namespace polyquant::aimet::analyzers_detail {

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

// ---- dtypes -------------------------------------------------------------------------------------
inline bool is_analyzer_dtype(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}
// TypeError unless t is float16, bfloat16, float32 or float64.
void check_dtype(DType t);

// v (a float32 or exact value) rounded to dtype t as torch's `.to(t)` of a float32 tensor: through
// float32 (torch computes 16-bit floats in float32). Not numpy's astype of a float64
// (core/numpy_semantics.h's round_to rounds once, straight to t), hence its own name.
inline double torch_round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat64: return v;
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat16: return static_cast<float>(detail::Half(static_cast<float>(v)));
    case DType::kBFloat16: return detail::bfloat16_bits_to_float(detail::float_to_bfloat16_bits(static_cast<float>(v)));
    default: return v;
  }
}
inline double f32(double v) { return static_cast<float>(v); }
// One binary op of torch in dtype t: float32 arithmetic rounded to t for 16-bit floats.
inline double op_in(DType t, double exact_or_f32) {
  return t == DType::kFloat64 ? exact_or_f32 : torch_round_to(t, f32(exact_or_f32));
}
inline double finfo_max(DType t) {
  switch (t) {
    case DType::kFloat64: return DBL_MAX;
    case DType::kFloat32: return FLT_MAX;
    case DType::kFloat16: return 65504.0;
    case DType::kBFloat16: return 3.3895313892515355e38;
    default: return DBL_MAX;
  }
}
// torch's type promotion between two floating dtypes of dimensioned tensors.
inline DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kFloat64 || b == DType::kFloat64) return DType::kFloat64;
  return DType::kFloat32;  // f16 with bf16, or either with f32
}

// AIMET's minimum scale: min(float32 eps, 0.01 / num_steps), in Python (double) arithmetic.
inline double minimum_scale(double num_steps) { return std::min(static_cast<double>(FLT_EPSILON), (0.005 - -0.005) / num_steps); }

// ---- geometry -----------------------------------------------------------------------------------
// x's view as the analyzer reduces it: `view` (x's shape, or (-1, n0, B0, n1, B1, ...) with a
// block size) and which of its dimensions are kept (select the encoding element).
struct ReducedView {
  Dims view;
  std::vector<bool> keep;
  std::int64_t num_elements = 1;
};

// `histogram` picks the error message of the histogram analyzers for a shape that does not
// broadcast (AIMET's two kinds word it differently).
ReducedView reduced_view(const Dims& x_shape, const AnalyzerShape& a, bool histogram);

// ---- input data ---------------------------------------------------------------------------------
// x in C order as float32 (exact for float16 / bfloat16 / float32) or float64.
struct Data {
  DType dtype = DType::kFloat32;
  const float* f = nullptr;
  const double* d = nullptr;
  std::vector<float> f_own;
  std::vector<double> d_own;
  std::int64_t n = 0;
  double at(std::int64_t i) const { return f ? static_cast<double>(f[i]) : d[i]; }
};

// AIMET refuses a batch without values (its reductions over an empty tensor raise).
void check_not_empty(const TensorView& x);

// x's values in C order (a view of x when it is contiguous float32 / float64, else a copy).
Data read_data(const TensorView& x);

// ---- encodings and merging ----------------------------------------------------------------------
// An EncodingRange of n elements (min and max sized, values unset).
EncodingRange make_range(DType dtype, const Dims& shape, std::int64_t n);

// ValueError unless num_steps > 0 (AIMET's message).
void check_num_steps(double num_steps);

// a.merge(b) for either analyzer kind: b's statistics are read under its shared lock while a's are
// written under its exclusive one, both taken at once (std::lock: deadlock-free against a concurrent
// b.merge(a)); a.merge(a) folds a copy taken under a's lock. `fold(state)` is the kind's
// merge_locked.
template <class State, class Fold>
void merge_under_locks(std::shared_mutex& mine, std::shared_mutex& theirs, const State& their_state, bool self,
                       Fold fold) {
  if (self) {
    std::unique_lock lock(mine);
    const State copy = their_state;
    fold(copy);
    return;
  }
  std::unique_lock write(mine, std::defer_lock);
  std::shared_lock read(theirs, std::defer_lock);
  std::lock(write, read);
  fold(their_state);
}

}  // namespace polyquant::aimet::analyzers_detail
