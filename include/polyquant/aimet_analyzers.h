// AIMET's encoding analyzers (aimet_torch.quantization.encoding_analyzer, aimet-torch 2.42.0 with
// torch 2.15 on the CPU), bit-exact: the statistics they gather over calibration batches and the
// encoding ranges (min, max) they compute from them.
//
// Shapes. An analyzer has an encoding `shape`; update_stats(x) reduces x to one statistic per
// encoding element: without a block size `shape` broadcasts against x's trailing dimensions
// (right-aligned, each entry 1 or x's size) and every dimension where it is 1 is reduced; with a
// block size (one entry per dimension of `shape`, -1 = x's size / shape's size, leading entries
// may be omitted) x is viewed in C order as (-1, n0, B0, n1, B1, ...) and each block (B0, B1, ...)
// feeds one element (AIMET's `reshape`: only the element count must divide).
//
// Numerics (each in AIMET's dtype, step by step in src/families/aimet/analyzers/<analyzer>.cc):
//   MinMax:     min/max per element in x's dtype (NaN propagates); compute: 0 included, ranges
//               narrower than N * min_scale widened (min_scale = min(float32 eps, 0.01 / N)),
//               symmetric: delta = max(max / floor(N/2), -min / ceil(N/2)) (N == 3: max / 2),
//               min = -ceil(N/2) delta, max = floor(N/2) delta; clamped to the dtype's finite range.
//   Histograms: one per element, num_bins bins over its finite [min, max] (torch.histc in float32,
//               values below / above the edges counted into the end bins); a later batch that
//               leaves the range re-bins the counts into the grown range (AIMET's proportional
//               split, rounded half-to-even), clamped to histogram_growth_limit times the first
//               batch's range.
//   Percentile: the left edge of the bin where the cumulative count reaches p% (and 100 - p%),
//               then MinMax's adjustments (without the N == 3 rule).
//   SQNR:       grid search over (delta, offset) candidates minimising the histogram-estimated
//               squared error sum_b count_b * ((clamp(round(m_b / delta - o), 0, N) + o) delta -
//               m_b)^2 (times gamma where clipped), summed in torch's float32 vector order.
//
// Threads: every analyzer may be shared between threads. Each holds a reader-writer lock: the
// methods that change the statistics (update_stats, reset_stats, merge into it, set_state) take it
// exclusively, those that read them (compute_encodings, state, has_stats, being merged from)
// shared, so concurrent calls give the result of some serial order of the same calls. a.merge(b)
// locks both without deadlock (b.merge(a) may run at the same time); a.merge(a) folds a copy of a's
// statistics into a. compute_dynamic_encodings reads no statistics and takes no lock.
//
// AIMET quirk kept: after the first batch, AIMET bins each new batch's data for histogram k from
// the k-th contiguous chunk of x in C order (its `reshape(x, (num_histograms, -1))`), which is the
// element's own slice only when each element's data is contiguous (e.g. per output channel of a
// (C, ...) weight). The ranges always come from the right slices.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <shared_mutex>
#include <span>
#include <vector>

#include "polyquant/error.h"
#include "polyquant/export.h"
#include "polyquant/tensor.h"

namespace polyquant::aimet {

// compute_encodings() without statistics (Python: StatisticsNotFoundError, a RuntimeError).
class POLYQUANT_API StatisticsNotFoundError : public Error {
 public:
  StatisticsNotFoundError() : Error(ErrorKind::kRuntime, "No statistics present to compute encodings.") {}
};

// An encoding range: `shape` is the analyzer's, values in C order, each exactly representable in
// `dtype` (the dtype AIMET returns).
struct EncodingRange {
  DType dtype = DType::kFloat32;
  Dims shape;
  std::vector<double> min, max;
};

// The encoding geometry shared by every analyzer.
struct AnalyzerShape {
  Dims shape;
  std::optional<std::vector<std::int64_t>> block_size;
};

// ---- MinMax -------------------------------------------------------------------------------------
class POLYQUANT_API MinMaxEncodingAnalyzer {
 public:
  // Statistics: per-element min and max in `dtype` (x's dtype); empty vectors when none.
  struct State {
    DType dtype = DType::kFloat32;
    std::vector<double> min, max;
  };

  explicit MinMaxEncodingAnalyzer(AnalyzerShape shape);
  const AnalyzerShape& shape() const { return shape_; }

  // x: float16, bfloat16, float32 or float64, any strides. Batches of another dtype than the
  // statistics' promote them as torch.minimum does.
  // An empty x (no values) is a ValueError, as AIMET's reductions refuse it.
  void update_stats(const TensorView& x);
  void reset_stats();
  bool has_stats() const;
  // num_steps > 0 (ValueError), then StatisticsNotFoundError without statistics.
  EncodingRange compute_encodings(double num_steps, bool is_symmetric) const;
  EncodingRange compute_dynamic_encodings(const TensorView& x, double num_steps, bool is_symmetric) const;
  // Exactly the statistics of one analyzer fed both analyzers' batches (min/max are associative).
  void merge(const MinMaxEncodingAnalyzer& other);
  State state() const;          // a copy, taken under the lock
  void set_state(State state);  // validates dtype and sizes against shape()

  // The statistics of one batch (what update_stats folds in).
  State batch_stats(const TensorView& x) const;

 private:
  void merge_locked(const State& other);
  AnalyzerShape shape_;
  State state_;
  mutable std::shared_mutex mutex_;
};

// ---- histograms (Percentile, SQNR, TfEnhanced) ---------------------------------------------------
struct HistogramOptions {
  std::int64_t num_bins = 2048;
  double growth_limit = std::numeric_limits<double>::infinity();  // AIMET's histogram_growth_limit
};

// The histogram statistics: per element `num_bins` counts (float32, as AIMET holds them), edges
// (num_bins + 1, float32), the range [min, max] in `dtype` (x's dtype after one batch, float32 /
// float64 after a later batch, as AIMET's), and the growth limits fixed by the first batch.
struct HistogramState {
  DType dtype = DType::kFloat32;
  std::int64_t num_bins = 0;
  std::vector<float> counts;  // elements x num_bins
  std::vector<float> edges;   // elements x (num_bins + 1)
  std::vector<double> min, max;
  std::vector<float> limit_lo, limit_hi;
  // Set by start_with_range: the edges never move. Later batches are binned over them (each must
  // lie within [min, max]) and merges add counts; see start_with_range for the guarantee.
  bool fixed_range = false;
  bool empty() const { return min.empty(); }
};

class POLYQUANT_API HistogramEncodingAnalyzer {
 public:
  HistogramEncodingAnalyzer(AnalyzerShape shape, HistogramOptions options);
  virtual ~HistogramEncodingAnalyzer() = default;
  const AnalyzerShape& shape() const { return shape_; }
  const HistogramOptions& options() const { return options_; }

  // An empty x (no values) is a ValueError (AIMET's histogram observer refuses a batch without a
  // finite value).
  void update_stats(const TensorView& x);
  void reset_stats();
  bool has_stats() const;
  // Percentile: num_steps > 0 (ValueError), then StatisticsNotFoundError; SQNR the other order
  // (AIMET's).
  EncodingRange compute_encodings(double num_steps, bool is_symmetric) const;
  EncodingRange compute_dynamic_encodings(const TensorView& x, double num_steps, bool is_symmetric) const;

  // Folds another analyzer's histograms in as AIMET folds a batch. Guarantee: when both have the
  // same edges (every part of the split data reaches each histogram's min and max), the counts add
  // exactly and the result is bit for bit one analyzer fed all the batches, provided each
  // histogram's slice is a contiguous chunk of x (per-tensor, per leading channel; where it is not,
  // AIMET's own later batches are binned from the wrong chunk, the quirk above, and merge gives the
  // correct counts instead). Otherwise both are re-binned into the grown range by AIMET's
  // proportional split: every count is kept and the range covers both, but the histogram depends on
  // the order of merging (as AIMET's depends on the order of batches). Needs the same shape and bin
  // count. Analyzers started with start_with_range merge by adding counts (see there).
  void merge(const HistogramEncodingAnalyzer& other);
  HistogramState state() const;  // a copy, taken under the lock
  // Validates the dtype, num_bins and every size against shape() and num_bins (ValueError).
  void set_state(HistogramState state);

  // Starts the statistics with empty histograms over fixed per-element ranges [min[k], max[k]]
  // (values of `dtype`, the data's dtype): the edges, growth limits, min and max AIMET's analyzer
  // gives a first batch whose finite values span exactly that range, with zero counts.
  // Afterwards (state().fixed_range):
  //   - update_stats(x) bins each element's own slice of x over the fixed edges as AIMET bins a
  //     first batch (torch.histc of the float32 values, values beyond the edges into the end bins)
  //     and adds the counts; x must have `dtype`, and its finite values must lie within the range
  //     (ValueError otherwise: the range no longer grows);
  //   - merge adds the counts of another analyzer started over the same range (ValueError for a
  //     different range, or for an analyzer whose range grows).
  // Guarantee (the two-pass calibration): with [min, max] the finite min and max of all the data,
  // any split of the data into batches and analyzers, merged in any order, holds bit for bit the
  // statistics (and so the encodings) of AIMET's analyzer fed all the data as one batch, provided
  // no bin's count reaches 2^24: counts are float32 (AIMET's), exact integers below 2^24, so their
  // sums do not depend on the order; at 2^24 and beyond a sum may round. One caveat: a zero min or
  // max is the range given here, where torch's single batch picks +0.0 or -0.0 by position (edges,
  // counts and limits are the same either way).
  // ValueError naming the parameter: dtype not float16 / bfloat16 / float32 / float64, a size other
  // than shape().numel(), a non-finite bound, min > max, or a bound that is not a `dtype` value.
  void start_with_range(DType dtype, std::span<const double> min, std::span<const double> max);

  // The histograms of one batch alone (what compute_dynamic_encodings uses).
  HistogramState batch_stats(const TensorView& x) const;

 protected:
  EncodingRange compute_from(const HistogramState& s, double num_steps, bool is_symmetric) const;
  HistogramState batch_stats_impl(const TensorView& x, bool with_counts) const;
  virtual EncodingRange compute_from_stats(const HistogramState& s, double num_steps, bool is_symmetric) const = 0;

 private:
  void merge_locked(const HistogramState& other);
  void update_fixed_range_locked(const TensorView& x);
  AnalyzerShape shape_;
  HistogramOptions options_;
  HistogramState state_;
  mutable std::shared_mutex mutex_;
};

class POLYQUANT_API PercentileEncodingAnalyzer : public HistogramEncodingAnalyzer {
 public:
  // num_bins > 0, percentile in [50, 100] (ValueError otherwise).
  PercentileEncodingAnalyzer(AnalyzerShape shape, std::int64_t num_bins = 2048, double percentile = 100);
  void set_percentile(double percentile);
  double percentile() const { return percentile_.load(); }

 protected:
  EncodingRange compute_from_stats(const HistogramState& s, double num_steps, bool is_symmetric) const override;

 private:
  std::atomic<double> percentile_{100};
};

// Validated by SqnrEncodingAnalyzer's constructor (ValueError naming the option): the delta
// candidates k / (count - 1), k = 1..count, need count in [2, 2^24]; offset_candidates is 1 (only
// the observed offset, as AIMET's empty offset grid gives) or in [3, 2^24] (AIMET divides by
// offset_candidates - 2, and its offset grid runs backwards below 1).
struct SqnrOptions {
  std::int64_t num_bins = 2048;
  std::int64_t asymmetric_delta_candidates = 17;
  std::int64_t symmetric_delta_candidates = 101;
  std::int64_t offset_candidates = 21;
  std::int64_t max_parallelism = 64;  // AIMET's chunking of histograms (decides torch's ties of +0 / -0)
  double gamma = 3.0;
  double histogram_growth_limit = std::numeric_limits<double>::infinity();
  // float32 lanes of torch's vectorised sum: 8, the AVX2 kernel, which torch 2.15 also runs on
  // AVX-512 machines (its sum is not dispatched to AVX-512; measured). 16 follows an AVX-512 sum.
  int torch_sum_lanes = 8;
};

class POLYQUANT_API SqnrEncodingAnalyzer : public HistogramEncodingAnalyzer {
 public:
  SqnrEncodingAnalyzer(AnalyzerShape shape, SqnrOptions options = {});
  const SqnrOptions& sqnr_options() const { return sqnr_; }

 protected:
  EncodingRange compute_from_stats(const HistogramState& s, double num_steps, bool is_symmetric) const override;

 private:
  SqnrOptions sqnr_;
};

// TfEnhanced = SQNR with 512 bins, 17 / 101 delta candidates, 21 offsets, gamma 3 and growth limit 3.
POLYQUANT_API SqnrOptions tf_enhanced_options(int torch_sum_lanes = 8);

}  // namespace polyquant::aimet
